/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "time" (test_time_sleep.c,
 * test_time_interval.c, test_time_scopes.c): the includes and the
 * interval period used by the interval tests and the out-of-memory test.
 */
#ifndef WEFT_TESTS_TIME_TEST_H
#define WEFT_TESTS_TIME_TEST_H

#include "io_helpers.h"

#include "fault.h"
#include "timer.h"

/* The period of the intervals under test. */
#define PERIOD (10 * WEFT_MSEC)

#endif
