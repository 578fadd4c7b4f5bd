/* SPDX-License-Identifier: MIT */
/*
 * Channels: bounded multi-producer multi-consumer queues of fixed-size
 * elements, usable from coroutines on any shard and from plain threads, and
 * weft_select() over any mix of send and receive operations.
 *
 * Elements are copied in and out by value (elem_size bytes each). Every
 * element sent is received exactly once, and the elements of one sender
 * come out in the order it sent them (FIFO per producer).
 *
 * Capacity: a channel holds up to `capacity` elements. A send on a full
 * channel waits until a receiver makes room; a receive on an empty channel
 * waits until a sender delivers. Capacity 0 makes a rendezvous channel: a
 * send completes only when a receiver takes the element, handed over
 * directly.
 *
 * Waiting: a coroutine that waits is suspended (its shard runs others); a
 * plain thread blocks on a futex. Coroutines and threads may be mixed freely
 * on one channel.
 *
 * Closing: weft_chan_close() stops the channel for senders. Blocked and later
 * sends return -EPIPE (the element is not sent). Receivers first drain the
 * elements still buffered, then get -EPIPE.
 *
 * Deadlines and cancellation: the _dl variants take an absolute deadline
 * (CLOCK_MONOTONIC ns, WEFT_NO_DEADLINE = none) and return -ETIMEDOUT once it
 * passes; a deadline scope of the calling task (weft_deadline_push) bounds
 * every wait as well. A cancelled task (weft_cancel) gets -ECANCELED from the
 * blocking calls - those it makes later at once, and a wait in progress is
 * woken. On -ETIMEDOUT or -ECANCELED nothing was transferred: a send did not
 * deliver its element, a receive did not consume one. An operation that can
 * complete at once does so even when its deadline has already passed. The
 * try variants and a weft_select() with deadline 0 never wait and ignore
 * cancellation (so that a cancelled task can still drain a channel).
 *
 * Ownership (reference counting): weft_chan_create() returns a channel with
 * one reference. weft_chan_ref() adds one, weft_chan_unref() drops one and
 * frees the channel with the last. Every party that may still call into the
 * channel - including a task or thread blocked in it - must be covered by a
 * reference it (or someone who outlives its calls) holds: take a reference
 * for each task you hand the channel to, and drop it when the task is done.
 * Dropping the last reference while an operation is in progress is a bug.
 * The buffered elements are discarded with the channel (they are plain
 * bytes: the channel never owns what they point to).
 */
#ifndef WEFT_CHAN_H
#define WEFT_CHAN_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_chan weft_chan;

/* Creates a channel of elements of `elem_size` bytes holding up to
 * `capacity` of them (0 = rendezvous), with one reference. Returns 0,
 * -EINVAL (NULL c, elem_size 0, or elem_size * capacity too large),
 * -ENOMEM. */
WEFT_API int weft_chan_create(weft_chan **c, size_t elem_size, size_t capacity);

/* Adds a reference; returns c. */
WEFT_API weft_chan *weft_chan_ref(weft_chan *c);

/* Drops a reference; the last one frees the channel and any elements still
 * buffered. NULL is ignored. */
WEFT_API void weft_chan_unref(weft_chan *c);

/* Sends a copy of the elem_size bytes at `elem`, waiting while the channel
 * is full (for capacity 0: until a receiver takes it). Returns 0, or -EPIPE
 * (the channel is or became closed: nothing sent), -ECANCELED (the calling
 * task was cancelled: nothing sent), -EINVAL (NULL c or elem), -ENOMEM (the
 * shard's timer heap could not grow, for a deadline). */
WEFT_API int weft_chan_send(weft_chan *c, const void *elem);

/* weft_chan_send() with an absolute deadline: -ETIMEDOUT once it passes. */
WEFT_API int weft_chan_send_dl(weft_chan *c, const void *elem, int64_t deadline);

/* Sends without waiting: 0, -EAGAIN (full; for capacity 0: no receiver is
 * waiting right now), -EPIPE (closed), -EINVAL. */
WEFT_API int weft_chan_try_send(weft_chan *c, const void *elem);

/* Receives the next element into the elem_size bytes at `elem` (NULL: the
 * element is taken and dropped), waiting while the channel is empty.
 * Returns 0, or -EPIPE (closed and drained), -ECANCELED (nothing taken),
 * -EINVAL (NULL c), -ENOMEM (as for send). */
WEFT_API int weft_chan_recv(weft_chan *c, void *elem);

/* weft_chan_recv() with an absolute deadline: -ETIMEDOUT once it passes. */
WEFT_API int weft_chan_recv_dl(weft_chan *c, void *elem, int64_t deadline);

/* Receives without waiting: 0, -EAGAIN (empty, and for capacity 0 no sender
 * is waiting), -EPIPE (closed and drained), -EINVAL. */
WEFT_API int weft_chan_try_recv(weft_chan *c, void *elem);

/* Closes the channel: wakes every blocked sender with -EPIPE, and every
 * blocked receiver with -EPIPE (they only block when nothing is buffered).
 * Buffered elements stay receivable. Idempotent: closing a closed channel
 * changes nothing. Returns 0, or -EINVAL (NULL c). Never blocks. */
WEFT_API int weft_chan_close(weft_chan *c);

/* True once weft_chan_close() was called (false for NULL). */
WEFT_API bool weft_chan_is_closed(const weft_chan *c);

/* Elements buffered right now (0 for NULL; always 0 for capacity 0: a
 * rendezvous hand-over is never buffered). */
WEFT_API size_t weft_chan_len(const weft_chan *c);

/* The capacity given at creation (0 for NULL). */
WEFT_API size_t weft_chan_cap(const weft_chan *c);

/* The element size given at creation (0 for NULL). */
WEFT_API size_t weft_chan_elem_size(const weft_chan *c);

/* ---- select ------------------------------------------------------------------ */

/* Operations of a select case. */
#define WEFT_SELECT_SEND 1 /* send the element at `elem` */
#define WEFT_SELECT_RECV 2 /* receive into `elem` (NULL: drop the element) */

typedef struct weft_select_case {
  weft_chan *chan; /* the channel; NULL disables the case (it never fires) */
  int op;          /* WEFT_SELECT_SEND or WEFT_SELECT_RECV */
  void *elem;      /* send: read only; recv: written only if this case fires */
  int result;      /* out, for the case that fired: 0, or -EPIPE (closed:
                      nothing sent / closed and drained) */
} weft_select_case;

/* Case initialisers, e.g. cases[0] = weft_select_send(c, &v). */
static inline weft_select_case weft_select_send(weft_chan *c, const void *elem)
{
  weft_select_case k;
  k.chan = c;
  k.op = WEFT_SELECT_SEND;
  k.elem = (void *)elem;
  k.result = 0;
  return k;
}

static inline weft_select_case weft_select_recv(weft_chan *c, void *elem)
{
  weft_select_case k;
  k.chan = c;
  k.op = WEFT_SELECT_RECV;
  k.elem = elem;
  k.result = 0;
  return k;
}

/* Waits until one of the n cases can proceed, performs exactly that one and
 * returns its index; its outcome is in cases[index].result (0, or -EPIPE for
 * a closed channel - a closed channel's case is always ready). When several
 * are ready at once the choice is uniformly random, so no case starves. The
 * same channel may appear in several cases (also as send and receive).
 *
 * `deadline`: absolute (CLOCK_MONOTONIC ns), WEFT_NO_DEADLINE to wait for
 * ever, or 0 to poll: perform a ready case or return -EAGAIN at once.
 *
 * Returns the index, or -EAGAIN (deadline 0, none ready), -ETIMEDOUT,
 * -ECANCELED (the calling task was cancelled), -EINVAL (cases NULL with
 * n > 0, n > INT_MAX, an unknown op, a send case with a NULL elem),
 * -ENOMEM (more than 16 cases need a heap block that could not be
 * had, or the timer heap could not grow). In every error case nothing was
 * transferred. With n == 0 (or every case disabled) it just waits for the
 * deadline or cancellation. */
WEFT_API int weft_select(weft_select_case *cases, size_t n, int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
