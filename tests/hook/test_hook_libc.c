/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook", continued: where the hooked call must give exactly what
 * libc gives. A poll (or ppoll, select) with no time to wait answers
 * "ready now?" as poll(2) does; a blocking write, send, writev, sendto or
 * sendmsg on a stream returns once all of it is written (control data sent
 * once); recvmsg makes received descriptors
 * close-on-exec only when asked; select takes a tv_usec of a second or
 * more, as Linux does; a poll listing a descriptor twice waits for the
 * events of both entries; a send whose peer goes away part-way gives the
 * part, then EPIPE, and never SIGPIPE; MSG_DONTWAIT is libc's EAGAIN; a
 * wait given a signal mask is libc's; sendmsg and recvmsg without a msghdr
 * are EFAULT; a descriptor closed while polled keeps the wait, and is
 * POLLNVAL once its file wakes it.
 */
#include "io_helpers.h"
#include "legacy.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* ---- no time to wait -------------------------------------------------------------------- */

static void *zero_timeouts_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_EQ(write(p[1], "x", 1), 1);
  struct pollfd pf = {.fd = p[0], .events = POLLIN};
  CO_EQ(legacy_poll(&pf, 1, 0), 1);
  CO_EQ(pf.revents, POLLIN);
  struct timespec zero = {0, 0};
  pf.revents = 0;
  CO_EQ(legacy_ppoll(&pf, 1, &zero), 1);
  CO_EQ(pf.revents, POLLIN);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(p[0], &rd);
  struct timeval tv = {0, 0};
  CO_EQ(legacy_select(p[0] + 1, &rd, NULL, NULL, &tv), 1);
  CO_CHECK(FD_ISSET(p[0], &rd));
  /* Nothing there: 0 at once. */
  char c;
  CO_EQ(read(p[0], &c, 1), 1);
  pf.revents = 0;
  CO_EQ(legacy_poll(&pf, 1, 0), 0);
  /* A closed descriptor: POLLNVAL, as poll(2) says it. */
  int dead = p[0];
  close(p[0]);
  pf = (struct pollfd){.fd = dead, .events = POLLIN};
  CO_EQ(legacy_poll(&pf, 1, 0), 1);
  CO_EQ(pf.revents, POLLNVAL);
  close(p[1]);
  return NULL;
}

Test(hook, a_poll_with_no_time_to_wait_answers_as_libc, .timeout = 30)
{
  rt_run(1, zero_timeouts_main, NULL);
  rt_assert_clean();
}

/* ---- blocking writes write everything ----------------------------------------------------- */

#define BIG_WRITE ((size_t)1 << 20)

struct slow_reader {
  int fd;
  size_t got;
  int fds;          /* descriptors received (and closed) */
  size_t first_bad; /* offset of the first byte that is not pattern_at() */
  bool bad;
};

/* The byte at stream offset i: no two nearby offsets, nor any two 256
 * apart, share it, so a piece sent twice, skipped or out of place shows. */
static unsigned char pattern_at(size_t i)
{
  return (unsigned char)(i * 131 + (i >> 8) * 7 + (i >> 16));
}

static char *pattern_buf(size_t n)
{
  char *b = malloc(n);
  if (b)
    for (size_t i = 0; i < n; i++)
      b[i] = (char)pattern_at(i);
  return b;
}

/* A plain thread reading in small pieces with pauses: the writer fills the
 * socket buffer again and again. It takes descriptors passed along too. */
static void *slow_reader(void *arg)
{
  struct slow_reader *s = arg;
  char buf[16384];
  ssize_t n;
  for (;;) {
    union {
      char b[CMSG_SPACE(4 * sizeof(int))];
      struct cmsghdr align;
    } ctl;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                         .msg_controllen = sizeof(ctl.b)};
    if ((n = recvmsg(s->fd, &msg, MSG_CMSG_CLOEXEC)) <= 0)
      break;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      for (size_t i = 0; c->cmsg_type == SCM_RIGHTS && i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
           i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
        close(fd);
        s->fds++;
      }
    for (ssize_t i = 0; i < n && !s->bad; i++)
      if ((unsigned char)buf[i] != pattern_at(s->got + (size_t)i)) {
        s->bad = true;
        s->first_bad = s->got + (size_t)i;
      }
    s->got += (size_t)n;
    usleep(200);
  }
  return NULL;
}

static void *big_writes_main(void *arg)
{
  (void)arg;
  char *buf = pattern_buf(BIG_WRITE);
  CO_CHECK(buf != NULL);
  for (int way = 0; way < 5; way++) {
    int sv[2];
    CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct slow_reader s = {.fd = sv[1]};
    pthread_t th;
    CO_EQ(pthread_create(&th, NULL, slow_reader, &s), 0);
    ssize_t r = way == 0   ? legacy_write(sv[0], buf, BIG_WRITE)
                : way == 1 ? legacy_send(sv[0], buf, BIG_WRITE)
                : way == 2 ? legacy_writev(sv[0], buf, BIG_WRITE)
                : way == 3 ? legacy_sendto(sv[0], buf, BIG_WRITE)
                           : legacy_sendmsg_fd(sv[0], buf, BIG_WRITE, sv[0]);
    CO_EQ(r, (ssize_t)BIG_WRITE);
    close(sv[0]);
    pthread_join(th, NULL);
    CO_EQ(s.got, BIG_WRITE);
    if (s.bad)
      rt_fail(__FILE__, __LINE__, "way %d: wrong byte at offset %zu", way, s.first_bad);
    CO_EQ(s.fds, way == 4 ? 1 : 0); /* control data went once */
    close(sv[1]);
  }
  free(buf);
  return NULL;
}

/* MSG_FASTOPEN on an unconnected blocking TCP socket: libc's sendto
 * connects and sends it all. io_uring's non-blocking attempt alone would
 * say EINPROGRESS. */
struct fastopen_reader {
  int lfd;
  size_t got;
  bool bad;
};

static void *accept_and_read(void *arg)
{
  struct fastopen_reader *f = arg;
  int c = accept(f->lfd, NULL, NULL);
  struct slow_reader s = {.fd = c};
  if (c >= 0) {
    slow_reader(&s);
    close(c);
  }
  f->got = s.got;
  f->bad = s.bad;
  return NULL;
}

static void *fastopen_main(void *arg)
{
  char *buf = arg;
  struct fastopen_reader f = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sa);
  CO_EQ(bind(f.lfd, (struct sockaddr *)&sa, sl), 0);
  CO_EQ(listen(f.lfd, 4), 0);
  CO_EQ(getsockname(f.lfd, (struct sockaddr *)&sa, &sl), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, accept_and_read, &f), 0);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CO_EQ(legacy_sendto_fastopen(fd, buf, BIG_WRITE, (struct sockaddr *)&sa, sl),
        (ssize_t)BIG_WRITE);
  close(fd);
  pthread_join(th, NULL);
  CO_EQ(f.got, BIG_WRITE);
  CO_CHECK(!f.bad);
  close(f.lfd);
  return NULL;
}

Test(hook, blocking_fastopen_sendto_connects_and_writes_everything, .timeout = 60)
{
  char *buf = pattern_buf(BIG_WRITE);
  cr_assert_not_null(buf);
  rt_run(1, fastopen_main, buf);
  rt_assert_clean();
  free(buf);
}

Test(hook, blocking_writes_return_once_everything_is_written, .timeout = 60)
{
  rt_run(1, big_writes_main, NULL);
  rt_assert_clean();
}

/* ---- descriptors received ------------------------------------------------------------------- */

static void send_fd(int sock, int fd)
{
  char byte = 'f';
  struct iovec iov = {&byte, 1};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof(u));
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                     .msg_controllen = sizeof(u.buf)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(fd));
  CO_EQ(sendmsg(sock, &m, 0), 1);
}

static void *recv_fd_main(void *arg)
{
  (void)arg;
  int sv[2], p[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  for (int ask = 0; ask < 2; ask++) {
    send_fd(sv[1], p[0]);
    int fd = legacy_recv_fd(sv[0], ask ? MSG_CMSG_CLOEXEC : 0);
    CO_CHECK(fd >= 0);
    CO_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, ask ? FD_CLOEXEC : 0);
    close(fd);
  }
  close(p[0]);
  close(p[1]);
  close(sv[0]);
  close(sv[1]);
  return NULL;
}

Test(hook, recvmsg_makes_descriptors_close_on_exec_only_when_asked, .timeout = 30)
{
  rt_run(1, recv_fd_main, NULL);
  rt_assert_clean();
}

/* ---- no message at all ------------------------------------------------------------------ */

/* sendmsg and recvmsg given no msghdr: EFAULT, as libc says it (on a plain
 * thread here first) - not a crash in the hook. So is a msghdr, or a poll
 * array, the process cannot read (a page without access): the kernel,
 * which sees it first for libc, says EFAULT. */
static void no_msghdr(int sock)
{
  errno = 0;
  CO_EQ(sendmsg(sock, NULL, 0), -1);
  CO_EQ(errno, EFAULT);
  errno = 0;
  CO_EQ(recvmsg(sock, NULL, MSG_DONTWAIT), -1);
  CO_EQ(errno, EFAULT);
  void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CO_CHECK(none != MAP_FAILED);
  if (none == MAP_FAILED)
    return;
  errno = 0;
  CO_EQ(sendmsg(sock, none, 0), -1);
  CO_EQ(errno, EFAULT);
  errno = 0;
  CO_EQ(recvmsg(sock, none, 0), -1);
  CO_EQ(errno, EFAULT);
  errno = 0;
  CO_EQ(poll(none, 1, -1), -1);
  CO_EQ(errno, EFAULT);
  errno = 0;
  CO_EQ(ppoll(none, 1, NULL, NULL), -1);
  CO_EQ(errno, EFAULT);
  munmap(none, 4096);
}

static void *no_msghdr_main(void *arg)
{
  no_msghdr(*(int *)arg);
  return NULL;
}

Test(hook, sendmsg_recvmsg_and_poll_given_no_memory_are_efault, .timeout = 30)
{
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  no_msghdr(sv[0]);
  rt_run(1, no_msghdr_main, &sv[0]);
  rt_assert_clean();
  close(sv[0]);
  close(sv[1]);
}

/* ---- select's tv_usec, poll's twice-listed descriptor ------------------------------------ */

struct late_writer {
  int fd;
  weft_runtime *rt;
  bool waited; /* the poll was suspended before the write */
};

/* Writes once the poll waits: a write before it would answer the poll's
 * first look, and the wait for two entries of one descriptor would not
 * be tried at all. */
static void *write_late(void *arg)
{
  struct late_writer *w = arg;
  w->waited = io_wait_suspended_rt(w->rt, 1);
  if (write(w->fd, "x", 1) != 1)
    abort();
  return NULL;
}

static void *select_poll_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_EQ(write(p[1], "x", 1), 1);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(p[0], &rd);
  struct timeval tv = {0, 1500000}; /* 1.5 s in microseconds: Linux takes it */
  CO_EQ(legacy_select(p[0] + 1, &rd, NULL, NULL, &tv), 1);
  char c;
  CO_EQ(read(p[0], &c, 1), 1);
  /* The same descriptor twice, the event it gets in the second entry. */
  struct pollfd two[2] = {{.fd = p[0], .events = POLLPRI}, {.fd = p[0], .events = POLLIN}};
  struct late_writer w = {.fd = p[1], .rt = weft_runtime_current()};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, write_late, &w), 0);
  CO_EQ(legacy_poll(two, 2, -1), 1); /* waits for the write: for ever if not for POLLIN */
  CO_EQ(two[1].revents, POLLIN);
  pthread_join(th, NULL);
  CO_CHECK(w.waited);
  close(p[0]);
  close(p[1]);
  return NULL;
}

Test(hook, select_takes_long_tv_usec_and_poll_waits_for_every_entry, .timeout = 30)
{
  rt_run(1, select_poll_main, NULL);
  rt_assert_clean();
}

/* ---- select past FD_SETSIZE ------------------------------------------------------------- */

/* A program whose descriptors go past FD_SETSIZE allocates bigger sets and
 * passes a bigger nfds; Linux takes them (and cuts an nfds past the
 * open-file limit down). So must the hook: a pipe at descriptor 1500. */
#define HIGH_FD 1500
#define BITS (8 * sizeof(unsigned long))

static void *select_high_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_EQ(dup3(p[0], HIGH_FD, O_CLOEXEC), HIGH_FD);
  unsigned long rd[2048 / BITS] = {0}, wr[2048 / BITS] = {0};
  rd[HIGH_FD / BITS] |= 1ul << (HIGH_FD % BITS);
  wr[HIGH_FD / BITS] |= 1ul << (HIGH_FD % BITS); /* a read end is never writable */
  CO_EQ(write(p[1], "x", 1), 1);
  struct timeval tv = {5, 0};
  CO_EQ(legacy_select(2048, (fd_set *)(void *)rd, (fd_set *)(void *)wr, NULL, &tv), 1);
  CO_CHECK(rd[HIGH_FD / BITS] >> (HIGH_FD % BITS) & 1);
  CO_CHECK((wr[HIGH_FD / BITS] >> (HIGH_FD % BITS) & 1) == 0);
  /* A soft open-file limit lowered below an open descriptor does not hide
   * it (Linux goes by its descriptor table). */
  struct rlimit rl, low;
  CO_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  low = rl;
  low.rlim_cur = 1024;
  CO_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  memset(wr, 0, sizeof(wr));
  CO_EQ(legacy_select(2048, (fd_set *)(void *)rd, NULL, NULL, &tv), 1);
  CO_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  CO_CHECK(rd[HIGH_FD / BITS] >> (HIGH_FD % BITS) & 1);
  /* An nfds far past the open-file limit is cut down, not refused. */
  CO_EQ(legacy_select(INT_MAX, NULL, NULL, NULL, &(struct timeval){0, 0}), 0);
  CO_EQ(legacy_select(-1, NULL, NULL, NULL, &(struct timeval){0, 0}), -EINVAL);
  close(HIGH_FD);
  close(p[0]);
  close(p[1]);
  return NULL;
}

Test(hook, select_takes_sets_past_fd_setsize, .timeout = 30)
{
  struct rlimit rl;
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur <= HIGH_FD)
    cr_skip_test("the open-file limit (%llu) is below descriptor %d",
                 (unsigned long long)rl.rlim_cur, HIGH_FD);
  rt_run(1, select_high_main, NULL);
  rt_assert_clean();
}

/* ---- a peer that goes away, a call that must not wait ------------------------------------- */

static atomic_int sigpipes;

static void count_sigpipe(int sig)
{
  (void)sig;
  atomic_fetch_add(&sigpipes, 1);
}

struct closing_reader {
  int fd;
  size_t take; /* bytes to read before closing */
};

static void *read_some_then_close(void *arg)
{
  struct closing_reader *c = arg;
  char buf[4096];
  for (size_t got = 0; got < c->take;) {
    ssize_t n = read(c->fd, buf, sizeof(buf));
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  close(c->fd);
  return NULL;
}

static void *peer_gone_main(void *arg)
{
  (void)arg;
  /* A blocking send that the peer stops reading part-way: the part that
   * went out, then EPIPE from the next call - and no SIGPIPE. */
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct closing_reader c = {.fd = sv[1], .take = 100000};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, read_some_then_close, &c), 0);
  char *buf = pattern_buf(BIG_WRITE);
  CO_CHECK(buf != NULL);
  ssize_t r = legacy_send(sv[0], buf, BIG_WRITE);
  pthread_join(th, NULL);
  CO_CHECK(r >= (ssize_t)c.take && r < (ssize_t)BIG_WRITE);
  CO_EQ(legacy_send(sv[0], buf, 10), -EPIPE);
  CO_EQ(atomic_load(&sigpipes), 0);
  close(sv[0]);
  /* MSG_DONTWAIT on a full socket: libc's own call (no io_uring op),
   * EAGAIN at once. */
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  while (send(sv[0], buf, 65536, MSG_DONTWAIT) > 0)
    ;
  weft_stats s0, s1;
  CO_EQ(weft_stats_get(NULL, 0, &s0), 0);
  errno = 0;
  CO_EQ(send(sv[0], buf, 10, MSG_DONTWAIT), -1);
  CO_EQ(errno, EAGAIN);
  CO_EQ(weft_stats_get(NULL, 0, &s1), 0);
  CO_EQ(s1.ops_submitted, s0.ops_submitted);
  close(sv[0]);
  close(sv[1]);
  free(buf);
  return NULL;
}

Test(hook, a_peer_gone_mid_send_gives_the_part_then_epipe_without_sigpipe, .timeout = 60)
{
  struct sigaction sa = {.sa_handler = count_sigpipe}, old;
  sigemptyset(&sa.sa_mask);
  cr_assert_eq(sigaction(SIGPIPE, &sa, &old), 0);
  atomic_store(&sigpipes, 0);
  rt_run(1, peer_gone_main, NULL);
  rt_assert_clean();
  sigaction(SIGPIPE, &old, NULL);
}

/* ---- a signal mask: libc's call ------------------------------------------------------------ */

static void *write_x(void *arg)
{
  CO_EQ(write(*(int *)arg, "x", 1), 1);
  return NULL;
}

/* A wait given a signal mask is libc's, which blocks the shard thread: a
 * writer queued on the same shard cannot run until it returns, so it ends
 * with its timeout and nothing ready (the hooked wait would have let the
 * writer run and returned 1). */
static void *masked_waits_main(void *arg)
{
  (void)arg;
  sigset_t none;
  sigemptyset(&none);
  struct timespec ms30 = {0, 30 * 1000 * 1000};
  for (int way = 0; way < 3; way++) {
    int p[2];
    CO_EQ(pipe2(p, O_CLOEXEC), 0);
    weft_task *w;
    CO_EQ(rt_spawn(&w, WEFT_PLACE_PINNED, 0, write_x, &p[1]), 0);
    int r = -2;
    if (way == 0) {
      struct pollfd pf = {.fd = p[0], .events = POLLIN};
      r = ppoll(&pf, 1, &ms30, &none);
    } else if (way == 1) {
      fd_set rd;
      FD_ZERO(&rd);
      FD_SET(p[0], &rd);
      r = pselect(p[0] + 1, &rd, NULL, NULL, &ms30, &none);
    } else {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      struct epoll_event ev = {.events = EPOLLIN};
      CO_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev), 0);
      r = epoll_pwait(ep, &ev, 1, 30, &none);
      close(ep);
    }
    CO_EQ(r, 0);
    CO_EQ(weft_join(w, NULL), 0); /* it ran after: the pipe holds its byte */
    char c;
    CO_EQ(read(p[0], &c, 1), 1);
    close(p[0]);
    close(p[1]);
  }
  return NULL;
}

Test(hook, waits_given_a_signal_mask_are_libcs, .timeout = 30)
{
  rt_run(1, masked_waits_main, NULL);
  rt_assert_clean();
}

/* ---- a descriptor closed while it is polled ---------------------------------------------- */

struct closer {
  rt_blocker poller;
  int fd, peer; /* closed; then sent a byte through */
  ssize_t sent;
};

static void *close_when_polled(void *arg)
{
  struct closer *c = arg;
  rt_blocker b = c->poller;
  /* A coroutine's wait has begun once its shard - its thread, the only
   * one - sleeps in io_uring_enter: that submitted the wait's poll. */
  CO_CHECK(b.rt ? rt_wait_blocked(b, -1, -1) &&
                      RT_POLL(rt_thread_in_syscall(b.tid, SYS_io_uring_enter))
                : RT_POLL(rt_thread_in_syscall(b.tid, SYS_poll) ||
                          rt_thread_in_syscall(b.tid, SYS_ppoll) ||
                          rt_thread_in_syscall(b.tid, SYS_select) ||
                          rt_thread_in_syscall(b.tid, SYS_pselect6)));
  close(c->fd);
  c->sent = send(c->peer, "x", 1, MSG_NOSIGNAL);
  return NULL;
}

/* Linux's close(2) does not wake a poll(2) of the descriptor in another
 * thread: the poll holds the file, which stays open until it returns, so
 * a byte still comes to it - and the poll, woken, looks at the descriptor
 * again and says POLLNVAL; select(2) says it ready in every set it is
 * in. The hooked poll of one descriptor (io_uring's poll holds the file
 * too) must do the same. On a plain thread here first, then in a
 * coroutine; nfds 1 and 2. The hooked poll of several waits in an epoll
 * instance, which holds no file (hook_wait.c says why): there the close
 * takes the file out of the wait, the peer's send fails and the wait runs
 * to its timeout, as the hook's header says. The 20 s timeout only ends a
 * wait that would otherwise last for ever; the documented difference is
 * shown with a short one. */
static bool closes_end_the_wait(nfds_t nfds)
{
  return nfds > 1 && weft_task_self() != NULL;
}

static void select_while_closed(int nfds, int sv[2], int idle[2])
{
  fd_set rd, ex;
  FD_ZERO(&rd);
  FD_ZERO(&ex);
  FD_SET(sv[0], &rd);
  FD_SET(sv[0], &ex);
  if (nfds > 1)
    FD_SET(idle[0], &rd);
  struct closer c = {.poller = rt_blocker_self(), .fd = sv[0], .peer = sv[1], .sent = -2};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, close_when_polled, &c), 0);
  bool ends = closes_end_the_wait((nfds_t)nfds);
  struct timeval tv = {ends ? 0 : 20, ends ? 200000 : 0};
  int top = sv[0] > idle[0] ? sv[0] : idle[0];
  CO_EQ(legacy_select(top + 1, &rd, NULL, &ex, &tv), ends ? 0 : 2);
  pthread_join(th, NULL);
  CO_EQ(c.sent, ends ? -1 : 1);
  if (!ends)
    CO_CHECK(FD_ISSET(sv[0], &rd) && FD_ISSET(sv[0], &ex) && !FD_ISSET(idle[0], &rd));
}

static void poll_while_closed(nfds_t nfds)
{
  int sv[2], idle[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, idle), 0);
  struct closer c = {.poller = rt_blocker_self(), .fd = sv[0], .peer = sv[1], .sent = -2};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, close_when_polled, &c), 0);
  struct pollfd fds[2] = {{.fd = sv[0], .events = POLLIN}, {.fd = idle[0], .events = POLLIN}};
  bool ends = closes_end_the_wait(nfds);
  CO_EQ(legacy_poll(fds, nfds, ends ? 200 : 20000), ends ? 0 : 1);
  pthread_join(th, NULL);
  CO_EQ(c.sent, ends ? -1 : 1);
  CO_EQ(fds[0].revents, ends ? 0 : POLLNVAL);
  CO_EQ(fds[1].revents, 0);
  close(sv[1]);
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  select_while_closed((int)nfds, sv, idle);
  close(sv[1]);
  close(idle[0]);
  close(idle[1]);
}

static void *poll_while_closed_main(void *arg)
{
  (void)arg;
  poll_while_closed(1);
  poll_while_closed(2);
  return NULL;
}

Test(hook, a_descriptor_closed_while_polled_is_pollnval_once_woken, .timeout = 120)
{
  poll_while_closed(1);
  poll_while_closed(2);
  rt_assert_clean();
  rt_run(1, poll_while_closed_main, NULL);
  rt_assert_clean();
}

/* ---- a poll leaves record locks alone ----------------------------------------------------- */

/* The process's POSIX record locks (fcntl's F_SETLK, lockf) on a file go
 * with the first close(2) of any of its descriptors: a poll, which closes
 * none, leaves them - also the hooked poll of several descriptors, which
 * waits in an epoll instance. The lock here is on a FIFO (not ready, so
 * the poll waits); another open of it (an open file description of its
 * own) sees it with F_OFD_GETLK. */
static void *lock_survives_main(void *arg)
{
  (void)arg;
  char dir[] = "/tmp/weft_hook_lockXXXXXX", path[64];
  CO_CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof(path), "%s/fifo", dir);
  CO_EQ(mkfifo(path, 0600), 0);
  int fifo = open(path, O_RDWR | O_CLOEXEC), other = open(path, O_RDWR | O_CLOEXEC);
  CO_CHECK(fifo >= 0 && other >= 0);
  struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  CO_EQ(fcntl(fifo, F_SETLK, &lk), 0);
  int q[2];
  CO_EQ(io_pipe(q), 0);
  struct late_writer w = {.fd = q[1], .rt = weft_runtime_current()};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, write_late, &w), 0);
  struct pollfd two[2] = {{.fd = fifo, .events = POLLIN}, {.fd = q[0], .events = POLLIN}};
  CO_EQ(legacy_poll(two, 2, -1), 1);
  pthread_join(th, NULL);
  CO_CHECK(w.waited);
  struct flock seen = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  CO_EQ(fcntl(other, F_OFD_GETLK, &seen), 0);
  CO_EQ(seen.l_type, F_WRLCK); /* still held */
  close(other);
  close(fifo);
  io_close_pipe(q);
  unlink(path);
  rmdir(dir);
  return NULL;
}

Test(hook, a_poll_leaves_record_locks_alone, .timeout = 30)
{
  rt_run(1, lock_survives_main, NULL);
  rt_assert_clean();
}

/* ---- a poll at the open-file limit ------------------------------------------------------ */

/* poll(2) needs no descriptor of its own, and never says EMFILE: neither
 * may the hooked poll of several descriptors, whose epoll instance is one,
 * in a process with no descriptor left. */
static void *poll_at_fd_limit_main(void *arg)
{
  (void)arg;
  int p[2], q[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(io_pipe(q), 0);
  int lowest = fcntl(p[0], F_DUPFD_CLOEXEC, 0); /* the next descriptor a call would get */
  CO_CHECK(lowest >= 0);
  close(lowest);
  struct rlimit old, none;
  CO_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  none = old;
  none.rlim_cur = (rlim_t)lowest;
  CO_EQ(setrlimit(RLIMIT_NOFILE, &none), 0);
  struct late_writer w = {.fd = q[1], .rt = weft_runtime_current()};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, write_late, &w), 0);
  struct pollfd two[2] = {{.fd = p[0], .events = POLLIN}, {.fd = q[0], .events = POLLIN}};
  int r = legacy_poll(two, 2, -1);
  CO_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  CO_EQ(r, 1);
  CO_EQ(two[1].revents, POLLIN);
  pthread_join(th, NULL);
  CO_CHECK(w.waited);
  io_close_pipe(p);
  io_close_pipe(q);
  return NULL;
}

Test(hook, a_poll_at_the_open_file_limit_still_waits, .timeout = 30)
{
  rt_run(1, poll_at_fd_limit_main, NULL);
  rt_assert_clean();
}
