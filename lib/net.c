/* SPDX-License-Identifier: MIT */
/*
 * The socket system calls of weft/net.h.
 *
 * In a coroutine every call that can wait is one io_uring op (lib/op.h):
 * the op record, and the msghdr/iovec/sockaddr built here for recvfrom and
 * sendto, live on the coroutine's stack, which weft__op_wait does not leave
 * before the op's CQE - on every path. Calls that never wait (bind, listen,
 * socket options, addresses) are the system call itself, errno saved.
 *
 * io_uring waits for readiness whether or not the socket is O_NONBLOCK; only
 * MSG_DONTWAIT makes a transfer give up with -EAGAIN. The plain-thread path
 * keeps the same rule: an -EAGAIN it did not ask for (O_NONBLOCK, SO_RCVTIMEO)
 * makes it poll(2) and try again.
 */
#include "net_internal.h"
#include "rawsys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* io_uring carries a transfer's length in 32 bits. */
#define MAX_IO ((size_t)INT_MAX & ~(size_t)4095)

atomic_uint weft__net_refused;
atomic_bool weft__net_nowait = true;

/* ---- the plain-thread path ------------------------------------------------------ */

/* A data transfer, described once for both paths. */
enum xfer_kind { X_RECV, X_SEND, X_RECVMSG, X_SENDMSG };

struct xfer {
  enum xfer_kind kind;
  int fd;
  void *buf;          /* X_RECV / X_SEND */
  size_t n;
  struct msghdr *msg; /* X_RECVMSG / X_SENDMSG */
  int flags;
};

static ssize_t plain_once(const struct xfer *x, int flags)
{
  switch (x->kind) {
  case X_RECV:
    return weft__sys_recv(x->fd, x->buf, x->n, flags);
  case X_SEND:
    return weft__sys_send(x->fd, x->buf, x->n, flags);
  case X_RECVMSG:
    return weft__sys_recvmsg(x->fd, x->msg, flags);
  default:
    return weft__sys_sendmsg(x->fd, x->msg, flags);
  }
}

#define RETRY_PAUSE_MIN_NS (50 * WEFT_USEC)
#define RETRY_PAUSE_MAX_NS (2 * WEFT_MSEC)

/* Sleeps *pause (doubling it for next time, up to the maximum), cut short
 * at the deadline: 0, or -ETIMEDOUT once the deadline has passed. */
static int retry_pause(int64_t *pause, int64_t deadline)
{
  int64_t ns = *pause;
  *pause = ns * 2 < RETRY_PAUSE_MAX_NS ? ns * 2 : RETRY_PAUSE_MAX_NS;
  if (deadline >= 0) {
    int64_t left = deadline - weft__now();
    if (left <= 0)
      return -ETIMEDOUT;
    if (left < ns)
      ns = left;
  }
  struct timespec ts = {.tv_sec = (time_t)(ns / WEFT_SEC), .tv_nsec = (long)(ns % WEFT_SEC)};
  nanosleep(&ts, NULL); /* an interruption only shortens the pause */
  return 0;
}

/* With a deadline every attempt is MSG_DONTWAIT and the waiting is poll(2)'s,
 * so the deadline holds even when another thread takes the data first.
 * When poll says ready and the transfer still finds nothing (an unconnected
 * datagram socket polls writable whatever its destination's queue holds),
 * there is nothing to wait for: the attempts go on with growing pauses
 * rather than spinning. */
static ssize_t plain_xfer(const struct xfer *x, int64_t deadline)
{
  int saved = errno;
  bool out = x->kind == X_SEND || x->kind == X_SENDMSG;
  bool caller_dontwait = x->flags & MSG_DONTWAIT;
  int flags = x->flags | (deadline >= 0 ? MSG_DONTWAIT : 0);
  ssize_t r = deadline >= 0 && deadline <= weft__now() ? -ETIMEDOUT : 0;
  bool polled_ready = false;
  int64_t pause = RETRY_PAUSE_MIN_NS;
  while (r == 0) {
    r = plain_once(x, flags);
    if (r >= 0)
      break;
    r = -errno;
    if (r == -EINTR) {
      r = 0;
    } else if (r == -EAGAIN && !caller_dontwait) {
      r = polled_ready ? retry_pause(&pause, deadline) : 0;
      if (r == 0)
        r = weft__poll_ready(x->fd, out ? POLLOUT : POLLIN, deadline);
      polled_ready = r == 0;
    }
  }
  errno = saved;
  return r;
}

/* ---- the io_uring path ----------------------------------------------------------- */

/* A send tried at once with MSG_DONTWAIT, as a plain system call, when the
 * shard has nothing else to do: a socket with room in its buffer takes the
 * data right away, and this saves the op's io_uring_enter and two switches
 * (a third of the system calls of a request/response round trip). Only when
 * idle: a task that sends in a loop must not keep the shard from others.
 * True with *res set when it gave the answer; -EAGAIN (no room) goes to
 * io_uring, which waits. Receives are not tried this way: in request/response
 * traffic the data is not there yet when recv is called, and the miss would
 * cost a system call every time. */
static bool send_now(weft_task *t, const struct xfer *x, int64_t deadline, ssize_t *res)
{
  if (x->flags & MSG_DONTWAIT)
    return false; /* io_uring answers -EAGAIN itself */
  if (atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
    *res = -ECANCELED;
    return true;
  }
  int64_t dl = weft__deadline_for(t, deadline);
  if (dl >= 0 && dl <= weft__now()) {
    *res = -ETIMEDOUT;
    return true;
  }
  int saved = errno;
  ssize_t r = plain_once(x, x->flags | MSG_DONTWAIT);
  int e = errno;
  errno = saved;
  if (r >= 0) {
    *res = r;
    return true;
  }
  if (e == EAGAIN || e == EINTR)
    return false;
  *res = -e;
  return true;
}

static ssize_t xfer_run(struct xfer *x, int64_t deadline)
{
  weft_task *t = weft__task_self();
  ssize_t res;
  if (t && (x->kind == X_SEND || x->kind == X_SENDMSG) &&
      atomic_load_explicit(&weft__net_nowait, memory_order_relaxed) &&
      weft__shard_idle_otherwise(t->shard) && send_now(t, x, deadline, &res))
    return res;
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res == -EPERM ? plain_xfer(x, deadline) : op.res;
  switch (x->kind) {
  case X_RECV:
    io_uring_prep_recv(sqe, x->fd, x->buf, x->n, x->flags);
    break;
  case X_SEND:
    io_uring_prep_send(sqe, x->fd, x->buf, x->n, x->flags);
    break;
  case X_RECVMSG:
    io_uring_prep_recvmsg(sqe, x->fd, x->msg, (unsigned)x->flags);
    break;
  case X_SENDMSG:
    io_uring_prep_sendmsg(sqe, x->fd, x->msg, (unsigned)x->flags);
    break;
  }
  return weft__op_wait(&op);
}

/* ---- socket, and the calls that never wait ------------------------------------------ */

/* IORING_OP_SOCKET (5.19): 1 the kernel has it, -1 not, 0 not probed yet.
 * Probed once per process through the calling shard's ring. */
static atomic_int socket_op;

static bool have_socket_op(weft__shard *sh)
{
  if (atomic_load_explicit(&weft__net_refused, memory_order_relaxed) & WEFT__NET_NO_SOCKET_OP)
    return false;
  int v = atomic_load_explicit(&socket_op, memory_order_relaxed);
  if (v == 0) {
    int saved = errno; /* liburing and malloc may set it */
    struct io_uring_probe *p = io_uring_get_probe_ring(&sh->ring);
    v = p && io_uring_opcode_supported(p, IORING_OP_SOCKET) ? 1 : -1;
    if (p)
      io_uring_free_probe(p);
    errno = saved;
    atomic_store_explicit(&socket_op, v, memory_order_relaxed);
  }
  return v > 0;
}

int weft_socket(int domain, int type, int protocol)
{
  type |= SOCK_CLOEXEC;
  weft_task *t = weft__task_self();
  if (t && have_socket_op(t->shard)) {
    /* An op that cannot start (a cancelled task, an ended deadline scope,
     * a full SQ) is socket(2) below: the call never waits, so those rules
     * are not its, as on kernels without the op. */
    weft__op op;
    struct io_uring_sqe *sqe = weft__op_begin(&op, WEFT_NO_DEADLINE);
    if (sqe) {
      io_uring_prep_socket(sqe, domain, type, protocol, 0);
      return weft__op_wait(&op);
    }
  }
  int saved = errno;
  int r = socket(domain, type, protocol);
  if (r < 0)
    r = -errno;
  errno = saved;
  return r;
}

/* The result of a system call that returns 0 or -1 with errno. */
static int sys_result(int r, int saved)
{
  if (r < 0)
    r = -errno;
  errno = saved;
  return r;
}

int weft_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
  int saved = errno;
  return sys_result(bind(fd, addr, len), saved);
}

int weft_listen(int fd, int backlog)
{
  int saved = errno;
  return sys_result(listen(fd, backlog), saved);
}

int weft_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
  int saved = errno;
  return sys_result(setsockopt(fd, level, name, val, len), saved);
}

int weft_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
  int saved = errno;
  return sys_result(getsockopt(fd, level, name, val, len), saved);
}

int weft_getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
  int saved = errno;
  return sys_result(getpeername(fd, addr, len), saved);
}

int weft_getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
  int saved = errno;
  return sys_result(getsockname(fd, addr, len), saved);
}

int weft_shutdown(int fd, int how)
{
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, WEFT_NO_DEADLINE);
  if (!sqe) {
    if (op.res != -EPERM)
      return op.res;
    int saved = errno;
    return sys_result(shutdown(fd, how), saved);
  }
  io_uring_prep_shutdown(sqe, fd, how);
  return weft__op_wait(&op);
}

/* ---- accept, connect -------------------------------------------------------------- */

/* Cancels the accept once the deadline has passed. Until the cancel is
 * submitted the accept stays in flight, writing into the caller's addr, so
 * there is no giving up: a refused submission (memory) is tried again. */
static void cancel_accept(struct io_uring *ring)
{
  /* The accept took one of the ring's four entries and is gone from the
   * SQ: there is room. Prepared once; a refused submission leaves it
   * queued, and the next try submits that same SQE. */
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
  io_uring_prep_cancel64(sqe, WEFT__TRING_ACCEPT, 0);
  io_uring_sqe_set_data64(sqe, WEFT__TRING_CANCEL);
  while (io_uring_submit(ring) < 1)
    sched_yield();
}

/* One accept on the thread's ring, waited for until the deadline and then
 * cancelled: the new descriptor, its -errno, or -ETIMEDOUT. Returns only
 * once every CQE of it is in - the kernel writes addr and *len until the
 * accept's. A connection accepted as the deadline passes is returned, not
 * lost. */
static int ring_accept_once(struct io_uring *ring, int fd, struct sockaddr *addr, socklen_t *len,
                            int flags, int64_t deadline, bool *submitted)
{
  *submitted = false;
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
  if (!sqe)
    return -EBUSY; /* cannot happen: every use is reaped before it returns */
  io_uring_prep_accept(sqe, fd, addr, len, flags);
  io_uring_sqe_set_data64(sqe, WEFT__TRING_ACCEPT);
  int r = weft__thread_ring_submit(ring);
  if (r < 0)
    return r;
  *submitted = true;
  int res = 0;
  unsigned pending = 1; /* CQEs still to come: the accept's, and the cancel's */
  bool cancelled = false;
  while (pending) {
    struct io_uring_cqe *cqe;
    int w;
    if (!cancelled) {
      int64_t left = deadline - weft__now();
      if (left < 0)
        left = 0;
      struct __kernel_timespec ts = {.tv_sec = left / WEFT_SEC, .tv_nsec = left % WEFT_SEC};
      w = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
      if (w == -ETIME) {
        cancel_accept(ring);
        cancelled = true;
        pending++;
        continue;
      }
    } else {
      w = io_uring_wait_cqe(ring, &cqe);
    }
    if (w < 0)
      continue; /* -EINTR: a signal; the accept is still in flight */
    uint64_t ud = io_uring_cqe_get_data64(cqe);
    if (ud == WEFT__TRING_ACCEPT)
      res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (ud == WEFT__TRING_ACCEPT || ud == WEFT__TRING_CANCEL)
      pending--;
  }
  return res == -ECANCELED ? -ETIMEDOUT : res;
}

/* accept with a deadline on a plain thread, as an op on the thread's own
 * ring: a blocking listener has no per-call "don't wait", and poll(2) then
 * accept4(2) would wait past the deadline whenever another thread took the
 * connection in between. False if the thread cannot have a ring (the
 * caller then polls); else true, with the new descriptor, -ETIMEDOUT or
 * another -errno in *res. */
static bool ring_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags,
                        int64_t deadline, int *res)
{
  struct io_uring *ring;
  if (weft__thread_ring(&ring) < 0)
    return false;
  for (;;) {
    bool submitted;
    int r = ring_accept_once(ring, fd, addr, len, flags, deadline, &submitted);
    /* The ring refused the accept (the kernel short of memory, say; the
     * ring is dropped): that is no answer about the listener, so the
     * caller polls instead. */
    if (!submitted)
      return false;
    /* An O_NONBLOCK listener with nothing queued: wait, as io_uring does
     * in a coroutine. */
    if (r == -EAGAIN)
      r = weft__poll_ready(fd, POLLIN, deadline);
    if (r != 0) {
      *res = r;
      return true;
    }
    /* Ready: again, on the ring - which may not come back (the caller
     * polls then). */
    if (weft__thread_ring(&ring) < 0)
      return false;
  }
}

static int plain_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags,
                        int64_t deadline)
{
  int saved = errno;
  int r = deadline >= 0 && deadline <= weft__now() ? -ETIMEDOUT : 0;
  if (r == 0 && deadline >= 0 && ring_accept(fd, addr, len, flags, deadline, &r)) {
    errno = saved;
    return r;
  }
  while (r == 0) {
    /* Without a ring, wait for a connection first (another thread taking
     * the connection between the poll and the accept can still hold us
     * past the deadline). */
    if (deadline >= 0 && (r = weft__poll_ready(fd, POLLIN, deadline)) < 0)
      break;
    r = accept4(fd, addr, len, flags);
    if (r >= 0)
      break;
    r = -errno;
    if (r == -EINTR)
      r = 0;
    else if (r == -EAGAIN) /* an O_NONBLOCK listener: wait, as io_uring does */
      r = deadline >= 0 ? 0 : weft__poll_ready(fd, POLLIN, -1);
  }
  errno = saved;
  return r;
}

int weft_accept_dl(int fd, struct sockaddr *addr, socklen_t *len, int flags, int64_t deadline)
{
  /* The kernel would accept the connection, fail to store its address and
   * close it: refuse before anything is lost. So it does with a length it
   * reads as a negative int (-EINVAL), an uninitialised one, say. */
  if (addr && !len)
    return -EFAULT;
  if (addr && *len > INT_MAX)
    return -EINVAL;
  flags |= SOCK_CLOEXEC;
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res == -EPERM ? plain_accept(fd, addr, len, flags, deadline) : op.res;
  io_uring_prep_accept(sqe, fd, addr, len, flags);
  return weft__op_wait(&op);
}

int weft_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
  return weft_accept_dl(fd, addr, len, flags, WEFT_NO_DEADLINE);
}

/* A connect(2) under way (EINPROGRESS, or interrupted): its outcome. */
static int finish_connect(int fd, int64_t deadline)
{
  int r = weft__poll_ready(fd, POLLOUT, deadline);
  if (r < 0)
    return r;
  int err = 0;
  socklen_t l = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
    return -errno;
  return -err;
}

/* A Unix-domain connect waits for room in the listener's backlog, which
 * poll(2) cannot wait for (a non-blocking one fails with EAGAIN): bounded
 * instead by SO_SNDTIMEO, which that wait honours, set for the call. */
static int unix_connect_until(int fd, const struct sockaddr *addr, socklen_t len, int64_t deadline)
{
  struct timeval old;
  socklen_t ol = sizeof(old);
  if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &old, &ol) < 0)
    return -errno;
  int r;
  for (;;) {
    int64_t left = deadline - weft__now();
    if (left <= 0) {
      r = -ETIMEDOUT;
      break;
    }
    int64_t us = (left + 999) / 1000;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000), .tv_usec = (suseconds_t)(us % 1000000)};
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
      r = -errno;
      break;
    }
    r = connect(fd, addr, len) < 0 ? -errno : 0;
    if (r == -EAGAIN)
      r = -ETIMEDOUT; /* the send timeout ran out while the backlog stayed full */
    if (r != -EINTR)
      break;
  }
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &old, sizeof(old));
  return r;
}

/* With a deadline the socket is made O_NONBLOCK for the call, so that the
 * wait is poll(2)'s; a failed connect leaves the socket to be closed anyway. */
static int plain_connect(int fd, const struct sockaddr *addr, socklen_t len, int64_t deadline)
{
  int saved = errno;
  int r, fl = -1;
  if (deadline >= 0) {
    if (deadline <= weft__now()) {
      r = -ETIMEDOUT;
      goto out;
    }
    fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK) && addr && len >= sizeof(sa_family_t) &&
        addr->sa_family == AF_UNIX) {
      r = unix_connect_until(fd, addr, len, deadline);
      goto out;
    }
    if (fl < 0) {
      r = -errno;
      goto out;
    }
    if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
      r = -errno;
      goto out;
    }
  }
  bool unix_socket = addr && len >= sizeof(sa_family_t) && addr->sa_family == AF_UNIX;
  do {
    r = connect(fd, addr, len) < 0 ? -errno : 0;
    /* An interrupted AF_UNIX connect is abandoned (the socket stays
     * unconnected, and poll(2) would call it writable): ask again. An
     * interrupted TCP one goes on in the background. */
  } while (r == -EINTR && unix_socket);
  if (r == -EINPROGRESS || r == -EINTR)
    r = finish_connect(fd, deadline);
  if (fl >= 0 && !(fl & O_NONBLOCK))
    fcntl(fd, F_SETFL, fl);
out:
  errno = saved;
  return r;
}

int weft_connect_dl(int fd, const struct sockaddr *addr, socklen_t len, int64_t deadline)
{
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res == -EPERM ? plain_connect(fd, addr, len, deadline) : op.res;
  io_uring_prep_connect(sqe, fd, addr, len);
  return weft__op_wait(&op);
}

int weft_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
  return weft_connect_dl(fd, addr, len, WEFT_NO_DEADLINE);
}

/* ---- transfers -------------------------------------------------------------------- */

ssize_t weft_recv_dl(int fd, void *buf, size_t n, int flags, int64_t deadline)
{
  struct xfer x = {.kind = X_RECV, .fd = fd, .buf = buf, .n = n > MAX_IO ? MAX_IO : n,
                   .flags = flags};
  return xfer_run(&x, deadline);
}

ssize_t weft_recv(int fd, void *buf, size_t n, int flags)
{
  return weft_recv_dl(fd, buf, n, flags, WEFT_NO_DEADLINE);
}

ssize_t weft_send_dl(int fd, const void *buf, size_t n, int flags, int64_t deadline)
{
  struct xfer x = {.kind = X_SEND, .fd = fd, .buf = (void *)buf, .n = n > MAX_IO ? MAX_IO : n,
                   .flags = flags | MSG_NOSIGNAL};
  return xfer_run(&x, deadline);
}

ssize_t weft_send(int fd, const void *buf, size_t n, int flags)
{
  return weft_send_dl(fd, buf, n, flags, WEFT_NO_DEADLINE);
}

/* Received descriptors (SCM_RIGHTS) are close-on-exec, like every
 * descriptor weft makes. */
ssize_t weft_recvmsg_dl(int fd, struct msghdr *msg, int flags, int64_t deadline)
{
  if (!msg)
    return -EFAULT;
  struct xfer x = {.kind = X_RECVMSG, .fd = fd, .msg = msg, .flags = flags | MSG_CMSG_CLOEXEC};
  return xfer_run(&x, deadline);
}

ssize_t weft_recvmsg(int fd, struct msghdr *msg, int flags)
{
  return weft_recvmsg_dl(fd, msg, flags, WEFT_NO_DEADLINE);
}

ssize_t weft_sendmsg_dl(int fd, const struct msghdr *msg, int flags, int64_t deadline)
{
  if (!msg)
    return -EFAULT;
  struct xfer x = {.kind = X_SENDMSG, .fd = fd, .msg = (struct msghdr *)msg,
                   .flags = flags | MSG_NOSIGNAL};
  return xfer_run(&x, deadline);
}

ssize_t weft_sendmsg(int fd, const struct msghdr *msg, int flags)
{
  return weft_sendmsg_dl(fd, msg, flags, WEFT_NO_DEADLINE);
}

/* recvfrom/sendto are recvmsg/sendmsg with one iovec: io_uring's RECV/SEND
 * carry no address (liburing 2.3). The msghdr is on this frame, which the
 * op does not outlive. */
ssize_t weft_recvfrom_dl(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
                         socklen_t *len, int64_t deadline)
{
  /* recvfrom(2) would consume the datagram, then fail to store its sender. */
  if (addr && !len)
    return -EFAULT;
  struct iovec iov = {.iov_base = buf, .iov_len = n > MAX_IO ? MAX_IO : n};
  struct msghdr m = {.msg_name = addr, .msg_namelen = addr ? *len : 0, .msg_iov = &iov,
                     .msg_iovlen = 1};
  ssize_t r = weft_recvmsg_dl(fd, &m, flags, deadline);
  if (r >= 0 && addr)
    *len = m.msg_namelen; /* the sender's real length, as recvfrom(2) */
  return r;
}

ssize_t weft_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
                      socklen_t *len)
{
  return weft_recvfrom_dl(fd, buf, n, flags, addr, len, WEFT_NO_DEADLINE);
}

ssize_t weft_sendto_dl(int fd, const void *buf, size_t n, int flags,
                       const struct sockaddr *addr, socklen_t len, int64_t deadline)
{
  /* sendto(2) refuses an address longer than any; sendmsg(2) would cut it
   * to that size and send. */
  if (addr && len > sizeof(struct sockaddr_storage))
    return -EINVAL;
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = n > MAX_IO ? MAX_IO : n};
  struct msghdr m = {.msg_name = (void *)addr, .msg_namelen = addr ? len : 0,
                     .msg_iov = &iov, .msg_iovlen = 1};
  return weft_sendmsg_dl(fd, &m, flags, deadline);
}

ssize_t weft_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
                    socklen_t len)
{
  return weft_sendto_dl(fd, buf, n, flags, addr, len, WEFT_NO_DEADLINE);
}

/* ---- whole buffers ---------------------------------------------------------------- */

/* The checks before a whole-buffer transfer: n too large, and for n == 0,
 * which moves nothing and is done at once, a passed deadline or a cancel -
 * they fail every call at once, weft_recv_dl of 0 bytes among them. */
static ssize_t whole_start(size_t n, int64_t deadline)
{
  if (n > SSIZE_MAX)
    return -EINVAL;
  if (n > 0)
    return 0;
  weft_task *t = weft__task_self();
  return weft__may_wait(t, weft__deadline_for(t, deadline));
}

/* One receive per arrival in a coroutine: io_uring's MSG_WAITALL, which
 * would keep going across short transfers inside one op, takes the socket's
 * error (a reset) as it comes and then reports only the bytes it moved - the
 * error is gone, the next receive sees a closed socket, and a reset part-way
 * would look like the peer's close (-EPIPE). The blocking recv(2) of the
 * plain path stops at the error with the bytes instead and leaves the error
 * for the next call, so MSG_WAITALL is kept there. */
ssize_t weft_recv_exact_dl(int fd, void *buf, size_t n, size_t *done, int64_t deadline)
{
  int flags = weft__task_self() ? 0 : MSG_WAITALL;
  size_t off = 0;
  ssize_t r = whole_start(n, deadline);
  while (r >= 0 && off < n) {
    r = weft_recv_dl(fd, (char *)buf + off, n - off, flags, deadline);
    if (r == 0) {
      r = off ? -EPIPE : 0; /* the peer closed: part-way, or before the first byte */
      break;
    }
    if (r > 0)
      off += (size_t)r;
  }
  if (r >= 0 && off == n)
    r = (ssize_t)n;
  if (done)
    *done = off;
  return r;
}

ssize_t weft_recv_exact(int fd, void *buf, size_t n, size_t *done)
{
  return weft_recv_exact_dl(fd, buf, n, done, WEFT_NO_DEADLINE);
}

ssize_t weft_send_all_dl(int fd, const void *buf, size_t n, size_t *done, int64_t deadline)
{
  size_t off = 0;
  ssize_t r = whole_start(n, deadline);
  while (r >= 0 && off < n) {
    r = weft_send_dl(fd, (const char *)buf + off, n - off, MSG_WAITALL, deadline);
    if (r == 0)
      r = -EPIPE; /* no progress: never loop on it */
    else if (r > 0)
      off += (size_t)r;
  }
  if (r >= 0 && off == n)
    r = (ssize_t)n;
  if (done)
    *done = off;
  return r;
}

ssize_t weft_send_all(int fd, const void *buf, size_t n, size_t *done)
{
  return weft_send_all_dl(fd, buf, n, done, WEFT_NO_DEADLINE);
}
