/* SPDX-License-Identifier: MIT */
/*
 * Coroutine stacks.
 *
 * Two kinds, one interface:
 *  - slab: carved from large shared mappings (one map entry for many stacks).
 *    On Linux >= 6.13 each slot starts with a guard region
 *    (MADV_GUARD_INSTALL: it faults like a PROT_NONE page but costs no map
 *    entry), so every stack has a hardware guard however many there are;
 *    then all stacks are slab stacks. On older kernels a slab slot has no
 *    guard: its lowest WEFT__STACK_CANARY bytes are kept zero and checked at
 *    every switch, so an overflow is reported after the fact instead of
 *    silently corrupting the neighbour;
 *  - guarded, on kernels without guard regions: its own mmap with a
 *    PROT_NONE guard below it. Costs two entries of the kernel's per-process
 *    map table (vm.max_map_count, 65530 by default), so only a budget of them
 *    may exist at once; past it stacks come from slabs, so that a million
 *    coroutines fit on a stock kernel.
 * Both are mapped MAP_NORESERVE and MADV_NOHUGEPAGE: pages are committed only
 * when touched, and a huge page must not turn a 4 KiB stack into 2 MiB.
 *
 * A per-thread cache of free stacks (bounded) makes the common create/destroy
 * cycle free of syscalls; its contents go back to the system when the thread
 * exits. Between the caches, a shared depot (bounded) takes a full cache's
 * overflow and refills an empty one, so stacks that flow from one thread to
 * another (spawned on one shard, run and freed on another) cost no syscall
 * either.
 */
#ifndef WEFT_CORO_STACK_H
#define WEFT_CORO_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WEFT__STACK_MIN ((size_t)16 << 10)       /* smallest stack accepted */
#define WEFT__STACK_MAX ((size_t)1 << 30)        /* largest stack accepted */
#define WEFT__STACK_GUARD ((size_t)16 << 10)     /* guard below a guarded stack */
#define WEFT__STACK_CANARY ((size_t)64)          /* zero bytes at a slab stack's bottom */

enum weft__stack_kind { WEFT__STACK_GUARDED = 1, WEFT__STACK_SLAB = 2 };

typedef struct weft__stack {
  char *base;      /* lowest usable byte (above the guard or canary) */
  size_t size;     /* usable bytes; the stack grows down from base + size */
  char *map;       /* start of the mapping (guard included) or of the slot */
  size_t map_len;  /* length of that mapping or slot */
  size_t guard;    /* bytes at `map` that fault when touched (0: none) */
  size_t request;  /* the page-rounded size asked for: the cache's key */
  unsigned kind;   /* enum weft__stack_kind */
  unsigned vg_id;  /* Valgrind registration, 0 without Valgrind */
} weft__stack;

/* Counters, process-wide. */
typedef struct weft__stack_counters {
  uint64_t mmaps;        /* mappings made (stacks and slabs) */
  uint64_t munmaps;      /* mappings removed */
  uint64_t cache_hits;   /* allocations served by a thread's cache */
  int64_t guarded_live;  /* guarded stacks that exist (in use or cached) */
  int64_t slab_live;     /* slab stacks handed out and not yet returned */
  int64_t guard_budget;  /* the limit on guarded_live */
  uint64_t depot;        /* free stacks in the depot between thread caches */
  uint64_t releases;     /* stacks given back to the system (munmap, or
                            MADV_DONTNEED of a slab slot) */
  uint64_t release_calls;/* system calls that did it: adjacent slab slots
                            released together share one madvise */
} weft__stack_counters;

#define WEFT__STACK_DEPOT_MAX 1024u /* stacks the depot holds at most */

/* Rounds `size` up to whole pages. 0 or past WEFT__STACK_MAX → -EINVAL,
 * no memory → -ENOMEM; on failure *st is untouched. */
int weft__stack_alloc(weft__stack *st, size_t size);

/* Returns a stack to this thread's cache, or to the system when it is full. */
void weft__stack_free(weft__stack *st);

/* False when the canary of a stack that only its canary watches - a slab
 * slot without a guard region (kernels before 6.13) - was overwritten. Every
 * switch and every free check it; a stack with a guard (page or region)
 * is always fine here: the guard catches an overflow itself, the moment it
 * happens, and its canary bytes are just more stack. */
static inline bool weft__stack_canary_ok(const weft__stack *st)
{
  if (__builtin_expect(st->guard != 0, 1))
    return true;
  const uint64_t *w = (const uint64_t *)(const void *)(st->base - WEFT__STACK_CANARY);
  uint64_t acc = 0;
  for (size_t i = 0; i < WEFT__STACK_CANARY / sizeof(uint64_t); i++)
    acc |= w[i];
  return acc == 0;
}

/* Limit on guarded stacks; a negative value restores the default, derived
 * from vm.max_map_count. Stacks beyond it come from slabs. Only used when the
 * kernel has no guard regions. */
void weft__stack_set_guard_budget(long budget);

/* Whether slab slots get guard regions: 1 when the kernel has them, 0
 * (tests: the fallback of older kernels), or -1 to probe the kernel again.
 * Affects stacks made afterwards; slots made before keep their layout. */
void weft__stack_set_guard_regions(int on);

/* True when new slab slots get guard regions (probes the kernel once). */
bool weft__stack_guard_regions(void);

/* Largest number of stacks one thread keeps cached (default 64). */
void weft__stack_set_cache_limit(unsigned n);

/* Gives this thread's cached stacks, and those in the depot shared by all
 * threads, back to the system. */
void weft__stack_cache_drain(void);

/* A mass free is coming (a runtime stopping with its tasks): until the
 * matching weft__stack_release_deferred(), the stacks that caches and depot
 * have no room for are kept aside instead of given back one batch at a time.
 * Threads that free in turn (tasks placed round-robin, each thread holding
 * every other slot) never have neighbouring slots in one batch; set aside
 * and sorted together, they are emptied a run at a time. Calls nest. The
 * deferral is process-wide: what other threads (another runtime's shards)
 * give up meanwhile waits for the end too - memory they had in use already,
 * held a little longer. */
void weft__stack_defer_releases(void);
/* Ends a weft__stack_defer_releases(); the last one gives back, in address
 * order, everything set aside meanwhile. Does not allocate. */
void weft__stack_release_deferred(void);

void weft__stack_get_counters(weft__stack_counters *out);

#endif
