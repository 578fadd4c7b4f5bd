/* SPDX-License-Identifier: MIT */
/*
 * weft_sem, a counting semaphore, and weft_event, a manual- or auto-reset
 * event: the two primitives whose state is a supply of wake-ups that a
 * signaller hands to waiters. An auto-reset event is a semaphore of at most
 * one permit; a manual-reset one lets every waiter through while it is set.
 * Both are built the same way on the wait queue: a lock-free take while the
 * state allows it, a second look under the queue's lock before a waiter is
 * queued, and a signaller that hands what it brings straight to the waiters
 * it claims (weft__waitq_take), keeping in the state only what nobody
 * waited for.
 */
#include "sync_impl.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

/* ---- semaphore ---------------------------------------------------------------- */

/*
 * weft_sem: a counting semaphore with FIFO hand-over.
 *
 * Permits are taken lock-free while there are some. A caller that finds
 * none queues a waiter (under q.lock, after looking again). release() hands
 * its permits straight to the oldest waiters it can claim - a permit given
 * to a waiter never passes through `value`, so nobody can take it first -
 * and adds only the rest to `value`. Hence the invariant of sync_impl.h:
 * while a waiter is queued, value is 0.
 *
 * A waiter whose deadline or cancel claimed it first is skipped by release
 * (the claim decides), so a permit is never lost to a waiter that gave up
 * and never handed out twice.
 *
 * A permit taken lock-free may have been added by a release that still
 * holds q.lock: the taker waits for it to let go (weft__waitq_settle)
 * before returning, so that it may free the semaphore at once - as it may
 * after a wait, which the release completes only once it let go.
 */

int weft_sem_init(weft_sem *ps, int64_t value)
{
  if (!ps || value < 0 || value > WEFT_SEM_VALUE_MAX)
    return -EINVAL;
  weft__sem *s = SYNC_VIEW(weft__sem, ps);
  atomic_init(&s->value, value);
  weft__waitq_init(&s->q);
  return 0;
}

int weft_sem_destroy(weft_sem *ps)
{
  if (!ps)
    return -EINVAL;
  weft__sem *s = SYNC_VIEW(weft__sem, ps);
  weft__spin_lock(&s->q.lock);
  bool busy = s->q.head != NULL;
  weft__spin_unlock(&s->q.lock);
  return busy ? -EBUSY : 0;
}

/* Takes a permit if `value` has one. */
static bool take(weft__sem *s)
{
  int64_t v = atomic_load_explicit(&s->value, memory_order_relaxed);
  while (v > 0)
    if (atomic_compare_exchange_weak_explicit(&s->value, &v, v - 1, memory_order_acquire,
                                              memory_order_relaxed))
      return true;
  return false;
}

int weft_sem_acquire_dl(weft_sem *ps, int64_t deadline)
{
  if (!ps)
    return -EINVAL;
  weft__sem *s = SYNC_VIEW(weft__sem, ps);
  if (take(s)) {
    weft__waitq_settle(&s->q);
    return 0;
  }
  weft__waiter w;
  weft__waiter_init(&w);
  weft__spin_lock(&s->q.lock);
  /* value only grows under q.lock: looked at again here, 0 stays 0 until
   * our waiter is queued. */
  if (take(s)) {
    weft__spin_unlock(&s->q.lock);
    return 0;
  }
  weft__waitq_append(&s->q, &w);
  weft__spin_unlock(&s->q.lock);
  return weft__waiter_wait(&w, deadline); /* 0: a release handed us a permit */
}

int weft_sem_acquire(weft_sem *s)
{
  return weft_sem_acquire_dl(s, WEFT_NO_DEADLINE);
}

int weft_sem_try_acquire(weft_sem *ps)
{
  if (!ps)
    return -EINVAL;
  weft__sem *s = SYNC_VIEW(weft__sem, ps);
  if (!take(s))
    return -EAGAIN;
  weft__waitq_settle(&s->q);
  return 0;
}

int weft_sem_release(weft_sem *ps, int64_t n)
{
  if (!ps || n < 0)
    return -EINVAL;
  if (n > WEFT_SEM_VALUE_MAX)
    return -EOVERFLOW;
  if (n == 0)
    return 0;
  weft__sem *s = SYNC_VIEW(weft__sem, ps);
  weft__spin_lock(&s->q.lock);
  /* With the queue empty, value can only shrink meanwhile (lock-free takes),
   * so this check stays true until the add below. With waiters queued
   * value is 0 and at most n is added: no overflow. */
  if (!s->q.head &&
      atomic_load_explicit(&s->value, memory_order_relaxed) > WEFT_SEM_VALUE_MAX - n) {
    weft__spin_unlock(&s->q.lock);
    return -EOVERFLOW;
  }
  int64_t handed = 0;
  weft__waiter *ready = weft__waitq_take(&s->q, n, &handed);
  if (n > handed)
    atomic_fetch_add_explicit(&s->value, n - handed, memory_order_release);
  if (weft__test_publish_pause)
    weft__test_publish_pause();
  weft__spin_unlock(&s->q.lock);
  weft__waiters_complete(ready, 0);
  return 0;
}

int64_t weft_sem_value(const weft_sem *ps)
{
  if (!ps)
    return -EINVAL;
  return atomic_load_explicit(&SYNC_VIEW(weft__sem, (weft_sem *)ps)->value, memory_order_relaxed);
}

/* ---- event -------------------------------------------------------------------- */

/* weft_event: a manual- or auto-reset event on the wait-queue primitive. */

struct weft_event {
  weft__waitq q;
  atomic_int set;    /* 1 while set (guarded by q.lock for transitions to 1) */
  unsigned flags;
};

int weft_event_create(weft_event **out, unsigned flags)
{
  if (!out || (flags & ~WEFT_EVENT_AUTO_RESET))
    return -EINVAL;
  weft_event *ev = weft__malloc(sizeof(*ev));
  if (!ev)
    return -ENOMEM;
  weft__waitq_init(&ev->q);
  atomic_init(&ev->set, 0);
  ev->flags = flags;
  *out = ev;
  return 0;
}

void weft_event_destroy(weft_event *ev)
{
  /* A waiter may destroy the event as soon as its wait returned, and a
   * wait that found the event set without waiting returns while the set()
   * may still hold the queue's lock: let it go first. */
  if (ev)
    weft__waitq_settle(&ev->q);
  free(ev);
}

int weft_event_set(weft_event *ev)
{
  if (!ev)
    return -EINVAL;
  weft__waiter *ready;
  weft__spin_lock(&ev->q.lock);
  if (ev->flags & WEFT_EVENT_AUTO_RESET) {
    /* Hand the signal to the first waiter still waiting; keep it if none. */
    ready = weft__waitq_take(&ev->q, 1, NULL);
    if (!ready)
      atomic_store_explicit(&ev->set, 1, memory_order_release);
  } else {
    atomic_store_explicit(&ev->set, 1, memory_order_release);
    ready = weft__waitq_take(&ev->q, INT64_MAX, NULL);
  }
  if (weft__test_publish_pause)
    weft__test_publish_pause();
  weft__spin_unlock(&ev->q.lock);
  weft__waiters_complete(ready, 0);
  return 0;
}

int weft_event_reset(weft_event *ev)
{
  if (!ev)
    return -EINVAL;
  atomic_store_explicit(&ev->set, 0, memory_order_release);
  return 0;
}

bool weft_event_is_set(const weft_event *ev)
{
  return ev && atomic_load_explicit(&((weft_event *)ev)->set, memory_order_acquire);
}

/* Takes the signal if it is there: consumes it for an auto-reset event. */
static bool try_take(weft_event *ev)
{
  if (ev->flags & WEFT_EVENT_AUTO_RESET) {
    int one = 1;
    return atomic_compare_exchange_strong_explicit(&ev->set, &one, 0, memory_order_acquire,
                                                   memory_order_relaxed);
  }
  return atomic_load_explicit(&ev->set, memory_order_acquire) != 0;
}

int weft_event_wait_dl(weft_event *ev, int64_t deadline)
{
  if (!ev)
    return -EINVAL;
  if (try_take(ev))
    return 0;
  weft__waiter w;
  weft__waiter_init(&w);
  weft__spin_lock(&ev->q.lock);
  if (try_take(ev)) {
    weft__spin_unlock(&ev->q.lock);
    return 0;
  }
  weft__waitq_append(&ev->q, &w);
  weft__spin_unlock(&ev->q.lock);
  return weft__waiter_wait(&w, deadline);
}

int weft_event_wait(weft_event *ev)
{
  return weft_event_wait_dl(ev, WEFT_NO_DEADLINE);
}
