/* SPDX-License-Identifier: MIT */
/*
 * Suite "steal", part 2 - cfg.steal = false and a single shard, the knobs
 * (backoff, spin, locality, stride, capacity, batch) and their validation,
 * a full stealable queue, and the stuck rule on and off. That no task is
 * lost or run twice, shutdown with tasks still queued, and the counters
 * are in test_steal_exact.c.
 */
#include "steal_test.h"

/* ---- cfg.steal = false -------------------------------------------------------------------------- */

#define NOSTEAL_TASKS 300
#define NOSTEAL_PREF 50

static atomic_int off_home; /* steps away from the shard the task was placed on */

static void *placed_task(void *arg)
{
  int want = (int)(intptr_t)arg;
  for (int y = 0; y < 10; y++) {
    if (weft_shard_id() != want || thread_shard() != want)
      atomic_fetch_add(&off_home, 1);
    burn_us(5);
    CO_EQ(y == 5 ? weft_sleep(50 * WEFT_USEC) : weft_yield(), 0);
  }
  if (weft_shard_id() != want)
    atomic_fetch_add(&off_home, 1);
  atomic_fetch_add(&ran_on[want], 1);
  return NULL;
}

static void *nosteal_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_task **t = task_array(NOSTEAL_TASKS + NOSTEAL_PREF);
  if (!t)
    return NULL;
  for (int i = 0; i < NOSTEAL_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, placed_task, (void *)(intptr_t)0), 0);
  /* Preferred placement still starts where asked. */
  for (int i = NOSTEAL_TASKS; i < NOSTEAL_TASKS + NOSTEAL_PREF; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE_PREFERRED, 1, placed_task, (void *)(intptr_t)1),
          0);
  for (int i = 0; i < NOSTEAL_TASKS + NOSTEAL_PREF; i++)
    rt_join_int(t[i]);
  free(t);
  stats_now(st_end);
  return NULL;
}

Test(steal, steal_off_steals_nothing, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal = false;
  run_cfg(&c, nosteal_main, NULL);
  cr_assert_eq(atomic_load(&ran_on[0]), NOSTEAL_TASKS);
  cr_assert_eq(atomic_load(&ran_on[1]), NOSTEAL_PREF);
  cr_assert_eq(atomic_load(&off_home), 0);
  const weft_stats *s = &st_end[NSHARDS];
  cr_assert_eq(s->steal_success, 0);
  cr_assert_eq(s->steal_attempts, 0);
  cr_assert_eq(s->steal_scans, 0);
  cr_assert_eq(s->steal_skipped_backoff, 0);
  cr_assert_eq(s->steal_skipped_locality, 0);
}

Test(steal, steal_off_wakes_no_thief, .timeout = 60)
{
  /* With stealing off no shard can take another's work, so waking a
   * sleeping shard for a piling-up stealable queue only costs a message
   * and a wake-up that finds nothing to do. */
  weft_config c;
  steal_cfg(&c);
  c.steal = false;
  run_cfg(&c, nosteal_main, NULL);
  cr_assert_eq(atomic_load(&ran_on[0]), NOSTEAL_TASKS);
  cr_assert_eq(st_end[NSHARDS].steal_wakes, 0, "%llu sleeping shards woken to steal",
               (unsigned long long)st_end[NSHARDS].steal_wakes);
}

static void *single_main(void *arg)
{
  (void)arg;
  weft_task **t = task_array(NOSTEAL_TASKS);
  if (!t)
    return NULL;
  for (int i = 0; i < NOSTEAL_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  for (int i = 0; i < NOSTEAL_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), i + 1);
  free(t);
  CO_EQ(weft_stats_get(NULL, -1, &st_end[0]), 0);
  return NULL;
}

Test(steal, one_shard_never_probes, .timeout = 60)
{
  weft_config c;
  rt_cfg(&c, 1);
  run_cfg(&c, single_main, NULL);
  cr_assert_eq(atomic_load(&ran_on[0]), NOSTEAL_TASKS);
  cr_assert_eq(st_end[0].steal_attempts, 0);
  cr_assert_eq(st_end[0].steal_success, 0);
  cr_assert_eq(st_end[0].steal_wakes, 0);
  cr_assert_eq(st_end[0].steal_backpressure, 0);
}

/* ---- knobs: backoff and locality ------------------------------------------------------------------ */

Test(steal, huge_backoff_skips_rounds_and_still_steals_new_work, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_backoff_min = 1u << 20;
  c.steal_backoff_max = 1u << 20;
  weft_runtime *rt = rt_start_cfg(&c);
  /* Idle: every shard fails a round, then cools down while it spins. */
  weft_stats s[NSHARDS];
  for (int i = 0; i < NSHARDS; i++) {
    for (int k = 0; k < 10000; k++) {
      cr_assert_eq(weft_stats_get(rt, i, &s[i]), 0);
      if (s[i].steal_skipped_backoff > 0)
        break;
      weft_sleep(WEFT_MSEC);
    }
    cr_assert_gt(s[i].steal_skipped_backoff, 0, "shard %d skipped no round", i);
    /* One probing round per wake-up (park resets the cooldown), each
     * round probing the single other shard once (steal_probes is capped at
     * the number of other shards); a margin of 2x. */
    cr_assert_leq(s[i].steal_attempts, 2 * (s[i].parks + 1),
                  "shard %d: %llu probes over %llu parks", i,
                  (unsigned long long)s[i].steal_attempts, (unsigned long long)s[i].parks);
    cr_assert_eq(s[i].steal_success, 0);
  }
  /* New work resets the cooldown: a flood on shard 0 is still shared. */
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 0;
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, &o, spread_main, NULL, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&ran_on[0]) + atomic_load(&ran_on[1]), SPREAD_TASKS);
  cr_assert_gt(atomic_load(&ran_on[1]), 0, "shard 1 never stole after its cooldown");
  rt_stop_idle(rt);
}

/* Idle shards with a one-round cooldown (backoff_min = backoff_max = 1)
 * alternate: a round that finds nothing, then one round skipped. Every
 * round that runs must probe min(steal_probes, shards - 1) other shards, so
 * the probes are at least that many times the skipped rounds (each skip
 * follows a failed round). A walk that lands on the thief itself twice in a
 * row, so that a round probes nobody, breaks the bound: it did for 2 shards
 * and the default stride (a third of the rounds). */
static void assert_every_round_probes(int shards, unsigned stride)
{
  weft_config c;
  rt_cfg(&c, shards);
  c.steal_stride = stride;
  c.steal_backoff_min = 1;
  c.steal_backoff_max = 1;
  /* Spinning, not parking, for the whole test: thousands of rounds. */
  c.spin_ns = 10000 * WEFT_MSEC;
  c.spin_max_ns = 10000 * WEFT_MSEC;
  weft_runtime *rt = rt_start_cfg(&c);
  unsigned per_round = c.steal_probes < (unsigned)shards - 1 ? c.steal_probes : (unsigned)shards - 1;
  weft_stats s;
  for (int i = 0; i < shards; i++) {
    for (int k = 0; k < 10000; k++) {
      cr_assert_eq(weft_stats_get(rt, i, &s), 0);
      if (s.steal_skipped_backoff >= 3000)
        break;
      weft_sleep(WEFT_MSEC);
    }
    cr_assert_geq(s.steal_skipped_backoff, 3000, "shard %d: %llu rounds skipped", i,
                  (unsigned long long)s.steal_skipped_backoff);
    /* Less two rounds: the counters are read one after another while the
     * shard goes on. */
    cr_assert_geq(s.steal_attempts, per_round * (s.steal_skipped_backoff - 2),
                  "%d shards, stride %u, shard %d: %llu probes for %llu failed rounds", shards,
                  stride, i, (unsigned long long)s.steal_attempts,
                  (unsigned long long)s.steal_skipped_backoff);
    cr_assert_eq(s.steal_success, 0);
  }
  rt_stop_idle(rt);
}

Test(steal, every_round_probes_another_shard, .timeout = 60)
{
  assert_every_round_probes(2, 1);
  assert_every_round_probes(3, 1);
  assert_every_round_probes(4, 2);
  assert_every_round_probes(4, 3);
}

#define LOCAL_TASKS 8

static atomic_bool poke_stop, poke_started;

/* Pinned on shard 1: sleeps in short naps, so shard 1 keeps waking up idle
 * and running stealing rounds (it is not woken for a queue it may not take
 * from). Bounded by 10 s. */
static void *poker(void *arg)
{
  (void)arg;
  atomic_store(&poke_started, true);
  int64_t give_up = weft_now() + 10000 * WEFT_MSEC;
  while (!atomic_load(&poke_stop) && weft_now() < give_up)
    CO_EQ(weft_sleep(100 * WEFT_USEC), 0);
  return NULL;
}

static void *locality_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_task *p, *t[LOCAL_TASKS];
  CO_EQ(rt_spawn(&p, WEFT_PLACE_PINNED, 1, poker, NULL), 0);
  /* (Waiting here also lets shard 0 send the wake-up for the poker: it
   * goes out when the running task switches out.) */
  CO_CHECK(RT_POLL(atomic_load(&poke_started)));
  for (int i = 0; i < LOCAL_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  /* Keep shard 0 busy (no yield) with its queue of 8 until shard 1 has
   * looked at it and left it alone (bounded by 5 s). */
  weft_stats st;
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  do {
    CO_EQ(weft_stats_get(NULL, 1, &st), 0);
  } while (st.steal_skipped_locality == 0 && weft_now() < give_up);
  atomic_store(&poke_stop, true);
  for (int i = 0; i < LOCAL_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), i + 1);
  rt_join_int(p);
  stats_now(st_end);
  return NULL;
}

Test(steal, locality_margin_keeps_short_queues_home, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_locality_margin = 1000;
  c.steal_stuck_ns = 0; /* the seed's gate alone */
  run_cfg(&c, locality_main, NULL);
  cr_assert_gt(st_end[1].steal_skipped_locality, 0, "shard 1 never looked at shard 0's queue");
  cr_assert_eq(st_end[NSHARDS].steal_success, 0);
  cr_assert_eq(atomic_load(&ran_on[0]), LOCAL_TASKS);
  cr_assert_eq(atomic_load(&ran_on[1]), 0);
}

#define NEVER_TASKS 200

static void *never_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_task **t = task_array(NEVER_TASKS);
  if (!t)
    return NULL;
  for (int i = 0; i < NEVER_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  for (int i = 0; i < NEVER_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), i + 1);
  free(t);
  stats_now(st_end);
  return NULL;
}

Test(steal, largest_locality_margin_means_never_steal, .timeout = 60)
{
  /* By length, a queue is taken from only when it is longer than cost +
   * margin; no queue is longer than UINT_MAX + 1 tasks. (The stuck rule,
   * off here, would still take from a queue that stops moving.) */
  weft_config c;
  steal_cfg(&c);
  c.steal_locality_margin = UINT_MAX;
  c.steal_stuck_ns = 0;
  run_cfg(&c, never_main, NULL);
  cr_assert_eq(atomic_load(&ran_on[0]) + atomic_load(&ran_on[1]), NEVER_TASKS);
  cr_assert_eq(st_end[NSHARDS].steal_success, 0,
               "margin UINT_MAX: %llu tasks stolen from a queue of at most %d",
               (unsigned long long)st_end[NSHARDS].steal_success, NEVER_TASKS);
  cr_assert_eq(atomic_load(&ran_on[1]), 0);
}

static void *noop(void *arg)
{
  return arg;
}

Test(steal, idle_shards_sleep_whatever_the_locality_margin, .timeout = 60)
{
  /* An idle runtime's shards sleep in the kernel (runtime.h: spin_ns, then
   * sleep). A shard's sleeps are counted when they end, so each shard is
   * handed a no-op now and then until it has been woken from a sleep. */
  static const unsigned margins[] = {1, 1000, UINT_MAX - 1, UINT_MAX};
  for (size_t m = 0; m < sizeof(margins) / sizeof(margins[0]); m++) {
    weft_config c;
    steal_cfg(&c);
    c.steal_locality_margin = margins[m];
    weft_runtime *rt = rt_start_cfg(&c);
    for (int s = 0; s < NSHARDS; s++) {
      weft_stats st = {0};
      weft_spawn_opts o;
      weft_spawn_opts_init(&o);
      o.placement = WEFT_PLACE_PINNED;
      o.shard = s;
      for (int i = 0; i < 200; i++) {
        cr_assert_eq(weft_stats_get(rt, s, &st), 0);
        if (st.parks > 0)
          break;
        weft_sleep(10 * WEFT_MSEC);
        weft_task *t;
        cr_assert_eq(weft_runtime_submit(rt, &o, noop, NULL, &t), 0);
        cr_assert_eq(weft_join(t, NULL), 0);
      }
      cr_assert_gt(st.parks, 0, "margin %u: idle shard %d never slept (%llu steal probes)",
                   margins[m], s, (unsigned long long)st.steal_attempts);
    }
    rt_stop_idle(rt);
  }
}

Test(steal, stop_does_not_wait_out_a_spinning_shard, .timeout = 30)
{
  /* spin_ns bounds how long an idle shard polls for work; a stop is not
   * work it is looking for, but it must still end the loop (runtime.h:
   * the stop waits for the tasks, not for the polling). */
  weft_config c;
  steal_cfg(&c);
  c.spin_ns = 600 * 1000 * WEFT_MSEC;
  weft_runtime *rt = rt_start_cfg(&c);
  for (int s = 0; s < NSHARDS; s++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_PINNED;
    o.shard = s;
    weft_task *t;
    cr_assert_eq(weft_runtime_submit(rt, &o, noop, NULL, &t), 0);
    cr_assert_eq(weft_join(t, NULL), 0);
  }
  /* Both shards now poll for up to 10 minutes; .timeout is 30 s. */
  rt_stop_idle(rt);
}

Test(steal, spin_ns_int64_max_polls_forever, .timeout = 30)
{
  /* spin_ns is how long an idle shard polls (and steals) before it sleeps;
   * the largest value means it never sleeps. */
  weft_config c;
  steal_cfg(&c);
  c.spin_ns = INT64_MAX;
  weft_runtime *rt = rt_start_cfg(&c);
  for (int i = 0; i < 10; i++) {
    weft_sleep(2 * WEFT_MSEC);
    for (int s = 0; s < NSHARDS; s++) {
      weft_spawn_opts o;
      weft_spawn_opts_init(&o);
      o.placement = WEFT_PLACE_PINNED;
      o.shard = s;
      weft_task *t;
      cr_assert_eq(weft_runtime_submit(rt, &o, noop, NULL, &t), 0);
      cr_assert_eq(weft_join(t, NULL), 0);
    }
  }
  weft_stats st;
  cr_assert_eq(weft_stats_get(rt, -1, &st), 0);
  cr_assert_eq(st.parks, 0, "spin_ns INT64_MAX: idle shards slept %llu times",
               (unsigned long long)st.parks);
  rt_stop_idle(rt);
}

/* 4 shards, steal_stride 2: shard 0's cursor must still reach shard 2. */
static atomic_int ran_on4[4];
static atomic_bool hogs_stop;

static void *task4(void *arg)
{
  (void)arg;
  int s = weft_shard_id();
  CO_CHECK(s >= 0 && s < 4);
  if (s >= 0 && s < 4)
    atomic_fetch_add(&ran_on4[s], 1);
  /* Long enough that shard 0 gets the CPU (4 shards share 2 cores here and
   * two of them spin) while shard 2 still has a queue. */
  burn_us(1000);
  return NULL;
}

static void *hog4(void *arg)
{
  (void)arg;
  int64_t give_up = weft_now() + 10000 * WEFT_MSEC;
  while (!atomic_load(&hogs_stop) && weft_now() < give_up)
    ;
  return NULL;
}

static void *producer4(void *arg)
{
  (void)arg;
  weft_task *t[PILE_TASKS];
  for (int i = 0; i < PILE_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, task4, NULL), 0);
  for (int i = 0; i < PILE_TASKS; i++)
    rt_join_int(t[i]);
  return NULL;
}

static void *stride_main(void *arg)
{
  (void)arg;
  /* Shards 1 and 3 are busy (no yield); shard 2 queues work; shard 0 (this
   * task waits in a join) is the only idle one. */
  weft_task *h1, *h3, *p;
  CO_EQ(rt_spawn(&h1, WEFT_PLACE_PINNED, 1, hog4, NULL), 0);
  CO_EQ(rt_spawn(&h3, WEFT_PLACE_PINNED, 3, hog4, NULL), 0);
  CO_EQ(rt_spawn(&p, WEFT_PLACE_PINNED, 2, producer4, NULL), 0);
  rt_join_int(p);
  atomic_store(&hogs_stop, true);
  rt_join_int(h1);
  rt_join_int(h3);
  CO_EQ(weft_stats_get(NULL, 0, &st_end[0]), 0);
  return NULL;
}

Test(steal, every_victim_is_probed_whatever_the_stride, .timeout = 60)
{
  weft_config c;
  rt_cfg(&c, 4);
  c.steal_stride = 2;
  run_cfg(&c, stride_main, NULL);
  cr_assert_eq(atomic_load(&ran_on4[0]) + atomic_load(&ran_on4[2]), PILE_TASKS);
  cr_assert_gt(atomic_load(&ran_on4[0]), 0,
               "idle shard 0 never stole from shard 2 (%llu probes, %llu scans, %llu locality skips, "
               "%llu backoff skips, %llu parks, %llu wakes sent, %llu coalesced)",
               (unsigned long long)st_end[0].steal_attempts,
               (unsigned long long)st_end[0].steal_scans,
               (unsigned long long)st_end[0].steal_skipped_locality,
               (unsigned long long)st_end[0].steal_skipped_backoff,
               (unsigned long long)st_end[0].parks,
               (unsigned long long)st_end[0].wakes_sent,
               (unsigned long long)st_end[0].wakes_coalesced);
}

/* ---- a full stealable queue, and the knobs' validation -------------------------------------------- */

#define SPILL_TASKS 100

static void *spill_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_task *t[SPILL_TASKS];
  for (int i = 0; i < SPILL_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  for (int i = 0; i < SPILL_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), i + 1);
  stats_now(st_end);
  return NULL;
}

Test(steal, full_stealable_queue_spills_to_the_local_one, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_queue_capacity = 2;
  c.steal_stuck_ns = 0; /* the spawn loop outlasts it: the gate alone here */
  run_cfg(&c, spill_main, NULL);
  cr_assert_eq(atomic_load(&ran_on[0]) + atomic_load(&ran_on[1]), SPILL_TASKS);
  /* Spawned without a yield: 2 fit, 98 spill. A queue of at most 2 is never
   * longer than the migration cost plus the default margin (1 + 1), so none
   * is stolen and all of them run on shard 0. */
  cr_assert_eq(st_end[0].steal_backpressure, SPILL_TASKS - 2);
  cr_assert_eq(st_end[NSHARDS].steal_backpressure, SPILL_TASKS - 2);
  cr_assert_eq(st_end[NSHARDS].steal_success, 0);
  cr_assert_eq(atomic_load(&ran_on[0]), SPILL_TASKS);
  cr_assert_eq(st_end[0].steal_local_hits, 2);
}

static atomic_int main_ran;

static void *count_main(void *arg)
{
  (void)arg;
  atomic_fetch_add(&main_ran, 1);
  return NULL;
}

Test(steal, invalid_steal_knobs_are_einval, .timeout = 30)
{
  weft_config cfgs[16];
  const char *what[16];
  int n = 0;
#define BAD(name, stmt)                                                                        \
  do {                                                                                         \
    weft_config *c = &cfgs[n];                                                                 \
    rt_cfg(c, NSHARDS);                                                                        \
    stmt;                                                                                      \
    what[n++] = name;                                                                          \
  } while (0)
  BAD("capacity 3", c->steal_queue_capacity = 3);
  BAD("capacity 0", c->steal_queue_capacity = 0);
  BAD("capacity 1", c->steal_queue_capacity = 1);
  BAD("capacity 1<<25", c->steal_queue_capacity = 1u << 25);
  BAD("capacity 1<<31", c->steal_queue_capacity = 1u << 31);
  BAD("capacity 4095", c->steal_queue_capacity = 4095);
  BAD("batch 0", c->steal_batch = 0);
  BAD("batch 65", c->steal_batch = 65);
  BAD("probes 0", c->steal_probes = 0);
  BAD("backoff max < min", (c->steal_backoff_min = 8, c->steal_backoff_max = 7));
  BAD("backoff min 0", (c->steal_backoff_min = 0, c->steal_backoff_max = 0));
  BAD("budget 0", c->steal_budget = 0);
  BAD("stride 0", c->steal_stride = 0);
  BAD("fail cost 0", c->steal_fail_cost = 0);
  BAD("stuck -1", c->steal_stuck_ns = -1);
#undef BAD
  for (int i = 0; i < n; i++) {
    void *ret = (void *)7;
    int r = weft_run(&cfgs[i], count_main, NULL, &ret);
    cr_assert_eq(r, -EINVAL, "weft_run with %s: %d", what[i], r);
    cr_assert_eq(ret, (void *)7, "%s: ret written", what[i]);
    weft_runtime *rt = (weft_runtime *)(void *)&ret;
    cr_assert_eq(weft_runtime_start(&rt, &cfgs[i]), -EINVAL, "start with %s", what[i]);
    cr_assert_eq(rt, (weft_runtime *)(void *)&ret, "%s: *rt written", what[i]);
  }
  cr_assert_eq(atomic_load(&main_ran), 0, "main ran for an invalid config");
}

Test(steal, extreme_valid_steal_knobs_start, .timeout = 30)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_queue_capacity = 2;
  c.steal_batch = 64;
  c.steal_probes = 1000;
  c.steal_stride = 1000;
  c.steal_budget = 1;
  c.steal_backoff_min = 1;
  c.steal_backoff_max = 1;
  c.steal_locality_margin = 0;
  int r = weft_run(&c, count_main, NULL, NULL);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  steal_cfg(&c);
  c.steal_queue_capacity = 1u << 24; /* the largest */
  cr_assert_eq(weft_run(&c, count_main, NULL, NULL), 0);
  cr_assert_eq(atomic_load(&main_ran), 2);
}

/* ---- the stuck rule ------------------------------------------------------------------------------ */

#define STUCK_SHORT 2

static atomic_bool stuck_done;
static atomic_int short_ran_on[STUCK_SHORT]; /* -1 until it ran */
static atomic_int shorts_ran;

static void *ticker(void *arg)
{
  (void)arg;
  /* Keeps shard 1 waking up (and running stealing rounds while it spins). */
  while (!atomic_load(&stuck_done))
    CO_EQ(weft_sleep(300 * WEFT_USEC), 0);
  return NULL;
}

static void *short_task(void *arg)
{
  atomic_store(&short_ran_on[(intptr_t)arg], weft_shard_id());
  atomic_fetch_add(&shorts_ran, 1);
  return NULL;
}

/* arg: the stuck rule is on, so the short tasks are expected to be taken
 * while this task runs. */
static void *stuck_main(void *arg)
{
  bool expect_taken = arg != NULL;
  weft_task *tick, *t[STUCK_SHORT];
  atomic_store(&shorts_ran, 0);
  for (int i = 0; i < STUCK_SHORT; i++)
    atomic_store(&short_ran_on[i], -1);
  CO_EQ(rt_spawn(&tick, WEFT_PLACE_PINNED, 1, ticker, NULL), 0);
  /* Two queued tasks: not longer than cost + margin (1 + 1), so the gate
   * alone keeps them here - behind this task, which now runs 30 ms. */
  for (intptr_t i = 0; i < STUCK_SHORT; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, short_task, (void *)i), 0);
  /* 30 ms at least; where they are expected to move, on until they have
   * run (5 s at most: a shard that wakes late must not fail the test). */
  int64_t start = weft_now();
  burn_us(30000);
  while (expect_taken && atomic_load(&shorts_ran) < STUCK_SHORT &&
         weft_now() < start + 5 * WEFT_SEC)
    burn_us(1000);
  atomic_store(&stuck_done, true);
  for (int i = 0; i < STUCK_SHORT; i++)
    rt_join_int(t[i]);
  rt_join_int(tick);
  stats_now(st_end);
  return NULL;
}

Test(steal, stuck_short_queue_is_taken_behind_a_long_task, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, stuck_main, (void *)1);
  for (int i = 0; i < STUCK_SHORT; i++)
    cr_assert_eq(atomic_load(&short_ran_on[i]), 1, "short task %d ran on shard %d", i,
                 atomic_load(&short_ran_on[i]));
  cr_assert_geq(st_end[1].steal_stuck, 1);
  cr_assert_eq(st_end[1].steal_success, STUCK_SHORT);
}

Test(steal, stuck_rule_off_leaves_a_short_queue_home, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_stuck_ns = 0;
  run_cfg(&c, stuck_main, NULL);
  for (int i = 0; i < STUCK_SHORT; i++)
    cr_assert_eq(atomic_load(&short_ran_on[i]), 0, "short task %d ran on shard %d", i,
                 atomic_load(&short_ran_on[i]));
  cr_assert_eq(st_end[NSHARDS].steal_stuck, 0);
  cr_assert_eq(st_end[NSHARDS].steal_success, 0);
}
