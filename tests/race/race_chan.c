/* SPDX-License-Identifier: MIT */
/*
 * race_chan: channels and select under ThreadSanitizer.
 *
 * Producers (coroutines pinned to each of 2 shards, stealable ones, and
 * plain threads) send (producer << 32 | seq) with a select over a buffered
 * channel A and a rendezvous channel B, with short deadlines so that
 * timeouts race the hand-overs. Consumers (coroutines and plain threads)
 * select over receiving from both. A closer closes both channels once about
 * half of the messages went through. Afterwards every message a producer
 * saw succeed must have been received exactly once, nothing else may have
 * been, and the checksums must agree.
 *
 * Exit status: 0 pass, 1 fail, 77 io_uring unavailable.
 */
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPROD_CO 4    /* producer coroutines: shard 0, shard 1, stealable x2 */
#define NPROD_TH 2    /* producer threads */
#define NPROD (NPROD_CO + NPROD_TH)
#define NCONS_CO 3
#define NCONS_TH 2
#define PER_PROD 15000 /* messages a producer tries to send */

struct shared {
  weft_chan *a, *b;
  atomic_int next_id;
  uint32_t sent[NPROD];              /* how many each producer got through */
  _Atomic uint8_t seen[NPROD][PER_PROD];
  atomic_llong sum_sent, sum_recv, received, timeouts;
  atomic_int failures;
  char first_failure[256];
  pthread_mutex_t fail_lock;
};

static struct shared S;

static void fail(const char *what, long long a, long long b)
{
  pthread_mutex_lock(&S.fail_lock);
  if (atomic_fetch_add(&S.failures, 1) == 0)
    snprintf(S.first_failure, sizeof(S.first_failure), "%s (%lld vs %lld)", what, a, b);
  pthread_mutex_unlock(&S.fail_lock);
}

static void *producer(void *arg)
{
  (void)arg;
  int id = atomic_fetch_add(&S.next_id, 1);
  uint64_t v = 0;
  weft_select_case k[2] = {weft_select_send(S.a, &v), weft_select_send(S.b, &v)};
  uint32_t s = 0, attempt = 0;
  long long sum = 0;
  while (s < PER_PROD) {
    v = (uint64_t)id << 32 | s;
    /* Deadlines from "already passed" to 50 us: timeouts race hand-overs. */
    int r = weft_select(k, 2, weft_now() + (int64_t)(attempt++ % 6) * 10 * WEFT_USEC);
    if (r == -ETIMEDOUT) {
      atomic_fetch_add(&S.timeouts, 1);
      continue;
    }
    if (r < 0 || r > 1) {
      fail("producer select", r, 0);
      break;
    }
    if (k[r].result == -EPIPE)
      break; /* closed: this one and every later one are not sent */
    if (k[r].result != 0) {
      fail("producer case result", k[r].result, 0);
      break;
    }
    sum += s;
    s++;
  }
  S.sent[id] = s; /* read after the join */
  atomic_fetch_add(&S.sum_sent, sum);
  weft_chan_unref(S.a);
  weft_chan_unref(S.b);
  return NULL;
}

static void *consumer(void *arg)
{
  (void)arg;
  uint64_t va = 0, vb = 0;
  weft_select_case k[2] = {weft_select_recv(S.a, &va), weft_select_recv(S.b, &vb)};
  int open = 2;
  long long sum = 0, n = 0;
  while (open > 0) {
    int r = weft_select(k, 2, WEFT_NO_DEADLINE);
    if (r < 0 || r > 1) {
      fail("consumer select", r, 0);
      break;
    }
    if (k[r].result == -EPIPE) {
      k[r].chan = NULL; /* closed and drained: disable the case */
      open--;
      continue;
    }
    uint64_t v = r == 0 ? va : vb;
    uint32_t id = (uint32_t)(v >> 32), s = (uint32_t)v;
    if (id >= NPROD || s >= PER_PROD) {
      fail("bad message", (long long)id, (long long)s);
      break;
    }
    if (atomic_fetch_add(&S.seen[id][s], 1) != 0)
      fail("duplicate", (long long)id, (long long)s);
    sum += s;
    n++;
    atomic_fetch_add_explicit(&S.received, 1, memory_order_relaxed);
  }
  atomic_fetch_add(&S.sum_recv, sum);
  weft_chan_unref(S.a);
  weft_chan_unref(S.b);
  return (void *)(intptr_t)n;
}

/* Closes both channels once about half of the messages went through. */
static void *closer(void *arg)
{
  (void)arg;
  while (atomic_load_explicit(&S.received, memory_order_relaxed) < NPROD * PER_PROD / 2)
    weft_sleep(50 * WEFT_USEC);
  weft_chan_close(S.b);
  weft_chan_close(S.a);
  weft_chan_close(S.a); /* idempotent */
  return NULL;
}

static int submit(weft_runtime *rt, int placement, int shard, void *(*fn)(void *),
                  weft_task **t)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = placement;
  o.shard = shard;
  weft_chan_ref(S.a);
  weft_chan_ref(S.b);
  return weft_runtime_submit(rt, &o, fn, NULL, t);
}

int main(void)
{
  pthread_mutex_init(&S.fail_lock, NULL);
  if (weft_chan_create(&S.a, sizeof(uint64_t), 4) || weft_chan_create(&S.b, sizeof(uint64_t), 0)) {
    fprintf(stderr, "race_chan: channel create failed\n");
    return 1;
  }
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  weft_runtime *rt;
  int r = weft_runtime_start(&rt, &cfg);
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "race_chan: io_uring unavailable, skipped\n");
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "race_chan: start: %s\n", weft_strerror(r));
    return 1;
  }

  weft_task *tc[NCONS_CO], *tp[NPROD_CO], *tclose;
  pthread_t hp[NPROD_TH], hc[NCONS_TH];
  bool ok = true;
  for (int i = 0; i < NCONS_CO; i++)
    ok &= submit(rt, WEFT_PLACE_PINNED, i % 2, consumer, &tc[i]) == 0;
  for (int i = 0; i < NCONS_TH; i++) {
    weft_chan_ref(S.a);
    weft_chan_ref(S.b);
    ok &= pthread_create(&hc[i], NULL, consumer, NULL) == 0;
  }
  for (int i = 0; i < NPROD_CO; i++)
    ok &= submit(rt, i < 2 ? WEFT_PLACE_PINNED : WEFT_PLACE_STEALABLE, i % 2, producer,
                 &tp[i]) == 0;
  for (int i = 0; i < NPROD_TH; i++) {
    weft_chan_ref(S.a);
    weft_chan_ref(S.b);
    ok &= pthread_create(&hp[i], NULL, producer, NULL) == 0;
  }
  ok &= submit(rt, WEFT_PLACE_PINNED, 1, closer, &tclose) == 0;
  if (!ok) {
    fprintf(stderr, "race_chan: could not start everything\n");
    return 1;
  }

  for (int i = 0; i < NPROD_CO; i++)
    weft_join(tp[i], NULL);
  for (int i = 0; i < NPROD_TH; i++)
    pthread_join(hp[i], NULL);
  weft_join(tclose, NULL); /* it also ends if every producer finished first */
  long long got = 0;
  for (int i = 0; i < NCONS_CO; i++) {
    void *n = NULL;
    weft_join(tc[i], &n);
    got += (intptr_t)n;
  }
  for (int i = 0; i < NCONS_TH; i++) {
    void *n = NULL;
    pthread_join(hc[i], &n);
    got += (intptr_t)n;
  }
  r = weft_runtime_stop(rt);
  if (r < 0)
    fail("runtime stop", r, 0);

  long long sent = 0;
  for (int p = 0; p < NPROD; p++) {
    sent += S.sent[p];
    for (uint32_t s = 0; s < PER_PROD; s++) {
      int want = s < S.sent[p];
      if (atomic_load(&S.seen[p][s]) != want) {
        fail(want ? "lost message" : "message received but not sent", p, s);
        break;
      }
    }
  }
  if (got != sent)
    fail("received vs sent", got, sent);
  if (atomic_load(&S.sum_recv) != atomic_load(&S.sum_sent))
    fail("checksum", atomic_load(&S.sum_recv), atomic_load(&S.sum_sent));
  if (weft_chan_len(S.a) != 0 || !weft_chan_is_closed(S.a) || !weft_chan_is_closed(S.b))
    fail("channel state after drain", (long long)weft_chan_len(S.a), 0);
  weft_chan_unref(S.a);
  weft_chan_unref(S.b);

  printf("race_chan: %lld of %d messages sent before the close, all received once; "
         "%lld select timeouts\n",
         sent, NPROD * PER_PROD, (long long)atomic_load(&S.timeouts));
  if (atomic_load(&S.failures)) {
    fprintf(stderr, "race_chan: FAILED: %s (%d failures)\n", S.first_failure,
            atomic_load(&S.failures));
    return 1;
  }
  return 0;
}
