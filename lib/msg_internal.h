/* SPDX-License-Identifier: MIT */
/*
 * The message lanes' shared parts (weft/msg.h): lib/msg_lane.c moves
 * messages (receive queues, lanes, doorbells, completions), lib/msg.c is the
 * API on top (sending, flush, receiving, counters, setup).
 *
 * Wire format. A direct message is one IORING_OP_MSG_RING whose target CQE
 * carries everything: user_data = WEFT__UD_MSG | tag << 3 | sender << 19 and
 * res = the value (msg_ring's `len` becomes cqe->res, its `data` the
 * cqe->user_data). Doorbells are msg_rings with user_data WEFT__UD_MSG_BELL
 * | kind << 3 | payload << 5. Shards send them through their own ring with
 * IOSQE_CQE_SKIP_SUCCESS, so a success costs the sender no CQE; a failure
 * comes back tagged WEFT__UD_MSG_FAILED / WEFT__UD_BELL_FAILED with enough
 * bits to send the same thing again (a lost doorbell would wedge its lane).
 *
 * Lanes. lanes[target][source] is a single-producer ring of weft_msg made by
 * the source on first use (plain threads share one extra lane per target,
 * under a lock). The doorbell handshake is Dekker-style on two words, with
 * sequentially consistent stores and loads:
 *   producer: publish tail; if bell == 0 and xchg(bell, 1) == 0: ring
 *   consumer: bell = 0; take everything up to tail
 * Either the producer sees bell == 0 (and rings) or the consumer sees its
 * tail, so nothing waits in a lane without a doorbell on its way, and a
 * burst of batches costs one doorbell. Flush acknowledgements use the same
 * shape on (head, flush_req).
 *
 * Receive queues are owned by their shard: only its thread pushes (CQE
 * dispatch) and pops (its coroutines, which are kept on the shard for the
 * call with task->pinned_ops). A waiting receiver is handed its message
 * directly, so a queue with waiters is always empty and order is kept.
 *
 * Backpressure. A drain moves a lane's messages into a receive queue only
 * while the queue holds fewer than msg_queue_limit; the rest stay in the
 * lane (its head does not pass them) and the lane is marked stalled. Its
 * producers then find it full (-EAGAIN) - the bound reaches the sender - and
 * the receive that brings the queue down to half the limit drains the
 * stalled lanes again. A flusher's acknowledgement comes with every drain
 * that moved the head; it waits on until the head passes its messages.
 * Direct messages are completions already posted, so they are always
 * queued; the bound reaches their senders through the queue's `full` flag,
 * which refuses new direct sends (-EAGAIN) from the drain or delivery that
 * brings the queue to the limit until the receive that takes it down to half
 * (the same hysteresis as the lanes'). The bound is soft by what is already
 * on its way: direct messages queued in sending shards' SQs, and posted
 * completions not yet reaped.
 */
#ifndef WEFT_LIB_MSG_INTERNAL_H
#define WEFT_LIB_MSG_INTERNAL_H

#include "op.h"

typedef struct weft__msg_shard weft__msg_shard;
typedef struct weft__msg_rt weft__msg_rt;

/* Doorbell kinds (bits 3-4 of a WEFT__UD_MSG_BELL user_data). */
enum {
  WEFT__BELL_LANE = 0,    /* payload: the lane's source; the target drains it */
  WEFT__BELL_COUNTER = 1, /* payload: the counter tag that became non-zero */
  WEFT__BELL_ACK = 2,     /* a target drained a lane whose producer flushes */
  WEFT__BELL_MARK = 3,    /* a flush marker: nothing to do at the target */
};

#define WEFT__MSG_HOT_WORDS (65536 / 64)
#define WEFT__RQ_INITIAL 256u

typedef struct weft__lane {
  /* The producer's line (external producers hold plock). */
  _Alignas(WEFT__CACHELINE) uint32_t ptail; /* next slot to write */
  uint32_t head_cache;                      /* last head seen */
  weft__spin plock;
  /* Published by the producer. */
  _Alignas(WEFT__CACHELINE) _Atomic uint32_t tail;
  /* The consumer's line. */
  _Alignas(WEFT__CACHELINE) _Atomic uint32_t head;
  /* Handshake words, written once per doorbell / flush. */
  _Alignas(WEFT__CACHELINE) _Atomic uint32_t bell; /* a doorbell is on its way */
  _Atomic uint32_t flush_req;               /* the producer waits for an ack */
  uint32_t mask;
  weft_msg slots[];
} weft__lane;

/* A receive queue: a growable ring, owner-only but for `full`. */
typedef struct weft__rq {
  weft_msg *v;
  uint32_t head, tail, mask;
  bool maybe_waiters; /* waiters may be queued (never false while one is) */
  weft__waitq waiters;
  /* Read by direct senders, written by the owner only when it changes: set
   * when the queue reaches msg_queue_limit, cleared when receivers have
   * taken it down to half. */
  _Alignas(WEFT__CACHELINE) atomic_bool full;
} weft__rq;

struct weft__msg_shard {
  weft__rq q[2];                    /* normal, hot */
  uint8_t *stalled;                 /* [nshards + 1] lanes left holding messages
                                       for want of room in the queues */
  unsigned nstalled;
  _Atomic(weft__lane *) *in;        /* [nshards + 1] lanes into this shard by source;
                                       [nshards] is the plain threads' lane */
  _Atomic uint64_t *counters;       /* [ncounters] */
  /* [ncounters]: the doorbell of the add that made the counter non-zero
   * could be neither sent nor replaced by the eventfd; the next add rings
   * instead (it finds the counter non-zero, which would not). */
  atomic_bool *counter_unrung;
  weft__waitq *counter_q;           /* [ncounters] takers waiting for a doorbell */
  /* As a sender (owner only). */
  uint64_t *direct_seq;             /* [nshards] direct messages sent to each target */
  uint64_t *posted_seq;             /* [nshards] of them known posted (a flush marker) */
  uint64_t *refused;                /* [nshards] of them the kernel refused and that were
                                       queued again (in posted_seq's block) */
  /* Direct messages waiting for an SQE: the SQ stayed full after a submit
   * (the kernel took nothing more). Sent in order, before any later direct
   * message to the same target, from the loop (weft__msg_send_backlog). A
   * ring of (target << 48 | tag << 32 | val). */
  uint64_t *backlog;
  uint32_t backlog_head, backlog_tail, backlog_cap;
  uint32_t *backlog_for;            /* [nshards] waiting per target */
  weft__waitq flush_q;              /* flushers waiting for lane acks */
  /* As a target: plain threads (and coroutines of other runtimes) waiting
   * in weft_msg_flush_rt for this shard to drain the shared lane. */
  weft__waitq ext_flush_q;
};

struct weft__msg_rt {
  bool supported;                   /* the kernel has IORING_OP_MSG_RING */
  unsigned lane_capacity, ncounters;
  uint32_t queue_limit;             /* cfg.msg_queue_limit */
  atomic_int nhot;                  /* tags marked hot: none lets lanes drain in bulk */
  _Atomic uint64_t hot[WEFT__MSG_HOT_WORDS]; /* hot tags, a bit each */
};

/* ---- encodings ------------------------------------------------------------------- */

static inline uint64_t ud_msg(unsigned sender, uint16_t tag)
{
  return WEFT__UD_MSG | (uint64_t)tag << 3 | (uint64_t)sender << 19;
}

static inline uint64_t ud_bell(unsigned kind, unsigned payload)
{
  return WEFT__UD_MSG_BELL | (uint64_t)kind << 3 | (uint64_t)payload << 5;
}

/* Our own SQE's user_data: what to send again if the kernel refuses it. */
static inline uint64_t ud_msg_failed(int target, uint16_t tag, uint32_t val)
{
  return WEFT__UD_MSG_FAILED | (uint64_t)target << 3 | (uint64_t)tag << 11 | (uint64_t)val << 27;
}

static inline uint64_t ud_bell_failed(int target, unsigned kind, unsigned payload)
{
  return WEFT__UD_BELL_FAILED | (uint64_t)kind << 3 | (uint64_t)payload << 5 |
         (uint64_t)target << 22;
}

/* The receive queue of `sh` that messages tagged `tag` go to. */
static inline weft__rq *weft__msg_queue_for(weft__shard *sh, uint16_t tag)
{
  uint64_t word = atomic_load_explicit(&sh->rt->msg->hot[tag >> 6], memory_order_relaxed);
  return &sh->msg->q[(word >> (tag & 63)) & 1];
}

/* ---- lib/msg_lane.c ------------------------------------------------------------ */

int weft__rq_init(weft__rq *q);
/* Pops up to max messages of sh's queue q for a receiver (sh's thread), then
 * drains the lanes a full queue had stalled, if it has room again. */
size_t weft__msg_take(weft__shard *sh, weft__rq *q, weft_msg *out, size_t max);
/* A lane of `capacity` slots (a power of two), or NULL. */
weft__lane *weft__lane_new(unsigned capacity);
/* Appends what fits of msgs[0..n) (the producer); returns how many. */
uint32_t weft__lane_push(weft__lane *l, const weft_msg *msgs, uint32_t n);
/* After a push: true if this producer must ring the doorbell. */
bool weft__lane_needs_bell(weft__lane *l);
/* Queues a direct message on me's ring - or, when the SQ has no room even
 * after a submit (or earlier ones to `to` wait), on me's backlog, in order;
 * 0, or -ENOMEM when neither can take it. */
int weft__msg_direct(weft__shard *me, weft__shard *to, uint16_t tag, uint32_t val);
/* Rings `to` from me's ring (submitted at once). */
void weft__msg_bell(weft__shard *me, weft__shard *to, unsigned kind, unsigned payload);
/* Counter `tag` of sh holds something for a taker: wakes one (sh's thread). */
void weft__msg_counter_rung(weft__shard *sh, unsigned tag);

#endif
