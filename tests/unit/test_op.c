/* SPDX-License-Identifier: MIT */
/*
 * Suite "op": the op primitive behind every I/O call (SQE -> suspend ->
 * CQE), seen through weft_read / weft_write / weft_nop: deadlines (the op is
 * really cancelled: the pipe stays usable and nothing is lost), bad
 * descriptors, a tiny ring under CQ pressure (no completion lost), shutdown
 * with ten thousand blocked coroutines, the plain-thread fallback, and a
 * deadline without memory for its timer. weft_cancel and the races of
 * cancel or deadline against the completion are in test_op_cancel.c.
 */
#include "io_helpers.h"

#include "fault.h"

#include <pthread.h>
#include <signal.h>

/* ---- deadlines -------------------------------------------------------------------- */

static void *read_dl_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  char buf[16];
  weft_stats s0 = io_stats();
  int64_t t0 = weft_now();
  CO_EQ(weft_read_dl(p[0], buf, sizeof(buf), t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  weft_stats s1 = io_stats();
  CO_EQ(s1.ops_timed_out - s0.ops_timed_out, 1);
  CO_EQ(s1.ops_submitted - s0.ops_submitted, 1);
  CO_EQ(s1.ops_completed - s0.ops_completed, 1);

  /* The timed-out read is gone for real: the next data goes to the next read. */
  CO_EQ(weft_write(p[1], "hello", 5), 5);
  memset(buf, 0, sizeof(buf));
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), 5);
  CO_CHECK(memcmp(buf, "hello", 5) == 0);

  /* Data before the deadline: the data, not a timeout. */
  CO_EQ(weft_write(p[1], "ab", 2), 2);
  CO_EQ(weft_read_dl(p[0], buf, sizeof(buf), weft_now() + 3600 * WEFT_SEC), 2);
  /* A deadline already passed: -ETIMEDOUT without touching the data. */
  CO_EQ(weft_write(p[1], "c", 1), 1);
  CO_EQ(weft_read_dl(p[0], buf, sizeof(buf), weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_write_dl(p[1], "d", 1, 0), -ETIMEDOUT);
  CO_EQ(io_pending(p[0]), 1);
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), 1);
  CO_EQ(buf[0], 'c');

  /* EOF. */
  close(p[1]);
  CO_EQ(weft_read_dl(p[0], buf, sizeof(buf), weft_now() + WEFT_SEC), 0);
  close(p[0]);
  return NULL;
}

Test(op, read_deadline_times_out_and_pipe_stays_usable, .timeout = 30)
{
  rt_run(2, read_dl_main, NULL);
  rt_assert_clean();
}

/* ---- bad descriptors ----------------------------------------------------------------- */

static void *badf_main(void *arg)
{
  (void)arg;
  char buf[4] = "abc";
  CO_EQ(weft_read(-1, buf, sizeof(buf)), -EBADF);
  CO_EQ(weft_write(-1, buf, sizeof(buf)), -EBADF);
  CO_EQ(weft_read_dl(-1, buf, sizeof(buf), weft_now() + WEFT_SEC), -EBADF);
  CO_EQ(weft_write_dl(-1, buf, sizeof(buf), weft_now() + WEFT_SEC), -EBADF);
  CO_EQ(weft_read(100000, buf, sizeof(buf)), -EBADF); /* never opened */
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(weft_read(p[1], buf, sizeof(buf)), -EBADF); /* wrong direction */
  CO_EQ(weft_write(p[0], buf, sizeof(buf)), -EBADF);
  io_close_pipe(p);
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), -EBADF); /* closed */
  /* A deadline already passed fails the call first, before any descriptor
   * is looked at (io.h). */
  CO_EQ(weft_read_dl(-1, buf, sizeof(buf), weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_write_dl(-1, buf, sizeof(buf), weft_now() - 1), -ETIMEDOUT);
  return NULL;
}

Test(op, bad_descriptors_give_ebadf, .timeout = 30)
{
  rt_run(1, badf_main, NULL);
  rt_assert_clean();
  /* The plain-thread fallback reports the same. */
  char buf[4];
  cr_assert_eq(weft_read(-1, buf, sizeof(buf)), -EBADF);
  cr_assert_eq(weft_write(-1, buf, sizeof(buf)), -EBADF);
  cr_assert_eq(weft_read_dl(-1, buf, sizeof(buf), weft_now() + WEFT_SEC), -EBADF);
  cr_assert_eq(weft_read_dl(-1, buf, sizeof(buf), weft_now() - 1), -ETIMEDOUT);
  cr_assert_eq(weft_write_dl(-1, buf, sizeof(buf), weft_now() - 1), -ETIMEDOUT);
}

/* ---- a tiny ring ------------------------------------------------------------------ */

#define TINY_TASKS 10000

static void *nop_task(void *arg)
{
  (void)arg;
  for (int i = 0; i < 3; i++) {
    int r = weft_nop();
    if (r != 0)
      return (void *)(intptr_t)r;
  }
  return NULL;
}

static void *sleep_1ms(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_sleep(WEFT_MSEC);
}

static void *tiny_main(void *arg)
{
  (void)arg;
  weft_task **t = calloc(2 * TINY_TASKS, sizeof(*t));
  CO_CHECK(t != NULL);
  weft_stats s0 = io_stats();
  for (int i = 0; i < TINY_TASKS; i++) {
    CO_EQ(rt_spawn(&t[2 * i], WEFT_PLACE_ROUND_ROBIN, -1, nop_task, NULL), 0);
    CO_EQ(rt_spawn(&t[2 * i + 1], WEFT_PLACE_ROUND_ROBIN, -1, sleep_1ms, NULL), 0);
  }
  int bad = 0;
  for (int i = 0; i < 2 * TINY_TASKS; i++) {
    void *v = (void *)-1;
    CO_EQ(weft_join(t[i], &v), 0);
    if (v != NULL && bad++ == 0)
      CO_EQ((intptr_t)v, 0);
  }
  CO_EQ(bad, 0);
  weft_stats s1 = io_stats();
  /* Every op that was submitted completed (nothing is in flight now). */
  CO_EQ(s1.ops_submitted - s0.ops_submitted, 3 * TINY_TASKS);
  CO_EQ(s1.ops_completed - s0.ops_completed, 3 * TINY_TASKS);
  CO_EQ(s1.ops_submitted, s1.ops_completed);
  CO_CHECK(s1.sq_full_flushes > s0.sq_full_flushes); /* the SQ did fill */
  cr_log_info("tiny ring: %llu SQ-full flushes, %llu CQ overflows, %llu enters",
              (unsigned long long)(s1.sq_full_flushes - s0.sq_full_flushes),
              (unsigned long long)(s1.cq_overflows - s0.cq_overflows),
              (unsigned long long)(s1.enters - s0.enters));
  free(t);
  return NULL;
}

static void tiny_cfg(weft_config *c, int shards)
{
  rt_cfg(c, shards);
  c->ring_entries = 8;
  c->cq_entries = 16;
  c->stack_size = 64 * 1024;
}

Test(op, tiny_ring_loses_no_completion, .timeout = 120)
{
  weft_config c;
  tiny_cfg(&c, 2);
  io_run_cfg(&c, tiny_main, NULL);
  rt_assert_clean();
}

Test(op, tiny_ring_one_shard, .timeout = 120)
{
  weft_config c;
  tiny_cfg(&c, 1);
  io_run_cfg(&c, tiny_main, NULL);
  rt_assert_clean();
}

/* ---- shutdown with blocked coroutines ----------------------------------------------- */

#define BLOCKED 10000
#define PIPES 4

struct blocked {
  int p[PIPES][2];
  weft_event *never;
  weft_timer *tm;
  weft_cancel_token *tok;
  atomic_int started, cancelled, other;
};

static void *blocked_task(void *arg)
{
  struct blocked *b = arg;
  int i = atomic_fetch_add(&b->started, 1);
  char buf[8];
  long long r;
  switch (i % 5) {
  case 0: r = weft_read(b->p[i % PIPES][0], buf, sizeof(buf)); break;
  case 1: r = weft_sleep(3600 * WEFT_SEC); break;
  case 2: r = weft_event_wait(b->never); break;
  case 3: r = weft_timer_wait(b->tm); break;
  default: r = weft_cancel_token_wait(b->tok, weft_now() + 3600 * WEFT_SEC); break;
  }
  atomic_fetch_add(r == -ECANCELED ? &b->cancelled : &b->other, 1);
  return NULL;
}

static void *shutdown_main(void *arg)
{
  struct blocked *b = arg;
  for (int i = 0; i < BLOCKED; i++)
    CO_EQ(rt_spawn(NULL, WEFT_PLACE_ROUND_ROBIN, -1, blocked_task, b), 0);
  CO_CHECK(RT_POLL(atomic_load(&b->started) == BLOCKED));
  CO_CHECK(io_wait_suspended(BLOCKED));
  return (void *)(intptr_t)7; /* the runtime must now cancel all of them */
}

Test(op, shutdown_cancels_ten_thousand_blocked, .timeout = 120)
{
  struct blocked b = {0};
  for (int i = 0; i < PIPES; i++)
    cr_assert_eq(io_pipe(b.p[i]), 0);
  cr_assert_eq(weft_event_create(&b.never, 0), 0);
  cr_assert_eq(weft_timer_create(&b.tm, WEFT_NO_DEADLINE), 0);
  cr_assert_eq(weft_cancel_token_create(&b.tok), 0);
  weft_config c;
  rt_cfg(&c, 2);
  c.stack_size = 64 * 1024;
  void *ret = io_run_cfg(&c, shutdown_main, &b);
  rt_assert_clean();
  cr_assert_eq((intptr_t)ret, 7);
  cr_assert_eq(atomic_load(&b.cancelled), BLOCKED);
  cr_assert_eq(atomic_load(&b.other), 0);
  /* No cancelled read took data: every pipe is empty and still works. */
  for (int i = 0; i < PIPES; i++) {
    cr_assert_eq(io_pending(b.p[i][0]), 0);
    cr_assert_eq(write(b.p[i][1], "k", 1), 1);
    cr_assert_eq(io_pending(b.p[i][0]), 1);
    io_close_pipe(b.p[i]);
  }
  weft_event_destroy(b.never);
  weft_timer_destroy(b.tm);
  weft_cancel_token_destroy(b.tok);
  rt_assert_no_leaks();
}

/* ---- plain threads ---------------------------------------------------------------- */

Test(op, plain_thread_falls_back_to_syscalls, .timeout = 30)
{
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  char buf[8];
  int64_t t0 = weft_now();
  cr_assert_eq(weft_read_dl(p[0], buf, sizeof(buf), t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  cr_assert_geq(weft_now(), t0 + 20 * WEFT_MSEC);
  cr_assert_eq(weft_read_dl(p[0], buf, sizeof(buf), t0 - 1), -ETIMEDOUT);
  cr_assert_eq(weft_read_dl(p[0], buf, 0, weft_now() + 10 * WEFT_SEC), 0); /* empty pipe */
  cr_assert_eq(weft_read_dl(p[0], buf, 0, t0 - 1), -ETIMEDOUT); /* a passed deadline still */
  cr_assert_eq(weft_write(p[1], "abc", 3), 3);
  cr_assert_eq(weft_write_dl(p[1], "de", 2, weft_now() + WEFT_SEC), 2);
  cr_assert_eq(weft_read_dl(p[0], buf, sizeof(buf), weft_now() + WEFT_SEC), 5);
  cr_assert(memcmp(buf, "abcde", 5) == 0);
  cr_assert_eq(weft_write(p[1], "f", 1), 1);
  cr_assert_eq(weft_read(p[0], buf, sizeof(buf)), 1);
  cr_assert_eq(weft_nop(), 0);
  /* A full pipe with a write deadline: -ETIMEDOUT, not a blocked thread. */
  cr_assert_eq(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
  static char big[65536];
  while (write(p[1], big, sizeof(big)) > 0)
    ;
  cr_assert_eq(fcntl(p[1], F_SETFL, 0), 0);
  cr_assert_eq(weft_write_dl(p[1], "x", 1, weft_now() + 10 * WEFT_MSEC), -ETIMEDOUT);
  /* Nothing to move: 0 at once, as read(2)/write(2) say it, readiness or
   * not - the full pipe here, the empty one below. */
  cr_assert_eq(weft_write_dl(p[1], "x", 0, weft_now() + 10 * WEFT_SEC), 0);
  struct iovec none = {big, 0};
  cr_assert_eq(weft_writev_dl(p[1], &none, 1, weft_now() + 10 * WEFT_SEC), 0);
  close(p[1]);
  while (weft_read(p[0], big, sizeof(big)) > 0)
    ;
  cr_assert_eq(weft_read_dl(p[0], buf, sizeof(buf), weft_now() + WEFT_SEC), 0); /* EOF */
  close(p[0]);
}

/* A pipe whose reader is gone: -EPIPE both ways. In a coroutine nothing
 * more (shard threads block SIGPIPE); on a plain thread write(2)'s SIGPIPE
 * too, on that thread, as io.h says - blocked here, so it stays pending. */
static void *broken_pipe_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  close(p[0]);
  CO_EQ(weft_write(p[1], "x", 1), -EPIPE);
  CO_EQ(weft_write_dl(p[1], "x", 1, weft_now() + WEFT_SEC), -EPIPE);
  close(p[1]);
  return NULL;
}

Test(op, a_write_to_a_broken_pipe_is_epipe, .timeout = 30)
{
  rt_run(1, broken_pipe_main, NULL);
  rt_assert_clean();
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  cr_assert_eq(pthread_sigmask(SIG_BLOCK, &pipe_only, &old), 0);
  for (int with_deadline = 0; with_deadline < 2; with_deadline++) {
    int p[2];
    cr_assert_eq(io_pipe(p), 0);
    close(p[0]);
    ssize_t r = with_deadline ? weft_write_dl(p[1], "x", 1, weft_now() + WEFT_SEC)
                              : weft_write(p[1], "x", 1);
    cr_assert_eq(r, -EPIPE);
    cr_assert_eq(sigpending(&pending), 0);
    cr_assert(sigismember(&pending, SIGPIPE), "no SIGPIPE raised (deadline: %d)", with_deadline);
    int sig = 0;
    cr_assert_eq(sigwait(&pipe_only, &sig), 0); /* taken: the next round starts clean */
    close(p[1]);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* On a plain thread an O_NONBLOCK pipe waits as in a coroutine: the read
 * returns the byte another thread writes later, not -EAGAIN. */
static void *late_byte_writer(void *arg)
{
  int fd = *(int *)arg;
  io_busy(20 * WEFT_MSEC);
  return (void *)(intptr_t)write(fd, "n", 1);
}

Test(op, plain_thread_waits_on_a_nonblocking_pipe, .timeout = 30)
{
  int p[2];
  cr_assert_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, late_byte_writer, &p[1]), 0);
  char c = 0;
  cr_assert_eq(weft_read(p[0], &c, 1), 1);
  cr_assert_eq(c, 'n');
  void *w;
  pthread_join(th, &w);
  cr_assert_eq((intptr_t)w, 1);
  /* The same with a deadline that passes first, and for readv. */
  cr_assert_eq(weft_read_dl(p[0], &c, 1, weft_now() + 10 * WEFT_MSEC), -ETIMEDOUT);
  cr_assert_eq(pthread_create(&th, NULL, late_byte_writer, &p[1]), 0);
  struct iovec iov = {.iov_base = &c, .iov_len = 1};
  c = 0;
  cr_assert_eq(weft_readv(p[0], &iov, 1), 1);
  cr_assert_eq(c, 'n');
  pthread_join(th, NULL);
  io_close_pipe(p);
}

/* The plain-thread fallback with a deadline: a write larger than the room
 * left in a pipe must not block past the deadline (poll(2) reports a pipe
 * writable with one page free; a blocking write(2) of more then waits for
 * a reader). The result is a short count or -ETIMEDOUT, promptly - for
 * every call that writes: plain, vectored (lib/fs.c) and a frame's writev
 * (lib/frame.c). The bound is not a timing check: a call that blocks in
 * write(2) never returns, as no one reads the pipe. */
enum little_room_call { LR_WRITE, LR_WRITEV, LR_FRAME };

static void write_with_little_room(enum little_room_call call)
{
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  int cap = fcntl(p[1], F_GETPIPE_SZ);
  cr_assert_gt(cap, 8192);
  char *buf = calloc(1, (size_t)cap);
  cr_assert_eq(weft_write(p[1], buf, (size_t)cap - 4096), cap - 4096); /* one page left */
  int64_t t0 = weft_now(), dl = t0 + 20 * WEFT_MSEC;
  struct iovec iov[2] = {{buf, (size_t)cap / 2}, {buf + cap / 2, (size_t)cap / 2}};
  ssize_t r = call == LR_WRITE    ? weft_write_dl(p[1], buf, (size_t)cap, dl)
              : call == LR_WRITEV ? weft_writev_dl(p[1], iov, 2, dl)
                                  : weft_frame_write_dl(p[1], buf, (size_t)cap, dl);
  if (call == LR_FRAME) /* all of a frame or an error */
    cr_assert_eq(r, -ETIMEDOUT);
  else
    cr_assert(r == -ETIMEDOUT || (r > 0 && r <= 4096), "call %d: %zd", call, r);
  cr_assert_lt(weft_now(), t0 + 5 * WEFT_SEC);
  free(buf);
  io_close_pipe(p);
}

Test(op, plain_thread_write_deadline_with_little_room, .timeout = 10)
{
  write_with_little_room(LR_WRITE);
}

Test(op, plain_thread_writev_deadline_with_little_room, .timeout = 10)
{
  write_with_little_room(LR_WRITEV);
}

Test(op, plain_thread_frame_write_deadline_with_little_room, .timeout = 10)
{
  write_with_little_room(LR_FRAME);
}

/* Two plain threads read one byte with a deadline: one gets it, the other
 * must time out rather than block in read(2) after poll(2) said "ready". */
struct plain_reader {
  int fd;
  bool vectored;
  pthread_barrier_t *go;
  int64_t deadline;
  ssize_t r;
};

static void *plain_reader_thread(void *arg)
{
  struct plain_reader *pr = arg;
  char c;
  struct iovec iov = {&c, 1};
  pthread_barrier_wait(pr->go);
  pr->r = pr->vectored ? weft_readv_dl(pr->fd, &iov, 1, pr->deadline)
                       : weft_read_dl(pr->fd, &c, 1, pr->deadline);
  return NULL;
}

static void race_for_one_byte(bool vectored)
{
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  int conclusive = 0;
  for (int round = 0; round < 40; round++) {
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 3);
    struct plain_reader pr[2] = {{.fd = p[0], .vectored = vectored, .go = &go},
                                 {.fd = p[0], .vectored = vectored, .go = &go}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
      cr_assert_eq(pthread_create(&th[i], NULL, plain_reader_thread, &pr[i]), 0);
    /* The byte is there before they look: both polls see it at once. */
    cr_assert_eq(write(p[1], "1", 1), 1);
    /* Set just before the barrier, not before the threads start (which a
     * loaded machine can make take longer than the deadline): a reader that
     * starts past its deadline gives up without looking. */
    int64_t dl = weft_now() + 100 * WEFT_MSEC;
    pr[0].deadline = pr[1].deadline = dl;
    pthread_barrier_wait(&go);
    /* If the loser blocks in read(2), this second byte (sent after the
     * deadline) is what finally releases it: then it returns 1, late. */
    weft_sleep_until(dl + 100 * WEFT_MSEC);
    cr_assert_eq(write(p[1], "2", 1), 1);
    for (int i = 0; i < 2; i++)
      pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    int ones = (pr[0].r == 1) + (pr[1].r == 1);
    int touts = (pr[0].r == -ETIMEDOUT) + (pr[1].r == -ETIMEDOUT);
    /* Two bytes read is the loser blocking past its deadline. Both timed
     * out only if both were held up past it before looking (a loaded
     * machine): that round shows nothing, and both bytes are still there. */
    cr_assert(ones + touts == 2 && ones < 2, "round %d: results %zd and %zd", round, pr[0].r,
              pr[1].r);
    char c[2];
    cr_assert_eq(read(p[0], c, (size_t)(2 - ones)), 2 - ones); /* what is still there */
    conclusive += ones == 1;
  }
  cr_assert_geq(conclusive, 1, "no round had one reader take the byte");
  io_close_pipe(p);
}

Test(op, plain_threads_racing_for_one_byte_with_deadlines, .timeout = 30)
{
  race_for_one_byte(false);
}

Test(op, plain_threads_racing_for_one_byte_with_readv_deadlines, .timeout = 30)
{
  race_for_one_byte(true);
}

/* ---- out of memory --------------------------------------------------------------- */

/* No memory to arm a read's deadline timer (the shard's heap has no array
 * yet): the call must not turn into a read without deadline - it fails
 * (-ENOMEM) or still times out. A helper writes a byte after 300 ms, so
 * that a read that lost its deadline ends (with 1) instead of hanging. */
static void *late_writer(void *arg)
{
  int fd = *(int *)arg;
  weft_sleep(300 * WEFT_MSEC);
  return (void *)(intptr_t)write(fd, "L", 1);
}

static void *oom_deadline_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, late_writer, &p[1]), 0); /* runs once main waits */
  char c;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  ssize_t r = weft_read_dl(p[0], &c, 1, weft_now() + 20 * WEFT_MSEC);
  long unfired = atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(unfired, 0); /* the timer's allocation was the one refused */
  CO_CHECK(r == -ENOMEM || r == -ETIMEDOUT);
  if (r != -ENOMEM && r != -ETIMEDOUT)
    CO_EQ(r, -ETIMEDOUT);
  CO_EQ(rt_join_int(t), 1);
  io_close_pipe(p);
  return NULL;
}

Test(op, read_deadline_without_memory_for_its_timer, .timeout = 30)
{
  rt_run(1, oom_deadline_main, NULL);
  rt_assert_clean();
}
