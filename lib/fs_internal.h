/* SPDX-License-Identifier: MIT */
/*
 * Shared by fs.c (descriptors, and the engine below), fs_path.c and
 * fs_dir.c, plus the test hooks of the fs layer.
 *
 * A file system call is described once, as a weft__fs_call, and run by
 * weft__fs_run either as an io_uring operation (when the kernel has the
 * opcode) or as the plain system call on the blocking pool (when it has
 * not, or refused a metadata operation with -EINVAL / -EOPNOTSUPP) - or
 * inline on a plain thread. Both paths give the same results; the tests
 * force the pool path to show it.
 */
#ifndef WEFT_LIB_FS_INTERNAL_H
#define WEFT_LIB_FS_INTERNAL_H

#include "op.h"

#include "weft/fs.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "uring_compat.h"

/* Test hooks. force_pool: every call takes the pool/system-call path.
 * refused: bit n set = treat opcode n as missing from the kernel.
 * nowait: weft_pread tries preadv2(RWF_NOWAIT) first (default on).
 * no_probe: the once-per-process probe fails as on a kernel before 5.6
 * (set it before the first call). */
extern atomic_bool weft__fs_force_pool;
extern _Atomic uint64_t weft__fs_refused;
extern atomic_bool weft__fs_nowait;
extern atomic_bool weft__fs_no_probe;

typedef struct weft__fs_call {
  int op;                /* IORING_OP_* (selects both the SQE and the syscall) */
  int fd;                /* descriptor, or directory fd of path */
  int fd2;               /* directory fd of path2 (renameat, linkat) */
  const char *path;      /* path (oldpath, symlink target) */
  const char *path2;     /* second path (newpath, link path) */
  void *buf;             /* data, iovec array or statx record */
  uint64_t len;          /* bytes, iovec count, fallocate length */
  int64_t off;           /* file offset (-1: file position), ftruncate length */
  int flags;             /* open/AT_/rename/fsync flags, fallocate mode */
  unsigned mode;         /* open/mkdir mode, statx mask */
  bool async;            /* io_uring: run in blocking mode (IOSQE_ASYNC) */
  bool via_pool;         /* out: the system call path was taken */
  bool ran;              /* out: the operation ran (was not dropped or
                            cancelled before it started) */
} weft__fs_call;

/* Runs c (see above). The result: >= 0 or -errno. */
long weft__fs_run(weft__fs_call *c, int64_t deadline);

/* Runs fn(arg) on the blocking pool (inline on a plain thread, with errno
 * saved and restored) and returns its result, or the error that kept it
 * from running (-ETIMEDOUT, -ECANCELED, -EAGAIN, -ENOMEM). A job that ran
 * returns its own result even if the deadline passed meanwhile. *ran (if
 * not NULL) tells which it was. */
long weft__fs_pool(long (*fn)(void *), void *arg, int64_t deadline, bool *ran);

#endif
