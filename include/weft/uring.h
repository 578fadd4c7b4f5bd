/* SPDX-License-Identifier: MIT */
/*
 * The extension API: io_uring operations weft does not wrap, run from a
 * coroutine on its shard's ring. The only public header that includes
 * <liburing.h>: link with liburing too, and compile with _GNU_SOURCE (or
 * _DEFAULT_SOURCE) defined, as <liburing.h> itself needs.
 *
 * Single-shot ops and linked chains:
 *
 *     struct io_uring_sqe *sqe = weft_uring_sqe();
 *     if (!sqe) return -EPERM;           // not in a coroutine
 *     io_uring_prep_xxx(sqe, ...);       // anything but user_data
 *     int res = weft_uring_wait(&sqe, 1, &cqe_flags, deadline);
 *
 * For a chain, take n SQEs one after the other, set IOSQE_IO_LINK on all but
 * the last yourself, and pass all n to weft_uring_wait (in any order: the
 * chain's order is the one weft_uring_sqe handed them out in): it returns
 * the first failure in the chain, or the last SQE's result, once every CQE
 * of the chain has been reaped.
 *
 * Safety contract: between weft_uring_sqe() and weft_uring_wait() call
 * nothing else of weft (the SQEs sit unsubmitted in the ring); weft owns
 * user_data, clears IOSQE_CQE_SKIP_SUCCESS (it needs every CQE) and
 * IOSQE_IO_DRAIN (the ring is the shard's: a drain would wait for every op
 * of every coroutine and weft's own, some of which never end, and hold back
 * every SQE after it - the shard's whole I/O; order an op's own SQEs with
 * IOSQE_IO_LINK), and clears IOSQE_IO_LINK / IO_HARDLINK on an op's last SQE
 * (a link must not reach the next op). The ring is shared: an op that acts
 * on other requests by descriptor or on all of them (IORING_OP_ASYNC_CANCEL
 * with IORING_ASYNC_CANCEL_FD or _ANY) reaches the ops of every coroutine
 * of the shard, which then fail with -ECANCELED as if cancelled - do not
 * use it on descriptors that other coroutines wait on, nor _ANY at all.
 *
 * Everything the SQEs point to must stay valid until weft_uring_wait
 * returns - which is after the kernel has posted every CQE, on every path
 * (deadline, cancellation). To give up SQEs taken, make the call fail
 * (weft_uring_wait(NULL, 0, NULL, WEFT_NO_DEADLINE) is -EINVAL): they are
 * turned into NOPs. A task that returns with SQEs taken and passed to no
 * call has them turned into NOPs too: none of them ever runs.
 *
 * weft_uring_wait is for ops that post one CQE per SQE. A multishot SQE
 * goes to weft_uring_multishot_begin below: weft_uring_wait would keep only
 * its last CQE's result, whatever the others carried (an accepted
 * descriptor, say) would be lost, and a multishot poll might never end. So
 * weft_uring_wait refuses one (-EINVAL, nothing submitted), alone or in a
 * chain: IORING_OP_ACCEPT with IORING_ACCEPT_MULTISHOT, IORING_OP_RECV or
 * _RECVMSG with IORING_RECV_MULTISHOT (in sqe->ioprio), IORING_OP_POLL_ADD
 * with IORING_POLL_ADD_MULTI (in sqe->len), IORING_OP_TIMEOUT with
 * IORING_TIMEOUT_MULTISHOT, IORING_OP_URING_CMD with
 * IORING_URING_CMD_MULTISHOT, IORING_OP_READ_MULTISHOT and
 * IORING_OP_RECV_ZC. It refuses IORING_OP_LINK_TIMEOUT as well: a CQE does
 * not say which SQE of the op it is from, and the -ECANCELED a linked
 * timeout ends with when the SQE it guards completes in time would be
 * taken for the chain's failure, hiding that SQE's result - the deadline
 * argument bounds the op (the whole chain) instead.
 *
 * A zero-copy send (IORING_OP_SEND_ZC, _SENDMSG_ZC) is taken: it posts its
 * result (with IORING_CQE_F_MORE), then a notification (IORING_CQE_F_NOTIF)
 * once the kernel lets go of the buffer, and weft_uring_wait returns after
 * both, with the result and its CQE's flags - so the buffer may be reused
 * as soon as it returns.
 *
 * Provided buffers: buffer group ids 0 to 32767 are the caller's to provide
 * (IORING_OP_PROVIDE_BUFFERS) and select from (IOSQE_BUFFER_SELECT); weft's
 * receive streams register theirs above, and an SQE that selects from,
 * provides to or removes from a group above 32767 is refused (-EINVAL,
 * nothing submitted) by weft_uring_wait and weft_uring_multishot_begin.
 * Groups belong to a shard's ring: provide and select from a task that
 * stays on one shard (weft_task_pin).
 *
 * Deadlines and cancellation: when the deadline passes (or the task is
 * cancelled) weft submits IORING_OP_ASYNC_CANCEL for the op(s) - again each
 * time an SQE of the chain ends, since behind IOSQE_IO_HARDLINK the next
 * one starts all the same - and still waits for their CQEs; the result is
 * -ETIMEDOUT (or -ECANCELED) unless the op completed first, in which case
 * its real result is returned.
 */
#ifndef WEFT_URING_H
#define WEFT_URING_H

#include "common.h"

#include <liburing.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A zeroed SQE on the calling coroutine's shard ring, or NULL on a plain
 * thread, or when the ring has no room even after submitting what is queued,
 * or when the SQ is full of this chain's own SQEs (a chain cannot be longer
 * than weft_config.ring_entries). A NULL in the middle of a chain gives the
 * chain up: the SQEs already handed out for it are turned into NOPs, so
 * none of them ever runs, and a weft_uring_wait of them is -EINVAL. */
WEFT_API struct io_uring_sqe *weft_uring_sqe(void);

/* Submits the n SQEs (taken in order from weft_uring_sqe, n >= 1) and waits
 * for all their CQEs. Returns the result (see above) and stores the flags of
 * the CQE that gave it in *cqe_flags (if not NULL; left alone when the call
 * fails before submitting, as there is no CQE). -EINVAL unless sqes
 * holds exactly the SQEs weft_uring_sqe handed out since the last call that
 * took some (n == 0, a NULL array or element, one missing or twice, one
 * from elsewhere), or when one of them is multishot, a linked timeout or
 * uses a buffer group of weft's (see above); -EPERM on a plain thread;
 * -ENOMEM with a deadline (its own or a deadline scope's) when the shard's
 * timer heap cannot grow to hold its timer. If the call fails before
 * submitting (-EINVAL, -EPERM, -ENOMEM, -ECANCELED, -ETIMEDOUT for a
 * deadline already passed) every SQE handed out is turned into a NOP:
 * nothing prepared for a call that failed ever runs. */
WEFT_API int weft_uring_wait(struct io_uring_sqe **sqes, unsigned n, unsigned *cqe_flags,
                             int64_t deadline);

/* Multishot ops (multishot poll, accept, recv, timeout ...): each CQE is
 * handed to the coroutine in order; CQEs that arrive while it is busy are
 * queued (the queue grows as needed).
 *
 *     weft_uring_multishot *ms;
 *     struct io_uring_sqe *sqe = weft_uring_sqe();
 *     io_uring_prep_poll_multishot(sqe, fd, POLLIN);
 *     weft_uring_multishot_begin(&ms, sqe);
 *     while ((r = weft_uring_multishot_next(ms, &res, &flags, deadline)) > 0)
 *       ...;                            // r == 0: the op ended
 *     weft_uring_multishot_end(ms);     // always: cancels if still active
 *
 * A coroutine with an active multishot op stays on its shard (it is not
 * stolen) until weft_uring_multishot_end, and only that coroutine may call
 * next, cancel and end (-EPERM from any other). If it returns without
 * calling end, the op is ended for it (as by weft_uring_multishot_end, CQEs
 * still queued dropped) before the task finishes, and ms is gone.
 *
 * weft_uring_multishot_end drops the CQEs still queued. Where a result owns
 * something (a multishot accept's descriptors), cancel first and drain:
 *
 *     weft_uring_multishot_cancel(ms);
 *     while (weft_uring_multishot_next(ms, &res, &flags, WEFT_NO_DEADLINE) > 0)
 *       if (res >= 0) close(res);
 *     weft_uring_multishot_end(ms); */
typedef struct weft_uring_multishot weft_uring_multishot;

/* Submits sqe as a multishot op. Returns 0, -EPERM (plain thread), -EINVAL
 * (NULL ms, sqe is not the one SQE weft_uring_sqe handed out, or it uses a
 * buffer group of weft's, see above), -ENOMEM, -ECANCELED or -ETIMEDOUT
 * (the task is cancelled, or its deadline scope has ended). On failure the
 * SQEs handed out are turned into NOPs and *ms is not written. A single-shot sqe is taken as well
 * (one op, never a chain: IOSQE_IO_LINK is cleared): next() hands out its
 * CQE(s) - one, or a zero-copy send's result and then its notification -
 * and then returns 0, as for a multishot op that ended. */
WEFT_API int weft_uring_multishot_begin(weft_uring_multishot **ms, struct io_uring_sqe *sqe);

/* Waits for the next CQE: returns 1 and its res/flags, 0 once the op has
 * ended (its last CQE, without IORING_CQE_F_MORE, was returned before),
 * -ETIMEDOUT when the deadline passes first (the op stays active; a CQE
 * already queued is returned even when the deadline has passed), -ENOMEM
 * when a CQE could not be queued for lack of memory (once, in its place:
 * after the CQEs queued before it, before those queued after it; later
 * calls go on as before) - or, with a deadline (its own or a deadline
 * scope's) and nothing queued, when the shard's timer heap cannot grow to
 * hold the wait's timer (nothing lost: the wait did not begin). In a
 * cancelled task the op is cancelled too: next() goes on handing out what
 * is queued and what the op still posts (waiting for it whatever the
 * cancellation, within the deadline), then returns -ECANCELED where it
 * would return 0 - so the drain loop below works in a cancelled task as
 * well. The kernel may end a multishot op by itself - its completion queue
 * overflowing, no provided buffer left (-ENOBUFS), an error of the op: that
 * last CQE comes without IORING_CQE_F_MORE and then next() returns 0 like
 * after a cancel; to go on, end this op and begin a new one. */
WEFT_API int weft_uring_multishot_next(weft_uring_multishot *ms, int *res, unsigned *flags,
                                       int64_t deadline);

/* Asks the kernel to end the op; ms stays usable: next() returns the CQEs
 * still queued or coming, then 0. Returns 0, -EINVAL, -EPERM. */
WEFT_API int weft_uring_multishot_cancel(weft_uring_multishot *ms);

/* Cancels the op if it is still active, waits for its final CQE (sending
 * the cancel again every 100 ms until it comes: a cancel can miss an op
 * between two arms of its poll, as next() does in a cancelled task), drops
 * the CQEs still queued and frees ms. Returns 0, -EINVAL, or -EPERM (not the
 * coroutine that began it: ms is left alone). */
WEFT_API int weft_uring_multishot_end(weft_uring_multishot *ms);

#ifdef __cplusplus
}
#endif

#endif
