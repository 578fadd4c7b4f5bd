/* SPDX-License-Identifier: MIT */
/*
 * libweft-hook: unmodified blocking code in coroutines.
 *
 * A separate shared library that defines read, write, readv, writev, recv,
 * send, recvfrom, sendto, recvmsg, sendmsg, accept, accept4, connect, poll,
 * ppoll, select, pselect, epoll_wait, epoll_pwait, sleep, usleep, nanosleep,
 * getaddrinfo and getnameinfo, and the _FORTIFY_SOURCE variants of read,
 * recv, recvfrom, poll and ppoll (the waits for readiness - poll, select,
 * epoll - are in hook_wait.c). Linked into a program (before libc,
 * which a shared library always is) or loaded with LD_PRELOAD, it makes those
 * calls weft's blocking calls when they are made in a coroutine: the
 * coroutine is suspended, the shard runs others. Anywhere else - a plain
 * thread, a pool thread, weft's own scheduler - they are the next
 * definition's (libc's, or a sanitizer's in front of it), untouched.
 *
 * In a coroutine the results are libc's (-1 and errno) with weft's rules:
 * a deadline scope bounds every call (ETIMEDOUT), a cancelled task gets
 * ECANCELED - also from the sleeps, so that a "retry on EINTR" loop ends -
 * accept and accept4 create exactly the descriptor flags asked for, and
 * no write, writev, send, sendto or sendmsg raises SIGPIPE: a reader or
 * peer that is gone is EPIPE, whether or not the program ignores SIGPIPE
 * (shard threads keep it blocked; on a plain thread libc's call raises
 * it, and kills a program that does not). weft's -EBUSY of a full submission queue,
 * which no libc call gives, is waited out (the call yields and tries
 * again) - except from read, write, readv and writev on a character
 * device, where it could as well be the driver's own EBUSY: that stands.
 * A call that cannot wait (an O_NONBLOCK descriptor, MSG_DONTWAIT, a
 * receive from the error queue) is libc's own, EAGAIN and all; an event
 * loop over non-blocking descriptors waits in the hooked poll instead.
 *
 * Legacy code reads errno right after its calls, and compilers may keep
 * errno's address (glibc declares __errno_location const) across a call.
 * errno is per thread, and a stealable coroutine can resume on another
 * shard's thread: so a coroutine that makes a hooked call is pinned to its
 * shard from then on (weft_task_pin), whatever its placement. Code that
 * keeps errno's address across a suspension before its first hooked call -
 * across a weft_ call - must still be spawned with a fixed placement.
 *
 * Two habits of threaded code do not carry over. A pthread mutex held
 * across a hooked call stays held while the shard runs other coroutines,
 * which may block on it: the shard deadlocks (use weft_mutex). And a signal
 * handler that interrupts a coroutine and calls, say, write() on a blocking
 * descriptor would suspend the coroutine from inside the handler: keep the
 * self-pipe non-blocking, as usual, or wait with weft_signal_wait instead.
 *
 * read, write, readv and writev on a regular file or a block device run
 * libc's own call on the blocking pool, O_NONBLOCK or not (Linux ignores it
 * there: the disk is waited for all the same): io_uring's transfers at the
 * file position do not take it in turn as the system calls do (see "files
 * with a position" below).
 *
 * The name lookups run on the runtime's blocking pool: glibc's resolver
 * talks to DNS servers through its own internal calls, which no hook sees.
 * A lookup that already ran returns its result even to a task cancelled
 * meanwhile (the list is the caller's to free); one that never started gives
 * EAI_SYSTEM with errno ECANCELED or ETIMEDOUT.
 *
 * A pointer the process cannot read is the kernel's EFAULT, as for libc,
 * where the kernel sees it first: the buffers, the poll array, msghdrs,
 * iovecs, epoll's events. A few arguments are read in user space first
 * (weft needs them before any system call), and there such a pointer is
 * a SIGSEGV in a coroutine where libc says EFAULT: ppoll's and pselect's
 * timespec, select's sets and timeval, the signal mask given to ppoll,
 * pselect or epoll_pwait, nanosleep's request, recvfrom's address length,
 * accept's and accept4's address length (given an address: without one,
 * the length is not read; with a NULL length, EFAULT), and sendmsg's
 * msghdr with MSG_FASTOPEN.
 *
 * What stays as it was: stdio (glibc calls read and write inside itself, not
 * through these symbols), ppoll, pselect and epoll_pwait given a signal mask
 * (the mask is the shard thread's, shared by every coroutine on it: they
 * block the shard, as before - but with SIGPIPE kept blocked through the
 * wait, see hook_wait.c), socket timeouts (SO_RCVTIMEO and
 * SO_SNDTIMEO are not consulted: use a deadline scope), and every blocking
 * call not named above - pread and pwrite, recvmmsg and sendmmsg,
 * clock_nanosleep, epoll_pwait2, waitpid, file locks, an open(2) of a FIFO:
 * it blocks the shard, as it would block a thread.
 */
#include "hook_internal.h"

NEXT(ssize_t, read, (int, void *, size_t))
NEXT(int, poll, (struct pollfd *, nfds_t, int))
NEXT(ssize_t, write, (int, const void *, size_t))
NEXT(ssize_t, readv, (int, const struct iovec *, int))
NEXT(ssize_t, writev, (int, const struct iovec *, int))
NEXT(ssize_t, recv, (int, void *, size_t, int))
NEXT(ssize_t, send, (int, const void *, size_t, int))
NEXT(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *))
NEXT(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t))
NEXT(ssize_t, recvmsg, (int, struct msghdr *, int))
NEXT(ssize_t, sendmsg, (int, const struct msghdr *, int))
NEXT(int, accept, (int, struct sockaddr *, socklen_t *))
NEXT(int, accept4, (int, struct sockaddr *, socklen_t *, int))
NEXT(int, connect, (int, const struct sockaddr *, socklen_t))
NEXT(int, getaddrinfo, (const char *, const char *, const struct addrinfo *, struct addrinfo **))
NEXT(int, getnameinfo,
     (const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t, int))
NEXT(unsigned, sleep, (unsigned))
NEXT(int, usleep, (useconds_t))
NEXT(int, nanosleep, (const struct timespec *, struct timespec *))

/* A call that cannot wait is libc's own: an O_NONBLOCK descriptor (io_uring
 * would wait for readiness anyway), MSG_DONTWAIT, or no descriptor at all
 * (libc says EBADF). One fcntl(2) per call, small beside a ring round trip. */
static int fd_flags(int fd)
{
  int saved = errno;
  int fl = fcntl(fd, F_GETFL);
  errno = saved;
  return fl;
}

static bool flags_never_wait(int fl)
{
  return fl < 0 || (fl & O_NONBLOCK);
}

static bool never_waits(int fd, int msg_flags)
{
  return (msg_flags & MSG_DONTWAIT) || flags_never_wait(fd_flags(fd));
}

/* A receive from the error queue (MSG_ERRQUEUE) never waits either: the
 * kernel says EAGAIN at once when it is empty, and code that drains it
 * (MSG_ZEROCOPY notices, IP_RECVERR) stops there - io_uring would wait for
 * the next error. */
static bool receive_never_waits(int fd, int msg_flags)
{
  return (msg_flags & MSG_ERRQUEUE) || never_waits(fd, msg_flags);
}

/* read, write, readv and writev also reach devices, whose drivers may say
 * EBUSY themselves - a state that trying again could meet for ever: on a
 * character device weft's -EBUSY stands, whoever gave it. Sockets, pipes,
 * FIFOs, eventfds and the like never give it: there it is a full SQ
 * (sq_was_full). The descriptors of the socket calls are sockets. */
static bool sq_was_full_on(int fd, long r)
{
  if (r != -EBUSY)
    return false;
  int saved = errno;
  struct stat st;
  bool device = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode);
  errno = saved;
  return !device && sq_was_full(r);
}

/* ---- files with a position ------------------------------------------------------------ */

/* read(2) and write(2) on a regular file or a block device take its file
 * position in turn: the kernel locks it for each call. io_uring's transfer
 * "at the file position" does not: a read that waits for the disk started
 * where the position was, and a second one issued meanwhile starts there
 * too - coroutines sharing a descriptor would read the same bytes. So on
 * such a file these calls are libc's own, run on the blocking pool (the
 * shard does not wait for the disk); on this thread if the pool has no
 * thread to give. Its result stands once it ran, cancel or deadline
 * meanwhile or not (the bytes moved).
 *
 * Nothing can end a pool job once it runs, and a few regular files can
 * have nothing to read for as long as they like (/proc/kmsg, a tracefs
 * trace_pipe, a FUSE file whose server polls): there a job would keep the
 * task past every cancel and deadline, and a stop of the runtime with it.
 * So the call first waits for the file to be ready as weft_poll waits;
 * a file on disk is ready at once, as poll(2) says without waiting. One
 * opened O_NONBLOCK does not wait: such a file then says EAGAIN itself. */
/* The flags the kernel sets on every descriptor opened by a path (on a
 * 64-bit kernel O_LARGEFILE, whose value differs between architectures and
 * which glibc defines as 0 there): what F_GETFL shows on /dev/null beside
 * its access mode; 0 if that cannot be learnt. Sockets, pipes, eventfds
 * and the like never carry them: a descriptor without them is not a file,
 * FIFO or device, which hook.c tells with no fstat(2) - one system call
 * less on every hooked transfer of a connection. */
static inline int path_open_flags(void)
{
  static atomic_int known = -1;
  int v = atomic_load_explicit(&known, memory_order_relaxed);
  if (v < 0) {
    int saved = errno;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    if (fd >= 0)
      close(fd);
    errno = saved;
    v = fl < 0 ? 0 : fl & ~O_ACCMODE;
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v;
}

/* fl: fd's F_GETFL flags. */
static bool has_position(int fd, int fl)
{
  int by_path = path_open_flags();
  if (by_path && !(fl & by_path))
    return false;
  int saved = errno;
  struct stat st;
  bool r = fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
  errno = saved;
  return r;
}

/* Where a read or write of fd in a coroutine goes. O_NONBLOCK changes
 * nothing for a file with a position (Linux ignores it on regular files
 * and block devices: the call waits for the disk all the same), so such a
 * file goes to the pool with or without it; other descriptors with it are
 * libc's (see never_waits). *fl: fd's flags. */
enum route { BY_LIBC, BY_POOL, BY_WEFT };

static enum route transfer_route(int fd, int *fl)
{
  *fl = fd_flags(fd);
  if (*fl < 0)
    return BY_LIBC;
  if (has_position(fd, *fl))
    return BY_POOL;
  return flags_never_wait(*fl) ? BY_LIBC : BY_WEFT;
}

enum file_call { F_READ, F_WRITE, F_READV, F_WRITEV };

struct file_io {
  enum file_call call;
  int fd, cnt;
  void *buf; /* F_READ, F_WRITE */
  size_t n;
  const struct iovec *iov; /* F_READV, F_WRITEV */
  bool nonblock;           /* O_NONBLOCK: a file that may have nothing to
                              read says EAGAIN at once, so no wait first */
  /* what the call gave */
  bool ran;
  ssize_t result;
  int err;
};

static void *run_file_io(void *arg)
{
  struct file_io *f = arg;
  switch (f->call) {
  case F_READ:
    f->result = CALL_NEXT(read, f->fd, f->buf, f->n);
    break;
  case F_WRITE:
    f->result = CALL_NEXT(write, f->fd, f->buf, f->n);
    break;
  case F_READV:
    f->result = CALL_NEXT(readv, f->fd, f->iov, f->cnt);
    break;
  case F_WRITEV:
    f->result = CALL_NEXT(writev, f->fd, f->iov, f->cnt);
    break;
  }
  f->err = errno;
  f->ran = true;
  return NULL;
}

/* libc's result of the call: the pool's, this thread's, or (it never ran)
 * the cancel or deadline that kept it from starting. */
static ssize_t file_io(struct file_io *f)
{
  bool reads = f->call == F_READ || f->call == F_READV;
  struct pollfd p = {.fd = f->fd, .events = reads ? POLLIN : POLLOUT};
  int saved = errno;
  int r = f->nonblock ? 1 : (int)CALL_NEXT(poll, &p, 1, 0);
  errno = saved;
  if (r != 1) {
    do /* POLLERR or POLLHUP: the call says why */
      r = weft_poll(f->fd, (unsigned)p.events);
    while (sq_was_full(r));
    if (r < 0)
      return libc_result(r);
  }
  r = weft_blocking(run_file_io, f, NULL);
  if (!f->ran && (r == -ENOMEM || r == -EAGAIN))
    run_file_io(f);
  if (!f->ran)
    return libc_result(r);
  if (f->result < 0)
    errno = f->err;
  return f->result;
}

/* ---- descriptors ------------------------------------------------------------------- */

HOOK ssize_t read(int fd, void *buf, size_t n)
{
  int fl = -1;
  enum route how = in_coroutine() ? transfer_route(fd, &fl) : BY_LIBC;
  if (how == BY_LIBC)
    return CALL_NEXT(read, fd, buf, n);
  if (how == BY_POOL)
    return file_io(&(struct file_io){.call = F_READ, .fd = fd, .buf = buf, .n = n,
                                     .nonblock = fl & O_NONBLOCK});
  ssize_t r;
  do
    r = weft_read(fd, buf, n);
  while (sq_was_full_on(fd, r));
  return libc_result(r);
}

/* A blocking write(2), writev(2), send(2), sendto(2) or sendmsg(2) on a
 * stream returns once all of it is written (a signal may stop it
 * part-way); io_uring's transfer returns what fit. So these go on until all of it is written, and an error after part
 * of it went out reports the part, as an interrupted write(2) does (the
 * next call then meets the error). */
#define AS_WRITE (-1) /* write_fully's flags for write(2), not send(2) */

/* Writes buf[0, n) with weft_write (flags AS_WRITE) or weft_send, adding
 * what went to *done: 0 once all of it is written, or -errno (the bytes
 * before the error counted). */
static int write_fully(int fd, const char *buf, size_t n, int flags, size_t *done)
{
  size_t off = 0;
  do { /* once even for n == 0: a bad descriptor still says so, an empty
        * datagram still goes */
    ssize_t r;
    do
      r = flags == AS_WRITE ? weft_write(fd, buf + off, n - off)
                            : weft_send(fd, buf + off, n - off, flags);
    while (flags == AS_WRITE ? sq_was_full_on(fd, r) : sq_was_full(r));
    if (r <= 0)
      return r < 0 ? (int)r : 0; /* 0: nothing more can go (as libc) */
    off += (size_t)r;
    *done += (size_t)r;
  } while (off < n);
  return 0;
}

/* libc's result after write_fully: the part written, else the error. */
static ssize_t part_or_error(size_t done, int r)
{
  return done || r == 0 ? (ssize_t)done : libc_result(r);
}

HOOK ssize_t write(int fd, const void *buf, size_t n)
{
  int fl = -1;
  enum route how = in_coroutine() ? transfer_route(fd, &fl) : BY_LIBC;
  if (how == BY_LIBC)
    return CALL_NEXT(write, fd, buf, n);
  if (how == BY_POOL)
    return file_io(&(struct file_io){.call = F_WRITE, .fd = fd, .buf = (void *)buf, .n = n,
                                     .nonblock = fl & O_NONBLOCK});
  size_t done = 0;
  int r = write_fully(fd, buf, n, AS_WRITE, &done);
  return part_or_error(done, r);
}

HOOK ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
  int fl = -1;
  enum route how = in_coroutine() ? transfer_route(fd, &fl) : BY_LIBC;
  if (how == BY_LIBC)
    return CALL_NEXT(readv, fd, iov, cnt);
  if (how == BY_POOL)
    return file_io(&(struct file_io){.call = F_READV, .fd = fd, .iov = iov, .cnt = cnt,
                                     .nonblock = fl & O_NONBLOCK});
  ssize_t r;
  do
    r = weft_readv(fd, iov, cnt);
  while (sq_was_full_on(fd, r));
  return libc_result(r);
}

/* After a gathering write of `first` bytes (>= 0, or -errno): the rest of
 * iov[0, cnt), piece by piece, with write_fully's `flags`. Returns libc's
 * result for the whole call. */
static ssize_t write_rest(int fd, const struct iovec *iov, size_t cnt, ssize_t first, int flags)
{
  if (first < 0)
    return libc_result(first);
  size_t done = (size_t)first, skip = done;
  int e = 0;
  for (size_t i = 0; i < cnt && e == 0; i++) {
    if (skip >= iov[i].iov_len) {
      skip -= iov[i].iov_len;
      continue;
    }
    size_t before = done;
    e = write_fully(fd, (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip, flags,
                    &done);
    if (e == 0 && done - before < iov[i].iov_len - skip)
      break; /* a write of 0: nothing more can go */
    skip = 0;
  }
  return part_or_error(done, e);
}

HOOK ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
  int fl = -1;
  enum route how = in_coroutine() ? transfer_route(fd, &fl) : BY_LIBC;
  if (how == BY_LIBC)
    return CALL_NEXT(writev, fd, iov, cnt);
  if (how == BY_POOL)
    return file_io(&(struct file_io){.call = F_WRITEV, .fd = fd, .iov = iov, .cnt = cnt,
                                     .nonblock = fl & O_NONBLOCK});
  ssize_t r;
  do
    r = weft_writev(fd, iov, cnt);
  while (sq_was_full_on(fd, r));
  return write_rest(fd, iov, r >= 0 ? (size_t)cnt : 0, r, AS_WRITE);
}

/* ---- sockets ------------------------------------------------------------------------ */

HOOK ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  if (!in_coroutine() || receive_never_waits(fd, flags))
    return CALL_NEXT(recv, fd, buf, n, flags);
  ssize_t r;
  do
    r = weft_recv(fd, buf, n, flags);
  while (sq_was_full(r));
  return libc_result(r);
}

HOOK ssize_t send(int fd, const void *buf, size_t n, int flags)
{
  if (!in_coroutine() || never_waits(fd, flags))
    return CALL_NEXT(send, fd, buf, n, flags);
  size_t done = 0; /* a datagram goes whole or not at all: one round */
  int r = write_fully(fd, buf, n, flags, &done);
  return part_or_error(done, r);
}

HOOK ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr,
                      socklen_t *len)
{
  if (!in_coroutine() || receive_never_waits(fd, flags))
    return CALL_NEXT(recvfrom, fd, buf, n, flags, SA(addr), len);
  ssize_t r;
  do
    r = weft_recvfrom(fd, buf, n, flags, SA(addr), len);
  while (sq_was_full(r));
  return libc_result(r);
}

/* MSG_FASTOPEN on a blocking socket connects, then sends (the data rides
 * the SYN where a cookie allows). io_uring's attempts do not wait: they
 * would say EINPROGRESS. So the connection is made first, as a blocking
 * connect, and the data follows as a plain send - without the saved round
 * trip, with the blocking call's result. 0, or -errno; *flags loses the
 * flag. */
static int fastopen_connect(int fd, const struct sockaddr *addr, socklen_t len, int *flags)
{
  if (!(*flags & MSG_FASTOPEN))
    return 0;
  *flags &= ~MSG_FASTOPEN;
  int r;
  do
    r = weft_connect(fd, addr, len);
  while (sq_was_full(r));
  return r == -EISCONN ? 0 : r;
}

HOOK ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG addr,
                    socklen_t len)
{
  if (!in_coroutine() || never_waits(fd, flags))
    return CALL_NEXT(sendto, fd, buf, n, flags, SA(addr), len);
  int c = fastopen_connect(fd, SA(addr), len, &flags);
  if (c < 0)
    return libc_result(c);
  /* The address only matters to the first round: what a stream socket
   * has not taken of it goes as send(2) would. */
  struct iovec one = {.iov_base = (void *)buf, .iov_len = n};
  ssize_t r;
  do
    r = weft_sendto(fd, buf, n, flags, SA(addr), len);
  while (sq_was_full(r));
  return write_rest(fd, &one, 1, r, flags);
}

/* weft_recvmsg always makes received descriptors close-on-exec; recvmsg(2)
 * does only with MSG_CMSG_CLOEXEC - and only then says so in msg_flags,
 * where the kernel copies it from the flags it was given. */
static void descriptors_as_asked(struct msghdr *msg, int flags)
{
  if (flags & MSG_CMSG_CLOEXEC)
    return;
  msg->msg_flags &= ~MSG_CMSG_CLOEXEC;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
      fcntl(fd, F_SETFD, 0);
    }
  }
}

HOOK ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
  if (!in_coroutine() || receive_never_waits(fd, flags))
    return CALL_NEXT(recvmsg, fd, msg, flags);
  ssize_t r;
  do
    r = weft_recvmsg(fd, msg, flags);
  while (sq_was_full(r));
  if (r >= 0) {
    int saved = errno;
    descriptors_as_asked(msg, flags);
    errno = saved;
  }
  return libc_result(r);
}

HOOK ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
  /* No msghdr: libc's EFAULT (the MSG_FASTOPEN check below reads it). */
  if (!in_coroutine() || !msg || never_waits(fd, flags))
    return CALL_NEXT(sendmsg, fd, msg, flags);
  /* Nothing here reads msg before the kernel has taken it (an unreadable
   * one is its EFAULT, as for libc) - but a MSG_FASTOPEN's address. */
  int c = flags & MSG_FASTOPEN ? fastopen_connect(fd, msg->msg_name, msg->msg_namelen, &flags)
                               : 0;
  if (c < 0)
    return libc_result(c);
  /* Control data (descriptors, credentials) goes with the first round
   * only; a stream socket's remaining bytes follow as send(2)s. */
  ssize_t r;
  do
    r = weft_sendmsg(fd, msg, flags);
  while (sq_was_full(r));
  if (r < 0)
    return libc_result(r); /* msg may be unreadable: EFAULT */
  return write_rest(fd, msg->msg_iov, msg->msg_iovlen, r, flags);
}

/* weft_accept always asks for SOCK_CLOEXEC; accept(2) gives exactly the
 * flags asked for, so the descriptor loses it again when not asked. */
static int accept_as_asked(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
  if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
    return -EINVAL;
  int r;
  do
    r = weft_accept(fd, addr, len, flags);
  while (sq_was_full(r));
  if (r >= 0 && !(flags & SOCK_CLOEXEC) && fcntl(r, F_SETFD, 0) < 0) {
    int e = errno;
    weft_close(r);
    r = -e;
  }
  return r;
}

HOOK int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
  if (!in_coroutine() || never_waits(fd, 0))
    return (int)CALL_NEXT(accept, fd, SA(addr), len);
  return (int)libc_result(accept_as_asked(fd, SA(addr), len, 0));
}

HOOK int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
  if (!in_coroutine() || never_waits(fd, 0))
    return (int)CALL_NEXT(accept4, fd, SA(addr), len, flags);
  return (int)libc_result(accept_as_asked(fd, SA(addr), len, flags));
}

HOOK int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
  if (!in_coroutine() || never_waits(fd, 0))
    return (int)CALL_NEXT(connect, fd, SA(addr), len);
  int r;
  do
    r = weft_connect(fd, SA(addr), len);
  while (sq_was_full(r));
  return (int)libc_result(r);
}

/* ---- fortified code ------------------------------------------------------------------------ */

/* Code built with _FORTIFY_SOURCE (many distributions' default flags) calls
 * glibc's checking variants where the compiler knows a buffer's size:
 * __read_chk for read, and so on. Those make the system call inside libc,
 * past the hook, and would block the shard. These make the same check,
 * leaving a failure to glibc's own variant (which aborts), and are then the
 * hooked call. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *len);

NEXT(ssize_t, __read_chk, (int, void *, size_t, size_t))
NEXT(ssize_t, __recv_chk, (int, void *, size_t, size_t, int))
NEXT(ssize_t, __recvfrom_chk,
     (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *))

HOOK ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
  if (n > buflen)
    return CALL_NEXT(__read_chk, fd, buf, n, buflen);
  return read(fd, buf, n);
}

HOOK ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
  if (n > buflen)
    return CALL_NEXT(__recv_chk, fd, buf, n, buflen, flags);
  return recv(fd, buf, n, flags);
}

HOOK ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                            struct sockaddr *addr, socklen_t *len)
{
  if (n > buflen)
    return CALL_NEXT(__recvfrom_chk, fd, buf, n, buflen, flags, addr, len);
  return recvfrom(fd, buf, n, flags, addr, len);
}

/* ---- name lookups ---------------------------------------------------------------------- */

struct lookup {
  /* getaddrinfo's arguments, or getnameinfo's */
  const char *node, *service;
  const struct addrinfo *hints;
  struct addrinfo **res;
  const struct sockaddr *sa;
  socklen_t salen, hostlen, servlen;
  char *host, *serv;
  int flags;
  /* what the pool thread got */
  bool ran;
  int result, err;
};

static void *run_getaddrinfo(void *arg)
{
  struct lookup *l = arg;
  l->result = next_getaddrinfo()(l->node, l->service, l->hints, l->res);
  l->err = errno;
  l->ran = true;
  return NULL;
}

static void *run_getnameinfo(void *arg)
{
  struct lookup *l = arg;
  l->result = next_getnameinfo()(l->sa, l->salen, l->host, l->hostlen, l->serv, l->servlen,
                                 l->flags);
  l->err = errno;
  l->ran = true;
  return NULL;
}

/* Runs a lookup on the blocking pool: its own result if it ran (errno as
 * it left it, for EAI_SYSTEM), otherwise what kept it from running. */
static int lookup_in_pool(void *(*run)(void *), struct lookup *l)
{
  int r = weft_blocking(run, l, NULL);
  if (l->ran) {
    if (l->result == EAI_SYSTEM)
      errno = l->err;
    return l->result;
  }
  if (r == -ENOMEM)
    return EAI_MEMORY;
  if (r == -EAGAIN)
    return EAI_AGAIN;
  errno = -r; /* ECANCELED, ETIMEDOUT */
  return EAI_SYSTEM;
}

/* Only if the dynamic linker found no next definition at all. */
static int no_next_lookup(void)
{
  errno = ENOSYS;
  return EAI_SYSTEM;
}

HOOK int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                     struct addrinfo **res)
{
  if (!next_getaddrinfo())
    return no_next_lookup();
  /* Numbers only: nothing to look up, nothing to wait for. */
  int fl = hints ? hints->ai_flags : 0;
  bool numeric = node && (fl & AI_NUMERICHOST) && (!service || (fl & AI_NUMERICSERV));
  if (!in_coroutine() || numeric)
    return next_getaddrinfo()(node, service, hints, res);
  struct lookup l = {.node = node, .service = service, .hints = hints, .res = res};
  return lookup_in_pool(run_getaddrinfo, &l);
}

HOOK int getnameinfo(const struct sockaddr *sa, socklen_t salen, char *host, socklen_t hostlen,
                     char *serv, socklen_t servlen, int flags)
{
  if (!next_getnameinfo())
    return no_next_lookup();
  bool numeric = (!host || (flags & NI_NUMERICHOST)) && (!serv || (flags & NI_NUMERICSERV));
  if (!in_coroutine() || numeric)
    return next_getnameinfo()(sa, salen, host, hostlen, serv, servlen, flags);
  struct lookup l = {.sa = sa, .salen = salen, .host = host, .hostlen = hostlen,
                     .serv = serv, .servlen = servlen, .flags = flags};
  return lookup_in_pool(run_getnameinfo, &l);
}

/* ---- sleeps --------------------------------------------------------------------------- */

HOOK int nanosleep(const struct timespec *req, struct timespec *rem)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(nanosleep, req, rem);
  if (!req || !timespec_valid(req)) {
    errno = req ? EINVAL : EFAULT; /* as the kernel: no request to read */
    return -1;
  }
  int64_t end = after(timespec_ns(req));
  int r = weft_sleep_until(end);
  if (r < 0 && rem) {
    int64_t left = left_until(end);
    rem->tv_sec = (time_t)(left / WEFT_SEC);
    rem->tv_nsec = (long)(left % WEFT_SEC);
  }
  return (int)libc_result(r);
}

HOOK int usleep(useconds_t us)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(usleep, us);
  return (int)libc_result(weft_sleep_until(after((int64_t)us * WEFT_USEC)));
}

HOOK unsigned sleep(unsigned s)
{
  if (!in_coroutine())
    return next_sleep() ? next_sleep()(s) : s;
  int64_t end = after((int64_t)s * WEFT_SEC);
  int r = weft_sleep_until(end);
  if (r == 0)
    return 0;
  errno = -r;
  /* The whole seconds not slept, as glibc's sleep counts them (rounded
   * down: one interrupted with 0.7 s left returns 0). */
  return (unsigned)(left_until(end) / WEFT_SEC);
}
