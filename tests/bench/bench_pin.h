/* SPDX-License-Identifier: MIT */
/*
 * Two-sided benchmarks (a ping and a pong, a producer and a consumer) pin
 * their two sides - weft shards through weft_config.cpus, plain threads
 * here - to two distinct CPUs the process may use, so that the weft side and
 * the reference measured in the same run get the same placement. With fewer
 * than two CPUs allowed nothing is pinned.
 */
#ifndef WEFT_BENCH_PIN_H
#define WEFT_BENCH_PIN_H

#include <pthread.h>
#include <sched.h>

static int pin_cpus[2];
static int pin_n; /* 2 when pinning, else 0 */

/* Picks the first two allowed CPUs (call once, before starting anything). */
static inline void choose_cpus(void)
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return;
  for (int c = 0; c < CPU_SETSIZE && pin_n < 2; c++)
    if (CPU_ISSET(c, &set))
      pin_cpus[pin_n++] = c;
  if (pin_n < 2)
    pin_n = 0;
}

/* Pins the calling thread to side 0 or 1's CPU. */
static inline void pin_self(int side)
{
  if (pin_n != 2)
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(pin_cpus[side], &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* pthread_create with the thread pinned to side 0 or 1's CPU from its start. */
static inline int start_pinned(pthread_t *th, int side, void *(*fn)(void *), void *arg)
{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (pin_n == 2) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pin_cpus[side], &set);
    pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
  }
  int e = pthread_create(th, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return e;
}

#endif
