/* SPDX-License-Identifier: MIT */
/*
 * idle: CPU used by a 2-shard runtime (default config) that has nothing to
 * do, as a percentage of one core. Design principle 3: an idle runtime must
 * not spin (spargio's shards spin at 100% each). Target <= 1%.
 *
 *  idle             no task at all;
 *  idle_sleeper     one task in a long weft_sleep (an armed timer far away);
 *  idle_timer_10ms  one task sleeping in a loop with a 10 ms period: 100
 *                   wake-ups a second, each followed by the shard's bounded
 *                   poll (spin_ns) before it sleeps again.
 *
 * The runtime settles for 100 ms, then the process's CPU time
 * (CLOCK_PROCESS_CPUTIME_ID, every thread) is measured over 1 s of wall time
 * (0.5 s with --quick) while the calling thread sleeps. There is no
 * reference: ref is "none" and ratio = value / 1.0 (the target). For the
 * timer variant an extra field gives the floor the platform sets: a plain
 * thread doing clock_nanosleep(10 ms) in a loop, measured the same way
 * (on a VM each wake-up from idle costs tens of microseconds of CPU).
 */
#include "bench_util.h"

#include "weft.h"

#include <pthread.h>
#include <stdatomic.h>

#define TARGET_PCT 1.0

static void *sleep_long(void *arg)
{
  (void)arg;
  weft_sleep(3600 * WEFT_SEC); /* until cancelled */
  return NULL;
}

static void *sleep_10ms_loop(void *arg)
{
  (void)arg;
  while (weft_sleep(10 * WEFT_MSEC) == 0)
    ;
  return NULL;
}

static void sleep_ns(int64_t ns)
{
  struct timespec ts = {.tv_sec = ns / WEFT_SEC, .tv_nsec = ns % WEFT_SEC};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
    ;
}

static atomic_bool plain_stop;

static void *plain_sleep_loop(void *arg)
{
  (void)arg;
  while (!atomic_load(&plain_stop))
    sleep_ns(10 * WEFT_MSEC);
  return NULL;
}

/* CPU percentage of a plain thread sleeping 10 ms in a loop; -1 on error. */
static double plain_loop_pct(int64_t window_ns)
{
  pthread_t th;
  atomic_store(&plain_stop, false);
  if (pthread_create(&th, NULL, plain_sleep_loop, NULL))
    return -1;
  sleep_ns(100 * WEFT_MSEC);
  int64_t c0 = bench_cpu_ns(), w0 = bench_now_ns();
  sleep_ns(window_ns);
  int64_t c1 = bench_cpu_ns(), w1 = bench_now_ns();
  atomic_store(&plain_stop, true);
  pthread_join(th, NULL);
  return 100.0 * (double)(c1 - c0) / (double)(w1 - w0);
}

/* Runs one variant (fn NULL = no task) and prints its line. */
static int measure(const char *name, void *(*fn)(void *), int64_t window_ns, double plain_pct)
{
  weft_runtime *rt;
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  int r = weft_runtime_start(&rt, &cfg);
  if (r < 0)
    return r;
  weft_task *t = NULL;
  if (fn) {
    r = weft_runtime_submit(rt, NULL, fn, NULL, &t);
    if (r < 0) {
      weft_runtime_stop(rt);
      return r;
    }
  }
  sleep_ns(100 * WEFT_MSEC);

  weft_stats s0, s1;
  weft_stats_get(rt, -1, &s0);
  int64_t c0 = bench_cpu_ns(), w0 = bench_now_ns();
  sleep_ns(window_ns);
  int64_t c1 = bench_cpu_ns(), w1 = bench_now_ns();
  weft_stats_get(rt, -1, &s1);

  if (t) {
    weft_cancel(t);
    weft_join(t, NULL); /* from this plain thread: blocks until it returned */
  }
  /* weft_join() returns as soon as the task's joiners are released, a moment
   * before its shard takes it off the live count: give it a bounded while. */
  weft_stats live;
  for (int i = 0; i < 1000; i++) {
    weft_stats_get(rt, -1, &live);
    if (live.live == 0)
      break;
    sleep_ns(WEFT_MSEC);
  }
  weft_runtime_stop(rt);
  if (live.live != 0) {
    fprintf(stderr, "idle: %llu tasks still live after join\n", (unsigned long long)live.live);
    return -EBUSY;
  }

  double secs = (double)(w1 - w0) / 1e9;
  double pct = 100.0 * (double)(c1 - c0) / (double)(w1 - w0);
  char extra[64] = "";
  if (plain_pct >= 0)
    snprintf(extra, sizeof(extra), ",\"plain_sleep_loop_pct\":%.3f", plain_pct);
  bench_print(name, "cpu_pct", pct, "none", 0.0, pct / TARGET_PCT,
              ",\"window_s\":%.2f,\"target_pct\":%.1f,\"target_met\":%s,"
              "\"parks_per_s\":%.1f,\"enters_per_s\":%.1f,\"timers_fired_per_s\":%.1f%s",
              secs, TARGET_PCT, pct <= TARGET_PCT ? "true" : "false",
              (double)(s1.parks - s0.parks) / secs, (double)(s1.enters - s0.enters) / secs,
              (double)(s1.timers_fired - s0.timers_fired) / secs, extra);
  return 0;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("idle", quick ? 30 : 120);
  int64_t window = quick ? WEFT_SEC / 2 : WEFT_SEC;
  static const struct {
    const char *name;
    void *(*fn)(void *);
  } runs[] = {
    {"idle", NULL},
    {"idle_sleeper", sleep_long},
    {"idle_timer_10ms", sleep_10ms_loop},
  };
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    double plain_pct = -1;
    if (runs[i].fn == sleep_10ms_loop && (plain_pct = plain_loop_pct(window)) < 0) {
      fprintf(stderr, "idle: pthread_create failed\n");
      return 1;
    }
    int r = measure(runs[i].name, runs[i].fn, window, plain_pct);
    if (bench_uring_missing(r)) {
      fprintf(stderr, "idle: io_uring unavailable (%d), skipped\n", r);
      return BENCH_SKIP;
    }
    if (r < 0) {
      fprintf(stderr, "idle: %s failed: %s\n", runs[i].name, weft_strerror(r));
      return 1;
    }
  }
  return 0;
}
