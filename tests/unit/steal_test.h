/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "steal" (test_steal_moves.c,
 * test_steal_knobs.c, test_steal_exact.c, test_steal_errno.c,
 * test_steal_policy.c): which thread runs which shard, busy work, running a
 * 2-shard runtime with a config, stats snapshots, and the spreading
 * workload (SPREAD_TASKS stealable tasks queued on shard 0).
 *
 * Which thread is which shard: one pinned task per shard records its
 * kernel thread id first; every later check compares weft_shard_id() with
 * that map. The thread id comes from the gettid system call on purpose:
 * glibc declares pthread_self() __attribute__((const)), so at -O2 the
 * compiler may reuse a value read before a suspension - on another thread.
 */
#ifndef WEFT_TESTS_STEAL_TEST_H
#define WEFT_TESTS_STEAL_TEST_H

#include "rt_helpers.h"

#include "core.h"

#include <limits.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NSHARDS 2

static inline pid_t tid_now(void)
{
  return (pid_t)syscall(SYS_gettid);
}

static pid_t shard_tid[NSHARDS];

static inline void *note_tid(void *arg)
{
  (void)arg;
  int s = weft_shard_id();
  CO_CHECK(s >= 0 && s < NSHARDS);
  if (s >= 0 && s < NSHARDS)
    shard_tid[s] = tid_now();
  return NULL;
}

/* From a coroutine: learns which thread runs which shard. */
static inline void map_threads(void)
{
  weft_task *t[NSHARDS];
  for (int s = 0; s < NSHARDS; s++)
    CO_EQ(rt_spawn(&t[s], WEFT_PLACE_PINNED, s, note_tid, NULL), 0);
  for (int s = 0; s < NSHARDS; s++)
    rt_join_int(t[s]);
  CO_CHECK(shard_tid[0] != 0 && shard_tid[1] != 0 && shard_tid[0] != shard_tid[1]);
}

/* The shard whose thread the caller is on, by thread id; -1 if none. */
static inline int thread_shard(void)
{
  pid_t me = tid_now();
  for (int s = 0; s < NSHARDS; s++)
    if (shard_tid[s] == me)
      return s;
  return -1;
}

/* Busy CPU work without suspending. */
static inline void burn_us(int us)
{
  int64_t end = weft_now() + us * WEFT_USEC;
  while (weft_now() < end)
    ;
}

static inline void steal_cfg(weft_config *c)
{
  rt_cfg(c, NSHARDS);
}

/* weft_run() with cfg that must succeed. */
static inline void run_cfg(const weft_config *c, void *(*fn)(void *), void *arg)
{
  int r = weft_run(c, fn, arg, NULL);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0, "weft_run: %s", weft_strerror(r));
  rt_assert_clean();
}

/* Stats of the current runtime: [0], [1] per shard, [2] the sum. */
static inline void stats_now(weft_stats st[NSHARDS + 1])
{
  for (int s = 0; s < NSHARDS; s++)
    CO_EQ(weft_stats_get(NULL, s, &st[s]), 0);
  CO_EQ(weft_stats_get(NULL, -1, &st[NSHARDS]), 0);
}

static inline weft_task **task_array(int n)
{
  weft_task **t = calloc((size_t)n, sizeof(*t));
  CO_CHECK(t != NULL);
  return t;
}

/* ---- the spreading workload (also run by test_steal_knobs.c and test_steal_exact.c) ---- */

#define SPREAD_TASKS 2000

static atomic_int ran_on[NSHARDS];
static atomic_int wrong_thread; /* weft_shard_id() disagreed with the thread */
static weft_stats st_end[NSHARDS + 1];

/* The machine is shared and noisy: a woken shard may not get a CPU before
 * the other has run everything, or a preempted shard 0 may find that shard
 * 1 took it all. With the gate on, the first task that runs on a shard
 * keeps that shard busy until the other one has run a task too (at most
 * 5 s), so "both shards ran some" does not hang on the scheduler's timing. */
static atomic_bool gate_on, gate_taken[NSHARDS];

static inline void gate_for_other(int shard)
{
  if (!atomic_load(&gate_on) || atomic_exchange(&gate_taken[shard], true))
    return;
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  while (atomic_load(&ran_on[shard ^ 1]) == 0 && weft_now() < give_up)
    ;
}

static inline void *spread_task(void *arg)
{
  int i = (int)(intptr_t)arg;
  int s = weft_shard_id();
  CO_CHECK(s >= 0 && s < NSHARDS);
  if (s < 0 || s >= NSHARDS)
    return NULL;
  if (thread_shard() != s)
    atomic_fetch_add(&wrong_thread, 1);
  atomic_fetch_add(&ran_on[s], 1);
  gate_for_other(s);
  burn_us(20 + i % 31);
  return (void *)(intptr_t)(i + 1);
}

static inline void *spread_main(void *arg)
{
  (void)arg;
  atomic_store(&gate_on, true);
  map_threads();
  weft_task **t = task_array(SPREAD_TASKS);
  if (!t)
    return NULL;
  for (int i = 0; i < SPREAD_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  for (int i = 0; i < SPREAD_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), i + 1);
  free(t);
  stats_now(st_end);
  return NULL;
}

/* Tasks piled onto one queue to wake a sleeping thief. */
#define PILE_TASKS 100

#endif
