/* SPDX-License-Identifier: MIT */
/*
 * Receive streams: a connected socket read as a sequence of filled buffers,
 * for high-rate byte streams.
 *
 * On kernels that have them (6.0+), a stream is one multishot
 * IORING_OP_RECV that picks its buffers from a provided-buffer ring
 * registered for the stream: the kernel keeps receiving into free buffers
 * while the coroutine is busy, with no system call and no re-submission per
 * receive. Elsewhere (or when the kernel refuses the ring), the same calls
 * run one plain receive at a time into the stream's own buffer; results are
 * the same either way (weft_recv_stream_multishot() tells which path runs).
 *
 *     weft_recv_stream *s;
 *     int r = weft_recv_stream_open(&s, fd, NULL);     // defaults
 *     const void *p;
 *     ssize_t n;
 *     while ((n = weft_recv_stream_next(s, &p, WEFT_NO_DEADLINE)) > 0)
 *       consume(p, n);                                 // p valid until next()
 *     weft_recv_stream_close(s);                       // n == 0: EOF, < 0: error
 *
 * Ownership: a stream belongs to the coroutine that opened it. Only that
 * coroutine may call next/release/close. If it returns with the stream still
 * open, the stream is closed for it (as by weft_recv_stream_close) before
 * the task finishes, and the handle is gone. While the stream is open the
 * coroutine stays on its shard (it is not stolen): the receive and its
 * buffers live on that shard's ring.
 *
 * Deadlines and cancellation do not stop the stream: a next() that times out
 * returns -ETIMEDOUT and the stream goes on receiving (nothing is lost; the
 * data comes with a later next()). A cancelled coroutine gets -ECANCELED from
 * next() (from then on, like every blocking call of a cancelled task) and can
 * still close the stream. weft_runtime_stop() cancels every task, so a task
 * that stops reading when next() fails shuts down cleanly.
 *
 * The stream never closes the descriptor.
 */
#ifndef WEFT_RECV_STREAM_H
#define WEFT_RECV_STREAM_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_recv_stream weft_recv_stream;

/* Buffers of a stream. The kernel path owns buf_count buffers of buf_size
 * bytes; every receive fills (part of) one buffer, so one next() returns at
 * most buf_size bytes. The kernel can run ahead of the consumer by up to
 * buf_count - 1 buffers; when all are full, receiving pauses (TCP flow
 * control pushes back on the sender) and resumes as next() hands buffers
 * back. */
typedef struct weft_recv_stream_opts {
  size_t buf_size;    /* bytes per buffer, 1 .. 1 GiB; 0: 16 KiB */
  unsigned buf_count; /* buffers, a power of two, 1 .. 32768; 0: 64 */
} weft_recv_stream_opts;

#define WEFT_RECV_STREAM_BUF_SIZE ((size_t)16384)
#define WEFT_RECV_STREAM_BUF_COUNT 64u
#define WEFT_RECV_STREAM_MAX_BUF_SIZE ((size_t)1 << 30)
#define WEFT_RECV_STREAM_MAX_BUF_COUNT 32768u

/* Fills o with the defaults (16 KiB x 64). */
WEFT_API void weft_recv_stream_opts_init(weft_recv_stream_opts *o);

/* Opens a stream on the connected stream socket fd and starts receiving.
 * o may be NULL (defaults). Only in a coroutine. Returns 0 and *s, or
 * -EPERM (a plain thread: there is no ring to receive on), -EINVAL (s NULL,
 * buf_size or buf_count out of range or buf_count not a power of two),
 * -EBADF (fd < 0), -ENOMEM, -ECANCELED (the task is cancelled) or -ETIMEDOUT
 * (its deadline scope has ended). On failure nothing was started. Errors of
 * the socket itself (-ENOTSOCK, -EBADF for a closed fd ...) come from next(). */
WEFT_API int weft_recv_stream_open(weft_recv_stream **s, int fd, const weft_recv_stream_opts *o);

/* The next filled buffer: returns its length (> 0) and points *data at its
 * bytes, in stream order. The buffer stays valid (and unchanged) until the
 * next call of next(), release() or close() on s; then it is reused.
 * Otherwise returns:
 *   0            end of stream (the peer shut down its side); again on every
 *                later call;
 *   -ETIMEDOUT   the deadline (or the task's deadline scope) passed with no
 *                data; the stream goes on, later calls deliver what comes.
 *                A deadline already past returns data only if some is
 *                already queued in the stream: on the plain path what
 *                the socket holds, on the kernel path what the shard has
 *                reaped - which it does only while the coroutine is
 *                suspended. A loop that polls with such a deadline must
 *                suspend between calls (weft_sleep; one weft_yield may
 *                resume it before the shard looks at its ring), or on the
 *                kernel path it never gets anything;
 *   -ENOMEM      no memory to arm the deadline's timer; the stream goes
 *                on, as after -ETIMEDOUT;
 *   -ECANCELED   the task is cancelled (then on every later call);
 *   -EPERM       called by another coroutine than the one that opened s;
 *   -EINVAL      s or data is NULL;
 *   another -errno: the receive failed (-ECONNRESET, -ENOTSOCK, -EBADF ...);
 *                the stream is over and every later call returns the same.
 * *data is set only when the result is > 0. -ENOBUFS (all buffers full)
 * never comes here: the stream restarts the receive as buffers free up. */
WEFT_API ssize_t weft_recv_stream_next(weft_recv_stream *s, const void **data, int64_t deadline);

/* Hands the buffer returned by the last next() back before the next call
 * (so the kernel can fill it while the coroutine works on something else).
 * Optional; a no-op if no buffer is held, s is NULL, or the caller is not
 * the coroutine that opened s. */
WEFT_API void weft_recv_stream_release(weft_recv_stream *s);

/* Stops receiving, waits until the kernel is done with the stream's memory
 * (on every path: also in a cancelled task or an ended deadline scope),
 * frees the stream. Data received and not yet handed out is dropped; the
 * descriptor stays open. Returns 0, -EINVAL (s NULL) or -EPERM (not the
 * coroutine that opened s: nothing is done). */
WEFT_API int weft_recv_stream_close(weft_recv_stream *s);

/* 1 if s runs on a multishot receive with a provided-buffer ring, 0 if on
 * plain receives (kernel without them, or no room for another buffer ring),
 * -EINVAL for NULL. A stream may move from 1 to 0 once, when the kernel
 * turns the multishot receive down: the kernel answers the stream's first
 * receive, and the move happens inside the first next() that finds that
 * answer - the first next() that waits, or a later one if earlier calls
 * returned before it came (a deadline already past, say). */
WEFT_API int weft_recv_stream_multishot(const weft_recv_stream *s);

#ifdef __cplusplus
}
#endif

#endif
