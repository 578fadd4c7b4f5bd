/* SPDX-License-Identifier: MIT */
/*
 * Suite "recv_stream", part 2 - receive streams under load and misuse: 64
 * streams on two shards, runtime stop with streams open, bad arguments and
 * descriptors, callers other than the owner (plain threads, other tasks:
 * -EPERM), the cached multishot refusal, out of memory in open and for a
 * deadline's timer, and a non-blocking socket. Every scenario runs on all three paths (see
 * test_recv_stream_data.c) and ends leak-free.
 */
#include "recv_stream_test.h"

#include "core.h"

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
  CO_EQ(weft_task_self()->pinned_ops, 0); /* free to move again */
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
  /* Pinned while their streams were open, on every path (recv_stream.h). */
  cr_assert_eq(atomic_load(&m->moved), 0);
  if (fallback == WEFT__RS_FORCE_NONE)
    cr_assert_gt(atomic_load(&m->peak_groups), 1);
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

static void *open_cancelled(void *arg)
{
  CO_EQ(weft_cancel(weft_task_self()), 0);
  weft_recv_stream *s = (weft_recv_stream *)1;
  int r = weft_recv_stream_open(&s, *(int *)arg, NULL);
  CO_CHECK(s == (weft_recv_stream *)1);
  return (void *)(intptr_t)r;
}

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

  /* An ended deadline scope, or a cancelled task: nothing is started (the
   * data stays in the socket for whoever reads next). */
  CO_EQ(write(fds[1], "k", 1), 1);
  weft_recv_stream *none = (weft_recv_stream *)1;
  int64_t saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(weft_recv_stream_open(&none, fds[0], NULL), -ETIMEDOUT);
  weft_deadline_pop(saved);
  CO_CHECK(none == (weft_recv_stream *)1);
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, -1, open_cancelled, &fds[0]), 0);
  void *r = NULL;
  CO_EQ(weft_join(t, &r), -ECANCELED);
  CO_EQ((intptr_t)r, -ECANCELED);
  char k = 0;
  CO_EQ(read(fds[0], &k, 1), 1);
  CO_EQ(k, 'k');

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

static uint64_t stream_counter(weft_recv_stream *s, int which)
{
  weft__recv_stream_counters c;
  weft__recv_stream_get_counters(s, &c);
  return which == 0 ? c.arms : c.nobufs;
}

static void *owner_main(void *arg)
{
  (void)arg;
  int fds[2];
  CO_EQ(unix_pair(fds), 0);
  struct other_arg oa;
  /* One buffer: while the owner holds it, the kernel path has none, and a
   * release by anyone would hand it back and start receiving again. */
  weft_recv_stream_opts o;
  weft_recv_stream_opts_init(&o);
  o.buf_count = 1;
  CO_EQ(weft_recv_stream_open(&oa.s, fds[0], &o), 0);
  CO_EQ(write(fds[1], "ab", 2), 2);
  const void *d;
  CO_EQ(weft_recv_stream_next(oa.s, &d, WEFT_NO_DEADLINE), 2);
  bool ring = stream_counter(oa.s, 0) > 0;
  CO_EQ(write(fds[1], "cd", 2), 2);
  if (ring) /* the receive found no buffer and stopped */
    CO_CHECK(RT_POLL(stream_counter(oa.s, 1) == 1));
  uint64_t arms = stream_counter(oa.s, 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, other_task, &oa), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(stream_counter(oa.s, 0), arms); /* nothing handed back, nothing armed */
  CO_CHECK(memcmp(d, "ab", 2) == 0);    /* still held */
  CO_EQ(weft_recv_stream_next(oa.s, &d, weft_now() + 10 * WEFT_SEC), 2);
  CO_CHECK(memcmp(d, "cd", 2) == 0);
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

/* The move from 1 to 0 comes with the next() that finds the kernel's
 * refusal - not necessarily the first: one that returns before the kernel
 * answered leaves the stream on 1. */
static void *late_switch_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  CO_EQ(weft_recv_stream_multishot(s), 1);
  const void *d;
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() - 1), -ETIMEDOUT); /* no wait: no answer */
  CO_EQ(weft_recv_stream_multishot(s), 1);
  weft__recv_stream_counters c;
  CO_CHECK(RT_POLL((weft__recv_stream_get_counters(s, &c), c.cqes >= 1))); /* the refusal */
  CO_EQ(weft_recv_stream_multishot(s), 1);
  CO_EQ(write(fds[1], "q", 1), 1);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), 1);
  CO_EQ(weft_recv_stream_multishot(s), 0);
  CO_EQ(weft_recv_stream_close(s), 0);
  return NULL;
}

Test(recv_stream, multishot_refusal_switches_at_the_next_that_sees_it, .timeout = 20)
{
  run_on_pair(WEFT__RS_FORCE_NO_MULTISHOT, unix_pair, 1, late_switch_main);
}

/* Opens a stream on fd failing the 1st, 2nd, ... allocation until one
 * opens: how many failed (-ENOMEM each, nothing left behind). */
static int open_failures(int fd)
{
  weft_recv_stream *s;
  int failed = 0;
  for (long nth = 1; nth <= 8; nth++) {
    weft__fault_arm(WEFT__FAULT_MALLOC, nth);
    int r = weft_recv_stream_open(&s, fd, NULL);
    weft__fault_arm(WEFT__FAULT_MALLOC, 0);
    if (r == 0) {
      CO_EQ(weft_recv_stream_multishot(s), 0);
      CO_EQ(weft_recv_stream_close(s), 0);
      break;
    }
    CO_EQ(r, -ENOMEM);
    failed++;
  }
  return failed;
}

/* Every allocation of open can fail: -ENOMEM and nothing left behind -
 * except the buffer ring's, which makes the stream take the plain path.
 * Inside a deadline scope too, and no more of them there: the stream's op
 * outlives the scope and has no deadline, so no timer slot is reserved
 * for it (once one was, never used, and the open failed when the shard's
 * timer heap could not grow). */
static void *oom_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  /* The record, the buffers, the queue; then it opens (plain path). */
  CO_EQ(open_failures(fds[0]), 3);
  weft__timer_heap *h = &weft__task_self()->shard->timers;
  CO_EQ(h->n, h->cap); /* nothing timed yet: a slot would grow the heap */
  int64_t saved = weft_deadline_push(weft_now() + 60 * WEFT_SEC);
  CO_EQ(open_failures(fds[0]), 3);
  weft_deadline_pop(saved);
  CO_EQ(h->n, h->cap);
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

/* No memory for a deadline's timer (the shard's timer heap cannot grow):
 * next() says -ENOMEM once, without spinning, and the stream goes on. */
static void *timer_oom_main(void *arg)
{
  int *fds = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fds[0], NULL), 0);
  const void *d;
  /* A shard that never armed a timer: the first deadline allocates. */
  CO_EQ(weft__shard_self()->timers.cap, 0);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(write(fds[1], "ok", 2), 2);
  CO_EQ(weft_recv_stream_next(s, &d, weft_now() + 5 * WEFT_SEC), 2);
  CO_CHECK(memcmp(d, "ok", 2) == 0);
  CO_EQ(weft_recv_stream_close(s), 0);
  return NULL;
}

static void run_timer_oom(int fallback)
{
  run_on_pair(fallback, unix_pair, 1, timer_oom_main);
}

ON_EVERY_PATH(no_memory_for_the_deadline_timer, run_timer_oom, 20)
