/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the runtime and sync suites.
 *
 * Criterion's cr_assert() ends a test with a longjmp on the test's own
 * thread, so it must never fail inside a coroutine or a helper thread. Code
 * running there checks with CO_CHECK / CO_EQ, which record the first failure
 * (with its location and values); the test body then calls rt_assert_clean()
 * on its own thread. Each Criterion test runs in its own process, so the
 * record starts empty for every test.
 */
#ifndef WEFT_TESTS_RT_HELPERS_H
#define WEFT_TESTS_RT_HELPERS_H

#include "weft.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- failures seen off the test thread ------------------------------------ */

static pthread_mutex_t rt_fail_lock = PTHREAD_MUTEX_INITIALIZER;
static char rt_fail_msg[512];
static atomic_int rt_failures;

__attribute__((format(printf, 3, 4))) static inline void rt_fail(const char *file, int line,
                                                                  const char *fmt, ...)
{
  pthread_mutex_lock(&rt_fail_lock);
  if (atomic_fetch_add(&rt_failures, 1) == 0) {
    int n = snprintf(rt_fail_msg, sizeof(rt_fail_msg), "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt_fail_msg + n, sizeof(rt_fail_msg) - (size_t)n, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&rt_fail_lock);
}

#define CO_CHECK(cond)                                                                        \
  do {                                                                                        \
    if (!(cond))                                                                              \
      rt_fail(__FILE__, __LINE__, "check failed: %s", #cond);                                 \
  } while (0)

#define CO_EQ(actual, expected)                                                               \
  do {                                                                                        \
    long long co_a_ = (long long)(actual), co_e_ = (long long)(expected);                     \
    if (co_a_ != co_e_)                                                                       \
      rt_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", #actual, co_a_,          \
              #expected, co_e_);                                                              \
  } while (0)

/* Reports (on the test thread) the first failure recorded elsewhere. */
static inline void rt_assert_clean(void)
{
  int n = atomic_load(&rt_failures);
  cr_assert_eq(n, 0, "%d check(s) failed off the test thread; first: %s", n, rt_fail_msg);
}

/* Under ASan: fails the test if memory is unreachable right now. (LSan's
 * report at process exit comes after Criterion has taken the result.) */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static inline void rt_assert_no_leaks(void)
{
  cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks (see stderr)");
}
#else
static inline void rt_assert_no_leaks(void)
{
}
#endif

/* ---- starting and stopping ---------------------------------------------------- */

/* io_uring disabled by sysctl or seccomp, or a kernel without it: skip. */
#define RT_SKIP_IF_NO_URING(r)                                                                \
  do {                                                                                        \
    if ((r) == -EPERM || (r) == -ENOSYS)                                                      \
      cr_skip_test("io_uring is not available here (%s)", weft_strerror(r));                  \
  } while (0)

static inline void rt_cfg(weft_config *c, int shards)
{
  weft_config_init(c);
  c->shards = shards;
}

/* weft_run() that must succeed; returns main's result. */
static inline void *rt_run(int shards, void *(*fn)(void *), void *arg)
{
  weft_config c;
  rt_cfg(&c, shards);
  void *ret = (void *)(intptr_t)-12345;
  int r = weft_run(&c, fn, arg, &ret);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0, "weft_run: %s", weft_strerror(r));
  return ret;
}

static inline weft_runtime *rt_start_cfg(const weft_config *c)
{
  weft_runtime *rt = NULL;
  int r = weft_runtime_start(&rt, c);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0, "weft_runtime_start: %s", weft_strerror(r));
  cr_assert_not_null(rt);
  return rt;
}

static inline weft_runtime *rt_start(int shards)
{
  weft_config c;
  rt_cfg(&c, shards);
  return rt_start_cfg(&c);
}

static inline uint64_t rt_live(weft_runtime *rt)
{
  weft_stats s;
  return weft_stats_get(rt, -1, &s) == 0 ? s.live : UINT64_MAX;
}

/* Submits fn(arg) to `shard` of rt, pinned there, from a plain thread. */
static inline weft_task *rt_submit_on(weft_runtime *rt, int shard, void *(*fn)(void *), void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = shard;
  weft_task *t = NULL;
  int r = weft_runtime_submit(rt, &o, fn, arg, &t);
  cr_assert_eq(r, 0, "weft_runtime_submit: %s", weft_strerror(r));
  return t;
}

/* The clean-shutdown check: nothing alive any more, then a stop that works.
 * A joiner is released just before its task leaves the live count, so the
 * count may lag a join by a moment: poll it. */
static inline void rt_stop_idle(weft_runtime *rt)
{
  for (int i = 0; i < 100000 && rt_live(rt) != 0; i++)
    weft_sleep(100 * WEFT_USEC);
  uint64_t live = rt_live(rt);
  cr_assert_eq(live, 0, "%llu task(s) still alive before stop", (unsigned long long)live);
  cr_assert_eq(weft_runtime_stop(rt), 0);
}

/* ---- inside coroutines ---------------------------------------------------------- */

static inline int rt_spawn(weft_task **t, int placement, int shard, void *(*fn)(void *),
                           void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = placement;
  o.shard = shard;
  return weft_spawn(t, &o, fn, arg);
}

/* Joins t and returns its result as an integer; a failed join is recorded. */
static inline intptr_t rt_join_int(weft_task *t)
{
  void *v = (void *)(intptr_t)-1;
  int r = weft_join(t, &v);
  CO_EQ(r, 0);
  return (intptr_t)v;
}

/* Polls `cond` (sleeping 100 us between looks, on a coroutine or a thread)
 * for at most about 10 s; the value of `cond` at the end. */
#define RT_POLL(cond)                                                                         \
  __extension__({                                                                             \
    bool rt_ok_ = false;                                                                      \
    for (int rt_i_ = 0; rt_i_ < 100000 && !(rt_ok_ = (cond)); rt_i_++)                        \
      weft_sleep(100 * WEFT_USEC);                                                            \
    rt_ok_;                                                                                   \
  })

/* ---- what a plain thread is doing ------------------------------------------ */

/* This thread's id, for rt_thread_in_syscall. */
static inline pid_t rt_gettid(void)
{
  return (pid_t)syscall(SYS_gettid);
}

/* Whether thread `tid` of this process sleeps in system call `nr` now
 * (/proc/.../syscall starts with the number of the call it is in; "running"
 * when it is not in one). */
static inline bool rt_thread_in_syscall(pid_t tid, long nr)
{
  char path[64], buf[64] = "";
  snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  bool got = fgets(buf, sizeof(buf), f) != NULL;
  fclose(f);
  return got && buf[0] >= '0' && buf[0] <= '9' && atol(buf) == nr;
}

/* Waits (about 10 s at most) until thread `tid` sleeps in system call nr:
 * the "other side is waiting now" of a test with a plain thread in it. */
#define RT_WAIT_IN_SYSCALL(tid, nr) RT_POLL(rt_thread_in_syscall((tid), (nr)))

/* Occurrences of `needle` in weft_dump(rt)'s output (-1 if the dump failed). */
static inline int rt_dump_count(weft_runtime *rt, const char *needle)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return -1;
  int r = weft_dump(rt, f);
  fclose(f);
  int n = 0;
  if (r >= 0)
    for (const char *p = buf; (p = strstr(p, needle)); p += strlen(needle))
      n++;
  free(buf);
  return r < 0 ? -1 : n;
}

/* Who will block, for a helper thread that must act only once it does: a
 * coroutine of `rt` (suspended), or plain thread `tid` (asleep in one of
 * the system calls the helper names). */
typedef struct rt_blocker {
  weft_runtime *rt; /* NULL: a plain thread */
  pid_t tid;
} rt_blocker;

/* The caller, as an rt_blocker. */
static inline rt_blocker rt_blocker_self(void)
{
  return (rt_blocker){.rt = weft_task_self() ? weft_runtime_current() : NULL,
                      .tid = rt_gettid()};
}

/* Waits (about 10 s at most) until b blocks: a task of its runtime is
 * suspended, or its thread sleeps in system call nr or nr2 (-1: none). */
static inline bool rt_wait_blocked(rt_blocker b, long nr, long nr2)
{
  if (b.rt)
    return RT_POLL(rt_dump_count(b.rt, " waiting") >= 1);
  return RT_POLL(rt_thread_in_syscall(b.tid, nr) ||
                 (nr2 >= 0 && rt_thread_in_syscall(b.tid, nr2)));
}

#endif
