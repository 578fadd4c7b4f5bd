/* SPDX-License-Identifier: MIT */
/*
 * race_group_wait: waiters of a task group that join the wait, time out of
 * it and are cancelled out of it while the group's last members return,
 * under ThreadSanitizer.
 *
 * The group's list of waiters is appended to and emptied under the group's
 * lock, and left by a waiter that times out or is cancelled under the wait
 * queue's own lock (lib/waitq.c); both locks must cover every change of it.
 *
 * Each round, on a 2-shard runtime: MEMBERS members (pinned to either
 * shard) wait on an event. Plain threads and coroutines on both shards wait
 * on the group with deadlines of microseconds, over and over; a plain
 * thread cancels the coroutine waiters. Then the event is set, and one
 * waiter without a deadline per kind (plain thread, coroutine) must see the
 * group idle.
 *
 * Checks: every timed wait ends with -ETIMEDOUT or 0, a cancelled one with
 * -ECANCELED; the waits without deadline return 0; the group is idle at the
 * end of every round. Exit 0 pass, 1 fail, 77 without io_uring.
 */
#include "race_check.h"
#include "race_rt.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define ROUNDS 20
#define MEMBERS 8
#define THREAD_WAITERS 3
#define TASK_WAITERS 6

struct round {
  weft_group *g;
  weft_event *ev;
  atomic_bool stop;
};

static void *member(void *arg)
{
  struct round *rd = arg;
  CHECK(weft_event_wait(rd->ev) == 0);
  return NULL;
}

static void *spawn_members(void *arg)
{
  struct round *rd = arg;
  for (int i = 0; i < MEMBERS; i++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_PINNED;
    o.shard = i % 2;
    CHECK(weft_group_spawn(rd->g, &o, member, rd) == 0);
  }
  return NULL;
}

struct waiter_arg {
  struct round *rd;
  atomic_int waits; /* timed waits made so far */
};

#define SAW_CANCEL ((void *)1)

/* Timed waits until told to stop (or cancelled, in a coroutine: then it
 * returns SAW_CANCEL). */
static void *timed_waiter(void *arg)
{
  struct waiter_arg *w = arg;
  struct round *rd = w->rd;
  for (int i = 0; !atomic_load(&rd->stop); i++) {
    int r = weft_group_wait_dl(rd->g, weft_now() + (i % 3 + 1) * 3 * WEFT_USEC);
    CHECK(r == -ETIMEDOUT || r == 0 || r == -ECANCELED);
    atomic_fetch_add(&w->waits, 1);
    if (r == -ECANCELED)
      return SAW_CANCEL;
  }
  return NULL;
}

static void *untimed_waiter(void *arg)
{
  struct round *rd = arg;
  CHECK(weft_group_wait(rd->g) == 0);
  return NULL;
}

static int one_round(weft_runtime *rt)
{
  struct round rd;
  atomic_init(&rd.stop, false);
  if (weft_group_create(&rd.g) < 0 || weft_event_create(&rd.ev, 0) < 0)
    return -ENOMEM;
  weft_task *sp;
  CHECK(weft_runtime_submit(rt, NULL, spawn_members, &rd, &sp) == 0);
  CHECK(weft_join(sp, NULL) == 0);
  pthread_t th[THREAD_WAITERS];
  struct waiter_arg thw[THREAD_WAITERS], taskw[TASK_WAITERS];
  for (int i = 0; i < THREAD_WAITERS; i++) {
    thw[i].rd = &rd;
    atomic_init(&thw[i].waits, 0);
    CHECK(pthread_create(&th[i], NULL, timed_waiter, &thw[i]) == 0);
  }
  weft_task *tw[TASK_WAITERS];
  for (int i = 0; i < TASK_WAITERS; i++) {
    taskw[i].rd = &rd;
    atomic_init(&taskw[i].waits, 0);
    CHECK(race_submit_on(rt, i % 3 == 2 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED, i % 2,
                         timed_waiter, &taskw[i], &tw[i]) == 0);
  }
  /* Cancel half of the coroutine waiters while all of them churn: once
   * every waiter is in its loop. */
  for (int i = 0; i < TASK_WAITERS; i++)
    while (atomic_load(&taskw[i].waits) < 3)
      sched_yield();
  struct race_cancel_share share = {.v = tw, .n = TASK_WAITERS, .first = 0, .step = 2,
                                    .yield_every = 1};
  race_canceller(&share);
  /* Members return while the others still churn. */
  weft_task *last;
  CHECK(weft_runtime_submit(rt, NULL, untimed_waiter, &rd, &last) == 0);
  CHECK(weft_event_set(rd.ev) == 0);
  CHECK(weft_group_wait(rd.g) == 0);
  atomic_store(&rd.stop, true);
  for (int i = 0; i < THREAD_WAITERS; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < TASK_WAITERS; i++) {
    void *ret = NULL;
    int j = weft_join(tw[i], &ret);
    /* The even ones were cancelled while they waited over and over: one
     * of their waits said so. The odd ones stopped when told. */
    CHECK(j == (i % 2 == 0 ? -ECANCELED : 0));
    CHECK(ret == (i % 2 == 0 ? SAW_CANCEL : NULL));
  }
  CHECK(weft_join(last, NULL) == 0);
  CHECK(weft_group_active(rd.g) == 0);
  CHECK(weft_group_destroy(rd.g) == 0);
  weft_event_destroy(rd.ev);
  return 0;
}

int main(void)
{
  weft_runtime *rt;
  int r = race_start(&rt, NULL, "race_group_wait");
  if (r)
    return r;
  for (int i = 0; i < ROUNDS && r == 0; i++)
    r = one_round(rt);
  CHECK(weft_runtime_stop(rt) == 0);
  int f = atomic_load(&failures);
  printf("race_group_wait: %d rounds, %d failures\n", ROUNDS, f);
  return r == 0 && f == 0 ? 0 : 1;
}
