/* SPDX-License-Identifier: MIT */
/*
 * stress_msg: 10,000,000 messages through the message lanes (--quick:
 * 200,000), with an exact count and sum and no loss or duplication.
 *
 * A 2-shard runtime. On each shard a sender coroutine sends to the other
 * shard direct messages (tag 0) and batched ones (tag 1); two plain threads
 * send direct (tags 2, 4) and batched (tags 3, 5) messages to both shards.
 * Every stream numbers its messages 0, 1, 2, ... in `val`; the receiver on
 * each shard checks that every (sender, tag) stream arrives exactly in
 * sequence, so a lost, duplicated or reordered message is caught where it
 * happens, and the totals (count and sum of values) are checked at the end.
 *
 * Exit 0 pass, 1 fail, 77 without io_uring.
 */
#include "../race/race_check.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 64
#define EXT 2
#define STREAMS 6

static weft_runtime *rt;
/* Messages per stream: each shard sends n_direct + n_lane to the other;
 * each plain thread sends e_direct + e_lane to each shard. */
static uint32_t n_direct, n_lane, e_direct, e_lane;

struct tally {
  uint64_t count, sum;
  uint32_t next[STREAMS];
};
static struct tally tallies[2];

/* The sum of 0..n-1. */
static uint64_t tri(uint64_t n)
{
  return n * (n - 1) / 2;
}

static void send_lane(int to, uint16_t tag, uint32_t n, bool plain)
{
  weft_msg b[BATCH];
  for (uint32_t next = 0; next < n;) {
    size_t k = 0;
    while (k < BATCH && next + k < n) {
      b[k] = (weft_msg){.tag = tag, .val = next + (uint32_t)k};
      k++;
    }
    int r = weft_msg_send_many_rt(rt, to, b, k);
    if (r == -EAGAIN) {
      if (plain)
        sched_yield();
      else
        weft_yield();
      continue;
    }
    if (r <= 0) {
      CHECK(r > 0);
      return;
    }
    next += (uint32_t)r;
  }
}

static void *shard_sender(void *arg)
{
  int to = (int)(intptr_t)arg;
  /* Interleave the two ways, a lane batch per BATCH direct messages. */
  uint32_t d = 0, l = 0;
  while (d < n_direct || l < n_lane) {
    for (int i = 0; i < BATCH && d < n_direct; i++, d++) {
      int r;
      while ((r = weft_msg_send(to, 0, d)) == -EBUSY || r == -EAGAIN)
        weft_yield();
      if (r) {
        CHECK(r == 0);
        return NULL;
      }
    }
    uint32_t chunk = n_lane - l < 4 * BATCH ? n_lane - l : 4 * BATCH;
    weft_msg b[4 * BATCH];
    for (uint32_t i = 0; i < chunk; i++)
      b[i] = (weft_msg){.tag = 1, .val = l + i};
    for (uint32_t done = 0; done < chunk;) {
      int r = weft_msg_send_many(to, b + done, chunk - done);
      if (r == -EAGAIN) {
        weft_yield();
        continue;
      }
      if (r <= 0) {
        CHECK(r > 0);
        return NULL;
      }
      done += (uint32_t)r;
    }
    l += chunk;
    weft_yield(); /* submits the direct messages and lets the receiver run */
  }
  CHECK(weft_msg_flush() == 0);
  return NULL;
}

static void *plain_sender(void *arg)
{
  int k = (int)(intptr_t)arg;
  for (uint32_t i = 0; i < e_direct; i++)
    for (int to = 0; to < 2; to++) {
      int r;
      while ((r = weft_msg_send_rt(rt, to, (uint16_t)(2 + 2 * k), i)) == -EAGAIN)
        sched_yield(); /* the target's queue is full */
      CHECK(r == 0);
    }
  for (int to = 0; to < 2; to++)
    send_lane(to, (uint16_t)(3 + 2 * k), e_lane, true);
  return NULL;
}

static void *receiver(void *arg)
{
  (void)arg;
  int me = weft_shard_id();
  struct tally *t = &tallies[me];
  uint64_t want = (uint64_t)n_direct + n_lane + (uint64_t)EXT * (e_direct + e_lane);
  weft_msg m[256];
  while (t->count < want) {
    int n = weft_msg_recv_many(m, 256, 0, weft_now() + 60 * WEFT_SEC);
    if (n <= 0) {
      fprintf(stderr, "shard %d: receive failed (%s) after %llu messages\n", me,
              weft_strerror(n), (unsigned long long)t->count);
      atomic_fetch_add(&failures, 1);
      return NULL;
    }
    for (int i = 0; i < n; i++) {
      int s;
      if (m[i].sender == WEFT_MSG_EXTERNAL)
        s = m[i].tag >= 2 && m[i].tag < STREAMS ? m[i].tag : -1;
      else
        s = m[i].sender == 1 - me && m[i].tag < 2 ? m[i].tag : -1;
      if (s < 0 || m[i].val != t->next[s]) {
        fprintf(stderr, "shard %d: message (sender %u, tag %u, val %u) out of sequence\n", me,
                m[i].sender, m[i].tag, m[i].val);
        atomic_fetch_add(&failures, 1);
        return NULL;
      }
      t->next[s]++;
      t->sum += m[i].val;
    }
    t->count += (uint64_t)n;
  }
  weft_msg extra;
  CHECK(weft_msg_try_recv(&extra, 0) == -EAGAIN);
  return NULL;
}

int main(int argc, char **argv)
{
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  /* Total: 2 shards x (n_direct + n_lane) + EXT threads x 2 shards x
   * (e_direct + e_lane) = 10,000,000 (200,000 with --quick). */
  uint32_t scale = quick ? 50 : 1;
  n_direct = 1000000 / scale;
  n_lane = 3000000 / scale;
  e_direct = 100000 / scale;
  e_lane = 400000 / scale;

  weft_config c;
  weft_config_init(&c);
  c.shards = 2;
  int r = weft_runtime_start(&rt, &c);
  if (r == -EPERM || r == -ENOSYS)
    return 77;
  if (r < 0) {
    fprintf(stderr, "weft_runtime_start: %s\n", weft_strerror(r));
    return 1;
  }
  int64_t t0 = weft_now();
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  weft_task *t[4];
  for (int s = 0; s < 2; s++) {
    o.shard = s;
    CHECK(weft_runtime_submit(rt, &o, receiver, NULL, &t[2 * s]) == 0);
    CHECK(weft_runtime_submit(rt, &o, shard_sender, (void *)(intptr_t)(1 - s), &t[2 * s + 1]) ==
          0);
  }
  pthread_t th[EXT];
  for (int k = 0; k < EXT; k++)
    CHECK(pthread_create(&th[k], NULL, plain_sender, (void *)(intptr_t)k) == 0);
  for (int k = 0; k < EXT; k++)
    pthread_join(th[k], NULL);
  for (int i = 0; i < 4; i++)
    CHECK(weft_join(t[i], NULL) == 0);
  double secs = (double)(weft_now() - t0) / 1e9;
  weft_stats st;
  CHECK(weft_stats_get(rt, -1, &st) == 0);
  CHECK(weft_runtime_stop(rt) == 0);

  uint64_t want_count = 0, want_sum = 0, count = 0, sum = 0;
  for (int s = 0; s < 2; s++) {
    want_count += (uint64_t)n_direct + n_lane + (uint64_t)EXT * (e_direct + e_lane);
    want_sum += tri(n_direct) + tri(n_lane) + EXT * (tri(e_direct) + tri(e_lane));
    count += tallies[s].count;
    sum += tallies[s].sum;
  }
  CHECK(count == want_count);
  CHECK(sum == want_sum);
  CHECK(st.msgs_received == want_count);
  int f = atomic_load(&failures);
  printf("{\"stress\":\"msg\",\"messages\":%llu,\"expected\":%llu,\"sum\":%llu,"
         "\"expected_sum\":%llu,\"seconds\":%.2f,\"msgs_per_sec\":%.0f,\"doorbells\":%llu,"
         "\"coalesced\":%llu,\"backpressure\":%llu,\"failed\":%llu,\"result\":\"%s\"}\n",
         (unsigned long long)count, (unsigned long long)want_count, (unsigned long long)sum,
         (unsigned long long)want_sum, secs, (double)count / secs,
         (unsigned long long)st.msg_doorbells, (unsigned long long)st.msg_doorbells_coalesced,
         (unsigned long long)st.msg_backpressure, (unsigned long long)st.msg_failed,
         f ? "FAIL" : "ok");
  return f ? 1 : 0;
}
