/* SPDX-License-Identifier: MIT */
/*
 * Suite "sync": weft_event. Manual- and auto-reset semantics with waiters
 * on several shards, deadlines, plain-thread waiters (the futex path) woken
 * by coroutines and the reverse, argument errors, cancellation, and a
 * timeout racing a set many times over (no signal may be lost or doubled).
 */
#include "rt_internal.h"

#include "fault.h"

#include <unistd.h>

struct waiters {
  weft_event *ev;
  atomic_int arrived, released;
  int64_t deadline; /* for the waits, WEFT_NO_DEADLINE for none */
  atomic_int nthreads;
  _Atomic pid_t tids[4]; /* of the plain threads waiting */
};

static void *waiter(void *arg)
{
  struct waiters *w = arg;
  atomic_fetch_add(&w->arrived, 1);
  int r = weft_event_wait_dl(w->ev, w->deadline);
  if (r == 0)
    atomic_fetch_add(&w->released, 1);
  return (void *)(intptr_t)r;
}

/* Spawns n waiters round-robin and waits until every one is suspended in
 * the event (the dump shows each task's state). */
static void spawn_waiters(struct waiters *w, weft_task **t, int n)
{
  for (int i = 0; i < n; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_ROUND_ROBIN, -1, waiter, w), 0);
  CO_CHECK(RT_POLL(atomic_load(&w->arrived) == n));
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == n));
}

/* ---- manual reset ----------------------------------------------------------------- */

#define NW 24

static void *manual_main(void *arg)
{
  (void)arg;
  struct waiters w = {.deadline = WEFT_NO_DEADLINE};
  CO_EQ(weft_event_create(&w.ev, 0), 0);
  CO_CHECK(!weft_event_is_set(w.ev));
  weft_task *t[NW];
  spawn_waiters(&w, t, NW);
  CO_EQ(atomic_load(&w.released), 0);
  CO_EQ(weft_event_set(w.ev), 0);
  for (int i = 0; i < NW; i++)
    CO_EQ(rt_join_int(t[i]), 0);
  CO_EQ(atomic_load(&w.released), NW);
  /* Still set: later waits pass at once, again and again. */
  CO_CHECK(weft_event_is_set(w.ev));
  for (int i = 0; i < 3; i++)
    CO_EQ(weft_event_wait_dl(w.ev, weft_now() - 1), 0);
  CO_EQ(weft_event_set(w.ev), 0); /* setting a set event changes nothing */
  CO_CHECK(weft_event_is_set(w.ev));
  CO_EQ(weft_event_reset(w.ev), 0);
  CO_CHECK(!weft_event_is_set(w.ev));
  CO_EQ(weft_event_wait_dl(w.ev, weft_now() - 1), -ETIMEDOUT);
  int64_t saved = weft_deadline_push(weft_now() - 1); /* a scope bounds the plain wait */
  CO_EQ(weft_event_wait(w.ev), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_EQ(weft_event_reset(w.ev), 0); /* resetting an unset event too */
  CO_CHECK(!weft_event_is_set(w.ev));
  weft_event_destroy(w.ev);
  return NULL;
}

Test(sync, manual_reset_releases_all_and_stays_set, .timeout = 20)
{
  rt_run(2, manual_main, NULL);
  rt_assert_clean();
}

/* ---- auto reset ----------------------------------------------------------------- */

#define NA 40

static void *auto_main(void *arg)
{
  (void)arg;
  struct waiters w = {.deadline = WEFT_NO_DEADLINE};
  CO_EQ(weft_event_create(&w.ev, WEFT_EVENT_AUTO_RESET), 0);
  weft_task *t[NA];
  spawn_waiters(&w, t, NA);
  /* Every waiter is queued: each set hands its signal to exactly one. */
  for (int k = 1; k <= NA / 2; k++)
    CO_EQ(weft_event_set(w.ev), 0);
  CO_CHECK(RT_POLL(atomic_load(&w.released) >= NA / 2));
  CO_EQ(weft_sleep(5 * WEFT_MSEC), 0); /* room for a wrong extra release */
  CO_EQ(atomic_load(&w.released), NA / 2);
  CO_CHECK(!weft_event_is_set(w.ev)); /* the signals went to waiters */
  CO_EQ(rt_dump_count(NULL, " waiting"), NA / 2);
  /* The rest one set at a time. */
  for (int k = NA / 2 + 1; k <= NA; k++) {
    CO_EQ(weft_event_set(w.ev), 0);
    CO_CHECK(RT_POLL(atomic_load(&w.released) >= k));
    CO_EQ(atomic_load(&w.released), k);
  }
  for (int i = 0; i < NA; i++)
    CO_EQ(rt_join_int(t[i]), 0);
  CO_CHECK(!weft_event_is_set(w.ev));

  /* A set with nobody waiting is kept for the next wait, which takes it. */
  CO_EQ(weft_event_set(w.ev), 0);
  CO_CHECK(weft_event_is_set(w.ev));
  CO_EQ(weft_event_wait_dl(w.ev, weft_now() - 1), 0);
  CO_CHECK(!weft_event_is_set(w.ev));
  CO_EQ(weft_event_wait_dl(w.ev, weft_now() - 1), -ETIMEDOUT);
  /* Kept across shards: a waiter on the other shard takes it. */
  CO_EQ(weft_event_set(w.ev), 0);
  weft_task *late;
  CO_EQ(rt_spawn(&late, WEFT_PLACE_PINNED, 1, waiter, &w), 0);
  CO_EQ(rt_join_int(late), 0);
  CO_CHECK(!weft_event_is_set(w.ev));
  /* reset drops a kept signal. */
  CO_EQ(weft_event_set(w.ev), 0);
  CO_EQ(weft_event_reset(w.ev), 0);
  CO_EQ(weft_event_wait_dl(w.ev, weft_now() - 1), -ETIMEDOUT);
  weft_event_destroy(w.ev);
  return NULL;
}

Test(sync, auto_reset_releases_one_per_set, .timeout = 20)
{
  rt_run(2, auto_main, NULL);
  rt_assert_clean();
}

/* ---- deadlines ------------------------------------------------------------------- */

static void check_deadlines(unsigned flags)
{
  weft_event *ev;
  CO_EQ(weft_event_create(&ev, flags), 0);
  CO_EQ(weft_event_wait_dl(ev, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_event_wait_dl(ev, 0), -ETIMEDOUT);
  int64_t dl = weft_now() + 2 * WEFT_MSEC;
  CO_EQ(weft_event_wait_dl(ev, dl), -ETIMEDOUT);
  CO_CHECK(weft_now() >= dl);
  CO_CHECK(!weft_event_is_set(ev));
  /* The event works as before. */
  CO_EQ(weft_event_set(ev), 0);
  CO_EQ(weft_event_wait_dl(ev, weft_now() + WEFT_SEC), 0);
  if (flags & WEFT_EVENT_AUTO_RESET)
    CO_EQ(weft_event_wait_dl(ev, weft_now() + 100 * WEFT_USEC), -ETIMEDOUT);
  else
    CO_EQ(weft_event_wait(ev), 0);
  weft_event_destroy(ev);
}

static void *deadline_main(void *arg)
{
  (void)arg;
  check_deadlines(0);
  check_deadlines(WEFT_EVENT_AUTO_RESET);
  return NULL;
}

Test(sync, wait_dl_times_out, .timeout = 20)
{
  rt_run(2, deadline_main, NULL);
  rt_assert_clean();
  /* And on a plain thread. */
  check_deadlines(0);
  check_deadlines(WEFT_EVENT_AUTO_RESET);
  rt_assert_clean();
}

/* ---- plain threads and coroutines ---------------------------------------------------- */

static void *set_event(void *arg)
{
  return (void *)(intptr_t)weft_event_set(arg);
}

static void *plain_waiter(void *arg)
{
  struct waiters *w = arg;
  atomic_store(&w->tids[atomic_fetch_add(&w->nthreads, 1)], rt_gettid());
  return waiter(arg);
}

struct pingpong {
  weft_event *ping, *pong;
  int rounds;
};

static void *pong_side(void *arg)
{
  struct pingpong *p = arg;
  for (int i = 0; i < p->rounds; i++) {
    CO_EQ(weft_event_wait(p->ping), 0);
    CO_EQ(weft_event_set(p->pong), 0);
  }
  return (void *)(intptr_t)p->rounds;
}

static void ping_side(struct pingpong *p)
{
  for (int i = 0; i < p->rounds; i++) {
    CO_EQ(weft_event_set(p->ping), 0);
    CO_EQ(weft_event_wait(p->pong), 0);
  }
}

Test(sync, plain_threads_and_coroutines_wake_each_other, .timeout = 45)
{
  weft_runtime *rt = rt_start(2);

  /* Plain threads wait (futex), a coroutine sets. */
  struct waiters w = {.deadline = WEFT_NO_DEADLINE};
  cr_assert_eq(weft_event_create(&w.ev, 0), 0);
  pthread_t th[3];
  for (int i = 0; i < 3; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, plain_waiter, &w), 0);
  cr_assert(RT_POLL(atomic_load(&w.arrived) == 3));
  for (int i = 0; i < 3; i++) /* each asleep in its futex: the set must wake it */
    cr_assert(RT_WAIT_IN_SYSCALL(atomic_load(&w.tids[i]), SYS_futex));
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, set_event, w.ev, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  for (int i = 0; i < 3; i++) {
    void *v = (void *)-1;
    pthread_join(th[i], &v);
    cr_assert_eq((intptr_t)v, 0);
  }
  cr_assert_eq(atomic_load(&w.released), 3);

  /* Coroutines wait, this plain thread sets. */
  weft_event_reset(w.ev);
  atomic_store(&w.arrived, 0);
  atomic_store(&w.released, 0);
  weft_task *ts[4];
  for (int i = 0; i < 4; i++)
    cr_assert_eq(weft_runtime_submit(rt, NULL, waiter, &w, &ts[i]), 0);
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 4));
  cr_assert_eq(weft_event_set(w.ev), 0);
  for (int i = 0; i < 4; i++) {
    void *v = (void *)-1;
    cr_assert_eq(weft_join(ts[i], &v), 0);
    cr_assert_eq((intptr_t)v, 0);
  }
  weft_event_destroy(w.ev);

  /* Auto-reset ping-pong: plain thread <-> coroutine on each shard. */
  struct pingpong p = {.rounds = 2000};
  cr_assert_eq(weft_event_create(&p.ping, WEFT_EVENT_AUTO_RESET), 0);
  cr_assert_eq(weft_event_create(&p.pong, WEFT_EVENT_AUTO_RESET), 0);
  for (int k = 0; k < 2; k++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_PINNED;
    o.shard = k;
    cr_assert_eq(weft_runtime_submit(rt, &o, pong_side, &p, &t), 0);
    ping_side(&p);
    void *v = NULL;
    cr_assert_eq(weft_join(t, &v), 0);
    cr_assert_eq((intptr_t)v, p.rounds);
    cr_assert(!weft_event_is_set(p.ping) && !weft_event_is_set(p.pong));
  }
  weft_event_destroy(p.ping);
  weft_event_destroy(p.pong);
  rt_assert_clean();
  rt_stop_idle(rt);
}

static void *ping_main(void *arg)
{
  struct pingpong *p = arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, pong_side, p), 0);
  ping_side(p);
  CO_EQ(rt_join_int(t), p->rounds);
  return NULL;
}

Test(sync, auto_reset_pingpong_across_shards, .timeout = 20)
{
  struct pingpong p = {.rounds = 20000};
  cr_assert_eq(weft_event_create(&p.ping, WEFT_EVENT_AUTO_RESET), 0);
  cr_assert_eq(weft_event_create(&p.pong, WEFT_EVENT_AUTO_RESET), 0);
  rt_run(2, ping_main, &p);
  rt_assert_clean();
  cr_assert(!weft_event_is_set(p.ping) && !weft_event_is_set(p.pong));
  weft_event_destroy(p.ping);
  weft_event_destroy(p.pong);
}

/* ---- errors ------------------------------------------------------------------------------ */

Test(sync, null_and_bad_arguments, .timeout = 20)
{
  weft_event *ev = (weft_event *)(void *)&ev;
  cr_assert_eq(weft_event_create(NULL, 0), -EINVAL);
  cr_assert_eq(weft_event_create(&ev, 0x2), -EINVAL);
  cr_assert_eq(weft_event_create(&ev, 0x80000000u | WEFT_EVENT_AUTO_RESET), -EINVAL);
  cr_assert_eq(ev, (weft_event *)(void *)&ev, "*ev written on failure");
  cr_assert_eq(weft_event_set(NULL), -EINVAL);
  cr_assert_eq(weft_event_reset(NULL), -EINVAL);
  cr_assert_eq(weft_event_wait(NULL), -EINVAL);
  cr_assert_eq(weft_event_wait_dl(NULL, weft_now() + WEFT_SEC), -EINVAL);
  cr_assert(!weft_event_is_set(NULL));
  weft_event_destroy(NULL);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int r = weft_event_create(&ev, 0);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  cr_assert_eq(r, -ENOMEM);
  cr_assert_eq(ev, (weft_event *)(void *)&ev, "*ev written on failure");
}

/* ---- cancellation ---------------------------------------------------------------------- */

struct cancel_case {
  weft_event *ev;
  int64_t deadline;
  atomic_int arrived;
};

static void *cancel_waiter(void *arg)
{
  struct cancel_case *c = arg;
  atomic_fetch_add(&c->arrived, 1);
  return (void *)(intptr_t)weft_event_wait_dl(c->ev, c->deadline);
}

/* Blocks a waiter in c->ev, cancels it (from this coroutine or thread),
 * checks -ECANCELED, then checks the event still hands out a set. */
static void cancel_one(weft_runtime *rt, struct cancel_case *c, int shard)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = shard;
  atomic_store(&c->arrived, 0);
  weft_task *t;
  CO_EQ(weft_runtime_submit(rt, &o, cancel_waiter, c, &t), 0);
  CO_CHECK(RT_POLL(atomic_load(&c->arrived) == 1));
  CO_CHECK(RT_POLL(rt_dump_count(rt, " waiting") == 1));
  CO_EQ(weft_cancel(t), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  /* The cancelled waiter left the queue: a set is kept for the next wait. */
  CO_EQ(weft_event_set(c->ev), 0);
  CO_CHECK(weft_event_is_set(c->ev));
  CO_EQ(weft_event_wait_dl(c->ev, weft_now() - 1), 0);
  CO_EQ(weft_event_reset(c->ev), 0);
}

static void cancel_all_kinds(weft_runtime *rt)
{
  for (unsigned flags = 0; flags <= WEFT_EVENT_AUTO_RESET; flags++)
    for (int with_dl = 0; with_dl < 2; with_dl++)
      for (int shard = 0; shard < 2; shard++) {
        struct cancel_case c = {.deadline = with_dl ? weft_now() + 60 * WEFT_SEC : -1};
        CO_EQ(weft_event_create(&c.ev, flags), 0);
        cancel_one(rt, &c, shard);
        weft_event_destroy(c.ev);
      }
}

static void *cancel_main(void *arg)
{
  (void)arg;
  cancel_all_kinds(weft_runtime_current());
  return NULL;
}

Test(sync, cancel_waiter_is_ecanceled, .timeout = 45)
{
  rt_run(2, cancel_main, NULL); /* cancelled by a coroutine */
  rt_assert_clean();
  weft_runtime *rt = rt_start(2); /* cancelled by a plain thread */
  cancel_all_kinds(rt);
  rt_assert_clean();
  rt_stop_idle(rt);
}

/* No memory for a deadline's timer (the shard's first timer allocates its
 * heap): every _dl wait is -ENOMEM, with nothing taken - and a condition
 * wait holds its mutex again, as on every return. */
static void *timer_enomem_main(void *arg)
{
  (void)arg;
  weft_event *ev;
  CO_EQ(weft_event_create(&ev, 0), 0);
  weft_mutex m = WEFT_MUTEX_INIT;
  weft_cond c = WEFT_COND_INIT;
  weft_sem sem = WEFT_SEM_INIT(0);
  weft_waitgroup wg = WEFT_WAITGROUP_INIT;
  CO_EQ(weft_waitgroup_add(&wg, 1), 0);
  int64_t later = weft_now() + WEFT_SEC;
#define NOMEM(call)                                                                             \
  do {                                                                                          \
    weft__fault_arm(WEFT__FAULT_MALLOC, 1);                                                    \
    CO_EQ(call, -ENOMEM);                                                                      \
    CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 0);                         \
    weft__fault_arm(WEFT__FAULT_MALLOC, 0);                                                    \
  } while (0)
  NOMEM(weft_event_wait_dl(ev, later));
  int64_t saved = weft_deadline_push(later); /* a scope's deadline needs the timer too */
  NOMEM(weft_event_wait(ev));
  weft_deadline_pop(saved);
  NOMEM(weft_sem_acquire_dl(&sem, later));
  NOMEM(weft_waitgroup_wait_dl(&wg, later));
  CO_EQ(weft_mutex_lock(&m), 0);
  NOMEM(weft_cond_wait_dl(&c, &m, later));
  CO_EQ(weft_mutex_trylock(&m), -EBUSY); /* held again, by us */
  CO_EQ(weft_mutex_unlock(&m), 0);
#undef NOMEM
  CO_EQ(weft_sem_value(&sem), 0);
  CO_EQ(weft_waitgroup_done(&wg), 0);
  weft_event_destroy(ev);
  return NULL;
}

Test(sync, deadline_without_memory_for_its_timer_is_enomem, .timeout = 20)
{
  rt_run(1, timer_enomem_main, NULL);
  rt_assert_clean();
}

/* A call that does not have to wait succeeds in a cancelled task (sync.h):
 * the cancel ends only waits - also past the deadline. */
static void *no_wait_when_cancelled(void *arg)
{
  (void)arg;
  weft_event *ev;
  CO_EQ(weft_event_create(&ev, 0), 0); /* manual reset */
  CO_EQ(weft_event_set(ev), 0);
  weft_mutex m = WEFT_MUTEX_INIT;
  weft_sem sem = WEFT_SEM_INIT(1);
  weft_waitgroup wg = WEFT_WAITGROUP_INIT;
  CO_EQ(weft_cancel(weft_task_self()), 0);
  CO_EQ(weft_event_wait(ev), 0);
  CO_EQ(weft_event_wait_dl(ev, weft_now() - 1), 0);
  CO_EQ(weft_mutex_lock(&m), 0);
  CO_EQ(weft_mutex_unlock(&m), 0);
  CO_EQ(weft_mutex_lock_dl(&m, weft_now() - 1), 0);
  CO_EQ(weft_mutex_unlock(&m), 0);
  CO_EQ(weft_sem_acquire(&sem), 0);
  CO_EQ(weft_waitgroup_wait(&wg), 0);
  /* And what would have to wait is -ECANCELED. */
  CO_EQ(weft_sem_acquire(&sem), -ECANCELED);
  weft_event_reset(ev);
  CO_EQ(weft_event_wait(ev), -ECANCELED);
  weft_event_destroy(ev);
  return NULL;
}

static void *no_wait_main(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, no_wait_when_cancelled, NULL), 0);
  CO_EQ(weft_join(t, NULL), -ECANCELED);
  return NULL;
}

Test(sync, calls_that_need_not_wait_succeed_in_a_cancelled_task, .timeout = 20)
{
  rt_run(1, no_wait_main, NULL);
  rt_assert_clean();
}

/* ---- a timeout racing a set ------------------------------------------------------------------
 * Each round the waiter publishes a deadline ~100 us ahead and waits on an
 * auto-reset event; the setter sets it at deadline + jitter (-50..+50 us).
 * Whichever wins, exactly one signal exists per round: if the wait returned
 * 0 it took it (nothing may be left), if it timed out the signal must still
 * be there for the next wait. */

#define RACE_ROUNDS 2000

struct race {
  weft_event *ev, *go, *done;
  _Atomic int64_t deadline;
  int takes, timeouts;
};

static void *race_waiter(void *arg)
{
  struct race *r = arg;
  for (int i = 0; i < RACE_ROUNDS; i++) {
    int64_t dl = weft_now() + 100 * WEFT_USEC;
    atomic_store(&r->deadline, dl);
    CO_EQ(weft_event_set(r->go), 0);
    int res = weft_event_wait_dl(r->ev, dl);
    CO_CHECK(res == 0 || res == -ETIMEDOUT);
    CO_EQ(weft_event_wait(r->done), 0); /* the setter's set has happened */
    if (res == 0) {
      r->takes++;
      CO_EQ(weft_event_wait_dl(r->ev, weft_now() - 1), -ETIMEDOUT); /* no second signal */
    } else {
      r->timeouts++;
      int again = weft_event_wait_dl(r->ev, weft_now() - 1);
      CO_EQ(again, 0); /* the signal was kept */
      r->takes += again == 0;
    }
  }
  return NULL;
}

static void *race_setter(void *arg)
{
  struct race *r = arg;
  uint32_t rnd = 12345;
  for (int i = 0; i < RACE_ROUNDS; i++) {
    CO_EQ(weft_event_wait(r->go), 0);
    rnd = rnd * 1103515245u + 12345u;
    int64_t jitter = (int64_t)((rnd >> 8) % 101) * WEFT_USEC - 50 * WEFT_USEC;
    int64_t at = atomic_load(&r->deadline) + jitter;
    while (weft_now() < at)
      ; /* land the set as close to the deadline as the clock allows */
    CO_EQ(weft_event_set(r->ev), 0);
    CO_EQ(weft_event_set(r->done), 0);
  }
  return NULL;
}

static void race_init(struct race *r)
{
  memset(r, 0, sizeof(*r));
  cr_assert_eq(weft_event_create(&r->ev, WEFT_EVENT_AUTO_RESET), 0);
  cr_assert_eq(weft_event_create(&r->go, WEFT_EVENT_AUTO_RESET), 0);
  cr_assert_eq(weft_event_create(&r->done, WEFT_EVENT_AUTO_RESET), 0);
}

static void race_check(struct race *r, const char *what)
{
  rt_assert_clean();
  cr_assert_eq(r->takes, RACE_ROUNDS, "%s: %d signals taken of %d set", what, r->takes,
               RACE_ROUNDS);
  cr_log_info("%s: %d rounds, %d timed out, %d took the signal", what, RACE_ROUNDS, r->timeouts,
              RACE_ROUNDS - r->timeouts);
  weft_event_destroy(r->ev);
  weft_event_destroy(r->go);
  weft_event_destroy(r->done);
}

Test(sync, timeout_racing_set_loses_no_signal, .timeout = 45)
{
  weft_runtime *rt = rt_start(2);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;

  /* Coroutine waiter on shard 1, coroutine setter on shard 0. */
  struct race r;
  race_init(&r);
  weft_task *tw, *ts;
  o.shard = 0;
  cr_assert_eq(weft_runtime_submit(rt, &o, race_setter, &r, &ts), 0);
  o.shard = 1;
  cr_assert_eq(weft_runtime_submit(rt, &o, race_waiter, &r, &tw), 0);
  cr_assert_eq(weft_join(tw, NULL), 0);
  cr_assert_eq(weft_join(ts, NULL), 0);
  race_check(&r, "coroutine waiter");

  /* Plain-thread waiter (futex timeout), coroutine setter. */
  race_init(&r);
  o.shard = 1;
  cr_assert_eq(weft_runtime_submit(rt, &o, race_setter, &r, &ts), 0);
  race_waiter(&r);
  cr_assert_eq(weft_join(ts, NULL), 0);
  race_check(&r, "plain-thread waiter");

  /* Coroutine waiter, plain-thread setter. */
  race_init(&r);
  cr_assert_eq(weft_runtime_submit(rt, &o, race_waiter, &r, &tw), 0);
  race_setter(&r);
  cr_assert_eq(weft_join(tw, NULL), 0);
  race_check(&r, "plain-thread setter");
  rt_stop_idle(rt);
}

/* ---- destroyed as soon as the wait returned ------------------------------------------------
 * A waiter may destroy the event once its wait returned (sync.h: "nobody
 * waits on it any more"), and so may a canceller of a token once its
 * weft_cancel_token_wait returned. A wait that was woken is completed by
 * the set() after it let go of the event, but one that found the event set
 * without waiting returns while the set() may still be inside, about to let
 * go of the event's lock: the destroy must not free the event under it.
 * The set() is held there (rt_publish_hold) while a plain thread waits and
 * destroys. */
static int wait_and_destroy(void *ev)
{
  int r = weft_event_wait(ev);
  weft_event_destroy(ev);
  return r;
}

static int token_wait_and_destroy(void *tok)
{
  int r = weft_cancel_token_wait(tok, WEFT_NO_DEADLINE);
  weft_cancel_token_destroy(tok);
  return r;
}

struct destroyer {
  int (*call)(void *);
  void *obj;
  int result;
  bool early;            /* destroyed while set() was still held */
};

static void *destroyer(void *arg)
{
  struct destroyer *d = arg;
  d->early = rt_call_while_held(d->call, d->obj, &d->result);
  return NULL;
}

static void destroy_while_set_held(const char *what, int (*call)(void *), void *obj,
                                   int (*set)(void *))
{
  struct destroyer d = {.call = call, .obj = obj, .result = -1};
  pthread_t th;
  rt_publish_hold();
  cr_assert_eq(pthread_create(&th, NULL, destroyer, &d), 0);
  cr_assert_eq(set(obj), 0);
  pthread_join(th, NULL);
  rt_publish_unhold();
  cr_expect(!d.early, "%s: destroyed while the set was still in its call", what);
  cr_expect_eq(d.result, 0, "%s: %d", what, d.result);
}

static int set_it(void *ev)
{
  return weft_event_set(ev);
}

static int cancel_token(void *tok)
{
  return weft_cancel_token_cancel(tok);
}

Test(sync, destroy_right_after_a_wait_that_need_not_wait, .timeout = 20)
{
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  destroy_while_set_held("manual reset", wait_and_destroy, ev, set_it);
  cr_assert_eq(weft_event_create(&ev, WEFT_EVENT_AUTO_RESET), 0);
  destroy_while_set_held("auto reset", wait_and_destroy, ev, set_it);
  weft_cancel_token *tok;
  cr_assert_eq(weft_cancel_token_create(&tok), 0);
  destroy_while_set_held("cancel token", token_wait_and_destroy, tok, cancel_token);
  rt_assert_no_leaks();
}
