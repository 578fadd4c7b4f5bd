/* SPDX-License-Identifier: MIT */
/*
 * Suite "steal", part 1 - what moves and what does not, in a 2-shard
 * runtime: stealable work spreads to both shards, a sleeping thief is woken
 * when a queue piles up, fixed placements (pinned, round robin, sticky)
 * never move, started tasks migrate across yields and see the shard of the
 * thread they really run on after every suspension (the TLS accessor at
 * -O2), and steal_started = false moves only unstarted tasks. The knobs
 * and their validation are in test_steal_knobs.c; loss checks, shutdown
 * and counters in test_steal_exact.c.
 */
#include "steal_test.h"

/* ---- stealable work spreads ------------------------------------------------------------ */

Test(steal, stealable_work_from_one_shard_runs_on_both, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, spread_main, NULL);
  int r0 = atomic_load(&ran_on[0]), r1 = atomic_load(&ran_on[1]);
  cr_assert_eq(r0 + r1, SPREAD_TASKS);
  cr_assert_gt(r0, 0, "shard 0 ran none of its own tasks");
  cr_assert_gt(r1, 0, "shard 1 stole nothing (ran %d on shard 0)", r0);
  cr_assert_eq(atomic_load(&wrong_thread), 0);
  cr_assert_gt(st_end[NSHARDS].steal_success, 0);
  /* Every task was queued on shard 0 and never yields. A task runs where
   * it was last taken from a stealable queue: by that shard's own pop (a
   * local hit) or as the first task of a batch that shard stole (the rest
   * of a batch go on the thief's stealable queue). So each shard ran its
   * local hits plus its batches, and shard 1 ran nothing it did not steal. */
  cr_assert_eq(st_end[0].steal_local_hits + st_end[0].steal_takes, (uint64_t)r0);
  cr_assert_eq(st_end[1].steal_local_hits + st_end[1].steal_takes, (uint64_t)r1);
  cr_assert_geq(st_end[1].steal_success, (uint64_t)r1);
  cr_assert_leq(st_end[1].steal_local_hits, st_end[1].steal_success);
  cr_assert_eq(st_end[NSHARDS].steal_backpressure, 0);
  cr_assert_geq(st_end[1].steal_scans, 1);
}

/* ---- a sleeping thief is woken when a queue piles up --------------------------------------- */

static uint64_t wakes_before, wakes_after;

static void *pile_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_runtime *rt = weft_runtime_current();
  weft__shard *thief = &rt->shards[1];
  weft_task **t = task_array(PILE_TASKS);
  if (!t)
    return NULL;
  /* Two tasks: a queue of 2 is not longer than the migration cost plus
   * the margin (1 + 1), so shard 1 cannot take from it and sleeps. We keep
   * shard 0 busy (no yield) until shard 1 is asleep. */
  for (int i = 0; i < 2; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  while (weft_now() < give_up) {
    if (atomic_load(&thief->parked)) {
      /* Parked: let it settle into the kernel wait. */
      burn_us(2000);
      if (atomic_load(&thief->parked))
        break;
    }
  }
  CO_CHECK(atomic_load(&thief->parked));
  weft_stats st;
  CO_EQ(weft_stats_get(NULL, 0, &st), 0);
  wakes_before = st.steal_wakes;
  atomic_store(&gate_on, true);
  /* Now the queue grows to 100 stealable tasks of 20-50 us each, while
   * shard 1 sleeps: runtime.h says shard 0 wakes a sleeping shard. */
  for (int i = 2; i < PILE_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  CO_EQ(weft_stats_get(NULL, 0, &st), 0);
  wakes_after = st.steal_wakes;
  for (int i = 0; i < PILE_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), i + 1);
  free(t);
  stats_now(st_end);
  return NULL;
}

Test(steal, sleeping_shard_is_woken_when_a_queue_piles_up, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_stuck_ns = 0; /* the two first tasks must stay put while shard 1 falls asleep */
  run_cfg(&c, pile_main, NULL);
  int r0 = atomic_load(&ran_on[0]), r1 = atomic_load(&ran_on[1]);
  cr_assert_eq(r0 + r1, PILE_TASKS);
  cr_assert_eq(atomic_load(&wrong_thread), 0);
  cr_assert_gt(wakes_after, wakes_before,
               "98 stealable tasks were queued on shard 0 while shard 1 slept, and no "
               "thief was woken (steal_wakes %llu -> %llu)",
               (unsigned long long)wakes_before, (unsigned long long)wakes_after);
  cr_assert_gt(r1, 0, "shard 1 slept through a queue of %d tasks (all ran on shard 0)",
               PILE_TASKS);
}

/* Shard 0 queues stealable work and keeps computing without a yield: the
 * sleeping shard 1 must be woken (and steal) meanwhile, not only when the
 * producer switches out - that is the case stealing is for. */
static atomic_bool producer_saw_steal;

static void *busy_producer_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_runtime *rt = weft_runtime_current();
  weft__shard *thief = &rt->shards[1];
  weft_task **t = task_array(PILE_TASKS);
  if (!t)
    return NULL;
  /* Shard 1 is idle: wait (busy, bounded) until it sleeps. */
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  while (!atomic_load(&thief->parked) && weft_now() < give_up)
    ;
  burn_us(2000);
  CO_CHECK(atomic_load(&thief->parked));
  for (int i = 0; i < PILE_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, spread_task, (void *)(intptr_t)i), 0);
  /* Compute (no yield) until shard 1 has run one of them, at most 2 s. */
  give_up = weft_now() + 2000 * WEFT_MSEC;
  while (atomic_load(&ran_on[1]) == 0 && weft_now() < give_up)
    ;
  atomic_store(&producer_saw_steal, atomic_load(&ran_on[1]) > 0);
  for (int i = 0; i < PILE_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), i + 1);
  free(t);
  return NULL;
}

Test(steal, sleeping_shard_steals_while_the_producer_computes, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, busy_producer_main, NULL);
  cr_assert_eq(atomic_load(&ran_on[0]) + atomic_load(&ran_on[1]), PILE_TASKS);
  cr_assert(atomic_load(&producer_saw_steal),
            "shard 1 slept for 2 s next to a queue of %d stealable tasks, until the task "
            "that queued them switched out", PILE_TASKS);
}

/* ---- fixed placements never move ------------------------------------------------------------- */

/* Pinned (2), round-robin (2), sticky (2), and stealable but pinned by
 * weft_task_pin at their first step (2, one starting on each shard). */
#define FIXED_TASKS 8
#define FIXED_YIELDS 1000
#define FLOOD_TASKS 300
#define FLOOD_YIELDS 30

static atomic_int fixed_moved;    /* steps on another shard than the first */
static atomic_int fixed_steps;
static atomic_int flood_moves;    /* stealable tasks seen on a new shard after a suspension */

/* arg non-NULL: a stealable task that pins itself with weft_task_pin. */
static void *fixed_task(void *arg)
{
  int home = weft_shard_id();
  if (arg)
    CO_EQ(weft_task_pin(), home);
  CO_CHECK(home >= 0 && home < NSHARDS);
  CO_EQ(thread_shard(), home);
  for (int i = 0; i < FIXED_YIELDS; i++) {
    burn_us(2);
    /* Every 50 steps a short sleep leaves this shard idle, so it steals
     * flood tasks and runs them next to us. */
    CO_EQ(i % 50 == 49 ? weft_sleep(100 * WEFT_USEC) : weft_yield(), 0);
    int s = weft_shard_id();
    if (s != home || thread_shard() != home)
      atomic_fetch_add(&fixed_moved, 1);
    atomic_fetch_add(&fixed_steps, 1);
  }
  return (void *)(intptr_t)home;
}

static void *flood_task(void *arg)
{
  (void)arg;
  int s = weft_shard_id();
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  for (int i = 0; i < FLOOD_YIELDS || (atomic_load(&flood_moves) == 0 && weft_now() < give_up);
       i++) {
    burn_us(5);
    /* A started task moves only when a shard runs dry while the other has
     * some queued. Past FLOOD_YIELDS with no move yet - both shards kept
     * busy in balance, as on a loaded machine - sleep instead of yielding:
     * shards go idle, wake-ups pile up on one shard, and the other takes
     * them. */
    if (i < FLOOD_YIELDS || atomic_load(&flood_moves))
      CO_EQ(weft_yield(), 0);
    else
      CO_EQ(weft_sleep(100 * WEFT_USEC), 0);
    int now = weft_shard_id();
    if (thread_shard() != now)
      atomic_fetch_add(&wrong_thread, 1);
    if (now != s)
      atomic_fetch_add(&flood_moves, 1);
    s = now;
  }
  return NULL;
}

static void *fixed_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_task *flood[FLOOD_TASKS], *fixed[FIXED_TASKS];
  for (int i = 0; i < FLOOD_TASKS; i++)
    CO_EQ(rt_spawn(&flood[i], WEFT_PLACE_STEALABLE_PREFERRED, 0, flood_task, NULL), 0);
  weft_spawn_opts o;
  for (int i = 0; i < FIXED_TASKS; i++) {
    weft_spawn_opts_init(&o);
    switch (i) {
    case 0: o.placement = WEFT_PLACE_PINNED, o.shard = 0; break;
    case 1: o.placement = WEFT_PLACE_PINNED, o.shard = 1; break;
    case 2:
    case 3: o.placement = WEFT_PLACE_ROUND_ROBIN; break;
    case 4:
    case 5: o.placement = WEFT_PLACE_STICKY, o.key = (uint64_t)i * 0x9e3779b97f4a7c15ULL; break;
    default: o.placement = WEFT_PLACE_STEALABLE_PREFERRED, o.shard = i % 2; break;
    }
    CO_EQ(weft_spawn(&fixed[i], &o, fixed_task, i >= 6 ? &o : NULL), 0);
  }
  intptr_t home0 = rt_join_int(fixed[0]), home1 = rt_join_int(fixed[1]);
  CO_EQ(home0, 0);
  CO_EQ(home1, 1);
  for (int i = 2; i < FIXED_TASKS; i++)
    rt_join_int(fixed[i]);
  for (int i = 0; i < FLOOD_TASKS; i++)
    rt_join_int(flood[i]);
  stats_now(st_end);
  return NULL;
}

Test(steal, pinned_round_robin_sticky_and_self_pinned_tasks_never_move, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, fixed_main, NULL);
  cr_assert_eq(atomic_load(&fixed_steps), FIXED_TASKS * FIXED_YIELDS);
  cr_assert_eq(atomic_load(&fixed_moved), 0, "%d steps of fixed tasks ran on another shard",
               atomic_load(&fixed_moved));
  cr_assert_eq(atomic_load(&wrong_thread), 0);
  /* Preconditions: stealing really went on around them. */
  cr_assert_gt(st_end[NSHARDS].steal_success, 0);
  cr_assert_gt(atomic_load(&flood_moves), 0, "no stealable task migrated after a suspension");
}

/* ---- started tasks migrate across yields ------------------------------------------------------ */

#define MOVERS 8
#define MOVER_MIN_YIELDS 500

static atomic_int yield_moves, resumes, movers_started;
static atomic_int both_shards; /* tasks that ran on both shards */
static atomic_bool hog_running;

/* Pinned on shard 1: keeps it busy (no yield, so it cannot steal) until
 * every mover has started on shard 0, so that what shard 1 takes
 * afterwards can only be tasks that already ran. Bounded by 10 s. */
static void *hog(void *arg)
{
  (void)arg;
  atomic_store(&hog_running, true);
  int64_t give_up = weft_now() + 10000 * WEFT_MSEC;
  while (atomic_load(&movers_started) < MOVERS && weft_now() < give_up)
    ;
  return NULL;
}

static void *mover(void *arg)
{
  int i = (int)(intptr_t)arg;
  int s = weft_shard_id();
  bool seen[NSHARDS] = {false};
  CO_EQ(s, 0);
  CO_EQ(thread_shard(), 0);
  if (s < 0 || s >= NSHARDS)
    return NULL;
  seen[s] = true;
  atomic_fetch_add(&movers_started, 1);
  /* Yield until some task has been seen to move (at least MIN times each,
   * for at most 5 s); every 64th suspension is a short sleep instead. */
  int64_t give_up = weft_now() + 5000 * WEFT_MSEC;
  for (int y = 1; y < MOVER_MIN_YIELDS || weft_now() < give_up; y++) {
    burn_us(1 + (i + y) % 3);
    CO_EQ(y % 64 ? weft_yield() : weft_sleep(20 * WEFT_USEC), 0);
    int now = weft_shard_id();
    atomic_fetch_add(&resumes, 1);
    if (now < 0 || now >= NSHARDS || thread_shard() != now) {
      atomic_fetch_add(&wrong_thread, 1);
      continue;
    }
    if (now != s && y % 64)
      atomic_fetch_add(&yield_moves, 1);
    seen[now] = true;
    s = now;
    if (y >= MOVER_MIN_YIELDS && atomic_load(&yield_moves) > 0)
      break;
  }
  if (seen[0] && seen[1])
    atomic_fetch_add(&both_shards, 1);
  return NULL;
}

static void *mover_main(void *arg)
{
  (void)arg;
  map_threads();
  weft_task *h, *t[MOVERS];
  CO_EQ(rt_spawn(&h, WEFT_PLACE_PINNED, 1, hog, NULL), 0);
  CO_CHECK(RT_POLL(atomic_load(&hog_running)));
  for (int i = 0; i < MOVERS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, mover, (void *)(intptr_t)i), 0);
  for (int i = 0; i < MOVERS; i++)
    rt_join_int(t[i]);
  rt_join_int(h);
  return NULL;
}

Test(steal, started_tasks_migrate_and_see_the_shard_they_run_on, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, mover_main, NULL);
  cr_assert_eq(atomic_load(&movers_started), MOVERS);
  cr_assert_geq(atomic_load(&resumes), MOVERS * (MOVER_MIN_YIELDS - 1));
  cr_assert_eq(atomic_load(&wrong_thread), 0,
               "%d resumes: weft_shard_id() named another shard than the thread's",
               atomic_load(&wrong_thread));
  cr_assert_gt(atomic_load(&yield_moves), 0, "no task changed shard across a yield");
  cr_assert_gt(atomic_load(&both_shards), 0, "no task ran on both shards");
}

/* ---- steal_started = false ------------------------------------------------------------------- */

#define UNSTARTED_TASKS 200

static atomic_int started_moved, first_runs;

static void *settled_task(void *arg)
{
  int i = (int)(intptr_t)arg;
  int home = weft_shard_id();
  if (home < 0 || home >= NSHARDS || thread_shard() != home) {
    atomic_fetch_add(&wrong_thread, 1);
    return NULL;
  }
  atomic_fetch_add(&first_runs, 1);
  atomic_fetch_add(&ran_on[home], 1);
  gate_for_other(home);
  burn_us(20 + i % 17);
  for (int y = 0; y < 20; y++) {
    CO_EQ(y % 5 == 4 ? weft_sleep(50 * WEFT_USEC) : weft_yield(), 0);
    burn_us(2);
    if (weft_shard_id() != home || thread_shard() != home)
      atomic_fetch_add(&started_moved, 1);
  }
  return NULL;
}

static void *settled_main(void *arg)
{
  (void)arg;
  atomic_store(&gate_on, true);
  map_threads();
  weft_task **t = task_array(UNSTARTED_TASKS);
  if (!t)
    return NULL;
  for (int i = 0; i < UNSTARTED_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, settled_task, (void *)(intptr_t)i), 0);
  for (int i = 0; i < UNSTARTED_TASKS; i++)
    rt_join_int(t[i]);
  free(t);
  stats_now(st_end);
  return NULL;
}

Test(steal, steal_started_off_moves_only_unstarted_tasks, .timeout = 60)
{
  weft_config c;
  steal_cfg(&c);
  c.steal_started = false;
  run_cfg(&c, settled_main, NULL);
  cr_assert_eq(atomic_load(&first_runs), UNSTARTED_TASKS);
  cr_assert_eq(atomic_load(&wrong_thread), 0);
  cr_assert_eq(atomic_load(&started_moved), 0, "%d steps ran away from the first shard",
               atomic_load(&started_moved));
  /* Each task started where it was last taken from a stealable queue: by
   * that shard's own pop or as the first of a stolen batch (the rest of a
   * batch, still unstarted, go on the thief's stealable queue). Once
   * started, none entered a stealable queue again. */
  cr_assert_eq(st_end[1].steal_local_hits + st_end[1].steal_takes,
               (uint64_t)atomic_load(&ran_on[1]));
  cr_assert_eq(st_end[NSHARDS].steal_local_hits + st_end[NSHARDS].steal_takes,
               UNSTARTED_TASKS);
  cr_assert_gt(st_end[NSHARDS].steal_success, 0, "no unstarted task was stolen");
}

Test(steal, task_pin_on_a_plain_thread_is_eperm, .timeout = 10)
{
  cr_assert_eq(weft_task_pin(), -EPERM);
}
