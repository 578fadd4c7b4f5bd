/* SPDX-License-Identifier: MIT */
/*
 * The adaptive spin window (weft_config.spin_ns .. spin_max_ns): work that
 * keeps coming back a little after the shard would have gone to sleep makes
 * the window grow, so the shard stops paying a sleep and a wake-up per gap;
 * an idle runtime still goes to sleep.
 */
#include "rt_helpers.h"

#include <sys/resource.h>
#include <unistd.h>

#define ROUNDS 300
#define BASE_US 40 /* spin_ns */
#define GAP_US 60  /* between 1 and 2 base windows */

static void *nothing(void *arg)
{
  return arg;
}

static double process_cpu_ms(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* Busy-waits: usleep() would add tens of microseconds of its own. */
static void gap(void)
{
  int64_t until = weft_now() + GAP_US * WEFT_USEC;
  while (weft_now() < until)
    ;
}

/* A plain thread hands the runtime one trivial task, waits for it, and
 * waits GAP_US more: each gap outlasts the base window but not two of them,
 * the gap a doubled window covers. Returns the shard's sleeps. */
static uint64_t parks_over_gaps(int64_t spin_max_ns, weft_runtime **keep)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.spin_ns = BASE_US * WEFT_USEC;
  c.spin_max_ns = spin_max_ns;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_stats before, after;
  cr_assert_eq(weft_stats_get(rt, 0, &before), 0);
  for (int i = 0; i < ROUNDS; i++) {
    weft_task *t;
    cr_assert_eq(weft_runtime_submit(rt, NULL, nothing, NULL, &t), 0);
    cr_assert_eq(weft_join(t, NULL), 0);
    gap();
  }
  cr_assert_eq(weft_stats_get(rt, 0, &after), 0);
  if (keep)
    *keep = rt;
  else
    rt_stop_idle(rt);
  return after.parks - before.parks;
}

Test(runtime, spin_window_grows_when_work_comes_back_soon, .timeout = 60)
{
  uint64_t fixed = parks_over_gaps(BASE_US * WEFT_USEC, NULL);
  weft_runtime *rt;
  uint64_t adaptive = parks_over_gaps(10 * WEFT_MSEC, &rt);
  /* Fixed: nearly every gap outlasts the window. Adaptive: after a
   * doubling the window covers the gaps (on a quiet machine almost no sleep
   * is left; on a loaded one, a preempted wake-up looks like a long sleep
   * and halves the window again, so only "clearly fewer" is asserted). */
  cr_assert_gt(fixed, ROUNDS / 2, "fixed window: only %llu sleeps in %d gaps",
               (unsigned long long)fixed, ROUNDS);
  cr_assert_lt(adaptive * 10, fixed * 9, "adaptive window: %llu sleeps, fixed: %llu",
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
   * every gap is a sleep. */
  weft_config c;
  rt_cfg(&c, 1);
  c.spin_ns = 0;
  c.spin_max_ns = 10 * WEFT_MSEC;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_stats before, after;
  cr_assert_eq(weft_stats_get(rt, 0, &before), 0);
  for (int i = 0; i < 50; i++) {
    weft_task *t;
    cr_assert_eq(weft_runtime_submit(rt, NULL, nothing, NULL, &t), 0);
    cr_assert_eq(weft_join(t, NULL), 0);
    gap();
  }
  cr_assert_eq(weft_stats_get(rt, 0, &after), 0);
  /* Nearly every gap is a sleep (a window that grew would leave few). */
  cr_assert_geq(after.parks - before.parks, 25);
  rt_stop_idle(rt);
  rt_assert_clean();
}
