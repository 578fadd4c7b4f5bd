/* SPDX-License-Identifier: MIT */
/* read/write on any descriptor, on the op primitive; plain-thread fallback. */
#include "op.h"
#include "rawsys.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_IO ((size_t)INT_MAX & ~(size_t)4095)

/* poll(2) for one descriptor until it is ready or the deadline passes: the
 * ready events (> 0), or -ETIMEDOUT, -EBADF, another -errno. */
static int poll_errno(int fd, short events, int64_t deadline)
{
  /* poll(2) would silently skip a negative fd. A passed deadline comes
   * first, as in a coroutine (whose op is never begun then): every
   * plain-thread wait goes through here, and must fail the same. */
  if (fd < 0)
    return deadline >= 0 && deadline <= weft__now() ? -ETIMEDOUT : -EBADF;
  for (;;) {
    int ms = -1;
    if (deadline >= 0) {
      int64_t left = deadline - weft__now();
      if (left <= 0)
        return -ETIMEDOUT;
      int64_t m = (left + 999999) / 1000000;
      ms = m > INT_MAX ? INT_MAX : (int)m;
    }
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, ms);
    if (r > 0)
      return (p.revents & POLLNVAL) ? -EBADF : (unsigned short)p.revents;
    if (r < 0 && errno != EINTR)
      return -errno;
  }
}

static int plain_poll(int fd, short events, int64_t deadline)
{
  int saved = errno;
  int r = poll_errno(fd, events, deadline);
  errno = saved;
  return r;
}

int weft__poll_ready(int fd, short events, int64_t deadline)
{
  int r = plain_poll(fd, events, deadline);
  return r < 0 ? r : 0; /* POLLERR/HUP: the call that follows says why */
}

static bool is_regular_file(int fd)
{
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

/* With a deadline, readiness from poll(2) is not a promise (another thread
 * may take the data, or the pipe have less room than we write): transfer with
 * RWF_NOWAIT and poll again on -EAGAIN, so the deadline holds. Two kinds of
 * file get the plain call instead: those that do not support RWF_NOWAIT, and
 * regular files, whose -EAGAIN means data on its way from the disk - poll(2)
 * says "ready" at once, so polling again would only spin. Without a deadline
 * the plain call waits by itself - except on an O_NONBLOCK descriptor, whose
 * -EAGAIN sends us to poll(2) as well: these calls wait, as in a coroutine. */
static ssize_t plain_rw_errno(int fd, const struct iovec *iov, int cnt, off_t off,
                              int64_t deadline, bool write_op)
{
  /* Nothing to move: read(2) and write(2) answer at once (0, or the
   * descriptor's error), readiness or not - so does this, but for a
   * deadline already passed, which fails every call at once. */
  size_t total = 0;
  for (int i = 0; i < cnt && total == 0; i++)
    total += iov[i].iov_len;
  if (total == 0 && deadline >= 0 && deadline <= weft__now())
    return -ETIMEDOUT;
  bool nowait = deadline >= 0 && total > 0;
  for (;;) {
    /* Without a deadline the blocking call itself does the waiting. */
    int r = nowait ? weft__poll_ready(fd, write_op ? POLLOUT : POLLIN, deadline) : 0;
    if (r < 0)
      return r;
    int flags = nowait ? RWF_NOWAIT : 0;
    ssize_t got = write_op ? pwritev2(fd, iov, cnt, off, flags) : preadv2(fd, iov, cnt, off, flags);
    if (got >= 0)
      return got;
    int e = errno;
    if (e == EINTR)
      continue;
    if (e == EAGAIN && !is_regular_file(fd)) {
      /* Lost the race for it, or an O_NONBLOCK descriptor with nothing
       * there yet: wait for readiness (a coroutine's call waits too). */
      nowait = true;
      continue;
    }
    if (nowait && (e == EAGAIN || e == EOPNOTSUPP)) {
      nowait = false;
      continue;
    }
    return -e;
  }
}

ssize_t weft__plain_rw(int fd, const struct iovec *iov, int cnt, off_t off, int64_t deadline,
                       bool write_op)
{
  int saved = errno;
  ssize_t r = plain_rw_errno(fd, iov, cnt, off, deadline, write_op);
  errno = saved;
  return r;
}

static ssize_t plain_read(int fd, void *buf, size_t n, int64_t deadline)
{
  struct iovec iov = {.iov_base = buf, .iov_len = n};
  return weft__plain_rw(fd, &iov, 1, -1, deadline, false);
}

static ssize_t plain_write(int fd, const void *buf, size_t n, int64_t deadline)
{
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = n};
  return weft__plain_rw(fd, &iov, 1, -1, deadline, true);
}

ssize_t weft_read_dl(int fd, void *buf, size_t n, int64_t deadline)
{
  if (n > MAX_IO)
    n = MAX_IO;
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res == -EPERM ? plain_read(fd, buf, n, deadline) : op.res;
  /* Offset -1: the file position, as read(2) (and what pipes need). */
  io_uring_prep_read(sqe, fd, buf, (unsigned)n, (uint64_t)-1);
  return weft__op_wait(&op);
}

ssize_t weft_read(int fd, void *buf, size_t n)
{
  return weft_read_dl(fd, buf, n, WEFT_NO_DEADLINE);
}

ssize_t weft_write_dl(int fd, const void *buf, size_t n, int64_t deadline)
{
  if (n > MAX_IO)
    n = MAX_IO;
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res == -EPERM ? plain_write(fd, buf, n, deadline) : op.res;
  io_uring_prep_write(sqe, fd, buf, (unsigned)n, (uint64_t)-1);
  return weft__op_wait(&op);
}

ssize_t weft_write(int fd, const void *buf, size_t n)
{
  return weft_write_dl(fd, buf, n, WEFT_NO_DEADLINE);
}

/* What poll(2) reports whether asked for or not. */
#define POLL_UNASKED (POLLERR | POLLHUP | POLLNVAL)

/* The wait of weft_poll_dl after io_uring's poll came back with nothing
 * asked for: in an epoll instance holding fd, which reports only what it
 * is asked (and POLLERR, POLLHUP), readable once fd is ready. Then poll(2),
 * without waiting and past the hook, tells what fd is ready for. */
static int poll_in_epoll(int fd, unsigned events, int64_t deadline)
{
  int saved = errno;
  int r = 0, ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = events};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
    r = -errno;
  while (r == 0) {
    r = weft_poll_dl(ep, POLLIN, deadline);
    if (r < 0)
      break;
    struct pollfd p = {.fd = fd, .events = (short)events};
    struct timespec now = {0, 0};
    r = weft__sys_ppoll(&p, 1, &now);
    if (r > 0)
      r = (p.revents & POLLNVAL) ? -EBADF : (unsigned short)p.revents;
    else if (r < 0)
      r = errno == EINTR ? 0 : -errno;
  }
  if (ep >= 0)
    close(ep);
  errno = saved;
  return r;
}

/* The wait of weft_poll_dl for a file io_uring cannot poll (no poll method:
 * a regular file, /dev/null), which is ready for reading and writing and
 * never for anything else: nothing can come, so poll(2) waits for its
 * timeout - and so does this, where io_uring's poll refuses (-EINVAL). */
static int poll_nothing_comes(int64_t deadline)
{
  for (;;) {
    int r = deadline < 0 ? weft_sleep(3600 * WEFT_SEC) : weft_sleep_until(deadline);
    if (r < 0)
      return r;
    if (deadline >= 0)
      return -ETIMEDOUT;
  }
}

int weft_poll_dl(int fd, unsigned events, int64_t deadline)
{
  if (events > 0xffff)
    return -EINVAL;
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res == -EPERM ? plain_poll(fd, (short)events, deadline) : op.res;
  io_uring_prep_poll_add(sqe, fd, events);
  int r = weft__op_wait(&op);
  if (r == -EINVAL) {
    /* The events are in range: io_uring could not arm its poll. A file
     * without a poll method (a regular file, /dev/null) is one cause, and
     * epoll refuses it too (-EPERM); a driver whose poll uses more than two
     * wait queues is the other, and epoll can wait on that. */
    r = poll_in_epoll(fd, events, deadline);
    return r == -EPERM ? poll_nothing_comes(deadline) : r;
  }
  if (r <= 0)
    return r;
  /* io_uring's poll waits for POLLRDHUP too and reports it, asked for or
   * not; poll(2) reports it only when asked. Dropped, then - and if nothing
   * is left (a socket whose peer shut down its side, not ready for what was
   * asked), a second poll would only come back at once: the wait goes on in
   * an epoll instance, which reports what it is asked. */
  r &= (int)(events | POLL_UNASKED);
  return r ? r : poll_in_epoll(fd, events, deadline);
}

int weft_poll(int fd, unsigned events)
{
  return weft_poll_dl(fd, events, WEFT_NO_DEADLINE);
}

int weft_nop(void)
{
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, WEFT_NO_DEADLINE);
  if (!sqe)
    return op.res == -EPERM ? 0 : op.res;
  io_uring_prep_nop(sqe);
  return weft__op_wait(&op);
}
