/* SPDX-License-Identifier: MIT */
/*
 * oneway: one-way messages from a coroutine on shard 0 to a coroutine on
 * shard 1, each round 2048 messages and then a weft_msg_flush() barrier
 * (which returns once shard 1 has taken every message out of its lane).
 * The receiver takes them with weft_msg_recv_many meanwhile; a round's time
 * is from its first send to the flush's return, and the figure is the best
 * batch of rounds divided by the messages in it.
 *
 *  oneway         batched: weft_msg_send_many in slices of 64 messages onto
 *                 the shard 0 -> 1 lane (one doorbell msg_ring while the
 *                 target has not answered the last). Reference: a plain
 *                 single-producer ring between two threads, the same 2048
 *                 messages pushed one by one and the producer waiting until
 *                 the consumer has popped them all. Target <= 25 ns/msg.
 *  oneway_direct  the same with weft_msg_send: one IORING_OP_MSG_RING per
 *                 message, the value inside the target's CQE. Same
 *                 reference.
 *
 * Extra fields: the median batch, and "end_to_end_ns": every message of
 * the run over the time until the receiver had the last one. The shards and
 * the reference threads are pinned to two distinct CPUs (when there are two).
 */
#include "bench_util.h"
#include "bench_pin.h"

#include "weft.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define ROUND 2048
#define SLICE 64
#define MAX_BATCHES 32

struct params {
  int warm;    /* rounds before timing */
  int rounds;  /* rounds per timed batch */
  int batches;
};

static struct params P;
struct result {
  double best, median, end_to_end;
  bool ok;
};

static struct result summarise(double *ns_per_msg, int n, double e2e)
{
  struct result r = {.best = bench_min(ns_per_msg, (size_t)n), .end_to_end = e2e, .ok = true};
  r.median = bench_median(ns_per_msg, (size_t)n);
  return r;
}

/* ---- weft ------------------------------------------------------------------------ */

struct run {
  bool direct;
  uint64_t total;       /* messages the receiver must take */
  int64_t start, last;  /* first send, last message received */
  double samples[MAX_BATCHES];
  atomic_int failed;
};

static void *receiver(void *arg)
{
  struct run *r = arg;
  weft_msg m[1024];
  uint64_t got = 0, sum = 0;
  while (got < r->total) {
    int n = weft_msg_recv_many(m, 1024, 0, weft_now() + 30 * WEFT_SEC);
    if (n <= 0) {
      atomic_store(&r->failed, 1);
      return NULL;
    }
    for (int i = 0; i < n; i++)
      sum += m[i].val;
    got += (uint64_t)n;
  }
  r->last = weft_now();
  return (void *)(uintptr_t)sum;
}

static int send_round(const struct run *r, const weft_msg *msgs)
{
  if (r->direct) {
    for (int i = 0; i < ROUND;) {
      int n = weft_msg_send(1, msgs[i].tag, msgs[i].val);
      if (n == -EAGAIN) { /* the receiver's queue is full */
        weft_yield();
        continue;
      }
      if (n < 0)
        return -1;
      i++;
    }
  } else {
    for (int i = 0; i < ROUND;) {
      int n = weft_msg_send_many(1, msgs + i, ROUND - i < SLICE ? (size_t)(ROUND - i) : SLICE);
      if (n == -EAGAIN) {
        weft_yield();
        continue;
      }
      if (n <= 0)
        return -1;
      i += n;
    }
  }
  return weft_msg_flush();
}

static void *sender(void *arg)
{
  struct run *r = arg;
  static weft_msg msgs[ROUND];
  for (int i = 0; i < ROUND; i++)
    msgs[i] = (weft_msg){.tag = 1, .val = (uint32_t)i};
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *rx;
  if (weft_spawn(&rx, &o, receiver, r) < 0) {
    atomic_store(&r->failed, 1);
    return NULL;
  }
  r->start = weft_now();
  for (int i = 0; i < P.warm; i++)
    if (send_round(r, msgs) < 0)
      atomic_store(&r->failed, 1);
  for (int b = 0; b < P.batches; b++) {
    int64_t t0 = weft_now();
    for (int i = 0; i < P.rounds; i++)
      if (send_round(r, msgs) < 0)
        atomic_store(&r->failed, 1);
    r->samples[b] = (double)(weft_now() - t0) / ((double)P.rounds * ROUND);
  }
  void *sum;
  if (weft_join(rx, &sum) < 0 ||
      (uintptr_t)sum != (uintptr_t)(r->total / ROUND) * ((uint64_t)ROUND * (ROUND - 1) / 2))
    atomic_store(&r->failed, 1);
  return NULL;
}

static struct result run_weft(bool direct)
{
  struct run r = {.direct = direct};
  r.total = (uint64_t)(P.warm + P.rounds * P.batches) * ROUND;
  weft_config c;
  weft_config_init(&c);
  c.shards = 2;
  c.steal = false;
  if (pin_n) {
    c.cpus = pin_cpus;
    c.ncpus = 2;
  }
  int e = weft_run(&c, sender, &r, NULL);
  if (bench_uring_missing(e))
    exit(BENCH_SKIP);
  if (e < 0 || atomic_load(&r.failed)) {
    fprintf(stderr, "oneway: the weft run failed (%s)\n", weft_strerror(e));
    return (struct result){.ok = false};
  }
  return summarise(r.samples, P.batches, (double)(r.last - r.start) / (double)r.total);
}

/* ---- reference: a plain SPSC ring between two threads ----------------------------- */

#define RING 4096

static struct {
  _Alignas(64) _Atomic uint32_t tail;
  _Alignas(64) _Atomic uint32_t head;
  _Alignas(64) weft_msg slot[RING];
  _Atomic int stop;
  uint64_t sum;
} ring;

static void *ring_consumer(void *arg)
{
  (void)arg;
  pin_self(1);
  uint32_t h = 0, t = 0;
  uint64_t sum = 0;
  for (;;) {
    if (h == t) {
      t = atomic_load_explicit(&ring.tail, memory_order_acquire);
      if (h == t) {
        if (atomic_load_explicit(&ring.stop, memory_order_relaxed))
          break;
        __builtin_ia32_pause();
        continue;
      }
    }
    sum += ring.slot[h % RING].val;
    atomic_store_explicit(&ring.head, ++h, memory_order_release);
  }
  ring.sum = sum;
  return NULL;
}

static struct result run_ring(void)
{
  pthread_t th;
  cpu_set_t saved;
  bool restore = sched_getaffinity(0, sizeof(saved), &saved) == 0;
  if (pthread_create(&th, NULL, ring_consumer, NULL) != 0)
    return (struct result){.ok = false};
  pin_self(0);
  double samples[MAX_BATCHES];
  uint32_t t = 0, head_cache = 0;
  int64_t start = bench_now_ns();
  for (int b = -1; b < P.batches; b++) {
    int rounds = b < 0 ? P.warm : P.rounds;
    int64_t t0 = bench_now_ns();
    for (int r = 0; r < rounds; r++) {
      for (uint32_t i = 0; i < ROUND; i++) {
        while (t - head_cache == RING)
          head_cache = atomic_load_explicit(&ring.head, memory_order_acquire);
        ring.slot[t % RING] = (weft_msg){.tag = 1, .val = i};
        atomic_store_explicit(&ring.tail, ++t, memory_order_release);
      }
      /* The barrier: every message popped. */
      while ((head_cache = atomic_load_explicit(&ring.head, memory_order_acquire)) != t)
        __builtin_ia32_pause();
    }
    if (b >= 0)
      samples[b] = (double)(bench_now_ns() - t0) / ((double)rounds * ROUND);
  }
  int64_t end = bench_now_ns();
  atomic_store(&ring.stop, 1);
  pthread_join(th, NULL);
  if (restore)
    pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
  uint64_t total = (uint64_t)(P.warm + P.rounds * P.batches);
  if (ring.sum != total * ((uint64_t)ROUND * (ROUND - 1) / 2))
    return (struct result){.ok = false};
  return summarise(samples, P.batches, (double)(end - start) / (double)(total * ROUND));
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("oneway", quick ? 60 : 300);
  P = quick ? (struct params){.warm = 20, .rounds = 50, .batches = 8}
            : (struct params){.warm = 100, .rounds = 200, .batches = 16};
  choose_cpus();
  struct result ref = run_ring();
  struct result lane = run_weft(false);
  struct result direct = run_weft(true);
  if (!ref.ok || !lane.ok || !direct.ok)
    return 1;
  bench_print("oneway", "ns_per_msg", lane.best, "spsc_ns_per_msg", ref.best, lane.best / ref.best,
              ",\"median\":%.3f,\"ref_median\":%.3f,\"end_to_end_ns\":%.3f,\"slice\":%d,"
              "\"round\":%d,\"target\":25",
              lane.median, ref.median, lane.end_to_end, SLICE, ROUND);
  bench_print("oneway_direct", "ns_per_msg", direct.best, "spsc_ns_per_msg", ref.best,
              direct.best / ref.best,
              ",\"median\":%.3f,\"ref_median\":%.3f,\"end_to_end_ns\":%.3f,\"round\":%d",
              direct.median, ref.median, direct.end_to_end, ROUND);
  return 0;
}
