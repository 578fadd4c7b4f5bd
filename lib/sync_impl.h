/* SPDX-License-Identifier: MIT */
/*
 * The internal view of the caller-allocated sync objects of weft/sync.h
 * (mutex, condition variable, semaphore, wait group, once).
 *
 * Users must be able to allocate these objects without a call and set them
 * up with a static initialiser, so their size and layout are public. But the
 * public header cannot show the real fields: they are C11 atomics and a
 * weft__waitq (whose spinlock is an atomic_bool), and public headers compile
 * as C++11 too, where _Atomic does not exist. So the public structs carry
 * plain integer/pointer fields of the same size, alignment and offsets, and
 * weft's code only ever reaches the objects through the internal structs
 * below (the casts in SYNC_VIEW). The layouts are pinned by the
 * _Static_asserts at the end; an all-zero object is a valid initial state
 * of each internal type (spinlock free, empty queue, counters 0), which is
 * what the static initialisers produce.
 *
 * Nothing in weft reads or writes the public fields, and users must not
 * either, so an object is only ever accessed through one type after its
 * initialisation; may_alias keeps the compiler from assuming otherwise.
 */
#ifndef WEFT_LIB_SYNC_IMPL_H
#define WEFT_LIB_SYNC_IMPL_H

#include "core.h"

#include <stdalign.h>
#include <stddef.h>

/* Mutex: `state` is the owner's identity (weft__sync_self()) or 0 when
 * free, with WEFT__MUTEX_WAITERS set while waiters may be queued. */
#define WEFT__MUTEX_WAITERS ((uintptr_t)1)

typedef struct __attribute__((may_alias)) weft__mutex {
  _Atomic uintptr_t state;
  weft__waitq q;          /* waiters, each with its identity in w->data */
} weft__mutex;

typedef struct __attribute__((may_alias)) weft__cond {
  weft__waitq q;
} weft__cond;

/* Semaphore invariant: while q holds a waiter, value is 0 (value only grows
 * under q.lock, and only when no waiter is left), so the lock-free fast path
 * can never take a permit ahead of a queued waiter. */
typedef struct __attribute__((may_alias)) weft__sem {
  _Atomic int64_t value;
  weft__waitq q;
} weft__sem;

typedef struct __attribute__((may_alias)) weft__waitgroup {
  _Atomic int64_t count;  /* changed under q.lock only; read lock-free */
  weft__waitq q;
} weft__waitgroup;

/* Once: `state` is 0 (not run), WEFT__ONCE_DONE, or the runner's identity. */
#define WEFT__ONCE_DONE ((uintptr_t)1)

typedef struct __attribute__((may_alias)) weft__once {
  _Atomic uintptr_t state;
  weft__waitq q;
} weft__once;

#define SYNC_VIEW(type, p) ((type *)(void *)(p))

/* Who is calling, as a nonzero even number never given to anyone else: the
 * running task (a stealable one keeps its identity across shards), or the
 * plain thread (see mutex.c). */
uintptr_t weft__sync_self(void);

/* ---- the public layouts match the internal ones ------------------------------ */
#define WEFT__SAME_LAYOUT(pub, priv)                                                        \
  _Static_assert(sizeof(pub) == sizeof(priv), #pub ": size");                               \
  _Static_assert(alignof(pub) == alignof(priv), #pub ": alignment")
#define WEFT__SAME_OFFSET(pub, pf, priv, f)                                                 \
  _Static_assert(offsetof(pub, pf) == offsetof(priv, f), #pub "." #pf ": offset");          \
  _Static_assert(sizeof(((pub *)0)->pf) == sizeof(((priv *)0)->f), #pub "." #pf ": size")

WEFT__SAME_LAYOUT(struct weft_waitq_storage_, weft__waitq);
WEFT__SAME_OFFSET(struct weft_waitq_storage_, lock_, weft__waitq, lock);
WEFT__SAME_OFFSET(struct weft_waitq_storage_, head_, weft__waitq, head);
WEFT__SAME_OFFSET(struct weft_waitq_storage_, tail_, weft__waitq, tail);

WEFT__SAME_LAYOUT(weft_mutex, weft__mutex);
WEFT__SAME_OFFSET(weft_mutex, state_, weft__mutex, state);
WEFT__SAME_OFFSET(weft_mutex, q_, weft__mutex, q);
WEFT__SAME_LAYOUT(weft_cond, weft__cond);
WEFT__SAME_OFFSET(weft_cond, q_, weft__cond, q);
WEFT__SAME_LAYOUT(weft_sem, weft__sem);
WEFT__SAME_OFFSET(weft_sem, value_, weft__sem, value);
WEFT__SAME_OFFSET(weft_sem, q_, weft__sem, q);
WEFT__SAME_LAYOUT(weft_waitgroup, weft__waitgroup);
WEFT__SAME_OFFSET(weft_waitgroup, count_, weft__waitgroup, count);
WEFT__SAME_OFFSET(weft_waitgroup, q_, weft__waitgroup, q);
WEFT__SAME_LAYOUT(weft_once_flag, weft__once);
WEFT__SAME_OFFSET(weft_once_flag, state_, weft__once, state);
WEFT__SAME_OFFSET(weft_once_flag, q_, weft__once, q);

/* Lock-free atomics, so that they are plain words in memory. */
_Static_assert(ATOMIC_POINTER_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2 &&
                   ATOMIC_BOOL_LOCK_FREE == 2,
               "sync objects need lock-free atomics");

#endif
