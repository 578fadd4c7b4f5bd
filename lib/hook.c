/* SPDX-License-Identifier: MIT */
/*
 * libweft-hook: unmodified blocking code in coroutines.
 *
 * A separate shared library that defines read, write, readv, writev, recv,
 * send, recvfrom, sendto, recvmsg, sendmsg, accept, accept4, connect, poll,
 * ppoll, select, pselect, epoll_wait, epoll_pwait, sleep, usleep, nanosleep,
 * getaddrinfo and getnameinfo. Linked into a program (before libc,
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
 * send never raises SIGPIPE. A call that cannot wait (an O_NONBLOCK
 * descriptor, MSG_DONTWAIT) is libc's own, EAGAIN and all; an event loop
 * over non-blocking descriptors waits in the hooked poll instead.
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
 * The name lookups run on the runtime's blocking pool: glibc's resolver
 * talks to DNS servers through its own internal calls, which no hook sees.
 * A lookup that already ran returns its result even to a task cancelled
 * meanwhile (the list is the caller's to free); one that never started gives
 * EAI_SYSTEM with errno ECANCELED or ETIMEDOUT.
 *
 * What stays as it was: stdio (glibc calls read and write inside itself, not
 * through these symbols), ppoll, pselect and epoll_pwait given a signal mask
 * (the mask is the shard thread's, shared by every coroutine on it: they
 * block the shard, as before), and socket timeouts (SO_RCVTIMEO and
 * SO_SNDTIMEO are not consulted: use a deadline scope).
 */
#include "weft.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* glibc's sockaddr arguments are a transparent union under _GNU_SOURCE. */
#if defined(__USE_GNU) && defined(__GNUC__) && !defined(__cplusplus)
#define SA(a) ((a).__sockaddr__)
#else
#define SA(a) (a)
#endif

#define HOOK __attribute__((visibility("default")))

/* ---- the next definitions ------------------------------------------------------ */

/* Looked up on first use (a call may come before any constructor runs);
 * two threads racing to it store the same value. */
#define NEXT(ret, name, params)                                                               \
  typedef ret(*name##_fn) params;                                                             \
  static _Atomic(name##_fn) next_##name##_p;                                                  \
  static name##_fn next_##name(void)                                                          \
  {                                                                                           \
    name##_fn f = atomic_load_explicit(&next_##name##_p, memory_order_relaxed);               \
    if (!f) {                                                                                 \
      void *sym = dlsym(RTLD_NEXT, #name);                                                    \
      memcpy(&f, &sym, sizeof(f));                                                            \
      atomic_store_explicit(&next_##name##_p, f, memory_order_relaxed);                       \
    }                                                                                         \
    return f;                                                                                 \
  }

NEXT(ssize_t, read, (int, void *, size_t))
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
NEXT(int, poll, (struct pollfd *, nfds_t, int))
NEXT(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))
NEXT(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *))
NEXT(int, pselect,
     (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *))
NEXT(int, epoll_wait, (int, struct epoll_event *, int, int))
NEXT(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *))
NEXT(int, getaddrinfo, (const char *, const char *, const struct addrinfo *, struct addrinfo **))
NEXT(int, getnameinfo,
     (const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t, int))
NEXT(unsigned, sleep, (unsigned))
NEXT(int, usleep, (useconds_t))
NEXT(int, nanosleep, (const struct timespec *, struct timespec *))

/* Only if the dynamic linker found no next definition at all. */
static long no_next(void)
{
  errno = ENOSYS;
  return -1;
}

#define CALL_NEXT(name, ...) (next_##name() ? next_##name()(__VA_ARGS__) : no_next())

/* True in a coroutine, which from then on stays on its shard (legacy code
 * keeps errno's address across its calls: see the top of this file). */
static bool in_coroutine(void)
{
  return weft_task_pin() >= 0;
}

/* A call that cannot wait is libc's own: an O_NONBLOCK descriptor (io_uring
 * would wait for readiness anyway), MSG_DONTWAIT, or no descriptor at all
 * (libc says EBADF). One fcntl(2) per call, small beside a ring round trip. */
static bool never_waits(int fd, int msg_flags)
{
  if (msg_flags & MSG_DONTWAIT)
    return true;
  int saved = errno;
  int fl = fcntl(fd, F_GETFL);
  errno = saved;
  return fl < 0 || (fl & O_NONBLOCK);
}

/* weft's -errno results as libc's. */
static long libc_result(long r)
{
  if (r >= 0)
    return r;
  errno = (int)-r;
  return -1;
}

/* ---- descriptors ------------------------------------------------------------------- */

HOOK ssize_t read(int fd, void *buf, size_t n)
{
  if (!in_coroutine() || never_waits(fd, 0))
    return CALL_NEXT(read, fd, buf, n);
  return libc_result(weft_read(fd, buf, n));
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
    ssize_t r = flags == AS_WRITE ? weft_write(fd, buf + off, n - off)
                                  : weft_send(fd, buf + off, n - off, flags);
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
  if (!in_coroutine() || never_waits(fd, 0))
    return CALL_NEXT(write, fd, buf, n);
  size_t done = 0;
  int r = write_fully(fd, buf, n, AS_WRITE, &done);
  return part_or_error(done, r);
}

HOOK ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
  if (!in_coroutine() || never_waits(fd, 0))
    return CALL_NEXT(readv, fd, iov, cnt);
  return libc_result(weft_readv(fd, iov, cnt));
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
  if (!in_coroutine() || never_waits(fd, 0))
    return CALL_NEXT(writev, fd, iov, cnt);
  ssize_t r = weft_writev(fd, iov, cnt);
  return write_rest(fd, iov, r >= 0 ? (size_t)cnt : 0, r, AS_WRITE);
}

/* ---- sockets ------------------------------------------------------------------------ */

HOOK ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  if (!in_coroutine() || never_waits(fd, flags))
    return CALL_NEXT(recv, fd, buf, n, flags);
  return libc_result(weft_recv(fd, buf, n, flags));
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
  if (!in_coroutine() || never_waits(fd, flags))
    return CALL_NEXT(recvfrom, fd, buf, n, flags, SA(addr), len);
  return libc_result(weft_recvfrom(fd, buf, n, flags, SA(addr), len));
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
  int r = weft_connect(fd, addr, len);
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
  return write_rest(fd, &one, 1, weft_sendto(fd, buf, n, flags, SA(addr), len), flags);
}

/* weft_recvmsg always makes received descriptors close-on-exec; recvmsg(2)
 * does only with MSG_CMSG_CLOEXEC. */
static void descriptors_as_asked(struct msghdr *msg, int flags)
{
  if (flags & MSG_CMSG_CLOEXEC)
    return;
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
  if (!in_coroutine() || never_waits(fd, flags))
    return CALL_NEXT(recvmsg, fd, msg, flags);
  ssize_t r = weft_recvmsg(fd, msg, flags);
  if (r >= 0) {
    int saved = errno;
    descriptors_as_asked(msg, flags);
    errno = saved;
  }
  return libc_result(r);
}

HOOK ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
  if (!in_coroutine() || never_waits(fd, flags))
    return CALL_NEXT(sendmsg, fd, msg, flags);
  int c = fastopen_connect(fd, msg->msg_name, msg->msg_namelen, &flags);
  if (c < 0)
    return libc_result(c);
  /* Control data (descriptors, credentials) goes with the first round
   * only; a stream socket's remaining bytes follow as send(2)s. */
  ssize_t r = weft_sendmsg(fd, msg, flags);
  return write_rest(fd, msg->msg_iov, r >= 0 ? msg->msg_iovlen : 0, r, flags);
}

/* weft_accept always asks for SOCK_CLOEXEC; accept(2) gives exactly the
 * flags asked for, so the descriptor loses it again when not asked. */
static int accept_as_asked(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
  if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
    return -EINVAL;
  int r = weft_accept(fd, addr, len, flags);
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
  return (int)libc_result(weft_connect(fd, SA(addr), len));
}

/* ---- poll and select ------------------------------------------------------------------ */

/* now + ns, saturating. */
static int64_t after(int64_t ns)
{
  int64_t now = weft_now();
  return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}

/* What is left until `end`, 0 once it has passed. */
static int64_t left_until(int64_t end)
{
  int64_t left = end - weft_now();
  return left < 0 ? 0 : left;
}

/* The waits below take an absolute deadline, WEFT_NO_DEADLINE for none. */
static int64_t deadline_in_ms(int timeout)
{
  return timeout < 0 ? WEFT_NO_DEADLINE : after((int64_t)timeout * WEFT_MSEC);
}

static bool timespec_valid(const struct timespec *ts)
{
  return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000;
}

/* A valid relative timespec in ns, saturating. */
static int64_t timespec_ns(const struct timespec *ts)
{
  return ts->tv_sec > (INT64_MAX - ts->tv_nsec) / WEFT_SEC
             ? INT64_MAX
             : (int64_t)ts->tv_sec * WEFT_SEC + ts->tv_nsec;
}

/* ppoll's and pselect's timeout (NULL: none) as a deadline. */
static int64_t deadline_in_ts(const struct timespec *ts)
{
  return ts ? after(timespec_ns(ts)) : WEFT_NO_DEADLINE;
}

/* weft_poll_dl for the calls below: the ready events, 0 once the call's own
 * timeout has passed, or -errno - -ETIMEDOUT only when a deadline scope
 * ended the wait first. */
static int wait_ready(int fd, short events, int64_t deadline)
{
  int r = weft_poll_dl(fd, (unsigned short)events, deadline);
  if (r == -ETIMEDOUT && deadline >= 0 && weft_now() >= deadline)
    return 0;
  return r;
}

/* No descriptors: poll(2) is a sleep. */
static int poll_nothing(int64_t deadline)
{
  for (;;) {
    int r = deadline < 0 ? weft_sleep(3600 * WEFT_SEC) : weft_sleep_until(deadline);
    if (r < 0)
      return r;
    if (deadline >= 0)
      return 0;
  }
}

/* One descriptor: one weft_poll. A bad one is POLLNVAL, as poll(2) says it.
 * With no time left (a timeout of 0), poll(2) itself answers: weft_poll
 * with a passed deadline would not even ask. */
static int poll_one(struct pollfd *p, int64_t deadline)
{
  if (deadline >= 0 && deadline <= weft_now()) {
    int n = (int)CALL_NEXT(poll, p, 1, 0);
    return n < 0 ? -errno : n;
  }
  int r = wait_ready(p->fd, p->events, deadline);
  if (r == -EBADF) {
    p->revents = POLLNVAL;
    return 1;
  }
  if (r <= 0)
    return r;
  p->revents = (short)r;
  return 1;
}

/* Several: ask poll(2) without waiting; if none is ready, wait in weft_poll
 * for an epoll instance holding them all (readable once any of them is),
 * and ask again. */
static int poll_many(struct pollfd *fds, nfds_t n, int64_t deadline)
{
  int r = (int)CALL_NEXT(poll, fds, n, 0);
  if (r != 0 || (deadline >= 0 && deadline <= weft_now()))
    return r < 0 ? -errno : r;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    return -errno;
  for (nfds_t i = 0; i < n; i++) {
    if (fds[i].fd < 0)
      continue;
    struct epoll_event ev = {.events = (uint32_t)(unsigned short)fds[i].events};
    /* Refused (EPERM: a regular file, always ready) or gone (EBADF): the
     * next poll(2) reports it. A descriptor listed twice waits for the
     * events of every entry. */
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i].fd, &ev) < 0 && errno == EEXIST) {
      for (nfds_t k = 0; k < i; k++)
        if (fds[k].fd == fds[i].fd)
          ev.events |= (uint32_t)(unsigned short)fds[k].events;
      epoll_ctl(ep, EPOLL_CTL_MOD, fds[i].fd, &ev);
    }
  }
  for (;;) {
    r = wait_ready(ep, POLLIN, deadline);
    if (r <= 0)
      break;
    r = (int)CALL_NEXT(poll, fds, n, 0);
    if (r != 0) {
      if (r < 0)
        r = -errno;
      break;
    }
  }
  close(ep);
  return r;
}

/* poll(2) in a coroutine: the number of ready entries, or -errno. */
static int poll_until(struct pollfd *fds, nfds_t n, int64_t deadline)
{
  int saved = errno;
  for (nfds_t i = 0; i < n; i++)
    fds[i].revents = 0;
  int r;
  if (n == 0)
    r = poll_nothing(deadline);
  else if (n == 1 && fds[0].fd >= 0)
    r = poll_one(&fds[0], deadline);
  else
    r = poll_many(fds, n, deadline);
  errno = saved;
  return r;
}

HOOK int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(poll, fds, n, timeout);
  return (int)libc_result(poll_until(fds, n, deadline_in_ms(timeout)));
}

/* Without a signal mask ppoll is poll with a timespec (left as it is, as
 * glibc's ppoll leaves it). */
HOOK int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
  if (!in_coroutine() || mask)
    return (int)CALL_NEXT(ppoll, fds, n, ts, mask);
  if (ts && !timespec_valid(ts)) {
    errno = EINVAL;
    return -1;
  }
  return (int)libc_result(poll_until(fds, n, deadline_in_ts(ts)));
}

/* The sets as the kernel reads them: bit arrays of unsigned longs, as long
 * as nfds asks - past FD_SETSIZE too, for a program that allocates bigger
 * sets (FD_ISSET and FD_CLR would refuse those descriptors). */
#define SET_BITS (8 * sizeof(unsigned long))

static bool in_set(const fd_set *s, int fd)
{
  const unsigned long *w = (const unsigned long *)(const void *)s;
  return s && (w[(unsigned)fd / SET_BITS] >> ((unsigned)fd % SET_BITS) & 1);
}

/* Leaves fd in set s only if it is ready for what s asks; 1 if it stays. */
static int keep(fd_set *s, int fd, bool ready)
{
  if (!in_set(s, fd))
    return 0;
  if (!ready)
    ((unsigned long *)(void *)s)[(unsigned)fd / SET_BITS] &= ~(1ul << ((unsigned)fd % SET_BITS));
  return ready;
}

/* The size of the process's descriptor table ("FDSize" in
 * /proc/self/status), or -1. */
static long fd_table_size(void)
{
  FILE *f = fopen("/proc/self/status", "re");
  if (!f)
    return -1;
  char line[128];
  long size = -1;
  while (size < 0 && fgets(line, sizeof(line), f))
    if (strncmp(line, "FDSize:", 7) == 0)
      size = strtol(line + 7, NULL, 10);
  fclose(f);
  return size;
}

/* select's nfds as Linux takes it: negative is EINVAL, and past the
 * descriptor table it is cut down to the table's size - no descriptor lies
 * beyond, and the caller's sets need not be any longer. Only an nfds past
 * FD_SETSIZE asks (a file read); if the table size cannot be had, the hard
 * open-file limit bounds it. -EINVAL or the count. */
static int select_count(int nfds)
{
  if (nfds < 0)
    return -EINVAL;
  if (nfds <= FD_SETSIZE)
    return nfds;
  int saved = errno;
  long size = fd_table_size();
  struct rlimit rl;
  if (size < 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0)
    size = rl.rlim_max < (rlim_t)INT_MAX ? (long)rl.rlim_max : INT_MAX;
  errno = saved;
  return size >= 0 && size < nfds ? (int)size : nfds;
}

/* How many descriptors below nfds are in any of the sets. */
static size_t select_wanted(int nfds, const fd_set *rd, const fd_set *wr, const fd_set *ex)
{
  const fd_set *sets[3] = {rd, wr, ex};
  size_t words = ((size_t)nfds + SET_BITS - 1) / SET_BITS, n = 0;
  for (size_t i = 0; i < words; i++) {
    unsigned long any = 0;
    for (int k = 0; k < 3; k++)
      if (sets[k])
        any |= ((const unsigned long *)(const void *)sets[k])[i];
    if (i == words - 1 && nfds % SET_BITS)
      any &= (1ul << (nfds % SET_BITS)) - 1;
    n += (size_t)__builtin_popcountl(any);
  }
  return n;
}

/* select(2) as poll: Linux's own mapping of poll events to the three sets,
 * and EBADF for a descriptor that is not open. */
static int select_until(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, int64_t deadline)
{
  size_t want = select_wanted(nfds, rd, wr, ex);
  struct pollfd *fds = malloc(sizeof(*fds) * (want ? want : 1));
  if (!fds)
    return -ENOMEM;
  nfds_t n = 0;
  for (int fd = 0; fd < nfds && n < want; fd++) {
    short ev = (short)((in_set(rd, fd) ? POLLIN : 0) | (in_set(wr, fd) ? POLLOUT : 0) |
                       (in_set(ex, fd) ? POLLPRI : 0));
    if (ev)
      fds[n++] = (struct pollfd){.fd = fd, .events = ev};
  }
  int r = poll_until(fds, n, deadline);
  for (nfds_t i = 0; r >= 0 && i < n; i++)
    if (fds[i].revents & POLLNVAL)
      r = -EBADF;
  if (r >= 0) {
    r = 0;
    for (nfds_t i = 0; i < n; i++) {
      int fd = fds[i].fd;
      short re = fds[i].revents;
      r += keep(rd, fd, re & (POLLIN | POLLHUP | POLLERR)) + keep(wr, fd, re & (POLLOUT | POLLERR)) +
           keep(ex, fd, re & POLLPRI);
    }
  }
  free(fds);
  return r;
}

HOOK int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(select, nfds, rd, wr, ex, tv);
  struct timespec ts = {0, 0};
  if (tv && tv->tv_usec < 0) {
    ts.tv_sec = -1; /* invalid, as it is to select(2) */
  } else if (tv) {
    /* Linux takes a tv_usec of a second or more as whole seconds of it. */
    ts.tv_sec = tv->tv_sec;
    if (ts.tv_sec <= (time_t)(INT64_MAX / WEFT_SEC))
      ts.tv_sec += tv->tv_usec / 1000000;
    ts.tv_nsec = tv->tv_usec % 1000000 * 1000;
  }
  nfds = select_count(nfds);
  if (nfds < 0 || (tv && !timespec_valid(&ts))) {
    errno = EINVAL;
    return -1;
  }
  int64_t deadline = deadline_in_ts(tv ? &ts : NULL);
  int r = select_until(nfds, rd, wr, ex, deadline);
  if (tv) {
    int64_t left = left_until(deadline);
    tv->tv_sec = (time_t)(left / WEFT_SEC);
    tv->tv_usec = (suseconds_t)(left % WEFT_SEC / WEFT_USEC);
  }
  return (int)libc_result(r);
}

/* Without a signal mask pselect is select with a timespec, left as it is. */
HOOK int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
                 const sigset_t *mask)
{
  if (!in_coroutine() || mask)
    return (int)CALL_NEXT(pselect, nfds, rd, wr, ex, ts, mask);
  nfds = select_count(nfds);
  if (nfds < 0 || (ts && !timespec_valid(ts))) {
    errno = EINVAL;
    return -1;
  }
  return (int)libc_result(select_until(nfds, rd, wr, ex, deadline_in_ts(ts)));
}

/* ---- epoll ---------------------------------------------------------------------------- */

/* epoll_wait(2) in a coroutine: ask without waiting (which also checks the
 * arguments); if nothing is ready, wait in weft_poll for the epoll instance
 * itself - readable once any descriptor in it has an event - and ask again. */
static int epoll_until(int ep, struct epoll_event *ev, int max, int64_t deadline)
{
  int saved = errno;
  int r;
  for (;;) {
    r = (int)CALL_NEXT(epoll_wait, ep, ev, max, 0);
    if (r != 0) {
      if (r < 0)
        r = -errno;
      break;
    }
    if (deadline >= 0 && deadline <= weft_now())
      break;
    r = wait_ready(ep, POLLIN, deadline);
    if (r <= 0)
      break;
  }
  errno = saved;
  return r;
}

HOOK int epoll_wait(int ep, struct epoll_event *ev, int max, int timeout)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(epoll_wait, ep, ev, max, timeout);
  return (int)libc_result(epoll_until(ep, ev, max, deadline_in_ms(timeout)));
}

HOOK int epoll_pwait(int ep, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
  if (!in_coroutine() || mask)
    return (int)CALL_NEXT(epoll_pwait, ep, ev, max, timeout, mask);
  return (int)libc_result(epoll_until(ep, ev, max, deadline_in_ms(timeout)));
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
    errno = EINVAL;
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
  return (unsigned)((left_until(end) + WEFT_SEC - 1) / WEFT_SEC);
}
