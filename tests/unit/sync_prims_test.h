/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "sync_prims" (test_sync_prims_mutex.c,
 * test_sync_prims_coord.c): the number of waiters queued on an object, and
 * running a crowd of coroutines and plain threads against one object.
 *
 * "Queued" is observed through the internal view of the objects (the
 * suite links the internal library), so the tests know a waiter is in the
 * queue before they act, instead of sleeping and hoping.
 */
#ifndef WEFT_TESTS_SYNC_PRIMS_TEST_H
#define WEFT_TESTS_SYNC_PRIMS_TEST_H

#include "rt_internal.h"

#include "sync_impl.h"

#include <unistd.h>

/* Waiters in an object's queue right now. */
static inline int queued(struct weft_waitq_storage_ *s)
{
  return rt_waitq_len(SYNC_VIEW(weft__waitq, s));
}

/* ---- running a crowd: coroutines on the shards plus plain threads ----------------- */

#define MAX_CO 64
#define MAX_TH 16

/* Runs fn(arg) on n_co coroutines (spread over the shards, every third one
 * stealable, the rest pinned) and on n_th plain threads, and joins them all.
 * fn returns NULL when it is happy. `rt` may be NULL: one is started here. */
static inline void crowd(weft_runtime *rt, int n_co, int n_th, void *(*fn)(void *), void *arg)
{
  int shards = weft_runtime_shards(rt);
  weft_task *t[MAX_CO];
  pthread_t th[MAX_TH];
  for (int i = 0; i < n_co; i++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = i % 3 == 2 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED;
    o.shard = i % shards;
    cr_assert_eq(weft_runtime_submit(rt, &o, fn, arg, &t[i]), 0);
  }
  for (int i = 0; i < n_th; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, fn, arg), 0);
  for (int i = 0; i < n_co; i++) {
    void *v = (void *)-1;
    cr_assert_eq(weft_join(t[i], &v), 0);
    cr_assert_null(v);
  }
  for (int i = 0; i < n_th; i++) {
    void *v = (void *)-1;
    pthread_join(th[i], &v);
    cr_assert_null(v);
  }
}

static inline weft_task *submit_on(weft_runtime *rt, int placement, int shard, void *(*fn)(void *),
                            void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = placement;
  o.shard = shard;
  weft_task *t = NULL;
  cr_assert_eq(weft_runtime_submit(rt, &o, fn, arg, &t), 0);
  return t;
}

static inline void finish(weft_runtime *rt)
{
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* Iterations per worker in the contention counts. */
#define ITERS 10000

/* ---- once: fn that must not run, and a holder that runs fn until released ---- */

static inline void never_called(void *arg)
{
  (void)arg;
  rt_fail(__FILE__, __LINE__, "once ran fn twice");
}

static inline void once_holder(void *arg)
{
  /* Runs fn "for ever": until the test lets it go. */
  while (!atomic_load((atomic_bool *)arg))
    usleep(200);
}

struct once_runner {
  weft_once_flag *once;
  atomic_bool release;
};

static inline void *run_once_holder(void *arg)
{
  struct once_runner *r = arg;
  CO_EQ(weft_once(r->once, once_holder, &r->release), 0);
  return NULL;
}

#endif
