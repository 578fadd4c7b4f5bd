/* SPDX-License-Identifier: MIT */
/*
 * Timer cost, two ways.
 *
 * 1. arm_cancel: one weft__timer_arm + weft__timer_cancel pair on a shard's
 *    timer heap (lib/timer.h) that already holds 1000 armed timers, as a
 *    busy shard's would. Pure user space by construction (no system call
 *    on this path); target (DESIGN.md section 5) <= 100 ns per pair, so the
 *    line has no reference ("none") and its ratio is value / 100. The cost
 *    of one clock_gettime, which a real arm needs to compute its deadline,
 *    is printed next to it. A second figure arms the timer at the front of
 *    the heap (the deepest sift).
 *
 * 2. storm: the seed's timer_cancel_reschedule_storm through the public
 *    API. In weft_run (1 shard), 8 coroutines each wait on an event with a
 *    200 us deadline (arming a timer); each round, main sets the event
 *    (cancelling the 8 timers before they fire), resets it, and sleeps 1 us
 *    (one more timer, which fires); the 8 then re-arm. 1024 rounds. The
 *    reference is the floor of that work: the 9 clock_gettime calls per
 *    round that computing the 9 deadlines takes. Printed next to it: the
 *    same rounds as a 1 us clock_nanosleep on a plain thread (the kernel's
 *    timer slack makes that one far slower).
 *
 *   bench_timers [--quick]
 */
#include "bench_util.h"

#include "timer.h"
#include "weft.h"

#include <stdatomic.h>

#define HEAP_OTHERS 1000

/* ---- 1. the heap ------------------------------------------------------------------ */

static void noop_fire(weft__timer *t)
{
  (void)t;
}

/* ns per arm+cancel pair over n pairs; deadlines cycle through dl[]. */
static double heap_batch(weft__timer_heap *h, weft__timer *t, const int64_t *dl, long n)
{
  int64_t t0 = bench_now_ns();
  for (long i = 0; i < n; i++) {
    t->deadline = dl[i & 1023];
    if (__builtin_expect(weft__timer_arm(h, t) != 0, 0))
      return -1;
    weft__timer_cancel(h, t);
  }
  return (double)(bench_now_ns() - t0) / (double)n;
}

static double clock_batch(long n)
{
  volatile int64_t sink = 0;
  int64_t t0 = bench_now_ns();
  for (long i = 0; i < n; i++)
    sink += bench_now_ns();
  (void)sink;
  return (double)(bench_now_ns() - t0) / (double)n;
}

static int bench_heap(bool quick)
{
  long iters = quick ? 1000000 : 5000000;
  int batches = quick ? 5 : 15;
  weft__timer_heap h;
  weft__timer_heap_init(&h);
  static weft__timer others[HEAP_OTHERS];
  unsigned seed = 42;
  int64_t base = bench_now_ns();
  /* The others: deadlines spread over the next second. */
  for (int i = 0; i < HEAP_OTHERS; i++) {
    weft__timer_init(&others[i], noop_fire);
    others[i].deadline = base + (int64_t)(rand_r(&seed) % 1000000) * 1000;
    if (weft__timer_arm(&h, &others[i]) != 0) {
      fprintf(stderr, "bench_timers: arm failed\n");
      return 1;
    }
  }
  /* Ours: random deadlines among theirs, or always before all of them. */
  static int64_t spread[1024], front[1024];
  for (int i = 0; i < 1024; i++) {
    spread[i] = base + (int64_t)(rand_r(&seed) % 1000000) * 1000;
    front[i] = base - 1 - i;
  }
  weft__timer t;
  weft__timer_init(&t, noop_fire);
  heap_batch(&h, &t, spread, iters / 10); /* warm-up */
  double *v = calloc((size_t)batches, sizeof(double));
  double *f = calloc((size_t)batches, sizeof(double));
  double *c = calloc((size_t)batches, sizeof(double));
  for (int b = 0; b < batches; b++) {
    v[b] = heap_batch(&h, &t, spread, iters);
    f[b] = heap_batch(&h, &t, front, iters);
    c[b] = clock_batch(iters / 10);
    if (v[b] < 0 || f[b] < 0) {
      fprintf(stderr, "bench_timers: arm failed\n");
      return 1;
    }
  }
  if (h.n != HEAP_OTHERS || weft__timer_armed(&t)) {
    fprintf(stderr, "bench_timers: heap has %u timers, expected %d\n", h.n, HEAP_OTHERS);
    return 1;
  }
  double best = bench_min(v, (size_t)batches), best_front = bench_min(f, (size_t)batches);
  double best_clock = bench_min(c, (size_t)batches);
  double med = bench_median(v, (size_t)batches);
  bench_print("timers", "arm_cancel_ns", best, "none", 0, best / 100.0,
              ",\"target_ns\":100,\"median_ns\":%.2f,\"front_ns\":%.2f,"
              "\"clock_gettime_ns\":%.2f,\"heap_timers\":%d,\"syscalls\":0",
              med, best_front, best_clock, HEAP_OTHERS + 1);
  free(v);
  free(f);
  free(c);
  weft__timer_heap_term(&h);
  return 0;
}

/* ---- 2. the storm ------------------------------------------------------------------ */

#define WORKERS 8
#define ROUNDS 1024

struct storm {
  weft_event *ev;
  atomic_bool stop;
  atomic_int timeouts; /* a worker's 200 us passed before the set */
  int rounds;
  int64_t elapsed;
  weft_stats st;
};

static void *storm_worker(void *arg)
{
  struct storm *s = arg;
  while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
    int r = weft_event_wait_dl(s->ev, weft_now() + 200 * WEFT_USEC);
    if (r == -ETIMEDOUT)
      atomic_fetch_add_explicit(&s->timeouts, 1, memory_order_relaxed);
    else if (r != 0)
      return (void *)(intptr_t)r;
    /* Wait for the reset before re-arming (the event stays set until main
     * resets it, right after setting it, before it yields). */
  }
  return NULL;
}

static void *storm_main(void *arg)
{
  struct storm *s = arg;
  weft_task *w[WORKERS];
  for (int i = 0; i < WORKERS; i++)
    if (weft_spawn(&w[i], NULL, storm_worker, s) != 0)
      return (void *)1;
  weft_yield(); /* the workers arm their timers */
  weft_stats st0;
  weft_stats_get(NULL, 0, &st0);
  int64_t t0 = weft_now();
  for (int r = 0; r < s->rounds; r++) {
    weft_event_set(s->ev);   /* cancels the 8 timers (unless they fired) */
    weft_event_reset(s->ev);
    weft_sleep(WEFT_USEC);   /* the workers re-arm meanwhile */
  }
  s->elapsed = weft_now() - t0;
  weft_stats_get(NULL, 0, &s->st);
  s->st.timers_armed -= st0.timers_armed;
  s->st.timers_cancelled -= st0.timers_cancelled;
  s->st.timers_fired -= st0.timers_fired;
  s->st.enters -= st0.enters;
  s->st.parks -= st0.parks;
  atomic_store(&s->stop, true);
  weft_event_set(s->ev);
  for (int i = 0; i < WORKERS; i++)
    if (weft_join(w[i], NULL) != 0)
      return (void *)2;
  return NULL;
}

static int64_t nanosleep_rounds(int rounds)
{
  int64_t t0 = bench_now_ns();
  for (int r = 0; r < rounds; r++) {
    struct timespec ts = {0, 1000};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
  }
  return bench_now_ns() - t0;
}

static int bench_storm(bool quick)
{
  int reps = quick ? 5 : 15;
  double *v = calloc((size_t)reps, sizeof(double));
  double *ref = calloc((size_t)reps, sizeof(double));
  double *ns = calloc((size_t)reps, sizeof(double));
  struct storm best = {0};
  double best_v = 1e30;
  for (int k = 0; k < reps; k++) {
    struct storm s = {.rounds = ROUNDS};
    if (weft_event_create(&s.ev, 0) != 0)
      return 1;
    weft_config c;
    weft_config_init(&c);
    c.shards = 1;
    void *ret = (void *)-1;
    int r = weft_run(&c, storm_main, &s, &ret);
    weft_event_destroy(s.ev);
    if (bench_uring_missing(r)) {
      printf("bench_timers: io_uring unavailable (%d), storm skipped\n", r);
      return BENCH_SKIP;
    }
    if (r != 0 || ret != NULL) {
      fprintf(stderr, "bench_timers: storm failed (%d, %p)\n", r, ret);
      return 1;
    }
    v[k] = (double)s.elapsed / ROUNDS;
    ref[k] = clock_batch(ROUNDS * (WORKERS + 1)) * (WORKERS + 1);
    ns[k] = (double)nanosleep_rounds(ROUNDS) / ROUNDS;
    if (v[k] < best_v) {
      best_v = v[k];
      best = s;
    }
  }
  double rv = bench_min(ref, (size_t)reps);
  double med = bench_median(v, (size_t)reps);
  bench_print("timers", "storm_round_ns", best_v, "clock_gettime_x9_ns", rv, best_v / rv,
              ",\"median_ns\":%.1f,\"nanosleep_1us_round_ns\":%.1f,\"rounds\":%d,"
              "\"timers_per_round\":%d,\"total_ms\":%.3f,"
              "\"armed\":%llu,\"cancelled\":%llu,\"fired\":%llu,\"late_timeouts\":%d,"
              "\"enters_per_round\":%.2f,\"parks_per_round\":%.2f",
              med, bench_min(ns, (size_t)reps), ROUNDS, WORKERS + 1, best_v * ROUNDS / 1e6,
              (unsigned long long)best.st.timers_armed,
              (unsigned long long)best.st.timers_cancelled,
              (unsigned long long)best.st.timers_fired, atomic_load(&best.timeouts),
              (double)best.st.enters / ROUNDS, (double)best.st.parks / ROUNDS);
  free(v);
  free(ref);
  free(ns);
  return 0;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("bench_timers", quick ? 60 : 300);
  int r = bench_heap(quick);
  if (r != 0)
    return r;
  return bench_storm(quick);
}
