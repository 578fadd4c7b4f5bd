/* SPDX-License-Identifier: MIT */
/*
 * Starting and stopping a runtime.
 *
 * A runtime is a set of shards: one OS thread each, with its own io_uring
 * ring, its own run queue and timers. Coroutines (tasks, see weft/task.h) run
 * on shards. Several runtimes may exist in one process.
 *
 * Two ways to use one:
 *   weft_run()            - blocks the caller until a main coroutine returns;
 *   weft_runtime_start()  - returns at once; the caller keeps its thread and
 *                           hands work in with weft_runtime_submit() (from any
 *                           thread), then weft_runtime_stop().
 * Either way, stopping cancels every coroutine still alive (their blocking
 * calls return -ECANCELED; one that was never started is not started), waits
 * until all of them have returned, joins the shard threads and frees
 * everything. A coroutine that never makes a blocking call again after being
 * cancelled (a pure compute loop) delays the stop until it returns.
 */
#ifndef WEFT_RUNTIME_H
#define WEFT_RUNTIME_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_runtime weft_runtime;
typedef struct weft_task weft_task;
typedef struct weft_spawn_opts weft_spawn_opts;

#define WEFT_MAX_SHARDS 256

/* io_uring setup flags weft asks for (its own names, so that this header needs
 * no liburing). Each shard tries them all; when the kernel refuses the set
 * (it does not say which flag it dislikes) the newest flag is dropped and
 * setup tried again: DEFER_TASKRUN, SINGLE_ISSUER, TASKRUN_FLAG, COOP_TASKRUN,
 * SUBMIT_ALL. weft_stats_get() reports the set each shard got. */
#define WEFT_RING_SINGLE_ISSUER 0x1u /* only the shard thread submits */
#define WEFT_RING_DEFER_TASKRUN 0x2u /* completions run when the shard asks (needs SINGLE_ISSUER) */
#define WEFT_RING_COOP_TASKRUN 0x4u  /* no IPI to interrupt a busy shard */
#define WEFT_RING_SUBMIT_ALL 0x8u    /* a failing SQE does not stop the batch */
#define WEFT_RING_TASKRUN_FLAG 0x10u /* the kernel flags pending completions, so a
                                        busy shard enters only when it must */
#define WEFT_RING_ALL 0x1fu

typedef struct weft_config {
  int shards;               /* number of shards, 0..WEFT_MAX_SHARDS; 0 = one per
                               CPU the process may use, at most WEFT_MAX_SHARDS */
  const int *cpus;          /* optional: shard i is pinned to cpus[i % ncpus],
                               each a CPU the process may use (else -EINVAL) */
  int ncpus;                /* entries in cpus; 0 = no pinning. "The CPUs the
                               process may use" are those the starting thread
                               may run on - on a shard of another runtime,
                               that runtime's, not the shard's own pinning.
                               Unpinned shards and blocking pool threads run
                               on any of them. */
  const char *thread_name;  /* shard i's thread is "<thread_name>-<i>", the
                               blocking pool's threads "<thread_name>-pool";
                               default "weft" (also for NULL). Linux keeps 15
                               bytes per thread name: only the first 11 of it
                               are used for shards ("-<i>" takes up to 4), 10
                               for the pool. */
  size_t stack_size;        /* default coroutine stack (virtual bytes), default 256 KiB,
                               16 KiB .. 1 GiB, rounded up to whole pages; pages are
                               committed as they are touched. Below each stack lies
                               a 16 KiB guard (Linux >= 6.13: a guard region, for
                               any number of tasks; older kernels: PROT_NONE pages
                               for up to (vm.max_map_count - 8192) / 2 stacks at
                               once, about 28,000 at the default 65530, then stacks
                               without a guard whose lowest 64 bytes are checked at
                               every switch, which finds an overflow only after it
                               may have corrupted a neighbouring stack). A task that
                               overflows its stack makes the process print "weft:
                               stack overflow in coroutine <name or #id> (stack size
                               N)" on stderr and abort(); a single frame of more
                               than 16 KiB can jump the guard and corrupt memory
                               unseen. How many tasks can exist is bounded by
                               memory, not by the map table. */
  unsigned ring_entries;    /* SQ entries per shard ring, 1..32768, default 256 */
  unsigned cq_entries;      /* CQ entries, 0 = 8 x ring_entries (at most
                               65536), else ring_entries .. 65536 */
  unsigned ring_flags;      /* WEFT_RING_* to try, default WEFT_RING_ALL */
  int64_t spin_ns;          /* how long an idle shard polls before it sleeps in
                               the kernel, default 20 us; 0 = sleep at once */
  int64_t spin_max_ns;      /* the spin window adapts between spin_ns and this,
                               default 200 us: a sleep that work ended within
                               one window doubles the window (the sleep and its
                               wake-up cost more than spinning through such
                               gaps), a sleep over four windows long halves it.
                               <= spin_ns: a fixed window. An idle runtime still
                               sleeps after one window. */
  unsigned run_budget;      /* coroutines run per loop pass before I/O and the
                               inbox are looked at again, default 64, >= 1 */
  bool handoff;             /* default true: a coroutine that waits or yields
                               switches straight to the next runnable coroutine
                               of its shard (the one the loop would run next),
                               one context switch instead of two; hand-overs
                               count against run_budget */
  unsigned blocking_threads;/* most threads of the blocking pool, default 64,
                               1 .. 4096 */
  int64_t blocking_idle_ns; /* an idle pool thread leaves after this, default 10 s,
                               > 0 */

  /* Work stealing (see weft/task.h for what may move). An idle shard runs
   * stealing rounds: it probes `steal_probes` victims, the cursor advancing
   * by `steal_stride` shards, and picks the longest stealable queue. It skips
   * it unless that queue holds more than the migration cost
   * (1 + min(failed rounds in a row, 4) * steal_fail_cost) plus
   * `steal_locality_margin`; otherwise it takes min(steal_batch, length)
   * tasks (1 when the queue is just past the threshold). Then, while it has
   * budget left and other shards it has not probed, the round probes the
   * next steal_probes victims the same way (until a probe group finds only
   * empty queues). A round that takes
   * nothing makes the shard skip the next steal_backoff_min << (failures - 1)
   * rounds, at most steal_backoff_max. At most `steal_budget` tasks are
   * taken per loop pass. When a shard's stealable queue grows long enough
   * to pass a thief's gate (2 + steal_locality_margin tasks) while another
   * shard sleeps, it wakes one (coalesced); a shorter queue wakes nobody -
   * it waits for its owner, or for a shard that is awake anyway (the stuck
   * rule below is a spinning thief's).
   *
   * Beyond the seed: a queue too short for the gate is taken anyway (up to
   * steal_batch tasks) once it has not moved for `steal_stuck_ns` - its owner is
   * busy with a long task, and the queued ones would wait for all of it. Of
   * a batch, the first task runs on the thief next; the rest stay stealable
   * (on the thief's queue), so no task is stranded behind a long one. */
  bool steal;                     /* stealing on at all, default true. The victim
                                     walk reaches every shard whatever the stride
                                     (it slips by one after each cycle when the
                                     stride and shard count share a factor), and a
                                     round probes each other shard at most once. */
  bool steal_started;             /* tasks that already ran may move too (default
                                     true); false: only never-started tasks */
  unsigned steal_budget;          /* default 64, >= 1 */
  unsigned steal_stride;          /* default 1, >= 1 */
  unsigned steal_probes;          /* default 2, >= 1 */
  unsigned steal_batch;           /* default 4, 1..64 */
  unsigned steal_locality_margin; /* default 1 */
  unsigned steal_fail_cost;       /* default 1, >= 1 */
  unsigned steal_backoff_min;     /* default 1, >= 1 (rounds) */
  unsigned steal_backoff_max;     /* default 32, >= steal_backoff_min */
  int64_t steal_stuck_ns;         /* default 10 us, >= 0; 0 = never take from a
                                     queue the gate refuses (the seed's policy) */
  unsigned steal_queue_capacity;  /* stealable queue slots per shard, a power of
                                     two 2..2^24, default 4096. Below
                                     2 + steal_locality_margin no queue ever
                                     passes the gate or wakes a sleeping
                                     shard: only the stuck rule (a spinning
                                     thief's) takes from it. When it is full a task
                                     that becomes runnable goes to the shard's
                                     local queue instead: it still runs, but
                                     cannot be stolen until it is queued again
                                     (counted as steal_backpressure). */

  /* Messages between shards (weft/msg.h). */
  unsigned msg_lane_capacity;     /* messages a batched lane from one sender to
                                     one shard holds until the target takes
                                     them, a power of two 2..2^24, default 4096
                                     (a full lane makes weft_msg_send_many
                                     return -EAGAIN). Lanes are made on first
                                     use: 8 bytes a slot. */
  unsigned msg_counters;          /* counter tags per shard (weft_counter_add
                                     takes tags below it), 1..65536, default 256 */
  unsigned msg_queue_limit;       /* batched messages a shard takes into each
                                     of its receive queues before it leaves
                                     the rest in their lanes until receivers
                                     make room, 1..2^31-1, default 65536: a slow
                                     receiver fills the lanes and its senders
                                     get -EAGAIN instead of the queue growing
                                     without bound; direct senders get -EAGAIN
                                     from then until receivers take the queue
                                     down to half */
} weft_config;

/* Fills every field with its default. */
WEFT_API void weft_config_init(weft_config *cfg);

/* Starts a runtime (cfg NULL = defaults), runs main_fn(arg) as a coroutine
 * pinned to shard 0, and when it returns stops the runtime (see above) and
 * stores main_fn's result in *ret (if ret is not NULL). Called from a
 * coroutine (of another runtime), the caller's shard runs its other tasks
 * meanwhile (see weft_runtime_stop); a cancel of the caller,
 * or the end of its deadline scope, cancels main, and weft_run still waits
 * for main to return and stores its result.
 * Returns 0, or: -EINVAL for an invalid config or a NULL main_fn, -ENOMEM,
 * -EPERM / -ENOSYS when io_uring is not available to this process (disabled
 * by sysctl or seccomp), -EAGAIN when threads cannot be created, -EMFILE /
 * -ENFILE when file descriptors run out (each shard takes two: its ring and
 * an eventfd). On failure nothing is left behind and main_fn did not run. */
WEFT_API int weft_run(const weft_config *cfg, void *(*main_fn)(void *), void *arg, void **ret);

/* Starts a runtime and returns at once; same errors as weft_run(). */
WEFT_API int weft_runtime_start(weft_runtime **rt, const weft_config *cfg);

/* Spawns fn(arg) on `rt` from any thread (a plain thread or a coroutine of
 * any runtime); o and t as for weft_spawn(). Returns 0, -EINVAL, -ENOMEM, or
 * -ECANCELED once the runtime is stopping. */
WEFT_API int weft_runtime_submit(weft_runtime *rt, const weft_spawn_opts *o,
                                 void *(*fn)(void *), void *arg, weft_task **t);

/* Stops `rt` (see above) and frees it. Must be called from a thread that is
 * not one of rt's shards, and not while another thread is still inside a
 * call on rt (weft_runtime_submit, or weft_join on one of its tasks): task
 * handles of rt are freed by the stop and invalid afterwards. One exception,
 * since the caller cannot know when it is over: a call from outside rt that
 * woke or cancelled one of its tasks (setting an event, unlocking a mutex,
 * weft_cancel, weft_group_cancel, weft_msg_send_many_rt, weft_counter_add_rt)
 * may still be finishing after that task has returned; the stop waits for it.
 * From a coroutine (of another runtime), the caller is suspended while rt's
 * tasks end - its shard runs its other tasks, which rt's may be waiting for
 * (a cancelled weft_join of one of them) - and the stop is not cancellable.
 * Returns 0, or -EINVAL (NULL, or called from one of rt's own shards or
 * from a job on rt's blocking pool, which the stop would wait for). */
WEFT_API int weft_runtime_stop(weft_runtime *rt);

/* The runtime the calling coroutine runs on, or NULL on a plain thread. */
WEFT_API weft_runtime *weft_runtime_current(void);

/* Number of shards of `rt` (NULL = the current runtime); -EPERM if none. */
WEFT_API int weft_runtime_shards(const weft_runtime *rt);

#ifdef __cplusplus
}
#endif

#endif
