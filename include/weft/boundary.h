/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#ifndef WEFT_BOUNDARY_H
#define WEFT_BOUNDARY_H
#include "common.h"
#endif
