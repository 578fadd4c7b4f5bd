/* SPDX-License-Identifier: MIT */
/*
 * Suite "stats": each counter of weft/stats.h counts the event its comment
 * names, on the paths that are easy to miss. Checks inside coroutines go
 * through CO_CHECK / CO_EQ.
 */
#include "msg_test.h"

/* ---- sq_full_flushes: every submission a full SQ forced ------------------------ */

#define SQ_RING 8
#define SQ_MSGS (3 * SQ_RING)

static void *sq_receiver(void *arg)
{
  (void)arg;
  for (uint32_t i = 0; i < SQ_MSGS; i++) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, in_ms(10000)), 0);
    CO_EQ(m.val, i);
  }
  return NULL;
}

static void *sq_main(void *arg)
{
  (void)arg;
  weft_task *r = spawn_on(1, sq_receiver, NULL);
  weft_stats before = shard_stats(0);
  /* Direct messages take one SQE each and are not submitted until the
   * loop's flush: without a suspension, three rings' worth fill the SQ
   * (the SQE getter then submits to make room) at least twice. */
  for (uint32_t i = 0; i < SQ_MSGS; i++)
    CO_EQ(weft_msg_send(1, 1, i), 0);
  weft_stats after = shard_stats(0);
  CO_CHECK(after.enters - before.enters >= 2);
  CO_CHECK(after.sq_full_flushes - before.sq_full_flushes >= 2);
  rt_join_int(r);
  return NULL;
}

Test(stats, a_full_sq_counts_on_every_path, .timeout = 30)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.ring_entries = SQ_RING;
  int r = weft_run(&c, sq_main, NULL, NULL);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
  rt_assert_no_leaks();
}
