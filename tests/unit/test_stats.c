/* SPDX-License-Identifier: MIT */
/*
 * Suite "stats": each counter of weft/stats.h counts the event its comment
 * names, on the paths that are easy to miss - forced submissions outside
 * the op path, timers that both fired and were disarmed, ops that end
 * interrupted rather than cancelled. Checks inside coroutines go through
 * CO_CHECK / CO_EQ.
 */
#include "msg_test.h"
#include "rt_internal.h"

#include <fcntl.h>

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

/* ---- timers: one that fired is not also counted as disarmed ----------------------- */

/* A plain thread cancels a sleeper and is held (weft__test_claim_pause)
 * after claiming its waiter; meanwhile the sleeper's deadline passes and its
 * timer fires on shard 1, finding the waiter claimed. The cancel's wake-up
 * then readies the sleeper, whose timer is no longer armed: it fired, and
 * nothing was disarmed. The shard is kept from firing the timer (a blocker
 * that never suspends) until the claim is held. */
static atomic_int tm_block;          /* 1: blocker runs, 2: let it go */
static atomic_bool tm_claim_held, tm_claim_release;
static _Atomic int64_t tm_deadline;

static void tm_hold_after_claim(void)
{
  atomic_store(&tm_claim_held, true);
  while (!atomic_load(&tm_claim_release))
    sched_yield();
}

static void *tm_blocker(void *arg)
{
  (void)arg;
  atomic_store(&tm_block, 1);
  int64_t until = in_ms(10000);
  while (atomic_load(&tm_block) != 2 && weft_now() < until)
    sched_yield();
  return NULL;
}

static void *tm_sleeper(void *arg)
{
  weft_task **blocker = arg;
  /* Queued behind us: it runs once we sleep, and keeps the loop away from
   * our timer until released. */
  *blocker = spawn_on(1, tm_blocker, NULL);
  /* Far enough that it is still ahead when the timer is armed: the
   * blocker, not the clock, keeps the timer from firing early. */
  int64_t d = in_ms(100);
  atomic_store(&tm_deadline, d);
  CO_EQ(weft_sleep_until(d), -ECANCELED);
  return NULL;
}

static void *tm_cancel_from_thread(void *arg)
{
  weft__test_claim_pause = tm_hold_after_claim;
  return (void *)(intptr_t)weft_cancel(arg);
}

static void *tm_main(void *arg)
{
  (void)arg;
  weft_task *blocker = NULL;
  weft_task *s = spawn_on(1, tm_sleeper, &blocker);
  CO_CHECK(RT_POLL(atomic_load(&tm_block) == 1));
  weft_stats before = shard_stats(1);
  CO_EQ(before.timers_armed, 1);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, tm_cancel_from_thread, s), 0);
  CO_CHECK(RT_POLL(atomic_load(&tm_claim_held)));
  CO_CHECK(RT_POLL(weft_now() > atomic_load(&tm_deadline)));
  atomic_store(&tm_block, 2);
  CO_CHECK(RT_POLL(shard_stats(1).timers_fired == 1));
  weft__test_claim_pause = NULL;
  atomic_store(&tm_claim_release, true);
  void *c = NULL;
  pthread_join(th, &c);
  CO_EQ((intptr_t)c, 0);
  CO_EQ(weft_join(s, NULL), -ECANCELED);
  rt_join_int(blocker);
  weft_stats st = shard_stats(1);
  CO_EQ(st.timers_armed, 1);
  CO_EQ(st.timers_fired, 1);
  CO_EQ(st.timers_cancelled, 0);
  return NULL;
}

Test(stats, a_timer_that_fired_is_not_counted_cancelled, .timeout = 30)
{
  cr_assert_null(rt_run(2, tm_main, NULL));
  rt_assert_clean();
}

/* ---- ops_cancelled / ops_timed_out: ops a kernel worker ended interrupted ---------- */

/* A splice runs in an io_uring worker and blocks there on an empty pipe;
 * cancelled, the worker is interrupted and the op ends with -EINTR or a
 * restart code rather than -ECANCELED. The call reports -ECANCELED (or
 * -ETIMEDOUT for its deadline), and the counters must say the same. */
static int splice_fds[2][2]; /* [0] the empty pipe, [1] where it would go */

static void *splice_victim(void *arg)
{
  int64_t deadline = (int64_t)(intptr_t)arg;
  ssize_t r = weft_splice_dl(splice_fds[0][0], NULL, splice_fds[1][1], NULL, 100, 0, deadline);
  return (void *)(intptr_t)r;
}

static void *splice_main(void *arg)
{
  (void)arg;
  for (int i = 0; i < 2; i++)
    CO_EQ(pipe2(splice_fds[i], O_CLOEXEC), 0);
  /* Cancelled. */
  weft_stats before = shard_stats(0);
  weft_task *t = spawn_on(0, splice_victim, (void *)(intptr_t)WEFT_NO_DEADLINE);
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1));
  CO_EQ(weft_cancel(t), 0);
  void *res = NULL;
  CO_EQ(weft_join(t, &res), -ECANCELED);
  CO_EQ((intptr_t)res, -ECANCELED);
  weft_stats after = shard_stats(0);
  CO_EQ(after.ops_cancelled - before.ops_cancelled, 1);
  CO_EQ(after.ops_timed_out - before.ops_timed_out, 0);
  /* Timed out. */
  before = after;
  /* Ahead still when the splice starts, or it would fail before any op. */
  t = spawn_on(0, splice_victim, (void *)(intptr_t)in_ms(200));
  CO_EQ(weft_join(t, &res), 0);
  CO_EQ((intptr_t)res, -ETIMEDOUT);
  after = shard_stats(0);
  CO_EQ(after.ops_timed_out - before.ops_timed_out, 1);
  CO_EQ(after.ops_cancelled - before.ops_cancelled, 0);
  for (int i = 0; i < 2; i++) {
    close(splice_fds[i][0]);
    close(splice_fds[i][1]);
  }
  return NULL;
}

Test(stats, ops_interrupted_in_a_worker_count_as_cancelled_or_timed_out, .timeout = 30)
{
  cr_assert_null(rt_run(2, splice_main, NULL));
  rt_assert_clean();
}

/* ---- steal_stuck: a stuck queue counts only when something was taken ------------- */

/* Shard 0 is held by a task that never suspends, with one stealable task
 * queued: too short for the gate, so the idle shard 1 takes it by the stuck
 * rule. Held (weft__test_steal_pause) between picking the victim and taking,
 * the thief lets shard 0 run the task itself first: it takes nothing, and
 * steal_stuck (short queues taken from) must not count that probe. */
static atomic_bool sk_armed, sk_hit, sk_stop;

static void sk_pause(void)
{
  if (!atomic_exchange(&sk_armed, false))
    return;
  weft__shard *victim = &weft_runtime_current()->shards[0];
  atomic_store(&sk_hit, true);
  int64_t until = in_ms(10000);
  while (weft__deque_len(&victim->deque) != 0 && weft_now() < until)
    sched_yield();
}

/* Keeps shard 1 coming back to its loop, which steals between sleeps. */
static void *sk_ticker(void *arg)
{
  (void)arg;
  while (!atomic_load(&sk_stop))
    CO_EQ(weft_sleep(100 * WEFT_USEC), 0);
  return NULL;
}

static void *sk_short(void *arg)
{
  return arg;
}

static void *sk_holder(void *arg)
{
  (void)arg;
  atomic_store(&sk_armed, true);
  weft__test_steal_pause = sk_pause;
  weft_task *s = NULL;
  CO_EQ(rt_spawn(&s, WEFT_PLACE_STEALABLE, 0, sk_short, NULL), 0);
  int64_t until = in_ms(10000);
  while (!atomic_load(&sk_hit) && weft_now() < until)
    sched_yield();
  CO_CHECK(atomic_load(&sk_hit));
  CO_EQ(weft_yield(), 0); /* runs s here, from the queue the thief picked */
  rt_join_int(s);
  weft__test_steal_pause = NULL;
  return NULL;
}

static void *sk_main(void *arg)
{
  (void)arg;
  weft_task *tick = spawn_on(1, sk_ticker, NULL);
  weft_task *h = spawn_on(0, sk_holder, NULL);
  rt_join_int(h);
  atomic_store(&sk_stop, true);
  rt_join_int(tick);
  weft_stats st = shard_stats(1);
  CO_EQ(st.steal_takes, 0);
  CO_EQ(st.steal_stuck, st.steal_takes);
  return NULL;
}

Test(stats, steal_stuck_counts_only_queues_taken_from, .timeout = 30)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.steal_stuck_ns = 1;
  int r = weft_run(&c, sk_main, NULL, NULL);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
}

/* ---- steal_wakes: only the wake-ups a shard really sent -------------------------------- */

/* Shard 1 sleeps; shard 0 queues enough stealable tasks to wake it. Held
 * (weft__test_wake_thief_pause) after it found shard 1 asleep with no
 * wake-up on its way, shard 0 sees another waker's wake-up set off first
 * (wake_pending; the test sends it for real afterwards, so that shard 1
 * cannot wake and sleep again in between): its own is coalesced, and is
 * not one it sent. */
#define WK_TASKS 3 /* the steal threshold: 2 + the default locality margin */

static atomic_bool wk_armed, wk_hit;

static void wk_pause(void)
{
  if (!atomic_exchange(&wk_armed, false))
    return;
  atomic_store(&wk_hit, true);
  atomic_store(&weft_runtime_current()->shards[1].wake_pending, 1); /* the other waker */
}

static void *wk_short(void *arg)
{
  return arg;
}

static void *wk_body(void *arg)
{
  (void)arg;
  CO_CHECK(rt_wait_parked(weft_runtime_current(), 1));
  weft_stats before = shard_stats(0);
  atomic_store(&wk_armed, true);
  weft__test_wake_thief_pause = wk_pause;
  weft_task *t[WK_TASKS];
  for (int i = 0; i < WK_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, 0, wk_short, NULL), 0);
  weft_stats after = shard_stats(0); /* before any suspension: no other wake-up */
  weft__test_wake_thief_pause = NULL;
  CO_CHECK(atomic_load(&wk_hit));
  CO_EQ(after.steal_wakes - before.steal_wakes, 0);
  CO_EQ(shard_stats(1).wakes_coalesced, 1);
  /* The other waker's wake-up, sent now. */
  weft__shard *thief = &weft_runtime_current()->shards[1];
  atomic_store(&thief->wake_pending, 0);
  CO_CHECK(weft__shard_notify(thief));
  for (int i = 0; i < WK_TASKS; i++)
    rt_join_int(t[i]);
  return NULL;
}

static void *wk_main(void *arg)
{
  (void)arg;
  rt_join_int(spawn_on(0, wk_body, NULL));
  return NULL;
}

Test(stats, steal_wakes_counts_wake_ups_sent, .timeout = 30)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.spin_ns = c.spin_max_ns = 0; /* shard 1 sleeps at once */
  int r = weft_run(&c, wk_main, NULL, NULL);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
}

/* ---- derived ratios: within their bounds in a torn snapshot ------------------------- */

/* The counters are read one by one while their shard goes on: a snapshot
 * may see a take whose probe came after it read steal_attempts. Such a
 * snapshot is made here by hand on an idle shard (steal off: nothing else
 * writes them), and stats.h's bound for steal_success_rate must hold. */
static void *torn_main(void *arg)
{
  (void)arg;
  weft__shard_stats *s = &weft_runtime_current()->shards[1].stats;
  atomic_store(&s->steal_attempts.v, 4);
  atomic_store(&s->steal_scans.v, 5);
  atomic_store(&s->steal_takes.v, 5);
  atomic_store(&s->steal_success.v, 5);
  for (int shard = -1; shard <= 1; shard++) {
    weft_stats st = shard_stats(shard);
    CO_CHECK(st.steal_success_rate >= 0.0 && st.steal_success_rate <= 1.0);
    CO_CHECK(st.local_hit_ratio >= 0.0 && st.local_hit_ratio <= 1.0);
  }
  return NULL;
}

Test(stats, derived_ratios_stay_in_bounds_in_a_torn_snapshot, .timeout = 30)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.steal = false;
  int r = weft_run(&c, torn_main, NULL, NULL);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
}

/* ---- msgs_sent / msg_failed: a ticketed send the kernel refused ------------------------ */

static void *tk_drain(void *arg)
{
  (void)arg;
  weft_msg m;
  CO_EQ(weft_msg_try_recv(&m, 0), 0);
  CO_EQ(m.val, 6);
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN);
  return NULL;
}

/* The refused one (WEFT__FAULT_SEND) returns the kernel's error and is
 * not sent again: not a message sent, a send the kernel refused. */
static void *tk_body(void *arg)
{
  (void)arg;
  weft_stats before = shard_stats(0);
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  CO_EQ(weft_msg_send_wait(1, 3, 5), -EINVAL);
  CO_EQ(weft_msg_send_wait(1, 3, 6), 0);
  weft_stats after = shard_stats(0);
  CO_EQ(after.msgs_sent - before.msgs_sent, 1);
  CO_EQ(after.msg_failed - before.msg_failed, 1);
  CO_EQ(weft_join(spawn_on(1, tk_drain, NULL), NULL), 0);
  return NULL;
}

static void *tk_main(void *arg)
{
  (void)arg;
  rt_join_int(spawn_on(0, tk_body, NULL));
  return NULL;
}

Test(stats, a_refused_ticketed_send_is_no_message_sent, .timeout = 30)
{
  cr_assert_null(rt_run(2, tk_main, NULL));
  rt_assert_clean();
}
