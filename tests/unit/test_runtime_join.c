/* SPDX-License-Identifier: MIT */
/*
 * Suite "runtime", a task's end as others see it: join across shards and
 * from a plain thread, joining oneself, join deadlines (and no memory for
 * their timer), detach, and cancel - of a finished task, of a blocked or a
 * never-run one, and of a joiner, which cancels and waits for its target.
 * The rest of suite "runtime" is in test_runtime.c. Checks inside
 * coroutines go through CO_CHECK / CO_EQ (see rt_helpers.h).
 */
#include "runtime_test.h"

#include "fault.h"

/* ---- join, detach, cancel ---------------------------------------------------------- */

static void *join_back(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 0, ret_arg, (void *)(intptr_t)31), 0);
  return (void *)(rt_join_int(t) + 100 * weft_shard_id());
}

static void *join_main(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, ret_arg, (void *)(intptr_t)77), 0);
  CO_EQ(rt_join_int(t), 77);
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, join_back, NULL), 0);
  CO_EQ(rt_join_int(t), 131);
  CO_EQ(weft_join(NULL, NULL), -EINVAL);
  return NULL;
}

Test(runtime, join_across_shards, .timeout = 20)
{
  rt_run(2, join_main, NULL);
  rt_assert_clean();
}

Test(runtime, join_from_plain_thread, .timeout = 20)
{
  weft_runtime *rt = rt_start(2);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  for (int k = 0; k < 2; k++) {
    o.placement = WEFT_PLACE_PINNED;
    o.shard = k;
    weft_task *t;
    cr_assert_eq(weft_runtime_submit(rt, &o, ret_shard, NULL, &t), 0);
    void *v = (void *)-1;
    cr_assert_eq(weft_join(t, &v), 0);
    cr_assert_eq((intptr_t)v, k);
  }
  rt_stop_idle(rt);
}

static void *join_self(void *arg)
{
  (void)arg;
  void *v = (void *)5;
  CO_EQ(weft_join(weft_task_self(), &v), -EDEADLK);
  CO_EQ(weft_join_dl(weft_task_self(), &v, weft_now() + WEFT_SEC), -EDEADLK);
  CO_CHECK(v == (void *)5);
  return (void *)(intptr_t)9;
}

static void *join_self_main(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, join_self, NULL), 0);
  CO_EQ(rt_join_int(t), 9); /* the handle is still good */
  return NULL;
}

Test(runtime, join_self_is_edeadlk, .timeout = 20)
{
  rt_run(2, join_self_main, NULL);
  rt_assert_clean();
}

static void *wait_event_ret(void *arg)
{
  CO_EQ(weft_event_wait(arg), 0);
  return (void *)(intptr_t)44;
}

static void *join_dl_main(void *arg)
{
  weft_event *ev = arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, wait_event_ret, ev), 0);
  void *v = (void *)3;
  CO_EQ(weft_join_dl(t, &v, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_join_dl(t, &v, 0), -ETIMEDOUT);
  /* No memory for the deadline's timer (this shard has armed none yet: its
   * heap is allocated now): -ENOMEM, the handle still ours. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_join_dl(t, &v, weft_now() + WEFT_SEC), -ENOMEM);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 0);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  /* A deadline scope bounds a join as a deadline does. */
  int64_t saved = weft_deadline_push(weft_now() + 2 * WEFT_MSEC);
  CO_EQ(weft_join(t, &v), -ETIMEDOUT);
  weft_deadline_pop(saved);
  int64_t dl = weft_now() + 2 * WEFT_MSEC;
  CO_EQ(weft_join_dl(t, &v, dl), -ETIMEDOUT);
  CO_CHECK(weft_now() >= dl);
  CO_CHECK(v == (void *)3);
  CO_EQ(weft_event_set(ev), 0);
  CO_EQ(weft_join_dl(t, &v, weft_now() + 60 * WEFT_SEC), 0);
  CO_EQ((intptr_t)v, 44);
  return NULL;
}

Test(runtime, join_dl_times_out_or_fails_and_keeps_handle, .timeout = 20)
{
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  rt_run(2, join_dl_main, ev);
  rt_assert_clean();

  /* The same from a plain thread (futex path). */
  weft_event_reset(ev);
  weft_runtime *rt = rt_start(2);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, wait_event_ret, ev, &t), 0);
  void *v = (void *)3;
  cr_assert_eq(weft_join_dl(t, &v, weft_now() - 1), -ETIMEDOUT);
  int64_t dl = weft_now() + 2 * WEFT_MSEC;
  cr_assert_eq(weft_join_dl(t, &v, dl), -ETIMEDOUT);
  cr_assert_geq(weft_now(), dl);
  cr_assert_eq(v, (void *)3);
  cr_assert_eq(weft_event_set(ev), 0);
  cr_assert_eq(weft_join(t, &v), 0);
  cr_assert_eq((intptr_t)v, 44);
  rt_stop_idle(rt);
  rt_assert_clean();
  weft_event_destroy(ev);
}

static atomic_int detached_done;

static void *detached_body(void *arg)
{
  (void)arg;
  CO_EQ(weft_sleep(WEFT_MSEC), 0);
  atomic_fetch_add(&detached_done, 1);
  return NULL;
}

static uint64_t live_tasks(void)
{
  weft_stats s;
  return weft_stats_get(NULL, -1, &s) == 0 ? s.live : UINT64_MAX;
}

static void *detach_main(void *arg)
{
  (void)arg;
  for (int i = 0; i < 50; i++) {
    weft_task *t;
    CO_EQ(rt_spawn(&t, WEFT_PLACE_ROUND_ROBIN, -1, detached_body, NULL), 0);
    CO_EQ(weft_detach(t), 0);
  }
  for (int i = 0; i < 50; i++) /* detached from the start */
    CO_EQ(rt_spawn(NULL, WEFT_PLACE_ROUND_ROBIN, -1, detached_body, NULL), 0);
  CO_CHECK(RT_POLL(atomic_load(&detached_done) == 100));
  CO_CHECK(RT_POLL(live_tasks() == 1));
  CO_EQ(weft_detach(NULL), -EINVAL);
  return NULL;
}

Test(runtime, detach_lets_task_finish, .timeout = 20)
{
  rt_run(2, detach_main, NULL);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&detached_done), 100);
}

static void *cancel_finished_main(void *arg)
{
  (void)arg;
  weft_task *t;
  /* Same shard: the yield lets it run to the end before main continues. */
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, ret_arg, (void *)(intptr_t)8), 0);
  CO_EQ(weft_yield(), 0);
  CO_EQ(weft_cancel(t), -ESRCH);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), 0); /* not cancelled: the cancel found it done */
  CO_EQ((intptr_t)v, 8);
  CO_EQ(weft_cancel(NULL), -EINVAL);
  return NULL;
}

Test(runtime, cancel_finished_task_is_esrch, .timeout = 20)
{
  rt_run(2, cancel_finished_main, NULL);
  rt_assert_clean();
}

struct blocked {
  weft_event *ev;
  atomic_int started;
  int wait_result, later_result, yield_result;
};

static void *blocked_waiter(void *arg)
{
  struct blocked *b = arg;
  atomic_fetch_add(&b->started, 1);
  b->wait_result = weft_event_wait(b->ev);
  b->later_result = weft_sleep(WEFT_SEC); /* every later blocking call too */
  b->yield_result = weft_yield();
  return (void *)(intptr_t)21;
}

static void *never_runs(void *arg)
{
  atomic_fetch_add((atomic_int *)arg, 1);
  return (void *)(intptr_t)1;
}

static void *cancel_main(void *arg)
{
  struct blocked *b = arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, blocked_waiter, b), 0);
  CO_CHECK(RT_POLL(atomic_load(&b->started) == 1));
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1));
  CO_EQ(weft_cancel(t), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, 21);
  CO_EQ(b->wait_result, -ECANCELED);
  CO_EQ(b->later_result, -ECANCELED);
  CO_EQ(b->yield_result, -ECANCELED);

  /* Cancelled before it ever ran (queued behind main on this shard). */
  atomic_int runs = 0;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, never_runs, &runs), 0);
  CO_EQ(weft_cancel(t), 0);
  v = (void *)5;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_CHECK(v == NULL);
  CO_EQ(atomic_load(&runs), 0);
  return NULL;
}

Test(runtime, cancel_blocked_task_is_ecanceled, .timeout = 20)
{
  struct blocked b = {.wait_result = 1, .later_result = 1, .yield_result = 1};
  cr_assert_eq(weft_event_create(&b.ev, 0), 0);
  rt_run(2, cancel_main, &b);
  rt_assert_clean();

  /* Cancelled from a plain thread. */
  weft_runtime *rt = rt_start(2);
  atomic_store(&b.started, 0);
  b.wait_result = b.later_result = b.yield_result = 1;
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, blocked_waiter, &b, &t), 0);
  cr_assert(RT_POLL(atomic_load(&b.started) == 1));
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 1)); /* a wait to end */
  cr_assert_eq(weft_cancel(t), 0);
  void *v = NULL;
  cr_assert_eq(weft_join(t, &v), -ECANCELED);
  cr_assert_eq((intptr_t)v, 21);
  cr_assert_eq(b.wait_result, -ECANCELED);
  cr_assert_eq(b.later_result, -ECANCELED);
  cr_assert_eq(b.yield_result, -ECANCELED);
  rt_stop_idle(rt);
  weft_event_destroy(b.ev);
  rt_assert_no_leaks();
}

struct joiner {
  weft_task *target;
  atomic_int started;
  int join_result;
  void *joined_value;
};

/* Returns 45 if its wait was cancelled, 44 if the event came. */
static void *wait_event_or_cancel(void *arg)
{
  int r = weft_event_wait(arg);
  return (void *)(intptr_t)(r == -ECANCELED ? 45 : 44);
}

static void *cancelled_joiner(void *arg)
{
  struct joiner *j = arg;
  atomic_fetch_add(&j->started, 1);
  j->join_result = weft_join(j->target, &j->joined_value);
  return NULL;
}

static void *cancel_joiner_main(void *arg)
{
  weft_event *ev = arg;
  struct joiner j = {.join_result = 1};
  CO_EQ(rt_spawn(&j.target, WEFT_PLACE_PINNED, 1, wait_event_or_cancel, ev), 0);
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 0, cancelled_joiner, &j), 0);
  CO_CHECK(RT_POLL(atomic_load(&j.started) == 1));
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 2));
  CO_EQ(weft_cancel(t), 0);
  CO_EQ(weft_join(t, NULL), -ECANCELED);
  /* The joiner's cancellation reached the target, and the joiner returned
   * only after the target had: its result was collected, the handle freed. */
  CO_EQ(j.join_result, -ECANCELED);
  CO_EQ((intptr_t)j.joined_value, 45);
  CO_EQ(rt_dump_count(NULL, " waiting"), 0);
  return NULL;
}

Test(runtime, cancelled_joiner_cancels_and_waits_for_the_target, .timeout = 20)
{
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  rt_run(2, cancel_joiner_main, ev);
  rt_assert_clean();
  weft_event_destroy(ev);
}


/* A cancelled task joining one that has returned already has nothing to
 * wait for: it gets that task's own outcome and result. */
static void *returns_46(void *arg)
{
  atomic_store((atomic_int *)arg, 1);
  return (void *)(intptr_t)46;
}

static void *join_finished_main(void *arg)
{
  (void)arg;
  atomic_int done = 0;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 0, returns_46, &done), 0);
  CO_CHECK(RT_POLL(atomic_load(&done) == 1 && rt_dump_count(NULL, "task ") == 1));
  CO_EQ(weft_cancel(weft_task_self()), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), 0);
  CO_EQ((intptr_t)v, 46);
  CO_EQ(weft_yield(), -ECANCELED); /* cancelled all the same */
  return NULL;
}

Test(runtime, cancelled_joiner_of_a_finished_task_gets_its_outcome, .timeout = 20)
{
  rt_run(2, join_finished_main, NULL);
  rt_assert_clean();
}
