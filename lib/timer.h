/* SPDX-License-Identifier: MIT */
/*
 * Per-shard timers: a 4-ary min-heap of timer records that live in their
 * owners' memory (usually a waiter on a coroutine stack). Arm and cancel are
 * O(log n) with no system call; the shard sleeps until the nearest deadline.
 * A 4-ary heap halves the depth of a binary one and keeps the four children
 * of a node on one cache line of the index array.
 */
#ifndef WEFT_LIB_TIMER_H
#define WEFT_LIB_TIMER_H

#include <stdbool.h>
#include <stdint.h>

#define WEFT__TIMER_IDLE UINT32_MAX

typedef struct weft__timer weft__timer;
struct weft__timer {
  int64_t deadline;               /* CLOCK_MONOTONIC ns */
  uint32_t index;                 /* position in the heap, WEFT__TIMER_IDLE if not armed */
  void (*fire)(weft__timer *t);   /* runs on the shard thread when it expires */
};

typedef struct weft__timer_heap {
  weft__timer **v;
  uint32_t n, cap;
} weft__timer_heap;

static inline void weft__timer_init(weft__timer *t, void (*fire)(weft__timer *))
{
  t->deadline = 0;
  t->index = WEFT__TIMER_IDLE;
  t->fire = fire;
}

static inline bool weft__timer_armed(const weft__timer *t)
{
  return t->index != WEFT__TIMER_IDLE;
}

void weft__timer_heap_init(weft__timer_heap *h);
void weft__timer_heap_term(weft__timer_heap *h);
/* Makes sure the next arm cannot fail: 0, or -ENOMEM. */
int weft__timer_reserve(weft__timer_heap *h);
/* Arms t for t->deadline. -ENOMEM if the heap cannot grow. */
int weft__timer_arm(weft__timer_heap *h, weft__timer *t);
/* Disarms t if it is armed. */
void weft__timer_cancel(weft__timer_heap *h, weft__timer *t);
/* The nearest deadline, or -1 when no timer is armed. */
static inline int64_t weft__timer_next(const weft__timer_heap *h)
{
  return h->n ? h->v[0]->deadline : -1;
}
/* Fires every timer due at `now`; returns how many fired. */
unsigned weft__timer_run(weft__timer_heap *h, int64_t now);

#endif
