/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "fs" (test_fs_io.c, test_fs_dirs.c,
 * test_fs_exec.c): the per-test directory (root, made by the suite's
 * setup in test_fs_io.c), paths under it, the pool job counter and the
 * byte pattern.
 */
#ifndef WEFT_TESTS_FS_TEST_H
#define WEFT_TESTS_FS_TEST_H

#include "rt_helpers.h"

#include "fs_internal.h"

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* This test's directory, from mkdtemp (set by the suite's .init). */
extern char root[64];

/* A path under this test's directory. */
#define AT(var, rel)                                                                          \
  char var[PATH_MAX];                                                                         \
  snprintf(var, sizeof(var), "%s/%s", root, rel)

static inline uint64_t pool_jobs(void)
{
  weft_stats s;
  return weft_stats_get(NULL, -1, &s) == 0 ? s.pool_jobs : UINT64_MAX;
}

static inline unsigned char pattern(size_t i)
{
  return (unsigned char)(i * 7 + (i >> 9));
}

#endif
