/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by bufio.c (reader, writer), frame.c (frames) and copy.c
 * (splice, copy). All return -errno and leave errno as they found it.
 */
#ifndef WEFT_LIB_BUFIO_INTERNAL_H
#define WEFT_LIB_BUFIO_INTERNAL_H

#include "weft/bufio.h"

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* One writev(2) at the file position: an IORING_OP_WRITEV in a coroutine,
 * the system call on a plain thread (poll(2) + RWF_NOWAIT for a deadline,
 * as weft_write_dl). Bytes written, possibly fewer than asked. */
ssize_t weft__bufio_writev(int fd, const struct iovec *iov, int cnt, int64_t deadline);

/* writev until every byte of iov[0..cnt) is written (iov is advanced in
 * place; a write of 0 bytes counts as -EIO). 0 or -errno. The bytes that
 * went out are added to *written (if not NULL) on every path, so that a
 * caller can tell a failure before the first byte from one part-way. */
int weft__bufio_writev_all(int fd, struct iovec *iov, int cnt, size_t *written,
                           int64_t deadline);

/* weft__bufio_writev_all through sendmsg(MSG_NOSIGNAL), for sockets: a peer
 * that went away is -EPIPE, never a SIGPIPE - which a plain thread's writev,
 * or a coroutine's through the ring, raises. */
int weft__bufio_sendv_all(int fd, struct iovec *iov, int cnt, size_t *written, int64_t deadline);

/* weft_write_dl until all n bytes are written. 0 or -errno. */
int weft__bufio_write_all(int fd, const void *buf, size_t n, int64_t deadline);

/* ---- frame headers: a 4-byte big-endian length ---- */

#define WEFT__FRAME_LIMIT(max) ((max) ? (max) : WEFT_FRAME_MAX_DEFAULT)

static inline void weft__put_be32(unsigned char *p, uint32_t v)
{
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static inline uint32_t weft__get_be32(const unsigned char *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

#endif
