/* SPDX-License-Identifier: MIT */
/*
 * Suite "fs", part 2 - paths and directories: mkdir and mkdir -p (also
 * racing creators), rename flags, links, readlink, realpath and chmod,
 * directory listing with types, and du against trees built here (also
 * cancelled between its batches).
 */
#include "fs_test.h"

#include "fault.h"

#include <sched.h>

static void put(const char *path, const char *data, size_t n)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert_geq(fd, 0, "open %s", path);
  cr_assert_eq(write(fd, data, n), (ssize_t)n);
  close(fd);
}

/* ---- paths ------------------------------------------------------------------------------ */

static bool is_dir(const char *p)
{
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void *mkdir_body(void *arg)
{
  (void)arg;
  AT(d, "d");
  AT(deep, "a/b/c/d");
  AT(deep_slash, "x//y///z//");
  AT(file, "file");
  AT(through, "file/sub/more");
  AT(file_end, "a/b/file");
  AT(missing_parent, "no/such");
  AT(lnk, "lnk");
  AT(via_link, "lnk/q/r");
  CO_EQ(weft_mkdir(d, 0700), 0);
  struct stat st;
  CO_EQ(stat(d, &st), 0);
  CO_EQ(st.st_mode & 0777, 0700);
  CO_EQ(weft_mkdir(d, 0700), -EEXIST);
  CO_EQ(weft_mkdir(missing_parent, 0700), -ENOENT);
  CO_EQ(weft_mkdir(NULL, 0700), -EFAULT);
  /* mkdir -p */
  CO_EQ(weft_mkdir_all(deep, 0755), 0);
  CO_CHECK(is_dir(deep));
  CO_EQ(weft_mkdir_all(deep, 0755), 0); /* all there already */
  CO_EQ(weft_mkdir_all(d, 0755), 0);
  CO_EQ(weft_mkdir_all(root, 0755), 0);
  CO_EQ(weft_mkdir_all("/", 0755), 0);
  CO_EQ(weft_mkdir_all(deep_slash, 0755), 0);
  AT(xyz, "x/y/z");
  CO_CHECK(is_dir(xyz));
  CO_EQ(weft_write_file(file, "f", 1, 0), 0);
  CO_EQ(weft_mkdir_all(through, 0755), -ENOTDIR); /* through a regular file */
  CO_EQ(weft_mkdir_all(file, 0755), -EEXIST);     /* a file at the end */
  CO_EQ(weft_write_file(file_end, "f", 1, 0), 0);
  CO_EQ(weft_mkdir_all(file_end, 0755), -EEXIST);
  CO_EQ(weft_mkdir_all("", 0755), -ENOENT);
  CO_EQ(weft_mkdir_all(NULL, 0755), -EFAULT);
  /* Through a symlink to a directory: fine, as mkdir -p. */
  CO_EQ(weft_symlink("d", lnk), 0);
  CO_EQ(weft_mkdir_all(via_link, 0755), 0);
  AT(real, "d/q/r");
  CO_CHECK(is_dir(real));
  CO_EQ(weft_mkdir_all(lnk, 0755), 0);
  /* Through a dangling symlink: -ENOENT, as mkdir(2) says it, and nothing
   * is made where it points; at the end: in the way, -EEXIST. */
  AT(dang, "dang");
  AT(via_dang, "dang/q");
  AT(nowhere, "nowhere");
  CO_EQ(weft_symlink("nowhere", dang), 0);
  CO_EQ(weft_mkdir_all(via_dang, 0755), -ENOENT);
  CO_EQ(weft_mkdir_all(dang, 0755), -EEXIST);
  CO_CHECK(access(nowhere, F_OK) < 0);
  return NULL;
}

Test(fs, mkdir_and_mkdir_all, .timeout = 30)
{
  rt_run(1, mkdir_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* mkdir -p of a directory that is there: mkdir says -EEXIST, then a statx
 * tells a directory from something in the way. A statx that cannot run
 * (here no SQE for it: -EBUSY; a cancel or a passed deadline scope alike)
 * says nothing about path: its error is the result, not -EEXIST ("not a
 * directory"). */
static void *mkdir_all_statx_fails_body(void *arg)
{
  (void)arg;
  AT(d, "there");
  CO_EQ(mkdir(d, 0755), 0);
  weft__fault_arm(WEFT__FAULT_OP_SQ, 2); /* the mkdir gets its SQE, the statx none */
  int r = weft_mkdir_all(d, 0755);
  weft__fault_arm(WEFT__FAULT_OP_SQ, 0);
  CO_EQ(r, -EBUSY);
  CO_EQ(weft_mkdir_all(d, 0755), 0);
  return NULL;
}

Test(fs, mkdir_all_reports_a_failed_statx_as_it_is, .timeout = 30)
{
  rt_run(1, mkdir_all_statx_fails_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *mkdir_race(void *arg)
{
  return (void *)(intptr_t)weft_mkdir_all((const char *)arg, 0755);
}

static void *mkdir_race_body(void *arg)
{
  (void)arg;
  AT(deep, "r/s/t/u/v/w");
  weft_task *t[8];
  for (int i = 0; i < 8; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_ROUND_ROBIN, -1, mkdir_race, deep), 0);
  for (int i = 0; i < 8; i++)
    CO_EQ(rt_join_int(t[i]), 0);
  CO_CHECK(is_dir(deep));
  return NULL;
}

Test(fs, mkdir_all_racing_creators_all_succeed, .timeout = 30)
{
  rt_run(2, mkdir_race_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void expect_content(const char *path, const char *want)
{
  char *data = NULL;
  size_t len = 0;
  CO_EQ(weft_read_file(path, &data, &len), 0);
  CO_CHECK(data && strcmp(data, want) == 0);
  free(data);
}

static void *rename_body(void *arg)
{
  (void)arg;
  AT(a, "a");
  AT(b, "b");
  AT(c, "c");
  AT(missing, "missing");
  CO_EQ(weft_write_file(a, "A", 1, 0), 0);
  CO_EQ(weft_write_file(b, "B", 1, 0), 0);
  CO_EQ(weft_rename(a, b, WEFT_RENAME_NOREPLACE), -EEXIST);
  expect_content(a, "A");
  expect_content(b, "B");
  CO_EQ(weft_rename(a, b, WEFT_RENAME_EXCHANGE), 0);
  expect_content(a, "B");
  expect_content(b, "A");
  CO_EQ(weft_rename(a, c, WEFT_RENAME_NOREPLACE), 0);
  CO_EQ(access(a, F_OK), -1);
  expect_content(c, "B");
  CO_EQ(weft_rename(c, b, 0), 0); /* replaces */
  expect_content(b, "B");
  CO_EQ(weft_rename(b, missing, WEFT_RENAME_EXCHANGE), -ENOENT);
  CO_EQ(weft_rename(missing, b, 0), -ENOENT);
  CO_EQ(weft_rename(b, a, WEFT_RENAME_NOREPLACE | WEFT_RENAME_EXCHANGE), -EINVAL);
  CO_EQ(weft_rename(b, a, 4), -EINVAL);
  CO_EQ(weft_rename(NULL, a, 0), -EFAULT);
  CO_EQ(weft_rename(b, NULL, 0), -EFAULT);
  AT(d, "dir");
  CO_EQ(weft_mkdir(d, 0755), 0);
  CO_EQ(weft_rename(d, b, 0), -ENOTDIR); /* a directory onto a file */
  CO_EQ(weft_rename(b, d, 0), -EISDIR);  /* a file onto a directory */
  return NULL;
}

Test(fs, rename_with_noreplace_and_exchange, .timeout = 30)
{
  rt_run(1, rename_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *links_body(void *arg)
{
  (void)arg;
  AT(f, "f");
  AT(h, "hard");
  AT(s, "soft");
  AT(d, "d");
  AT(df, "d/inner");
  AT(missing, "missing");
  CO_EQ(weft_write_file(f, "data", 4, 0), 0);
  /* link */
  CO_EQ(weft_link(f, h), 0);
  struct stat st;
  CO_EQ(weft_stat(f, &st), 0);
  CO_EQ(st.st_nlink, 2);
  CO_EQ(weft_link(f, h), -EEXIST);
  CO_EQ(weft_link(missing, s), -ENOENT);
  CO_EQ(weft_link(NULL, s), -EFAULT);
  /* symlink + readlink */
  const char *target = "some/where/else";
  CO_EQ(weft_symlink(target, s), 0);
  CO_EQ(weft_symlink(target, s), -EEXIST);
  CO_EQ(weft_symlink(NULL, s), -EFAULT);
  char buf[64];
  CO_EQ(weft_readlink(s, buf, sizeof(buf)), (ssize_t)strlen(target));
  CO_CHECK(strcmp(buf, target) == 0);
  CO_EQ(weft_readlink(s, buf, strlen(target) + 1), (ssize_t)strlen(target)); /* just fits */
  CO_EQ(weft_readlink(s, buf, strlen(target)), -ERANGE); /* no room for '\0' */
  CO_EQ(weft_readlink(s, buf, 0), -ERANGE);
  /* What a failure leaves in buf: after -ERANGE the first `size` bytes of
   * the target, unterminated; after another error nothing. */
  memset(buf, '#', sizeof(buf));
  CO_EQ(weft_readlink(s, buf, 4), -ERANGE);
  CO_CHECK(memcmp(buf, "some#", 5) == 0);
  memset(buf, '#', sizeof(buf));
  CO_EQ(weft_readlink(f, buf, sizeof(buf)), -EINVAL); /* not a symlink */
  CO_EQ(weft_readlink(missing, buf, sizeof(buf)), -ENOENT);
  CO_EQ(buf[0], '#');
  CO_EQ(weft_readlink(NULL, buf, sizeof(buf)), -EFAULT);
  /* unlink / rmdir */
  CO_EQ(weft_mkdir(d, 0755), 0);
  CO_EQ(weft_write_file(df, "x", 1, 0), 0);
  CO_EQ(weft_unlink(d), -EISDIR);
  CO_EQ(weft_rmdir(f), -ENOTDIR);
  CO_EQ(weft_rmdir(d), -ENOTEMPTY);
  CO_EQ(weft_unlink(df), 0);
  CO_EQ(weft_unlink(df), -ENOENT);
  CO_EQ(weft_rmdir(d), 0);
  CO_EQ(weft_rmdir(d), -ENOENT);
  CO_EQ(weft_unlink(s), 0); /* the link, not its target */
  CO_EQ(weft_unlink(h), 0);
  CO_EQ(weft_stat(f, &st), 0);
  CO_EQ(st.st_nlink, 1);
  CO_EQ(weft_unlink(NULL), -EFAULT);
  CO_EQ(weft_rmdir(NULL), -EFAULT);
  return NULL;
}

Test(fs, link_symlink_readlink_unlink_rmdir, .timeout = 30)
{
  rt_run(1, links_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *realpath_chmod_body(void *arg)
{
  (void)arg;
  AT(f, "sub/f");
  AT(sub, "sub");
  AT(l, "l");
  AT(twisted, "sub/../sub/./f");
  AT(via_link, "l/f");
  AT(missing, "missing");
  CO_EQ(weft_mkdir(sub, 0755), 0);
  CO_EQ(weft_write_file(f, "x", 1, 0), 0);
  CO_EQ(weft_symlink("sub", l), 0);
  char *want = realpath(f, NULL);
  char *got = NULL;
  CO_EQ(weft_realpath(twisted, &got), 0);
  CO_CHECK(got && strcmp(got, want) == 0);
  free(got);
  got = NULL;
  CO_EQ(weft_realpath(via_link, &got), 0);
  CO_CHECK(got && strcmp(got, want) == 0);
  free(got);
  free(want);
  got = (char *)1;
  CO_EQ(weft_realpath(missing, &got), -ENOENT);
  CO_CHECK(got == (char *)1);
  CO_EQ(weft_realpath(NULL, &got), -EFAULT);
  CO_EQ(weft_realpath(f, NULL), -EFAULT);
  /* chmod (root ignores permissions, so -EACCES cannot be tested here). */
  struct stat st;
  CO_EQ(weft_chmod(f, 0604), 0);
  CO_EQ(stat(f, &st), 0);
  CO_EQ(st.st_mode & 07777, 0604);
  CO_EQ(weft_chmod(via_link, 0640), 0); /* follows the symlink */
  CO_EQ(stat(f, &st), 0);
  CO_EQ(st.st_mode & 07777, 0640);
  CO_EQ(weft_chmod(missing, 0600), -ENOENT);
  CO_EQ(weft_chmod(NULL, 0600), -EFAULT);
  return NULL;
}

Test(fs, realpath_and_chmod_on_the_pool, .timeout = 30)
{
  rt_run(1, realpath_chmod_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- directories ------------------------------------------------------------------------ */

#define NFILES 1500 /* more than one getdents64 batch */

static void *listing_body(void *arg)
{
  (void)arg;
  AT(d, "list");
  CO_EQ(weft_mkdir(d, 0755), 0);
  char p[PATH_MAX + 64];
  for (int i = 0; i < NFILES; i++) {
    snprintf(p, sizeof(p), "%s/file-%04d", d, i);
    CO_EQ(weft_write_file(p, "", 0, 0), 0);
  }
  snprintf(p, sizeof(p), "%s/sub", d);
  CO_EQ(weft_mkdir(p, 0755), 0);
  snprintf(p, sizeof(p), "%s/lnk", d);
  CO_EQ(weft_symlink("file-0000", p), 0);
  snprintf(p, sizeof(p), "%s/fifo", d);
  CO_EQ(mkfifo(p, 0600), 0);

  weft_dir *dir = NULL;
  CO_EQ(weft_dir_open(&dir, d), 0);
  static bool seen[NFILES];
  memset(seen, 0, sizeof(seen));
  int files = 0, subs = 0, links = 0, fifos = 0, other = 0, r;
  weft_dirent e;
  while ((r = weft_dir_next(dir, &e)) == 1) {
    int i;
    if (sscanf(e.name, "file-%04d", &i) == 1 && i >= 0 && i < NFILES && e.type == WEFT_FT_REG) {
      CO_CHECK(!seen[i]);
      seen[i] = true;
      files++;
      struct stat st;
      CO_EQ(fstatat(weft_dir_fd(dir), e.name, &st, 0), 0); /* the fd is usable */
      CO_EQ(st.st_ino, e.ino);
    } else if (!strcmp(e.name, "sub") && e.type == WEFT_FT_DIR) {
      subs++;
    } else if (!strcmp(e.name, "lnk") && e.type == WEFT_FT_LNK) {
      links++;
    } else if (!strcmp(e.name, "fifo") && e.type == WEFT_FT_FIFO) {
      fifos++;
    } else {
      other++; /* ".", ".." or a wrong type */
    }
  }
  CO_EQ(r, 0);
  CO_EQ(weft_dir_next(dir, &e), 0); /* stays at the end */
  CO_EQ(files, NFILES);
  CO_EQ(subs, 1);
  CO_EQ(links, 1);
  CO_EQ(fifos, 1);
  CO_EQ(other, 0);
  CO_EQ(weft_dir_close(dir), 0);
  CO_EQ(weft_dir_close(NULL), 0);
  /* An empty directory. */
  snprintf(p, sizeof(p), "%s/sub", d);
  CO_EQ(weft_dir_open(&dir, p), 0);
  CO_EQ(weft_dir_next(dir, &e), 0);
  CO_EQ(weft_dir_close(dir), 0);
  /* Errors. */
  AT(missing, "missing");
  snprintf(p, sizeof(p), "%s/file-0001", d);
  weft_dir *untouched = (weft_dir *)1;
  CO_EQ(weft_dir_open(&untouched, missing), -ENOENT);
  CO_EQ(weft_dir_open(&untouched, p), -ENOTDIR);
  CO_CHECK(untouched == (weft_dir *)1);
  CO_EQ(weft_dir_open(&untouched, NULL), -EFAULT);
  CO_EQ(weft_dir_open(NULL, d), -EFAULT);
  CO_EQ(weft_dir_next(NULL, &e), -EINVAL);
  CO_EQ(weft_dir_fd(NULL), -EINVAL);
  CO_EQ(weft_dir_open(&dir, d), 0);
  CO_EQ(weft_dir_next(dir, NULL), -EFAULT); /* an output pointer, as elsewhere in fs.h */
  CO_EQ(weft_dir_next(dir, &e), 1);          /* and nothing was consumed */
  CO_CHECK(strcmp(e.name, ".") && strcmp(e.name, ".."));
  CO_EQ(weft_dir_close(dir), 0);
  return NULL;
}

Test(fs, directory_listing_with_types, .timeout = 60)
{
  rt_run(1, listing_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* du: the tree is built with plain system calls, the expected disk usage
 * counted with nftw (FTW_PHYS: symlinks not followed). */
static uint64_t nftw_disk;
static int add_disk(const char *p, const struct stat *st, int flag, struct FTW *f)
{
  (void)p;
  (void)flag;
  (void)f;
  nftw_disk += (uint64_t)st->st_blocks * 512;
  return 0;
}

static const size_t du_sizes[] = {0, 1, 4096, 10000, 123457};

static void build_tree(const char *top, const char *outside)
{
  char p[PATH_MAX + 64];
  cr_assert_eq(mkdir(top, 0755), 0);
  snprintf(p, sizeof(p), "%s/a", top);
  cr_assert_eq(mkdir(p, 0755), 0);
  snprintf(p, sizeof(p), "%s/a/b", top);
  cr_assert_eq(mkdir(p, 0755), 0);
  snprintf(p, sizeof(p), "%s/a/b/c", top);
  cr_assert_eq(mkdir(p, 0755), 0);
  static char data[123457];
  const char *where[] = {"", "/a", "/a/b", "/a/b/c", "/a/b/c"};
  for (int i = 0; i < 5; i++) {
    snprintf(p, sizeof(p), "%s%s/f%d", top, where[i], i);
    put(p, data, du_sizes[i]);
  }
  /* Symlinks (not followed): to a big file outside the tree, and to a
   * directory; and a FIFO. */
  put(outside, data, sizeof(data));
  snprintf(p, sizeof(p), "%s/a/big-link", top);
  cr_assert_eq(symlink(outside, p), 0);
  snprintf(p, sizeof(p), "%s/a/b/dir-link", top);
  cr_assert_eq(symlink("..", p), 0);
  snprintf(p, sizeof(p), "%s/a/fifo", top);
  cr_assert_eq(mkfifo(p, 0600), 0);
  nftw_disk = 0;
  cr_assert_eq(nftw(top, add_disk, 16, FTW_PHYS), 0);
}

static void *du_body(void *arg)
{
  weft_du_totals *t = arg;
  AT(top, "tree");
  CO_EQ(weft_du(top, &t[0]), 0);
  AT(f, "tree/a/b/c/f3");
  CO_EQ(weft_du(f, &t[1]), 0);
  AT(lnk, "tree/a/b/dir-link");
  CO_EQ(weft_du(lnk, &t[2]), 0);
  AT(missing, "missing");
  weft_du_totals untouched = {.bytes = 99};
  CO_EQ(weft_du(missing, &untouched), -ENOENT);
  CO_EQ(untouched.bytes, 99);
  CO_EQ(weft_du(NULL, &untouched), -EFAULT);
  CO_EQ(weft_du(top, NULL), -EFAULT);
  return NULL;
}

Test(fs, du_totals_match_the_tree, .timeout = 30)
{
  AT(top, "tree");
  AT(outside, "outside");
  build_tree(top, outside);
  uint64_t want_bytes = 0;
  for (int i = 0; i < 5; i++)
    want_bytes += du_sizes[i];
  weft_du_totals t[3];
  memset(t, 0xff, sizeof(t));
  rt_run(1, du_body, t);
  rt_assert_clean();
  cr_assert_eq(t[0].bytes, want_bytes, "bytes %llu", (unsigned long long)t[0].bytes);
  cr_assert_eq(t[0].files, 5);
  cr_assert_eq(t[0].dirs, 4);
  cr_assert_eq(t[0].others, 3);
  cr_assert_eq(t[0].disk_bytes, nftw_disk);
  cr_assert_eq(t[1].bytes, 10000);
  cr_assert_eq(t[1].files, 1);
  cr_assert_eq(t[1].dirs, 0);
  cr_assert_eq(t[2].others, 1); /* a symlink at the top is not followed either */
  cr_assert_eq(t[2].dirs, 0);
  cr_assert_eq(t[2].bytes, 0);
}

static void *du_wide_body(void *arg)
{
  weft_du_totals *t = arg;
  AT(top, "wide");
  uint64_t before = pool_jobs();
  CO_EQ(weft_du(top, t), 0);
  CO_CHECK(pool_jobs() - before >= 2); /* 201 directories: more than one batch */
  return NULL;
}

/* 201 directories under `top` ("wide"): more than one du batch. */
static void build_wide(const char *top)
{
  cr_assert_eq(mkdir(top, 0755), 0);
  char p[PATH_MAX + 64];
  for (int i = 0; i < 100; i++) {
    snprintf(p, sizeof(p), "%s/d%d", top, i);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/d%d/e", top, i);
    cr_assert_eq(mkdir(p, 0755), 0);
    for (int j = 0; j < 3; j++) {
      snprintf(p, sizeof(p), "%s/d%d/e/f%d", top, i, j);
      put(p, "0123456789", (size_t)(i % 10));
    }
  }
}

Test(fs, du_of_a_wide_tree_takes_several_jobs, .timeout = 60)
{
  AT(top, "wide");
  build_wide(top);
  nftw_disk = 0;
  cr_assert_eq(nftw(top, add_disk, 16, FTW_PHYS), 0);
  weft_du_totals t;
  rt_run(1, du_wide_body, &t);
  rt_assert_clean();
  cr_assert_eq(t.dirs, 201);
  cr_assert_eq(t.files, 300);
  cr_assert_eq(t.others, 0);
  cr_assert_eq(t.bytes, 3 * 10 * 45);
  cr_assert_eq(t.disk_bytes, nftw_disk);
}

/* A chain of DEEP directories of 200-byte names under `top` - paths far
 * longer than PATH_MAX - with a 1000-byte file at the bottom. Built and
 * removed through descriptors (mkdir(2) and nftw(3) would say
 * ENAMETOOLONG), so `remove` is the teardown's job done by hand. */
#define DEEP 40

static void deep_tree(const char *top, bool remove)
{
  char name[201];
  memset(name, 'd', 200);
  name[200] = '\0';
  int fds[DEEP + 1];
  if (!remove)
    cr_assert_eq(mkdir(top, 0755), 0);
  fds[0] = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(fds[0], 0);
  for (int i = 0; i < DEEP; i++) {
    if (!remove)
      cr_assert_eq(mkdirat(fds[i], name, 0755), 0);
    fds[i + 1] = openat(fds[i], name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(fds[i + 1], 0);
  }
  if (remove) {
    cr_assert_eq(unlinkat(fds[DEEP], "f", 0), 0);
    for (int i = DEEP; i > 0; i--) {
      close(fds[i]);
      cr_assert_eq(unlinkat(fds[i - 1], name, AT_REMOVEDIR), 0);
    }
  } else {
    int f = openat(fds[DEEP], "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(f, 0);
    char data[1000] = {0};
    cr_assert_eq(write(f, data, sizeof(data)), (ssize_t)sizeof(data));
    close(f);
    for (int i = 1; i <= DEEP; i++)
      close(fds[i]);
  }
  close(fds[0]);
}

static void *du_deep_body(void *arg)
{
  weft_du_totals *t = arg;
  AT(top, "deep");
  CO_EQ(weft_du(top, t), 0);
  return NULL;
}

Test(fs, du_of_a_tree_deeper_than_path_max, .timeout = 30)
{
  AT(top, "deep");
  deep_tree(top, false);
  weft_du_totals t = {0};
  rt_run(1, du_deep_body, &t);
  deep_tree(top, true); /* first: a failed check ends the test */
  rt_assert_clean();
  cr_assert_eq(t.dirs, DEEP + 1);
  cr_assert_eq(t.files, 1);
  cr_assert_eq(t.bytes, 1000);
  cr_assert_eq(t.others, 0);
}

/* du cancelled between batches: after its first pool job ran, before the
 * next is queued. The pool has one thread, held by a busy job while du's
 * first batch queues behind it; then a task on du's shard holds that shard
 * (it never yields) until the pool has finished the busy job and the
 * batch, and cancels du there. du, woken by the batch, cannot run before
 * the cancel, so it meets it on its way to the second batch: it returns
 * -ECANCELED with *out untouched, no other batch runs, and the directories
 * it still had to scan are freed. */
typedef struct du_hold {
  atomic_bool pool_held, pool_release; /* the busy job */
  atomic_bool shard_held;              /* shard 1 is held */
  uint64_t batch_done;                 /* pool_jobs once du's first batch ran */
  weft_task *du;
} du_hold;

static void *hold_pool(void *arg)
{
  du_hold *h = arg;
  atomic_store(&h->pool_held, true);
  while (!atomic_load(&h->pool_release))
    usleep(200);
  return NULL;
}

static void *occupy_pool(void *arg)
{
  CO_EQ(weft_blocking(hold_pool, arg, NULL), 0);
  return NULL;
}

static void *du_wide(void *arg)
{
  AT(top, "wide");
  return (void *)(intptr_t)weft_du(top, arg);
}

static void *cancel_du_after_its_batch(void *arg)
{
  du_hold *h = arg;
  atomic_store(&h->shard_held, true);
  while (pool_jobs() < h->batch_done)
    sched_yield(); /* the thread's, not the coroutine's: shard 1 stays held */
  CO_EQ(weft_cancel(h->du), 0);
  return NULL;
}

static uint64_t pool_queued(void)
{
  weft_stats s;
  return weft_stats_get(NULL, -1, &s) == 0 ? s.pool_queued : UINT64_MAX;
}

static void *du_cancel_body(void *arg)
{
  (void)arg;
  du_hold h;
  atomic_init(&h.pool_held, false);
  atomic_init(&h.pool_release, false);
  atomic_init(&h.shard_held, false);
  weft_task *busy, *holder;
  CO_EQ(rt_spawn(&busy, WEFT_PLACE_PINNED, 0, occupy_pool, &h), 0);
  CO_CHECK(RT_POLL(atomic_load(&h.pool_held)));
  weft_du_totals t = {.bytes = 99};
  CO_EQ(rt_spawn(&h.du, WEFT_PLACE_PINNED, 1, du_wide, &t), 0);
  CO_CHECK(RT_POLL(pool_queued() == 1)); /* du's first batch, behind the busy job */
  uint64_t before = pool_jobs();
  h.batch_done = before + 2; /* the busy job, then the batch */
  CO_EQ(rt_spawn(&holder, WEFT_PLACE_PINNED, 1, cancel_du_after_its_batch, &h), 0);
  CO_CHECK(RT_POLL(atomic_load(&h.shard_held)));
  atomic_store(&h.pool_release, true);
  void *dr = NULL;
  CO_EQ(weft_join(h.du, &dr), -ECANCELED);
  CO_EQ((intptr_t)dr, -ECANCELED);
  CO_EQ(t.bytes, 99); /* *out untouched */
  CO_EQ(weft_join(holder, NULL), 0);
  CO_EQ(weft_join(busy, NULL), 0);
  CO_EQ(pool_jobs(), before + 2); /* no batch after the first */
  CO_EQ(pool_queued(), 0);
  return NULL;
}

Test(fs, du_cancelled_between_batches, .timeout = 60)
{
  AT(top, "wide");
  build_wide(top);
  weft_config c;
  rt_cfg(&c, 2);
  c.blocking_threads = 1;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_task *m = rt_submit_on(rt, 0, du_cancel_body, NULL);
  cr_assert_eq(weft_join(m, NULL), 0);
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}
