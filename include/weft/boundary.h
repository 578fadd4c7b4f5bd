/* SPDX-License-Identifier: MIT */
/*
 * The boundary: a request/response channel between code outside the runtime
 * (a legacy thread pool, an application's main thread) and coroutines - or
 * the other way round. Any thread or coroutine of any runtime may be on
 * either side; a coroutine that waits is suspended, a plain thread blocks.
 *
 *     client (any thread)                      server (a coroutine)
 *     r = weft_boundary_call(b, req, &resp,    weft_boundary_ticket *t;
 *                            0, deadline);     while (weft_boundary_recv(b, &t, -1) == 0)
 *                                                weft_boundary_respond(t, work(
 *                                                    weft_boundary_request(t)));
 *
 * A call queues its request in a bounded queue (backpressure: the caller
 * fails at once with WEFT_BOUNDARY_NOWAIT, or waits for room) and waits for
 * the response. Exactly one of these ends every queued call, and both sides
 * learn which one:
 *   - the server responds (weft_boundary_respond) or fails it
 *     (weft_boundary_fail) first;
 *   - the caller's deadline passes first (-ETIMEDOUT for both sides);
 *   - the calling coroutine is cancelled first (-ECANCELED for both sides);
 *   - the boundary is closed first (-EPIPE for both sides).
 * A caller that gives up while its request is still queued withdraws it: no
 * server ever sees it. A response that comes too late is never lost: the
 * server is told (-ETIMEDOUT / -ECANCELED / -EPIPE) and still owns it.
 *
 * Ownership: the boundary never looks into req or resp. req stays the
 * caller's (it must stay valid until weft_boundary_call returns: a server
 * that got it reads it until it responds, and a caller that gave up may free
 * it only after checking the ticket is gone - see weft_boundary_request()).
 * resp passes to the caller only when weft_boundary_respond() returns 0.
 */
#ifndef WEFT_BOUNDARY_H
#define WEFT_BOUNDARY_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_boundary weft_boundary;

/* One received request, on the server side. It stays valid until
 * weft_boundary_respond() or weft_boundary_fail() consumes it (exactly one
 * of them must be called for every received ticket, or the call's memory
 * and the boundary's are never freed). */
typedef struct weft_boundary_ticket weft_boundary_ticket;

/* Flags for weft_boundary_call(). */
#define WEFT_BOUNDARY_NOWAIT 0x1u /* the queue is full: fail with -EAGAIN at
                                     once instead of waiting for room */

/* Creates an open boundary whose queue holds up to `capacity` requests that
 * no server has received yet (requests being served do not count).
 * Returns 0, -EINVAL (b NULL, capacity 0), -ENOMEM. */
WEFT_API int weft_boundary_create(weft_boundary **b, size_t capacity);

/* Closes b (as weft_boundary_close) and gives up the creator's reference.
 * Rule: call it once no thread or coroutine is inside, or will enter, any
 * weft_boundary_* call on b other than weft_boundary_respond/_fail/_request/
 * _deadline/_waiting on tickets already received. Such tickets stay valid:
 * responding to them returns -EPIPE, and b's memory is freed with the last
 * of them. NULL is ignored. */
WEFT_API void weft_boundary_destroy(weft_boundary *b);

/* Client side, from any thread or coroutine: queues req and waits for the
 * response until `deadline` (absolute, CLOCK_MONOTONIC ns; WEFT_NO_DEADLINE
 * waits for ever; a coroutine's deadline scope also applies). The deadline
 * covers the wait for room and the wait for the response. Callers waiting
 * for room get freed places in turn, but a call arriving just then may take
 * one first (the waiter then waits again).
 * Returns 0 with *resp set to what the server passed to
 * weft_boundary_respond() (now the caller's). On failure *resp is NULL and:
 *   -EAGAIN     NOWAIT and the queue is full (counted as overloaded);
 *   -ETIMEDOUT  the deadline passed first (a deadline already past fails at
 *               once); if a server holds the request its respond() returns
 *               -ETIMEDOUT and it keeps its response;
 *   -ECANCELED  the calling coroutine was cancelled (before or during the
 *               call); a server holding the request gets -ECANCELED;
 *   -EPIPE      the boundary is closed, or was closed during the call;
 *   -ENOMEM     no memory for the call (or for the deadline timer);
 *   any error a server passed to weft_boundary_fail();
 *   -EINVAL     b or resp NULL, unknown flags (not counted; *resp, if
 *               any, is not written).
 * When the call returns, no server will look at req any more unless it
 * already received it (see weft_boundary_request()). */
WEFT_API int weft_boundary_call(weft_boundary *b, void *req, void **resp, unsigned flags,
                                int64_t deadline);

/* Server side, from a coroutine or a plain thread: takes the oldest queued
 * request (freeing a place in the queue), waiting for one until `deadline`
 * (a deadline already past just polls). Requests whose caller has given up
 * meanwhile are skipped. Returns 0 with *t set, or (with *t NULL)
 * -ETIMEDOUT, -ECANCELED (the calling coroutine was cancelled while
 * waiting: a request already queued is taken even by a cancelled
 * coroutine, which must then answer it), -EPIPE (closed: closing empties
 * the queue), -ENOMEM (no deadline timer), or -EINVAL (b or t NULL; *t,
 * if any, is not written). */
WEFT_API int weft_boundary_recv(weft_boundary *b, weft_boundary_ticket **t, int64_t deadline);

/* The req of t's call. It is valid while the call is not over; once
 * weft_boundary_waiting(t) is false the caller may have returned (and freed
 * it): a server that must read req after that has to agree on it with the
 * callers (e.g. callers that pass req by value, as an integer or a heap
 * object the server frees). NULL for a NULL t. */
WEFT_API void *weft_boundary_request(const weft_boundary_ticket *t);

/* The caller's effective deadline (WEFT_NO_DEADLINE if none), so a server
 * can skip work nobody will wait for. */
WEFT_API int64_t weft_boundary_deadline(const weft_boundary_ticket *t);

/* True while the caller still waits for t's response (a hint: the caller can
 * time out, be cancelled or the boundary closed right after). */
WEFT_API bool weft_boundary_waiting(const weft_boundary_ticket *t);

/* Completes t's call with resp and frees t. Returns 0 when the caller gets
 * resp (the caller owns it now), or, when the call ended first and the
 * server keeps resp: -ETIMEDOUT (the caller's deadline passed), -ECANCELED
 * (the calling coroutine was cancelled, or the call ended with -ENOMEM
 * while the server held the request: no memory for its deadline timer),
 * -EPIPE (the boundary was closed). -EINVAL for a NULL t. Never blocks;
 * callable from any thread. */
WEFT_API int weft_boundary_respond(weft_boundary_ticket *t, void *resp);

/* Completes t's call with an error instead of a response and frees t: the
 * caller's weft_boundary_call() returns `err` (a negative errno; counted as
 * failed). Returns as weft_boundary_respond(), or -EINVAL (t NULL or err >= 0;
 * t is not consumed then). */
WEFT_API int weft_boundary_fail(weft_boundary_ticket *t, int err);

/* Closes b (idempotent): later calls and receives fail with -EPIPE; callers
 * waiting for room and callers whose request is queued or being served get
 * -EPIPE at once (servers holding a ticket get -EPIPE from respond), and
 * servers waiting in recv get -EPIPE. Returns 0 or -EINVAL. Never blocks. */
WEFT_API int weft_boundary_close(weft_boundary *b);

/* Counters of b since its creation. Each call that passed the argument
 * checks is counted once in `calls` and, when it returns, in exactly one
 * outcome, so once no call is in progress
 *   calls == completed + overloaded + timed_out + cancelled + closed + failed.
 * Receives that time out are not counted. */
struct weft_boundary_stats {
  uint64_t calls;      /* weft_boundary_call()s */
  uint64_t completed;  /* returned 0 with a response */
  uint64_t overloaded; /* -EAGAIN: NOWAIT with a full queue */
  uint64_t timed_out;  /* -ETIMEDOUT */
  uint64_t cancelled;  /* -ECANCELED */
  uint64_t closed;     /* -EPIPE */
  uint64_t failed;     /* weft_boundary_fail()'s error, or -ENOMEM */
  uint64_t late;       /* respond()/fail() that came after the call ended */
  uint64_t queued;     /* requests in the queue now */
  uint64_t serving;    /* requests received whose call is not over now */
  uint64_t room_waiters; /* callers waiting for room now */
  uint64_t recv_waiters; /* servers waiting in weft_boundary_recv() now */
};

/* Fills *s. Returns 0 or -EINVAL. */
WEFT_API int weft_boundary_stats_get(const weft_boundary *b, struct weft_boundary_stats *s);

#ifdef __cplusplus
}
#endif

#endif
