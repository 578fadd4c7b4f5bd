/* SPDX-License-Identifier: MIT */
/*
 * Asymmetric fences: a full barrier split so that the frequent side pays
 * (almost) nothing and the rare side pays for both.
 *
 * The pattern (Dekker): the frequent side stores A then loads B, the rare
 * side stores B then loads A, and at least one of them must see the other's
 * store. Each side needs a full barrier between its store and its load. With
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) the rare side makes every
 * running thread of the process pass through one, so the frequent side only
 * has to keep the compiler from reordering. Where the kernel refuses
 * membarrier at the start (seccomp, very old kernels) both sides use a real
 * fence.
 *
 * Used by waits and cancellation (waitq.c): a waiting task is the frequent
 * side, a canceller the rare one.
 */
#ifndef WEFT_LIB_FENCE_H
#define WEFT_LIB_FENCE_H

#include <stdatomic.h>
#include <stdbool.h>

/* Set once, before the first runtime starts (weft__fence_init). */
extern atomic_bool weft__fence_asymmetric;

/* Registers the process for expedited membarriers, once; later calls do
 * nothing. Call before any thread may take either side. */
void weft__fence_init(void);

/* Tests: use real fences on both sides from now on, as on a kernel without
 * membarrier. Only before any thread may take either side. */
void weft__fence_force_symmetric(void);

/* The frequent side's barrier between its store and its load. */
static inline void weft__fence_light(void)
{
  if (atomic_load_explicit(&weft__fence_asymmetric, memory_order_relaxed))
    atomic_signal_fence(memory_order_seq_cst);
  else
    atomic_thread_fence(memory_order_seq_cst);
}

/* The rare side's barrier: a system call when the fences are asymmetric.
 * Refused for want of memory, it waits 100 us and tries again. Refused for
 * any other reason after a successful registration (a seccomp filter
 * installed since), it makes a TLB shootdown do the same from then on (x86:
 * see fence.c); where even that fails the process aborts with a message:
 * the frequent side's compiler barriers would be left without their other
 * half. */
void weft__fence_heavy(void);

/* Tests: heavy fences done by TLB shootdown so far. */
extern atomic_uint_least64_t weft__fence_shootdowns;

#endif
