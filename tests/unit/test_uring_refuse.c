/* SPDX-License-Identifier: MIT */
/*
 * Suite "uring", continued: what each call refuses. weft_uring_wait is for
 * ops that post one CQE per SQE (a zero-copy send's notification aside): a
 * multishot SQE - alone or in a chain - is refused with -EINVAL before
 * anything is submitted, every SQE handed out turned into a NOP (kept, a
 * multishot accept took connections and kept only the last descriptor, a
 * multishot poll never ended), and so is a linked timeout; both calls
 * refuse an SQE using one of weft's buffer groups. weft_uring_multishot_begin
 * takes a single-shot SQE: its one CQE is handed out, then the op has
 * ended. And SQEs a task took and passed to no call never run.
 */
#include "rt_internal.h"
#include "uring_test.h"

#include "uring_compat.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

/* ---- multishot SQEs refused by weft_uring_wait ------------------------------------ */

enum ms_kind { MS_POLL, MS_ACCEPT, MS_RECV, MS_RECVMSG, MS_TIMEOUT, MS_READ, MS_RECV_ZC,
               MS_URING_CMD, MS_KINDS };

static const char *const ms_name[MS_KINDS] = {"poll", "accept", "recv", "recvmsg", "timeout",
                                              "read", "recv_zc", "uring_cmd"};

/* Prepares sqe as a multishot op of the given kind on fd (a socket or a
 * pipe's read end; not every kind fits every descriptor: the call must
 * refuse before the kernel sees it anyway). */
static void prep_multishot(struct io_uring_sqe *sqe, enum ms_kind kind, int fd,
                           struct __kernel_timespec *ts, struct msghdr *msg)
{
  switch (kind) {
  case MS_POLL:
    io_uring_prep_poll_multishot(sqe, fd, POLLIN);
    break;
  case MS_ACCEPT:
    io_uring_prep_multishot_accept(sqe, fd, NULL, NULL, SOCK_CLOEXEC);
    break;
  case MS_RECV:
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 7;
    break;
  case MS_RECVMSG:
    io_uring_prep_recvmsg_multishot(sqe, fd, msg, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 7;
    break;
  case MS_TIMEOUT:
    io_uring_prep_timeout(sqe, ts, 0, IORING_TIMEOUT_MULTISHOT);
    break;
  case MS_READ: /* io_uring_prep_read_multishot is newer than liburing 2.3 */
    io_uring_prep_rw(IORING_OP_READ_MULTISHOT, sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 7;
    break;
  case MS_RECV_ZC: /* multishot whatever its flags (the kernel requires the flag) */
    io_uring_prep_rw(IORING_OP_RECV_ZC, sqe, fd, NULL, 0, 0);
    sqe->ioprio |= IORING_RECV_MULTISHOT;
    break;
  default: /* MS_URING_CMD */
    io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
    sqe->uring_cmd_flags = IORING_URING_CMD_MULTISHOT;
    break;
  }
}

/* Every kind, alone and as the second SQE of a chain: -EINVAL, every SQE
 * handed out is a NOP nobody waits for, and no op was started. The deadline
 * only keeps a call that wrongly takes the SQE from waiting for ever. */
static void *refuse_main(void *arg)
{
  (void)arg;
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct __kernel_timespec ts = {.tv_nsec = 1000000};
  struct msghdr msg = {0};
  for (int chain = 0; chain < 2; chain++)
    for (int kind = 0; kind < MS_KINDS; kind++) {
      weft_stats s0 = io_stats();
      struct io_uring_sqe *s[2];
      unsigned n = 0;
      if (chain) {
        s[n] = weft_uring_sqe();
        io_uring_prep_nop(s[n]);
        s[n++]->flags |= IOSQE_IO_LINK;
      }
      s[n] = weft_uring_sqe();
      CO_CHECK(s[n] != NULL);
      prep_multishot(s[n++], kind, sv[0], &ts, &msg);
      unsigned flags = 12345;
      int r = weft_uring_wait(s, n, &flags, weft_now() + 100 * WEFT_MSEC);
      if (r != -EINVAL)
        cr_log_error("%s%s: %d", chain ? "chain, " : "", ms_name[kind], r);
      CO_EQ(r, -EINVAL);
      CO_EQ(flags, 12345); /* no CQE: left alone */
      for (unsigned i = 0; i < n; i++) {
        CO_EQ(s[i]->opcode, IORING_OP_NOP);
        CO_EQ(s[i]->user_data, WEFT__UD_IGNORE);
      }
      CO_EQ(weft_nop(), 0);
      weft_stats s1 = io_stats();
      CO_EQ(s1.ops_submitted - s0.ops_submitted, 1); /* the nop's */
    }
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

Test(uring, wait_refuses_multishot_sqes, .timeout = 60)
{
  rt_run(1, refuse_main, NULL);
  rt_assert_clean();
}

/* A refused multishot accept accepts nothing: a connection waiting in the
 * listener's backlog when the call is made is still there after it (and
 * after whatever was queued has been submitted and run) for a plain
 * accept. Taken, the op would have accepted it at once and kept the
 * descriptor to itself - and every later one - until its deadline. */
static void *refuse_accept_main(void *arg)
{
  (void)arg;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  CO_CHECK(lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  CO_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  CO_EQ(listen(lfd, 16), 0);
  CO_EQ(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
  /* A loopback connect is established (in the backlog) when it returns. */
  int cl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CO_EQ(connect(cl, (struct sockaddr *)&a, sizeof(a)), 0);

  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, weft_now() + 100 * WEFT_MSEC), -EINVAL);
  CO_EQ(weft_nop(), 0); /* whatever was queued has been submitted and run */

  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0)
    cr_log_error("accept4: %s", strerror(errno));
  CO_CHECK(fd >= 0);
  if (fd >= 0)
    close(fd);
  close(cl);
  close(lfd);
  return NULL;
}

Test(uring, refused_multishot_accept_leaves_the_backlog_alone, .timeout = 30)
{
  rt_run(1, refuse_accept_main, NULL);
  rt_assert_clean();
}

/* ---- single-shot SQEs taken by weft_uring_multishot_begin ------------------------- */

/* A single-shot op through the multishot calls: its one CQE (without
 * IORING_CQE_F_MORE) is handed out, then next() says the op has ended. */
static void *single_in_multishot_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(write(p[1], "abc", 3), 3);
  char buf[8];
  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  io_uring_prep_read(sqe, p[0], buf, sizeof(buf), (uint64_t)-1);
  weft_uring_multishot *ms;
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), 0);
  int res = 0;
  unsigned flags = IORING_CQE_F_MORE;
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 1);
  CO_EQ(res, 3);
  CO_CHECK(!(flags & IORING_CQE_F_MORE));
  CO_CHECK(memcmp(buf, "abc", 3) == 0);
  CO_EQ(weft_uring_multishot_next(ms, &res, &flags, weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_uring_multishot_end(ms), 0);
  weft_stats s = io_stats();
  CO_EQ(s.ops_submitted, s.ops_completed);
  io_close_pipe(p);
  return NULL;
}

Test(uring, multishot_begin_takes_a_single_shot_sqe, .timeout = 30)
{
  rt_run(1, single_in_multishot_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- linked timeouts refused by weft_uring_wait ----------------------------------- */

/* A read guarded by IORING_OP_LINK_TIMEOUT: when the read completes in
 * time the kernel ends the timeout with -ECANCELED, which the chain's
 * result took for its first failure - the call said -ECANCELED and the
 * bytes read were lost to the caller. Refused, nothing runs: the data is
 * still in the pipe. */
static void *refuse_link_timeout_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(write(p[1], "abc", 3), 3);
  char buf[8];
  struct __kernel_timespec ts = {.tv_sec = 5};
  struct io_uring_sqe *s[2];
  s[0] = weft_uring_sqe();
  s[1] = weft_uring_sqe();
  CO_CHECK(s[0] && s[1]);
  io_uring_prep_read(s[0], p[0], buf, sizeof(buf), (uint64_t)-1);
  s[0]->flags |= IOSQE_IO_LINK;
  io_uring_prep_link_timeout(s[1], &ts, 0);
  CO_EQ(weft_uring_wait(s, 2, NULL, WEFT_NO_DEADLINE), -EINVAL);
  for (int i = 0; i < 2; i++)
    CO_EQ(s[i]->opcode, IORING_OP_NOP);
  CO_EQ(weft_nop(), 0); /* whatever was queued has been submitted and run */
  CO_EQ(io_pending(p[0]), 3);
  io_close_pipe(p);
  return NULL;
}

Test(uring, wait_refuses_a_linked_timeout, .timeout = 30)
{
  rt_run(1, refuse_link_timeout_main, NULL);
  rt_assert_clean();
}

/* ---- weft's buffer groups ----------------------------------------------------------- */

/* Groups above 32767 are weft's (its receive streams' buffer rings): a raw
 * op selecting from one would take a stream's buffer from under it, and a
 * provide there would make a stream's registration of that group fail.
 * Both calls refuse such an SQE; nothing runs (the data is still there). */
static void *refuse_group_main(void *arg)
{
  (void)arg;
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CO_EQ(write(sv[1], "abc", 3), 3);
  static char bufs[2][64];
  const unsigned short streams_group = 40000;

  struct io_uring_sqe *sqe = weft_uring_sqe();
  io_uring_prep_recv(sqe, sv[0], NULL, 64, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = streams_group;
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(sqe->opcode, IORING_OP_NOP);

  sqe = weft_uring_sqe();
  io_uring_prep_provide_buffers(sqe, bufs, sizeof(bufs[0]), 2, streams_group, 0);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(sqe->opcode, IORING_OP_NOP);

  sqe = weft_uring_sqe();
  io_uring_prep_remove_buffers(sqe, 2, streams_group);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(sqe->opcode, IORING_OP_NOP);

  sqe = weft_uring_sqe();
  io_uring_prep_recv_multishot(sqe, sv[0], NULL, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = streams_group;
  weft_uring_multishot *ms = NULL;
  CO_EQ(weft_uring_multishot_begin(&ms, sqe), -EINVAL);
  CO_CHECK(ms == NULL);
  CO_EQ(sqe->opcode, IORING_OP_NOP);

  CO_EQ(weft_nop(), 0); /* whatever was queued has been submitted and run */
  char in[8];
  CO_EQ(recv(sv[0], in, sizeof(in), MSG_DONTWAIT), 3);

  /* The caller's groups are the caller's. */
  sqe = weft_uring_sqe();
  io_uring_prep_provide_buffers(sqe, bufs, sizeof(bufs[0]), 2, 32767, 0);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), 0);
  sqe = weft_uring_sqe();
  io_uring_prep_remove_buffers(sqe, 2, 32767);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), 2);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

Test(uring, calls_refuse_weft_s_buffer_groups, .timeout = 30)
{
  rt_run(1, refuse_group_main, NULL);
  rt_assert_clean();
}

/* ---- SQEs left behind ------------------------------------------------------------- */

/* A task that takes an SQE, prepares it and returns without passing it to
 * a call: what it prepared must not run after it has gone (here a write;
 * a read into its stack would land in a stack that is no longer its), and
 * the next coroutine's call on the shard must not fail for it. */
static void *leaver(void *arg)
{
  int fd = *(int *)arg;
  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  if (sqe)
    io_uring_prep_write(sqe, fd, "x", 1, (uint64_t)-1);
  return NULL;
}

static void *left_behind_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 0, leaver, &p[1]), 0);
  CO_EQ(rt_join_int(t), 0);
  CO_EQ(weft_nop(), 0); /* whatever was queued has been submitted and run */
  CO_EQ(io_pending(p[0]), 0);
  struct io_uring_sqe *sqe = weft_uring_sqe();
  CO_CHECK(sqe != NULL);
  io_uring_prep_nop(sqe);
  CO_EQ(weft_uring_wait(&sqe, 1, NULL, WEFT_NO_DEADLINE), 0);
  io_close_pipe(p);
  return NULL;
}

Test(uring, sqes_a_task_leaves_behind_never_run, .timeout = 30)
{
  rt_run(1, left_behind_main, NULL);
  rt_assert_clean();
}
