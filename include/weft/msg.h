/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#ifndef WEFT_MSG_H
#define WEFT_MSG_H
#include "common.h"
#endif
