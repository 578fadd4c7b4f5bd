/* SPDX-License-Identifier: MIT */
#include "stack.h"

#include "dlist.h"
#include "fault.h"
#include "sanitize.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- process-wide state ------------------------------------------------ */

static _Atomic uint64_t n_mmaps, n_munmaps, n_releases, n_release_calls;
static _Atomic int64_t n_guarded, n_slab;
static _Atomic int64_t guard_budget = -1;      /* -1: not computed yet */
static _Atomic unsigned cache_limit = 64;
static _Atomic int guard_regions = -1;         /* -1: not probed yet */
static _Atomic unsigned depot_count;           /* stacks in the depot (depot_lock) */

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 */
#endif

/* Slab stacks of one size. Freed slots go to `free_slots` (their pages given
 * back with MADV_DONTNEED, which leaves guard regions in place); new ones are
 * cut from the current slab. */
struct slab_class {
  struct slab_class *next;
  size_t slot;          /* bytes per slot, guard and canary included */
  size_t guard;         /* guard region at the bottom of each slot, or 0 */
  char *cur, *end;      /* unused part of the newest slab */
  char **free_slots;
  size_t n_free, cap_free;
};
static pthread_mutex_t slab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slab_class *slab_classes;

static size_t page_size(void)
{
  static _Atomic size_t ps;
  size_t v = atomic_load_explicit(&ps, memory_order_relaxed);
  if (!v) {
    v = (size_t)sysconf(_SC_PAGESIZE);
    atomic_store_explicit(&ps, v, memory_order_relaxed);
  }
  return v;
}

/* Each guarded stack takes two map entries (guard + stack); keep a reserve
 * of 8192 entries for everything else the process maps (thread stacks,
 * malloc arenas, libraries, slabs). */
static int64_t default_budget(void)
{
  long max_maps = 65530;
  FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
  if (f) {
    if (fscanf(f, "%ld", &max_maps) != 1)
      max_maps = 65530;
    fclose(f);
  }
  long b = (max_maps - 8192) / 2;
  return b > 0 ? b : 0;
}

static int64_t budget(void)
{
  int64_t b = atomic_load_explicit(&guard_budget, memory_order_relaxed);
  if (b < 0) {
    b = default_budget();
    int64_t unset = -1;
    if (!atomic_compare_exchange_strong(&guard_budget, &unset, b))
      b = unset;
  }
  return b;
}

void weft__stack_set_guard_budget(long b)
{
  atomic_store(&guard_budget, b < 0 ? default_budget() : (int64_t)b);
}

void weft__stack_set_cache_limit(unsigned n)
{
  atomic_store(&cache_limit, n);
}

/* Installs a guard region on an unused page of a scratch mapping. */
static bool probe_guard_regions(void)
{
  size_t ps = page_size();
  int saved = errno;
  /* Plain mmap: a probe is neither a stack nor a place for injected faults. */
  void *p = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    errno = saved;
    return false;
  }
  bool ok = madvise(p, ps, MADV_GUARD_INSTALL) == 0;
  errno = saved;
  munmap(p, 2 * ps);
  return ok;
}

bool weft__stack_guard_regions(void)
{
  int v = atomic_load_explicit(&guard_regions, memory_order_relaxed);
  if (v < 0) {
    v = probe_guard_regions();
    int unknown = -1;
    if (!atomic_compare_exchange_strong(&guard_regions, &unknown, v))
      v = unknown;
  }
  return v > 0;
}

void weft__stack_set_guard_regions(int on)
{
  atomic_store(&guard_regions, on < 0 ? -1 : on > 0);
}

static uint64_t cache_hits_total(void);

void weft__stack_get_counters(weft__stack_counters *out)
{
  out->mmaps = atomic_load(&n_mmaps);
  out->munmaps = atomic_load(&n_munmaps);
  out->cache_hits = cache_hits_total();
  out->guarded_live = atomic_load(&n_guarded);
  out->slab_live = atomic_load(&n_slab);
  out->guard_budget = budget();
  out->depot = atomic_load(&depot_count);
  out->releases = atomic_load(&n_releases);
  out->release_calls = atomic_load(&n_release_calls);
}

static void *map_region(size_t len, int prot)
{
  void *p = weft__mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
  if (p == MAP_FAILED)
    return NULL;
  atomic_fetch_add_explicit(&n_mmaps, 1, memory_order_relaxed);
  madvise(p, len, MADV_NOHUGEPAGE);
  return p;
}

/* ---- guarded stacks ------------------------------------------------------ */

static int guarded_alloc(weft__stack *st, size_t size)
{
  if (atomic_fetch_add(&n_guarded, 1) >= budget()) {
    atomic_fetch_sub(&n_guarded, 1);
    return -EAGAIN; /* over budget: the caller uses a slab */
  }
  size_t len = size + WEFT__STACK_GUARD;
  /* Map everything inaccessible, then open the part above the guard: one
   * mapping, two map entries, and no window in which the guard is writable. */
  char *map = map_region(len, PROT_NONE);
  if (!map) {
    atomic_fetch_sub(&n_guarded, 1);
    return -ENOMEM;
  }
  if (mprotect(map + WEFT__STACK_GUARD, size, PROT_READ | PROT_WRITE) != 0) {
    munmap(map, len);
    atomic_fetch_add_explicit(&n_munmaps, 1, memory_order_relaxed);
    atomic_fetch_sub(&n_guarded, 1);
    return -ENOMEM;
  }
  st->map = map;
  st->map_len = len;
  st->guard = WEFT__STACK_GUARD;
  st->base = map + WEFT__STACK_GUARD;
  st->size = size;
  st->kind = WEFT__STACK_GUARDED;
  return 0;
}

static void guarded_release(weft__stack *st)
{
  munmap(st->map, st->map_len);
  atomic_fetch_add_explicit(&n_munmaps, 1, memory_order_relaxed);
  atomic_fetch_sub(&n_guarded, 1);
}

/* ---- slab stacks ---------------------------------------------------------- */

static struct slab_class *slab_class_for(size_t slot, size_t guard)
{
  for (struct slab_class *c = slab_classes; c; c = c->next)
    if (c->slot == slot && c->guard == guard)
      return c;
  struct slab_class *c = weft__calloc_plain(1, sizeof(*c));
  if (!c)
    return NULL;
  c->slot = slot;
  c->guard = guard;
  c->next = slab_classes;
  slab_classes = c;
  return c;
}

/* A guard region over [p, p + len). The mmap fault site covers it too: it is
 * the same kind of failure (no memory for the kernel's side of a stack). */
static bool install_guard(char *p, size_t len)
{
  if (weft__fault_hit(WEFT__FAULT_MMAP))
    return false;
  int saved = errno;
  bool ok = madvise(p, len, MADV_GUARD_INSTALL) == 0;
  errno = saved;
  return ok;
}

static int slab_alloc(weft__stack *st, size_t size)
{
  /* The canary lives inside the stack's lowest bytes, the guard below. */
  size_t guard = weft__stack_guard_regions() ? WEFT__STACK_GUARD : 0;
  size_t slot = guard + size;
  char *p = NULL;
  pthread_mutex_lock(&slab_lock);
  struct slab_class *c = slab_class_for(slot, guard);
  if (c && c->n_free) {
    p = c->free_slots[--c->n_free];
  } else if (c) {
    if (c->cur == c->end) {
      /* 64 MiB of address space per slab: one map entry for many
       * coroutines. Nothing is committed until touched - but a cap on the
       * address space (RLIMIT_AS) or strict overcommit counts all of it, so
       * stacks of 64 MiB and more get one slot per slab, not sixteen: a
       * 1 GiB stack must not need 16 GiB. */
      size_t n = ((size_t)64 << 20) / slot;
      if (n < 1)
        n = 1;
      char *s = map_region(n * slot, PROT_READ | PROT_WRITE);
      if (s) {
        c->cur = s;
        c->end = s + n * slot;
      }
    }
    /* A new slot gets its guard before anyone can have it; the guard
     * stays through every MADV_DONTNEED of later releases. If the kernel
     * cannot install it (no memory for page tables), the slot stays unused. */
    if (c->cur != c->end && (!guard || install_guard(c->cur, guard))) {
      p = c->cur;
      c->cur += slot;
    }
  }
  pthread_mutex_unlock(&slab_lock);
  if (!p)
    return -ENOMEM;
  atomic_fetch_add(&n_slab, 1);
  st->map = p;
  st->map_len = slot;
  st->guard = guard;
  st->base = p + guard + WEFT__STACK_CANARY;
  st->size = size - WEFT__STACK_CANARY;
  st->kind = WEFT__STACK_SLAB;
  return 0;
}

/* Puts a released slot on its class's free list (slab_lock held). */
static void slab_return_locked(const weft__stack *st)
{
  struct slab_class *c = slab_class_for(st->map_len, st->guard);
  if (c && c->n_free == c->cap_free) {
    size_t cap = c->cap_free ? c->cap_free * 2 : 256;
    char **v = weft__realloc(c->free_slots, cap * sizeof(*v));
    if (v) {
      c->free_slots = v;
      c->cap_free = cap;
    }
  }
  if (c && c->n_free < c->cap_free)
    c->free_slots[c->n_free++] = st->map;
  /* else: no memory to remember the slot; its address space stays reserved
   * (and unused) rather than risk handing out a slot twice. */
}

/* ---- the per-thread cache ------------------------------------------------- */

/* A cached stack keeps its own descriptor in its top bytes. */
struct cached {
  weft__stack st;
  struct cached *next;
};

#define WEFT__TLS __attribute__((tls_model("initial-exec")))
static __thread struct cached *cache_head WEFT__TLS;
static __thread unsigned cache_count WEFT__TLS;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

/* Cache hits are counted per thread (a shared atomic counter would cost a
 * locked add on every spawn) in records that weft__stack_get_counters sums;
 * a thread that exits adds its count to `hits_retired`. */
struct hit_counter {
  _Atomic uint64_t n;
  struct hit_counter *prev, *next;
};
static __thread struct hit_counter my_hits WEFT__TLS;
static __thread bool my_hits_listed WEFT__TLS;
static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hit_counter *hits_list;
static uint64_t hits_retired; /* guarded by hits_lock */

static void hits_register(void)
{
  pthread_mutex_lock(&hits_lock);
  struct hit_counter *me = &my_hits;
  WEFT__DLIST_PUSH(hits_list, me, prev, next);
  pthread_mutex_unlock(&hits_lock);
  my_hits_listed = true;
}

static void hits_unregister(void)
{
  if (!my_hits_listed)
    return;
  pthread_mutex_lock(&hits_lock);
  hits_retired += atomic_load_explicit(&my_hits.n, memory_order_relaxed);
  atomic_store_explicit(&my_hits.n, 0, memory_order_relaxed);
  struct hit_counter *me = &my_hits;
  WEFT__DLIST_UNLINK(hits_list, me, prev, next);
  pthread_mutex_unlock(&hits_lock);
  my_hits_listed = false;
}

static uint64_t cache_hits_total(void)
{
  pthread_mutex_lock(&hits_lock);
  uint64_t n = hits_retired;
  for (struct hit_counter *h = hits_list; h; h = h->next)
    n += atomic_load_explicit(&h->n, memory_order_relaxed);
  pthread_mutex_unlock(&hits_lock);
  return n;
}

/* Sorts v by address: an insertion sort, since n <= RELEASE_BATCH and this
 * may run on a coroutine's stack (qsort could allocate). */
static void sort_by_map(weft__stack *v, size_t n)
{
  for (size_t i = 1; i < n; i++) {
    weft__stack x = v[i];
    size_t j = i;
    for (; j > 0 && v[j - 1].map > x.map; j--)
      v[j] = v[j - 1];
    v[j] = x;
  }
}

/* Gives n stacks back to the system (v is reordered). Slab slots next to
 * each other in memory are emptied with one madvise - a mass release (a
 * shutdown, the end of a burst) frees stacks that were carved one after
 * another, and each madvise's TLB shootdown reaches every core - and the
 * slab lock is taken once. Emptying gives the pages back and re-zeroes the
 * canary before a slot can be handed out again; guard regions stay. */
static void release_many(weft__stack *v, size_t n)
{
  sort_by_map(v, n);
  size_t slabs = 0, calls = 0;
  for (size_t i = 0; i < n; i++)
    weft__valgrind_deregister(v[i].vg_id);
  for (size_t i = 0; i < n; calls++) {
    if (v[i].kind == WEFT__STACK_GUARDED) {
      guarded_release(&v[i]);
      i++;
      continue;
    }
    size_t j = i + 1;
    char *end = v[i].map + v[i].map_len;
    while (j < n && v[j].kind == WEFT__STACK_SLAB && v[j].map == end &&
           v[j].map_len == v[i].map_len && v[j].guard == v[i].guard)
      end += v[j++].map_len;
    madvise(v[i].map, (size_t)(end - v[i].map), MADV_DONTNEED);
    slabs += j - i;
    i = j;
  }
  atomic_fetch_add_explicit(&n_releases, n, memory_order_relaxed);
  atomic_fetch_add_explicit(&n_release_calls, calls, memory_order_relaxed);
  if (!slabs)
    return;
  pthread_mutex_lock(&slab_lock);
  for (size_t i = 0; i < n; i++)
    if (v[i].kind == WEFT__STACK_SLAB)
      slab_return_locked(&v[i]);
  pthread_mutex_unlock(&slab_lock);
  atomic_fetch_sub(&n_slab, (int64_t)slabs);
}

static void release(weft__stack *st)
{
  release_many(st, 1);
}

/* Stacks released together at most. The batch is gathered in a buffer of
 * the thread's, not on its stack: a free may run on a coroutine's stack (a
 * join releases the task it joined), which can be as small as 16 KiB. */
#define RELEASE_BATCH 64
static __thread weft__stack release_buf[RELEASE_BATCH];

/* Stacks moved at once between a thread's cache and the depot or the
 * system: half the cache limit, at least one. */
static unsigned cache_batch(void)
{
  unsigned limit = atomic_load_explicit(&cache_limit, memory_order_relaxed);
  return limit / 2 ? limit / 2 : 1;
}

/* Unlinks the top of this thread's cache; NULL if it is empty. */
static struct cached *cache_pop_top(void)
{
  struct cached *c = cache_head;
  if (c) {
    cache_head = c->next;
    cache_count--;
  }
  return c;
}

/* Pops up to max stacks off this thread's cache into v; returns how many. */
static size_t cache_take(weft__stack *v, size_t max)
{
  size_t n = 0;
  for (struct cached *c; n < max && (c = cache_pop_top());)
    v[n++] = c->st;
  return n;
}

/* Gives a chain of free stacks, linked through the nodes in their top
 * bytes, back to the system RELEASE_BATCH at a time. Each node is read
 * before the batch holding its stack is emptied. */
static void release_chain(struct cached *c)
{
  weft__stack *v = release_buf;
  while (c) {
    size_t n = 0;
    for (; n < RELEASE_BATCH && c; c = c->next)
      v[n++] = c->st;
    release_many(v, n);
  }
}

/* Gives this thread's cached stacks back to the system. */
static void cache_release_all(void)
{
  struct cached *c = cache_head;
  cache_head = NULL;
  cache_count = 0;
  release_chain(c);
}

static void cache_destructor(void *unused)
{
  (void)unused;
  cache_release_all();
  hits_unregister();
}

/* Whether cache_key exists. Without it (the process used up its keys) no
 * thread caches stacks: they would outlive their thread, and an unmade key
 * handed to pthread_setspecific is someone else's. */
static bool cache_key_made;

static void cache_key_init(void)
{
  cache_key_made = pthread_key_create(&cache_key, cache_destructor) == 0;
}

static bool cache_usable(void)
{
  pthread_once(&cache_once, cache_key_init);
  return cache_key_made;
}

static struct cached *cached_at(const weft__stack *st)
{
  return (struct cached *)(void *)(st->base + st->size - sizeof(struct cached));
}

/* Puts c on top of this thread's cache (arming the exit destructor first).
 * Only once cache_usable() said yes. */
static void cache_push(struct cached *c)
{
  if (!cache_count) {
    pthread_setspecific(cache_key, (void *)1); /* arms the exit destructor */
    if (!my_hits_listed)
      hits_register(); /* before the first hit this cache can give */
  }
  c->next = cache_head;
  cache_head = c;
  cache_count++;
}

/* ---- releases deferred over a mass free --------------------------------------- */

static pthread_mutex_t defer_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned defer_depth;     /* weft__stack_defer_releases() nesting */
static struct cached **defer_v;          /* set aside (defer_lock) */
static size_t defer_n, defer_cap;

void weft__stack_defer_releases(void)
{
  pthread_mutex_lock(&defer_lock);
  atomic_fetch_add_explicit(&defer_depth, 1, memory_order_relaxed);
  pthread_mutex_unlock(&defer_lock);
}

/* Grows defer_v to hold at least `need` (doubling); false without memory. */
static bool defer_reserve(size_t need)
{
  if (need <= defer_cap)
    return true;
  size_t cap = defer_cap ? defer_cap : 1024;
  while (cap < need)
    cap *= 2;
  struct cached **v = weft__realloc(defer_v, cap * sizeof(*v));
  if (!v)
    return false;
  defer_v = v;
  defer_cap = cap;
  return true;
}

/* Sets aside st and up to `more` stacks off the top of this thread's cache,
 * if releases are deferred and there is memory to note them; false if not
 * (the caller gives them back itself). */
static bool defer_release(const weft__stack *st, unsigned more)
{
  if (!atomic_load_explicit(&defer_depth, memory_order_relaxed))
    return false;
  pthread_mutex_lock(&defer_lock);
  if (!atomic_load_explicit(&defer_depth, memory_order_relaxed) ||
      !defer_reserve(defer_n + 1 + more)) {
    pthread_mutex_unlock(&defer_lock);
    return false;
  }
  struct cached *c = cached_at(st);
  c->st = *st;
  defer_v[defer_n++] = c;
  while (more-- && (c = cache_pop_top()))
    defer_v[defer_n++] = c;
  pthread_mutex_unlock(&defer_lock);
  return true;
}

static void sift_down(struct cached **v, size_t k, size_t n)
{
  for (size_t child; (child = 2 * k + 1) < n; k = child) {
    if (child + 1 < n && v[child + 1] > v[child])
      child++;
    if (v[k] >= v[child])
      return;
    struct cached *t = v[k];
    v[k] = v[child];
    v[child] = t;
  }
}

/* Heap sort by address: no recursion and no allocation, whoever calls. */
static void sort_nodes(struct cached **v, size_t n)
{
  for (size_t k = n / 2; k-- > 0;)
    sift_down(v, k, n);
  for (size_t end = n; end > 1;) {
    struct cached *t = v[0];
    v[0] = v[--end];
    v[end] = t;
    sift_down(v, 0, end);
  }
}

void weft__stack_release_deferred(void)
{
  pthread_mutex_lock(&defer_lock);
  unsigned depth = atomic_load_explicit(&defer_depth, memory_order_relaxed);
  if (depth)
    atomic_store_explicit(&defer_depth, depth - 1, memory_order_relaxed);
  if (depth != 1) { /* still deferred by another caller (or never was) */
    pthread_mutex_unlock(&defer_lock);
    return;
  }
  sort_nodes(defer_v, defer_n);
  for (size_t i = 0; i < defer_n; i++) /* chained in address order */
    defer_v[i]->next = i + 1 < defer_n ? defer_v[i + 1] : NULL;
  int saved = errno; /* release_chain's madvise and munmap set it on failure */
  release_chain(defer_n ? defer_v[0] : NULL);
  errno = saved;
  free(defer_v);
  defer_v = NULL;
  defer_n = defer_cap = 0;
  pthread_mutex_unlock(&defer_lock);
}

/* ---- the depot: stacks between the threads' caches ------------------------------
 *
 * Stacks flow between threads: a shard that runs what another spawned frees
 * more than it allocates, and the spawner the reverse. Given back to the
 * system, the thief's overflow costs an madvise (a TLB shootdown reaching
 * every core of the process) and the spawner a page fault for each page it
 * touches again. So half a full cache moves to a shared depot under one
 * lock, and an empty cache takes a batch from there; only beyond
 * WEFT__STACK_DEPOT_MAX stacks does the overflow go back to the system. */

struct depot_class {
  struct depot_class *next;
  size_t request;
  struct cached *head;
};
static pthread_mutex_t depot_lock = PTHREAD_MUTEX_INITIALIZER;
static struct depot_class *depot_classes; /* guarded by depot_lock */

static struct depot_class *depot_class_for(size_t request, bool make)
{
  for (struct depot_class *d = depot_classes; d; d = d->next)
    if (d->request == request)
      return d;
  if (!make)
    return NULL;
  struct depot_class *d = weft__calloc_plain(1, sizeof(*d));
  if (!d)
    return NULL;
  d->request = request;
  d->next = depot_classes;
  depot_classes = d;
  return d;
}

/* Moves up to n stacks of size `request` from the top of this thread's cache
 * to the depot; returns how many moved. */
static unsigned depot_put(size_t request, unsigned n)
{
  unsigned moved = 0;
  pthread_mutex_lock(&depot_lock);
  unsigned room = WEFT__STACK_DEPOT_MAX - atomic_load_explicit(&depot_count, memory_order_relaxed);
  struct depot_class *d = room ? depot_class_for(request, true) : NULL;
  while (d && moved < n && moved < room && cache_head && cache_head->st.request == request) {
    struct cached *c = cache_pop_top();
    c->next = d->head;
    d->head = c;
    moved++;
  }
  atomic_fetch_add_explicit(&depot_count, moved, memory_order_relaxed);
  pthread_mutex_unlock(&depot_lock);
  return moved;
}

/* Refills this thread's cache with up to half its limit of stacks of size
 * `request` from the depot; false if there were none. */
static bool depot_take(size_t request)
{
  unsigned limit = atomic_load_explicit(&cache_limit, memory_order_relaxed);
  unsigned want = limit > cache_count ? limit - cache_count : 0, batch = cache_batch();
  if (want > batch)
    want = batch;
  if (!want || !atomic_load_explicit(&depot_count, memory_order_relaxed) || !cache_usable())
    return false;
  unsigned moved = 0;
  pthread_mutex_lock(&depot_lock);
  struct depot_class *d = depot_class_for(request, false);
  while (d && d->head && moved < want) {
    struct cached *c = d->head;
    d->head = c->next;
    cache_push(c);
    moved++;
  }
  atomic_fetch_sub_explicit(&depot_count, moved, memory_order_relaxed);
  pthread_mutex_unlock(&depot_lock);
  return moved > 0;
}

static void depot_release_all(void)
{
  pthread_mutex_lock(&depot_lock);
  for (struct depot_class *d = depot_classes; d; d = d->next) {
    release_chain(d->head);
    d->head = NULL;
  }
  atomic_store_explicit(&depot_count, 0, memory_order_relaxed);
  pthread_mutex_unlock(&depot_lock);
}

void weft__stack_cache_drain(void)
{
  int saved = errno; /* the releases' madvise and munmap set it on failure */
  cache_release_all();
  depot_release_all();
  errno = saved;
}

/* Pops a cached stack of size `request` (looking at the first few entries
 * only: the cache is LIFO and most programs use one stack size). */
static bool cache_pop(weft__stack *st, size_t request)
{
  struct cached **pp = &cache_head;
  for (int i = 0; *pp && i < 4; i++, pp = &(*pp)->next) {
    if ((*pp)->st.request == request) {
      struct cached *c = *pp;
      *pp = c->next;
      cache_count--;
      *st = c->st;
      /* Only this thread writes it: no locked add. */
      atomic_store_explicit(&my_hits.n, atomic_load_explicit(&my_hits.n, memory_order_relaxed) + 1,
                            memory_order_relaxed);
      return true;
    }
  }
  return false;
}

static int stack_alloc(weft__stack *st, size_t size)
{
  if (size == 0 || size > WEFT__STACK_MAX)
    return -EINVAL;
  size_t ps = page_size();
  size = (size + ps - 1) & ~(ps - 1);
  if (size < WEFT__STACK_MIN)
    size = WEFT__STACK_MIN;

  if (cache_pop(st, size) || (depot_take(size) && cache_pop(st, size)))
    return 0;

  /* With guard regions a slab stack is as safe as a mapping of its own, and
   * cheaper: one madvise for a new slot, no map entries. */
  int r = weft__stack_guard_regions() ? -EAGAIN : guarded_alloc(st, size);
  if (r == -EAGAIN)
    r = slab_alloc(st, size);
  if (r < 0)
    return r;
  st->request = size;
  st->vg_id = weft__valgrind_register(st->base, st->base + st->size);
  return 0;
}

static void stack_free(weft__stack *st)
{
  /* ASan may have left redzones of the last coroutine's frames poisoned. */
  weft__asan_unpoison(st->base, st->size);
  /* A slab stack whose canary was overwritten must not be handed out as is:
   * releasing it re-zeroes the slot (MADV_DONTNEED) before it is reused.
   * Stacks with a guard skip the read (weft__stack_canary_ok): a line at
   * the far end of the stack that nothing else touches, a cache miss on
   * every free. */
  if (!weft__stack_canary_ok(st)) {
    release(st);
    return;
  }
  unsigned limit = atomic_load_explicit(&cache_limit, memory_order_relaxed);
  unsigned half = cache_batch();
  if (cache_count >= limit && limit)
    depot_put(st->request, half);
  if (cache_count < limit && cache_usable()) {
    struct cached *c = cached_at(st);
    c->st = *st;
    cache_push(c);
    return;
  }
  /* Cache and depot full: this stack and the top of the cache go back in
   * one batch, so that the next frees are cached again - or are set aside
   * until the mass free under way ends. */
  unsigned more = half < RELEASE_BATCH - 1 ? half : RELEASE_BATCH - 1;
  if (defer_release(st, more))
    return;
  weft__stack *v = release_buf;
  v[0] = *st;
  release_many(v, 1 + cache_take(v + 1, more));
}

/* The system calls of the two above (mmap, mprotect, madvise, munmap) set
 * errno when they fail; a spawn, a join or an exit must not change the
 * caller's (weft/common.h). Neither suspends: errno is the thread's
 * throughout. */
int weft__stack_alloc(weft__stack *st, size_t size)
{
  int saved = errno;
  int r = stack_alloc(st, size);
  errno = saved;
  return r;
}

void weft__stack_free(weft__stack *st)
{
  int saved = errno;
  stack_free(st);
  errno = saved;
}
