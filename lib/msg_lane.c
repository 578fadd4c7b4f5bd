/* SPDX-License-Identifier: MIT */
/*
 * Moving messages (see msg_internal.h for the design): the receive queues,
 * the lanes and their doorbell handshake, sending direct messages and
 * doorbells from a shard's ring, and the completions that carry them.
 */
#include "msg_internal.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- receive queues -------------------------------------------------------------- */

int weft__rq_init(weft__rq *q)
{
  q->v = weft__malloc(WEFT__RQ_INITIAL * sizeof(weft_msg));
  if (!q->v)
    return -ENOMEM;
  q->head = q->tail = 0;
  q->mask = WEFT__RQ_INITIAL - 1;
  q->maybe_waiters = false;
  weft__waitq_init(&q->waiters);
  atomic_init(&q->full, false);
  return 0;
}

/* Doubles q; false, leaving it as it was, when there is no memory for it. */
static bool rq_grow(weft__rq *q)
{
  uint32_t cap = q->mask + 1, n = q->tail - q->head;
  if (cap > UINT32_MAX / 2 || weft__fault_hit(WEFT__FAULT_RECV_QUEUE))
    return false;
  weft_msg *v = weft__malloc_plain((size_t)cap * 2 * sizeof(weft_msg));
  if (!v)
    return false;
  for (uint32_t i = 0; i < n; i++)
    v[i] = q->v[(q->head + i) & q->mask];
  free(q->v);
  q->v = v;
  q->head = 0;
  q->tail = n;
  q->mask = cap * 2 - 1;
  return true;
}

static uint32_t rq_len(const weft__rq *q)
{
  return q->tail - q->head;
}

/* Makes room for n more messages in q as far as memory allows; returns how
 * many of them fit (n, or fewer when q could not grow enough). */
static uint32_t rq_reserve(weft__rq *q, uint32_t n)
{
  while (q->mask + 1 - rq_len(q) < n && rq_grow(q))
    ;
  uint32_t room = q->mask + 1 - rq_len(q);
  return room < n ? room : n;
}

/* Pops up to max messages of q into out; returns how many. */
static size_t rq_pop(weft__rq *q, weft_msg *out, size_t max)
{
  size_t n = 0;
  while (n < max && q->head != q->tail)
    out[n++] = q->v[q->head++ & q->mask];
  return n;
}

/* Hands m to the first receiver still waiting on q; false if there is none. */
static bool rq_hand_off(weft__rq *q, const weft_msg *m)
{
  weft__waiter *w;
  weft__spin_lock(&q->waiters.lock);
  while ((w = weft__waitq_pop(&q->waiters)) && !weft__waiter_claim(w))
    ;
  q->maybe_waiters = q->waiters.head != NULL;
  weft__spin_unlock(&q->waiters.lock);
  if (!w)
    return false;
  *(weft_msg *)w->data = *m;
  weft__waiter_complete(w, 0);
  return true;
}

/* After messages went into q: refuse direct senders once it is at the limit. */
static void rq_note_growth(weft__shard *sh, weft__rq *q)
{
  if (rq_len(q) >= sh->rt->msg->queue_limit && !atomic_load_explicit(&q->full, memory_order_relaxed))
    atomic_store_explicit(&q->full, true, memory_order_relaxed);
}

/* Queues a message that arrived at sh (sh's thread), or hands it to a
 * waiting receiver; false, leaving it where it is, when its queue already
 * holds `limit` messages or is full and cannot grow. */
static bool deliver_bounded(weft__shard *sh, const weft_msg *m, uint32_t limit)
{
  weft__rq *q = weft__msg_queue_for(sh, m->tag);
  if (q->maybe_waiters && rq_hand_off(q, m))
    return true;
  if (rq_len(q) >= limit || !rq_reserve(q, 1))
    return false;
  q->v[q->tail++ & q->mask] = *m;
  rq_note_growth(sh, q);
  return true;
}

/* deliver_bounded() without a bound: a direct message is a completion the
 * kernel already posted, so it is queued whatever the queue holds. It cannot
 * be refused either: without memory to store it, the process ends rather
 * than lose it (msg.h says so). */
static void deliver(weft__shard *sh, const weft_msg *m)
{
  if (deliver_bounded(sh, m, UINT32_MAX))
    return;
  fprintf(stderr, "weft: out of memory for a receive queue of %u messages\n",
          weft__msg_queue_for(sh, m->tag)->mask + 1);
  abort();
}

/* ---- lanes ----------------------------------------------------------------------- */

weft__lane *weft__lane_new(unsigned capacity)
{
  if (weft__fault_hit(WEFT__FAULT_MALLOC))
    return NULL;
  size_t size = sizeof(weft__lane) + (size_t)capacity * sizeof(weft_msg);
  size = (size + WEFT__CACHELINE - 1) & ~(size_t)(WEFT__CACHELINE - 1);
  void *p = NULL;
  int saved = errno; /* glibc may set it; weft calls leave it alone */
  int r = posix_memalign(&p, WEFT__CACHELINE, size);
  errno = saved;
  if (r != 0)
    return NULL;
  weft__lane *l = p;
  memset(l, 0, sizeof(*l));
  l->plock = (weft__spin)WEFT__SPIN_INIT;
  l->mask = capacity - 1;
  return l;
}

uint32_t weft__lane_push(weft__lane *l, const weft_msg *msgs, uint32_t n)
{
  uint32_t cap = l->mask + 1, t = l->ptail;
  if (cap - (t - l->head_cache) < n)
    l->head_cache = atomic_load_explicit(&l->head, memory_order_acquire);
  uint32_t room = cap - (t - l->head_cache);
  uint32_t k = n < room ? n : room;
  uint32_t at = t & l->mask, first = cap - at < k ? cap - at : k;
  memcpy(&l->slots[at], msgs, first * sizeof(weft_msg));
  memcpy(&l->slots[0], msgs + first, (k - first) * sizeof(weft_msg));
  l->ptail = t + k;
  /* seq_cst: the store and weft__lane_needs_bell's load are one side of the
   * doorbell handshake (a Dekker pair with lane_drain). */
  atomic_store_explicit(&l->tail, t + k, memory_order_seq_cst);
  return k;
}

bool weft__lane_needs_bell(weft__lane *l)
{
  return !atomic_load_explicit(&l->bell, memory_order_seq_cst) &&
         !atomic_exchange_explicit(&l->bell, 1, memory_order_acq_rel);
}

/* Records that lane `src` of sh still holds messages its queues had no room
 * for; weft__msg_take comes back to it. */
static void lane_stall(weft__shard *sh, unsigned src)
{
  weft__msg_shard *ms = sh->msg;
  if (ms->stalled[src])
    return;
  ms->stalled[src] = 1;
  ms->nstalled++;
  weft__count(&sh->stats.msg_queue_full, 1);
}

/* A lane doorbell arrived at sh, or its receivers made room: take what lane
 * `src` holds, as far as the receive queues have room below the limit and
 * memory lasts to grow them. What is left stays in the lane, as when the
 * limit is reached: running out of memory pushes back on the senders. */
static void lane_drain(weft__shard *sh, unsigned src)
{
  weft_runtime *rt = sh->rt;
  weft__lane *l = atomic_load_explicit(&sh->msg->in[src], memory_order_acquire);
  if (!l)
    return;
  atomic_store_explicit(&l->bell, 0, memory_order_seq_cst);
  uint32_t h = atomic_load_explicit(&l->head, memory_order_relaxed);
  uint32_t t = atomic_load_explicit(&l->tail, memory_order_seq_cst);
  uint32_t limit = rt->msg->queue_limit;
  uint16_t sender = src == (unsigned)rt->nshards ? WEFT_MSG_EXTERNAL : (uint16_t)src;
  weft__rq *q = &sh->msg->q[0];
  uint32_t end = t;
  if (!q->maybe_waiters && !atomic_load_explicit(&rt->msg->nhot, memory_order_relaxed)) {
    /* The common case - no hot tag, nobody waiting - copied in bulk. */
    uint32_t room = rq_len(q) < limit ? limit - rq_len(q) : 0;
    room = rq_reserve(q, t - h < room ? t - h : room);
    end = h + room;
    for (uint32_t i = h; i != end; i++) {
      weft_msg *m = &q->v[q->tail++ & q->mask];
      *m = l->slots[i & l->mask];
      m->sender = sender;
    }
    rq_note_growth(sh, q);
  } else {
    for (uint32_t i = h; i != t; i++) {
      weft_msg m = l->slots[i & l->mask];
      m.sender = sender;
      if (!deliver_bounded(sh, &m, limit)) {
        end = i;
        break;
      }
    }
  }
  if (end != t) {
    /* Coming back is on us now: spare the producers their doorbells. */
    atomic_store_explicit(&l->bell, 1, memory_order_seq_cst);
    lane_stall(sh, src);
  }
  if (end == h)
    return; /* nothing moved: no flusher can be done */
  weft__count(&sh->stats.msgs_received, end - h);
  atomic_store_explicit(&l->head, end, memory_order_seq_cst);
  /* The other half of the flushers' handshake: they raise flush_req, then
   * look at head. A shard producer is told by a doorbell; the shared lane's
   * flushers wait here, on this shard. A flusher whose messages are not all
   * taken yet looks, raises flush_req again and waits for the next drain. */
  if (atomic_load_explicit(&l->flush_req, memory_order_seq_cst) &&
      atomic_exchange_explicit(&l->flush_req, 0, memory_order_acq_rel)) {
    if (src < (unsigned)rt->nshards)
      weft__msg_bell(sh, &rt->shards[src], WEFT__BELL_ACK, 0);
    else
      weft__waitq_release(&sh->msg->ext_flush_q, INT64_MAX, 0);
  }
}

size_t weft__msg_take(weft__shard *sh, weft__rq *q, weft_msg *out, size_t max)
{
  size_t n = rq_pop(q, out, max);
  /* Direct senders and the lanes left full come back once the queue is
   * half empty, so that a receiver taking one message at a time does not
   * let them in one by one. */
  if (!n || rq_len(q) > sh->rt->msg->queue_limit / 2)
    return n;
  if (atomic_load_explicit(&q->full, memory_order_relaxed))
    atomic_store_explicit(&q->full, false, memory_order_relaxed);
  weft__msg_shard *ms = sh->msg;
  unsigned nsrc = (unsigned)sh->rt->nshards + 1;
  for (unsigned src = 0; src < nsrc && ms->nstalled; src++) {
    if (!ms->stalled[src])
      continue;
    ms->stalled[src] = 0;
    ms->nstalled--;
    lane_drain(sh, src); /* stalls it again if it still does not fit */
  }
  return n;
}

/* Counter `tag` of sh holds something for a taker: wake one. */
void weft__msg_counter_rung(weft__shard *sh, unsigned tag)
{
  weft__waitq_release(&sh->msg->counter_q[tag], 1, 0);
}

void weft__msg_catch_up(weft__shard *sh)
{
  if (!sh->msg)
    return;
  /* Every lane holding messages (a doorbell that could not be sent, from a
   * plain thread or a shard, leaves one so). */
  int n = sh->rt->nshards;
  for (unsigned src = 0; src <= (unsigned)n; src++) {
    weft__lane *l = atomic_load_explicit(&sh->msg->in[src], memory_order_acquire);
    if (l && atomic_load_explicit(&l->tail, memory_order_acquire) !=
                 atomic_load_explicit(&l->head, memory_order_relaxed))
      lane_drain(sh, src);
  }
  /* Every non-zero counter wakes a taker, if it has one. The queues are
   * looked at under their locks only: a canceller on any thread takes a
   * waiter off them. Rare, so a scan of every counter is fine. */
  for (unsigned tag = 0; tag < sh->rt->msg->ncounters; tag++)
    if (atomic_load_explicit(&sh->msg->counters[tag], memory_order_acquire))
      weft__msg_counter_rung(sh, tag);
  /* A flush's acknowledgement that could not be sent: flushers of this
   * shard look at their lanes again (and ask again if still needed). */
  weft__waitq_release(&sh->msg->flush_q, INT64_MAX, 0);
}

/* ---- sending from a shard of the same runtime ----------------------------------------- */

/* A refusal that says the target ring is gone (its shard left): nobody
 * would take what is sent again. A stopping runtime is no reason: its
 * cancelled tasks still drain their queues (weft/msg.h), and a shard that
 * leaves drops whatever it had yet to send. */
static bool give_up_resend(int res)
{
  return res == -EOWNERDEAD || res == -EBADFD || res == -EBADF;
}

static void prep_direct(weft__shard *me, struct io_uring_sqe *sqe, weft__shard *to, uint16_t tag,
                        uint32_t val)
{
  weft__ring_prep_msg(sqe, to->ring_fd, val, ud_msg((unsigned)me->id, tag),
                      ud_msg_failed(to->id, tag, val));
}

static void prep_bell(struct io_uring_sqe *sqe, weft__shard *to, unsigned kind, unsigned payload)
{
  weft__ring_prep_msg(sqe, to->ring_fd, 0, ud_bell(kind, payload),
                      ud_bell_failed(to->id, kind, payload));
}

/* Backlog entries: bit 63 set for a doorbell, the target in bits 48-62;
 * then a message's tag (bits 32-47) and value, or a doorbell's kind (bits
 * 32-33) and payload. */
#define BACKLOG_BELL ((uint64_t)1 << 63)

static uint64_t backlog_message(int to, uint16_t tag, uint32_t val)
{
  return (uint64_t)to << 48 | (uint64_t)tag << 32 | val;
}

static uint64_t backlog_bell(int to, unsigned kind, unsigned payload)
{
  return BACKLOG_BELL | (uint64_t)to << 48 | (uint64_t)kind << 32 | payload;
}

/* Appends entry e to me's backlog; false without memory for it. */
static bool backlog_push(weft__msg_shard *ms, uint64_t e)
{
  uint32_t n = ms->backlog_tail - ms->backlog_head, old = ms->backlog_cap;
  if (n == old) {
    /* Powers of two: the indices wrap round with the counters. */
    uint32_t cap = old ? old * 2 : 16;
    if (cap <= old || weft__fault_hit(WEFT__FAULT_BACKLOG))
      return false;
    uint64_t *v = weft__malloc_plain((size_t)cap * sizeof(*v));
    if (!v)
      return false;
    for (uint32_t i = 0; i < n; i++)
      v[i] = ms->backlog[(ms->backlog_head + i) % old];
    free(ms->backlog);
    ms->backlog = v;
    ms->backlog_cap = cap;
    ms->backlog_head = 0;
    ms->backlog_tail = n;
  }
  ms->backlog[ms->backlog_tail++ % ms->backlog_cap] = e;
  if (!(e & BACKLOG_BELL))
    ms->backlog_for[(e >> 48) & 0x7fff]++; /* direct messages keep their order */
  return true;
}

int weft__msg_direct(weft__shard *me, weft__shard *to, uint16_t tag, uint32_t val)
{
  weft__msg_shard *ms = me->msg;
  /* Behind messages to `to` that still wait: never ahead of them. No
   * synchronous post either: it would overtake those still in the SQ. */
  struct io_uring_sqe *sqe = ms->backlog_for[to->id] ? NULL : weft__ring_sqe(me);
  if (sqe)
    prep_direct(me, sqe, to, tag, val);
  else if (!backlog_push(ms, backlog_message(to->id, tag, val)))
    return -ENOMEM;
  ms->direct_seq[to->id]++;
  return 0;
}

bool weft__msg_backlogged(weft__shard *sh)
{
  return sh->msg && sh->msg->backlog_head != sh->msg->backlog_tail;
}

bool weft__msg_send_backlog(weft__shard *sh)
{
  weft__msg_shard *ms = sh->msg;
  while (ms->backlog_head != ms->backlog_tail) {
    struct io_uring_sqe *sqe = weft__ring_sqe(sh);
    if (!sqe)
      return true;
    uint64_t e = ms->backlog[ms->backlog_head++ % ms->backlog_cap];
    int to = (int)((e >> 48) & 0x7fff);
    weft__shard *target = &sh->rt->shards[to];
    if (e & BACKLOG_BELL) {
      prep_bell(sqe, target, (unsigned)(e >> 32) & 3, (unsigned)e & 0x1ffff);
    } else {
      prep_direct(sh, sqe, target, (uint16_t)(e >> 32), (uint32_t)e);
      ms->backlog_for[to]--;
    }
  }
  return false;
}

/* Rings `to` from me's ring. Submitted now, not at the next flush: the
 * sender may go on computing (or producing into the lane) for long, and the
 * target can start draining meanwhile - the pipelining is what makes a lane
 * fast; the lane's `bell` already tells other producers that it is coming. */
void weft__msg_bell(weft__shard *me, weft__shard *to, unsigned kind, unsigned payload)
{
  weft__count(&me->stats.msg_doorbells, 1);
  struct io_uring_sqe *sqe = weft__ring_sqe(me);
  if (sqe) {
    prep_bell(sqe, to, kind, payload);
    me->sq_pending = 0;
    io_uring_submit(&me->ring);
    weft__count(&me->stats.enters, 1);
    return;
  }
  if (weft__ring_post_msg(to->ring_fd, ud_bell(kind, payload), 0) == 0)
    return;
  weft__count(&me->stats.msg_failed, 1);
  /* No SQE and no post: the target's eventfd makes it catch up on what
   * any doorbell would have told it (weft__msg_catch_up). Dropped, a lane's
   * doorbell could leave a full lane unrung for good, a counter's takers or
   * a flusher asleep. */
  if (weft__ring_wake_by_fd(to))
    return;
  /* No way at all now: the loop rings it from the backlog, as SQEs come. */
  if (backlog_push(me->msg, backlog_bell(to->id, kind, payload)))
    return;
  if (kind == WEFT__BELL_LANE) {
    /* Let the next push ring instead of leaving the lane marked as rung. */
    weft__lane *l = atomic_load_explicit(&to->msg->in[payload], memory_order_relaxed);
    atomic_store_explicit(&l->bell, 0, memory_order_release);
  } else if (kind == WEFT__BELL_COUNTER) {
    /* The next add rings (it finds the counter non-zero: it would not). */
    atomic_store_explicit(&to->msg->counter_unrung[payload], true, memory_order_release);
  }
}

/* A direct message the kernel refused, sent again. Its sender was told it
 * went, so it must not be dropped: queued behind the ones sent meanwhile,
 * or, with no SQE and no memory to queue it, posted at once (which needs
 * none of ours); failing that too, the process ends rather than lose it,
 * as deliver() does (msg.h says so). */
static void resend_direct(weft__shard *sh, weft__shard *to, uint16_t tag, uint32_t val)
{
  if (weft__msg_direct(sh, to, tag, val) == 0) {
    sh->msg->refused[to->id]++; /* a flush under way needs another marker */
    return;
  }
  /* Posted when this returns: a flush under way needs no marker for it. */
  int r = weft__ring_post_msg(to->ring_fd, ud_msg((unsigned)sh->id, tag), val);
  if (r == 0)
    return;
  fprintf(stderr, "weft: a direct message to shard %d, refused by the kernel, could be neither "
                  "queued again (out of memory) nor posted (%s)\n",
          to->id, weft_strerror(r));
  abort();
}

/* ---- completions ------------------------------------------------------------------ */

void weft__msg_cqe(weft__shard *sh, uint64_t ud, int res)
{
  weft_runtime *rt = sh->rt;
  switch (ud & WEFT__UD_TAG_MASK) {
  case WEFT__UD_MSG: {
    weft_msg m = {.sender = (uint16_t)(ud >> 19), .tag = (uint16_t)(ud >> 3), .val = (uint32_t)res};
    deliver(sh, &m);
    weft__count(&sh->stats.msgs_received, 1);
    return;
  }
  case WEFT__UD_MSG_BELL: {
    unsigned kind = (ud >> 3) & 3, payload = (unsigned)(ud >> 5) & 0x1ffff;
    if (kind == WEFT__BELL_LANE) {
      if (payload <= (unsigned)rt->nshards)
        lane_drain(sh, payload);
    } else if (kind == WEFT__BELL_COUNTER) {
      if (payload < rt->msg->ncounters)
        weft__msg_counter_rung(sh, payload);
    } else if (kind == WEFT__BELL_ACK) {
      weft__waitq_release(&sh->msg->flush_q, INT64_MAX, 0);
    }
    return; /* WEFT__BELL_MARK: a flush marker, nothing to do */
  }
  case WEFT__UD_MSG_FAILED: {
    /* The kernel refused a direct message of ours: send it again, unless
     * the target is gone. */
    weft__count(&sh->stats.msg_failed, 1);
    weft__shard *to = &rt->shards[(ud >> 3) & 0xff];
    if (!give_up_resend(res))
      resend_direct(sh, to, (uint16_t)(ud >> 11), (uint32_t)(ud >> 27));
    return;
  }
  case WEFT__UD_BELL_FAILED: {
    weft__count(&sh->stats.msg_failed, 1);
    unsigned kind = (ud >> 3) & 3, payload = (unsigned)(ud >> 5) & 0x1ffff;
    weft__shard *to = &rt->shards[(ud >> 22) & 0xff];
    if (!give_up_resend(res))
      weft__msg_bell(sh, to, kind, payload);
    return;
  }
  default:
    return;
  }
}

