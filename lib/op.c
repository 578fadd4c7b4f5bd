/* SPDX-License-Identifier: MIT */
/* The op primitive: see op.h. */
#include "op.h"

#include "../coro/fault.h"

#include <errno.h>

int64_t weft__deadline_for(weft_task *t, int64_t deadline)
{
  int64_t scope = t ? t->deadline : -1;
  if (deadline < 0)
    return scope;
  if (scope < 0)
    return deadline;
  return deadline < scope ? deadline : scope;
}

/* Room for n more SQEs, submitting what is queued if needed. */
static bool reserve(weft__shard *sh, unsigned n)
{
  /* A kernel that takes every SQE a submit offers it (6.18 does, even
   * with the CQ overflowed) never fails this: a fault site shows it. */
  if (weft__fault_hit(WEFT__FAULT_OP_SQ))
    return false;
  if (io_uring_sq_space_left(&sh->ring) >= n)
    return true;
  weft__count(&sh->stats.sq_full_flushes, 1);
  sh->sq_pending = 0;
  io_uring_submit(&sh->ring);
  weft__count(&sh->stats.enters, 1);
  return io_uring_sq_space_left(&sh->ring) >= n;
}

static void requeue_cancel(weft__shard *sh, weft__op *op);

static void default_cqe(weft__shard *sh, weft__op *op, int res, unsigned flags)
{
  /* A chain reports its first failure, else the last SQE's result - not a
   * notification's: a zero-copy send posts its result (with F_MORE), then
   * a notification once the kernel lets go of the buffer. */
  if (!(flags & IORING_CQE_F_NOTIF) && (op->res == WEFT__OP_NO_RESULT || op->res >= 0)) {
    op->res = res;
    op->cflags = flags;
  }
  /* With F_MORE another CQE of the same SQE follows, and until it has the
   * kernel may still use what the SQE points to: the op is not over. */
  if (flags & IORING_CQE_F_MORE)
    return;
  if (--op->expect == 0) {
    weft__op_finish(sh, op);
    return;
  }
  /* A cancelled chain whose SQE just ended still has SQEs to come. Behind a
   * hard link (IOSQE_IO_HARDLINK, which a failure does not sever) the next
   * one now starts, after the cancel that ended this one: cancel again, or
   * the op would wait for it past its deadline, or for ever. */
  requeue_cancel(sh, op);
}

/* Pushes op's cancel node onto its shard's cancel inbox (any thread). */
static void push_cancel(weft__shard *sh, weft__op *op)
{
  op->cancel_queued = true;
  weft__op *head = atomic_load_explicit(&sh->cancel_inbox, memory_order_relaxed);
  do {
    op->cancel_next = head;
  } while (!atomic_compare_exchange_weak_explicit(&sh->cancel_inbox, &head, op,
                                                  memory_order_release, memory_order_relaxed));
}

void weft__op_queue_cancel(weft__op *op)
{
  op->cancel_requested = true;
  push_cancel(op->sh, op);
}

/* Cancels a cancelled op once more (owning shard) - unless its node is
 * still queued, its cancel still to be submitted. Under the task's wait
 * lock, where cancellers set cancel_requested and push: the node must
 * never be in the inbox twice. */
static void requeue_cancel(weft__shard *sh, weft__op *op)
{
  weft_task *t = op->task;
  weft__spin_lock(&t->wait_lock);
  if (op->cancel_requested && !op->cancel_queued)
    push_cancel(sh, op);
  weft__spin_unlock(&t->wait_lock);
}

void weft__op_resend_cancel(weft__op *op)
{
  requeue_cancel(op->sh, op);
}

/* weft__op_prepare; `timed`: the op itself ends at the deadline (else
 * only the checks are made, and the op has none). */
static int prepare(weft__op *op, int64_t deadline, bool timed)
{
  weft_task *t = weft__task_self();
  op->task = t;
  op->sqe = NULL;
  op->done = false;
  op->cancel_requested = false;
  op->cancel_queued = false;
  op->cancel_next = NULL;
  op->cflags = 0;
  op->expect = 0;
  op->nsqe = 0;
  op->on_cqe = default_cqe;
  op->res = WEFT__OP_NO_RESULT;
  op->timed_out = false;
  weft__timer_init(&op->timer, NULL);
  if (!t)
    return op->res = -EPERM;
  op->deadline = weft__deadline_for(t, deadline);
  int r = weft__may_wait(t, op->deadline);
  if (r < 0)
    return op->res = r;
  op->sh = t->shard;
  if (!timed)
    op->deadline = -1;
  /* Room for the deadline timer now, so arming it after the SQE is in the
   * ring cannot fail (the op would lose its deadline). */
  if (op->deadline >= 0 && weft__timer_reserve(&op->sh->timers) < 0)
    return op->res = -ENOMEM;
  return 0;
}

int weft__op_prepare(weft__op *op, int64_t deadline)
{
  return prepare(op, deadline, true);
}

int weft__op_prepare_multishot(weft__op *op)
{
  return prepare(op, WEFT_NO_DEADLINE, false);
}

void weft__op_adopt(weft__op *op, struct io_uring_sqe *sqe)
{
  io_uring_sqe_set_data(sqe, op);
  op->sqe = sqe;
  op->expect++;
  op->nsqe++;
}

void weft__op_armed(weft__op *op)
{
  op->sh->inflight++;
  weft__count(&op->sh->stats.ops_submitted, 1);
}

void weft__op_ended(weft__shard *sh, weft__op *op)
{
  op->done = true;
  if (op->cancel_requested)
    weft__op_drain_cancels(sh); /* its cancel node must not outlive the op */
  sh->inflight--;
  weft__count(&sh->stats.ops_completed, 1);
}

void weft__op_rearm(weft__op *op, struct io_uring_sqe *sqe)
{
  /* The previous life's cancel node was consumed by weft__op_ended. */
  op->done = false;
  op->cancel_requested = false;
  op->cancel_queued = false;
  op->cancel_next = NULL;
  op->expect = 0;
  op->nsqe = 0;
  weft__op_adopt(op, sqe);
  weft__op_armed(op);
}

static struct io_uring_sqe *begin(weft__op *op, int64_t deadline, bool timed)
{
  if (prepare(op, deadline, timed) < 0)
    return NULL;
  weft__shard *sh = op->sh;
  if (!reserve(sh, 1)) {
    op->res = -EBUSY;
    return NULL;
  }
  struct io_uring_sqe *sqe = io_uring_get_sqe(&sh->ring);
  sh->sq_pending++;
  weft__op_adopt(op, sqe);
  return sqe;
}

struct io_uring_sqe *weft__op_begin(weft__op *op, int64_t deadline)
{
  return begin(op, deadline, true);
}

struct io_uring_sqe *weft__op_begin_multishot(weft__op *op)
{
  return begin(op, WEFT_NO_DEADLINE, false);
}

/* The deadline passed: cancel the op like weft_cancel would. */
static void on_deadline(weft__timer *tm)
{
  weft__op *op = WEFT__CONTAINER_OF(tm, weft__op, timer);
  weft_task *t = op->task;
  op->timed_out = true;
  weft__spin_lock(&t->wait_lock);
  if (t->cur_op == op && !op->cancel_requested)
    weft__op_queue_cancel(op);
  weft__spin_unlock(&t->wait_lock);
}

/* An op interrupted in a kernel worker (a blocking open, say) ends with
 * -EINTR or a kernel-internal restart code (-ERESTARTSYS .. 516) rather
 * than -ECANCELED: all mean "cancelled" when we asked for it. */
static bool ended_cancelled(const weft__op *op, int res)
{
  if (res <= -512 && res >= -516)
    res = -EINTR;
  return res == -ECANCELED || (res == -EINTR && op->cancel_requested);
}

/* A cancelled op ended by its deadline, unless the task is cancelled too:
 * then the cancel wins, as in every other wait. */
static bool timed_out(const weft__op *op)
{
  return op->timed_out && !atomic_load_explicit(&op->task->cancelled, memory_order_relaxed);
}

int weft__op_wait(weft__op *op)
{
  weft_task *t = op->task;
  weft__shard *sh = op->sh;
  if (op->deadline >= 0) {
    op->timer.deadline = op->deadline;
    op->timer.fire = on_deadline;
    weft__timer_arm(&sh->timers, &op->timer); /* reserved in prepare: cannot fail */
    weft__count(&sh->stats.timers_armed, 1);
  }
  sh->inflight++;
  weft__count(&sh->stats.ops_submitted, 1);

  weft__spin_lock(&t->wait_lock);
  t->cur_op = op;
  /* A cancel that came before cur_op was visible missed it: the SQE is
   * already in the ring, so cancel it the normal way. */
  if (atomic_load_explicit(&t->cancelled, memory_order_relaxed))
    weft__op_queue_cancel(op);
  weft__spin_unlock(&t->wait_lock);

  weft__task_suspend(t);

  int res = op->res;
  if (ended_cancelled(op, res))
    return timed_out(op) ? -ETIMEDOUT : -ECANCELED;
  if (res <= -512 && res >= -516)
    res = -EINTR;
  return res;
}

void weft__op_finish(weft__shard *sh, weft__op *op)
{
  weft_task *t = op->task;
  if (weft__timer_armed(&op->timer)) {
    weft__timer_cancel(&sh->timers, &op->timer);
    weft__count(&sh->stats.timers_cancelled, 1);
  }
  /* Unpublish the op under the task's wait lock: after this no canceller
   * can queue its cancel node, and one queued before is found below. */
  weft__spin_lock(&t->wait_lock);
  bool queued = op->cancel_requested;
  t->cur_op = NULL;
  weft__spin_unlock(&t->wait_lock);
  op->done = true;
  if (queued)
    weft__op_drain_cancels(sh); /* consumes our node before the stack frame goes */

  sh->inflight--;
  /* Counted as weft__op_wait will report it (stats.h). */
  if (ended_cancelled(op, op->res))
    weft__count(timed_out(op) ? &sh->stats.ops_timed_out : &sh->stats.ops_cancelled, 1);
  weft__count(&sh->stats.ops_completed, 1);
  weft__shard_ready(sh, t);
}

void weft__op_drain_cancels(weft__shard *sh)
{
  if (!atomic_load_explicit(&sh->cancel_inbox, memory_order_relaxed))
    return;
  weft__op *op = atomic_exchange_explicit(&sh->cancel_inbox, NULL, memory_order_acquire);
  while (op) {
    weft__op *next = op->cancel_next;
    op->cancel_queued = false; /* out of the inbox (live: see weft__op_finish) */
    /* A cancel that misses its op (one between two arms of its poll, say)
     * leaves it running: the fault site plays that. */
    if (!op->done && !weft__fault_hit(WEFT__FAULT_CANCEL_MISS)) {
      struct io_uring_sqe *sqe = weft__ring_sqe(sh);
      if (!sqe) {
        /* No SQE even after a submit: keep the ops still in flight for
         * the next pass rather than lose a cancel (the op would never end).
         * Finished ones are dropped: their frames may be gone soon. */
        for (; op; op = next) {
          next = op->cancel_next;
          if (!op->done)
            push_cancel(sh, op);
        }
        return;
      }
      /* Every SQE of a chain carries the op as user_data: cancel them all. */
      io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)op,
                             op->nsqe > 1 ? IORING_ASYNC_CANCEL_ALL : 0);
      io_uring_sqe_set_data64(sqe, WEFT__UD_IGNORE);
    }
    op = next;
  }
}

void weft__op_cancel_task(weft_task *t)
{
  /* Callers from outside the runtime have entered (weft__task_cancel,
   * weft_group_cancel): the shard stays until this is done. */
  weft__shard *sh = NULL, *self = weft__shard_self();
  weft__spin_lock(&t->wait_lock);
  weft__op *op = t->cur_op;
  if (op && !op->cancel_requested) {
    sh = op->sh;
    weft__op_queue_cancel(op);
  }
  weft__spin_unlock(&t->wait_lock);
  /* Wake the owner if it sleeps; it drains cancels every pass (our own
   * loop does before it sleeps). */
  if (sh && sh != self)
    weft__shard_notify(sh);
}

void weft__op_cqe_dispatch(weft__shard *sh, weft__op *op, int res, unsigned flags)
{
  op->on_cqe(sh, op, res, flags);
}
