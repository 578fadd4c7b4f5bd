/* SPDX-License-Identifier: MIT */
/*
 * The adaptive spin window (weft_config.spin_ns .. spin_max_ns): work that
 * keeps coming back a little after the shard would have gone to sleep (here:
 * a task's own short sleeps) makes the window grow, so the shard stops
 * paying a sleep and a wake-up per gap; an idle runtime still goes to sleep.
 */
#include "rt_helpers.h"

#include <sys/resource.h>
#include <unistd.h>

#define ROUNDS 300
#define BASE_US 40 /* spin_ns */
#define GAP_US 50  /* a timer this far ahead: longer than the base window,
                      shorter than a doubled one */

static double process_cpu_ms(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* The only task sleeps GAP_US, ROUNDS times: each time the shard polls
 * for its window and then (if the window ends before the timer) sleeps in
 * the kernel until the timer. The gaps are the shard's own timers, so a
 * slow build (sanitizers) does not change them. */
static void *sleeper(void *arg)
{
  (void)arg;
  for (int i = 0; i < ROUNDS; i++)
    CO_EQ(weft_sleep(GAP_US * WEFT_USEC), 0);
  return NULL;
}

/* Returns the shard's sleeps in the kernel over the rounds. */
static uint64_t parks_over_gaps(int64_t spin_ns, int64_t spin_max_ns, weft_runtime **keep)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.spin_ns = spin_ns;
  c.spin_max_ns = spin_max_ns;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_stats before, after;
  cr_assert_eq(weft_stats_get(rt, 0, &before), 0);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, sleeper, NULL, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  cr_assert_eq(weft_stats_get(rt, 0, &after), 0);
  if (keep)
    *keep = rt;
  else
    rt_stop_idle(rt);
  return after.parks - before.parks;
}

Test(runtime, spin_window_grows_when_work_comes_back_soon, .timeout = 60)
{
  uint64_t fixed = parks_over_gaps(BASE_US * WEFT_USEC, BASE_US * WEFT_USEC, NULL);
  weft_runtime *rt;
  uint64_t adaptive = parks_over_gaps(BASE_US * WEFT_USEC, 10 * WEFT_MSEC, &rt);
  /* Fixed: every gap outlasts the window. Adaptive: after a doubling the
   * window covers the gaps and the shard polls through them (1 sleep in
   * 300 here, also under ASan or with both CPUs loaded; a preempted wake-up
   * may look like a long sleep and halve the window again, hence only
   * "a quarter" is asserted). */
  cr_log_info("sleeps over %d gaps: fixed window %llu, adaptive %llu", ROUNDS,
              (unsigned long long)fixed, (unsigned long long)adaptive);
  cr_assert_gt(fixed, ROUNDS / 2, "fixed window: only %llu sleeps in %d gaps",
               (unsigned long long)fixed, ROUNDS);
  cr_assert_lt(adaptive * 4, fixed, "adaptive window: %llu sleeps, fixed: %llu",
               (unsigned long long)adaptive, (unsigned long long)fixed);

  /* Idle now: the shard spins out its (grown) window once, at most 10 ms,
   * and sleeps. A shard that kept spinning would use the whole 200 ms. */
  double cpu0 = process_cpu_ms();
  usleep(200 * 1000);
  double used = process_cpu_ms() - cpu0;
  cr_assert_lt(used, 100.0, "%.1f ms of CPU in 200 ms of idleness", used);
  rt_stop_idle(rt);
  rt_assert_clean();
}

Test(runtime, spin_ns_zero_never_spins_whatever_spin_max_ns, .timeout = 30)
{
  /* spin_ns 0 means sleep at once: the window never grows from zero, so
   * every gap is a sleep. Nearly every gap is one (a window that grew would
   * leave few). */
  cr_assert_geq(parks_over_gaps(0, 10 * WEFT_MSEC, NULL), ROUNDS / 2);
  rt_assert_clean();
}
