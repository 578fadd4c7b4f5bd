/* SPDX-License-Identifier: MIT */
/* Signals through a signalfd, waited for with weft_poll; see weft/signal.h. */
#include "rawsys.h"
#include "weft/io.h"
#include "weft/signal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

int weft_signal_block(const sigset_t *set)
{
  if (!set)
    return -EINVAL;
  return -pthread_sigmask(SIG_BLOCK, set, NULL); /* it returns the error number */
}

/* 0 if set names at least one signal that can be caught and every signal of
 * it is blocked in the calling thread; -EINVAL otherwise. */
static int check_set(const sigset_t *set)
{
  sigset_t blocked;
  if (pthread_sigmask(SIG_BLOCK, NULL, &blocked) != 0)
    return -EINVAL;
  bool any = false;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sigismember(set, sig) != 1)
      continue;
    if (sig == SIGKILL || sig == SIGSTOP || sigismember(&blocked, sig) != 1)
      return -EINVAL;
    any = true;
  }
  return any ? 0 : -EINVAL;
}

int weft_signal_open(const sigset_t *set)
{
  if (!set)
    return -EINVAL;
  int r = check_set(set);
  if (r < 0)
    return r;
  int saved = errno;
  int fd = signalfd(-1, set, SFD_NONBLOCK | SFD_CLOEXEC);
  r = fd < 0 ? -errno : fd;
  errno = saved;
  return r;
}

/* One non-blocking read of a signal: its number, -EAGAIN if none is pending,
 * or -errno. Never inlined: it runs after a suspension, possibly on another
 * shard's thread, and inlined into its caller it would use the errno
 * address the compiler took before the suspension (glibc declares
 * __errno_location const) - the errno of the thread the task left. */
__attribute__((noinline)) static int take_signal(int fd, struct signalfd_siginfo *info)
{
  struct signalfd_siginfo si;
  int saved = errno, r;
  ssize_t n;
  do
    n = weft__sys_read(fd, &si, sizeof(si));
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof(si)) {
    r = (int)si.ssi_signo;
    if (info)
      *info = si;
  } else {
    r = n < 0 ? -errno : -EINVAL; /* a short read: not a signalfd */
  }
  errno = saved;
  return r;
}

int weft_signal_wait_dl(int fd, struct signalfd_siginfo *info, int64_t deadline)
{
  /* The read must never block: a shard thread would stop with it, and
   * between the poll and the read another waiter may take the signal. */
  int saved = errno;
  int fl = fcntl(fd, F_GETFL);
  int e = errno;
  errno = saved;
  if (fl < 0)
    return -e;
  if (!(fl & O_NONBLOCK))
    return -EINVAL;
  /* Poll first, even when a signal is pending: the poll applies the
   * deadline and cancel rules before anything is taken. */
  for (;;) {
    int r = weft_poll_dl(fd, POLLIN, deadline);
    if (r < 0)
      return r;
    r = take_signal(fd, info);
    if (r != -EAGAIN)
      return r;
  }
}

int weft_signal_wait(int fd, struct signalfd_siginfo *info)
{
  return weft_signal_wait_dl(fd, info, WEFT_NO_DEADLINE);
}
