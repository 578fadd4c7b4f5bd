/* SPDX-License-Identifier: MIT */
/*
 * Channel internals shared by chan.c (the channel and its single
 * operations) and select.c.
 *
 * A channel is a ring buffer and two queues of case nodes - the senders and
 * the receivers waiting on it - under one spinlock. A waiting operation
 * (a send, a receive, or a whole select) has ONE weft__waiter on its stack
 * and one node per channel operation it waits for, each node on that
 * channel's queue. A peer that finds a node claims the node's waiter
 * (weft__waiter_claim): on success it transfers the element directly to or
 * from the node's buffer, records the node's case index in w->data, unlinks
 * the node and - after dropping the channel lock - completes the waiter with
 * the result. When the claim fails (the waiter's select fired elsewhere, timed
 * out or was cancelled) the node is stale: the peer unlinks it and looks at
 * the next one. Deadlines and cancellation race for the same claim inside
 * weft__waiter_wait, so each wait has exactly one outcome.
 *
 * Node memory lives on the waiting side's stack. Nodes are linked and
 * unlinked only under their channel's lock, so the waiting side, once woken,
 * takes each lock in turn to unlink what is still queued; a peer that may be
 * looking at a node holds that same lock.
 */
#ifndef WEFT_LIB_CHAN_INTERNAL_H
#define WEFT_LIB_CHAN_INTERNAL_H

#include "core.h"

#include <errno.h>
#include <string.h>

typedef struct weft__chan_node weft__chan_node;

struct weft__chan_node {
  weft__chan_node *next, *prev; /* links in a channel queue (channel lock) */
  weft__waiter *w;              /* the waiting operation */
  void *elem;                   /* send: source; recv: destination (may be NULL) */
  unsigned index;               /* case index, stored in w->data on a match */
  bool queued;                  /* on a queue (channel lock) */
};

typedef struct weft__chan_queue {
  weft__chan_node *head, *tail;
} weft__chan_queue;

struct weft_chan {
  weft__spin lock;
  atomic_bool closed;           /* set under lock; read unlocked by is_closed */
  size_t elem_size;
  size_t cap;
  size_t head;                  /* ring index of the oldest element */
  size_t count;                 /* elements buffered */
  weft__chan_queue sendq;       /* waiting senders (only while full / rendezvous) */
  weft__chan_queue recvq;       /* waiting receivers (only while empty) */
  _Atomic long refs;
  unsigned char *buf;           /* cap * elem_size bytes, after the struct */
};

/* Inline, all of it: every send and receive runs through these. */

/* ---- queues of case nodes (channel lock held) -------------------------------------- */

static inline void weft__chan_enqueue(weft__chan_queue *q, weft__chan_node *n)
{
  WEFT__DQUEUE_PUSH(q->head, q->tail, n, prev, next);
  n->queued = true;
}

static inline void weft__chan_unlink(weft__chan_queue *q, weft__chan_node *n)
{
  WEFT__DQUEUE_UNLINK(q->head, q->tail, n, prev, next);
  n->queued = false;
}

/* Unlinks and returns the first node whose waiter we could claim (with its
 * case index recorded in the waiter), dropping stale nodes on the way; NULL
 * when there is none. The node stays valid until its waiter is completed. */
static inline weft__chan_node *weft__chan_take_waiter(weft__chan_queue *q)
{
  weft__chan_node *n;
  while ((n = q->head)) {
    weft__chan_unlink(q, n);
    if (weft__waiter_claim(n->w)) {
      n->w->data = n->index;
      return n;
    }
  }
  return NULL;
}

/* Most elements are a word or a pointer: let the compiler inline that copy. */
static inline void weft__chan_copy_elem(void *dst, const void *src, size_t size)
{
  if (size == sizeof(uint64_t))
    memcpy(dst, src, sizeof(uint64_t));
  else
    memcpy(dst, src, size);
}

static inline unsigned char *weft__chan_slot(weft_chan *c, size_t i)
{
  size_t k = c->head + i;
  if (k >= c->cap)
    k -= c->cap;
  return c->buf + k * c->elem_size;
}

/* ---- one attempt (channel lock held) ------------------------------------------------
 * Returns 0 (done), -EPIPE (closed; for a receive: and drained) or -EAGAIN
 * (it would wait). On 0, *wake may be set to a claimed waiter the caller
 * must complete with 0 once it dropped the lock. */

static inline int weft__chan_send_locked(weft_chan *c, const void *elem, weft__waiter **wake)
{
  *wake = NULL;
  if (atomic_load_explicit(&c->closed, memory_order_relaxed))
    return -EPIPE;
  if (c->count == 0) {
    /* A waiting receiver gets the element directly (nothing is buffered
     * ahead of it, so FIFO holds). */
    weft__chan_node *n = weft__chan_take_waiter(&c->recvq);
    if (n) {
      if (n->elem)
        weft__chan_copy_elem(n->elem, elem, c->elem_size);
      *wake = n->w;
      return 0;
    }
  }
  if (c->count < c->cap) {
    weft__chan_copy_elem(weft__chan_slot(c, c->count), elem, c->elem_size);
    c->count++;
    return 0;
  }
  return -EAGAIN;
}

static inline int weft__chan_recv_locked(weft_chan *c, void *elem, weft__waiter **wake)
{
  *wake = NULL;
  if (c->count > 0) {
    if (elem)
      weft__chan_copy_elem(elem, weft__chan_slot(c, 0), c->elem_size);
    if (++c->head == c->cap)
      c->head = 0;
    c->count--;
    /* The buffer was full if a sender waits: its element takes the slot. */
    weft__chan_node *n = weft__chan_take_waiter(&c->sendq);
    if (n) {
      weft__chan_copy_elem(weft__chan_slot(c, c->count), n->elem, c->elem_size);
      c->count++;
      *wake = n->w;
    }
    return 0;
  }
  /* Empty: only a rendezvous sender can be waiting. */
  weft__chan_node *n = weft__chan_take_waiter(&c->sendq);
  if (n) {
    if (elem)
      weft__chan_copy_elem(elem, n->elem, c->elem_size);
    *wake = n->w;
    return 0;
  }
  return atomic_load_explicit(&c->closed, memory_order_relaxed) ? -EPIPE : -EAGAIN;
}

#endif
