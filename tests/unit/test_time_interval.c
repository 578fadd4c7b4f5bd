/* SPDX-License-Identifier: MIT */
/*
 * Suite "time", part 2 - intervals: ticks on their grid, what happens after
 * missed ticks (burst, delay, skip), reset, cancellation, plain threads,
 * and the argument errors of intervals and resettable timers.
 */
#include "time_test.h"

/* ---- intervals ------------------------------------------------------------------ */

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

/* Periods as long as int64_t allows: the next tick saturates at INT64_MAX
 * (never) instead of wrapping to the past, where every wait returned at
 * once. */
static void *huge_period_main(void *arg)
{
  (void)arg;
  for (int missed = WEFT_MISSED_BURST; missed <= WEFT_MISSED_SKIP; missed++) {
    weft_interval *iv;
    CO_EQ(weft_interval_create(&iv, INT64_MAX, 0, missed), 0);
    CO_EQ(weft_interval_deadline(iv), INT64_MAX);
    int64_t saved = weft_deadline_push(weft_now() + 20 * WEFT_MSEC);
    CO_EQ(weft_interval_next(iv), -ETIMEDOUT); /* the scope ends the wait */
    weft_deadline_pop(saved);
    CO_EQ(weft_interval_reset(iv, 0), 0);
    CO_EQ(weft_interval_deadline(iv), INT64_MAX);
    /* A tick now, the next one a huge period later: still not in the past. */
    CO_EQ(weft_interval_reset(iv, weft_now()), 0);
    CO_EQ(weft_interval_next(iv), 0);
    CO_EQ(weft_interval_deadline(iv), INT64_MAX);
    weft_interval_destroy(iv);
  }
  return NULL;
}

Test(time, interval_with_a_huge_period_never_ticks_again, .timeout = 30)
{
  rt_run(1, huge_period_main, NULL);
  rt_assert_clean();
}
