/* SPDX-License-Identifier: MIT */
/*
 * Files, descriptor side (include/weft/fs.h), and the engine every fs call
 * runs on (fs_internal.h): one io_uring operation where the kernel has the
 * opcode, the plain system call on the blocking pool where it has not.
 */
#include "fs_internal.h"
#include "../coro/fault.h"

#include "weft/blocking.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_IO ((size_t)INT_MAX & ~(size_t)4095)

/* Kernel-internal "restart" codes (include/linux/errno.h, not in the uapi). */
#define ERESTARTSYS_ 512
#define ERESTART_RESTARTBLOCK_ 516

atomic_bool weft__fs_force_pool;
_Atomic uint64_t weft__fs_refused;
atomic_bool weft__fs_nowait = true;
atomic_bool weft__fs_no_probe;

/* ---- which opcodes the kernel has -------------------------------------------
 * Probed once per process on the first call from a coroutine, through that
 * shard's ring (no extra ring). Bit n = opcode n; PROBED marks the result. */
#define PROBED (UINT64_C(1) << 63)
static _Atomic uint64_t uring_ops;

static uint64_t probe(weft__shard *sh)
{
  int saved = errno; /* liburing may set it */
  /* Room for the opcodes below 64, on the stack: a failed malloc must not
   * pass for a kernel without probing (see below). */
  _Alignas(struct io_uring_probe) unsigned char
      buf[sizeof(struct io_uring_probe) + 64 * sizeof(struct io_uring_probe_op)];
  memset(buf, 0, sizeof(buf));
  struct io_uring_probe *p = (struct io_uring_probe *)(void *)buf;
  int r = atomic_load_explicit(&weft__fs_no_probe, memory_order_relaxed)
              ? -EINVAL
              : io_uring_register_probe(&sh->ring, p, 64);
  uint64_t m = 0;
  if (r >= 0) {
    for (int op = 0; op < 63; op++)
      if (io_uring_opcode_supported(p, op))
        m |= UINT64_C(1) << op;
  } else {
    /* A kernel without probing is older than 5.6, which brought it along
     * with every opcode from IORING_OP_FALLOCATE on (openat, close, statx,
     * read, write, ...), and offset -1 for "the file position": of the
     * calls here only fsync can be trusted to io_uring. Trying the others
     * would not do - their -EINVAL is asked again on the pool only for
     * metadata calls, so a read would fail and a close would leave its
     * descriptor open. */
    m = UINT64_C(1) << IORING_OP_FSYNC;
  }
  errno = saved;
  atomic_store_explicit(&uring_ops, m | PROBED, memory_order_relaxed);
  return m;
}

static bool uring_has(weft__shard *sh, int op)
{
  if (atomic_load_explicit(&weft__fs_force_pool, memory_order_relaxed))
    return false;
  uint64_t m = atomic_load_explicit(&uring_ops, memory_order_relaxed);
  if (!(m & PROBED))
    m = probe(sh);
  m &= ~atomic_load_explicit(&weft__fs_refused, memory_order_relaxed);
  return (unsigned)op < 63 && ((m >> op) & 1);
}

/* ---- the two ways to run a call --------------------------------------------- */

static bool is_data(int op)
{
  return op == IORING_OP_READ || op == IORING_OP_WRITE || op == IORING_OP_READV ||
         op == IORING_OP_WRITEV;
}

/* Metadata operations do nothing when they fail with -EINVAL/-EOPNOTSUPP, so
 * running them again as the system call is safe - and tells an io_uring
 * limitation (an unknown opcode or flag) from a real error. */
static bool retry_on_pool(int op)
{
  return !is_data(op) && op != IORING_OP_CLOSE;
}

static void prep(struct io_uring_sqe *sqe, const weft__fs_call *c)
{
  switch (c->op) {
  case IORING_OP_READ:
    io_uring_prep_read(sqe, c->fd, c->buf, (unsigned)c->len, (uint64_t)c->off);
    break;
  case IORING_OP_WRITE:
    io_uring_prep_write(sqe, c->fd, c->buf, (unsigned)c->len, (uint64_t)c->off);
    break;
  case IORING_OP_READV:
    io_uring_prep_readv(sqe, c->fd, c->buf, (unsigned)c->len, (uint64_t)c->off);
    break;
  case IORING_OP_WRITEV:
    io_uring_prep_writev(sqe, c->fd, c->buf, (unsigned)c->len, (uint64_t)c->off);
    break;
  case IORING_OP_OPENAT:
    io_uring_prep_openat(sqe, c->fd, c->path, c->flags, c->mode);
    break;
  case IORING_OP_CLOSE:
    io_uring_prep_close(sqe, c->fd);
    break;
  case IORING_OP_FSYNC:
    io_uring_prep_fsync(sqe, c->fd, (c->flags & WEFT_FSYNC_DATA) ? IORING_FSYNC_DATASYNC : 0);
    break;
  case IORING_OP_FALLOCATE:
    io_uring_prep_fallocate(sqe, c->fd, c->flags, c->off, (off_t)c->len);
    break;
  case IORING_OP_FTRUNCATE:
    io_uring_prep_rw(IORING_OP_FTRUNCATE, sqe, c->fd, NULL, 0, (uint64_t)c->off);
    break;
  case IORING_OP_STATX:
    io_uring_prep_statx(sqe, c->fd, c->path, c->flags, c->mode, c->buf);
    break;
  case IORING_OP_MKDIRAT:
    io_uring_prep_mkdirat(sqe, c->fd, c->path, c->mode);
    break;
  case IORING_OP_RENAMEAT:
    io_uring_prep_renameat(sqe, c->fd, c->path, c->fd2, c->path2, (unsigned)c->flags);
    break;
  case IORING_OP_UNLINKAT:
    io_uring_prep_unlinkat(sqe, c->fd, c->path, c->flags);
    break;
  case IORING_OP_LINKAT:
    io_uring_prep_linkat(sqe, c->fd, c->path, c->fd2, c->path2, c->flags);
    break;
  case IORING_OP_SYMLINKAT:
    io_uring_prep_symlinkat(sqe, c->path, c->fd, c->path2);
    break;
  default:
    io_uring_prep_nop(sqe); /* not reached: every op above is listed */
    break;
  }
  if (c->async)
    sqe->flags |= IOSQE_ASYNC;
}

/* The system call; -errno on failure. Runs on a pool thread, or inline on a
 * plain thread (weft__fs_pool keeps errno unchanged for that). */
static long sys(weft__fs_call *c)
{
  long r;
  do {
    switch (c->op) {
    case IORING_OP_READ:
      r = c->off < 0 ? read(c->fd, c->buf, c->len) : pread(c->fd, c->buf, c->len, c->off);
      break;
    case IORING_OP_WRITE:
      r = c->off < 0 ? write(c->fd, c->buf, c->len) : pwrite(c->fd, c->buf, c->len, c->off);
      break;
    case IORING_OP_READV:
      r = c->off < 0 ? readv(c->fd, c->buf, (int)c->len) : preadv(c->fd, c->buf, (int)c->len, c->off);
      break;
    case IORING_OP_WRITEV:
      r = c->off < 0 ? writev(c->fd, c->buf, (int)c->len)
                     : pwritev(c->fd, c->buf, (int)c->len, c->off);
      break;
    case IORING_OP_OPENAT:
      r = openat(c->fd, c->path, c->flags, (mode_t)c->mode);
      break;
    case IORING_OP_CLOSE:
      /* Never retried: on Linux the descriptor is gone even after EINTR. */
      r = close(c->fd);
      return r < 0 && errno != EINTR ? -errno : 0;
    case IORING_OP_FSYNC:
      r = (c->flags & WEFT_FSYNC_DATA) ? fdatasync(c->fd) : fsync(c->fd);
      break;
    case IORING_OP_FALLOCATE:
      r = fallocate(c->fd, c->flags, c->off, (off_t)c->len);
      break;
    case IORING_OP_FTRUNCATE:
      r = ftruncate(c->fd, c->off);
      break;
    case IORING_OP_STATX:
      r = statx(c->fd, c->path, c->flags, c->mode, c->buf);
      break;
    case IORING_OP_MKDIRAT:
      r = mkdirat(c->fd, c->path, (mode_t)c->mode);
      break;
    case IORING_OP_RENAMEAT:
      r = renameat2(c->fd, c->path, c->fd2, c->path2, (unsigned)c->flags);
      break;
    case IORING_OP_UNLINKAT:
      r = unlinkat(c->fd, c->path, c->flags);
      break;
    case IORING_OP_LINKAT:
      r = linkat(c->fd, c->path, c->fd2, c->path2, c->flags);
      break;
    case IORING_OP_SYMLINKAT:
      r = symlinkat(c->path, c->fd, c->path2);
      break;
    default:
      return -EINVAL;
    }
  } while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

static long sys_job(void *arg)
{
  return sys(arg);
}

typedef struct pool_job {
  long (*fn)(void *);
  void *arg;
  long res;
  bool ran;
} pool_job;

/* Runs on a pool thread, or on a plain caller's own (see below): the
 * system call's errno stays where it ran. */
static void *pool_tramp(void *arg)
{
  pool_job *j = arg;
  int saved = errno;
  j->res = j->fn(j->arg);
  errno = saved;
  j->ran = true;
  return NULL;
}

long weft__fs_pool(long (*fn)(void *), void *arg, int64_t deadline, bool *ran)
{
  /* The job lives here: weft_blocking_dl returns only once the pool is done
   * with it (it waits out a running job and drops a queued one). On a plain
   * thread it runs fn right here - or not at all, for a deadline already
   * passed - and the system call's errno must not reach the caller, which
   * pool_tramp sees to. Not here: across the wait a coroutine may move to
   * another shard's thread, while errno's address, kept by the compiler
   * (glibc declares __errno_location const), would still be the first
   * thread's - whose errno the restore would then overwrite. */
  pool_job j = {.fn = fn, .arg = arg};
  int r = weft_blocking_dl(pool_tramp, &j, NULL, deadline);
  if (ran)
    *ran = j.ran;
  return j.ran ? j.res : r;
}

/* A plain thread's read or write: the fallback io.c's calls use too, whose
 * deadline holds on a pipe or socket that another thread drains (or fills)
 * between poll(2) and the transfer. */
static long plain_data(const weft__fs_call *c, int64_t deadline)
{
  bool vec = c->op == IORING_OP_READV || c->op == IORING_OP_WRITEV;
  bool write_op = c->op == IORING_OP_WRITE || c->op == IORING_OP_WRITEV;
  struct iovec one = {.iov_base = c->buf, .iov_len = c->len};
  return weft__plain_rw(c->fd, vec ? (const struct iovec *)c->buf : &one, vec ? (int)c->len : 1,
                        c->off, deadline, write_op);
}

long weft__fs_run(weft__fs_call *c, int64_t deadline)
{
  c->via_pool = false;
  c->ran = true;
  weft_task *t = weft__task_self();
  if (!t) {
    c->via_pool = true;
    /* Either way a deadline already passed starts nothing, as in a
     * coroutine (an open with O_TRUNC would empty the file that
     * weft_write_file_dl then fails to write). */
    return is_data(c->op) ? plain_data(c, deadline) : weft__fs_pool(sys_job, c, deadline, &c->ran);
  }
  if (uring_has(t->shard, c->op)) {
    weft__op op;
    struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
    if (!sqe) {
      c->ran = false;
      return op.res;
    }
    prep(sqe, c);
    long r = weft__op_wait(&op);
    if (op.res == -ECANCELED) {
      c->ran = false; /* cancelled before it ran (r may say -ETIMEDOUT) */
      return r;
    }
    /* Work a cancel interrupts on an io-wq thread (a blocking open) may
     * complete with the kernel's internal ERESTARTSYS (512) family or
     * -EINTR: never let the former out, and report either as what ended it. */
    if (r <= -ERESTARTSYS_ && r >= -ERESTART_RESTARTBLOCK_)
      r = -EINTR;
    if (r == -EINTR && op.cancel_requested) {
      bool cancelled = atomic_load_explicit(&t->cancelled, memory_order_relaxed);
      return op.timed_out && !cancelled ? -ETIMEDOUT : -ECANCELED;
    }
    if (!(retry_on_pool(c->op) && (r == -EINVAL || r == -EOPNOTSUPP)))
      return r;
  }
  c->via_pool = true;
  return weft__fs_pool(sys_job, c, deadline, &c->ran);
}

/* ---- open / close -------------------------------------------------------------- */

int weft_openat_dl(int dirfd, const char *path, int flags, mode_t mode, int64_t deadline)
{
  if (!path)
    return -EFAULT;
  weft__fs_call c = {.op = IORING_OP_OPENAT, .fd = dirfd, .path = path, .flags = flags,
                     .mode = mode};
  long r = weft__fs_run(&c, deadline);
  /* io_uring first tries the open without blocking, which turns "wait for
   * a FIFO's reader" into -ENXIO: run it again in blocking mode (on an
   * io-wq thread, where a cancel or the deadline can still interrupt it). */
  if (r == -ENXIO && !c.via_pool && (flags & O_ACCMODE) == O_WRONLY && !(flags & O_NONBLOCK)) {
    c.async = true;
    r = weft__fs_run(&c, deadline);
  }
  return (int)r;
}

int weft_openat(int dirfd, const char *path, int flags, mode_t mode)
{
  return weft_openat_dl(dirfd, path, flags, mode, WEFT_NO_DEADLINE);
}

int weft_open_dl(const char *path, int flags, mode_t mode, int64_t deadline)
{
  return weft_openat_dl(AT_FDCWD, path, flags, mode, deadline);
}

int weft_open(const char *path, int flags, mode_t mode)
{
  return weft_openat_dl(AT_FDCWD, path, flags, mode, WEFT_NO_DEADLINE);
}

/* True if fd is an io_uring instance's descriptor: io_uring's own close
 * refuses those (-EBADF, the descriptor left open). */
static bool is_ring_fd(int fd)
{
  char path[32], target[32];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  int saved = errno;
  ssize_t n = readlink(path, target, sizeof(target) - 1);
  errno = saved;
  if (n <= 0)
    return false;
  target[n] = '\0';
  return strcmp(target, "anon_inode:[io_uring]") == 0;
}

int weft_close(int fd)
{
  if (fd < 0)
    return -EBADF;
  weft__fs_call c = {.op = IORING_OP_CLOSE, .fd = fd};
  long r = weft__fs_run(&c, WEFT_NO_DEADLINE);
  if (r == -EBADF && c.ran && !c.via_pool && is_ring_fd(fd))
    c.ran = false; /* another ring: closed below, by close(2) */
  if (!c.ran) {
    /* Cancelled or past the deadline scope before it ran: a close must
     * still happen, or the caller leaks the descriptor. */
    int saved = errno;
    r = close(fd) < 0 && errno != EINTR ? -errno : 0;
    errno = saved;
  }
  return (int)r;
}

/* ---- reads and writes ------------------------------------------------------------ */

/* preadv2(RWF_NOWAIT): served from the page cache or -EAGAIN, never waits
 * for the disk. True with *res set when it gave the answer. */
static bool pread_nowait(weft_task *t, int fd, void *buf, size_t n, off_t off,
                         int64_t deadline, ssize_t *res)
{
  if (atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
    *res = -ECANCELED;
    return true;
  }
  int64_t dl = weft__deadline_for(t, deadline);
  if (dl >= 0 && dl <= weft__now()) {
    *res = -ETIMEDOUT;
    return true;
  }
  struct iovec iov = {.iov_base = buf, .iov_len = n};
  int saved = errno;
  ssize_t r = preadv2(fd, &iov, 1, off, RWF_NOWAIT);
  int e = errno;
  errno = saved;
  if (r >= 0) {
    *res = r;
    return true;
  }
  if (e == EAGAIN || e == EOPNOTSUPP || e == EINTR)
    return false; /* not cached, or the file cannot say: ask io_uring */
  *res = -e;
  return true;
}

ssize_t weft_pread_dl(int fd, void *buf, size_t n, off_t off, int64_t deadline)
{
  if (off < 0)
    return -EINVAL;
  if (n > MAX_IO)
    n = MAX_IO;
  weft_task *t = weft__task_self();
  ssize_t r;
  if (t && n && atomic_load_explicit(&weft__fs_nowait, memory_order_relaxed) &&
      !atomic_load_explicit(&weft__fs_force_pool, memory_order_relaxed) &&
      weft__shard_idle_otherwise(t->shard) && pread_nowait(t, fd, buf, n, off, deadline, &r))
    return r;
  weft__fs_call c = {.op = IORING_OP_READ, .fd = fd, .buf = buf, .len = n, .off = off};
  return weft__fs_run(&c, deadline);
}

ssize_t weft_pread(int fd, void *buf, size_t n, off_t off)
{
  return weft_pread_dl(fd, buf, n, off, WEFT_NO_DEADLINE);
}

ssize_t weft_pwrite_dl(int fd, const void *buf, size_t n, off_t off, int64_t deadline)
{
  if (off < 0)
    return -EINVAL;
  if (n > MAX_IO)
    n = MAX_IO;
  weft__fs_call c = {.op = IORING_OP_WRITE, .fd = fd, .buf = (void *)buf, .len = n, .off = off};
  return weft__fs_run(&c, deadline);
}

ssize_t weft_pwrite(int fd, const void *buf, size_t n, off_t off)
{
  return weft_pwrite_dl(fd, buf, n, off, WEFT_NO_DEADLINE);
}

/* Vectored, at `off` (-1: the file position). */
static ssize_t vec(int op, int fd, const struct iovec *iov, int iovcnt, off_t off,
                   int64_t deadline)
{
  if (iovcnt < 0 || iovcnt > IOV_MAX)
    return -EINVAL;
  /* The kernel says -EFAULT for a NULL array, but a plain thread's path
   * reads the array itself first (to total it): say it here, for all. */
  if (!iov && iovcnt > 0)
    return -EFAULT;
  weft__fs_call c = {.op = op, .fd = fd, .buf = (void *)iov, .len = (uint64_t)iovcnt, .off = off};
  return weft__fs_run(&c, deadline);
}

ssize_t weft_readv_dl(int fd, const struct iovec *iov, int iovcnt, int64_t deadline)
{
  return vec(IORING_OP_READV, fd, iov, iovcnt, -1, deadline);
}

ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt)
{
  return vec(IORING_OP_READV, fd, iov, iovcnt, -1, WEFT_NO_DEADLINE);
}

ssize_t weft_writev_dl(int fd, const struct iovec *iov, int iovcnt, int64_t deadline)
{
  return vec(IORING_OP_WRITEV, fd, iov, iovcnt, -1, deadline);
}

ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt)
{
  return vec(IORING_OP_WRITEV, fd, iov, iovcnt, -1, WEFT_NO_DEADLINE);
}

ssize_t weft_preadv_dl(int fd, const struct iovec *iov, int iovcnt, off_t off, int64_t deadline)
{
  return off < 0 ? -EINVAL : vec(IORING_OP_READV, fd, iov, iovcnt, off, deadline);
}

ssize_t weft_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
  return weft_preadv_dl(fd, iov, iovcnt, off, WEFT_NO_DEADLINE);
}

ssize_t weft_pwritev_dl(int fd, const struct iovec *iov, int iovcnt, off_t off, int64_t deadline)
{
  return off < 0 ? -EINVAL : vec(IORING_OP_WRITEV, fd, iov, iovcnt, off, deadline);
}

ssize_t weft_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
  return weft_pwritev_dl(fd, iov, iovcnt, off, WEFT_NO_DEADLINE);
}

/* ---- full-length transfers ---------------------------------------------------------- */

/* One read/write of up to n bytes at off (-1: the file position). */
static ssize_t xfer(bool wr, int fd, char *buf, size_t n, off_t off, int64_t deadline)
{
  if (n > MAX_IO)
    n = MAX_IO;
  if (!wr && off >= 0)
    return weft_pread_dl(fd, buf, n, off, deadline); /* with its cached-read path */
  weft__fs_call c = {.op = wr ? IORING_OP_WRITE : IORING_OP_READ, .fd = fd, .buf = buf,
                     .len = n, .off = off};
  return weft__fs_run(&c, deadline);
}

static ssize_t full(bool wr, int fd, const void *buf, size_t n, off_t off, size_t *done_out,
                    int64_t deadline)
{
  size_t done = 0;
  ssize_t r = 0;
  while (done < n) {
    r = xfer(wr, fd, (char *)buf + done, n - done, off < 0 ? -1 : off + (off_t)done, deadline);
    if (r == -EINTR)
      continue;
    if (r < 0)
      break;
    if (r == 0) {
      if (wr)
        r = -EIO; /* no progress and no error: never loop on it */
      break;      /* a read: end of file */
    }
    done += (size_t)r;
  }
  if (done_out)
    *done_out = done;
  return r < 0 ? r : (ssize_t)done;
}

ssize_t weft_read_full_dl(int fd, void *buf, size_t n, size_t *done, int64_t deadline)
{
  return full(false, fd, buf, n, -1, done, deadline);
}

ssize_t weft_read_full(int fd, void *buf, size_t n)
{
  return full(false, fd, buf, n, -1, NULL, WEFT_NO_DEADLINE);
}

/* The positional forms: a negative offset is -EINVAL (not "the file position"). */
static ssize_t pfull(bool wr, int fd, const void *buf, size_t n, off_t off, size_t *done,
                     int64_t deadline)
{
  if (off >= 0)
    return full(wr, fd, buf, n, off, done, deadline);
  if (done)
    *done = 0;
  return -EINVAL;
}

ssize_t weft_pread_full_dl(int fd, void *buf, size_t n, off_t off, size_t *done,
                           int64_t deadline)
{
  return pfull(false, fd, buf, n, off, done, deadline);
}

ssize_t weft_pread_full(int fd, void *buf, size_t n, off_t off)
{
  return weft_pread_full_dl(fd, buf, n, off, NULL, WEFT_NO_DEADLINE);
}

ssize_t weft_write_all_dl(int fd, const void *buf, size_t n, size_t *done, int64_t deadline)
{
  return full(true, fd, buf, n, -1, done, deadline);
}

ssize_t weft_write_all(int fd, const void *buf, size_t n)
{
  return full(true, fd, buf, n, -1, NULL, WEFT_NO_DEADLINE);
}

ssize_t weft_pwrite_all_dl(int fd, const void *buf, size_t n, off_t off, size_t *done,
                           int64_t deadline)
{
  return pfull(true, fd, buf, n, off, done, deadline);
}

ssize_t weft_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
  return weft_pwrite_all_dl(fd, buf, n, off, NULL, WEFT_NO_DEADLINE);
}

/* ---- sync, space, size, status ----------------------------------------------------- */

int weft_fsync_dl(int fd, unsigned flags, int64_t deadline)
{
  if (flags & ~WEFT_FSYNC_DATA)
    return -EINVAL;
  weft__fs_call c = {.op = IORING_OP_FSYNC, .fd = fd, .flags = (int)flags};
  return (int)weft__fs_run(&c, deadline);
}

int weft_fsync(int fd, unsigned flags)
{
  return weft_fsync_dl(fd, flags, WEFT_NO_DEADLINE);
}

int weft_fallocate(int fd, int mode, off_t off, off_t len)
{
  /* io_uring carries the length in a u64: keep the syscall's EINVAL rule. */
  if (off < 0 || len <= 0)
    return -EINVAL;
  weft__fs_call c = {.op = IORING_OP_FALLOCATE, .fd = fd, .flags = mode, .off = off,
                     .len = (uint64_t)len};
  return (int)weft__fs_run(&c, WEFT_NO_DEADLINE);
}

int weft_ftruncate(int fd, off_t len)
{
  if (len < 0)
    return -EINVAL;
  weft__fs_call c = {.op = IORING_OP_FTRUNCATE, .fd = fd, .off = len};
  return (int)weft__fs_run(&c, WEFT_NO_DEADLINE);
}

int weft_statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *buf)
{
  if (!path || !buf)
    return -EFAULT;
  weft__fs_call c = {.op = IORING_OP_STATX, .fd = dirfd, .path = path, .flags = flags,
                     .mode = mask, .buf = buf};
  return (int)weft__fs_run(&c, WEFT_NO_DEADLINE);
}

/* struct stat from statx, field by field as glibc's own fallback does. */
static int stat_via_statx(int dirfd, const char *path, int flags, struct stat *st)
{
  if (!path || !st)
    return -EFAULT;
  struct statx x;
  int r = weft_statx(dirfd, path, flags | AT_STATX_SYNC_AS_STAT, STATX_BASIC_STATS, &x);
  if (r < 0)
    return r;
  memset(st, 0, sizeof(*st));
  st->st_dev = makedev(x.stx_dev_major, x.stx_dev_minor);
  st->st_ino = x.stx_ino;
  st->st_mode = x.stx_mode;
  st->st_nlink = x.stx_nlink;
  st->st_uid = x.stx_uid;
  st->st_gid = x.stx_gid;
  st->st_rdev = makedev(x.stx_rdev_major, x.stx_rdev_minor);
  st->st_size = (off_t)x.stx_size;
  st->st_blksize = x.stx_blksize;
  st->st_blocks = (blkcnt_t)x.stx_blocks;
  st->st_atim.tv_sec = x.stx_atime.tv_sec;
  st->st_atim.tv_nsec = x.stx_atime.tv_nsec;
  st->st_mtim.tv_sec = x.stx_mtime.tv_sec;
  st->st_mtim.tv_nsec = x.stx_mtime.tv_nsec;
  st->st_ctim.tv_sec = x.stx_ctime.tv_sec;
  st->st_ctim.tv_nsec = x.stx_ctime.tv_nsec;
  return 0;
}

int weft_stat(const char *path, struct stat *st)
{
  return stat_via_statx(AT_FDCWD, path, 0, st);
}

int weft_lstat(const char *path, struct stat *st)
{
  return stat_via_statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, st);
}

int weft_fstat(int fd, struct stat *st)
{
  /* statx(AT_FDCWD, "", AT_EMPTY_PATH) would describe the working
   * directory; fstat(2) says EBADF for any negative descriptor. */
  if (fd < 0)
    return -EBADF;
  return stat_via_statx(fd, "", AT_EMPTY_PATH, st);
}

/* ---- whole files ------------------------------------------------------------------- */

int weft_read_file_dl(const char *path, char **data, size_t *len, int64_t deadline)
{
  if (!data || !len)
    return -EFAULT;
  *data = NULL;
  *len = 0;
  if (!path)
    return -EFAULT;
  int fd = weft_openat_dl(AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOCTTY, 0, deadline);
  if (fd < 0)
    return fd;
  /* Read until end of file into a doubling buffer: st_size is 0 for /proc
   * files and meaningless for pipes, so it is not even asked for. */
  size_t cap = 16384, used = 0;
  char *b = weft__malloc_plain(cap);
  ssize_t r = b ? 0 : -ENOMEM;
  while (b) {
    if (cap - used < 2) {
      if (cap > (size_t)SSIZE_MAX / 2) {
        r = -EFBIG;
        break;
      }
      char *nb = weft__realloc(b, cap * 2);
      if (!nb) {
        r = -ENOMEM;
        break;
      }
      b = nb;
      cap *= 2;
    }
    r = xfer(false, fd, b + used, cap - used - 1, -1, deadline);
    if (r == -EINTR)
      continue;
    if (r <= 0)
      break;
    used += (size_t)r;
  }
  weft_close(fd);
  if (r < 0) {
    free(b);
    return (int)r;
  }
  b[used] = '\0';
  *data = b;
  *len = used;
  return 0;
}

int weft_read_file(const char *path, char **data, size_t *len)
{
  return weft_read_file_dl(path, data, len, WEFT_NO_DEADLINE);
}

int weft_write_file_dl(const char *path, const void *data, size_t len, unsigned flags,
                       int64_t deadline)
{
  if (flags & ~(WEFT_WRITE_FSYNC | WEFT_WRITE_EXCL | WEFT_WRITE_APPEND))
    return -EINVAL;
  if (!path || (!data && len))
    return -EFAULT;
  int oflags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY;
  oflags |= (flags & WEFT_WRITE_APPEND) ? O_APPEND : O_TRUNC;
  if (flags & WEFT_WRITE_EXCL)
    oflags |= O_EXCL;
  int fd = weft_openat_dl(AT_FDCWD, path, oflags, 0666, deadline);
  if (fd < 0)
    return fd;
  ssize_t r = full(true, fd, data, len, -1, NULL, deadline);
  if (r >= 0 && (flags & WEFT_WRITE_FSYNC))
    r = weft_fsync_dl(fd, 0, deadline);
  int cr = weft_close(fd); /* reports delayed write errors (e.g. NFS) */
  if (r < 0)
    return (int)r;
  return cr;
}

int weft_write_file(const char *path, const void *data, size_t len, unsigned flags)
{
  return weft_write_file_dl(path, data, len, flags, WEFT_NO_DEADLINE);
}
