/* SPDX-License-Identifier: MIT */
/*
 * Synchronisation between coroutines - on any shard of any runtime - and
 * plain threads. A coroutine that waits is suspended (its shard runs others);
 * a plain thread that waits blocks on a futex. Code on a shard's thread
 * outside any coroutine (a signal handler that interrupted the shard, a
 * thread-exit destructor) counts as a plain thread: its wait blocks the
 * whole shard, and one that waits for a coroutine of that shard never ends.
 *
 * weft_event is a heap object; the mutex, condition variable, semaphore,
 * wait group and once are caller-allocated (see below).
 */
#ifndef WEFT_SYNC_H
#define WEFT_SYNC_H

#include "common.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_event weft_event;

/* Flags for weft_event_create(). */
#define WEFT_EVENT_AUTO_RESET 0x1u /* set() releases one waiter (or the next
                                      wait) and the event resets itself;
                                      without it set() releases every waiter
                                      and the event stays set until reset() */

/* Creates an unset event. Returns 0, -EINVAL (NULL or unknown flags), -ENOMEM. */
WEFT_API int weft_event_create(weft_event **ev, unsigned flags);

/* Frees an event nobody waits on any more - a waiter may, as soon as its
 * wait returned (a set() still finishing is let through first). */
WEFT_API void weft_event_destroy(weft_event *ev);

/* Sets the event (see WEFT_EVENT_AUTO_RESET). Returns 0 or -EINVAL. Never
 * blocks; callable from any thread. */
WEFT_API int weft_event_set(weft_event *ev);

/* Clears the event. Returns 0 or -EINVAL. */
WEFT_API int weft_event_reset(weft_event *ev);

/* True if the event is set right now. */
WEFT_API bool weft_event_is_set(const weft_event *ev);

/* Waits until the event is set. Returns 0, or -ECANCELED (the calling task
 * was cancelled), -EINVAL. In a coroutine inside a deadline scope
 * (weft_deadline_push) the scope's deadline bounds the wait as in
 * weft_event_wait_dl: -ETIMEDOUT, or -ENOMEM for its timer. */
WEFT_API int weft_event_wait(weft_event *ev);

/* weft_event_wait() with an absolute deadline: -ETIMEDOUT once it passes,
 * -ENOMEM if the shard's timer heap cannot grow. */
WEFT_API int weft_event_wait_dl(weft_event *ev, int64_t deadline);

/* ---- mutexes, condition variables, semaphores, wait groups, once ----------------
 *
 * Objects the caller owns (on its stack, in a struct or global), set up with
 * a static initialiser (WEFT_MUTEX_INIT, ...) or the _init() function, and
 * usable from coroutines on any shard of any runtime and from plain threads
 * at the same time. Their fields are weft's: never read or write them; the
 * layout only exists so that the objects can be allocated without a call.
 * An object must not be moved or copied once it is in use. Its storage may
 * go (a stack frame returns) as soon as no call on it is in progress - also
 * right after a call that got what it wanted without waiting, such as the
 * last wait on a wait group, which returns only once the call that provided
 * it (the last done()) is through with the object.
 *
 * Every call that can wait has a _dl() variant with an absolute deadline
 * (-ETIMEDOUT once it passes; -ENOMEM if the shard's timer heap cannot grow
 * for it). In a coroutine, the task's deadline scope (weft_deadline_push)
 * bounds the wait as well, and cancelling the task makes the wait return
 * -ECANCELED. A call that does not have to wait succeeds even in a
 * cancelled task (like weft_event_wait). All return -EINVAL for NULL.
 *
 * Holding a weft_mutex across a suspension (I/O, weft_sleep, a channel, ...)
 * is fine: a coroutine that wants it suspends and its shard runs others.
 * Holding a pthread mutex across a suspension is not: a coroutine of the
 * same shard that wants it blocks the whole shard thread - including the
 * holder, which can then never run to unlock it - and a stealable holder
 * may resume on another thread, which then unlocks a pthread mutex it does
 * not own.
 */

/* Storage of an internal wait queue (a spinlock and a waiter list). */
struct weft_waitq_storage_ {
  unsigned char lock_;
  void *head_;
  void *tail_;
};
#define WEFT_WAITQ_STORAGE_INIT_ {0, 0, 0}

/* -- mutex --
 * Fair under contention: an unlock with waiters hands the mutex straight to
 * the one that has waited longest (FIFO), so a task that unlocks and locks
 * again in a loop cannot starve a waiter. Uncontended lock and unlock are one
 * compare-and-swap each. A locker that finds the mutex held (and nobody
 * queued) spins for a few microseconds before it waits - a coroutine only
 * while its shard has nothing else to run - which keeps two shards that
 * share a mutex from settling into one cross-shard wake-up per lock.
 *
 * The mutex records its owner - the task, or the plain thread outside any
 * task - at no extra cost (the owner is the lock word), so unlock by anyone
 * else fails with -EPERM and locking it again from the owner fails with
 * -EDEADLK. A task that locks it may resume on another shard and unlock it
 * there: the owner is the task, not the thread. A task that returns while
 * holding a mutex leaves it locked for ever (as with pthreads). */
typedef struct weft_mutex {
  uintptr_t state_;                  /* owner | a has-waiters bit */
  struct weft_waitq_storage_ q_;     /* waiters, oldest first */
} weft_mutex;

#define WEFT_MUTEX_INIT {0, WEFT_WAITQ_STORAGE_INIT_}

/* Sets up an unlocked mutex (same as WEFT_MUTEX_INIT). Returns 0 or -EINVAL. */
WEFT_API int weft_mutex_init(weft_mutex *m);

/* Checks that nobody holds or waits for m: 0, -EBUSY (then m is untouched
 * and still usable), -EINVAL. m needs nothing freed either way. */
WEFT_API int weft_mutex_destroy(weft_mutex *m);

/* Locks m, waiting as long as it takes. Returns 0 (the caller holds m), or
 * -ECANCELED (the calling task was cancelled - before the call or while it
 * waited - and m was held by someone else), -EDEADLK (the
 * caller holds m already), -EINVAL. On any error the caller does not hold m. */
WEFT_API int weft_mutex_lock(weft_mutex *m);

/* weft_mutex_lock() with an absolute deadline: -ETIMEDOUT once it passes
 * with m still held by someone else. A free mutex is taken whatever the
 * deadline. */
WEFT_API int weft_mutex_lock_dl(weft_mutex *m, int64_t deadline);

/* Locks m if it is free right now: 0, or -EBUSY (held by anybody, the caller
 * included), -EINVAL. Never waits. */
WEFT_API int weft_mutex_trylock(weft_mutex *m);

/* Unlocks m; if someone waits, m passes to the oldest waiter. Returns 0, or
 * -EPERM (the caller does not hold m; nothing changed), -EINVAL. Never
 * waits; callable from a coroutine of any shard. */
WEFT_API int weft_mutex_unlock(weft_mutex *m);

/* -- condition variable --
 * Waits with no spurious wake-ups: a wait returns 0 only after a signal or
 * broadcast chose it. Still re-check the predicate in a loop: another task
 * may take the condition before the woken one has the mutex back. */
typedef struct weft_cond {
  struct weft_waitq_storage_ q_;     /* waiters, oldest first */
} weft_cond;

#define WEFT_COND_INIT {WEFT_WAITQ_STORAGE_INIT_}

/* Sets up a condition variable (same as WEFT_COND_INIT): 0 or -EINVAL. */
WEFT_API int weft_cond_init(weft_cond *c);

/* 0 if nobody waits on c, else -EBUSY (c untouched); -EINVAL. */
WEFT_API int weft_cond_destroy(weft_cond *c);

/* Unlocks m (which the caller must hold), waits for a signal or broadcast
 * and locks m again. On EVERY return except -EPERM and -EINVAL the caller
 * holds m again - also after -ETIMEDOUT, -ECANCELED and -ENOMEM. Getting m
 * back is neither bounded by the deadline nor ended by cancellation (it
 * waits for the mutex as long as it takes). Returns 0 (signalled),
 * -ECANCELED, -EPERM (the caller does not hold m: nothing happened),
 * -EINVAL. */
WEFT_API int weft_cond_wait(weft_cond *c, weft_mutex *m);

/* weft_cond_wait() with an absolute deadline: -ETIMEDOUT once it passes
 * (m is held again on return, see above). */
WEFT_API int weft_cond_wait_dl(weft_cond *c, weft_mutex *m, int64_t deadline);

/* Wakes the oldest waiter, if any. Returns 0 or -EINVAL. Holding the mutex
 * is allowed but not needed. Never waits. */
WEFT_API int weft_cond_signal(weft_cond *c);

/* Wakes every waiter there is now. Returns 0 or -EINVAL. Never waits. */
WEFT_API int weft_cond_broadcast(weft_cond *c);

/* -- counting semaphore --
 * Waiters are served in order: a release hands its permits to the oldest
 * waiters first, and nobody can take a permit ahead of a queued waiter. */
typedef struct weft_sem {
  int64_t value_;                    /* permits available */
  struct weft_waitq_storage_ q_;     /* waiters, oldest first */
} weft_sem;

/* Most permits a semaphore can hold. */
#define WEFT_SEM_VALUE_MAX ((int64_t)0x7fffffff)

#define WEFT_SEM_INIT(value) {(value), WEFT_WAITQ_STORAGE_INIT_}

/* Sets up s with `value` permits: 0, or -EINVAL (NULL, value < 0 or above
 * WEFT_SEM_VALUE_MAX). */
WEFT_API int weft_sem_init(weft_sem *s, int64_t value);

/* 0 if nobody waits on s, else -EBUSY (s untouched); -EINVAL. */
WEFT_API int weft_sem_destroy(weft_sem *s);

/* Takes one permit, waiting until there is one. Returns 0, -ECANCELED (no
 * permit taken), -EINVAL. */
WEFT_API int weft_sem_acquire(weft_sem *s);

/* weft_sem_acquire() with an absolute deadline: -ETIMEDOUT (no permit
 * taken) once it passes. */
WEFT_API int weft_sem_acquire_dl(weft_sem *s, int64_t deadline);

/* Takes one permit if one is free right now: 0, -EAGAIN, -EINVAL. */
WEFT_API int weft_sem_try_acquire(weft_sem *s);

/* Adds n permits (n = 0 does nothing): each of the oldest n waiters gets
 * one, the rest are kept. Returns 0, or -EOVERFLOW (n itself is above
 * WEFT_SEM_VALUE_MAX - even if waiters would take part of it - or the value
 * would pass it: nothing changed), -EINVAL (NULL or n < 0). Never waits. */
WEFT_API int weft_sem_release(weft_sem *s, int64_t n);

/* Permits available right now (a snapshot), or -EINVAL. */
WEFT_API int64_t weft_sem_value(const weft_sem *s);

/* -- wait group --
 * Go's sync.WaitGroup: add() the number of jobs before starting them, each
 * job calls done(), wait() returns once the counter is zero. */
typedef struct weft_waitgroup {
  int64_t count_;                    /* jobs not done yet */
  struct weft_waitq_storage_ q_;     /* waiters */
} weft_waitgroup;

#define WEFT_WAITGROUP_INIT {0, WEFT_WAITQ_STORAGE_INIT_}

/* Sets up a wait group with a zero counter: 0 or -EINVAL. */
WEFT_API int weft_waitgroup_init(weft_waitgroup *wg);

/* 0 if nobody waits on wg, else -EBUSY (wg untouched); -EINVAL. */
WEFT_API int weft_waitgroup_destroy(weft_waitgroup *wg);

/* Adds n (which may be negative) to the counter; when it reaches zero every
 * waiter is released. Returns 0, or -EINVAL (NULL, or the counter would go
 * below zero: nothing changed), -EOVERFLOW. Never waits. */
WEFT_API int weft_waitgroup_add(weft_waitgroup *wg, int64_t n);

/* weft_waitgroup_add(wg, -1). */
WEFT_API int weft_waitgroup_done(weft_waitgroup *wg);

/* Waits until the counter is zero: 0 (at once if it is), -ECANCELED, -EINVAL. */
WEFT_API int weft_waitgroup_wait(weft_waitgroup *wg);

/* weft_waitgroup_wait() with an absolute deadline: -ETIMEDOUT once it passes. */
WEFT_API int weft_waitgroup_wait_dl(weft_waitgroup *wg, int64_t deadline);

/* -- once (C11's call_once for coroutines and threads) -- */
typedef struct weft_once_flag {
  uintptr_t state_;                  /* not run, done, or who runs it */
  struct weft_waitq_storage_ q_;     /* callers waiting for the runner */
} weft_once_flag;

#define WEFT_ONCE_INIT {0, WEFT_WAITQ_STORAGE_INIT_}

/* Sets up a flag whose function has not run (same as WEFT_ONCE_INIT): 0 or
 * -EINVAL. */
WEFT_API int weft_once_flag_init(weft_once_flag *o);

/* Runs fn(arg) if no call on o has run it yet - exactly one caller runs it,
 * in its own context - and returns once it has finished: callers that come
 * while it runs wait (suspend or block) for it. Returns 0 (fn has run and
 * returned), or -EDEADLK (called again from inside fn, by the task or
 * thread that runs it), -ECANCELED (the calling task was cancelled while it
 * waited: fn may still be running), -EINVAL (o or fn NULL). If the runner
 * never returns from fn, the others wait for ever (or until their deadline). */
WEFT_API int weft_once(weft_once_flag *o, void (*fn)(void *), void *arg);

/* weft_once() with an absolute deadline for the wait: -ETIMEDOUT once it
 * passes (fn is still running elsewhere). The runner itself is not bounded. */
WEFT_API int weft_once_dl(weft_once_flag *o, void (*fn)(void *), void *arg, int64_t deadline);

/* True once fn has run and returned. */
WEFT_API bool weft_once_done(const weft_once_flag *o);

#ifdef __cplusplus
}
#endif

#endif
