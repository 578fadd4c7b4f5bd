/* SPDX-License-Identifier: MIT */
/*
 * Suite "group": task groups (wait, first error, cancel reaching members
 * blocked in sleeps, reads and events, wait with a deadline, spawn after
 * cancel, destroy of a group whose members block for ever, the active
 * count, members on both shards, waiting from a plain thread) and
 * cancellation tokens.
 */
#include "io_helpers.h"

#include "fault.h"

#include <pthread.h>

/* ---- waiting and results ------------------------------------------------------------ */

struct members {
  atomic_int ran;
  atomic_int on_shard[2];
  atomic_int results[3]; /* members that saw 0, -ECANCELED, anything else */
};

static void *ok_member(void *arg)
{
  struct members *m = arg;
  int s = weft_shard_id();
  if (s == 0 || s == 1)
    atomic_fetch_add(&m->on_shard[s], 1);
  weft_sleep(WEFT_MSEC);
  atomic_fetch_add(&m->ran, 1);
  return (void *)(intptr_t)1; /* not an error: a positive value */
}

static int group_spawn_on(weft_group *g, int shard, void *(*fn)(void *), void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = shard;
  return weft_group_spawn(g, &o, fn, arg);
}

static void *wait_ok_main(void *arg)
{
  (void)arg;
  struct members m = {0};
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  CO_EQ(weft_group_active(g), 0);
  CO_EQ(weft_group_wait(g), 0); /* empty: at once */
  for (int i = 0; i < 20; i++)
    CO_EQ(group_spawn_on(g, i % 2, ok_member, &m), 0);
  CO_EQ(weft_group_spawn(g, NULL, ok_member, &m), 0); /* default placement */
  CO_EQ(weft_group_wait(g), 0);
  CO_EQ(atomic_load(&m.ran), 21);
  CO_EQ(weft_group_active(g), 0);
  CO_CHECK(atomic_load(&m.on_shard[0]) >= 10);
  CO_CHECK(atomic_load(&m.on_shard[1]) >= 10);
  /* A group can be reused after a wait. */
  CO_EQ(group_spawn_on(g, 1, ok_member, &m), 0);
  CO_EQ(weft_group_wait(g), 0);
  CO_EQ(atomic_load(&m.ran), 22);
  CO_EQ(weft_group_destroy(g), 0);
  return NULL;
}

Test(group, wait_returns_zero_when_members_succeed, .timeout = 30)
{
  rt_run(2, wait_ok_main, NULL);
  rt_assert_clean();
}

static void *eio_member(void *arg)
{
  (void)arg;
  weft_sleep(WEFT_MSEC);
  return (void *)(intptr_t)-EIO;
}

static void *enoent_later_member(void *arg)
{
  weft_event *ev = arg;
  weft_event_wait(ev); /* returns only after the -EIO member has */
  return (void *)(intptr_t)-ENOENT;
}

static void *first_error_main(void *arg)
{
  (void)arg;
  struct members m = {0};
  weft_event *ev;
  CO_EQ(weft_event_create(&ev, 0), 0);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  CO_EQ(group_spawn_on(g, 0, ok_member, &m), 0);
  CO_EQ(group_spawn_on(g, 1, eio_member, NULL), 0);
  CO_EQ(group_spawn_on(g, 1, enoent_later_member, ev), 0);
  CO_EQ(group_spawn_on(g, 0, ok_member, &m), 0);
  CO_CHECK(RT_POLL(weft_group_active(g) == 1)); /* only the -ENOENT one */
  CO_EQ(weft_event_set(ev), 0);
  CO_EQ(weft_group_wait(g), -EIO);
  CO_EQ(atomic_load(&m.ran), 2);
  CO_EQ(weft_group_destroy(g), -EIO);
  weft_event_destroy(ev);
  return NULL;
}

Test(group, first_member_error_is_reported, .timeout = 30)
{
  rt_run(2, first_error_main, NULL);
  rt_assert_clean();
}

/* ---- cancel ----------------------------------------------------------------------- */

struct blockers {
  int p[2];
  weft_event *never;
  atomic_int started;
  atomic_int results[3]; /* -ECANCELED, -ETIMEDOUT, other */
  atomic_int after;      /* calls made after the cancel that failed at once */
};

static void count_result(struct blockers *b, long long r)
{
  atomic_fetch_add(&b->results[r == -ECANCELED ? 0 : r == -ETIMEDOUT ? 1 : 2], 1);
}

/* Blocks in a sleep, a read or an event wait (by its index), then checks
 * that its next blocking call fails at once too. */
static void *blocking_member(void *arg)
{
  struct blockers *b = arg;
  int i = atomic_fetch_add(&b->started, 1);
  char c;
  long long r;
  switch (i % 3) {
  case 0: r = weft_sleep(3600 * WEFT_SEC); break;
  case 1: r = weft_read(b->p[0], &c, 1); break;
  default: r = weft_event_wait(b->never); break;
  }
  count_result(b, r);
  if (r == -ECANCELED && weft_sleep(3600 * WEFT_SEC) == -ECANCELED)
    atomic_fetch_add(&b->after, 1);
  return NULL;
}

static void blockers_init(struct blockers *b)
{
  memset(b, 0, sizeof(*b));
  CO_EQ(io_pipe(b->p), 0);
  CO_EQ(weft_event_create(&b->never, 0), 0);
}

static void blockers_term(struct blockers *b)
{
  CO_EQ(io_pending(b->p[0]), 0);
  io_close_pipe(b->p);
  weft_event_destroy(b->never);
}

#define NB 12

static void *cancel_main(void *arg)
{
  (void)arg;
  struct blockers b;
  blockers_init(&b);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < NB; i++)
    CO_EQ(group_spawn_on(g, i % 2, blocking_member, &b), 0);
  CO_CHECK(RT_POLL(atomic_load(&b.started) == NB));
  CO_CHECK(io_wait_suspended(NB));
  CO_EQ(weft_group_active(g), NB);
  CO_EQ(weft_group_cancel(g), 0);
  CO_EQ(weft_group_wait(g), -ECANCELED);
  CO_EQ(atomic_load(&b.results[0]), NB);
  CO_EQ(atomic_load(&b.after), NB);
  CO_EQ(weft_group_active(g), 0);
  /* Once cancelled, the group takes no new member. */
  CO_EQ(weft_group_spawn(g, NULL, blocking_member, &b), -ECANCELED);
  CO_EQ(group_spawn_on(g, 1, blocking_member, &b), -ECANCELED);
  CO_EQ(weft_group_cancel(g), 0); /* again: harmless */
  CO_EQ(weft_group_destroy(g), -ECANCELED);
  blockers_term(&b);
  return NULL;
}

Test(group, cancel_reaches_members_in_sleep_read_and_event, .timeout = 30)
{
  rt_run(2, cancel_main, NULL);
  rt_assert_clean();
}

static void *wait_dl_main(void *arg)
{
  (void)arg;
  struct blockers b;
  blockers_init(&b);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < 4; i++)
    CO_EQ(group_spawn_on(g, i % 2, blocking_member, &b), 0);
  int64_t t0 = weft_now();
  CO_EQ(weft_group_wait_dl(g, t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  CO_EQ(weft_group_wait_dl(g, t0), -ETIMEDOUT); /* already passed */
  CO_EQ(weft_group_active(g), 4);               /* the members go on */
  CO_EQ(atomic_load(&b.results[0]) + atomic_load(&b.results[1]) + atomic_load(&b.results[2]),
        0);
  /* A deadline scope bounds the wait the same way. */
  int64_t saved = weft_deadline_push(weft_now() + 5 * WEFT_MSEC);
  CO_EQ(weft_group_wait(g), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_EQ(weft_group_active(g), 4);
  CO_EQ(weft_group_cancel(g), 0);
  CO_EQ(weft_group_wait_dl(g, weft_now() + 3600 * WEFT_SEC), -ECANCELED);
  CO_EQ(weft_group_destroy(g), -ECANCELED);
  blockers_term(&b);
  return NULL;
}

Test(group, wait_with_deadline_times_out_members_stay, .timeout = 30)
{
  rt_run(2, wait_dl_main, NULL);
  rt_assert_clean();
}

/* destroy cancels what is left and waits for it: members blocked for ever
 * are released and freed (the leak check sees none of them). */
static void *destroy_main(void *arg)
{
  (void)arg;
  struct blockers b;
  blockers_init(&b);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < NB; i++)
    CO_EQ(group_spawn_on(g, i % 2, blocking_member, &b), 0);
  CO_CHECK(RT_POLL(atomic_load(&b.started) == NB));
  CO_EQ(weft_group_destroy(g), -ECANCELED);
  CO_EQ(atomic_load(&b.results[0]), NB); /* all returned before destroy did */
  CO_EQ(atomic_load(&b.after), NB);
  CO_EQ(io_stats().live, 1); /* main only */
  blockers_term(&b);
  return NULL;
}

Test(group, destroy_cancels_and_joins_members, .timeout = 30)
{
  rt_run(2, destroy_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* Members spawned and cancelled before they ever ran. */
static void *destroy_unstarted_main(void *arg)
{
  (void)arg;
  struct blockers b;
  blockers_init(&b);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < NB; i++)
    CO_EQ(group_spawn_on(g, 0, blocking_member, &b), 0); /* main's shard: not run yet */
  CO_EQ(weft_group_active(g), NB);
  CO_EQ(weft_group_destroy(g), -ECANCELED);
  CO_EQ(atomic_load(&b.started), 0);
  CO_EQ(io_stats().live, 1);
  blockers_term(&b);
  return NULL;
}

Test(group, destroy_before_members_started, .timeout = 30)
{
  rt_run(2, destroy_unstarted_main, NULL);
  rt_assert_clean();
}

/* destroy's wait is not cancellable and not bounded by the caller's
 * deadline scope: it returns only when every member has returned (here,
 * members that take 30 ms to return once cancelled). */
static void *slow_to_die(void *arg)
{
  atomic_int *done = arg;
  weft_sleep(3600 * WEFT_SEC);
  io_busy(30 * WEFT_MSEC); /* not a weft call: cancellation cannot cut it */
  atomic_fetch_add(done, 1);
  return NULL;
}

static void *destroy_scope_main(void *arg)
{
  (void)arg;
  atomic_int done = 0;
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < 2; i++)
    CO_EQ(group_spawn_on(g, 1, slow_to_die, &done), 0);
  CO_CHECK(io_wait_suspended(2));
  int64_t saved = weft_deadline_push(weft_now() + WEFT_MSEC);
  int r = weft_group_destroy(g);
  weft_deadline_pop(saved);
  CO_EQ(r, -ECANCELED);
  CO_EQ(atomic_load(&done), 2);
  /* Cancelled itself: the same. */
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < 2; i++)
    CO_EQ(group_spawn_on(g, 1, slow_to_die, &done), 0);
  CO_CHECK(io_wait_suspended(2));
  weft_cancel(weft_task_self());
  CO_EQ(weft_group_destroy(g), -ECANCELED);
  CO_EQ(atomic_load(&done), 4);
  return NULL;
}

Test(group, destroy_waits_even_in_a_deadline_scope, .timeout = 30)
{
  rt_run(2, destroy_scope_main, NULL);
  rt_assert_clean();
}

/* ---- counts, waiters, misuse ------------------------------------------------------------ */

static void *event_member(void *arg)
{
  return (void *)(intptr_t)weft_event_wait((weft_event *)arg);
}

static void *active_main(void *arg)
{
  (void)arg;
  weft_event *ev;
  CO_EQ(weft_event_create(&ev, 0), 0);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < 5; i++) {
    CO_EQ(group_spawn_on(g, i % 2, event_member, ev), 0);
    CO_EQ(weft_group_active(g), (size_t)i + 1);
  }
  CO_CHECK(io_wait_suspended(5));
  CO_EQ(weft_group_active(g), 5);
  CO_EQ(weft_event_set(ev), 0);
  CO_EQ(weft_group_wait(g), 0);
  CO_EQ(weft_group_active(g), 0);
  CO_EQ(weft_group_destroy(g), 0);
  weft_event_destroy(ev);
  return NULL;
}

Test(group, active_counts_members, .timeout = 30)
{
  rt_run(2, active_main, NULL);
  rt_assert_clean();
}

/* A waiter that is itself cancelled gets -ECANCELED; the members go on. */
static void *group_waiter(void *arg)
{
  return (void *)(intptr_t)weft_group_wait((weft_group *)arg);
}

static void *cancelled_waiter_main(void *arg)
{
  (void)arg;
  weft_event *ev;
  CO_EQ(weft_event_create(&ev, 0), 0);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  CO_EQ(group_spawn_on(g, 1, event_member, ev), 0);
  weft_task *w;
  CO_EQ(io_spawn_on(&w, 1, group_waiter, g), 0);
  CO_CHECK(io_wait_suspended(2));
  CO_EQ(weft_cancel(w), 0);
  void *v = NULL;
  CO_EQ(weft_join(w, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  CO_EQ(weft_group_active(g), 1);
  CO_EQ(weft_event_set(ev), 0);
  CO_EQ(weft_group_wait(g), 0);
  CO_EQ(weft_group_destroy(g), 0);
  weft_event_destroy(ev);
  return NULL;
}

Test(group, cancelled_waiter_gets_ecanceled, .timeout = 30)
{
  rt_run(2, cancelled_waiter_main, NULL);
  rt_assert_clean();
}

struct spawner {
  weft_group *g;
  weft_event *ev;
};

static void *spawn_members(void *arg)
{
  struct spawner *s = arg;
  for (int i = 0; i < 4; i++)
    CO_EQ(group_spawn_on(s->g, i % 2, event_member, s->ev), 0);
  return NULL;
}

Test(group, wait_from_a_plain_thread, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  struct spawner s;
  cr_assert_eq(weft_group_create(&s.g), 0);
  cr_assert_eq(weft_event_create(&s.ev, 0), 0);
  /* Spawning needs a coroutine. */
  cr_assert_eq(weft_group_spawn(s.g, NULL, event_member, s.ev), -EPERM);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, spawn_members, &s, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  cr_assert_eq(weft_group_active(s.g), 4);
  int64_t t0 = weft_now();
  cr_assert_eq(weft_group_wait_dl(s.g, t0 + 10 * WEFT_MSEC), -ETIMEDOUT);
  cr_assert_geq(weft_now(), t0 + 10 * WEFT_MSEC);
  cr_assert_eq(weft_event_set(s.ev), 0);
  cr_assert_eq(weft_group_wait(s.g), 0);
  cr_assert_eq(weft_group_active(s.g), 0);
  /* And destroy from the thread, with members still blocked. */
  cr_assert_eq(weft_event_reset(s.ev), 0);
  cr_assert_eq(weft_runtime_submit(rt, NULL, spawn_members, &s, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  cr_assert_eq(weft_group_destroy(s.g), -ECANCELED);
  weft_event_destroy(s.ev);
  rt_assert_clean();
  rt_stop_idle(rt);
}

static void *dummy(void *arg)
{
  return arg;
}

/* A member waiting for its own group would wait for itself: refused at
 * once, with or without a deadline, and its destroy does nothing. Its own
 * members (spawned into the same group) are members too. */
static void *self_waiter(void *arg)
{
  weft_group *g = arg;
  CO_EQ(weft_group_wait(g), -EDEADLK);
  CO_EQ(weft_group_wait_dl(g, weft_now() + 10 * WEFT_SEC), -EDEADLK);
  CO_EQ(weft_group_destroy(g), -EDEADLK);
  CO_EQ(weft_group_active(g), 1);
  return NULL;
}

static void *spawns_a_self_waiter(void *arg)
{
  CO_EQ(weft_group_spawn(arg, NULL, self_waiter, arg), 0);
  return NULL;
}

static void *misuse_main(void *arg)
{
  (void)arg;
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  CO_EQ(weft_group_spawn(g, NULL, self_waiter, g), 0);
  CO_EQ(weft_group_wait(g), 0);
  CO_EQ(weft_group_spawn(g, NULL, spawns_a_self_waiter, g), 0);
  CO_EQ(weft_group_wait(g), 0);
  CO_EQ(weft_group_spawn(g, NULL, NULL, NULL), -EINVAL);
  CO_EQ(group_spawn_on(g, 7, dummy, NULL), -EINVAL); /* no such shard */
  CO_EQ(weft_group_spawn(NULL, NULL, dummy, NULL), -EINVAL);
  CO_EQ(weft_group_active(g), 0);
  CO_EQ(weft_group_destroy(g), 0);
  return NULL;
}

Test(group, invalid_arguments, .timeout = 30)
{
  cr_assert_eq(weft_group_create(NULL), -EINVAL);
  cr_assert_eq(weft_group_wait(NULL), -EINVAL);
  cr_assert_eq(weft_group_wait_dl(NULL, 0), -EINVAL);
  cr_assert_eq(weft_group_cancel(NULL), -EINVAL);
  cr_assert_eq(weft_group_destroy(NULL), -EINVAL);
  cr_assert_eq(weft_group_active(NULL), 0);
  cr_assert_eq(weft_cancel_token_create(NULL), -EINVAL);
  cr_assert_eq(weft_cancel_token_cancel(NULL), -EINVAL);
  cr_assert_eq(weft_cancel_token_wait(NULL, 0), -EINVAL);
  cr_assert(!weft_cancel_token_is_cancelled(NULL));
  weft_cancel_token_destroy(NULL);
  rt_run(2, misuse_main, NULL);
  rt_assert_clean();
}

/* ---- cancellation tokens -------------------------------------------------------------- */

struct tokw {
  weft_cancel_token *tok;
  atomic_int arrived;
  _Atomic pid_t thread_tid; /* the plain thread's, once it runs */
};

static void *token_waiter(void *arg)
{
  struct tokw *w = arg;
  if (!weft_task_self())
    atomic_store(&w->thread_tid, rt_gettid());
  atomic_fetch_add(&w->arrived, 1);
  return (void *)(intptr_t)weft_cancel_token_wait(w->tok, WEFT_NO_DEADLINE);
}

static void *token_main(void *arg)
{
  (void)arg;
  struct tokw w = {0};
  CO_EQ(weft_cancel_token_create(&w.tok), 0);
  CO_CHECK(!weft_cancel_token_is_cancelled(w.tok));
  int64_t t0 = weft_now();
  CO_EQ(weft_cancel_token_wait(w.tok, t0 + 10 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 10 * WEFT_MSEC);
  CO_EQ(weft_cancel_token_wait(w.tok, t0), -ETIMEDOUT);

  /* Waiters on both shards and on a plain thread, all released by one cancel. */
  weft_task *t[4];
  for (int i = 0; i < 4; i++)
    CO_EQ(io_spawn_on(&t[i], i % 2, token_waiter, &w), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, token_waiter, &w), 0);
  CO_CHECK(RT_POLL(atomic_load(&w.arrived) == 5));
  CO_CHECK(io_wait_suspended(4));
  CO_CHECK(RT_WAIT_IN_SYSCALL(atomic_load(&w.thread_tid), SYS_futex)); /* the thread waits */
  CO_EQ(weft_cancel_token_cancel(w.tok), 0);
  CO_CHECK(weft_cancel_token_is_cancelled(w.tok));
  for (int i = 0; i < 4; i++)
    CO_EQ(rt_join_int(t[i]), 0);
  void *tv = (void *)-1;
  pthread_join(th, &tv);
  CO_EQ((intptr_t)tv, 0);
  /* Raised once and for all. */
  CO_EQ(weft_cancel_token_wait(w.tok, weft_now() - 1), 0);
  CO_EQ(weft_cancel_token_cancel(w.tok), 0);
  CO_CHECK(weft_cancel_token_is_cancelled(w.tok));
  weft_cancel_token_destroy(w.tok);

  /* A waiting task that is cancelled gets -ECANCELED. */
  CO_EQ(weft_cancel_token_create(&w.tok), 0);
  CO_EQ(io_spawn_on(&t[0], 1, token_waiter, &w), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t[0]), 0);
  void *v = NULL;
  CO_EQ(weft_join(t[0], &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  CO_CHECK(!weft_cancel_token_is_cancelled(w.tok));
  weft_cancel_token_destroy(w.tok);
  return NULL;
}

Test(group, cancel_tokens, .timeout = 30)
{
  rt_run(2, token_main, NULL);
  rt_assert_clean();
}

/* Every wait here (group waits, cancel tokens) is a waiter on a wait queue.
 * A waiter on shard 0 and a waker on shard 1, hundreds of thousands of
 * times with a varying offset (auto-reset events: the cheapest wait of the
 * kind, so the most rounds per second): every wake-up must release its
 * wait. One lost in the window between a waiter joining its queue and the
 * waiter recording which task it is leaves the wait blocked for ever (the
 * test then hits its timeout). */
#define WAKE_RACE_MAX 3000000

struct wakerace {
  weft_event *ev[2];
  atomic_int go;
  atomic_bool stop;
};

static void *race_waker(void *arg)
{
  struct wakerace *wr = arg;
  for (int i = 0;; i++) {
    /* Yield while waiting: a coroutine's shard sends its wake-ups to a
     * sleeping shard when the coroutine switches out. */
    while (atomic_load(&wr->go) < i && !atomic_load(&wr->stop))
      weft_yield();
    if (atomic_load(&wr->stop))
      return NULL;
    for (volatile int k = 0; k < (i * 7) % 64; k++)
      ;
    CO_EQ(weft_event_set(wr->ev[i & 1]), 0);
  }
}

static void *wake_race_main(void *arg)
{
  int *rounds = arg;
  struct wakerace wr = {.go = -1};
  for (int i = 0; i < 2; i++)
    CO_EQ(weft_event_create(&wr.ev[i], WEFT_EVENT_AUTO_RESET), 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, race_waker, &wr), 0);
  int64_t end = weft_now() + 3 * WEFT_SEC;
  int i = 0;
  for (; i < WAKE_RACE_MAX && (i % 1024 || weft_now() < end); i++) {
    atomic_store(&wr.go, i);
    for (volatile int k = 0; k < (i * 13) % 64; k++)
      ;
    int r = weft_event_wait(wr.ev[i & 1]);
    if (r != 0) {
      CO_EQ(r, 0);
      break;
    }
  }
  *rounds = i;
  atomic_store(&wr.stop, true);
  CO_EQ(weft_join(t, NULL), 0);
  for (int k = 0; k < 2; k++)
    weft_event_destroy(wr.ev[k]);
  return NULL;
}

Test(group, waitq_wakeup_racing_wait_across_shards, .timeout = 60)
{
  int rounds = 0;
  rt_run(2, wake_race_main, &rounds);
  rt_assert_clean();
  cr_log_info("%d rounds", rounds);
  cr_assert_gt(rounds, 0);
}

/* ---- out of memory --------------------------------------------------------------- */

static void *oom_cancel_main(void *arg)
{
  (void)arg;
  struct blockers b;
  blockers_init(&b);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  for (int i = 0; i < 6; i++)
    CO_EQ(group_spawn_on(g, i % 2, blocking_member, &b), 0);
  CO_CHECK(RT_POLL(atomic_load(&b.started) == 6));
  CO_CHECK(io_wait_suspended(6));
  /* No memory for the list of members to cancel: they are cancelled anyway. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_group_cancel(g), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 0); /* the list's */
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(weft_group_wait(g), -ECANCELED);
  CO_EQ(atomic_load(&b.results[0]), 6);
  CO_EQ(weft_group_destroy(g), -ECANCELED);
  blockers_term(&b);
  return NULL;
}

Test(group, out_of_memory, .timeout = 30)
{
  weft_group *g = NULL;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  cr_assert_eq(weft_group_create(&g), -ENOMEM);
  cr_assert_null(g);
  weft_cancel_token *tok = NULL;
  for (int nth = 1; nth <= 2; nth++) { /* the token, then its event */
    weft__fault_arm(WEFT__FAULT_MALLOC, nth);
    cr_assert_eq(weft_cancel_token_create(&tok), -ENOMEM);
    cr_assert_null(tok);
  }
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  rt_run(2, oom_cancel_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- waiters timing out while others join the wait ------------------------------ */

struct churn {
  weft_group *g;
  atomic_bool stop;
  int id;
};

static void *churn_waiter(void *arg)
{
  struct churn *c = arg;
  while (!atomic_load(&c->stop))
    CO_EQ(weft_group_wait_dl(c->g, weft_now() + (c->id % 2 ? 2 : 20) * WEFT_USEC), -ETIMEDOUT);
  return NULL;
}

static void *final_wait(void *arg)
{
  return (void *)(intptr_t)weft_group_wait(arg);
}

/* Plain threads wait on a busy group with deadlines of microseconds, so
 * that waiters leave the wait (timed out) while others join it. The list of
 * waiters must survive that: afterwards a wait without deadline returns
 * once the last member does (it never did when a timed-out waiter had
 * unlinked itself under another lock than the one joiners held). */
Test(group, waiters_timing_out_while_others_join, .timeout = 120)
{
  enum { THREADS = 4, TRIES = 10 };
  weft_runtime *rt = rt_start(2);
  struct spawner s;
  cr_assert_eq(weft_group_create(&s.g), 0);
  cr_assert_eq(weft_event_create(&s.ev, 0), 0);
  for (int try = 0; try < TRIES; try++) {
    weft_task *t;
    cr_assert_eq(weft_event_reset(s.ev), 0);
    cr_assert_eq(weft_runtime_submit(rt, NULL, spawn_members, &s, &t), 0);
    cr_assert_eq(weft_join(t, NULL), 0);
    struct churn c[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
      c[i] = (struct churn){.g = s.g, .id = i};
      atomic_init(&c[i].stop, false);
      cr_assert_eq(pthread_create(&th[i], NULL, churn_waiter, &c[i]), 0);
    }
    usleep(150000);
    for (int i = 0; i < THREADS; i++)
      atomic_store(&c[i].stop, true);
    for (int i = 0; i < THREADS; i++)
      pthread_join(th[i], NULL);
    /* The last wait is a coroutine's, so that the dump shows it waiting
     * (with the 4 members) before the event lets the members return. */
    weft_task *f;
    cr_assert_eq(weft_runtime_submit(rt, NULL, final_wait, s.g, &f), 0);
    cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 5), "try %d: the last wait never began",
              try);
    cr_assert_eq(weft_event_set(s.ev), 0);
    void *r = (void *)(intptr_t)1;
    cr_assert_eq(weft_join_dl(f, &r, weft_now() + 10 * WEFT_SEC), 0,
                 "try %d: the last wait never returned", try);
    cr_assert_eq((intptr_t)r, 0);
  }
  cr_assert_eq(weft_group_destroy(s.g), 0);
  weft_event_destroy(s.ev);
  rt_assert_clean();
  rt_stop_idle(rt);
}
