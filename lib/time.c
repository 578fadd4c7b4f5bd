/* SPDX-License-Identifier: MIT */
/* The clock and sleeping. */
#include "core.h"

#include <errno.h>
#include <stdint.h>
#include <time.h>

int64_t weft__now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t weft_now(void)
{
  return weft__now();
}

int weft_sleep_until(int64_t deadline)
{
  if (!weft__task_self()) {
    /* A plain thread sleeps for real; signals do not cut the sleep short. */
    struct timespec ts = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000};
    if (deadline <= 0)
      return 0;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
      ;
    return 0;
  }
  /* A waiter on no queue: only its deadline (or a cancel) completes it. */
  weft__waiter w;
  weft__waiter_init(&w);
  if (deadline < 0)
    deadline = 0;
  int r = weft__waiter_wait(&w, deadline);
  /* Reaching our own deadline is success; a deadline scope that ends first
   * is a timeout. */
  if (r == -ETIMEDOUT && weft__now() >= deadline)
    return 0;
  return r;
}

int weft_sleep(int64_t ns)
{
  if (ns <= 0)
    return weft__ready_result();
  int64_t now = weft__now();
  return weft_sleep_until(weft__add_sat(now, ns));
}
