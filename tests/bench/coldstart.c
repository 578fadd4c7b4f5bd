/* SPDX-License-Identifier: MIT */
/*
 * coldstart: what a short-lived user of weft pays end to end. One sample =
 * weft_runtime_start (2 shards, default config) + 64 cross-shard round trips
 * between a task pinned to shard 0 and one pinned to shard 1 (two auto-reset
 * events) + joining both from the calling thread + weft_runtime_stop.
 * Reference, same shape with plain threads: pthread_create two threads that
 * do 64 futex round trips, then pthread_join both.
 * value = median sample in microseconds (min and p90 as extra fields).
 */
#include "bench_util.h"

#include "weft.h"

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TRIPS 64
#define MAX_SAMPLES 400

struct summary {
  double median, min, p90;
};

static struct summary summarise(double *v, int n)
{
  struct summary s;
  s.median = bench_median(v, (size_t)n); /* sorts v */
  s.min = v[0];
  s.p90 = v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
  return s;
}

/* ---- weft ------------------------------------------------------------------------ */

static weft_event *ev_ping, *ev_pong;

static void *pinger(void *arg)
{
  (void)arg;
  for (int i = 0; i < TRIPS; i++) {
    weft_event_set(ev_pong);
    int r = weft_event_wait(ev_ping);
    if (r < 0)
      return (void *)(intptr_t)r;
  }
  return NULL;
}

static void *ponger(void *arg)
{
  (void)arg;
  for (int i = 0; i < TRIPS; i++) {
    int r = weft_event_wait(ev_pong);
    if (r < 0)
      return (void *)(intptr_t)r;
    weft_event_set(ev_ping);
  }
  return NULL;
}

static int submit_pinned(weft_runtime *rt, int shard, void *(*fn)(void *), weft_task **t)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = shard;
  return weft_runtime_submit(rt, &o, fn, NULL, t);
}

/* One sample in ns, or a -errno. */
static int64_t weft_cold_run(void)
{
  int64_t t0 = bench_now_ns();
  weft_runtime *rt;
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  int r = weft_runtime_start(&rt, &cfg);
  if (r < 0)
    return r;
  weft_task *a, *b;
  r = submit_pinned(rt, 1, ponger, &b);
  if (r == 0) {
    r = submit_pinned(rt, 0, pinger, &a);
    if (r < 0)
      weft_cancel(b);
    void *ra = NULL, *rb = NULL;
    if (r == 0)
      weft_join(a, &ra);
    weft_join(b, &rb);
    if (r == 0)
      r = ra ? (int)(intptr_t)ra : (int)(intptr_t)rb;
  }
  weft_runtime_stop(rt);
  int64_t t1 = bench_now_ns();
  return r < 0 ? r : t1 - t0;
}

/* ---- reference: two plain threads and futexes --------------------------------------- */

static _Alignas(64) _Atomic uint32_t fx_ping;
static _Alignas(64) _Atomic uint32_t fx_pong;

static void fx_wait(_Atomic uint32_t *w)
{
  while (atomic_load_explicit(w, memory_order_acquire) == 0)
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  atomic_store_explicit(w, 0, memory_order_relaxed);
}

static void fx_post(_Atomic uint32_t *w)
{
  atomic_store_explicit(w, 1, memory_order_release);
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *fx_pinger(void *arg)
{
  for (int i = 0; i < TRIPS; i++) {
    fx_post(&fx_pong);
    fx_wait(&fx_ping);
  }
  return arg;
}

static void *fx_ponger(void *arg)
{
  for (int i = 0; i < TRIPS; i++) {
    fx_wait(&fx_pong);
    fx_post(&fx_ping);
  }
  return arg;
}

static int64_t threads_once(void)
{
  int64_t t0 = bench_now_ns();
  pthread_t a, b;
  if (pthread_create(&b, NULL, fx_ponger, NULL))
    return -EAGAIN;
  if (pthread_create(&a, NULL, fx_pinger, NULL)) {
    pthread_cancel(b);
    pthread_join(b, NULL);
    return -EAGAIN;
  }
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  return bench_now_ns() - t0;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("coldstart", quick ? 30 : 120);
  int n = quick ? 40 : MAX_SAMPLES;
  double wv[MAX_SAMPLES], tv[MAX_SAMPLES];

  int r = weft_event_create(&ev_ping, WEFT_EVENT_AUTO_RESET);
  if (r == 0)
    r = weft_event_create(&ev_pong, WEFT_EVENT_AUTO_RESET);
  if (r < 0) {
    fprintf(stderr, "coldstart: %s\n", weft_strerror(r));
    return 1;
  }
  /* Interleaved, after one untimed warm-up of each, so that drift in the
   * machine's load hits both alike. */
  for (int i = -1; i < n; i++) {
    int64_t w = weft_cold_run();
    if (w < 0 && bench_uring_missing((int)w)) {
      fprintf(stderr, "coldstart: io_uring unavailable (%d), skipped\n", (int)w);
      return BENCH_SKIP;
    }
    if (w < 0) {
      fprintf(stderr, "coldstart: weft: %s\n", weft_strerror((int)w));
      return 1;
    }
    int64_t t = threads_once();
    if (t < 0) {
      fprintf(stderr, "coldstart: pthread_create failed\n");
      return 1;
    }
    if (i >= 0) {
      wv[i] = (double)w / 1e3;
      tv[i] = (double)t / 1e3;
    }
  }
  weft_event_destroy(ev_ping);
  weft_event_destroy(ev_pong);

  struct summary ws = summarise(wv, n), ts = summarise(tv, n);
  bench_print("coldstart", "start_64rtt_stop_us", ws.median, "threads_futex_64rtt_us", ts.median,
              ws.median / ts.median,
              ",\"samples\":%d,\"min\":%.1f,\"p90\":%.1f,\"ref_min\":%.1f,\"ref_p90\":%.1f", n,
              ws.min, ws.p90, ts.min, ts.p90);
  return 0;
}
