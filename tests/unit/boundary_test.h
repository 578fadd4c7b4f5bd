/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "boundary" (test_boundary_calls.c,
 * test_boundary_ends.c): the boundary's counters and gauges, integers in
 * pointers, and one call made on a thread of its own.
 *
 * Stages (queued, waiting for room, served, waiting in recv) are reached by
 * polling the boundary's gauges, so no result depends on timing. Requests
 * and responses are integers in pointers unless ownership is under test.
 */
#ifndef WEFT_TESTS_BOUNDARY_TEST_H
#define WEFT_TESTS_BOUNDARY_TEST_H

#include "rt_helpers.h"

#include "core.h" /* the shard's timer heap, for the timer-allocation failure */
#include "fault.h"

#include <time.h>

static inline struct weft_boundary_stats bstats(weft_boundary *b)
{
  struct weft_boundary_stats s;
  memset(&s, 0xff, sizeof(s));
  cr_assert_eq(weft_boundary_stats_get(b, &s), 0);
  return s;
}

/* The counters of b; `busy` calls are still in progress (not yet counted
 * in an outcome). */
static inline void assert_counts_busy(weft_boundary *b, uint64_t calls, uint64_t completed,
                               uint64_t overloaded, uint64_t timed_out, uint64_t cancelled,
                               uint64_t closed, uint64_t failed, uint64_t busy)
{
  struct weft_boundary_stats s = bstats(b);
  cr_assert_eq(s.calls, calls, "calls %llu", (unsigned long long)s.calls);
  cr_assert_eq(s.completed, completed, "completed %llu", (unsigned long long)s.completed);
  cr_assert_eq(s.overloaded, overloaded, "overloaded %llu", (unsigned long long)s.overloaded);
  cr_assert_eq(s.timed_out, timed_out, "timed_out %llu", (unsigned long long)s.timed_out);
  cr_assert_eq(s.cancelled, cancelled, "cancelled %llu", (unsigned long long)s.cancelled);
  cr_assert_eq(s.closed, closed, "closed %llu", (unsigned long long)s.closed);
  cr_assert_eq(s.failed, failed, "failed %llu", (unsigned long long)s.failed);
  cr_assert_eq(s.calls, s.completed + s.overloaded + s.timed_out + s.cancelled + s.closed +
                            s.failed + busy);
}

#define assert_counts(b, calls, completed, overloaded, timed_out, cancelled, closed, failed)    \
  assert_counts_busy(b, calls, completed, overloaded, timed_out, cancelled, closed, failed, 0)

/* Polls a gauge of b (from a thread or a coroutine). */
#define GAUGE(b, field)                                                                       \
  __extension__({                                                                             \
    struct weft_boundary_stats g_;                                                            \
    weft_boundary_stats_get((b), &g_) == 0 ? g_.field : UINT64_MAX;                           \
  })

#define IP(x) ((void *)(intptr_t)(x))
#define PI(p) ((intptr_t)(p))

/* ---- one call on its own thread ------------------------------------------------------ */

typedef struct caller {
  pthread_t th;
  weft_boundary *b;
  intptr_t req;
  unsigned flags;
  int64_t deadline;
  atomic_bool returned;
  int result;
  void *resp;
} caller;

static inline void *caller_main(void *arg)
{
  caller *c = arg;
  c->resp = IP(-1);
  c->result = weft_boundary_call(c->b, IP(c->req), &c->resp, c->flags, c->deadline);
  atomic_store(&c->returned, true);
  return NULL;
}

static inline void start_caller(caller *c, weft_boundary *b, intptr_t req, int64_t deadline)
{
  memset(c, 0, sizeof(*c));
  c->b = b;
  c->req = req;
  c->deadline = deadline;
  cr_assert_eq(pthread_create(&c->th, NULL, caller_main, c), 0);
}

/* The same call, run as a coroutine. */
static inline void *co_call_once(void *arg)
{
  caller *c = arg;
  caller_main(c);
  return NULL;
}

static inline void join_caller(caller *c)
{
  cr_assert_eq(pthread_join(c->th, NULL), 0);
}

/* Submits fn(arg) to rt pinned to `shard`, from the test's thread. */
static inline weft_task *submit_pinned(weft_runtime *rt, int shard, void *(*fn)(void *), void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = shard;
  weft_task *t = NULL;
  cr_assert_eq(weft_runtime_submit(rt, &o, fn, arg, &t), 0);
  return t;
}

#endif
