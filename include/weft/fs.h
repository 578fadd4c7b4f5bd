/* SPDX-License-Identifier: MIT */
/*
 * Files and directories.
 *
 * Every call looks blocking and follows the system call it is named after,
 * with -errno results (weft/common.h): e.g. -ENOENT, -EEXIST, -ENOTDIR,
 * -EISDIR, -EBADF, -EACCES. Paths are ordinary C strings; a NULL path (or
 * NULL output pointer where one is required) gives -EFAULT without any
 * system call. Relative paths are relative to the process's working
 * directory, as for the system calls.
 *
 * How a call runs, inside a coroutine:
 *   - as one io_uring operation when the running kernel has one for it
 *     (read/write/readv/writev at an offset, openat, close, statx, fsync,
 *     fallocate, ftruncate (Linux 6.9+), mkdirat, renameat, unlinkat,
 *     linkat, symlinkat). The kernel is probed once per process; if it
 *     lacks the operation, or refuses a metadata operation with -EINVAL /
 *     -EOPNOTSUPP, the call is run again as the plain system call on the
 *     blocking pool, which gives the authoritative answer.
 *   - on the blocking pool (weft/blocking.h) when io_uring has no operation
 *     (getdents64 for directory listing and du, readlink, realpath, chmod).
 *     The pool runs the system call as it is: on kernels before 5.6, whose
 *     io_uring has no read or write, a data call on an O_NONBLOCK descriptor
 *     that is not ready gives -EAGAIN there instead of waiting.
 * Either way the coroutine is suspended and its shard keeps running other
 * coroutines. Paths, buffers and statx records handed to a call must stay
 * valid until it returns (they do when they are the caller's locals: the
 * call never returns before the kernel and the pool are done with them).
 *
 * Deadlines and cancellation: _dl variants take an absolute deadline
 * (-ETIMEDOUT when it passes) and every call honours the task's deadline
 * scope (weft_deadline_push) and weft_cancel (-ECANCELED). An operation
 * that completed before the cancellation took effect returns its real
 * result (an opened descriptor or written bytes are never lost). A job
 * already running on the blocking pool cannot be interrupted: the call
 * waits for it and returns its result; one still queued is dropped.
 * A call on the io_uring path gives -EBUSY, as in weft/io.h, when the
 * shard's submission queue stays full even after a submit; a call on the
 * pool gives -ENOMEM or -EAGAIN when the pool has no thread and none can be
 * started (weft/blocking.h; the call did not run).
 *
 * On a plain thread (not a coroutine) each call runs the plain system call
 * on the calling thread, which blocks. A deadline then bounds reads and
 * writes on pipes and sockets as in weft/io.h (poll(2), then a transfer
 * that does not block), but not the system call itself on a regular file
 * or in the other calls; a deadline that has already passed fails every
 * call at once, as in a coroutine. errno is never changed, on any thread.
 *
 * Differences from the system calls, inherited from io_uring:
 *   - weft_open of a FIFO for reading returns without waiting for a writer
 *     (io_uring opens it non-blocking); weft's reads then wait for a writer
 *     and its data, so weft_read/weft_read_file behave as after open(2).
 *     Opening a FIFO for writing with no reader, which io_uring refuses with
 *     -ENXIO, is retried in blocking mode and waits for a reader as open(2).
 *     On a kernel without io_uring's openat (before 5.6) the open runs on
 *     the pool as open(2) instead: a FIFO open then waits for its peer
 *     either way, and neither the deadline nor a cancel ends that wait (a
 *     running pool job is waited for, see above).
 *   - Reads and writes at the file position (weft_read, weft_write,
 *     weft_readv, weft_writev) in flight at once on one regular file do not
 *     take the position in turn (see weft/io.h): use offsets of your own.
 *   - Positional calls (weft_pread, weft_pwrite, weft_preadv, weft_pwritev
 *     and their full-length forms) on a pipe or socket may transfer at the
 *     stream position instead of failing with -ESPIPE: io_uring does not
 *     check. The system-call paths (plain thread, pool) give -ESPIPE.
 */
#ifndef WEFT_FS_H
#define WEFT_FS_H

#include "common.h"
#include "io.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Declared by <sys/uio.h> and <sys/stat.h> (struct statx: with _GNU_SOURCE,
 * or <linux/stat.h>); only pointers to them appear here. */
struct iovec;
struct stat;
struct statx;

/* ---- descriptors --------------------------------------------------------- */

/* openat(2): a new descriptor (>= 0). flags and mode as for open(2); add
 * O_CLOEXEC yourself if you want it. In a coroutine the deadline ends a wait
 * for a FIFO's peer (see above for kernels before 5.6); on a plain thread
 * open(2) waits for it. */
WEFT_API int weft_open(const char *path, int flags, mode_t mode);
WEFT_API int weft_open_dl(const char *path, int flags, mode_t mode, int64_t deadline);
WEFT_API int weft_openat(int dirfd, const char *path, int flags, mode_t mode);
WEFT_API int weft_openat_dl(int dirfd, const char *path, int flags, mode_t mode,
                            int64_t deadline);

/* close(2): 0 or -errno. The descriptor is released whatever the result -
 * also when the task is cancelled or its deadline scope has passed (then
 * the plain close(2) runs) - so never retry a close. -EBADF for a
 * descriptor that is not open. */
WEFT_API int weft_close(int fd);

/* pread(2)/pwrite(2): up to n bytes (at most 2 GiB at once) at offset `off`
 * (>= 0, else -EINVAL); the file position is not used or changed. A read
 * returns fewer bytes than asked at end of file (0 at or past it) and may
 * also return fewer before it; use weft_pread_full to get all.
 * Inside a coroutine weft_pread first tries the read without waiting
 * (preadv2 with RWF_NOWAIT, served from the page cache on the shard itself)
 * when no other work waits on the shard, and goes through io_uring
 * otherwise or when the data is not cached. */
WEFT_API ssize_t weft_pread(int fd, void *buf, size_t n, off_t off);
WEFT_API ssize_t weft_pread_dl(int fd, void *buf, size_t n, off_t off, int64_t deadline);
WEFT_API ssize_t weft_pwrite(int fd, const void *buf, size_t n, off_t off);
WEFT_API ssize_t weft_pwrite_dl(int fd, const void *buf, size_t n, off_t off,
                                int64_t deadline);

/* readv(2)/writev(2) at the file position (any descriptor: pipes and sockets
 * too), and preadv(2)/pwritev(2) at offset `off` (>= 0, else -EINVAL).
 * iovcnt 0..IOV_MAX (1024), else -EINVAL; a NULL iov with iovcnt > 0 is
 * -EFAULT. The iovec array and the buffers must stay valid until the call
 * returns. Results as read(2)/write(2):
 * bytes transferred, possibly fewer than the total. */
WEFT_API ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt);
WEFT_API ssize_t weft_readv_dl(int fd, const struct iovec *iov, int iovcnt, int64_t deadline);
WEFT_API ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt);
WEFT_API ssize_t weft_writev_dl(int fd, const struct iovec *iov, int iovcnt, int64_t deadline);
WEFT_API ssize_t weft_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off);
WEFT_API ssize_t weft_preadv_dl(int fd, const struct iovec *iov, int iovcnt, off_t off,
                                int64_t deadline);
WEFT_API ssize_t weft_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off);
WEFT_API ssize_t weft_pwritev_dl(int fd, const struct iovec *iov, int iovcnt, off_t off,
                                 int64_t deadline);

/* Full-length transfers, looping over short reads and writes (and -EINTR):
 *   weft_read_full / weft_pread_full read until n bytes are in buf or end of
 *   file: they return n, or fewer only at end of file.
 *   weft_write_all / weft_pwrite_all write until all n bytes are written.
 * n == 0 returns 0 at once. On an error the result is the -errno of the
 * failing step (a write that returns 0 counts as -EIO); the bytes moved
 * before it are then reported only through the _dl variants' `done` (if not
 * NULL), which receives the count of bytes transferred on every path. The
 * deadline bounds the whole transfer. The read/write forms use the file
 * position (any descriptor), the p- forms offset `off` onwards: a negative
 * `off` is -EINVAL, checked before the n == 0 shortcut. */
WEFT_API ssize_t weft_read_full(int fd, void *buf, size_t n);
WEFT_API ssize_t weft_read_full_dl(int fd, void *buf, size_t n, size_t *done, int64_t deadline);
WEFT_API ssize_t weft_pread_full(int fd, void *buf, size_t n, off_t off);
WEFT_API ssize_t weft_pread_full_dl(int fd, void *buf, size_t n, off_t off, size_t *done,
                                    int64_t deadline);
WEFT_API ssize_t weft_write_all(int fd, const void *buf, size_t n);
WEFT_API ssize_t weft_write_all_dl(int fd, const void *buf, size_t n, size_t *done,
                                   int64_t deadline);
WEFT_API ssize_t weft_pwrite_all(int fd, const void *buf, size_t n, off_t off);
WEFT_API ssize_t weft_pwrite_all_dl(int fd, const void *buf, size_t n, off_t off, size_t *done,
                                    int64_t deadline);

/* fsync(2), or fdatasync(2) with WEFT_FSYNC_DATA. 0 or -errno (-EINVAL for
 * unknown flags or a descriptor that cannot be synced, e.g. a pipe). */
#define WEFT_FSYNC_DATA 1u
WEFT_API int weft_fsync(int fd, unsigned flags);
WEFT_API int weft_fsync_dl(int fd, unsigned flags, int64_t deadline);

/* fallocate(2) (mode: 0 or FALLOC_FL_* from <fcntl.h>) and ftruncate(2).
 * 0 or -errno; -EINVAL for a negative offset/length, -EOPNOTSUPP when the
 * file system does not support the mode. */
WEFT_API int weft_fallocate(int fd, int mode, off_t off, off_t len);
WEFT_API int weft_ftruncate(int fd, off_t len);

/* statx(2): flags AT_* (AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH with "" to
 * describe dirfd itself, AT_STATX_*), mask STATX_*. 0 or -errno; *buf is
 * written only on success. */
WEFT_API int weft_statx(int dirfd, const char *path, int flags, unsigned mask,
                        struct statx *buf);

/* stat(2) / lstat(2) / fstat(2) filled from statx: every field of struct
 * stat as the libc calls fill it. 0 or -errno. */
WEFT_API int weft_stat(const char *path, struct stat *st);
WEFT_API int weft_lstat(const char *path, struct stat *st);
WEFT_API int weft_fstat(int fd, struct stat *st);

/* ---- whole files ----------------------------------------------------------- */

/* Reads the whole file at `path` into a new malloc'd buffer: *data (free it
 * with free()) and *len. Works for any readable file - regular files,
 * pipes and FIFOs (e.g. "/proc/self/fd/N"), /proc and /sys files - by
 * reading until end of file; the size stat reports is not trusted. The
 * buffer has one more byte, set to '\0', after the data. 0 or -errno
 * (-EISDIR for a directory, -ENOMEM, -EFBIG past SSIZE_MAX bytes); on
 * failure *data is NULL and *len 0. The deadline bounds the whole call. */
WEFT_API int weft_read_file(const char *path, char **data, size_t *len);
WEFT_API int weft_read_file_dl(const char *path, char **data, size_t *len, int64_t deadline);

/* Writes len bytes to the file at `path`, creating it (mode 0666 less the
 * umask) or truncating it. flags:
 *   WEFT_WRITE_FSYNC   the data is on stable storage when the call returns
 *                      (fsync of the file; a new file's directory entry is
 *                      not synced);
 *   WEFT_WRITE_EXCL    fail with -EEXIST if the file exists;
 *   WEFT_WRITE_APPEND  append instead of truncating.
 * 0 or -errno (-EINVAL for unknown flags). After an error the file may hold
 * part of the data. */
#define WEFT_WRITE_FSYNC 1u
#define WEFT_WRITE_EXCL 2u
#define WEFT_WRITE_APPEND 4u
WEFT_API int weft_write_file(const char *path, const void *data, size_t len, unsigned flags);
WEFT_API int weft_write_file_dl(const char *path, const void *data, size_t len, unsigned flags,
                                int64_t deadline);

/* ---- paths ----------------------------------------------------------------- */

/* mkdir(2): 0, -EEXIST if anything exists at path, -ENOENT if the parent
 * does not exist, -ENOTDIR if a component is not a directory. */
WEFT_API int weft_mkdir(const char *path, mode_t mode);

/* mkdir -p: creates path and any missing parents, all with `mode`. 0 when
 * path is (or already was) a directory, or a symlink to one. -ENOTDIR when
 * an existing component on the way is not a directory (e.g. a regular
 * file), -ENOENT when it is a dangling symlink (as mkdir(2); nothing is
 * made where it points), -EEXIST when path itself exists and is not a
 * directory (a dangling symlink included), -ENOENT for "". Safe against
 * concurrent creators of the same directories. */
WEFT_API int weft_mkdir_all(const char *path, mode_t mode);

/* renameat2(2): flags 0 (replace newpath if it exists), or one of
 *   WEFT_RENAME_NOREPLACE  -EEXIST if newpath exists;
 *   WEFT_RENAME_EXCHANGE   atomically swap oldpath and newpath (both must
 *                          exist, else -ENOENT).
 * -EINVAL for both or unknown flags (or a file system that cannot do them). */
#define WEFT_RENAME_NOREPLACE 1u
#define WEFT_RENAME_EXCHANGE 2u
WEFT_API int weft_rename(const char *oldpath, const char *newpath, unsigned flags);

/* unlink(2) (-EISDIR for a directory) and rmdir(2) (-ENOTDIR for a
 * non-directory, -ENOTEMPTY). */
WEFT_API int weft_unlink(const char *path);
WEFT_API int weft_rmdir(const char *path);

/* link(2) (a symlink oldpath is not followed) and symlink(2): 0, -EEXIST if
 * the new name exists. */
WEFT_API int weft_link(const char *oldpath, const char *newpath);
WEFT_API int weft_symlink(const char *target, const char *linkpath);

/* readlink(2), '\0'-terminated: the length of the target (without the
 * terminator). -ERANGE when buf cannot hold target and terminator (size 0
 * included): buf then holds the first `size` bytes of the target, with no
 * terminator. -EINVAL if path is not a symlink; on errors other than
 * -ERANGE buf is not written. Runs on the blocking pool. */
WEFT_API ssize_t weft_readlink(const char *path, char *buf, size_t size);

/* realpath(3): the canonical absolute path in a new malloc'd string *out
 * (free it). 0 or -errno (*out unchanged). Runs on the blocking pool. */
WEFT_API int weft_realpath(const char *path, char **out);

/* chmod(2) (follows symlinks). Runs on the blocking pool: io_uring has no
 * chmod. */
WEFT_API int weft_chmod(const char *path, mode_t mode);

/* ---- directories ------------------------------------------------------------ */

/* Entry types: the DT_* values of <dirent.h>. */
enum weft_file_type {
  WEFT_FT_UNKNOWN = 0,
  WEFT_FT_FIFO = 1,
  WEFT_FT_CHR = 2,
  WEFT_FT_DIR = 4,
  WEFT_FT_BLK = 6,
  WEFT_FT_REG = 8,
  WEFT_FT_LNK = 10,
  WEFT_FT_SOCK = 12,
};

typedef struct weft_dir weft_dir;

typedef struct weft_dirent {
  const char *name;   /* entry name; valid until the next weft_dir_next/close */
  uint64_t ino;       /* inode number */
  int type;           /* enum weft_file_type; resolved with an lstat when the
                         file system does not report it, UNKNOWN only if that
                         lstat fails (the entry vanished meanwhile, or the
                         directory can be read but not searched: EACCES) */
} weft_dirent;

/* Opens the directory at path for listing. 0 and *dir, or -errno (-ENOENT,
 * -ENOTDIR, -ENOMEM); *dir is not changed on failure. */
WEFT_API int weft_dir_open(weft_dir **dir, const char *path);

/* The next entry ("." and ".." are skipped): 1 and *ent filled, 0 at the
 * end, or -errno. Entries are read in batches with getdents64 on the
 * blocking pool. -EINVAL for a NULL dir, -EFAULT for a NULL ent (as every
 * output pointer here). */
WEFT_API int weft_dir_next(weft_dir *dir, weft_dirent *ent);

/* The directory's descriptor (for openat/statx relative to it); -EINVAL
 * for a NULL dir. */
WEFT_API int weft_dir_fd(const weft_dir *dir);

/* Closes the directory and frees it (NULL is fine). 0 or -errno from close. */
WEFT_API int weft_dir_close(weft_dir *dir);

/* Disk usage of the tree at path, symlinks not followed (a symlink counts
 * as an entry of its own), every hard link counted: */
typedef struct weft_du_totals {
  uint64_t bytes;      /* sum of st_size of the regular files */
  uint64_t disk_bytes; /* sum of st_blocks * 512 of every entry, directories
                          and path itself included (what du(1) reports) */
  uint64_t files;      /* regular files */
  uint64_t dirs;       /* directories, path itself included if it is one */
  uint64_t others;     /* symlinks, FIFOs, sockets, devices */
} weft_du_totals;

/* Walks the tree on the blocking pool, a batch of directories per job (so
 * cancellation and deadlines take effect between batches). Entries that
 * vanish during the walk are skipped. 0 and *out, or -errno (-ENOENT if
 * path does not exist, -ENOMEM, or the first other error met). */
WEFT_API int weft_du(const char *path, weft_du_totals *out);

#ifdef __cplusplus
}
#endif

#endif
