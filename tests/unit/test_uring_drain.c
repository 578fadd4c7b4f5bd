/* SPDX-License-Identifier: MIT */
/*
 * The extension API's multishot ops, continued: cancel-then-drain hands out
 * every result (end() alone drops the queued ones), in a cancelled task as
 * well, and only the coroutine that began an op may use it. And a single
 * op that posts two CQEs (a zero-copy send) is over only after both.
 */
#include "io_helpers.h"

#include "weft/uring.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
