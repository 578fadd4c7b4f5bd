/* SPDX-License-Identifier: MIT */
/*
 * Fault injection for the coroutine layer and the runtime: every call that can
 * fail for lack of a resource goes through one of these wrappers, and a test
 * can make the Nth call from now fail (neco's fail-counter idea). The
 * countdowns are process-wide atomics, so they also reach calls made on shard
 * threads; a countdown of 0 means "off" and costs one relaxed load.
 */
#ifndef WEFT_CORO_FAULT_H
#define WEFT_CORO_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum weft__fault_site {
  WEFT__FAULT_MMAP,      /* stack and slab mappings */
  WEFT__FAULT_MALLOC,    /* heap allocations of runtime objects */
  WEFT__FAULT_RING,      /* io_uring ring setup */
  WEFT__FAULT_THREAD,    /* pthread_create of shard and blocking-pool threads */
  WEFT__FAULT_POST,      /* msg_ring posts of threads outside a shard (-ENOMEM) */
  WEFT__FAULT_WAKE_FD,   /* the eventfd write that stands in for a refused post */
  WEFT__FAULT_MEMBARRIER,/* a canceller's membarrier (-ENOMEM) */
  WEFT__FAULT_RECV_QUEUE,/* growing a shard's message receive queue */
  WEFT__FAULT_SEND,      /* a shard's msg_ring SQEs (wake-ups, messages, doorbells,
                            flush markers): refused by the kernel in their CQE */
  WEFT__FAULT_SQ_FULL,   /* a shard's SQ still full after a submit (no SQE) */
  WEFT__FAULT_BACKLOG,   /* growing a shard's backlog of messages waiting for SQEs */
  WEFT__FAULT_OP_SQ,     /* an op's SQ still full after a submit (weft__op_begin's
                            -EBUSY; apart from WEFT__FAULT_SQ_FULL, whose tests
                            count on every op passing it by) */
  WEFT__FAULT_TRING_SUBMIT, /* a plain thread's own ring refusing a submission (-ENOMEM) */
  WEFT__FAULT_CANCEL_MISS, /* an op's IORING_OP_ASYNC_CANCEL that finds nothing (the
                            kernel's -ENOENT / -EALREADY): dropped, not submitted */
  WEFT__FAULT_NSITES
};

extern _Atomic long weft__fault_countdown[WEFT__FAULT_NSITES];

/* Make the nth call (1 = the next one) at `site` fail; 0 turns it off. */
void weft__fault_arm(enum weft__fault_site site, long nth);

/* True when this call at `site` must fail (consumes one step of the countdown). */
static inline bool weft__fault_hit(enum weft__fault_site site)
{
  long v = atomic_load_explicit(&weft__fault_countdown[site], memory_order_relaxed);
  while (__builtin_expect(v > 0, 0)) {
    if (atomic_compare_exchange_weak(&weft__fault_countdown[site], &v, v - 1))
      return v == 1;
  }
  return false;
}

void *weft__mmap(void *addr, size_t len, int prot, int flags);
/* Allocations of runtime objects: a fault site (WEFT__FAULT_MALLOC). Like
 * every allocator here they leave errno as it was. */
void *weft__malloc(size_t n);
void *weft__calloc(size_t n, size_t size);
/* calloc for types with an alignment above malloc's (lines of their own):
 * align is a power of two. Freed with free(). */
void *weft__calloc_aligned(size_t n, size_t size, size_t align);
/* The same without a fault site (buffers, growth of internal tables):
 * malloc, calloc, realloc and strdup, errno left alone. */
void *weft__malloc_plain(size_t n);
void *weft__calloc_plain(size_t n, size_t size);
void *weft__realloc(void *p, size_t n);
char *weft__strdup(const char *s);

#endif
