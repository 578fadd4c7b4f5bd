/* SPDX-License-Identifier: MIT */
/*
 * A shard: one thread, one io_uring ring, one run queue, one timer heap.
 *
 * The loop, in order: run ready tasks (at most run_budget), take the inbox,
 * reap completions, fire due timers; with nothing left to run, poll briefly
 * (the spin window: spin_ns, grown towards spin_max_ns while work keeps
 * coming back just after the shard went to sleep) and then sleep in
 * io_uring_enter until a completion, a wake-up message or the nearest timer.
 *
 * Sleeping and waking follow a Dekker-style handshake so that no wake-up is
 * lost and none is sent needlessly:
 *   shard:  parked = 1; fence; if inbox empty -> sleep; parked = 0
 *   waker:  push to inbox; fence; if parked and wake_pending 0 -> 1: send msg
 * The shard clears wake_pending when the message's CQE arrives, so while one
 * message is in flight further wakers only push (counted as coalesced).
 */
#include "core.h"
#include "op.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static __thread weft__shard *tls_shard;

__attribute__((noinline, noipa)) weft__shard *weft__shard_self(void)
{
  weft__shard *sh;
  __asm__ volatile("" ::: "memory");
  sh = tls_shard;
  return sh;
}

__attribute__((noinline, noipa)) void weft__shard_set_self(weft__shard *sh)
{
  __asm__ volatile("" ::: "memory");
  tls_shard = sh;
}

/* ---- run queue (owner only) ------------------------------------------------ */

static void runq_push(weft__shard *sh, weft_task *t)
{
  t->next = NULL;
  if (sh->runq_tail)
    sh->runq_tail->next = t;
  else
    sh->runq_head = t;
  sh->runq_tail = t;
}

static weft_task *runq_pop(weft__shard *sh)
{
  weft_task *t = sh->runq_head;
  if (t) {
    sh->runq_head = t->next;
    if (!sh->runq_head)
      sh->runq_tail = NULL;
  }
  return t;
}

void weft__shard_ready_local(weft__shard *sh, weft_task *t)
{
  t->ready_seq = sh->ready_seq++;
  t->shard = sh;
  atomic_store_explicit(&t->state, WEFT__T_QUEUED, memory_order_relaxed);
  runq_push(sh, t);
}

void weft__shard_ready(weft__shard *sh, weft_task *t)
{
  if (t->armed_timer) {
    /* Not armed any more when it fired but a wake-up or cancel had claimed
     * the waiter first: counted as fired, it was not disarmed. */
    if (weft__timer_armed(t->armed_timer)) {
      weft__timer_cancel(&sh->timers, t->armed_timer);
      weft__count(&sh->stats.timers_cancelled, 1);
    }
    t->armed_timer = NULL;
  }
  t->shard = sh;
  t->ready_seq = sh->ready_seq++;
  atomic_store_explicit(&t->state, WEFT__T_QUEUED, memory_order_relaxed);
  /* A full stealable queue spills to the local one: the task still runs,
   * it just cannot be stolen until it is queued again. */
  if (weft__task_stealable(sh->rt, t) && weft__steal_enqueue(sh, t))
    return;
  runq_push(sh, t);
}

/* ---- inbox (multi-producer, taken whole by the owner) ------------------------ */

bool weft__shard_notify(weft__shard *sh)
{
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&sh->parked, memory_order_relaxed))
    return false;
  if (atomic_exchange_explicit(&sh->wake_pending, 1, memory_order_acq_rel)) {
    weft__count_shared(&sh->stats.wakes_coalesced, 1);
    return false;
  }
  weft__count_shared(&sh->stats.wakes_sent, 1);
  weft__ring_send_wake(sh);
  return true;
}

void (*weft__test_outside_pause)(void);
void (*weft__test_cancel_pause)(void);

void weft__shard_push_remote(weft__shard *sh, weft_task *t, weft__shard *from)
{
  weft_runtime *rt = sh->rt;
  bool outside = weft__outside_enter(rt, from);
  weft_task *head = atomic_load_explicit(&sh->inbox, memory_order_relaxed);
  do {
    t->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&sh->inbox, &head, t, memory_order_release,
                                                  memory_order_relaxed));
  /* From here t may run, end, and be the last task of a runtime that is
   * then stopped: the stop waits for this call to leave. */
  if (outside && weft__test_outside_pause)
    weft__test_outside_pause();
  weft__shard_notify(sh);
  weft__outside_leave(rt, outside);
}

static unsigned drain_inbox(weft__shard *sh)
{
  if (!atomic_load_explicit(&sh->inbox, memory_order_relaxed))
    return 0;
  weft_task *t = atomic_exchange_explicit(&sh->inbox, NULL, memory_order_acquire);
  /* The inbox is a stack: reverse it so tasks run in the order they came. */
  weft_task *fifo = NULL;
  unsigned n = 0;
  while (t) {
    weft_task *next = t->next;
    t->next = fifo;
    fifo = t;
    t = next;
    n++;
  }
  while (fifo) {
    weft_task *next = fifo->next;
    weft__shard_ready(sh, fifo);
    fifo = next;
  }
  weft__count(&sh->stats.inbox_received, n);
  return n;
}

/* ---- running tasks ------------------------------------------------------------ */

/* The next task to run: whichever queue's head became runnable first, so
 * the shard runs its tasks in the order they became ready whatever queue
 * they are in (and a joiner woken by each of its children does not run
 * between every two of them only to wait again). */
static weft_task *next_task(weft__shard *sh)
{
  weft_task *q = sh->runq_head;
  uint64_t dseq;
  bool d = weft__deque_peek_seq(&sh->deque, &dseq);
  if (q && (!d || q->ready_seq <= dseq))
    return runq_pop(sh);
  weft_task *t = d ? weft__steal_pop_local(sh) : NULL;
  return t ? t : runq_pop(sh);
}

/* Puts a task taken by next_task() back in front of everything: it is the
 * oldest runnable one, so it stays the next to run. */
static void runq_push_front(weft__shard *sh, weft_task *t)
{
  t->next = sh->runq_head;
  sh->runq_head = t;
  if (!sh->runq_tail)
    sh->runq_tail = t;
}

void weft__shard_handed_over(weft__shard *sh, weft_task *from)
{
  weft__count(&sh->stats.switches, 1);
  weft__count(&sh->stats.handoffs, 1);
  weft__steal_check_thieves(sh);
  if (from->yielding) {
    from->yielding = false;
    weft__shard_ready(sh, from);
  }
}

/* A task that waits (or yields) switches straight to the next runnable task
 * of its shard, the one the loop would resume next, instead of going back to
 * the loop first: one context switch per hand-over instead of two. Bounded
 * by what is left of the loop's run budget, so completions, the inbox and
 * timers are still served every run_budget tasks. */
void weft__task_suspend(weft_task *t)
{
  atomic_store_explicit(&t->state, WEFT__T_WAITING, memory_order_relaxed);
  weft__shard *sh = t->shard;
  weft_task *next = sh->direct_left ? next_task(sh) : NULL;
  if (next && next->coro.state == WEFT__CORO_CREATED &&
      atomic_load_explicit(&next->cancelled, memory_order_relaxed)) {
    /* Cancelled before it ever ran: the loop finishes it without running
     * it (run_one), as the next thing it does. */
    runq_push_front(sh, next);
    next = NULL;
  }
  if (next == t) {
    /* Woken before it could leave (its own reap completed its op): it is
     * the next to run anyway, and it is not waiting any more - so it is
     * not yielding either (a yield never registers a wait, but leave no
     * flag behind for run_one to act on later). */
    t->yielding = false;
    atomic_store_explicit(&t->state, WEFT__T_RUNNING, memory_order_relaxed);
    return;
  }
  weft__coro *from;
  if (next) {
    sh->direct_left--;
    next->shard = sh;
    atomic_store_explicit(&next->state, WEFT__T_RUNNING, memory_order_relaxed);
    from = weft__coro_switch(&t->coro, &next->coro);
  } else {
    from = weft__coro_suspend(&t->coro);
  }
  if (from)
    weft__shard_handed_over(t->shard, (weft_task *)(void *)from);
}

static void run_one(weft__shard *sh, weft_task *t)
{
  if (t->coro.state == WEFT__CORO_CREATED &&
      atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
    weft__task_finish_unstarted(sh, t);
    return;
  }
  t->shard = sh;
  atomic_store_explicit(&t->state, WEFT__T_RUNNING, memory_order_relaxed);
  /* Whoever comes back may be a task t handed the shard over to. */
  weft_task *back = (weft_task *)(void *)weft__coro_resume_any(&t->coro);
  weft__count(&sh->stats.switches, 1);
  weft__steal_check_thieves(sh);
  if (back->coro.state == WEFT__CORO_FINISHED) {
    weft__task_finished(sh, back);
  } else if (back->yielding) {
    back->yielding = false;
    weft__shard_ready(sh, back);
  }
}

static unsigned run_ready(weft__shard *sh)
{
  unsigned budget = sh->rt->cfg.run_budget, n = 0;
  weft_task *t;
  while (n < budget && (t = next_task(sh))) {
    /* Tasks run by direct hand-over count against the same budget. */
    sh->direct_left = sh->rt->cfg.handoff ? budget - n - 1 : 0;
    run_one(sh, t);
    n = sh->rt->cfg.handoff ? budget - sh->direct_left : n + 1;
  }
  sh->direct_left = 0;
  return n;
}

/* ---- completions ----------------------------------------------------------------- */

static void dispatch(weft__shard *sh, uint64_t ud, int res, unsigned flags)
{
  switch (ud & WEFT__UD_TAG_MASK) {
  case 0:
    if (ud)
      weft__op_cqe_dispatch(sh, (weft__op *)(uintptr_t)ud, res, flags);
    return;
  case WEFT__UD_WAKE:
    if (ud == WEFT__UD_WAKE_FD)
      weft__ring_wake_fd_cqe(sh, flags);
    atomic_store_explicit(&sh->wake_pending, 0, memory_order_release);
    return;
  case WEFT__UD_WAKE_SENT: {
    /* A wake-up we sent was refused: wake the target through its eventfd,
     * or let the next waker try again. */
    weft__shard *to = &sh->rt->shards[ud >> 3];
    /* Stopping too: the stop's own wake-ups are what the shards wait for,
     * and every ring stays open until all shard threads have left. */
    if (res < 0 && weft__ring_replace_wake(to))
      weft__shard_notify(to);
    return;
  }
  case WEFT__UD_MSG:
  case WEFT__UD_MSG_BELL:
  case WEFT__UD_MSG_FAILED:
  case WEFT__UD_BELL_FAILED:
    weft__msg_cqe(sh, ud, res);
    return;
  default:
    return;
  }
}

/* Takes the CQEs in batches (copied out and the CQ advanced first), so a
 * handler may submit, reap or run anything without disturbing the walk. */
/* True when completions may wait in the kernel: task work of DEFER_TASKRUN
 * (flagged with TASKRUN_FLAG; without the flag, always possible - messages,
 * wake-ups and doorbells of other rings arrive as task work too, with no op
 * of ours in flight) or the overflow list of a full CQ. */
static bool kernel_has_events(weft__shard *sh)
{
  unsigned kflags = IO_URING_READ_ONCE(*sh->ring.sq.kflags);
  if (kflags & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN))
    return true;
  return (sh->ring_flags & WEFT_RING_DEFER_TASKRUN) && !(sh->ring_flags & WEFT_RING_TASKRUN_FLAG);
}

unsigned weft__shard_reap(weft__shard *sh)
{
  enum { BATCH = 64 };
  struct { uint64_t ud; int res; unsigned flags; } batch[BATCH];
  unsigned total = 0;
  if (kernel_has_events(sh)) {
    if (IO_URING_READ_ONCE(*sh->ring.sq.kflags) & IORING_SQ_CQ_OVERFLOW)
      weft__count(&sh->stats.cq_overflows, 1);
    io_uring_get_events(&sh->ring);
    weft__count(&sh->stats.enters, 1);
  }
  for (;;) {
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&sh->ring, head, cqe) {
      batch[n].ud = cqe->user_data;
      batch[n].res = cqe->res;
      batch[n].flags = cqe->flags;
      if (++n == BATCH)
        break;
    }
    if (!n)
      break;
    io_uring_cq_advance(&sh->ring, n);
    for (unsigned i = 0; i < n; i++)
      dispatch(sh, batch[i].ud, batch[i].res, batch[i].flags);
    total += n;
  }
  if (total)
    weft__count(&sh->stats.cqes, total);
  return total;
}

static void flush(weft__shard *sh)
{
  if (!sh->sq_pending)
    return;
  sh->sq_pending = 0;
  /* With ops in flight, run the kernel's pending task work in the same
   * system call, so their completions are ready for the reap that follows. */
  if (sh->inflight)
    io_uring_submit_and_get_events(&sh->ring);
  else
    io_uring_submit(&sh->ring);
  weft__count(&sh->stats.enters, 1);
}

static bool has_runnable(weft__shard *sh)
{
  return sh->runq_head || weft__deque_len(&sh->deque);
}

/* Every task has returned and a listener nobody closed still has its
 * accept armed here: sweeping it is work (checked before sleeping too, or
 * a shard parked with that accept in flight would never wake). */
static bool listeners_to_sweep(weft__shard *sh)
{
  return sh->listeners && atomic_load_explicit(&sh->rt->exiting, memory_order_acquire);
}

static bool has_work(weft__shard *sh)
{
  return has_runnable(sh) || listeners_to_sweep(sh) ||
         atomic_load_explicit(&sh->inbox, memory_order_relaxed) ||
         atomic_load_explicit(&sh->cancel_inbox, memory_order_relaxed) ||
         io_uring_cq_ready(&sh->ring) ||
         (IO_URING_READ_ONCE(*sh->ring.sq.kflags) & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN));
}

bool weft__shard_idle_otherwise(weft__shard *sh)
{
  if (has_work(sh) || sh->sq_pending)
    return false;
  int64_t next = weft__timer_next(&sh->timers);
  return next < 0 || next > weft__now();
}

static bool should_exit(weft__shard *sh)
{
  /* Every task has returned, so no op of a task is in flight; the count
   * also covers anything else weft submitted. */
  return atomic_load_explicit(&sh->rt->exiting, memory_order_acquire) && sh->inflight == 0;
}

/* Polls for up to the current spin window; true if work showed up. */
static bool spin(weft__shard *sh)
{
  int64_t spin_ns = sh->spin_window;
  if (spin_ns <= 0)
    return false;
  int64_t now = weft__now();
  int64_t until = weft__add_sat(now, spin_ns);
  int64_t next_timer = weft__timer_next(&sh->timers);
  if (next_timer >= 0 && next_timer < until)
    until = next_timer;
  for (;;) {
    /* A pause is about 30 ns on current x86 parts: eight polls between
     * stealing rounds keep a thief within a few hundred ns of new work. */
    for (int i = 0; i < 8; i++) {
      if (has_work(sh))
        return true;
      weft__cpu_relax();
    }
    if (should_exit(sh))
      return true; /* the loop exits; a stop does not wait out the spin */
    if (weft__steal_round(sh))
      return true;
    if (weft__now() >= until)
      return false;
  }
}

/* Ski rental: a sleep that ended within one spin window would have cost
 * less as more spinning (a sleep and its wake-up cost several microseconds,
 * tens on a VM), so the window doubles; a sleep much longer than the window
 * means the gaps here are long, so it halves back towards spin_ns. */
static void adapt_spin(weft__shard *sh, int64_t slept)
{
  const weft_config *c = &sh->rt->cfg;
  if (c->spin_max_ns <= c->spin_ns || c->spin_ns <= 0)
    return;
  if (slept <= sh->spin_window) {
    sh->spin_window = sh->spin_window > c->spin_max_ns / 2 ? c->spin_max_ns : sh->spin_window * 2;
    if (sh->spin_window > atomic_load_explicit(&sh->spin_window_peak, memory_order_relaxed))
      atomic_store_explicit(&sh->spin_window_peak, sh->spin_window, memory_order_relaxed);
  } else if (slept > 4 * sh->spin_window)
    sh->spin_window = sh->spin_window / 2 < c->spin_ns ? c->spin_ns : sh->spin_window / 2;
}

static void park(weft__shard *sh)
{
  weft_runtime *rt = sh->rt;
  atomic_store_explicit(&sh->parked, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&rt->sleeping, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst);
  /* The other half of wake_thief's handshake: work queued elsewhere before
   * `sleeping` was raised is seen here, after it is seen there. */
  if (!has_work(sh) && !should_exit(sh) && !weft__steal_work_elsewhere(sh)) {
    int64_t next = weft__timer_next(&sh->timers);
    /* Direct messages or the eventfd's poll waiting for SQEs: look again
     * soon, whatever wakes us (what frees the SQ is the kernel taking it,
     * not an event). */
    if ((weft__msg_backlogged(sh) || sh->wake_fd_unarmed) &&
        (next < 0 || next > weft__now() + WEFT_MSEC))
      next = weft__now() + WEFT_MSEC;
    struct __kernel_timespec ts, *tsp = NULL;
    if (next >= 0) {
      int64_t d = next - weft__now();
      if (d < 0)
        d = 0;
      ts.tv_sec = d / 1000000000;
      ts.tv_nsec = d % 1000000000;
      tsp = &ts;
    }
    if (!tsp || ts.tv_sec || ts.tv_nsec) {
      struct io_uring_cqe *cqe;
      sh->sq_pending = 0;
      int64_t slept = weft__now();
      io_uring_submit_and_wait_timeout(&sh->ring, &cqe, 1, tsp, NULL);
      adapt_spin(sh, weft__now() - slept);
      weft__count(&sh->stats.parks, 1);
      weft__count(&sh->stats.enters, 1);
    }
  }
  atomic_store_explicit(&sh->parked, 0, memory_order_relaxed);
  atomic_fetch_sub_explicit(&rt->sleeping, 1, memory_order_relaxed);
  /* Whatever woke us (new work, a thief's wake-up, a timer), start stealing
   * afresh rather than in the middle of an old cooldown. */
  weft__steal_reset_backoff(sh);
}

static void loop(weft__shard *sh)
{
  for (;;) {
    run_ready(sh);
    drain_inbox(sh);
    weft__op_drain_cancels(sh);
    if (weft__msg_backlogged(sh))
      weft__msg_send_backlog(sh);
    if (sh->wake_fd_unarmed)
      weft__ring_arm_wake_fd(sh);
    flush(sh);
    weft__shard_reap(sh);
    if (weft__timer_next(&sh->timers) >= 0)
      weft__count(&sh->stats.timers_fired, weft__timer_run(&sh->timers, weft__now()));
    if (has_runnable(sh) || weft__steal_round(sh))
      continue;
    if (listeners_to_sweep(sh)) {
      /* A listener left open must not keep its accept armed: the shard
       * could never leave. */
      weft__listener_sweep(sh);
      continue;
    }
    if (should_exit(sh))
      return;
    if (spin(sh))
      continue;
    park(sh);
  }
}

static void set_thread_identity(weft__shard *sh)
{
  weft_runtime *rt = sh->rt;
  char name[32];
  snprintf(name, sizeof(name), "%s-%d", rt->thread_name, sh->id);
  name[15] = '\0'; /* the kernel's limit for thread names */
  pthread_setname_np(pthread_self(), name);
  if (rt->cfg.ncpus > 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rt->cfg.cpus[sh->id % rt->cfg.ncpus], &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
}

static void report_started(weft__shard *sh, int result)
{
  weft_runtime *rt = sh->rt;
  pthread_mutex_lock(&rt->start_lock);
  sh->setup_result = result;
  rt->started++;
  pthread_cond_broadcast(&rt->start_cond);
  pthread_mutex_unlock(&rt->start_lock);
}

void *weft__shard_main(void *arg)
{
  weft__shard *sh = arg;
  /* A write to a broken pipe or socket raises SIGPIPE on the thread that
   * submitted it, which would kill the process: weft reports -EPIPE instead.
   * Blocked here, it stays pending on this thread and is never delivered. */
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
  set_thread_identity(sh);
  weft__timer_heap_init(&sh->timers);
  sh->steal.cursor = (unsigned)(sh->id + 1);
  sh->spin_window = sh->rt->cfg.spin_ns;
  atomic_store_explicit(&sh->spin_window_peak, sh->spin_window, memory_order_relaxed);
  /* The ring is created on this thread so that SINGLE_ISSUER and
   * DEFER_TASKRUN bind it to the thread that will submit and reap. */
  int r = weft__ring_setup(sh);
  if (r == 0)
    r = weft__coro_thread_init();
  report_started(sh, r);
  if (r < 0) {
    weft__ring_teardown(sh);
    weft__timer_heap_term(&sh->timers);
    return NULL;
  }
  /* Wait until every shard is up (or the start failed) before running. */
  weft_runtime *rt = sh->rt;
  pthread_mutex_lock(&rt->start_lock);
  while (rt->start_verdict == 0)
    pthread_cond_wait(&rt->start_cond, &rt->start_lock);
  bool go = rt->start_verdict > 0;
  pthread_mutex_unlock(&rt->start_lock);
  if (go) {
    weft__shard_set_self(sh);
    loop(sh);
    weft__shard_set_self(NULL);
  }
  /* The ring stays open: other threads may still send it a wake-up until
   * every shard has left. The runtime closes all rings after joining. */
  weft__timer_heap_term(&sh->timers);
  return NULL;
}
