/* SPDX-License-Identifier: MIT */
/*
 * race_wait_cancel: cancellation of tasks waiting in channels and
 * semaphores, racing the signals that would end the same waits, under
 * ThreadSanitizer.
 *
 * A waiting task publishes its waiter to cancellers without a lock; a
 * canceller finds it behind a membarrier (lib/fence.h), or behind real
 * fences where the kernel has no membarrier. This program runs its rounds
 * in both modes: first as the process starts (asymmetric where membarrier
 * is available), then with the fences forced symmetric.
 *
 * Each round, on a 2-shard runtime: WAITERS tasks (pinned to either shard or
 * stealable) each wait once, half of them in weft_chan_recv on a buffered
 * channel, half in weft_sem_acquire. Feeder coroutines on both shards send
 * values and release permits, fewer than there are waiters, while
 * cancellers cancel every waiter: a third each from a coroutine on each
 * shard (the same third twice) and from two plain threads.
 *
 * Checks: every waiter ends by itself (a cancel is never lost), with its
 * value (or permit) or with -ECANCELED, nothing else; nothing is lost or
 * taken twice: values received + values left in the channel == values sent
 * (count and sum), permits taken + permits left == permits released. Exit 0
 * pass, 1 fail, 77 without io_uring.
 */
#include "race_check.h"
#include "race_rt.h"
#include "weft.h"

#include "fence.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define ROUNDS 30   /* per fence mode */
#define WAITERS 300 /* per round; even indexes wait in the channel */
#define FEEDS 200   /* values sent plus permits released, per round */
#define FEEDERS 4

struct round {
  weft_chan *c;
  weft_sem sem;
  weft_task *waiters[WAITERS];
  atomic_long got_count, got_sum, permits_taken;
};

static void *chan_waiter(void *arg)
{
  struct round *rd = arg;
  uint64_t v = 0;
  int r = weft_chan_recv(rd->c, &v);
  CHECK(r == 0 || r == -ECANCELED);
  if (r == 0) {
    CHECK(v >= 1 && v <= FEEDS);
    atomic_fetch_add(&rd->got_count, 1);
    atomic_fetch_add(&rd->got_sum, (long)v);
  }
  return NULL;
}

static void *sem_waiter(void *arg)
{
  struct round *rd = arg;
  int r = weft_sem_acquire(&rd->sem);
  CHECK(r == 0 || r == -ECANCELED);
  if (r == 0)
    atomic_fetch_add(&rd->permits_taken, 1);
  return NULL;
}

struct feeder_arg {
  struct round *rd;
  int idx;
};

/* Feeds k = idx+1, idx+1+FEEDERS, ...: odd k as channel values, even k as
 * permits. */
static void *feeder(void *arg)
{
  struct feeder_arg *f = arg;
  for (int k = f->idx + 1; k <= FEEDS; k += FEEDERS) {
    if (k % 2) {
      uint64_t v = (uint64_t)k;
      CHECK(weft_chan_send(f->rd->c, &v) == 0);
    } else {
      CHECK(weft_sem_release(&f->rd->sem, 1) == 0);
    }
    if (k % 5 == 0)
      weft_yield();
  }
  return NULL;
}

static void run_round(weft_runtime *rt)
{
  struct round rd = {0};
  CHECK(weft_chan_create(&rd.c, sizeof(uint64_t), FEEDS) == 0);
  CHECK(weft_sem_init(&rd.sem, 0) == 0);

  for (int i = 0; i < WAITERS; i++) {
    int placement = i % 3 == 2 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED;
    CHECK(race_submit_on(rt, placement, i % 2, i % 2 ? sem_waiter : chan_waiter, &rd,
                    &rd.waiters[i]) == 0);
  }
  struct feeder_arg fa[FEEDERS];
  weft_task *feeders[FEEDERS];
  for (int i = 0; i < FEEDERS; i++) {
    fa[i] = (struct feeder_arg){&rd, i};
    CHECK(race_submit_on(rt, WEFT_PLACE_PINNED, i % 2, feeder, &fa[i], &feeders[i]) == 0);
  }
  /* Cancellers: share 0 from a coroutine on each shard, shares 1 and 2 from
   * plain threads, all while the feeders run. */
  struct race_cancel_share ca[3];
  for (int i = 0; i < 3; i++)
    ca[i] = (struct race_cancel_share){.v = rd.waiters, .n = WAITERS, .first = i, .step = 3,
                                       .yield_every = 7};
  weft_task *cancellers[2];
  CHECK(race_submit_on(rt, WEFT_PLACE_PINNED, 0, race_canceller, &ca[0], &cancellers[0]) == 0);
  CHECK(race_submit_on(rt, WEFT_PLACE_PINNED, 1, race_canceller, &ca[0], &cancellers[1]) == 0);
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&th[i], NULL, race_canceller, &ca[1 + i]) == 0);

  for (int i = 0; i < 2; i++)
    CHECK(pthread_join(th[i], NULL) == 0);
  for (int i = 0; i < 2; i++)
    CHECK(weft_join(cancellers[i], NULL) == 0);
  for (int i = 0; i < FEEDERS; i++)
    CHECK(weft_join(feeders[i], NULL) == 0);
  /* Every waiter was cancelled by one of the shares (or fed before): each
   * must end by itself. One still waiting here lost its cancel. */
  for (int i = 0; i < WAITERS; i++) {
    int r = weft_join_dl(rd.waiters[i], NULL, weft_now() + 20 * WEFT_SEC);
    CHECK(r == 0 || r == -ECANCELED);
    if (r == -ETIMEDOUT) {
      weft_cancel(rd.waiters[i]);
      weft_join(rd.waiters[i], NULL);
    }
  }

  long count = atomic_load(&rd.got_count), sum = atomic_load(&rd.got_sum);
  uint64_t v;
  while (weft_chan_try_recv(rd.c, &v) == 0) {
    count++;
    sum += (long)v;
  }
  long sent_count = 0, sent_sum = 0, released = 0;
  for (int k = 1; k <= FEEDS; k++) {
    if (k % 2) {
      sent_count++;
      sent_sum += k;
    } else {
      released++;
    }
  }
  CHECK(count == sent_count);
  CHECK(sum == sent_sum);
  CHECK(atomic_load(&rd.permits_taken) + weft_sem_value(&rd.sem) == released);
  weft_chan_unref(rd.c);
  CHECK(weft_sem_destroy(&rd.sem) == 0);
}

static int run_mode(void)
{
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  weft_runtime *rt;
  int r = weft_runtime_start(&rt, &cfg);
  if (r < 0) {
    fprintf(stderr, "race_wait_cancel: no runtime (%d)\n", r);
    return r;
  }
  for (int i = 0; i < ROUNDS; i++)
    run_round(rt);
  CHECK(weft_runtime_stop(rt) == 0);
  return 0;
}

int main(void)
{
  int r = run_mode();
  if (r == -ENOSYS || r == -EPERM)
    return 77;
  if (r < 0)
    return 1;
  printf("race_wait_cancel: asymmetric fences %s\n",
         atomic_load(&weft__fence_asymmetric) ? "on" : "off (no membarrier)");
  /* No runtime runs now: nobody is on either side of a fence. */
  weft__fence_force_symmetric();
  if (run_mode() < 0)
    return 1;
  int f = atomic_load(&failures);
  printf("race_wait_cancel: %d rounds in each mode, %d failures\n", ROUNDS, f);
  return f ? 1 : 0;
}
