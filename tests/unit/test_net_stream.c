/* SPDX-License-Identifier: MIT */
/*
 * Suite "net", part 1 - TCP streams over loopback: echo across two shards
 * and with 200 concurrent connections, exact transfers across short reads
 * and writes (small socket buffers, a trickling peer, deadlines that stop
 * part-way with exact *done counts) and end of stream. Other socket kinds,
 * shutdown, names, options and resolution are in test_net_kinds.c; the
 * multishot listener in test_net_listener.c. Faults, bad input, deadlines
 * on every call and plain-thread use of every call kind are in
 * test_net_faults.c; both suites run most bodies on a plain thread too.
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

/* A plain thread trickles bytes: one every millisecond - the first ones,
 * then, after `go` (10 s at most), the rest. */
struct trickle {
  int fd;
  int first, rest;
  atomic_bool go;
};

static void *trickle_thread(void *arg)
{
  struct trickle *tr = arg;
  for (int i = 0; i < tr->first + tr->rest; i++) {
    for (int w = 0; i == tr->first && w < 10000 && !atomic_load(&tr->go); w++)
      usleep(1000);
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
  struct trickle tr = {.fd = a, .first = 40, .go = true};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, trickle_thread, &tr), 0);
  char buf[128];
  size_t done = 99;
  CO_EQ(weft_recv_exact(b, buf, 40, &done), 40);
  CO_EQ(done, 40);
  for (int i = 0; i < 40; i++)
    CO_EQ(buf[i], 'a' + i % 26);
  pthread_join(th, NULL);

  /* 30 bytes, then nothing until the deadline has passed, then 20 more:
   * the deadline stops the call with exactly the 30 bytes counted, and the
   * cancelled op took nothing after them. (2 s is ample for 30 bytes 1 ms
   * apart, even on a loaded machine.) */
  struct trickle tr2 = {.fd = a, .first = 30, .rest = 20};
  CO_EQ(pthread_create(&th, NULL, trickle_thread, &tr2), 0);
  done = 99;
  CO_EQ(weft_recv_exact_dl(b, buf, 50, &done, weft_now() + 2 * WEFT_SEC), -ETIMEDOUT);
  atomic_store(&tr2.go, true);
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
  /* ... but for a deadline that has passed, which fails every call at
   * once (net.h), as it fails weft_recv_dl of 0 bytes. */
  int64_t past = weft_now() - 1;
  CO_EQ(weft_recv_dl(b, buf, 0, 0, past), -ETIMEDOUT);
  done = 99;
  CO_EQ(weft_recv_exact_dl(b, buf, 0, &done, past), -ETIMEDOUT);
  CO_EQ(done, 0);
  CO_EQ(weft_send_all_dl(b, buf, 0, NULL, past), -ETIMEDOUT);
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
