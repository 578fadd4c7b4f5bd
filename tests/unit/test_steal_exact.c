/* SPDX-License-Identifier: MIT */
/*
 * Suite "steal", part 5 - the exact accounting: no task lost or run twice
 * under heavy concurrent spawning and stealing, shutdown with stealable
 * tasks still queued (each one cancelled, or each one finished before a
 * clean stop), and the steal counters with the ratios derived from them.
 */
#include "steal_test.h"

/* ---- nothing lost, nothing run twice ------------------------------------------------------------- */

#define SPAWNERS 4
#define PER_SPAWNER 20000
#define ALL_TASKS (SPAWNERS * PER_SPAWNER)

static atomic_int runs[ALL_TASKS];
static atomic_int returned;

static void *counted(void *arg)
{
  int i = (int)(intptr_t)arg;
  atomic_fetch_add(&runs[i], 1);
  if (i % 2) /* half of them move after having started, too */
    CO_EQ(weft_yield(), 0);
  atomic_fetch_add(&returned, 1);
  return NULL;
}

static void *spawner(void *arg)
{
  int base = (int)(intptr_t)arg * PER_SPAWNER;
  for (int i = 0; i < PER_SPAWNER; i++) {
    int r = rt_spawn(NULL, WEFT_PLACE_STEALABLE, -1, counted, (void *)(intptr_t)(base + i));
    CO_EQ(r, 0);
    if (i % 64 == 63)
      CO_EQ(weft_yield(), 0);
  }
  return NULL;
}

static void *exact_main(void *arg)
{
  (void)arg;
  weft_task *t[SPAWNERS];
  /* Spawning on both shards, three times as much on shard 0: shard 1 runs
   * out first and must steal, however the two threads are scheduled. */
  for (int i = 0; i < SPAWNERS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_PINNED, i == SPAWNERS - 1 ? 1 : 0, spawner,
                   (void *)(intptr_t)i), 0);
  for (int i = 0; i < SPAWNERS; i++)
    rt_join_int(t[i]);
  CO_CHECK(RT_POLL(atomic_load(&returned) == ALL_TASKS));
  stats_now(st_end);
  return NULL;
}

Test(steal, no_task_lost_or_run_twice_under_concurrent_spawn_and_steal, .timeout = 120)
{
  weft_config c;
  steal_cfg(&c);
  c.stack_size = 64 * 1024;
  run_cfg(&c, exact_main, NULL);
  long long sum = 0;
  int bad = -1;
  for (int i = 0; i < ALL_TASKS; i++) {
    int v = atomic_load(&runs[i]);
    sum += v;
    if (v != 1 && bad < 0)
      bad = i;
  }
  cr_assert_eq(bad, -1, "task %d ran %d times", bad, bad >= 0 ? atomic_load(&runs[bad]) : 0);
  cr_assert_eq(sum, ALL_TASKS);
  cr_assert_eq(atomic_load(&returned), ALL_TASKS);
  /* main + its 4 spawners + the tasks. */
  cr_assert_eq(st_end[NSHARDS].spawned, ALL_TASKS + SPAWNERS + 1);
  cr_assert_gt(st_end[NSHARDS].steal_success, 0);
}

/* ---- shutdown with tasks still queued ------------------------------------------------------------ */

#define SLEEPERS 5000

static atomic_int sleepers_started, sleepers_cancelled, sleepers_other;

static void *sleeper(void *arg)
{
  int64_t ns = (int64_t)(intptr_t)arg;
  atomic_fetch_add(&sleepers_started, 1);
  int r = weft_sleep(ns);
  atomic_fetch_add(r == -ECANCELED ? &sleepers_cancelled : &sleepers_other, 1);
  if (r == 0)
    atomic_fetch_add(&returned, 1);
  return NULL;
}

static void *spawn_sleepers(void *arg)
{
  for (int i = 0; i < SLEEPERS; i++)
    CO_EQ(rt_spawn(NULL, WEFT_PLACE_STEALABLE, -1, sleeper, arg), 0);
  return NULL;
}

Test(steal, run_returns_while_stealable_tasks_are_queued, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  /* main returns at once; the sleepers are still in the stealable queues
   * (or spilled, or asleep): the stop cancels them all. */
  run_cfg(&c, spawn_sleepers, (void *)(intptr_t)(60 * 1000 * WEFT_MSEC));
  int started = atomic_load(&sleepers_started);
  cr_assert_leq(started, SLEEPERS);
  cr_assert_eq(atomic_load(&sleepers_cancelled), started,
               "%d started, %d cancelled, %d other", started, atomic_load(&sleepers_cancelled),
               atomic_load(&sleepers_other));
  cr_assert_eq(atomic_load(&sleepers_other), 0);
  rt_assert_no_leaks();
}

Test(steal, stealable_sleepers_all_finish_before_a_clean_stop, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  weft_runtime *rt = rt_start_cfg(&c);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 0;
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, &o, spawn_sleepers, (void *)(intptr_t)WEFT_MSEC, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  rt_stop_idle(rt); /* polls live == 0, asserts it, stops */
  rt_assert_clean();
  cr_assert_eq(atomic_load(&sleepers_started), SLEEPERS);
  cr_assert_eq(atomic_load(&returned), SLEEPERS);
  cr_assert_eq(atomic_load(&sleepers_cancelled), 0);
  rt_assert_no_leaks();
}

/* ---- derived stats ---------------------------------------------------------------------------------- */

static double ratio(uint64_t a, uint64_t b)
{
  return b ? (double)a / (double)b : 0.0;
}

static void check_derived(const weft_stats *s, unsigned batch)
{
  cr_assert_eq(s->local_hit_ratio, ratio(s->steal_local_hits, s->steal_local_hits + s->steal_success),
               "shard %d", s->shard);
  /* The success rate is the share of probes that took a batch. */
  cr_assert_eq(s->steal_success_rate, ratio(s->steal_takes, s->steal_attempts), "shard %d",
               s->shard);
  cr_assert_leq(s->steal_takes, s->steal_scans, "shard %d", s->shard);
  cr_assert(s->steal_success_rate <= 1.0, "shard %d: %f", s->shard, s->steal_success_rate);
  cr_assert_eq(s->stolen_per_scan, ratio(s->steal_success, s->steal_scans), "shard %d", s->shard);
  cr_assert(s->local_hit_ratio >= 0.0 && s->local_hit_ratio <= 1.0, "shard %d: %f", s->shard,
            s->local_hit_ratio);
  cr_assert(s->stolen_per_scan >= 0.0, "shard %d", s->shard);
  /* A scan takes at most one batch. */
  cr_assert_leq(s->steal_success, (uint64_t)batch * s->steal_scans, "shard %d", s->shard);
  cr_assert_leq(s->steal_scans, s->steal_attempts, "shard %d", s->shard);
  cr_assert(s->steal_success_rate >= 0.0, "shard %d", s->shard);
}

Test(steal, derived_ratios_match_the_counters, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, spread_main, NULL);
  cr_assert_gt(st_end[NSHARDS].steal_success, 0);
  for (int i = 0; i <= NSHARDS; i++)
    check_derived(&st_end[i], c.steal_batch);
  /* The sum is the sum. */
  cr_assert_eq(st_end[NSHARDS].steal_success, st_end[0].steal_success + st_end[1].steal_success);
  cr_assert_eq(st_end[NSHARDS].steal_attempts,
               st_end[0].steal_attempts + st_end[1].steal_attempts);
}

Test(steal, batch_one_takes_one_task_per_scan, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_batch = 1;
  run_cfg(&c, spread_main, NULL);
  cr_assert_gt(st_end[1].steal_success, 0);
  cr_assert_leq(st_end[1].steal_success, st_end[1].steal_scans);
  cr_assert(st_end[1].stolen_per_scan > 0.0 && st_end[1].stolen_per_scan <= 1.0);
  cr_assert_eq(st_end[1].steal_success, (uint64_t)atomic_load(&ran_on[1]));
}

Test(steal, steal_success_rate_is_at_most_one, .timeout = 60)
{
  /* A success rate of probes: stolen tasks per victim probed. */
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, spread_main, NULL);
  for (int i = 0; i <= NSHARDS; i++) {
    const weft_stats *s = &st_end[i];
    cr_assert(s->steal_success_rate >= 0.0 && s->steal_success_rate <= 1.0,
              "shard %d: steal_success_rate %f = %llu stolen / %llu attempts (%llu scans)",
              s->shard, s->steal_success_rate, (unsigned long long)s->steal_success,
              (unsigned long long)s->steal_attempts, (unsigned long long)s->steal_scans);
  }
}
