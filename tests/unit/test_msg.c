/* SPDX-License-Identifier: MIT */
/*
 * Suite "msg": raw messages between shards (weft/msg.h). Order within a
 * direct stream and within a lane, lane backpressure, the ticketed send
 * (visible to a receiver that never suspended), flush, hot tags, coalesced
 * counters summed exactly under concurrent adders (shards and plain
 * threads), the -EOPNOTSUPP path, argument errors and a lane without
 * memory. Receive deadlines and cancellation are in test_msg_deadlines.c;
 * messages from plain threads and to a sleeping shard are in
 * test_msg_outside.c. Checks inside coroutines go through CO_CHECK / CO_EQ.
 */
#include "msg_test.h"

#define TAG_DIRECT 7
#define TAG_LANE 8

/* Sends msgs[0..n) on the lane to `shard`, yielding while it is full. */
static void send_all_many(weft_runtime *rt, int shard, const weft_msg *msgs, size_t n)
{
  size_t done = 0;
  while (done < n) {
    int r = weft_msg_send_many_rt(rt, shard, msgs + done, n - done);
    if (r == -EAGAIN) {
      weft_yield();
      continue;
    }
    CO_CHECK(r > 0);
    if (r <= 0)
      return;
    done += (size_t)r;
  }
}

/* ---- order within a direct stream and within a lane ------------------------------------ */

#define N_ORDER 20000

static void *order_receiver(void *arg)
{
  (void)arg;
  uint32_t next[2] = {0, 0};
  for (int i = 0; i < 2 * N_ORDER; i++) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, in_ms(10000)), 0);
    CO_EQ(m.sender, 0);
    CO_CHECK(m.tag == TAG_DIRECT || m.tag == TAG_LANE);
    int k = m.tag == TAG_LANE;
    CO_EQ(m.val, next[k]);
    next[k] = m.val + 1;
  }
  CO_EQ(next[0], N_ORDER);
  CO_EQ(next[1], N_ORDER);
  weft_msg m;
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN);
  return NULL;
}

static void *order_main(void *arg)
{
  (void)arg;
  weft_task *r = spawn_on(1, order_receiver, NULL);
  weft_msg batch[97];
  uint32_t lane_next = 0;
  for (uint32_t i = 0; i < N_ORDER; i++) {
    CO_EQ(weft_msg_send(1, TAG_DIRECT, i), 0);
    if (i % 97 == 96 || i == N_ORDER - 1) {
      /* Batches of varying size: 1..97 messages. */
      size_t n = 0;
      while (lane_next <= i && n < 1 + i % 97)
        batch[n++] = (weft_msg){.tag = TAG_LANE, .val = lane_next++};
      send_all_many(NULL, 1, batch, n);
    }
    if (i % 1000 == 0)
      weft_yield();
  }
  while (lane_next < N_ORDER) {
    size_t n = 0;
    while (lane_next < N_ORDER && n < 97)
      batch[n++] = (weft_msg){.tag = TAG_LANE, .val = lane_next++};
    send_all_many(NULL, 1, batch, n);
  }
  CO_EQ(weft_msg_flush(), 0);
  rt_join_int(r);
  weft_stats st = shard_stats(0);
  CO_EQ(st.msgs_sent, 2 * N_ORDER);
  CO_EQ(shard_stats(1).msgs_received, 2 * N_ORDER);
  return NULL;
}

Test(msg, order_within_direct_stream_and_lane, .timeout = 60)
{
  rt_run(2, order_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- sending to one's own shard ------------------------------------------------- */

static void *self_main(void *arg)
{
  (void)arg;
  CO_EQ(weft_msg_send(0, 1, 10), 0);
  weft_msg b[2] = {{.tag = 2, .val = 20}, {.tag = 2, .val = 21}};
  CO_EQ(weft_msg_send_many(0, b, 2), 2);
  CO_EQ(weft_msg_send_wait(0, 3, 30), 0);
  CO_EQ(weft_counter_add(0, 4, 5), 0);
  CO_EQ(weft_counter_add(0, 4, 6), 0);
  CO_EQ(weft_msg_flush(), 0);
  uint32_t sum = 0;
  for (int i = 0; i < 4; i++) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, in_ms(5000)), 0);
    CO_EQ(m.sender, 0);
    sum += m.val;
  }
  CO_EQ(sum, 10 + 20 + 21 + 30);
  CO_EQ(weft_counter_take(4, in_ms(5000)), 11);
  return NULL;
}

Test(msg, send_to_own_shard, .timeout = 20)
{
  rt_run(2, self_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- lane backpressure ---------------------------------------------------------------- */

static void *bp_receiver(void *arg)
{
  (void)arg;
  for (uint32_t i = 0; i < 12; i++) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, in_ms(10000)), 0);
    CO_EQ(m.val, i);
  }
  return NULL;
}

static atomic_int bp_block; /* 1: shard 1 is held, 2: let it go */

/* Keeps shard 1's loop from running (and so from draining its lanes) by
 * never suspending until told. */
static void *bp_blocker(void *arg)
{
  (void)arg;
  atomic_store(&bp_block, 1);
  int64_t until = in_ms(10000);
  while (atomic_load(&bp_block) != 2 && weft_now() < until)
    sched_yield();
  return NULL;
}

static void *bp_main(void *arg)
{
  (void)arg;
  weft_msg b[12];
  for (uint32_t i = 0; i < 12; i++)
    b[i] = (weft_msg){.tag = 1, .val = i};
  weft_task *blocker = spawn_on(1, bp_blocker, NULL);
  CO_CHECK(RT_POLL(atomic_load(&bp_block) == 1));
  /* Shard 1 cannot take anything meanwhile: the lane (8 slots) fills. */
  CO_EQ(weft_msg_send_many(1, b, 10), 8);
  CO_EQ(weft_msg_send_many(1, b + 8, 2), -EAGAIN);
  CO_EQ(weft_msg_send_many(1, b + 8, 0), 0);
  weft_stats st = shard_stats(0);
  CO_EQ(st.msg_backpressure, 4);
  CO_EQ(st.msgs_sent, 8);
  CO_EQ(st.msg_doorbells, 1);
  atomic_store(&bp_block, 2);
  rt_join_int(blocker);
  /* Once the target has taken them (flush waits for that), room again. */
  CO_EQ(weft_msg_flush(), 0);
  CO_EQ(shard_stats(1).msgs_received, 8);
  CO_EQ(weft_msg_send_many(1, b + 8, 4), 4);
  weft_task *r = spawn_on(1, bp_receiver, NULL);
  rt_join_int(r);
  return NULL;
}

Test(msg, lane_backpressure, .timeout = 20)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.msg_lane_capacity = 8;
  void *ret;
  int r = weft_run(&c, bp_main, NULL, &ret);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- ticketed send ----------------------------------------------------------------- */

static atomic_int ticket_state; /* 1: receiver spinning, 2: send_wait returned */

static void *ticket_receiver(void *arg)
{
  (void)arg;
  weft_msg m;
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN);
  atomic_store(&ticket_state, 1);
  /* Spin without suspending: this shard's loop reaps nothing meanwhile, so
   * only try_recv itself can find the message. */
  int64_t until = in_ms(10000);
  while (atomic_load(&ticket_state) != 2 && weft_now() < until)
    sched_yield();
  CO_EQ(atomic_load(&ticket_state), 2);
  CO_EQ(weft_msg_try_recv(&m, 0), 0);
  CO_EQ(m.sender, 0);
  CO_EQ(m.tag, 9);
  CO_EQ(m.val, 0xdeadbeef);
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN);
  return NULL;
}

static void *ticket_main(void *arg)
{
  (void)arg;
  weft_task *r = spawn_on(1, ticket_receiver, NULL);
  CO_CHECK(RT_POLL(atomic_load(&ticket_state) == 1));
  CO_EQ(weft_msg_send_wait(1, 9, 0xdeadbeef), 0);
  atomic_store(&ticket_state, 2);
  rt_join_int(r);
  return NULL;
}

/* The same on rings with DEFER_TASKRUN but not TASKRUN_FLAG (a setting
 * weft_config allows): the kernel then flags nothing, and the message waits
 * as task work of the target until someone asks for it. */
Test(msg, ticketed_send_is_in_target_queue_on_return_without_taskrun_flag, .timeout = 30)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.ring_flags = WEFT_RING_SINGLE_ISSUER | WEFT_RING_DEFER_TASKRUN;
  void *ret;
  int r = weft_run(&c, ticket_main, NULL, &ret);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
}

Test(msg, ticketed_send_is_in_target_queue_on_return, .timeout = 30)
{
  rt_run(2, ticket_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- flush ------------------------------------------------------------------------- */

struct flush_ctx {
  weft_event *go;
};

static void *flush_receiver(void *arg)
{
  struct flush_ctx *f = arg;
  CO_EQ(weft_event_wait(f->go), 0);
  /* Everything is here without waiting: the direct ones posted, the
   * batched ones taken out of their lane. */
  uint32_t next[2] = {0, 0};
  for (int i = 0; i < 400; i++) {
    weft_msg m;
    int r = weft_msg_try_recv(&m, 0);
    CO_EQ(r, 0);
    if (r)
      return NULL;
    int k = m.tag == TAG_LANE;
    CO_EQ(m.val, next[k]);
    next[k]++;
  }
  CO_EQ(next[0], 100);
  CO_EQ(next[1], 300);
  weft_msg m;
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN);
  return NULL;
}

static void *flush_main(void *arg)
{
  (void)arg;
  struct flush_ctx f;
  CO_EQ(weft_event_create(&f.go, 0), 0);
  weft_task *r = spawn_on(1, flush_receiver, &f);
  CO_EQ(weft_msg_flush(), 0); /* nothing sent yet: returns at once */
  weft_msg b[300];
  for (uint32_t i = 0; i < 300; i++)
    b[i] = (weft_msg){.tag = TAG_LANE, .val = i};
  for (uint32_t i = 0; i < 100; i++) {
    CO_EQ(weft_msg_send(1, TAG_DIRECT, i), 0);
    CO_EQ(weft_msg_send_many(1, b + 3 * i, 3), 3);
  }
  CO_EQ(weft_msg_flush(), 0);
  CO_CHECK(shard_stats(1).msgs_received >= 300);
  CO_EQ(weft_event_set(f.go), 0);
  rt_join_int(r);
  CO_EQ(weft_msg_flush(), 0);
  weft_event_destroy(f.go);
  return NULL;
}

Test(msg, flush_delivers_direct_and_batched, .timeout = 30)
{
  rt_run(2, flush_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- hot tags ---------------------------------------------------------------------- */

static void *hot_receiver(void *arg)
{
  weft_event *go = arg;
  CO_EQ(weft_event_wait(go), 0);
  weft_msg m[8];
  /* Hot: the direct one and the batched ones, in their own order (the
   * batch in append order; no order between the direct one and it). */
  uint32_t hot[3] = {0};
  for (uint32_t i = 0; i < 3; i++) {
    CO_EQ(weft_msg_recv_hot(&m[0], in_ms(5000)), 0);
    CO_EQ(m[0].tag, 5);
    hot[i] = m[0].val;
  }
  CO_EQ(weft_msg_try_recv(&m[0], WEFT_MSG_HOT), -EAGAIN);
  CO_EQ(weft_msg_recv_many(m, 8, 0, in_ms(5000)), 3);
  uint32_t normal[3];
  for (int i = 0; i < 3; i++) {
    CO_EQ(m[i].tag, 1);
    normal[i] = m[i].val;
  }
  const uint32_t *got[2] = {hot, normal};
  for (int q = 0; q < 2; q++) {
    uint32_t direct = q ? 100 : 500;
    int d = got[q][0] == direct ? 0 : got[q][1] == direct ? 1 : got[q][2] == direct ? 2 : -1;
    CO_CHECK(d >= 0);
    uint32_t lane[2];
    for (int i = 0, k = 0; i < 3; i++)
      if (i != d && k < 2)
        lane[k++] = got[q][i];
    CO_EQ(lane[0], direct + 1);
    CO_EQ(lane[1], direct + 2);
  }
  CO_EQ(weft_msg_try_recv(&m[0], 0), -EAGAIN);
  /* After unmarking, tag 5 goes to the normal queue. */
  CO_EQ(weft_msg_hot_tag(NULL, 5, false), 0);
  CO_EQ(weft_msg_send_wait(1, 5, 55), 0);
  CO_EQ(weft_msg_try_recv(&m[0], WEFT_MSG_HOT), -EAGAIN);
  CO_EQ(weft_msg_recv(&m[0], in_ms(5000)), 0);
  CO_EQ(m[0].val, 55);
  return NULL;
}

static void *hot_main(void *arg)
{
  (void)arg;
  weft_event *go;
  CO_EQ(weft_event_create(&go, 0), 0);
  weft_task *r = spawn_on(1, hot_receiver, go);
  CO_EQ(weft_msg_hot_tag(NULL, 5, true), 0);
  CO_EQ(weft_msg_send(1, 1, 100), 0);
  CO_EQ(weft_msg_send(1, 5, 500), 0);
  weft_msg b[4] = {{.tag = 5, .val = 501}, {.tag = 1, .val = 101},
                   {.tag = 5, .val = 502}, {.tag = 1, .val = 102}};
  CO_EQ(weft_msg_send_many(1, b, 4), 4);
  CO_EQ(weft_msg_flush(), 0);
  CO_EQ(weft_event_set(go), 0);
  rt_join_int(r);
  weft_event_destroy(go);
  return NULL;
}

Test(msg, hot_tags_have_their_own_queue, .timeout = 20)
{
  rt_run(2, hot_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- counters ---------------------------------------------------------------------- */

#define CT_TAG 3
#define CT_ADDS 20000

struct counter_ctx {
  weft_runtime *rt;
  atomic_int ready;
  int64_t total;
};

static void *counter_adder(void *arg)
{
  (void)arg;
  for (uint32_t i = 1; i <= CT_ADDS; i++) {
    CO_EQ(weft_counter_add(1, CT_TAG, i), 0);
    if (i % 512 == 0)
      weft_yield();
  }
  return NULL;
}

static void *counter_thread(void *arg)
{
  struct counter_ctx *c = arg;
  for (uint32_t i = 1; i <= CT_ADDS; i++)
    CO_EQ(weft_counter_add_rt(c->rt, 1, CT_TAG, i), 0);
  return NULL;
}

static void *counter_taker(void *arg)
{
  struct counter_ctx *c = arg;
  const int64_t expect = 4 * ((int64_t)CT_ADDS * (CT_ADDS + 1) / 2);
  int64_t sum = 0, takes = 0;
  while (sum < expect) {
    int64_t v = weft_counter_take(CT_TAG, in_ms(20000));
    CO_CHECK(v > 0);
    if (v <= 0)
      break;
    sum += v;
    takes++;
  }
  CO_EQ(sum, expect);
  CO_EQ(weft_counter_take(CT_TAG, weft_now()), -ETIMEDOUT);
  c->total = sum;
  return (void *)(intptr_t)takes;
}

Test(msg, counters_sum_exactly_under_concurrent_adds, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  struct counter_ctx c = {.rt = rt};
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  weft_task *taker, *a0, *a1;
  o.shard = 1;
  cr_assert_eq(weft_runtime_submit(rt, &o, counter_taker, &c, &taker), 0);
  cr_assert_eq(weft_runtime_submit(rt, &o, counter_adder, NULL, &a1), 0);
  o.shard = 0;
  cr_assert_eq(weft_runtime_submit(rt, &o, counter_adder, NULL, &a0), 0);
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, counter_thread, &c), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  cr_assert_eq(weft_join(a0, NULL), 0);
  cr_assert_eq(weft_join(a1, NULL), 0);
  void *takes;
  cr_assert_eq(weft_join(taker, &takes), 0);
  cr_log_info("counter: %lld taken in %ld takes", (long long)c.total, (long)(intptr_t)takes);
  /* Out of range, zero adds, and a plain thread cannot take. */
  cr_assert_eq(weft_counter_add_rt(rt, 1, 256, 1), -EINVAL);
  cr_assert_eq(weft_counter_add_rt(rt, 1, CT_TAG, 0), 0);
  cr_assert_eq(weft_counter_take(CT_TAG, WEFT_NO_DEADLINE), -EPERM);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- no msg_ring: -EOPNOTSUPP ------------------------------------------------------------- */

static void *unsupported_main(void *arg)
{
  (void)arg;
  weft_msg m = {0};
  CO_EQ(weft_msg_send(1, 1, 1), -EOPNOTSUPP);
  CO_EQ(weft_msg_send_many(1, &m, 1), -EOPNOTSUPP);
  CO_EQ(weft_msg_send_wait(1, 1, 1), -EOPNOTSUPP);
  CO_EQ(weft_msg_flush(), -EOPNOTSUPP);
  CO_EQ(weft_msg_recv(&m, weft_now()), -EOPNOTSUPP);
  CO_EQ(weft_msg_try_recv(&m, 0), -EOPNOTSUPP);
  CO_EQ(weft_counter_add(1, 1, 1), -EOPNOTSUPP);
  CO_EQ(weft_counter_take(1, weft_now()), -EOPNOTSUPP);
  return NULL;
}

Test(msg, refused_without_msg_ring, .timeout = 20)
{
  atomic_store(&weft__msg_refused, true);
  weft_runtime *rt = rt_start(2);
  atomic_store(&weft__msg_refused, false);
  cr_assert_eq(weft_msg_send_rt(rt, 1, 1, 1), -EOPNOTSUPP);
  cr_assert_eq(weft_counter_add_rt(rt, 1, 1, 1), -EOPNOTSUPP);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, &o, unsupported_main, NULL, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- argument errors ---------------------------------------------------------------- */

static void *einval_main(void *arg)
{
  (void)arg;
  weft_msg m = {0};
  CO_EQ(weft_msg_send(-1, 1, 1), -EINVAL);
  CO_EQ(weft_msg_send(2, 1, 1), -EINVAL);
  CO_EQ(weft_msg_send_wait(2, 1, 1), -EINVAL);
  CO_EQ(weft_msg_send_many(2, &m, 1), -EINVAL);
  CO_EQ(weft_msg_send_many(1, NULL, 1), -EINVAL);
  CO_EQ(weft_msg_send_many(1, NULL, 0), 0);
  CO_EQ(weft_counter_add(2, 1, 1), -EINVAL);
  CO_EQ(weft_counter_add(1, 16, 1), -EINVAL); /* msg_counters = 16 */
  CO_EQ(weft_counter_take(16, weft_now()), -EINVAL);
  CO_EQ(weft_msg_recv(NULL, weft_now()), -EINVAL);
  CO_EQ(weft_msg_recv_many(&m, 0, 0, weft_now()), -EINVAL);
  CO_EQ(weft_msg_recv_many(&m, 1, 0x8, weft_now()), -EINVAL);
  CO_EQ(weft_msg_try_recv(NULL, 0), -EINVAL);
  return NULL;
}

Test(msg, invalid_arguments, .timeout = 20)
{
  weft_config c;
  weft_runtime *rt;
  rt_cfg(&c, 2);
  c.msg_lane_capacity = 3;
  cr_assert_eq(weft_runtime_start(&rt, &c), -EINVAL);
  c.msg_lane_capacity = 0;
  cr_assert_eq(weft_runtime_start(&rt, &c), -EINVAL);
  c.msg_lane_capacity = 1u << 25;
  cr_assert_eq(weft_runtime_start(&rt, &c), -EINVAL);
  c.msg_lane_capacity = 2;
  c.msg_counters = 0;
  cr_assert_eq(weft_runtime_start(&rt, &c), -EINVAL);
  c.msg_counters = 65537;
  cr_assert_eq(weft_runtime_start(&rt, &c), -EINVAL);
  c.msg_counters = 16;
  rt = rt_start_cfg(&c);
  cr_assert_eq(weft_msg_send_rt(rt, 2, 1, 1), -EINVAL);
  cr_assert_eq(weft_msg_send_rt(rt, -1, 1, 1), -EINVAL);
  cr_assert_eq(weft_msg_send_many_rt(rt, 5, &(weft_msg){0}, 1), -EINVAL);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, &o, einval_main, NULL, &t), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- a lane that cannot be made ------------------------------------------------------- */

static void *nomem_main(void *arg)
{
  (void)arg;
  weft_msg b[3] = {{.tag = 1, .val = 1}, {.tag = 1, .val = 2}, {.tag = 1, .val = 3}};
  /* The lane 0 -> 1 is made by the first batched send: fail that malloc. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_msg_send_many(1, b, 3), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(weft_msg_send_many(1, b, 3), 3);
  CO_EQ(weft_msg_flush(), 0);
  weft_stats st = shard_stats(1);
  CO_EQ(st.msgs_received, 3);
  return NULL;
}

Test(msg, lane_out_of_memory_is_reported, .timeout = 20)
{
  rt_run(2, nomem_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}
