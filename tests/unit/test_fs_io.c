/* SPDX-License-Identifier: MIT */
/*
 * Suite "fs", part 1 - the suite's setup and teardown, and the data calls:
 * every descriptor call's success path and exact errors, short reads at end
 * of file and the full-length helpers, vectored I/O, fsync / fallocate /
 * ftruncate, stat against libc, and whole-file reads and writes (including
 * a pipe, a FIFO and /proc). Paths and directories are in test_fs_dirs.c;
 * deadlines, concurrency, the fallback and plain threads in test_fs_exec.c.
 *
 * Each test works in its own directory from mkdtemp under /tmp, removed
 * afterwards. Tests run as root here, so -EACCES (permission checks) cannot
 * be provoked and is not tested. Checks inside coroutines go through
 * CO_CHECK / CO_EQ (rt_helpers.h).
 */
#include "fs_test.h"

char root[64];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
  (void)st;
  (void)f;
  return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void setup(void)
{
  strcpy(root, "/tmp/weft-fs-XXXXXX");
  cr_assert_not_null(mkdtemp(root));
  signal(SIGPIPE, SIG_IGN);
}

static void teardown(void)
{
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  atomic_store(&weft__fs_force_pool, false);
  atomic_store(&weft__fs_refused, 0);
}

TestSuite(fs, .init = setup, .fini = teardown);

/* ---- descriptors: open / close / pread / pwrite --------------------------------------- */

static void *open_rw_body(void *arg)
{
  (void)arg;
  AT(f, "f");
  AT(d, "d");
  AT(under_file, "f/x");
  AT(missing, "missing/x");
  CO_EQ(weft_mkdir(d, 0755), 0);
  int fd = weft_open(f, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  CO_CHECK(fd >= 0);
  CO_EQ(weft_pwrite(fd, "hello, world", 12, 0), 12);
  CO_EQ(weft_pwrite(fd, "W", 1, 7), 1);
  char buf[32] = {0};
  CO_EQ(weft_pread(fd, buf, sizeof(buf), 0), 12);
  CO_CHECK(memcmp(buf, "hello, World", 12) == 0);
  CO_EQ(weft_pread(fd, buf, 5, 7), 5);
  CO_CHECK(memcmp(buf, "World", 5) == 0);
  /* Negative offsets are not "the file position". */
  CO_EQ(weft_pread(fd, buf, 5, -1), -EINVAL);
  CO_EQ(weft_pwrite(fd, buf, 5, -1), -EINVAL);
  struct stat st;
  CO_EQ(fstat(fd, &st), 0);
  CO_EQ(st.st_mode & 0777, 0640);
  CO_EQ(weft_close(fd), 0);
  /* Errors. */
  CO_EQ(weft_open(f, O_RDWR | O_CREAT | O_EXCL, 0600), -EEXIST);
  CO_EQ(weft_open(missing, O_RDONLY, 0), -ENOENT);
  CO_EQ(weft_open(under_file, O_RDONLY, 0), -ENOTDIR);
  CO_EQ(weft_open(d, O_WRONLY, 0), -EISDIR);
  CO_EQ(weft_open(NULL, O_RDONLY, 0), -EFAULT);
  CO_EQ(weft_openat(-1, "f", O_RDONLY, 0), -EBADF);
  CO_EQ(weft_pread(fd, buf, 1, 0), -EBADF); /* closed above */
  CO_EQ(weft_pwrite(fd, buf, 1, 0), -EBADF);
  CO_EQ(weft_close(fd), -EBADF);
  CO_EQ(weft_close(-1), -EBADF);
  /* openat relative to a directory descriptor. */
  int dfd = weft_open(root, O_RDONLY | O_DIRECTORY, 0);
  CO_CHECK(dfd >= 0);
  fd = weft_openat(dfd, "f", O_RDONLY, 0);
  CO_CHECK(fd >= 0);
  CO_EQ(weft_pread(fd, buf, 5, 0), 5);
  CO_EQ(weft_pwrite(fd, buf, 1, 0), -EBADF); /* read-only descriptor */
  int dirfd_read = weft_pread(dfd, buf, 1, 0);
  CO_EQ(dirfd_read, -EISDIR);
  CO_EQ(weft_close(fd), 0);
  CO_EQ(weft_close(dfd), 0);
  return NULL;
}

Test(fs, open_close_pread_pwrite_and_their_errors, .timeout = 30)
{
  rt_run(1, open_rw_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* An io_uring instance's descriptor, which io_uring's own close refuses
 * (-EBADF, the descriptor left open): weft_close closes it all the same. */
static void *close_ring_fd_body(void *arg)
{
  (void)arg;
  struct io_uring_params p;
  memset(&p, 0, sizeof(p));
  int fd = (int)syscall(__NR_io_uring_setup, 2, &p); /* no mappings to undo */
  CO_CHECK(fd >= 0);
  CO_EQ(weft_close(fd), 0);
  CO_EQ(fcntl(fd, F_GETFD), -1);
  CO_EQ(errno, EBADF);
  CO_EQ(weft_close(fd), -EBADF); /* and a closed descriptor is still -EBADF */
  return NULL;
}

Test(fs, close_of_an_io_uring_descriptor, .timeout = 30)
{
  rt_run(1, close_ring_fd_body, NULL);
  close_ring_fd_body(NULL); /* and on this plain thread */
  rt_assert_clean();
}

/* ---- short reads, full-length helpers ---------------------------------------------- */

typedef struct feeder {
  int fd;          /* write end */
  int chunks;      /* chunks of `chunk` bytes, then close */
  int chunk;
  bool stall;      /* after the chunks, keep the fd open and wait for `stop` */
  weft_event *stop;
} feeder;

static void *feed(void *arg)
{
  feeder *f = arg;
  unsigned char buf[4096];
  size_t pos = 0;
  for (int c = 0; c < f->chunks; c++) {
    for (int i = 0; i < f->chunk; i++)
      buf[i] = pattern(pos + (size_t)i);
    CO_EQ(weft_write_all(f->fd, buf, (size_t)f->chunk), f->chunk);
    pos += (size_t)f->chunk;
    if (c % 8 == 0)
      weft_sleep(100 * WEFT_USEC); /* let the reader see short reads */
  }
  if (f->stall)
    weft_event_wait(f->stop);
  CO_EQ(weft_close(f->fd), 0);
  return NULL;
}

typedef struct drainer {
  int fd;
  size_t n;
  unsigned char *buf;
} drainer;

static void *drain(void *arg)
{
  drainer *d = arg;
  d->buf = malloc(d->n);
  CO_EQ(weft_read_full(d->fd, d->buf, d->n), (ssize_t)d->n);
  return NULL;
}

static void *short_reads_body(void *arg)
{
  (void)arg;
  AT(f, "ten");
  CO_EQ(weft_write_file(f, "0123456789", 10, 0), 0);
  int fd = weft_open(f, O_RDONLY, 0);
  CO_CHECK(fd >= 0);
  char buf[100];
  CO_EQ(weft_pread(fd, buf, 100, 5), 5);
  CO_CHECK(memcmp(buf, "56789", 5) == 0);
  CO_EQ(weft_pread(fd, buf, 100, 10), 0);
  CO_EQ(weft_pread(fd, buf, 100, 1000), 0);
  CO_EQ(weft_pread_full(fd, buf, 100, 3), 7);
  CO_CHECK(memcmp(buf, "3456789", 7) == 0);
  CO_EQ(weft_pread_full(fd, buf, 4, 3), 4);
  CO_EQ(weft_pread_full(fd, buf, 0, 3), 0);
  CO_EQ(weft_pread_full(fd, buf, 4, -3), -EINVAL);
  CO_EQ(weft_read_full(fd, buf, 100), 10); /* from the file position */
  CO_EQ(weft_read_full(fd, buf, 100), 0);  /* now at end of file */
  size_t done = 99;
  CO_EQ(weft_read_full_dl(fd, buf, 100, &done, WEFT_NO_DEADLINE), 0);
  CO_EQ(done, 0);
  CO_EQ(weft_close(fd), 0);
  CO_EQ(weft_read_full(fd, buf, 1), -EBADF);

  /* A pipe fed in chunks: read_full gets exactly everything. */
  int p[2];
  CO_EQ(pipe(p), 0);
  feeder fe = {.fd = p[1], .chunks = 64, .chunk = 1000};
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, feed, &fe), 0);
  unsigned char *big = malloc(70000);
  CO_EQ(weft_read_full(p[0], big, 70000), 64000); /* the writer closed: end of file */
  size_t bad = SIZE_MAX;
  for (size_t i = 0; i < 64000 && bad == SIZE_MAX; i++)
    if (big[i] != pattern(i))
      bad = i;
  CO_EQ(bad, SIZE_MAX);
  rt_join_int(t);
  CO_EQ(weft_close(p[0]), 0);

  /* write_all into a pipe past its capacity, a reader task draining it. */
  CO_EQ(pipe(p), 0);
  for (size_t i = 0; i < 70000; i++)
    big[i] = pattern(i);
  CO_EQ(weft_write_all(p[1], big, 0), 0);
  drainer dr = {.fd = p[0], .n = 70000};
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, drain, &dr), 0);
  done = 1;
  CO_EQ(weft_write_all_dl(p[1], big, 70000, &done, WEFT_NO_DEADLINE), 70000);
  CO_EQ(done, 70000);
  CO_EQ(weft_close(p[1]), 0);
  rt_join_int(t);
  unsigned char *back = dr.buf;
  CO_CHECK(memcmp(back, big, 70000) == 0);
  /* Reader gone: -EPIPE, and `done` says how much went before. */
  CO_EQ(weft_close(p[0]), 0);
  CO_EQ(pipe(p), 0);
  CO_EQ(weft_close(p[0]), 0);
  done = 1;
  CO_EQ(weft_write_all_dl(p[1], big, 100, &done, WEFT_NO_DEADLINE), -EPIPE);
  CO_EQ(done, 0);
  CO_EQ(weft_close(p[1]), 0);

  /* A deadline in the middle of read_full: the bytes already read are
   * reported through `done`. */
  CO_EQ(pipe(p), 0);
  weft_event *stop;
  CO_EQ(weft_event_create(&stop, 0), 0);
  fe = (feeder){.fd = p[1], .chunks = 1, .chunk = 100, .stall = true, .stop = stop};
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, feed, &fe), 0);
  done = 0;
  CO_EQ(weft_read_full_dl(p[0], back, 200, &done, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(done, 100);
  weft_event_set(stop);
  rt_join_int(t);
  weft_event_destroy(stop);
  CO_EQ(weft_close(p[0]), 0);
  /* pwrite_all / pread_full on a file, across 2 GiB-unaligned sizes. */
  AT(g, "g");
  int gfd = weft_open(g, O_RDWR | O_CREAT, 0600);
  CO_EQ(weft_pwrite_all(gfd, big, 70000, 12345), 70000);
  memset(back, 0, 70000);
  CO_EQ(weft_pread_full(gfd, back, 70000, 12345), 70000);
  CO_CHECK(memcmp(back, big, 70000) == 0);
  CO_EQ(weft_pwrite_all(gfd, big, 10, -1), -EINVAL);
  CO_EQ(weft_close(gfd), 0);
  free(big);
  free(back);
  return NULL;
}

Test(fs, short_reads_at_eof_and_full_length_helpers, .timeout = 60)
{
  rt_run(1, short_reads_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- vectored I/O -------------------------------------------------------------------- */

static void *vectored_body(void *arg)
{
  (void)arg;
  AT(f, "v");
  int fd = weft_open(f, O_RDWR | O_CREAT | O_TRUNC, 0600);
  CO_CHECK(fd >= 0);
  struct iovec w[3] = {{"abc", 3}, {"", 0}, {"defgh", 5}};
  CO_EQ(weft_writev(fd, w, 3), 8);
  CO_EQ(weft_writev(fd, w, 1), 3); /* at the file position: appended */
  char a[4] = {0}, b[16] = {0};
  struct iovec r[2] = {{a, 2}, {b, sizeof(b)}};
  CO_EQ(weft_preadv(fd, r, 2, 1), 10);
  CO_CHECK(memcmp(a, "bc", 2) == 0 && memcmp(b, "defghabc", 8) == 0);
  struct iovec pw[2] = {{"XY", 2}, {"Z", 1}};
  CO_EQ(weft_pwritev(fd, pw, 2, 4), 3);
  CO_EQ(lseek(fd, 0, SEEK_SET), 0);
  memset(b, 0, sizeof(b));
  struct iovec rr[1] = {{b, sizeof(b)}};
  CO_EQ(weft_readv(fd, rr, 1), 11);
  CO_CHECK(memcmp(b, "abcdXYZhabc", 11) == 0);
  CO_EQ(weft_readv(fd, rr, 1), 0);
  CO_EQ(weft_readv(fd, rr, -1), -EINVAL);
  CO_EQ(weft_writev(fd, w, IOV_MAX + 1), -EINVAL);
  CO_EQ(weft_preadv(fd, rr, 1, -1), -EINVAL);
  CO_EQ(weft_pwritev(fd, w, 1, -5), -EINVAL);
  CO_EQ(weft_close(fd), 0);
  CO_EQ(weft_readv(fd, rr, 1), -EBADF);
  /* On a pipe. */
  int p[2];
  CO_EQ(pipe(p), 0);
  CO_EQ(weft_writev(p[1], w, 3), 8);
  memset(a, 0, sizeof(a));
  memset(b, 0, sizeof(b));
  CO_EQ(weft_readv(p[0], r, 2), 8);
  CO_CHECK(memcmp(a, "ab", 2) == 0 && memcmp(b, "cdefgh", 6) == 0);
  CO_EQ(weft_readv_dl(p[0], r, 2, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  weft_close(p[0]);
  weft_close(p[1]);
  return NULL;
}

Test(fs, readv_writev_preadv_pwritev, .timeout = 30)
{
  rt_run(1, vectored_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A NULL iovec array with entries to move is -EFAULT on every path - on
 * io_uring, on the pool and on a plain thread, with or without a deadline
 * (the plain thread's deadline path polls first) - and with none to move
 * it is the empty transfer, as readv(2) has it. Nothing is read. */
static void null_iov_calls(void)
{
  int p[2];
  CO_EQ(pipe(p), 0);
  CO_EQ(write(p[1], "data", 4), 4);
  int64_t later = weft_now() + 10 * WEFT_SEC;
  CO_EQ(weft_readv(p[0], NULL, 1), -EFAULT);
  CO_EQ(weft_readv_dl(p[0], NULL, 2, later), -EFAULT);
  CO_EQ(weft_writev(p[1], NULL, 1), -EFAULT);
  CO_EQ(weft_writev_dl(p[1], NULL, 1, later), -EFAULT);
  AT(f, "nulliov");
  int fd = weft_open(f, O_RDWR | O_CREAT, 0600);
  CO_CHECK(fd >= 0);
  CO_EQ(weft_preadv(fd, NULL, 1, 0), -EFAULT);
  CO_EQ(weft_preadv_dl(fd, NULL, 1, 0, later), -EFAULT);
  CO_EQ(weft_pwritev(fd, NULL, 3, 0), -EFAULT);
  CO_EQ(weft_pwritev_dl(fd, NULL, 1, 0, later), -EFAULT);
  CO_EQ(weft_readv(p[0], NULL, 0), 0);
  CO_EQ(weft_pwritev(fd, NULL, 0, 0), 0);
  char b[8];
  CO_EQ(read(p[0], b, sizeof(b)), 4); /* still there */
  CO_EQ(weft_close(fd), 0);
  CO_EQ(unlink(f), 0);
  close(p[0]);
  close(p[1]);
}

static void *null_iov_body(void *arg)
{
  (void)arg;
  null_iov_calls();
  atomic_store(&weft__fs_force_pool, true);
  null_iov_calls();
  atomic_store(&weft__fs_force_pool, false);
  return NULL;
}

Test(fs, null_iovec_array_is_efault_on_every_path, .timeout = 30)
{
  rt_run(1, null_iov_body, NULL);
  null_iov_calls(); /* and on this plain thread */
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- fsync, fallocate, ftruncate, stat ----------------------------------------------- */

static void *sync_size_body(void *arg)
{
  (void)arg;
  AT(f, "s");
  int fd = weft_open(f, O_RDWR | O_CREAT, 0600);
  CO_CHECK(fd >= 0);
  CO_EQ(weft_pwrite(fd, "data", 4, 0), 4);
  CO_EQ(weft_fsync(fd, 0), 0);
  CO_EQ(weft_fsync(fd, WEFT_FSYNC_DATA), 0);
  CO_EQ(weft_fsync_dl(fd, 0, weft_now() + WEFT_SEC), 0);
  CO_EQ(weft_fsync(fd, 2), -EINVAL);
  CO_EQ(weft_fallocate(fd, 0, 0, 1 << 20), 0);
  struct stat st;
  CO_EQ(weft_fstat(fd, &st), 0);
  CO_EQ(st.st_size, 1 << 20);
  CO_EQ(weft_fstat(AT_FDCWD, &st), -EBADF); /* as fstat(2), not the working directory */
  CO_EQ(weft_fstat(-1, &st), -EBADF);
  CO_EQ(weft_fallocate(fd, 0, 0, 0), -EINVAL);
  CO_EQ(weft_fallocate(fd, 0, -1, 10), -EINVAL);
  CO_EQ(weft_fallocate(fd, 0x40000000, 0, 10), -EOPNOTSUPP); /* unknown mode bit */
  CO_EQ(weft_ftruncate(fd, 3), 0);
  CO_EQ(weft_fstat(fd, &st), 0);
  CO_EQ(st.st_size, 3);
  CO_EQ(weft_ftruncate(fd, -1), -EINVAL);
  CO_EQ(weft_close(fd), 0);
  fd = weft_open(f, O_RDONLY, 0);
  CO_EQ(weft_ftruncate(fd, 0), -EINVAL); /* not open for writing */
  CO_EQ(weft_close(fd), 0);
  CO_EQ(weft_fsync(fd, 0), -EBADF);
  CO_EQ(weft_fallocate(fd, 0, 0, 10), -EBADF);
  CO_EQ(weft_ftruncate(fd, 0), -EBADF);
  int p[2];
  CO_EQ(pipe(p), 0);
  CO_EQ(weft_fsync(p[0], 0), -EINVAL);
  close(p[0]);
  close(p[1]);
  return NULL;
}

Test(fs, fsync_fallocate_ftruncate, .timeout = 30)
{
  rt_run(1, sync_size_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_mode == b->st_mode &&
         a->st_nlink == b->st_nlink && a->st_uid == b->st_uid && a->st_gid == b->st_gid &&
         a->st_rdev == b->st_rdev && a->st_size == b->st_size && a->st_blksize == b->st_blksize &&
         a->st_blocks == b->st_blocks && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
         a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
         a->st_ctim.tv_nsec == b->st_ctim.tv_nsec && a->st_atim.tv_sec == b->st_atim.tv_sec &&
         a->st_atim.tv_nsec == b->st_atim.tv_nsec;
}

static void *stat_body(void *arg)
{
  (void)arg;
  AT(f, "file");
  AT(l, "link");
  AT(missing, "nope");
  AT(under, "file/x");
  CO_EQ(weft_write_file(f, "12345", 5, 0), 0);
  CO_EQ(weft_symlink("file", l), 0);
  struct stat w, s;
  const char *paths[] = {f, l, root, "/dev/null"};
  for (int i = 0; i < 4; i++) {
    CO_EQ(weft_stat(paths[i], &w), 0);
    CO_EQ(stat(paths[i], &s), 0);
    CO_CHECK(same_stat(&w, &s));
    CO_EQ(weft_lstat(paths[i], &w), 0);
    CO_EQ(lstat(paths[i], &s), 0);
    CO_CHECK(same_stat(&w, &s));
  }
  CO_EQ(weft_lstat(l, &w), 0);
  CO_CHECK(S_ISLNK(w.st_mode));
  CO_EQ(w.st_size, 4);
  int fd = weft_open(f, O_RDONLY, 0);
  CO_EQ(weft_fstat(fd, &w), 0);
  CO_EQ(fstat(fd, &s), 0);
  CO_CHECK(same_stat(&w, &s));
  struct statx x;
  CO_EQ(weft_statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &x), 0);
  CO_EQ(x.stx_size, 5);
  CO_EQ(weft_statx(AT_FDCWD, f, 0, STATX_SIZE | STATX_TYPE, &x), 0);
  CO_CHECK(S_ISREG(x.stx_mode));
  weft_close(fd);
  CO_EQ(weft_fstat(fd, &w), -EBADF);
  CO_EQ(weft_stat(missing, &w), -ENOENT);
  CO_EQ(weft_stat(under, &w), -ENOTDIR);
  CO_EQ(weft_stat(NULL, &w), -EFAULT);
  CO_EQ(weft_stat(f, NULL), -EFAULT);
  CO_EQ(weft_statx(AT_FDCWD, NULL, 0, STATX_SIZE, &x), -EFAULT);
  CO_EQ(weft_statx(AT_FDCWD, f, 0, STATX_SIZE, NULL), -EFAULT);
  return NULL;
}

Test(fs, statx_stat_lstat_fstat_match_libc, .timeout = 30)
{
  rt_run(1, stat_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- whole files ---------------------------------------------------------------------- */

static void *whole_file_body(void *arg)
{
  (void)arg;
  AT(f, "w");
  AT(e, "empty");
  AT(missing, "missing");
  size_t n = 100000; /* several doublings of read_file's buffer */
  char *src = malloc(n);
  for (size_t i = 0; i < n; i++)
    src[i] = (char)pattern(i);
  CO_EQ(weft_write_file(f, src, n, WEFT_WRITE_FSYNC), 0);
  char *data = NULL;
  size_t len = 0;
  CO_EQ(weft_read_file(f, &data, &len), 0);
  CO_EQ(len, n);
  CO_CHECK(data && memcmp(data, src, n) == 0 && data[n] == '\0');
  free(data);
  CO_EQ(weft_write_file(f, "tail", 4, WEFT_WRITE_APPEND), 0);
  CO_EQ(weft_read_file_dl(f, &data, &len, weft_now() + 10 * WEFT_SEC), 0);
  CO_EQ(len, n + 4);
  CO_CHECK(memcmp(data + n, "tail", 4) == 0);
  free(data);
  CO_EQ(weft_write_file(f, "new", 3, 0), 0); /* truncates */
  CO_EQ(weft_read_file(f, &data, &len), 0);
  CO_EQ(len, 3);
  CO_CHECK(strcmp(data, "new") == 0);
  free(data);
  CO_EQ(weft_write_file(e, NULL, 0, WEFT_WRITE_EXCL), 0);
  CO_EQ(weft_read_file(e, &data, &len), 0);
  CO_EQ(len, 0);
  CO_CHECK(data && data[0] == '\0');
  free(data);
  /* Errors: *data NULL and *len 0 on failure. */
  data = (char *)1;
  len = 7;
  CO_EQ(weft_read_file(root, &data, &len), -EISDIR);
  CO_CHECK(data == NULL && len == 0);
  CO_EQ(weft_read_file(missing, &data, &len), -ENOENT);
  CO_EQ(weft_read_file(NULL, &data, &len), -EFAULT);
  CO_EQ(weft_read_file(f, NULL, &len), -EFAULT);
  CO_EQ(weft_write_file(e, "x", 1, WEFT_WRITE_EXCL), -EEXIST);
  CO_EQ(weft_write_file(e, "x", 1, 8), -EINVAL);
  CO_EQ(weft_write_file(root, "x", 1, 0), -EISDIR);
  CO_EQ(weft_write_file(NULL, "x", 1, 0), -EFAULT);
  free(src);
  return NULL;
}

Test(fs, read_file_and_write_file, .timeout = 30)
{
  rt_run(1, whole_file_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A deadline already passed starts nothing, on a plain thread as in a
 * coroutine: write_file_dl leaves the file as it was (its open would have
 * truncated it), and open, fsync and a read fail at once. */
static void past_deadline_calls(void)
{
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/keep", root);
  CO_EQ(weft_write_file(path, "precious", 8, 0), 0);
  int64_t past = weft_now() - 1;
  CO_EQ(weft_write_file_dl(path, "x", 1, 0, past), -ETIMEDOUT);
  CO_EQ(weft_open_dl(path, O_RDONLY | O_CLOEXEC, 0, past), -ETIMEDOUT);
  char *data = NULL;
  size_t len = 0;
  CO_EQ(weft_read_file_dl(path, &data, &len, past), -ETIMEDOUT);
  CO_EQ(weft_read_file(path, &data, &len), 0);
  CO_EQ(len, 8);
  CO_CHECK(data && memcmp(data, "precious", 8) == 0);
  free(data);
  int fd = weft_open(path, O_RDWR | O_CLOEXEC, 0);
  CO_CHECK(fd >= 0);
  CO_EQ(weft_fsync_dl(fd, 0, past), -ETIMEDOUT);
  char b[8];
  CO_EQ(weft_pread_dl(fd, b, sizeof(b), 0, past), -ETIMEDOUT);
  CO_EQ(weft_close(fd), 0);
}

static void *past_deadline_body(void *arg)
{
  (void)arg;
  past_deadline_calls();
  return NULL;
}

Test(fs, past_deadline_starts_nothing, .timeout = 30)
{
  rt_run(1, past_deadline_body, NULL);
  past_deadline_calls(); /* and on this plain thread */
  rt_assert_clean();
}

static void check_pattern(const char *data, size_t len, size_t want)
{
  CO_EQ(len, want);
  size_t bad = SIZE_MAX;
  for (size_t i = 0; i < len && bad == SIZE_MAX; i++)
    if ((unsigned char)data[i] != pattern(i))
      bad = i;
  CO_EQ(bad, SIZE_MAX);
}

static void *pipe_file_body(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe(p), 0);
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", p[0]);
  /* 200 KB: far past the pipe's capacity, so the writer waits on us. */
  feeder fe = {.fd = p[1], .chunks = 200, .chunk = 1000};
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_ROUND_ROBIN, -1, feed, &fe), 0);
  char *data = NULL;
  size_t len = 0;
  CO_EQ(weft_read_file(path, &data, &len), 0);
  check_pattern(data, len, 200000);
  free(data);
  rt_join_int(t);
  CO_EQ(weft_close(p[0]), 0);
  return NULL;
}

Test(fs, read_file_of_a_pipe_fed_in_chunks, .timeout = 60)
{
  rt_run(2, pipe_file_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

typedef struct fifo_writer {
  const char *path;
  bool after_reader; /* open only once the reader waits in its open */
} fifo_writer;

static void *fifo_feed(void *arg)
{
  fifo_writer *w = arg;
  if (w->after_reader)
    CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1));
  int fd = weft_open(w->path, O_WRONLY | O_CLOEXEC, 0);
  CO_CHECK(fd >= 0);
  feeder fe = {.fd = fd, .chunks = 100, .chunk = 1000};
  return feed(&fe);
}

static void *fifo_body(void *arg)
{
  (void)arg;
  AT(fifo, "fifo");
  CO_EQ(mkfifo(fifo, 0600), 0);
  /* The writer opens first (no reader yet), then the reader first. */
  for (int order = 0; order < 2; order++) {
    fifo_writer w = {.path = fifo, .after_reader = order == 1};
    weft_task *t;
    CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, fifo_feed, &w), 0);
    if (!order) /* the writer waits in its open first */
      CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1));
    char *data = NULL;
    size_t len = 0;
    CO_EQ(weft_read_file(fifo, &data, &len), 0);
    check_pattern(data, len, 100000);
    free(data);
    rt_join_int(t);
  }
  return NULL;
}

Test(fs, read_file_of_a_fifo_either_side_first, .timeout = 60)
{
  rt_run(1, fifo_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(fs, read_file_of_a_fifo_on_the_pool, .timeout = 60)
{
  atomic_store(&weft__fs_force_pool, true);
  rt_run(1, fifo_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *proc_body(void *arg)
{
  (void)arg;
  char *data = NULL;
  size_t len = 0;
  CO_EQ(weft_read_file("/proc/self/status", &data, &len), 0);
  CO_CHECK(len > 100); /* stat says 0 bytes: the loop read to the end */
  CO_EQ(strlen(data), len);
  CO_CHECK(strncmp(data, "Name:", 5) == 0);
  char pid[32];
  snprintf(pid, sizeof(pid), "\nPid:\t%d\n", (int)getpid());
  CO_CHECK(strstr(data, pid) != NULL);
  CO_CHECK(strstr(data, "\nVmRSS:") != NULL); /* well past the first line */
  free(data);
  return NULL;
}

Test(fs, read_file_of_proc_self_status, .timeout = 30)
{
  rt_run(1, proc_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}
