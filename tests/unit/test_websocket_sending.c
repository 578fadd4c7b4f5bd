/* SPDX-License-Identifier: MIT */
/*
 * Suite "websocket", sending: a send that cannot start (a deadline or
 * deadline scope already passed, a cancelled task) fails before anything
 * is written and leaves the connection whole; a close whose frame could
 * not be written (the send lock held past its deadline by a large send)
 * still ends the sending of messages, as weft_ws_close promises; a pong
 * that cannot be written by a receive's deadline is owed, and the
 * connection stays whole - but a control frame cut short breaks it, pong
 * owed or not, and so does a timeout between the fragments of a message;
 * a send that times out before a byte of its frame went out (a full
 * socket) leaves it whole, one cut short part-way through its frame breaks
 * the connection.
 */
#include "ws_test.h"

#include <stdlib.h>

/* A weft server on sv[0] and a weft client on sv[1]. */
static void ws_pair(int sv[2], weft_ws **srv, weft_ws **cli)
{
  pair(sv);
  struct connecting c = {.fd = sv[1]};
  weft_task *t;
  CO_EQ(weft_spawn(&t, NULL, connect_task, &c), 0);
  CO_EQ(weft_ws_accept(srv, sv[0], weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(c.r, 0);
  *cli = c.ws;
}

static void expect_message(weft_ws *ws, const char *text)
{
  char buf[64];
  int type = 0;
  ssize_t n = weft_ws_recv(ws, buf, sizeof(buf), &type, weft_now() + 5 * WEFT_SEC);
  CO_EQ(n, (ssize_t)strlen(text));
  CO_EQ(type, WEFT_WS_TEXT);
  CO_CHECK(n >= 0 && memcmp(buf, text, (size_t)n) == 0);
}

static void *cancelled_sender(void *arg)
{
  weft_ws *ws = arg;
  CO_EQ(weft_cancel(weft_task_self()), 0);
  CO_EQ(weft_ws_send(ws, WEFT_WS_TEXT, "never", 5, WEFT_NO_DEADLINE), -ECANCELED);
  CO_EQ(weft_ws_ping(ws, "p", 1, WEFT_NO_DEADLINE), -ECANCELED);
  return NULL;
}

static void *cannot_start_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *srv, *cli;
  ws_pair(sv, &srv, &cli);
  int64_t far = weft_now() + 5 * WEFT_SEC;
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "late", 4, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "one", 3, far), 0);
  expect_message(cli, "one");
  int64_t saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(weft_ws_send(cli, WEFT_WS_TEXT, "scoped", 6, WEFT_NO_DEADLINE), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_EQ(weft_ws_send(cli, WEFT_WS_TEXT, "two", 3, far), 0);
  expect_message(srv, "two");
  weft_task *t;
  CO_EQ(weft_spawn(&t, NULL, cancelled_sender, srv), 0);
  CO_EQ(weft_join(t, NULL), -ECANCELED);
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "three", 5, far), 0);
  expect_message(cli, "three");
  weft_ws_free(srv);
  weft_ws_free(cli);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_send_that_cannot_start_leaves_the_connection_whole, .timeout = 30)
{
  rt_run(2, cannot_start_main, NULL);
  rt_assert_clean();
}

#define BIG ((size_t)8 << 20)

struct big_send {
  weft_ws *ws;
  void *buf;
  atomic_bool started;
};

static void *big_sender(void *arg)
{
  struct big_send *b = arg;
  atomic_store(&b->started, true);
  CO_EQ(weft_ws_send(b->ws, WEFT_WS_BINARY, b->buf, BIG, weft_now() + 30 * WEFT_SEC), 0);
  return NULL;
}

/* Whether ws's send lock is held by a task that waits (the big send, stuck
 * on a full socket: nothing else of these tests waits holding it). */
static bool send_lock_held_by_a_waiter(weft_ws *ws)
{
  if (weft_mutex_trylock(&ws->send_lock) == 0) {
    weft_mutex_unlock(&ws->send_lock);
    return false;
  }
  return rt_dump_count(NULL, " waiting") >= 1;
}

/* Starts an 8 MiB send on ws that the peer does not read, and returns once
 * it holds ws's send lock, stuck on a full socket, as it stays until the
 * peer reads. */
static weft_task *start_big_send(struct big_send *b, weft_ws *ws)
{
  *b = (struct big_send){.ws = ws, .buf = calloc(1, BIG)};
  CO_CHECK(b->buf != NULL);
  weft_task *t;
  CO_EQ(weft_spawn(&t, NULL, big_sender, b), 0);
  CO_CHECK(RT_POLL(send_lock_held_by_a_waiter(ws)));
  return t;
}

static void *recv_close(void *arg)
{
  char buf[16];
  int type = 0;
  CO_EQ(weft_ws_recv(arg, buf, sizeof(buf), &type, weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(type, WEFT_WS_CLOSE);
  return NULL;
}

static void *close_fails_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *srv, *cli;
  ws_pair(sv, &srv, &cli);
  struct big_send b;
  weft_task *t = start_big_send(&b, srv);
  CO_EQ(weft_ws_close(srv, 1000, NULL, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  /* No close frame went out, but no message may follow the close either. */
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "after", 5, weft_now() + 5 * WEFT_SEC), -EPIPE);
  CO_EQ(weft_ws_ping(srv, "p", 1, weft_now() + 5 * WEFT_SEC), -EPIPE);
  /* The client takes the big message; then comes the close, sent now. */
  void *in = malloc(BIG);
  int type = 0;
  CO_EQ(weft_ws_recv(cli, in, BIG, &type, weft_now() + 30 * WEFT_SEC), (ssize_t)BIG);
  CO_EQ(type, WEFT_WS_BINARY);
  CO_EQ(weft_join(t, NULL), 0);
  /* The close again, the lock free now: the client's next message is the
   * close (not "after"), which it answers. */
  weft_task *answer;
  CO_EQ(weft_spawn(&answer, NULL, recv_close, cli), 0);
  CO_EQ(weft_ws_close(srv, 1000, NULL, weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_join(answer, NULL), 0);
  free(in);
  free(b.buf);
  weft_ws_free(srv);
  weft_ws_free(cli);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_close_that_could_not_be_written_still_ends_sending, .timeout = 60)
{
  rt_run(2, close_fails_main, NULL);
  rt_assert_clean();
}

/* A ping read while the send lock is held by a large send: the pong cannot
 * go by the receive's deadline, which returns -ETIMEDOUT - with the
 * connection whole (it broke it before): the pong is owed and goes at the
 * start of the next receive. The server's side is read raw, so that the
 * pong is seen on the wire (weft_ws_recv would consume it unseen). */

/* The next frame from a client on fd: its first byte, and its unmasked
 * payload (up to cap bytes kept; the length is returned). */
static uint64_t raw_client_frame(int fd, unsigned char *first, unsigned char *payload, size_t cap)
{
  unsigned char h[2], ext[8], key[4];
  raw_recv(fd, h, 2);
  *first = h[0];
  CO_CHECK(h[1] & 0x80); /* a client masks everything */
  uint64_t n = h[1] & 0x7f;
  if (n >= 126) {
    size_t k = n == 126 ? 2 : 8;
    raw_recv(fd, ext, k);
    n = 0;
    for (size_t i = 0; i < k; i++)
      n = n << 8 | ext[i];
  }
  raw_recv(fd, key, 4);
  unsigned char chunk[65536];
  for (uint64_t off = 0; off < n;) {
    size_t m = n - off < sizeof(chunk) ? (size_t)(n - off) : sizeof(chunk);
    raw_recv(fd, chunk, m);
    for (size_t i = 0; i < m; i++)
      if (off + i < cap)
        payload[off + i] = chunk[i] ^ key[(off + i) & 3];
    off += m;
  }
  return n;
}

static void *raw_server_reads(void *arg)
{
  int fd = *(int *)arg;
  unsigned char first, payload[16];
  CO_EQ(raw_client_frame(fd, &first, payload, sizeof(payload)), BIG);
  CO_EQ(first, 0x82);
  CO_EQ(raw_client_frame(fd, &first, payload, sizeof(payload)), 2);
  CO_EQ(first, 0x81);
  CO_CHECK(memcmp(payload, "ok", 2) == 0);
  /* The owed pong, paid by the client's next receive, with the ping's data. */
  CO_EQ(raw_client_frame(fd, &first, payload, sizeof(payload)), 2);
  CO_EQ(first, 0x8a);
  CO_CHECK(memcmp(payload, "p1", 2) == 0);
  return NULL;
}

/* A pair whose client owes the server a pong: a big send holds the
 * client's send lock (join the returned task to let it finish), and the
 * client's receive took the server's ping "p1" and timed out waiting for a
 * message, unable to answer it yet. */
static weft_task *pair_owing_a_pong(int sv[2], weft_ws **srv, weft_ws **cli, struct big_send *b)
{
  ws_pair(sv, srv, cli);
  weft_task *t = start_big_send(b, *cli);
  CO_EQ(weft_ws_ping(*srv, "p1", 2, weft_now() + 5 * WEFT_SEC), 0);
  char buf[16];
  int type = 0;
  CO_EQ(weft_ws_recv(*cli, buf, sizeof(buf), &type, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  return t;
}

static void *owed_pong_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *srv, *cli;
  struct big_send b;
  weft_task *t = pair_owing_a_pong(sv, &srv, &cli, &b);
  weft_task *r;
  CO_EQ(weft_spawn(&r, NULL, raw_server_reads, &sv[0]), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(weft_ws_send(cli, WEFT_WS_TEXT, "ok", 2, weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "done", 4, weft_now() + 5 * WEFT_SEC), 0);
  expect_message(cli, "done"); /* pays the pong first */
  CO_EQ(weft_join(r, NULL), 0);
  free(b.buf);
  weft_ws_free(srv);
  weft_ws_free(cli);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_pong_that_cannot_go_yet_is_owed_not_fatal, .timeout = 60)
{
  rt_run(2, owed_pong_main, NULL);
  rt_assert_clean();
}

/* A control frame cut short while weft_ws_close drops what comes, with a
 * pong still owed from an earlier receive: its header is consumed, so the
 * stream is out of step and the connection broken - the owed pong must not
 * make the cut look like a timeout between messages. The pong's payload
 * holds a well-formed text frame: read as one, it would be a message the
 * peer never sent. */
static void *drain_big(void *arg)
{
  int fd = *(int *)arg;
  unsigned char first, payload[16];
  CO_EQ(raw_client_frame(fd, &first, payload, sizeof(payload)), BIG);
  CO_EQ(first, 0x82);
  return NULL;
}

static void *cut_control_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *srv, *cli;
  struct big_send b;
  weft_task *t = pair_owing_a_pong(sv, &srv, &cli, &b);
  weft_task *d;
  CO_EQ(weft_spawn(&d, NULL, drain_big, &sv[0]), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(weft_join(d, NULL), 0);
  /* A pong of 5 bytes, 2 of them sent: the close times out inside it.
   * Its payload starts like a text frame "X". */
  static const unsigned char head[] = {0x8A, 0x05, 0x81, 0x01}, rest[] = {'X', 'y', 'z'};
  raw_send(sv[0], head, sizeof(head));
  CO_EQ(weft_ws_close(cli, 1000, NULL, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  raw_send(sv[0], rest, sizeof(rest));
  char buf[16];
  int type = 0;
  CO_EQ(weft_ws_recv(cli, buf, sizeof(buf), &type, weft_now() + 5 * WEFT_SEC), -EPIPE);
  CO_EQ(weft_ws_close(cli, 1000, NULL, weft_now() + 5 * WEFT_SEC), -EPIPE);
  free(b.buf);
  weft_ws_free(srv);
  weft_ws_free(cli);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_control_frame_cut_short_breaks_even_with_a_pong_owed, .timeout = 60)
{
  rt_run(2, cut_control_main, NULL);
  rt_assert_clean();
}

/* Between the fragments of a message, a timeout - waiting for the next
 * fragment, or for the send lock to answer a ping that came between them -
 * loses the part read so far: the connection is broken, as the header
 * says, not whole as between messages. The client's frames are written
 * raw on its socket (weft sends no fragments). */
static void *between_fragments_main(void *arg)
{
  (void)arg;
  static const unsigned char first[] = {0x01, 0x81, 0, 0, 0, 0, 'a'};
  static const unsigned char ping[] = {0x89, 0x80, 0, 0, 0, 0};
  char buf[16];
  int type = 0;
  for (int with_ping = 0; with_ping < 2; with_ping++) {
    int sv[2];
    weft_ws *srv, *cli;
    ws_pair(sv, &srv, &cli);
    struct big_send b = {0};
    weft_task *t = with_ping ? start_big_send(&b, srv) : NULL;
    raw_send(sv[1], first, sizeof(first));
    if (with_ping)
      raw_send(sv[1], ping, sizeof(ping));
    CO_EQ(weft_ws_recv(srv, buf, sizeof(buf), &type, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
    CO_EQ(weft_ws_recv(srv, buf, sizeof(buf), &type, weft_now() + 5 * WEFT_SEC), -EPIPE);
    if (t) {
      void *in = malloc(BIG);
      CO_EQ(weft_ws_recv(cli, in, BIG, &type, weft_now() + 30 * WEFT_SEC), (ssize_t)BIG);
      CO_EQ(weft_join(t, NULL), 0);
      free(in);
    }
    free(b.buf);
    weft_ws_free(srv);
    weft_ws_free(cli);
    io_close_pipe(sv);
  }
  return NULL;
}

Test(websocket, a_timeout_between_fragments_breaks_the_connection, .timeout = 60)
{
  rt_run(2, between_fragments_main, NULL);
  rt_assert_clean();
}

/* A send whose deadline passes before a byte of its frame went out - the
 * socket full, the peer not reading - cut nothing short: the connection
 * stays whole, as for a send that could not start. The socket is filled
 * with empty binary frames written raw, one whole frame per write. */
static void *full_socket_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *srv, *cli;
  ws_pair(sv, &srv, &cli);
  static const unsigned char empty[] = {0x82, 0x00};
  ssize_t k;
  while ((k = send(sv[0], empty, 2, MSG_DONTWAIT)) == 2)
    ;
  CO_CHECK(k < 0 && errno == EAGAIN);
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "x", 1, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  /* Nothing of "x" is on the wire: only the empty frames. */
  unsigned char got[4096];
  while ((k = recv(sv[1], got, sizeof(got), MSG_DONTWAIT)) > 0) {
    CO_CHECK(k % 2 == 0);
    for (ssize_t i = 0; i + 1 < k; i += 2)
      CO_CHECK(got[i] == 0x82 && got[i + 1] == 0x00);
  }
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "y", 1, weft_now() + 5 * WEFT_SEC), 0);
  expect_message(cli, "y");
  weft_ws_free(srv);
  weft_ws_free(cli);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_send_that_times_out_before_a_byte_leaves_the_connection_whole, .timeout = 30)
{
  rt_run(2, full_socket_main, NULL);
  rt_assert_clean();
}

/* A send whose deadline passes part-way through its frame breaks the
 * connection (the peer would read the next frame's bytes as the rest of
 * this one): every later send, ping and receive is -EPIPE. */
static void *cut_send_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *srv, *cli;
  ws_pair(sv, &srv, &cli);
  void *big = calloc(1, BIG);
  CO_CHECK(big != NULL);
  CO_EQ(weft_ws_send(srv, WEFT_WS_BINARY, big, BIG, weft_now() + 50 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_ws_send(srv, WEFT_WS_TEXT, "x", 1, weft_now() + 5 * WEFT_SEC), -EPIPE);
  CO_EQ(weft_ws_ping(srv, "p", 1, weft_now() + 5 * WEFT_SEC), -EPIPE);
  char buf[16];
  int type = 0;
  CO_EQ(weft_ws_recv(srv, buf, sizeof(buf), &type, weft_now() + 5 * WEFT_SEC), -EPIPE);
  free(big);
  weft_ws_free(srv);
  weft_ws_free(cli);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_send_cut_short_mid_frame_breaks_the_connection, .timeout = 30)
{
  rt_run(2, cut_send_main, NULL);
  rt_assert_clean();
}
