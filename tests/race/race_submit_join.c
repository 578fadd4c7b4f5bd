/* SPDX-License-Identifier: MIT */
/*
 * race_submit_join: the runtime's cross-thread paths under ThreadSanitizer.
 *
 * A 2-shard runtime; 4 plain threads at once submit parent tasks with every
 * placement. Each parent spawns a child pinned to the other shard and the
 * two play ping-pong on a pair of auto-reset events (every hop is a
 * cross-shard wake-up), then the parent joins the child. The plain threads
 * join all their parents (futex joins) and check the sums. Each plain thread
 * also submits tasks that block on an event nobody sets and cancels them,
 * some right after submitting (often before they start) and some once they
 * wait. And each submits a fan-out task that spawns stealable workers on one
 * shard and drives them in lock-step through per-worker event pairs, so
 * that idle shards steal them and they are woken wherever they went.
 * Exit 0 when every result matches, 1 otherwise, 77 without io_uring.
 */
#include "race_check.h"
#include "race_rt.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define THREADS 4
#define PARENTS 200 /* per plain thread */
#define ROUNDS 16   /* ping-pong round trips per parent */
#define BLOCKED 24  /* cancelled tasks per plain thread */
#define WORKERS 32  /* stealable workers per fan-out task */
#define STEPS 8     /* lock-step rounds of a fan-out */

struct duel {
  weft_event *ping, *pong;
  int id;
};

static void *child(void *arg)
{
  struct duel *d = arg;
  for (int i = 0; i < ROUNDS; i++) {
    CHECK(weft_event_wait(d->ping) == 0);
    CHECK(weft_event_set(d->pong) == 0);
  }
  return (void *)(intptr_t)(d->id * 3);
}

static void *parent(void *arg)
{
  struct duel d = {.id = (int)(intptr_t)arg};
  if (weft_event_create(&d.ping, WEFT_EVENT_AUTO_RESET) < 0 ||
      weft_event_create(&d.pong, WEFT_EVENT_AUTO_RESET) < 0) {
    CHECK(!"event_create");
    return NULL;
  }
  int here = weft_shard_id();
  CHECK(here == 0 || here == 1);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = here ^ 1;
  weft_task *t;
  int r = weft_spawn(&t, &o, child, &d);
  CHECK(r == 0);
  intptr_t v = -1;
  if (r == 0) {
    for (int i = 0; i < ROUNDS; i++) {
      CHECK(weft_event_set(d.ping) == 0);
      CHECK(weft_event_wait(d.pong) == 0);
    }
    void *cv = NULL;
    CHECK(weft_join(t, &cv) == 0);
    v = (intptr_t)cv;
  }
  weft_event_destroy(d.ping);
  weft_event_destroy(d.pong);
  return (void *)(intptr_t)(d.id * 7 + v);
}

struct worker {
  weft_event *go, *back;
  int id;
};

static void *worker(void *arg)
{
  struct worker *w = arg;
  int sum = 0;
  for (int i = 0; i < STEPS; i++) {
    CHECK(weft_yield() == 0);
    CHECK(weft_event_wait(w->go) == 0);
    sum += w->id + i;
    CHECK(weft_event_set(w->back) == 0);
  }
  return (void *)(intptr_t)sum;
}

/* Spawns the workers on this shard (stealable), then drives them. */
static void *fanout(void *arg)
{
  int base = (int)(intptr_t)arg;
  struct worker w[WORKERS];
  weft_task *t[WORKERS];
  int made = 0;
  for (; made < WORKERS; made++) {
    w[made].id = base + made;
    if (weft_event_create(&w[made].go, WEFT_EVENT_AUTO_RESET) < 0)
      break;
    if (weft_event_create(&w[made].back, WEFT_EVENT_AUTO_RESET) < 0) {
      weft_event_destroy(w[made].go);
      break;
    }
    if (weft_spawn(&t[made], NULL, worker, &w[made]) < 0) {
      weft_event_destroy(w[made].go);
      weft_event_destroy(w[made].back);
      break;
    }
  }
  CHECK(made == WORKERS);
  for (int i = 0; i < STEPS; i++) {
    for (int k = 0; k < made; k++)
      CHECK(weft_event_set(w[k].go) == 0);
    for (int k = 0; k < made; k++)
      CHECK(weft_event_wait(w[k].back) == 0);
  }
  int64_t total = 0;
  for (int k = 0; k < made; k++) {
    void *v = NULL;
    CHECK(weft_join(t[k], &v) == 0);
    CHECK((intptr_t)v == (intptr_t)w[k].id * STEPS + STEPS * (STEPS - 1) / 2);
    total += (intptr_t)v;
    weft_event_destroy(w[k].go);
    weft_event_destroy(w[k].back);
  }
  return (void *)(intptr_t)total;
}

struct blocker {
  weft_event *never;
  atomic_int started;
};

static void *blocked(void *arg)
{
  struct blocker *b = arg;
  atomic_fetch_add(&b->started, 1);
  int r = weft_event_wait(b->never);
  CHECK(r == -ECANCELED);
  return (void *)(intptr_t)(r == -ECANCELED ? 5 : 6);
}

struct submitter {
  weft_runtime *rt;
  int idx;
  weft_event *never;
};

static void submit_parents(struct submitter *s, weft_task **t)
{
  for (int i = 0; i < PARENTS; i++) {
    int id = s->idx * PARENTS + i;
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    switch (i % 6) {
    case 0: break; /* stealable, round-robin from a plain thread */
    case 1: o.placement = WEFT_PLACE_PINNED, o.shard = 0; break;
    case 2: o.placement = WEFT_PLACE_PINNED, o.shard = 1; break;
    case 3: o.placement = WEFT_PLACE_ROUND_ROBIN; break;
    case 4: o.placement = WEFT_PLACE_STICKY, o.key = (uint64_t)id; break;
    case 5: o.placement = WEFT_PLACE_STEALABLE_PREFERRED, o.shard = id % 2; break;
    }
    CHECK(weft_runtime_submit(s->rt, &o, parent, (void *)(intptr_t)id, &t[i]) == 0);
  }
}

static void cancel_blocked(struct submitter *s)
{
  /* Even ones are cancelled right after the submit (often before they
   * start), odd ones once they have started. */
  struct blocker early = {.never = s->never}, late = {.never = s->never};
  weft_task *t[BLOCKED];
  for (int i = 0; i < BLOCKED; i++) {
    CHECK(weft_runtime_submit(s->rt, NULL, blocked, i % 2 ? &late : &early, &t[i]) == 0);
    if (i % 2 == 0)
      CHECK(weft_cancel(t[i]) == 0);
  }
  for (int spin = 0; spin < 100000 && atomic_load(&late.started) < BLOCKED / 2; spin++)
    weft_sleep(50 * WEFT_USEC);
  CHECK(atomic_load(&late.started) == BLOCKED / 2);
  for (int i = 1; i < BLOCKED; i += 2)
    CHECK(weft_cancel(t[i]) == 0);
  for (int i = 0; i < BLOCKED; i++) {
    void *v = (void *)-1;
    CHECK(weft_join(t[i], &v) == -ECANCELED);
    if (i % 2)
      CHECK((intptr_t)v == 5);
    else /* never ran (result NULL) or was cancelled in its wait */
      CHECK(v == NULL || (intptr_t)v == 5);
  }
}

static void *submitter_main(void *arg)
{
  struct submitter *s = arg;
  static _Thread_local weft_task *t[PARENTS];
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = s->idx % 2;
  weft_task *fan;
  int base = 100000 * (s->idx + 1);
  CHECK(weft_runtime_submit(s->rt, &o, fanout, (void *)(intptr_t)base, &fan) == 0);
  submit_parents(s, t);
  cancel_blocked(s);
  void *fv = NULL;
  CHECK(weft_join(fan, &fv) == 0);
  int64_t expect = 0;
  for (int k = 0; k < WORKERS; k++)
    expect += (int64_t)(base + k) * STEPS + STEPS * (STEPS - 1) / 2;
  CHECK((intptr_t)fv == expect);
  for (int i = 0; i < PARENTS; i++) {
    int id = s->idx * PARENTS + i;
    void *v = NULL;
    CHECK(weft_join(t[i], &v) == 0);
    CHECK((intptr_t)v == (intptr_t)id * 10);
  }
  return NULL;
}

int main(void)
{
  weft_runtime *rt;
  int r = race_start(&rt, NULL, "race_submit_join");
  if (r)
    return r;
  weft_event *never;
  if (weft_event_create(&never, 0) < 0)
    return 1;
  struct submitter s[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) {
    s[i] = (struct submitter){.rt = rt, .idx = i, .never = never};
    if (pthread_create(&th[i], NULL, submitter_main, &s[i]) != 0)
      return 1;
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);

  /* Every task has returned: the live count must reach 0. */
  weft_stats st;
  for (int i = 0; i < 100000; i++) {
    CHECK(weft_stats_get(rt, -1, &st) == 0);
    if (st.live == 0)
      break;
    weft_sleep(50 * WEFT_USEC);
  }
  CHECK(st.live == 0);
  uint64_t tasks = (uint64_t)THREADS * (2 * PARENTS + BLOCKED + 1 + WORKERS);
  CHECK(st.finished == tasks);
  CHECK(st.spawned == tasks);
  CHECK(weft_runtime_stop(rt) == 0);
  weft_event_destroy(never);

  int f = atomic_load(&failures);
  printf("race_submit_join: %llu tasks, %d round trips, %llu stolen: %s\n",
         (unsigned long long)tasks, THREADS * (PARENTS * ROUNDS + WORKERS * STEPS),
         (unsigned long long)st.steal_success, f ? "FAIL" : "ok");
  return f ? 1 : 0;
}
