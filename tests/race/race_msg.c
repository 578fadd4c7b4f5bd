/* SPDX-License-Identifier: MIT */
/*
 * race_msg: message lanes under ThreadSanitizer.
 *
 * A 2-shard runtime where, at the same time,
 *   - a sender coroutine on each shard sends to the other shard direct
 *     messages (tag 0), batched ones (tag 1) and counter adds, flushing now
 *     and then;
 *   - two plain threads send to both shards direct messages (hot tags 2 and
 *     4: they go to the hot queue), batched ones (tags 3 and 5) and counter
 *     adds, and flush (weft_msg_flush_rt) now and then, both at once;
 *   - on each shard a receiver coroutine takes the normal queue, another the
 *     hot queue, and a third takes the counter.
 * Every message carries its sender's sequence number; receivers check exact
 * per-(sender, tag) sequences and counts, and the counter sums exactly.
 *
 * Exit 0 when everything matches, 1 otherwise, 77 without io_uring or
 * msg_ring.
 */
#include "race_rt.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 20000       /* messages per (sender, target, kind) */
#define BATCH 37
#define COUNTER_TAG 0
#define EXT 2         /* plain sender threads */

static weft_runtime *rt;
static const int64_t counter_expect = (int64_t)(1 + EXT) * N * (N + 1) / 2;

static int64_t deadline(void)
{
  return weft_now() + 60 * WEFT_SEC;
}

/* Sends n messages of `tag` numbered from 0 on the lane to `to`. */
static void send_lane(int to, uint16_t tag, bool plain)
{
  weft_msg b[BATCH];
  uint32_t next = 0;
  while (next < N) {
    size_t n = 0;
    while (n < BATCH && next + n < N) {
      b[n] = (weft_msg){.tag = tag, .val = next + (uint32_t)n};
      n++;
    }
    int r = weft_msg_send_many_rt(rt, to, b, n);
    if (r == -EAGAIN) {
      if (plain)
        sched_yield();
      else
        weft_yield();
      continue;
    }
    CHECK(r > 0);
    if (r <= 0)
      return;
    next += (uint32_t)r;
    if (plain && next % (32 * BATCH) < (uint32_t)r)
      CHECK(weft_msg_flush_rt(rt, deadline()) == 0);
  }
}

static void *shard_sender(void *arg)
{
  int to = (int)(intptr_t)arg;
  weft_msg b[BATCH];
  uint32_t lane = 0;
  for (uint32_t i = 0; i < N; i++) {
    int d;
    while ((d = weft_msg_send(to, 0, i)) == -EAGAIN) /* the target's queue is full */
      weft_yield();
    CHECK(d == 0);
    CHECK(weft_counter_add(to, COUNTER_TAG, i + 1) == 0);
    if (i % BATCH == BATCH - 1 || i == N - 1) {
      size_t n = 0;
      while (lane <= i)
        b[n++] = (weft_msg){.tag = 1, .val = lane++};
      for (size_t done = 0; done < n;) {
        int r = weft_msg_send_many(to, b + done, n - done);
        if (r == -EAGAIN) {
          weft_yield();
          continue;
        }
        CHECK(r > 0);
        if (r <= 0)
          return NULL;
        done += (size_t)r;
      }
    }
    if (i % 4096 == 0)
      CHECK(weft_msg_flush() == 0);
    else if (i % 256 == 0)
      weft_yield();
  }
  CHECK(weft_msg_flush() == 0);
  return NULL;
}

static void *plain_sender(void *arg)
{
  int k = (int)(intptr_t)arg;
  for (uint32_t i = 0; i < N; i++)
    for (int to = 0; to < 2; to++) {
      int r;
      while ((r = weft_msg_send_rt(rt, to, (uint16_t)(2 + 2 * k), i)) == -EAGAIN)
        sched_yield();
      CHECK(r == 0);
      CHECK(weft_counter_add_rt(rt, to, COUNTER_TAG, i + 1) == 0);
    }
  for (int to = 0; to < 2; to++)
    send_lane(to, (uint16_t)(3 + 2 * k), true);
  CHECK(weft_msg_flush_rt(rt, deadline()) == 0);
  return NULL;
}

/* Index of a (sender, tag) stream: the other shard's tags 0/1, the plain
 * threads' tags 2..5. */
static int stream_of(const weft_msg *m, int me)
{
  if (m->sender == WEFT_MSG_EXTERNAL)
    return m->tag >= 2 && m->tag <= 5 ? m->tag : -1;
  if (m->sender == 1 - me && m->tag <= 1)
    return m->tag;
  return -1;
}

static void *receiver(void *arg)
{
  bool hot = (intptr_t)arg;
  int me = weft_shard_id();
  uint32_t next[6] = {0};
  int want = hot ? EXT * N : (2 + EXT) * N;
  weft_msg m[64];
  for (int got = 0; got < want;) {
    int n = weft_msg_recv_many(m, 64, hot ? WEFT_MSG_HOT : 0, deadline());
    CHECK(n > 0);
    if (n <= 0)
      return NULL;
    for (int i = 0; i < n; i++) {
      int s = stream_of(&m[i], me);
      bool hot_tag = m[i].sender == WEFT_MSG_EXTERNAL && (m[i].tag == 2 || m[i].tag == 4);
      CHECK(s >= 0 && hot_tag == hot);
      if (s < 0)
        continue;
      CHECK(m[i].val == next[s]);
      next[s] = m[i].val + 1;
    }
    got += n;
  }
  for (int s = 0; s < 6; s++)
    if ((s == 2 || s == 4) == hot)
      CHECK(next[s] == N);
  weft_msg extra;
  CHECK(weft_msg_try_recv(&extra, hot ? WEFT_MSG_HOT : 0) == -EAGAIN);
  return NULL;
}

static void *taker(void *arg)
{
  (void)arg;
  int64_t sum = 0;
  while (sum < counter_expect) {
    int64_t v = weft_counter_take(COUNTER_TAG, deadline());
    CHECK(v > 0);
    if (v <= 0)
      break;
    sum += v;
  }
  CHECK(sum == counter_expect);
  return NULL;
}

int main(void)
{
  weft_config c;
  weft_config_init(&c);
  c.shards = 2;
  c.msg_lane_capacity = 256;
  int r = race_start(&rt, &c, "race_msg");
  if (r || (r = race_need_msg(rt, "race_msg")))
    return r;
  CHECK(weft_msg_hot_tag(rt, 2, true) == 0);
  CHECK(weft_msg_hot_tag(rt, 4, true) == 0);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  weft_task *t[10];
  int nt = 0;
  for (int s = 0; s < 2; s++) {
    o.shard = s;
    CHECK(weft_runtime_submit(rt, &o, receiver, (void *)0, &t[nt++]) == 0);
    CHECK(weft_runtime_submit(rt, &o, receiver, (void *)1, &t[nt++]) == 0);
    CHECK(weft_runtime_submit(rt, &o, taker, NULL, &t[nt++]) == 0);
    CHECK(weft_runtime_submit(rt, &o, shard_sender, (void *)(intptr_t)(1 - s), &t[nt++]) == 0);
  }
  pthread_t th[EXT];
  for (int k = 0; k < EXT; k++)
    CHECK(pthread_create(&th[k], NULL, plain_sender, (void *)(intptr_t)k) == 0);
  for (int k = 0; k < EXT; k++)
    pthread_join(th[k], NULL);
  for (int i = 0; i < nt; i++)
    CHECK(weft_join(t[i], NULL) == 0);
  weft_stats st;
  CHECK(weft_stats_get(rt, -1, &st) == 0);
  CHECK(st.msgs_received == 2 * (uint64_t)(2 + 2 * EXT) * N);
  CHECK(weft_runtime_stop(rt) == 0);
  int f = atomic_load(&failures);
  printf("race_msg: %s (%llu messages, %llu doorbells, %llu coalesced)\n", f ? "FAIL" : "ok",
         (unsigned long long)st.msgs_received, (unsigned long long)st.msg_doorbells,
         (unsigned long long)st.msg_doorbells_coalesced);
  return f ? 1 : 0;
}
