/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suites "runtime" and "runtime_life" (test_runtime.c,
 * test_runtime_join.c, test_runtime_life.c, test_runtime_two.c): tasks whose
 * result says where or with what they ran.
 */
#ifndef WEFT_TESTS_RUNTIME_TEST_H
#define WEFT_TESTS_RUNTIME_TEST_H

#include "rt_helpers.h"

/* Returns the shard it runs on. */
static inline void *ret_shard(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_shard_id();
}

/* Returns its argument. */
static inline void *ret_arg(void *arg)
{
  return arg;
}

/* Returns 3 * arg + 1 (arg an integer in a pointer). */
static inline void *times3(void *arg)
{
  return (void *)((intptr_t)arg * 3 + 1);
}

#endif
