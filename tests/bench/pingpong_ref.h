/* SPDX-License-Identifier: MIT */
/*
 * What the ping-pong benchmarks (pingpong.c, chan_pingpong.c) share: batch
 * parameters and summaries, CPU pinning of the two sides, and the two
 * references measured in the same run - two plain threads bouncing a
 * counter on one cache line (busy) and waking each other with futexes
 * (parked).
 */
#ifndef WEFT_BENCH_PINGPONG_REF_H
#define WEFT_BENCH_PINGPONG_REF_H

#include "bench_util.h"
#include "bench_pin.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_BATCHES 32

struct params {
  int warm;     /* round trips before timing */
  int iters;    /* round trips per timed batch */
  int batches;
};

struct result {
  double best, median; /* ns per round trip over the batches */
  double slept_share;  /* futex reference: the share of timed round trips in
                          which the pinger really slept; -1 for the others */
};

static struct result summarise(double *samples, int n)
{
  struct result r = {.best = bench_min(samples, (size_t)n), .slept_share = -1};
  r.median = bench_median(samples, (size_t)n);
  return r;
}

/* ---- placement ---------------------------------------------------------------
 * Both sides are pinned to two distinct CPUs (the first two this process may
 * use), the shards as well as the reference threads: unpinned, the kernel
 * sometimes puts both on one CPU, where a futex hand-off is a cheap local
 * context switch and spinning is hopeless, and the numbers become a lottery. */

/* ---- references: two plain threads ------------------------------------------------ */

struct ref_run {
  const struct params *p;
  double samples[MAX_BATCHES];
  long slept[MAX_BATCHES]; /* futex reference: round trips the pinger slept in */
};

static long total_trips(const struct params *p)
{
  return (long)p->warm + (long)p->iters * p->batches;
}

/* Runs `pinger` (which fills r.samples) on side 0 against `echo` on side 1. */
static int run_ref(void *(*pinger)(void *), void *(*echo)(void *), const struct params *p,
                   struct result *out)
{
  struct ref_run r = {.p = p};
  pthread_t a, b;
  if (start_pinned(&b, 1, echo, (void *)p))
    return -1;
  if (start_pinned(&a, 0, pinger, &r)) {
    pthread_cancel(b);
    pthread_join(b, NULL);
    return -1;
  }
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  *out = summarise(r.samples, p->batches);
  /* The futex reference can run without sleeping: when each side's wake
   * finds the other still on its way into FUTEX_WAIT, both keep running and
   * a round trip is a few hundred ns - not the parked hand-off it is meant
   * to measure. Its best batch is still the one reported (keeping only the
   * batches that slept made the reference swing both ways, measured), with
   * the share of round trips in which the pinger really slept beside it. */
  long slept = 0;
  for (int i = 0; i < p->batches; i++)
    slept += r.slept[i];
  if (slept)
    out->slept_share = (double)slept / ((double)p->iters * p->batches);
  return 0;
}

/* Reference 1: a counter bounced on one cache line, both sides spinning. */
static _Alignas(64) _Atomic uint64_t line_seq;

static void *spin_echo(void *arg)
{
  uint64_t n = (uint64_t)total_trips(arg);
  for (uint64_t k = 0; k < n; k++) {
    while (atomic_load_explicit(&line_seq, memory_order_acquire) != 2 * k + 1)
      ;
    atomic_store_explicit(&line_seq, 2 * k + 2, memory_order_release);
  }
  return NULL;
}

static void spin_hop(uint64_t k)
{
  atomic_store_explicit(&line_seq, 2 * k + 1, memory_order_release);
  while (atomic_load_explicit(&line_seq, memory_order_acquire) != 2 * k + 2)
    ;
}

static void *spin_pinger(void *arg)
{
  struct ref_run *r = arg;
  uint64_t k = 0;
  for (int i = 0; i < r->p->warm; i++)
    spin_hop(k++);
  for (int b = 0; b < r->p->batches; b++) {
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < r->p->iters; i++)
      spin_hop(k++);
    r->samples[b] = (double)(bench_now_ns() - t0) / r->p->iters;
  }
  return NULL;
}

/* Reference 2: FUTEX_WAIT / FUTEX_WAKE on two words, nobody spinning. */
static _Alignas(64) _Atomic uint32_t fx_ping;
static _Alignas(64) _Atomic uint32_t fx_pong;

/* True if the thread really slept (FUTEX_WAIT returned after a wake-up
 * rather than finding the word already posted). */
static bool fx_wait(_Atomic uint32_t *w)
{
  bool slept = false;
  while (atomic_load_explicit(w, memory_order_acquire) == 0)
    if (syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0) == 0)
      slept = true;
  atomic_store_explicit(w, 0, memory_order_relaxed);
  return slept;
}

static void fx_post(_Atomic uint32_t *w)
{
  atomic_store_explicit(w, 1, memory_order_release);
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *futex_echo(void *arg)
{
  long n = total_trips(arg);
  for (long k = 0; k < n; k++) {
    fx_wait(&fx_ping);
    fx_post(&fx_pong);
  }
  return NULL;
}

static void *futex_pinger(void *arg)
{
  struct ref_run *r = arg;
  for (int i = 0; i < r->p->warm; i++) {
    fx_post(&fx_ping);
    fx_wait(&fx_pong);
  }
  for (int b = 0; b < r->p->batches; b++) {
    long slept = 0;
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < r->p->iters; i++) {
      fx_post(&fx_ping);
      slept += fx_wait(&fx_pong);
    }
    r->samples[b] = (double)(bench_now_ns() - t0) / r->p->iters;
    r->slept[b] = slept;
  }
  return NULL;
}

#endif
