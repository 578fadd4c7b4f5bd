/* SPDX-License-Identifier: MIT */
/*
 * Suite "recv_stream": receive streams (weft/recv_stream.h). Every scenario
 * runs on the multishot + buffer-ring path and on the plain path, reached
 * both ways a kernel can refuse (the buffer ring, or the multishot receive:
 * test hook), with the same expected results: 10 MiB patterns with a slow
 * consumer (-ENOBUFS re-arms on the ring path), EOF, reset, deadlines,
 * cancellation, 64 streams, runtime stop, bad arguments, no memory; each
 * test ends leak-free (memory, buffer group ids, descriptors).
 */
#include "io_helpers.h"

#include "fault.h"
#include "recv_stream_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

/* ---- paths and helpers ------------------------------------------------------------ */

/* The path a test runs on (the hook's value; each test is its own process). */
static int path;

static void use_path(int p)
{
  path = p;
  atomic_store(&weft__recv_stream_force_fallback, p);
}

/* A scenario run(path) as three tests: the kernel path, and the two ways
 * a kernel can refuse it. */
#define ON_EVERY_PATH(name, run, secs)                                                        \
  Test(recv_stream, name, .timeout = secs) { run(WEFT__RS_FORCE_NONE); }                      \
  Test(recv_stream, name##_no_ring, .timeout = secs) { run(WEFT__RS_FORCE_NO_RING); }         \
  Test(recv_stream, name##_no_multishot, .timeout = secs) { run(WEFT__RS_FORCE_NO_MULTISHOT); }

/* What weft_recv_stream_multishot() says right after open, and after the
 * first next(). */
static int multishot_at_open(void)
{
  return path == WEFT__RS_FORCE_NO_RING ? 0 : 1;
}
static int multishot_later(void)
{
  return path == WEFT__RS_FORCE_NONE ? 1 : 0;
}

static int count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  int n = 0;
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

static uint8_t pat(uint64_t seed, size_t i)
{
  uint64_t x = (i + seed * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
  return (uint8_t)(x >> 56);
}

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

static int unix_pair(int fds[2])
{
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0 ? 0 : -errno;
}

/* The end-of-test checks: nothing of a stream is left anywhere. */
static void assert_all_gone(int fds_before)
{
  rt_assert_clean();
  cr_assert_eq(weft__recv_stream_groups_in_use(), 0);
  cr_assert_eq(count_fds(), fds_before);
  rt_assert_no_leaks();
}

/* Runs main(fds) on a fresh socket pair on the given path and checks that
 * nothing is left (main sets an end it closed itself to -1). */
static void run_on_pair(int fallback, int (*pair)(int[2]), int shards, void *(*main_fn)(void *))
{
  use_path(fallback);
  int before = count_fds();
  int fds[2];
  cr_assert_eq(pair(fds), 0);
  rt_run(shards, main_fn, fds);
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  assert_all_gone(before);
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
  bool flowing; /* a writer keeps data coming while the task is cancelled */
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
    ;
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
  if (ca->flowing)
    weft_sleep(20 * WEFT_MSEC);
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
  weft_sleep(10 * WEFT_MSEC); /* the data is in a buffer of the stream */
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

/* ---- many streams at once ----------------------------------------------------------------- */

#define NSTREAMS 64
#define PER_STREAM (256u * 1024)

struct many {
  int fds[NSTREAMS][2];
  atomic_int moved;
  atomic_uint peak_groups;
};

struct many_one {
  struct many *m;
  int i;
};

static void *many_writer(void *arg)
{
  struct many_one *mo = arg;
  int fd = mo->m->fds[mo->i][1];
  uint8_t buf[8192];
  for (size_t off = 0; off < PER_STREAM; off += sizeof(buf)) {
    for (size_t k = 0; k < sizeof(buf); k++)
      buf[k] = pat((uint64_t)mo->i, off + k);
    size_t done = 0;
    while (done < sizeof(buf)) {
      ssize_t w = weft_write(fd, buf + done, sizeof(buf) - done);
      CO_CHECK(w > 0);
      if (w <= 0)
        return NULL;
      done += (size_t)w;
    }
  }
  CO_EQ(shutdown(fd, SHUT_WR), 0);
  return NULL;
}

static void *many_reader(void *arg)
{
  struct many_one *mo = arg;
  weft_recv_stream_opts o = {.buf_size = 2048, .buf_count = 4};
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, mo->m->fds[mo->i][0], &o), 0);
  unsigned g = weft__recv_stream_groups_in_use(), peak = atomic_load(&mo->m->peak_groups);
  while (g > peak && !atomic_compare_exchange_weak(&mo->m->peak_groups, &peak, g))
    ;
  int home = weft_shard_id();
  size_t got = 0, bad = 0;
  unsigned bufs = 0;
  ssize_t n;
  const void *d;
  while ((n = weft_recv_stream_next(s, &d, weft_now() + 20 * WEFT_SEC)) > 0) {
    for (ssize_t k = 0; k < n; k++)
      bad += ((const uint8_t *)d)[k] != pat((uint64_t)mo->i, got + (size_t)k);
    got += (size_t)n;
    if (weft_shard_id() != home)
      atomic_fetch_add(&mo->m->moved, 1);
    if (++bufs % 4 == 0)
      weft_yield(); /* runnable often: a thief would take it if it could */
  }
  CO_EQ(n, 0);
  CO_EQ(got, PER_STREAM);
  CO_EQ(bad, 0);
  CO_EQ(weft_recv_stream_close(s), 0);
  return NULL;
}

static void *many_main(void *arg)
{
  struct many *m = arg;
  struct many_one mo[NSTREAMS];
  weft_task *r[NSTREAMS], *w[NSTREAMS];
  weft_spawn_opts o;
  weft_spawn_opts_init(&o); /* stealable: the open streams must keep them home */
  for (int i = 0; i < NSTREAMS; i++) {
    mo[i] = (struct many_one){m, i};
    CO_EQ(weft_spawn(&r[i], &o, many_reader, &mo[i]), 0);
    CO_EQ(rt_spawn(&w[i], WEFT_PLACE_ROUND_ROBIN, 0, many_writer, &mo[i]), 0);
  }
  for (int i = 0; i < NSTREAMS; i++) {
    CO_EQ(weft_join(r[i], NULL), 0);
    CO_EQ(weft_join(w[i], NULL), 0);
  }
  weft_stats st = io_stats();
  CO_EQ(st.ops_submitted, st.ops_completed);
  return NULL;
}

static void run_many(int fallback)
{
  use_path(fallback);
  int before = count_fds();
  struct many *m = calloc(1, sizeof(*m));
  cr_assert_not_null(m);
  for (int i = 0; i < NSTREAMS; i++)
    cr_assert_eq(unix_pair(m->fds[i]), 0);
  rt_run(2, many_main, m);
  if (fallback == WEFT__RS_FORCE_NONE) {
    /* Pinned while their streams were open (the plain path needs no pin). */
    cr_assert_eq(atomic_load(&m->moved), 0);
    cr_assert_gt(atomic_load(&m->peak_groups), 1);
  }
  for (int i = 0; i < NSTREAMS; i++) {
    close(m->fds[i][0]);
    close(m->fds[i][1]);
  }
  free(m);
  assert_all_gone(before);
}

ON_EVERY_PATH(many_streams_on_two_shards, run_many, 60)

/* ---- runtime stop with streams open ------------------------------------------------------- */

static void *stop_reader(void *arg)
{
  (void)arg;
  int fds[2];
  CO_EQ(unix_pair(fds), 0);
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  const void *d;
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), -ECANCELED);
  CO_EQ(weft_recv_stream_close(s), 0);
  close(fds[0]);
  close(fds[1]);
  return NULL;
}

static void run_stop(int fallback)
{
  use_path(fallback);
  int before = count_fds();
  weft_runtime *rt = rt_start(2);
  enum { N = 16 };
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  for (int i = 0; i < N; i++)
    cr_assert_eq(weft_runtime_submit(rt, &o, stop_reader, NULL, NULL), 0);
  cr_assert(io_wait_suspended_rt(rt, N));
  cr_assert_eq(weft_runtime_stop(rt), 0);
  assert_all_gone(before);
}

ON_EVERY_PATH(runtime_stop_with_streams_open, run_stop, 30)

/* ---- arguments, callers, descriptors, memory -------------------------------------------------- */

static void *args_main(void *arg)
{
  (void)arg;
  int fds[2];
  CO_EQ(unix_pair(fds), 0);
  weft_recv_stream *s = NULL;
  weft_recv_stream_opts o;
  weft_recv_stream_opts_init(&o);
  CO_EQ(o.buf_size, 16384);
  CO_EQ(o.buf_count, 64);
  CO_EQ(weft_recv_stream_open(NULL, fds[0], NULL), -EINVAL);
  o.buf_count = 3;
  CO_EQ(weft_recv_stream_open(&s, fds[0], &o), -EINVAL);
  o.buf_count = 65536;
  CO_EQ(weft_recv_stream_open(&s, fds[0], &o), -EINVAL);
  o.buf_count = 2;
  o.buf_size = WEFT_RECV_STREAM_MAX_BUF_SIZE + 1;
  CO_EQ(weft_recv_stream_open(&s, fds[0], &o), -EINVAL);
  CO_EQ(weft_recv_stream_open(&s, -1, NULL), -EBADF);
  CO_CHECK(s == NULL);
  CO_EQ(weft_recv_stream_next(NULL, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_recv_stream_close(NULL), -EINVAL);
  CO_EQ(weft_recv_stream_multishot(NULL), -EINVAL);
  weft_recv_stream_release(NULL);
  weft_recv_stream_opts_init(NULL);

  /* Zeros are the defaults; one buffer of one byte works. */
  o.buf_size = 1;
  o.buf_count = 1;
  CO_EQ(weft_recv_stream_open(&s, fds[0], &o), 0);
  const void *d;
  CO_EQ(weft_recv_stream_next(s, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(write(fds[1], "xyz", 3), 3);
  char got[3];
  for (int i = 0; i < 3; i++) {
    CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 1);
    got[i] = *(const char *)d;
  }
  CO_CHECK(memcmp(got, "xyz", 3) == 0);
  CO_EQ(weft_recv_stream_close(s), 0);
  o.buf_size = 0;
  o.buf_count = 0;
  CO_EQ(weft_recv_stream_open(&s, fds[0], &o), 0);
  CO_EQ(weft_recv_stream_close(s), 0);

  /* Not a socket; a descriptor that is not open. */
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(weft_recv_stream_open(&s, p[0], NULL), 0);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), -ENOTSOCK);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), -ENOTSOCK);
  CO_EQ(weft_recv_stream_close(s), 0);
  io_close_pipe(p);
  CO_EQ(weft_recv_stream_open(&s, 1000, NULL), 0);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), -EBADF);
  CO_EQ(weft_recv_stream_close(s), 0);

  close(fds[0]);
  close(fds[1]);
  return NULL;
}

static void run_args(int fallback)
{
  use_path(fallback);
  int before = count_fds();
  rt_run(1, args_main, NULL);
  assert_all_gone(before);
}

ON_EVERY_PATH(bad_arguments_and_descriptors, run_args, 20)

Test(recv_stream, plain_thread_gets_eperm, .timeout = 10)
{
  int fds[2];
  cr_assert_eq(unix_pair(fds), 0);
  weft_recv_stream *s = NULL;
  cr_assert_eq(weft_recv_stream_open(&s, fds[0], NULL), -EPERM);
  cr_assert_null(s);
  cr_assert_eq(weft_recv_stream_open(NULL, fds[0], NULL), -EINVAL);
  close(fds[0]);
  close(fds[1]);
}

/* The stream belongs to its task: others get -EPERM and change nothing. */
struct other_arg {
  weft_recv_stream *s;
};

static void *other_task(void *arg)
{
  struct other_arg *oa = arg;
  const void *d;
  CO_EQ(weft_recv_stream_next(oa->s, &d, WEFT_NO_DEADLINE), -EPERM);
  CO_EQ(weft_recv_stream_close(oa->s), -EPERM);
  weft_recv_stream_release(oa->s);
  return NULL;
}

static void *owner_main(void *arg)
{
  (void)arg;
  int fds[2];
  CO_EQ(unix_pair(fds), 0);
  struct other_arg oa;
  CO_EQ(weft_recv_stream_open(&oa.s, fds[0], NULL), 0);
  CO_EQ(write(fds[1], "ab", 2), 2);
  const void *d;
  CO_EQ(weft_recv_stream_next(oa.s, &d, WEFT_NO_DEADLINE), 2);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, other_task, &oa), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_CHECK(memcmp(d, "ab", 2) == 0); /* still held */
  CO_EQ(weft_recv_stream_close(oa.s), 0);
  close(fds[0]);
  close(fds[1]);
  return NULL;
}

Test(recv_stream, other_tasks_get_eperm, .timeout = 20)
{
  int before = count_fds();
  rt_run(2, owner_main, NULL);
  assert_all_gone(before);
}

/* The multishot refusal is learnt once: later streams start on the plain path. */
static void *probe_main(void *arg)
{
  (void)arg;
  int fds[2];
  CO_EQ(unix_pair(fds), 0);
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  CO_EQ(weft_recv_stream_multishot(s), 1);
  CO_EQ(write(fds[1], "p", 1), 1);
  const void *d;
  CO_EQ(weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE), 1);
  CO_EQ(weft_recv_stream_multishot(s), 0);
  CO_EQ(atomic_load(&weft__recv_stream_support), -1);
  CO_EQ(weft_recv_stream_close(s), 0);
  atomic_store(&weft__recv_stream_force_fallback, WEFT__RS_FORCE_NONE);
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  CO_EQ(weft_recv_stream_multishot(s), 0); /* cached */
  CO_EQ(weft_recv_stream_close(s), 0);
  close(fds[0]);
  close(fds[1]);
  return NULL;
}

Test(recv_stream, multishot_refusal_is_cached, .timeout = 20)
{
  use_path(WEFT__RS_FORCE_NO_MULTISHOT);
  int before = count_fds();
  rt_run(1, probe_main, NULL);
  assert_all_gone(before);
}

/* Every allocation of open can fail: -ENOMEM and nothing left behind -
 * except the buffer ring's, which makes the stream take the plain path. */
static void *oom_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  int failed = 0;
  for (long nth = 1; nth <= 8; nth++) {
    weft__fault_arm(WEFT__FAULT_MALLOC, nth);
    int r = weft_recv_stream_open(&s, fds[0], NULL);
    weft__fault_arm(WEFT__FAULT_MALLOC, 0);
    if (r == 0) {
      CO_EQ(weft_recv_stream_multishot(s), 0);
      CO_EQ(weft_recv_stream_close(s), 0);
      break;
    }
    CO_EQ(r, -ENOMEM);
    failed++;
  }
  /* The record, the buffers, the queue; then it opens (plain path). */
  CO_EQ(failed, 3);
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  CO_EQ(weft_recv_stream_multishot(s), multishot_at_open());
  CO_EQ(weft_recv_stream_close(s), 0);
  CO_EQ(weft__recv_stream_groups_in_use(), 0);
  return NULL;
}

static void run_oom(int fallback)
{
  run_on_pair(fallback, unix_pair, 1, oom_main);
}

ON_EVERY_PATH(out_of_memory_in_open, run_oom, 20)

/* A socket in O_NONBLOCK mode behaves the same: the stream waits for data. */
static void *nonblock_main(void *arg)
{
  int *fds = arg;
  CO_EQ(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  const void *d;
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(write(fds[1], "nb", 2), 2);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), 2);
  CO_EQ(shutdown(fds[1], SHUT_WR), 0);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_recv_stream_close(s), 0);
  return NULL;
}

static void run_nonblock(int fallback)
{
  run_on_pair(fallback, unix_pair, 1, nonblock_main);
}

ON_EVERY_PATH(nonblocking_socket, run_nonblock, 20)
