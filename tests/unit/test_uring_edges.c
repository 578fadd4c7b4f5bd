/* SPDX-License-Identifier: MIT */
/*
 * Suite "uring", continued: what weft does with SQE flags a raw op may
 * carry (IOSQE_IO_DRAIN dropped; a hard-linked chain cancelled to its
 * end), buffer group ids kept apart from the receive streams', and the
 * extension API without memory (the timer heap, a multishot CQE lost).
 */
#include "rt_internal.h"
#include "uring_test.h"

#include "fault.h"

#include <poll.h>

/* ---- SQE flags ----------------------------------------------------------------------- */

/* IOSQE_IO_DRAIN on a raw SQE would wait for every op on the shard's ring -
 * weft's wake-up poll, which never ends, included - and hold back every SQE
 * after it, the shard's whole I/O. weft drops the flag: the op runs, and so
 * does everything after it. (Kept, this test hangs until its timeout.) */
static void *drain_main(void *arg)
{
  (void)arg;
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_nop(sqe);
  sqe->flags |= IOSQE_IO_DRAIN;
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), 0);
  CO_EQ(weft_nop(), 0);

  int p[2];
  CO_EQ(io_pipe(p), 0);
  sqe = weft_uring_sqe();
  io_uring_prep_poll_multishot(sqe, p[0], POLLIN);
  sqe->flags |= IOSQE_IO_DRAIN;
  weft_uring_multishot *ms;
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);
  CO_EQ(write(p[1], "o", 1), 1);
  int res = 0;
  CO_EQ(weft_uring_multishot_next(ms, &res, NULL, WEFT_NO_DEADLINE), 1);
  CO_CHECK(res & POLLIN);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  io_close_pipe(p);
  CO_EQ(weft_nop(), 0);
  return NULL;
}

Test(uring, a_drain_flag_does_not_stop_the_shard, .timeout = 20)
{
  rt_run(1, drain_main, NULL);
  rt_assert_clean();
}

/* The SQEs of a chain may be passed in any order: the link weft clears is
 * the one on the chain's last SQE in the ring (the array's last, it was:
 * the chain lost its own link there, and its last SQE kept one into the
 * next task's SQE of the same submission, which its failure cancelled). */
static void *nop_result(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_nop();
}

static void *unordered_chain_main(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 0, nop_result, NULL), 0); /* its SQE follows ours */
  char c;
  struct io_uring_sqe *s[2];
  s[0] = weft_uring_sqe();
  s[1] = weft_uring_sqe();
  io_uring_prep_nop(s[0]);
  s[0]->flags |= IOSQE_IO_LINK;
  io_uring_prep_read(s[1], -1, &c, 1, (uint64_t)-1);
  s[1]->flags |= IOSQE_IO_LINK; /* weft's to clear: the chain ends here */
  struct io_uring_sqe *rev[2] = {s[1], s[0]};
  CO_EQ(weft_uring_wait(rev, 2, NULL, WEFT_NO_DEADLINE), -EBADF);
  CO_EQ(rt_join_int(t), 0); /* the other task's nop is its own */
  return NULL;
}

Test(uring, unordered_chain_keeps_its_links, .timeout = 10)
{
  rt_run(1, unordered_chain_main, NULL);
  rt_assert_clean();
}

/* A deadline or a cancel ends a hard-linked chain too: cancelling the op
 * that runs does not end a hard link - the next op then starts, and must be
 * cancelled in its turn, or the call would wait for it past its deadline
 * (here: for ever). */
struct hardlink {
  int p[2], q[2];
  int64_t deadline;
};

/* Two reads of empty pipes, hard-linked. */
static void *hardlink_chain(void *arg)
{
  struct hardlink *h = arg;
  char a, b;
  struct io_uring_sqe *s[2];
  s[0] = weft_uring_sqe();
  s[1] = weft_uring_sqe();
  io_uring_prep_read(s[0], h->p[0], &a, 1, (uint64_t)-1);
  s[0]->flags |= IOSQE_IO_HARDLINK;
  io_uring_prep_read(s[1], h->q[0], &b, 1, (uint64_t)-1);
  return (void *)(intptr_t)weft_uring_wait(s, 2, NULL, h->deadline);
}

static void *hardlink_main(void *arg)
{
  (void)arg;
  struct hardlink h;
  CO_EQ(io_pipe(h.p), 0);
  CO_EQ(io_pipe(h.q), 0);
  h.deadline = weft_now() + 2 * WEFT_MSEC;
  CO_EQ((intptr_t)hardlink_chain(&h), -ETIMEDOUT);
  /* The same with a cancel of the task. */
  h.deadline = WEFT_NO_DEADLINE;
  io_cancel_while_waiting(0, hardlink_chain, &h);
  CO_EQ(weft_nop(), 0);
  weft_stats s = io_stats();
  CO_EQ(s.ops_submitted, s.ops_completed);
  io_close_pipe(h.p);
  io_close_pipe(h.q);
  return NULL;
}

Test(uring, deadline_ends_a_hard_linked_chain, .timeout = 20)
{
  rt_run(1, hardlink_main, NULL);
  rt_assert_clean();
}

/* ---- provided buffers ------------------------------------------------------------ */

/* Raw ops may provide buffers and select from them in the groups uring.h
 * leaves to the caller - also while a receive stream of weft's has a
 * buffer ring registered on the same shard ring. */
static void *bgid_main(void *arg)
{
  (void)arg;
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  weft_recv_stream *rs;
  CO_EQ(weft_recv_stream_open(&rs, sv[0], NULL), 0);
  if (weft_recv_stream_multishot(rs) != 1) {
    weft_recv_stream_close(rs);
    close(sv[0]);
    close(sv[1]);
    return NULL; /* no buffer rings here: nothing to keep apart */
  }
  static char bufs[4][64];
  for (int bgid = 0; bgid < 4; bgid++) {
    struct io_uring_sqe *sqe = weft_uring_sqe();
    io_uring_prep_provide_buffers(sqe, bufs[bgid], sizeof(bufs[bgid]), 1, bgid, 0);
    int r = weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE);
    CO_CHECK(r >= 0);
  }
  /* The stream still gets its data. */
  CO_EQ(write(sv[1], "abc", 3), 3);
  const void *p;
  CO_EQ(weft_recv_stream_next(rs, &p, WEFT_NO_DEADLINE), 3);
  CO_CHECK(memcmp(p, "abc", 3) == 0);
  CO_EQ(weft_recv_stream_close(rs), 0);
  /* And a raw receive selects from a group of the caller's. */
  CO_EQ(write(sv[1], "xyz", 3), 3);
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_recv(sqe, sv[0], NULL, 64, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = 0;
  unsigned fl = 0;
  CO_EQ(weft_uring_wait(&sqe, 1, &fl, WEFT_NO_DEADLINE), 3);
  CO_CHECK(fl & IORING_CQE_F_BUFFER);
  CO_CHECK(memcmp(bufs[0], "xyz", 3) == 0);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

Test(uring, raw_ops_keep_their_buffer_groups_apart_from_streams, .timeout = 30)
{
  rt_run(1, bgid_main, NULL);
  rt_assert_clean();
}

/* ---- out of memory --------------------------------------------------------------- */

static void *oom_ms_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  /* No memory for the multishot record: -ENOMEM, and the SQE does nothing. */
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_poll_multishot(sqe, p[0], POLLIN);
  weft_uring_multishot *ms = NULL;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_CHECK(ms == NULL);
  CO_EQ(weft_nop(), 0);

  /* No memory to queue a CQE: next() reports it; end() still cleans up. */
  CO_EQ(poll_begin(&ms, p[0]), 0);
  CO_EQ(weft_nop(), 0); /* the poll is armed */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(write(p[1], "o", 1), 1);
  int r = weft_uring_multishot_next(ms, NULL, NULL, WEFT_NO_DEADLINE);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(r, -ENOMEM);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  weft_stats s = io_stats();
  CO_EQ(s.ops_submitted, s.ops_completed);
  io_close_pipe(p);
  return NULL;
}

Test(uring, out_of_memory, .timeout = 30)
{
  rt_run(1, oom_ms_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* No room in the timer heap for a deadline's timer: -ENOMEM before anything
 * was submitted, and the SQE handed out never runs. */
static void *oom_wait_timer_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_write(sqe, p[1], "x", 1, (uint64_t)-1);
  /* The shard's timer heap has no array yet: reserving one allocates. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int r = weft_uring_wait(&sqe, 1, NULL, weft_now() + 3600 * WEFT_SEC);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(r, -ENOMEM);
  CO_EQ(weft_nop(), 0); /* whatever was queued has been submitted and run */
  struct pollfd pfd = {.fd = p[0], .events = POLLIN};
  CO_EQ(poll(&pfd, 1, 0), 0); /* nothing was written */
  io_close_pipe(p);
  return NULL;
}

Test(uring, wait_without_memory_for_its_timer, .timeout = 30)
{
  rt_run(1, oom_wait_timer_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* next() with a deadline and no room in the timer heap for its timer:
 * -ENOMEM, with no CQE lost - the op goes on and its CQEs still come. */
static void *oom_next_timer_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, p[0]), 0);
  /* The shard's timer heap has no array yet: arming a timer allocates. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int r = weft_uring_multishot_next(ms, NULL, NULL, weft_now() + 3600 * WEFT_SEC);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(r, -ENOMEM);
  CO_EQ(write(p[1], "o", 1), 1);
  int res = 0;
  CO_EQ(weft_uring_multishot_next(ms, &res, NULL, WEFT_NO_DEADLINE), 1);
  CO_CHECK(res & POLLIN);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, next_without_memory_for_its_timer, .timeout = 30)
{
  rt_run(1, oom_next_timer_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A CQE lost for lack of memory is reported once; after that next() goes on
 * as before: it waits for the CQEs still to come and gives 0 at the op's end
 * (a caller that retries after -ENOMEM must not get it for ever, without
 * waiting, in a loop that never ends). */
static void *oom_ms_once_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, p[0]), 0);
  CO_EQ(weft_nop(), 0); /* the poll is armed */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(write(p[1], "o", 1), 1);
  int r = weft_uring_multishot_next(ms, NULL, NULL, WEFT_NO_DEADLINE);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(r, -ENOMEM);
  /* Nothing new: the wait runs to its deadline. */
  CO_EQ(weft_uring_multishot_next(ms, NULL, NULL, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  /* Cancelled, the op ends: its final CQE, then 0. */
  CO_EQ(weft_uring_multishot_cancel(ms), 0);
  int res = 0;
  while ((r = weft_uring_multishot_next(ms, &res, NULL, WEFT_NO_DEADLINE)) == 1)
    ;
  CO_EQ(r, 0);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, a_lost_cqe_is_reported_once, .timeout = 30)
{
  rt_run(1, oom_ms_once_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A CQE lost for lack of memory is reported in its place: after the CQEs
 * queued before it and before the ones queued after it (it came after all
 * of them, so a caller could not tell which of its results was missing). A
 * multishot timeout of two ticks, both reaped while nobody calls next(),
 * the first one lost. */
static void *oom_ms_place_main(void *arg)
{
  (void)arg;
  /* Kernel 6.4; liburing 2.3's headers predate it. */
  const unsigned multishot = 1U << 6; /* IORING_TIMEOUT_MULTISHOT */
  struct __kernel_timespec ts = {.tv_nsec = WEFT_MSEC};
  /* One tick says whether the kernel has multishot timeouts; waiting for it
   * with a deadline (far off: its timer is armed) gives the timer heap its
   * array, so RT_POLL's sleeps below allocate nothing. */
  weft_uring_multishot *ms;
  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  io_uring_prep_timeout(sqe, &ts, 1, multishot);
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);
  int res = 0;
  unsigned flags = 0;
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 3600 * WEFT_SEC), 1);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  if (res == -EINVAL)
    return (void *)1; /* multishot timeouts need kernel 6.4 */
  sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  io_uring_prep_timeout(sqe, &ts, 2, multishot);
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1); /* the queue's first growth */
  /* The op's end counts it completed: both ticks have been reaped. */
  bool over = RT_POLL(io_stats().ops_submitted == io_stats().ops_completed);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_CHECK(over);
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, WEFT_NO_DEADLINE), -ENOMEM); /* tick 1 */
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, WEFT_NO_DEADLINE), 1); /* tick 2, the last */
  CO_EQ(res, -ETIME);
  CO_CHECK(!(flags & IORING_CQE_F_MORE));
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, WEFT_NO_DEADLINE), 0);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  return NULL;
}

Test(uring, a_lost_cqe_is_reported_in_its_place, .timeout = 30)
{
  void *unsupported = rt_run(1, oom_ms_place_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
  if (unsupported)
    cr_skip_test("multishot timeouts need kernel 6.4");
}

/* ---- a cancel that misses ------------------------------------------------------------ */

/* A cancel can find nothing to cancel (a multishot op between two arms of
 * its poll) and the op goes on: the fault site drops the first cancel
 * sent. end() cancels again until the op has ended, as does next() in a
 * cancelled task - else both would wait for ever. */
static void *cancel_miss_end_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, p[0]), 0);
  weft__fault_arm(WEFT__FAULT_CANCEL_MISS, 1);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_CANCEL_MISS]), 0);
  weft__fault_arm(WEFT__FAULT_CANCEL_MISS, 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, multishot_end_sends_a_missed_cancel_again, .timeout = 30)
{
  rt_run(1, cancel_miss_end_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *cancel_miss_drain_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_uring_multishot *ms;
  CO_EQ(poll_begin(&ms, p[0]), 0);
  weft__fault_arm(WEFT__FAULT_CANCEL_MISS, 1);
  CO_EQ(weft_cancel(weft_task_self()), 0);
  int r;
  while ((r = weft_uring_multishot_next(ms, NULL, NULL, WEFT_NO_DEADLINE)) == 1)
    ;
  CO_EQ(r, -ECANCELED);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_CANCEL_MISS]), 0);
  weft__fault_arm(WEFT__FAULT_CANCEL_MISS, 0);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, multishot_drain_sends_a_missed_cancel_again, .timeout = 30)
{
  rt_run(1, cancel_miss_drain_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}
