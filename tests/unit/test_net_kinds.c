/* SPDX-License-Identifier: MIT */
/*
 * Suite "net", part 2 - the other socket kinds and calls: fd passing
 * (SCM_RIGHTS), UDP, Unix stream/seqpacket/datagram and abstract names,
 * stale socket files, shutdown, addresses and options, name resolution and
 * the SOCKET-op fallback.
 */
#include "net_test.h"

#include <sched.h>
#include <stdio.h>
#include <sys/wait.h>

/* ---- messages, datagrams, Unix -------------------------------------------------- */

static void *scm_body(void *arg)
{
  (void)arg;
  int sv[2], p[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CO_EQ(io_pipe(p), 0);
  /* Send the pipe's write end with one byte of data. */
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof(cbuf));
  struct iovec iov = {.iov_base = "F", .iov_len = 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                     .msg_controllen = sizeof(cbuf)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &p[1], sizeof(int));
  CO_EQ(weft_sendmsg(sv[0], &m, 0), 1);
  CO_EQ(close(p[1]), 0);

  char rcbuf[CMSG_SPACE(sizeof(int))], byte = 0;
  struct iovec riov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr r = {.msg_iov = &riov, .msg_iovlen = 1, .msg_control = rcbuf,
                     .msg_controllen = sizeof(rcbuf)};
  CO_EQ(weft_recvmsg(sv[1], &r, 0), 1);
  CO_EQ(byte, 'F');
  struct cmsghdr *rc = CMSG_FIRSTHDR(&r);
  CO_CHECK(rc && rc->cmsg_type == SCM_RIGHTS);
  int fd = -1;
  if (rc)
    memcpy(&fd, CMSG_DATA(rc), sizeof(int));
  CO_CHECK(fd >= 0);
  CO_CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC); /* MSG_CMSG_CLOEXEC */
  /* The received descriptor is the pipe's write end. */
  CO_EQ(weft_write(fd, "via", 3), 3);
  char got[3];
  CO_EQ(weft_read(p[0], got, 3), 3);
  CO_CHECK(memcmp(got, "via", 3) == 0);
  close(fd);
  close(p[0]);
  CO_EQ(weft_recvmsg(sv[1], NULL, 0), -EFAULT);
  CO_EQ(weft_sendmsg(sv[1], NULL, 0), -EFAULT);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

Test(net, scm_rights, .timeout = 30)
{
  rt_run(1, scm_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, scm_rights_plain_thread, .timeout = 30)
{
  scm_body(NULL);
  rt_assert_clean();
}

static void udp_exchange(void)
{
  int a = weft_udp_bind("127.0.0.1", "0"), b = weft_udp_bind("127.0.0.1", "0");
  CO_CHECK(a >= 0 && b >= 0);
  struct sockaddr_in sa_b, from;
  socklen_t len = sizeof(sa_b);
  CO_EQ(weft_getsockname(b, (struct sockaddr *)&sa_b, &len), 0);
  CO_EQ(weft_sendto(a, "ping", 4, 0, (struct sockaddr *)&sa_b, len), 4);
  char buf[16];
  socklen_t flen = sizeof(from);
  CO_EQ(weft_recvfrom(b, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen), 4);
  CO_EQ(flen, sizeof(struct sockaddr_in));
  CO_CHECK(memcmp(buf, "ping", 4) == 0);
  CO_EQ(ntohs(from.sin_port), port_of(a));
  CO_EQ(ntohl(from.sin_addr.s_addr), INADDR_LOOPBACK);
  /* Reply to the sender's address; receive without one. */
  CO_EQ(weft_sendto(b, "pong!", 5, 0, (struct sockaddr *)&from, flen), 5);
  CO_EQ(weft_recvfrom(a, buf, sizeof(buf), 0, NULL, NULL), 5);
  CO_CHECK(memcmp(buf, "pong!", 5) == 0);
  /* A short buffer truncates the datagram (MSG_TRUNC gives its length). */
  CO_EQ(weft_sendto(a, "0123456789", 10, 0, (struct sockaddr *)&sa_b, len), 10);
  CO_EQ(weft_recvfrom(b, buf, 4, MSG_TRUNC, NULL, NULL), 10);
  CO_EQ(weft_recvfrom(b, buf, 4, 0, (struct sockaddr *)&from, NULL), -EFAULT);
  /* Deadline on an empty socket. */
  CO_EQ(weft_recvfrom_dl(b, buf, 4, 0, NULL, NULL, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_sendto_dl(a, "x", 1, 0, (struct sockaddr *)&sa_b, len, WEFT_NO_DEADLINE), 1);
  CO_EQ(weft_recv(b, buf, sizeof(buf), 0), 1);
  /* An address longer than any is -EINVAL, as sendto(2) has it (sendmsg(2)
   * would cut it to sizeof(struct sockaddr_storage) and send). */
  char longer[sizeof(struct sockaddr_storage) + 8];
  memset(longer, 0, sizeof(longer));
  memcpy(longer, &sa_b, sizeof(sa_b));
  CO_EQ(weft_sendto(a, "y", 1, 0, (struct sockaddr *)longer, sizeof(longer)), -EINVAL);
  CO_EQ(weft_recv_dl(b, buf, sizeof(buf), MSG_DONTWAIT, WEFT_NO_DEADLINE), -EAGAIN);
  close(a);
  close(b);
  /* The wildcard socket takes IPv4 datagrams too (dual stack). */
  int w = weft_udp_bind(NULL, "0"), c = weft_udp_bind("127.0.0.1", "0");
  CO_CHECK(w >= 0 && c >= 0);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_of(w)),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CO_EQ(weft_sendto(c, "dual", 4, 0, (struct sockaddr *)&to, sizeof(to)), 4);
  CO_EQ(weft_recv(w, buf, sizeof(buf), 0), 4);
  close(w);
  close(c);
}

NET_BOTH_SIDES(net, udp, udp_exchange, .timeout = 30)

static char tmpdir[64];

static void mk_tmpdir(void)
{
  strcpy(tmpdir, "/tmp/weft-net-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
  cr_assert_eq(system(cmd), 0);
}

/* One exchange over a Unix socket of `type` at `path`. */
static void unix_exchange(const char *path, int type)
{
  int l = weft_unix_listen(path, type, 8);
  CO_CHECK(l >= 0);
  if (type == SOCK_DGRAM) {
    int c = weft_socket(AF_UNIX, SOCK_DGRAM, 0);
    CO_CHECK(c >= 0);
    struct sockaddr_un sa;
    socklen_t len = sizeof(sa);
    CO_EQ(weft_getsockname(l, (struct sockaddr *)&sa, &len), 0);
    CO_EQ(weft_listen(l, 1), -EOPNOTSUPP); /* bound, not listening */
    CO_EQ(weft_sendto(c, "dgram", 5, 0, (struct sockaddr *)&sa, len), 5);
    char buf[16];
    CO_EQ(weft_recv(l, buf, sizeof(buf), 0), 5);
    close(c);
    close(l);
    return;
  }
  int c = weft_unix_connect(path, type);
  CO_CHECK(c >= 0);
  int s = weft_accept(l, NULL, NULL, 0);
  CO_CHECK(s >= 0);
  CO_EQ(weft_send(c, "one", 3, 0), 3);
  CO_EQ(weft_send(c, "three", 5, 0), 5);
  char buf[16];
  if (type == SOCK_SEQPACKET) {
    /* Message boundaries are kept. */
    CO_EQ(weft_recv(s, buf, sizeof(buf), 0), 3);
    CO_EQ(weft_recv(s, buf, sizeof(buf), 0), 5);
  } else {
    CO_EQ(weft_recv_exact(s, buf, 8, NULL), 8);
    CO_CHECK(memcmp(buf, "onethree", 8) == 0);
  }
  close(c);
  close(s);
  close(l);
}

static void *unix_body(void *arg)
{
  (void)arg;
  char p[PATH_MAX], ab[64];
  snprintf(p, sizeof(p), "%s/stream", tmpdir);
  unix_exchange(p, SOCK_STREAM);
  snprintf(p, sizeof(p), "%s/seq", tmpdir);
  unix_exchange(p, SOCK_SEQPACKET);
  snprintf(p, sizeof(p), "%s/dgram", tmpdir);
  unix_exchange(p, SOCK_DGRAM);
  /* Abstract names: no file anywhere. */
  snprintf(ab, sizeof(ab), "@weft-net-%d", (int)getpid());
  unix_exchange(ab, SOCK_STREAM);
  unix_exchange(ab, SOCK_SEQPACKET);
  /* Errors. */
  CO_EQ(weft_unix_connect(p, SOCK_STREAM), -ECONNREFUSED); /* a stale dgram file */
  snprintf(p, sizeof(p), "%s/none", tmpdir);
  CO_EQ(weft_unix_connect(p, SOCK_STREAM), -ENOENT);
  CO_EQ(weft_unix_connect(ab, SOCK_STREAM), -ECONNREFUSED);
  CO_EQ(weft_unix_listen(p, SOCK_RAW, 1), -EINVAL);
  CO_EQ(weft_unix_connect(p, 99), -EINVAL);
  CO_EQ(weft_unix_listen(NULL, SOCK_STREAM, 1), -EFAULT);
  CO_EQ(weft_unix_listen("", SOCK_STREAM, 1), -ENOENT);
  char longp[200];
  memset(longp, 'x', sizeof(longp) - 1);
  longp[sizeof(longp) - 1] = '\0';
  CO_EQ(weft_unix_listen(longp, SOCK_STREAM, 1), -ENAMETOOLONG);
  longp[0] = '@';
  CO_EQ(weft_unix_connect(longp, SOCK_STREAM), -ENAMETOOLONG);
  return NULL;
}

Test(net, unix_kinds, .timeout = 30, .init = mk_tmpdir, .fini = rm_tmpdir)
{
  rt_run(1, unix_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *stale_body(void *arg)
{
  (void)arg;
  char p[PATH_MAX], f[PATH_MAX];
  snprintf(p, sizeof(p), "%s/sock", tmpdir);
  snprintf(f, sizeof(f), "%s/file", tmpdir);
  /* A socket file left behind by a closed server is replaced. */
  int l = weft_unix_listen(p, SOCK_STREAM, 4);
  CO_CHECK(l >= 0);
  close(l);
  struct stat st;
  CO_EQ(lstat(p, &st), 0);
  CO_CHECK(S_ISSOCK(st.st_mode));
  l = weft_unix_listen(p, SOCK_STREAM, 4);
  CO_CHECK(l >= 0);
  /* A live one is not: its server keeps its address. */
  CO_EQ(weft_unix_listen(p, SOCK_STREAM, 4), -EADDRINUSE);
  CO_EQ(weft_unix_listen(p, SOCK_SEQPACKET, 4), -EADDRINUSE);
  int c = weft_unix_connect(p, SOCK_STREAM);
  CO_CHECK(c >= 0);
  close(c);
  close(l);
  /* Nor is a regular file. */
  int fd = open(f, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  CO_CHECK(fd >= 0);
  CO_EQ(write(fd, "keep", 4), 4);
  close(fd);
  CO_EQ(weft_unix_listen(f, SOCK_STREAM, 4), -EADDRINUSE);
  CO_EQ(lstat(f, &st), 0);
  CO_CHECK(S_ISREG(st.st_mode) && st.st_size == 4);
  return NULL;
}

Test(net, unix_kinds_plain_thread, .timeout = 30, .init = mk_tmpdir, .fini = rm_tmpdir)
{
  unix_body(NULL);
  rt_assert_clean();
}

Test(net, unix_stale_socket, .timeout = 30, .init = mk_tmpdir, .fini = rm_tmpdir)
{
  rt_run(1, stale_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A Unix-domain connect to a full backlog waits for room, bounded by its
 * deadline: -ETIMEDOUT, never -EAGAIN, on a plain thread as in a coroutine;
 * and it completes once the server accepts. */
struct accept_later_arg {
  int l;
  rt_blocker connector;
};

/* Accepts once the connect waits for room: suspended in its op, or asleep
 * in connect(2) on a plain thread. */
static void *accept_later(void *arg)
{
  struct accept_later_arg *a = arg;
  if (!rt_wait_blocked(a->connector, SYS_connect, -1))
    rt_fail(__FILE__, __LINE__, "accept_later: the connect never waited");
  return (void *)(intptr_t)accept4(a->l, NULL, NULL, SOCK_CLOEXEC);
}

static void *full_backlog_body(void *arg)
{
  (void)arg;
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/full", tmpdir);
  int l = weft_unix_listen(p, SOCK_STREAM, 0);
  CO_CHECK(l >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%.*s", (int)sizeof(sa.sun_path) - 1, p);
  /* Backlog 0: the first connection waits to be accepted, the next finds
   * the backlog full. */
  int first = weft_socket(AF_UNIX, SOCK_STREAM, 0);
  CO_EQ(weft_connect_dl(first, (struct sockaddr *)&sa, sizeof(sa), weft_now() + 5 * WEFT_SEC), 0);
  int c = weft_socket(AF_UNIX, SOCK_STREAM, 0);
  int64_t t0 = weft_now();
  CO_EQ(weft_connect_dl(c, (struct sockaddr *)&sa, sizeof(sa), t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  close(c);
  /* Room comes (a thread accepts the first): the waiting connect completes. */
  pthread_t th;
  struct accept_later_arg al = {.l = l, .connector = rt_blocker_self()};
  CO_EQ(pthread_create(&th, NULL, accept_later, &al), 0);
  c = weft_socket(AF_UNIX, SOCK_STREAM, 0);
  CO_EQ(weft_connect_dl(c, (struct sockaddr *)&sa, sizeof(sa), weft_now() + 10 * WEFT_SEC), 0);
  void *accepted;
  pthread_join(th, &accepted);
  CO_CHECK((intptr_t)accepted >= 0);
  /* The socket's own send timeout is as it was. */
  struct timeval tv = {1, 1};
  socklen_t tl = sizeof(tv);
  CO_EQ(getsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, &tl), 0);
  CO_CHECK(tv.tv_sec == 0 && tv.tv_usec == 0);
  close((int)(intptr_t)accepted);
  close(c);
  close(first);
  close(l);
  return NULL;
}

Test(net, unix_connect_waits_for_backlog_room, .timeout = 30, .init = mk_tmpdir, .fini = rm_tmpdir)
{
  rt_run(1, full_backlog_body, NULL);
  rt_assert_clean();
  full_backlog_body(NULL);
  rt_assert_clean();
}

/* A plain thread's connect without deadline to a full Unix backlog, hit by
 * a signal (handled, no SA_RESTART) while it waits: an interrupted AF_UNIX
 * connect is abandoned, so it must be asked again - it returned 0 with the
 * socket unconnected. It completes once a thread accepts. */
static atomic_int usr1_seen;

static void on_usr1(int sig)
{
  (void)sig;
  atomic_fetch_add(&usr1_seen, 1);
}

struct poke {
  pthread_t target;
  pid_t tid;
  int l;
};

static void *poke_then_accept(void *arg)
{
  struct poke *p = arg;
  if (!RT_WAIT_IN_SYSCALL(p->tid, SYS_connect))
    return (void *)(intptr_t)-1000; /* the connect never waited */
  pthread_kill(p->target, SIGUSR1);
  for (int i = 0; i < 10000 && !atomic_load(&usr1_seen); i++)
    usleep(1000);
  /* Interrupted, handled, and asked again: back in connect. (Were the
   * connect left abandoned, it would return at once - not sleep again.) */
  if (!atomic_load(&usr1_seen) || !RT_WAIT_IN_SYSCALL(p->tid, SYS_connect))
    return (void *)(intptr_t)-1001; /* not asked again after the signal */
  return (void *)(intptr_t)accept4(p->l, NULL, NULL, SOCK_CLOEXEC);
}

Test(net, unix_connect_interrupted_by_a_signal_asks_again, .timeout = 30, .init = mk_tmpdir,
     .fini = rm_tmpdir)
{
  struct sigaction sa_usr1 = {.sa_handler = on_usr1}, old;
  sigemptyset(&sa_usr1.sa_mask);
  cr_assert_eq(sigaction(SIGUSR1, &sa_usr1, &old), 0);
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s/intr", tmpdir);
  int l = weft_unix_listen(p, SOCK_STREAM, 0);
  cr_assert_geq(l, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%.*s", (int)sizeof(sa.sun_path) - 1, p);
  int first = weft_socket(AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq(weft_connect(first, (struct sockaddr *)&sa, sizeof(sa)), 0);
  atomic_store(&usr1_seen, 0);
  struct poke pk = {.target = pthread_self(), .tid = rt_gettid(), .l = l};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, poke_then_accept, &pk), 0);
  int c = weft_socket(AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq(weft_connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
  struct sockaddr_un peer;
  socklen_t plen = sizeof(peer);
  cr_assert_eq(getpeername(c, (struct sockaddr *)&peer, &plen), 0, "connected in name only");
  void *accepted;
  pthread_join(th, &accepted);
  cr_assert_geq((intptr_t)accepted, 0, "poke: %d", (int)(intptr_t)accepted);
  close((int)(intptr_t)accepted);
  close(c);
  close(first);
  close(l);
  sigaction(SIGUSR1, &old, NULL);
}

/* ---- shutdown, addresses, options ----------------------------------------------- */

static void *shutdown_body(void *arg)
{
  (void)arg;
  int a = -1, b = -1;
  CO_EQ(tcp_pair(&a, &b), 0);
  CO_EQ(weft_send(a, "last", 4, 0), 4);
  CO_EQ(weft_shutdown(a, SHUT_WR), 0);
  char buf[8];
  CO_EQ(weft_recv_exact(b, buf, 4, NULL), 4);
  CO_EQ(weft_recv(b, buf, sizeof(buf), 0), 0); /* end of stream */
  /* The other direction still works. */
  CO_EQ(weft_send(b, "back", 4, 0), 4);
  CO_EQ(weft_recv_exact(a, buf, 4, NULL), 4);
  CO_EQ(weft_send(a, "x", 1, 0), -EPIPE);
  CO_EQ(weft_shutdown(a, 42), -EINVAL);
  close(a);
  close(b);
  return NULL;
}

Test(net, shutdown_eof, .timeout = 30)
{
  rt_run(1, shutdown_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, shutdown_eof_plain_thread, .timeout = 30)
{
  shutdown_body(NULL);
  rt_assert_clean();
}

static void names_and_options(void)
{
  int a = -1, b = -1;
  CO_EQ(tcp_pair(&a, &b), 0);
  struct sockaddr_in la, pa, lb, pb;
  socklen_t n1 = sizeof(la), n2 = sizeof(pa), n3 = sizeof(lb), n4 = sizeof(pb);
  CO_EQ(weft_getsockname(a, (struct sockaddr *)&la, &n1), 0);
  CO_EQ(weft_getpeername(a, (struct sockaddr *)&pa, &n2), 0);
  CO_EQ(weft_getsockname(b, (struct sockaddr *)&lb, &n3), 0);
  CO_EQ(weft_getpeername(b, (struct sockaddr *)&pb, &n4), 0);
  CO_EQ(n1, sizeof(la));
  CO_EQ(la.sin_port, pb.sin_port);
  CO_EQ(pa.sin_port, lb.sin_port);
  CO_EQ(ntohl(pa.sin_addr.s_addr), INADDR_LOOPBACK);
  int v = 1, got = 0;
  socklen_t gl = sizeof(got);
  CO_EQ(weft_setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)), 0);
  CO_EQ(weft_getsockopt(a, IPPROTO_TCP, TCP_NODELAY, &got, &gl), 0);
  CO_EQ(got, 1);
  v = 0;
  CO_EQ(weft_setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)), 0);
  CO_EQ(weft_getsockopt(a, IPPROTO_TCP, TCP_NODELAY, &got, &gl), 0);
  CO_EQ(got, 0);
  CO_EQ(weft_getsockopt(a, SOL_SOCKET, SO_TYPE, &got, &gl), 0);
  CO_EQ(got, SOCK_STREAM);
  CO_EQ(weft_setsockopt(a, SOL_SOCKET, 12345, &v, sizeof(v)), -ENOPROTOOPT);
  CO_EQ(weft_setsockopt(a, SOL_SOCKET, SO_KEEPALIVE, &v, 1), -EINVAL);
  /* A listening socket has no peer. */
  int l = weft_tcp_listen("127.0.0.1", "0", 4);
  CO_EQ(weft_getpeername(l, (struct sockaddr *)&pa, &n2), -ENOTCONN);
  /* accept's address is the client's; every descriptor is close-on-exec. */
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(l));
  int c = weft_tcp_connect("localhost", ps);
  CO_CHECK(c >= 0);
  struct sockaddr_in ca;
  socklen_t cl = sizeof(ca);
  int s = weft_accept(l, (struct sockaddr *)&ca, &cl, 0);
  CO_CHECK(s >= 0);
  CO_EQ(cl, sizeof(ca));
  CO_EQ(ntohs(ca.sin_port), port_of(c));
  CO_CHECK(fcntl(l, F_GETFD) & FD_CLOEXEC);
  CO_CHECK(fcntl(c, F_GETFD) & FD_CLOEXEC);
  CO_CHECK(fcntl(s, F_GETFD) & FD_CLOEXEC);
  CO_CHECK(!(fcntl(s, F_GETFL) & O_NONBLOCK));
  close(s);
  close(c);
  close(l);
  close(a);
  close(b);
  /* errno is the caller's, whatever happened in between. */
  errno = 4242;
  CO_EQ(weft_getsockname(-1, (struct sockaddr *)&la, &n1), -EBADF);
  CO_EQ(weft_tcp_connect("127.0.0.1", "1"), -ECONNREFUSED);
  CO_EQ(errno, 4242);
}

NET_BOTH_SIDES(net, names_and_options, names_and_options, .timeout = 30)

/* ---- name resolution ------------------------------------------------------------- */

static void *resolve_body(void *arg)
{
  (void)arg;
  /* A listener on 127.0.0.1 only: "localhost" reaches it whatever order
   * the resolver gives (::1 first is refused, 127.0.0.1 connects). */
  int l = weft_tcp_listen("127.0.0.1", "0", 8);
  CO_CHECK(l >= 0);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(l));
  uint64_t jobs = pool_jobs();
  int c = weft_tcp_connect("localhost", ps);
  CO_CHECK(c >= 0);
  CO_CHECK(pool_jobs() > jobs); /* resolved on the blocking pool */
  int s = weft_accept(l, NULL, NULL, 0);
  CO_CHECK(s >= 0);
  close(s);
  close(c);
  /* The same through an explicit list: ::1 (refused), then 127.0.0.1. */
  struct sockaddr_in6 six = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port_of(l)),
                             .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  struct sockaddr_in four = {.sin_family = AF_INET, .sin_port = six.sin6_port,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct addrinfo a4 = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                        .ai_addr = (struct sockaddr *)&four, .ai_addrlen = sizeof(four)};
  struct addrinfo a6 = {.ai_family = AF_INET6, .ai_socktype = SOCK_STREAM,
                        .ai_addr = (struct sockaddr *)&six, .ai_addrlen = sizeof(six),
                        .ai_next = &a4};
  c = weft__net_connect_list(&a6, WEFT_NO_DEADLINE);
  CO_CHECK(c >= 0);
  struct sockaddr_storage peer;
  socklen_t pl = sizeof(peer);
  CO_EQ(weft_getpeername(c, (struct sockaddr *)&peer, &pl), 0);
  CO_EQ(peer.ss_family, AF_INET);
  close(c);
  s = weft_accept(l, NULL, NULL, 0);
  close(s);
  a6.ai_next = NULL; /* only ::1: the last error */
  CO_EQ(weft__net_connect_list(&a6, WEFT_NO_DEADLINE), -ECONNREFUSED);
  CO_EQ(weft__net_connect_list(NULL, WEFT_NO_DEADLINE), -ENOENT);
  /* A connect that cannot start costs no socket: not one per address in
   * a passed deadline scope, nor in a cancelled task. */
  a6.ai_next = &a4;
  weft_stats s0 = io_stats();
  int64_t saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(weft__net_connect_list(&a6, WEFT_NO_DEADLINE), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_EQ(weft__net_connect_list(&a6, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(io_stats().ops_submitted, s0.ops_submitted);
  close(l);

  /* Wildcard listeners: IPv6 taking IPv4 too, unless V6ONLY. */
  l = weft_tcp_listen(NULL, "0", 8);
  CO_CHECK(l >= 0);
  struct sockaddr_storage ls;
  socklen_t ll = sizeof(ls);
  CO_EQ(weft_getsockname(l, (struct sockaddr *)&ls, &ll), 0);
  CO_EQ(ls.ss_family, AF_INET6);
  snprintf(ps, sizeof(ps), "%d", port_of(l));
  c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  close(c);
  close(l);
  l = weft_tcp_listen_opts("", "0", 8, WEFT_TCP_V6ONLY);
  CO_CHECK(l >= 0);
  snprintf(ps, sizeof(ps), "%d", port_of(l));
  CO_EQ(weft_tcp_connect("127.0.0.1", ps), -ECONNREFUSED);
  c = weft_tcp_connect("::1", ps);
  CO_CHECK(c >= 0);
  close(c);
  /* With [::] taken, a wildcard listener (or UDP socket) is -EADDRINUSE,
   * not a listener on 0.0.0.0 instead: the wildcard means IPv6 here. */
  CO_EQ(weft_tcp_listen(NULL, ps, 8), -EADDRINUSE);
  CO_EQ(weft_tcp_listen_opts(NULL, ps, 8, WEFT_TCP_V6ONLY), -EADDRINUSE);
  close(l);
  int u = weft_udp_bind("::", "0");
  CO_CHECK(u >= 0);
  snprintf(ps, sizeof(ps), "%d", port_of(u));
  CO_EQ(weft_udp_bind(NULL, ps), -EADDRINUSE);
  close(u);
  /* REUSEPORT: two listeners on one port. */
  int r1 = weft_tcp_listen_opts("127.0.0.1", "0", 8, WEFT_TCP_REUSEPORT);
  CO_CHECK(r1 >= 0);
  snprintf(ps, sizeof(ps), "%d", port_of(r1));
  int r2 = weft_tcp_listen_opts("127.0.0.1", ps, 8, WEFT_TCP_REUSEPORT);
  CO_CHECK(r2 >= 0);
  CO_EQ(weft_tcp_listen("127.0.0.1", ps, 8), -EADDRINUSE);
  close(r1);
  close(r2);
  /* A service name goes through getaddrinfo too: "echo" is port 7, where
   * nothing listens here (where /etc/services knows the name). */
  if (getservbyname("echo", "tcp"))
    CO_EQ(weft_tcp_connect("127.0.0.1", "echo"), -ECONNREFUSED);

  /* Failures. */
  CO_EQ(weft_tcp_connect("no-such-host.invalid", "80"), -ENOENT);
  CO_EQ(weft_tcp_listen("no-such-host.invalid", "0", 1), -ENOENT);
  CO_EQ(weft_tcp_connect("127.0.0.1", "no-such-service"), -EINVAL);
  /* Ports past 65535 are refused, not wrapped to their low 16 bits
   * (getaddrinfo makes "99999" port 34463), numeric host or not. */
  CO_EQ(weft_tcp_listen("127.0.0.1", "99999", 1), -EINVAL);
  CO_EQ(weft_tcp_listen("localhost", "65536", 1), -EINVAL);
  CO_EQ(weft_tcp_connect("127.0.0.1", "000000000000080000"), -EINVAL);
  CO_EQ(weft_udp_bind(NULL, "4294967297"), -EINVAL);
  /* getaddrinfo reads a sign and leading blanks as part of a number: so
   * does weft, and the same limit holds - and "-1" is no port. */
  CO_EQ(weft_tcp_listen("127.0.0.1", "+99999", 1), -EINVAL);
  CO_EQ(weft_tcp_listen("127.0.0.1", " 99999", 1), -EINVAL);
  CO_EQ(weft_udp_bind("127.0.0.1", "\t+65536"), -EINVAL);
  CO_EQ(weft_udp_bind("127.0.0.1", "-1"), -EINVAL);
  int sp = weft_udp_bind("127.0.0.1", " +0");
  CO_CHECK(sp >= 0);
  close(sp);
  int top = weft_tcp_listen("127.0.0.1", "65535", 1); /* the last port is one */
  CO_CHECK(top >= 0 || top == -EADDRINUSE);
  if (top >= 0) {
    CO_EQ(port_of(top), 65535);
    close(top);
  }
  CO_EQ(weft_tcp_listen_opts(NULL, "0", 1, 0x100), -EINVAL);
  CO_EQ(weft_tcp_listen("192.0.2.1", "0", 1), -EADDRNOTAVAIL); /* not ours */
  CO_EQ(weft_udp_bind("no-such-host.invalid", "0"), -ENOENT);
  /* A deadline that has passed: not even the resolver runs. */
  CO_EQ(weft_tcp_connect_dl("localhost", "1", weft_now() - 1), -ETIMEDOUT);
  return NULL;
}

Test(net, resolve_and_listen, .timeout = 60)
{
  rt_run(1, resolve_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* socket(2) never waits: a cancelled task, or one past its deadline
 * scope's end, still gets its socket, with the SOCKET op or without. */
static void *socket_when_cancelled_body(void *arg)
{
  (void)arg;
  for (int without_op = 0; without_op < 2; without_op++) {
    atomic_store(&weft__net_refused, without_op ? WEFT__NET_NO_SOCKET_OP : 0);
    int64_t saved = weft_deadline_push(weft_now() - 1);
    int fd = weft_socket(AF_INET, SOCK_STREAM, 0);
    CO_CHECK(fd >= 0);
    close(fd);
    weft_deadline_pop(saved);
  }
  CO_EQ(weft_cancel(weft_task_self()), 0);
  for (int without_op = 0; without_op < 2; without_op++) {
    atomic_store(&weft__net_refused, without_op ? WEFT__NET_NO_SOCKET_OP : 0);
    int fd = weft_socket(AF_INET, SOCK_STREAM, 0);
    CO_CHECK(fd >= 0);
    close(fd);
  }
  atomic_store(&weft__net_refused, 0);
  return NULL;
}

Test(net, socket_in_a_cancelled_task, .timeout = 30)
{
  rt_run(1, socket_when_cancelled_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A name is resolved on the blocking pool, so a cancelled task or a passed
 * deadline scope fails it; numeric hosts and ports need no wait and still
 * give a socket (net.h). */
static void *listen_when_cancelled_body(void *arg)
{
  (void)arg;
  int64_t saved = weft_deadline_push(weft_now() - 1);
  int fd = weft_tcp_listen("127.0.0.1", "0", 1);
  CO_CHECK(fd >= 0);
  close(fd);
  CO_EQ(weft_tcp_listen("localhost", "0", 1), -ETIMEDOUT);
  CO_EQ(weft_udp_bind("localhost", "0"), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_EQ(weft_cancel(weft_task_self()), 0);
  fd = weft_udp_bind("127.0.0.1", "0");
  CO_CHECK(fd >= 0);
  close(fd);
  CO_EQ(weft_tcp_listen("localhost", "0", 1), -ECANCELED);
  CO_EQ(weft_udp_bind("localhost", "0"), -ECANCELED);
  /* Numeric as getaddrinfo reads a numeric host (AI_NUMERICHOST): IPv4 in
   * inet_aton's forms, IPv6 with a scope id. */
  const char *const numeric[] = {"127.1", "0x7f.0.0.1", "::1%1", "::ffff:127.0.0.1%0"};
  for (size_t i = 0; i < sizeof(numeric) / sizeof(numeric[0]); i++) {
    fd = weft_tcp_listen(numeric[i], "0", 1);
    CO_CHECK(fd >= 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    CO_EQ(weft_getsockname(fd, (struct sockaddr *)&ss, &sl), 0);
    CO_EQ(ss.ss_family, strchr(numeric[i], ':') ? AF_INET6 : AF_INET);
    close(fd);
  }
  /* The empty port is getaddrinfo's numeric port 0. */
  fd = weft_tcp_listen("127.0.0.1", "", 1);
  CO_CHECK(fd >= 0);
  CO_CHECK(port_of(fd) > 0);
  close(fd);
  return NULL;
}

/* What getaddrinfo does not take as numeric is a name, resolved on the
 * pool, with its answer: a scope name on an address that needs none, an
 * IPv4 address with anything after it. */
static void *not_numeric_body(void *arg)
{
  (void)arg;
  uint64_t jobs = pool_jobs();
  CO_EQ(weft_tcp_listen("::1%lo", "0", 1), -ENOENT);
  CO_EQ(weft_tcp_listen("127.0.0.1 x", "0", 1), -ENOENT);
  CO_EQ(weft_tcp_listen("::1%99999999999", "0", 1), -ENOENT);
  CO_EQ(pool_jobs(), jobs + 3);
  int fd = weft_tcp_listen("::1%1", "0", 1);
  CO_CHECK(fd >= 0);
  close(fd);
  CO_EQ(pool_jobs(), jobs + 3); /* numeric: no job */
  return NULL;
}

Test(net, names_that_look_numeric, .timeout = 30)
{
  rt_run(1, not_numeric_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, names_need_the_pool_numbers_do_not, .timeout = 30)
{
  rt_run(1, listen_when_cancelled_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* The SOCKET op refused: socket(2) instead, same results. */
static void *no_socket_op_body(void *arg)
{
  (void)arg;
  atomic_store(&weft__net_refused, WEFT__NET_NO_SOCKET_OP);
  names_and_options();
  CO_EQ(weft_socket(12345, SOCK_STREAM, 0), -EAFNOSUPPORT);
  weft_stats s0 = io_stats();
  int fd = weft_socket(AF_INET, SOCK_STREAM, 0);
  weft_stats s1 = io_stats();
  CO_CHECK(fd >= 0);
  close(fd);
  CO_EQ(s1.ops_submitted, s0.ops_submitted); /* socket(2), no op */
  atomic_store(&weft__net_refused, 0);
  return NULL;
}

Test(net, socket_op_fallback, .timeout = 30)
{
  rt_run(1, no_socket_op_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* An explicit "::" takes IPv4 too for UDP as for TCP, whatever the system
 * default (net.ipv6.bindv6only, set to 1 here in a network namespace of a
 * child process's own, which leaves the test's other sockets alone). The
 * child's exit status: 0 both take IPv4, 1 not, 2 no namespace here. */
static int v6only_in_own_netns(void)
{
  if (unshare(CLONE_NEWNET) < 0)
    return 2;
  FILE *f = fopen("/proc/sys/net/ipv6/bindv6only", "w");
  if (!f || fputs("1\n", f) < 0 || fclose(f) != 0)
    return 2;
  int t = weft_tcp_listen("::", "0", 1), u = weft_udp_bind("::", "0");
  int vt = -1, vu = -1;
  socklen_t l = sizeof(int);
  if (t < 0 || u < 0 || weft_getsockopt(t, IPPROTO_IPV6, IPV6_V6ONLY, &vt, &l) < 0 ||
      weft_getsockopt(u, IPPROTO_IPV6, IPV6_V6ONLY, &vu, &l) < 0)
    return 1;
  return vt == 0 && vu == 0 ? 0 : 1;
}

Test(net, udp_bind_any_v6_takes_ipv4_as_tcp_does, .timeout = 30)
{
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0)
    _exit(v6only_in_own_netns());
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st));
  if (WEXITSTATUS(st) == 2)
    cr_skip_test("no network namespace of its own here (not root)");
  cr_assert_eq(WEXITSTATUS(st), 0, "IPV6_V6ONLY is not 0 on both sockets bound to \"::\"");
}
