/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook": libweft-hook makes unmodified blocking code (legacy.c, which
 * knows nothing of weft) suspend coroutines instead of blocking shards.
 *
 * Most tests run on ONE shard: if a hooked call blocked the thread instead
 * of suspending the coroutine, the coroutine that would unblock it could
 * never run, and the test would hang until its timeout - so each of them
 * fails without the hook rather than passing slowly. The tasks are pinned:
 * legacy code reads errno after its calls, and a coroutine must not move
 * between threads inside such a function (see lib/hook.c).
 */
#include "io_helpers.h"
#include "legacy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* ---- descriptors ----------------------------------------------------------------------- */

struct reader {
  int fd;
  int result;
};

static void *byte_reader(void *arg)
{
  struct reader *r = arg;
  r->result = legacy_read_byte(r->fd);
  return NULL;
}

static void *read_write_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  /* A reader blocked in read(2) on the only shard; this coroutine still
   * runs, and its write(2) wakes the reader. */
  struct reader r = {.fd = p[0]};
  weft_task *t;
  weft_stats s0 = io_stats();
  CO_EQ(io_spawn_on(&t, 0, byte_reader, &r), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(legacy_write_byte(p[1], 'x'), 1);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(r.result, 'x');
  /* Both went through the ring. */
  CO_CHECK(io_stats().ops_submitted - s0.ops_submitted >= 2);

  /* readv, and EOF. */
  CO_EQ(write(p[1], "abcdef", 6), 6);
  char buf[6];
  CO_EQ(legacy_readv(p[0], buf, sizeof(buf)), 6);
  CO_CHECK(memcmp(buf, "abcdef", 6) == 0);
  close(p[1]);
  CO_EQ(legacy_read_byte(p[0]), 256);
  close(p[0]);

  /* Errors come back in errno. */
  CO_EQ(legacy_read_byte(-1), -EBADF);
  CO_EQ(legacy_write_byte(100000, 'y'), -EBADF);
  /* An O_NONBLOCK descriptor still answers at once. */
  CO_EQ(io_pipe(p), 0);
  CO_EQ(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
  CO_EQ(legacy_read_byte(p[0]), -EAGAIN);
  /* A deadline scope bounds a hooked call. */
  int64_t saved = weft_deadline_push(weft_now() + 20 * WEFT_MSEC);
  CO_EQ(fcntl(p[0], F_SETFL, 0), 0);
  CO_EQ(legacy_read_byte(p[0]), -ETIMEDOUT);
  weft_deadline_pop(saved);
  /* A cancelled task: ECANCELED, even with data waiting. */
  CO_EQ(write(p[1], "z", 1), 1);
  weft_cancel(weft_task_self());
  CO_EQ(legacy_read_byte(p[0]), -ECANCELED);
  io_close_pipe(p);
  return NULL;
}

Test(hook, read_and_write_suspend_the_coroutine, .timeout = 30)
{
  rt_run(1, read_write_main, NULL);
  rt_assert_clean();
}

/* ---- sockets ------------------------------------------------------------------------------- */

#define CLIENTS 4

struct server {
  int lfd;
  int accept_flags; /* -1: accept(2) */
  int cloexec[CLIENTS], nonblock[CLIENTS];
};

static void *echo_server(void *arg)
{
  struct server *s = arg;
  for (int i = 0; i < CLIENTS; i++) {
    /* Half through accept(2), half through accept4(2) with flags. */
    int flags = i % 2 ? SOCK_CLOEXEC | SOCK_NONBLOCK : -1;
    int fd = legacy_accept(s->lfd, flags);
    CO_CHECK(fd >= 0);
    if (fd < 0)
      return NULL;
    s->cloexec[i] = (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
    s->nonblock[i] = (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
    if (flags != -1)
      CO_EQ(fcntl(fd, F_SETFL, 0), 0);
    CO_CHECK(i % 2 ? legacy_echo_socket(fd) > 0 : legacy_echo(fd) > 0);
    close(fd);
  }
  return NULL;
}

struct client {
  uint16_t port;
  char msg[32];
  char reply[64];
  ssize_t n;
};

static void *client(void *arg)
{
  struct client *c = arg;
  c->n = legacy_client(c->port, c->msg, c->reply, sizeof(c->reply));
  return NULL;
}

static void *sockets_main(void *arg)
{
  (void)arg;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CO_CHECK(lfd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  CO_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  CO_EQ(listen(lfd, 16), 0);
  CO_EQ(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);

  struct server s = {.lfd = lfd};
  weft_task *st, *ct[CLIENTS];
  struct client c[CLIENTS];
  CO_EQ(io_spawn_on(&st, 0, echo_server, &s), 0);
  /* The clients one after another: the server takes them in order. */
  for (int i = 0; i < CLIENTS; i++) {
    c[i] = (struct client){.port = ntohs(sa.sin_port)};
    snprintf(c[i].msg, sizeof(c[i].msg), "hello from client %d", i);
    CO_EQ(io_spawn_on(&ct[i], 0, client, &c[i]), 0);
    CO_EQ(weft_join(ct[i], NULL), 0);
    CO_EQ(c[i].n, (ssize_t)strlen(c[i].msg));
    CO_CHECK(c[i].n > 0 && memcmp(c[i].reply, c[i].msg, (size_t)c[i].n) == 0);
  }
  CO_EQ(weft_join(st, NULL), 0);
  /* accept(2) gives no flags; accept4(2) exactly those asked for. */
  for (int i = 0; i < CLIENTS; i++) {
    CO_EQ(s.cloexec[i], i % 2);
    CO_EQ(s.nonblock[i], i % 2);
  }
  /* A bad accept4 flag is EINVAL; a refused connection ECONNREFUSED. */
  CO_EQ(legacy_accept(lfd, 0x40000000), -EINVAL);
  close(lfd);
  char reply[4];
  CO_EQ(legacy_client(ntohs(sa.sin_port), "x", reply, sizeof(reply)), -ECONNREFUSED);
  return NULL;
}

Test(hook, a_tcp_echo_of_legacy_code_on_one_shard, .timeout = 30)
{
  rt_run(1, sockets_main, NULL);
  rt_assert_clean();
}

/* ---- poll ---------------------------------------------------------------------------------- */

struct poller {
  struct pollfd fds[3];
  nfds_t n;
  int timeout;
  bool ppoll; /* ppoll without a mask or a timeout instead */
  int result;
};

static void *poller(void *arg)
{
  struct poller *p = arg;
  p->result = p->ppoll ? legacy_ppoll(p->fds, p->n, NULL) : legacy_poll(p->fds, p->n, p->timeout);
  return NULL;
}

static void *poll_main(void *arg)
{
  (void)arg;
  int a[2], b[2];
  CO_EQ(io_pipe(a), 0);
  CO_EQ(io_pipe(b), 0);

  /* Several descriptors, no timeout: woken by a write to the second. */
  struct poller p = {.fds = {{a[0], POLLIN, 0}, {b[0], POLLIN, 0}, {-1, POLLIN, 0}},
                     .n = 3,
                     .timeout = -1};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, poller, &p), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(write(b[1], "q", 1), 1);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(p.result, 1);
  CO_EQ(p.fds[0].revents, 0);
  CO_EQ(p.fds[1].revents, POLLIN);
  CO_EQ(p.fds[2].revents, 0);

  /* One descriptor, woken the same way. */
  struct poller q = {.fds = {{a[0], POLLIN, 0}}, .n = 1, .timeout = -1};
  CO_EQ(io_spawn_on(&t, 0, poller, &q), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(write(a[1], "r", 1), 1);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(q.result, 1);
  CO_EQ(q.fds[0].revents, POLLIN);

  /* Ready at once; with timeout 0 too. */
  struct pollfd both[2] = {{a[0], POLLIN, 0}, {b[1], POLLOUT, 0}};
  CO_EQ(legacy_poll(both, 2, 0), 2);
  CO_EQ(both[0].revents, POLLIN);
  CO_EQ(both[1].revents, POLLOUT);

  /* Nothing ready: 0 when the timeout passes (one and several fds, none). */
  char c;
  CO_EQ(read(a[0], &c, 1), 1);
  CO_EQ(read(b[0], &c, 1), 1);
  struct pollfd none[2] = {{a[0], POLLIN, 0}, {b[0], POLLIN, 0}};
  int64_t t0 = weft_now();
  CO_EQ(legacy_poll(none, 2, 20), 0);
  CO_EQ(legacy_poll(none, 1, 20), 0);
  CO_EQ(legacy_poll(none, 2, 0), 0);
  CO_EQ(legacy_poll(NULL, 0, 20), 0);
  CO_CHECK(weft_now() >= t0 + 60 * WEFT_MSEC);

  /* ppoll without a signal mask waits the same way; its timespec is left
   * as it was, and an invalid one is EINVAL. */
  struct poller pp = {.fds = {{a[0], POLLIN, 0}, {b[0], POLLIN, 0}}, .n = 2, .ppoll = true};
  CO_EQ(io_spawn_on(&t, 0, poller, &pp), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(write(a[1], "p", 1), 1);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(pp.result, 1);
  CO_EQ(pp.fds[0].revents, POLLIN);
  CO_EQ(read(a[0], &c, 1), 1);
  struct timespec ts = {0, 20 * 1000 * 1000};
  t0 = weft_now();
  CO_EQ(legacy_ppoll(none, 2, &ts), 0);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  CO_CHECK(ts.tv_sec == 0 && ts.tv_nsec == 20 * 1000 * 1000);
  ts.tv_nsec = -1;
  CO_EQ(legacy_ppoll(none, 2, &ts), -EINVAL);

  /* A closed descriptor is POLLNVAL, not an error. */
  struct pollfd bad[2] = {{100000, POLLIN, 0}, {a[0], POLLIN, 0}};
  CO_EQ(legacy_poll(bad, 1, -1), 1);
  CO_EQ(bad[0].revents, POLLNVAL);
  CO_EQ(legacy_poll(bad, 2, -1), 1);
  CO_EQ(bad[0].revents, POLLNVAL);
  CO_EQ(bad[1].revents, 0);

  /* A deadline scope that ends first: ETIMEDOUT, not poll's 0. */
  int64_t saved = weft_deadline_push(weft_now() + 20 * WEFT_MSEC);
  CO_EQ(legacy_poll(none, 2, 3600 * 1000), -ETIMEDOUT);
  CO_EQ(legacy_poll(none, 1, -1), -ETIMEDOUT);
  weft_deadline_pop(saved);
  io_close_pipe(a);
  io_close_pipe(b);
  return NULL;
}

Test(hook, poll_waits_as_a_coroutine, .timeout = 30)
{
  rt_run(1, poll_main, NULL);
  rt_assert_clean();
}

/* weft's rule for a wait that may wait (see lib/hook.c): a deadline scope
 * already over fails it with ETIMEDOUT, a cancelled task with ECANCELED -
 * ready or not, as read(2) of waiting data does (read_write_main) - with one
 * descriptor or several, through poll, ppoll, select and pselect alike. A
 * timeout of 0 cannot wait: libc's own answer. */
static void ready_waits_fail(int a0, int b1, int err)
{
  struct pollfd one[1] = {{a0, POLLIN, 0}};
  struct pollfd two[2] = {{a0, POLLIN, 0}, {b1, POLLOUT, 0}};
  CO_EQ(legacy_poll(one, 1, -1), err);
  CO_EQ(legacy_poll(two, 2, -1), err);
  CO_EQ(legacy_poll(two, 2, 3600 * 1000), err);
  CO_EQ(legacy_ppoll(two, 2, NULL), err);
  fd_set rd, wr;
  FD_ZERO(&rd);
  FD_SET(a0, &rd);
  int nfds = (a0 > b1 ? a0 : b1) + 1;
  CO_EQ(legacy_select(nfds, &rd, NULL, NULL, NULL), err);
  FD_ZERO(&rd);
  FD_ZERO(&wr);
  FD_SET(a0, &rd);
  FD_SET(b1, &wr);
  CO_EQ(legacy_select(nfds, &rd, &wr, NULL, NULL), err);
  FD_ZERO(&rd);
  FD_SET(a0, &rd);
  FD_SET(b1, &rd);
  CO_EQ(legacy_pselect(nfds, &rd, NULL), err);
  /* Cannot wait: both are ready. */
  CO_EQ(legacy_poll(one, 1, 0), 1);
  CO_EQ(legacy_poll(two, 2, 0), 2);
}

static void *ready_waits_main(void *arg)
{
  (void)arg;
  int a[2], b[2];
  CO_EQ(io_pipe(a), 0);
  CO_EQ(io_pipe(b), 0);
  CO_EQ(write(a[1], "r", 1), 1); /* a[0] readable, b[1] writable */
  int64_t saved = weft_deadline_push(weft_now() - 1);
  ready_waits_fail(a[0], b[1], -ETIMEDOUT);
  weft_deadline_pop(saved);
  weft_cancel(weft_task_self());
  ready_waits_fail(a[0], b[1], -ECANCELED);
  io_close_pipe(a);
  io_close_pipe(b);
  return NULL;
}

Test(hook, poll_and_select_fail_first_when_ready, .timeout = 30)
{
  rt_run(1, ready_waits_main, NULL);
  rt_assert_clean();
}

/* ---- select -------------------------------------------------------------------------------- */

struct selecter {
  int fd;
  bool pselect; /* pselect without a mask or a timeout instead */
  fd_set rd;
  int result;
};

static void *selecter(void *arg)
{
  struct selecter *s = arg;
  FD_ZERO(&s->rd);
  FD_SET(s->fd, &s->rd);
  s->result = s->pselect ? legacy_pselect(s->fd + 1, &s->rd, NULL)
                         : legacy_select(s->fd + 1, &s->rd, NULL, NULL, NULL);
  return NULL;
}

static void *select_main(void *arg)
{
  (void)arg;
  int a[2], b[2];
  CO_EQ(io_pipe(a), 0);
  CO_EQ(io_pipe(b), 0);
  /* Waiting without a timeout on the only shard: woken by a later write. */
  struct selecter s = {.fd = a[0]};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, selecter, &s), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(write(a[1], "s", 1), 1);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(s.result, 1);
  CO_CHECK(FD_ISSET(a[0], &s.rd));

  /* Three sets: a readable pipe, a writable one, and bits cleared for the
   * rest; the count is of bits set. */
  fd_set rd, wr, ex;
  FD_ZERO(&rd);
  FD_ZERO(&wr);
  FD_ZERO(&ex);
  FD_SET(a[0], &rd);
  FD_SET(b[0], &rd);
  FD_SET(b[1], &wr);
  FD_SET(b[0], &ex);
  int nfds = (a[0] > b[1] ? a[0] : b[1]) + 1;
  struct timeval tv = {5, 0};
  CO_EQ(legacy_select(nfds, &rd, &wr, &ex, &tv), 2);
  CO_CHECK(FD_ISSET(a[0], &rd) && !FD_ISSET(b[0], &rd));
  CO_CHECK(FD_ISSET(b[1], &wr));
  CO_CHECK(!FD_ISSET(b[0], &ex));
  CO_CHECK(tv.tv_sec <= 5 && (tv.tv_sec > 0 || tv.tv_usec > 0)); /* what remained */

  /* Nothing ready: 0 at the timeout, the sets emptied, no time left. */
  char c;
  CO_EQ(read(a[0], &c, 1), 1);
  FD_ZERO(&rd);
  FD_SET(a[0], &rd);
  tv = (struct timeval){0, 20000};
  int64_t t0 = weft_now();
  CO_EQ(legacy_select(a[0] + 1, &rd, NULL, NULL, &tv), 0);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  CO_CHECK(!FD_ISSET(a[0], &rd));
  CO_CHECK(tv.tv_sec == 0 && tv.tv_usec == 0);

  /* pselect without a signal mask waits the same way; its timespec is left
   * as it was, and an invalid one is EINVAL. */
  struct selecter ps = {.fd = a[0], .pselect = true};
  CO_EQ(io_spawn_on(&t, 0, selecter, &ps), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(write(a[1], "t", 1), 1);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(ps.result, 1);
  CO_CHECK(FD_ISSET(a[0], &ps.rd));
  CO_EQ(read(a[0], &c, 1), 1);
  struct timespec ts = {0, 20 * 1000 * 1000};
  FD_SET(a[0], &rd);
  t0 = weft_now();
  CO_EQ(legacy_pselect(a[0] + 1, &rd, &ts), 0);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  CO_CHECK(ts.tv_sec == 0 && ts.tv_nsec == 20 * 1000 * 1000);
  ts.tv_sec = -1;
  CO_EQ(legacy_pselect(a[0] + 1, &rd, &ts), -EINVAL);

  /* A hang-up is readable; a closed descriptor is EBADF; bad arguments. */
  close(b[1]);
  FD_ZERO(&rd);
  FD_SET(b[0], &rd);
  CO_EQ(legacy_select(b[0] + 1, &rd, NULL, NULL, NULL), 1);
  FD_ZERO(&rd);
  FD_SET(b[1], &rd); /* closed above */
  CO_EQ(legacy_select(b[1] + 1, &rd, NULL, NULL, NULL), -EBADF);
  tv = (struct timeval){0, -1}; /* (a tv_usec of a second or more is taken: test_hook_libc.c) */
  CO_EQ(legacy_select(1, NULL, NULL, NULL, &tv), -EINVAL);
  CO_EQ(legacy_select(-1, NULL, NULL, NULL, NULL), -EINVAL);
  /* No descriptors: a sleep. */
  tv = (struct timeval){0, 10000};
  CO_EQ(legacy_select(0, NULL, NULL, NULL, &tv), 0);
  close(b[0]);
  io_close_pipe(a);
  return NULL;
}

Test(hook, select_waits_as_a_coroutine, .timeout = 30)
{
  rt_run(1, select_main, NULL);
  rt_assert_clean();
}

/* ---- sleeps -------------------------------------------------------------------------------- */

struct sleeper {
  int kind; /* 0 nanosleep, 1 usleep, 2 sleep */
  int result;
  struct timespec rem;
};

static void *sleeper(void *arg)
{
  struct sleeper *s = arg;
  struct timespec hour = {3600, 0};
  if (s->kind == 0)
    s->result = legacy_nanosleep(&hour, &s->rem);
  else if (s->kind == 1)
    s->result = legacy_usleep(4000000000u);
  else
    s->result = (int)legacy_sleep(3600);
  return NULL;
}

static void *sleep_main(void *arg)
{
  (void)arg;
  /* An hour's sleep of each kind on the only shard, cancelled from here:
   * ECANCELED (a loop retrying on EINTR ends), nanosleep says what was
   * left, sleep returns the seconds left. */
  for (int kind = 0; kind < 3; kind++) {
    struct sleeper s = {.kind = kind};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 0, sleeper, &s), 0);
    CO_CHECK(io_wait_suspended(1));
    CO_EQ(weft_cancel(t), 0);
    CO_EQ(weft_join(t, NULL), -ECANCELED);
    if (kind == 0) {
      CO_EQ(s.result, -ECANCELED);
      CO_CHECK(s.rem.tv_sec > 3000 && s.rem.tv_sec < 3600);
    } else if (kind == 1) {
      CO_EQ(s.result, -ECANCELED);
    } else {
      CO_CHECK(s.result > 3000 && s.result <= 3600);
    }
  }
  /* Short sleeps end on time; bad requests are EINVAL. */
  int64_t t0 = weft_now();
  struct timespec ms = {0, 10 * 1000000};
  CO_EQ(legacy_nanosleep(&ms, NULL), 0);
  CO_EQ(legacy_usleep(10000), 0);
  CO_EQ(legacy_sleep(0), 0);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  struct timespec bad = {0, 1000000000};
  CO_EQ(legacy_nanosleep(&bad, NULL), -EINVAL);
  bad = (struct timespec){-1, 0};
  CO_EQ(legacy_nanosleep(&bad, NULL), -EINVAL);
  /* A deadline scope ends a sleep with ETIMEDOUT. */
  int64_t saved = weft_deadline_push(weft_now() + 20 * WEFT_MSEC);
  struct timespec hour = {3600, 0}, rem;
  CO_EQ(legacy_nanosleep(&hour, &rem), -ETIMEDOUT);
  weft_deadline_pop(saved);
  return NULL;
}

Test(hook, sleeps_suspend_and_end_on_cancel, .timeout = 30)
{
  rt_run(1, sleep_main, NULL);
  rt_assert_clean();
}

/* ---- outside coroutines ----------------------------------------------------------------------- */

/* Something only libc's read does: a socket's SO_RCVTIMEO ends it with
 * EAGAIN. weft's own calls wait for readiness whatever the socket's
 * timeout, so a hook that took this read would hang. */
static void check_rcvtimeo_is_libc(void)
{
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct timeval tv = {0, 20000};
  cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  /* A signal ends such a read with EINTR (socket calls with a timeout are
   * never restarted): read again. */
  int r, interrupted = 0;
  while ((r = legacy_read_byte(sv[0])) == -EINTR && interrupted < 1000)
    interrupted++;
  cr_assert_eq(r, -EAGAIN, "read gave %d after %d EINTR", r, interrupted);
  close(sv[0]);
  close(sv[1]);
}

Test(hook, plain_threads_get_libc, .timeout = 30)
{
  /* No runtime at all: the calls are libc's, errno and all. */
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  cr_assert_eq(legacy_write_byte(p[1], 'k'), 1);
  struct pollfd pf = {p[0], POLLIN, 0};
  cr_assert_eq(legacy_poll(&pf, 1, 0), 1);
  cr_assert_eq(pf.revents, POLLIN);
  cr_assert_eq(legacy_read_byte(p[0]), 'k');
  cr_assert_eq(legacy_read_byte(-1), -EBADF);
  struct timespec ms = {0, 1000000};
  cr_assert_eq(legacy_nanosleep(&ms, NULL), 0);
  cr_assert_eq(legacy_usleep(1000), 0);
  io_close_pipe(p);
  check_rcvtimeo_is_libc();

  /* And on a plain thread while a runtime runs: still libc (a blocking
   * read here blocks this thread only, which the write then ends). */
  weft_runtime *rt = rt_start(1);
  cr_assert_eq(io_pipe(p), 0);
  cr_assert_eq(legacy_write_byte(p[1], 'm'), 1);
  weft_stats s0, s1;
  cr_assert_eq(weft_stats_get(rt, 0, &s0), 0);
  cr_assert_eq(legacy_read_byte(p[0]), 'm');
  cr_assert_eq(weft_stats_get(rt, 0, &s1), 0);
  cr_assert_eq(s1.ops_submitted, s0.ops_submitted);
  io_close_pipe(p);
  check_rcvtimeo_is_libc();
  rt_stop_idle(rt);
}
