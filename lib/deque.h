/* SPDX-License-Identifier: MIT */
/*
 * The stealable run queue of a shard: a bounded single-producer,
 * multi-consumer ring of task pointers.
 *
 * Only the owning shard pushes (at `tail`). Everyone - the owner included -
 * takes from `head` with a compare-and-swap, so the owner runs its stealable
 * tasks in FIFO order (a yielding task goes behind the others instead of
 * being picked again at once) and thieves take the oldest ones, which are the
 * least likely to be cache-hot.
 *
 * Slots are atomics: a thief may read a slot that the owner is reusing; it
 * then fails its CAS (head moved past the slot) and discards what it read.
 * `tail` is published with release and read with acquire, so a task's state
 * written before the push - including its whole suspended stack - is visible
 * to the shard that takes it.
 */
#ifndef WEFT_LIB_DEQUE_H
#define WEFT_LIB_DEQUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct weft_task weft_task;

typedef struct weft__deque {
  _Alignas(64) _Atomic uint32_t head;  /* next to take (consumers) */
  _Alignas(64) _Atomic uint32_t tail;  /* next free slot (owner only writes) */
  uint32_t mask;                       /* capacity - 1 (capacity is a power of two) */
  _Atomic(weft_task *) *slots;
  _Atomic uint64_t *seqs;              /* each slot's ready stamp (see next_task) */
} weft__deque;


static inline uint32_t weft__deque_len(weft__deque *d)
{
  uint32_t t = atomic_load_explicit(&d->tail, memory_order_acquire);
  uint32_t h = atomic_load_explicit(&d->head, memory_order_acquire);
  return t - h;
}

/* Owner only. False when full. `seq` is the task's ready stamp. */
static inline bool weft__deque_push(weft__deque *d, weft_task *task, uint64_t seq)
{
  uint32_t t = atomic_load_explicit(&d->tail, memory_order_relaxed);
  uint32_t h = atomic_load_explicit(&d->head, memory_order_acquire);
  if (t - h > d->mask)
    return false;
  atomic_store_explicit(&d->slots[t & d->mask], task, memory_order_relaxed);
  atomic_store_explicit(&d->seqs[t & d->mask], seq, memory_order_relaxed);
  atomic_store_explicit(&d->tail, t + 1, memory_order_release);
  return true;
}

/* Owner only: the ready stamp of the oldest queued task, false if empty. A
 * thief may take that task meanwhile; the stamp is then merely stale, which
 * only affects the order the owner picks its next task in. */
static inline bool weft__deque_peek_seq(weft__deque *d, uint64_t *seq)
{
  uint32_t h = atomic_load_explicit(&d->head, memory_order_relaxed);
  uint32_t t = atomic_load_explicit(&d->tail, memory_order_relaxed);
  if (h == t)
    return false;
  *seq = atomic_load_explicit(&d->seqs[h & d->mask], memory_order_relaxed);
  return true;
}

/* Anyone. Takes up to `max` tasks (oldest first) into out[]; returns how many.
 * A thief asks for a batch; the owner asks for one. */
static inline uint32_t weft__deque_take(weft__deque *d, weft_task **out, uint32_t max)
{
  for (;;) {
    uint32_t h = atomic_load_explicit(&d->head, memory_order_acquire);
    uint32_t t = atomic_load_explicit(&d->tail, memory_order_acquire);
    uint32_t n = t - h;
    if (n == 0)
      return 0;
    if (n > d->mask + 1)
      continue; /* head moved on while we read tail: look again */
    if (n > max)
      n = max;
    for (uint32_t i = 0; i < n; i++)
      out[i] = atomic_load_explicit(&d->slots[(h + i) & d->mask], memory_order_relaxed);
    if (atomic_compare_exchange_weak_explicit(&d->head, &h, h + n, memory_order_acq_rel,
                                              memory_order_relaxed))
      return n;
  }
}

#endif
