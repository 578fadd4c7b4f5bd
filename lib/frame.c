/* SPDX-License-Identifier: MIT */
/*
 * Length-prefixed frames on a descriptor (a 4-byte big-endian length, then
 * the body), and the vectored-write helpers the writer shares.
 *
 * A frame goes out as one writev (header and body together): one system
 * call or SQE per frame, and no small header segment on its own for Nagle
 * to hold back on TCP. Reading cannot look ahead on a bare descriptor (bytes
 * taken from the stream could not be put back), so it is two reads: header,
 * then body - weft_reader_read_frame does it from a buffer instead.
 */
#include "bufio_internal.h"
#include "op.h"

#include "weft/bufio.h"
#include "weft/io.h"
#include "weft/net.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- shared helpers --------------------------------------------------------- */

ssize_t weft__bufio_writev(int fd, const struct iovec *iov, int cnt, int64_t deadline)
{
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res == -EPERM ? weft__plain_rw(fd, iov, cnt, -1, deadline, true) : op.res;
  /* The iovec array lives in the caller's frame, which stays put until the
   * CQE: the coroutine is suspended until then on every path. */
  io_uring_prep_writev(sqe, fd, iov, (unsigned)cnt, (uint64_t)-1);
  return weft__op_wait(&op);
}

/* Writes iov[0, cnt) whole, through writev or (nosignal) weft_sendmsg_dl,
 * which adds MSG_NOSIGNAL; the iovecs are advanced in place. */
static int write_all_iov(int fd, struct iovec *iov, int cnt, size_t *written, int64_t deadline,
                         bool nosignal)
{
  while (cnt > 0 && iov[0].iov_len == 0) {
    iov++;
    cnt--;
  }
  while (cnt > 0) {
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
    ssize_t r = nosignal ? weft_sendmsg_dl(fd, &m, 0, deadline)
                         : weft__bufio_writev(fd, iov, cnt, deadline);
    if (r == -EINTR)
      continue;
    if (r < 0)
      return (int)r;
    if (r == 0)
      return -EIO; /* no progress and no error: never loop on it */
    if (written)
      *written += (size_t)r;
    size_t k = (size_t)r;
    while (cnt > 0 && k >= iov[0].iov_len) {
      k -= iov[0].iov_len;
      iov++;
      cnt--;
    }
    if (cnt > 0) {
      iov[0].iov_base = (char *)iov[0].iov_base + k;
      iov[0].iov_len -= k;
    }
  }
  return 0;
}

int weft__bufio_writev_all(int fd, struct iovec *iov, int cnt, size_t *written,
                           int64_t deadline)
{
  return write_all_iov(fd, iov, cnt, written, deadline, false);
}

int weft__bufio_sendv_all(int fd, struct iovec *iov, int cnt, size_t *written, int64_t deadline)
{
  return write_all_iov(fd, iov, cnt, written, deadline, true);
}

int weft__bufio_write_all(int fd, const void *buf, size_t n, int64_t deadline)
{
  const char *p = buf;
  while (n > 0) {
    ssize_t r = weft_write_dl(fd, p, n, deadline);
    if (r == -EINTR)
      continue;
    if (r < 0)
      return (int)r;
    if (r == 0)
      return -EIO;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* ---- frames -------------------------------------------------------------------- */

ssize_t weft_frame_write_dl(int fd, const void *buf, size_t n, int64_t deadline)
{
  if (n > UINT32_MAX)
    return -EMSGSIZE;
  if (!buf && n > 0)
    return -EINVAL;
  if (fd < 0)
    return -EBADF;
  unsigned char hdr[4];
  weft__put_be32(hdr, (uint32_t)n);
  struct iovec iov[2] = {{.iov_base = hdr, .iov_len = 4},
                         {.iov_base = (void *)buf, .iov_len = n}};
  int r = weft__bufio_writev_all(fd, iov, n > 0 ? 2 : 1, NULL, deadline);
  return r < 0 ? r : (ssize_t)n;
}

ssize_t weft_frame_write(int fd, const void *buf, size_t n)
{
  return weft_frame_write_dl(fd, buf, n, WEFT_NO_DEADLINE);
}

/* Reads until n bytes or end of file; *got says how many arrived. 0 or -errno. */
static int read_full(int fd, void *buf, size_t n, size_t *got, int64_t deadline)
{
  char *p = buf;
  *got = 0;
  while (*got < n) {
    ssize_t r = weft_read_dl(fd, p + *got, n - *got, deadline);
    if (r == -EINTR)
      continue;
    if (r < 0)
      return (int)r;
    if (r == 0)
      break;
    *got += (size_t)r;
  }
  return 0;
}

ssize_t weft_frame_read_dl(int fd, void *buf, size_t cap, uint32_t max, int *clean_eof,
                           int64_t deadline)
{
  if (clean_eof)
    *clean_eof = 0;
  if (!buf && cap > 0)
    return -EINVAL;
  if (fd < 0)
    return -EBADF;
  unsigned char hdr[4];
  size_t got;
  int r = read_full(fd, hdr, sizeof(hdr), &got, deadline);
  if (r < 0)
    return r;
  if (got < sizeof(hdr)) {
    if (got == 0 && clean_eof)
      *clean_eof = 1; /* the stream ended between frames */
    return -EPIPE;
  }
  uint32_t len = weft__get_be32(hdr);
  if (len > WEFT__FRAME_LIMIT(max) || len > cap)
    return -EMSGSIZE;
  r = read_full(fd, buf, len, &got, deadline);
  if (r < 0)
    return r;
  return got < len ? -EPIPE : (ssize_t)len;
}

ssize_t weft_frame_read(int fd, void *buf, size_t cap, uint32_t max, int *clean_eof)
{
  return weft_frame_read_dl(fd, buf, cap, max, clean_eof, WEFT_NO_DEADLINE);
}
