/* SPDX-License-Identifier: MIT */
/*
 * What the two files of libweft-hook share (hook.c: descriptors, sockets,
 * name lookups and sleeps; hook_wait.c: poll, select and epoll): the next
 * definitions of the hooked symbols, whether the caller is a coroutine,
 * weft's results as libc's, and times. Each file looks up, with NEXT(), the
 * next definitions of the symbols it defines.
 */
#ifndef WEFT_LIB_HOOK_INTERNAL_H
#define WEFT_LIB_HOOK_INTERNAL_H

#include "weft.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* glibc's sockaddr arguments are a transparent union under _GNU_SOURCE. */
#if defined(__USE_GNU) && defined(__GNUC__) && !defined(__cplusplus)
#define SA(a) ((a).__sockaddr__)
#else
#define SA(a) (a)
#endif

#define HOOK __attribute__((visibility("default")))

/* ---- the next definitions ------------------------------------------------------ */

/* Looked up on first use (a call may come before any constructor runs);
 * two threads racing to it store the same value. */
#define NEXT(ret, name, params)                                                               \
  typedef ret(*name##_fn) params;                                                             \
  static _Atomic(name##_fn) next_##name##_p;                                                  \
  static name##_fn next_##name(void)                                                          \
  {                                                                                           \
    name##_fn f = atomic_load_explicit(&next_##name##_p, memory_order_relaxed);               \
    if (!f) {                                                                                 \
      void *sym = dlsym(RTLD_NEXT, #name);                                                    \
      memcpy(&f, &sym, sizeof(f));                                                            \
      atomic_store_explicit(&next_##name##_p, f, memory_order_relaxed);                       \
    }                                                                                         \
    return f;                                                                                 \
  }

/* Only if the dynamic linker found no next definition at all. */
static inline long no_next(void)
{
  errno = ENOSYS;
  return -1;
}

#define CALL_NEXT(name, ...) (next_##name() ? next_##name()(__VA_ARGS__) : no_next())

/* True in a coroutine, which from then on stays on its shard (legacy code
 * keeps errno's address across its calls: see the top of this file). */
static inline bool in_coroutine(void)
{
  return weft_task_pin() >= 0;
}

/* weft's -errno results as libc's. */
static inline long libc_result(long r)
{
  if (r >= 0)
    return r;
  errno = (int)-r;
  return -1;
}

/* weft's -EBUSY of a shard whose submission queue stayed full: nothing was
 * done, and no call the hook stands for ever says EBUSY - code written for
 * libc takes it for a hard error. The shard makes room as it reaps its
 * completions, which it does while the caller yields: true (try again)
 * after a yield for that -EBUSY. A cancel or a deadline scope that ends
 * meanwhile fails the next try at once, before the ring is asked. Only
 * for weft calls whose -EBUSY cannot be the kernel's (see hook.c). */
static inline bool sq_was_full(long r)
{
  if (r != -EBUSY)
    return false;
  (void)weft_yield();
  return true;
}

/* ---- times ------------------------------------------------------------------------- */

/* now + ns, saturating. */
static inline int64_t after(int64_t ns)
{
  int64_t now = weft_now();
  return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}

/* What is left until `end`, 0 once it has passed. */
static inline int64_t left_until(int64_t end)
{
  int64_t left = end - weft_now();
  return left < 0 ? 0 : left;
}

static inline bool timespec_valid(const struct timespec *ts)
{
  return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000;
}

/* A valid relative timespec in ns, saturating. */
static inline int64_t timespec_ns(const struct timespec *ts)
{
  return ts->tv_sec > (INT64_MAX - ts->tv_nsec) / WEFT_SEC
             ? INT64_MAX
             : (int64_t)ts->tv_sec * WEFT_SEC + ts->tv_nsec;
}

#endif
