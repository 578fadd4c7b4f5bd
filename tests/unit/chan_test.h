/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "chan" (test_chan_ops.c, test_chan_select.c,
 * test_chan_shards.c): spawning on a shard, waiting for tasks to suspend,
 * one-shot senders and receivers, and the element byte pattern.
 */
#ifndef WEFT_TESTS_CHAN_TEST_H
#define WEFT_TESTS_CHAN_TEST_H

#include "rt_helpers.h"

#include "chan_internal.h"
#include "fault.h"

#include <unistd.h>

static inline weft_task *spawn_on(int shard, void *(*fn)(void *), void *arg)
{
  weft_task *t = NULL;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, shard, fn, arg), 0);
  return t;
}

/* Waits until `n` tasks of the current runtime are suspended. */
static inline void wait_suspended(int n)
{
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == n));
}

/* Whether nobody is queued on c: a wait that ended (timeout, cancel, a
 * select won elsewhere, a stop) took its node off. A node left behind would
 * point into a stack frame that is gone, and try_send/try_recv cannot tell:
 * a peer skips a node whose waiter it cannot claim. */
static inline bool chan_queues_empty(weft_chan *c)
{
  weft__spin_lock(&c->lock);
  bool empty = !c->sendq.head && !c->recvq.head;
  weft__spin_unlock(&c->lock);
  return empty;
}

/* A pattern of n bytes that differs with the seed, and its check. */
static inline void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(seed * 131 + i * 7 + 1);
}

static inline bool check_pattern(const unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed * 131 + i * 7 + 1))
      return false;
  return true;
}

/* One send or receive of a uint64_t on c with a deadline, run as a task:
 * `done` is set once the call returned, the result is the task's value. */
struct one {
  weft_chan *c;
  uint64_t v;
  atomic_int done;
  int64_t deadline;
};

static inline void *send_one(void *arg)
{
  struct one *o = arg;
  int r = weft_chan_send_dl(o->c, &o->v, o->deadline);
  atomic_store(&o->done, 1);
  return (void *)(intptr_t)r;
}

static inline void *recv_one(void *arg)
{
  struct one *o = arg;
  int r = weft_chan_recv_dl(o->c, &o->v, o->deadline);
  atomic_store(&o->done, 1);
  return (void *)(intptr_t)r;
}

#endif
