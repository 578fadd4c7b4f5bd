/* SPDX-License-Identifier: MIT */
/*
 * Test helpers that look inside a runtime (lib/core.h), for the tests that
 * need to know what a shard is doing rather than what it did.
 */
#ifndef WEFT_TESTS_RT_INTERNAL_H
#define WEFT_TESTS_RT_INTERNAL_H

#include "rt_helpers.h"

#include "core.h"

#include <unistd.h>

/* Waiters in a wait queue right now (under its lock: cancellers on any
 * thread take waiters off it). */
static inline int rt_waitq_len(weft__waitq *q)
{
  int n = 0;
  weft__spin_lock(&q->lock);
  for (weft__waiter *w = q->head; w; w = w->next)
    n++;
  weft__spin_unlock(&q->lock);
  return n;
}

/* Waits until `shard` of rt sleeps in the kernel (the shard's own flag, set
 * before it enters io_uring_enter to wait), and a little longer; false if it
 * never does within about 10 s. */
static inline bool rt_wait_parked(weft_runtime *rt, int shard)
{
  for (int i = 0; i < 20000; i++) {
    if (atomic_load(&rt->shards[shard].parked)) {
      usleep(2000);
      if (atomic_load(&rt->shards[shard].parked))
        return true;
    }
    usleep(500);
  }
  return false;
}

#endif
