/* SPDX-License-Identifier: MIT */
/*
 * The one suspension primitive on io_uring: every call that waits for a
 * completion is
 *
 *     weft__op op;
 *     struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
 *     if (!sqe) return op.res;              (or the plain-thread fallback)
 *     io_uring_prep_xxx(sqe, ...);
 *     return weft__op_wait(&op);
 *
 * The op record lives on the waiting coroutine's stack; the SQE's user_data
 * points at it (every SQE of a linked chain does). A deadline is a timer on
 * the owning shard that cancels the op when it fires - the same path as
 * weft_cancel, so it covers chains and multishot ops alike and costs no SQE
 * or system call unless it fires. The coroutine is suspended until the op's CQE has been reaped - on
 * every path, timeout and cancellation included - so nothing the kernel may
 * still write (the op record, the caller's buffers) goes away early. It is
 * never runnable meanwhile, so it is never stolen.
 *
 * Cancellation (weft_cancel): the canceller queues the op's cancel node on
 * the owning shard (the one whose ring has the SQE; SINGLE_ISSUER forbids
 * anyone else to submit there), which submits IORING_OP_ASYNC_CANCEL. The op
 * then completes with -ECANCELED - or with its real result if it won the
 * race, so no received byte or accepted connection is lost.
 */
#ifndef WEFT_LIB_OP_H
#define WEFT_LIB_OP_H

#include "core.h"

#include <limits.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct weft__op weft__op;

struct weft__op {
  weft_task *task;          /* the waiting coroutine */
  weft__shard *sh;          /* the shard whose ring has the SQE */
  struct io_uring_sqe *sqe; /* the op's SQE until it is submitted */
  int64_t deadline;         /* absolute, -1 for none */
  weft__timer timer;        /* fires at the deadline (owning shard) */
  bool timed_out;           /* the deadline cancelled it */
  int res;                  /* cqe->res, or the error that kept it from starting */
  unsigned cflags;          /* cqe->flags */
  unsigned expect;          /* CQEs still to come (a chain posts one per SQE) */
  unsigned nsqe;            /* SQEs in the op (> 1: a linked chain) */
  bool done;                /* the final CQE was reaped */
  bool cancel_requested;    /* its cancel node was queued (under task->wait_lock) */
  bool cancel_queued;       /* the node is in the inbox now (set with a push, under
                               task->wait_lock; cleared by the owning shard's drain) */
  weft__op *cancel_next;    /* link in the owning shard's cancel inbox */
  /* Called on the owning shard for each CQE of the op. The default records
   * the result (a chain keeps its first failure) and, with the last expected
   * CQE, calls weft__op_finish. */
  void (*on_cqe)(weft__shard *sh, weft__op *op, int res, unsigned flags);
};

#define WEFT__OP_NO_RESULT INT_MIN

/* Prepares op and returns its SQE, or NULL with op->res set: -EPERM on a
 * plain thread (callers fall back to the plain system call), -ECANCELED if
 * the task is cancelled, -ETIMEDOUT if the deadline (or the task's deadline
 * scope) has passed, -EBUSY if the SQ has no room even after a submit.
 * Nothing may run between begin and wait but preparing the SQE(s). */
struct io_uring_sqe *weft__op_begin(weft__op *op, int64_t deadline);

/* Submits (at the shard's next flush), suspends until the CQE(s), returns
 * the result: cqe->res, with -ECANCELED turned into -ETIMEDOUT when the
 * deadline fired (and the task itself was not cancelled). */
int weft__op_wait(weft__op *op);

/* The effective deadline of a blocking call in task t (min of `deadline`
 * and t's deadline scope). */
int64_t weft__deadline_for(weft_task *t, int64_t deadline);

/* Whether a call of task t (NULL: a plain thread) may start a wait that
 * ends at the effective `deadline`: 0, -ECANCELED if t is cancelled (a
 * cancel wins over a passed deadline), or -ETIMEDOUT if it has passed. */
static inline int weft__may_wait(weft_task *t, int64_t deadline)
{
  if (t && atomic_load_explicit(&t->cancelled, memory_order_relaxed))
    return -ECANCELED;
  return deadline >= 0 && deadline <= weft__now() ? -ETIMEDOUT : 0;
}

/* weft__op_begin for an op that lives past one wait (see weft__op_armed
 * below): it has no deadline - its owner outlives the task's deadline
 * scope, which bounds the waits on the op, not the op - so no timer slot is
 * reserved, which its owner would never arm. A cancelled task or a passed
 * scope still fails it (-ECANCELED, -ETIMEDOUT). */
struct io_uring_sqe *weft__op_begin_multishot(weft__op *op);
/* The same for weft__op_prepare (an SQE the caller has). */
int weft__op_prepare_multishot(weft__op *op);

/* Shard side: the op is over (no CQE of it will come any more): unpublish
 * it, consume a pending cancel node, make the task runnable. */
void weft__op_finish(weft__shard *sh, weft__op *op);

/* Shard side: a CQE whose user_data is this op. */
void weft__op_cqe_dispatch(weft__shard *sh, weft__op *op, int res, unsigned flags);

/* Shard side: submits the ASYNC_CANCELs queued by cancellers. */
void weft__op_drain_cancels(weft__shard *sh);

/* weft__op_begin without taking an SQE: for SQEs the caller already has
 * (the extension API), adopted with weft__op_adopt. 0 or the error. */
int weft__op_prepare(weft__op *op, int64_t deadline);
void weft__op_adopt(weft__op *op, struct io_uring_sqe *sqe);

/* Ops that live past one wait - multishot ops, owned by a listener, a
 * receive stream or the extension API, whose CQEs go to a custom on_cqe and
 * never resume the task directly:
 *   weft__op_armed    after its SQE is in the ring (counts it in flight);
 *   weft__op_ended    from on_cqe, for its last CQE (no IORING_CQE_F_MORE):
 *                     consumes a queued cancel node, counts it completed;
 *   weft__op_rearm    gives an ended op record a new SQE (a new life). */
void weft__op_armed(weft__op *op);
void weft__op_ended(weft__shard *sh, weft__op *op);
void weft__op_rearm(weft__op *op, struct io_uring_sqe *sqe);

/* Queues op's cancel node on its shard (under the task's wait lock, or on
 * the owning shard for ops only it touches). */
void weft__op_queue_cancel(weft__op *op);

/* Sends a cancelled op's cancel again, unless it is still queued (owning
 * shard): a cancel can miss - reach the kernel while a multishot op is
 * between two arms and find nothing - and the op then goes on. */
void weft__op_resend_cancel(weft__op *op);

/* Cancels the op task t is suspended in, if any (any thread). */
void weft__op_cancel_task(weft_task *t);

/* The plain-thread fallbacks' wait: poll(2) until fd is ready for `events`
 * or the deadline passes (-1: no deadline). 0, -ETIMEDOUT, -EBADF (also for
 * a negative fd, which poll would silently skip) or poll's error; errno is
 * left as it was. Readiness is no promise that the transfer will not block:
 * callers transfer with a "don't wait" flag and poll again on -EAGAIN. */
int weft__poll_ready(int fd, short events, int64_t deadline);

/* The plain-thread fallback of every read and write: preadv2/pwritev2 of
 * iov at `off` (-1: the file position), waiting with weft__poll_ready while
 * a deadline is set (the transfer itself then never blocks, except on a
 * regular file, which poll cannot wait for). The result, or -errno; errno
 * is left as it was. */
ssize_t weft__plain_rw(int fd, const struct iovec *iov, int cnt, off_t off, int64_t deadline,
                       bool write_op);

#endif
