/* SPDX-License-Identifier: MIT */
/*
 * Suite "recv_stream", part 1 - receive streams (weft/recv_stream.h) moving
 * data and ending: 10 MiB patterns with a slow consumer (-ENOBUFS re-arms on
 * the ring path) over a socketpair and TCP, EOF, peer reset, deadlines and
 * cancellation. Every scenario runs on the multishot + buffer-ring path and
 * on the plain path, reached both ways a kernel can refuse (the buffer ring,
 * or the multishot receive: test hook), with the same expected results;
 * each test ends leak-free (memory, buffer group ids, descriptors). Many
 * streams, runtime stop and misuse are in test_recv_stream_edges.c.
 */
#include "recv_stream_test.h"

static int tcp_pair(int fds[2])
{
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0)
    return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  int c = -1, r = 0;
  if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
      getsockname(l, (struct sockaddr *)&a, &len) < 0 ||
      (c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
      connect(c, (struct sockaddr *)&a, sizeof(a)) < 0 ||
      (fds[0] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0)
    r = -errno;
  close(l);
  if (r < 0) {
    if (c >= 0)
      close(c);
    return r;
  }
  fds[1] = c;
  return 0;
}

/* ---- 10 MiB of a pattern ------------------------------------------------------------ */

struct pump {
  int fds[2];           /* [0] read through the stream, [1] written by a thread */
  size_t total;
  uint64_t seed;
  atomic_size_t written;
  int write_err;
};

static void *pump_writer(void *arg)
{
  struct pump *p = arg;
  enum { CHUNK = 65536 };
  uint8_t *buf = malloc(CHUNK);
  size_t off = 0;
  while (buf && off < p->total) {
    size_t n = p->total - off < CHUNK ? p->total - off : CHUNK;
    for (size_t i = 0; i < n; i++)
      buf[i] = pat(p->seed, off + i);
    size_t done = 0;
    while (done < n) {
      ssize_t w = send(p->fds[1], buf + done, n - done, MSG_NOSIGNAL);
      if (w < 0) {
        p->write_err = errno;
        free(buf);
        return NULL;
      }
      done += (size_t)w;
      atomic_fetch_add(&p->written, (size_t)w);
    }
    off += n;
  }
  free(buf);
  shutdown(p->fds[1], SHUT_WR);
  return NULL;
}

static void *pump_main(void *arg)
{
  struct pump *p = arg;
  weft_recv_stream_opts o;
  weft_recv_stream_opts_init(&o);
  o.buf_size = 4096;
  o.buf_count = 8;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, p->fds[0], &o), 0);
  CO_EQ(weft_recv_stream_multishot(s), multishot_at_open());
  /* A late consumer: the sender gets well past the stream's 32 KiB first
   * (a socket takes 96 KiB without blocking), so the multishot receive runs
   * out of buffers (-ENOBUFS) at least once. */
  CO_CHECK(RT_POLL(atomic_load(&p->written) >= 96 * 1024));
  size_t got = 0, bad = 0;
  unsigned i = 0;
  ssize_t n;
  const void *d;
  while ((n = weft_recv_stream_next(s, &d, weft_now() + 10 * WEFT_SEC)) > 0) {
    CO_CHECK((size_t)n <= o.buf_size);
    const uint8_t *b = d;
    for (ssize_t k = 0; k < n; k++)
      bad += b[k] != pat(p->seed, got + (size_t)k);
    got += (size_t)n;
    i++;
    if (i % 5 == 0)
      weft_recv_stream_release(s); /* early hand-back: same bytes either way */
    if (i % 256 == 0)
      weft_sleep(500 * WEFT_USEC); /* slow consumer: the buffers fill up */
  }
  CO_EQ(n, 0);
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 0);
  CO_EQ(got, p->total);
  CO_EQ(bad, 0);
  CO_EQ(weft_recv_stream_multishot(s), multishot_later());
  weft__recv_stream_counters c;
  weft__recv_stream_get_counters(s, &c);
  CO_EQ(c.bytes, p->total);
  if (path == WEFT__RS_FORCE_NONE) {
    CO_CHECK(c.nobufs >= 1);
    CO_CHECK(c.arms >= c.nobufs + 1); /* each -ENOBUFS was re-armed */
  }
  CO_EQ(weft_recv_stream_close(s), 0);
  weft_stats st = io_stats();
  CO_EQ(st.ops_submitted, st.ops_completed);
  return NULL;
}

static void run_pump(int (*pair)(int[2]), int fallback)
{
  use_path(fallback);
  int fds_before = count_fds();
  struct pump p = {.total = 10u << 20, .seed = 7};
  cr_assert_eq(pair(p.fds), 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, pump_writer, &p), 0);
  rt_run(2, pump_main, &p);
  pthread_join(th, NULL);
  cr_assert_eq(p.write_err, 0);
  close(p.fds[0]);
  close(p.fds[1]);
  assert_all_gone(fds_before);
}

static void run_pump_unix(int fallback)
{
  run_pump(unix_pair, fallback);
}
static void run_pump_tcp(int fallback)
{
  run_pump(tcp_pair, fallback);
  if (fallback == WEFT__RS_FORCE_NO_MULTISHOT) /* the refusal was learnt for the process */
    cr_assert_eq(atomic_load(&weft__recv_stream_support), -1);
}
ON_EVERY_PATH(socketpair_10mib, run_pump_unix, 60)
ON_EVERY_PATH(tcp_10mib, run_pump_tcp, 60)

/* ---- end of stream, reset ----------------------------------------------------------- */

static void *eof_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  CO_EQ(write(fds[1], "last words", 10), 10);
  CO_EQ(shutdown(fds[1], SHUT_WR), 0);
  const void *d = NULL;
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 10);
  CO_CHECK(d && memcmp(d, "last words", 10) == 0);
  d = NULL;
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 0);
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 0);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() - 1), 0);
  CO_CHECK(d == NULL); /* set only for data */
  CO_EQ(weft_recv_stream_multishot(s), multishot_later());
  CO_EQ(weft_recv_stream_close(s), 0);
  return NULL;
}

static void run_eof(int fallback)
{
  run_on_pair(fallback, unix_pair, 1, eof_main);
}
ON_EVERY_PATH(eof_is_zero_then_zero, run_eof, 20)

static void *reset_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  CO_EQ(write(fds[1], "abc", 3), 3);
  const void *d;
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 3);
  /* Linger 0: close sends RST. */
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  CO_EQ(setsockopt(fds[1], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
  CO_EQ(close(fds[1]), 0);
  fds[1] = -1;
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), -ECONNRESET);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), -ECONNRESET);
  CO_EQ(weft_recv_stream_close(s), 0);
  weft_stats st = io_stats();
  CO_EQ(st.ops_submitted, st.ops_completed);
  return NULL;
}

static void run_reset(int fallback)
{
  run_on_pair(fallback, tcp_pair, 1, reset_main);
}
ON_EVERY_PATH(peer_reset, run_reset, 20)

/* ---- deadlines ------------------------------------------------------------------------ */

static void *deadline_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  const void *d;
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() - 1), -ETIMEDOUT);
  /* The task's deadline scope bounds next() too. */
  int64_t saved = weft_deadline_push(weft_now() + 10 * WEFT_MSEC);
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), -ETIMEDOUT);
  weft_deadline_pop(saved);
  /* The stream went on: data sent now arrives, in order. */
  CO_EQ(write(fds[1], "hello", 5), 5);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), 5);
  CO_CHECK(memcmp(d, "hello", 5) == 0);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(write(fds[1], "world", 5), 5);
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 5);
  CO_CHECK(memcmp(d, "world", 5) == 0);
  /* A deadline already past still hands out what has arrived, on every
   * path: polling with one gets the data once it is there. */
  CO_EQ(write(fds[1], "late!", 5), 5);
  ssize_t got = -ETIMEDOUT;
  for (int i = 0; i < 10000 && got == -ETIMEDOUT; i++)
    if ((got = weft_recv_stream_next(s, &d, weft_now() - 1)) == -ETIMEDOUT)
      weft_sleep(100 * WEFT_USEC);
  CO_EQ(got, 5);
  CO_CHECK(got != 5 || memcmp(d, "late!", 5) == 0);
  /* Without a suspension in between, the kernel path never sees what has
   * arrived (the shard reaps only while we are suspended); the plain path
   * reads the socket at once. */
  CO_EQ(write(fds[1], "busy", 4), 4);
  got = -ETIMEDOUT;
  for (int i = 0; i < 1000 && got == -ETIMEDOUT; i++)
    got = weft_recv_stream_next(s, &d, weft_now() - 1);
  CO_EQ(got, multishot_later() ? -ETIMEDOUT : 4);
  if (got == -ETIMEDOUT) {
    for (int i = 0; i < 10000 && got == -ETIMEDOUT; i++)
      if ((got = weft_recv_stream_next(s, &d, weft_now() - 1)) == -ETIMEDOUT)
        weft_sleep(100 * WEFT_USEC);
    CO_EQ(got, 4);
  }
  CO_CHECK(got != 4 || memcmp(d, "busy", 4) == 0);
  weft__recv_stream_counters c;
  weft__recv_stream_get_counters(s, &c);
  if (path == WEFT__RS_FORCE_NONE)
    CO_EQ(c.arms, 1); /* one multishot receive all along */
  CO_EQ(weft_recv_stream_multishot(s), multishot_later());
  CO_EQ(weft_recv_stream_close(s), 0);
  weft_stats st = io_stats();
  CO_EQ(st.ops_submitted, st.ops_completed);
  return NULL;
}

static void run_deadline(int fallback)
{
  run_on_pair(fallback, unix_pair, 2, deadline_main);
}
ON_EVERY_PATH(deadline_on_a_silent_peer, run_deadline, 20)

/* ---- cancellation ------------------------------------------------------------------------ */

struct cancel_arg {
  int fds[2];
  atomic_int opened;
  atomic_long got; /* bytes the reader had by now */
  bool flowing;    /* a writer keeps data coming while the task is cancelled */
};

static void *cancelled_reader(void *arg)
{
  struct cancel_arg *ca = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, ca->fds[0], NULL), 0);
  atomic_store(&ca->opened, 1);
  const void *d;
  ssize_t n;
  while ((n = weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE)) > 0)
    atomic_fetch_add(&ca->got, n);
  CO_EQ(n, -ECANCELED);
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), -ECANCELED);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() - 1), -ECANCELED);
  /* close still waits for the kernel, though every wait is cancelled now. */
  CO_EQ(weft_recv_stream_close(s), 0);
  return NULL;
}

static void *flow_writer(void *arg)
{
  struct cancel_arg *ca = arg;
  char buf[4096];
  memset(buf, 'x', sizeof(buf));
  /* Until the reader side closes its descriptor. */
  while (send(ca->fds[1], buf, sizeof(buf), MSG_NOSIGNAL) > 0)
    ;
  return NULL;
}

static void *cancel_main(void *arg)
{
  struct cancel_arg *ca = arg;
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, cancelled_reader, ca), 0);
  CO_CHECK(RT_POLL(atomic_load(&ca->opened)));
  if (ca->flowing) /* in the middle of the flow, not before it */
    CO_CHECK(RT_POLL(atomic_load(&ca->got) >= 64 * 1024));
  else
    CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t), 0);
  CO_EQ(weft_join(t, NULL), -ECANCELED);
  weft_stats st = io_stats();
  CO_EQ(st.ops_submitted, st.ops_completed);
  return NULL;
}

static void run_cancel(int fallback, bool flowing)
{
  use_path(fallback);
  int before = count_fds();
  struct cancel_arg ca = {.flowing = flowing};
  cr_assert_eq(unix_pair(ca.fds), 0);
  pthread_t th;
  if (flowing)
    cr_assert_eq(pthread_create(&th, NULL, flow_writer, &ca), 0);
  rt_run(2, cancel_main, &ca);
  close(ca.fds[0]); /* ends the writer's sends */
  if (flowing)
    pthread_join(th, NULL);
  close(ca.fds[1]);
  assert_all_gone(before);
}

static void run_cancel_idle(int fallback)
{
  run_cancel(fallback, false);
}
static void run_cancel_flowing(int fallback)
{
  run_cancel(fallback, true);
}
ON_EVERY_PATH(cancel_then_close, run_cancel_idle, 20)
ON_EVERY_PATH(cancel_while_data_flows, run_cancel_flowing, 20)

/* close in an ended deadline scope, with data queued and unread. */
static void *close_scope_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  CO_EQ(write(fds[1], "queued", 6), 6);
  /* The data is in a buffer of the stream (on the kernel path: its CQE
   * came; the plain path reads only when asked). */
  weft__recv_stream_counters c;
  weft__recv_stream_get_counters(s, &c);
  if (c.arms)
    CO_CHECK(RT_POLL((weft__recv_stream_get_counters(s, &c), c.cqes >= 1)));
  int64_t saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(weft_recv_stream_close(s), 0);
  weft_deadline_pop(saved);
  weft_stats st = io_stats();
  CO_EQ(st.ops_submitted, st.ops_completed);
  return NULL;
}

static void run_close_scope(int fallback)
{
  run_on_pair(fallback, unix_pair, 1, close_scope_main);
}
ON_EVERY_PATH(close_in_an_expired_scope, run_close_scope, 20)
