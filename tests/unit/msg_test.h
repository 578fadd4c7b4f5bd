/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "msg" (test_msg.c, test_msg_deadlines.c,
 * test_msg_outside.c, test_msg_queue_limit.c, test_msg_refused.c):
 * deadlines a given time from now, spawning on a shard, and a shard's
 * stats read from a coroutine.
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

/* One shard's stats (-1: the sum), read from a coroutine. */
static inline weft_stats shard_stats(int shard)
{
  weft_stats st;
  memset(&st, 0, sizeof(st));
  CO_EQ(weft_stats_get(NULL, shard, &st), 0);
  return st;
}

#endif
