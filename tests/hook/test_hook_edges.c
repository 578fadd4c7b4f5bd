/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook", the edges of libc's behaviour: arguments the kernel refuses
 * and the results of corner cases, each compared with what libc gives for
 * the same call (on a plain thread here, or as the man page says it).
 */
#include "io_helpers.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/klog.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* ---- poll's arguments ------------------------------------------------------------------- */

#define UNTOUCHED 0x7a5a /* revents no poll(2) ever writes */

/* More entries than the open-file limit: EINVAL, and the array is not
 * written (poll(2) refuses before it copies anything back) - the hook must
 * not write revents over entries the caller may not even have. A NULL
 * array is EFAULT, not a crash. */
static void poll_refused(void)
{
  struct rlimit rl;
  CO_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  nfds_t n = (nfds_t)rl.rlim_cur + 1;
  struct pollfd *fds = calloc(n, sizeof(*fds));
  CO_CHECK(fds != NULL);
  if (!fds)
    return;
  for (nfds_t i = 0; i < n; i++)
    fds[i] = (struct pollfd){.fd = -1, .revents = UNTOUCHED};
  errno = 0;
  CO_EQ(poll(fds, n, 0), -1);
  CO_EQ(errno, EINVAL);
  nfds_t written = 0;
  for (nfds_t i = 0; i < n; i++)
    written += fds[i].revents != UNTOUCHED;
  CO_EQ(written, 0);
  free(fds);
  struct pollfd *volatile none = NULL; /* hidden from the compiler's check */
  errno = 0;
  CO_EQ(poll(none, 1, 0), -1);
  CO_EQ(errno, EFAULT);
}

static void *poll_refused_main(void *arg)
{
  (void)arg;
  poll_refused();
  return NULL;
}

/* A poll a cancel ends, ready or not, leaves every revents 0 - as poll(2)
 * interrupted by a signal leaves them. */
static void *poll_cancelled_main(void *arg)
{
  (void)arg;
  int p[2], q[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_EQ(pipe2(q, O_CLOEXEC), 0);
  CO_EQ(write(p[1], "x", 1), 1);
  struct pollfd two[2] = {{.fd = p[0], .events = POLLIN, .revents = UNTOUCHED},
                          {.fd = q[0], .events = POLLIN, .revents = UNTOUCHED}};
  CO_EQ(weft_cancel(weft_task_self()), 0);
  errno = 0;
  CO_EQ(poll(two, 2, -1), -1);
  CO_EQ(errno, ECANCELED);
  CO_EQ(two[0].revents, 0);
  CO_EQ(two[1].revents, 0);
  close(p[0]);
  close(p[1]);
  close(q[0]);
  close(q[1]);
  return NULL;
}

Test(hook, a_cancelled_poll_leaves_revents_as_an_interrupted_one, .timeout = 30)
{
  rt_run(1, poll_cancelled_main, NULL);
  rt_assert_clean();
}

Test(hook, a_poll_the_kernel_refuses_writes_nothing, .timeout = 30)
{
  poll_refused(); /* libc's answers */
  rt_assert_clean();
  rt_run(1, poll_refused_main, NULL);
  rt_assert_clean();
}

/* ---- events not asked for --------------------------------------------------------------- */

/* Fills the socket's send buffer (its peer reads nothing). */
static void fill(int fd)
{
  static char junk[4096];
  while (send(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0) {
  }
}

/* A socket whose peer has shut down its writing side: poll(2) reports
 * POLLRDHUP only when asked (POLLERR and POLLHUP always), and a socket
 * that is not ready for what was asked is not ready - whatever io_uring's
 * poll, which always adds POLLRDHUP, says. */
static void half_closed(void)
{
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CO_EQ(shutdown(sv[1], SHUT_WR), 0);
  struct pollfd pf = {.fd = sv[0], .events = POLLIN};
  CO_EQ(poll(&pf, 1, -1), 1);
  CO_EQ(pf.revents, POLLIN);
  pf = (struct pollfd){.fd = sv[0], .events = POLLIN | POLLRDHUP};
  CO_EQ(poll(&pf, 1, -1), 1);
  CO_EQ(pf.revents, POLLIN | POLLRDHUP);
  /* Not writable: nothing to report, until the timeout. */
  fill(sv[0]);
  pf = (struct pollfd){.fd = sv[0], .events = POLLOUT};
  CO_EQ(poll(&pf, 1, 20), 0);
  CO_EQ(pf.revents, 0);
  fd_set wr;
  FD_ZERO(&wr);
  FD_SET(sv[0], &wr);
  struct timeval tv = {0, 20000};
  CO_EQ(select(sv[0] + 1, NULL, &wr, NULL, &tv), 0);
  CO_EQ(tv.tv_sec, 0); /* returned when the time was up, not before */
  CO_EQ(tv.tv_usec, 0);
  close(sv[0]);
  close(sv[1]);
}

static void *half_closed_main(void *arg)
{
  (void)arg;
  half_closed();
  return NULL;
}

Test(hook, poll_reports_only_the_events_poll_2_reports, .timeout = 30)
{
  half_closed(); /* libc's answers */
  rt_assert_clean();
  rt_run(1, half_closed_main, NULL);
  rt_assert_clean();
}

/* ---- the error queue -------------------------------------------------------------------- */

/* A receive from the error queue (MSG_ERRQUEUE) never waits, even on a
 * blocking socket: EAGAIN at once when it is empty - code that drains it
 * (MSG_ZEROCOPY notifications, IP_RECVERR) loops until then. Once an error
 * is there (an ICMP port unreachable for a datagram to a closed port), it
 * is what the receive gets. The deadline scope only keeps a receive that
 * waits from waiting for ever. */
static void error_queue(void)
{
  int64_t saved = weft_deadline_push(weft_now() + 5 * WEFT_SEC);
  int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CO_CHECK(u >= 0);
  int one = 1;
  CO_EQ(setsockopt(u, IPPROTO_IP, IP_RECVERR, &one, sizeof(one)), 0);
  char buf[64], cbuf[256];
  struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                     .msg_controllen = sizeof(cbuf)};
  errno = 0;
  CO_EQ(recvmsg(u, &m, MSG_ERRQUEUE), -1);
  CO_EQ(errno, EAGAIN);
  errno = 0;
  CO_EQ(recv(u, buf, sizeof(buf), MSG_ERRQUEUE), -1);
  CO_EQ(errno, EAGAIN);
  errno = 0;
  CO_EQ(recvfrom(u, buf, sizeof(buf), MSG_ERRQUEUE, NULL, NULL), -1);
  CO_EQ(errno, EAGAIN);

  /* A port nobody listens on: bound and closed again. */
  int gone = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(to);
  CO_EQ(bind(gone, (struct sockaddr *)&to, len), 0);
  CO_EQ(getsockname(gone, (struct sockaddr *)&to, &len), 0);
  close(gone);
  CO_EQ(sendto(u, "x", 1, 0, (struct sockaddr *)&to, len), 1);
  struct pollfd pf = {.fd = u, .events = 0};
  CO_EQ(poll(&pf, 1, -1), 1);
  CO_EQ(pf.revents, POLLERR);
  m.msg_controllen = sizeof(cbuf);
  CO_CHECK(recvmsg(u, &m, MSG_ERRQUEUE) >= 0);
  CO_CHECK(m.msg_flags & MSG_ERRQUEUE);
  close(u);
  weft_deadline_pop(saved);
}

static void *error_queue_main(void *arg)
{
  (void)arg;
  error_queue();
  return NULL;
}

Test(hook, a_receive_from_the_error_queue_never_waits, .timeout = 30)
{
  error_queue(); /* libc's answers */
  rt_assert_clean();
  rt_run(1, error_queue_main, NULL);
  rt_assert_clean();
}

/* ---- recvmsg's msg_flags ---------------------------------------------------------------- */

/* msg_flags says what happened to the message (MSG_TRUNC, MSG_CTRUNC, ...)
 * and, as recvmsg(2) leaves it, MSG_CMSG_CLOEXEC only if the caller passed
 * it: the flag weft adds to make received descriptors close-on-exec is
 * not the caller's. */
static void message_flags(void)
{
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
  char buf[2];
  struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  CO_EQ(send(sv[1], "hello", 5, 0), 5);
  CO_EQ(recvmsg(sv[0], &m, 0), 2);
  CO_EQ(m.msg_flags, MSG_TRUNC);
  CO_EQ(send(sv[1], "hi", 2, 0), 2);
  CO_EQ(recvmsg(sv[0], &m, 0), 2);
  CO_EQ(m.msg_flags, 0);
  CO_EQ(send(sv[1], "hi", 2, 0), 2);
  CO_EQ(recvmsg(sv[0], &m, MSG_CMSG_CLOEXEC), 2);
  CO_EQ(m.msg_flags, MSG_CMSG_CLOEXEC);
  close(sv[0]);
  close(sv[1]);
}

static void *message_flags_main(void *arg)
{
  (void)arg;
  message_flags();
  return NULL;
}

Test(hook, recvmsg_flags_say_what_recvmsg_2_says, .timeout = 30)
{
  message_flags(); /* libc's answers */
  rt_assert_clean();
  rt_run(1, message_flags_main, NULL);
  rt_assert_clean();
}

/* ---- nanosleep's arguments -------------------------------------------------------------- */

/* No request is EFAULT (the kernel cannot read it), a request out of range
 * EINVAL - as nanosleep(2) says them. */
static void sleep_refused(void)
{
  const struct timespec *volatile none = NULL; /* hidden from the compiler's check */
  struct timespec rem;
  errno = 0;
  CO_EQ(nanosleep(none, &rem), -1);
  CO_EQ(errno, EFAULT);
  errno = 0;
  CO_EQ(nanosleep(&(struct timespec){0, 1000000000}, &rem), -1);
  CO_EQ(errno, EINVAL);
}

static void *sleep_refused_main(void *arg)
{
  (void)arg;
  sleep_refused();
  return NULL;
}

Test(hook, nanosleep_refuses_as_nanosleep_2, .timeout = 30)
{
  sleep_refused(); /* libc's answers */
  rt_assert_clean();
  rt_run(1, sleep_refused_main, NULL);
  rt_assert_clean();
}

/* ---- select and what it was not asked ------------------------------------------------- */

struct late_byte {
  int fd;
  weft_runtime *rt; /* NULL: a plain thread's select; write at once */
};

/* Writes a byte once the select waits (before, it would be its first look). */
static void *write_when_waiting(void *arg)
{
  struct late_byte *w = arg;
  if (w->rt)
    CO_CHECK(io_wait_suspended_rt(w->rt, 1));
  CO_EQ(write(w->fd, "x", 1), 1);
  return NULL;
}

/* A hang-up is "readable" to select(2), and nothing else: a descriptor
 * hung up but asked about only for writing or exceptional conditions is
 * not ready, and select waits on - until its timeout (then 0, no time left
 * in tv), or until another descriptor is ready. */
static void hang_up_not_asked(weft_runtime *rt)
{
  int hup[2], live[2];
  CO_EQ(pipe2(hup, O_CLOEXEC), 0);
  CO_EQ(pipe2(live, O_CLOEXEC), 0);
  close(hup[1]);
  fd_set wr, ex;
  FD_ZERO(&wr);
  FD_ZERO(&ex);
  FD_SET(hup[0], &wr);
  FD_SET(hup[0], &ex);
  struct timeval tv = {0, 20000};
  CO_EQ(select(hup[0] + 1, NULL, &wr, &ex, &tv), 0);
  CO_EQ(tv.tv_sec, 0);
  CO_EQ(tv.tv_usec, 0);
  CO_CHECK(!FD_ISSET(hup[0], &wr) && !FD_ISSET(hup[0], &ex));
  /* With a descriptor that becomes readable while it waits. */
  fd_set rd;
  FD_ZERO(&rd);
  FD_ZERO(&ex);
  FD_SET(live[0], &rd);
  FD_SET(hup[0], &ex);
  int nfds = (hup[0] > live[0] ? hup[0] : live[0]) + 1;
  struct late_byte w = {.fd = live[1], .rt = rt};
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, write_when_waiting, &w), 0);
  CO_EQ(select(nfds, &rd, NULL, &ex, NULL), 1);
  pthread_join(th, NULL);
  CO_CHECK(FD_ISSET(live[0], &rd));
  CO_CHECK(!FD_ISSET(hup[0], &ex));
  close(hup[0]);
  close(live[0]);
  close(live[1]);
}

static void *hang_up_main(void *arg)
{
  (void)arg;
  hang_up_not_asked(weft_runtime_current());
  return NULL;
}

Test(hook, select_waits_on_past_a_hang_up_it_was_not_asked_about, .timeout = 30)
{
  hang_up_not_asked(NULL); /* libc's answers */
  rt_assert_clean();
  rt_run(1, hang_up_main, NULL);
  rt_assert_clean();
}

/* Linux's select(2) looks no further than the process's descriptor table
 * (FDSize), whatever nfds says: a bit set past it is neither EBADF nor
 * ready, and stays as it was in the caller's set. One within it that is
 * not open is EBADF. Run on a plain thread (libc's answers) and in a
 * coroutine; 0 if FDSize leaves no room below FD_SETSIZE. */
static long fd_table_size(void)
{
  FILE *f = fopen("/proc/self/status", "re");
  if (!f)
    return -1;
  char line[128];
  long size = -1;
  while (size < 0 && fgets(line, sizeof(line), f))
    if (strncmp(line, "FDSize:", 7) == 0)
      size = strtol(line + 7, NULL, 10);
  fclose(f);
  return size;
}

static void *past_the_table(void *arg)
{
  (void)arg;
  long size = fd_table_size();
  CO_CHECK(size > 0);
  if (size <= 0 || size + 2 > FD_SETSIZE)
    return NULL;
  int past = (int)size, p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(write(p[1], "x", 1), 1);
  for (int call = 0; call < 2; call++) {
    fd_set rd, wr;
    FD_ZERO(&rd);
    FD_ZERO(&wr);
    FD_SET(p[0], &rd);
    FD_SET(past, &rd);
    FD_SET(past + 1, &wr);
    struct timeval tv = {0, 0};
    struct timespec ts = {0, 0};
    CO_EQ(call ? pselect(FD_SETSIZE, &rd, &wr, NULL, &ts, NULL)
               : select(FD_SETSIZE, &rd, &wr, NULL, &tv),
          1);
    CO_CHECK(FD_ISSET(p[0], &rd));
    CO_CHECK(FD_ISSET(past, &rd)); /* left as it was */
    CO_CHECK(FD_ISSET(past + 1, &wr));
  }
  /* Within the table, not open: EBADF, as ever. */
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(p[0], &rd);
  FD_SET(past - 1, &rd);
  struct timeval tv = {0, 0};
  if (fcntl(past - 1, F_GETFD) < 0) {
    errno = 0;
    CO_EQ(select(FD_SETSIZE, &rd, NULL, NULL, &tv), -1);
    CO_EQ(errno, EBADF);
  }
  io_close_pipe(p);
  return NULL;
}

Test(hook, select_ignores_bits_past_the_descriptor_table, .timeout = 30)
{
  cr_assert_null(past_the_table(NULL)); /* libc's answers */
  rt_assert_clean();
  rt_run(1, past_the_table, NULL);
  rt_assert_clean();
}

/* ---- files that cannot be polled ------------------------------------------------------ */

/* A regular file or /dev/null has no poll method: always ready for reading
 * and writing, never for anything else. poll(2) and select(2) asked for
 * something else wait for their timeout - io_uring's poll refuses them
 * (EINVAL), which is no answer of poll(2)'s. */
static void unpollable(void)
{
  int fds[2] = {open("/proc/self/exe", O_RDONLY | O_CLOEXEC), open("/dev/null", O_RDWR | O_CLOEXEC)};
  for (int i = 0; i < 2; i++) {
    CO_CHECK(fds[i] >= 0);
    struct pollfd pf = {.fd = fds[i], .events = POLLPRI};
    CO_EQ(poll(&pf, 1, 20), 0);
    pf = (struct pollfd){.fd = fds[i], .events = 0};
    CO_EQ(poll(&pf, 1, 20), 0);
    pf = (struct pollfd){.fd = fds[i], .events = POLLIN | POLLPRI};
    CO_EQ(poll(&pf, 1, -1), 1);
    CO_EQ(pf.revents, POLLIN);
    fd_set ex;
    FD_ZERO(&ex);
    FD_SET(fds[i], &ex);
    struct timeval tv = {0, 20000};
    CO_EQ(select(fds[i] + 1, NULL, NULL, &ex, &tv), 0);
    close(fds[i]);
  }
}

static void *unpollable_main(void *arg)
{
  (void)arg;
  unpollable();
  return NULL;
}

Test(hook, poll_waits_for_its_timeout_on_a_file_without_poll, .timeout = 30)
{
  unpollable(); /* libc's answers */
  rt_assert_clean();
  rt_run(1, unpollable_main, NULL);
  rt_assert_clean();
}

/* ---- what sleep returns ----------------------------------------------------------------- */

/* An interrupted sleep(3) returns the whole seconds it has not slept:
 * glibc's rounds the remaining time down (a sleep(1) interrupted half-way
 * returns 0). Ended here by a deadline scope half-way. */
static void *sleep_cut_main(void *arg)
{
  (void)arg;
  int64_t saved = weft_deadline_push(weft_now() + 500 * WEFT_MSEC);
  errno = 0;
  CO_EQ(sleep(1), 0);
  CO_EQ(errno, ETIMEDOUT);
  weft_deadline_pop(saved);
  return NULL;
}

Test(hook, an_interrupted_sleep_returns_the_whole_seconds_left, .timeout = 30)
{
  rt_run(1, sleep_cut_main, NULL);
  rt_assert_clean();
}

/* ---- a caller's signal mask ------------------------------------------------------------ */

static bool sigpipe_pending(void)
{
  sigset_t s;
  return sigpending(&s) == 0 && sigismember(&s, SIGPIPE) == 1;
}

/* ppoll, pselect and epoll_pwait given a signal mask apply it for the
 * wait. A shard thread keeps SIGPIPE blocked, so that a write to a broken
 * pipe is EPIPE and leaves SIGPIPE pending there: a caller's mask that
 * does not name it must not unblock it, or it would kill the process. The
 * pending SIGPIPE is made by a write(2) past the hook, on this thread. */
static void *masked_waits_main(void *arg)
{
  (void)arg;
  int p[2], q[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(io_pipe(q), 0);
  CO_EQ(close(p[0]), 0);
  CO_EQ(syscall(SYS_write, p[1], "x", 1), -1);
  CO_EQ(errno, EPIPE);
  CO_CHECK(sigpipe_pending()); /* the premise */
  sigset_t none;
  sigemptyset(&none);
  struct timespec zero = {0, 0};
  struct pollfd pfd = {.fd = q[0], .events = POLLIN};
  CO_EQ(ppoll(&pfd, 1, &zero, &none), 0);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(q[0], &rd);
  CO_EQ(pselect(q[0] + 1, &rd, NULL, NULL, &zero, &none), 0);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  CO_CHECK(ep >= 0);
  struct epoll_event ev = {.events = EPOLLIN};
  CO_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, q[0], &ev), 0);
  CO_EQ(epoll_pwait(ep, &ev, 1, 0, &none), 0);
  CO_EQ(close(ep), 0);
  /* Still pending, never delivered: take it. */
  CO_CHECK(sigpipe_pending());
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  CO_EQ(sigtimedwait(&pipe_set, NULL, &zero), SIGPIPE);
  CO_EQ(close(p[1]), 0);
  io_close_pipe(q);
  return NULL;
}

Test(hook, a_callers_signal_mask_keeps_sigpipe_blocked, .timeout = 30)
{
  rt_run(1, masked_waits_main, NULL);
  rt_assert_clean();
}

/* ---- fortified code --------------------------------------------------------------------- */

/* Built with _FORTIFY_SOURCE (many distributions' default flags), a
 * read, recv, recvfrom, poll or ppoll whose buffer size the compiler knows
 * calls glibc's checking variant instead: __read_chk and so on. Called
 * here by name, as such code calls them. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *len);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
                size_t fdslen);

struct fortified {
  int kind, fd;
  long result;
};

static void *fortified_wait(void *arg)
{
  struct fortified *f = arg;
  char buf[8];
  struct pollfd pf = {.fd = f->fd, .events = POLLIN};
  if (f->kind == 0)
    f->result = __read_chk(f->fd, buf, 1, sizeof(buf));
  else if (f->kind == 1)
    f->result = __recv_chk(f->fd, buf, 1, sizeof(buf), 0);
  else if (f->kind == 2)
    f->result = __recvfrom_chk(f->fd, buf, 1, sizeof(buf), 0, NULL, NULL);
  else if (f->kind == 3)
    f->result = __poll_chk(&pf, 1, -1, sizeof(pf));
  else
    f->result = __ppoll_chk(&pf, 1, NULL, NULL, sizeof(pf));
  return NULL;
}

/* Each waits on the second shard for a byte written from the first: it
 * must suspend there as a coroutine, as the unfortified call does, not
 * block the shard's thread in the kernel. */
static void *fortified_main(void *arg)
{
  (void)arg;
  for (int kind = 0; kind < 5; kind++) {
    int sv[2];
    CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct fortified f = {.kind = kind, .fd = sv[0], .result = -2};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 1, fortified_wait, &f), 0);
    if (!io_wait_suspended(1))
      rt_fail(__FILE__, __LINE__, "call %d did not suspend its coroutine", kind);
    CO_EQ(write(sv[1], "x", 1), 1);
    CO_EQ(weft_join(t, NULL), 0);
    CO_EQ(f.result, 1);
    close(sv[0]);
    close(sv[1]);
  }
  return NULL;
}

Test(hook, fortified_calls_suspend_the_coroutine, .timeout = 120)
{
  rt_run(2, fortified_main, NULL);
  rt_assert_clean();
}

/* ---- a file position shared ------------------------------------------------------------- */

#define BLOCK 4096
#define WRITERS 4

struct shared_file {
  int fd;
  int id;
  char buf[BLOCK];
  ssize_t result;
};

static void *write_block(void *arg)
{
  struct shared_file *s = arg;
  memset(s->buf, 'a' + s->id, BLOCK);
  s->result = write(s->fd, s->buf, BLOCK);
  return NULL;
}

static void *read_block(void *arg)
{
  struct shared_file *s = arg;
  s->result = read(s->fd, s->buf, BLOCK);
  return NULL;
}

/* read(2) and write(2) on a regular file take the file position in turn
 * (the kernel locks it for each call): coroutines writing one shared
 * descriptor, as threads write a shared log, each get a block of their
 * own; readers of one descriptor read different blocks - also when the
 * data must come from the disk (evicted from the page cache here), while
 * the first read waits. */
static void *shared_position_main(void *arg)
{
  (void)arg;
  char path[] = "/tmp/weft_hook_posXXXXXX";
  int fd = mkstemp(path);
  CO_CHECK(fd >= 0);
  unlink(path);
  struct shared_file w[WRITERS];
  weft_task *t[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    w[i] = (struct shared_file){.fd = fd, .id = i};
    CO_EQ(io_spawn_on(&t[i], 0, write_block, &w[i]), 0);
  }
  for (int i = 0; i < WRITERS; i++) {
    CO_EQ(weft_join(t[i], NULL), 0);
    CO_EQ(w[i].result, BLOCK);
  }
  CO_EQ(lseek(fd, 0, SEEK_CUR), WRITERS * BLOCK);
  int seen = 0; /* one bit per writer whose block is in the file */
  for (int b = 0; b < WRITERS; b++) {
    char c;
    CO_EQ(pread(fd, &c, 1, (off_t)b * BLOCK), 1);
    if (c >= 'a' && c < 'a' + WRITERS)
      seen |= 1 << (c - 'a');
  }
  CO_EQ(seen, (1 << WRITERS) - 1);

  CO_EQ(fsync(fd), 0);
  CO_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  CO_EQ(lseek(fd, 0, SEEK_SET), 0);
  struct shared_file r[2];
  for (int i = 0; i < 2; i++) {
    r[i] = (struct shared_file){.fd = fd, .id = i};
    CO_EQ(io_spawn_on(&t[i], 0, read_block, &r[i]), 0);
  }
  for (int i = 0; i < 2; i++) {
    CO_EQ(weft_join(t[i], NULL), 0);
    CO_EQ(r[i].result, BLOCK);
  }
  CO_CHECK(r[0].buf[0] != r[1].buf[0]);
  CO_EQ(lseek(fd, 0, SEEK_CUR), 2 * BLOCK);
  close(fd);
  return NULL;
}

Test(hook, coroutines_sharing_a_file_position_take_it_in_turn, .timeout = 30)
{
  rt_run(1, shared_position_main, NULL);
  rt_assert_clean();
}

/* O_NONBLOCK means nothing to a regular file (read(2) waits for the disk
 * all the same): a file opened with it is read and written as one opened
 * without, on the blocking pool - one job per call - not on the shard's
 * thread, which would wait for the disk. */
static void *nonblocking_file_main(void *arg)
{
  (void)arg;
  char path[] = "/tmp/weft_hook_nbXXXXXX";
  int fd = mkstemp(path);
  CO_CHECK(fd >= 0);
  unlink(path);
  CO_EQ(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
  char buf[8] = "abcdefgh";
  struct iovec iov = {.iov_base = buf, .iov_len = 4};
  uint64_t jobs = io_stats().pool_jobs;
  CO_EQ(write(fd, buf, 4), 4);
  CO_EQ(writev(fd, &iov, 1), 4);
  CO_EQ(io_stats().pool_jobs, jobs + 2);
  CO_EQ(lseek(fd, 0, SEEK_SET), 0);
  memset(buf, 0, sizeof(buf));
  iov.iov_base = buf + 4;
  CO_EQ(read(fd, buf, 4), 4);
  CO_EQ(readv(fd, &iov, 1), 4);
  CO_EQ(io_stats().pool_jobs, jobs + 4);
  CO_CHECK(memcmp(buf, "abcdabcd", 8) == 0);
  close(fd);
  return NULL;
}

Test(hook, a_nonblocking_regular_file_is_read_on_the_pool_too, .timeout = 30)
{
  rt_run(1, nonblocking_file_main, NULL);
  rt_assert_clean();
}

/* ---- a file with nothing to read yet ------------------------------------------------------ */

/* Some regular files can have nothing to read for as long as they like:
 * /proc/kmsg until the kernel logs something, a tracefs trace_pipe, a FUSE
 * file whose server says when it is readable. A hooked read there is a
 * wait like a read of a pipe, which a deadline scope or a cancel ends -
 * also now that the transfer runs on the blocking pool (see the shared
 * file position above), where nothing can end it once it started.
 * /proc/kmsg needs CAP_SYSLOG, and is read only while the log holds
 * nothing unread (a read would take it from the system log); a message
 * the kernel logs meanwhile ends a read too (1). */
static void *read_kmsg(void *arg)
{
  char buf[256];
  errno = 0;
  ssize_t r = read(*(int *)arg, buf, sizeof(buf));
  return (void *)(intptr_t)(r < 0 ? -errno : 1);
}

static void *kmsg_main(void *arg)
{
  int64_t saved = weft_deadline_push(weft_now() + 20 * WEFT_MSEC);
  intptr_t r = (intptr_t)read_kmsg(arg);
  weft_deadline_pop(saved);
  CO_CHECK(r == -ETIMEDOUT || r == 1);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, read_kmsg, arg), 0);
  CO_CHECK(io_wait_suspended(1));
  CO_EQ(weft_cancel(t), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_CHECK((intptr_t)v == -ECANCELED || (intptr_t)v == 1);
  return NULL;
}

Test(hook, a_read_of_a_file_with_nothing_to_read_ends_at_a_deadline_or_cancel, .timeout = 30)
{
  int fd = open("/proc/kmsg", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    cr_skip_test("/proc/kmsg cannot be read here: %s", strerror(errno));
  if (klogctl(9 /* SYSLOG_ACTION_SIZE_UNREAD */, NULL, 0) != 0) {
    close(fd);
    cr_skip_test("the system log holds unread messages, which a read would take");
  }
  rt_run(1, kmsg_main, &fd);
  close(fd);
  rt_assert_clean();
}
