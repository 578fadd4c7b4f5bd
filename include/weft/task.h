/* SPDX-License-Identifier: MIT */
/*
 * Tasks: coroutines scheduled on shards.
 *
 * A task runs fn(arg) on its own stack. When fn calls something that waits
 * (weft_sleep, weft_event_wait, weft_join, I/O, ...) the task is suspended
 * and its shard runs other tasks meanwhile.
 *
 * Migration and thread-local storage: a task placed WEFT_PLACE_STEALABLE or
 * WEFT_PLACE_STEALABLE_PREFERRED may continue on another shard thread after
 * any call that can suspend. Do not keep the address of a thread-local
 * variable (including errno, which weft never uses) or the result of
 * pthread_self() (glibc declares it const, so the compiler may reuse it)
 * across such a call, and
 * never hold a pthread mutex across one: use weft's own primitives. Pinned,
 * round-robin and sticky tasks never move.
 *
 * Lifetime: weft_spawn() hands back a handle unless asked not to; the handle
 * must be given up exactly once, by weft_join() or weft_detach(). After that,
 * or after the runtime stopped, the handle must not be used.
 */
#ifndef WEFT_TASK_H
#define WEFT_TASK_H

#include "common.h"
#include "runtime.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum weft_placement {
  WEFT_PLACE_STEALABLE = 0,      /* default: may run on any shard; starts on
                                    opts.shard, or with -1 on the spawning shard
                                    (round-robin from a plain thread or a
                                    coroutine of another runtime) */
  WEFT_PLACE_STEALABLE_PREFERRED,/* the same (the seed's name for a stealable task
                                    given the shard it starts on) */
  WEFT_PLACE_PINNED,             /* runs on opts.shard (-1: the spawning shard, or
                                    round-robin from a plain thread or a
                                    coroutine of another runtime), never moves */
  WEFT_PLACE_ROUND_ROBIN,        /* next shard in turn, never moves */
  WEFT_PLACE_STICKY,             /* shard chosen by hashing opts.key: the same key
                                    always gives the same shard; never moves */
};

struct weft_spawn_opts {
  int placement;        /* enum weft_placement */
  int shard;            /* for PINNED and both STEALABLE placements; -1 = spawning
                           shard. Whatever the placement, -1 or a shard of the
                           runtime (else -EINVAL) */
  uint64_t key;         /* for STICKY */
  size_t stack_size;    /* 0 = the runtime's default; else rounded up to whole pages
                           and to at least 16 KiB. Sizes above 1 GiB, or too small
                           to hold the task's own record and a page of frames
                           (below about 4.5 KiB), get -EINVAL. Overflow: see
                           weft_config.stack_size */
  const char *name;     /* copied (up to 31 bytes); shown by weft_dump(); NULL = none */
};

/* Fills in the defaults: stealable, spawning shard, default stack, no name. */
WEFT_API void weft_spawn_opts_init(weft_spawn_opts *o);

/* Spawns fn(arg) on the calling coroutine's runtime (o NULL = defaults). If t
 * is NULL the task is detached from the start. Returns 0, or: -EPERM when not
 * called from a coroutine, -EINVAL for a NULL fn, a bad placement, a shard
 * that does not exist or a bad stack size, -ENOMEM when no stack can be had,
 * -ECANCELED once the runtime is stopping. On failure nothing was spawned.
 * A spawn made while the stop begins may return 0 instead: its task counts
 * as one the stop found and cancelled, so, not started, it never runs (like
 * any task cancelled before it started) - whatever fn was to do with arg
 * (free it, close it) is not done. */
WEFT_API int weft_spawn(weft_task **t, const weft_spawn_opts *o, void *(*fn)(void *), void *arg);

/* Waits until t has returned, stores its result in *ret (if ret is not NULL)
 * and releases the handle. Returns 0, or -ECANCELED if t was cancelled (its
 * result is still stored; a task cancelled before it started has result
 * NULL). -EINVAL for NULL, -EDEADLK when a task joins itself. From a plain
 * thread the thread blocks.
 *
 * If the joining task is cancelled while it waits, t is cancelled too and the
 * join still waits for t to return (t may be using memory the joiner lent it),
 * then returns -ECANCELED. A join that has nothing to wait for (t has
 * returned already) gives t's own outcome, 0 or -ECANCELED, even in a
 * cancelled task. t counts as returned once its shard has recorded it, just
 * after its body returns: a cancelled joiner that comes in between (it may
 * have seen the body's last stores) still has to wait, so it gets
 * -ECANCELED - with t's result stored in *ret all the same. So after 0 or
 * -ECANCELED, t is over and the handle is gone. Inside a deadline scope
 * (weft_deadline_push) the join can end with -ETIMEDOUT or -ENOMEM as
 * weft_join_dl does (the handle still the caller's). */
WEFT_API int weft_join(weft_task *t, void **ret);

/* weft_join() with an absolute deadline: -ETIMEDOUT when it passes, and
 * -ENOMEM when the shard's timer heap cannot grow; in both cases t may still
 * be running and the handle is still the caller's (join or detach it later).
 * Cancellation of the joiner is handled as in weft_join(). */
WEFT_API int weft_join_dl(weft_task *t, void **ret, int64_t deadline);

/* Releases the handle without waiting; the task runs on and frees itself.
 * Returns 0 or -EINVAL. */
WEFT_API int weft_detach(weft_task *t);

/* Cancels t: its current blocking call (if any) and every later one return
 * -ECANCELED; if it has not started it never runs. Returns 0, -ESRCH if t has
 * already returned, -EINVAL for NULL. Callable from any thread. A cancel that
 * returned 0 counts even if t then returns without noticing it: weft_join()
 * reports -ECANCELED (with t's result).
 *
 * Cost: a cancel makes one membarrier(2) system call (a few microseconds:
 * it briefly interrupts the other running threads of the process), so that
 * a wait, which happens far more often, needs no locked instruction to be
 * cancellable. Cancelling a whole group or stopping a runtime makes one
 * such call for all its tasks. */
WEFT_API int weft_cancel(weft_task *t);

/* Lets the other runnable tasks of this shard run, then continues (possibly
 * on another shard, if stealable). Returns 0, or -ECANCELED if the task has
 * been cancelled (after yielding). On a plain thread: sched_yield(), 0. */
WEFT_API int weft_yield(void);

/* The calling task, or NULL on a plain thread. */
WEFT_API weft_task *weft_task_self(void);

/* Keeps the calling task on the shard it runs on now, for the rest of its
 * life: it becomes PINNED there, and no other shard takes it again. For code
 * that keeps a thread's address or identity across calls that suspend -
 * errno's address (compilers may keep it across a call), a library's
 * per-thread state, a pthread mutex. libweft-hook calls it in every hooked
 * call. Returns that shard's index, or -EPERM on a plain thread. */
WEFT_API int weft_task_pin(void);

/* A task's process-wide unique id (> 0), and its name ("" if none). */
WEFT_API uint64_t weft_task_id(const weft_task *t);
WEFT_API const char *weft_task_name(const weft_task *t);

/* Index of the shard the calling coroutine runs on now; -EPERM on a plain
 * thread. Re-read it after anything that can suspend. On a shard's own
 * thread outside any coroutine (a signal handler that interrupted its loop)
 * it is that shard's index, as the thread is the shard's. */
WEFT_API int weft_shard_id(void);

/* Number of shards of the calling coroutine's runtime; -EPERM on a plain
 * thread (a shard's own thread outside a coroutine counts as its shard). */
WEFT_API int weft_shard_count(void);

#ifdef __cplusplus
}
#endif

#endif
