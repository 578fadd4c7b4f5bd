/* SPDX-License-Identifier: MIT */
/*
 * Suite "coro", part 4 - the stack depot between threads' caches. Stacks
 * that one thread allocates and another frees (spawned on one shard, run to
 * the end on another) overflow the freeing thread's cache into the depot
 * instead of going back to the system, and the allocating thread takes them
 * from there: no release, no new mapping. The depot is bounded, and a drain
 * empties it. Stacks released together share their madvise where they are
 * next to each other in memory, and over a mass free (a runtime stopping)
 * the overflow is set aside and released at the end in address order.
 *
 * Criterion runs every test in a process of its own; counters are still
 * compared with a reading taken at the start.
 */
#include "coro_test.h"

#define SMALL ((size_t)16 << 10)
#define MOVED 200 /* more than a cache holds (64), fewer than the depot */

struct batch {
  weft__stack *st;
  size_t n;
  weft__stack_counters after; /* read by the freeing thread, before it exits */
};

static int64_t live(const weft__stack_counters *c)
{
  return c->slab_live + c->guarded_live;
}

static void alloc_all(weft__stack *st, size_t n)
{
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(weft__stack_alloc(&st[i], SMALL), 0);
}

static void *free_all(void *arg)
{
  struct batch *b = arg;
  for (size_t i = 0; i < b->n; i++)
    weft__stack_free(&b->st[i]);
  weft__stack_get_counters(&b->after);
  return NULL;
}

/* Frees b's stacks on a thread of their own, which then exits (its cache
 * goes back to the system, the depot stays). */
static void free_elsewhere(struct batch *b)
{
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, free_all, b), 0);
  cr_assert_eq(pthread_join(th, NULL), 0);
}

Test(coro, stacks_freed_on_another_thread_come_back_through_the_depot, .timeout = 30)
{
  weft__stack_cache_drain();
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  cr_assert_eq(c0.depot, 0);

  static weft__stack st[MOVED];
  alloc_all(st, MOVED);
  struct batch b = {st, MOVED, {0}};
  free_elsewhere(&b);
  /* Nothing was given back while the thread freed: what its cache could
   * not hold went to the depot. */
  cr_assert_eq(live(&b.after), live(&c0) + MOVED, "overflow given back to the system");
  cr_assert_geq(b.after.depot, MOVED - 64);
  cr_assert_leq(b.after.depot, MOVED);

  /* This thread gets them back without a new mapping. */
  weft__stack_get_counters(&c0);
  uint64_t from_depot = c0.depot;
  cr_assert_eq(from_depot, b.after.depot, "the exiting thread emptied the depot");
  alloc_all(st, from_depot);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.depot, 0);
  cr_assert_eq(c1.cache_hits - c0.cache_hits, from_depot);
  cr_assert_eq(c1.mmaps, c0.mmaps);
  cr_assert_eq(live(&c1), live(&c0));

  for (size_t i = 0; i < from_depot; i++)
    weft__stack_free(&st[i]);
  weft__stack_cache_drain();
}

Test(coro, depot_is_bounded_and_drained, .timeout = 60)
{
  weft__stack_cache_drain();
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);

  size_t n = WEFT__STACK_DEPOT_MAX + MOVED;
  weft__stack *st = calloc(n, sizeof(*st));
  cr_assert_not_null(st);
  alloc_all(st, n);
  struct batch b = {st, n, {0}};
  free_elsewhere(&b);
  cr_assert_eq(b.after.depot, WEFT__STACK_DEPOT_MAX);
  /* The rest went back to the system: beyond the depot, and the freeing
   * thread's cache when it exited. */
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.depot, WEFT__STACK_DEPOT_MAX);
  cr_assert_eq(live(&c1), live(&c0) + WEFT__STACK_DEPOT_MAX);

  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.depot, 0);
  cr_assert_eq(live(&c1), live(&c0));
  free(st);
}

/* Stacks given back together: slots next to each other in memory are
 * emptied by one madvise, and each comes back zeroed. */
Test(coro, adjacent_stacks_are_released_together_and_zeroed, .timeout = 30)
{
  weft__stack_cache_drain();
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  static weft__stack st[MOVED];
  alloc_all(st, MOVED);
  bool slab = st[0].kind == WEFT__STACK_SLAB;
  for (size_t i = 0; i < MOVED; i++) {
    memset(st[i].base, 0xA5, 64);
    weft__stack_free(&st[i]); /* into the cache, then the depot */
  }
  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.releases - c0.releases, MOVED);
  if (slab) /* carved one after another: a handful of runs, not MOVED calls */
    cr_assert_leq(c1.release_calls - c0.release_calls, MOVED / 16, "%llu calls for %d stacks",
                  (unsigned long long)(c1.release_calls - c0.release_calls), MOVED);

  alloc_all(st, MOVED); /* the same slots, from the slab's free list */
  for (size_t i = 0; i < MOVED; i++) {
    for (size_t k = 0; k < 64; k++)
      cr_assert_eq((unsigned char)st[i].base[k], 0, "stack %zu byte %zu not zeroed", i, k);
    weft__stack_free(&st[i]);
  }
  weft__stack_cache_drain();
}

/* A mass free: what neither the cache nor the depot can hold is set aside
 * and given back at the end, in address order - so slots freed every other
 * one, as two shards free tasks that were placed round-robin, are emptied a
 * run at a time instead of one madvise each. */
Test(coro, releases_deferred_over_a_mass_free_go_in_address_order, .timeout = 60)
{
  weft__stack_cache_drain();
  size_t fill = WEFT__STACK_DEPOT_MAX + 64, n = fill + 2 * MOVED;
  weft__stack *st = calloc(n, sizeof(*st));
  cr_assert_not_null(st);
  alloc_all(st, n);
  bool slab = st[0].kind == WEFT__STACK_SLAB;
  for (size_t i = 0; i < fill; i++) /* the cache and the depot are full */
    weft__stack_free(&st[i]);
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  cr_assert_eq(c0.depot, WEFT__STACK_DEPOT_MAX);

  weft__stack_defer_releases();
  for (size_t i = fill; i < n; i += 2)
    weft__stack_free(&st[i]);
  for (size_t i = fill + 1; i < n; i += 2)
    weft__stack_free(&st[i]);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.releases, c0.releases, "given back while releases were deferred");
  cr_assert_eq(live(&c1), live(&c0));
  weft__stack_release_deferred();
  weft__stack_get_counters(&c1);
  uint64_t released = c1.releases - c0.releases;
  /* All but what this thread's cache kept (at most its 64). */
  cr_assert_geq(released, 2 * MOVED - 64);
  cr_assert_eq(live(&c1), live(&c0) - (int64_t)released);
  if (slab)
    cr_assert_leq(c1.release_calls - c0.release_calls, released / 16, "%llu calls for %llu stacks",
                  (unsigned long long)(c1.release_calls - c0.release_calls),
                  (unsigned long long)released);

  weft__stack_release_deferred(); /* unmatched: nothing happens */
  weft__stack_cache_drain();
  free(st);
}
