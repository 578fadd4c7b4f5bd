/* SPDX-License-Identifier: MIT */
/*
 * weft_mutex, a fair mutex for coroutines and plain threads, and weft_cond,
 * the condition variable over it. They share a file because a condition
 * wait is a mutex operation: it releases the mutex once its waiter is
 * queued and takes it back however the wait ends, through the two internal
 * entry points below (unlock_held, relock). The
 * condition variable's own protocol is described above its functions.
 *
 * The mutex. The lock word holds the owner's identity (weft__sync_self(): a
 * number naming the task or plain thread, even) or 0, plus
 * WEFT__MUTEX_WAITERS. Lock and unlock without contention are one
 * compare-and-swap each: 0 -> self, and self -> 0. The owner check for
 * unlock (-EPERM) comes free with the second.
 *
 * Contention goes through the wait queue. A locker that finds the mutex held
 * sets WAITERS (under q.lock) and queues a waiter carrying its identity. An
 * unlock that sees WAITERS takes q.lock and hands the mutex over: it writes
 * the first waiter's identity into the lock word and completes it - the
 * mutex never becomes free in between, so nobody can barge in ahead of a
 * queued waiter and a task that unlocks and locks again in a loop queues
 * behind it (no starvation).
 *
 * The hand-over races with the waiter's deadline and cancellation. Both
 * sides go through the waiter claim: if the unlocker claims the waiter, it
 * owns the mutex (the wait returns 0); if the deadline or cancel claimed it
 * first, the unlocker drops it and tries the next waiter, and with none left
 * frees the mutex. So a timed-out or cancelled locker never holds it.
 *
 * A locker that finds the mutex held spins for a few microseconds before it
 * queues - only while no waiter is queued (then the mutex will be handed
 * over and never be free) and only while its shard has nothing else to run
 * (so the spin delays nobody). Without it, full contention between two
 * shards turns into a convoy: every unlock hands the mutex to a waiter that
 * is still asleep, the unlocker's next lock queues behind it, and each lock
 * costs a cross-shard wake-up. With it, the relocker waits the moment the
 * woken owner needs, takes the mutex free, and the hand-overs stop. The
 * spin is a wait like the queued one: a cancel or a passed deadline ends it
 * with the same result, even if the mutex becomes free during it.
 *
 * An unlock whose waiters had all given up frees the mutex under q.lock: a
 * locker that takes it lock-free then waits for that unlock to let go of
 * q.lock (weft__waitq_settle) before returning, so that it may unlock and
 * free the mutex at once - as it may after a hand-over, which the unlock
 * completes only once it let go.
 *
 * Invariant (under q.lock): a non-empty queue means the mutex is held and
 * WAITERS is set. WAITERS may be left set with an empty queue after waiters
 * gave up; the locker that gave up clears it when the queue is empty, and
 * otherwise the next unlock does (it just takes the slow path once).
 */
#include "sync_impl.h"

#include <errno.h>

/* Identities are numbers never given out twice, not addresses: the next
 * task on a shard usually gets the memory of one that returned (the stack
 * cache), the next thread the stack and thread-local block of one that
 * exited (glibc's cache), and an address would make such a newcomer the
 * owner of a mutex left locked by one that has gone - its unlock would
 * succeed and its lock fail with -EDEADLK, where sync.h promises the mutex
 * stays locked for ever. A task is its coroutine id (unique for the process)
 * times 4; a plain thread gets a number of its own, times 4 plus 2. Both are
 * even (bit 0 is WAITERS, and 1 is WEFT__ONCE_DONE) and never 0. */
static _Atomic uint64_t next_thread_number;
static __thread uintptr_t thread_identity;

/* Read only on a plain thread, which never changes threads; noinline keeps
 * the TLS address from being computed where a coroutine could carry it
 * across a switch. */
__attribute__((noinline)) static uintptr_t thread_self(void)
{
  if (!thread_identity)
    thread_identity =
        (uintptr_t)(atomic_fetch_add_explicit(&next_thread_number, 1, memory_order_relaxed) << 2) |
        2;
  return thread_identity;
}

uintptr_t weft__sync_self(void)
{
  weft_task *t = weft__task_self();
  return t ? (uintptr_t)(t->coro.id << 2) : thread_self();
}

int weft_mutex_init(weft_mutex *pm)
{
  if (!pm)
    return -EINVAL;
  weft__mutex *m = SYNC_VIEW(weft__mutex, pm);
  atomic_init(&m->state, 0);
  weft__waitq_init(&m->q);
  return 0;
}

int weft_mutex_destroy(weft_mutex *pm)
{
  if (!pm)
    return -EINVAL;
  weft__mutex *m = SYNC_VIEW(weft__mutex, pm);
  weft__spin_lock(&m->q.lock);
  bool busy = atomic_load_explicit(&m->state, memory_order_relaxed) != 0 || m->q.head;
  weft__spin_unlock(&m->q.lock);
  return busy ? -EBUSY : 0;
}

static bool try_fast(weft__mutex *m, uintptr_t self)
{
  uintptr_t free_word = 0;
  return atomic_compare_exchange_strong_explicit(&m->state, &free_word, self,
                                                 memory_order_acquire, memory_order_relaxed);
}

/* The mutex was taken lock-free (try_fast, spin_take): see the top. */
static int taken(weft__mutex *m)
{
  weft__waitq_settle(&m->q);
  return 0;
}

/* How long a locker spins on a held mutex before it queues (see above): a
 * few cross-shard wake-ups' worth. */
#define SPIN_NS (4 * WEFT_USEC)

/* Spins until the mutex is free and takes it (1), or gives up: 0 (queue
 * instead) when a waiter is queued, the owner is the caller, the shard has
 * other work or SPIN_NS passes; -ECANCELED / -ETIMEDOUT when the task is
 * cancelled or the deadline - its own or the task's scope's - passes with
 * the mutex still held. The spin is a wait for somebody else's unlock, so
 * these end it as they end a queued wait (weft__waiter_wait): a cancelled
 * task must not come out of a lock that had to wait holding the mutex. Only
 * the first look, which has not waited yet, takes a free mutex whatever
 * the cancel. An uncancellable locker (relock) has neither. */
static int spin_take(weft__mutex *m, uintptr_t self, int64_t deadline, bool uncancellable)
{
  weft_task *t = weft__task_self();
  bool cancellable = t && !uncancellable;
  if (cancellable && t->deadline >= 0 && (deadline < 0 || t->deadline < deadline))
    deadline = t->deadline;
  int64_t until = -1;
  for (unsigned i = 0;; i++) {
    uintptr_t s = atomic_load_explicit(&m->state, memory_order_relaxed);
    if ((s & WEFT__MUTEX_WAITERS) || s == self)
      return 0;
    if (cancellable && (i > 0 || s != 0) &&
        atomic_load_explicit(&t->cancelled, memory_order_relaxed))
      return -ECANCELED;
    if (s == 0) {
      if (atomic_compare_exchange_weak_explicit(&m->state, &s, self, memory_order_acquire,
                                                memory_order_relaxed))
        return 1;
      continue;
    }
    if (i % 32 == 0) {
      int64_t now = weft__now();
      if (until < 0)
        until = deadline >= 0 && deadline - now < SPIN_NS ? deadline : now + SPIN_NS;
      if (now >= until)
        return until == deadline ? -ETIMEDOUT : 0;
      if (t && !weft__shard_idle_otherwise(t->shard))
        return 0;
    }
    if (i == 0 && weft__test_spin_pause)
      weft__test_spin_pause();
    weft__cpu_relax();
  }
}

/* The contended lock: take the mutex if it has become free, else queue and
 * wait for a hand-over. */
static int lock_slow(weft__mutex *m, uintptr_t self, int64_t deadline, bool uncancellable)
{
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = uncancellable;
  w.data = self;
  weft__spin_lock(&m->q.lock);
  uintptr_t s = atomic_load_explicit(&m->state, memory_order_relaxed);
  for (;;) {
    uintptr_t owner = s & ~WEFT__MUTEX_WAITERS;
    if (owner == 0) {
      /* Free, so nobody is queued (the invariant): take it. */
      if (atomic_compare_exchange_weak_explicit(&m->state, &s, self, memory_order_acquire,
                                                memory_order_relaxed)) {
        weft__spin_unlock(&m->q.lock);
        return 0;
      }
      continue;
    }
    if (owner == self) {
      weft__spin_unlock(&m->q.lock);
      return -EDEADLK;
    }
    /* Announce a waiter before queueing, so that the owner's unlock cannot
     * take the fast path past us. */
    if ((s & WEFT__MUTEX_WAITERS) ||
        atomic_compare_exchange_weak_explicit(&m->state, &s, s | WEFT__MUTEX_WAITERS,
                                              memory_order_relaxed, memory_order_relaxed))
      break;
  }
  weft__waitq_append(&m->q, &w);
  weft__spin_unlock(&m->q.lock);

  int r = weft__waiter_wait(&w, deadline);
  if (r == 0)
    return 0; /* handed over: the lock word names us already */
  /* Gave up (deadline, cancel, no timer memory) without the mutex. */
  weft__spin_lock(&m->q.lock);
  if (!m->q.head)
    atomic_fetch_and_explicit(&m->state, ~WEFT__MUTEX_WAITERS, memory_order_relaxed);
  weft__spin_unlock(&m->q.lock);
  return r;
}

int weft_mutex_lock_dl(weft_mutex *pm, int64_t deadline)
{
  if (!pm)
    return -EINVAL;
  weft__mutex *m = SYNC_VIEW(weft__mutex, pm);
  uintptr_t self = weft__sync_self();
  if (try_fast(m, self))
    return taken(m);
  int r = spin_take(m, self, deadline, false);
  if (r > 0)
    return taken(m);
  return r < 0 ? r : lock_slow(m, self, deadline, false);
}

int weft_mutex_lock(weft_mutex *m)
{
  return weft_mutex_lock_dl(m, WEFT_NO_DEADLINE);
}

int weft_mutex_trylock(weft_mutex *pm)
{
  if (!pm)
    return -EINVAL;
  weft__mutex *m = SYNC_VIEW(weft__mutex, pm);
  return try_fast(m, weft__sync_self()) ? taken(m) : -EBUSY;
}

/* Locks m for a condition-variable waiter that must get it back: waits as
 * long as it takes, whatever the task's deadline scope or cancellation. */
static void relock(weft_mutex *pm, uintptr_t self)
{
  weft__mutex *m = SYNC_VIEW(weft__mutex, pm);
  if (try_fast(m, self) || spin_take(m, self, WEFT_NO_DEADLINE, true) > 0)
    (void)taken(m);
  else
    (void)lock_slow(m, self, WEFT_NO_DEADLINE, true); /* cannot fail: see the callers */
}

/* The unlock that found WAITERS set: hand the mutex to the oldest waiter
 * still waiting, or free it if there is none. The caller owns the mutex, so
 * under q.lock nobody else changes the lock word. */
static void unlock_slow(weft__mutex *m)
{
  weft__spin_lock(&m->q.lock);
  weft__waiter *w = weft__waitq_take(&m->q, 1, NULL);
  uintptr_t next = 0;
  if (w)
    next = (uintptr_t)w->data | (m->q.head ? WEFT__MUTEX_WAITERS : 0);
  /* Release: the next owner sees everything done under the mutex. */
  atomic_store_explicit(&m->state, next, memory_order_release);
  if (weft__test_publish_pause)
    weft__test_publish_pause();
  weft__spin_unlock(&m->q.lock);
  weft__waiters_complete(w, 0);
}

/* Unlocks m, which `self` holds. */
static void unlock_held(weft_mutex *pm, uintptr_t self)
{
  weft__mutex *m = SYNC_VIEW(weft__mutex, pm);
  uintptr_t s = self;
  if (!atomic_compare_exchange_strong_explicit(&m->state, &s, 0, memory_order_release,
                                               memory_order_relaxed))
    unlock_slow(m);
}

int weft_mutex_unlock(weft_mutex *pm)
{
  if (!pm)
    return -EINVAL;
  weft__mutex *m = SYNC_VIEW(weft__mutex, pm);
  uintptr_t self = weft__sync_self();
  uintptr_t s = self;
  if (atomic_compare_exchange_strong_explicit(&m->state, &s, 0, memory_order_release,
                                              memory_order_relaxed))
    return 0;
  if ((s & ~WEFT__MUTEX_WAITERS) != self)
    return -EPERM;
  unlock_slow(m);
  return 0;
}

void (*weft__test_spin_pause)(void);

/* ---- condition variable ------------------------------------------------------ */

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
  unlock_held(m, self);

  int r = weft__waiter_wait(&w, deadline);
  /* A stealable task may be on another shard now, but it is the same task:
   * `self` still names it. */
  relock(m, self);
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
