/* SPDX-License-Identifier: MIT */
/*
 * Suite "steal", part 6 - one steal round at a time (weft__steal_round), on
 * a runtime built by hand: no threads, no rings, shards that are nothing
 * but a stealable queue each, filled by the test with fake tasks (never
 * run). Everything the round decides is then a function of the config, the
 * queues and the thief's walk state, which the test sets: the rules are
 * checked exactly, on every start of the walk, with no timing involved.
 */
#include "rt_helpers.h"

#include "core.h"

#include <string.h>

#define FAKE_SHARDS 8
#define FAKE_TASKS 64

/* Static: the runtime and shard structs carry cache-line alignment. */
static weft_runtime fake_rt;
static weft__shard fake_sh[FAKE_SHARDS];
static weft_task fake_tasks[FAKE_TASKS];
static int fake_used;

/* n shards with empty queues; a thief with no failures behind it, whose
 * gate is 1: a queue of 2 passes it, a queue of 1 does not. */
static void fake_init(int n)
{
  for (int i = 0; i < FAKE_SHARDS; i++)
    if (fake_sh[i].deque.slots)
      weft__deque_term(&fake_sh[i].deque);
  memset(&fake_rt, 0, sizeof(fake_rt));
  memset(fake_sh, 0, sizeof(fake_sh));
  memset(fake_tasks, 0, sizeof(fake_tasks));
  fake_used = 0;
  weft_config_init(&fake_rt.cfg);
  fake_rt.cfg.shards = n;
  fake_rt.cfg.steal_locality_margin = 0;
  fake_rt.cfg.steal_batch = 1;
  fake_rt.cfg.steal_budget = 1000;
  fake_rt.nshards = n;
  fake_rt.shards = fake_sh;
  for (int i = 0; i < n; i++) {
    fake_sh[i].rt = &fake_rt;
    fake_sh[i].id = i;
    cr_assert_eq(weft__deque_init(&fake_sh[i].deque, 64), 0);
  }
}

static void fake_term(void)
{
  for (int i = 0; i < FAKE_SHARDS; i++)
    if (fake_sh[i].deque.slots)
      weft__deque_term(&fake_sh[i].deque);
}

static weft_task *fake_task(void)
{
  cr_assert_lt(fake_used, FAKE_TASKS);
  weft_task *t = &fake_tasks[fake_used++];
  t->rt = &fake_rt;
  t->placement = WEFT_PLACE_STEALABLE;
  t->coro.state = WEFT__CORO_CREATED;
  return t;
}

/* Queues k fake tasks on shard s, as its owner would but with no epoch
 * bump (the queue is there before the round starts). */
static void fake_queue(int s, int k)
{
  for (int i = 0; i < k; i++)
    cr_assert(weft__deque_push(&fake_sh[s].deque, fake_task(), 0));
}

static unsigned qlen(int s)
{
  return weft__deque_len(&fake_sh[s].deque);
}

static uint64_t stat_of(const weft__counter *c)
{
  return weft__counter_get(c);
}

static unsigned gcd_u(unsigned a, unsigned b)
{
  while (b) {
    unsigned t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* ---- a round probes every other shard, each once ---------------------------------------- */

/* One round of thief 0 on n shards, the walk starting at (cursor, step):
 * with one probe per group and two tasks on each of shards 1..n-1, it
 * takes one task from every one of them; with one group of n-1 probes and
 * two tasks on shard `loaded` only, it takes one from there. Either way it
 * probes n-1 times. A round that probed a shard twice would miss another
 * one - its second look finds one task, which the gate refuses, or an
 * empty queue - and the missed queue is never looked at. */
static bool round_covers(unsigned n, unsigned stride, unsigned probes, unsigned loaded,
                         unsigned cursor, unsigned step)
{
  fake_init((int)n);
  fake_rt.cfg.steal_stride = stride;
  fake_rt.cfg.steal_probes = probes;
  for (unsigned v = 1; v < n; v++)
    fake_queue((int)v, loaded == 0 || v == loaded ? 2 : 0);
  fake_sh[0].steal.cursor = cursor;
  fake_sh[0].steal.steps = step;
  unsigned got = weft__steal_round(&fake_sh[0]);
  bool ok = got == (loaded ? 1 : n - 1);
  for (unsigned v = 1; v < n; v++)
    ok = ok && qlen((int)v) == (loaded == 0 || v == loaded ? 1u : 0u);
  ok = ok && stat_of(&fake_sh[0].stats.steal_attempts) == n - 1;
  static int logged;
  if (!ok && logged++ < 3) {
    char left[64] = "";
    for (unsigned v = 1; v < n; v++)
      snprintf(left + strlen(left), sizeof(left) - strlen(left), " %u", qlen((int)v));
    cr_log_error("%u shards, stride %u, %u probes, loaded %u, cursor %u, step %u: took %u "
                 "in %llu probes, queues left:%s", n, stride, probes, loaded, cursor, step, got,
                 (unsigned long long)stat_of(&fake_sh[0].stats.steal_attempts), left);
  }
  return ok;
}

/* Every stride and start of the walk (cursor, and the step within the
 * walk's cycle when the stride shares a factor with the count); returns
 * how many rounds failed. */
static int walk_all_starts(unsigned n)
{
  int failed = 0;
  for (unsigned stride = 1; stride <= n; stride++) {
    unsigned s = stride % n ? stride % n : 1;
    unsigned g = gcd_u(s, n);
    unsigned cycle = g > 1 ? n / g : 1;
    for (unsigned cursor = 0; cursor < n; cursor++)
      for (unsigned step = 0; step < cycle; step++) {
        failed += !round_covers(n, stride, 1, 0, cursor, step);
        for (unsigned v = 1; v < n; v++)
          failed += !round_covers(n, stride, n - 1, v, cursor, step);
      }
  }
  return failed;
}

Test(steal, a_round_probes_each_other_shard_once_whatever_the_stride, .timeout = 30)
{
  static const unsigned counts[] = {2, 3, 4, 6, 8};
  int failed = 0;
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    failed += walk_all_starts(counts[i]);
  }
  fake_term();
  cr_assert_eq(failed, 0, "%d walks probed a shard twice in a round and missed another", failed);
}

/* ---- work queued during a failed round ends the cooldown --------------------------------- */

static void queue_on_two_during_the_take(void)
{
  /* Shard 1's owner runs both of its tasks first: the thief's take gets
   * nothing. Shard 2's owner queues two (its push bumps the epoch: the
   * queue reached the length a thief takes from) - after the thief probed
   * shard 2 and found it empty. */
  weft_task *t[2];
  cr_assert_eq(weft__deque_take(&fake_sh[1].deque, t, 2), 2);
  for (int i = 0; i < 2; i++)
    cr_assert(weft__steal_enqueue(&fake_sh[2], fake_task()));
}

/* runtime.h: new work ends a thief's cooldown. Work queued while a round
 * was failing is new to that round: the round that comes next must look
 * again, not sit out the cooldown with a queue it never saw. */
Test(steal, work_queued_during_a_failed_round_ends_its_cooldown, .timeout = 30)
{
  fake_init(3);
  fake_rt.cfg.steal_probes = 2;         /* one group: shards 1 and 2 */
  fake_rt.cfg.steal_backoff_min = 1000; /* a cooldown no test would wait out */
  fake_rt.cfg.steal_backoff_max = 1000;
  fake_sh[0].steal.cursor = 1;
  fake_queue(1, 2);
  unsigned epoch = atomic_load(&fake_rt.steal_epoch);
  weft__test_steal_pause = queue_on_two_during_the_take;
  unsigned got = weft__steal_round(&fake_sh[0]);
  weft__test_steal_pause = NULL;
  cr_assert_eq(got, 0);
  cr_assert_neq(atomic_load(&fake_rt.steal_epoch), epoch, "the push did not bump the epoch");
  cr_assert_gt(fake_sh[0].steal.cooldown, 0);
  cr_assert_eq(qlen(2), 2);
  got = weft__steal_round(&fake_sh[0]);
  cr_assert_eq(got, 1, "the round after sat out its cooldown (%llu rounds skipped) next to %u "
               "tasks queued while the failed round ran",
               (unsigned long long)stat_of(&fake_sh[0].stats.steal_skipped_backoff), qlen(2));
  cr_assert_eq(qlen(2), 1);
  cr_assert_eq(stat_of(&fake_sh[0].stats.steal_skipped_backoff), 0);
  fake_term();
}

/* ---- the stuck rule looks at every short queue of a probe group ---------------------------- */

/* Marks shard v's queue as standing still for thief 0 since long enough
 * for the stuck rule: its head has not moved since steal_stuck_ns ago. */
static void mark_stuck(int v)
{
  fake_sh[0].steal.stuck_head[v] = atomic_load(&fake_sh[v].deque.head);
  fake_sh[0].steal.stuck_since[v] = weft__now() - fake_rt.cfg.steal_stuck_ns - 1;
}

/* runtime.h: a queue the gate refuses is taken from once it has not moved
 * for steal_stuck_ns. One group probes shards 1 and 2, one task each (the
 * gate refuses both); shard 2's has stood still, shard 1's was never
 * looked at. The round must take shard 2's, not give up on seeing that
 * shard 1's - the first of the two - is not stuck. */
Test(steal, the_stuck_rule_looks_at_every_short_queue_of_a_group, .timeout = 30)
{
  for (int stuck = 2; stuck >= 1; stuck--) {
    fake_init(3);
    fake_rt.cfg.steal_probes = 2;
    fake_sh[0].steal.cursor = 1;
    fake_queue(1, 1);
    fake_queue(2, 1);
    mark_stuck(stuck);
    unsigned got = weft__steal_round(&fake_sh[0]);
    cr_assert_eq(got, 1, "shard %d's queue stood still and was not taken (%llu refused by "
                 "the gate)", stuck,
                 (unsigned long long)stat_of(&fake_sh[0].stats.steal_skipped_locality));
    cr_assert_eq(qlen(stuck), 0);
    cr_assert_eq(qlen(3 - stuck), 1);
    cr_assert_eq(stat_of(&fake_sh[0].stats.steal_stuck), 1);
    /* The other queue's clock started in the same round: once it too
     * stands still for steal_stuck_ns, the next round takes it. */
    cr_assert_neq(fake_sh[0].steal.stuck_since[3 - stuck], 0,
                  "shard %d's queue was probed but its clock never started", 3 - stuck);
  }
  fake_term();
}
