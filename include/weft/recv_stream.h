/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#ifndef WEFT_RECV_STREAM_H
#define WEFT_RECV_STREAM_H
#include "common.h"
#endif
