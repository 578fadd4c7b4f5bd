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

/* ---- a call that need not wait, made while its waker is still in its call ----------
 * A waker (a release, the done() that zeroes a wait group, a set, an
 * unlock) publishes under its queue's lock a state that callers see without
 * the lock, and lets go of the lock after. rt_publish_hold() holds the next
 * waker there (weft__test_publish_pause) while another thread makes a call
 * that finds the state and need not wait; the hold ends once that call has
 * returned or waits for the waker to let go (weft__test_settle_pause). */
static atomic_bool rt_publish_armed, rt_publish_held, rt_settle_waits, rt_settle_back;

static void rt_publish_pause(void)
{
  if (!atomic_exchange(&rt_publish_armed, false))
    return;
  atomic_store(&rt_publish_held, true);
  while (!atomic_load(&rt_settle_waits) && !atomic_load(&rt_settle_back))
    usleep(100);
  atomic_store(&rt_publish_held, false);
}

static void rt_settle_pause(void)
{
  atomic_store(&rt_settle_waits, true);
}

/* Holds the next waker, on any thread, as above. */
static inline void rt_publish_hold(void)
{
  atomic_store(&rt_publish_held, false);
  atomic_store(&rt_settle_waits, false);
  atomic_store(&rt_settle_back, false);
  weft__test_settle_pause = rt_settle_pause;
  weft__test_publish_pause = rt_publish_pause;
  atomic_store(&rt_publish_armed, true);
}

/* On the calling thread: waits until the waker is held, makes the call
 * (`call(arg)`, its result in *result) and returns whether the call came
 * back while the waker was still held - still in its call on the object,
 * which the caller may free once its call returned. */
static inline bool rt_call_while_held(int (*call)(void *), void *arg, int *result)
{
  if (!RT_POLL(atomic_load(&rt_publish_held)))
    return true; /* the waker never came: reported as the failure */
  *result = call(arg);
  bool early = atomic_load(&rt_publish_held);
  atomic_store(&rt_settle_back, true);
  return early;
}

/* After the waker's call has returned. */
static inline void rt_publish_unhold(void)
{
  atomic_store(&rt_publish_armed, false);
  weft__test_publish_pause = NULL;
  weft__test_settle_pause = NULL;
}

#endif
