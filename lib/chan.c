/* SPDX-License-Identifier: MIT */
/*
 * weft_chan: bounded MPMC channels of fixed-size elements (see weft/chan.h
 * for the contract and chan_internal.h for the node/claim protocol).
 *
 * Invariants under the channel lock, stale nodes aside (nodes whose waiter
 * was already claimed elsewhere; whoever meets one unlinks it):
 *  - receivers wait only while the buffer is empty, senders only while it is
 *    full (always, for capacity 0);
 *  - so a receive that frees a slot of a full buffer moves the first waiting
 *    sender's element into it, which keeps FIFO per producer: a producer has
 *    at most one send in flight, and its element enters the buffer before
 *    anything it sends later.
 * The fast path (room / something buffered, nobody waiting) is one lock, one
 * copy, one unlock.
 */
#include "chan_internal.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- life ---------------------------------------------------------------------------- */

int weft_chan_create(weft_chan **out, size_t elem_size, size_t capacity)
{
  if (!out || elem_size == 0)
    return -EINVAL;
  if (capacity > (SIZE_MAX - sizeof(weft_chan)) / elem_size)
    return -EINVAL;
  weft_chan *c = weft__malloc(sizeof(*c) + capacity * elem_size);
  if (!c)
    return -ENOMEM;
  c->lock = (weft__spin)WEFT__SPIN_INIT;
  atomic_init(&c->closed, false);
  c->elem_size = elem_size;
  c->cap = capacity;
  c->head = c->count = 0;
  c->sendq.head = c->sendq.tail = NULL;
  c->recvq.head = c->recvq.tail = NULL;
  atomic_init(&c->refs, 1);
  c->buf = (unsigned char *)(c + 1);
  *out = c;
  return 0;
}

weft_chan *weft_chan_ref(weft_chan *c)
{
  if (c)
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
  return c;
}

void weft_chan_unref(weft_chan *c)
{
  if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
    free(c);
}

int weft_chan_close(weft_chan *c)
{
  if (!c)
    return -EINVAL;
  weft__waiter *wake = NULL;
  weft__spin_lock(&c->lock);
  if (!atomic_load_explicit(&c->closed, memory_order_relaxed)) {
    atomic_store_explicit(&c->closed, true, memory_order_relaxed);
    /* Receivers wait only on an empty buffer, so all of them see the end;
     * senders lose their element. Both are woken with -EPIPE. */
    weft__chan_node *n;
    while ((n = weft__chan_take_waiter(&c->recvq)) || (n = weft__chan_take_waiter(&c->sendq))) {
      n->w->next = wake;
      wake = n->w;
    }
  }
  weft__spin_unlock(&c->lock);
  while (wake) {
    weft__waiter *next = wake->next;
    weft__waiter_complete(wake, -EPIPE);
    wake = next;
  }
  return 0;
}

bool weft_chan_is_closed(const weft_chan *c)
{
  return c && atomic_load_explicit(&((weft_chan *)c)->closed, memory_order_relaxed);
}

size_t weft_chan_len(const weft_chan *c)
{
  if (!c)
    return 0;
  weft_chan *m = (weft_chan *)c;
  weft__spin_lock(&m->lock);
  size_t n = m->count;
  weft__spin_unlock(&m->lock);
  return n;
}

size_t weft_chan_cap(const weft_chan *c)
{
  return c ? c->cap : 0;
}

size_t weft_chan_elem_size(const weft_chan *c)
{
  return c ? c->elem_size : 0;
}

/* ---- send / receive ------------------------------------------------------------------ */

/* The attempt said -EAGAIN with c locked: queue a node on q, drop the lock
 * and wait. Whoever completes the waiter with 0 or -EPIPE unlinked the node;
 * after a timeout or cancellation it may still be queued. */
static int wait_on(weft_chan *c, weft__chan_queue *q, void *elem, int64_t deadline,
                   weft_task *self)
{
  weft__waiter w;
  weft__waiter_init_for(&w, self);
  weft__chan_node n = {.w = &w, .elem = elem, .index = 0};
  weft__chan_enqueue(q, &n);
  weft__spin_unlock(&c->lock);
  int r = weft__waiter_wait(&w, deadline);
  if (r != 0 && r != -EPIPE) {
    weft__spin_lock(&c->lock);
    if (n.queued)
      weft__chan_unlink(q, &n);
    weft__spin_unlock(&c->lock);
  }
  return r;
}

/* A send or a receive. `block`: wait when the attempt fails with -EAGAIN
 * (deadline applies). A sender's elem is only read, by the receiver that
 * claims its node. */
static int do_op(weft_chan *c, void *elem, bool send, bool block, int64_t deadline)
{
  if (!c || (send && !elem))
    return -EINVAL;
  weft_task *self = block ? weft__task_self() : NULL;
  if (self && atomic_load_explicit(&self->cancelled, memory_order_relaxed))
    return -ECANCELED;
  weft__waiter *wake;
  weft__spin_lock(&c->lock);
  int r = send ? weft__chan_send_locked(c, elem, &wake) : weft__chan_recv_locked(c, elem, &wake);
  if (r != -EAGAIN || !block) {
    weft__spin_unlock(&c->lock);
    if (wake)
      weft__waiter_complete_from(self, wake, 0);
    return r;
  }
  if (deadline >= 0 && deadline <= weft__now()) {
    weft__spin_unlock(&c->lock);
    return -ETIMEDOUT;
  }
  return wait_on(c, send ? &c->sendq : &c->recvq, elem, deadline, self);
}

int weft_chan_send(weft_chan *c, const void *elem)
{
  return do_op(c, (void *)elem, true, true, WEFT_NO_DEADLINE);
}

int weft_chan_send_dl(weft_chan *c, const void *elem, int64_t deadline)
{
  return do_op(c, (void *)elem, true, true, deadline);
}

int weft_chan_try_send(weft_chan *c, const void *elem)
{
  return do_op(c, (void *)elem, true, false, WEFT_NO_DEADLINE);
}

int weft_chan_recv(weft_chan *c, void *elem)
{
  return do_op(c, elem, false, true, WEFT_NO_DEADLINE);
}

int weft_chan_recv_dl(weft_chan *c, void *elem, int64_t deadline)
{
  return do_op(c, elem, false, true, deadline);
}

int weft_chan_try_recv(weft_chan *c, void *elem)
{
  return do_op(c, elem, false, false, WEFT_NO_DEADLINE);
}
