/* SPDX-License-Identifier: MIT */
/*
 * The runtime's internal objects and the protocols between them.
 *
 * Ownership rule that everything below relies on: a task is made runnable
 * (put on a run queue) only by the thread of the shard it is bound to -
 * `task->shard`. Wakers on other threads push the task onto that shard's
 * inbox instead; the shard takes it from there in its loop. So a task that
 * is still on its way into a suspension can never be resumed twice or on two
 * threads, and per-task state of the shard (an armed timer) is only ever
 * touched by that shard's thread.
 */
#ifndef WEFT_LIB_CORE_H
#define WEFT_LIB_CORE_H

#include "weft.h"

#include "../coro/coro.h"
#include "../coro/dlist.h"
#include "deque.h"
#include "spin.h"
#include "timer.h"

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The object of `type` whose member `member` is at `ptr`. */
#define WEFT__CONTAINER_OF(ptr, type, member)                                                   \
  ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

typedef struct weft__shard weft__shard;
typedef struct weft__waiter weft__waiter;
typedef struct weft__waitq weft__waitq;
typedef struct weft__op weft__op;

#define WEFT__CACHELINE 64

/* ---- waiting ---------------------------------------------------------------
 * A waiter is a record on the waiting side's stack: a task (suspended) or a
 * plain thread (blocked on the futex `state`). Whoever moves `state` from
 * WAITING to CLAIMED owns the wake-up: it unlinks the waiter, stores the
 * result and completes it. Signals, timeouts and cancellation race for that
 * claim; exactly one wins. */
enum { WEFT__W_WAITING = 0, WEFT__W_CLAIMED = 1, WEFT__W_DONE = 2 };

struct weft__waiter {
  weft__waiter *next, *prev;  /* links in q (or in a waker's local list) */
  weft__waitq *q;             /* the queue it was put on, NULL for a pure sleep */
  weft_task *task;            /* the waiting task, NULL for a plain thread */
  _Atomic uint32_t state;     /* WEFT__W_* (the futex word for a plain thread) */
  bool queued;                /* on q's list (guarded by q->lock) */
  bool uncancellable;         /* cancellation does not end this wait */
  int result;                 /* 0 when signalled, else -ETIMEDOUT / -ECANCELED */
  weft__timer timer;          /* deadline timer, armed on the task's shard */
  uintptr_t data;             /* for the primitive that queued it */
};

struct weft__waitq {
  weft__spin lock;
  weft__waiter *head, *tail;
};

/* ---- tasks ---------------------------------------------------------------- */
enum weft__task_state {
  WEFT__T_QUEUED,   /* on a run queue or an inbox */
  WEFT__T_RUNNING,
  WEFT__T_WAITING,  /* suspended in a waiter */
  WEFT__T_FINISHED,
};

/* Something a task holds that must be ended before the task does: an armed
 * multishot op and the object around it (weft_recv_stream,
 * weft_uring_multishot; not weft_listener, which outlives its opener until
 * it is closed or the runtime sweeps it, lib/listener.c). Linked on the task while open; a body that returns
 * with one still open has it ended by the task itself, before it finishes
 * (weft__task_body), so no op outlives its task and the runtime can stop. */
typedef struct weft__held weft__held;
struct weft__held {
  weft__held *prev, *next;
  void (*end)(weft__held *h); /* ends and frees the object; unholds h; may suspend */
};

/* Lives at the top of its own coroutine stack (coro first: coro/coro.h). */
struct weft_task {
  weft__coro coro;
  weft_runtime *rt;
  weft__shard *shard;           /* the shard it is bound to now (see above) */
  weft_task *next;              /* run-queue / inbox link */
  uint64_t ready_seq;           /* when it became runnable (shard's stamp) */
  int placement;                /* enum weft_placement */
  _Atomic int state;            /* enum weft__task_state, for dumps */
  _Atomic int refs;             /* the body (until it returns) + the handle */
  atomic_bool cancelled;
  bool yielding;                /* set by weft_yield before it suspends */
  weft__spin wait_lock;         /* serialises cancellers (waitq.c), guards cur_op */
  weft__waiter *_Atomic cur_waiter; /* the waiter it waits in, for cancel (waitq.c) */
  weft__op *cur_op;             /* the op it waits for, for cancel (wait_lock) */
  unsigned pinned_ops;          /* active multishot ops: the task stays on its shard */
  weft__held *held;             /* open objects to end if the body returns (task only) */
  void *(*body)(void *);        /* the spawned function and its argument */
  void *body_arg;
  int64_t deadline;             /* deadline scope (weft_deadline_push), -1 none */
  weft__timer *armed_timer;     /* a timer of its shard to disarm when it runs */
  /* Completion: `done` is set and `done_q`'s waiters are released when the
   * body returns. */
  atomic_bool done;
  weft__waitq done_q;
  /* Membership of a weft_group (guarded by the group's lock). */
  struct weft_group *group;
  weft_task *group_prev, *group_next;
  /* Every task object of a runtime is on one shard's list until freed. */
  weft__shard *list_shard;
  weft_task *list_prev, *list_next;
};

/* ---- stats ------------------------------------------------------------------
 * Written by the owning shard with relaxed load+store (no lock prefix),
 * except the fields marked "shared", which other threads add to. */
typedef struct weft__counter {
  _Atomic uint64_t v;
} weft__counter;

static inline void weft__count(weft__counter *c, uint64_t n)
{
  atomic_store_explicit(&c->v, atomic_load_explicit(&c->v, memory_order_relaxed) + n,
                        memory_order_relaxed);
}
static inline void weft__count_shared(weft__counter *c, uint64_t n)
{
  atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}
static inline uint64_t weft__counter_get(const weft__counter *c)
{
  return atomic_load_explicit(&((weft__counter *)c)->v, memory_order_relaxed);
}
/* For the task-count protocol (see weft__runtime_quiescent): release stores
 * and acquire loads, which cost nothing more than plain moves on x86. */
static inline void weft__count_release(weft__counter *c, uint64_t n)
{
  atomic_store_explicit(&c->v, atomic_load_explicit(&c->v, memory_order_relaxed) + n,
                        memory_order_release);
}
static inline uint64_t weft__counter_acquire(const weft__counter *c)
{
  return atomic_load_explicit(&((weft__counter *)c)->v, memory_order_acquire);
}

typedef struct weft__shard_stats {
  weft__counter spawned, finished, switches, handoffs, inbox_received, parks, enters, cqes;
  weft__counter timers_armed, timers_fired;
  weft__counter steal_attempts, steal_scans, steal_success, steal_skipped_backoff;
  weft__counter steal_skipped_locality, steal_stuck, steal_backpressure, steal_wakes, steal_local_hits;
  weft__counter steal_takes;
  weft__counter ops_submitted, ops_completed, ops_cancelled, ops_timed_out;
  weft__counter sq_full_flushes, cq_overflows, timers_cancelled;
  weft__counter wakes_sent, wakes_coalesced; /* shared */
  weft__counter msgs_sent, msgs_received, msg_doorbells, msg_doorbells_coalesced;
  weft__counter msg_backpressure, msg_failed, msg_queue_full;
} weft__shard_stats;

struct weft__steal_state {
  unsigned seen_epoch;    /* rt->steal_epoch when the round that started the
                             cooldown began */
  unsigned cursor;        /* next victim to probe */
  unsigned steps;         /* cursor steps in the current cycle of the walk */
  unsigned failed_streak; /* rounds in a row that took nothing */
  unsigned cooldown;      /* rounds still to skip */
  /* The stuck rule, per victim: where its head was when this thief's gate
   * last found it moved (or first refused it), and since when (weft__now;
   * 0 = never looked at). One slot each: a thief that refuses several
   * short queues in turn must still see each of them stand still. */
  uint32_t stuck_head[WEFT_MAX_SHARDS];
  int64_t stuck_since[WEFT_MAX_SHARDS];
};

/* ---- shards --------------------------------------------------------------- */
struct weft__shard {
  weft_runtime *rt;
  int id;
  pthread_t thread;
  struct io_uring ring;
  int ring_fd;                  /* for msg_ring senders; -1 until set up */
  int wake_fd;                  /* eventfd polled by the ring: the wake-up of
                                   last resort (lib/ring.c); -1 until set up */
  bool wake_fd_unarmed;         /* its poll ended and could not be armed again
                                   (no SQE): the loop tries again (owner only) */
  unsigned ring_flags;          /* WEFT_RING_* in use */
  unsigned ring_entries;
  int setup_result;             /* 0 or -errno from ring setup on the thread */

  /* Owner-only state. */
  weft_task *runq_head, *runq_tail;
  weft__timer_heap timers;
  unsigned sq_pending;          /* SQEs prepared and not yet submitted */
  unsigned inflight;            /* ops submitted here whose last CQE is due */
  unsigned uring_unadopted;     /* SQEs given out by weft_uring_sqe() and not yet
                                   passed to weft_uring_wait() */
  struct weft__steal_state steal;
  uint64_t ready_seq;           /* stamps tasks as they become runnable, so
                                   the two run queues are served oldest first */
  int64_t spin_window;          /* the current spin window (see spin_max_ns) */
  _Atomic int64_t spin_window_peak; /* the largest it has been (read by tests) */
  unsigned direct_left;         /* hand-overs the running task may still make
                                   (weft__task_suspend); 0 outside run_ready */

  /* Runnable stealable tasks: pushed by the owner, taken by anyone. */
  weft__deque deque;

  /* Written by other threads: kept off the owner's lines. */
  _Alignas(WEFT__CACHELINE) _Atomic(weft_task *) inbox;   /* LIFO, taken whole */
  _Atomic(weft__op *) cancel_inbox;                       /* ops to ASYNC_CANCEL */
  _Alignas(WEFT__CACHELINE) atomic_int parked;            /* sleeping in the kernel */
  atomic_int wake_pending;      /* a wake-up message is on its way */

  _Alignas(WEFT__CACHELINE) weft__spin list_lock;
  weft_task *list_head;         /* task objects registered here */

  struct weft__msg_shard *msg;  /* message lanes and receive queues (lib/msg.c) */

  /* Listeners open on this shard (owner-only, lib/listener.c); at exit the
   * ones never closed are cancelled and moved to `swept`, freed after the
   * shard thread left. */
  struct weft_listener *listeners, *swept;

  _Alignas(WEFT__CACHELINE) weft__shard_stats stats;
};

/* ---- the blocking pool (lib/blocking.c) --------------------------------------- */
typedef struct weft__pool {
  pthread_mutex_t lock;
  pthread_cond_t work;          /* a job was queued, or stop */
  pthread_cond_t gone;          /* a thread left */
  struct weft__job *head, *tail;
  unsigned max_threads;
  int64_t idle_ns;              /* an idle thread leaves after this long */
  unsigned threads, idle;       /* started and alive; of them waiting */
  unsigned queued;              /* jobs not taken yet */
  const cpu_set_t *cpus;        /* CPUs its threads may use; NULL: the creator's */
  char name[16];                /* the threads' name, "<thread_name>-pool" */
  bool stopping;
  _Atomic uint64_t jobs_done;
} weft__pool;

/* Threads are named "<thread_name>-pool", not after the shard that
 * started them. */
int weft__pool_init(weft__pool *p, unsigned max_threads, int64_t idle_ns,
                    const cpu_set_t *cpus, const char *thread_name);
/* Makes every pool thread leave and waits for them (no job may be queued). */
void weft__pool_term(weft__pool *p);
void weft__pool_stats(weft__pool *p, uint64_t *jobs, uint64_t *queued, uint64_t *threads);
/* The pool whose thread calls (running a job), or NULL. */
weft__pool *weft__pool_self(void);

/* ---- the runtime ------------------------------------------------------------ */
struct weft_runtime {
  weft_config cfg;
  char thread_name[16];
  /* The CPUs the process may use, as its starter saw them - on a pinned
   * shard of another runtime, that runtime's (weft_runtime_start). Its
   * shard and pool threads are made with this affinity rather than
   * inheriting the pinning of whichever thread creates them. */
  cpu_set_t cpus_allowed;
  bool cpus_known;                                 /* false: sched_getaffinity failed */
  int nshards;
  weft__shard *shards;
  _Alignas(WEFT__CACHELINE) atomic_uint rr_next;   /* round-robin cursor */
  atomic_bool stopping;                            /* no new tasks; cancel the rest */
  atomic_bool exiting;                             /* every task is done: shards leave */
  _Atomic uint32_t finish_seq;                     /* bumped per task finished while
                                                      stopping */
  _Atomic uint32_t stop_target;                    /* finish_seq at which the stopper
                                                      expects the last task (never past it) */
  _Atomic uint32_t stop_woken;                     /* 0 while the stopper sleeps on it
                                                      (a futex word), 1 once woken */
  atomic_int sleeping;                             /* shards parked in the kernel */
  _Alignas(WEFT__CACHELINE) atomic_uint steal_epoch; /* bumped when a stealable
                                                      queue starts to pile up */
  weft__counter external_spawned;                  /* shared */
  /* Threads outside the runtime (plain threads, shards of other runtimes)
   * inside a call that touches its shards after making a task runnable (a
   * wake-up, a cancel): the task may end, and the runtime stop, before
   * that call is done with the shard. weft_runtime_stop frees nothing
   * until this is 0 (weft__outside_enter/leave). */
  _Alignas(WEFT__CACHELINE) atomic_int outside_calls;
  weft__pool pool;                                 /* weft_blocking() */
  struct weft__msg_rt *msg;                        /* shared message state (lib/msg.c) */
  pthread_mutex_t start_lock;
  pthread_cond_t start_cond;
  int started;                                     /* shards done with setup */
  int start_verdict;                               /* 0 pending, 1 run, -1 leave */
};

/* A call from outside rt (from: the caller's shard, NULL on a plain thread)
 * that will touch rt's shards after making a task runnable announces
 * itself first, and leaves once done with them: true when it entered. */
static inline bool weft__outside_enter(weft_runtime *rt, const weft__shard *from)
{
  if (from && from->rt == rt)
    return false; /* rt's own shard threads are joined before anything is freed */
  atomic_fetch_add_explicit(&rt->outside_calls, 1, memory_order_seq_cst);
  return true;
}
static inline void weft__outside_leave(weft_runtime *rt, bool entered)
{
  if (entered)
    atomic_fetch_sub_explicit(&rt->outside_calls, 1, memory_order_release);
}

/* ---- the current thread ------------------------------------------------------
 * Never inlined and opaque to the optimiser: see weft__coro_self(). */
weft__shard *weft__shard_self(void);
void weft__shard_set_self(weft__shard *sh);
static inline weft_task *weft__task_self(void)
{
  return (weft_task *)(void *)weft__coro_self();
}
/* True in a task that has been cancelled (false on a plain thread). */
static inline bool weft__self_cancelled(void)
{
  weft_task *t = weft__task_self();
  return t && atomic_load_explicit(&t->cancelled, memory_order_relaxed);
}
/* What a wait that need not wait returns: -ECANCELED in a cancelled task
 * (a cancel fails every blocking call, ready or not), else 0. */
static inline int weft__ready_result(void)
{
  return weft__self_cancelled() ? -ECANCELED : 0;
}

/* ---- shard (lib/shard.c) ---------------------------------------------------- */
void *weft__shard_main(void *arg);
/* Makes t runnable on sh; only on sh's thread (see the ownership rule). */
void weft__shard_ready(weft__shard *sh, weft_task *t);
/* Makes t runnable on sh's local (non-stealable) queue; sh's thread only. */
void weft__shard_ready_local(weft__shard *sh, weft_task *t);
/* Hands t to sh from another thread, waking sh if it sleeps: `from` is the
 * caller's shard (NULL on a plain thread). */
void weft__shard_push_remote(weft__shard *sh, weft_task *t, weft__shard *from);
/* Tests only: called (if set) by a caller outside the runtime between
 * queuing a task and waking its shard (or adding to a counter and ringing
 * its shard), or at the end of its cancel of a task, to hold it there. */
extern void (*weft__test_outside_pause)(void);
extern void (*weft__test_cancel_pause)(void);
/* Tests only: called (if set) by a canceller between claiming a task's
 * waiter and taking it off its queue (weft__task_cancel_wait). */
extern void (*weft__test_claim_pause)(void);
/* Tests only: called (if set) by a waker that has published, under a wait
 * queue's lock, a state callers see without the lock (a permit, a zero
 * count, a finished once, a set event, a free mutex), before it lets go of
 * the lock; and by a caller that saw such a state while the lock was still
 * held, before it waits for the waker to let go (weft__waitq_settle). */
extern void (*weft__test_publish_pause)(void);
extern void (*weft__test_settle_pause)(void);
/* Tests only: called (if set) by a mutex locker that found the mutex held
 * and is about to spin on it (lib/mutex.c), so that the holder can let go
 * during the spin. */
extern void (*weft__test_spin_pause)(void);
/* Tests only: called (if set) by a boundary caller between queuing its
 * request and waiting for the outcome (weft_boundary_call). */
extern void (*weft__test_call_queued_pause)(void);
/* Tests only: called (if set) by a thief that has picked a victim, before
 * it takes from the victim's stealable queue (weft__steal_round). */
extern void (*weft__test_steal_pause)(void);
/* Tests only: called (if set) by a shard about to wake a sleeping thief it
 * found with no wake-up on its way (weft__steal_wake_thief). */
extern void (*weft__test_wake_thief_pause)(void);
/* True when sh has nothing to do but the running task: no runnable task,
 * inbox entry, completion, queued SQE or due timer (sh's thread). Work done
 * inline by the running task then delays nobody. */
bool weft__shard_idle_otherwise(weft__shard *sh);
/* Wakes sh if it sleeps (coalesced); true if this call sent the wake-up. */
bool weft__shard_notify(weft__shard *sh);
/* Reaps and dispatches the completions sh has (sh's thread; also from a
 * coroutine running on sh). Returns how many. */
unsigned weft__shard_reap(weft__shard *sh);
/* Suspends the running task t (already registered wherever it waits). */
void weft__task_suspend(weft_task *t);
/* The bookkeeping the loop does after a resume, done by the task that
 * `from` handed sh over to (see weft__task_suspend), on its arrival. */
void weft__shard_handed_over(weft__shard *sh, weft_task *from);

/* ---- stealing (lib/steal.c) ------------------------------------------------ */
int weft__deque_init(weft__deque *d, uint32_t capacity);
void weft__deque_term(weft__deque *d);
/* Whether t goes on a stealable queue when it becomes runnable. Inline:
 * every wake-up asks. */
static inline bool weft__task_stealable(const weft_runtime *rt, const weft_task *t)
{
  if (!rt->cfg.steal || rt->nshards == 1)
    return false; /* nobody to steal it: the local queue is cheaper */
  if (t->placement != WEFT_PLACE_STEALABLE && t->placement != WEFT_PLACE_STEALABLE_PREFERRED)
    return false;
  if (t->pinned_ops)
    return false; /* a multishot op of its own completes on this shard */
  return rt->cfg.steal_started || t->coro.state == WEFT__CORO_CREATED;
}
/* Queues t on sh's stealable queue (sh's thread); false when it is full. */
bool weft__steal_enqueue(weft__shard *sh, weft_task *t);
weft_task *weft__steal_pop_local(weft__shard *sh);
/* The shortest queue a thief with no failed rounds takes from: what passes
 * its locality gate (64-bit: the margin may be as large as UINT_MAX,
 * meaning "never"). */
static inline uint64_t weft__steal_threshold(const weft_runtime *rt)
{
  return 2 + (uint64_t)rt->cfg.steal_locality_margin;
}
/* Wakes one sleeping shard other than sh (sh's thread). */
void weft__steal_wake_thief(weft__shard *sh);
/* Wakes a sleeping shard if sh's stealable queue is long (sh's thread).
 * After every task the owner runs: a thief woken earlier may have found
 * other work (or a queue too short then), so look again while the queue
 * stays long. Two relaxed loads when nobody sleeps; inline for that. */
static inline void weft__steal_check_thieves(weft__shard *sh)
{
  if (weft__deque_len(&sh->deque) >= weft__steal_threshold(sh->rt) &&
      atomic_load_explicit(&sh->rt->sleeping, memory_order_relaxed))
    weft__steal_wake_thief(sh);
}
/* One stealing round for an idle sh; returns the number of tasks taken. */
unsigned weft__steal_round(weft__shard *sh);
void weft__steal_reset_backoff(weft__shard *sh);
/* True if another shard has stealable work queued (checked before sleeping). */
bool weft__steal_work_elsewhere(weft__shard *sh);

/* ---- ring (lib/ring.c) -------------------------------------------------------- */
int weft__ring_setup(weft__shard *sh);
void weft__ring_teardown(weft__shard *sh);
/* Gets an SQE on sh's ring (sh must be the calling thread's shard), flushing
 * the SQ if it is full. */
struct io_uring_sqe *weft__ring_sqe(weft__shard *sh);
/* Sends a wake-up message to `to`'s ring from whatever thread this is. */
void weft__ring_send_wake(weft__shard *to);
/* The wake-up of last resort, when the kernel refused a message: a write to
 * `to`'s eventfd. False if even that failed. Any thread. */
bool weft__ring_wake_by_fd(weft__shard *to);
/* A wake-up to `to` could not be sent: `to`'s eventfd stands in for it.
 * If that fails too, to->wake_pending comes down so that the next waker
 * tries, rather than leave a wake-up marked as on its way: true then. */
bool weft__ring_replace_wake(weft__shard *to);
/* sh's eventfd poll completed (sh's thread): drain it, re-arm if needed. */
void weft__ring_wake_fd_cqe(weft__shard *sh, unsigned flags);
/* Arms the poll on sh's eventfd again after it ended (sh's thread);
 * sh->wake_fd_unarmed stays set while there is no SQE for it. */
void weft__ring_arm_wake_fd(weft__shard *sh);
/* Posts a msg_ring message (target CQE: user_data `data`, res `len`) to the
 * ring `target_fd` without using a shard ring: the ring-less send, or this
 * thread's own small ring. Synchronous: 0 once posted, or -errno. Leaves
 * errno as it was. */
int weft__ring_post_msg(int target_fd, uint64_t data, uint32_t len);
/* This thread's own small ring (4 entries), made on first use and closed
 * when the thread exits, for a thread that is not a shard: msg_ring sends on
 * kernels without the ring-less send, and a plain thread's accept with a
 * deadline. Whoever uses it reaps every CQE of its SQEs before returning.
 * 0 with *ring set, or -errno (-ENOMEM, or io_uring_setup's error). */
int weft__thread_ring(struct io_uring **ring);
/* Closes this thread's ring (nothing may be in flight on it): after a
 * submission the kernel refused, so that its SQE is never submitted later. */
void weft__thread_ring_drop(void);
/* Submits the one SQE prepared on the thread's ring: 0, or -errno with the
 * ring dropped (the kernel took nothing). */
int weft__thread_ring_submit(struct io_uring *ring);
/* user_data of the thread ring's SQEs: each user reaps the CQEs of its own
 * before it returns and counts only those. */
enum { WEFT__TRING_MSG = 1, WEFT__TRING_ACCEPT, WEFT__TRING_CANCEL };
/* Prepares sqe (of a shard's ring) as a msg_ring to the ring `target_fd`
 * (target CQE: user_data `data`, res `len`). With `if_refused` non-zero the
 * sender gets a CQE only if the kernel refuses it, under that user_data;
 * with 0 the caller makes the SQE an op's (which wants every CQE). */
void weft__ring_prep_msg(struct io_uring_sqe *sqe, int target_fd, uint32_t len, uint64_t data,
                         uint64_t if_refused);
/* Test hook: when > 0, the number of CPUs the start takes the process to
 * be allowed (shards = 0), as on a machine with that many. */
extern atomic_int weft__usable_cpus_seen;
/* Test hook: ring flags (WEFT_RING_*) setup pretends the kernel refused. */
extern atomic_uint weft__ring_refused;
/* How weft__ring_post_msg sends: 0 not known yet, 1 ring-less, -1 through
 * the thread's own ring (kernels before 6.13). Tests set -1 to take the
 * older kernels' way here. */
extern atomic_int weft__ring_ringless;

/* user_data tags of internal CQEs; op records are 8-aligned pointers. */
#define WEFT__UD_WAKE ((uint64_t)1)        /* msg_ring wake-up (target side) */
#define WEFT__UD_WAKE_FD ((uint64_t)(1 | 1 << 3)) /* the eventfd poll (target side) */
#define WEFT__UD_WAKE_SENT ((uint64_t)2)   /* our msg_ring SQE failed (source) */
#define WEFT__UD_IGNORE ((uint64_t)3)      /* link timeouts, cancels: nothing to do */
#define WEFT__UD_MSG ((uint64_t)4)         /* a direct message (target side) */
#define WEFT__UD_MSG_BELL ((uint64_t)5)    /* lane/counter doorbell, flush ack (target) */
#define WEFT__UD_MSG_FAILED ((uint64_t)6)  /* our direct message SQE failed (source) */
#define WEFT__UD_BELL_FAILED ((uint64_t)7) /* our doorbell SQE failed (source) */
#define WEFT__UD_TAG_MASK ((uint64_t)7)

/* ---- listeners (lib/listener.c) ------------------------------------------------ */
/* Every task has returned: cancels the accept of each listener still open on
 * sh (its last CQE lets the shard leave) and sets them aside (sh's thread). */
void weft__listener_sweep(weft__shard *sh);
/* After sh's thread left: closes what those listeners had accepted and frees
 * them (their opener's task object is freed with the others). */
void weft__listener_free_swept(weft__shard *sh);

/* ---- messages (lib/msg.c) ------------------------------------------------------ */
/* Allocates rt->msg and every shard's msg part (before the shards start);
 * probes IORING_OP_MSG_RING. 0 or -ENOMEM. */
int weft__msg_init(weft_runtime *rt);
/* Frees them (after every shard thread has left); rt->msg may be NULL. */
void weft__msg_term(weft_runtime *rt);
/* Does what any doorbell to sh would have done, after an eventfd wake-up
 * that may stand in for one that could not be sent (sh's thread): drains
 * every lane holding messages, wakes a taker of every non-zero counter, and
 * has sh's flushers look at their lanes again (a lost acknowledgement). */
void weft__msg_catch_up(weft__shard *sh);
/* Sends the direct messages of sh's backlog as SQEs allow (sh's thread);
 * true while some still wait. */
bool weft__msg_send_backlog(weft__shard *sh);
/* Whether direct messages of sh wait in its backlog (sh's thread). */
bool weft__msg_backlogged(weft__shard *sh);
/* Shard side: a CQE with one of the WEFT__UD_MSG* / *_FAILED tags. */
void weft__msg_cqe(weft__shard *sh, uint64_t ud, int res);
/* Test hook: the runtime start pretends the kernel has no msg_ring. */
extern atomic_bool weft__msg_refused;

/* ---- tasks (lib/task.c) ------------------------------------------------------- */
/* Creates a task object bound to `target`; refs = 2 if want_handle else 1.
 * cur is the calling thread's shard (weft__shard_self(), read once by the
 * caller: spawning never suspends), NULL on a plain thread. */
int weft__task_create(weft_runtime *rt, weft__shard *cur, const weft_spawn_opts *o,
                      void *(*fn)(void *), void *arg, weft__shard **target, weft_task **out,
                      bool want_handle);
/* Makes a new task runnable on its target shard from the calling thread,
 * whose shard is cur (as above). */
void weft__task_start(weft__shard *cur, weft__shard *target, weft_task *t);
/* A group member returned (lib/group.c). */
void weft__group_member_done(weft_task *t);
/* Called by a shard after t's body returned on it. */
void weft__task_finished(weft__shard *sh, weft_task *t);
/* A task that was cancelled before it ever ran: finish it without running. */
void weft__task_finish_unstarted(weft__shard *sh, weft_task *t);
void weft__task_release(weft_task *t);
/* Joins t (from a task or a plain thread) whatever happens to the caller:
 * neither its cancellation nor its deadline scope ends the wait. For helper
 * tasks whose work must be over before the caller goes on. Returns t's
 * result. */
void *weft__task_join_uncancellable(weft_task *t);
/* Links h (with its end function) on the running task t / unlinks it. Only
 * t itself calls these. */
void weft__task_hold(weft_task *t, weft__held *h, void (*end)(weft__held *h));
void weft__task_unhold(weft_task *t, weft__held *h);
/* The SQEs weft_uring_sqe() handed out on sh and no call took become NOPs
 * nobody waits for (lib/uring.c); NULL sh: nothing to do. */
void weft__uring_abandon(weft__shard *sh);
/* Cancels t: its current wait or op and every later one (any thread). */
void weft__task_cancel(weft_task *t);
/* weft__task_cancel() in two steps, for cancelling many tasks with one
 * barrier: mark each, then weft__fence_heavy() once, then deliver to each. */
void weft__task_cancel_mark(weft_task *t);
void weft__task_cancel_deliver(weft_task *t);
/* Wakes t wherever it is bound (from any thread). `self` is the calling
 * task, when the caller knows it runs in one: its shard is then the running
 * one, which saves the thread-local lookup on a channel hand-over; NULL
 * looks the shard up. Inline, like the waiter calls below: every signal of a
 * wait runs through it. */
static inline void weft__task_wake_from(weft_task *self, weft_task *t)
{
  weft__shard *sh = t->shard;
  weft__shard *cur = self ? self->shard : weft__shard_self();
  if (sh == cur)
    weft__shard_ready(sh, t);
  else
    weft__shard_push_remote(sh, t, cur);
}
static inline void weft__task_wake(weft_task *t)
{
  weft__task_wake_from(NULL, t);
}

/* ---- waiting (lib/waitq.c) ----------------------------------------------------- */
void weft__waitq_init(weft__waitq *q);
/* Prepares w for the task t (NULL: a plain thread) - or, without _for,
 * for whoever calls. */
static inline void weft__waiter_init_for(weft__waiter *w, weft_task *t)
{
  w->next = w->prev = NULL;
  w->q = NULL;
  /* Known before the waiter is queued: a signaller may pop it right away. */
  w->task = t;
  atomic_init(&w->state, WEFT__W_WAITING);
  w->queued = false;
  w->uncancellable = false;
  w->result = 0;
  weft__timer_init(&w->timer, NULL);
  w->data = 0;
}
void weft__waiter_init(weft__waiter *w);
/* Appends w to q; q must be locked. */
void weft__waitq_append(weft__waitq *q, weft__waiter *w);
/* Removes and returns the first waiter of q (q locked), or NULL. */
weft__waiter *weft__waitq_pop(weft__waitq *q);
/* Claims w for a wake-up (any thread, any lock held). Inline: every
 * signal takes this path. */
static inline bool weft__waiter_claim(weft__waiter *w)
{
  uint32_t expect = WEFT__W_WAITING;
  return atomic_compare_exchange_strong_explicit(&w->state, &expect, WEFT__W_CLAIMED,
                                                 memory_order_acq_rel, memory_order_acquire);
}
/* Takes back a waiter the caller appended and has not waited in: true if
 * nobody had claimed it (it is off its queue and will not be completed);
 * false if a signaller did - its wake-up is on the way, consume it with
 * weft__waiter_wait. */
bool weft__waiter_withdraw(weft__waiter *w);
/* weft__waiter_complete() for a plain thread's waiter: a futex wake. */
void weft__waiter_complete_thread(weft__waiter *w);
/* Completes a claimed w with `result`: the waiter runs again. Call without
 * q's lock; w must not be touched afterwards. _from: called by the running
 * task `self` (see weft__task_wake_from). */
static inline void weft__waiter_complete_from(weft_task *self, weft__waiter *w, int result)
{
  w->result = result;
  weft_task *t = w->task;
  if (!t) {
    weft__waiter_complete_thread(w);
    return;
  }
  atomic_store_explicit(&w->state, WEFT__W_DONE, memory_order_release);
  weft__task_wake_from(self, t); /* last touch: t may run (and w vanish) right after */
}
static inline void weft__waiter_complete(weft__waiter *w, int result)
{
  weft__waiter_complete_from(NULL, w, result);
}
/* Pops and claims up to `max` waiters of q (locked) and returns them as a
 * list linked through `next` (oldest first); *n (if not NULL) gets their
 * number. Waiters already claimed by their deadline or a cancel are dropped
 * from q: their claimer completes them. */
static inline weft__waiter *weft__waitq_take(weft__waitq *q, int64_t max, int64_t *n)
{
  weft__waiter *head = NULL, **tail = &head;
  int64_t got = 0;
  weft__waiter *w;
  while (got < max && (w = weft__waitq_pop(q))) {
    if (!weft__waiter_claim(w))
      continue;
    *tail = w;
    tail = &w->next;
    got++;
  }
  *tail = NULL;
  if (n)
    *n = got;
  return head;
}
/* Completes every waiter of a list from weft__waitq_take(), without q's
 * lock (a wake-up may be a system call). */
static inline void weft__waiters_complete(weft__waiter *list, int result)
{
  while (list) {
    weft__waiter *next = list->next; /* before the waiter may vanish */
    weft__waiter_complete(list, result);
    list = next;
  }
}
/* Takes up to `max` waiters of q under its lock and completes them with
 * `result` after it. */
void weft__waitq_release(weft__waitq *q, int64_t max, int result);
/* For a caller that found, without q's lock, a state a waker publishes
 * under it (a permit, a zero count, a finished once, a set event, a free
 * mutex): waits until that waker has let go of q's lock. The caller may
 * free the object as soon as it returns - a wait ended by the waker allows
 * that, since the waker completes its waiters only after it let go - and
 * the waker's unlock is its last touch of the object. One load when the
 * lock is free (see waitq.c for why it suffices). */
void weft__waitq_settle_slow(weft__waitq *q);
static inline void weft__waitq_settle(weft__waitq *q)
{
  if (atomic_load_explicit(&q->lock.held, memory_order_acquire))
    weft__waitq_settle_slow(q);
}
/* Blocks or suspends the caller in w (already appended, q unlocked) until it
 * is completed or the deadline passes (-ETIMEDOUT) or the task is cancelled
 * (-ECANCELED). Returns w's result. */
int weft__waiter_wait(weft__waiter *w, int64_t deadline);
/* Cancels the wait t is suspended in, if any. */
void weft__task_cancel_wait(weft_task *t);
/* Futex wait/wake for plain threads blocking on weft objects. Sleeps while
 * *word == expected, until woken or CLOCK_MONOTONIC passes `deadline` (ns,
 * -1 = none). Returns 0 (woken, or the value differed), -ETIMEDOUT, or
 * -EINTR. */
int weft__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline);
/* Wakes up to n threads sleeping on word. */
void weft__futex_wake(_Atomic uint32_t *word, int n);

/* ---- runtime (lib/runtime.c) ------------------------------------------------ */
/* Tasks created and not finished, counted without a shared counter: each
 * shard counts what it spawned and what finished on it (single writer each),
 * plain threads count in rt->external_spawned. */
int64_t weft__runtime_live(weft_runtime *rt);

/* ---- time (lib/time.c) ---------------------------------------------------- */
int64_t weft__now(void);
/* a + b for b >= 0, saturating at INT64_MAX (a time that far is never). */
static inline int64_t weft__add_sat(int64_t a, int64_t b)
{
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}

#endif
