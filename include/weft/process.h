/* SPDX-License-Identifier: MIT */
/*
 * Waiting for child processes from coroutines.
 *
 * Start a child with posix_spawn(3) (glibc runs it with vfork semantics on a
 * stack of its own, so the shard pauses only until the child execs), then
 * wait for it here: the coroutine is suspended, not the shard.
 *
 *     posix_spawnattr_t attr;             see "signal mask" below
 *     sigset_t none;
 *     sigemptyset(&none);
 *     posix_spawnattr_init(&attr);
 *     posix_spawnattr_setsigmask(&attr, &none);
 *     posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
 *     pid_t pid;
 *     char *argv[] = {"gzip", "-9", "big.log", NULL};
 *     if (posix_spawnp(&pid, "gzip", NULL, &attr, argv, environ) == 0) {
 *       int status;
 *       if (weft_process_wait_dl(pid, &status, weft_now() + 60 * WEFT_SEC) == 0 &&
 *           WIFEXITED(status) && WEXITSTATUS(status) == 0)
 *         ...
 *     }
 *     posix_spawnattr_destroy(&attr);
 *
 * The signal mask: a child starts with the mask of the thread that spawned
 * it and keeps it across exec. Shard threads, and the blocking pool's, block
 * SIGPIPE (so that a write to a broken pipe or socket gives weft's callers
 * -EPIPE): a child spawned from a coroutine or a pool job without a mask of
 * its own would have SIGPIPE blocked too, and a write of its to a pipe whose
 * reader is gone would fail with EPIPE instead of ending it as usual. Give
 * it the mask it should have, as above - usually an empty one, which also
 * keeps from it the signals blocked for weft_signal_open (weft/signal.h).
 *
 * Do not fork() in a coroutine unless the child calls only async-signal-safe
 * functions until it execs: the child gets a copy of the runtime but none of
 * its threads - no shard runs there, and its copies of the rings' memory
 * belong to the parent's rings. Nothing of weft may be called in such a
 * child. (fork() before the runtime starts is fine.)
 *
 * Reaping: a child must be waited for by exactly one caller - this function,
 * waitpid(2), or a SIGCHLD handler - and a process that sets SIGCHLD to
 * SIG_IGN has its children reaped by the kernel: every wait then fails with
 * -ECHILD.
 */
#ifndef WEFT_PROCESS_H
#define WEFT_PROCESS_H

#include "common.h"

#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Waits until child `pid` ends and reaps it: 0, with its status in
 * waitpid(2)'s form (WIFEXITED/WEXITSTATUS, WIFSIGNALED/WTERMSIG, WCOREDUMP)
 * in *status if status is not NULL. Stopped and continued children are not
 * reported: the wait goes on until the child ends.
 *
 * Errors: -EINVAL (pid <= 0), -ECHILD (as waitpid(2): no such child - not
 * a child of this process, already reaped, or no such process at all),
 * -EMFILE/-ENFILE (no descriptor for the pidfd), -ETIMEDOUT, -ECANCELED,
 * -ENOMEM (rarely, in a coroutine with a deadline: no room for its timer,
 * as in weft/io.h; the child is left as it is), -EBUSY (rarely, in a
 * coroutine: weft_poll's, the shard's submission queue stayed full; the
 * child is left as it is), -ENOSYS (a kernel before 5.4, without
 * pidfd_open(2) or waitid(2) on a pidfd: nothing is reaped, use
 * waitpid(2)). A passed deadline or a cancel fails the call
 * first (only -EINVAL comes
 * before it), even for a child that has ended or a pid that is no child,
 * and reaps nothing: the child is left as it is (still running,
 * or a zombie for the next wait) - kill it first if it must not outlive the
 * wait.
 *
 * A coroutine waits on a pidfd with weft_poll; a plain thread blocks in
 * poll(2). */
WEFT_API int weft_process_wait(pid_t pid, int *status);
WEFT_API int weft_process_wait_dl(pid_t pid, int *status, int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
