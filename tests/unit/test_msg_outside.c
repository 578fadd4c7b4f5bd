/* SPDX-License-Identifier: MIT */
/*
 * Suite "msg", from outside a shard and to a sleeping one: plain-thread
 * senders (the external sender id, order per thread and tag), a plain
 * thread's flush (it waits until the targets took the shared lanes, its
 * deadline, a lane nobody could ring; from another runtime's coroutine it
 * suspends), refused doorbells (a lane's, a counter's) replaced by the
 * shard's eventfd, and a parked target woken by each way of sending. The
 * senders and the wake-ups run twice: with the kernel's ring-less msg_ring
 * (6.13) and the way older kernels need, a ring per thread.
 */
#include "msg_test.h"
#include "rt_internal.h"

#define TAG_LANE 8

/* ---- plain-thread senders ------------------------------------------------------------ */

#define EXT_THREADS 3
#define EXT_N 3008 /* a multiple of the batch size, 16 */

struct ext_ctx {
  weft_runtime *rt;
  int index;
};

static void *ext_sender(void *arg)
{
  struct ext_ctx *e = arg;
  weft_msg b[16];
  uint32_t lane = 0;
  for (uint32_t i = 0; i < EXT_N; i++) {
    /* tag = thread * 2 + kind: direct and lane are ordered separately. */
    int d;
    while ((d = weft_msg_send_rt(e->rt, 1, (uint16_t)(e->index * 2), i)) == -EAGAIN)
      sched_yield(); /* the receive queue is full */
    CO_EQ(d, 0);
    if (i % 16 == 15) {
      for (int k = 0; k < 16; k++)
        b[k] = (weft_msg){.tag = (uint16_t)(e->index * 2 + 1), .val = lane++};
      size_t done = 0;
      while (done < 16) {
        int r = weft_msg_send_many_rt(e->rt, 1, b + done, 16 - done);
        if (r == -EAGAIN) {
          sched_yield();
          continue;
        }
        CO_CHECK(r > 0);
        if (r <= 0)
          return NULL;
        done += (size_t)r;
      }
    }
  }
  CO_EQ(weft_msg_send_wait_rt(e->rt, 1, 99, 1), 0);
  return NULL;
}

static void *ext_receiver(void *arg)
{
  (void)arg;
  uint32_t next[2 * EXT_THREADS] = {0};
  int total = EXT_THREADS * (EXT_N + EXT_N + 1);
  for (int i = 0; i < total; i++) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, in_ms(20000)), 0);
    CO_EQ(m.sender, WEFT_MSG_EXTERNAL);
    if (m.tag == 99)
      continue;
    CO_CHECK(m.tag < 2 * EXT_THREADS);
    if (m.tag >= 2 * EXT_THREADS)
      continue;
    CO_EQ(m.val, next[m.tag]);
    next[m.tag] = m.val + 1;
  }
  for (int i = 0; i < 2 * EXT_THREADS; i++)
    CO_EQ(next[i], EXT_N);
  return NULL;
}

static void ext_senders_run(void)
{
  weft_runtime *rt = rt_start(2);
  /* Outside a runtime, the calls without one are refused. */
  cr_assert_eq(weft_msg_send(0, 1, 1), -EINVAL);
  cr_assert_eq(weft_msg_send_many(0, &(weft_msg){0}, 1), -EINVAL);
  cr_assert_eq(weft_msg_send_wait(0, 1, 1), -EINVAL);
  cr_assert_eq(weft_counter_add(0, 1, 1), -EINVAL);
  cr_assert_eq(weft_msg_hot_tag(NULL, 1, true), -EINVAL);
  weft_msg m;
  cr_assert_eq(weft_msg_recv(&m, WEFT_NO_DEADLINE), -EPERM);
  cr_assert_eq(weft_msg_try_recv(&m, 0), -EPERM);
  cr_assert_eq(weft_msg_flush(), -EPERM);

  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *r;
  cr_assert_eq(weft_runtime_submit(rt, &o, ext_receiver, NULL, &r), 0);
  pthread_t th[EXT_THREADS];
  struct ext_ctx e[EXT_THREADS];
  for (int i = 0; i < EXT_THREADS; i++) {
    e[i] = (struct ext_ctx){.rt = rt, .index = i};
    cr_assert_eq(pthread_create(&th[i], NULL, ext_sender, &e[i]), 0);
  }
  for (int i = 0; i < EXT_THREADS; i++)
    pthread_join(th[i], NULL);
  cr_assert_eq(weft_join(r, NULL), 0);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(msg, plain_thread_senders_use_the_external_id, .timeout = 60)
{
  ext_senders_run();
}

/* Kernels before 6.13 have no ring-less msg_ring: each plain thread posts
 * through a small ring of its own, made on its first post and freed when
 * the thread exits (the leak check after the senders were joined). Runs a
 * scenario that way. */
static void with_rings_of_their_own(void (*scenario)(void))
{
  atomic_store(&weft__ring_ringless, -1);
  scenario();
  cr_assert_eq(atomic_load(&weft__ring_ringless), -1);
}

Test(msg, plain_thread_senders_through_rings_of_their_own, .timeout = 60)
{
  with_rings_of_their_own(ext_senders_run);
}

/* ---- flush from a plain thread ---------------------------------------------------------- */

#define XF_N 1000 /* per target shard, in batches of 50 */

struct xflush {
  weft_runtime *rt;
  atomic_bool release; /* lets the busy coroutine on shard 1 return */
  atomic_bool busy;    /* it is running (and not draining anything) */
};

/* Holds shard 1 without suspending: its lanes are not drained meanwhile. */
static void *xflush_busy(void *arg)
{
  struct xflush *x = arg;
  atomic_store(&x->busy, true);
  while (!atomic_load(&x->release))
    sched_yield(); /* the thread's, not the coroutine's: shard 1 stays held */
  return NULL;
}

/* Takes what is in this shard's queue without waiting: after a flush it
 * must be everything. */
static void *xflush_count(void *arg)
{
  (void)arg;
  weft_msg m;
  uint32_t n = 0, sum = 0;
  while (weft_msg_try_recv(&m, 0) == 0) {
    CO_EQ(m.sender, WEFT_MSG_EXTERNAL);
    CO_EQ(m.val, n);
    sum += m.val;
    n++;
  }
  CO_EQ(n, XF_N);
  return (void *)(uintptr_t)sum;
}

/* Sends values [from, to) to `shard` in batches of 50. */
static void xflush_send_range(weft_runtime *rt, int shard, uint32_t from, uint32_t to)
{
  weft_msg b[50];
  for (uint32_t i = from; i < to; i += 50) {
    for (uint32_t k = 0; k < 50; k++)
      b[k] = (weft_msg){.tag = 3, .val = i + k};
    cr_assert_eq(weft_msg_send_many_rt(rt, shard, b, 50), 50);
  }
}

static void xflush_send(weft_runtime *rt, int shard)
{
  xflush_send_range(rt, shard, 0, XF_N);
}

static void *xflush_own_runtime(void *arg)
{
  (void)arg;
  /* From a coroutine of the runtime: its shard's flush, with a deadline. */
  CO_EQ(weft_msg_send_many(1, &(weft_msg){.tag = 4, .val = 1}, 1), 1);
  CO_EQ(weft_msg_flush_rt(NULL, in_ms(5000)), 0);
  CO_EQ(weft_msg_flush_rt(weft_runtime_current(), WEFT_NO_DEADLINE), 0);
  return NULL;
}

static void *xflush_drain_one(void *arg)
{
  (void)arg;
  weft_msg m;
  CO_EQ(weft_msg_recv(&m, in_ms(5000)), 0);
  CO_EQ(m.tag, 4);
  return NULL;
}

Test(msg, plain_thread_flush_waits_until_targets_took_the_lanes, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  cr_assert_eq(weft_msg_flush_rt(NULL, WEFT_NO_DEADLINE), -EINVAL);
  /* Nothing sent yet: nothing to wait for. */
  cr_assert_eq(weft_msg_flush_rt(rt, weft_now()), 0);

  struct xflush x = {.rt = rt};
  weft_task *busy = rt_submit_on(rt, 1, xflush_busy, &x);
  while (!atomic_load(&x.busy))
    sched_yield();
  xflush_send(rt, 0);
  xflush_send(rt, 1);
  /* Shard 1 is held: its lane cannot be taken before the deadline. */
  cr_assert_eq(weft_msg_flush_rt(rt, weft_now() + 30 * WEFT_MSEC), -ETIMEDOUT);
  atomic_store(&x.release, true);
  cr_assert_eq(weft_msg_flush_rt(rt, WEFT_NO_DEADLINE), 0);
  cr_assert_eq(weft_join(busy, NULL), 0);

  /* Everything is in the receive queues: takes that never wait find it. */
  uint32_t want = XF_N * (XF_N - 1) / 2;
  for (int shard = 0; shard < 2; shard++) {
    void *sum;
    cr_assert_eq(weft_join(rt_submit_on(rt, shard, xflush_count, NULL), &sum), 0);
    cr_assert_eq((uint32_t)(uintptr_t)sum, want);
  }

  weft_task *d = rt_submit_on(rt, 1, xflush_drain_one, NULL);
  cr_assert_eq(weft_join(rt_submit_on(rt, 0, xflush_own_runtime, NULL), NULL), 0);
  cr_assert_eq(weft_join(d, NULL), 0);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- flush from a coroutine of another runtime ------------------------------------------ */

struct xrt {
  weft_runtime *target;
  atomic_int ticks;    /* the flusher's own shard kept running */
  atomic_bool flushed;
};

static void *xrt_flusher(void *arg)
{
  struct xrt *c = arg;
  weft_msg b[50];
  for (uint32_t i = 0; i < XF_N; i += 50) {
    for (uint32_t k = 0; k < 50; k++)
      b[k] = (weft_msg){.tag = 3, .val = i + k};
    CO_EQ(weft_msg_send_many_rt(c->target, 1, b, 50), 50);
  }
  CO_EQ(weft_msg_flush_rt(c->target, in_ms(10000)), 0);
  atomic_store(&c->flushed, true);
  return NULL;
}

static void *xrt_ticker(void *arg)
{
  struct xrt *c = arg;
  while (!atomic_load(&c->flushed)) {
    atomic_fetch_add(&c->ticks, 1);
    CO_EQ(weft_sleep(WEFT_MSEC), 0);
  }
  return NULL;
}

/* A coroutine of runtime A flushes what it sent to B's held shard: it
 * suspends, and A's shard runs its other task meanwhile. */
Test(msg, flush_from_another_runtime_suspends_the_coroutine, .timeout = 60)
{
  weft_runtime *b = rt_start(2);
  weft_runtime *a = rt_start(1);
  struct xflush x = {.rt = b};
  weft_task *busy = rt_submit_on(b, 1, xflush_busy, &x);
  while (!atomic_load(&x.busy))
    sched_yield();
  struct xrt c = {.target = b};
  weft_task *f = rt_submit_on(a, 0, xrt_flusher, &c);
  weft_task *tick = rt_submit_on(a, 0, xrt_ticker, &c);
  int start = atomic_load(&c.ticks);
  for (int i = 0; i < 10000 && atomic_load(&c.ticks) < start + 5; i++)
    usleep(1000);
  cr_assert_geq(atomic_load(&c.ticks), start + 5, "A's shard stopped while the flush waited");
  cr_assert(!atomic_load(&c.flushed), "the flush returned while B's shard was held");
  atomic_store(&x.release, true);
  cr_assert_eq(weft_join(f, NULL), 0);
  cr_assert_eq(weft_join(tick, NULL), 0);
  cr_assert_eq(weft_join(busy, NULL), 0);
  rt_assert_clean();
  void *sum;
  cr_assert_eq(weft_join(rt_submit_on(b, 1, xflush_count, NULL), &sum), 0);
  cr_assert_eq((uint32_t)(uintptr_t)sum, XF_N * (XF_N - 1) / 2);
  rt_stop_idle(a);
  rt_stop_idle(b);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- a ticketed send from a coroutine of another runtime --------------------------------- */

/* Ticketed sends to shard 0 of `arg`'s runtime: past the deadline scope,
 * then as usual, then in the cancelled task. Only the second may be sent. */
static void *ticketed_in_a_coroutine(void *arg)
{
  weft_runtime *target = arg;
  int64_t saved = weft_deadline_push(weft_now());
  CO_EQ(weft_msg_send_wait_rt(target, 0, 6, 1), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_EQ(weft_msg_send_wait_rt(target, 0, 6, 2), 0);
  CO_EQ(weft_cancel(weft_task_self()), 0);
  CO_EQ(weft_msg_send_wait_rt(target, 0, 6, 3), -ECANCELED);
  return NULL;
}

/* Takes what this shard's queue holds without waiting: out[0] is how many. */
static void *take_queued(void *arg)
{
  uint32_t *out = arg;
  weft_msg m;
  while (weft_msg_try_recv(&m, 0) == 0 && out[0] < 7)
    out[1 + out[0]++] = m.val;
  return NULL;
}

/* From a coroutine of another runtime the message is posted at once, but
 * the caller is still a coroutine: cancelled, or past its deadline scope,
 * it sends nothing, as a coroutine of the target's runtime does. */
Test(msg, ticketed_send_from_another_runtime_honours_cancel_and_scope, .timeout = 60)
{
  weft_runtime *b = rt_start(2);
  weft_runtime *a = rt_start(1);
  cr_assert_eq(weft_join(rt_submit_on(b, 1, ticketed_in_a_coroutine, b), NULL), -ECANCELED);
  cr_assert_eq(weft_join(rt_submit_on(a, 0, ticketed_in_a_coroutine, b), NULL), -ECANCELED);
  rt_assert_clean();
  uint32_t got[8] = {0};
  cr_assert_eq(weft_join(rt_submit_on(b, 0, take_queued, got), NULL), 0);
  cr_assert_eq(got[0], 2);
  cr_assert_eq(got[1], 2);
  cr_assert_eq(got[2], 2);
  rt_stop_idle(a);
  rt_stop_idle(b);
  rt_assert_no_leaks();
}

/* Receives XF_N messages on this shard, waiting for them (no flush helps). */
static void *xflush_recv_all(void *arg)
{
  (void)arg;
  weft_msg m[64];
  uint32_t n = 0, sum = 0;
  while (n < XF_N) {
    int got = weft_msg_recv_many(m, 64, 0, in_ms(10000));
    CO_CHECK(got > 0);
    if (got <= 0)
      break;
    for (int i = 0; i < got; i++) {
      CO_EQ(m[i].val, n);
      sum += m[i].val;
      n++;
    }
  }
  return (void *)(uintptr_t)sum;
}

Test(msg, refused_lane_doorbell_is_rung_through_the_eventfd, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  /* One batch, one doorbell, and the kernel refuses it: the shard is woken
   * through its eventfd and drains the lane, with nobody flushing. */
  static weft_msg all[XF_N];
  for (uint32_t i = 0; i < XF_N; i++)
    all[i] = (weft_msg){.tag = 3, .val = i};
  weft_task *r = rt_submit_on(rt, 1, xflush_recv_all, NULL);
  weft__fault_arm(WEFT__FAULT_POST, 1);
  cr_assert_eq(weft_msg_send_many_rt(rt, 1, all, XF_N), XF_N);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0);
  void *sum;
  cr_assert_eq(weft_join(r, &sum), 0);
  cr_assert_eq((uint32_t)(uintptr_t)sum, XF_N * (XF_N - 1) / 2);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *xflush_take(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_counter_take(2, in_ms(10000));
}

/* A counter's doorbell refused: the same fallback wakes the waiting taker. */
Test(msg, refused_counter_doorbell_is_rung_through_the_eventfd, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  weft_task *taker = rt_submit_on(rt, 1, xflush_take, NULL);
  cr_assert(rt_wait_parked(rt, 1), "the taker's shard never slept");
  weft__fault_arm(WEFT__FAULT_POST, 1);
  cr_assert_eq(weft_counter_add_rt(rt, 1, 2, 7), 0);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0);
  void *v;
  cr_assert_eq(weft_join(taker, &v), 0);
  cr_assert_eq((intptr_t)v, 7);
  /* Both ways refused: the add counts, the error is the kernel's. */
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  cr_assert_eq(weft_counter_add_rt(rt, 1, 2, 5), -ENOMEM);
  cr_assert_eq(weft_join(rt_submit_on(rt, 1, xflush_take, NULL), &v), 0);
  cr_assert_eq((intptr_t)v, 5);
  /* Both refused while a taker waits: it sleeps until the next add - which
   * rings, though it finds the counter non-zero. */
  taker = rt_submit_on(rt, 1, xflush_take, NULL);
  cr_assert(rt_wait_parked(rt, 1), "the taker's shard never slept");
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  cr_assert_eq(weft_counter_add_rt(rt, 1, 2, 3), -ENOMEM);
  cr_assert_eq(weft_counter_add_rt(rt, 1, 2, 4), 0);
  cr_assert_eq(weft_join(taker, &v), 0);
  cr_assert_eq((intptr_t)v, 7);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(msg, plain_thread_flush_rings_a_lane_nobody_could_ring, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  /* Both ways refused for the producer: the lane is left for the next
   * ringer - here the flush. */
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  xflush_send_range(rt, 1, 0, 50);
  /* The same for the flush's own doorbell: the kernel's error. */
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  cr_assert_eq(weft_msg_flush_rt(rt, WEFT_NO_DEADLINE), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_POST, 0);
  weft__fault_arm(WEFT__FAULT_WAKE_FD, 0);
  /* Nothing rang it since: the next flush does. */
  cr_assert_eq(weft_msg_flush_rt(rt, WEFT_NO_DEADLINE), 0);
  xflush_send_range(rt, 1, 50, XF_N);
  cr_assert_eq(weft_msg_flush_rt(rt, WEFT_NO_DEADLINE), 0);
  void *sum;
  cr_assert_eq(weft_join(rt_submit_on(rt, 1, xflush_count, NULL), &sum), 0);
  cr_assert_eq((uint32_t)(uintptr_t)sum, XF_N * (XF_N - 1) / 2);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- a parked target wakes ---------------------------------------------------------------- */

static void *park_receiver(void *arg)
{
  (void)arg;
  weft_msg m;
  uint32_t sum = 0;
  for (int i = 0; i < 4; i++) {
    CO_EQ(weft_msg_recv(&m, in_ms(10000)), 0);
    sum += m.val;
  }
  CO_EQ(weft_counter_take(2, in_ms(10000)), 7);
  return (void *)(uintptr_t)sum;
}

static void *park_from_shard0(void *arg)
{
  (void)arg;
  CO_EQ(weft_msg_send(1, 1, 1), 0);
  return NULL;
}

static void *park_many_from_shard0(void *arg)
{
  (void)arg;
  weft_msg b = {.tag = 1, .val = 3};
  CO_EQ(weft_msg_send_many(1, &b, 1), 1);
  return NULL;
}

static void parked_target_run(void)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.spin_ns = 0; /* an idle shard sleeps in the kernel at once */
  c.steal = false;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *r, *s;
  cr_assert_eq(weft_runtime_submit(rt, &o, park_receiver, NULL, &r), 0);
  /* Each way of sending, each time to a sleeping shard 1. */
  cr_assert(rt_wait_parked(rt, 1));
  o.shard = 0;
  cr_assert_eq(weft_runtime_submit(rt, &o, park_from_shard0, NULL, &s), 0); /* direct: 1 */
  cr_assert_eq(weft_join(s, NULL), 0);
  cr_assert(rt_wait_parked(rt, 1));
  cr_assert_eq(weft_runtime_submit(rt, &o, park_many_from_shard0, NULL, &s), 0); /* lane: 3 */
  cr_assert_eq(weft_join(s, NULL), 0);
  cr_assert(rt_wait_parked(rt, 1));
  errno = 1234;
  cr_assert_eq(weft_msg_send_rt(rt, 1, 1, 10), 0); /* plain thread, direct */
  cr_assert_eq(errno, 1234); /* a user's thread keeps its errno */
  cr_assert(rt_wait_parked(rt, 1));
  cr_assert_eq(weft_msg_send_many_rt(rt, 1, &(weft_msg){.tag = 1, .val = 20}, 1), 1);
  cr_assert(rt_wait_parked(rt, 1));
  cr_assert_eq(weft_counter_add_rt(rt, 1, 2, 7), 0);
  void *sum;
  cr_assert_eq(weft_join(r, &sum), 0);
  rt_assert_clean();
  cr_assert_eq((uintptr_t)sum, 1 + 3 + 10 + 20);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(msg, parked_target_wakes, .timeout = 60)
{
  parked_target_run();
}

Test(msg, parked_target_wakes_from_threads_with_rings_of_their_own, .timeout = 60)
{
  with_rings_of_their_own(parked_target_run);
}

/* ---- an add from outside that outlasts the runtime's last task ------------------------------
 * A taker that does not wait finds the sum as soon as the add is made,
 * before the adder has rung (or decided not to ring) the shard: it can
 * return, and the runtime stop, while the adder is still in its call,
 * reading the counter's shard. The stop must wait for it (runtime.h lists
 * such calls). The adder is held there (weft__test_outside_pause) until the
 * taker has been joined, and 50 ms more. */
static atomic_bool add_pause_armed, add_taker_joined, add_pause_over;

static void hold_the_adder(void)
{
  if (!atomic_exchange(&add_pause_armed, false))
    return;
  for (int i = 0; i < 10000 && !atomic_load(&add_taker_joined); i++)
    usleep(1000);
  usleep(50 * 1000);
  atomic_store(&add_pause_over, true);
}

static void *take_without_waiting(void *arg)
{
  (void)arg;
  int64_t v;
  while ((v = weft_counter_take(2, 0)) == -ETIMEDOUT) /* a deadline passed: no wait */
    weft_yield();
  return (void *)(intptr_t)v;
}

static void *add_from_outside(void *arg)
{
  return (void *)(intptr_t)weft_counter_add_rt(arg, 1, 2, 7);
}

Test(msg, stop_waits_for_a_plain_thread_still_in_its_counter_add, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  weft_task *taker = rt_submit_on(rt, 1, take_without_waiting, NULL);
  atomic_store(&add_taker_joined, false);
  atomic_store(&add_pause_over, false);
  atomic_store(&add_pause_armed, true);
  weft__test_outside_pause = hold_the_adder;
  pthread_t adder;
  cr_assert_eq(pthread_create(&adder, NULL, add_from_outside, rt), 0);
  void *v;
  cr_assert_eq(weft_join(taker, &v), 0);
  cr_assert_eq((intptr_t)v, 7);
  atomic_store(&add_taker_joined, true);
  cr_assert_eq(weft_runtime_stop(rt), 0);
  cr_assert(atomic_load(&add_pause_over), "the runtime stopped under an adder still in its call");
  cr_assert_eq(pthread_join(adder, &v), 0);
  weft__test_outside_pause = NULL;
  rt_assert_no_leaks();
}
