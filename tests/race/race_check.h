/* SPDX-License-Identifier: MIT */
/*
 * The check of the race and stress programs: a failed CHECK is reported on
 * stderr and counted (from any thread or coroutine), and the program exits 1
 * at the end if `failures` is not zero - a check does not stop the run, so
 * every violation of one run is seen.
 */
#ifndef WEFT_TESTS_RACE_CHECK_H
#define WEFT_TESTS_RACE_CHECK_H

#include <stdatomic.h>
#include <stdio.h>

static atomic_int failures;

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                \
      atomic_fetch_add(&failures, 1);                                                         \
    }                                                                                         \
  } while (0)

#endif
