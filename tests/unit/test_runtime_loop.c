/* SPDX-License-Identifier: MIT */
/*
 * Suite "runtime": the two ways a shard's loop saves itself work between
 * tasks - handing a task's turn straight to the next one, and polling a
 * while before it goes to sleep.
 *
 * Direct hand-over (weft_config.handoff): a coroutine that waits or yields
 * switches straight to the next runnable one. It must not change what runs
 * in which order, and a chain of hand-overs that never ends must still leave
 * room for timers, I/O completions and tasks handed in by other threads.
 *
 * The adaptive spin window (weft_config.spin_ns .. spin_max_ns): see its
 * section at the end.
 */
#include "rt_internal.h"

#include <fcntl.h>
#include <unistd.h>

/* ---- the order is the loop's order ------------------------------------------------------------- */

#define ROUNDS 4

struct order {
  char log[3 * ROUNDS + 1];
  int n;
  weft_chan *to_echo, *from_echo; /* for the channel variant */
  uint64_t echoed[ROUNDS];
};

struct yielder_arg {
  struct order *o;
  char me;
};

static void *yielder(void *arg)
{
  struct yielder_arg *a = arg;
  for (int i = 0; i < ROUNDS; i++) {
    a->o->log[a->o->n++] = a->me;
    CO_EQ(weft_yield(), 0);
  }
  return NULL;
}

static void *echo(void *arg)
{
  struct order *o = arg;
  uint64_t v;
  for (int i = 0; i < ROUNDS; i++) {
    CO_EQ(weft_chan_recv(o->to_echo, &v), 0);
    v *= 10;
    CO_EQ(weft_chan_send(o->from_echo, &v), 0);
  }
  return NULL;
}

static void *order_main(void *arg)
{
  struct order *o = arg;
  struct yielder_arg a = {o, 'A'}, b = {o, 'B'}, c = {o, 'C'};
  weft_task *t[4];
  /* All on main's shard, queued A, B, C; main then waits in join. */
  CO_EQ(rt_spawn(&t[0], WEFT_PLACE_PINNED, -1, yielder, &a), 0);
  CO_EQ(rt_spawn(&t[1], WEFT_PLACE_PINNED, -1, yielder, &b), 0);
  CO_EQ(rt_spawn(&t[2], WEFT_PLACE_PINNED, -1, yielder, &c), 0);
  for (int i = 0; i < 3; i++)
    rt_join_int(t[i]);
  /* A round trip through two channels with a partner on the same shard. */
  CO_EQ(rt_spawn(&t[3], WEFT_PLACE_PINNED, -1, echo, o), 0);
  for (int i = 0; i < ROUNDS; i++) {
    uint64_t v = (uint64_t)i + 1;
    CO_EQ(weft_chan_send(o->to_echo, &v), 0);
    CO_EQ(weft_chan_recv(o->from_echo, &o->echoed[i]), 0);
  }
  rt_join_int(t[3]);
  return NULL;
}

static void run_order(bool handoff, struct order *o, weft_stats *st)
{
  memset(o, 0, sizeof(*o));
  cr_assert_eq(weft_chan_create(&o->to_echo, sizeof(uint64_t), 1), 0);
  cr_assert_eq(weft_chan_create(&o->from_echo, sizeof(uint64_t), 0), 0);
  weft_config c;
  rt_cfg(&c, 1);
  c.handoff = handoff;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, order_main, o, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  cr_assert_eq(weft_stats_get(rt, -1, st), 0);
  rt_stop_idle(rt);
  rt_assert_clean();
  weft_chan_unref(o->to_echo);
  weft_chan_unref(o->from_echo);
  o->log[o->n] = '\0';
}

Test(runtime, handoff_keeps_the_order_the_loop_would_run, .timeout = 20)
{
  struct order on, off;
  weft_stats st_on, st_off;
  run_order(true, &on, &st_on);
  run_order(false, &off, &st_off);
  cr_assert_str_eq(off.log, "ABCABCABCABC");
  cr_assert_str_eq(on.log, off.log);
  for (int i = 0; i < ROUNDS; i++) {
    cr_assert_eq(on.echoed[i], (uint64_t)(i + 1) * 10);
    cr_assert_eq(off.echoed[i], on.echoed[i]);
  }
  /* Every yield of a started task and every channel wait could hand over. */
  cr_assert_gt(st_on.handoffs, (uint64_t)ROUNDS);
  cr_assert_eq(st_off.handoffs, 0);
}

/* ---- an endless chain still yields the loop ---------------------------------------------------- */

struct chain {
  atomic_bool stop;
  atomic_long hops;
  atomic_bool timer_done, read_done, submitted_ran;
  int pipe_fd[2];
};

static void *hopper(void *arg)
{
  struct chain *ch = arg;
  /* Two of these yield to each other for ever: each yield hands over. */
  while (!atomic_load(&ch->stop)) {
    atomic_fetch_add(&ch->hops, 1);
    CO_EQ(weft_yield(), 0);
  }
  return NULL;
}

static void *sleeper(void *arg)
{
  struct chain *ch = arg;
  CO_EQ(weft_sleep(5 * WEFT_MSEC), 0);
  atomic_store(&ch->timer_done, true);
  return NULL;
}

static void *reader(void *arg)
{
  struct chain *ch = arg;
  char b = 0;
  CO_EQ(weft_read(ch->pipe_fd[0], &b, 1), 1);
  CO_EQ(b, 'x');
  atomic_store(&ch->read_done, true);
  return NULL;
}

static void *from_outside(void *arg)
{
  struct chain *ch = arg;
  atomic_store(&ch->submitted_ran, true);
  return NULL;
}

static void *stopper(void *arg)
{
  struct chain *ch = arg;
  /* Waits (by yielding, so it is part of the chain) until the timer, the
   * read and the task from outside have all had their turn. */
  while (!(atomic_load(&ch->timer_done) && atomic_load(&ch->read_done) &&
           atomic_load(&ch->submitted_ran)))
    CO_EQ(weft_yield(), 0);
  atomic_store(&ch->stop, true);
  return NULL;
}

Test(runtime, handoff_chain_leaves_room_for_timers_io_and_the_inbox, .timeout = 30)
{
  struct chain ch = {0};
  cr_assert_eq(pipe2(ch.pipe_fd, O_CLOEXEC), 0);
  weft_config c;
  rt_cfg(&c, 1);
  c.run_budget = 8;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *t[5];
  cr_assert_eq(weft_runtime_submit(rt, NULL, reader, &ch, &t[0]), 0);
  cr_assert_eq(weft_runtime_submit(rt, NULL, sleeper, &ch, &t[1]), 0);
  cr_assert_eq(weft_runtime_submit(rt, NULL, hopper, &ch, &t[2]), 0);
  cr_assert_eq(weft_runtime_submit(rt, NULL, hopper, &ch, &t[3]), 0);
  cr_assert_eq(weft_runtime_submit(rt, NULL, stopper, &ch, &t[4]), 0);
  /* Once the chain is going: data for the reader, and a task through the
   * inbox. Neither can be seen unless the loop gets a turn. */
  while (atomic_load(&ch.hops) < 1000)
    usleep(100);
  cr_assert_eq(write(ch.pipe_fd[1], "x", 1), 1);
  weft_task *outside;
  cr_assert_eq(weft_runtime_submit(rt, NULL, from_outside, &ch, &outside), 0);
  cr_assert_eq(weft_join(outside, NULL), 0);
  for (int i = 0; i < 5; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  weft_stats st;
  cr_assert_eq(weft_stats_get(rt, -1, &st), 0);
  cr_assert_gt(st.handoffs, 1000);
  cr_assert_geq(st.timers_fired, 1);
  rt_stop_idle(rt);
  rt_assert_clean();
  close(ch.pipe_fd[0]);
  close(ch.pipe_fd[1]);
}

static void *budget_main(void *arg)
{
  struct chain *ch = arg;
  weft_task *a, *b;
  CO_EQ(rt_spawn(&a, WEFT_PLACE_PINNED, -1, hopper, ch), 0);
  CO_EQ(rt_spawn(&b, WEFT_PLACE_PINNED, -1, hopper, ch), 0);
  while (atomic_load(&ch->hops) < 100000)
    CO_EQ(weft_sleep(WEFT_MSEC), 0);
  atomic_store(&ch->stop, true);
  rt_join_int(a);
  rt_join_int(b);
  return NULL;
}

Test(runtime, handoff_with_a_budget_of_one_never_hands_over, .timeout = 30)
{
  /* run_budget 1: the loop runs one task per pass, so no task may hand
   * over to another - the budget bounds hand-overs too. */
  struct chain ch = {0};
  weft_config c;
  rt_cfg(&c, 1);
  c.run_budget = 1;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, budget_main, &ch, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  weft_stats st;
  cr_assert_eq(weft_stats_get(rt, -1, &st), 0);
  cr_assert_eq(st.handoffs, 0);
  cr_assert_geq(st.switches, 100000);
  rt_stop_idle(rt);
  rt_assert_clean();
}

/* ---- the adaptive spin window ------------------------------------------------------------------ */

/*
 * The adaptive spin window (weft_config.spin_ns .. spin_max_ns): work that
 * keeps coming back a little after the shard went to sleep (here: a task's
 * own short sleeps) makes the window grow, so the shard stops paying a
 * sleep and a wake-up per gap; a fixed window (spin_max_ns == spin_ns) and a
 * zero one never grow; an idle runtime still goes to sleep. The window is
 * read from the shard (its largest value so far): what it buys in sleeps
 * and CPU time is the benchmarks' to measure, not a unit test's.
 */

#define GAPS 300
#define BASE_US 40 /* spin_ns */
#define GAP_US 50  /* a timer this far ahead: longer than the base window,
                      shorter than a doubled one */

/* The only task sleeps GAP_US, GAPS times: each time the shard polls
 * for its window and then (if the window ends before the timer) sleeps in
 * the kernel until the timer - a sleep shorter than the window, which
 * doubles it. */
static void *gap_sleeper(void *arg)
{
  (void)arg;
  for (int i = 0; i < GAPS; i++)
    CO_EQ(weft_sleep(GAP_US * WEFT_USEC), 0);
  return NULL;
}

/* Runs gap_sleeper on a 1-shard runtime with this window; returns the
 * largest window the shard had, and leaves the runtime in *keep. */
static int64_t peak_window_over_gaps(int64_t spin_ns, int64_t spin_max_ns, weft_runtime **keep)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.spin_ns = spin_ns;
  c.spin_max_ns = spin_max_ns;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, gap_sleeper, NULL, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  *keep = rt;
  return atomic_load(&rt->shards[0].spin_window_peak);
}

Test(runtime, spin_window_grows_when_work_comes_back_soon, .timeout = 60)
{
  weft_runtime *rt;
  int64_t fixed = peak_window_over_gaps(BASE_US * WEFT_USEC, BASE_US * WEFT_USEC, &rt);
  cr_assert_eq(fixed, BASE_US * WEFT_USEC, "a fixed window grew to %lld ns", (long long)fixed);
  rt_stop_idle(rt);
  int64_t grown = peak_window_over_gaps(BASE_US * WEFT_USEC, 10 * WEFT_MSEC, &rt);
  cr_assert_geq(grown, GAP_US * WEFT_USEC, "the window grew only to %lld ns over gaps of %d us",
                (long long)grown, GAP_US);
  cr_assert_leq(grown, 10 * WEFT_MSEC);
  /* Idle now: the shard spins out its (grown) window once and sleeps. */
  cr_assert(rt_wait_parked(rt, 0), "the shard never went to sleep");
  rt_stop_idle(rt);
  rt_assert_clean();
}

Test(runtime, spin_ns_zero_never_spins_whatever_spin_max_ns, .timeout = 30)
{
  /* spin_ns 0 means sleep at once: the window never grows from zero. */
  weft_runtime *rt;
  cr_assert_eq(peak_window_over_gaps(0, 10 * WEFT_MSEC, &rt), 0);
  cr_assert(rt_wait_parked(rt, 0), "the shard never went to sleep");
  rt_stop_idle(rt);
  rt_assert_clean();
}
