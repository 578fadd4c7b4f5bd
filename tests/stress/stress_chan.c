/* SPDX-License-Identifier: MIT */
/*
 * stress_chan: 10,000,000 messages (200,000 with --quick) from 8 producer
 * coroutines to 8 consumer coroutines through two channels on a 2-shard
 * runtime. Every task is WEFT_PLACE_STEALABLE, so stealing moves them
 * between the shards while they block and wake.
 *
 * Producer p sends (p << 40 | seq) for seq = 0 .. per_producer - 1 to
 * channel p % 2. Consumers 0-3 receive with weft_select over both channels
 * (disabling a case once its channel is closed and drained), consumers 4-7
 * with weft_chan_recv on one channel each. Checks, exactly: every
 * (producer, seq) is received once (a bitmap, set with an atomic or), the
 * count and the sum of sequence numbers match, and each consumer sees each
 * producer's messages in increasing order (FIFO per producer).
 *
 * Exit status: 0 pass, 1 fail, 77 io_uring unavailable.
 */
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NPROD 8
#define NCONS 8
#define CAP 64

struct stress {
  weft_chan *ch[2];
  uint64_t per_prod;
  _Atomic uint64_t *bits;          /* NPROD * per_prod bits */
  atomic_ullong count, seq_sum;
  atomic_int failures;
  atomic_int next_prod, next_cons;
  atomic_ullong stolen_hint;       /* consumers that saw a shard change */
};

static struct stress S;

static void fail(const char *what, unsigned long long a, unsigned long long b)
{
  if (atomic_fetch_add(&S.failures, 1) < 5)
    fprintf(stderr, "stress_chan: %s (%llu, %llu)\n", what, a, b);
}

static void *producer(void *arg)
{
  (void)arg;
  uint64_t p = (uint64_t)atomic_fetch_add(&S.next_prod, 1);
  weft_chan *c = S.ch[p % 2];
  for (uint64_t s = 0; s < S.per_prod; s++) {
    uint64_t v = p << 40 | s;
    int r = weft_chan_send(c, &v);
    if (r < 0) {
      fail("send", p, (unsigned long long)-r);
      break;
    }
  }
  return NULL;
}

/* Records one message; `last` holds this consumer's last seq per producer. */
static bool take(uint64_t v, int64_t *last, uint64_t *sum)
{
  uint64_t p = v >> 40, s = v & ((1ull << 40) - 1);
  if (p >= NPROD || s >= S.per_prod) {
    fail("bad message", p, s);
    return false;
  }
  if ((int64_t)s <= last[p])
    fail("out of order for this consumer", p, s);
  last[p] = (int64_t)s;
  uint64_t bit = p * S.per_prod + s;
  uint64_t old = atomic_fetch_or_explicit(&S.bits[bit / 64], 1ull << (bit % 64),
                                          memory_order_relaxed);
  if (old & (1ull << (bit % 64)))
    fail("duplicate", p, s);
  *sum += s;
  return true;
}

static void *consumer(void *arg)
{
  (void)arg;
  int id = atomic_fetch_add(&S.next_cons, 1);
  int64_t last[NPROD];
  for (int i = 0; i < NPROD; i++)
    last[i] = -1;
  uint64_t sum = 0, n = 0, v = 0;
  int shard = weft_shard_id();
  bool moved = false;
  if (id < NCONS / 2) {
    weft_select_case k[2] = {weft_select_recv(S.ch[0], &v), weft_select_recv(S.ch[1], &v)};
    int open = 2;
    while (open > 0) {
      int r = weft_select(k, 2, WEFT_NO_DEADLINE);
      if (r < 0) {
        fail("select", (unsigned long long)-r, 0);
        break;
      }
      if (k[r].result == -EPIPE) {
        k[r].chan = NULL;
        open--;
        continue;
      }
      if (!take(v, last, &sum))
        break;
      n++;
      moved |= weft_shard_id() != shard;
    }
  } else {
    weft_chan *c = S.ch[id % 2];
    int r;
    while ((r = weft_chan_recv(c, &v)) == 0) {
      if (!take(v, last, &sum))
        break;
      n++;
      moved |= weft_shard_id() != shard;
    }
    if (r != 0 && r != -EPIPE)
      fail("recv", (unsigned long long)-r, 0);
  }
  atomic_fetch_add(&S.count, n);
  atomic_fetch_add(&S.seq_sum, sum);
  if (moved)
    atomic_fetch_add(&S.stolen_hint, 1);
  return NULL;
}

static void *main_task(void *arg)
{
  (void)arg;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_STEALABLE;
  weft_task *tp[NPROD], *tc[NCONS];
  for (int i = 0; i < NCONS; i++)
    if (weft_spawn(&tc[i], &o, consumer, NULL) < 0)
      fail("spawn", (unsigned long long)i, 0);
  for (int i = 0; i < NPROD; i++)
    if (weft_spawn(&tp[i], &o, producer, NULL) < 0)
      fail("spawn", (unsigned long long)i, 0);
  if (atomic_load(&S.failures))
    return NULL;
  for (int i = 0; i < NPROD; i++)
    weft_join(tp[i], NULL);
  weft_chan_close(S.ch[0]);
  weft_chan_close(S.ch[1]);
  for (int i = 0; i < NCONS; i++)
    weft_join(tc[i], NULL);
  return NULL;
}

int main(int argc, char **argv)
{
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  uint64_t total = quick ? 200000 : 10000000;
  S.per_prod = total / NPROD;
  size_t words = (size_t)(NPROD * S.per_prod + 63) / 64;
  S.bits = calloc(words, sizeof(*S.bits));
  if (!S.bits || weft_chan_create(&S.ch[0], sizeof(uint64_t), CAP) < 0 ||
      weft_chan_create(&S.ch[1], sizeof(uint64_t), CAP) < 0) {
    fprintf(stderr, "stress_chan: out of memory\n");
    return 1;
  }
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int r = weft_run(&cfg, main_task, NULL, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "stress_chan: io_uring unavailable, skipped\n");
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "stress_chan: weft_run: %s\n", weft_strerror(r));
    return 1;
  }
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

  uint64_t n = NPROD * S.per_prod;
  if (atomic_load(&S.count) != n)
    fail("count", (unsigned long long)atomic_load(&S.count), (unsigned long long)n);
  uint64_t want_sum = NPROD * (S.per_prod * (S.per_prod - 1) / 2);
  if (atomic_load(&S.seq_sum) != want_sum)
    fail("sum", (unsigned long long)atomic_load(&S.seq_sum), (unsigned long long)want_sum);
  for (uint64_t b = 0; b < n; b++)
    if (!(atomic_load_explicit(&S.bits[b / 64], memory_order_relaxed) & (1ull << (b % 64)))) {
      fail("lost message", b / S.per_prod, b % S.per_prod);
      break;
    }
  for (int i = 0; i < 2; i++) {
    if (weft_chan_len(S.ch[i]) != 0)
      fail("left in a channel", (unsigned long long)i, weft_chan_len(S.ch[i]));
    weft_chan_unref(S.ch[i]);
  }
  free(S.bits);

  printf("stress_chan: %llu messages, %d producers -> %d consumers (4 by select), 2 shards, "
         "stealable: %.3f s, %.0f msgs/s; %llu consumers changed shard; %s\n",
         (unsigned long long)n, NPROD, NCONS, secs, (double)n / secs,
         (unsigned long long)atomic_load(&S.stolen_hint),
         atomic_load(&S.failures) ? "FAILED" : "exact count, sum and order");
  return atomic_load(&S.failures) ? 1 : 0;
}
