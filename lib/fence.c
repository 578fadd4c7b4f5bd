/* SPDX-License-Identifier: MIT */
/* Asymmetric fences through membarrier(2); see fence.h. */
#include "fence.h"

#include "../coro/fault.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
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

/* Where membarrier is refused after a successful registration - a seccomp
 * filter a sandboxed server installs once it has started - the rare side
 * still has a way to make every running thread of the process pass through
 * a full barrier on x86: a TLB shootdown. Taking a present, writable page
 * away makes the kernel flush it on every CPU that runs one of our threads,
 * by an interrupt it waits for; an interrupt drains that CPU's store buffer.
 * A thread of ours not running has been switched out since its last store,
 * which is a barrier too (a vCPU preempted by its host likewise left the
 * guest through a serializing exit). This is the argument membarrier's own
 * first implementation made, and what other runtimes fall back on. Where it
 * does not hold (weak TLB broadcast without interrupts, as on arm64), there
 * is no such way, and the process stops rather than run unfenced. */
#if defined(__x86_64__) || defined(__i386__)
#define HAVE_SHOOTDOWN 1
#else
#define HAVE_SHOOTDOWN 0
#endif

static void *shootdown_page;
static size_t shootdown_size;
static pthread_mutex_t shootdown_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool membarrier_refused;
atomic_uint_least64_t weft__fence_shootdowns;

/* 0, or -errno if the page could not be made writable and taken back. */
static int fence_by_shootdown(void)
{
  if (!HAVE_SHOOTDOWN || !shootdown_page)
    return -ENOSYS;
  int saved = errno, r = 0;
  pthread_mutex_lock(&shootdown_lock);
  if (mprotect(shootdown_page, shootdown_size, PROT_READ | PROT_WRITE) != 0) {
    r = -errno;
  } else {
    /* Present and dirty: now every CPU that may hold it must be told. */
    *(volatile char *)shootdown_page = 1;
    if (mprotect(shootdown_page, shootdown_size, PROT_NONE) != 0)
      r = -errno;
  }
  pthread_mutex_unlock(&shootdown_lock);
  errno = saved;
  if (r == 0)
    atomic_fetch_add_explicit(&weft__fence_shootdowns, 1, memory_order_relaxed);
  return r;
}

static void setup(void)
{
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0)
    return;
  if (HAVE_SHOOTDOWN) {
    /* Mapped now, while nothing forbids it: the fallback then needs only
     * mprotect. */
    int saved = errno;
    long ps = sysconf(_SC_PAGESIZE);
    shootdown_size = ps > 0 ? (size_t)ps : 4096;
    void *p = mmap(NULL, shootdown_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    shootdown_page = p == MAP_FAILED ? NULL : p;
    errno = saved;
  }
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
  /* Our own half needs no fence of its own: membarrier(2) is a full
   * barrier for its caller too, and the shootdown takes a lock. */
  int r = -EPERM;
  if (!atomic_load_explicit(&membarrier_refused, memory_order_relaxed)) {
    /* Registered, so the kernel refuses for want of memory (the cpumask it
     * allocates per call, on kernels built with CPUMASK_OFFSTACK): wait and
     * try again - the barrier cannot be skipped. */
    while ((r = weft__fault_hit(WEFT__FAULT_MEMBARRIER)
                    ? -ENOMEM
                    : membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)) == -ENOMEM ||
           r == -EINTR || r == -EAGAIN) {
      /* clock_nanosleep, not nanosleep: libweft-hook routes nanosleep in a
       * coroutine to weft_sleep, and this wait must not suspend. */
      struct timespec pause = {0, 100000}; /* 100 us */
      clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, NULL); /* leaves errno alone */
    }
    if (r == 0)
      return;
    /* Anything else is for good (a seccomp filter installed since). */
    atomic_store_explicit(&membarrier_refused, true, memory_order_relaxed);
  }
  int s = fence_by_shootdown();
  if (s < 0) {
    fprintf(stderr, "weft: membarrier failed after registration (%d), and no TLB shootdown (%d)\n",
            r, s);
    abort();
  }
}
