/* SPDX-License-Identifier: MIT */
/*
 * spawn: the cost of spawning and joining a trivial coroutine, from a
 * coroutine, with stacks coming from the shard's stack cache.
 *
 * A round spawns BATCH tasks and then joins them all; value = wall time of a
 * round / BATCH (best round; the median is an extra field). The reference is
 * the coroutine layer's own switch round trip (weft__coro_resume + suspend),
 * measured in the same process: it says how many bare switches one spawn
 * costs. Target (DESIGN.md section 5): <= 100 ns per coroutine.
 *
 * Lines: 1 shard; 2 shards with the default placement (stealable: queued on
 * the spawning shard, the other one may steal); 2 shards round-robin (every
 * other task crosses to the other shard, so its wake-up, completion and
 * stack travel between threads).
 *
 * Detached lines: a coroutine pinned to shard 0 spawns detached tasks, 16
 * at a time, yielding after each 16 - the accept loop of a server. On 2
 * shards the other one steals and runs a share: those stacks are allocated
 * on one thread and freed on the other. These lines keep the default stack
 * cache (64) and print `releases_per_coro`, the stacks given back to the
 * system per task: without the depot between the caches, the thief's
 * overflow went back with madvise and the spawner took fresh pages.
 *
 * The stack cache is per thread and holds 64 stacks by default; a round of
 * BATCH tasks needs BATCH stacks at once, so the limit is raised for the
 * joined lines and the first rounds (not timed) fill the cache. `mmaps_per_coro`
 * shows whether the timed rounds really ran on cached stacks, and
 * `switches_per_coro` how often the scheduler resumed something per task:
 * 1.0 when every child runs once and the joiner only wakes at the end, up to
 * 2.0 when the joiner is resumed between children (and suspends again on the
 * next unfinished one).
 */
#include "bench_util.h"

#include "coro.h"
#include "stack.h"
#include "weft.h"

#include <stdatomic.h>
#include <stdbool.h>

#define BATCH 1000
#define WARM_ROUNDS 3
#define MAX_ROUNDS 300

/* ---- reference: a bare coroutine switch round trip ------------------------- */

struct ping {
  weft__coro *self;
  bool stop;
};

static void *ping_body(void *arg)
{
  struct ping *p = arg;
  while (!p->stop)
    weft__coro_suspend(p->self);
  return NULL;
}

/* Best of `batches` batches of `iters` resume+suspend round trips, in ns. */
static double coro_rtt_ns(int batches, int iters)
{
  struct ping p = {0};
  weft__coro_opts o = {.fn = ping_body, .arg = &p, .stack_size = 64 << 10};
  weft__coro *co;
  if (weft__coro_create(&co, &o) < 0)
    return -1;
  p.self = co;
  weft__coro_resume(co);
  double best = 1e18;
  for (int b = 0; b < batches; b++) {
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < iters; i++)
      weft__coro_resume(co);
    double ns = (double)(bench_now_ns() - t0) / iters;
    if (ns < best)
      best = ns;
  }
  p.stop = true;
  weft__coro_resume(co);
  weft__coro_destroy(co);
  return best;
}

/* ---- spawn + join inside a runtime --------------------------------------------- */

struct spawn_run {
  int placement;
  int rounds;
  double *samples;    /* ns per coroutine, one per timed round */
  uint64_t mmaps;     /* stack mappings made during the timed rounds */
  uint64_t switches;  /* coroutine resumptions during the timed rounds */
  int err;
};

static weft_task *tasks[BATCH];

static void *trivial(void *arg)
{
  return arg;
}

static void *spawn_main(void *arg)
{
  struct spawn_run *s = arg;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = s->placement;
  weft__stack_counters c0 = {0}, c1;
  weft_stats s0 = {0}, s1;
  for (int r = -WARM_ROUNDS; r < s->rounds; r++) {
    if (r == 0) {
      weft__stack_get_counters(&c0);
      weft_stats_get(NULL, -1, &s0);
    }
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < BATCH; i++) {
      int e = weft_spawn(&tasks[i], &o, trivial, NULL);
      if (e < 0) {
        s->err = e;
        for (int j = 0; j < i; j++)
          weft_join(tasks[j], NULL);
        return NULL;
      }
    }
    for (int i = 0; i < BATCH; i++)
      weft_join(tasks[i], NULL);
    if (r >= 0)
      s->samples[r] = (double)(bench_now_ns() - t0) / BATCH;
  }
  weft__stack_get_counters(&c1);
  weft_stats_get(NULL, -1, &s1);
  s->mmaps = c1.mmaps - c0.mmaps;
  s->switches = s1.switches - s0.switches;
  return NULL;
}

/* Runs one configuration and prints its line; returns 0 or a -errno. */
static int bench_spawn(const char *name, int shards, int placement, int rounds, double ref)
{
  double samples[MAX_ROUNDS];
  struct spawn_run s = {.placement = placement, .rounds = rounds, .samples = samples};
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = shards;
  int r = weft_run(&cfg, spawn_main, &s, NULL);
  if (r < 0)
    return r;
  if (s.err < 0)
    return s.err;
  double best = bench_min(samples, (size_t)rounds);
  double median = bench_median(samples, (size_t)rounds);
  bench_print(name, "ns_per_coro", best, "coro_switch_rtt_ns", ref, best / ref,
              ",\"shards\":%d,\"median\":%.1f,\"target_ns\":100,\"target_met\":%s,"
              "\"mmaps_per_coro\":%.3f,\"switches_per_coro\":%.2f",
              shards, median, best <= 100.0 ? "true" : "false",
              (double)s.mmaps / ((double)rounds * BATCH),
              (double)s.switches / ((double)rounds * BATCH));
  return 0;
}

/* ---- detached tasks from an accept-loop-like spawner ------------------------ */

#define DETACHED_GROUP 16

struct detached_run {
  long groups;
  _Atomic long done;
  double ns_per_task;
  weft__stack_counters c0, c1;
  int err;
};

static void *count_done(void *arg)
{
  struct detached_run *d = arg;
  atomic_fetch_add_explicit(&d->done, 1, memory_order_relaxed);
  return NULL;
}

static void *detached_spawner(void *arg)
{
  struct detached_run *d = arg;
  weft__stack_get_counters(&d->c0);
  int64_t t0 = bench_now_ns();
  long total = d->groups * DETACHED_GROUP;
  for (long g = 0; g < d->groups; g++) {
    for (int i = 0; i < DETACHED_GROUP; i++) {
      int e = weft_spawn(NULL, NULL, count_done, d);
      if (e < 0) {
        d->err = e;
        total = g * DETACHED_GROUP + i;
        break;
      }
    }
    if (d->err)
      break;
    weft_yield();
  }
  while (atomic_load_explicit(&d->done, memory_order_relaxed) < total)
    weft_yield();
  d->ns_per_task = (double)(bench_now_ns() - t0) / (double)(total ? total : 1);
  weft__stack_get_counters(&d->c1);
  return NULL;
}

static void *detached_main(void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 0;
  weft_task *t;
  int e = weft_spawn(&t, &o, detached_spawner, arg);
  if (e < 0)
    return (void *)(intptr_t)e;
  weft_join(t, NULL);
  return NULL;
}

static int bench_detached(const char *name, int shards, long groups, double ref)
{
  struct detached_run d = {.groups = groups};
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = shards;
  void *ret = NULL;
  int r = weft_run(&cfg, detached_main, &d, &ret);
  if (r < 0)
    return r;
  if (ret)
    return (int)(intptr_t)ret;
  if (d.err < 0)
    return d.err;
  double n = (double)groups * DETACHED_GROUP;
  bench_print(name, "ns_per_coro", d.ns_per_task, "coro_switch_rtt_ns", ref, d.ns_per_task / ref,
              ",\"shards\":%d,\"tasks\":%.0f,\"releases_per_coro\":%.4f,\"mmaps_per_coro\":%.4f",
              shards, n, (double)(d.c1.releases - d.c0.releases) / n,
              (double)(d.c1.mmaps - d.c0.mmaps) / n);
  return 0;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("spawn", quick ? 30 : 120);
  int rounds = quick ? 50 : MAX_ROUNDS;

  /* Every stack of a round stays cached (see the header comment). */
  weft__stack_set_cache_limit(2 * BATCH);

  double ref = coro_rtt_ns(quick ? 5 : 20, 200000);
  if (ref <= 0) {
    fprintf(stderr, "spawn: cannot create a coroutine\n");
    return 1;
  }
  static const struct {
    const char *name;
    int shards, placement;
  } runs[] = {
    {"spawn", 1, WEFT_PLACE_STEALABLE},
    {"spawn_2shards", 2, WEFT_PLACE_STEALABLE},
    {"spawn_2shards_rr", 2, WEFT_PLACE_ROUND_ROBIN},
  };
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    int r = bench_spawn(runs[i].name, runs[i].shards, runs[i].placement, rounds, ref);
    if (bench_uring_missing(r)) {
      fprintf(stderr, "spawn: io_uring unavailable (%d), skipped\n", r);
      return BENCH_SKIP;
    }
    if (r < 0) {
      fprintf(stderr, "spawn: %s failed: %s\n", runs[i].name, weft_strerror(r));
      return 1;
    }
  }

  /* The detached lines run with the default cache, from a clean start. */
  weft__stack_set_cache_limit(64);
  weft__stack_cache_drain();
  long groups = quick ? 20000 : 200000;
  static const struct {
    const char *name;
    int shards;
  } detached[] = {{"spawn_detached", 1}, {"spawn_detached_2shards", 2}};
  for (size_t i = 0; i < sizeof(detached) / sizeof(detached[0]); i++) {
    int r = bench_detached(detached[i].name, detached[i].shards, groups, ref);
    if (r < 0) {
      fprintf(stderr, "spawn: %s failed: %s\n", detached[i].name, weft_strerror(r));
      return 1;
    }
  }
  return 0;
}
