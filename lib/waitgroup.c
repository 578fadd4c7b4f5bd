/* SPDX-License-Identifier: MIT */
/*
 * weft_waitgroup (Go's sync.WaitGroup) and weft_once: the two "wait until
 * something has happened once" primitives.
 *
 * Both keep their word lock-free for the common look ("already zero",
 * "already done") and change it under the queue's lock, which is also where
 * a waiter looks at it again before queueing. So a waiter either sees the
 * final state or is on the queue when the state changes, and the change
 * releases every waiter then queued - none is missed, and none is released
 * early (a waiter queued after a wait group went back above zero waits for
 * the next zero).
 *
 * A caller that sees the final state lock-free may see it before the waker
 * has let go of the lock: it waits for that (weft__waitq_settle) before
 * returning, so that it may free the object at once - a wait group on its
 * stack, say - as it may after a wait, which the waker completes only once
 * it let go.
 */
#include "sync_impl.h"

#include <errno.h>

/* Queues a waiter on q unless done(arg) holds (looked at under q.lock), then
 * waits. Returns 0 when done, or the wait's error. */
static int wait_until(weft__waitq *q, bool (*done)(void *), void *arg, int64_t deadline)
{
  weft__waiter w;
  weft__waiter_init(&w);
  weft__spin_lock(&q->lock);
  if (done(arg)) {
    weft__spin_unlock(&q->lock);
    return 0;
  }
  weft__waitq_append(q, &w);
  weft__spin_unlock(&q->lock);
  return weft__waiter_wait(&w, deadline);
}

/* Releases every waiter of q, which must be locked (it is unlocked here). */
static void release_all(weft__waitq *q)
{
  weft__waiter *ready = weft__waitq_take(q, INT64_MAX, NULL);
  if (weft__test_publish_pause)
    weft__test_publish_pause();
  weft__spin_unlock(&q->lock);
  weft__waiters_complete(ready, 0);
}

/* ---- wait group ----------------------------------------------------------------- */

int weft_waitgroup_init(weft_waitgroup *pwg)
{
  if (!pwg)
    return -EINVAL;
  weft__waitgroup *wg = SYNC_VIEW(weft__waitgroup, pwg);
  atomic_init(&wg->count, 0);
  weft__waitq_init(&wg->q);
  return 0;
}

int weft_waitgroup_destroy(weft_waitgroup *pwg)
{
  if (!pwg)
    return -EINVAL;
  weft__waitgroup *wg = SYNC_VIEW(weft__waitgroup, pwg);
  weft__spin_lock(&wg->q.lock);
  bool busy = wg->q.head != NULL;
  weft__spin_unlock(&wg->q.lock);
  return busy ? -EBUSY : 0;
}

int weft_waitgroup_add(weft_waitgroup *pwg, int64_t n)
{
  if (!pwg)
    return -EINVAL;
  weft__waitgroup *wg = SYNC_VIEW(weft__waitgroup, pwg);
  weft__spin_lock(&wg->q.lock);
  int64_t c = atomic_load_explicit(&wg->count, memory_order_relaxed);
  int err = 0;
  /* c + n, not c < -n: -INT64_MIN overflows (c >= 0, so the sum cannot). */
  if (n < 0 ? c + n < 0 : c > INT64_MAX - n)
    err = n < 0 ? -EINVAL : -EOVERFLOW;
  if (err || n == 0) {
    weft__spin_unlock(&wg->q.lock);
    return err;
  }
  /* Release: a waiter that sees 0 lock-free sees what the jobs did. */
  atomic_store_explicit(&wg->count, c + n, memory_order_release);
  if (c + n != 0) {
    weft__spin_unlock(&wg->q.lock);
    return 0;
  }
  release_all(&wg->q);
  return 0;
}

int weft_waitgroup_done(weft_waitgroup *wg)
{
  return weft_waitgroup_add(wg, -1);
}

static bool wg_zero(void *arg)
{
  return atomic_load_explicit(&((weft__waitgroup *)arg)->count, memory_order_acquire) == 0;
}

int weft_waitgroup_wait_dl(weft_waitgroup *pwg, int64_t deadline)
{
  if (!pwg)
    return -EINVAL;
  weft__waitgroup *wg = SYNC_VIEW(weft__waitgroup, pwg);
  if (wg_zero(wg)) {
    weft__waitq_settle(&wg->q);
    return 0;
  }
  return wait_until(&wg->q, wg_zero, wg, deadline);
}

int weft_waitgroup_wait(weft_waitgroup *wg)
{
  return weft_waitgroup_wait_dl(wg, WEFT_NO_DEADLINE);
}

/* ---- once ------------------------------------------------------------------------ */

int weft_once_flag_init(weft_once_flag *po)
{
  if (!po)
    return -EINVAL;
  weft__once *o = SYNC_VIEW(weft__once, po);
  atomic_init(&o->state, 0);
  weft__waitq_init(&o->q);
  return 0;
}

static bool once_done(void *arg)
{
  return atomic_load_explicit(&((weft__once *)arg)->state, memory_order_acquire) ==
         WEFT__ONCE_DONE;
}

bool weft_once_done(const weft_once_flag *po)
{
  weft__once *o = SYNC_VIEW(weft__once, (weft_once_flag *)(uintptr_t)po);
  if (!o || !once_done(o))
    return false;
  weft__waitq_settle(&o->q); /* as weft_once's fast path */
  return true;
}

int weft_once_dl(weft_once_flag *po, void (*fn)(void *), void *arg, int64_t deadline)
{
  if (!po || !fn)
    return -EINVAL;
  weft__once *o = SYNC_VIEW(weft__once, po);
  if (once_done(o)) {
    weft__waitq_settle(&o->q);
    return 0;
  }
  uintptr_t self = weft__sync_self();
  uintptr_t s = 0;
  if (atomic_compare_exchange_strong_explicit(&o->state, &s, self, memory_order_acquire,
                                              memory_order_acquire)) {
    /* Ours to run. The identity stays right even if fn suspends and the
     * task resumes on another shard. */
    fn(arg);
    weft__spin_lock(&o->q.lock);
    atomic_store_explicit(&o->state, WEFT__ONCE_DONE, memory_order_release);
    release_all(&o->q);
    return 0;
  }
  if (s == WEFT__ONCE_DONE) {
    weft__waitq_settle(&o->q);
    return 0;
  }
  if (s == self)
    return -EDEADLK; /* fn calls weft_once on its own once */
  return wait_until(&o->q, once_done, o, deadline);
}

int weft_once(weft_once_flag *o, void (*fn)(void *), void *arg)
{
  return weft_once_dl(o, fn, arg, WEFT_NO_DEADLINE);
}
