/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#ifndef WEFT_CHAN_H
#define WEFT_CHAN_H
#include "common.h"
#endif
