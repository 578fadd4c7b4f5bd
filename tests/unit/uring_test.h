/* SPDX-License-Identifier: MIT */
/* Shared by the "uring" suite's files (test_uring.c, test_uring_multishot.c,
 * test_uring_edges.c). */
#ifndef WEFT_TEST_URING_TEST_H
#define WEFT_TEST_URING_TEST_H

#include "io_helpers.h"

#include "weft/uring.h"

#include <errno.h>
#include <poll.h>

/* Begins a multishot poll for POLLIN on fd. */
static inline int poll_begin(weft_uring_multishot **ms, int fd)
{
  struct io_uring_sqe *sqe = weft_uring_sqe();
  if (!sqe)
    return -ENOSPC;
  io_uring_prep_poll_multishot(sqe, fd, POLLIN);
  return weft_uring_multishot_begin(ms, sqe);
}

#endif
