/* SPDX-License-Identifier: MIT */
/*
 * Suite "net_faults", continued: accept with a deadline on plain threads,
 * which runs on a small io_uring of the thread's own. Threads racing for
 * fewer connections than there are of them all return by their deadline;
 * signals do not cut the wait short (the accept stays in flight until
 * cancelled); a child of fork() makes a ring of its own; a ring that
 * refuses the accept makes it poll instead; and the ring is
 * shared with the thread's msg_ring sends without either taking the
 * other's completions. And a plain send that finds no room after every
 * "ready" pauses between its attempts until its deadline.
 */
#include "net_test.h"

#include "fault.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

struct racer {
  int lfd;
  const int64_t *deadline; /* set before the barrier opens */
  pthread_barrier_t *start;
  int result;
  struct sockaddr_in peer;
  socklen_t peer_len;
};

static void *accept_racer(void *arg)
{
  struct racer *r = arg;
  pthread_barrier_wait(r->start);
  r->peer_len = sizeof(r->peer);
  r->result = weft_accept_dl(r->lfd, (struct sockaddr *)&r->peer, &r->peer_len, 0, *r->deadline);
  return NULL;
}

/* Six plain threads accept with a deadline on a blocking listener that has
 * two connections queued: every one of them sees it ready at once, but only
 * two can have a connection. Those two get one, with the peer's address;
 * the others must get -ETIMEDOUT at their deadline (1 s after all are
 * ready), not sit in accept4(2) until a connection comes (poll-then-accept
 * did). A racer still in accept six seconds after the join began fails the
 * test; the clients connected then release it. */
Test(net_faults, plain_threads_racing_keep_their_deadlines, .timeout = 120)
{
  enum { THREADS = 6, CONNS = 2, ROUNDS_OF_RACE = 5 };
  for (int round = 0; round < ROUNDS_OF_RACE; round++) {
    int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
    cr_assert_geq(lfd, 0);
    char port[8];
    snprintf(port, sizeof(port), "%d", port_of(lfd));
    int clients[THREADS];
    int nclients = 0;
    for (; nclients < CONNS; nclients++)
      cr_assert_geq(clients[nclients] = weft_tcp_connect("127.0.0.1", port), 0);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS + 1);
    struct racer r[THREADS];
    pthread_t th[THREADS];
    int64_t deadline = 0;
    for (int i = 0; i < THREADS; i++) {
      r[i] = (struct racer){.lfd = lfd, .deadline = &deadline, .start = &start, .result = 1};
      cr_assert_eq(pthread_create(&th[i], NULL, accept_racer, &r[i]), 0);
    }
    /* The deadline starts when every racer is ready to go: a thread slow
     * to start must not find it passed. */
    deadline = weft_now() + WEFT_SEC;
    pthread_barrier_wait(&start);
    int stuck = 0;
    for (int i = 0; i < THREADS; i++) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_sec += 5 + 1;
      if (pthread_timedjoin_np(th[i], NULL, &until) != 0) {
        stuck++;
        /* Release it, so the process can go on to report. */
        cr_assert_geq(clients[nclients++] = weft_tcp_connect("127.0.0.1", port), 0);
        pthread_join(th[i], NULL);
      }
    }
    cr_expect_eq(stuck, 0, "round %d: %d accepts waited past their deadline", round, stuck);
    int won = 0, timed_out = 0;
    for (int i = 0; i < THREADS; i++) {
      if (r[i].result >= 0) {
        won++;
        cr_expect_eq(r[i].peer_len, sizeof(struct sockaddr_in));
        cr_expect_eq(r[i].peer.sin_family, AF_INET);
        cr_expect_eq(r[i].peer.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
        cr_expect(fcntl(r[i].result, F_GETFD) & FD_CLOEXEC);
        close(r[i].result);
      } else {
        cr_expect_eq(r[i].result, -ETIMEDOUT);
        timed_out++;
      }
    }
    /* Every connection went to a racer - unless one was held up past the
     * deadline before it looked (then it gave up without accepting, as a
     * passed deadline does): such connections are still queued. */
    int fl = fcntl(lfd, F_GETFL);
    cr_assert_eq(fcntl(lfd, F_SETFL, fl | O_NONBLOCK), 0);
    int leftover = 0;
    for (int fd; (fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0; leftover++)
      close(fd);
    cr_expect_eq(won + leftover, nclients, "round %d: %d won, %d left", round, won, leftover);
    cr_expect_eq(timed_out, THREADS - won, "round %d", round);
    cr_expect_geq(weft_now(), deadline);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < nclients; i++)
      close(clients[i]);
    close(lfd);
    cr_assert_eq(stuck, 0);
  }
  rt_assert_clean();
}

static void on_sigusr1(int sig)
{
  (void)sig;
}

struct signalled_accept {
  int lfd;
  int64_t deadline;
  _Atomic pid_t tid;
  atomic_bool done, may_exit;
  int result;
};

static void *accept_until_deadline(void *arg)
{
  struct signalled_accept *a = arg;
  atomic_store(&a->tid, rt_gettid());
  a->result = weft_accept_dl(a->lfd, NULL, NULL, 0, a->deadline);
  atomic_store(&a->done, true);
  /* Alive until the check below: the thread's ring (and an accept left
   * armed in it) goes away with the thread. */
  while (!atomic_load(&a->may_exit))
    usleep(1000);
  return NULL;
}

/* Signals (handled, no SA_RESTART) interrupt the thread's wait for its
 * ring, not the accept: the call still returns -ETIMEDOUT at its deadline,
 * and only after the kernel has let go of the accept - a connection that
 * comes afterwards stays in the listener's queue. */
Test(net_faults, plain_accept_with_deadline_survives_signals, .timeout = 30)
{
  struct sigaction sa = {.sa_handler = on_sigusr1}, old;
  sigemptyset(&sa.sa_mask);
  cr_assert_eq(sigaction(SIGUSR1, &sa, &old), 0);
  int lfd = weft_tcp_listen("127.0.0.1", "0", 4);
  cr_assert_geq(lfd, 0);
  struct signalled_accept a = {.lfd = lfd, .deadline = weft_now() + 300 * WEFT_MSEC, .result = 1};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, accept_until_deadline, &a), 0);
  cr_assert(RT_POLL(atomic_load(&a.tid) != 0));
  /* Each signal while the thread waits for its ring (io_uring_enter). */
  int sent = 0;
  for (int i = 0; i < 5; i++) {
    bool waiting = RT_POLL(atomic_load(&a.done) ||
                           rt_thread_in_syscall(atomic_load(&a.tid), SYS_io_uring_enter));
    if (!waiting || atomic_load(&a.done))
      break;
    pthread_kill(th, SIGUSR1);
    sent++;
    usleep(20000);
  }
  cr_assert(RT_POLL(atomic_load(&a.done)));
  cr_expect_geq(sent, 1, "no signal came while the accept waited");
  cr_expect_eq(a.result, -ETIMEDOUT);
  cr_expect_geq(weft_now(), a.deadline);
  /* Nothing accepts any more: a new connection waits in the queue. */
  char port[8];
  snprintf(port, sizeof(port), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", port);
  cr_assert_geq(c, 0);
  struct pollfd pf = {.fd = lfd, .events = POLLIN};
  cr_expect_eq(poll(&pf, 1, 5000), 1, "the connection was taken by an accept left armed");
  int fl = fcntl(lfd, F_GETFL);
  cr_assert_eq(fcntl(lfd, F_SETFL, fl | O_NONBLOCK), 0);
  int got = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  cr_expect_geq(got, 0);
  atomic_store(&a.may_exit, true);
  pthread_join(th, NULL);
  close(got);
  close(c);
  close(lfd);
  sigaction(SIGUSR1, &old, NULL);
}

/* A child of fork() does not inherit the parent thread's ring (its memory
 * is not copied): an accept with a deadline there makes a ring of its own. */
Test(net_faults, plain_accept_with_deadline_after_fork, .timeout = 30)
{
  int lfd = weft_tcp_listen("127.0.0.1", "0", 4);
  cr_assert_geq(lfd, 0);
  cr_assert_eq(weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    char port[8];
    snprintf(port, sizeof(port), "%d", port_of(lfd));
    int c = weft_tcp_connect("127.0.0.1", port);
    int ok = weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 20 * WEFT_MSEC) >= 0 &&
             weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 20 * WEFT_MSEC) == -ETIMEDOUT;
    close(c);
    _exit(ok ? 0 : 1);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "the child died (signal %d)",
            WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  cr_assert_eq(WEXITSTATUS(status), 0);
  /* The parent's ring is still its own. */
  cr_assert_eq(weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  close(lfd);
}

/* The thread's ring refuses the accept's submission (the kernel short of
 * memory): that says nothing about the listener, so the call falls back to
 * poll(2) and accept4(2) and still takes the queued connection - it used to
 * return the ring's -ENOMEM. The next call makes a ring again. */
Test(net_faults, plain_accept_whose_ring_refuses_it_polls_instead, .timeout = 30)
{
  int lfd = weft_tcp_listen("127.0.0.1", "0", 4);
  cr_assert_geq(lfd, 0);
  char port[8];
  snprintf(port, sizeof(port), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", port);
  cr_assert_geq(c, 0);
  weft__fault_arm(WEFT__FAULT_TRING_SUBMIT, 1);
  int saved = errno = 1234;
  int s = weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 5 * WEFT_SEC);
  cr_assert_eq(errno, saved);
  cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_TRING_SUBMIT]), 0);
  weft__fault_arm(WEFT__FAULT_TRING_SUBMIT, 0);
  cr_assert_geq(s, 0, "accept: %d", s);
  cr_assert_eq(weft_send(c, "x", 1, 0), 1);
  char b;
  cr_assert_eq(weft_recv(s, &b, 1, 0), 1);
  cr_assert_eq(weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  close(s);
  close(c);
  close(lfd);
}

/* ---- one thread ring, two users ------------------------------------------------- */

#define TURNS 20

static void *turn_receiver(void *arg)
{
  (void)arg;
  for (uint32_t i = 0; i < TURNS; i++) {
    weft_msg m;
    CO_EQ(weft_msg_recv(&m, weft_now() + 20 * WEFT_SEC), 0);
    CO_EQ(m.tag, 7);
    CO_EQ(m.val, i);
  }
  return NULL;
}

/* Where the kernel has no ring-less msg_ring, a plain thread posts messages
 * through the same ring of its own that its accepts use: in turn, each
 * finds the ring as the other left it - no SQE or CQE of one is taken for
 * the other's. */
Test(net_faults, plain_thread_ring_serves_messages_and_accepts_in_turn, .timeout = 60)
{
  atomic_store(&weft__ring_ringless, -1);
  weft_runtime *rt = rt_start(2);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *r;
  cr_assert_eq(weft_runtime_submit(rt, &o, turn_receiver, NULL, &r), 0);
  int lfd = weft_tcp_listen("127.0.0.1", "0", 4);
  cr_assert_geq(lfd, 0);
  char port[8];
  snprintf(port, sizeof(port), "%d", port_of(lfd));
  for (uint32_t i = 0; i < TURNS; i++) {
    cr_assert_eq(weft_msg_send_wait_rt(rt, 1, 7, i), 0);
    if (i % 5 == 4) {
      int c = weft_tcp_connect("127.0.0.1", port);
      cr_assert_geq(c, 0);
      int s = weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + 5 * WEFT_SEC);
      cr_assert_geq(s, 0);
      close(s);
      close(c);
    } else {
      cr_assert_eq(weft_accept_dl(lfd, NULL, NULL, 0, weft_now() + WEFT_MSEC), -ETIMEDOUT);
    }
  }
  cr_assert_eq(weft_join(r, NULL), 0);
  cr_assert_eq(atomic_load(&weft__ring_ringless), -1);
  close(lfd);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- a send with nothing to wait for --------------------------------------------------- */

/* An unconnected datagram socket polls writable whatever its destination's
 * queue holds: a plain thread's send to a full receiver finds no room after
 * every "ready". It must still end at its deadline - and sleep between its
 * attempts, not spin (voluntary context switches count the sleeps: a spin
 * makes none). The coroutine's path waits in io_uring and is not this. */
Test(net_faults, plain_datagram_send_to_a_full_receiver_pauses_until_its_deadline, .timeout = 30)
{
  char path[] = "/tmp/weft-dgram-XXXXXX";
  int tmp = mkstemp(path);
  cr_assert_geq(tmp, 0);
  close(tmp);
  unlink(path);
  int rx = weft_unix_listen(path, SOCK_DGRAM, 0);
  cr_assert_geq(rx, 0);
  int tx = weft_socket(AF_UNIX, SOCK_DGRAM, 0);
  cr_assert_geq(tx, 0);
  struct sockaddr_un to = {.sun_family = AF_UNIX};
  snprintf(to.sun_path, sizeof(to.sun_path), "%s", path);
  char msg[512] = {0};
  /* Fill the receiver's queue. */
  while (sendto(tx, msg, sizeof(msg), MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to)) >= 0)
    ;
  cr_assert_eq(errno, EAGAIN);
  struct rusage before, after;
  cr_assert_eq(getrusage(RUSAGE_THREAD, &before), 0);
  ssize_t r = weft_sendto_dl(tx, msg, sizeof(msg), 0, (struct sockaddr *)&to, sizeof(to),
                             weft_now() + 100 * WEFT_MSEC);
  cr_assert_eq(getrusage(RUSAGE_THREAD, &after), 0);
  cr_assert_eq(r, -ETIMEDOUT);
  cr_assert_geq(after.ru_nvcsw - before.ru_nvcsw, 3, "%ld sleeps in 100 ms of retries",
                after.ru_nvcsw - before.ru_nvcsw);
  close(tx);
  close(rx);
  unlink(path);
}
