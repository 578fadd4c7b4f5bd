/* SPDX-License-Identifier: MIT */
/*
 * Suite "op", cancellation: weft_cancel of a read blocked on another shard,
 * on the canceller's own shard and from a plain thread, of a running task
 * (its next I/O fails at once), before the SQE is even submitted, racing
 * the op's own deadline, racing the completion thousands of times (no byte
 * ever lost; the deadline racing the completion too), and of a write
 * blocked on a full pipe (nothing written). The rest of suite "op" is in
 * test_op.c.
 */
#include "io_helpers.h"

#include <signal.h>

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
