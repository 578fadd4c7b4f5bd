/* SPDX-License-Identifier: MIT */
/*
 * Directories (include/weft/fs.h): listing with getdents64 and du, both on
 * the blocking pool - io_uring has no getdents operation. The directory
 * itself is opened through io_uring.
 */
#include "fs_internal.h"
#include "../coro/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(WEFT_FT_UNKNOWN, DT_UNKNOWN) && SAME(WEFT_FT_FIFO, DT_FIFO) &&
                   SAME(WEFT_FT_CHR, DT_CHR) && SAME(WEFT_FT_DIR, DT_DIR) &&
                   SAME(WEFT_FT_BLK, DT_BLK) && SAME(WEFT_FT_REG, DT_REG) &&
                   SAME(WEFT_FT_LNK, DT_LNK) && SAME(WEFT_FT_SOCK, DT_SOCK),
               "weft_file_type mirrors DT_*");
#undef SAME

/* One getdents64 batch: large enough that a typical directory is one job. */
#define DIR_BUF 32768

static bool is_dot(const char *name)
{
  return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]));
}

/* ---- listing ------------------------------------------------------------------------ */

struct weft_dir {
  int fd;
  bool eof;          /* getdents64 returned 0 */
  size_t pos, end;   /* the unread records are buf[pos, end) */
  uint64_t buf[DIR_BUF / 8]; /* struct dirent64 records (8-aligned) */
};

/* Pool job: the next batch of records, with every DT_UNKNOWN (file systems
 * that do not fill d_type) resolved by an lstat relative to the directory. */
static long refill_job(void *arg)
{
  weft_dir *d = arg;
  char *base = (char *)d->buf;
  ssize_t n;
  do
    n = getdents64(d->fd, base, sizeof(d->buf));
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -errno;
  for (ssize_t off = 0; off < n;) {
    struct dirent64 *e = (struct dirent64 *)(void *)(base + off);
    off += e->d_reclen;
    struct stat st;
    if (e->d_type == DT_UNKNOWN && !is_dot(e->d_name) &&
        fstatat(d->fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
      e->d_type = (unsigned char)IFTODT(st.st_mode);
  }
  return n;
}

int weft_dir_open(weft_dir **dir, const char *path)
{
  if (!dir || !path)
    return -EFAULT;
  weft_dir *d = weft__malloc_plain(sizeof(*d));
  if (!d)
    return -ENOMEM;
  int fd = weft_open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) {
    free(d);
    return fd;
  }
  d->fd = fd;
  d->eof = false;
  d->pos = d->end = 0;
  *dir = d;
  return 0;
}

int weft_dir_next(weft_dir *d, weft_dirent *ent)
{
  if (!d)
    return -EINVAL;
  if (!ent)
    return -EFAULT;
  for (;;) {
    while (d->pos < d->end) {
      struct dirent64 *e = (struct dirent64 *)(void *)((char *)d->buf + d->pos);
      d->pos += e->d_reclen;
      if (is_dot(e->d_name))
        continue;
      ent->name = e->d_name;
      ent->ino = e->d_ino;
      ent->type = e->d_type;
      return 1;
    }
    if (d->eof)
      return 0;
    /* A job dropped before it ran (cancel, deadline) leaves d as it was. */
    long r = weft__fs_pool(refill_job, d, WEFT_NO_DEADLINE, NULL);
    if (r < 0)
      return (int)r;
    d->pos = 0;
    d->end = (size_t)r;
    d->eof = r == 0;
  }
}

int weft_dir_fd(const weft_dir *d)
{
  return d ? d->fd : -EINVAL;
}

int weft_dir_close(weft_dir *d)
{
  if (!d)
    return 0;
  int r = weft_close(d->fd);
  free(d);
  return r;
}

/* ---- du ------------------------------------------------------------------------------- */

/* Directories scanned per pool job at most, and entries looked at: bounds
 * how long a cancel or a deadline waits for the running job. */
#define DU_DIRS_PER_JOB 64
#define DU_ENTRIES_PER_JOB 8192

typedef struct du_walk {
  weft_du_totals t;
  char **todo;       /* directories still to scan (malloc'd paths), a stack */
  size_t n, cap;
  void *buf;         /* getdents64 buffer, DIR_BUF bytes */
} du_walk;

static void account(weft_du_totals *t, const struct stat *st)
{
  t->disk_bytes += (uint64_t)st->st_blocks * 512;
  if (S_ISDIR(st->st_mode))
    t->dirs++;
  else if (S_ISREG(st->st_mode)) {
    t->files++;
    t->bytes += (uint64_t)st->st_size;
  } else
    t->others++;
}

static int push(du_walk *w, char *path)
{
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 64;
    char **nt = weft__realloc(w->todo, cap * sizeof(*nt));
    if (!nt)
      return -ENOMEM;
    w->todo = nt;
    w->cap = cap;
  }
  w->todo[w->n++] = path;
  return 0;
}

/* open(2) of a directory to scan, also one whose path is PATH_MAX bytes or
 * longer (a deep tree is still a tree: du(1) measures it). Such a path is
 * opened in pieces shorter than PATH_MAX, each cut at a '/' and opened
 * relative to the one before; components are at most NAME_MAX bytes, so
 * there is always a '/' to cut at. -1 and errno on failure. */
static int open_dir(const char *dir)
{
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int at = AT_FDCWD;
  char piece[PATH_MAX];
  size_t left = strlen(dir);
  while (left >= PATH_MAX) {
    size_t cut = PATH_MAX - 1;
    while (cut > 0 && dir[cut] != '/')
      cut--;
    if (cut == 0) {
      if (at != AT_FDCWD)
        close(at);
      errno = ENAMETOOLONG;
      return -1;
    }
    memcpy(piece, dir, cut);
    piece[cut] = '\0';
    int fd = openat(at, piece, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    if (at != AT_FDCWD)
      close(at);
    if (fd < 0) {
      errno = e;
      return -1;
    }
    at = fd;
    dir += cut + 1;
    left -= cut + 1;
    while (*dir == '/') { /* relative to `at`, never absolute */
      dir++;
      left--;
    }
  }
  int fd = openat(at, dir, flags);
  if (at != AT_FDCWD) {
    int e = errno;
    close(at);
    errno = e;
  }
  return fd;
}

/* Accounts every entry of one directory and queues its subdirectories.
 * A directory or entry that vanished (or was replaced) meanwhile is skipped. */
static int scan(du_walk *w, const char *dir, unsigned *entries)
{
  int fd = open_dir(dir);
  if (fd < 0)
    return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -errno;
  size_t dlen = strlen(dir);
  int r = 0;
  for (;;) {
    ssize_t n = getdents64(fd, w->buf, DIR_BUF);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      r = n < 0 ? -errno : 0;
      break;
    }
    for (ssize_t off = 0; off < n && r == 0;) {
      struct dirent64 *e = (struct dirent64 *)(void *)((char *)w->buf + off);
      off += e->d_reclen;
      if (is_dot(e->d_name))
        continue;
      struct stat st;
      if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT)
          r = -errno;
        continue;
      }
      (*entries)++;
      account(&w->t, &st);
      if (!S_ISDIR(st.st_mode))
        continue;
      size_t nlen = strlen(e->d_name);
      char *child = weft__malloc_plain(dlen + nlen + 2);
      if (!child) {
        r = -ENOMEM;
        break;
      }
      memcpy(child, dir, dlen);
      child[dlen] = '/';
      memcpy(child + dlen + 1, e->d_name, nlen + 1);
      if (push(w, child) < 0) {
        free(child);
        r = -ENOMEM;
      }
    }
    if (r < 0)
      break;
  }
  close(fd);
  return r;
}

/* Pool job: scans queued directories until none is left or the budget is
 * spent (the caller then queues the next job). */
static long du_job(void *arg)
{
  du_walk *w = arg;
  unsigned dirs = 0, entries = 0;
  while (w->n && dirs < DU_DIRS_PER_JOB && entries < DU_ENTRIES_PER_JOB) {
    char *dir = w->todo[--w->n];
    int r = scan(w, dir, &entries);
    free(dir);
    dirs++;
    if (r < 0)
      return r;
  }
  return 0;
}

int weft_du(const char *path, weft_du_totals *out)
{
  if (!path || !out)
    return -EFAULT;
  struct stat st;
  int r = weft_lstat(path, &st);
  if (r < 0)
    return r;
  du_walk w = {.t = {0}};
  account(&w.t, &st);
  if (S_ISDIR(st.st_mode)) {
    char *root = weft__strdup(path);
    w.buf = weft__malloc_plain(DIR_BUF);
    if (!root || !w.buf || push(&w, root) < 0) {
      free(root);
      r = -ENOMEM;
    }
    while (r == 0 && w.n)
      r = (int)weft__fs_pool(du_job, &w, WEFT_NO_DEADLINE, NULL);
  }
  while (w.n)
    free(w.todo[--w.n]);
  free(w.todo);
  free(w.buf);
  if (r == 0)
    *out = w.t;
  return r;
}
