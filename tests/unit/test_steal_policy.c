/* SPDX-License-Identifier: MIT */
/*
 * Suite "steal", part 4 - the policy knobs as runtime.h states them, taken
 * one by one to their documented limits: how long the backoff grows.
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
