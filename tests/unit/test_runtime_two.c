/* SPDX-License-Identifier: MIT */
/*
 * Suite "runtime", two runtimes at once and wake-ups the kernel refuses:
 * coroutines of one runtime submitting to, waking and stopping the other
 * (and whose shard the submits count on), a refused wake-up between two
 * runtimes that must not block the next one, and a refused wake-up to a
 * sleeping shard falling back to its eventfd, whose poll is armed again
 * when the kernel ends it; a stop from a coroutine whose shard the stopped
 * runtime's tasks wait for; weft_run from a coroutine whose deadline scope
 * ends. The rest of the runtime as a whole is in
 * test_runtime_life.c. Checks inside coroutines go through CO_CHECK /
 * CO_EQ (see rt_helpers.h).
 */
#include "rt_internal.h"
#include "runtime_test.h"

#include "core.h"
#include "fault.h"
#include "weft/uring.h"

/* ---- two runtimes ------------------------------------------------------------------ */

struct two {
  weft_runtime *b;
  weft_event *ev;
  int wait_result;
};

static void *b_waiter(void *arg)
{
  struct two *w = arg;
  w->wait_result = weft_event_wait(w->ev);
  return (void *)(intptr_t)(100 + weft_shard_id());
}

static void *a_worker(void *arg)
{
  struct two *w = arg;
  int64_t sum = 0;
  for (int i = 0; i < 100; i++) { /* its own work */
    weft_task *t;
    CO_EQ(rt_spawn(&t, WEFT_PLACE_ROUND_ROBIN, -1, times3, (void *)(intptr_t)i), 0);
    sum += rt_join_int(t);
  }
  CO_EQ(sum, 3 * 4950 + 100);
  /* A task submitted to B from here, joined here. */
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *t;
  CO_EQ(weft_runtime_submit(w->b, &o, ret_shard, NULL, &t), 0);
  CO_EQ(rt_join_int(t), 1);
  CO_CHECK(weft_runtime_current() != w->b);
  /* B's waiter is blocked (B's only task now): the set wakes it across runtimes. */
  CO_CHECK(RT_POLL(rt_dump_count(w->b, " waiting") == 1));
  CO_EQ(weft_event_set(w->ev), 0);
  return (void *)(intptr_t)weft_runtime_shards(NULL);
}

Test(runtime, two_runtimes_wake_each_other, .timeout = 20)
{
  weft_runtime *a = rt_start(1);
  weft_runtime *b = rt_start(2);
  struct two w = {.b = b, .wait_result = 1};
  cr_assert_eq(weft_event_create(&w.ev, 0), 0);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *tb, *ta;
  cr_assert_eq(weft_runtime_submit(b, &o, b_waiter, &w, &tb), 0);
  cr_assert_eq(weft_runtime_submit(a, NULL, a_worker, &w, &ta), 0);
  void *va = NULL, *vb = NULL;
  cr_assert_eq(weft_join(ta, &va), 0);
  cr_assert_eq(weft_join(tb, &vb), 0);
  rt_assert_clean();
  cr_assert_eq((intptr_t)va, 1);
  cr_assert_eq((intptr_t)vb, 101);
  cr_assert_eq(w.wait_result, 0);
  rt_stop_idle(a);
  rt_stop_idle(b);
  weft_event_destroy(w.ev);
  rt_assert_no_leaks();
}

static atomic_bool set_go;

/* Keeps A's shard awake (yielding) until told, then sets the event: the
 * only message the fault can hit is then the wake-up sent to B. */
static void *set_event_when_told(void *arg)
{
  while (!atomic_load(&set_go))
    weft_yield();
  CO_EQ(weft_event_set(arg), 0);
  return NULL;
}

/* A coroutine of A wakes a task of B whose shard sleeps, and the kernel
 * refuses the wake-up message: B's shard must not be left marked as
 * "a wake-up is on its way" - the next wake-up (here a plain thread's
 * submit) is sent and B runs both tasks. */
Test(runtime, refused_wake_to_other_runtime_lets_the_next_one_through, .timeout = 20)
{
  weft_runtime *a = rt_start(1);
  weft_config c;
  rt_cfg(&c, 1);
  c.spin_ns = 0; /* an idle shard sleeps in the kernel at once */
  weft_runtime *b = rt_start_cfg(&c);
  struct two w = {.b = b, .wait_result = 1};
  cr_assert_eq(weft_event_create(&w.ev, 0), 0);
  weft_task *tb, *ta, *tn;
  cr_assert_eq(weft_runtime_submit(b, NULL, b_waiter, &w, &tb), 0);
  cr_assert_eq(weft_runtime_submit(a, NULL, set_event_when_told, w.ev, &ta), 0);
  cr_assert(rt_wait_parked(b, 0), "B's shard never slept");
  weft__fault_arm(WEFT__FAULT_POST, 1);
  atomic_store(&set_go, true);
  cr_assert_eq(weft_join(ta, NULL), 0);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0,
               "the wake-up did not go through the synchronous post");
  cr_assert_eq(weft_runtime_submit(b, NULL, ret_shard, NULL, &tn), 0);
  void *vb = NULL;
  cr_assert_eq(weft_join(tb, &vb), 0);
  cr_assert_eq((intptr_t)vb, 100);
  cr_assert_eq(w.wait_result, 0);
  cr_assert_eq(weft_join(tn, NULL), 0);
  rt_stop_idle(a);
  rt_stop_idle(b);
  weft_event_destroy(w.ev);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A plain thread submits to a sleeping shard and the kernel refuses the
 * wake-up message: the shard is woken through its eventfd and runs the
 * task, rather than sleeping on with it queued. */
Test(runtime, refused_wake_falls_back_to_the_eventfd, .timeout = 20)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.spin_ns = 0;
  c.steal = false; /* shard 1 must run it: nobody else takes it */
  weft_runtime *rt = rt_start_cfg(&c);
  cr_assert(rt_wait_parked(rt, 1), "shard 1 never slept");
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft_task *t = rt_submit_on(rt, 1, ret_shard, NULL);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0,
               "no wake-up message was refused");
  void *v = NULL;
  cr_assert_eq(weft_join(t, &v), 0);
  cr_assert_eq((intptr_t)v, 1);
  /* Both ways refused: the task waits, queued, and the shard is not left
   * marked as being woken - the next submit wakes it for both. */
  cr_assert(rt_wait_parked(rt, 1), "shard 1 never slept again");
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  weft_task *t2 = rt_submit_on(rt, 1, ret_shard, NULL);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_WAKE_FD]), 0);
  cr_assert_eq(weft_join(rt_submit_on(rt, 1, ret_shard, NULL), &v), 0);
  cr_assert_eq(weft_join(t2, &v), 0);
  cr_assert_eq((intptr_t)v, 1);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* Ends the shard's eventfd poll the way the kernel may (a CQE without
 * IORING_CQE_F_MORE): cancelled through the io_uring extension API. */
static void *cancel_wake_poll(void *arg)
{
  (void)arg;
  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  if (!sqe)
    return NULL;
  io_uring_prep_cancel64(sqe, WEFT__UD_WAKE_FD, 0);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, weft_now() + 5 * WEFT_SEC), 0);
  return NULL;
}

/* Once the kernel has ended the poll, the shard arms it again: the
 * eventfd still stands in for a refused wake-up afterwards. */
Test(runtime, eventfd_poll_is_armed_again_when_it_ends, .timeout = 20)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.spin_ns = 0;
  c.steal = false;
  weft_runtime *rt = rt_start_cfg(&c);
  cr_assert_eq(weft_join(rt_submit_on(rt, 1, cancel_wake_poll, NULL), NULL), 0);
  rt_assert_clean();
  cr_assert(rt_wait_parked(rt, 1), "shard 1 never slept");
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft_task *t = rt_submit_on(rt, 1, ret_shard, NULL);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0);
  void *v = NULL;
  cr_assert_eq(weft_join(t, &v), 0);
  cr_assert_eq((intptr_t)v, 1);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *submit_to_b(void *arg)
{
  struct two *w = arg;
  for (int i = 0; i < 10; i++) {
    weft_task *t;
    CO_EQ(weft_runtime_submit(w->b, NULL, ret_shard, NULL, &t), 0);
    rt_join_int(t);
  }
  return NULL;
}

Test(runtime, stats_submit_from_other_runtime_counts_on_target, .timeout = 20)
{
  weft_runtime *a = rt_start(1);
  weft_runtime *b = rt_start(2);
  struct two w = {.b = b};
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(a, NULL, submit_to_b, &w, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  rt_assert_clean();
  weft_stats sa, sb, sa0;
  cr_assert_eq(weft_stats_get(a, -1, &sa), 0);
  cr_assert_eq(weft_stats_get(a, 0, &sa0), 0);
  cr_assert_eq(weft_stats_get(b, -1, &sb), 0);
  /* B: the 10 tasks A's coroutine submitted; A: only its own task, which a
   * plain thread submitted (so none counts on A's shard). */
  cr_assert_eq(sb.finished, 10);
  cr_assert_eq(sb.spawned, 10, "runtime B reports %llu spawned, %llu finished",
               (unsigned long long)sb.spawned, (unsigned long long)sb.finished);
  cr_assert_eq(sa.spawned, 1, "runtime A reports %llu spawned", (unsigned long long)sa.spawned);
  cr_assert_eq(sa.finished, 1);
  cr_assert_eq(sa0.spawned, 0);
  rt_stop_idle(a);
  rt_stop_idle(b);
}

static void *stop_other(void *arg)
{
  /* B's shards asleep in the kernel first: the stop must wake them. */
  weft_runtime *b = arg;
  for (int i = 0; i < 2; i++)
    CO_CHECK(RT_POLL(atomic_load(&b->shards[i].parked)));
  return (void *)(intptr_t)weft_runtime_stop(b);
}

Test(runtime, stop_from_coroutine_of_other_runtime, .timeout = 15)
{
  /* weft_runtime_stop: "Must be called from a thread that is not one of rt's
   * shards" - a coroutine of another runtime qualifies. */
  weft_runtime *a = rt_start(1);
  weft_runtime *b = rt_start(2);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(a, NULL, stop_other, b, &t), 0);
  void *v = (void *)-1;
  cr_assert_eq(weft_join(t, &v), 0);
  cr_assert_eq((intptr_t)v, 0);
  rt_assert_clean();
  rt_stop_idle(a);
}

/* A task of B joining a task of A; stopping B cancels the join, which then
 * waits (uncancellably) for A's task to return - on the shard whose
 * coroutine is stopping B. */
struct cross {
  weft_runtime *b;
  weft_event *never; /* never set */
  weft_task *x;      /* on A: waits on `never` */
  int join_result;
};

static void *x_waits(void *arg)
{
  struct cross *c = arg;
  return (void *)(intptr_t)weft_event_wait(c->never);
}

static void *b_joins_x(void *arg)
{
  struct cross *c = arg;
  void *v = NULL;
  c->join_result = weft_join(c->x, &v);
  CO_EQ((intptr_t)v, -ECANCELED);
  return NULL;
}

static void *stop_b_from_a(void *arg)
{
  struct cross *c = arg;
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1));   /* x */
  CO_CHECK(RT_POLL(rt_dump_count(c->b, " waiting") == 1));   /* the join */
  return (void *)(intptr_t)weft_runtime_stop(c->b);
}

Test(runtime, stop_from_a_coroutine_whose_shard_a_cancelled_join_waits_for, .timeout = 20)
{
  weft_runtime *a = rt_start(1);
  struct cross c = {.b = rt_start(1), .join_result = 1};
  cr_assert_eq(weft_event_create(&c.never, 0), 0);
  cr_assert_eq(weft_runtime_submit(a, NULL, x_waits, &c, &c.x), 0);
  weft_task *j, *s;
  cr_assert_eq(weft_runtime_submit(c.b, NULL, b_joins_x, &c, &j), 0);
  cr_assert_eq(weft_detach(j), 0);
  cr_assert_eq(weft_runtime_submit(a, NULL, stop_b_from_a, &c, &s), 0);
  void *v = (void *)-1;
  cr_assert_eq(weft_join(s, &v), 0);
  cr_assert_eq((intptr_t)v, 0);
  cr_assert_eq(c.join_result, -ECANCELED);
  rt_assert_clean();
  rt_stop_idle(a);
  weft_event_destroy(c.never);
}

/* ---- weft_run from a coroutine of another runtime ---------------------------------- */

struct nested {
  weft_event *never; /* never set */
  atomic_int started;
};

static void *nested_main(void *arg)
{
  struct nested *n = arg;
  atomic_store(&n->started, 1);
  int r = weft_event_wait(n->never);
  return (void *)(intptr_t)(1000 - r); /* 1000 + ECANCELED once the scope ends it */
}

/* weft_run in a deadline scope whose deadline passes while main waits:
 * runs main with deadlines further and further out until one passes after
 * main has started (a main cancelled before it starts has result NULL). */
static void *nested_run_in_scope(void *arg)
{
  struct nested *n = arg;
  weft_config c;
  rt_cfg(&c, 1);
  for (int64_t d = WEFT_MSEC; d < 100 * WEFT_SEC; d *= 2) {
    atomic_store(&n->started, 0);
    void *ret = (void *)-1;
    int64_t saved = weft_deadline_push(weft_now() + d);
    int r = weft_run(&c, nested_main, n, &ret);
    weft_deadline_pop(saved);
    CO_EQ(r, 0);
    if (!atomic_load(&n->started)) {
      CO_CHECK(ret == NULL);
      continue;
    }
    return ret;
  }
  CO_CHECK(!"main never started before the deadline");
  return NULL;
}

Test(runtime, nested_run_cut_by_a_deadline_scope_still_returns_mains_result, .timeout = 60)
{
  /* weft_run "runs main_fn ... and when it returns stops the runtime and
   * stores main_fn's result in *ret": the caller's deadline scope may end
   * main's wait (as a cancel of the caller would), but weft_run still
   * waits for main to return and stores what it returned. */
  struct nested n = {0};
  cr_assert_eq(weft_event_create(&n.never, 0), 0);
  void *v = rt_run(1, nested_run_in_scope, &n);
  rt_assert_clean();
  cr_assert_eq((intptr_t)v, 1000 + ECANCELED, "main's result: %ld", (long)(intptr_t)v);
  weft_event_destroy(n.never);
}
