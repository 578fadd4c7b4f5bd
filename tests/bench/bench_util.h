/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the benchmark programs: --quick, clocks, order
 * statistics over repeated samples, and the one-JSON-line-per-result output
 * of DESIGN.md section 5:
 *   {"bench":..,"metric":..,"value":..,"ref":..,"ref_value":..,"ratio":..}
 * followed by optional extra fields.
 *
 * Samples are taken in several batches and summarised by the best (minimum)
 * batch: on a shared, noisy 2-core machine the minimum is the value least
 * disturbed by other processes, and the reference is summarised the same
 * way so that the ratio compares like with like. Medians go in extra fields.
 * (coldstart, whose samples are whole start-to-stop cycles, reports medians.)
 */
#ifndef WEFT_BENCH_UTIL_H
#define WEFT_BENCH_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* True if --quick is among the arguments; any other argument is an error. */
static inline bool bench_quick(int argc, char **argv)
{
  bool quick = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      exit(2);
    }
  }
  return quick;
}

static inline int64_t bench_clock_ns(clockid_t clk)
{
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wall time (CLOCK_MONOTONIC, the clock weft uses). */
static inline int64_t bench_now_ns(void)
{
  return bench_clock_ns(CLOCK_MONOTONIC);
}

/* CPU time used by every thread of the process so far. */
static inline int64_t bench_cpu_ns(void)
{
  return bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

static inline int bench_cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v in place and returns its median (n > 0). */
static inline double bench_median(double *v, size_t n)
{
  qsort(v, n, sizeof(*v), bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline double bench_min(const double *v, size_t n)
{
  double m = v[0];
  for (size_t i = 1; i < n; i++)
    if (v[i] < m)
      m = v[i];
  return m;
}

/* Prints one result line. `extra` is printf-style text inserted after the
 * standard fields (start it with a comma, e.g. ",\"median\":%.1f"), or NULL.
 * The ratio is passed in rather than computed: a result without a reference
 * ("none", 0) reports value / target instead. */
static inline void bench_print(const char *bench, const char *metric, double value,
                               const char *ref, double ref_value, double ratio,
                               const char *extra, ...)
{
  printf("{\"bench\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"ref\":\"%s\","
         "\"ref_value\":%.3f,\"ratio\":%.3f",
         bench, metric, value, ref, ref_value, ratio);
  if (extra) {
    va_list ap;
    va_start(ap, extra);
    vprintf(extra, ap);
    va_end(ap);
  }
  printf("}\n");
  fflush(stdout);
}

static const char *bench_watchdog_name = "bench";

static void bench_watchdog_fire(int sig)
{
  (void)sig;
  /* Only async-signal-safe calls here. */
  static const char msg[] = ": watchdog expired: the benchmark hung (lost wake-up?)\n";
  ssize_t r = write(2, bench_watchdog_name, strlen(bench_watchdog_name));
  r = write(2, msg, sizeof(msg) - 1);
  (void)r; /* nothing to do about a failed write: we exit either way */
  _exit(1);
}

/* Ends the process with status 1 and a message if it is still running after
 * `seconds`: a benchmark that hangs (a lost wake-up in the runtime) must fail
 * visibly instead of eating the harness's timeout. */
static inline void bench_watchdog(const char *name, unsigned seconds)
{
  bench_watchdog_name = name;
  signal(SIGALRM, bench_watchdog_fire);
  alarm(seconds);
}

/* Exit status for "this machine cannot run the benchmark" (meson: skipped). */
#define BENCH_SKIP 77

/* weft_run / weft_runtime_start results that mean io_uring is not usable. */
static inline bool bench_uring_missing(int r)
{
  return r == -EPERM || r == -ENOSYS;
}

#endif
