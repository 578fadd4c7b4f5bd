/* SPDX-License-Identifier: MIT */
/*
 * The blocking pool: run a function that would block a shard (a system call
 * io_uring has no operation for, a library that blocks, DNS, heavy CPU work)
 * on a pool thread while the calling coroutine is suspended.
 *
 * Each runtime has its own pool: threads are started on demand up to
 * weft_config.blocking_threads and leave after blocking_idle_ns without work.
 * A finished job wakes its coroutine's shard with a msg_ring message - no
 * polling anywhere.
 *
 * fn runs on whichever pool thread is free, one job after another on the
 * same threads: successive calls, even from one coroutine, may run on
 * different threads, and a thread-local fn sets stays on its thread for the
 * next job there. A pool thread is no coroutine - weft's calls in fn are a
 * plain thread's (they block it; a stop of its own runtime is refused with
 * -EINVAL) - and it blocks SIGPIPE as shard threads do: a write to a broken pipe or
 * socket in fn fails with EPIPE (see weft/process.h for what a child
 * started there inherits).
 */
#ifndef WEFT_BLOCKING_H
#define WEFT_BLOCKING_H

#include "common.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn(arg) on a pool thread and stores its result in *ret (if ret is not
 * NULL). Returns 0, or -ENOMEM / -EAGAIN when the pool has no thread and
 * none can be started (the job did not run), or -ETIMEDOUT at once for a
 * deadline already passed (nor did it), or -EINVAL for a NULL fn. When every pool thread is busy and
 * no other can be started, the job waits for one of them.
 * On a plain thread fn runs right there, on the caller's thread, and a
 * deadline only decides whether it starts. Either way the caller's errno is
 * left as it was: what fn does to errno stays with the thread that ran it,
 * so fn reads errno itself and passes an error back through its result.
 *
 * A job cannot be interrupted: if the deadline passes or the task is
 * cancelled while fn runs, the call still waits for fn to return (fn may use
 * the caller's memory), then returns -ETIMEDOUT / -ECANCELED (*ret is set).
 * A runtime stop cancels the task and so waits for such a job as well: a
 * fn that never returns keeps weft_runtime_stop from ever finishing.
 * If the job had not started yet it is dropped and the call returns at once.
 * With no memory for the deadline's timer the same holds: a job not started
 * is dropped (-ENOMEM: it did not run), a running one is waited for and the
 * call returns 0, -ETIMEDOUT or -ECANCELED as above. */
WEFT_API int weft_blocking(void *(*fn)(void *), void *arg, void **ret);
WEFT_API int weft_blocking_dl(void *(*fn)(void *), void *arg, void **ret, int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
