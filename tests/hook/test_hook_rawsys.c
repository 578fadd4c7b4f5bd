/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook", the raw system calls: weft's own reads, writes and receives
 * made from a coroutine go straight to the kernel (lib/rawsys.h), not through
 * the read(), write() and recv() of the hook compiled into this program. Had
 * one of them reached the hook, the hook would have pinned the calling task
 * to its shard, as it does for the program's own calls (see
 * test_hook_pin.c): each test runs weft's call in a stealable task and
 * checks, as weft_own_sends_leave_the_task_stealable does, that weft_dump
 * still shows it stealable. Stealing is off, so that placement alone, not a
 * thief, decides where the tasks run.
 *
 * These paths open only with a fault (a wake-up that can be neither queued
 * nor posted goes by the target shard's eventfd) or a test hook (the receive
 * stream's plain path), so this program links weft's internal archive.
 */
#include "io_helpers.h"

#include "core.h"
#include "fault.h"
#include "recv_stream_internal.h"

#include <sys/eventfd.h>
#include <sys/socket.h>

#define TAG 9

/* Runs main_fn on a 2-shard runtime without stealing; skips without
 * msg_ring (the eventfd paths below are those of messages). */
static void run_unstolen(void *(*main_fn)(void *), void *arg)
{
  weft_config c;
  rt_cfg(&c, 2);
  c.steal = false;
  weft_runtime *rt = rt_start_cfg(&c);
  if (weft_msg_flush_rt(rt, -1) == -EOPNOTSUPP) {
    weft_runtime_stop(rt);
    cr_skip_test("the kernel has no msg_ring");
  }
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 0;
  weft_task *t = NULL;
  cr_assert_eq(weft_runtime_submit(rt, &o, main_fn, arg, &t), 0);
  void *v = (void *)(intptr_t)-1;
  cr_assert_eq(weft_join(t, &v), 0);
  cr_assert_null(v);
  rt_assert_clean();
  rt_stop_idle(rt);
}

static int spawn_stealable(weft_task **t, int shard, void *(*fn)(void *), void *arg)
{
  return rt_spawn(t, WEFT_PLACE_STEALABLE_PREFERRED, shard, fn, arg);
}

/* The doorbell finds no SQE and its post is refused: it goes by the
 * target's eventfd (weft__ring_wake_by_fd). */
static void no_way_to_ring(void)
{
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  weft__fault_arm(WEFT__FAULT_POST, 1);
}

/* Both faults were hit, and the wake-up did not wait in the backlog: the
 * eventfd write went through. */
static void check_rang_by_eventfd(void)
{
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0);
  CO_CHECK(!weft__msg_backlogged(weft__shard_self()));
}

/* ---- the eventfd write ---------------------------------------------------------------- */

static atomic_bool taker_started;

static void *counter_taker(void *arg)
{
  (void)arg;
  atomic_store(&taker_started, true);
  return (void *)(intptr_t)weft_counter_take(TAG, weft_now() + 10 * WEFT_SEC);
}

/* A stealable task rings shard 1's counter; the write to shard 1's
 * eventfd is made in it. */
static void *eventfd_ringer(void *arg)
{
  (void)arg;
  no_way_to_ring();
  CO_EQ(weft_counter_add(1, TAG, 5), 0);
  check_rang_by_eventfd();
  return (void *)(intptr_t)rt_dump_count(NULL, " stealable running");
}

static void *eventfd_write_main(void *arg)
{
  (void)arg;
  weft_task *taker, *ringer;
  CO_EQ(io_spawn_on(&taker, 1, counter_taker, NULL), 0);
  CO_CHECK(RT_POLL(atomic_load(&taker_started) && rt_dump_count(NULL, " waiting") == 1));
  CO_EQ(spawn_stealable(&ringer, 0, eventfd_ringer, NULL), 0);
  CO_EQ(rt_join_int(ringer), 1); /* still stealable: the write was not the hook's */
  CO_EQ(rt_join_int(taker), 5);  /* woken by the eventfd */
  return NULL;
}

Test(hook, weft_own_eventfd_write_leaves_the_task_stealable, .timeout = 30)
{
  run_unstolen(eventfd_write_main, NULL);
}

/* ---- the eventfd read ----------------------------------------------------------------- */

/* A stealable task on shard 1 polls for a message without ever yielding,
 * so shard 1's loop does not run: the only reaping there is its own
 * (weft_msg_try_recv reaps before it says there is nothing). The message
 * comes in a lane whose doorbell went by the eventfd, and only the eventfd
 * CQE's handler - which reads the eventfd, then drains the lanes - brings
 * it in: getting it means the read was made in this task. */
static atomic_int reader_shard = -1;

static void *eventfd_reader(void *arg)
{
  (void)arg;
  atomic_store(&reader_shard, weft_shard_id());
  weft_msg m = {0};
  int r;
  int64_t give_up = weft_now() + 10 * WEFT_SEC;
  while ((r = weft_msg_try_recv(&m, 0)) == -EAGAIN && weft_now() < give_up)
    ;
  CO_EQ(r, 0);
  CO_EQ(m.tag, TAG);
  CO_EQ(m.val, 7);
  return (void *)(intptr_t)rt_dump_count(NULL, " stealable running");
}

static void *eventfd_read_main(void *arg)
{
  (void)arg;
  weft_task *reader;
  CO_EQ(spawn_stealable(&reader, 1, eventfd_reader, NULL), 0);
  CO_CHECK(RT_POLL(atomic_load(&reader_shard) >= 0));
  CO_EQ(atomic_load(&reader_shard), 1);
  weft_msg m = {.tag = TAG, .val = 7};
  no_way_to_ring();
  CO_EQ(weft_msg_send_many(1, &m, 1), 1);
  check_rang_by_eventfd();
  CO_EQ(rt_join_int(reader), 1); /* still stealable: the read was not the hook's */
  return NULL;
}

Test(hook, weft_own_eventfd_read_leaves_the_task_stealable, .timeout = 30)
{
  run_unstolen(eventfd_read_main, NULL);
}

/* ---- the receive stream's receive that does not wait ----------------------------------- */

/* On the stream's plain path, a next() whose deadline has passed takes
 * what has arrived with one non-blocking recv (recv_now), in the task. */
static void *stream_reader(void *arg)
{
  int fd = *(int *)arg;
  weft_recv_stream *s = NULL;
  CO_EQ(weft_recv_stream_open(&s, fd, NULL), 0);
  if (!s)
    return NULL;
  CO_EQ(weft_recv_stream_multishot(s), 0); /* the plain path */
  const void *p = NULL;
  CO_EQ(weft_recv_stream_next(s, &p, weft_now() - 1), 3);
  CO_CHECK(p && memcmp(p, "abc", 3) == 0);
  CO_EQ(weft_recv_stream_next(s, &p, weft_now() - 1), -ETIMEDOUT); /* nothing more */
  intptr_t n = rt_dump_count(NULL, " stealable running");
  weft_recv_stream_close(s);
  return (void *)n;
}

static void *recv_main(void *arg)
{
  weft_task *t;
  CO_EQ(spawn_stealable(&t, 1, stream_reader, arg), 0);
  CO_EQ(rt_join_int(t), 1); /* still stealable: the receive was not the hook's */
  return NULL;
}

Test(hook, weft_own_stream_receive_leaves_the_task_stealable, .timeout = 30)
{
  atomic_store(&weft__recv_stream_force_fallback, WEFT__RS_FORCE_NO_RING);
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  cr_assert_eq(write(sv[1], "abc", 3), 3); /* there before the receive */
  run_unstolen(recv_main, &sv[0]);
  cr_assert_eq(close(sv[0]), 0);
  cr_assert_eq(close(sv[1]), 0);
}

/* ---- weft_copy's transfers that do not wait ------------------------------------------- */

/* weft_copy keeps a side the caller made O_NONBLOCK from waiting: it reads
 * and writes it with one system call each (copy.c's direct). Here both
 * sides are: an eventfd, which cannot be spliced from (so the copy goes
 * through its buffer), into a pipe. */
static void *nonblocking_copier(void *arg)
{
  int *fds = arg;
  size_t done = 0;
  CO_EQ(weft_copy(fds[0], NULL, fds[1], sizeof(uint64_t), &done), (ssize_t)sizeof(uint64_t));
  CO_EQ(done, sizeof(uint64_t));
  return (void *)(intptr_t)rt_dump_count(NULL, " stealable running");
}

static void *copy_main(void *arg)
{
  weft_task *t;
  CO_EQ(spawn_stealable(&t, 1, nonblocking_copier, arg), 0);
  CO_EQ(rt_join_int(t), 1); /* still stealable: the read and the write were not the hook's */
  return NULL;
}

Test(hook, weft_copy_of_nonblocking_sides_leaves_the_task_stealable, .timeout = 30)
{
  int p[2];
  cr_assert_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  int fds[2] = {eventfd(5, EFD_CLOEXEC | EFD_NONBLOCK), p[1]};
  cr_assert_geq(fds[0], 0);
  run_unstolen(copy_main, fds);
  uint64_t v = 0;
  cr_assert_eq(read(p[0], &v, sizeof(v)), (ssize_t)sizeof(v));
  cr_assert_eq(v, 5); /* the eventfd's count, moved whole */
  cr_assert_eq(read(fds[0], &v, sizeof(v)), -1); /* taken: the eventfd is at 0 */
  cr_assert_eq(errno, EAGAIN);
  cr_assert_eq(close(fds[0]), 0);
  io_close_pipe(p);
}
