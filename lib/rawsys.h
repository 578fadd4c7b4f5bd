/* SPDX-License-Identifier: MIT */
/*
 * System calls made without libc's exported wrappers, for weft's own calls
 * from code that may run in a coroutine. With libweft-hook loaded
 * (lib/hook.c), read(), write(), connect(), send(), recv() and their kin
 * called in a coroutine are weft's blocking calls - right for the program's
 * code, wrong inside the runtime: a wake-up sent while a spin lock is held
 * must not suspend the task that sends it, and a non-blocking attempt must
 * not pin a stealable task to its shard as a hooked call does. These go
 * straight to the kernel instead. Results as the libc calls (-1 and
 * errno).
 */
#ifndef WEFT_LIB_RAWSYS_H
#define WEFT_LIB_RAWSYS_H

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static inline ssize_t weft__sys_read(int fd, void *buf, size_t n)
{
  return syscall(SYS_read, fd, buf, n);
}

static inline ssize_t weft__sys_write(int fd, const void *buf, size_t n)
{
  return syscall(SYS_write, fd, buf, n);
}

static inline ssize_t weft__sys_pread(int fd, void *buf, size_t n, off_t off)
{
  return syscall(SYS_pread64, fd, buf, n, off);
}

static inline int weft__sys_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
  return (int)syscall(SYS_connect, fd, addr, len);
}

static inline ssize_t weft__sys_recv(int fd, void *buf, size_t n, int flags)
{
  return syscall(SYS_recvfrom, fd, buf, n, flags, NULL, NULL);
}

static inline ssize_t weft__sys_send(int fd, const void *buf, size_t n, int flags)
{
  return syscall(SYS_sendto, fd, buf, n, flags, NULL, 0);
}

static inline ssize_t weft__sys_recvmsg(int fd, struct msghdr *msg, int flags)
{
  return syscall(SYS_recvmsg, fd, msg, flags);
}

static inline ssize_t weft__sys_sendmsg(int fd, const struct msghdr *msg, int flags)
{
  return syscall(SYS_sendmsg, fd, msg, flags);
}

/* ppoll(2) without a signal mask (the kernel then ignores the size). */
static inline int weft__sys_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts)
{
  return (int)syscall(SYS_ppoll, fds, n, ts, NULL, 0);
}

#endif
