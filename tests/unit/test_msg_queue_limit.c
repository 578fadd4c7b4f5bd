/* SPDX-License-Identifier: MIT */
/*
 * Suite "msg": the receive-queue limit (weft_config.msg_queue_limit). A
 * shard whose receivers do not keep up takes batched messages only up to the
 * limit; the rest wait in the lane, which fills and refuses its sender, and
 * a flush waits; once a receiver makes room, everything arrives, in order,
 * exactly once. Direct senders are refused from the moment the queue is at
 * the limit until receivers take it down to half. Both drain
 * paths are covered: the bulk copy (no hot tag) and message by message (a
 * hot tag exists). A queue that cannot grow for want of memory pushes back
 * the same way, below the limit.
 */
#include "msg_test.h"
#include "rt_internal.h"

#include "msg_internal.h"

#include <limits.h>
#include <pthread.h>

#define LANE 8
#define LIMIT 16
#define TOTAL 3000
#define DIRECT 100
#define TAG_LANE 5
#define TAG_DIRECT 6
#define TAG_HOT 99

/* Sends lane message `val` to shard 1, yielding while the lane is full. */
static void send_one(uint32_t val)
{
  weft_msg m = {.tag = TAG_LANE, .val = val};
  int r;
  while ((r = weft_msg_send_many(1, &m, 1)) == -EAGAIN)
    weft_yield();
  CO_EQ(r, 1);
}

/* Sends direct message `val` to shard 1, yielding while it is refused. */
static void send_direct(uint32_t val)
{
  int r;
  while ((r = weft_msg_send(1, TAG_DIRECT, val)) == -EAGAIN)
    weft_yield();
  CO_EQ(r, 0);
}

/* A plain thread's direct send to shard 1 of the runtime in `arg`. */
static void *plain_send(void *arg)
{
  return (void *)(intptr_t)weft_msg_send_rt(arg, 1, TAG_DIRECT, 0);
}

/* weft_msg_send_rt() from a plain thread: its result. */
static int send_from_plain_thread(void)
{
  pthread_t th;
  void *r = NULL;
  CO_EQ(pthread_create(&th, NULL, plain_send, weft_runtime_current()), 0);
  CO_EQ(pthread_join(th, &r), 0);
  return (int)(intptr_t)r;
}

/* Every way of sending a direct message to shard 1 is refused. */
static void direct_sends_refused(void)
{
  CO_EQ(weft_msg_send(1, TAG_DIRECT, 0), -EAGAIN);
  CO_EQ(weft_msg_send_wait(1, TAG_DIRECT, 0), -EAGAIN);
  CO_EQ(send_from_plain_thread(), -EAGAIN);
}

static void *receiver(void *arg)
{
  (void)arg;
  uint32_t next = 0, direct = 0;
  while (next < TOTAL || direct < DIRECT) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, in_ms(20000)), 0);
    CO_EQ(m.sender, 0);
    if (m.tag == TAG_DIRECT) {
      CO_EQ(m.val, direct); /* direct ones in order too */
      direct++;
      continue;
    }
    CO_EQ(m.tag, TAG_LANE);
    CO_EQ(m.val, next); /* in order, none lost, none twice */
    if (m.val != next)
      return NULL;
    next++;
  }
  weft_msg m;
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN);
  return NULL;
}

static void *limit_main(void *arg)
{
  bool hot = arg != NULL;
  if (hot) /* any hot tag sends drains down the message-by-message path */
    CO_EQ(weft_msg_hot_tag(NULL, TAG_HOT, true), 0);

  /* Nobody receives on shard 1: it takes LIMIT, the lane holds LANE more. */
  uint32_t sent = 0;
  for (; sent < LIMIT + LANE; sent++)
    send_one(sent);
  CO_CHECK(RT_POLL(shard_stats(1).msgs_received == LIMIT));
  weft_msg m = {.tag = TAG_LANE, .val = sent};
  for (int i = 0; i < 20; i++) {
    CO_EQ(weft_msg_send_many(1, &m, 1), -EAGAIN);
    weft_sleep(WEFT_MSEC);
  }
  weft_stats st1 = shard_stats(1);
  CO_EQ(st1.msgs_received, LIMIT);
  CO_EQ(st1.msg_queue_full, 1);
  CO_EQ(weft_msg_flush_rt(NULL, in_ms(20)), -ETIMEDOUT);

  /* The queue is at the limit: direct senders are refused as well. */
  direct_sends_refused();
  CO_EQ(shard_stats(1).msgs_received, LIMIT);

  /* A receiver makes room: the lane drains, the rest follows. */
  weft_task *r = spawn_on(1, receiver, NULL);
  for (uint32_t d = 0; sent < TOTAL || d < DIRECT; sent++, d++) {
    if (sent < TOTAL)
      send_one(sent);
    if (d < DIRECT)
      send_direct(d);
  }
  CO_EQ(weft_msg_flush(), 0);
  rt_join_int(r);
  st1 = shard_stats(1);
  CO_EQ(st1.msgs_received, TOTAL + DIRECT);
  return NULL;
}

/* weft_run(c, fn, arg) on a runtime that must end clean, with no fault
 * left armed whatever fn did. */
static void run_clean(const weft_config *c, void *(*fn)(void *), void *arg)
{
  void *ret;
  int r = weft_run(c, fn, arg, &ret);
  weft__fault_arm(WEFT__FAULT_RECV_QUEUE, 0);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void run_limit(bool hot)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.msg_lane_capacity = LANE;
  c.msg_queue_limit = LIMIT;
  run_clean(&c, limit_main, hot ? (void *)1 : NULL);
}

Test(msg, queue_limit_pushes_back_on_the_sender, .timeout = 60)
{
  run_limit(false);
}

Test(msg, queue_limit_pushes_back_with_hot_tags, .timeout = 60)
{
  run_limit(true);
}

/* ---- direct messages alone: refused at the limit, accepted at half -------- */

/* On shard 1: takes `arg` messages that are there already. */
static void *take_some(void *arg)
{
  for (intptr_t i = 0; i < (intptr_t)arg; i++) {
    weft_msg m;
    CO_EQ(weft_msg_try_recv(&m, 0), 0);
  }
  return NULL;
}

static void *direct_main(void *arg)
{
  (void)arg;
  for (uint32_t i = 0; i < LIMIT; i++)
    CO_EQ(weft_msg_send(1, TAG_DIRECT, i), 0);
  CO_EQ(weft_msg_flush(), 0);
  CO_CHECK(RT_POLL(shard_stats(1).msgs_received == LIMIT));
  direct_sends_refused();

  /* Down to LIMIT / 2 + 1: still refused. */
  rt_join_int(spawn_on(1, take_some, (void *)(intptr_t)(LIMIT / 2 - 1)));
  direct_sends_refused();
  /* Down to half: accepted again, and delivered. */
  rt_join_int(spawn_on(1, take_some, (void *)1));
  CO_EQ(weft_msg_send(1, TAG_DIRECT, LIMIT), 0);
  CO_EQ(weft_msg_send_wait(1, TAG_DIRECT, LIMIT + 1), 0);
  CO_EQ(send_from_plain_thread(), 0);
  CO_CHECK(RT_POLL(shard_stats(1).msgs_received == LIMIT + 3));
  rt_join_int(spawn_on(1, take_some, (void *)(intptr_t)(LIMIT / 2 + 3)));
  return NULL;
}

Test(msg, queue_limit_refuses_direct_senders_until_half, .timeout = 60)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.msg_queue_limit = LIMIT;
  run_clean(&c, direct_main, NULL);
}

/* ---- no memory to grow a receive queue ------------------------------------- */

#define NOMEM_BATCH 1000

static void *nomem_receiver(void *arg)
{
  (void)arg;
  for (uint32_t next = 0; next <= NOMEM_BATCH; next++) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, in_ms(20000)), 0);
    CO_EQ(m.tag, TAG_LANE);
    CO_EQ(m.val, next); /* in order, none lost, none twice */
    if (m.val != next)
      return NULL;
  }
  return NULL;
}

static void *nomem_main(void *arg)
{
  if (arg) /* message by message, as with the limit */
    CO_EQ(weft_msg_hot_tag(NULL, TAG_HOT, true), 0);
  /* The first message makes the lane, an allocation of its own. */
  weft_msg m = {.tag = TAG_LANE, .val = 0};
  CO_EQ(weft_msg_send_many(1, &m, 1), 1);
  CO_CHECK(RT_POLL(shard_stats(1).msgs_received == 1));

  /* Shard 1's queue must grow past its first size to take the batch: that
   * growth fails, and the queue takes only what it has room for. */
  static weft_msg batch[NOMEM_BATCH];
  for (uint32_t i = 0; i < NOMEM_BATCH; i++)
    batch[i] = (weft_msg){.tag = TAG_LANE, .val = i + 1};
  weft__fault_arm(WEFT__FAULT_RECV_QUEUE, 1);
  CO_EQ(weft_msg_send_many(1, batch, NOMEM_BATCH), NOMEM_BATCH);
  CO_CHECK(RT_POLL(shard_stats(1).msg_queue_full == 1));
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_RECV_QUEUE]), 0);
  CO_EQ(shard_stats(1).msgs_received, WEFT__RQ_INITIAL);
  CO_EQ(weft_msg_flush_rt(NULL, in_ms(20)), -ETIMEDOUT);

  /* A receiver makes room: the queue grows now and takes the rest. */
  weft_task *r = spawn_on(1, nomem_receiver, NULL);
  CO_EQ(weft_msg_flush(), 0);
  rt_join_int(r);
  weft_stats st1 = shard_stats(1);
  CO_EQ(st1.msgs_received, NOMEM_BATCH + 1);
  CO_EQ(st1.msg_queue_full, 1);
  return NULL;
}

static void run_nomem(bool hot)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.msg_lane_capacity = 1024;
  run_clean(&c, nomem_main, hot ? (void *)1 : NULL);
}

Test(msg, queue_without_memory_to_grow_pushes_back, .timeout = 60)
{
  run_nomem(false);
}

Test(msg, queue_without_memory_to_grow_pushes_back_with_hot_tags, .timeout = 60)
{
  run_nomem(true);
}

Test(msg, queue_limit_out_of_range_is_einval, .timeout = 20)
{
  static const unsigned bad[] = {0, (unsigned)INT32_MAX + 1, UINT_MAX};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_config c;
    rt_cfg(&c, 1);
    c.msg_queue_limit = bad[i];
    weft_runtime *rt = NULL;
    cr_assert_eq(weft_runtime_start(&rt, &c), -EINVAL, "msg_queue_limit %u", bad[i]);
    cr_assert_null(rt);
  }
}

/* ---- a counter sum above INT64_MAX ---------------------------------------------------- */

#define TAG_BIG 3

static void *big_taker(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_counter_take(TAG_BIG, in_ms(3000));
}

static int counter_takers_waiting(weft__shard *sh)
{
  return rt_waitq_len(&sh->msg->counter_q[TAG_BIG]);
}

/* A sum above INT64_MAX is taken in parts: the first taker gets INT64_MAX,
 * and the rest must wake a second taker that waits meanwhile - no add is
 * coming to ring for it. (Sums this large are reached here by setting the
 * counter directly; 2^31 adds would take minutes.) */
static void *big_sum_main(void *arg)
{
  (void)arg;
  weft__shard *sh = &weft_runtime_current()->shards[0];
  weft_task *a = spawn_on(0, big_taker, NULL), *b = spawn_on(0, big_taker, NULL);
  while (counter_takers_waiting(sh) < 2)
    weft_yield();
  atomic_store(&sh->msg->counters[TAG_BIG], (uint64_t)INT64_MAX - 10);
  /* The counter was zero for its takers: make the next add ring as the one
   * that made it non-zero would have. */
  atomic_store(&sh->msg->counter_unrung[TAG_BIG], true);
  CO_EQ(weft_counter_add(0, TAG_BIG, 20), 0);
  void *ra, *rb;
  CO_EQ(weft_join(a, &ra), 0);
  CO_EQ(weft_join(b, &rb), 0);
  int64_t x = (intptr_t)ra, y = (intptr_t)rb;
  CO_EQ(x > y ? x : y, INT64_MAX);
  CO_EQ(x > y ? y : x, 10);
  CO_EQ(atomic_load(&sh->msg->counters[TAG_BIG]), 0);
  return NULL;
}

Test(msg, counter_sum_above_int64_max_wakes_a_second_taker_for_the_rest, .timeout = 60)
{
  weft_config c;
  rt_cfg(&c, 1);
  run_clean(&c, big_sum_main, NULL);
}
