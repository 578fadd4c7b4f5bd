/* SPDX-License-Identifier: MIT */
/*
 * race_stack_depot: stacks flowing between threads through the depot. Four
 * threads in a ring; each round, every thread allocates BATCH stacks, writes
 * its mark into each, and hands them to the next thread, which checks the
 * mark and frees them - so every thread's cache overflows into the depot
 * and refills from it while the others do the same.
 *
 * Checked: a stack is never handed out twice while live (each keeps the
 * mark of the one allocation it belongs to until freed), and once every
 * thread has left and the caches are drained, every stack is back (no leak,
 * depot empty). Built with -fsanitize=thread this must report nothing.
 * Exit 0 pass, 1 fail.
 */
#include "race_check.h"
#include "stack.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define THREADS 4
#define BATCH 150 /* more than a cache holds (64): the depot is used */
#define ROUNDS 200
#define SIZE ((size_t)16 << 10)

struct mailbox {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  weft__stack st[BATCH];
  uint64_t mark[BATCH];
  int full;
};

static struct mailbox boxes[THREADS];

static uint64_t *mark_at(const weft__stack *st)
{
  return (uint64_t *)(void *)st->base; /* the lowest usable bytes */
}

static void *ring_member(void *arg)
{
  int me = (int)(intptr_t)arg;
  struct mailbox *out = &boxes[(me + 1) % THREADS], *in = &boxes[me];
  for (int r = 0; r < ROUNDS; r++) {
    weft__stack st[BATCH];
    uint64_t mark[BATCH];
    for (int i = 0; i < BATCH; i++) {
      CHECK(weft__stack_alloc(&st[i], SIZE) == 0);
      mark[i] = ((uint64_t)me << 48) | ((uint64_t)r << 16) | (uint64_t)i;
      *mark_at(&st[i]) = mark[i];
    }
    pthread_mutex_lock(&out->lock);
    while (out->full)
      pthread_cond_wait(&out->cond, &out->lock);
    memcpy(out->st, st, sizeof(st));
    memcpy(out->mark, mark, sizeof(mark));
    out->full = 1;
    pthread_cond_broadcast(&out->cond);
    pthread_mutex_unlock(&out->lock);

    pthread_mutex_lock(&in->lock);
    while (!in->full)
      pthread_cond_wait(&in->cond, &in->lock);
    memcpy(st, in->st, sizeof(st));
    memcpy(mark, in->mark, sizeof(mark));
    in->full = 0;
    pthread_cond_broadcast(&in->cond);
    pthread_mutex_unlock(&in->lock);
    for (int i = 0; i < BATCH; i++) {
      CHECK(*mark_at(&st[i]) == mark[i]); /* nobody else had it meanwhile */
      weft__stack_free(&st[i]);
    }
  }
  return NULL;
}

int main(void)
{
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  for (int i = 0; i < THREADS; i++) {
    pthread_mutex_init(&boxes[i].lock, NULL);
    pthread_cond_init(&boxes[i].cond, NULL);
  }
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&th[i], NULL, ring_member, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  weft__stack_get_counters(&c1);
  CHECK(c1.depot > 0); /* the overflow went there, not back to the system */
  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  CHECK(c1.depot == 0);
  CHECK(c1.slab_live + c1.guarded_live == c0.slab_live + c0.guarded_live);
  int f = atomic_load(&failures);
  if (f)
    fprintf(stderr, "race_stack_depot: %d check(s) failed\n", f);
  else
    printf("race_stack_depot: %d threads x %d rounds x %d stacks, all back\n", THREADS, ROUNDS,
           BATCH);
  return f ? 1 : 0;
}
