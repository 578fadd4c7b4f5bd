/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the I/O-core suites (op, time, group, uring): pipes, a look
 * at what a pipe holds, weft_run with a custom config, and waiting until a
 * number of tasks sit suspended. Built on rt_helpers.h (CO_CHECK / CO_EQ
 * off the test thread, rt_assert_clean on it).
 */
#ifndef WEFT_TESTS_IO_HELPERS_H
#define WEFT_TESTS_IO_HELPERS_H

#include "rt_helpers.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* A pipe (close-on-exec); 0 or -errno. */
static inline int io_pipe(int p[2])
{
  return pipe2(p, O_CLOEXEC) == 0 ? 0 : -errno;
}

static inline void io_close_pipe(int p[2])
{
  close(p[0]);
  close(p[1]);
}

/* Bytes waiting in a pipe (FIONREAD), -1 on error. */
static inline int io_pending(int fd)
{
  int n = -1;
  return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
}

/* Blocks the calling thread (a coroutine's shard too) for ns: how a test
 * makes a coroutine "busy" past its deadlines without yielding. */
static inline void io_busy(int64_t ns)
{
  struct timespec ts = {.tv_sec = ns / WEFT_SEC, .tv_nsec = ns % WEFT_SEC};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
    ;
}

/* weft_run() with a caller's config that must succeed; returns main's result. */
static inline void *io_run_cfg(const weft_config *c, void *(*fn)(void *), void *arg)
{
  void *ret = (void *)(intptr_t)-12345;
  int r = weft_run(c, fn, arg, &ret);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0, "weft_run: %s", weft_strerror(r));
  return ret;
}

/* Inside a coroutine: true once at least n tasks of the current runtime
 * are suspended (polled for at most about 10 s). */
static inline bool io_wait_suspended(int n)
{
  return RT_POLL(rt_dump_count(NULL, " waiting") >= n);
}

/* The same for a plain thread watching runtime rt. */
static inline bool io_wait_suspended_rt(weft_runtime *rt, int n)
{
  return RT_POLL(rt_dump_count(rt, " waiting") >= n);
}

/* Spawns fn(arg) pinned to `shard`. */
static inline int io_spawn_on(weft_task **t, int shard, void *(*fn)(void *), void *arg)
{
  return rt_spawn(t, WEFT_PLACE_PINNED, shard, fn, arg);
}

/* Spawns fn(arg) pinned to `shard`, waits until it is suspended, cancels
 * it, and checks that both the join and fn's own result (an int returned as
 * a pointer: the blocking call's) are -ECANCELED. */
static inline void io_cancel_while_waiting(int shard, void *(*fn)(void *), void *arg)
{
  weft_task *t;
  CO_EQ(io_spawn_on(&t, shard, fn, arg), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED); /* the join reports the cancel */
  CO_EQ((intptr_t)v, -ECANCELED);      /* and so did the blocking call */
}

/* The sum of the counters of every shard of the current runtime. */
static inline weft_stats io_stats(void)
{
  weft_stats s;
  memset(&s, 0, sizeof(s));
  CO_EQ(weft_stats_get(NULL, -1, &s), 0);
  return s;
}

#endif
