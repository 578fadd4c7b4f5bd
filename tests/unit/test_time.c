/* SPDX-License-Identifier: MIT */
/*
 * Suite "time": sleeping, timer order on each shard, intervals (burst,
 * delay and skip after missed ticks, reset), resettable timers (earlier,
 * later, waiters on plain threads) and deadline scopes (nesting, and every
 * kind of blocking call ending with -ETIMEDOUT when its scope does).
 *
 * Timing is checked only where it is semantic (a sleep never ends before its
 * deadline; a scope's timeout comes before the call's own, much later,
 * deadline); the upper bounds are loose on purpose (the machine is noisy).
 */
#include "io_helpers.h"

#include "fault.h"
#include "timer.h"

/* ---- sleeping --------------------------------------------------------------------- */

static void *sleep_main(void *arg)
{
  (void)arg;
  for (int i = 0; i < 3; i++) {
    int64_t t0 = weft_now();
    CO_EQ(weft_sleep(10 * WEFT_MSEC), 0);
    int64_t dt = weft_now() - t0;
    CO_CHECK(dt >= 10 * WEFT_MSEC);
    CO_CHECK(dt < WEFT_SEC);
  }
  int64_t due = weft_now() + 5 * WEFT_MSEC;
  CO_EQ(weft_sleep_until(due), 0);
  CO_CHECK(weft_now() >= due);
  return NULL;
}

Test(time, sleep_takes_at_least_its_duration, .timeout = 30)
{
  rt_run(2, sleep_main, NULL);
  rt_assert_clean();
  /* A plain thread sleeps for real. */
  int64_t t0 = weft_now();
  cr_assert_eq(weft_sleep(10 * WEFT_MSEC), 0);
  cr_assert_geq(weft_now() - t0, 10 * WEFT_MSEC);
}

static void *zero_main(void *arg)
{
  (void)arg;
  /* Each returns at once, without suspending: the counter of switches of
   * this shard does not move. */
  weft_stats s0, s1;
  CO_EQ(weft_stats_get(NULL, 0, &s0), 0);
  CO_EQ(weft_sleep(0), 0);
  CO_EQ(weft_sleep(-1), 0);
  CO_EQ(weft_sleep(INT64_MIN), 0);
  CO_EQ(weft_sleep_until(weft_now() - WEFT_MSEC), 0);
  CO_EQ(weft_sleep_until(0), 0);
  CO_EQ(weft_sleep_until(-5), 0);
  CO_EQ(weft_stats_get(NULL, 0, &s1), 0);
  CO_EQ(s1.switches, s0.switches);
  return NULL;
}

Test(time, zero_negative_and_past_sleeps_return_at_once, .timeout = 30)
{
  rt_run(1, zero_main, NULL);
  rt_assert_clean();
  cr_assert_eq(weft_sleep(0), 0);
  cr_assert_eq(weft_sleep(-7), 0);
  cr_assert_eq(weft_sleep_until(weft_now() - WEFT_SEC), 0);
}

static void *sleep_forever(void *arg)
{
  atomic_int *started = arg;
  atomic_fetch_add(started, 1);
  return (void *)(intptr_t)weft_sleep(3600 * WEFT_SEC);
}

static void *cancel_sleep_main(void *arg)
{
  (void)arg;
  atomic_int started = 0;
  weft_task *t[2];
  for (int s = 0; s < 2; s++)
    CO_EQ(io_spawn_on(&t[s], s, sleep_forever, &started), 0);
  CO_CHECK(RT_POLL(atomic_load(&started) == 2));
  CO_CHECK(io_wait_suspended(2));
  for (int s = 0; s < 2; s++) {
    CO_EQ(weft_cancel(t[s]), 0);
    void *v = NULL;
    CO_EQ(weft_join(t[s], &v), -ECANCELED);
    CO_EQ((intptr_t)v, -ECANCELED);
  }
  return NULL;
}

Test(time, cancelled_sleep_returns_ecanceled, .timeout = 30)
{
  rt_run(2, cancel_sleep_main, NULL);
  rt_assert_clean();
}

/* A duration too long to add to "now" (INT64_MAX) is "for ever", not an
 * overflow that wraps to a deadline in the past (and returns at once). */
static void *sleep_huge(void *arg)
{
  atomic_int *started = arg;
  atomic_fetch_add(started, 1);
  return (void *)(intptr_t)weft_sleep(INT64_MAX);
}

static void *huge_main(void *arg)
{
  (void)arg;
  atomic_int started = 0;
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, sleep_huge, &started), 0);
  CO_CHECK(RT_POLL(atomic_load(&started) == 1));
  weft_sleep(5 * WEFT_MSEC);
  CO_EQ(weft_cancel(t), 0); /* -ESRCH if the sleep returned at once */
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  return NULL;
}

Test(time, sleep_of_int64_max_does_not_overflow, .timeout = 30)
{
  rt_run(2, huge_main, NULL);
  rt_assert_clean();
}

/* ---- order of many timers ----------------------------------------------------------- */

#define NT 1000

struct order_rec {
  int64_t deadline;
  int shard;
  int seq; /* wake order on its shard */
};

struct order {
  int64_t dur[NT];
  struct order_rec rec[NT];
  atomic_int seq[2];
};

static struct order *g_order;

static void *order_sleeper(void *arg)
{
  int i = (int)(intptr_t)arg;
  struct order_rec *r = &g_order->rec[i];
  r->deadline = weft_now() + g_order->dur[i];
  CO_EQ(weft_sleep_until(r->deadline), 0);
  r->shard = weft_shard_id();
  r->seq = atomic_fetch_add(&g_order->seq[r->shard], 1);
  CO_CHECK(weft_now() >= r->deadline);
  return NULL;
}

static int cmp_rec(const void *a, const void *b)
{
  const struct order_rec *x = a, *y = b;
  if (x->shard != y->shard)
    return x->shard - y->shard;
  return (x->deadline > y->deadline) - (x->deadline < y->deadline);
}

static void *order_main(void *arg)
{
  (void)arg;
  unsigned seed = 12345;
  for (int i = 0; i < NT; i++) /* 1 us .. 20 ms: every sleep arms a timer */
    g_order->dur[i] = 1000 + (int64_t)(rand_r(&seed) % (20 * 1000)) * 1000;
  weft_task **t = calloc(NT, sizeof(*t));
  CO_CHECK(t != NULL);
  for (int i = 0; i < NT; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_ROUND_ROBIN, -1, order_sleeper, (void *)(intptr_t)i), 0);
  for (int i = 0; i < NT; i++)
    CO_EQ(rt_join_int(t[i]), 0);
  free(t);
  return NULL;
}

Test(time, timers_fire_in_deadline_order_per_shard, .timeout = 60)
{
  g_order = calloc(1, sizeof(*g_order));
  cr_assert_not_null(g_order);
  rt_run(2, order_main, NULL);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&g_order->seq[0]) + atomic_load(&g_order->seq[1]), NT);
  cr_assert_gt(atomic_load(&g_order->seq[0]), 0);
  cr_assert_gt(atomic_load(&g_order->seq[1]), 0);
  /* Per shard, sorted by deadline: a strictly later deadline never woke
   * before an earlier one (equal deadlines may wake in either order). */
  qsort(g_order->rec, NT, sizeof(g_order->rec[0]), cmp_rec);
  int bad = 0;
  for (int i = 1; i < NT; i++) {
    struct order_rec *a = &g_order->rec[i - 1], *b = &g_order->rec[i];
    if (a->shard == b->shard && a->deadline < b->deadline && a->seq > b->seq)
      bad++;
  }
  cr_assert_eq(bad, 0, "%d pair(s) woke out of deadline order", bad);
  free(g_order);
}

/* ---- the timer heap itself ---------------------------------------------------------- */

#define HT 512

struct htimer {
  weft__timer tm;
  bool armed;  /* the model's view */
  int fired;
};

static int64_t ht_last_fired;
static int ht_order_errors;

static void ht_fire(weft__timer *t)
{
  struct htimer *h = (struct htimer *)(void *)t;
  if (t->deadline < ht_last_fired)
    ht_order_errors++;
  ht_last_fired = t->deadline;
  h->fired++;
}

/* Random arms (fresh and re-arms), cancels and runs against a plain model:
 * every run fires exactly the armed timers that are due, earliest first. */
Test(time, timer_heap_matches_a_model, .timeout = 30)
{
  weft__timer_heap heap;
  weft__timer_heap_init(&heap);
  static struct htimer t[HT];
  for (int i = 0; i < HT; i++)
    weft__timer_init(&t[i].tm, ht_fire);
  unsigned seed = 7;
  int64_t now = 0;
  for (int step = 0; step < 200000; step++) {
    int i = rand_r(&seed) % HT;
    switch (rand_r(&seed) % 4) {
    case 0:
    case 1:
      t[i].tm.deadline = now + rand_r(&seed) % 1000;
      cr_assert_eq(weft__timer_arm(&heap, &t[i].tm), 0);
      t[i].armed = true;
      break;
    case 2:
      weft__timer_cancel(&heap, &t[i].tm);
      t[i].armed = false;
      break;
    case 3: {
      now += rand_r(&seed) % 200;
      int due = 0;
      for (int k = 0; k < HT; k++) {
        t[k].fired = 0;
        due += t[k].armed && t[k].tm.deadline <= now;
      }
      ht_last_fired = INT64_MIN;
      cr_assert_eq(weft__timer_run(&heap, now), (unsigned)due);
      for (int k = 0; k < HT; k++) {
        bool should = t[k].armed && t[k].tm.deadline <= now;
        cr_assert_eq(t[k].fired, should ? 1 : 0, "timer %d at step %d", k, step);
        if (should)
          t[k].armed = false;
        cr_assert_eq(weft__timer_armed(&t[k].tm), t[k].armed);
      }
      break;
    }
    }
    int n = 0;
    int64_t min = -1;
    for (int k = 0; k < HT; k++)
      if (t[k].armed) {
        n++;
        if (min < 0 || t[k].tm.deadline < min)
          min = t[k].tm.deadline;
      }
    cr_assert_eq(heap.n, (uint32_t)n);
    cr_assert_eq(weft__timer_next(&heap), min);
  }
  cr_assert_eq(ht_order_errors, 0);
  weft__timer_heap_term(&heap);
}

/* ---- intervals ------------------------------------------------------------------ */

#define PERIOD (10 * WEFT_MSEC)

static void *interval_grid_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  int64_t t0 = weft_now() + PERIOD;
  CO_EQ(weft_interval_create(&iv, PERIOD, t0, WEFT_MISSED_BURST), 0);
  for (int k = 0; k < 4; k++) {
    CO_EQ(weft_interval_deadline(iv), t0 + k * PERIOD);
    CO_EQ(weft_interval_next(iv), 0);
    CO_CHECK(weft_now() >= t0 + k * PERIOD); /* never early */
  }
  weft_interval_destroy(iv);

  /* start <= 0: the first tick one period from now. */
  int64_t before = weft_now();
  CO_EQ(weft_interval_create(&iv, PERIOD, 0, WEFT_MISSED_SKIP), 0);
  int64_t after = weft_now();
  CO_CHECK(weft_interval_deadline(iv) >= before + PERIOD);
  CO_CHECK(weft_interval_deadline(iv) <= after + PERIOD);
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_ticks_on_its_grid, .timeout = 30)
{
  rt_run(1, interval_grid_main, NULL);
  rt_assert_clean();
}

/* Takes the first tick, then keeps the coroutine (and its shard) busy for
 * 3.5 periods; returns the first tick's deadline. */
static int64_t first_tick_then_busy(weft_interval *iv)
{
  int64_t t0 = weft_interval_deadline(iv);
  CO_EQ(weft_interval_next(iv), 0);
  io_busy(3 * PERIOD + PERIOD / 2);
  return t0;
}

static void *burst_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  CO_EQ(weft_interval_create(&iv, PERIOD, weft_now() + PERIOD, WEFT_MISSED_BURST), 0);
  int64_t t0 = first_tick_then_busy(iv);
  /* The missed ticks come back to back, each on the original grid. */
  int burst = 0;
  while (weft_interval_deadline(iv) <= weft_now()) {
    CO_EQ(weft_interval_deadline(iv), t0 + (burst + 1) * PERIOD);
    CO_EQ(weft_interval_next(iv), 0);
    burst++;
  }
  CO_CHECK(burst >= 3);
  /* Caught up: the next tick is the next grid point, in the future. */
  CO_EQ(weft_interval_deadline(iv), t0 + (burst + 1) * PERIOD);
  CO_EQ(weft_interval_next(iv), 0);
  CO_CHECK(weft_now() >= t0 + (burst + 1) * PERIOD);
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_burst_replays_missed_ticks_on_the_grid, .timeout = 30)
{
  rt_run(1, burst_main, NULL);
  rt_assert_clean();
}

static void *delay_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  CO_EQ(weft_interval_create(&iv, PERIOD, weft_now() + PERIOD, WEFT_MISSED_DELAY), 0);
  first_tick_then_busy(iv);
  CO_CHECK(weft_interval_deadline(iv) < weft_now()); /* due long ago */
  int64_t before = weft_now();
  CO_EQ(weft_interval_next(iv), 0);                  /* the late tick, at once */
  int64_t after = weft_now();
  /* The next one is a period after the late tick, off the old grid. */
  CO_CHECK(weft_interval_deadline(iv) >= before + PERIOD);
  CO_CHECK(weft_interval_deadline(iv) <= after + PERIOD);
  int64_t due = weft_interval_deadline(iv);
  CO_EQ(weft_interval_next(iv), 0);
  CO_CHECK(weft_now() >= due);
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_delay_restarts_from_the_late_tick, .timeout = 30)
{
  rt_run(1, delay_main, NULL);
  rt_assert_clean();
}

/* DELAY only changes the schedule after a missed tick (the coroutine was
 * busy past it, see weft/time.h): ticks taken on time - next() called
 * before they are due - stay on the grid, however late the shard's wake-up
 * is. A wake-up is always a little late, so a schedule computed from the
 * wake-up time drifts by that latency on every tick. */
/* One run of 4 ticks: 1 if every next() was called on time and the ticks
 * stayed on the grid, 0 if a wake-up came too late to say (a loaded machine
 * can delay one past a whole period: that is a missed tick, not this case). */
static int on_time_run(void)
{
  weft_interval *iv;
  int64_t t0 = weft_now() + PERIOD;
  CO_EQ(weft_interval_create(&iv, PERIOD, t0, WEFT_MISSED_DELAY), 0);
  int on_time = 1;
  for (int k = 0; k < 4 && on_time; k++) {
    if (weft_now() >= weft_interval_deadline(iv)) {
      on_time = 0;
      break;
    }
    CO_EQ(weft_interval_deadline(iv), t0 + k * PERIOD);
    CO_EQ(weft_interval_next(iv), 0);
  }
  weft_interval_destroy(iv);
  return on_time;
}

static void *delay_on_time_main(void *arg)
{
  (void)arg;
  int runs = 0;
  while (runs < 20 && !on_time_run())
    runs++;
  CO_CHECK(runs < 20); /* at least one run of 4 on-time ticks */
  return NULL;
}

Test(time, interval_delay_keeps_the_grid_when_on_time, .timeout = 30)
{
  rt_run(1, delay_on_time_main, NULL);
  rt_assert_clean();
}

/* Busy past one tick but not the next (half a period): that tick was
 * missed too ("the coroutine was busy past it", weft/time.h), so DELAY
 * restarts one period after the late tick rather than keeping the grid. */
static void *delay_half_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  CO_EQ(weft_interval_create(&iv, PERIOD, weft_now() + PERIOD, WEFT_MISSED_DELAY), 0);
  CO_EQ(weft_interval_next(iv), 0);
  int64_t due = weft_interval_deadline(iv);
  io_busy(due + PERIOD / 2 - weft_now()); /* to half a period past the tick */
  int64_t before = weft_now();
  CO_EQ(weft_interval_next(iv), 0);
  int64_t after = weft_now();
  CO_CHECK(weft_interval_deadline(iv) >= before + PERIOD);
  CO_CHECK(weft_interval_deadline(iv) <= after + PERIOD);
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_delay_after_a_half_period_late_tick, .timeout = 30)
{
  rt_run(1, delay_half_main, NULL);
  rt_assert_clean();
}

static void *skip_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  CO_EQ(weft_interval_create(&iv, PERIOD, weft_now() + PERIOD, WEFT_MISSED_SKIP), 0);
  int64_t t0 = first_tick_then_busy(iv);
  int64_t before = weft_now();
  CO_EQ(weft_interval_next(iv), 0); /* one late tick for all the missed ones */
  int64_t after = weft_now();
  int64_t due = weft_interval_deadline(iv);
  /* The next grid point after "now" (sampled inside the call). */
  CO_EQ((due - t0) % PERIOD, 0);
  CO_CHECK(due > before);
  CO_CHECK(due - PERIOD <= after);
  CO_CHECK(due >= t0 + 4 * PERIOD); /* 3.5 periods of busy: 3 ticks dropped */
  CO_EQ(weft_interval_next(iv), 0);
  CO_CHECK(weft_now() >= due);
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_skip_drops_missed_ticks, .timeout = 30)
{
  rt_run(1, skip_main, NULL);
  rt_assert_clean();
}

static void *reset_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  CO_EQ(weft_interval_create(&iv, PERIOD, weft_now() + 3600 * WEFT_SEC, WEFT_MISSED_BURST), 0);
  int64_t at = weft_now() + 2 * WEFT_MSEC;
  CO_EQ(weft_interval_reset(iv, at), 0);
  CO_EQ(weft_interval_deadline(iv), at);
  CO_EQ(weft_interval_next(iv), 0);
  CO_CHECK(weft_now() >= at);
  CO_EQ(weft_interval_deadline(iv), at + PERIOD);
  int64_t before = weft_now();
  CO_EQ(weft_interval_reset(iv, 0), 0); /* 0: one period from now */
  int64_t after = weft_now();
  CO_CHECK(weft_interval_deadline(iv) >= before + PERIOD);
  CO_CHECK(weft_interval_deadline(iv) <= after + PERIOD);
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_reset_moves_the_schedule, .timeout = 30)
{
  rt_run(1, reset_main, NULL);
  rt_assert_clean();
}

static void *interval_cancelled(void *arg)
{
  weft_interval *iv = arg;
  return (void *)(intptr_t)weft_interval_next(iv);
}

static void *interval_cancel_main(void *arg)
{
  (void)arg;
  weft_interval *iv;
  CO_EQ(weft_interval_create(&iv, 3600 * WEFT_SEC, 0, WEFT_MISSED_BURST), 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, interval_cancelled, iv), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  weft_interval_destroy(iv);
  return NULL;
}

Test(time, interval_wait_is_cancellable, .timeout = 30)
{
  rt_run(2, interval_cancel_main, NULL);
  rt_assert_clean();
}

Test(time, interval_on_a_plain_thread, .timeout = 30)
{
  weft_interval *iv;
  int64_t t0 = weft_now() + 2 * WEFT_MSEC;
  cr_assert_eq(weft_interval_create(&iv, 2 * WEFT_MSEC, t0, WEFT_MISSED_BURST), 0);
  for (int k = 0; k < 3; k++) {
    cr_assert_eq(weft_interval_next(iv), 0);
    cr_assert_geq(weft_now(), t0 + k * 2 * WEFT_MSEC);
  }
  weft_interval_destroy(iv);
}

Test(time, interval_and_timer_invalid_arguments, .timeout = 30)
{
  weft_interval *iv = NULL;
  cr_assert_eq(weft_interval_create(NULL, PERIOD, 0, WEFT_MISSED_BURST), -EINVAL);
  cr_assert_eq(weft_interval_create(&iv, 0, 0, WEFT_MISSED_BURST), -EINVAL);
  cr_assert_eq(weft_interval_create(&iv, -PERIOD, 0, WEFT_MISSED_BURST), -EINVAL);
  cr_assert_eq(weft_interval_create(&iv, PERIOD, 0, -1), -EINVAL);
  cr_assert_eq(weft_interval_create(&iv, PERIOD, 0, WEFT_MISSED_SKIP + 1), -EINVAL);
  cr_assert_null(iv);
  cr_assert_eq(weft_interval_next(NULL), -EINVAL);
  cr_assert_eq(weft_interval_reset(NULL, 0), -EINVAL);
  cr_assert_eq(weft_interval_deadline(NULL), WEFT_NO_DEADLINE);
  weft_interval_destroy(NULL);

  weft_timer *tm = NULL;
  cr_assert_eq(weft_timer_create(NULL, 0), -EINVAL);
  cr_assert_eq(weft_timer_wait(NULL), -EINVAL);
  cr_assert_eq(weft_timer_reset(NULL, 0), -EINVAL);
  cr_assert_eq(weft_timer_deadline(NULL), WEFT_NO_DEADLINE);
  cr_assert_null(tm);
  weft_timer_destroy(NULL);
}

/* ---- resettable timers ------------------------------------------------------------- */

struct tw {
  weft_timer *tm;
  atomic_int arrived;
  atomic_int_least64_t woke_at[4];
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
  weft_sleep(2 * WEFT_MSEC); /* let the thread reach its futex */
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

  /* Later: a waiter due in 5 ms is moved to 40 ms and waits that long. */
  struct tw w2 = {0};
  int64_t first = weft_now() + 5 * WEFT_MSEC;
  CO_EQ(weft_timer_create(&w2.tm, first), 0);
  CO_EQ(io_spawn_on(&t[0], 1, timer_waiter, &w2), 0);
  CO_CHECK(RT_POLL(atomic_load(&w2.arrived) == 1));
  int64_t later = first + 35 * WEFT_MSEC;
  CO_EQ(weft_timer_reset(w2.tm, later), 0);
  CO_EQ(rt_join_int(t[0]), 0);
  CO_CHECK(atomic_load(&w2.woke_at[0]) >= later);

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

static void *timer_by_coroutine(void *arg)
{
  weft_timer *tm = arg;
  weft_sleep(5 * WEFT_MSEC);
  return (void *)(intptr_t)weft_timer_reset(tm, weft_now());
}

Test(time, timer_waited_on_by_a_plain_thread, .timeout = 30)
{
  weft_runtime *rt = rt_start(1);
  weft_timer *tm;
  cr_assert_eq(weft_timer_create(&tm, WEFT_NO_DEADLINE), 0);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, timer_by_coroutine, tm, &t), 0);
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
