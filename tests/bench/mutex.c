/* SPDX-License-Identifier: MIT */
/*
 * mutex: a contended weft_mutex across two shards. One coroutine pinned to
 * each shard loops { lock; counter++; unlock; }; the value is wall time per
 * lock (both sides' locks counted). Reference: two plain threads doing the
 * same with a pthread mutex (default type), measured in the same run.
 *
 * The two are not the same policy. glibc's mutex lets the unlocking thread
 * take the lock straight back (it barges). weft_mutex hands the mutex to a
 * queued waiter (FIFO, no starvation); what keeps that from costing a
 * cross-shard wake-up per lock is the short spin a locker does before it
 * queues (lib/mutex.c). The extra field handover_pct says how many locks
 * still had to queue and be handed over (one suspension each, counted from
 * the runtime's switch counter; the event and joins of a batch add a few).
 * Both sides are pinned to two distinct CPUs, as in the pingpong bench.
 */
#include "bench_util.h"
#include "bench_pin.h"

#include "weft.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define MAX_BATCHES 16

struct params {
  long iters;            /* lock/unlock per side per batch */
  int batches;
};

/* ---- weft --------------------------------------------------------------------------- */

struct weft_side {
  weft_mutex *m;
  long *counter;
  long iters;
  weft_event *go;
  int64_t start[2], end[2]; /* per side: the batch runs from the first start to the last end */
};

/* Wall time of a batch: from the first side's start to the last side's end
 * (taken by the sides themselves, so that a late wake-up of the timing
 * thread neither adds to it nor hides it). */
static int64_t span(const int64_t start[2], const int64_t end[2])
{
  int64_t s = start[0] < start[1] ? start[0] : start[1];
  int64_t e = end[0] > end[1] ? end[0] : end[1];
  return e - s;
}

static void *weft_loop(void *arg)
{
  struct weft_side *s = arg;
  if (weft_event_wait(s->go) != 0)
    return (void *)1;
  int k = weft_shard_id();
  s->start[k] = bench_now_ns();
  for (long i = 0; i < s->iters; i++) {
    if (weft_mutex_lock(s->m) != 0)
      return (void *)1;
    (*s->counter)++;
    weft_mutex_unlock(s->m);
  }
  s->end[k] = bench_now_ns();
  return NULL;
}

struct weft_run {
  const struct params *p;
  double samples[MAX_BATCHES];
  double waits_per_lock[MAX_BATCHES];
  int failed;
};

static uint64_t switches(void)
{
  weft_stats st;
  return weft_stats_get(NULL, -1, &st) == 0 ? st.switches : 0;
}

static void *weft_main(void *arg)
{
  struct weft_run *r = arg;
  weft_mutex m = WEFT_MUTEX_INIT;
  long counter = 0;
  for (int b = -1; b < r->p->batches; b++) { /* batch -1 warms up */
    weft_event *go;
    if (weft_event_create(&go, 0) != 0)
      return (void *)1;
    struct weft_side side = {&m, &counter, b < 0 ? r->p->iters / 4 : r->p->iters, go, {0}, {0}};
    weft_task *t[2];
    for (int k = 0; k < 2; k++) {
      weft_spawn_opts o;
      weft_spawn_opts_init(&o);
      o.placement = WEFT_PLACE_PINNED;
      o.shard = k;
      if (weft_spawn(&t[k], &o, weft_loop, &side) != 0)
        return (void *)1;
    }
    weft_sleep(WEFT_MSEC); /* both are parked on `go` */
    long before = counter;
    uint64_t sw0 = switches();
    weft_event_set(go);
    for (int k = 0; k < 2; k++) {
      void *v = NULL;
      if (weft_join(t[k], &v) != 0 || v)
        r->failed = 1;
    }
    int64_t dt = span(side.start, side.end);
    uint64_t sw = switches() - sw0;
    weft_event_destroy(go);
    if (counter - before != 2 * side.iters)
      r->failed = 1; /* the mutex let two in at once */
    if (b >= 0) {
      r->samples[b] = (double)dt / (double)(2 * side.iters);
      /* A lock that waited costs one switch in and one out (the joins and
       * the event add a handful per batch). */
      r->waits_per_lock[b] = (double)sw / 2.0 / (double)(2 * side.iters);
    }
  }
  return weft_mutex_destroy(&m) == 0 ? NULL : (void *)1;
}

/* ---- pthread reference --------------------------------------------------------------- */

struct ref_side {
  pthread_mutex_t *m;
  long *counter;
  long iters;
  pthread_barrier_t *go;
  atomic_int next_id;
  int64_t start[2], end[2];
};

static void *ref_loop(void *arg)
{
  struct ref_side *s = arg;
  int k = atomic_fetch_add(&s->next_id, 1);
  pthread_barrier_wait(s->go);
  s->start[k] = bench_now_ns();
  for (long i = 0; i < s->iters; i++) {
    pthread_mutex_lock(s->m);
    (*s->counter)++;
    pthread_mutex_unlock(s->m);
  }
  s->end[k] = bench_now_ns();
  return NULL;
}

static int ref_batch(long iters, double *out)
{
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 2);
  long counter = 0;
  struct ref_side side = {.m = &m, .counter = &counter, .iters = iters, .go = &go};
  pthread_t th[2];
  for (int k = 0; k < 2; k++) {
    if (start_pinned(&th[k], k, ref_loop, &side))
      return -1;
  }
  for (int k = 0; k < 2; k++)
    pthread_join(th[k], NULL);
  int64_t dt = span(side.start, side.end);
  pthread_barrier_destroy(&go);
  if (counter != 2 * iters)
    return -1;
  *out = (double)dt / (double)(2 * iters);
  return 0;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("mutex", quick ? 60 : 300);
  struct params p = {.iters = quick ? 200000 : 1000000, .batches = quick ? 7 : 11};
  choose_cpus();

  double ref[MAX_BATCHES], warm;
  if (ref_batch(p.iters / 4, &warm) != 0)
    return 1;
  for (int b = 0; b < p.batches; b++)
    if (ref_batch(p.iters, &ref[b]) != 0)
      return 1;

  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  if (pin_n == 2) {
    cfg.cpus = pin_cpus;
    cfg.ncpus = 2;
  }
  struct weft_run r = {.p = &p};
  void *ret = (void *)1;
  int e = weft_run(&cfg, weft_main, &r, &ret);
  if (bench_uring_missing(e))
    return BENCH_SKIP;
  if (e != 0 || ret || r.failed) {
    fprintf(stderr, "mutex: weft run failed (%s)\n", e ? weft_strerror(e) : "bad count");
    return 1;
  }
  double best = bench_min(r.samples, (size_t)p.batches);
  double ref_best = bench_min(ref, (size_t)p.batches);
  double med = bench_median(r.samples, (size_t)p.batches);
  double ref_med = bench_median(ref, (size_t)p.batches);
  double waits = bench_median(r.waits_per_lock, (size_t)p.batches);
  bench_print("mutex", "ns_per_lock", best, "pthread_ns_per_lock", ref_best, best / ref_best,
              ",\"median\":%.1f,\"ref_median\":%.1f,\"handover_pct\":%.1f,\"iters\":%ld",
              med, ref_med, 100.0 * waits, 2 * p.iters);
  return 0;
}
