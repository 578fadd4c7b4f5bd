/* SPDX-License-Identifier: MIT */
/*
 * Files, path side (include/weft/fs.h): mkdir (and mkdir -p), rename,
 * unlink, rmdir, link, symlink on io_uring through the fs engine
 * (fs_internal.h); readlink, realpath and chmod on the blocking pool, as
 * io_uring has no operation for them.
 */
#include "fs_internal.h"
#include "../coro/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(WEFT_RENAME_NOREPLACE == RENAME_NOREPLACE, "renameat2 flag values");
_Static_assert(WEFT_RENAME_EXCHANGE == RENAME_EXCHANGE, "renameat2 flag values");

static int run_path(weft__fs_call *c)
{
  if (!c->path || ((c->op == IORING_OP_RENAMEAT || c->op == IORING_OP_LINKAT ||
                    c->op == IORING_OP_SYMLINKAT) && !c->path2))
    return -EFAULT;
  return (int)weft__fs_run(c, WEFT_NO_DEADLINE);
}

int weft_mkdir(const char *path, mode_t mode)
{
  weft__fs_call c = {.op = IORING_OP_MKDIRAT, .fd = AT_FDCWD, .path = path, .mode = mode};
  return run_path(&c);
}

/* After mkdir said -EEXIST: 0 if path is a directory (or a symlink to one),
 * else the error for it being in the way - -EEXIST for the last component,
 * -ENOTDIR (or -ENOENT for a dangling symlink) for one on the way. */
static int in_the_way(const char *path, bool last)
{
  struct statx x;
  int r = weft_statx(AT_FDCWD, path, 0, STATX_TYPE, &x);
  if (r == 0 && S_ISDIR(x.stx_mode))
    return 0;
  /* What statx says of a name that is there but leads to no directory: a
   * symlink dangling, looping, through a non-directory or out of reach.
   * Any other failure (a cancel, the deadline, no SQE or pool thread)
   * tells nothing about path, so it is the result - not "in the way". */
  if (r < 0 && r != -ENOENT && r != -ELOOP && r != -ENOTDIR && r != -EACCES)
    return r;
  if (last)
    return -EEXIST;
  return r < 0 ? r : -ENOTDIR;
}

int weft_mkdir_all(const char *path, mode_t mode)
{
  if (!path)
    return -EFAULT;
  size_t n = strlen(path);
  if (!n)
    return -ENOENT;
  char *p = weft__malloc_plain(n + 1);
  if (!p)
    return -ENOMEM;
  memcpy(p, path, n + 1);
  while (n > 1 && p[n - 1] == '/')
    p[--n] = '\0'; /* "a/b/" is "a/b"; "/" stays */

  /* Up: try the whole path first (the common case: only the last component
   * is missing), and cut components off while the parent is missing. Each
   * cut writes one '\0' where a run of slashes starts. */
  int r;
  for (;;) {
    r = weft_mkdir(p, mode);
    if (r != -ENOENT)
      break;
    char *s = strrchr(p, '/');
    while (s && s > p && s[-1] == '/')
      s--;
    if (!s || s == p)
      break; /* nothing above to create: the error stands */
    *s = '\0';
  }
  /* Down: put the components back one by one (each cut becomes '/' again)
   * and create them. -EEXIST is fine for a directory: someone else may be
   * creating the same tree. */
  for (;;) {
    size_t len = strlen(p);
    if (r == -EEXIST)
      r = in_the_way(p, len == n);
    if (r < 0 || len == n)
      break;
    p[len] = '/';
    r = weft_mkdir(p, mode);
  }
  free(p);
  return r;
}

int weft_rename(const char *oldpath, const char *newpath, unsigned flags)
{
  if (flags & ~(WEFT_RENAME_NOREPLACE | WEFT_RENAME_EXCHANGE))
    return -EINVAL;
  weft__fs_call c = {.op = IORING_OP_RENAMEAT, .fd = AT_FDCWD, .path = oldpath,
                     .fd2 = AT_FDCWD, .path2 = newpath, .flags = (int)flags};
  return run_path(&c);
}

int weft_unlink(const char *path)
{
  weft__fs_call c = {.op = IORING_OP_UNLINKAT, .fd = AT_FDCWD, .path = path};
  return run_path(&c);
}

int weft_rmdir(const char *path)
{
  weft__fs_call c = {.op = IORING_OP_UNLINKAT, .fd = AT_FDCWD, .path = path,
                     .flags = AT_REMOVEDIR};
  return run_path(&c);
}

int weft_link(const char *oldpath, const char *newpath)
{
  weft__fs_call c = {.op = IORING_OP_LINKAT, .fd = AT_FDCWD, .path = oldpath,
                     .fd2 = AT_FDCWD, .path2 = newpath};
  return run_path(&c);
}

int weft_symlink(const char *target, const char *linkpath)
{
  weft__fs_call c = {.op = IORING_OP_SYMLINKAT, .fd = AT_FDCWD, .path = target,
                     .path2 = linkpath};
  return run_path(&c);
}

/* ---- on the blocking pool ------------------------------------------------------
 * Each job gets a record on the caller's stack; weft__fs_pool returns only
 * when the pool is done with it. */

typedef struct path_job {
  const char *path;
  char *buf;      /* readlink: the caller's buffer */
  size_t size;    /* readlink: its size */
  char **out;     /* realpath: where the result goes */
  mode_t mode;    /* chmod */
} path_job;

static long readlink_job(void *arg)
{
  path_job *j = arg;
  char one;
  /* readlink(2) rejects a 0-byte buffer with EINVAL; with 1 byte it still
   * tells "no such link" apart from "does not fit". */
  char *b = j->size ? j->buf : &one;
  size_t sz = j->size ? j->size : 1;
  ssize_t r = readlink(j->path, b, sz);
  if (r < 0)
    return -errno;
  if ((size_t)r >= j->size)
    return -ERANGE; /* no room for the terminator: it may be truncated */
  b[r] = '\0';
  return r;
}

ssize_t weft_readlink(const char *path, char *buf, size_t size)
{
  if (!path || (!buf && size))
    return -EFAULT;
  path_job j = {.path = path, .buf = buf, .size = size};
  return weft__fs_pool(readlink_job, &j, WEFT_NO_DEADLINE, NULL);
}

static long realpath_job(void *arg)
{
  path_job *j = arg;
  char *r = realpath(j->path, NULL);
  if (!r)
    return -errno;
  *j->out = r;
  return 0;
}

int weft_realpath(const char *path, char **out)
{
  if (!path || !out)
    return -EFAULT;
  path_job j = {.path = path, .out = out};
  return (int)weft__fs_pool(realpath_job, &j, WEFT_NO_DEADLINE, NULL);
}

static long chmod_job(void *arg)
{
  path_job *j = arg;
  return fchmodat(AT_FDCWD, j->path, j->mode, 0) < 0 ? -errno : 0;
}

int weft_chmod(const char *path, mode_t mode)
{
  if (!path)
    return -EFAULT;
  path_job j = {.path = path, .mode = mode};
  return (int)weft__fs_pool(chmod_job, &j, WEFT_NO_DEADLINE, NULL);
}
