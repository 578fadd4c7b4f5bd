/* SPDX-License-Identifier: MIT */
/*
 * Suite "net": the socket API of weft/net.h over loopback - TCP echo across
 * two shards and with 200 concurrent connections, exact transfers across
 * short reads and writes (small socket buffers, a trickling peer, deadlines
 * that stop part-way with exact *done counts), end of stream, fd passing,
 * UDP, Unix stream/seqpacket/datagram and abstract names, stale socket files,
 * shutdown, addresses and options, name resolution, the SOCKET-op fallback,
 * and the multishot listener (1100 connections, close with queued
 * connections, deadlines, cancellation, hand-over, the one-at-a-time
 * fallback). Faults, bad input, deadlines on every call and plain-thread
 * use of every call kind are in test_net_faults.c; both suites run most
 * bodies on a plain thread too.
 *
 * Checks inside coroutines go through CO_CHECK / CO_EQ (rt_helpers.h).
 */
#include "net_test.h"

/* ---- TCP echo ------------------------------------------------------------------- */

static void *echo_server(void *arg)
{
  int lfd = *(int *)arg;
  int fd = weft_accept(lfd, NULL, NULL, 0);
  CO_CHECK(fd >= 0);
  CO_EQ(weft_shard_id(), 0);
  char buf[4096];
  ssize_t n;
  while ((n = weft_recv(fd, buf, sizeof(buf), 0)) > 0)
    CO_EQ(weft_send_all(fd, buf, (size_t)n, NULL), n);
  CO_EQ(n, 0);
  CO_EQ(close(fd), 0);
  return NULL;
}

static void *echo_client(void *arg)
{
  int port = *(int *)arg;
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port);
  int fd = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(fd >= 0);
  CO_EQ(weft_shard_id(), 1);
  char out[3000], in[3000];
  for (int i = 0; i < 200; i++) {
    size_t n = 1 + (size_t)(i * 37) % sizeof(out);
    fill(out, n, (unsigned)i);
    size_t done = 0;
    CO_EQ(weft_send_all(fd, out, n, &done), n);
    CO_EQ(done, n);
    CO_EQ(weft_recv_exact(fd, in, n, &done), n);
    CO_EQ(done, n);
    CO_CHECK(memcmp(in, out, n) == 0);
  }
  CO_EQ(close(fd), 0);
  return NULL;
}

static void *echo_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  int port = port_of(lfd);
  weft_task *s, *c;
  CO_EQ(io_spawn_on(&s, 0, echo_server, &lfd), 0);
  CO_EQ(io_spawn_on(&c, 1, echo_client, &port), 0);
  rt_join_int(c);
  rt_join_int(s);
  CO_EQ(close(lfd), 0);
  return NULL;
}

Test(net, echo_two_shards, .timeout = 60)
{
  rt_run(2, echo_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* The same with every send an io_uring op (no MSG_DONTWAIT try first). */
Test(net, echo_two_shards_ring_sends, .timeout = 60)
{
  atomic_store(&weft__net_nowait, false);
  rt_run(2, echo_body, NULL);
  atomic_store(&weft__net_nowait, true);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* 200 connections at once: handlers and clients stealable over two shards. */
#define MANY 200

static void *many_handler(void *arg)
{
  int fd = (int)(intptr_t)arg;
  char buf[2048];
  uint32_t id;
  CO_EQ(weft_recv_exact(fd, &id, sizeof(id), NULL), sizeof(id));
  CO_EQ(weft_recv_exact(fd, buf, sizeof(buf), NULL), sizeof(buf));
  CO_EQ(weft_send_all(fd, &id, sizeof(id), NULL), sizeof(id));
  CO_EQ(weft_send_all(fd, buf, sizeof(buf), NULL), sizeof(buf));
  CO_EQ(weft_recv(fd, buf, 1, 0), 0); /* the client closes first */
  CO_EQ(close(fd), 0);
  return NULL;
}

static void *many_server(void *arg)
{
  int lfd = *(int *)arg;
  weft_task *h[MANY];
  for (int i = 0; i < MANY; i++) {
    int fd = weft_accept(lfd, NULL, NULL, 0);
    CO_CHECK(fd >= 0);
    CO_EQ(rt_spawn(&h[i], WEFT_PLACE_STEALABLE, -1, many_handler, (void *)(intptr_t)fd), 0);
  }
  for (int i = 0; i < MANY; i++)
    rt_join_int(h[i]);
  return NULL;
}

static int many_port;

static void *many_client(void *arg)
{
  uint32_t id = (uint32_t)(uintptr_t)arg;
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", many_port);
  int fd = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(fd >= 0);
  char out[2048], in[2048];
  fill(out, sizeof(out), id);
  CO_EQ(weft_send_all(fd, &id, sizeof(id), NULL), sizeof(id));
  CO_EQ(weft_send_all(fd, out, sizeof(out), NULL), sizeof(out));
  uint32_t back = 0;
  CO_EQ(weft_recv_exact(fd, &back, sizeof(back), NULL), sizeof(back));
  CO_EQ(back, id);
  CO_EQ(weft_recv_exact(fd, in, sizeof(in), NULL), sizeof(in));
  CO_CHECK(memcmp(in, out, sizeof(in)) == 0);
  CO_EQ(close(fd), 0);
  return NULL;
}

static void *many_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", MANY);
  CO_CHECK(lfd >= 0);
  many_port = port_of(lfd);
  weft_task *s, *c[MANY];
  CO_EQ(io_spawn_on(&s, 0, many_server, &lfd), 0);
  for (int i = 0; i < MANY; i++)
    CO_EQ(rt_spawn(&c[i], WEFT_PLACE_STEALABLE, -1, many_client, (void *)(uintptr_t)i), 0);
  for (int i = 0; i < MANY; i++)
    rt_join_int(c[i]);
  rt_join_int(s);
  CO_EQ(close(lfd), 0);
  return NULL;
}

Test(net, many_connections, .timeout = 120)
{
  rt_run(2, many_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- exact transfers ------------------------------------------------------------ */

#define BIG (4u << 20)

static void *big_sender(void *arg)
{
  int fd = *(int *)arg;
  char *buf = malloc(BIG);
  fill(buf, BIG, 7);
  size_t done = 0;
  CO_EQ(weft_send_all(fd, buf, BIG, &done), BIG);
  CO_EQ(done, BIG);
  free(buf);
  return NULL;
}

static void *small_buffers_body(void *arg)
{
  (void)arg;
  int a = -1, b = -1;
  CO_EQ(tcp_pair_bufs(&a, &b, 4096), 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, big_sender, &a), 0);
  char *buf = malloc(BIG), *want = malloc(BIG);
  fill(want, BIG, 7);
  size_t done = 0;
  CO_EQ(weft_recv_exact(b, buf, BIG, &done), BIG);
  CO_EQ(done, BIG);
  CO_CHECK(memcmp(buf, want, BIG) == 0);
  rt_join_int(t);
  free(buf);
  free(want);
  close(a);
  close(b);
  return NULL;
}

Test(net, exact_small_buffers, .timeout = 60)
{
  rt_run(2, small_buffers_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A plain thread trickles bytes: one every millisecond, then a pause. */
struct trickle {
  int fd;
  int first, pause_ms, rest;
};

static void *trickle_thread(void *arg)
{
  struct trickle *tr = arg;
  for (int i = 0; i < tr->first + tr->rest; i++) {
    if (i == tr->first)
      usleep((useconds_t)tr->pause_ms * 1000);
    char c = (char)('a' + i % 26);
    if (send(tr->fd, &c, 1, MSG_NOSIGNAL) != 1)
      break;
    usleep(1000);
  }
  return NULL;
}

static void *trickle_body(void *arg)
{
  (void)arg;
  int a = -1, b = -1;
  CO_EQ(tcp_pair(&a, &b), 0);
  /* 40 bytes one at a time: one recv_exact. */
  struct trickle tr = {.fd = a, .first = 40};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, trickle_thread, &tr), 0);
  char buf[128];
  size_t done = 99;
  CO_EQ(weft_recv_exact(b, buf, 40, &done), 40);
  CO_EQ(done, 40);
  for (int i = 0; i < 40; i++)
    CO_EQ(buf[i], 'a' + i % 26);
  pthread_join(th, NULL);

  /* 30 bytes, a pause past the deadline, 20 more: the deadline stops the
   * call with exactly the 30 bytes counted, and the cancelled op took
   * nothing after them. */
  struct trickle tr2 = {.fd = a, .first = 30, .pause_ms = 400, .rest = 20};
  CO_EQ(pthread_create(&th, NULL, trickle_thread, &tr2), 0);
  done = 99;
  CO_EQ(weft_recv_exact_dl(b, buf, 50, &done, weft_now() + 200 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(done, 30);
  CO_EQ(weft_recv_exact(b, buf + 30, 20, &done), 20);
  for (int i = 0; i < 50; i++)
    CO_EQ(buf[i], 'a' + i % 26);
  pthread_join(th, NULL);
  close(a);
  close(b);
  return NULL;
}

Test(net, exact_trickle_and_deadline, .timeout = 60)
{
  rt_run(1, trickle_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, exact_trickle_and_deadline_plain_thread, .timeout = 60)
{
  trickle_body(NULL);
  rt_assert_clean();
}

/* send_all against a peer that does not read: the deadline stops it, and
 * *done is exactly what the peer then receives. */
static void *send_deadline_body(void *arg)
{
  (void)arg;
  int a = -1, b = -1;
  CO_EQ(tcp_pair_bufs(&a, &b, 4096), 0);
  char *buf = malloc(BIG);
  fill(buf, BIG, 3);
  size_t done = 0;
  CO_EQ(weft_send_all_dl(a, buf, BIG, &done, weft_now() + 200 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(done > 0 && done < BIG);
  CO_EQ(shutdown(a, SHUT_WR), 0);
  char *in = malloc(BIG);
  size_t got = 0;
  CO_EQ(weft_recv_exact(b, in, BIG, &got), -EPIPE);
  CO_EQ(got, done);
  CO_CHECK(memcmp(in, buf, got) == 0);
  free(buf);
  free(in);
  close(a);
  close(b);
  return NULL;
}

Test(net, send_all_deadline_done, .timeout = 60)
{
  rt_run(1, send_deadline_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, send_all_deadline_done_plain_thread, .timeout = 60)
{
  send_deadline_body(NULL);
  rt_assert_clean();
}

Test(net, send_all_deadline_done_ring_sends, .timeout = 60)
{
  atomic_store(&weft__net_nowait, false);
  rt_run(1, send_deadline_body, NULL);
  atomic_store(&weft__net_nowait, true);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *eof_body(void *arg)
{
  (void)arg;
  int a = -1, b = -1;
  char buf[32];
  size_t done = 99;
  /* The peer closes before the first byte: 0. */
  CO_EQ(tcp_pair(&a, &b), 0);
  CO_EQ(close(a), 0);
  CO_EQ(weft_recv_exact(b, buf, sizeof(buf), &done), 0);
  CO_EQ(done, 0);
  close(b);
  /* ... part-way: -EPIPE with the bytes that came. */
  CO_EQ(tcp_pair(&a, &b), 0);
  CO_EQ(weft_send(a, "0123456789", 10, 0), 10);
  CO_EQ(close(a), 0);
  CO_EQ(weft_recv_exact(b, buf, 20, &done), -EPIPE);
  CO_EQ(done, 10);
  CO_CHECK(memcmp(buf, "0123456789", 10) == 0);
  /* n == 0 is done at once; done may be NULL. */
  CO_EQ(weft_recv_exact(b, buf, 0, &done), 0);
  CO_EQ(done, 0);
  CO_EQ(weft_send_all(b, buf, 0, NULL), 0);
  close(b);
  return NULL;
}

Test(net, recv_exact_eof, .timeout = 30)
{
  rt_run(1, eof_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, recv_exact_eof_plain_thread, .timeout = 30)
{
  eof_body(NULL);
  rt_assert_clean();
}

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

static void *udp_body(void *arg)
{
  (void)arg;
  udp_exchange();
  return NULL;
}

Test(net, udp, .timeout = 30)
{
  rt_run(1, udp_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, udp_plain_thread, .timeout = 30)
{
  udp_exchange();
  rt_assert_clean();
}

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

static void *names_body(void *arg)
{
  (void)arg;
  names_and_options();
  return NULL;
}

Test(net, names_and_options, .timeout = 30)
{
  rt_run(1, names_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, names_and_options_plain_thread, .timeout = 30)
{
  names_and_options();
  rt_assert_clean();
}

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
  close(l);
  /* REUSEPORT: two listeners on one port. */
  int r1 = weft_tcp_listen_opts("127.0.0.1", "0", 8, WEFT_TCP_REUSEPORT);
  CO_CHECK(r1 >= 0);
  snprintf(ps, sizeof(ps), "%d", port_of(r1));
  int r2 = weft_tcp_listen_opts("127.0.0.1", ps, 8, WEFT_TCP_REUSEPORT);
  CO_CHECK(r2 >= 0);
  CO_EQ(weft_tcp_listen("127.0.0.1", ps, 8), -EADDRINUSE);
  close(r1);
  close(r2);
  /* A service name goes through getaddrinfo too. */
  int sv = weft_tcp_listen("127.0.0.1", "0", 1);
  close(sv);

  /* Failures. */
  CO_EQ(weft_tcp_connect("no-such-host.invalid", "80"), -ENOENT);
  CO_EQ(weft_tcp_listen("no-such-host.invalid", "0", 1), -ENOENT);
  CO_EQ(weft_tcp_connect("127.0.0.1", "no-such-service"), -EINVAL);
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

/* The SOCKET op refused: socket(2) instead, same results. */
static void *no_socket_op_body(void *arg)
{
  (void)arg;
  atomic_store(&weft__net_refused, WEFT__NET_NO_SOCKET_OP);
  names_and_options();
  CO_EQ(weft_socket(12345, SOCK_STREAM, 0), -EAFNOSUPPORT);
  atomic_store(&weft__net_refused, 0);
  return NULL;
}

Test(net, socket_op_fallback, .timeout = 30)
{
  rt_run(1, no_socket_op_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- the multishot listener -------------------------------------------------------- */

/* More connections than the listener queues (1024): it stops accepting at
 * the bound and starts again once drained. */
#define NCONN 1100

struct lst_ctx {
  int port;
  int n;
  int fds[NCONN];
};

static void *lst_clients(void *arg)
{
  struct lst_ctx *c = arg;
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", c->port);
  for (int i = 0; i < c->n; i++) {
    c->fds[i] = weft_tcp_connect("127.0.0.1", ps);
    CO_CHECK(c->fds[i] >= 0);
    uint32_t id = (uint32_t)i;
    CO_EQ(weft_send(c->fds[i], &id, sizeof(id), 0), sizeof(id));
  }
  return NULL;
}

static void listener_serve(int n)
{
  int lfd = weft_tcp_listen("127.0.0.1", "0", 2048);
  CO_CHECK(lfd >= 0);
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  struct lst_ctx *c = calloc(1, sizeof(*c));
  c->port = port_of(lfd);
  c->n = n;
  weft_task *t;
  /* Every client connects before the first accept: they pile up in the
   * listener's queue and the kernel's backlog. */
  CO_EQ(io_spawn_on(&t, 1, lst_clients, c), 0);
  rt_join_int(t);
  char *seen = calloc((size_t)n, 1);
  for (int i = 0; i < n; i++) {
    int fd = weft_listener_accept(l, weft_now() + 10 * WEFT_SEC);
    CO_CHECK(fd >= 0);
    if (fd < 0)
      break;
    CO_EQ(weft_shard_id(), 0);
    CO_CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    uint32_t id = UINT32_MAX;
    CO_EQ(weft_recv_exact(fd, &id, sizeof(id), NULL), sizeof(id));
    CO_CHECK(id < (uint32_t)n && !seen[id]);
    if (id < (uint32_t)n)
      seen[id] = 1;
    close(fd);
  }
  /* Nothing more: the deadline ends the wait, not the listener. */
  CO_EQ(weft_listener_accept(l, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", c->port);
  int fd = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(fd >= 0);
  int s = weft_listener_accept(l, weft_now() + 10 * WEFT_SEC);
  CO_CHECK(s >= 0);
  close(s);
  close(fd);
  weft_listener_close(l);
  for (int i = 0; i < n; i++)
    close(c->fds[i]);
  free(seen);
  free(c);
  close(lfd);
}

static void *listener_many_body(void *arg)
{
  (void)arg;
  listener_serve(NCONN);
  return NULL;
}

Test(net, listener_1100_connections, .timeout = 120)
{
  rt_run(2, listener_many_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *listener_oneshot_body(void *arg)
{
  (void)arg;
  atomic_store(&weft__net_refused, WEFT__NET_NO_MULTISHOT);
  listener_serve(100);
  atomic_store(&weft__net_refused, 0);
  return NULL;
}

Test(net, listener_oneshot_fallback, .timeout = 60)
{
  rt_run(2, listener_oneshot_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* Closing a listener with connections accepted but not handed out closes
 * them: no descriptor leaks. */
static void *close_queued_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 64);
  CO_CHECK(lfd >= 0);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int base = count_fds();
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  int cfd[50];
  for (int i = 0; i < 50; i++) {
    cfd[i] = weft_tcp_connect("127.0.0.1", ps);
    CO_CHECK(cfd[i] >= 0);
  }
  /* The shard accepts them into the listener's queue meanwhile. */
  CO_CHECK(RT_POLL(count_fds() == base + 100));
  weft_listener_close(l);
  CO_EQ(count_fds(), base + 50);
  /* The clients see their connections closed. */
  char b;
  CO_EQ(weft_recv(cfd[0], &b, 1, 0), 0);
  for (int i = 0; i < 50; i++)
    close(cfd[i]);
  CO_EQ(count_fds(), base);
  close(lfd);
  return NULL;
}

Test(net, listener_close_queued, .timeout = 60)
{
  rt_run(1, close_queued_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static weft_listener *other_shard_l;

static void *other_shard_accept(void *arg)
{
  (void)arg;
  CO_EQ(weft_listener_accept(other_shard_l, WEFT_NO_DEADLINE), -EINVAL);
  return NULL;
}

static void *cancelled_acceptor(void *arg)
{
  int lfd = *(int *)arg;
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  CO_EQ(weft_listener_accept(l, WEFT_NO_DEADLINE), -ECANCELED);
  CO_EQ(weft_listener_accept(l, WEFT_NO_DEADLINE), -ECANCELED); /* and every later one */
  weft_listener_close(l); /* still works in a cancelled task */
  return (void *)1;
}

/* The opener returns; another task on its shard uses and closes the
 * listener. */
struct handover {
  int lfd;
  weft_listener *l;
};

static void *handover_opener(void *arg)
{
  struct handover *h = arg;
  CO_EQ(weft_listener_open(&h->l, h->lfd, 0), 0);
  return NULL;
}

static void *handover_user(void *arg)
{
  struct handover *h = arg;
  int fd = weft_listener_accept(h->l, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(fd >= 0);
  close(fd);
  weft_listener_close(h->l);
  return NULL;
}

static void *listener_api_body(void *arg)
{
  (void)arg;
  weft_listener *l = NULL;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  int s = weft_socket(AF_INET, SOCK_STREAM, 0);
  CO_EQ(weft_listener_open(&l, s, 0), -EINVAL); /* not listening */
  close(s);
  CO_EQ(weft_listener_open(&l, -1, 0), -EBADF);
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(weft_listener_open(&l, p[0], 0), -ENOTSOCK);
  io_close_pipe(p);
  CO_EQ(weft_listener_open(NULL, lfd, 0), -EINVAL);
  CO_EQ(weft_listener_open(&l, lfd, 0x4), -EINVAL);
  CO_EQ(weft_listener_accept(NULL, WEFT_NO_DEADLINE), -EINVAL);
  weft_listener_close(NULL);

  /* Deadline, then a connection: the multishot accept outlived the wait. */
  CO_EQ(weft_listener_open(&l, lfd, SOCK_NONBLOCK), 0);
  CO_EQ(weft_listener_accept(l, weft_now() + 30 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_listener_accept(l, weft_now() - 1), -ETIMEDOUT);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  int a = weft_listener_accept(l, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(a >= 0);
  CO_CHECK(fcntl(a, F_GETFL) & O_NONBLOCK); /* flags as for accept4 */
  close(a);
  close(c);
  /* Only on the listener's shard. */
  other_shard_l = l;
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, other_shard_accept, NULL), 0);
  rt_join_int(t);
  weft_listener_close(l);

  /* Cancellation ends the wait with -ECANCELED. */
  CO_EQ(io_spawn_on(&t, 0, cancelled_acceptor, &lfd), 0);
  weft_sleep(20 * WEFT_MSEC); /* likely waiting by now; -ECANCELED either way */
  CO_EQ(weft_cancel(t), 0);
  void *ret = NULL;
  CO_EQ(weft_join(t, &ret), -ECANCELED);
  CO_EQ((intptr_t)ret, 1);

  struct handover h = {.lfd = lfd};
  CO_EQ(io_spawn_on(&t, 0, handover_opener, &h), 0);
  rt_join_int(t);
  c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  CO_EQ(io_spawn_on(&t, 0, handover_user, &h), 0);
  rt_join_int(t);
  close(c);
  close(lfd);
  return NULL;
}

Test(net, listener_api, .timeout = 60)
{
  rt_run(2, listener_api_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, listener_plain_thread, .timeout = 10)
{
  weft_listener *l = NULL;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 1);
  cr_assert_geq(lfd, 0);
  cr_assert_eq(weft_listener_open(&l, lfd, 0), -EPERM);
  cr_assert_eq(weft_listener_accept((weft_listener *)&lfd, 0), -EPERM);
  close(lfd);
}
