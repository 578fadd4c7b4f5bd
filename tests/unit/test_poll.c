/* SPDX-License-Identifier: MIT */
/*
 * weft_poll: readiness of a descriptor weft does not transfer on, in a
 * coroutine (IORING_OP_POLL_ADD) and on a plain thread (poll(2)) - the ready
 * events, level readiness, hang-up reported unasked (and nothing else
 * unasked: POLLRDHUP), bad descriptors and
 * event masks, deadline and cancel (the poll is really gone: a later write
 * wakes nobody and loses nothing).
 */
#include "io_helpers.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

/* What both kinds of caller must see, given a fresh pipe. */
static void check_poll_semantics(int p[2])
{
  /* An empty pipe: not readable before the deadline; writable at once. */
  int64_t t0 = weft_now();
  CO_EQ(weft_poll_dl(p[0], POLLIN, t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  CO_EQ(weft_poll(p[1], POLLOUT), POLLOUT);
  CO_EQ(weft_poll_dl(p[1], POLLIN | POLLOUT, weft_now() + WEFT_SEC), POLLOUT);

  /* Level: readable while the byte is there, and the poll takes nothing. */
  CO_EQ(write(p[1], "x", 1), 1);
  CO_EQ(weft_poll(p[0], POLLIN), POLLIN);
  CO_EQ(weft_poll(p[0], POLLIN), POLLIN);
  CO_EQ(io_pending(p[0]), 1);
  char c;
  CO_EQ(read(p[0], &c, 1), 1);

  /* A passed deadline fails first, even though the pipe is writable - and
   * before the descriptor is looked at. */
  CO_EQ(weft_poll_dl(p[1], POLLOUT, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_poll_dl(-1, POLLIN, weft_now() - 1), -ETIMEDOUT);

  /* A file without a poll method (/dev/null, a regular file) is ready for
   * reading and writing, and for nothing else ever: waited for until the
   * deadline, as poll(2) would (io_uring's poll refuses the wait). */
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  CO_EQ(weft_poll(null, POLLIN | POLLPRI), POLLIN);
  CO_EQ(weft_poll_dl(null, POLLPRI, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_poll_dl(null, 0, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  close(null);

  /* Bad descriptors and masks. */
  CO_EQ(weft_poll(-1, POLLIN), -EBADF);
  CO_EQ(weft_poll_dl(100000, POLLIN, weft_now() + WEFT_SEC), -EBADF);
  CO_EQ(weft_poll(p[0], 0x10000u), -EINVAL);
  CO_EQ(weft_poll(p[0], ~0u), -EINVAL);
}

/* Drains the other end of a half-closed socket pair once the poll for room
 * waits (a drain before it would answer the poll's first look). */
struct drainer {
  int fd;
  weft_runtime *rt;
};

static void *drain_late(void *arg)
{
  struct drainer *d = arg;
  CO_CHECK(io_wait_suspended_rt(d->rt, 1));
  char buf[4096];
  while (recv(d->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  return NULL;
}

/* A socket whose peer shut down its writing side: POLLRDHUP is reported only
 * when asked, as poll(2) reports it - io_uring's poll adds it unasked - and
 * a socket not ready for what was asked is waited for, not reported. rt:
 * the caller's runtime, whose wait is woken; NULL on a plain thread. */
static void check_half_closed(weft_runtime *rt)
{
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CO_EQ(shutdown(sv[1], SHUT_WR), 0);
  CO_EQ(weft_poll(sv[0], POLLIN), POLLIN);
  CO_EQ(weft_poll(sv[0], POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);
  static char junk[4096];
  while (send(sv[0], junk, sizeof(junk), MSG_DONTWAIT) > 0) {
  }
  CO_EQ(weft_poll_dl(sv[0], POLLOUT, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  if (rt) {
    struct drainer d = {.fd = sv[1], .rt = rt};
    pthread_t th;
    CO_EQ(pthread_create(&th, NULL, drain_late, &d), 0);
    CO_EQ(weft_poll(sv[0], POLLOUT), POLLOUT);
    pthread_join(th, NULL);
  }
  close(sv[0]);
  close(sv[1]);
}

static void *coroutine_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_stats s0 = io_stats();
  check_poll_semantics(p);
  weft_stats s1 = io_stats();
  /* Through the ring: at least the polls that had to wait or answer. */
  CO_CHECK(s1.ops_submitted - s0.ops_submitted >= 5);

  /* Hang-up: the writer closes; a poll for nothing but errors returns it. */
  close(p[1]);
  CO_EQ(weft_poll_dl(p[0], 0, weft_now() + WEFT_SEC), POLLHUP);
  CO_CHECK(weft_poll(p[0], POLLIN) & POLLHUP);
  close(p[0]);
  check_half_closed(weft_runtime_current());
  return NULL;
}

Test(poll, in_a_coroutine, .timeout = 30)
{
  rt_run(1, coroutine_main, NULL);
  rt_assert_clean();
}

Test(poll, on_a_plain_thread, .timeout = 30)
{
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  check_poll_semantics(p);
  close(p[1]);
  cr_assert_eq(weft_poll_dl(p[0], 0, weft_now() + WEFT_SEC), POLLHUP);
  close(p[0]);
  check_half_closed(NULL);
  rt_assert_clean();
}

/* ---- waking, and giving up ------------------------------------------------------ */

struct poller {
  int fd;
  atomic_bool started;
  int64_t deadline;
};

static void *poller(void *arg)
{
  struct poller *pl = arg;
  atomic_store(&pl->started, true);
  return (void *)(intptr_t)weft_poll_dl(pl->fd, POLLIN, pl->deadline);
}

static void *wake_and_cancel_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);

  /* A poller on the other shard wakes when data arrives. */
  struct poller a = {.fd = p[0], .deadline = WEFT_NO_DEADLINE};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, poller, &a), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(write(p[1], "y", 1), 1);
  CO_EQ(rt_join_int(t), POLLIN);
  char c;
  CO_EQ(read(p[0], &c, 1), 1);

  /* Cancelled while it waits: -ECANCELED, and the poll is gone - data
   * written afterwards is all still there for the next reader. */
  struct poller b = {.fd = p[0], .deadline = WEFT_NO_DEADLINE};
  weft_stats s0 = io_stats();
  io_cancel_while_waiting(1, poller, &b);
  CO_EQ(io_stats().ops_cancelled - s0.ops_cancelled, 1);
  CO_EQ(write(p[1], "z", 1), 1);
  CO_EQ(io_pending(p[0]), 1);

  /* A deadline that passes while it waits (the other shard). */
  CO_EQ(read(p[0], &c, 1), 1);
  struct poller d = {.fd = p[0], .deadline = weft_now() + 30 * WEFT_MSEC};
  CO_EQ(io_spawn_on(&t, 1, poller, &d), 0);
  CO_EQ(rt_join_int(t), -ETIMEDOUT);
  CO_CHECK(weft_now() >= d.deadline);

  /* A task cancelled before it polls fails at once, ready or not. */
  CO_EQ(write(p[1], "w", 1), 1);
  weft_cancel(weft_task_self());
  CO_EQ(weft_poll(p[0], POLLIN), -ECANCELED);
  io_close_pipe(p);
  return NULL;
}

Test(poll, wakes_times_out_and_cancels, .timeout = 30)
{
  rt_run(2, wake_and_cancel_main, NULL);
  rt_assert_clean();
}
