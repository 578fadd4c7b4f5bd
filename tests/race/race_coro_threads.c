/* SPDX-License-Identifier: MIT */
/*
 * race_coro_threads: the coroutine layer alone, from several threads at
 * once. Two plain threads each create 1000 coroutines and resume them round
 * robin until every one has suspended 100 times and returned; then one
 * thread hands coroutines to the other between resumes (what a stealing
 * scheduler does), so each coroutine runs on both threads.
 *
 * Everything shared between the threads (stack cache limits, slab classes,
 * id counter, sanitizer fibers) is exercised concurrently; built with
 * -fsanitize=thread this must report nothing. Exit 0 pass, 1 fail.
 */
#include "race_check.h"
#include "coro.h"
#include "stack.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NCORO 1000
#define NSUSP 100
#define STACK ((size_t)64 << 10)

struct body {
  uint64_t seed;  /* what the coroutine computes from */
  uint64_t steps; /* resumes seen by the coroutine itself */
};

static uint64_t mix(uint64_t x)
{
  return x * 6364136223846793005ull + 1442695040888963407ull;
}

/* Suspends NSUSP times, folding a value through locals kept on its own
 * stack across every switch. */
static void *body_fn(void *arg)
{
  struct body *b = arg;
  weft__coro *self = weft__coro_self();
  uint64_t acc = b->seed;
  for (int i = 0; i < NSUSP; i++) {
    acc = mix(acc);
    b->steps++;
    weft__coro_suspend(self);
    self = weft__coro_self(); /* possibly another thread now */
  }
  b->steps++;
  return (void *)(uintptr_t)acc;
}

static uint64_t expected(uint64_t seed)
{
  for (int i = 0; i < NSUSP; i++)
    seed = mix(seed);
  return seed;
}

/* ---- phase 1: each thread runs its own coroutines ------------------------------- */

static void *own_thread(void *arg)
{
  uint64_t base = (uint64_t)(uintptr_t)arg;
  static _Thread_local weft__coro *co[NCORO];
  static _Thread_local struct body b[NCORO];
  for (int i = 0; i < NCORO; i++) {
    b[i] = (struct body){.seed = base + (uint64_t)i};
    weft__coro_opts o = {.fn = body_fn, .arg = &b[i], .stack_size = STACK};
    int r = weft__coro_create(&co[i], &o);
    CHECK(r == 0);
    if (r != 0)
      return NULL;
  }
  int left = NCORO;
  while (left > 0) {
    for (int i = 0; i < NCORO; i++) {
      if (!co[i] || co[i]->state == WEFT__CORO_FINISHED)
        continue;
      if (weft__coro_resume(co[i]) == WEFT__CORO_FINISHED) {
        CHECK((uint64_t)(uintptr_t)co[i]->ret == expected(b[i].seed));
        CHECK(b[i].steps == NSUSP + 1);
        weft__coro_destroy(co[i]);
        co[i] = NULL;
        left--;
      }
    }
  }
  weft__stack_cache_drain();
  return NULL;
}

/* ---- phase 2: coroutines handed between two threads ---------------------------- */

#define NHAND 100

struct lane {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  weft__coro *q[NHAND];
  int n;
};

static struct lane lanes[2];
static struct body hand_b[NHAND];
static atomic_int hand_done;

static void lane_push(struct lane *l, weft__coro *co)
{
  pthread_mutex_lock(&l->lock);
  l->q[l->n++] = co;
  pthread_cond_signal(&l->cond);
  pthread_mutex_unlock(&l->lock);
}

/* Takes a coroutine from lane `me`, resumes it once, passes it to the other
 * lane; the thread that sees it finish checks and frees it. */
static void *hand_thread(void *arg)
{
  int me = (int)(intptr_t)arg;
  struct lane *l = &lanes[me];
  for (;;) {
    pthread_mutex_lock(&l->lock);
    while (l->n == 0 && atomic_load(&hand_done) < NHAND)
      pthread_cond_wait(&l->cond, &l->lock);
    if (l->n == 0) {
      pthread_mutex_unlock(&l->lock);
      break;
    }
    weft__coro *co = l->q[--l->n];
    pthread_mutex_unlock(&l->lock);
    if (weft__coro_resume(co) == WEFT__CORO_FINISHED) {
      struct body *b = co->arg;
      CHECK((uint64_t)(uintptr_t)co->ret == expected(b->seed));
      CHECK(b->steps == NSUSP + 1);
      weft__coro_destroy(co);
      if (atomic_fetch_add(&hand_done, 1) + 1 == NHAND)
        for (int i = 0; i < 2; i++) { /* wake whoever waits for more */
          pthread_mutex_lock(&lanes[i].lock);
          pthread_cond_broadcast(&lanes[i].cond);
          pthread_mutex_unlock(&lanes[i].lock);
        }
    } else {
      lane_push(&lanes[!me], co);
    }
  }
  weft__stack_cache_drain();
  return NULL;
}

int main(void)
{
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&th[i], NULL, own_thread, (void *)(uintptr_t)(i * 1000000 + 1)) != 0)
      return 1;
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);

  for (int i = 0; i < 2; i++) {
    pthread_mutex_init(&lanes[i].lock, NULL);
    pthread_cond_init(&lanes[i].cond, NULL);
  }
  for (int i = 0; i < NHAND; i++) {
    hand_b[i] = (struct body){.seed = 7000000 + (uint64_t)i};
    weft__coro_opts o = {.fn = body_fn, .arg = &hand_b[i], .stack_size = STACK};
    weft__coro *co;
    if (weft__coro_create(&co, &o) != 0)
      return 1;
    lane_push(&lanes[i % 2], co);
  }
  for (int i = 0; i < 2; i++)
    if (pthread_create(&th[i], NULL, hand_thread, (void *)(intptr_t)i) != 0)
      return 1;
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  CHECK(atomic_load(&hand_done) == NHAND);
  weft__stack_cache_drain();

  int f = atomic_load(&failures);
  printf("race_coro_threads: %d coroutines x %d switches on 2 threads, %d handed over: %s\n",
         2 * NCORO, NSUSP, NHAND, f ? "FAIL" : "ok");
  return f ? 1 : 0;
}
