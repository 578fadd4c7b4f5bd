/* SPDX-License-Identifier: MIT */
/* The extension API (include/weft/uring.h) on the op primitive. */
#include "op.h"
#include "uring_compat.h"

#include "weft/uring.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* SQE flags a raw op may not keep. IOSQE_CQE_SKIP_SUCCESS: weft needs every
 * CQE to know when the op is over. IOSQE_IO_DRAIN: the ring is the shard's,
 * shared by all its coroutines and by weft's own ops, some of which never
 * end (the wake-up eventfd's multishot poll); a drained SQE waits for every
 * op submitted before it, and the kernel holds back every SQE after it -
 * the cancel of its deadline included - so the whole shard would stop. */
#define RAW_DROPPED (IOSQE_CQE_SKIP_SUCCESS | IOSQE_IO_DRAIN)

/* Turns every SQE handed out and not taken into a NOP nobody waits for, when
 * the call that should take them fails before submitting - whatever the
 * caller passed, a bad array included - or when the task that took them
 * returns (core.h): nothing the caller prepared and gave up on may still
 * run and write into its memory. */
void weft__uring_abandon(weft__shard *sh)
{
  if (!sh)
    return;
  struct io_uring_sq *sq = &sh->ring.sq;
  for (unsigned i = 1; i <= sh->uring_unadopted; i++) {
    struct io_uring_sqe *sqe = &sq->sqes[(sq->sqe_tail - i) & sq->ring_mask];
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, WEFT__UD_IGNORE);
  }
  sh->uring_unadopted = 0;
}

struct io_uring_sqe *weft_uring_sqe(void)
{
  weft_task *t = weft__task_self();
  if (!t)
    return NULL;
  weft__shard *sh = t->shard;
  /* The first SQE of what may be a chain: give the chain the whole SQ, so a
   * chain up to ring_entries long is never split. */
  if (!sh->uring_unadopted && io_uring_sq_ready(&sh->ring)) {
    sh->sq_pending = 0;
    io_uring_submit(&sh->ring);
    weft__count(&sh->stats.enters, 1);
  }
  if (!io_uring_sq_space_left(&sh->ring)) {
    /* Submitting now would send the SQEs already handed out for this op
     * without the rest of their chain. The chain cannot be had: what was
     * handed out of it becomes NOPs, so that a caller giving up on it
     * leaves nothing to run into its memory at the next submission. */
    if (sh->uring_unadopted) {
      weft__uring_abandon(sh);
      return NULL;
    }
    weft__count(&sh->stats.sq_full_flushes, 1);
    sh->sq_pending = 0;
    io_uring_submit(&sh->ring);
    weft__count(&sh->stats.enters, 1);
  }
  struct io_uring_sqe *sqe = io_uring_get_sqe(&sh->ring);
  if (!sqe) {
    weft__uring_abandon(sh);
    return NULL;
  }
  sh->sq_pending++;
  sh->uring_unadopted++;
  memset(sqe, 0, sizeof(*sqe));
  /* Until weft_uring_wait adopts it, a stray CQE of it is ignored. */
  io_uring_sqe_set_data64(sqe, WEFT__UD_IGNORE);
  return sqe;
}

/* The SQEs weft_uring_sqe handed out and no call has taken yet are the last
 * `uring_unadopted` queued on the shard's ring: nothing else may be called
 * between weft_uring_sqe and the call that takes them. True when sqes[0..n)
 * are exactly those (in any order). On a plain thread there are none to
 * compare with: the call fails with -EPERM after the array's own check. */
static bool handed_out(weft__shard *sh, struct io_uring_sqe **sqes, unsigned n)
{
  if (!sqes || n == 0)
    return false;
  for (unsigned i = 0; i < n; i++)
    if (!sqes[i])
      return false;
  if (!sh)
    return true;
  if (n != sh->uring_unadopted)
    return false;
  const struct io_uring_sq *sq = &sh->ring.sq;
  for (unsigned i = 0; i < n; i++) {
    if (sqes[i] < sq->sqes || sqes[i] > sq->sqes + sq->ring_mask)
      return false;
    unsigned from_tail = (sq->sqe_tail - 1 - (unsigned)(sqes[i] - sq->sqes)) & sq->ring_mask;
    if (from_tail >= n)
      return false;
    /* Twice the same one would leave another untaken, and the op waiting
     * for a CQE that never comes to it. Chains are short: quadratic is fine. */
    for (unsigned k = 0; k < i; k++)
      if (sqes[k] == sqes[i])
        return false;
  }
  return true;
}

/* Whether sqe asks for a multishot op: one that posts CQEs (with
 * IORING_CQE_F_MORE) until it ends, by opcode and flag as the kernel's uapi
 * defines them. weft_uring_wait cannot take one: it would keep only the
 * last CQE's result - losing what the others carried, an accepted
 * descriptor, say - and a poll or timeout of it might never end. */
static bool multishot(const struct io_uring_sqe *sqe)
{
  switch (sqe->opcode) {
  case IORING_OP_ACCEPT:
    return sqe->ioprio & IORING_ACCEPT_MULTISHOT;
  case IORING_OP_RECV:
  case IORING_OP_RECVMSG:
    return sqe->ioprio & IORING_RECV_MULTISHOT;
  case IORING_OP_POLL_ADD:
    return sqe->len & IORING_POLL_ADD_MULTI;
  case IORING_OP_TIMEOUT:
    return sqe->timeout_flags & IORING_TIMEOUT_MULTISHOT;
  case IORING_OP_URING_CMD:
  case IORING_OP_URING_CMD128:
    return sqe->uring_cmd_flags & IORING_URING_CMD_MULTISHOT;
  case IORING_OP_READ_MULTISHOT:
  case IORING_OP_RECV_ZC:
    return true;
  default:
    return false;
  }
}

/* Buffer groups from this id up are weft's: lib/recv_stream.c registers its
 * streams' buffer rings there (uring.h leaves the ids below to the caller). */
#define WEFT_GROUPS 32768u

/* Whether sqe selects from, provides to or removes from one of weft's
 * buffer groups: it would take a stream's buffer from under it, or make a
 * stream's registration of that group fail. */
static bool streams_group(const struct io_uring_sqe *sqe)
{
  bool uses = (sqe->flags & IOSQE_BUFFER_SELECT) || sqe->opcode == IORING_OP_PROVIDE_BUFFERS ||
              sqe->opcode == IORING_OP_REMOVE_BUFFERS;
  return uses && sqe->buf_group >= WEFT_GROUPS;
}

/* The arguments of weft_uring_wait are the SQEs handed out, none of them
 * multishot, nor using weft's buffer groups, nor a linked timeout: every
 * SQE of the op carries the same user_data, so a CQE cannot tell which one
 * it is from, and the -ECANCELED a linked timeout ends with when the SQE it
 * guards completes in time would be taken for the op's failure, hiding
 * that SQE's result (the bytes a read consumed, say). The call's deadline
 * bounds the op instead. */
static bool takes(weft__shard *sh, struct io_uring_sqe **sqes, unsigned n)
{
  if (!handed_out(sh, sqes, n))
    return false;
  for (unsigned i = 0; i < n; i++)
    if (multishot(sqes[i]) || sqes[i]->opcode == IORING_OP_LINK_TIMEOUT || streams_group(sqes[i]))
      return false;
  return true;
}

int weft_uring_wait(struct io_uring_sqe **sqes, unsigned n, unsigned *cqe_flags, int64_t deadline)
{
  weft__shard *sh = weft__shard_self();
  weft__op op;
  int r = takes(sh, sqes, n) ? weft__op_prepare(&op, deadline) : -EINVAL;
  if (r < 0) {
    weft__uring_abandon(sh);
    return r;
  }
  sh->uring_unadopted = 0;
  /* The op's last SQE is the ring's last, wherever it is in the array
   * (which may list them in any order). */
  const struct io_uring_sq *sq = &sh->ring.sq;
  const struct io_uring_sqe *last = &sq->sqes[(sq->sqe_tail - 1) & sq->ring_mask];
  for (unsigned i = 0; i < n; i++) {
    /* weft needs every CQE, a link must not reach past the op into the
     * next SQE of somebody else, and a drain must not wait for the ops of
     * the whole shard (see RAW_DROPPED). */
    sqes[i]->flags &= (unsigned char)~RAW_DROPPED;
    if (sqes[i] == last)
      sqes[i]->flags &= (unsigned char)~(IOSQE_IO_LINK | IOSQE_IO_HARDLINK);
    weft__op_adopt(&op, sqes[i]);
  }
  r = weft__op_wait(&op);
  if (cqe_flags)
    *cqe_flags = op.cflags;
  return r;
}

/* ---- multishot ------------------------------------------------------------------- */

struct weft_uring_multishot {
  weft__op op;              /* user_data of the SQE points here */
  weft__held held;          /* on its task until end (ended for it at its exit) */
  struct ms_cqe {
    int res;
    unsigned flags;
  } *q;                     /* CQEs not handed out yet (a ring buffer) */
  unsigned head, count, cap;
  bool ended;               /* the last CQE (no F_MORE) has been queued */
  bool lost;                /* a CQE could not be queued (no memory), not reported yet */
  unsigned lost_at;         /* CQEs queued before it: next() reports it after those */
  weft__waiter *waiter;     /* the coroutine waiting in next(), if any */
};

/* Everything below runs on the owning shard's thread: the task does not
 * leave the shard while the op is active (t->pinned_ops), and CQEs are
 * reaped there. So no lock is needed. */

static bool push(struct weft_uring_multishot *ms, int res, unsigned flags)
{
  if (ms->count == ms->cap) {
    unsigned cap = ms->cap ? ms->cap * 2 : 16;
    struct ms_cqe *q = weft__malloc(cap * sizeof(*q));
    if (!q)
      return false;
    for (unsigned i = 0; i < ms->count; i++)
      q[i] = ms->q[(ms->head + i) % ms->cap];
    free(ms->q);
    ms->q = q;
    ms->cap = cap;
    ms->head = 0;
  }
  ms->q[(ms->head + ms->count) % ms->cap] = (struct ms_cqe){res, flags};
  ms->count++;
  return true;
}

static void ms_cqe(weft__shard *sh, weft__op *op, int res, unsigned flags)
{
  struct weft_uring_multishot *ms = (struct weft_uring_multishot *)(void *)op;
  /* A loss is reported in its place, after the CQEs queued before it, so
   * the caller knows which results came before and which after the gap
   * (two losses unreported yet are one gap, at the first). */
  if (!push(ms, res, flags) && !ms->lost) {
    ms->lost = true;
    ms->lost_at = ms->count;
  }
  if (!(flags & IORING_CQE_F_MORE)) {
    ms->ended = true;
    weft__op_ended(sh, op);
    /* Ended by a cancel (weft_cancel, or ours): counted as a one-shot
     * op's is (weft__op_finish), and a recv_stream's. */
    if (res == -ECANCELED)
      weft__count(&sh->stats.ops_cancelled, 1);
  }
  weft__waiter *w = ms->waiter;
  if (w && weft__waiter_claim(w)) {
    ms->waiter = NULL;
    weft__waiter_complete(w, 0);
  }
}

static void end_held(weft__held *h)
{
  weft_uring_multishot_end(WEFT__CONTAINER_OF(h, weft_uring_multishot, held));
}

int weft_uring_multishot_begin(weft_uring_multishot **out, struct io_uring_sqe *sqe)
{
  weft__shard *sh = weft__shard_self();
  struct weft_uring_multishot *ms = NULL;
  int r;
  if (!out || !handed_out(sh, &sqe, 1) || streams_group(sqe)) {
    r = -EINVAL;
  } else if (!sh) {
    /* Before allocating: a plain thread's call is -EPERM, not whatever an
     * allocation for an op it cannot have may give (-ENOMEM). */
    r = -EPERM;
  } else {
    ms = weft__calloc(1, sizeof(*ms));
    r = ms ? weft__op_prepare_multishot(&ms->op) : -ENOMEM;
  }
  if (r < 0) {
    weft__uring_abandon(sh);
    free(ms);
    return r;
  }
  sh->uring_unadopted = 0;
  sqe->flags &= (unsigned char)~(RAW_DROPPED | IOSQE_IO_LINK | IOSQE_IO_HARDLINK);
  weft__op_adopt(&ms->op, sqe);
  ms->op.on_cqe = ms_cqe;
  weft_task *t = ms->op.task;
  t->pinned_ops++;
  weft__op_armed(&ms->op);
  weft__task_hold(t, &ms->held, end_held);
  *out = ms;
  return 0;
}

static void request_cancel(struct weft_uring_multishot *ms)
{
  weft_task *t = ms->op.task;
  weft__spin_lock(&t->wait_lock);
  if (!ms->ended && !ms->op.cancel_requested)
    weft__op_queue_cancel(&ms->op);
  weft__spin_unlock(&t->wait_lock);
}

/* How long a wait for a cancelled op's end lasts before the cancel is sent
 * again: a cancel can miss (it reaches the kernel while the op is between
 * two arms of its poll, and finds nothing), and the op then goes on. A
 * period of retries, not a limit: the wait goes on until the op ends. */
#define CANCEL_RESEND_NS (100 * WEFT_MSEC)

static void resend_cancel(struct weft_uring_multishot *ms)
{
  if (!ms->ended)
    weft__op_resend_cancel(&ms->op);
}

/* Suspends until ms_cqe wakes us; returns the wait's result. */
static int wait_cqe(struct weft_uring_multishot *ms, int64_t deadline, bool cancellable)
{
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = !cancellable;
  ms->waiter = &w;
  int r = weft__waiter_wait(&w, deadline);
  if (ms->waiter == &w)
    ms->waiter = NULL; /* timed out or cancelled: the CQE path did not take it */
  return r;
}

/* The op lives on its task's shard and pins that task there; only that task
 * may use it (another could outlive it and touch a freed task). */
static bool owned(const struct weft_uring_multishot *ms)
{
  return ms->op.task == weft__task_self();
}

int weft_uring_multishot_cancel(weft_uring_multishot *ms)
{
  if (!ms)
    return -EINVAL;
  if (!owned(ms))
    return -EPERM;
  request_cancel(ms);
  return 0;
}

int weft_uring_multishot_next(weft_uring_multishot *ms, int *res, unsigned *flags, int64_t deadline)
{
  if (!ms)
    return -EINVAL;
  if (!owned(ms))
    return -EPERM;
  weft_task *t = ms->op.task;
  deadline = weft__deadline_for(t, deadline);
  for (;;) {
    if (ms->lost && !ms->lost_at) {
      /* Reported once: a caller that calls again (after freeing memory,
       * or to drain) gets what comes next, and 0 at the op's end - not
       * -ENOMEM for ever, without waiting. */
      ms->lost = false;
      return -ENOMEM;
    }
    if (ms->count) {
      struct ms_cqe c = ms->q[ms->head];
      ms->head = (ms->head + 1) % ms->cap;
      ms->count--;
      if (ms->lost)
        ms->lost_at--;
      if (res)
        *res = c.res;
      if (flags)
        *flags = c.flags;
      return 1;
    }
    bool cancelled = atomic_load_explicit(&t->cancelled, memory_order_relaxed);
    if (ms->ended)
      return cancelled ? -ECANCELED : 0;
    if (cancelled) {
      /* The op is cancelled with the task: what it still posts is handed
       * out (a multishot accept's descriptors must not be lost), and the
       * op's end is -ECANCELED. So this waits, uncancellably but within
       * the deadline: returning at once, it would leave the shard no
       * chance to submit the cancel or reap, to a caller that keeps
       * calling. */
      request_cancel(ms);
      int64_t resend = weft__add_sat(weft__now(), CANCEL_RESEND_NS);
      bool ours = deadline < 0 || resend < deadline;
      int r = wait_cqe(ms, ours ? resend : deadline, false);
      if (r == -ENOMEM && ours && deadline < 0)
        r = wait_cqe(ms, WEFT_NO_DEADLINE, false); /* no room for our timer */
      if (r == -ETIMEDOUT && ours) {
        resend_cancel(ms);
        continue;
      }
      if (r < 0 && !ms->count && !ms->ended)
        return r;
      continue;
    }
    int r = wait_cqe(ms, deadline, true);
    if (r < 0 && r != -ECANCELED && !ms->count)
      return r;
  }
}

int weft_uring_multishot_end(weft_uring_multishot *ms)
{
  if (!ms)
    return -EINVAL;
  if (!owned(ms))
    return -EPERM;
  request_cancel(ms);
  /* Wait for the final CQE even if the task is cancelled: the op must be
   * over before ms is freed. */
  while (!ms->ended) {
    int r = wait_cqe(ms, weft__add_sat(weft__now(), CANCEL_RESEND_NS), false);
    if (r == -ENOMEM)
      wait_cqe(ms, WEFT_NO_DEADLINE, false); /* no room for the timer */
    else if (r == -ETIMEDOUT)
      resend_cancel(ms);
  }
  ms->op.task->pinned_ops--;
  weft__task_unhold(ms->op.task, &ms->held);
  free(ms->q);
  free(ms);
  return 0;
}
