/* SPDX-License-Identifier: MIT */
/*
 * Buffered reading and writing over any descriptor, length-prefixed frames,
 * and copying between descriptors.
 *
 * Readers and writers use weft_read/weft_write (and writev) underneath, so
 * they suspend the calling coroutine (or block a plain thread) like those
 * calls. A reader or writer belongs to one task at a time. They never close
 * the descriptor. Each has a deadline (weft_reader_set_deadline /
 * weft_writer_set_deadline, WEFT_NO_DEADLINE at creation) that bounds every
 * system call or io_uring operation a call makes: an idle connection's
 * timeout is `set_deadline(now + idle)` before each request.
 *
 * Broken pipes: in a coroutine a write to a pipe or socket whose reader is
 * gone returns -EPIPE (shard threads block SIGPIPE). On a plain thread these
 * calls are write(2)/writev(2)/splice(2): SIGPIPE is raised on that thread,
 * and its default action ends the process, unless the thread blocks or
 * ignores it. The result is -EPIPE either way.
 */
#ifndef WEFT_BUFIO_H
#define WEFT_BUFIO_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_BUFIO_DEFAULT_SIZE ((size_t)16384)

/* ---- reader ---------------------------------------------------------------------- */

typedef struct weft_reader weft_reader;

/* A reader of fd with a buffer of bufsize bytes (0 = WEFT_BUFIO_DEFAULT_SIZE).
 * Returns 0, -EINVAL (NULL r, fd < 0), -ENOMEM. */
WEFT_API int weft_reader_create(weft_reader **r, int fd, size_t bufsize);
/* Frees r (data still buffered is dropped; fd stays open). NULL is fine. */
WEFT_API void weft_reader_destroy(weft_reader *r);
/* The deadline of r's calls from now on (WEFT_NO_DEADLINE: none, the
 * default). NULL r: nothing happens. */
WEFT_API void weft_reader_set_deadline(weft_reader *r, int64_t deadline);
/* Bytes buffered and not consumed yet (0 for NULL). */
WEFT_API size_t weft_reader_buffered(const weft_reader *r);

/* Reader errors (-ETIMEDOUT at the deadline, -ECANCELED, read errors) consume
 * nothing, so the call can be repeated (with a new deadline, say) - except
 * where said otherwise below. End of file is not remembered: a later call
 * reads again. */

/* Up to n bytes: what is buffered, else one read (n >= the buffer size with
 * nothing buffered reads straight into buf). 0 at end of file. */
WEFT_API ssize_t weft_reader_read(weft_reader *r, void *buf, size_t n);

/* Exactly n bytes: n; 0 at end of file before the first byte, -EPIPE if the
 * file ends part-way (what was read is consumed). n up to the buffer size is
 * gathered in the buffer first, so an error consumes nothing; for larger n
 * the bytes read into buf before an error are consumed. */
WEFT_API ssize_t weft_reader_read_exact(weft_reader *r, void *buf, size_t n);

/* Reads through the next delim byte and stores the bytes (delim included)
 * plus a NUL in buf. Returns the number of bytes stored (not counting the
 * NUL); 0 at end of file (buf is then ""); the last piece of a file that
 * does not end with delim is returned as is. -EMSGSIZE when delim does not
 * come within the first min(cap - 1, buffer size) bytes - so the longest
 * piece it returns is that many bytes, delim included; a reader with a
 * buffer smaller than cap - 1 decides once its buffer is full. Nothing is
 * consumed then, so the caller may close the connection or read the data
 * another way (weft_reader_read, peek/consume). cap must be >= 2 and buf
 * not NULL (-EINVAL). Searches only bytes it has not searched before. */
WEFT_API ssize_t weft_reader_read_until(weft_reader *r, int delim, char *buf, size_t cap);
/* weft_reader_read_until(r, '\n', buf, cap). */
WEFT_API ssize_t weft_reader_read_line(weft_reader *r, char *buf, size_t cap);

/* Makes at least n bytes available without consuming them (reading as
 * needed) and points *data at them. Returns the number available: >= n, or
 * fewer at end of file (n 0 reads nothing). -EINVAL if n exceeds the buffer
 * size. *data is valid until the next call on r. */
WEFT_API ssize_t weft_reader_peek(weft_reader *r, size_t n, const void **data);
/* Drops n buffered bytes (n <= weft_reader_buffered(), else -EINVAL). */
WEFT_API int weft_reader_consume(weft_reader *r, size_t n);

/* ---- writer ------------------------------------------------------------------------ */

typedef struct weft_writer weft_writer;

/* A writer to fd with a buffer of bufsize bytes (0 = WEFT_BUFIO_DEFAULT_SIZE).
 * Returns 0, -EINVAL, -ENOMEM. */
WEFT_API int weft_writer_create(weft_writer **w, int fd, size_t bufsize);
/* Frees w without flushing (call weft_writer_flush first). NULL is fine. */
WEFT_API void weft_writer_destroy(weft_writer *w);
/* The deadline of w's calls from now on (WEFT_NO_DEADLINE: none, the
 * default). NULL w: nothing happens. */
WEFT_API void weft_writer_set_deadline(weft_writer *w, int64_t deadline);
/* Bytes buffered and not written yet (0 for NULL). */
WEFT_API size_t weft_writer_buffered(const weft_writer *w);

/* Writer errors: the first failed write (-EPIPE, -ETIMEDOUT at the deadline,
 * -ECANCELED, ...) breaks the writer - part of the data may have gone out -
 * and every later write, printf, write_frame and flush returns that error.
 * Argument errors (-EINVAL, -EMSGSIZE) and printf's -ENOMEM write nothing
 * and leave it whole. */

/* Buffers n bytes, writing the buffer out when it fills. Data that would
 * not fit an empty buffer after topping this one up goes out together with
 * the buffered bytes in one writev. Returns n (all of it was taken) or
 * -errno. */
WEFT_API ssize_t weft_writer_write(weft_writer *w, const void *buf, size_t n);
/* printf into the buffer, never truncated: text that does not fit the free
 * space but fits an empty buffer is formatted again after a flush; longer
 * text goes through a temporary heap block (-ENOMEM if there is none) and
 * weft_writer_write. Returns the length of the text or -errno (-EINVAL for
 * an encoding error or text longer than INT_MAX). */
WEFT_API ssize_t weft_writer_printf(weft_writer *w, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Writes out everything buffered (all of it, across short writes). 0 or -errno. */
WEFT_API int weft_writer_flush(weft_writer *w);

/* ---- length-prefixed frames -------------------------------------------------------
 * A frame is a 4-byte big-endian length followed by that many bytes. */

#define WEFT_FRAME_MAX_DEFAULT ((uint32_t)16 << 20)

/* Writes one frame (header and body, all of it): one writev, more only after
 * short writes. Returns n or -errno; -EMSGSIZE if n > UINT32_MAX, -EINVAL
 * for a NULL buf with n > 0, -EBADF for fd < 0. The deadline bounds the
 * whole frame; an error part-way leaves the stream out of step. */
WEFT_API ssize_t weft_frame_write(int fd, const void *buf, size_t n);
WEFT_API ssize_t weft_frame_write_dl(int fd, const void *buf, size_t n, int64_t deadline);

/* Reads one frame into buf. Returns the body length (a frame may be empty),
 * -EPIPE at end of file - *clean_eof (if not NULL) is then 1 when the file
 * ended between frames (a normal close) and 0 when it ended inside one -
 * or -EMSGSIZE if the frame is longer than max or than cap (the stream is
 * then out of step: close it). max 0 = WEFT_FRAME_MAX_DEFAULT. *clean_eof is
 * 0 after every other result. A bare descriptor cannot be read ahead, so
 * this is two reads (header, body); the reader variant reads in bulk.
 * What was read is gone after an error too: a deadline or cancel (or read
 * error) that ends the call once part of the frame has arrived leaves the
 * stream out of step - a retry would take the middle of that frame for a
 * header - and -ETIMEDOUT does not tell whether anything had arrived. An
 * idle timeout that is to be retried needs weft_reader_read_frame, which
 * consumes nothing then (while the frame fits its buffer). */
WEFT_API ssize_t weft_frame_read(int fd, void *buf, size_t cap, uint32_t max, int *clean_eof);
WEFT_API ssize_t weft_frame_read_dl(int fd, void *buf, size_t cap, uint32_t max, int *clean_eof,
                                    int64_t deadline);

/* The same over a reader and a writer (the writer buffers the frame; a body
 * larger than its buffer goes out in one writev with what is buffered).
 * With a reader buffer of at least 4 bytes, -EMSGSIZE consumes nothing (a
 * call with a larger buf gets the frame), and so does any error while the
 * frame (4 + length bytes) fits the buffer; after an error inside a larger
 * frame the stream is out of step. */
WEFT_API ssize_t weft_reader_read_frame(weft_reader *r, void *buf, size_t cap, uint32_t max,
                                        int *clean_eof);
WEFT_API ssize_t weft_writer_write_frame(weft_writer *w, const void *buf, size_t n);

/* ---- copying between descriptors ------------------------------------------------- */

/* splice(2) through io_uring: moves up to n bytes (at most 2 GiB - 4 KiB at
 * once); one of the two must be a pipe. off_in/off_out as splice(2) (NULL =
 * the file position / a pipe; else advanced by the result). flags are
 * splice(2)'s SPLICE_F_MOVE, _NONBLOCK, _MORE, _GIFT (else -EINVAL).
 * Results as splice(2): -EBADF (fd < 0 too), -EINVAL (also a negative
 * offset, or a kind of file that cannot be spliced), -ESPIPE (an offset for
 * a pipe), 0 at end of file (and at once for n 0). In a coroutine it runs on an io_uring worker
 * thread, which the deadline and weft_cancel interrupt; on a plain thread it
 * is splice(2), and the deadline bounds the wait for both sides with
 * poll(2) - except that a blocking socket on the out side, once poll(2)
 * says it has some room, takes all it is given inside splice(2), waiting
 * for room as long as that takes, deadline or not (the kernel looks at
 * the socket's O_NONBLOCK, not at SPLICE_F_NONBLOCK): there, make the
 * socket O_NONBLOCK, or use weft_copy_dl, which honours its deadline. A side the caller made O_NONBLOCK is not waited for, either way:
 * -EAGAIN when it has nothing (or no room); the deadline still bounds the
 * wait for the other side.
 *
 * Beware: while a splice between a socket and a pipe waits for the socket,
 * the kernel holds the pipe's lock, so every other read or write of that
 * pipe waits too - one from a coroutine holds up its whole shard, whatever
 * its deadline. Use such a pipe from nowhere else meanwhile, or use
 * weft_copy, which goes through a private pipe. */
WEFT_API ssize_t weft_splice(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t n,
                             unsigned flags);
WEFT_API ssize_t weft_splice_dl(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out,
                                size_t n, unsigned flags, int64_t deadline);

/* Copies n bytes (SIZE_MAX = until end of file) from fd_in to fd_out:
 * file -> socket, socket -> socket, any pair. Splices through a private
 * pipe (or from pipe to pipe) where the kernel can, else reads and writes
 * through a buffer (and so does a plain thread's copy with a deadline into
 * a blocking socket, which a splice would wait on past the deadline); a
 * pipe on either side stays free for others to use.
 * off_in NULL = the file position (and the only choice for sockets and
 * pipes), else the offset to start at, advanced by what was copied.
 * Returns the number of bytes copied (fewer than n only at end of file),
 * or -errno; *done (if not NULL) receives the number of bytes written to
 * fd_out on every path. The deadline bounds the whole copy.
 *
 * After an error, bytes already taken from fd_in but not yet written (at
 * most the private pipe's content, up to 1 MiB, or one 64 KiB buffer) are
 * not lost where they can be put back: with off_in they are simply not
 * counted (*off_in = start + *done, so a retry resumes there), and a
 * regular file read at its position gets its position moved back by them.
 * From a socket, pipe or other stream they are lost.
 *
 * Errors: -EBADF (fd < 0, or not open the right way), -EINVAL (negative
 * *off_in, a pipe into itself), -ESPIPE (off_in for a pipe or socket); n 0
 * returns 0. A descriptor the caller set O_NONBLOCK keeps its semantics
 * (-EAGAIN when it has nothing, or no room). */
WEFT_API ssize_t weft_copy(int fd_in, int64_t *off_in, int fd_out, size_t n, size_t *done);
WEFT_API ssize_t weft_copy_dl(int fd_in, int64_t *off_in, int fd_out, size_t n, size_t *done,
                              int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
