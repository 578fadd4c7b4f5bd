/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "recv_stream" (test_recv_stream_data.c,
 * test_recv_stream_edges.c): the path a test runs on and ON_EVERY_PATH
 * (one scenario as three tests), the multishot state expected on it, a
 * socketpair, the byte pattern, and the end-of-test checks that nothing of
 * a stream is left anywhere.
 */
#ifndef WEFT_TESTS_RECV_STREAM_TEST_H
#define WEFT_TESTS_RECV_STREAM_TEST_H

#include "io_helpers.h"

#include "fault.h"
#include "recv_stream_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

/* The path a test runs on (the hook's value; each test is its own process). */
static int path;

static inline void use_path(int p)
{
  path = p;
  atomic_store(&weft__recv_stream_force_fallback, p);
}

/* A scenario run(path) as three tests: the kernel path, and the two ways
 * a kernel can refuse it. */
#define ON_EVERY_PATH(name, run, secs)                                                        \
  Test(recv_stream, name, .timeout = secs) { run(WEFT__RS_FORCE_NONE); }                      \
  Test(recv_stream, name##_no_ring, .timeout = secs) { run(WEFT__RS_FORCE_NO_RING); }         \
  Test(recv_stream, name##_no_multishot, .timeout = secs) { run(WEFT__RS_FORCE_NO_MULTISHOT); }

/* What weft_recv_stream_multishot() says right after open, and after the
 * first next(). */
static inline int multishot_at_open(void)
{
  return path == WEFT__RS_FORCE_NO_RING ? 0 : 1;
}
static inline int multishot_later(void)
{
  return path == WEFT__RS_FORCE_NONE ? 1 : 0;
}

static inline int count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  int n = 0;
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

static inline uint8_t pat(uint64_t seed, size_t i)
{
  uint64_t x = (i + seed * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
  return (uint8_t)(x >> 56);
}

static inline int unix_pair(int fds[2])
{
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0 ? 0 : -errno;
}

/* The end-of-test checks: nothing of a stream is left anywhere. */
static inline void assert_all_gone(int fds_before)
{
  rt_assert_clean();
  cr_assert_eq(weft__recv_stream_groups_in_use(), 0);
  cr_assert_eq(count_fds(), fds_before);
  rt_assert_no_leaks();
}

/* Runs main(fds) on a fresh socket pair on the given path and checks that
 * nothing is left (main sets an end it closed itself to -1). */
static inline void run_on_pair(int fallback, int (*pair)(int[2]), int shards, void *(*main_fn)(void *))
{
  use_path(fallback);
  int before = count_fds();
  int fds[2];
  cr_assert_eq(pair(fds), 0);
  rt_run(shards, main_fn, fds);
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  assert_all_gone(before);
}

#endif
