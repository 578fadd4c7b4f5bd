/* SPDX-License-Identifier: MIT */
/*
 * A task that returns with a multishot op or a receive stream still open:
 * the task ends it itself before it finishes, so the op does not outlive
 * the task (its CQEs would wake a freed task) and the runtime can stop
 * (an armed op used to keep weft_run and weft_runtime_stop waiting for
 * ever). And a stop whose wake-up between shards the kernel refuses, and
 * one with a direct message the kernel refuses in flight.
 */
#include "rt_internal.h"

#include "fault.h"
#include "stack.h"

#include "weft/net.h"
#include "weft/recv_stream.h"
#include "weft/uring.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <liburing.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

/* The descriptors the task used are the caller's: the run must leave them
 * open. Closes them afterwards. */
static void assert_still_open_then_close(const int fds[2])
{
  cr_assert_geq(fcntl(fds[0], F_GETFD), 0);
  close(fds[0]);
  close(fds[1]);
}

/* ---- a multishot op left open --------------------------------------------------------------------- */

static void *leaves_a_multishot_poll(void *arg)
{
  int *p = arg;
  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  if (!sqe)
    return NULL;
  io_uring_prep_poll_multishot(sqe, p[0], POLLIN);
  weft_uring_multishot *ms;
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);
  /* One CQE arrives and stays queued; then the body returns. */
  CO_EQ(write(p[1], "x", 1), 1);
  int res = 0;
  CO_EQ(weft_uring_multishot_next(ms, &res, NULL, weft_now() + 5 * WEFT_SEC), 1);
  CO_CHECK(res & POLLIN);
  return (void *)(intptr_t)7;
}

Test(runtime, task_returning_with_a_multishot_op_ends_it, .timeout = 30)
{
  int p[2];
  cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
  void *ret = rt_run(2, leaves_a_multishot_poll, p);
  cr_assert_eq((intptr_t)ret, 7, "the body's return value is kept");
  rt_assert_clean();
  assert_still_open_then_close(p);
}

/* ---- a receive stream left open, and a stop that cancels its reader ------------------------------- */

struct reader {
  int fd;
  atomic_bool reading;
  atomic_int got; /* bytes received */
  atomic_int last;
};

static void *reads_until_cancelled(void *arg)
{
  struct reader *r = arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, r->fd, NULL), 0);
  const void *data;
  ssize_t n;
  atomic_store(&r->reading, true);
  while ((n = weft_recv_stream_next(s, &data, WEFT_NO_DEADLINE)) > 0) {
    atomic_fetch_add(&r->got, (int)n);
    weft_recv_stream_release(s);
  }
  atomic_store(&r->last, (int)n);
  return NULL; /* without weft_recv_stream_close */
}

Test(runtime, stop_ends_a_task_that_left_its_receive_stream_open, .timeout = 30)
{
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct reader r = {.fd = sv[0]};
  weft_runtime *rt = rt_start(2);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, reads_until_cancelled, &r, &t), 0);
  while (!atomic_load(&r.reading))
    usleep(1000);
  cr_assert_eq(send(sv[1], "hello", 5, 0), 5);
  /* The reader takes it and waits again. */
  cr_assert(RT_POLL(atomic_load(&r.got) == 5), "the reader never got the 5 bytes");
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 1), "the reader never waited again");
  weft_detach(t);
  /* Cancels the reader; it returns with the stream open; the stream's
   * receive is ended by the task, so the stop completes. */
  cr_assert_eq(weft_runtime_stop(rt), 0);
  cr_assert_eq(atomic_load(&r.last), -ECANCELED);
  rt_assert_clean();
  /* The stream never closes the descriptor. */
  cr_assert_geq(fcntl(sv[0], F_GETFD), 0);
  close(sv[0]);
  close(sv[1]);
}

static void *leaves_a_receive_stream(void *arg)
{
  int fd = *(int *)arg;
  weft_recv_stream *s;
  CO_EQ(weft_recv_stream_open(&s, fd, NULL), 0);
  const void *data;
  /* Its receive stays armed for more after this. */
  CO_EQ(weft_recv_stream_next(s, &data, weft_now() + 5 * WEFT_SEC), 5);
  CO_CHECK(memcmp(data, "hello", 5) == 0);
  return (void *)(intptr_t)5; /* the data still held, the stream open */
}

Test(runtime, task_returning_with_a_receive_stream_closes_it, .timeout = 30)
{
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  cr_assert_eq(send(sv[1], "hello", 5, 0), 5);
  cr_assert_eq((intptr_t)rt_run(1, leaves_a_receive_stream, &sv[0]), 5);
  rt_assert_clean();
  assert_still_open_then_close(sv);
}

/* ---- a listener nobody closed --------------------------------------------------------------------- */

struct unclosed {
  int lfd;
  int client;
};

static void *leaves_a_listener_open(void *arg)
{
  struct unclosed *u = arg;
  weft_listener *l;
  CO_EQ(weft_listener_open(&l, u->lfd, 0), 0);
  /* A connection comes in and waits in the listener's queue; nobody takes
   * it, nobody closes the listener. */
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  CO_EQ(getsockname(u->lfd, (struct sockaddr *)&ss, &len), 0);
  u->client = weft_socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CO_CHECK(u->client >= 0);
  CO_EQ(weft_connect(u->client, (struct sockaddr *)&ss, len), 0);
  return NULL;
}

Test(runtime, stop_cancels_and_frees_a_listener_nobody_closed, .timeout = 30)
{
  /* weft_listener may change hands, so its opener's return leaves it open;
   * once every task has returned, the runtime cancels its accept (the stop
   * used to wait for ever) and closes what it had accepted. */
  struct unclosed u = {.lfd = -1, .client = -1};
  u.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(u.lfd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(u.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(listen(u.lfd, 16), 0);
  rt_run(2, leaves_a_listener_open, &u);
  rt_assert_clean();
  cr_assert_geq(u.client, 0);
  /* The queued connection was closed: the client reads end-of-file. The
   * listening socket is the caller's and still open. */
  char c;
  struct timeval tv = {.tv_sec = 5};
  cr_assert_eq(setsockopt(u.client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  cr_assert_eq(read(u.client, &c, 1), 0);
  cr_assert_geq(fcntl(u.lfd, F_GETFD), 0);
  close(u.client);
  close(u.lfd);
}

/* ---- a stop whose wake-up the kernel refuses -------------------------------- */

static void *sleeping_child(void *arg)
{
  (void)arg;
  weft_sleep(10 * WEFT_SEC); /* until the stop cancels it */
  return NULL;
}

static void *joining_parent(void *arg)
{
  (void)arg;
  weft_task *c;
  CO_EQ(rt_spawn(&c, WEFT_PLACE_PINNED, 1, sleeping_child, NULL), 0);
  weft_join(c, NULL); /* -ECANCELED at the stop */
  return NULL;
}

/* Both shards asleep, a parent on shard 0 joining a child on shard 1: the
 * stop's cancellations make one shard wake the other through its ring,
 * and the kernel refuses that message. The wake-up must still arrive (by
 * the eventfd) - it was dropped while stopping, and the stop hung. */
Test(runtime, stop_with_a_refused_wake_up_ends, .timeout = 60)
{
  /* Whether the refused message is a shard's wake-up of a sleeping shard
   * depends on who is awake when (2 to 12 rounds in 20, measured): rounds
   * go on until two have taken that path, 500 at most. */
  int refused = 0, round;
  for (round = 0; round < 500 && refused < 2; round++) {
    weft_config c;
    rt_cfg(&c, 2);
    c.spin_ns = 0;
    c.spin_max_ns = 0;
    c.steal = false;
    weft_runtime *rt = rt_start_cfg(&c);
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_PINNED;
    o.shard = 0;
    cr_assert_eq(weft_runtime_submit(rt, &o, joining_parent, NULL, NULL), 0);
    cr_assert(rt_wait_parked(rt, 0) && rt_wait_parked(rt, 1), "the shards never both slept");
    weft__fault_arm(WEFT__FAULT_SEND, 1);
    cr_assert_eq(weft_runtime_stop(rt), 0);
    refused += atomic_load(&weft__fault_countdown[WEFT__FAULT_SEND]) == 0;
    weft__fault_arm(WEFT__FAULT_SEND, 0);
  }
  cr_log_info("%d of %d stops had a wake-up refused", refused, round);
  cr_assert_geq(refused, 1, "no stop had a wake-up refused: the path was never taken");
  rt_assert_clean();
}

/* ---- a stop whose own wake-ups are refused both ways ------------------------------ */

static void *wait_for_ever(void *arg)
{
  return (void *)(intptr_t)weft_event_wait(arg); /* no timer: its shard sleeps for good */
}

/* The stopper (a plain thread) wakes a sleeping shard twice: to run the
 * task it cancels, and to let the shard leave once every task has returned.
 * Refused by the kernel and by the eventfd too, a wake-up from a plain thread
 * is dropped and left to the next waker (see runtime refused_wake_falls_back_to_the_eventfd) -
 * but for those of the stop there is none: the stop must send them again. */
static void stop_with_wake_ups_refused(bool with_task)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.spin_ns = 0;
  c.spin_max_ns = 0;
  weft_runtime *rt = rt_start_cfg(&c);
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  weft_task *t = NULL;
  if (with_task) {
    t = rt_submit_on(rt, 0, wait_for_ever, ev);
    cr_assert_eq(weft_detach(t), 0);
    cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 1));
  }
  cr_assert(rt_wait_parked(rt, 0), "the shard never slept");
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  cr_assert_eq(weft_runtime_stop(rt), 0);
  /* The premise: the first wake-up of the stop was refused both ways. */
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_WAKE_FD]), 0);
  weft_event_destroy(ev);
  rt_assert_no_leaks();
}

Test(runtime, stop_whose_wake_up_to_leave_is_refused_both_ways_ends, .timeout = 30)
{
  stop_with_wake_ups_refused(false);
}

Test(runtime, stop_whose_wake_up_of_a_cancelled_task_is_refused_both_ways_ends, .timeout = 30)
{
  stop_with_wake_ups_refused(true);
}

/* ---- a message the kernel refuses while the runtime stops ---------------------------------- */

/* A cancelled task may still send (a send does not wait) and drain its
 * queue (a queued message is taken whatever the cancel): so a direct
 * message the kernel refuses while the runtime stops is sent again like
 * any other - dropped, its receiver below would wait for it for ever, and
 * the stop with it. */
#define STOP_TAG 9

static atomic_int stop_got = -1;

static void *drain_once_cancelled(void *arg)
{
  CO_EQ(weft_event_wait(arg), -ECANCELED);
  weft_msg m;
  int r;
  while ((r = weft_msg_try_recv(&m, 0)) == -EAGAIN)
    weft_yield(); /* -ECANCELED: it yields all the same */
  CO_EQ(r, 0);
  CO_EQ(m.tag, STOP_TAG);
  atomic_store(&stop_got, (int)m.val);
  return NULL;
}

static void *send_once_cancelled(void *arg)
{
  CO_EQ(weft_event_wait(arg), -ECANCELED);
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  CO_EQ(weft_msg_send(1, STOP_TAG, 77), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SEND]), 0);
  return NULL;
}

Test(runtime, refused_direct_message_is_sent_again_while_the_runtime_stops, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  cr_assert_eq(weft_detach(rt_submit_on(rt, 1, drain_once_cancelled, ev)), 0);
  cr_assert_eq(weft_detach(rt_submit_on(rt, 0, send_once_cancelled, ev)), 0);
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 2));
  cr_assert_eq(weft_runtime_stop(rt), 0);
  cr_assert_eq(atomic_load(&stop_got), 77);
  weft_event_destroy(ev);
  rt_assert_no_leaks();
}

/* ---- the stacks go back to the system when the runtime stops ------------------------------- */

#define MANY_TASKS 400 /* frees far past one thread's cache (64): the depot fills */

static void *touch_and_yield(void *arg)
{
  volatile char buf[4096]; /* pages of its stack are committed */
  for (size_t k = 0; k < sizeof(buf); k += 64)
    buf[k] = (char)k;
  weft_yield();
  return (void *)(intptr_t)(buf[64] + (intptr_t)arg);
}

static void *spawn_many_and_join(void *arg)
{
  (void)arg;
  static weft_task *t[MANY_TASKS];
  for (int i = 0; i < MANY_TASKS; i++)
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_PINNED, -1, touch_and_yield, NULL), 0);
  for (int i = 0; i < MANY_TASKS; i++)
    CO_EQ(rt_join_int(t[i]), 64);
  return NULL;
}

/* "Stopping ... frees everything" (weft/runtime.h): the free stacks its
 * shards gathered - in their caches and in the depot they overflowed into -
 * are given back too, not kept with their committed pages for a runtime
 * that may never come. */
Test(runtime, stop_gives_the_free_stacks_back, .timeout = 30)
{
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  rt_run(1, spawn_many_and_join, NULL);
  rt_assert_clean();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.depot, 0, "%llu free stacks kept in the depot", (unsigned long long)c1.depot);
  cr_assert_eq(c1.slab_live + c1.guarded_live, c0.slab_live + c0.guarded_live,
               "stacks still held: %lld", (long long)(c1.slab_live + c1.guarded_live -
                                                      c0.slab_live - c0.guarded_live));
}

/* ---- a spawn's stack size (weft/task.h) ------------------------------------------------------ */

static void *report_stack_size(void *arg)
{
  (void)arg;
  return (void *)(uintptr_t)weft__coro_self()->stack.size;
}

static void *spawn_small_stacks(void *arg)
{
  (void)arg;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  weft_task *t;
  void *ret = NULL;
  o.stack_size = 1; /* cannot hold the task */
  CO_EQ(weft_spawn(&t, &o, report_stack_size, NULL), -EINVAL);
  o.stack_size = 8000; /* not a page multiple, under 16 KiB: made 16 KiB */
  CO_EQ(weft_spawn(&t, &o, report_stack_size, NULL), 0);
  CO_EQ(weft_join(t, &ret), 0);
  /* Usable bytes: a slab slot's canary comes out of them. */
  CO_CHECK((uintptr_t)ret >= (16u << 10) - WEFT__STACK_CANARY && (uintptr_t)ret <= 16u << 10);
  o.stack_size = ((size_t)1 << 30) + 1;
  CO_EQ(weft_spawn(&t, &o, report_stack_size, NULL), -EINVAL);
  return NULL;
}

Test(runtime, spawn_stack_size_is_rounded_or_refused_as_documented, .timeout = 30)
{
  rt_run(1, spawn_small_stacks, NULL);
  rt_assert_clean();
}
