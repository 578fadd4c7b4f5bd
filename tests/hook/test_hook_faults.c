/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook", weft's own failures that libc never gives: the hook
 * compiled into a program that links weft's internal archive (as
 * test_hook_rawsys.c), so that a fault site can make them happen.
 *
 * A full submission queue (WEFT__FAULT_OP_SQ: the SQ still full after a
 * submit) makes a weft call return -EBUSY with nothing done. read(2),
 * write(2), recv(2), send(2), poll(2)... never say EBUSY, and code written
 * for them takes it for a hard error: each hooked call must come back with
 * what libc would have given once the queue has room again.
 */
#include "io_helpers.h"

#include "fault.h"
#include "net_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* The next op of this task finds the SQ full. */
static void full_sq_once(void)
{
  weft__fault_arm(WEFT__FAULT_OP_SQ, 1);
}

/* The fault was met: the call under test did see -EBUSY from weft. */
static void check_met(void)
{
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_OP_SQ]), 0);
  weft__fault_arm(WEFT__FAULT_OP_SQ, 0);
}

static void *write_a_byte(void *arg)
{
  CO_EQ(write(*(int *)arg, "w", 1), 1);
  return NULL;
}

/* A poll of one descriptor or several, none ready: the first op is its
 * wait (in io_uring's poll, or in an epoll instance's), during which the
 * writer (queued behind this task) makes one ready. */
static void poll_full_sq(nfds_t nfds)
{
  int p[2], q[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(io_pipe(q), 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, write_a_byte, &q[1]), 0);
  full_sq_once();
  struct pollfd two[2] = {{.fd = q[0], .events = POLLIN}, {.fd = p[0], .events = POLLIN}};
  CO_EQ(poll(two, nfds, -1), 1);
  check_met();
  CO_EQ(two[0].revents, POLLIN);
  CO_EQ(weft_join(t, NULL), 0);
  io_close_pipe(p);
  io_close_pipe(q);
}

static void connect_accept_full_sq(void)
{
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  CO_EQ(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
  CO_EQ(listen(l, 4), 0);
  CO_EQ(getsockname(l, (struct sockaddr *)&a, &len), 0);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  full_sq_once();
  CO_EQ(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
  check_met();
  full_sq_once();
  int s = accept(l, NULL, NULL);
  check_met();
  CO_CHECK(s >= 0);
  close(s);
  close(c);
  close(l);
}

static void *full_sq_main(void *arg)
{
  (void)arg;
  int p[2], sv[2];
  char c = 0;
  CO_EQ(io_pipe(p), 0);
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);

  full_sq_once();
  errno = 0;
  CO_EQ(write(p[1], "a", 1), 1);
  check_met();
  full_sq_once();
  CO_EQ(read(p[0], &c, 1), 1);
  check_met();
  CO_EQ(c, 'a');

  struct iovec iov = {.iov_base = &c, .iov_len = 1};
  c = 'b';
  full_sq_once();
  CO_EQ(writev(p[1], &iov, 1), 1);
  check_met();
  c = 0;
  full_sq_once();
  CO_EQ(readv(p[0], &iov, 1), 1);
  check_met();
  CO_EQ(c, 'b');

  full_sq_once();
  CO_EQ(send(sv[1], "c", 1, 0), 1);
  check_met();
  full_sq_once();
  CO_EQ(recv(sv[0], &c, 1, 0), 1);
  check_met();
  CO_EQ(c, 'c');
  poll_full_sq(1);
  poll_full_sq(2);
  connect_accept_full_sq();
  CO_EQ(errno, 0); /* no call above failed, not even on the way */

  io_close_pipe(p);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

Test(hook, a_full_sq_is_waited_out_not_ebusy, .timeout = 30)
{
  atomic_store(&weft__net_nowait, false); /* the send is an op too */
  rt_run(1, full_sq_main, NULL);
  atomic_store(&weft__net_nowait, true);
  rt_assert_clean();
}

/* ---- a file with no pool thread to give --------------------------------------------- */

/* read(2) and write(2) of a regular file go to the blocking pool (hook.c,
 * "files with a position"). A pool that has no thread and cannot start one
 * (-EAGAIN) does not fail them: libc never says that of a file, so the call
 * runs on the calling thread instead, with its own result. */
static void *file_without_pool_main(void *arg)
{
  (void)arg;
  char path[] = "/tmp/weft_hook_nopool_XXXXXX";
  int fd = mkstemp(path);
  CO_CHECK(fd >= 0);
  if (fd < 0)
    return NULL;
  unlink(path);
  CO_EQ(io_stats().pool_threads, 0); /* the premise: no thread to fall back on */
  weft__fault_arm(WEFT__FAULT_THREAD, 1);
  errno = 0;
  CO_EQ(write(fd, "hello", 5), 5);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_THREAD]), 0); /* the start failed */
  CO_EQ(lseek(fd, 0, SEEK_CUR), 5);
  CO_EQ(lseek(fd, 1, SEEK_SET), 1);
  weft__fault_arm(WEFT__FAULT_THREAD, 1);
  char buf[8] = {0};
  CO_EQ(read(fd, buf, sizeof(buf)), 4);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_THREAD]), 0);
  CO_CHECK(memcmp(buf, "ello", 4) == 0);
  CO_EQ(lseek(fd, 0, SEEK_CUR), 5); /* the position moved as read(2) moves it */
  CO_EQ(errno, 0);
  weft_stats s = io_stats();
  CO_EQ(s.pool_jobs, 0); /* neither ran on the pool */
  CO_EQ(s.pool_threads, 0);
  weft__fault_arm(WEFT__FAULT_THREAD, 0);
  close(fd);
  return NULL;
}

Test(hook, a_file_read_or_written_with_no_pool_thread_runs_here, .timeout = 30)
{
  rt_run(1, file_without_pool_main, NULL);
  weft__fault_arm(WEFT__FAULT_THREAD, 0);
  rt_assert_clean();
}
