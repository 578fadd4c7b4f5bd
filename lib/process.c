/* SPDX-License-Identifier: MIT */
/* Waiting for a child through a pidfd; see weft/process.h. */
#include "core.h"
#include "op.h"
#include "weft/io.h"
#include "weft/process.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3 /* Linux 5.4; glibc headers may predate it */
#endif

static int pidfd_open_errno(pid_t pid)
{
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -errno : (int)fd;
}

/* waitid(2) on the pidfd, never blocking: 1 and the status in waitpid's
 * form once the child has ended (and is reaped, unless `peek`), 0 while it
 * runs, or -errno (-ECHILD: not our child, or reaped by someone else;
 * -ENOSYS: a kernel before 5.4). */
static int try_wait(int pidfd, int *status, bool peek)
{
  for (;;) {
    siginfo_t si;
    si.si_pid = 0;
    if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG | (peek ? WNOWAIT : 0)) < 0) {
      if (errno == EINTR)
        continue;
      /* The options are valid, so EINVAL means the kernel has no P_PIDFD
       * (Linux 5.3: pidfd_open but not this): say so, not "pid <= 0". */
      return errno == EINVAL ? -ENOSYS : -errno;
    }
    if (si.si_pid == 0)
      return 0;
    if (status) {
      switch (si.si_code) {
      case CLD_EXITED: *status = (si.si_status & 0xff) << 8; break;
      case CLD_DUMPED: *status = (si.si_status & 0x7f) | 0x80; break;
      default: *status = si.si_status & 0x7f; break; /* CLD_KILLED */
      }
    }
    return 1;
  }
}

static int wait_errno(weft_task *t, pid_t pid, int *status, int64_t deadline)
{
  if (pid <= 0)
    return -EINVAL;
  /* A passed deadline or a cancel fails the call first (process.h), before
   * anything is asked of the pid: a cancelled task gets -ECANCELED for a
   * pid that is not its child too, as weft_poll would give it. */
  int r = weft__may_wait(t, weft__deadline_for(t, deadline));
  if (r < 0)
    return r;
  int pidfd = pidfd_open_errno(pid);
  /* As waitpid(2) says it: no such process (ESRCH), or a thread that is
   * not a process leader (ENOENT since Linux 6.9, EINVAL before) - pid > 0
   * was checked, so EINVAL can mean nothing else. */
  if (pidfd == -ESRCH || pidfd == -ENOENT || pidfd == -EINVAL)
    return -ECHILD;
  if (pidfd < 0)
    return pidfd;
  /* Not our child: say so now rather than after it ends. */
  r = try_wait(pidfd, NULL, true);
  /* Then the deadline and cancel rules, through the poll; a pidfd is
   * readable once its process has ended. */
  while (r >= 0) {
    r = weft_poll_dl(pidfd, POLLIN, deadline);
    if (r >= 0 && (r = try_wait(pidfd, status, false)) == 1) {
      r = 0;
      break;
    }
  }
  close(pidfd);
  return r;
}

int weft_process_wait_dl(pid_t pid, int *status, int64_t deadline)
{
  /* The system calls around the wait set errno, and the compiler keeps
   * errno's address across the wait (glibc declares __errno_location
   * const): so the task stays on its shard's thread until it is done,
   * or the last of them - and the restore - would reach the errno of a
   * thread it left, where another coroutine runs. */
  weft_task *t = weft__task_self();
  if (t)
    t->pinned_ops++;
  int saved = errno;
  int r = wait_errno(t, pid, status, deadline);
  errno = saved;
  if (t)
    t->pinned_ops--;
  return r;
}

int weft_process_wait(pid_t pid, int *status)
{
  return weft_process_wait_dl(pid, status, WEFT_NO_DEADLINE);
}
