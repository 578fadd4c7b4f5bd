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

void weft__chan_enqueue(weft__chan_queue *q, weft__chan_node *n);
void weft__chan_unlink(weft__chan_queue *q, weft__chan_node *n);

/* One attempt at a send / receive, with c locked. Returns 0 (done), -EPIPE
 * (closed; for a receive: and drained) or -EAGAIN (it would wait). On 0,
 * *wake may be set to a claimed waiter the caller must complete with 0 once
 * it dropped the lock. */
int weft__chan_send_locked(weft_chan *c, const void *elem, weft__waiter **wake);
int weft__chan_recv_locked(weft_chan *c, void *elem, weft__waiter **wake);

/* True when the calling task has been cancelled (false on a plain thread). */
bool weft__chan_cancelled(void);

#endif
