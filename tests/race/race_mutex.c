/* SPDX-License-Identifier: MIT */
/*
 * race_mutex: a bounded queue built on weft_mutex + two weft_conds, hammered
 * by coroutines on two shards (pinned and stealable) and by plain threads at
 * once, with short deadlines (lock_dl and cond_wait_dl time out all the
 * time) and with tasks cancelled at random moments by the main thread.
 *
 * Every item carries its producer and sequence number. A put or get that
 * failed (-ETIMEDOUT, -ECANCELED) must have changed nothing, so at the end
 * the count, sum and xor of what was put equal those of what was taken, the
 * steady producers put exactly their quota, and a counter only ever touched
 * under the mutex equals the number of successful puts and gets. Built with
 * -fsanitize=thread it must report nothing. Exit 0 pass, 1 fail, 77 skip.
 */
#include "race_check.h"
#include "race_rt.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CAP 16
#define QUOTA 6000         /* items per steady producer */
#define P_CO 4             /* steady producers: coroutines */
#define P_TH 2             /* and plain threads */
#define C_CO 4             /* steady consumers: coroutines */
#define C_TH 2             /* and plain threads */
#define VICTIMS 300        /* short-lived tasks cancelled at a random moment */

struct tally {
  atomic_ullong count, sum, xor_;
};

static struct {
  weft_mutex m;
  weft_cond not_full, not_empty;
  uint64_t buf[CAP];
  int head, len;         /* under m */
  bool closed;           /* under m: no more puts; consumers leave when empty */
  uint64_t ops;          /* under m: successful puts + gets */
  struct tally put, got;
  atomic_ullong timeouts, cancels;
  atomic_int next_producer;
} q = {.m = WEFT_MUTEX_INIT, .not_full = WEFT_COND_INIT, .not_empty = WEFT_COND_INIT};

static void tally_add(struct tally *t, uint64_t v)
{
  atomic_fetch_add(&t->count, 1);
  atomic_fetch_add(&t->sum, v);
  atomic_fetch_xor(&t->xor_, v * 0x9e3779b97f4a7c15ull);
}

static void count_error(int r)
{
  CHECK(r == -ETIMEDOUT || r == -ECANCELED);
  atomic_fetch_add(r == -ETIMEDOUT ? &q.timeouts : &q.cancels, 1);
}

/* Locks q.m with a short deadline now and then (retrying after a timeout,
 * giving up when cancelled). */
static int lock_q(uint32_t *rnd)
{
  for (;;) {
    *rnd = *rnd * 1103515245u + 12345u;
    int r = (*rnd >> 16) % 4 ? weft_mutex_lock(&q.m)
                             : weft_mutex_lock_dl(&q.m, weft_now() + 20 * WEFT_USEC);
    if (r != -ETIMEDOUT)
      return r;
    count_error(r);
  }
}

/* 0 once v is in the queue; -ECANCELED / -ETIMEDOUT with nothing put. */
static int put(uint64_t v, int64_t deadline, uint32_t *rnd)
{
  int r = lock_q(rnd);
  if (r < 0)
    return r;
  while (q.len == CAP && r == 0)
    r = weft_cond_wait_dl(&q.not_full, &q.m, deadline);
  if (q.len < CAP) { /* even after a timeout: room is room */
    q.buf[(q.head + q.len++) % CAP] = v;
    q.ops++;
    tally_add(&q.put, v);
    CHECK(weft_cond_signal(&q.not_empty) == 0);
    r = 0;
  }
  CHECK(weft_mutex_unlock(&q.m) == 0); /* held again after every wait */
  return r;
}

/* 0 with *v taken; 1 when closed and empty; else the error, nothing taken. */
static int get(uint64_t *v, int64_t deadline, uint32_t *rnd)
{
  int r = lock_q(rnd);
  if (r < 0)
    return r;
  while (q.len == 0 && !q.closed && r == 0)
    r = weft_cond_wait_dl(&q.not_empty, &q.m, deadline);
  if (q.len > 0) {
    *v = q.buf[q.head];
    q.head = (q.head + 1) % CAP;
    q.len--;
    q.ops++;
    tally_add(&q.got, *v);
    CHECK(weft_cond_signal(&q.not_full) == 0);
    r = 0;
  } else if (q.closed) {
    r = 1;
  }
  CHECK(weft_mutex_unlock(&q.m) == 0);
  return r;
}

static int64_t short_deadline(uint32_t *rnd)
{
  *rnd = *rnd * 1103515245u + 12345u;
  return weft_now() + (int64_t)((*rnd >> 16) % 200) * WEFT_USEC;
}

static void *steady_producer(void *arg)
{
  (void)arg;
  uint64_t id = (uint64_t)atomic_fetch_add(&q.next_producer, 1);
  uint32_t rnd = (uint32_t)id * 7919u + 1;
  for (uint64_t i = 0; i < QUOTA;) {
    int r = put(id << 32 | i, short_deadline(&rnd), &rnd);
    if (r == 0)
      i++;
    else
      count_error(r);
  }
  return (void *)(uintptr_t)QUOTA;
}

static void *steady_consumer(void *arg)
{
  (void)arg;
  uint32_t rnd = (uint32_t)(uintptr_t)&rnd;
  uint64_t v;
  for (;;) {
    int r = get(&v, short_deadline(&rnd), &rnd);
    if (r == 1)
      return NULL;
    if (r < 0)
      count_error(r);
  }
}

/* Victims: put or take until cancelled. Whatever they did before the
 * cancel counts; the call the cancel ended must have done nothing. */
static void *victim(void *arg)
{
  bool producer = (uintptr_t)arg % 2;
  uint64_t id = (uint64_t)atomic_fetch_add(&q.next_producer, 1);
  uint32_t rnd = (uint32_t)id;
  uint64_t v;
  for (uint64_t i = 0;; i++) {
    int64_t dl = i % 2 ? WEFT_NO_DEADLINE : weft_now() + 5 * WEFT_MSEC;
    int r = producer ? put(id << 32 | i, dl, &rnd) : get(&v, dl, &rnd);
    if (r == 1)
      return NULL;
    if (r < 0)
      count_error(r);
    if (r == -ECANCELED || weft_yield() == -ECANCELED)
      return NULL;
  }
}

static weft_task *submit(weft_runtime *rt, int placement, int shard, void *(*fn)(void *),
                         void *arg)
{
  weft_task *t = NULL;
  int r = race_submit_on(rt, placement, shard, fn, arg, &t);
  CHECK(r == 0);
  return r == 0 ? t : NULL;
}

int main(void)
{
  weft_runtime *rt;
  int r = race_start(&rt, NULL, "race_mutex");
  if (r)
    return r;
  int64_t t0 = weft_now();
  weft_task *prod[P_CO], *cons[C_CO];
  pthread_t pth[P_TH], cth[C_TH];
  for (int i = 0; i < C_CO; i++)
    cons[i] = submit(rt, i % 2 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED, i % 2,
                     steady_consumer, NULL);
  for (int i = 0; i < C_TH; i++)
    CHECK(pthread_create(&cth[i], NULL, steady_consumer, NULL) == 0);
  for (int i = 0; i < P_CO; i++)
    prod[i] = submit(rt, i % 2 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED, (i + 1) % 2,
                     steady_producer, NULL);
  for (int i = 0; i < P_TH; i++)
    CHECK(pthread_create(&pth[i], NULL, steady_producer, NULL) == 0);

  /* Victims, cancelled after a random moment, while the steady ones run. */
  uint32_t rnd = 4242;
  int victims_cancelled = 0;
  for (int i = 0; i < VICTIMS; i++) {
    weft_task *t = submit(rt, i % 3 ? WEFT_PLACE_PINNED : WEFT_PLACE_STEALABLE, i % 2, victim,
                          (void *)(uintptr_t)i);
    if (!t)
      break;
    rnd = rnd * 1103515245u + 12345u;
    usleep((rnd >> 16) % 300);
    int c = weft_cancel(t);
    CHECK(c == 0 || c == -ESRCH);
    int j = weft_join(t, NULL);
    CHECK(j == (c == 0 ? -ECANCELED : 0));
    victims_cancelled += c == 0;
  }

  for (int i = 0; i < P_CO; i++) {
    void *v = NULL;
    CHECK(prod[i] && weft_join(prod[i], &v) == 0 && (uintptr_t)v == QUOTA);
  }
  for (int i = 0; i < P_TH; i++) {
    void *v = NULL;
    pthread_join(pth[i], &v);
    CHECK((uintptr_t)v == QUOTA);
  }
  /* Close: consumers drain what is left, then leave. */
  CHECK(weft_mutex_lock(&q.m) == 0);
  q.closed = true;
  CHECK(weft_cond_broadcast(&q.not_empty) == 0);
  CHECK(weft_mutex_unlock(&q.m) == 0);
  for (int i = 0; i < C_CO; i++)
    CHECK(cons[i] && weft_join(cons[i], NULL) == 0);
  for (int i = 0; i < C_TH; i++)
    pthread_join(cth[i], NULL);

  CHECK(weft_mutex_lock(&q.m) == 0);
  uint64_t ops = q.ops;
  int len = q.len;
  CHECK(weft_mutex_unlock(&q.m) == 0);
  uint64_t puts = atomic_load(&q.put.count), gots = atomic_load(&q.got.count);
  CHECK(len == 0);
  CHECK(puts == gots);
  CHECK(atomic_load(&q.put.sum) == atomic_load(&q.got.sum));
  CHECK(atomic_load(&q.put.xor_) == atomic_load(&q.got.xor_));
  CHECK(puts >= (uint64_t)(P_CO + P_TH) * QUOTA);
  CHECK(ops == puts + gots);
  CHECK(weft_mutex_destroy(&q.m) == 0);
  CHECK(weft_cond_destroy(&q.not_full) == 0);
  CHECK(weft_cond_destroy(&q.not_empty) == 0);
  CHECK(weft_runtime_stop(rt) == 0);

  printf("race_mutex: %llu items through the queue in %.2f s, %llu timeouts, %llu cancelled "
         "calls, %d victims cancelled: %s\n",
         (unsigned long long)puts, (double)(weft_now() - t0) / 1e9,
         (unsigned long long)atomic_load(&q.timeouts), (unsigned long long)atomic_load(&q.cancels),
         victims_cancelled, atomic_load(&failures) ? "FAIL" : "ok");
  return atomic_load(&failures) ? 1 : 0;
}
