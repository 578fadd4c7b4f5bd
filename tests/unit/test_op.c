/* SPDX-License-Identifier: MIT */
/*
 * Suite "op": the op primitive behind every I/O call (SQE -> suspend ->
 * CQE), seen through weft_read / weft_write / weft_nop: deadlines (the op is
 * really cancelled: the pipe stays usable and nothing is lost), bad
 * descriptors, weft_cancel from another shard and from a plain thread,
 * cancellation racing the completion thousands of times (no byte ever
 * lost), a tiny ring under CQ pressure (no completion lost), shutdown with
 * ten thousand blocked coroutines, and the plain-thread fallback.
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

/* ---- cancellation ------------------------------------------------------------------- */

struct reader {
  int fd;
  atomic_int started;
  int second;     /* result of a read after the cancelled one */
  char c;
};

/* Blocks in a read; once cancelled, reads again (which must fail at once). */
static void *blocked_reader(void *arg)
{
  struct reader *r = arg;
  atomic_store(&r->started, 1);
  ssize_t n = weft_read(r->fd, &r->c, 1);
  if (n == -ECANCELED)
    r->second = (int)weft_read(r->fd, &r->c, 1);
  return (void *)(intptr_t)n;
}

static void check_cancelled_reader(weft_task *t, struct reader *r, int wfd)
{
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  CO_EQ(r->second, -ECANCELED);
  /* Neither read took anything: data written now stays in the pipe. */
  CO_EQ(write(wfd, "q", 1), 1);
  CO_EQ(io_pending(r->fd), 1);
  char c = 0;
  CO_EQ(weft_read(r->fd, &c, 1), 1);
  CO_EQ(c, 'q');
}

static void *cancel_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  /* Main is on shard 0: a reader on shard 1 (cross-shard cancel), one on
   * shard 0 (the canceller's own shard), one cancelled by a sibling on 1. */
  for (int s = 0; s < 2; s++) {
    struct reader r = {.fd = p[0], .second = 1};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, s, blocked_reader, &r), 0);
    CO_CHECK(RT_POLL(atomic_load(&r.started)));
    CO_CHECK(io_wait_suspended(1));
    weft_stats s0 = io_stats();
    CO_EQ(weft_cancel(t), 0);
    check_cancelled_reader(t, &r, p[1]);
    weft_stats s1 = io_stats();
    CO_EQ(s1.ops_cancelled - s0.ops_cancelled, 1);
  }
  io_close_pipe(p);
  return NULL;
}

Test(op, cancel_blocked_read_from_shards, .timeout = 30)
{
  rt_run(2, cancel_main, NULL);
  rt_assert_clean();
}

Test(op, cancel_blocked_read_from_plain_thread, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  for (int s = 0; s < 2; s++) {
    struct reader r = {.fd = p[0], .second = 1};
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_PINNED;
    o.shard = s;
    weft_task *t;
    cr_assert_eq(weft_runtime_submit(rt, &o, blocked_reader, &r, &t), 0);
    cr_assert(io_wait_suspended_rt(rt, 1));
    cr_assert_eq(weft_cancel(t), 0);
    check_cancelled_reader(t, &r, p[1]);
    rt_assert_clean();
  }
  io_close_pipe(p);
  rt_stop_idle(rt);
}

/* A task cancelled while running (not waiting): its next I/O fails at once,
 * even with data ready, and takes none of it. */
static void *self_cancelled(void *arg)
{
  int fd = *(int *)arg;
  weft_cancel(weft_task_self());
  char c;
  CO_EQ(weft_read(fd, &c, 1), -ECANCELED);
  CO_EQ(weft_write(fd, &c, 1), -ECANCELED);
  CO_EQ(weft_read_dl(fd, &c, 1, weft_now() + WEFT_SEC), -ECANCELED);
  CO_EQ(weft_nop(), -ECANCELED);
  return NULL;
}

static void *cancelled_later_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(write(p[1], "z", 1), 1);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, self_cancelled, &p[0]), 0);
  CO_EQ(weft_join(t, NULL), -ECANCELED);
  CO_EQ(io_pending(p[0]), 1);
  io_close_pipe(p);
  return NULL;
}

Test(op, cancelled_task_io_fails_at_once, .timeout = 30)
{
  rt_run(2, cancelled_later_main, NULL);
  rt_assert_clean();
}

/* Cancelled in the same loop pass in which the read was prepared: its SQE
 * has not even been submitted yet when the cancel is queued behind it. */
static void *same_pass_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  for (int i = 0; i < 50; i++) {
    struct reader r = {.fd = p[0], .second = 1};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 0, blocked_reader, &r), 0);
    weft_yield(); /* the reader runs, prepares its SQE and suspends */
    CO_CHECK(atomic_load(&r.started));
    CO_EQ(weft_cancel(t), 0);
    check_cancelled_reader(t, &r, p[1]);
  }
  io_close_pipe(p);
  return NULL;
}

Test(op, cancel_before_the_sqe_is_submitted, .timeout = 30)
{
  rt_run(1, same_pass_main, NULL);
  rt_assert_clean();
}

/* weft_cancel racing the op's own deadline: either result, never a hang,
 * and the pipe is never robbed. */
static void *dl_cancel_reader(void *arg)
{
  int fd = *(int *)arg;
  char c;
  return (void *)(intptr_t)weft_read_dl(fd, &c, 1, weft_now() + 40 * WEFT_USEC);
}

static void *dl_cancel_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  int n[2] = {0};
  for (int i = 0; i < 1000; i++) {
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 1, dl_cancel_reader, &p[0]), 0);
    if (i % 2)
      weft_yield();
    for (volatile int k = 0; k < (i % 61) * 100; k++)
      ;
    int c = weft_cancel(t);
    CO_CHECK(c == 0 || c == -ESRCH);
    void *v = NULL;
    int j = weft_join(t, &v);
    intptr_t r = (intptr_t)v;
    if (c == -ESRCH) {
      CO_EQ(j, 0);
      CO_EQ(r, -ETIMEDOUT);
    } else {
      CO_EQ(j, -ECANCELED);
      CO_CHECK(r == -ECANCELED || r == -ETIMEDOUT || r == 0); /* 0: never ran */
    }
    n[r == -ETIMEDOUT]++;
  }
  cr_log_info("%d ended by the cancel, %d by the deadline", n[0], n[1]);
  CO_EQ(io_pending(p[0]), 0);
  CO_EQ(write(p[1], "w", 1), 1);
  char c;
  CO_EQ(weft_read(p[0], &c, 1), 1);
  io_close_pipe(p);
  return NULL;
}

Test(op, cancel_racing_the_deadline, .timeout = 60)
{
  rt_run(2, dl_cancel_main, NULL);
  rt_assert_clean();
}

/* ---- cancel racing completion ----------------------------------------------------------- */

#define RACE_ROUNDS 2000

struct race {
  int p[2];
  atomic_int started;
  int got[3]; /* outcomes: data, cancelled in the read, never started */
};

static void *race_reader(void *arg)
{
  struct race *rc = arg;
  atomic_store(&rc->started, 1);
  char c = 0;
  ssize_t n = weft_read(rc->p[0], &c, 1);
  if (n == 1 && c != '!')
    return (void *)(intptr_t)-1000;
  return (void *)(intptr_t)n;
}

/* One round of "write a byte, cancel the reader, join": returns 0 if the
 * byte was either read by the reader or is still in the pipe. */
static int race_settle(struct race *rc, weft_task *t)
{
  void *v = (void *)(intptr_t)-2000;
  int j = weft_join(t, &v);
  intptr_t n = (intptr_t)v;
  int pending = io_pending(rc->p[0]);
  if (n == 1) {
    rc->got[0]++;
    return pending == 0 ? 0 : -1; /* read once, not twice */
  }
  if (j != -ECANCELED || (n != -ECANCELED && n != 0) || (n == 0 && atomic_load(&rc->started)))
    return -2;
  rc->got[n == 0 ? 2 : 1]++;
  char c = 0;
  if (pending != 1 || read(rc->p[0], &c, 1) != 1 || c != '!')
    return -3; /* the cancelled read lost the byte */
  return 0;
}

/* Varies the gap between the reader's start and the write/cancel, so that
 * every phase (not started, before its SQE, in flight, completing) is hit:
 * half of the rounds first wait (yielding, bounded) until the reader runs.
 * (A coroutine must switch out for its shard to send the wake-up of the
 * reader's sleeping shard; on a plain thread weft_yield is sched_yield.) */
static void race_gap(struct race *rc, int i)
{
  if (i % 2)
    for (int k = 0; k < 100000 && !atomic_load(&rc->started); k++)
      weft_yield();
  switch (i % 8 / 2) {
  case 0: break;
  case 1: weft_yield(); break;
  case 2:
    for (volatile int k = 0; k < (i % 97) * 40; k++)
      ;
    break;
  case 3:
    for (volatile int k = 0; k < (i % 13) * 400; k++)
      ;
    break;
  }
}

/* Writes the byte and cancels the reader; one round in four cancels first,
 * so that the cancel is more often in flight when the data arrives (half of
 * those let the cancel's wake-up go out first: a coroutine's shard sends it
 * when the coroutine switches out). */
static int race_fire(struct race *rc, weft_task *t, int i)
{
  int c = 0;
  if (i % 4 == 3) {
    c = weft_cancel(t);
    if (i % 8 == 3)
      weft_yield();
  }
  if (write(rc->p[1], "!", 1) != 1)
    return -EIO;
  if (i % 4 != 3)
    c = weft_cancel(t);
  return c;
}

static void *race_main(void *arg)
{
  struct race *rc = arg;
  CO_EQ(io_pipe(rc->p), 0);
  for (int i = 0; i < RACE_ROUNDS; i++) {
    atomic_store(&rc->started, 0);
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 1, race_reader, rc), 0);
    race_gap(rc, i);
    int c = race_fire(rc, t, i);
    CO_CHECK(c == 0 || c == -ESRCH);
    int r = race_settle(rc, t);
    if (r != 0) {
      CO_EQ(r, 0);
      break;
    }
  }
  io_close_pipe(rc->p);
  return NULL;
}

Test(op, cancel_racing_completion_loses_no_byte, .timeout = 120)
{
  struct race rc = {0};
  rt_run(2, race_main, &rc);
  rt_assert_clean();
  cr_log_info("outcomes: %d read, %d cancelled in the read, %d never started", rc.got[0],
              rc.got[1], rc.got[2]);
  cr_assert_eq(rc.got[0] + rc.got[1] + rc.got[2], RACE_ROUNDS);
}

Test(op, cancel_from_plain_thread_racing_completion, .timeout = 120)
{
  weft_runtime *rt = rt_start(2);
  struct race rc = {0};
  cr_assert_eq(io_pipe(rc.p), 0);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  for (int i = 0; i < RACE_ROUNDS; i++) {
    o.shard = i % 2;
    atomic_store(&rc.started, 0);
    weft_task *t;
    cr_assert_eq(weft_runtime_submit(rt, &o, race_reader, &rc, &t), 0);
    race_gap(&rc, i);
    int c = race_fire(&rc, t, i);
    cr_assert(c == 0 || c == -ESRCH);
    int r = race_settle(&rc, t);
    cr_assert_eq(r, 0, "round %d: outcome %d", i, r);
  }
  cr_log_info("outcomes: %d read, %d cancelled in the read, %d never started", rc.got[0],
              rc.got[1], rc.got[2]);
  io_close_pipe(rc.p);
  rt_assert_clean();
  rt_stop_idle(rt);
}

/* The deadline racing the completion: the same guarantee. */
static void *dl_race_reader(void *arg)
{
  struct race *rc = arg;
  char c = 0;
  return (void *)(intptr_t)weft_read_dl(rc->p[0], &c, 1, weft_now() + 30 * WEFT_USEC);
}

static void *dl_race_main(void *arg)
{
  struct race *rc = arg;
  CO_EQ(io_pipe(rc->p), 0);
  int timeouts = 0, reads = 0;
  for (int i = 0; i < 500; i++) {
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 1, dl_race_reader, rc), 0);
    for (volatile int k = 0; k < (i % 50) * 200; k++)
      ;
    CO_EQ(write(rc->p[1], "!", 1), 1);
    void *v = NULL;
    CO_EQ(weft_join(t, &v), 0);
    if ((intptr_t)v == 1) {
      reads++;
      CO_EQ(io_pending(rc->p[0]), 0);
    } else {
      CO_EQ((intptr_t)v, -ETIMEDOUT);
      timeouts++;
      char c;
      CO_EQ(read(rc->p[0], &c, 1), 1);
    }
  }
  cr_log_info("%d reads, %d timeouts", reads, timeouts);
  io_close_pipe(rc->p);
  return NULL;
}

Test(op, deadline_racing_completion_loses_no_byte, .timeout = 60)
{
  struct race rc = {0};
  rt_run(2, dl_race_main, &rc);
  rt_assert_clean();
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

/* A write that blocks in the kernel (full pipe) is cancellable too, and
 * writes nothing. */
static void *full_writer(void *arg)
{
  int fd = *(int *)arg;
  static char more[4096];
  return (void *)(intptr_t)weft_write(fd, more, sizeof(more));
}

static void *write_cancel_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  int cap = fcntl(p[1], F_GETPIPE_SZ);
  CO_CHECK(cap > 0);
  char *fill = calloc(1, (size_t)cap);
  CO_EQ(weft_write(p[1], fill, (size_t)cap), cap); /* the pipe is full now */
  free(fill);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, full_writer, &p[1]), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  CO_EQ(io_pending(p[0]), cap);
  io_close_pipe(p);
  return NULL;
}

Test(op, cancel_write_blocked_on_full_pipe, .timeout = 30)
{
  signal(SIGPIPE, SIG_IGN);
  rt_run(2, write_cancel_main, NULL);
  rt_assert_clean();
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
