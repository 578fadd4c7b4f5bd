/* SPDX-License-Identifier: MIT */
#include "timer.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

#define ARITY 4

void weft__timer_heap_init(weft__timer_heap *h)
{
  h->v = NULL;
  h->n = h->cap = 0;
}

void weft__timer_heap_term(weft__timer_heap *h)
{
  for (uint32_t i = 0; i < h->n; i++)
    h->v[i]->index = WEFT__TIMER_IDLE;
  free(h->v);
  h->v = NULL;
  h->n = h->cap = 0;
}

static inline void place(weft__timer_heap *h, uint32_t i, weft__timer *t)
{
  h->v[i] = t;
  t->index = i;
}

static void sift_up(weft__timer_heap *h, uint32_t i)
{
  weft__timer *t = h->v[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / ARITY;
    if (h->v[parent]->deadline <= t->deadline)
      break;
    place(h, i, h->v[parent]);
    i = parent;
  }
  place(h, i, t);
}

static void sift_down(weft__timer_heap *h, uint32_t i)
{
  weft__timer *t = h->v[i];
  for (;;) {
    uint32_t first = i * ARITY + 1;
    if (first >= h->n)
      break;
    uint32_t best = first;
    uint32_t last = first + ARITY < h->n ? first + ARITY : h->n;
    for (uint32_t c = first + 1; c < last; c++)
      if (h->v[c]->deadline < h->v[best]->deadline)
        best = c;
    if (h->v[best]->deadline >= t->deadline)
      break;
    place(h, i, h->v[best]);
    i = best;
  }
  place(h, i, t);
}

int weft__timer_reserve(weft__timer_heap *h)
{
  if (h->n < h->cap)
    return 0;
  uint32_t cap = h->cap ? h->cap * 2 : 64;
  weft__timer **v = weft__malloc((size_t)cap * sizeof(*v));
  if (!v)
    return -ENOMEM;
  for (uint32_t i = 0; i < h->n; i++)
    v[i] = h->v[i];
  free(h->v);
  h->v = v;
  h->cap = cap;
  return 0;
}

int weft__timer_arm(weft__timer_heap *h, weft__timer *t)
{
  if (weft__timer_armed(t))
    weft__timer_cancel(h, t);
  int r = weft__timer_reserve(h);
  if (r < 0)
    return r;
  place(h, h->n++, t);
  sift_up(h, t->index);
  return 0;
}

void weft__timer_cancel(weft__timer_heap *h, weft__timer *t)
{
  uint32_t i = t->index;
  if (i == WEFT__TIMER_IDLE)
    return;
  t->index = WEFT__TIMER_IDLE;
  weft__timer *last = h->v[--h->n];
  if (i == h->n)
    return;
  place(h, i, last);
  if (i > 0 && h->v[(i - 1) / ARITY]->deadline > last->deadline)
    sift_up(h, i);
  else
    sift_down(h, i);
}

unsigned weft__timer_run(weft__timer_heap *h, int64_t now)
{
  unsigned fired = 0;
  while (h->n && h->v[0]->deadline <= now) {
    weft__timer *t = h->v[0];
    weft__timer_cancel(h, t);
    t->fire(t);
    fired++;
  }
  return fired;
}
