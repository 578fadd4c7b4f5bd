/* SPDX-License-Identifier: MIT */
/*
 * Buffered reading and writing over any descriptor, length-prefixed frames,
 * and copying between descriptors.
 *
 * Readers and writers use weft_read/weft_write underneath, so they suspend
 * the calling coroutine (or block a plain thread) like those calls. A reader
 * or writer belongs to one task at a time. They never close the descriptor.
 * Each has a deadline (weft_reader_set_deadline / weft_writer_set_deadline,
 * WEFT_NO_DEADLINE at creation) that bounds every call that waits: an idle
 * connection's timeout is `set_deadline(now + idle)` before each request.
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
WEFT_API void weft_reader_set_deadline(weft_reader *r, int64_t deadline);
/* Bytes buffered and not consumed yet. */
WEFT_API size_t weft_reader_buffered(const weft_reader *r);

/* Up to n bytes: what is buffered, else one read (large n reads directly).
 * 0 at end of file. */
WEFT_API ssize_t weft_reader_read(weft_reader *r, void *buf, size_t n);

/* Exactly n bytes: n; 0 at end of file before the first byte, -EPIPE if the
 * file ends part-way (what was read is consumed). */
WEFT_API ssize_t weft_reader_read_exact(weft_reader *r, void *buf, size_t n);

/* Reads through the next delim byte and stores the bytes (delim included)
 * plus a NUL in buf. Returns the number of bytes stored (not counting the
 * NUL); 0 at end of file; the last piece of a file that does not end with
 * delim is returned as is. -EMSGSIZE when delim does not come within
 * cap - 1 bytes: nothing is consumed, so the caller may close the
 * connection or read the data another way. cap must be >= 2 (-EINVAL). */
WEFT_API ssize_t weft_reader_read_until(weft_reader *r, int delim, char *buf, size_t cap);
/* weft_reader_read_until(r, '\n', buf, cap). */
WEFT_API ssize_t weft_reader_read_line(weft_reader *r, char *buf, size_t cap);

/* Makes at least n bytes available without consuming them (reading as
 * needed) and points *data at them. Returns the number available: >= n, or
 * fewer at end of file. -EINVAL if n exceeds the buffer size. */
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
WEFT_API void weft_writer_set_deadline(weft_writer *w, int64_t deadline);
/* Bytes buffered and not written yet. */
WEFT_API size_t weft_writer_buffered(const weft_writer *w);

/* Buffers n bytes, writing the buffer out when it fills (large writes go
 * straight through after the buffer). Returns n or -errno; after an error
 * the writer keeps failing with it (the stream is broken). */
WEFT_API ssize_t weft_writer_write(weft_writer *w, const void *buf, size_t n);
/* printf into the buffer. Returns the bytes written or -errno. */
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

/* Writes one frame (header and body, all of it). Returns n or -errno;
 * -EMSGSIZE if n > UINT32_MAX. */
WEFT_API ssize_t weft_frame_write(int fd, const void *buf, size_t n);
WEFT_API ssize_t weft_frame_write_dl(int fd, const void *buf, size_t n, int64_t deadline);

/* Reads one frame into buf. Returns the body length (a frame may be empty),
 * -EPIPE at end of file - *clean_eof (if not NULL) is then 1 when the file
 * ended between frames (a normal close) and 0 when it ended inside one -
 * or -EMSGSIZE if the frame is longer than max or than cap (the stream is
 * then out of step: close it). max 0 = WEFT_FRAME_MAX_DEFAULT. */
WEFT_API ssize_t weft_frame_read(int fd, void *buf, size_t cap, uint32_t max, int *clean_eof);
WEFT_API ssize_t weft_frame_read_dl(int fd, void *buf, size_t cap, uint32_t max, int *clean_eof,
                                    int64_t deadline);

/* The same over a reader and a writer (the writer buffers the frame). */
WEFT_API ssize_t weft_reader_read_frame(weft_reader *r, void *buf, size_t cap, uint32_t max,
                                        int *clean_eof);
WEFT_API ssize_t weft_writer_write_frame(weft_writer *w, const void *buf, size_t n);

/* ---- copying between descriptors ------------------------------------------------- */

/* splice(2) through io_uring: moves up to n bytes; one of the two must be a
 * pipe. off_in/off_out as splice(2) (NULL = the file position / a pipe). */
WEFT_API ssize_t weft_splice(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t n,
                             unsigned flags);
WEFT_API ssize_t weft_splice_dl(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out,
                                size_t n, unsigned flags, int64_t deadline);

/* Copies n bytes (SIZE_MAX = until end of file) from fd_in to fd_out:
 * file -> socket, socket -> socket, any pair. Splices through a pipe where
 * the kernel can, else reads and writes through a buffer. off_in NULL = the
 * file position (and the only choice for sockets and pipes), else the
 * offset to start at, advanced by what was copied. Returns the number of
 * bytes copied (fewer than n only at end of file), or -errno; the bytes
 * copied before an error are stored in *done (if not NULL). */
WEFT_API ssize_t weft_copy(int fd_in, int64_t *off_in, int fd_out, size_t n, size_t *done);
WEFT_API ssize_t weft_copy_dl(int fd_in, int64_t *off_in, int fd_out, size_t n, size_t *done,
                              int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
