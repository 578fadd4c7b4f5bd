/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of suite "bufio" (test_bufio_reader.c,
 * test_bufio_writer.c, test_bufio_copy.c): the end-of-test leak checks
 * (fd_base is set by the suite's setup in test_bufio_reader.c), helpers that
 * run beside a body as a coroutine or a thread (side_*), running a body in
 * a coroutine and on the test thread (run_both), the byte pattern, temporary
 * files and a checking receiver.
 */
#ifndef WEFT_TESTS_BUFIO_TEST_H
#define WEFT_TESTS_BUFIO_TEST_H

#include "rt_helpers.h"

#include "../coro/fault.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static inline int count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the DIR's own descriptor */
}

/* Open descriptors at the start of the test (set by the suite's .init). */
extern int fd_base;

/* The end of every test: nothing failed off the test thread, no descriptor
 * and (under ASan) no memory leaked. */
static inline void finish(void)
{
  rt_assert_clean();
  rt_assert_no_leaks();
  cr_assert_eq(count_fds(), fd_base, "descriptors leaked: %d open, %d at the start", count_fds(),
               fd_base);
}

static inline bool in_coro(void)
{
  return weft_task_self() != NULL;
}

/* A helper running beside the body: a coroutine in a coroutine, a thread
 * on a plain thread. */
typedef struct side {
  bool coro;
  weft_task *t;
  pthread_t th;
} side;

static inline void side_start(side *s, void *(*fn)(void *), void *arg)
{
  s->coro = in_coro();
  if (s->coro)
    CO_EQ(weft_spawn(&s->t, NULL, fn, arg), 0);
  else
    CO_EQ(pthread_create(&s->th, NULL, fn, arg), 0);
}

static inline intptr_t side_join(side *s)
{
  void *v = NULL;
  if (s->coro)
    CO_EQ(weft_join(s->t, &v), 0);
  else
    CO_EQ(pthread_join(s->th, &v), 0);
  return (intptr_t)v;
}

/* Runs body(arg) in a coroutine of a 2-shard runtime, then on this thread. */
static inline void run_both(void *(*body)(void *), void *arg)
{
  rt_run(2, body, arg);
  rt_assert_clean();
  body(arg);
  rt_assert_clean();
}

static inline void close2(int p[2])
{
  close(p[0]);
  close(p[1]);
}

static inline unsigned char pat(size_t i)
{
  return (unsigned char)((i * 2654435761u) >> 13);
}

static inline void fill_pat(unsigned char *b, size_t n, size_t from)
{
  for (size_t i = 0; i < n; i++)
    b[i] = pat(from + i);
}

/* An unnamed temporary file holding pat(0 .. n) (callable in coroutines). */
static inline int tmp_file(size_t n)
{
  int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  CO_CHECK(fd >= 0);
  unsigned char *b = malloc(n + 1);
  fill_pat(b, n, 0);
  CO_EQ(pwrite(fd, b, n, 0), (ssize_t)n);
  free(b);
  return fd;
}

/* Receives exactly n bytes from fd and checks them against pat(from ...);
 * then expects end of file if `eof`. Runs as a side: arg is a recv_job. */
typedef struct recv_job {
  int fd;
  size_t n, from;
  bool eof;
  int64_t pause; /* ns between reads (a slow drain), 0 for none */
  size_t step;   /* bytes per read */
} recv_job;

static inline void *recv_check(void *arg)
{
  recv_job *j = arg;
  size_t step = j->step ? j->step : 65536;
  unsigned char *b = malloc(step);
  size_t got = 0;
  bool same = true;
  while (got < j->n) {
    size_t want = j->n - got < step ? j->n - got : step;
    ssize_t r = weft_read(j->fd, b, want);
    if (r <= 0) {
      CO_EQ(r, 1);
      break;
    }
    for (ssize_t i = 0; i < r; i++)
      same &= b[i] == pat(j->from + got + (size_t)i);
    got += (size_t)r;
    if (j->pause)
      weft_sleep(j->pause);
  }
  CO_EQ(got, j->n);
  CO_CHECK(same);
  if (j->eof)
    CO_EQ(weft_read(j->fd, b, 1), 0);
  free(b);
  return NULL;
}

#endif
