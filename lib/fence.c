/* SPDX-License-Identifier: MIT */
/* Asymmetric fences through membarrier(2); see fence.h. */
#include "fence.h"

#include "../coro/fault.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

atomic_bool weft__fence_asymmetric;

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* membarrier(2) without touching the caller's errno: 0 or -errno. */
static int membarrier(int cmd)
{
  int saved = errno;
  long r = syscall(SYS_membarrier, cmd, 0, 0);
  int e = r < 0 ? errno : 0;
  errno = saved;
  return -e;
}

static void setup(void)
{
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
    atomic_store(&weft__fence_asymmetric, true);
}

void weft__fence_init(void)
{
  pthread_once(&once, setup);
}

void weft__fence_force_symmetric(void)
{
  pthread_once(&once, setup);
  atomic_store(&weft__fence_asymmetric, false);
}

void weft__fence_heavy(void)
{
  if (!atomic_load_explicit(&weft__fence_asymmetric, memory_order_relaxed)) {
    atomic_thread_fence(memory_order_seq_cst);
    return;
  }
  /* Registered, so the kernel refuses only for want of memory (the cpumask
   * it allocates per call, on kernels built with CPUMASK_OFFSTACK): wait
   * and try again - the barrier cannot be skipped. Anything else (a seccomp
   * filter installed since) leaves the frequent side's compiler barriers
   * without their other half, and nothing safe to fall back on. */
  int r;
  while ((r = weft__fault_hit(WEFT__FAULT_MEMBARRIER)
                  ? -ENOMEM
                  : membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)) == -ENOMEM ||
         r == -EINTR || r == -EAGAIN) {
    /* clock_nanosleep, not nanosleep: libweft-hook routes nanosleep in a
     * coroutine to weft_sleep, and this wait must not suspend. */
    struct timespec pause = {0, 100000}; /* 100 us */
    clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, NULL); /* leaves errno alone */
  }
  if (r < 0) {
    fprintf(stderr, "weft: membarrier failed after registration (%d)\n", r);
    abort();
  }
}
