/* SPDX-License-Identifier: MIT */
/*
 * Signals as something a coroutine waits for: the usual way for a server to
 * hear SIGTERM or SIGINT and shut down cleanly, or SIGHUP and reload.
 *
 *     sigset_t set;                       in main(), before weft_run()
 *     sigemptyset(&set);
 *     sigaddset(&set, SIGINT);
 *     sigaddset(&set, SIGTERM);
 *     weft_signal_block(&set);
 *     ...
 *     int fd = weft_signal_open(&set);    in a coroutine
 *     int sig = weft_signal_wait(fd, NULL);
 *
 * A signal that is blocked is not delivered to a handler; it stays pending
 * until a wait takes it. The one rule (signalfd(2)'s): the signals must be
 * blocked in every thread of the process, or the kernel delivers them the
 * usual way - for SIGTERM and SIGINT, ending the process - to a thread that
 * has them unblocked. Block them in main() before weft_run() or any other
 * thread starts: new threads, shard threads and the blocking pool's
 * included, inherit the mask. weft_signal_open() checks the calling thread
 * and refuses a set it has not blocked; it does not change any mask itself.
 * Do not block or unblock signals from a coroutine: it would change the mask
 * of whichever shard thread runs it, and a stealable coroutine moves.
 *
 * Which waiter: a signal sent to the process (kill(2), a terminal's Ctrl-C)
 * is seen by a wait on any shard or plain thread. One sent to a single thread
 * (pthread_kill, tgkill) is seen only by a wait running on that thread. Each
 * signal is taken by one wait; several coroutines may wait on one fd.
 * Standard signals do not queue: sent twice before a wait takes it, a signal
 * is taken once (real-time signals queue each sending).
 */
#ifndef WEFT_SIGNAL_H
#define WEFT_SIGNAL_H

#include "common.h"

#include <signal.h>
#include <stdint.h>
#include <sys/signalfd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* pthread_sigmask(SIG_BLOCK, set): adds set to the calling thread's blocked
 * signals. Meant for main() before weft_run(). 0, or -EINVAL (set NULL). */
WEFT_API int weft_signal_block(const sigset_t *set);

/* A descriptor that receives the signals of `set` (a non-blocking,
 * close-on-exec signalfd; close it with close(2) or weft_close). Returns the
 * fd, or -EINVAL (set NULL or empty, holding SIGKILL or SIGSTOP - which
 * cannot be caught - or holding a signal the calling thread has not
 * blocked), -EMFILE, -ENFILE, -ENOMEM. */
WEFT_API int weft_signal_open(const sigset_t *set);

/* Waits until one of fd's signals is pending and takes it: returns its
 * number (> 0) and, if info is not NULL, what the kernel says of it (sender,
 * code, sigqueue value; see signalfd(2)). Errors: -EBADF, -EINVAL (fd is not
 * a non-blocking descriptor - use one from weft_signal_open), -ETIMEDOUT,
 * -ECANCELED; rarely, in a coroutine, weft_poll's -EBUSY (the shard's
 * submission queue stayed full) or -ENOMEM (with a deadline, its own or a
 * deadline scope's, and no room in the shard's timer heap for its timer),
 * taking nothing. As for every blocking call, a passed deadline or a cancel
 * fails the call first, even with a signal pending, and takes nothing: the
 * signal stays pending for the next wait. A coroutine waits in weft_poll; a
 * plain thread blocks in poll(2). */
WEFT_API int weft_signal_wait(int fd, struct signalfd_siginfo *info);
WEFT_API int weft_signal_wait_dl(int fd, struct signalfd_siginfo *info, int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
