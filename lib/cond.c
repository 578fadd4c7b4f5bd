/* SPDX-License-Identifier: MIT */
/*
 * weft_cond: a condition variable over weft_mutex.
 *
 * A waiter is queued on the condition variable while the caller still holds
 * the mutex, and only then is the mutex released. A signaller that changes
 * the predicate under the mutex therefore either runs before the wait
 * started (the waiter sees the new predicate before it waits) or finds the
 * waiter queued: no wake-up is lost, without any sequence counter.
 *
 * Signal and broadcast claim waiters like every other wake-up, so a waiter
 * whose deadline or cancel won the claim is skipped and the signal goes to
 * the next one (a signal is never spent on a waiter that has given up).
 * However the wait ends, the waiter takes the mutex back before returning,
 * with a wait that neither a deadline nor a cancel can end: the caller's
 * code after the wait always runs under the mutex, as it expects.
 */
#include "sync_impl.h"

#include <errno.h>

int weft_cond_init(weft_cond *pc)
{
  if (!pc)
    return -EINVAL;
  weft__waitq_init(&SYNC_VIEW(weft__cond, pc)->q);
  return 0;
}

int weft_cond_destroy(weft_cond *pc)
{
  if (!pc)
    return -EINVAL;
  weft__cond *c = SYNC_VIEW(weft__cond, pc);
  weft__spin_lock(&c->q.lock);
  bool busy = c->q.head != NULL;
  weft__spin_unlock(&c->q.lock);
  return busy ? -EBUSY : 0;
}

int weft_cond_wait_dl(weft_cond *pc, weft_mutex *m, int64_t deadline)
{
  if (!pc || !m)
    return -EINVAL;
  weft__cond *c = SYNC_VIEW(weft__cond, pc);
  uintptr_t self = weft__sync_self();
  /* Only the owner may wait: check before anything changes. Nobody else can
   * take the mutex from us meanwhile, so the unlock below cannot fail. */
  uintptr_t owner = atomic_load_explicit(&SYNC_VIEW(weft__mutex, m)->state,
                                         memory_order_relaxed) &
                    ~WEFT__MUTEX_WAITERS;
  if (owner != self)
    return -EPERM;

  weft__waiter w;
  weft__waiter_init(&w);
  weft__spin_lock(&c->q.lock);
  weft__waitq_append(&c->q, &w);
  weft__spin_unlock(&c->q.lock);
  weft__mutex_unlock_held(m, self);

  int r = weft__waiter_wait(&w, deadline);
  /* A stealable task may be on another shard now, but it is the same task:
   * `self` still names it. */
  weft__mutex_relock(m, self);
  return r;
}

int weft_cond_wait(weft_cond *c, weft_mutex *m)
{
  return weft_cond_wait_dl(c, m, WEFT_NO_DEADLINE);
}

static int wake(weft_cond *pc, int64_t max)
{
  if (!pc)
    return -EINVAL;
  weft__cond *c = SYNC_VIEW(weft__cond, pc);
  weft__spin_lock(&c->q.lock);
  weft__waiter *ready = weft__waitq_take(&c->q, max, NULL);
  weft__spin_unlock(&c->q.lock);
  weft__waiters_complete(ready, 0);
  return 0;
}

int weft_cond_signal(weft_cond *c)
{
  return wake(c, 1);
}

int weft_cond_broadcast(weft_cond *c)
{
  return wake(c, INT64_MAX);
}
