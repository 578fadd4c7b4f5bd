/* SPDX-License-Identifier: MIT */
/*
 * Suite "uring": the extension API (weft/uring.h). Single ops and linked
 * chains (the chain's result, a failing head cancelling the rest, a chain
 * on a ring too small to hold it next to other tasks' SQEs), deadlines and
 * cancellation of ops weft does not know, and calls that refuse their
 * arguments leaving nothing prepared to run. Multishot ops are in
 * test_uring_multishot.c.
 */
#include "uring_test.h"

#include "fault.h"

/* ---- single ops ------------------------------------------------------------------ */

static void *nop_main(void *arg)
{
  (void)arg;
  weft_stats s0 = io_stats();
  for (int i = 0; i < 3; i++) {
    struct io_uring_sqe *sqe = weft_uring_sqe();
    CO_CHECK(sqe != NULL);
    if (!sqe)
      return NULL;
    io_uring_prep_nop(sqe);
    unsigned flags = 12345;
    CO_EQ(weft_uring_wait(&sqe, 1, &flags, WEFT_NO_DEADLINE), 0);
    CO_EQ(flags, 0);
  }
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_nop(sqe);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, weft_now() + WEFT_SEC), 0);
  weft_stats s1 = io_stats();
  CO_EQ(s1.ops_submitted - s0.ops_submitted, 4);
  CO_EQ(s1.ops_completed - s0.ops_completed, 4);
  /* Bad arguments leave nothing behind: no op, and the SQEs handed out are
   * given up (a later call cannot take them). */
  CO_EQ(weft_uring_wait(NULL, 1, NULL, WEFT_NO_DEADLINE), -EINVAL);
  sqe = weft_uring_sqe();
  io_uring_prep_nop(sqe);
  CO_EQ(weft_uring_wait(&sqe, 0, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), -EINVAL);
  sqe = weft_uring_sqe();
  io_uring_prep_nop(sqe);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), 0);
  weft_stats s2 = io_stats();
  CO_EQ(s2.ops_submitted - s1.ops_submitted, 1);
  return NULL;
}

Test(uring, nop_through_the_extension_api, .timeout = 30)
{
  rt_run(2, nop_main, NULL);
  rt_assert_clean();
}

/* A call that refuses its arguments must not leave what the caller
 * prepared to run later: here a read into a buffer of this frame, which
 * the kernel would fill after the call returned -EINVAL - for every way of
 * getting the arguments wrong. */
enum bad_call { BAD_COUNT_0, BAD_NULL_ARRAY, BAD_NULL_ELEMENT, BAD_TOO_FEW, BAD_TWICE,
                BAD_FOREIGN, BAD_MULTISHOT_OUT, BAD_MULTISHOT_FOREIGN, BAD_COUNT };

static void *stray_main(void *arg)
{
  (void)arg;
  for (int how = 0; how < BAD_COUNT; how++) {
    int p[2];
    CO_EQ(io_pipe(p), 0);
    char buf[4] = "----";
    struct io_uring_sqe *sqe[2] = {weft_uring_sqe(), NULL};
    CO_CHECK(sqe[0] != NULL);
    if (!sqe[0])
      return NULL;
    io_uring_prep_read(sqe[0], p[0], buf, sizeof(buf), 0);
    struct io_uring_sqe foreign;
    weft_uring_multishot *const untouched = (weft_uring_multishot *)(void *)&foreign;
    weft_uring_multishot *ms = untouched; /* not NULL: a write of NULL shows */
    int r;
    switch (how) {
    case BAD_COUNT_0:
      r = weft_uring_wait(sqe, 0, NULL, WEFT_NO_DEADLINE);
      break;
    case BAD_NULL_ARRAY:
      r = weft_uring_wait(NULL, 1, NULL, WEFT_NO_DEADLINE);
      break;
    case BAD_NULL_ELEMENT:
      r = weft_uring_wait(sqe, 2, NULL, WEFT_NO_DEADLINE);
      break;
    case BAD_TOO_FEW: /* two handed out, one passed */
      sqe[1] = weft_uring_sqe();
      io_uring_prep_nop(sqe[1]);
      r = weft_uring_wait(sqe, 1, NULL, WEFT_NO_DEADLINE);
      break;
    case BAD_TWICE: /* two handed out, the first passed twice */
      sqe[1] = weft_uring_sqe();
      io_uring_prep_nop(sqe[1]);
      sqe[1] = sqe[0];
      r = weft_uring_wait(sqe, 2, NULL, WEFT_NO_DEADLINE);
      break;
    case BAD_FOREIGN: /* an SQE weft did not hand out */
      memset(&foreign, 0, sizeof(foreign));
      io_uring_prep_nop(&foreign);
      sqe[1] = &foreign;
      r = weft_uring_wait(&sqe[1], 1, NULL, WEFT_NO_DEADLINE);
      break;
    case BAD_MULTISHOT_OUT:
      r = weft_uring_multishot_begin(NULL, sqe[0]);
      break;
    default: /* BAD_MULTISHOT_FOREIGN: *ms must stay as it was */
      memset(&foreign, 0, sizeof(foreign));
      io_uring_prep_nop(&foreign);
      r = weft_uring_multishot_begin(&ms, &foreign);
      break;
    }
    CO_EQ(r, -EINVAL);
    CO_CHECK(ms == untouched);
    /* Submit whatever is queued, then give the read its data. */
    CO_EQ(weft_nop(), 0);
    CO_EQ(write(p[1], "data", 4), 4);
    CO_EQ(weft_nop(), 0);
    weft_sleep(WEFT_MSEC);
    CO_CHECK(memcmp(buf, "----", 4) == 0);
    char got[4];
    CO_EQ(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    CO_EQ(read(p[0], got, sizeof(got)), 4); /* the data nobody read */
    io_close_pipe(p);
  }
  return NULL;
}

Test(uring, refused_arguments_leave_no_op_running, .timeout = 30)
{
  rt_run(1, stray_main, NULL);
  rt_assert_clean();
}


Test(uring, plain_thread_gets_no_sqe, .timeout = 30)
{
  cr_assert_null(weft_uring_sqe());
  struct io_uring_sqe fake, *sqe = &fake;
  memset(&fake, 0, sizeof(fake));
  io_uring_prep_nop(sqe);
  cr_assert_eq(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), -EPERM);
  cr_assert_eq(weft_uring_wait(NULL, 1, NULL, WEFT_NO_DEADLINE), -EINVAL);
  cr_assert_eq(weft_uring_wait(&sqe, 0, NULL, WEFT_NO_DEADLINE), -EINVAL);
  weft_uring_multishot *const untouched = (weft_uring_multishot *)(void *)&fake;
  weft_uring_multishot *ms = untouched; /* not NULL: a write of NULL shows */
  cr_assert_eq(weft_uring_multishot_begin(&ms, sqe), -EPERM);
  cr_assert_eq(ms, untouched);
  /* -EPERM before anything is allocated: not -ENOMEM when memory is short. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  cr_assert_eq(weft_uring_multishot_begin(&ms, sqe), -EPERM);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 1);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  cr_assert_eq(ms, untouched);
  cr_assert_eq(weft_uring_multishot_begin(NULL, sqe), -EINVAL);
  cr_assert_eq(weft_uring_multishot_begin(&ms, NULL), -EINVAL);
  cr_assert_eq(weft_uring_multishot_next(NULL, NULL, NULL, WEFT_NO_DEADLINE), -EINVAL);
  cr_assert_eq(weft_uring_multishot_end(NULL), -EINVAL);
}

/* ---- chains ------------------------------------------------------------------------ */

static void *chain_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  char out[8] = {0};

  /* write -> read -> nop: the last result (the nop's 0). */
  struct io_uring_sqe *s[3];
  for (int i = 0; i < 3; i++)
    s[i] = weft_uring_sqe();
  io_uring_prep_write(s[0], p[1], "hello", 5, (uint64_t)-1);
  io_uring_prep_read(s[1], p[0], out, 5, (uint64_t)-1);
  io_uring_prep_nop(s[2]);
  s[0]->flags |= IOSQE_IO_LINK;
  s[1]->flags |= IOSQE_IO_LINK;
  CO_EQ(weft_uring_wait(s, 3, NULL, WEFT_NO_DEADLINE), 0);
  CO_CHECK(memcmp(out, "hello", 5) == 0);

  /* write -> nop -> read: the read's 3. */
  memset(out, 0, sizeof(out));
  for (int i = 0; i < 3; i++)
    s[i] = weft_uring_sqe();
  io_uring_prep_write(s[0], p[1], "abc", 3, (uint64_t)-1);
  io_uring_prep_nop(s[1]);
  io_uring_prep_read(s[2], p[0], out, sizeof(out), (uint64_t)-1);
  s[0]->flags |= IOSQE_IO_LINK;
  s[1]->flags |= IOSQE_IO_LINK;
  CO_EQ(weft_uring_wait(s, 3, NULL, weft_now() + WEFT_SEC), 3);
  CO_CHECK(memcmp(out, "abc", 3) == 0);
  CO_EQ(io_pending(p[0]), 0);

  /* A failing head: its error, and the rest cancelled (nothing written). */
  for (int i = 0; i < 3; i++)
    s[i] = weft_uring_sqe();
  io_uring_prep_read(s[0], -1, out, sizeof(out), (uint64_t)-1);
  io_uring_prep_write(s[1], p[1], "zz", 2, (uint64_t)-1);
  io_uring_prep_nop(s[2]);
  s[0]->flags |= IOSQE_IO_LINK;
  s[1]->flags |= IOSQE_IO_LINK;
  weft_stats s0 = io_stats();
  CO_EQ(weft_uring_wait(s, 3, NULL, WEFT_NO_DEADLINE), -EBADF);
  weft_stats s1 = io_stats();
  CO_EQ(s1.ops_completed - s0.ops_completed, 1); /* one op, all its CQEs reaped */
  CO_EQ(io_pending(p[0]), 0);

  /* The ring is fine afterwards. */
  CO_EQ(weft_nop(), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, linked_chains, .timeout = 30)
{
  rt_run(1, chain_main, NULL);
  rt_assert_clean();
}

/* A chain's SQEs must reach the kernel in one submission. Three other tasks
 * leave their SQEs in a 4-entry SQ, then a coroutine takes the three SQEs
 * of a chain: the SQ fills after the first one, and submitting at that point
 * would send the chain's head alone (with weft's "ignore" user_data), reuse
 * its slot for the third SQE, and leave weft_uring_wait waiting for a CQE
 * that never comes. */
static void *nop_once(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_nop();
}

static void *chain_tiny_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  for (int round = 0; round < 3; round++) {
    weft_task *t[3];
    for (int i = 0; i < 3; i++)
      CO_EQ(io_spawn_on(&t[i], 0, nop_once, NULL), 0);
    weft_yield(); /* they run now and leave 3 SQEs in the SQ */
    char out[8] = {0};
    struct io_uring_sqe *s[3];
    s[0] = weft_uring_sqe();
    CO_CHECK(s[0] != NULL);
    io_uring_prep_write(s[0], p[1], "abc", 3, (uint64_t)-1);
    s[0]->flags |= IOSQE_IO_LINK;
    s[1] = weft_uring_sqe();
    CO_CHECK(s[1] != NULL);
    io_uring_prep_nop(s[1]);
    s[1]->flags |= IOSQE_IO_LINK;
    s[2] = weft_uring_sqe();
    CO_CHECK(s[2] != NULL);
    CO_CHECK(s[2] != s[0] && s[2] != s[1]);
    if (!s[0] || !s[1] || !s[2])
      break;
    io_uring_prep_read(s[2], p[0], out, sizeof(out), (uint64_t)-1);
    CO_EQ(weft_uring_wait(s, 3, NULL, WEFT_NO_DEADLINE), 3);
    CO_CHECK(memcmp(out, "abc", 3) == 0);
    for (int i = 0; i < 3; i++)
      CO_EQ(rt_join_int(t[i]), 0);
  }
  io_close_pipe(p);
  return NULL;
}

Test(uring, chain_is_not_split_by_a_full_sq, .timeout = 15)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.ring_entries = 4;
  io_run_cfg(&c, chain_tiny_main, NULL);
  rt_assert_clean();
}

/* The same with a longer chain: 12 SQEs on a 16-entry SQ that holds 6 SQEs
 * of other tasks. The SQ must make room for the whole chain (the others
 * are submitted first), not hand out 10 and then refuse the 11th. */
static void *chain_long_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_task *t[6];
  for (int i = 0; i < 6; i++)
    CO_EQ(io_spawn_on(&t[i], 0, nop_once, NULL), 0);
  weft_yield();
  char out[8] = {0};
  struct io_uring_sqe *s[12];
  int got = 0;
  for (; got < 12; got++) {
    s[got] = weft_uring_sqe();
    if (!s[got])
      break;
    if (got == 0)
      io_uring_prep_write(s[got], p[1], "xy", 2, (uint64_t)-1);
    else if (got == 11)
      io_uring_prep_read(s[got], p[0], out, sizeof(out), (uint64_t)-1);
    else
      io_uring_prep_nop(s[got]);
    if (got < 11)
      s[got]->flags |= IOSQE_IO_LINK;
  }
  CO_EQ(got, 12);
  if (got == 12) {
    CO_EQ(weft_uring_wait(s, 12, NULL, WEFT_NO_DEADLINE), 2);
    CO_CHECK(memcmp(out, "xy", 2) == 0);
  } else if (got > 0) { /* give the partial chain back, unlinked at its end */
    s[got - 1]->flags &= (__u8)~IOSQE_IO_LINK;
    weft_uring_wait(s, (unsigned)got, NULL, WEFT_NO_DEADLINE);
  }
  for (int i = 0; i < 6; i++)
    CO_EQ(rt_join_int(t[i]), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, long_chain_gets_the_whole_sq, .timeout = 15)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.ring_entries = 16;
  io_run_cfg(&c, chain_long_main, NULL);
  rt_assert_clean();
}

/* A chain longer than the SQ cannot be had: the NULL that says so gives up
 * what was handed out of it. Here the chain's head is a read into this
 * frame; the caller gives up (even passing the SQEs it got is refused),
 * and the next submissions must not run the read. */
static void *chain_too_long_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  char buf[4] = "----";
  struct io_uring_sqe *s[5];
  int got = 0;
  for (; got < 5 && (s[got] = weft_uring_sqe()) != NULL; got++) {
    if (got == 0)
      io_uring_prep_read(s[got], p[0], buf, sizeof(buf), (uint64_t)-1);
    else
      io_uring_prep_nop(s[got]);
    s[got]->flags |= IOSQE_IO_LINK;
  }
  CO_EQ(got, 4);
  CO_EQ(weft_uring_wait(s, (unsigned)got, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_nop(), 0);
  CO_EQ(write(p[1], "data", 4), 4);
  CO_EQ(weft_nop(), 0);
  weft_sleep(WEFT_MSEC);
  CO_CHECK(memcmp(buf, "----", 4) == 0);
  char back[4];
  CO_EQ(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
  CO_EQ(read(p[0], back, sizeof(back)), 4); /* the data nobody read */
  /* The ring is whole: a chain that fits runs. */
  s[0] = weft_uring_sqe();
  CO_CHECK(s[0] != NULL);
  if (s[0]) {
    io_uring_prep_nop(s[0]);
    CO_EQ(weft_uring_wait(s, 1, NULL, WEFT_NO_DEADLINE), 0);
  }
  io_close_pipe(p);
  return NULL;
}

Test(uring, chain_longer_than_the_sq_runs_nothing, .timeout = 15)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.ring_entries = 4;
  io_run_cfg(&c, chain_too_long_main, NULL);
  rt_assert_clean();
}

/* weft_uring_sqe() + weft_uring_multishot_begin() is a complete hand-over
 * too: afterwards weft_uring_sqe() must still submit what is queued when
 * the SQ is full (and not act as if a chain were still open). */
static void *after_multishot_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, p[0]), 0); /* its SQE: 1 of the 4 */
  weft_task *t[3];
  for (int i = 0; i < 3; i++)
    CO_EQ(io_spawn_on(&t[i], 0, nop_once, NULL), 0);
  weft_yield(); /* 3 more: the SQ is full */
  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  if (sqe) {
    io_uring_prep_nop(sqe);
    CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), 0);
  }
  for (int i = 0; i < 3; i++)
    CO_EQ(rt_join_int(t[i]), 0);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, sqe_after_multishot_begin_on_a_full_sq, .timeout = 15)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.ring_entries = 4;
  io_run_cfg(&c, after_multishot_main, NULL);
  rt_assert_clean();
}

/* SQE flags that would break weft's bookkeeping: IOSQE_CQE_SKIP_SUCCESS
 * (no CQE to wait for) and a link flag on the op's last SQE (which would
 * chain the next task's SQE in the same submission to this op). weft owns
 * those (like user_data): the op must still complete, and must not drag
 * another task's op down with it. */
static void *nop_result(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_nop();
}

static void *skip_success_main(void *arg)
{
  (void)arg;
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_nop(sqe);
  sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
  int r = weft_uring_wait(&sqe, 1, NULL, weft_now() + 100 * WEFT_MSEC);
  CO_EQ(r, 0); /* the flag was cleared: the nop completes with its CQE */
  return NULL;
}

Test(uring, cqe_skip_success_flag, .timeout = 10)
{
  rt_run(1, skip_success_main, NULL);
  rt_assert_clean();
}

static void *trailing_link_main(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, nop_result, NULL), 0); /* its SQE follows ours */
  char c;
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_read(sqe, -1, &c, 1, (uint64_t)-1);
  sqe->flags |= IOSQE_IO_LINK; /* a "chain" of one */
  int r = weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE);
  CO_CHECK(r == -EBADF || r == -EINVAL);
  CO_EQ(rt_join_int(t), 0); /* the other task's nop is its own */
  return NULL;
}

Test(uring, trailing_link_flag_stays_in_the_op, .timeout = 10)
{
  rt_run(1, trailing_link_main, NULL);
  rt_assert_clean();
}

/* ---- deadlines and cancellation ----------------------------------------------------------- */

static void *uring_read(int fd, char *buf, size_t n, int64_t deadline, int *res)
{
  struct io_uring_sqe *sqe = weft_uring_sqe();
  if (!sqe) {
    *res = -ENOSPC;
    return NULL;
  }
  io_uring_prep_read(sqe, fd, buf, (unsigned)n, (uint64_t)-1);
  *res = weft_uring_wait(&sqe, 1, NULL, deadline);
  return NULL;
}

static void *deadline_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  char buf[8];
  int r = 0;
  int64_t t0 = weft_now();
  uring_read(p[0], buf, sizeof(buf), t0 + 20 * WEFT_MSEC, &r);
  CO_EQ(r, -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  /* Really cancelled: the next data goes to the next read. */
  CO_EQ(weft_write(p[1], "ok", 2), 2);
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), 2);

  /* A deadline already passed: the SQE becomes a NOP, the data stays. */
  CO_EQ(weft_write(p[1], "k", 1), 1);
  uring_read(p[0], buf, sizeof(buf), weft_now() - 1, &r);
  CO_EQ(r, -ETIMEDOUT);
  CO_EQ(weft_nop(), 0); /* the abandoned SQE was submitted with this one */
  weft_sleep(WEFT_MSEC);
  CO_EQ(io_pending(p[0]), 1);
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), 1);

  /* A chain waiting on an empty pipe, then a nop: the deadline cancels
   * both, and every CQE of the chain is reaped before the call returns. */
  struct io_uring_sqe *s[2] = {weft_uring_sqe(), weft_uring_sqe()};
  io_uring_prep_read(s[0], p[0], buf, sizeof(buf), (uint64_t)-1);
  s[0]->flags |= IOSQE_IO_LINK;
  io_uring_prep_nop(s[1]);
  weft_stats s0 = io_stats();
  CO_EQ(weft_uring_wait(s, 2, NULL, weft_now() + 10 * WEFT_MSEC), -ETIMEDOUT);
  weft_stats s1 = io_stats();
  CO_EQ(s1.ops_timed_out - s0.ops_timed_out, 1);
  CO_EQ(weft_write(p[1], "x", 1), 1);
  CO_EQ(weft_read(p[0], buf, sizeof(buf)), 1);

  /* A deadline scope counts too. */
  int64_t saved = weft_deadline_push(weft_now() + 10 * WEFT_MSEC);
  uring_read(p[0], buf, sizeof(buf), WEFT_NO_DEADLINE, &r);
  weft_deadline_pop(saved);
  CO_EQ(r, -ETIMEDOUT);
  io_close_pipe(p);
  return NULL;
}

Test(uring, deadlines_cancel_the_op, .timeout = 30)
{
  rt_run(1, deadline_main, NULL);
  rt_assert_clean();
}

struct ureader {
  int fd;
  int res;
  atomic_int started;
};

static void *ureader_task(void *arg)
{
  struct ureader *u = arg;
  atomic_store(&u->started, 1);
  char buf[4];
  uring_read(u->fd, buf, sizeof(buf), WEFT_NO_DEADLINE, &u->res);
  return (void *)(intptr_t)u->res;
}

static void *self_cancelled_ureader(void *arg)
{
  struct ureader *u = arg;
  weft_cancel(weft_task_self());
  return ureader_task(u);
}

static void *cancel_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  for (int s = 0; s < 2; s++) {
    struct ureader u = {.fd = p[0]};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, s, ureader_task, &u), 0);
    CO_CHECK(RT_POLL(atomic_load(&u.started)));
    CO_CHECK(io_wait_suspended(1));
    CO_EQ(weft_cancel(t), 0);
    void *v = NULL;
    CO_EQ(weft_join(t, &v), -ECANCELED);
    CO_EQ((intptr_t)v, -ECANCELED);
  }
  /* Cancelled before the call: -ECANCELED at once, the SQE does nothing. */
  CO_EQ(write(p[1], "d", 1), 1);
  struct ureader u = {.fd = p[0]};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, self_cancelled_ureader, &u), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  weft_sleep(WEFT_MSEC);
  CO_EQ(io_pending(p[0]), 1);
  io_close_pipe(p);
  return NULL;
}

Test(uring, cancel_task_waiting_in_uring_wait, .timeout = 30)
{
  rt_run(2, cancel_main, NULL);
  rt_assert_clean();
}
