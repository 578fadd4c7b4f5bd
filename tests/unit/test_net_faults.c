/* SPDX-License-Identifier: MIT */
/*
 * Suite "net_faults": sockets when things go wrong - a peer that resets the
 * connection in the middle of a large send (no SIGPIPE, in a coroutine and
 * on a plain thread where only MSG_NOSIGNAL stands between the test and
 * death), refused connections, -EMFILE on accept and on the listener, a
 * listener without memory to queue a connection, bad
 * descriptors and arguments, O_NONBLOCK sockets, deadlines on accept,
 * connect and recv from a silent peer (the op is really cancelled: the
 * socket keeps working and no byte is lost), weft_cancel of a task blocked
 * in recv, every call kind on a plain thread with deadlines, and a tiny ring
 * with 64 connections in flight (no completion lost).
 */
#include "net_test.h"

#include "fault.h"

#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>

/* SIGPIPE back to its default action and unblocked on this thread: a
 * SIGPIPE raised here would kill the test process. */
static void sigpipe_kills(void)
{
  signal(SIGPIPE, SIG_DFL);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  pthread_sigmask(SIG_UNBLOCK, &s, NULL);
}

/* A closed TCP port on 127.0.0.1 (bound once, then closed). */
static int closed_port(void)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
    return -1;
  close(fd);
  return ntohs(sa.sin_port);
}

/* ---- a peer that resets the connection mid-send ------------------------------------ */

#define HUGE (32u << 20)

/* Reads a little, then closes with SO_LINGER 0: the kernel sends RST. */
static void *resetting_peer(void *arg)
{
  int fd = *(int *)arg;
  char buf[16384];
  size_t got = 0;
  while (got < 65536) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
  return NULL;
}

static void reset_during_send(void)
{
  int a = -1, b = -1;
  CO_EQ(tcp_pair_bufs(&a, &b, 16384), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, resetting_peer, &b), 0);
  char *buf = malloc(HUGE);
  memset(buf, 'r', HUGE);
  size_t done = 0;
  ssize_t r = weft_send_all(a, buf, HUGE, &done);
  CO_CHECK(r == -EPIPE || r == -ECONNRESET);
  CO_CHECK(done >= 65536 && done < HUGE);
  /* Every later send fails the same quiet way. */
  r = weft_send(a, buf, 1, 0);
  CO_CHECK(r == -EPIPE || r == -ECONNRESET);
  struct iovec iov = {.iov_base = buf, .iov_len = 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  r = weft_sendmsg(a, &m, 0);
  CO_CHECK(r == -EPIPE || r == -ECONNRESET);
  pthread_join(th, NULL);
  free(buf);
  close(a);
}

static void *reset_body(void *arg)
{
  (void)arg;
  reset_during_send();
  return NULL;
}

Test(net_faults, reset_during_send, .timeout = 60)
{
  sigpipe_kills();
  rt_run(2, reset_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net_faults, reset_during_send_ring_sends, .timeout = 60)
{
  sigpipe_kills();
  atomic_store(&weft__net_nowait, false);
  rt_run(2, reset_body, NULL);
  atomic_store(&weft__net_nowait, true);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net_faults, reset_during_send_plain_thread, .timeout = 60)
{
  sigpipe_kills();
  reset_during_send();
  rt_assert_clean();
}

/* Sends ten bytes, waits until the receiver has taken them (acked, then
 * gone from its queue: it is waiting for more), then resets. */
struct reset_after {
  int a, b;
};

static void *reset_after_ten(void *arg)
{
  struct reset_after *ra = arg;
  if (send(ra->a, "0123456789", 10, MSG_NOSIGNAL) != 10)
    return NULL;
  int q = 1;
  while (ioctl(ra->a, SIOCOUTQ, &q) == 0 && q > 0)
    sched_yield();
  q = 1;
  while (ioctl(ra->b, SIOCINQ, &q) == 0 && q > 0)
    sched_yield();
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(ra->a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(ra->a);
  return NULL;
}

/* A reset part-way through recv_exact is -ECONNRESET, with the bytes that
 * came before it: not -EPIPE, which says the peer closed its side. */
static void reset_during_recv_exact(void)
{
  struct reset_after ra;
  CO_EQ(tcp_pair(&ra.a, &ra.b), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, reset_after_ten, &ra), 0);
  char buf[20];
  size_t done = 99;
  CO_EQ(weft_recv_exact(ra.b, buf, sizeof(buf), &done), -ECONNRESET);
  CO_EQ(done, 10);
  CO_CHECK(memcmp(buf, "0123456789", 10) == 0);
  pthread_join(th, NULL);
  close(ra.b);
}

NET_BOTH_SIDES(net_faults, reset_during_recv_exact, reset_during_recv_exact, .timeout = 30)

/* ---- refused, EMFILE ----------------------------------------------------------- */

static void refused(void)
{
  int port = closed_port();
  CO_CHECK(port > 0);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port);
  CO_EQ(weft_tcp_connect("127.0.0.1", ps), -ECONNREFUSED);
  CO_EQ(weft_tcp_connect_dl("127.0.0.1", ps, weft_now() + 5 * WEFT_SEC), -ECONNREFUSED);
  int fd = weft_socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CO_EQ(weft_connect(fd, (struct sockaddr *)&sa, sizeof(sa)), -ECONNREFUSED);
  close(fd);
}

NET_BOTH_SIDES(net_faults, connect_refused, refused, .timeout = 30)

/* weft_accept with no descriptor left: -EMFILE, and the connection waits
 * in the backlog until there is one. */
static void accept_emfile(void)
{
  int lfd = weft_tcp_listen("127.0.0.1", "0", 8);
  CO_CHECK(lfd >= 0);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  int pad = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct rlimit old, low;
  CO_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)lowest_free_fd();
  CO_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  CO_EQ(weft_accept(lfd, NULL, NULL, 0), -EMFILE);
  CO_EQ(weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + WEFT_SEC), -EMFILE);
  close(pad);
  int s = weft_accept(lfd, NULL, NULL, 0);
  CO_CHECK(s >= 0);
  CO_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  CO_EQ(weft_send(c, "ok", 2, 0), 2);
  char buf[2];
  CO_EQ(weft_recv_exact(s, buf, 2, NULL), 2);
  close(s);
  close(c);
  close(lfd);
}

NET_BOTH_SIDES(net_faults, accept_emfile, accept_emfile, .timeout = 30)

/* -EMFILE: reported once by accept, and the listener serves again as soon
 * as descriptors are free - the connection waited in the kernel's backlog. */
static void *listener_emfile_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  int pad = open("/dev/null", O_RDONLY | O_CLOEXEC);
  CO_CHECK(pad >= 0);
  struct rlimit old, low;
  CO_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)lowest_free_fd(); /* every lower number is taken */
  CO_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  /* The multishot accept takes the limit when it is armed (by open). */
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  CO_EQ(weft_listener_accept(l, weft_now() + 5 * WEFT_SEC), -EMFILE);
  close(pad); /* one descriptor free, the limit still low */
  int s = weft_listener_accept(l, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(s >= 0);
  CO_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  CO_EQ(weft_send(c, "hi", 2, 0), 2);
  char buf[2];
  CO_EQ(weft_recv_exact(s, buf, 2, NULL), 2);
  close(s);
  /* And keeps serving. */
  int c2 = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c2 >= 0);
  s = weft_listener_accept(l, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(s >= 0);
  close(s);
  weft_listener_close(l);
  close(c2);
  close(c);
  close(lfd);
  return NULL;
}

Test(net_faults, listener_emfile, .timeout = 60)
{
  rt_run(1, listener_emfile_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* No memory to queue a connection the multishot accept took: that one is
 * closed (its client sees the end of the stream, not a connection that
 * hangs), the next accept reports -ENOMEM once, and the listener serves on. */
static void *listener_nomem_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  /* A wait with a deadline first, so the timer heap has its array and the
   * next allocation of this shard is the listener's queue. */
  CO_EQ(weft_listener_accept(l, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int c1 = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c1 >= 0);
  CO_EQ(weft_listener_accept(l, weft_now() + 10 * WEFT_SEC), -ENOMEM);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 0);
  char b;
  CO_EQ(weft_recv_dl(c1, &b, 1, 0, weft_now() + 10 * WEFT_SEC), 0);
  int c2 = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c2 >= 0);
  int s = weft_listener_accept(l, weft_now() + 10 * WEFT_SEC);
  CO_CHECK(s >= 0);
  CO_EQ(weft_send(c2, "ok", 2, 0), 2);
  char buf[2];
  CO_EQ(weft_recv_exact(s, buf, 2, NULL), 2);
  close(s);
  weft_listener_close(l);
  close(c2);
  close(c1);
  close(lfd);
  return NULL;
}

Test(net_faults, listener_without_memory_drops_one_connection, .timeout = 60)
{
  rt_run(1, listener_nomem_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- bad descriptors, O_NONBLOCK -------------------------------------------------- */

static void bad_fds(void)
{
  char buf[4];
  struct sockaddr_in sa = {.sin_family = AF_INET};
  socklen_t len = sizeof(sa);
  struct iovec iov = {.iov_base = buf, .iov_len = 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  for (int fd = -1; fd <= 9999; fd += 10000) { /* -1, and a closed descriptor */
    CO_EQ(weft_accept(fd, NULL, NULL, 0), -EBADF);
    CO_EQ(weft_accept_dl(fd, NULL, NULL, 0, weft_now() + WEFT_SEC), -EBADF);
    CO_EQ(weft_connect(fd, (struct sockaddr *)&sa, len), -EBADF);
    CO_EQ(weft_recv(fd, buf, 1, 0), -EBADF);
    CO_EQ(weft_recv_dl(fd, buf, 1, 0, weft_now() + WEFT_SEC), -EBADF);
    CO_EQ(weft_send(fd, buf, 1, 0), -EBADF);
    CO_EQ(weft_recvmsg(fd, &m, 0), -EBADF);
    CO_EQ(weft_sendmsg(fd, &m, 0), -EBADF);
    CO_EQ(weft_recvfrom(fd, buf, 1, 0, NULL, NULL), -EBADF);
    CO_EQ(weft_sendto(fd, buf, 1, 0, (struct sockaddr *)&sa, len), -EBADF);
    CO_EQ(weft_recv_exact(fd, buf, 1, NULL), -EBADF);
    CO_EQ(weft_send_all(fd, buf, 1, NULL), -EBADF);
    CO_EQ(weft_shutdown(fd, SHUT_RDWR), -EBADF);
    CO_EQ(weft_bind(fd, (struct sockaddr *)&sa, len), -EBADF);
    CO_EQ(weft_listen(fd, 1), -EBADF);
    CO_EQ(weft_getsockname(fd, (struct sockaddr *)&sa, &len), -EBADF);
    CO_EQ(weft_getpeername(fd, (struct sockaddr *)&sa, &len), -EBADF);
    int v = 1;
    CO_EQ(weft_setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)), -EBADF);
    CO_EQ(weft_getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), -EBADF);
  }
  /* Not a socket. */
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(weft_recv(p[0], buf, 1, 0), -ENOTSOCK);
  CO_EQ(weft_send(p[1], buf, 1, 0), -ENOTSOCK);
  CO_EQ(weft_accept(p[0], NULL, NULL, 0), -ENOTSOCK);
  CO_EQ(weft_shutdown(p[0], SHUT_RD), -ENOTSOCK);
  io_close_pipe(p);
  CO_EQ(weft_socket(AF_INET, 12345, 0), -EINVAL);
  CO_EQ(weft_socket(12345, SOCK_STREAM, 0), -EAFNOSUPPORT);
  /* An address without its length would lose the connection: refused. */
  int l = weft_tcp_listen("127.0.0.1", "0", 1);
  CO_EQ(weft_accept(l, (struct sockaddr *)&sa, NULL, 0), -EFAULT);
  /* So would a length the kernel reads as negative (an int above INT_MAX):
   * refused, and the connection is still there for the next accept. */
  struct sockaddr_in la;
  socklen_t ll = sizeof(la);
  CO_EQ(weft_getsockname(l, (struct sockaddr *)&la, &ll), 0);
  int c = weft_socket(AF_INET, SOCK_STREAM, 0);
  CO_EQ(weft_connect(c, (struct sockaddr *)&la, ll), 0);
  struct pollfd pl = {.fd = l, .events = POLLIN};
  CO_EQ(poll(&pl, 1, 10000), 1); /* queued */
  socklen_t huge = (socklen_t)INT_MAX + 1;
  CO_EQ(weft_accept(l, (struct sockaddr *)&sa, &huge, 0), -EINVAL);
  CO_EQ(poll(&pl, 1, 0), 1);
  if (pl.revents & POLLIN) {
    len = sizeof(sa);
    int s = weft_accept(l, (struct sockaddr *)&sa, &len, 0);
    CO_CHECK(s >= 0);
    close(s);
  }
  close(c);
  close(l);
}

NET_BOTH_SIDES(net_faults, bad_descriptors, bad_fds, .timeout = 30)

/* Every weft call waits on an O_NONBLOCK socket too; MSG_DONTWAIT is how to
 * ask for -EAGAIN. Same on both paths. */
struct nb_arg {
  int fd;
  rt_blocker reader;
};

/* Sends once the reader waits: in a coroutine, suspended; on a plain
 * thread, asleep in poll(2). */
static void *late_writer(void *arg)
{
  struct nb_arg *a = arg;
  if (!rt_wait_blocked(a->reader, SYS_poll, SYS_ppoll))
    rt_fail(__FILE__, __LINE__, "late_writer: the reader never waited");
  if (send(a->fd, "late", 4, MSG_NOSIGNAL) != 4)
    rt_fail(__FILE__, __LINE__, "late_writer: send failed");
  return NULL;
}

static void nonblock_sockets(void)
{
  int a = -1, b = -1;
  CO_EQ(tcp_pair(&a, &b), 0);
  CO_EQ(fcntl(b, F_SETFL, fcntl(b, F_GETFL) | O_NONBLOCK), 0);
  char buf[8];
  CO_EQ(weft_recv(b, buf, sizeof(buf), MSG_DONTWAIT), -EAGAIN);
  CO_EQ(weft_recv_dl(b, buf, sizeof(buf), 0, weft_now() + 30 * WEFT_MSEC), -ETIMEDOUT);
  struct nb_arg na = {.fd = a, .reader = rt_blocker_self()};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, late_writer, &na), 0);
  CO_EQ(weft_recv(b, buf, sizeof(buf), 0), 4); /* waited, no -EAGAIN */
  pthread_join(th, NULL);
  /* An O_NONBLOCK listener waits in accept as well. */
  int l = weft_tcp_listen("127.0.0.1", "0", 4);
  CO_EQ(fcntl(l, F_SETFL, fcntl(l, F_GETFL) | O_NONBLOCK), 0);
  CO_EQ(weft_accept_dl(l, NULL, NULL, 0, weft_now() + 30 * WEFT_MSEC), -ETIMEDOUT);
  close(l);
  close(a);
  close(b);
}

NET_BOTH_SIDES(net_faults, nonblock_sockets, nonblock_sockets, .timeout = 30)

/* ---- deadlines ----------------------------------------------------------------- */

/* Deadlines on accept, recv from a silent peer and connect to a full
 * backlog. After each, the socket still works and nothing was taken by the
 * cancelled op. */
static void deadlines(void)
{
  int lfd = weft_tcp_listen("127.0.0.1", "0", 8);
  CO_CHECK(lfd >= 0);
  int64_t dl = weft_now() + 50 * WEFT_MSEC;
  CO_EQ(weft_accept_dl(lfd, NULL, NULL, 0, dl), -ETIMEDOUT);
  CO_CHECK(weft_now() >= dl);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  int s = weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(s >= 0);

  char buf[16];
  dl = weft_now() + 50 * WEFT_MSEC;
  CO_EQ(weft_recv_dl(s, buf, sizeof(buf), 0, dl), -ETIMEDOUT);
  CO_CHECK(weft_now() >= dl);
  CO_EQ(weft_recv_exact_dl(s, buf, 4, NULL, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  CO_EQ(weft_recvmsg_dl(s, &m, 0, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_recv_dl(s, buf, sizeof(buf), 0, weft_now() - 1), -ETIMEDOUT); /* already past */
  CO_EQ(weft_send(c, "hello", 5, 0), 5);
  CO_EQ(weft_recv_dl(s, buf, sizeof(buf), 0, weft_now() + 5 * WEFT_SEC), 5);
  CO_CHECK(memcmp(buf, "hello", 5) == 0);
  close(s);
  close(c);
  close(lfd);

  int filler = -1;
  struct sockaddr_in sa;
  int full = full_listener(&filler, &sa);
  CO_CHECK(full >= 0);
  int fd = weft_socket(AF_INET, SOCK_STREAM, 0);
  dl = weft_now() + 100 * WEFT_MSEC;
  CO_EQ(weft_connect_dl(fd, (struct sockaddr *)&sa, sizeof(sa), dl), -ETIMEDOUT);
  CO_CHECK(weft_now() >= dl);
  close(fd);
  snprintf(ps, sizeof(ps), "%d", ntohs(sa.sin_port));
  CO_EQ(weft_tcp_connect_dl("127.0.0.1", ps, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  close(filler);
  close(full);
}

static void *deadlines_body(void *arg)
{
  (void)arg;
  deadlines();
  /* The deadline scope bounds calls without a deadline of their own. */
  int a = -1, b = -1;
  CO_EQ(tcp_pair(&a, &b), 0);
  char buf[4];
  int64_t saved = weft_deadline_push(weft_now() + 30 * WEFT_MSEC);
  CO_EQ(weft_recv(b, buf, sizeof(buf), 0), -ETIMEDOUT);
  weft_deadline_pop(saved);
  close(a);
  close(b);
  return NULL;
}

Test(net_faults, deadlines, .timeout = 30)
{
  rt_run(1, deadlines_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net_faults, deadlines_plain_thread, .timeout = 30)
{
  deadlines();
  rt_assert_clean();
}

/* ---- cancellation ---------------------------------------------------------------- */

static void *blocked_recv(void *arg)
{
  int fd = *(int *)arg;
  char buf[8];
  CO_EQ(weft_recv(fd, buf, sizeof(buf), 0), -ECANCELED);
  CO_EQ(weft_recv(fd, buf, sizeof(buf), 0), -ECANCELED); /* and every later call */
  return (void *)1;
}

static void *blocked_accept(void *arg)
{
  int fd = *(int *)arg;
  CO_EQ(weft_accept(fd, NULL, NULL, 0), -ECANCELED);
  return (void *)1;
}

static void *cancel_body(void *arg)
{
  (void)arg;
  int a = -1, b = -1;
  CO_EQ(tcp_pair(&a, &b), 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, blocked_recv, &b), 0);
  CO_CHECK(io_wait_suspended(1)); /* a cancelled task gets -ECANCELED anyway: end a wait */
  CO_EQ(weft_cancel(t), 0);
  void *ret = NULL;
  CO_EQ(weft_join(t, &ret), -ECANCELED);
  CO_EQ((intptr_t)ret, 1);
  /* The cancelled recv took nothing. */
  CO_EQ(weft_send(a, "after", 5, 0), 5);
  char buf[8];
  CO_EQ(weft_recv_exact(b, buf, 5, NULL), 5);
  CO_CHECK(memcmp(buf, "after", 5) == 0);
  close(a);
  close(b);

  int lfd = weft_tcp_listen("127.0.0.1", "0", 4);
  CO_EQ(io_spawn_on(&t, 1, blocked_accept, &lfd), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t), 0);
  CO_EQ(weft_join(t, &ret), -ECANCELED);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", ps);
  int s = weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(c >= 0 && s >= 0);
  close(c);
  close(s);
  close(lfd);
  return NULL;
}

Test(net_faults, cancel_blocked_calls, .timeout = 30)
{
  rt_run(2, cancel_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- every call kind on a plain thread --------------------------------------------- */

static void *plain_peer(void *arg)
{
  int fd = *(int *)arg;
  /* Echo what comes in 1000-byte pieces, slowly at first. */
  char buf[1000];
  ssize_t n;
  usleep(20000);
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
    if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
      break;
  close(fd);
  return NULL;
}

Test(net_faults, plain_thread_calls, .timeout = 30)
{
  int s = weft_socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(s, 0);
  cr_assert(fcntl(s, F_GETFD) & FD_CLOEXEC);
  close(s);
  int a = -1, b = -1;
  cr_assert_eq(tcp_pair_bufs(&a, &b, 8192), 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, plain_peer, &b), 0);
  enum { N = 1 << 20 };
  char *out = malloc(N), *in = malloc(N);
  fill(out, N, 5);
  size_t done = 0;
  /* A piece at a time, each smaller than what the socket buffers hold (the
   * peer echoes while we wait). */
  for (size_t off = 0; off < N; off += 4096) {
    cr_assert_eq(weft_send_all_dl(a, out + off, 4096, &done, weft_now() + 10 * WEFT_SEC), 4096);
    cr_assert_eq(done, 4096);
    cr_assert_eq(weft_recv_exact_dl(a, in + off, 4096, &done, weft_now() + 10 * WEFT_SEC), 4096);
    cr_assert_eq(done, 4096);
  }
  cr_assert(memcmp(in, out, N) == 0);
  /* Messages, with and without deadlines. */
  struct iovec iov = {.iov_base = out, .iov_len = 10};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  cr_assert_eq(weft_sendmsg_dl(a, &m, 0, weft_now() + WEFT_SEC), 10);
  iov.iov_base = in;
  cr_assert_eq(weft_recvmsg_dl(a, &m, MSG_WAITALL, weft_now() + WEFT_SEC), 10);
  cr_assert_eq(weft_send_dl(a, "z", 1, 0, weft_now() + WEFT_SEC), 1);
  cr_assert_eq(weft_recv(a, in, 1, 0), 1);
  cr_assert_eq(weft_shutdown(a, SHUT_WR), 0);
  cr_assert_eq(weft_recv_dl(a, in, 1, 0, weft_now() + 5 * WEFT_SEC), 0); /* peer closed */
  pthread_join(th, NULL);
  close(a);
  /* A Unix socket with a deadline on a plain thread. */
  char path[64];
  snprintf(path, sizeof(path), "@weft-net-faults-%d", (int)getpid());
  int l = weft_unix_listen(path, SOCK_STREAM, 4);
  cr_assert_geq(l, 0);
  int c = weft_unix_connect_dl(path, SOCK_STREAM, weft_now() + WEFT_SEC);
  cr_assert_geq(c, 0);
  int sv = weft_accept_dl(l, NULL, NULL, 0, weft_now() + WEFT_SEC);
  cr_assert_geq(sv, 0);
  close(sv);
  close(c);
  close(l);
  /* errno is untouched by all of it. */
  errno = 777;
  cr_assert_eq(weft_recv(-1, in, 1, 0), -EBADF);
  cr_assert_eq(weft_connect_dl(-1, NULL, 0, weft_now() + WEFT_SEC), -EBADF);
  cr_assert_eq(errno, 777);
  free(out);
  free(in);
}

/* ---- a tiny ring with 64 connections in flight ------------------------------------- */

#define PAIRS 64
#define ROUNDS 50

static int tiny_port;
static atomic_long tiny_bytes;

static void *tiny_handler(void *arg)
{
  int fd = (int)(intptr_t)arg;
  char buf[1024];
  ssize_t n;
  while ((n = weft_recv(fd, buf, sizeof(buf), 0)) > 0)
    CO_EQ(weft_send_all(fd, buf, (size_t)n, NULL), n);
  CO_EQ(n, 0);
  close(fd);
  return NULL;
}

static void *tiny_server(void *arg)
{
  int lfd = *(int *)arg;
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  weft_task *h[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    int fd = weft_listener_accept(l, WEFT_NO_DEADLINE);
    CO_CHECK(fd >= 0);
    CO_EQ(rt_spawn(&h[i], WEFT_PLACE_STEALABLE, -1, tiny_handler, (void *)(intptr_t)fd), 0);
  }
  weft_listener_close(l);
  for (int i = 0; i < PAIRS; i++)
    rt_join_int(h[i]);
  return NULL;
}

static void *tiny_client(void *arg)
{
  unsigned id = (unsigned)(uintptr_t)arg;
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", tiny_port);
  int fd = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(fd >= 0);
  char out[1024], in[1024];
  for (int r = 0; r < ROUNDS; r++) {
    fill(out, sizeof(out), id * 1000 + (unsigned)r);
    CO_EQ(weft_send_all(fd, out, sizeof(out), NULL), sizeof(out));
    CO_EQ(weft_recv_exact(fd, in, sizeof(in), NULL), sizeof(in));
    CO_CHECK(memcmp(in, out, sizeof(in)) == 0);
    atomic_fetch_add(&tiny_bytes, (long)sizeof(in));
  }
  close(fd);
  return NULL;
}

static void *tiny_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", PAIRS);
  CO_CHECK(lfd >= 0);
  tiny_port = port_of(lfd);
  weft_task *s, *c[PAIRS];
  CO_EQ(io_spawn_on(&s, 0, tiny_server, &lfd), 0);
  for (int i = 0; i < PAIRS; i++)
    CO_EQ(rt_spawn(&c[i], WEFT_PLACE_STEALABLE, -1, tiny_client, (void *)(uintptr_t)i), 0);
  for (int i = 0; i < PAIRS; i++)
    rt_join_int(c[i]);
  rt_join_int(s);
  close(lfd);
  weft_stats st = io_stats();
  cr_log_info("tiny ring: %llu CQ overflows, %llu SQ-full flushes",
              (unsigned long long)st.cq_overflows, (unsigned long long)st.sq_full_flushes);
  return NULL;
}

Test(net_faults, tiny_ring_64_connections, .timeout = 120)
{
  weft_config cfg;
  rt_cfg(&cfg, 2);
  cfg.ring_entries = 4;
  cfg.cq_entries = 4;
  io_run_cfg(&cfg, tiny_body, NULL);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&tiny_bytes), (long)PAIRS * ROUNDS * 1024);
  rt_assert_no_leaks();
}
