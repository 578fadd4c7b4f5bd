/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "coro" (test_coro_switch.c,
 * test_coro_stacks.c, test_coro_handover.c, test_coro_depot.c): the
 * default stack size, creating a coroutine that must succeed, and a body
 * that returns its argument.
 */
#ifndef WEFT_TESTS_CORO_TEST_H
#define WEFT_TESTS_CORO_TEST_H

#include "coro.h"
#include "fault.h"
#include "stack.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STACK ((size_t)64 << 10)

static inline weft__coro *make(void *(*fn)(void *), void *arg, size_t stack, const char *name)
{
  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = fn, .arg = arg, .stack_size = stack, .name = name};
  int r = weft__coro_create(&co, &o);
  cr_assert_eq(r, 0, "weft__coro_create: %d", r);
  cr_assert_not_null(co);
  return co;
}

/* A body that returns its argument. */
static inline void *ret_arg_fn(void *arg)
{
  return arg;
}

#endif
