/* SPDX-License-Identifier: MIT */
#include "futex.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int weft__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline)
{
  struct timespec ts, *tsp = NULL;
  if (deadline >= 0) {
    ts.tv_sec = deadline / 1000000000;
    ts.tv_nsec = deadline % 1000000000;
    tsp = &ts;
  }
  /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time. The
   * caller's errno is left as it was. */
  int saved = errno;
  long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
                   expected, tsp, NULL, FUTEX_BITSET_MATCH_ANY);
  int e = r == 0 ? 0 : errno;
  errno = saved;
  if (e == 0 || e == EAGAIN)
    return 0;
  return -e;
}

void weft__futex_wake(_Atomic uint32_t *word, int n)
{
  int saved = errno;
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n < 0 ? INT_MAX : n,
          NULL, NULL, 0);
  errno = saved;
}
