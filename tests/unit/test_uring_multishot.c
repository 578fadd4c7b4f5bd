/* SPDX-License-Identifier: MIT */
/*
 * Suite "uring", multishot ops (weft_uring_multishot_*): poll and timeout
 * ops with their per-CQE delivery, deadlines, cancellation of a task
 * waiting in next(), waiters at shutdown, end() in an expired deadline
 * scope, the rule that a coroutine with an active multishot op stays on
 * its shard, and cancel-then-drain: next() hands out every result (end()
 * alone drops the queued ones), in a cancelled task as well, and only the
 * coroutine that began an op may use it. A single op that posts two CQEs
 * (a zero-copy send) is here too: like a multishot op it is over only
 * after its last CQE. Single ops and chains are in test_uring.c.
 */
#include "rt_internal.h"
#include "uring_test.h"

#include "fault.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

/* Kernel 6.4; liburing 2.3's headers predate it. */
#ifndef IORING_TIMEOUT_MULTISHOT
#define IORING_TIMEOUT_MULTISHOT (1U << 6)
#endif

/* ---- multishot ------------------------------------------------------------------- */

static void *poll_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, p[0]), 0);
  char c;
  for (int i = 0; i < 5; i++) {
    CO_EQ(write(p[1], "m", 1), 1);
    int res = 0;
    unsigned flags = 0;
    CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 1);
    CO_CHECK(res & POLLIN);
    CO_CHECK(flags & IORING_CQE_F_MORE);
    CO_EQ(weft_read(p[0], &c, 1), 1);
  }
  /* Nothing ready: a short deadline times out and the op stays active. */
  int64_t t0 = weft_now();
  CO_EQ(weft_uring_multishot_next(ms, NULL, NULL, t0 + 10 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 10 * WEFT_MSEC);
  CO_EQ(weft_uring_multishot_next(ms, NULL, NULL, t0), -ETIMEDOUT);
  CO_EQ(write(p[1], "m", 1), 1);
  int res = 0;
  CO_EQ(weft_uring_multishot_next(ms, &res, NULL, weft_now() + 5 * WEFT_SEC), 1);
  CO_CHECK(res & POLLIN);
  CO_EQ(weft_read(p[0], &c, 1), 1);
  /* CQEs that come while the coroutine is elsewhere (asleep, the shard
   * reaping them) are queued for it: one per write, each write read before
   * the next (so no two wake-ups merge). */
  for (int i = 0; i < 3; i++) {
    CO_EQ(write(p[1], "m", 1), 1);
    weft_sleep(2 * WEFT_MSEC);
    CO_EQ(weft_read(p[0], &c, 1), 1);
  }
  int got = 0;
  while (weft_uring_multishot_next(ms, &res, NULL, weft_now() + 20 * WEFT_MSEC) == 1)
    got++;
  CO_EQ(got, 3);
  weft_stats s0 = io_stats();
  CO_EQ(weft_uring_multishot_end(ms), 0);
  weft_stats s1 = io_stats();
  CO_EQ(s1.ops_completed - s0.ops_completed, 1);
  CO_EQ(s1.ops_submitted, s1.ops_completed); /* nothing left in flight */
  io_close_pipe(p);
  return NULL;
}

Test(uring, multishot_poll_delivers_each_cqe, .timeout = 30)
{
  rt_run(1, poll_main, NULL);
  rt_assert_clean();
}

static atomic_int no_multishot_timeout;

static void *timeout_ms_main(void *arg)
{
  (void)arg;
  /* Unlimited ticks every 2 ms: take 4, then end it. */
  struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 2 * WEFT_MSEC};
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_timeout(sqe, &ts, 0, IORING_TIMEOUT_MULTISHOT);
  weft_uring_multishot *ms;
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);
  int res = 0;
  unsigned flags = 0;
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 1);
  if (res == -EINVAL) { /* kernel < 6.4 */
    atomic_store(&no_multishot_timeout, 1);
    CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 0);
    CO_EQ(weft_uring_multishot_end(ms), 0);
    return NULL;
  }
  CO_EQ(res, -ETIME);
  CO_CHECK(flags & IORING_CQE_F_MORE);
  for (int i = 0; i < 3; i++) {
    CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 1);
    CO_EQ(res, -ETIME);
    CO_CHECK(flags & IORING_CQE_F_MORE);
  }
  CO_EQ(weft_uring_multishot_end(ms), 0);

  /* Three ticks: the last one ends the op, then next() says so. */
  sqe = weft_uring_sqe();
  io_uring_prep_timeout(sqe, &ts, 3, IORING_TIMEOUT_MULTISHOT);
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);
  for (int i = 0; i < 3; i++) {
    CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 1);
    CO_EQ(res, -ETIME);
    CO_EQ(!!(flags & IORING_CQE_F_MORE), i < 2);
  }
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, WEFT_NO_DEADLINE), 0);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  return NULL;
}

Test(uring, multishot_timeout_ticks, .timeout = 30)
{
  rt_run(1, timeout_ms_main, NULL);
  if (atomic_load(&no_multishot_timeout))
    cr_skip_test("multishot timeouts need kernel 6.4");
  rt_assert_clean();
}

/* A task blocked in next() is cancellable: the op is cancelled with it, its
 * last CQE (the cancellation's) is handed out, then next() says
 * -ECANCELED for its end, and keeps saying it; end() frees it. */
static void *ms_waiter(void *arg)
{
  int fd = *(int *)arg;
  weft_uring_multishot *ms;
  int r = poll_begin(&ms, fd);
  if (r < 0)
    return (void *)(intptr_t)r;
  int res = 0;
  unsigned flags = IORING_CQE_F_MORE;
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, WEFT_NO_DEADLINE), 1);
  CO_EQ(res, -ECANCELED);
  CO_CHECK(!(flags & IORING_CQE_F_MORE));
  r = weft_uring_multishot_next(ms, NULL, NULL, WEFT_NO_DEADLINE);
  CO_EQ(r, -ECANCELED);
  CO_EQ(weft_uring_multishot_next(ms, NULL, NULL, WEFT_NO_DEADLINE), -ECANCELED);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  return (void *)(intptr_t)r;
}

static void *ms_cancel_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  for (int s = 0; s < 2; s++) {
    weft_task *t;
    CO_EQ(io_spawn_on(&t, s, ms_waiter, &p[0]), 0);
    CO_CHECK(io_wait_suspended(1));
    CO_EQ(weft_cancel(t), 0);
    void *v = NULL;
    CO_EQ(weft_join(t, &v), -ECANCELED);
    CO_EQ((intptr_t)v, -ECANCELED);
  }
  weft_stats s = io_stats();
  CO_EQ(s.ops_submitted, s.ops_completed);
  /* Each ended cancelled by weft_cancel (stats.h), as one-shot ops do. */
  CO_EQ(s.ops_cancelled, 2);
  io_close_pipe(p);
  return NULL;
}

Test(uring, multishot_next_is_cancellable, .timeout = 30)
{
  rt_run(2, ms_cancel_main, NULL);
  rt_assert_clean();
}

/* Shutdown with a task blocked in next(): the stop cancels it and it ends
 * its op as documented. */
static void *ms_shutdown_main(void *arg)
{
  int *fd = arg;
  for (int s = 0; s < 2; s++)
    CO_EQ(io_spawn_on(NULL, s, ms_waiter, fd), 0);
  CO_CHECK(io_wait_suspended(2));
  return NULL;
}

Test(uring, multishot_waiters_at_shutdown, .timeout = 30)
{
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  rt_run(2, ms_shutdown_main, &p[0]);
  rt_assert_clean();
  io_close_pipe(p);
}

/* end() must wait for the op's last CQE whatever the caller's deadline
 * scope says: ms (which the kernel still points at) is freed afterwards. */
static void *ms_end_scope_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, p[0]), 0);
  CO_EQ(weft_nop(), 0); /* the poll is in the kernel now */
  int64_t saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  weft_deadline_pop(saved);
  weft_stats s = io_stats();
  CO_EQ(s.ops_submitted, s.ops_completed);
  io_close_pipe(p);
  return NULL;
}

Test(uring, multishot_end_in_an_expired_scope, .timeout = 10)
{
  rt_run(1, ms_end_scope_main, NULL);
  rt_assert_clean();
}

/* begin() in a deadline scope reserves nothing in the shard's timer heap:
 * the op outlives the scope and has no deadline (a next() bounded by the
 * scope arms a timer of its own), so the begin cannot fail for want of a
 * slot it never uses. Nothing is timed on this shard yet, so a slot would
 * grow the heap - the second allocation, after ms itself. */
static void *ms_begin_scope_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft__timer_heap *h = &weft__task_self()->shard->timers;
  CO_EQ(h->n, h->cap);
  int64_t saved = weft_deadline_push(weft_now() + 60 * WEFT_SEC);
  weft_uring_multishot *ms;
  weft__fault_arm(WEFT__FAULT_MALLOC, 2);
  CO_EQ(poll_begin(&ms, p[0]), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 1); /* ms only */
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(h->n, h->cap);
  weft_deadline_pop(saved);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, multishot_begin_in_a_scope_takes_no_timer_slot, .timeout = 10)
{
  rt_run(1, ms_begin_scope_main, NULL);
  rt_assert_clean();
}

/* ---- multishot ops pin their coroutine ------------------------------------------------------ */

#define YIELDS 100

struct stay {
  int p[2];
  atomic_int moved;         /* the multishot task changed shard while active */
  atomic_int control_moves; /* the same loop without the op: its moves */
  atomic_int started;       /* of the two, running on shard 0 */
  atomic_bool go;           /* the burner and the ticker run */
  atomic_bool stop_burning;
  int64_t give_up;
};

/* Pinned to shard 0, it runs a millisecond at a time: whatever queues up
 * behind it there is stuck, and an idle shard 1 takes it (the stuck rule).
 * A task that yields on shard 0 is taken so - unless it may not move. */
static void *burner(void *arg)
{
  struct stay *st = arg;
  while (!atomic_load(&st->stop_burning)) {
    int64_t until = weft_now() + WEFT_MSEC;
    while (weft_now() < until)
      ;
    weft_yield();
  }
  return NULL;
}

/* Pinned to shard 1: wakes it every 300 us, so that it runs stealing
 * rounds (an idle shard is not woken for a short queue). */
static void *ticker(void *arg)
{
  struct stay *st = arg;
  while (!atomic_load(&st->stop_burning))
    CO_EQ(weft_sleep(300 * WEFT_USEC), 0);
  return NULL;
}

/* The multishot task and its control (the same loop without the op) go on
 * for YIELDS yields, and on until the control has moved (5 s at most): the
 * multishot task was then as exposed to stealing as a task that moved. */
static bool control_done(struct stay *st)
{
  return atomic_load(&st->control_moves) >= 1 || weft_now() >= st->give_up;
}

/* Both start on shard 0 (shard 1 sleeps then, and no short queue wakes
 * it), then wait there for the burner: from then on they are as exposed. */
static void start_on_shard_0(struct stay *st)
{
  CO_EQ(weft_shard_id(), 0);
  atomic_fetch_add(&st->started, 1);
  while (!atomic_load(&st->go))
    weft_yield();
}

static void *control_yielder(void *arg)
{
  struct stay *st = arg;
  start_on_shard_0(st);
  int at = 0;
  for (int i = 0; i < YIELDS || !control_done(st); i++) {
    weft_yield();
    if (weft_shard_id() != at) {
      at = weft_shard_id();
      atomic_fetch_add(&st->control_moves, 1);
    }
  }
  return NULL;
}

static void *ms_stayer(void *arg)
{
  struct stay *st = arg;
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, st->p[0]), 0);
  start_on_shard_0(st);
  int home = weft_shard_id();
  for (int i = 0; i < YIELDS || !control_done(st); i++) {
    weft_yield();
    if (weft_shard_id() != home)
      atomic_fetch_add(&st->moved, 1);
    if (i % 20 == 0) { /* and its CQEs keep coming to it */
      char c;
      CO_EQ(write(st->p[1], "s", 1), 1);
      CO_EQ(weft_uring_multishot_next(ms, NULL, NULL, weft_now() + 5 * WEFT_SEC), 1);
      CO_EQ(weft_read(st->p[0], &c, 1), 1);
      if (weft_shard_id() != home)
        atomic_fetch_add(&st->moved, 1);
    }
  }
  CO_EQ(weft_uring_multishot_end(ms), 0);
  return NULL;
}

static void *stay_main(void *arg)
{
  struct stay *st = arg;
  CO_EQ(io_pipe(st->p), 0);
  st->give_up = weft_now() + 5 * WEFT_SEC;
  CO_CHECK(rt_wait_parked(weft_runtime_current(), 1));
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_STEALABLE_PREFERRED;
  o.shard = 0;
  weft_task *ms, *control;
  CO_EQ(weft_spawn(&ms, &o, ms_stayer, st), 0);
  CO_EQ(weft_spawn(&control, &o, control_yielder, st), 0);
  CO_CHECK(RT_POLL(atomic_load(&st->started) == 2));
  weft_task *b, *tick;
  CO_EQ(io_spawn_on(&b, 0, burner, st), 0);
  CO_EQ(io_spawn_on(&tick, 1, ticker, st), 0);
  atomic_store(&st->go, true);
  CO_EQ(weft_join(ms, NULL), 0);
  CO_EQ(weft_join(control, NULL), 0);
  atomic_store(&st->stop_burning, true);
  CO_EQ(weft_join(b, NULL), 0);
  CO_EQ(weft_join(tick, NULL), 0);
  /* A task like it was stolen (else the test shows nothing)... */
  CO_CHECK(atomic_load(&st->control_moves) >= 1);
  /* ...but never the task with the active op. */
  CO_EQ(atomic_load(&st->moved), 0);
  io_close_pipe(st->p);
  return NULL;
}

Test(uring, multishot_task_stays_on_its_shard, .timeout = 60)
{
  struct stay st = {0};
  rt_run(2, stay_main, &st);
  rt_assert_clean();
}

/* ---- cancel, then drain ------------------------------------------------------------ */

static void *end_from_elsewhere(void *arg)
{
  return (void *)(intptr_t)weft_uring_multishot_end(arg);
}

/* A multishot accept through the extension API: cancel, then drain with
 * next(), hands out every accepted descriptor (end() alone would drop the
 * queued ones); another task may not touch the op. */
static void *accept_drain_main(void *arg)
{
  bool cancel_the_task = arg != NULL;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CO_CHECK(lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  CO_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  CO_EQ(listen(lfd, 16), 0);
  CO_EQ(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);

  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
  weft_uring_multishot *ms;
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);

  weft_task *other;
  CO_EQ(rt_spawn(&other, WEFT_PLACE_PINNED, -1, end_from_elsewhere, ms), 0);
  CO_EQ(rt_join_int(other), -EPERM);

  enum { CLIENTS = 4 };
  int cl[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    cl[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CO_EQ(connect(cl[i], (struct sockaddr *)&a, sizeof(a)), 0);
  }
  /* Let the accepts complete while nobody calls next(): they queue. */
  int res = -1, accepted = 0;
  CO_EQ(weft_uring_multishot_next(ms, &res, NULL, weft_now() + 5 * WEFT_SEC), 1);
  CO_CHECK(res >= 0);
  close(res);
  accepted++;
  CO_EQ(weft_sleep(20 * WEFT_MSEC), 0);
  if (cancel_the_task)
    CO_EQ(weft_cancel(weft_task_self()), 0); /* the op is cancelled with it */
  else
    CO_EQ(weft_uring_multishot_cancel(ms), 0);
  int r;
  bool saw_last = false;
  while ((r = weft_uring_multishot_next(ms, &res, NULL, weft_now() + 5 * WEFT_SEC)) == 1) {
    if (res >= 0) {
      close(res);
      accepted++;
    } else {
      CO_EQ(res, -ECANCELED); /* the last CQE */
      saw_last = true;
    }
  }
  CO_EQ(r, cancel_the_task ? -ECANCELED : 0);
  CO_CHECK(saw_last); /* the op's end came through next(), not before it */
  CO_EQ(accepted, CLIENTS);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  for (int i = 0; i < CLIENTS; i++)
    close(cl[i]);
  close(lfd);
  return NULL;
}

Test(uring, multishot_cancel_then_drain_keeps_every_result, .timeout = 30)
{
  rt_run(1, accept_drain_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
  cr_assert_eq(weft_uring_multishot_cancel(NULL), -EINVAL);
}

/* The same drain in a task that is cancelled: next() hands out every
 * descriptor still coming, then -ECANCELED for the op's end (it returned
 * -ECANCELED at once before, forever, without waiting: a caller that kept
 * calling spun, and one that stopped leaked the rest). */
Test(uring, multishot_drain_in_a_cancelled_task_keeps_every_result, .timeout = 30)
{
  rt_run(1, accept_drain_main, (void *)1);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- one op, two CQEs ---------------------------------------------------------------- */

/* A zero-copy send posts two CQEs: its result (with F_MORE), then a
 * notification once the kernel lets go of the buffer. weft_uring_wait
 * returns after both, with the result - not the notification's 0. */
static void *send_zc_main(void *arg)
{
  (void)arg;
  int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  CO_EQ(bind(rx, (struct sockaddr *)&a, sizeof(a)), 0);
  CO_EQ(getsockname(rx, (struct sockaddr *)&a, &alen), 0);
  CO_EQ(connect(tx, (struct sockaddr *)&a, sizeof(a)), 0);
  static char buf[16] = "hello";
  void *unsupported = NULL;
  for (int i = 0; i < 20; i++) {
    struct io_uring_sqe *sqe = weft_uring_sqe();
    CO_CHECK(sqe != NULL);
    io_uring_prep_send_zc(sqe, tx, buf, 5, 0, 0);
    unsigned flags = 0;
    int r = weft_uring_wait(&sqe, 1, &flags, weft_now() + 5 * WEFT_SEC);
    if (i == 0 && (r == -EINVAL || r == -EOPNOTSUPP)) {
      unsupported = (void *)1; /* no zero-copy send on this kernel */
      break;
    }
    CO_EQ(r, 5);
    CO_CHECK(!(flags & IORING_CQE_F_NOTIF));
    CO_CHECK(flags & IORING_CQE_F_MORE); /* the result's CQE, as uring.h says */
    char in[16];
    CO_EQ(recv(rx, in, sizeof(in), MSG_DONTWAIT), 5);
  }
  close(rx);
  close(tx);
  return unsupported;
}

Test(uring, zero_copy_send_waits_for_its_notification, .timeout = 30)
{
  void *unsupported = rt_run(1, send_zc_main, NULL);
  rt_assert_clean();
  if (unsupported)
    cr_skip_test("this kernel has no zero-copy send");
}
