/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "msg" (test_msg.c, test_msg_outside.c):
 * deadlines a given time from now and spawning on a shard.
 */
#ifndef WEFT_TESTS_MSG_TEST_H
#define WEFT_TESTS_MSG_TEST_H

#include "rt_helpers.h"

#include "core.h"
#include "fault.h"

#include <sched.h>

static inline int64_t in_ms(int64_t ms)
{
  return weft_now() + ms * WEFT_MSEC;
}

static inline weft_task *spawn_on(int shard, void *(*fn)(void *), void *arg)
{
  weft_task *t = NULL;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, shard, fn, arg), 0);
  return t;
}

#endif
