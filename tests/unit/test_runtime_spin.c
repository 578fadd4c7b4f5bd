/* SPDX-License-Identifier: MIT */
/*
 * The adaptive spin window (weft_config.spin_ns .. spin_max_ns): work that
 * keeps coming back a little after the shard went to sleep (here: a task's
 * own short sleeps) makes the window grow, so the shard stops paying a
 * sleep and a wake-up per gap; a fixed window (spin_max_ns == spin_ns) and a
 * zero one never grow; an idle runtime still goes to sleep. The window is
 * read from the shard (its largest value so far): what it buys in sleeps
 * and CPU time is the benchmarks' to measure, not a unit test's.
 */
#include "rt_internal.h"

#define ROUNDS 300
#define BASE_US 40 /* spin_ns */
#define GAP_US 50  /* a timer this far ahead: longer than the base window,
                      shorter than a doubled one */

/* The only task sleeps GAP_US, ROUNDS times: each time the shard polls
 * for its window and then (if the window ends before the timer) sleeps in
 * the kernel until the timer - a sleep shorter than the window, which
 * doubles it. */
static void *sleeper(void *arg)
{
  (void)arg;
  for (int i = 0; i < ROUNDS; i++)
    CO_EQ(weft_sleep(GAP_US * WEFT_USEC), 0);
  return NULL;
}

/* Runs the sleeper on a 1-shard runtime with this window; returns the
 * largest window the shard had, and leaves the runtime in *keep. */
static int64_t peak_window_over_gaps(int64_t spin_ns, int64_t spin_max_ns, weft_runtime **keep)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.spin_ns = spin_ns;
  c.spin_max_ns = spin_max_ns;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, sleeper, NULL, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  *keep = rt;
  return atomic_load(&rt->shards[0].spin_window_peak);
}

Test(runtime, spin_window_grows_when_work_comes_back_soon, .timeout = 60)
{
  weft_runtime *rt;
  int64_t fixed = peak_window_over_gaps(BASE_US * WEFT_USEC, BASE_US * WEFT_USEC, &rt);
  cr_assert_eq(fixed, BASE_US * WEFT_USEC, "a fixed window grew to %lld ns", (long long)fixed);
  rt_stop_idle(rt);
  int64_t grown = peak_window_over_gaps(BASE_US * WEFT_USEC, 10 * WEFT_MSEC, &rt);
  cr_assert_geq(grown, GAP_US * WEFT_USEC, "the window grew only to %lld ns over gaps of %d us",
                (long long)grown, GAP_US);
  cr_assert_leq(grown, 10 * WEFT_MSEC);
  /* Idle now: the shard spins out its (grown) window once and sleeps. */
  cr_assert(rt_wait_parked(rt, 0), "the shard never went to sleep");
  rt_stop_idle(rt);
  rt_assert_clean();
}

Test(runtime, spin_ns_zero_never_spins_whatever_spin_max_ns, .timeout = 30)
{
  /* spin_ns 0 means sleep at once: the window never grows from zero. */
  weft_runtime *rt;
  cr_assert_eq(peak_window_over_gaps(0, 10 * WEFT_MSEC, &rt), 0);
  cr_assert(rt_wait_parked(rt, 0), "the shard never went to sleep");
  rt_stop_idle(rt);
  rt_assert_clean();
}
