/* SPDX-License-Identifier: MIT */
/*
 * Raw messages between shards (weft/msg.h), the API: sending (direct,
 * batched, ticketed), flush, receiving, hot tags, coalesced counters, and
 * the per-runtime setup. The transport underneath is lib/msg_lane.c; the
 * design is described in msg_internal.h.
 */
#include "msg_internal.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

atomic_bool weft__msg_refused;

/* ---- the API: common checks ------------------------------------------------------- */

/* Resolves (rt, shard): *to is the target, *me the calling shard when it is
 * one of rt's (NULL otherwise: the external path). */
static int resolve(weft_runtime *rt, int shard, weft__shard **me, weft__shard **to)
{
  weft__shard *self = weft__shard_self();
  if (!rt) {
    if (!self)
      return -EINVAL;
    rt = self->rt;
  }
  if (shard < 0 || shard >= rt->nshards)
    return -EINVAL;
  if (!rt->msg->supported)
    return -EOPNOTSUPP;
  *to = &rt->shards[shard];
  *me = self && self->rt == rt ? self : NULL;
  return 0;
}

/* The calling coroutine's shard for the receive-side calls. */
static int receiver(weft__shard **out)
{
  weft__shard *sh = weft__shard_self();
  if (!sh || !weft__task_self())
    return -EPERM;
  if (!sh->rt->msg->supported)
    return -EOPNOTSUPP;
  *out = sh;
  return 0;
}

/* ---- sending -------------------------------------------------------------------- */

/* A direct message for `to` that its receivers have no room for: the queue
 * it would go to is at msg_queue_limit. */
static bool refused(weft__shard *to, uint16_t tag)
{
  return atomic_load_explicit(&weft__msg_queue_for(to, tag)->full, memory_order_relaxed);
}

int weft_msg_send_rt(weft_runtime *rt, int shard, uint16_t tag, uint32_t val)
{
  weft__shard *me, *to;
  int r = resolve(rt, shard, &me, &to);
  if (r < 0)
    return r;
  if (refused(to, tag))
    return -EAGAIN;
  if (!me)
    return weft__ring_post_msg(to->ring_fd, ud_msg(WEFT_MSG_EXTERNAL, tag), val);
  r = weft__msg_direct(me, to, tag, val);
  if (r == 0)
    weft__count(&me->stats.msgs_sent, 1);
  return r;
}

int weft_msg_send(int shard, uint16_t tag, uint32_t val)
{
  return weft_msg_send_rt(NULL, shard, tag, val);
}

/* Puts the direct messages of `me` to shard `to` that wait in its backlog
 * (the SQ had no room) into the SQ, waiting for room while the loop
 * submits, so that what goes into the SQ next is behind them. 0, or what
 * ended the wait: -ECANCELED (a cancel wins over a passed deadline, as in
 * every other wait), -ETIMEDOUT, -ENOMEM. Called by a coroutine running on
 * me, which it keeps there (pinned_ops) while it waits. */
static int backlog_out(weft__shard *me, int to, int64_t deadline)
{
  while (me->msg->backlog_for[to] && weft__msg_send_backlog(me)) {
    int r = weft__may_wait(weft__task_self(), deadline);
    if (r == 0)
      r = weft_sleep(100 * WEFT_USEC); /* the loop submits meanwhile */
    if (r < 0)
      return r;
  }
  return 0;
}

int weft_msg_send_wait_rt(weft_runtime *rt, int shard, uint16_t tag, uint32_t val)
{
  weft__shard *me, *to;
  int r = resolve(rt, shard, &me, &to);
  if (r < 0)
    return r;
  if (refused(to, tag))
    return -EAGAIN;
  weft_task *t = weft__task_self();
  if (!me || !t) {
    /* Posted at once; but a coroutine of another runtime is a coroutine
     * all the same: cancelled, or past its deadline scope, it sends
     * nothing, as one of rt does (weft__op_prepare, below). */
    if ((r = weft__may_wait(t, weft__deadline_for(t, WEFT_NO_DEADLINE))) < 0)
      return r;
    return weft__ring_post_msg(to->ring_fd, ud_msg(WEFT_MSG_EXTERNAL, tag), val);
  }
  /* A ticketed message is a direct one: it goes behind those to `to` still
   * waiting in the backlog for SQEs, never ahead of them (msg.h's order).
   * The task stays on this shard meanwhile: the backlog is its. */
  t->pinned_ops++;
  r = backlog_out(me, to->id, WEFT_NO_DEADLINE);
  t->pinned_ops--;
  if (r < 0)
    return r;
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, WEFT_NO_DEADLINE);
  if (!sqe)
    return op.res;
  weft__ring_prep_msg(sqe, to->ring_fd, val, ud_msg((unsigned)me->id, tag), 0);
  r = weft__op_wait(&op);
  /* Counted by its result: one the kernel refused is the caller's error,
   * not sent again. On the shard we are on now: woken, a stealable task
   * may have moved, and each shard's counters have one writer. */
  weft__shard *now = weft__task_self()->shard;
  weft__count(r >= 0 ? &now->stats.msgs_sent : &now->stats.msg_failed, 1);
  return r > 0 ? 0 : r;
}

int weft_msg_send_wait(int shard, uint16_t tag, uint32_t val)
{
  return weft_msg_send_wait_rt(NULL, shard, tag, val);
}

/* The lane from `src` into `to`, made on first use. Plain threads race to
 * make the shared one: the first to publish wins, the others free theirs. */
static weft__lane *lane_for(weft__shard *to, unsigned src, unsigned capacity)
{
  _Atomic(weft__lane *) *slot = &to->msg->in[src];
  weft__lane *l = atomic_load_explicit(slot, memory_order_acquire);
  if (l)
    return l;
  weft__lane *mine = weft__lane_new(capacity);
  if (!mine)
    return NULL;
  if (atomic_compare_exchange_strong_explicit(slot, &l, mine, memory_order_acq_rel,
                                              memory_order_acquire))
    return mine;
  free(mine);
  return l;
}

/* Rings the lane of plain threads into `to`, whose bell the caller just
 * raised. A refused doorbell falls back to the shard's eventfd, whose
 * wake-up drains that lane too. If even that fails, the bell goes down for
 * the next ringer and the flushers waiting for the lane look again (one of
 * them rings it). */
static int ring_external_lane(weft__shard *to, weft__lane *l)
{
  int r = weft__ring_post_msg(to->ring_fd, ud_bell(WEFT__BELL_LANE, (unsigned)to->rt->nshards), 0);
  if (r == 0 || weft__ring_wake_by_fd(to))
    return 0;
  atomic_store_explicit(&l->bell, 0, memory_order_seq_cst);
  weft__waitq_release(&to->msg->ext_flush_q, INT64_MAX, 0);
  return r;
}

int weft_msg_send_many_rt(weft_runtime *rt, int shard, const weft_msg *msgs, size_t n)
{
  weft__shard *me, *to;
  int r = resolve(rt, shard, &me, &to);
  if (r < 0)
    return r;
  if (!msgs && n)
    return -EINVAL;
  if (!n)
    return 0;
  uint32_t want = n > (size_t)INT32_MAX ? (uint32_t)INT32_MAX : (uint32_t)n;
  weft_runtime *trt = to->rt;
  unsigned src = me ? (unsigned)me->id : (unsigned)trt->nshards;
  weft__lane *l = lane_for(to, src, trt->msg->lane_capacity);
  if (!l)
    return -ENOMEM;
  /* From outside: once pushed, the messages may be drained and their
   * receiver end, and the runtime stop, before the lane is rung - which
   * reads the shard. The stop waits for this call (weft__outside_enter). */
  bool outside = weft__outside_enter(trt, me);
  if (!me)
    weft__spin_lock(&l->plock);
  uint32_t k = weft__lane_push(l, msgs, want);
  bool ring = k && weft__lane_needs_bell(l);
  if (!me)
    weft__spin_unlock(&l->plock);
  if (me) {
    weft__count(&me->stats.msgs_sent, k);
    if (k < want)
      weft__count(&me->stats.msg_backpressure, want - k);
    if (ring)
      weft__msg_bell(me, to, WEFT__BELL_LANE, src);
    else if (k)
      weft__count(&me->stats.msg_doorbells_coalesced, 1);
  } else if (ring) {
    /* Queued either way: if it could not be rung, the next producer or a
     * flush rings it (the messages are delivered then). */
    (void)ring_external_lane(to, l);
  }
  weft__outside_leave(trt, outside);
  return k ? (int)k : -EAGAIN;
}

int weft_msg_send_many(int shard, const weft_msg *msgs, size_t n)
{
  return weft_msg_send_many_rt(NULL, shard, msgs, n);
}

/* ---- flush ------------------------------------------------------------------------ */

/* A ticketed marker to `to`: its CQE says every earlier msg_ring of this
 * ring to `to` was posted (msg_ring is issued inline, in SQE order). */
static int flush_marker(weft__shard *me, weft__shard *to, int64_t deadline)
{
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  if (!sqe)
    return op.res;
  weft__ring_prep_msg(sqe, to->ring_fd, 0, ud_bell(WEFT__BELL_MARK, 0), 0);
  int r = weft__op_wait(&op);
  return r > 0 ? 0 : r;
}

/* True while some lane of `me` still holds messages sent before the flush
 * (snap: the tails then); asks those targets for an acknowledgement. */
static bool lanes_pending(weft__shard *me, const uint32_t *snap)
{
  weft_runtime *rt = me->rt;
  bool pending = false;
  for (int i = 0; i < rt->nshards; i++) {
    weft__lane *l = atomic_load_explicit(&rt->shards[i].msg->in[me->id], memory_order_relaxed);
    if (!l || (int32_t)(atomic_load_explicit(&l->head, memory_order_acquire) - snap[i]) >= 0)
      continue;
    atomic_store_explicit(&l->flush_req, 1, memory_order_seq_cst);
    if ((int32_t)(atomic_load_explicit(&l->head, memory_order_seq_cst) - snap[i]) < 0)
      pending = true;
  }
  return pending;
}

static int flush_on(weft__shard *me, int64_t deadline)
{
  weft_runtime *rt = me->rt;
  weft__msg_shard *ms = me->msg;
  uint32_t snap[WEFT_MAX_SHARDS];
  for (int i = 0; i < rt->nshards; i++) {
    weft__lane *l = atomic_load_explicit(&rt->shards[i].msg->in[me->id], memory_order_relaxed);
    snap[i] = l ? l->ptail : 0;
  }
  for (int i = 0; i < rt->nshards; i++) {
    for (;;) {
      uint64_t seq = ms->direct_seq[i], refused = ms->refused[i];
      if (seq == ms->posted_seq[i])
        break;
      /* The marker goes behind every message to i, those still in the
       * backlog (waiting for SQEs) included. */
      int r = backlog_out(me, i, deadline);
      if (r == 0)
        r = flush_marker(me, &rt->shards[i], deadline);
      if (r < 0)
        return r;
      /* A message refused before the marker was queued again when its
       * CQE was reaped - after the marker went, so the marker does not
       * vouch for it: another one must. */
      if (ms->refused[i] == refused) {
        if (seq > ms->posted_seq[i])
          ms->posted_seq[i] = seq;
        break;
      }
    }
  }
  /* The waiter is queued before the loop can dispatch an ack: both happen
   * on this thread, and nothing in between suspends. */
  while (lanes_pending(me, snap)) {
    weft__waiter w;
    weft__waiter_init(&w);
    weft__spin_lock(&ms->flush_q.lock);
    weft__waitq_append(&ms->flush_q, &w);
    weft__spin_unlock(&ms->flush_q.lock);
    int r = weft__waiter_wait(&w, deadline);
    if (r < 0)
      return r;
  }
  return 0;
}

static int flush_shard(weft__shard *me, int64_t deadline)
{
  /* The shard's bookkeeping is touched by its thread only: keep the
   * coroutine here while it waits. */
  weft_task *t = weft__task_self();
  t->pinned_ops++;
  int r = flush_on(me, deadline);
  t->pinned_ops--;
  return r;
}

int weft_msg_flush(void)
{
  weft__shard *me;
  int r = receiver(&me);
  if (r < 0)
    return r;
  return flush_shard(me, WEFT_NO_DEADLINE);
}

/* Waits until `to` has taken everything that was in the shared lane of
 * plain threads when the flush began. */
static int flush_external_lane(weft__shard *to, int64_t deadline)
{
  unsigned src = (unsigned)to->rt->nshards;
  weft__lane *l = atomic_load_explicit(&to->msg->in[src], memory_order_acquire);
  if (!l)
    return 0;
  weft__spin_lock(&l->plock);
  uint32_t snap = l->ptail;
  weft__spin_unlock(&l->plock);
  weft__waitq *q = &to->msg->ext_flush_q;
  for (;;) {
    if ((int32_t)(atomic_load_explicit(&l->head, memory_order_acquire) - snap) >= 0)
      return 0;
    if (weft__lane_needs_bell(l)) {
      int r = ring_external_lane(to, l);
      if (r < 0)
        return r;
    }
    weft__waiter w;
    weft__waiter_init(&w);
    weft__spin_lock(&q->lock);
    weft__waitq_append(q, &w);
    weft__spin_unlock(&q->lock);
    /* Our half of the handshake with lane_drain (which stores head, then
     * looks at flush_req): either we see its head or it sees our request.
     * A bell down again means the drain began, or a producer's doorbell
     * was refused (it released us, or we see its bell here): look again,
     * and ring if nobody has. */
    atomic_store_explicit(&l->flush_req, 1, memory_order_seq_cst);
    if (((int32_t)(atomic_load_explicit(&l->head, memory_order_seq_cst) - snap) >= 0 ||
         !atomic_load_explicit(&l->bell, memory_order_seq_cst)) &&
        weft__waiter_withdraw(&w))
      continue;
    int r = weft__waiter_wait(&w, deadline);
    if (r < 0)
      return r;
  }
}

int weft_msg_flush_rt(weft_runtime *rt, int64_t deadline)
{
  weft__shard *self = weft__shard_self();
  if (!rt) {
    if (!self)
      return -EINVAL;
    rt = self->rt;
  }
  if (!rt->msg->supported)
    return -EOPNOTSUPP;
  if (self && self->rt == rt) {
    if (!weft__task_self())
      return -EPERM;
    return flush_shard(self, deadline);
  }
  /* A plain thread's direct messages were posted before their sends
   * returned; its batched ones wait in the shared lanes. */
  for (int i = 0; i < rt->nshards; i++) {
    int r = flush_external_lane(&rt->shards[i], deadline);
    if (r < 0)
      return r;
  }
  return 0;
}

/* ---- receiving -------------------------------------------------------------------- */

static int recv_on(weft__shard *sh, weft_msg *out, size_t max, unsigned flags, int64_t deadline,
                   bool wait)
{
  weft__rq *q = &sh->msg->q[flags & WEFT_MSG_HOT];
  size_t n = weft__msg_take(sh, q, out, max);
  if (n)
    return (int)n;
  /* Collect what the kernel has posted here (a ticketed message whose
   * sender has returned is there) before concluding there is nothing. */
  weft__shard_reap(sh);
  if ((n = weft__msg_take(sh, q, out, max)))
    return (int)n;
  if (!wait)
    return -EAGAIN;
  weft__waiter w;
  weft__waiter_init(&w);
  w.data = (uintptr_t)out;
  weft__spin_lock(&q->waiters.lock);
  weft__waitq_append(&q->waiters, &w);
  weft__spin_unlock(&q->waiters.lock);
  q->maybe_waiters = true;
  int r = weft__waiter_wait(&w, deadline);
  if (r < 0)
    return r;
  return 1 + (int)weft__msg_take(sh, q, out + 1, max - 1);
}

static int recv_common(weft_msg *out, size_t max, unsigned flags, int64_t deadline, bool wait)
{
  weft__shard *sh;
  int r = receiver(&sh);
  if (r < 0)
    return r;
  if (!out || !max || (flags & ~WEFT_MSG_HOT))
    return -EINVAL;
  if (max > INT32_MAX)
    max = INT32_MAX;
  weft_task *t = weft__task_self();
  t->pinned_ops++; /* the queue is this shard's: stay on it */
  r = recv_on(sh, out, max, flags, deadline, wait);
  t->pinned_ops--;
  return r;
}

int weft_msg_recv(weft_msg *m, int64_t deadline)
{
  int r = recv_common(m, 1, 0, deadline, true);
  return r < 0 ? r : 0;
}

int weft_msg_recv_hot(weft_msg *m, int64_t deadline)
{
  int r = recv_common(m, 1, WEFT_MSG_HOT, deadline, true);
  return r < 0 ? r : 0;
}

int weft_msg_recv_many(weft_msg *m, size_t max, unsigned flags, int64_t deadline)
{
  return recv_common(m, max, flags, deadline, true);
}

int weft_msg_try_recv(weft_msg *m, unsigned flags)
{
  int r = recv_common(m, 1, flags, WEFT_NO_DEADLINE, false);
  return r < 0 ? r : 0;
}

int weft_msg_hot_tag(weft_runtime *rt, uint16_t tag, bool hot)
{
  if (!rt)
    rt = weft_runtime_current();
  if (!rt)
    return -EINVAL;
  uint64_t bit = (uint64_t)1 << (tag & 63), old;
  if (hot) {
    old = atomic_fetch_or_explicit(&rt->msg->hot[tag >> 6], bit, memory_order_relaxed);
    if (!(old & bit))
      atomic_fetch_add_explicit(&rt->msg->nhot, 1, memory_order_relaxed);
  } else {
    old = atomic_fetch_and_explicit(&rt->msg->hot[tag >> 6], ~bit, memory_order_relaxed);
    if (old & bit)
      atomic_fetch_sub_explicit(&rt->msg->nhot, 1, memory_order_relaxed);
  }
  return 0;
}

/* ---- counters --------------------------------------------------------------------- */

int weft_counter_add_rt(weft_runtime *rt, int shard, uint16_t tag, uint32_t n)
{
  weft__shard *me, *to;
  int r = resolve(rt, shard, &me, &to);
  if (r < 0)
    return r;
  if (tag >= to->rt->msg->ncounters)
    return -EINVAL;
  if (!n)
    return 0;
  /* From outside: a taker that does not wait finds the sum once it is
   * added, before the shard is rung below; it may return, and the runtime
   * stop, while this call still reads the shard. The stop waits for it. */
  weft_runtime *trt = to->rt;
  bool outside = weft__outside_enter(trt, me);
  uint64_t before = atomic_fetch_add_explicit(&to->msg->counters[tag], n, memory_order_acq_rel);
  if (outside && weft__test_outside_pause)
    weft__test_outside_pause();
  /* Only the add that makes the counter non-zero rings - or the first one
   * after a doorbell that could not be sent at all. */
  atomic_bool *unrung = &to->msg->counter_unrung[tag];
  r = 0;
  if (before && !(atomic_load_explicit(unrung, memory_order_relaxed) &&
                  atomic_exchange_explicit(unrung, false, memory_order_acq_rel))) {
    if (me)
      weft__count(&me->stats.msg_doorbells_coalesced, 1);
  } else if (me) {
    weft__msg_bell(me, to, WEFT__BELL_COUNTER, tag);
  } else {
    r = weft__ring_post_msg(to->ring_fd, ud_bell(WEFT__BELL_COUNTER, tag), 0);
    if (r == 0 || weft__ring_wake_by_fd(to))
      r = 0;
    else
      atomic_store_explicit(unrung, true, memory_order_release);
  }
  weft__outside_leave(trt, outside);
  return r;
}

int weft_counter_add(int shard, uint16_t tag, uint32_t n)
{
  return weft_counter_add_rt(NULL, shard, tag, n);
}

/* Takes counter `tag` of sh, 0 if it is zero. */
static int64_t counter_take_now(weft__shard *sh, uint16_t tag)
{
  _Atomic uint64_t *c = &sh->msg->counters[tag];
  uint64_t v = atomic_exchange_explicit(c, 0, memory_order_acq_rel);
  if (v > (uint64_t)INT64_MAX) {
    /* Returned in parts: the rest stays for the next take. Nobody rings
     * for it (it was never zero for an adder), so a taker waiting meanwhile
     * is woken here - on sh's thread, as a doorbell would. */
    atomic_fetch_add_explicit(c, v - (uint64_t)INT64_MAX, memory_order_acq_rel);
    weft__msg_counter_rung(sh, tag);
    v = (uint64_t)INT64_MAX;
  }
  return (int64_t)v;
}

static int64_t counter_take_on(weft__shard *sh, uint16_t tag, int64_t deadline)
{
  weft__waitq *q = &sh->msg->counter_q[tag];
  for (;;) {
    int64_t v = counter_take_now(sh, tag);
    if (v)
      return v;
    /* An add after the take above rings a doorbell that is dispatched on
     * this thread after we suspend, so the waiter below sees it. */
    weft__waiter w;
    weft__waiter_init(&w);
    weft__spin_lock(&q->lock);
    weft__waitq_append(q, &w);
    weft__spin_unlock(&q->lock);
    int r = weft__waiter_wait(&w, deadline);
    if (r < 0)
      return r;
  }
}

int64_t weft_counter_take(uint16_t tag, int64_t deadline)
{
  weft__shard *sh;
  int r = receiver(&sh);
  if (r < 0)
    return r;
  if (tag >= sh->rt->msg->ncounters)
    return -EINVAL;
  weft_task *t = weft__task_self();
  t->pinned_ops++;
  int64_t v = counter_take_on(sh, tag, deadline);
  t->pinned_ops--;
  return v;
}

/* ---- setup ------------------------------------------------------------------------ */

/* 1: the kernel has IORING_OP_MSG_RING, -1: it has not, 0: not probed yet. */
static atomic_int probed;

static bool msg_ring_supported(void)
{
  if (atomic_load_explicit(&weft__msg_refused, memory_order_relaxed))
    return false;
  int v = atomic_load_explicit(&probed, memory_order_relaxed);
  if (v)
    return v > 0;
  int saved = errno;
  struct io_uring_probe *p = io_uring_get_probe();
  errno = saved;
  if (!p)
    return true; /* no ring to ask with: the shards' rings will tell */
  v = io_uring_opcode_supported(p, IORING_OP_MSG_RING) ? 1 : -1;
  io_uring_free_probe(p);
  atomic_store_explicit(&probed, v, memory_order_relaxed);
  return v > 0;
}

static void shard_term(weft__msg_shard *ms, int nshards)
{
  if (!ms)
    return;
  free(ms->q[0].v);
  free(ms->q[1].v);
  free(ms->stalled);
  if (ms->in)
    for (int i = 0; i <= nshards; i++)
      free(atomic_load_explicit(&ms->in[i], memory_order_relaxed));
  free(ms->in);
  free(ms->counters);
  free(ms->counter_q);
  free(ms->counter_unrung);
  free(ms->direct_seq);
  free(ms->posted_seq);
  free(ms->backlog);
  free(ms->backlog_for);
  free(ms);
}

static int shard_init(weft__msg_shard **out, int nshards, unsigned ncounters)
{
  /* Aligned to a line: its receive queues' `full` flags have lines of
   * their own, read by every direct sender. */
  weft__msg_shard *ms = weft__calloc_aligned(1, sizeof(*ms), _Alignof(weft__msg_shard));
  if (!ms)
    return -ENOMEM;
  *out = ms;
  weft__waitq_init(&ms->flush_q);
  weft__waitq_init(&ms->ext_flush_q);
  if (weft__rq_init(&ms->q[0]) < 0 || weft__rq_init(&ms->q[1]) < 0)
    return -ENOMEM;
  ms->in = weft__calloc((size_t)nshards + 1, sizeof(*ms->in));
  ms->counters = weft__calloc(ncounters, sizeof(*ms->counters));
  ms->counter_q = weft__calloc(ncounters, sizeof(*ms->counter_q));
  ms->counter_unrung = weft__calloc(ncounters, sizeof(*ms->counter_unrung));
  ms->direct_seq = weft__calloc((size_t)nshards, sizeof(uint64_t));
  ms->posted_seq = weft__calloc(2 * (size_t)nshards, sizeof(uint64_t));
  ms->refused = ms->posted_seq ? ms->posted_seq + nshards : NULL;
  ms->stalled = weft__calloc((size_t)nshards + 1, 1);
  ms->backlog_for = weft__calloc((size_t)nshards, sizeof(*ms->backlog_for));
  if (!ms->in || !ms->counters || !ms->counter_q || !ms->counter_unrung || !ms->direct_seq ||
      !ms->posted_seq || !ms->stalled || !ms->backlog_for)
    return -ENOMEM;
  for (unsigned i = 0; i < ncounters; i++)
    weft__waitq_init(&ms->counter_q[i]);
  return 0;
}

int weft__msg_init(weft_runtime *rt)
{
  weft__msg_rt *mr = weft__calloc(1, sizeof(*mr));
  if (!mr)
    return -ENOMEM;
  rt->msg = mr;
  mr->supported = msg_ring_supported();
  mr->lane_capacity = rt->cfg.msg_lane_capacity;
  mr->ncounters = rt->cfg.msg_counters;
  mr->queue_limit = rt->cfg.msg_queue_limit;
  for (int i = 0; i < rt->nshards; i++)
    if (shard_init(&rt->shards[i].msg, rt->nshards, mr->ncounters) < 0)
      return -ENOMEM; /* the caller frees through weft__msg_term */
  return 0;
}

void weft__msg_term(weft_runtime *rt)
{
  if (!rt->msg)
    return;
  for (int i = 0; i < rt->nshards; i++) {
    shard_term(rt->shards[i].msg, rt->nshards);
    rt->shards[i].msg = NULL;
  }
  free(rt->msg);
  rt->msg = NULL;
}
