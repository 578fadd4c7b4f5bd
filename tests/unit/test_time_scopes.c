/* SPDX-License-Identifier: MIT */
/*
 * Suite "time", part 3 - resettable timers (moved earlier and later,
 * waiters on both shards and on plain threads), deadline scopes (nesting,
 * and every kind of blocking call ending with -ETIMEDOUT when its scope
 * does) and -ENOMEM from the timer heap, intervals and timers.
 */
#include "time_test.h"

/* ---- resettable timers ------------------------------------------------------------- */

struct tw {
  weft_timer *tm;
  atomic_int arrived;
  atomic_int_least64_t woke_at[4];
  _Atomic pid_t thread_tid; /* the plain thread waiter's */
};

static void *timer_waiter(void *arg)
{
  struct tw *w = arg;
  int i = atomic_fetch_add(&w->arrived, 1);
  int r = weft_timer_wait(w->tm);
  atomic_store(&w->woke_at[i], weft_now());
  return (void *)(intptr_t)r;
}

static void *thread_timer_waiter(void *arg)
{
  struct tw *w = arg;
  atomic_store(&w->thread_tid, rt_gettid());
  return timer_waiter(arg);
}

static void *timer_reset_main(void *arg)
{
  (void)arg;
  struct tw w = {0};
  /* Earlier: waiters of an hour-long timer (a coroutine on each shard and a
   * plain thread) are released when it is moved to "now + 2 ms". */
  CO_EQ(weft_timer_create(&w.tm, weft_now() + 3600 * WEFT_SEC), 0);
  weft_task *t[2];
  for (int s = 0; s < 2; s++)
    CO_EQ(io_spawn_on(&t[s], s, timer_waiter, &w), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, thread_timer_waiter, &w), 0);
  CO_CHECK(RT_POLL(atomic_load(&w.arrived) == 3));
  CO_CHECK(io_wait_suspended(2));
  CO_CHECK(RT_WAIT_IN_SYSCALL(atomic_load(&w.thread_tid), SYS_futex)); /* the thread waits */
  int64_t due = weft_now() + 2 * WEFT_MSEC;
  CO_EQ(weft_timer_reset(w.tm, due), 0);
  CO_EQ(weft_timer_deadline(w.tm), due);
  for (int s = 0; s < 2; s++)
    CO_EQ(rt_join_int(t[s]), 0);
  void *tv = (void *)-1;
  pthread_join(th, &tv);
  CO_EQ((intptr_t)tv, 0);
  for (int i = 0; i < 3; i++)
    CO_CHECK(atomic_load(&w.woke_at[i]) >= due);

  /* Later: a waiter due in 100 ms is moved 50 ms later and waits that
   * long. The move must come before the first due time: a round in which
   * this task was held up past it says nothing, and is run again. */
  struct tw w2 = {0};
  CO_EQ(weft_timer_create(&w2.tm, WEFT_NO_DEADLINE), 0);
  bool shown = false;
  for (int round = 0; round < 5 && !shown; round++) {
    int64_t first = weft_now() + 100 * WEFT_MSEC, later = first + 50 * WEFT_MSEC;
    CO_EQ(weft_timer_reset(w2.tm, first), 0);
    atomic_store(&w2.arrived, 0);
    CO_EQ(io_spawn_on(&t[0], 1, timer_waiter, &w2), 0);
    CO_CHECK(io_wait_suspended(1));
    CO_EQ(weft_timer_reset(w2.tm, later), 0);
    bool in_time = weft_now() < first;
    CO_EQ(rt_join_int(t[0]), 0);
    if (!in_time)
      continue;
    CO_CHECK(atomic_load(&w2.woke_at[0]) >= later);
    shown = true;
  }
  CO_CHECK(shown);

  /* A due timer does not block; a never-due one is cancellable. */
  CO_EQ(weft_timer_wait(w2.tm), 0);
  CO_EQ(weft_timer_reset(w2.tm, WEFT_NO_DEADLINE), 0);
  CO_EQ(weft_timer_deadline(w2.tm), WEFT_NO_DEADLINE);
  CO_EQ(io_spawn_on(&t[0], 1, timer_waiter, &w2), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t[0]), 0);
  void *v = NULL;
  CO_EQ(weft_join(t[0], &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  weft_timer_destroy(w.tm);
  weft_timer_destroy(w2.tm);
  return NULL;
}

Test(time, timer_reset_earlier_and_later, .timeout = 30)
{
  rt_run(2, timer_reset_main, NULL);
  rt_assert_clean();
}

struct reset_when_waited {
  weft_timer *tm;
  pid_t waiter; /* the plain thread that waits on tm */
};

static void *timer_by_coroutine(void *arg)
{
  struct reset_when_waited *r = arg;
  if (!RT_WAIT_IN_SYSCALL(r->waiter, SYS_futex))
    return (void *)(intptr_t)-1000; /* the thread never waited */
  return (void *)(intptr_t)weft_timer_reset(r->tm, weft_now());
}

Test(time, timer_waited_on_by_a_plain_thread, .timeout = 30)
{
  weft_runtime *rt = rt_start(1);
  weft_timer *tm;
  cr_assert_eq(weft_timer_create(&tm, WEFT_NO_DEADLINE), 0);
  weft_task *t;
  struct reset_when_waited r = {.tm = tm, .waiter = rt_gettid()};
  cr_assert_eq(weft_runtime_submit(rt, NULL, timer_by_coroutine, &r, &t), 0);
  cr_assert_eq(weft_timer_wait(tm), 0); /* the thread blocks until the reset */
  void *v = (void *)-1;
  cr_assert_eq(weft_join(t, &v), 0);
  cr_assert_eq((intptr_t)v, 0);
  /* A plain thread waiting for a deadline in the future. */
  int64_t due = weft_now() + 3 * WEFT_MSEC;
  cr_assert_eq(weft_timer_reset(tm, due), 0);
  cr_assert_eq(weft_timer_wait(tm), 0);
  cr_assert_geq(weft_now(), due);
  weft_timer_destroy(tm);
  rt_stop_idle(rt);
}

/* ---- deadline scopes ---------------------------------------------------------------- */

static void *scope_nest_main(void *arg)
{
  (void)arg;
  CO_EQ(weft_deadline(), WEFT_NO_DEADLINE);
  int64_t outer = weft_now() + WEFT_SEC;
  int64_t s0 = weft_deadline_push(outer);
  CO_EQ(s0, WEFT_NO_DEADLINE);
  CO_EQ(weft_deadline(), outer);
  int64_t s1 = weft_deadline_push(outer + 10 * WEFT_SEC); /* cannot extend */
  CO_EQ(s1, outer);
  CO_EQ(weft_deadline(), outer);
  int64_t s2 = weft_deadline_push(WEFT_NO_DEADLINE); /* nor remove */
  CO_EQ(weft_deadline(), outer);
  int64_t inner = outer - 500 * WEFT_MSEC;
  int64_t s3 = weft_deadline_push(inner);
  CO_EQ(weft_deadline(), inner);
  weft_deadline_pop(s3);
  CO_EQ(weft_deadline(), outer);
  weft_deadline_pop(s2);
  weft_deadline_pop(s1);
  CO_EQ(weft_deadline(), outer);
  weft_deadline_pop(s0);
  CO_EQ(weft_deadline(), WEFT_NO_DEADLINE);
  return NULL;
}

Test(time, deadline_scopes_nest, .timeout = 30)
{
  rt_run(1, scope_nest_main, NULL);
  rt_assert_clean();
  /* On a plain thread they do nothing. */
  cr_assert_eq(weft_deadline_push(weft_now() + WEFT_MSEC), WEFT_NO_DEADLINE);
  cr_assert_eq(weft_deadline(), WEFT_NO_DEADLINE);
  weft_deadline_pop(weft_now());
  cr_assert_eq(weft_deadline(), WEFT_NO_DEADLINE);
  cr_assert_eq(weft_sleep(WEFT_MSEC), 0);
}

/* Runs `call` in a 20 ms scope and checks that it timed out, well before
 * the hour it would otherwise take, and that the scope is gone after pop. */
#define IN_SCOPE(call)                                                                        \
  do {                                                                                        \
    int64_t t0_ = weft_now();                                                                 \
    int64_t saved_ = weft_deadline_push(t0_ + 20 * WEFT_MSEC);                                \
    long long r_ = (long long)(call);                                                         \
    int64_t t1_ = weft_now();                                                                 \
    weft_deadline_pop(saved_);                                                                \
    CO_EQ(r_, -ETIMEDOUT);                                                                    \
    CO_CHECK(t1_ >= t0_ + 20 * WEFT_MSEC);                                                    \
    CO_CHECK(t1_ < t0_ + 30 * WEFT_SEC);                                                      \
    CO_EQ(weft_deadline(), WEFT_NO_DEADLINE);                                                 \
  } while (0)

static void *scope_calls_main(void *arg)
{
  (void)arg;
  weft_event *ev;
  CO_EQ(weft_event_create(&ev, 0), 0);
  int p[2];
  CO_EQ(io_pipe(p), 0);
  char buf[8];
  IN_SCOPE(weft_sleep(3600 * WEFT_SEC));
  IN_SCOPE(weft_sleep_until(weft_now() + 3600 * WEFT_SEC));
  IN_SCOPE(weft_event_wait(ev));
  IN_SCOPE(weft_event_wait_dl(ev, weft_now() + 3600 * WEFT_SEC));
  IN_SCOPE(weft_read(p[0], buf, sizeof(buf)));
  IN_SCOPE(weft_read_dl(p[0], buf, sizeof(buf), weft_now() + 3600 * WEFT_SEC));

  /* The read was cancelled for real: the pipe still works, nothing lost. */
  CO_EQ(weft_write(p[1], "xyz", 3), 3);
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), 3);
  CO_CHECK(memcmp(buf, "xyz", 3) == 0);

  /* A call's own earlier deadline still wins inside a scope. */
  int64_t saved = weft_deadline_push(weft_now() + 3600 * WEFT_SEC);
  CO_EQ(weft_event_wait_dl(ev, weft_now() + 2 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_sleep(2 * WEFT_MSEC), 0); /* a sleep inside a longer scope */
  weft_deadline_pop(saved);

  /* A scope that has already passed: every blocking call times out at once. */
  saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(weft_sleep(WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_event_wait(ev), -ETIMEDOUT);
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), -ETIMEDOUT);
  CO_EQ(weft_nop(), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_EQ(weft_nop(), 0);

  io_close_pipe(p);
  weft_event_destroy(ev);
  return NULL;
}

Test(time, blocking_calls_time_out_with_their_scope, .timeout = 60)
{
  rt_run(2, scope_calls_main, NULL);
  rt_assert_clean();
}

static void *scope_interval_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  CO_EQ(weft_interval_create(&iv, 3600 * WEFT_SEC, 0, WEFT_MISSED_BURST), 0);
  int64_t due = weft_interval_deadline(iv);
  IN_SCOPE(weft_interval_next(iv));
  CO_EQ(weft_interval_deadline(iv), due); /* the tick was not consumed */
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_next_times_out_with_its_scope, .timeout = 30)
{
  rt_run(1, scope_interval_main, NULL);
  rt_assert_clean();
}

/* A resettable timer's wait is a blocking call like any other: inside a
 * scope it must end with -ETIMEDOUT when the scope does. (The wait loops to
 * re-read the deadline after each wake-up, and must not treat the scope's
 * timeout as one of those.) */
static void *scope_timer_main(void *arg)
{
  (void)arg;
  weft_timer *tm;
  CO_EQ(weft_timer_create(&tm, weft_now() + 3600 * WEFT_SEC), 0);
  IN_SCOPE(weft_timer_wait(tm));
  weft_timer_destroy(tm);
  return NULL;
}

Test(time, timer_wait_times_out_with_its_scope, .timeout = 15)
{
  rt_run(1, scope_timer_main, NULL);
  rt_assert_clean();
}

/* ---- out of memory --------------------------------------------------------------- */

static void *oom_sleep_main(void *arg)
{
  (void)arg;
  /* The shard's timer heap is empty and has no array yet: arming the first
   * timer allocates it. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_sleep(WEFT_MSEC), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(weft_sleep(WEFT_MSEC), 0);
  return NULL;
}

/* Inside a deadline scope, a wait with no deadline of its own needs a
 * timer for the scope's: without memory for it, -ENOMEM - and, as with
 * weft_join_dl, a join's handle is still the caller's. */
static void *hold_main(void *arg)
{
  return (void *)(intptr_t)weft_cancel_token_wait(arg, WEFT_NO_DEADLINE);
}

static void *oom_scope_main(void *arg)
{
  (void)arg;
  weft_cancel_token *tok;
  CO_EQ(weft_cancel_token_create(&tok), 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, hold_main, tok), 0);
  weft_group *g;
  CO_EQ(weft_group_create(&g), 0);
  CO_EQ(weft_group_spawn(g, NULL, hold_main, tok), 0);
  int64_t saved = weft_deadline_push(weft_now() + 3600 * WEFT_SEC);
  /* The shard's timer heap has no array yet: arming a timer allocates. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int rj = weft_join(t, NULL);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int rg = weft_group_wait(g);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  weft_deadline_pop(saved);
  CO_EQ(rj, -ENOMEM);
  CO_EQ(rg, -ENOMEM);
  CO_EQ(weft_cancel_token_cancel(tok), 0);
  CO_EQ(weft_join(t, NULL), 0); /* the handle was still ours */
  CO_EQ(weft_group_destroy(g), 0);
  weft_cancel_token_destroy(tok);
  return NULL;
}

Test(time, scope_without_memory_for_its_timer, .timeout = 30)
{
  rt_run(1, oom_scope_main, NULL);
  rt_assert_clean();
}

Test(time, out_of_memory, .timeout = 30)
{
  weft_interval *iv = NULL;
  weft_timer *tm = NULL;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  cr_assert_eq(weft_interval_create(&iv, PERIOD, 0, WEFT_MISSED_BURST), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  cr_assert_eq(weft_timer_create(&tm, 0), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  cr_assert_null(iv);
  cr_assert_null(tm);
  rt_run(1, oom_sleep_main, NULL);
  rt_assert_clean();
}
