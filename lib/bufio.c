/* SPDX-License-Identifier: MIT */
/*
 * Buffered reader and writer over any descriptor (weft/bufio.h).
 *
 * The reader keeps one buffer with the unconsumed bytes in [start, end). It
 * compacts (moves them to the front) only when a call needs room at the
 * tail that is not there, and reads straight into the caller's memory when
 * the request is at least a buffer long and nothing is buffered. Errors
 * never consume data: a call that fails (a deadline, say) can be repeated.
 *
 * The writer keeps [0, len) of its buffer pending. Any write error breaks
 * it for good (err): what reached the descriptor is unknown to the caller,
 * so going on would corrupt the stream.
 */
#include "bufio_internal.h"
#include "core.h"

#include "../coro/fault.h"
#include "weft/io.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reader ------------------------------------------------------------------------ */

struct weft_reader {
  int fd;           /* never closed here */
  int64_t deadline; /* for every read; WEFT_NO_DEADLINE at creation */
  size_t size;      /* bytes in buf */
  size_t start;     /* first unconsumed byte */
  size_t end;       /* one past the last buffered byte */
  char buf[];
};

int weft_reader_create(weft_reader **r, int fd, size_t bufsize)
{
  if (!r || fd < 0)
    return -EINVAL;
  if (bufsize == 0)
    bufsize = WEFT_BUFIO_DEFAULT_SIZE;
  if (bufsize > SIZE_MAX - sizeof(weft_reader))
    return -ENOMEM;
  weft_reader *rd = weft__malloc(sizeof(*rd) + bufsize);
  if (!rd)
    return -ENOMEM;
  rd->fd = fd;
  rd->deadline = WEFT_NO_DEADLINE;
  rd->size = bufsize;
  rd->start = rd->end = 0;
  *r = rd;
  return 0;
}

void weft_reader_destroy(weft_reader *r)
{
  free(r);
}

void weft_reader_set_deadline(weft_reader *r, int64_t deadline)
{
  if (r)
    r->deadline = deadline;
}

size_t weft_reader_buffered(const weft_reader *r)
{
  return r ? r->end - r->start : 0;
}

static void compact(weft_reader *r)
{
  size_t have = r->end - r->start;
  if (r->start > 0 && have > 0)
    memmove(r->buf, r->buf + r->start, have);
  r->start = 0;
  r->end = have;
}

/* One read into the free tail (there must be one). Bytes read, 0 at end of
 * file, or -errno. */
static ssize_t fill(weft_reader *r)
{
  if (r->start == r->end)
    r->start = r->end = 0; /* empty: the whole buffer is free again */
  ssize_t got = weft_read_dl(r->fd, r->buf + r->end, r->size - r->end, r->deadline);
  if (got > 0)
    r->end += (size_t)got;
  return got;
}

/* Reads until at least n (<= size) bytes are buffered or end of file.
 * 0 or -errno; nothing is consumed. */
static int ensure(weft_reader *r, size_t n)
{
  while (r->end - r->start < n) {
    if (r->size - r->start < n)
      compact(r);
    ssize_t got = fill(r);
    if (got == -EINTR)
      continue;
    if (got < 0)
      return (int)got;
    if (got == 0)
      break;
  }
  return 0;
}

/* Copies n buffered bytes out and consumes them. */
static void take(weft_reader *r, void *dst, size_t n)
{
  if (n == 0)
    return; /* dst may be NULL (an empty frame into no buffer) */
  memcpy(dst, r->buf + r->start, n);
  r->start += n;
  if (r->start == r->end)
    r->start = r->end = 0;
}

ssize_t weft_reader_read(weft_reader *r, void *buf, size_t n)
{
  if (!r || (!buf && n > 0))
    return -EINVAL;
  if (n == 0)
    return 0;
  size_t have = r->end - r->start;
  if (have == 0) {
    if (n >= r->size)
      return weft_read_dl(r->fd, buf, n, r->deadline); /* a copy would only cost */
    ssize_t got = fill(r);
    if (got <= 0)
      return got;
    have = (size_t)got;
  }
  if (n > have)
    n = have;
  take(r, buf, n);
  return (ssize_t)n;
}

ssize_t weft_reader_read_exact(weft_reader *r, void *buf, size_t n)
{
  if (!r || (!buf && n > 0))
    return -EINVAL;
  if (n == 0)
    return 0;
  if (n <= r->size) {
    /* Gather it in the buffer first: an error then consumes nothing. */
    int e = ensure(r, n);
    if (e < 0)
      return e;
    size_t have = r->end - r->start;
    if (have < n) {
      r->start = r->end = 0; /* end of file part-way: drop the piece */
      return have == 0 ? 0 : -EPIPE;
    }
    take(r, buf, n);
    return (ssize_t)n;
  }
  /* Longer than the buffer: what is buffered, then straight into buf. */
  char *p = buf;
  size_t done = r->end - r->start;
  take(r, p, done);
  while (done < n) {
    ssize_t got = weft_read_dl(r->fd, p + done, n - done, r->deadline);
    if (got == -EINTR)
      continue;
    if (got < 0)
      return got;
    if (got == 0)
      return done == 0 ? 0 : -EPIPE;
    done += (size_t)got;
  }
  return (ssize_t)n;
}

ssize_t weft_reader_read_until(weft_reader *r, int delim, char *buf, size_t cap)
{
  if (!r || !buf || cap < 2)
    return -EINVAL;
  size_t limit = cap - 1;   /* bytes that fit besides the NUL */
  size_t scanned = 0;       /* bytes from start known to hold no delim */
  for (;;) {
    size_t have = r->end - r->start;
    size_t look = have < limit ? have : limit;
    if (look > scanned) {
      const char *base = r->buf + r->start;
      const char *hit = memchr(base + scanned, delim, look - scanned);
      if (hit) {
        size_t len = (size_t)(hit - base) + 1;
        take(r, buf, len);
        buf[len] = '\0';
        return (ssize_t)len;
      }
      scanned = look;
    }
    /* No delim in the first min(cap - 1, buffer size) bytes: give up
     * without consuming anything. */
    if (have >= limit || have == r->size)
      return -EMSGSIZE;
    if (r->end == r->size)
      compact(r); /* have < size, so this frees room at the tail */
    ssize_t got = fill(r);
    if (got == -EINTR)
      continue;
    if (got < 0)
      return got;
    if (got == 0) {
      /* End of file: the last piece as it is (have < limit: it fits). */
      take(r, buf, have);
      buf[have] = '\0';
      return (ssize_t)have;
    }
  }
}

ssize_t weft_reader_read_line(weft_reader *r, char *buf, size_t cap)
{
  return weft_reader_read_until(r, '\n', buf, cap);
}

ssize_t weft_reader_peek(weft_reader *r, size_t n, const void **data)
{
  if (!r || !data || n > r->size)
    return -EINVAL;
  int e = ensure(r, n);
  if (e < 0)
    return e;
  *data = r->buf + r->start;
  return (ssize_t)(r->end - r->start);
}

int weft_reader_consume(weft_reader *r, size_t n)
{
  if (!r || n > r->end - r->start)
    return -EINVAL;
  r->start += n;
  if (r->start == r->end)
    r->start = r->end = 0;
  return 0;
}

ssize_t weft_reader_read_frame(weft_reader *r, void *buf, size_t cap, uint32_t max,
                               int *clean_eof)
{
  if (clean_eof)
    *clean_eof = 0;
  if (!r || (!buf && cap > 0))
    return -EINVAL;
  unsigned char hdr[4];
  if (r->size >= sizeof(hdr)) {
    /* Look at the header without consuming it: a frame that is too long
     * leaves the stream as it was. */
    int e = ensure(r, sizeof(hdr));
    if (e < 0)
      return e;
    size_t have = r->end - r->start;
    if (have < sizeof(hdr)) {
      if (have == 0 && clean_eof)
        *clean_eof = 1;
      r->start = r->end = 0;
      return -EPIPE;
    }
    memcpy(hdr, r->buf + r->start, sizeof(hdr));
  } else {
    ssize_t got = weft_reader_read_exact(r, hdr, sizeof(hdr));
    if (got == 0 && clean_eof)
      *clean_eof = 1;
    if (got <= 0)
      return got == 0 ? -EPIPE : got;
  }
  uint32_t len = weft__get_be32(hdr);
  if (len > WEFT__FRAME_LIMIT(max) || len > cap)
    return -EMSGSIZE;
  if (r->size < sizeof(hdr)) {
    ssize_t got = weft_reader_read_exact(r, buf, len);
    return got == (ssize_t)len ? got : got < 0 ? got : -EPIPE;
  }
  if (sizeof(hdr) + (size_t)len <= r->size) {
    /* The whole frame fits the buffer: an error consumes nothing. */
    int e = ensure(r, sizeof(hdr) + len);
    if (e < 0)
      return e;
    if (r->end - r->start < sizeof(hdr) + len) {
      r->start = r->end = 0;
      return -EPIPE;
    }
    r->start += sizeof(hdr);
    take(r, buf, len);
    return (ssize_t)len;
  }
  r->start += sizeof(hdr);
  ssize_t got = weft_reader_read_exact(r, buf, len);
  return got == (ssize_t)len ? got : got < 0 ? got : -EPIPE;
}

/* ---- writer ------------------------------------------------------------------------ */

struct weft_writer {
  int fd;           /* never closed here */
  int64_t deadline; /* for every write; WEFT_NO_DEADLINE at creation */
  int err;          /* the first write error (sticky), 0 while healthy */
  size_t size;      /* bytes in buf */
  size_t len;       /* bytes pending in buf[0, len) */
  char buf[];
};

int weft_writer_create(weft_writer **w, int fd, size_t bufsize)
{
  if (!w || fd < 0)
    return -EINVAL;
  if (bufsize == 0)
    bufsize = WEFT_BUFIO_DEFAULT_SIZE;
  if (bufsize > SIZE_MAX - sizeof(weft_writer) - 1)
    return -ENOMEM;
  /* One byte more than the buffer: room for the NUL vsnprintf stores after
   * a text that fills the buffer exactly (see weft_writer_printf). */
  weft_writer *wr = weft__malloc(sizeof(*wr) + bufsize + 1);
  if (!wr)
    return -ENOMEM;
  wr->fd = fd;
  wr->deadline = WEFT_NO_DEADLINE;
  wr->err = 0;
  wr->size = bufsize;
  wr->len = 0;
  *w = wr;
  return 0;
}

void weft_writer_destroy(weft_writer *w)
{
  free(w);
}

void weft_writer_set_deadline(weft_writer *w, int64_t deadline)
{
  if (w)
    w->deadline = deadline;
}

size_t weft_writer_buffered(const weft_writer *w)
{
  return w ? w->len : 0;
}

/* Records the first error: the writer stays broken with it. */
static int broken(weft_writer *w, int err)
{
  w->err = err;
  return err;
}

int weft_writer_flush(weft_writer *w)
{
  if (!w)
    return -EINVAL;
  if (w->err)
    return w->err;
  if (w->len == 0)
    return 0;
  int r = weft__bufio_write_all(w->fd, w->buf, w->len, w->deadline);
  if (r < 0)
    return broken(w, r);
  w->len = 0;
  return 0;
}

ssize_t weft_writer_write(weft_writer *w, const void *buf, size_t n)
{
  if (!w || (!buf && n > 0))
    return -EINVAL;
  if (w->err)
    return w->err;
  if (n > SSIZE_MAX)
    return -EINVAL; /* the result could not say n */
  if (n == 0)
    return 0;
  const char *p = buf;
  size_t room = w->size - w->len;
  if (n <= room) {
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return (ssize_t)n;
  }
  if (n - room > w->size || w->len == 0) {
    /* What remains after topping the buffer up would not fit either: send
     * the buffer and the data in one writev. */
    struct iovec iov[2] = {{.iov_base = w->buf, .iov_len = w->len},
                           {.iov_base = (void *)p, .iov_len = n}};
    int r = weft__bufio_writev_all(w->fd, iov, 2, NULL, w->deadline);
    if (r < 0)
      return broken(w, r);
    w->len = 0;
    return (ssize_t)n;
  }
  /* Top the buffer up, write it out, keep the rest (it fits). */
  memcpy(w->buf + w->len, p, room);
  w->len = w->size;
  int r = weft_writer_flush(w);
  if (r < 0)
    return r;
  memcpy(w->buf, p + room, n - room);
  w->len = n - room;
  return (ssize_t)n;
}

/* vsnprintf, which may set errno, with errno left alone. Out of line, and
 * opaque to the compiler: weft_writer_printf may flush (and move to another
 * shard's thread) between two of these, and must not keep errno's address
 * (glibc declares __errno_location const) from one to the next. */
__attribute__((noinline, noipa)) static int format_quietly(char *buf, size_t n, const char *fmt,
                                                           va_list ap)
{
  int saved = errno;
  int k = vsnprintf(buf, n, fmt, ap);
  errno = saved;
  return k;
}

ssize_t weft_writer_printf(weft_writer *w, const char *fmt, ...)
{
  if (!w || !fmt)
    return -EINVAL;
  if (w->err)
    return w->err;
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  size_t room = w->size - w->len;
  /* vsnprintf stores a NUL after the text, in the byte past the buffer
   * when the text fills it: the text fits if k <= room. */
  int k = format_quietly(w->buf + w->len, room + 1, fmt, ap);
  va_end(ap);
  ssize_t res;
  if (k < 0) {
    res = -EINVAL; /* an encoding error, or longer than INT_MAX */
  } else if ((size_t)k <= room) {
    w->len += (size_t)k;
    res = k;
  } else if ((size_t)k <= w->size) {
    /* Fits an empty buffer: write the pending bytes out and format again
     * (no allocation). */
    int r = weft_writer_flush(w);
    if (r < 0) {
      res = r;
    } else {
      format_quietly(w->buf, w->size + 1, fmt, again);
      w->len = (size_t)k;
      res = k;
    }
  } else {
    /* Larger than the whole buffer: format into a temporary block. */
    char *tmp = weft__malloc((size_t)k + 1);
    if (!tmp) {
      res = -ENOMEM; /* nothing was written: the writer is still whole */
    } else {
      format_quietly(tmp, (size_t)k + 1, fmt, again);
      res = weft_writer_write(w, tmp, (size_t)k);
      free(tmp);
    }
  }
  va_end(again);
  return res;
}

ssize_t weft_writer_write_frame(weft_writer *w, const void *buf, size_t n)
{
  if (!w || (!buf && n > 0))
    return -EINVAL;
  if (n > UINT32_MAX)
    return -EMSGSIZE;
  if (w->err)
    return w->err;
  if (n > SSIZE_MAX)
    return -EINVAL; /* the result could not say n (32-bit): write nothing */
  unsigned char hdr[4];
  weft__put_be32(hdr, (uint32_t)n);
  if (n > w->size) {
    /* A body larger than the buffer goes out now, in one writev with what
     * is pending and the header (bufio.h): going through weft_writer_write
     * twice would copy part of it in, write the buffer, and leave the
     * body's tail behind until a flush. */
    struct iovec iov[3] = {{.iov_base = w->buf, .iov_len = w->len},
                           {.iov_base = hdr, .iov_len = sizeof(hdr)},
                           {.iov_base = (void *)buf, .iov_len = n}};
    int e = weft__bufio_writev_all(w->fd, iov, 3, NULL, w->deadline);
    if (e < 0)
      return broken(w, e);
    w->len = 0;
    return (ssize_t)n;
  }
  ssize_t r = weft_writer_write(w, hdr, sizeof(hdr));
  if (r >= 0 && n > 0)
    r = weft_writer_write(w, buf, n);
  return r < 0 ? r : (ssize_t)n;
}
