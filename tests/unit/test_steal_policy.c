/* SPDX-License-Identifier: MIT */
/*
 * Suite "steal", part 4 - the policy and the counters as the headers state
 * them, at their limits: how long the backoff grows, what a small stealable
 * queue still gives up, what a scan is, where a pinned task with no
 * spawning shard starts, the ratios with a zero divisor, the pool
 * counters among the steal counters, the stuck rule with several short
 * queues, and what a local hit is.
 */
#include "steal_test.h"

/* ---- the backoff grows up to steal_backoff_max --------------------------------------- */

/* runtime.h: a round that takes nothing makes the shard skip the next
 * steal_backoff_min << (failures - 1) rounds, at most steal_backoff_max.
 * An idle shard of two that spins (and so never parks, which would reset
 * its cooldown) fails every round it runs, each probing the other shard
 * once: after the first eleven failures (1 + 2 + ... + 1024 rounds
 * skipped) every failed round is followed by steal_backoff_max = 1024
 * skipped ones. Counted in rounds, not time. */
Test(steal, backoff_grows_up_to_backoff_max, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_backoff_min = 1;
  c.steal_backoff_max = 1024;
  c.spin_ns = 10000 * WEFT_MSEC;
  c.spin_max_ns = 10000 * WEFT_MSEC;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_stats s;
  for (int k = 0; k < 20000; k++) {
    cr_assert_eq(weft_stats_get(rt, 1, &s), 0);
    if (s.steal_attempts >= 60)
      break;
    weft_sleep(WEFT_MSEC);
  }
  cr_assert_geq(s.steal_attempts, 60, "%llu failed rounds", (unsigned long long)s.steal_attempts);
  cr_assert_eq(s.steal_success, 0);
  cr_assert_eq(s.parks, 0, "the shard slept: its cooldown was reset");
  /* Two rounds of slack: the counters are read one after the other. The
   * bound is 3/4 of what the header promises, and above what a cooldown
   * that stopped growing at 256 rounds would give. */
  uint64_t long_rounds = s.steal_attempts - 12 - 2;
  cr_assert_geq(s.steal_skipped_backoff, 768 * long_rounds,
                "%llu rounds skipped after %llu failed ones: the cooldown stopped growing "
                "below steal_backoff_max (1024)",
                (unsigned long long)s.steal_skipped_backoff,
                (unsigned long long)s.steal_attempts);
  rt_stop_idle(rt);
}

/* ---- what a small stealable queue still lets thieves take ------------------------------ */

static atomic_bool keeper_stop;

/* Pinned on shard 1: naps, so that shard keeps waking up and spinning -
 * the stuck rule is a spinning thief's. */
static void *napper(void *arg)
{
  (void)arg;
  while (!atomic_load(&keeper_stop))
    CO_EQ(weft_sleep(30 * WEFT_USEC), 0);
  return NULL;
}

static void *count_run(void *arg)
{
  (void)arg;
  int s = weft_shard_id();
  CO_CHECK(s >= 0 && s < NSHARDS);
  if (s >= 0 && s < NSHARDS)
    atomic_fetch_add(&ran_on[s], 1);
  return NULL;
}

struct small_queue {
  int tasks;   /* stealable tasks queued on shard 0 (fills its queue) */
  bool napper; /* keep shard 1 awake */
};

/* Shard 0 queues `tasks` stealable tasks and computes (no yield) until
 * shard 1 has run one of them, at most 5 s. */
static void *small_queue_main(void *arg)
{
  struct small_queue *q = arg;
  weft_task *k = NULL, *t[8];
  if (q->napper)
    CO_EQ(rt_spawn(&k, WEFT_PLACE_PINNED, 1, napper, NULL), 0);
  for (int i = 0; i < q->tasks; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, count_run, NULL), 0);
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  while (atomic_load(&ran_on[1]) == 0 && weft_now() < give_up)
    ;
  for (int i = 0; i < q->tasks; i++)
    rt_join_int(t[i]);
  atomic_store(&keeper_stop, true);
  if (k)
    rt_join_int(k);
  stats_now(st_end);
  return NULL;
}

/* runtime.h used to say the capacity must exceed 2 + steal_locality_margin
 * for anything to be stolen. A full queue of exactly that many passes the
 * gate of a thief with no failed rounds (it holds more than 1 + margin),
 * and wakes a sleeping one: stolen, the seed's gate alone. */
Test(steal, a_queue_as_long_as_the_gate_is_stolen_from, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_queue_capacity = 4;
  c.steal_locality_margin = 2; /* 2 + 2 = the capacity */
  c.steal_stuck_ns = 0;
  struct small_queue q = {.tasks = 4};
  run_cfg(&c, small_queue_main, &q);
  cr_assert_eq(atomic_load(&ran_on[0]) + atomic_load(&ran_on[1]), 4);
  cr_assert_eq(st_end[NSHARDS].steal_backpressure, 0);
  cr_assert_gt(st_end[1].steal_success, 0, "a full queue of 2 + margin tasks was never stolen from");
}

/* And the stuck rule takes from a queue the gate refuses, whatever the
 * capacity: here 2 slots, a gate of 12 tasks. */
Test(steal, the_stuck_rule_takes_from_a_queue_shorter_than_the_gate, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_queue_capacity = 2;
  c.steal_locality_margin = 10;
  struct small_queue q = {.tasks = 2, .napper = true};
  run_cfg(&c, small_queue_main, &q);
  cr_assert_eq(atomic_load(&ran_on[0]) + atomic_load(&ran_on[1]), 2);
  cr_assert_gt(st_end[1].steal_stuck, 0);
  cr_assert_gt(st_end[1].steal_success, 0, "a queue of 2 slots was never stolen from");
}

/* ---- what a scan is ---------------------------------------------------------------------- */

static atomic_bool hogs_stop;
static atomic_int hogs_ready;

static void *idle_task(void *arg)
{
  (void)arg;
  return NULL;
}

/* Pinned on a victim: queues one stealable task there (a queue the gate
 * refuses) and computes until told to stop, so that it stays queued. */
static void *queue_one_and_hog(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_STEALABLE, -1, idle_task, NULL), 0);
  atomic_fetch_add(&hogs_ready, 1);
  int64_t give_up = weft_now() + 10000 * WEFT_MSEC;
  while (!atomic_load(&hogs_stop) && weft_now() < give_up)
    ;
  rt_join_int(t);
  return NULL;
}

/* Three shards, one probe per group: an idle, spinning shard 0 looks at
 * shard 1 and shard 2 in each round, two groups of one probe, and finds a
 * short queue in each. With a one-round cooldown its rounds alternate
 * between a failed one and a skipped one, so failed rounds and skipped
 * rounds keep step. steal_scans counts the groups that found a non-empty
 * victim: two per failed round, not one. */
Test(steal, a_scan_is_a_probe_group_and_a_round_may_make_several, .timeout = 60)
{
  weft_config c;
  rt_cfg(&c, 3);
  c.steal_probes = 1;
  c.steal_stuck_ns = 0; /* the queues of one stay where they are */
  c.steal_backoff_min = 1;
  c.steal_backoff_max = 1;
  c.spin_ns = 10000 * WEFT_MSEC; /* shard 0 spins, and never parks */
  c.spin_max_ns = 10000 * WEFT_MSEC;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *h1 = rt_submit_on(rt, 1, queue_one_and_hog, NULL);
  weft_task *h2 = rt_submit_on(rt, 2, queue_one_and_hog, NULL);
  for (int k = 0; k < 10000 && atomic_load(&hogs_ready) < 2; k++)
    weft_sleep(100 * WEFT_USEC);
  cr_assert_eq(atomic_load(&hogs_ready), 2);
  /* Shard 0 goes on while its counters are read one after another, and
   * the reader may be preempted in between: each bound below takes what
   * it must not overstate from the snapshot that makes it smaller - the
   * skipped rounds and the probes from the inner pair (a2 .. b1), the
   * scans from the outer one (a1 .. b2). */
  weft_stats a1, a2, b1, b2;
  cr_assert_eq(weft_stats_get(rt, 0, &a1), 0);
  cr_assert_eq(weft_stats_get(rt, 0, &a2), 0);
  for (int k = 0; k < 10000; k++) {
    cr_assert_eq(weft_stats_get(rt, 0, &b1), 0);
    if (b1.steal_skipped_backoff - a2.steal_skipped_backoff >= 1000)
      break;
    weft_sleep(WEFT_MSEC);
  }
  cr_assert_eq(weft_stats_get(rt, 0, &b2), 0);
  atomic_store(&hogs_stop, true);
  rt_join_int(h1);
  rt_join_int(h2);
  uint64_t skipped = b1.steal_skipped_backoff - a2.steal_skipped_backoff;
  uint64_t probes = b1.steal_attempts - a2.steal_attempts;
  uint64_t scans = b2.steal_scans - a1.steal_scans;
  cr_assert_geq(skipped, 1000);
  cr_assert_eq(b2.steal_success, 0);
  cr_assert_eq(b2.parks, 0, "shard 0 slept: its rounds did not keep step with its skips");
  /* Every probe found a queue of one: a scan per probe, two per round. */
  cr_assert_geq(scans + 2, probes, "%llu probes, %llu scans", (unsigned long long)probes,
                (unsigned long long)scans);
  cr_assert_geq(scans, 2 * (skipped - 2), "%llu scans in %llu rounds",
                (unsigned long long)scans, (unsigned long long)skipped);
  rt_stop_idle(rt);
}

/* ---- where a task with shard -1 starts when nothing spawns it from a shard ---------------- */

static atomic_int first_shard[4], moved_after_start;

static void *report_shard(void *arg)
{
  int i = (int)(intptr_t)arg;
  int s = weft_shard_id();
  atomic_store(&first_shard[i], s);
  for (int y = 0; y < 20; y++) {
    CO_EQ(weft_yield(), 0);
    if (weft_shard_id() != s)
      atomic_fetch_add(&moved_after_start, 1);
  }
  return NULL;
}

/* task.h: PINNED runs on opts.shard, -1 meaning the spawning shard. A plain
 * thread has none: its pinned tasks with shard -1 go round-robin, as its
 * stealable ones do, and stay where they start. */
Test(steal, pinned_with_no_spawning_shard_goes_round_robin, .timeout = 30)
{
  weft_runtime *rt = rt_start(NSHARDS);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = -1;
  weft_task *t[4];
  for (int i = 0; i < 4; i++) {
    atomic_store(&first_shard[i], -1);
    cr_assert_eq(weft_runtime_submit(rt, &o, report_shard, (void *)(intptr_t)i, &t[i]), 0);
  }
  for (int i = 0; i < 4; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  for (int i = 0; i < 4; i++)
    cr_assert(atomic_load(&first_shard[i]) >= 0 && atomic_load(&first_shard[i]) < NSHARDS);
  /* One shard after the other. */
  for (int i = 1; i < 4; i++)
    cr_assert_neq(atomic_load(&first_shard[i]), atomic_load(&first_shard[i - 1]), "task %d", i);
  cr_assert_eq(atomic_load(&moved_after_start), 0);
  rt_stop_idle(rt);
}

/* ---- the derived ratios with nothing to divide by ---------------------------------------- */

/* One shard: nothing is ever stolen, probed or counted as a local hit, so
 * every ratio divides by 0 - stats.h says it is 0 then, not NaN. */
Test(steal, ratios_with_a_zero_divisor_are_zero, .timeout = 30)
{
  weft_runtime *rt = rt_start(1);
  weft_task *t = rt_submit_on(rt, 0, idle_task, NULL);
  cr_assert_eq(weft_join(t, NULL), 0);
  for (int shard = -1; shard <= 0; shard++) {
    weft_stats s;
    cr_assert_eq(weft_stats_get(rt, shard, &s), 0);
    cr_assert_eq(s.steal_local_hits + s.steal_success + s.steal_attempts + s.steal_scans, 0);
    cr_assert(s.local_hit_ratio == 0.0, "shard %d: %f", shard, s.local_hit_ratio);
    cr_assert(s.steal_success_rate == 0.0, "shard %d: %f", shard, s.steal_success_rate);
    cr_assert(s.stolen_per_scan == 0.0, "shard %d: %f", shard, s.stolen_per_scan);
  }
  rt_stop_idle(rt);
}

/* ---- the pool counters among the steal counters --------------------------------------- */

static void *pool_job(void *arg)
{
  return arg;
}

static void *pool_calls(void *arg)
{
  (void)arg;
  for (int i = 0; i < 5; i++) {
    void *ret = NULL;
    CO_EQ(weft_blocking(pool_job, (void *)(intptr_t)(i + 1), &ret), 0);
    CO_EQ((intptr_t)ret, i + 1);
  }
  return NULL;
}

/* stats.h listed pool_jobs, pool_queued and pool_threads under "work
 * stealing, counted on the shard that does it": they are the runtime's,
 * the same in every shard's snapshot (shard 1 made no call) and in the
 * sum, not added up over the shards. */
Test(steal, pool_counters_are_runtime_wide_in_every_snapshot, .timeout = 30)
{
  weft_runtime *rt = rt_start(NSHARDS);
  weft_task *t = rt_submit_on(rt, 0, pool_calls, NULL);
  cr_assert_eq(weft_join(t, NULL), 0);
  weft_stats s[NSHARDS + 1];
  for (int i = 0; i <= NSHARDS; i++)
    cr_assert_eq(weft_stats_get(rt, i < NSHARDS ? i : -1, &s[i]), 0);
  for (int i = 0; i <= NSHARDS; i++) {
    cr_assert_eq(s[i].pool_jobs, 5, "snapshot %d: %llu jobs", i, (unsigned long long)s[i].pool_jobs);
    cr_assert_eq(s[i].pool_threads, s[0].pool_threads);
    cr_assert_eq(s[i].pool_queued, 0);
  }
  rt_stop_idle(rt);
}

/* ---- the stuck rule with several short queues -------------------------------------------- */

static atomic_int stuck_taken_by[3];

static void *note_where(void *arg)
{
  (void)arg;
  int s = weft_shard_id();
  CO_CHECK(s >= 0 && s < 3);
  if (s >= 0 && s < 3)
    atomic_fetch_add(&stuck_taken_by[s], 1);
  return NULL;
}

static atomic_int stuck_hogs_started, stuck_queued;

/* One per shard, pinned. Once all three run (so no shard is idle to take
 * anything meanwhile), the ones on shards 1 and 2 queue one stealable task
 * each on their own shard and compute until shard 0 has run one of them
 * (at most 5 s); the one on shard 0 returns when both are queued, leaving
 * shard 0 idle next to two short queues. */
static void *stuck_hog(void *arg)
{
  int me = (int)(intptr_t)arg;
  atomic_fetch_add(&stuck_hogs_started, 1);
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  while (atomic_load(&stuck_hogs_started) < 3 && weft_now() < give_up)
    ;
  if (me == 0) {
    while (atomic_load(&stuck_queued) < 2 && weft_now() < give_up)
      ;
    return NULL;
  }
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_STEALABLE, -1, note_where, NULL), 0);
  atomic_fetch_add(&stuck_queued, 1);
  while (atomic_load(&stuck_taken_by[0]) == 0 && weft_now() < give_up)
    ;
  rt_join_int(t);
  return NULL;
}

/* runtime.h: a queue too short for the gate is taken anyway once it has
 * not moved for steal_stuck_ns. Two such queues, on shards 1 and 2 whose
 * owners compute, probed by an idle shard 0 in two groups of one probe:
 * the rule must still see each of them stand still, not forget one
 * whenever it looks at the other. */
Test(steal, the_stuck_rule_sees_several_short_queues_stand_still, .timeout = 60)
{
  weft_config c;
  rt_cfg(&c, 3);
  c.steal_probes = 1;
  c.spin_ns = 10000 * WEFT_MSEC; /* shard 0 spins: the rule is a spinning thief's */
  c.spin_max_ns = 10000 * WEFT_MSEC;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *h[3];
  for (int i = 0; i < 3; i++)
    h[i] = rt_submit_on(rt, i, stuck_hog, (void *)(intptr_t)i);
  for (int i = 0; i < 3; i++)
    rt_join_int(h[i]);
  cr_assert_eq(atomic_load(&stuck_queued), 2);
  weft_stats s;
  cr_assert_eq(weft_stats_get(rt, 0, &s), 0);
  cr_assert_gt(atomic_load(&stuck_taken_by[0]), 0,
               "two short queues stood still for 5 s next to an idle shard (%llu taken "
               "by the stuck rule, %llu refused by the gate)",
               (unsigned long long)s.steal_stuck, (unsigned long long)s.steal_skipped_locality);
  cr_assert_gt(s.steal_stuck, 0);
  rt_stop_idle(rt);
}

/* ---- a local hit is a task run ---------------------------------------------------------- */

#define CANCELLED_UNSTARTED 10

static atomic_int unstarted_bodies;

static void *never_runs(void *arg)
{
  (void)arg;
  atomic_fetch_add(&unstarted_bodies, 1);
  return NULL;
}

static void *cancel_queued_main(void *arg)
{
  (void)arg;
  weft_task *t[CANCELLED_UNSTARTED];
  for (int i = 0; i < CANCELLED_UNSTARTED; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, never_runs, NULL), 0);
  for (int i = 0; i < CANCELLED_UNSTARTED; i++)
    CO_EQ(weft_cancel(t[i]), 0);
  for (int i = 0; i < CANCELLED_UNSTARTED; i++)
    CO_EQ(weft_join(t[i], NULL), -ECANCELED);
  stats_now(st_end);
  return NULL;
}

/* stats.h: steal_local_hits counts stealable tasks run by the shard that
 * queued them. Tasks cancelled while they sat in the stealable queue,
 * before they ever ran, are finished without running: no hit. (No thief
 * takes them: the margin keeps every queue home.) */
Test(steal, cancelled_tasks_that_never_ran_are_no_local_hits, .timeout = 30)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_locality_margin = UINT_MAX;
  c.steal_stuck_ns = 0;
  run_cfg(&c, cancel_queued_main, NULL);
  cr_assert_eq(atomic_load(&unstarted_bodies), 0);
  cr_assert_eq(st_end[NSHARDS].steal_success, 0);
  cr_assert_eq(st_end[0].steal_local_hits, 0, "%llu local hits for tasks that never ran",
               (unsigned long long)st_end[0].steal_local_hits);
}
