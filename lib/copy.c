/* SPDX-License-Identifier: MIT */
/*
 * weft_splice (IORING_OP_SPLICE on the op primitive, splice(2) on a plain
 * thread) and weft_copy on top of it.
 *
 * weft_copy moves data without copying it through user space where the
 * kernel can: through a private pipe (fd_in -> pipe -> fd_out), or with one
 * splice per chunk from pipe to pipe. When the kernel refuses to splice a
 * kind of descriptor (-EINVAL: an eventfd, a timerfd, an O_APPEND file...),
 * it drains what the pipe holds and goes on with read/write through a
 * buffer.
 *
 * Why a private pipe even when the caller's side is a pipe: a splice
 * between a socket and a pipe holds the pipe's mutex while it waits for the
 * socket (splice_file_to_pipe, splice_to_socket). Any other read or write
 * of that pipe then blocks in the kernel - and one submitted from a
 * coroutine blocks its whole shard thread in io_uring_enter, deadline or
 * not. With the private pipe in between only our own pipe is locked while
 * waiting; pipe-to-pipe splices wait with both pipes unlocked.
 *
 * Accounting: `done` counts bytes written to fd_out. `pending` counts bytes
 * taken from fd_in that have not reached fd_out yet (in the private pipe or
 * the buffer); after an error they are given back where that is possible -
 * an explicit *off_in ends at start + done, and a regular file's position
 * is moved back - and are otherwise lost with the pipe (a socket's or a
 * pipe's bytes cannot be put back), which the header documents.
 *
 * Why not linked SQE pairs (in -> pipe, pipe -> out in one chain)? A short
 * first splice would leave the second waiting for bytes that never come,
 * and the pair saves one suspension per chunk at most: the loop below is
 * simpler and always correct.
 */
#include "bufio_internal.h"
#include "op.h"
#include "rawsys.h"

#include "../coro/fault.h"
#include "weft/bufio.h"
#include "weft/fs.h"
#include "weft/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_IO ((size_t)INT_MAX & ~(size_t)4095)
#define SPLICE_FLAGS (SPLICE_F_MOVE | SPLICE_F_NONBLOCK | SPLICE_F_MORE | SPLICE_F_GIFT)
#define COPY_PIPE_SIZE (1 << 20) /* asked of F_SETPIPE_SZ; the default is 64 KiB */
#define COPY_BUF_SIZE ((size_t)64 << 10)

/* ---- weft_splice ----------------------------------------------------------------- */

static bool o_nonblock(int fd)
{
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

/* True if splice(2) does not wait for fd: the caller made it O_NONBLOCK,
 * or it is a pipe and the caller passed SPLICE_F_NONBLOCK. */
static bool no_wait(int fd, unsigned flags)
{
  if (o_nonblock(fd))
    return true;
  struct stat st;
  return (flags & SPLICE_F_NONBLOCK) && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* True if fd has `events` ready now (poll(2) without waiting). */
static bool ready_now(int fd, short events)
{
  struct pollfd p = {.fd = fd, .events = events};
  return poll(&p, 1, 0) > 0;
}

/* Plain thread. With a deadline, the wait is poll(2) on each side and the
 * splice runs with SPLICE_F_NONBLOCK (which covers the pipe side; a socket
 * side was just reported ready), polling again on -EAGAIN. A side the
 * caller made O_NONBLOCK is not waited for - as splice(2) itself, and as
 * io_uring's splice in a coroutine, the call says -EAGAIN when that side
 * has nothing - nor is a pipe side when the caller passed SPLICE_F_NONBLOCK
 * (splice(2) does not wait for it then); the deadline still bounds the
 * wait for the other (a TCP socket waits in splice(2) whatever the splice
 * flags). n 0 waits for nothing: splice(2) returns 0 at once. */
static ssize_t plain_splice(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t n,
                            unsigned flags, int64_t deadline)
{
  if (deadline >= 0 && deadline <= weft__now())
    return -ETIMEDOUT; /* as everywhere: a passed deadline starts nothing */
  if (n == 0)
    return 0;
  int saved = errno;
  loff_t oi = off_in ? *off_in : 0, oo = off_out ? *off_out : 0;
  bool nb_in = no_wait(fd_in, flags), nb_out = no_wait(fd_out, flags);
  unsigned f = deadline >= 0 ? flags | SPLICE_F_NONBLOCK : flags;
  ssize_t res;
  for (;;) {
    int r = 0;
    if (deadline >= 0) {
      if (!nb_in)
        r = weft__poll_ready(fd_in, POLLIN, deadline);
      if (r == 0 && !nb_out)
        r = weft__poll_ready(fd_out, POLLOUT, deadline);
    }
    if (r < 0) {
      res = r;
      break;
    }
    ssize_t got = splice(fd_in, off_in ? &oi : NULL, fd_out, off_out ? &oo : NULL, n, f);
    if (got >= 0) {
      res = got;
      break;
    }
    int e = errno;
    if (e == EINTR)
      continue;
    if (e == EAGAIN && deadline >= 0) {
      /* Lost a race for a side we waited for (look again), or a side
       * not waited for has nothing: then every other side is still
       * ready, and the answer is splice(2)'s. */
      bool others_ready = (nb_in || ready_now(fd_in, POLLIN)) &&
                          (nb_out || ready_now(fd_out, POLLOUT));
      if (!(nb_in || nb_out) || !others_ready)
        continue;
    }
    res = -e;
    break;
  }
  errno = saved;
  return res;
}

ssize_t weft_splice_dl(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t n,
                       unsigned flags, int64_t deadline)
{
  if (fd_in < 0 || fd_out < 0)
    return -EBADF;
  if ((flags & ~(unsigned)SPLICE_FLAGS) || (off_in && *off_in < 0) || (off_out && *off_out < 0))
    return -EINVAL;
  if (n > MAX_IO)
    n = MAX_IO;
  weft__op op;
  struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
  ssize_t r;
  if (!sqe) {
    if (op.res != -EPERM)
      return op.res;
    r = plain_splice(fd_in, off_in, fd_out, off_out, n, flags, deadline);
  } else {
    /* io_uring takes the offsets by value (-1: the file position) and does
     * not write them back: advance them here, as splice(2) would. */
    io_uring_prep_splice(sqe, fd_in, off_in ? *off_in : -1, fd_out, off_out ? *off_out : -1,
                         (unsigned)n, flags);
    r = weft__op_wait(&op);
  }
  if (r > 0) {
    if (off_in)
      *off_in += r;
    if (off_out)
      *off_out += r;
  }
  return r;
}

ssize_t weft_splice(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t n,
                    unsigned flags)
{
  return weft_splice_dl(fd_in, off_in, fd_out, off_out, n, flags, WEFT_NO_DEADLINE);
}

/* ---- weft_copy ----------------------------------------------------------------------- */

typedef struct copy {
  int in, out;
  bool at_off;      /* reading at `off` (the caller's *off_in), not the position */
  bool in_is_file;  /* a regular file: its position can be moved back */
  bool in_nb;       /* fd_in is O_NONBLOCK (and not a regular file) */
  bool out_nb;      /* fd_out is O_NONBLOCK (and not a regular file) */
  int64_t off;      /* next offset to read from fd_in when at_off */
  size_t n;         /* bytes asked for (SIZE_MAX: until end of file) */
  size_t done;      /* bytes written to fd_out */
  size_t pending;   /* bytes taken from fd_in, not written yet */
  int64_t deadline;
  int pipe[2];      /* the private pipe, -1 when there is none */
  size_t pipe_cap;  /* its size in bytes */
} copy;

static size_t chunk(const copy *c, size_t max)
{
  size_t left = c->n - c->done;
  return left < max ? left : max;
}

/* weft_read_dl and weft_write_dl wait for an O_NONBLOCK descriptor (in a
 * coroutine and on a plain thread), but weft_copy keeps the caller's
 * O_NONBLOCK - -EAGAIN when it has nothing or no room, as the splices say.
 * So such a descriptor gets one read(2), pread(2) or write(2), which does
 * not wait, not even on a shard's thread - after the cancel and deadline
 * checks a waiting call would make. errno is left as it was. The system
 * calls are made past libc's wrappers (rawsys.h): with libweft-hook loaded
 * its read() and write() would pin a stealable caller to its shard, as
 * they do the program's own calls. */
static ssize_t direct(copy *c, bool write_op, void *buf, size_t n)
{
  weft_task *t = weft__task_self();
  int r = weft__may_wait(t, weft__deadline_for(t, c->deadline));
  if (r < 0)
    return r;
  int saved = errno;
  ssize_t k = write_op  ? weft__sys_write(c->out, buf, n)
              : c->at_off ? weft__sys_pread(c->in, buf, n, (off_t)c->off)
                          : weft__sys_read(c->in, buf, n);
  if (k < 0)
    k = -errno;
  errno = saved;
  return k;
}

/* One write to fd_out. */
static ssize_t give(copy *c, const char *buf, size_t k)
{
  if (c->out_nb)
    return direct(c, true, (void *)buf, k);
  return weft_write_dl(c->out, buf, k, c->deadline);
}

/* Writes buf[0, k) to fd_out, counting each piece in done. 0 or -errno. */
static int put(copy *c, const char *buf, size_t k)
{
  while (k > 0) {
    ssize_t w = give(c, buf, k);
    if (w == -EINTR)
      continue;
    if (w < 0)
      return (int)w;
    if (w == 0)
      return -EIO;
    buf += w;
    k -= (size_t)w;
    c->done += (size_t)w;
    c->pending -= (size_t)w;
  }
  return 0;
}

/* Up to want bytes from fd_in. */
static ssize_t take(copy *c, char *buf, size_t want)
{
  if (c->in_nb)
    return direct(c, false, buf, want);
  return c->at_off ? weft_pread_dl(c->in, buf, want, (off_t)c->off, c->deadline)
                   : weft_read_dl(c->in, buf, want, c->deadline);
}

/* read/write through a buffer; first empties the private pipe, if it holds
 * anything (its bytes come before whatever fd_in still has). */
static int copy_buffered(copy *c)
{
  char *buf = weft__malloc(COPY_BUF_SIZE);
  if (!buf)
    return -ENOMEM;
  int r = 0;
  while (r == 0 && c->pipe[0] >= 0 && c->pending > 0) {
    size_t want = c->pending < COPY_BUF_SIZE ? c->pending : COPY_BUF_SIZE;
    ssize_t k = weft_read_dl(c->pipe[0], buf, want, c->deadline);
    if (k == -EINTR)
      continue;
    r = k < 0 ? (int)k : k == 0 ? -EIO : put(c, buf, (size_t)k);
  }
  while (r == 0 && c->done < c->n) {
    size_t want = chunk(c, COPY_BUF_SIZE);
    ssize_t k = take(c, buf, want);
    if (k == -EINTR)
      continue;
    if (k <= 0) {
      r = (int)k; /* 0: end of file */
      break;
    }
    c->off += k;
    c->pending = (size_t)k;
    r = put(c, buf, (size_t)k);
  }
  free(buf);
  return r;
}

/* Pipe to pipe: splice straight from fd_in to fd_out. */
static int copy_direct(copy *c)
{
  while (c->done < c->n) {
    ssize_t s = weft_splice_dl(c->in, c->at_off ? &c->off : NULL, c->out, NULL,
                               chunk(c, MAX_IO), SPLICE_F_MOVE, c->deadline);
    if (s == -EINTR)
      continue;
    if (s == -EINVAL)
      return copy_buffered(c); /* a side the kernel cannot splice */
    if (s <= 0)
      return (int)s; /* 0: end of file */
    c->done += (size_t)s;
  }
  return 0;
}

static int open_pipe(copy *c)
{
  int saved = errno;
  int r = 0;
  if (pipe2(c->pipe, O_CLOEXEC) < 0) {
    r = -errno;
    c->pipe[0] = c->pipe[1] = -1;
  } else {
    /* Bigger chunks mean fewer round trips; the pipe's pages are taken
     * only as data passes, and a refusal (the user's pipe quota) is fine. */
    (void)fcntl(c->pipe[1], F_SETPIPE_SZ, COPY_PIPE_SIZE);
    int sz = fcntl(c->pipe[1], F_GETPIPE_SZ);
    c->pipe_cap = sz > 0 ? (size_t)sz : 4096;
  }
  errno = saved;
  return r;
}

/* fd_in -> private pipe -> fd_out. */
static int copy_via_pipe(copy *c)
{
  int r = open_pipe(c);
  if (r < 0)
    return r;
  for (;;) {
    if (c->pending == 0) {
      if (c->done >= c->n)
        return 0;
      /* The pipe is empty, so this waits only for fd_in. */
      ssize_t s = weft_splice_dl(c->in, c->at_off ? &c->off : NULL, c->pipe[1], NULL,
                                 chunk(c, c->pipe_cap), SPLICE_F_MOVE, c->deadline);
      if (s == -EINTR)
        continue;
      if (s == -EINVAL)
        return copy_buffered(c);
      if (s <= 0)
        return (int)s; /* 0: end of file */
      c->pending = (size_t)s;
    }
    ssize_t s = weft_splice_dl(c->pipe[0], NULL, c->out, NULL, c->pending, SPLICE_F_MOVE,
                               c->deadline);
    if (s == -EINTR)
      continue;
    if (s == -EINVAL)
      return copy_buffered(c); /* drains the pipe first */
    if (s < 0)
      return (int)s;
    if (s == 0)
      return -EIO; /* no progress from a non-empty pipe: never loop on it */
    c->done += (size_t)s;
    c->pending -= (size_t)s;
  }
}

ssize_t weft_copy_dl(int fd_in, int64_t *off_in, int fd_out, size_t n, size_t *done,
                     int64_t deadline)
{
  if (done)
    *done = 0;
  if (fd_in < 0 || fd_out < 0)
    return -EBADF;
  if (off_in && *off_in < 0)
    return -EINVAL;
  int saved = errno;
  struct stat si, so;
  int sr = fstat(fd_in, &si) < 0 || fstat(fd_out, &so) < 0 ? -errno : 0;
  errno = saved;
  if (sr < 0)
    return sr;
  if (off_in && (S_ISFIFO(si.st_mode) || S_ISSOCK(si.st_mode)))
    return -ESPIPE; /* as splice(2) and pread(2) say for these */
  if (S_ISFIFO(si.st_mode) && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
    return -EINVAL; /* a pipe into itself: splice(2) refuses, a copy would spin */
  copy c = {.in = fd_in, .out = fd_out, .at_off = off_in != NULL,
            .in_is_file = S_ISREG(si.st_mode),
            .in_nb = !S_ISREG(si.st_mode) && o_nonblock(fd_in),
            .out_nb = !S_ISREG(so.st_mode) && o_nonblock(fd_out),
            .off = off_in ? *off_in : 0, .n = n,
            .deadline = deadline, .pipe = {-1, -1}};
  /* On a plain thread, splice(2) into a blocking socket waits in the
   * kernel for all the room it needs once poll(2) said there was some (the
   * kernel looks at the socket's O_NONBLOCK, not at SPLICE_F_NONBLOCK), and
   * nothing interrupts it at the deadline. With a deadline, go through the
   * buffer there: its writes stop at the deadline. */
  bool buffered = deadline >= 0 && !weft__task_self() && S_ISSOCK(so.st_mode) &&
                  !o_nonblock(fd_out);
  int r = 0;
  if (n > 0 && buffered)
    r = copy_buffered(&c);
  else if (n > 0)
    r = S_ISFIFO(si.st_mode) && S_ISFIFO(so.st_mode) ? copy_direct(&c) : copy_via_pipe(&c);
  if (c.pipe[0] >= 0) {
    close(c.pipe[0]);
    close(c.pipe[1]);
  }
  if (off_in)
    *off_in += (int64_t)c.done; /* bytes not written are read again next time */
  else if (r < 0 && c.pending > 0 && c.in_is_file) {
    saved = errno;
    (void)lseek(fd_in, -(off_t)c.pending, SEEK_CUR); /* give them back */
    errno = saved;
  }
  if (done)
    *done = c.done;
  return r < 0 ? r : (ssize_t)c.done;
}

ssize_t weft_copy(int fd_in, int64_t *off_in, int fd_out, size_t n, size_t *done)
{
  return weft_copy_dl(fd_in, off_in, fd_out, n, done, WEFT_NO_DEADLINE);
}
