/* SPDX-License-Identifier: MIT */
/*
 * Suite "signal": signals waited for through weft_signal_open/_wait. The set
 * is checked (blocked in the caller, catchable, not empty); a coroutine on
 * another shard takes a process-directed signal with what the kernel says of
 * it; deadline and cancel fail first and take nothing; several pending
 * signals are each taken once; a plain thread waits in poll(2).
 *
 * Each test blocks its signals on the test thread before it starts a
 * runtime, as weft/signal.h asks, so every shard thread inherits the mask.
 * (Criterion's own helper thread blocks every signal.)
 */
#include "io_helpers.h"

#include "fault.h"

#include <fcntl.h>
#include <poll.h>

static sigset_t set_of(int a, int b)
{
  sigset_t s;
  sigemptyset(&s);
  if (a)
    sigaddset(&s, a);
  if (b)
    sigaddset(&s, b);
  return s;
}

static int block(int a, int b)
{
  sigset_t s = set_of(a, b);
  return weft_signal_block(&s);
}

/* ---- opening --------------------------------------------------------------------- */

Test(signal, open_checks_the_set, .timeout = 30)
{
  cr_assert_eq(weft_signal_block(NULL), -EINVAL);
  cr_assert_eq(weft_signal_open(NULL), -EINVAL);
  sigset_t empty = set_of(0, 0);
  cr_assert_eq(weft_signal_open(&empty), -EINVAL);

  /* Not blocked in this thread: refused, not silently never delivered. */
  sigset_t usr = set_of(SIGUSR1, SIGUSR2);
  cr_assert_eq(weft_signal_open(&usr), -EINVAL);
  cr_assert_eq(block(SIGUSR1, 0), 0);
  cr_assert_eq(weft_signal_open(&usr), -EINVAL); /* SIGUSR2 still is not */
  cr_assert_eq(block(SIGUSR2, 0), 0);

  /* Blocked now, but SIGKILL/SIGSTOP cannot be caught: refused. */
  sigset_t all;
  sigfillset(&all);
  cr_assert_eq(weft_signal_block(&all), 0); /* the kernel quietly skips those two */
  sigset_t kill = set_of(SIGUSR1, SIGKILL);
  cr_assert_eq(weft_signal_open(&kill), -EINVAL);
  sigset_t stop = set_of(SIGSTOP, 0);
  cr_assert_eq(weft_signal_open(&stop), -EINVAL);

  int fd = weft_signal_open(&usr);
  cr_assert_geq(fd, 0, "weft_signal_open: %s", weft_strerror(fd));
  cr_assert(fcntl(fd, F_GETFL) & O_NONBLOCK);
  cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  close(fd);
}

/* ---- waiting in a coroutine ---------------------------------------------------------- */

struct waiter {
  int fd;
  int64_t deadline;
  struct signalfd_siginfo info;
};

static void *waiter(void *arg)
{
  struct waiter *w = arg;
  return (void *)(intptr_t)weft_signal_wait_dl(w->fd, &w->info, w->deadline);
}

static void *coroutine_main(void *arg)
{
  (void)arg;
  sigset_t s = set_of(SIGUSR1, SIGUSR2);
  int fd = weft_signal_open(&s);
  CO_CHECK(fd >= 0);

  /* A waiter on the other shard takes a signal sent to the process. */
  struct waiter w = {.fd = fd, .deadline = WEFT_NO_DEADLINE};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, waiter, &w), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(kill(getpid(), SIGUSR1), 0);
  CO_EQ(rt_join_int(t), SIGUSR1);
  CO_EQ(w.info.ssi_signo, SIGUSR1);
  CO_EQ(w.info.ssi_pid, getpid());
  CO_EQ(w.info.ssi_code, SI_USER);

  /* sigqueue's value comes through. */
  CO_EQ(sigqueue(getpid(), SIGUSR2, (union sigval){.sival_int = 42}), 0);
  struct signalfd_siginfo info;
  CO_EQ(weft_signal_wait(fd, &info), SIGUSR2);
  CO_EQ(info.ssi_code, SI_QUEUE);
  CO_EQ(info.ssi_int, 42);

  /* Two pending: each taken once (lowest number first), then none. */
  CO_EQ(kill(getpid(), SIGUSR2), 0);
  CO_EQ(kill(getpid(), SIGUSR1), 0);
  CO_EQ(weft_signal_wait(fd, NULL), SIGUSR1);
  CO_EQ(weft_signal_wait(fd, NULL), SIGUSR2);
  int64_t t0 = weft_now();
  CO_EQ(weft_signal_wait_dl(fd, NULL, t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);

  /* A passed deadline fails first: the pending signal stays for later. */
  CO_EQ(kill(getpid(), SIGUSR1), 0);
  CO_EQ(weft_signal_wait_dl(fd, &info, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_signal_wait_dl(fd, &info, weft_now() + WEFT_SEC), SIGUSR1);

  /* Cancelled while waiting: -ECANCELED; the next signal is not lost. */
  io_cancel_while_waiting(1, waiter, &w);
  CO_EQ(kill(getpid(), SIGUSR2), 0);
  CO_EQ(weft_signal_wait(fd, NULL), SIGUSR2);

  /* Descriptors that cannot work. */
  CO_EQ(weft_signal_wait(-1, NULL), -EBADF);
  int p[2];
  CO_EQ(io_pipe(p), 0); /* blocking: a read could stop the shard */
  CO_EQ(weft_signal_wait(p[0], NULL), -EINVAL);
  CO_EQ(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
  CO_EQ(write(p[1], "x", 1), 1); /* readable, but not a signalfd */
  CO_EQ(weft_signal_wait(p[0], NULL), -EINVAL);
  io_close_pipe(p);

  /* A cancelled task fails at once, a signal pending or not. */
  CO_EQ(kill(getpid(), SIGUSR1), 0);
  weft_cancel(weft_task_self());
  CO_EQ(weft_signal_wait(fd, NULL), -ECANCELED);
  close(fd);
  return NULL;
}

Test(signal, wait_in_coroutines, .timeout = 30)
{
  cr_assert_eq(block(SIGUSR1, SIGUSR2), 0);
  rt_run(2, coroutine_main, NULL);
  rt_assert_clean();
  /* The last SIGUSR1 was never taken: still pending, not delivered. */
  sigset_t pending;
  cr_assert_eq(sigpending(&pending), 0);
  cr_assert_eq(sigismember(&pending, SIGUSR1), 1);
}

/* With a deadline and no room in the shard's timer heap for its timer: the
 * wait fails with -ENOMEM before it begins, and takes nothing. */
static void *oom_main(void *arg)
{
  (void)arg;
  sigset_t s = set_of(SIGUSR1, 0);
  int fd = weft_signal_open(&s);
  CO_CHECK(fd >= 0);
  CO_EQ(kill(getpid(), SIGUSR1), 0);
  /* The shard's timer heap has no array yet: reserving one allocates. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int r = weft_signal_wait_dl(fd, NULL, weft_now() + 3600 * WEFT_SEC);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(r, -ENOMEM);
  CO_EQ(weft_signal_wait(fd, NULL), SIGUSR1); /* still pending */
  close(fd);
  return NULL;
}

Test(signal, wait_without_memory_for_its_timer, .timeout = 30)
{
  cr_assert_eq(block(SIGUSR1, 0), 0);
  rt_run(1, oom_main, NULL);
  rt_assert_clean();
}

/* ---- waiting on a plain thread ----------------------------------------------------------- */

Test(signal, wait_on_a_plain_thread, .timeout = 30)
{
  cr_assert_eq(block(SIGUSR1, 0), 0);
  sigset_t s = set_of(SIGUSR1, 0);
  int fd = weft_signal_open(&s);
  cr_assert_geq(fd, 0);
  int64_t t0 = weft_now();
  cr_assert_eq(weft_signal_wait_dl(fd, NULL, t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  cr_assert_geq(weft_now(), t0 + 20 * WEFT_MSEC);
  cr_assert_eq(raise(SIGUSR1), 0); /* to this thread: seen by this thread's wait */
  struct signalfd_siginfo info;
  cr_assert_eq(weft_signal_wait(fd, &info), SIGUSR1);
  cr_assert_eq(info.ssi_signo, SIGUSR1);
  close(fd);
}
