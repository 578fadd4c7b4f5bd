/* SPDX-License-Identifier: MIT */
/*
 * libweft-hook, the waits for readiness: poll, ppoll, select, pselect,
 * epoll_wait and epoll_pwait (and the fortified __poll_chk and __ppoll_chk)
 * in a coroutine wait as weft does (weft_poll),
 * with libc's results. As poll(2) and select(2), a wait for one descriptor
 * holds its file: a close(2) of the descriptor meanwhile does not end it,
 * and the file's wake-up finds the descriptor closed (POLLNVAL; ready, to
 * select). A wait for several does not (see watch): a close(2) of one of
 * them takes its file out of the wait, which goes on to its timeout or
 * another descriptor's event. The rest of the hook, and what it promises,
 * is in hook.c.
 */
#include "hook_internal.h"

#include <signal.h>

NEXT(int, poll, (struct pollfd *, nfds_t, int))
NEXT(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))
NEXT(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *))
NEXT(int, pselect,
     (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *))
NEXT(int, epoll_wait, (int, struct epoll_event *, int, int))
NEXT(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *))

/* ---- a caller's signal mask ---------------------------------------------------------- */

/* ppoll, pselect and epoll_pwait given a signal mask are libc's own calls,
 * which apply the mask for the wait. On a shard thread SIGPIPE stays
 * blocked (shard.c): a write of weft's to a broken pipe left it pending on
 * the thread, where it is never delivered - and a caller's mask, which
 * knows nothing of it, would unblock it and let it kill the process. So
 * the mask the kernel gets is the caller's with SIGPIPE added. The mask is
 * read here, in user space. */
static const sigset_t *keeping_sigpipe(const sigset_t *mask, sigset_t *copy)
{
  if (!mask || sigismember(mask, SIGPIPE) == 1)
    return mask;
  *copy = *mask;
  sigaddset(copy, SIGPIPE);
  return copy;
}

/* ---- poll and select ------------------------------------------------------------------ */

/* The waits below take an absolute deadline, WEFT_NO_DEADLINE for none. */
static int64_t deadline_in_ms(int timeout)
{
  return timeout < 0 ? WEFT_NO_DEADLINE : after((int64_t)timeout * WEFT_MSEC);
}

/* ppoll's and pselect's timeout (NULL: none) as a deadline. */
static int64_t deadline_in_ts(const struct timespec *ts)
{
  return ts ? after(timespec_ns(ts)) : WEFT_NO_DEADLINE;
}

/* weft_poll_dl for the calls below: the ready events, 0 once the call's own
 * timeout has passed, or -errno - -ETIMEDOUT only when a deadline scope
 * ended the wait first. */
static int wait_ready(int fd, short events, int64_t deadline)
{
  int r;
  do /* io_uring's poll never fails with EBUSY: that is a full SQ */
    r = weft_poll_dl(fd, (unsigned short)events, deadline);
  while (sq_was_full(r));
  if (r == -ETIMEDOUT && deadline >= 0 && weft_now() >= deadline)
    return 0;
  return r;
}

/* weft's rule for a wait that may wait, where the kernel is asked without
 * waiting first (several descriptors, epoll): a cancelled task, or a
 * deadline scope already over, fails it at once - ready or not, as
 * weft_poll does for one descriptor (poll_one). Without this the result of
 * a cancelled task's poll hung on how many descriptors it gave. A call
 * whose own timeout has passed (0) cannot wait: the kernel's answer, as
 * poll_one gives it. 0, -ECANCELED or -ETIMEDOUT. */
static int cannot_start(int64_t deadline)
{
  if (deadline >= 0 && deadline <= weft_now())
    return 0;
  int r = weft_sleep(0); /* -ECANCELED in a cancelled task, else 0 */
  if (r < 0)
    return r;
  int64_t scope = weft_deadline();
  return scope >= 0 && scope <= weft_now() ? -ETIMEDOUT : 0;
}

/* No descriptors: poll(2) is a sleep. */
static int poll_nothing(int64_t deadline)
{
  for (;;) {
    int r = deadline < 0 ? weft_sleep(3600 * WEFT_SEC) : weft_sleep_until(deadline);
    if (r < 0)
      return r;
    if (deadline >= 0)
      return 0;
  }
}

/* A wait without an epoll instance, where none can be had or it cannot
 * hold every descriptor (EMFILE, ENFILE, ENOMEM, ENOSPC): poll(2) never
 * fails for that, nor stops watching a descriptor. So ask it again and
 * again, without waiting, with sleeps between that grow from 1 ms to
 * 64 ms. The number of ready entries, 0 at the deadline, or -errno (a
 * cancel, a deadline scope, no room for a timer). */
static int poll_by_looking(struct pollfd *fds, nfds_t n, int64_t deadline)
{
  int64_t pause = WEFT_MSEC;
  for (;;) {
    int64_t until = after(pause);
    int r = weft_sleep_until(deadline >= 0 && deadline < until ? deadline : until);
    if (r < 0)
      return r;
    r = (int)CALL_NEXT(poll, fds, n, 0);
    if (r != 0)
      return r < 0 ? -errno : r;
    if (deadline >= 0 && deadline <= weft_now())
      return 0;
    if (pause < 64 * WEFT_MSEC)
      pause *= 2;
  }
}

/* One descriptor, not ready at the first look: a weft_poll, then poll(2)
 * without waiting says what is ready - as poll(2), woken, looks at its
 * descriptors again. io_uring's poll holds the file it waits for, as
 * poll(2) does: a close(2) of the descriptor meanwhile does not end the
 * wait, and the file's wake-up then finds the descriptor closed (POLLNVAL)
 * or another file there; if that one is not ready, the wait goes on. */
static int poll_one(struct pollfd *p, int64_t deadline)
{
  for (;;) {
    p->revents = 0;
    int r = wait_ready(p->fd, p->events, deadline);
    if (r == -EBADF) {
      p->revents = POLLNVAL;
      return 1;
    }
    /* weft_poll's own wait in an epoll instance (a socket shut down by its
     * peer, say) had none */
    if (r == -EMFILE || r == -ENFILE || r == -ENOSPC)
      return poll_by_looking(p, 1, deadline);
    if (r <= 0)
      return r;
    r = (int)CALL_NEXT(poll, p, 1, 0);
    if (r != 0)
      return r < 0 ? -errno : r;
    if (deadline >= 0 && deadline <= weft_now())
      return 0;
  }
}

/* Takes every event ready in epoll instance ep, so that it is readable
 * again only after a new one (its entries are edge-triggered). */
static void drain(int ep)
{
  struct epoll_event ev[32];
  while (CALL_NEXT(epoll_wait, ep, ev, 32, 0) == 32)
    ;
}

/* Adds fds[i] to ep. An epoll instance holds no file, unlike poll(2): a
 * close(2) of the descriptor while the poll waits takes the file out of
 * the wait (where it was the file's last descriptor), which goes on to
 * another descriptor's event or its timeout, where poll(2) would keep it
 * and say POLLNVAL once it woke. Holding a duplicate of each descriptor
 * would match that, for three more system calls per descriptor on every
 * wait (and a duplicate's close would drop the process's record locks on
 * a file): too much for code that closes what another thread polls, which
 * poll(2) and select(2) leave unspecified. Entries are edge-triggered: a
 * wake-up of a file whose descriptor now names another file, not ready,
 * must not keep ep readable for ever. No room (ENOMEM, or ENOSPC: the
 * user's fs.epoll.max_user_watches): *unwatched. */
static void watch(int ep, const struct pollfd *fds, nfds_t i, bool *unwatched)
{
  int fd = fds[i].fd;
  if (fd < 0)
    return;
  struct epoll_event ev = {.events = (uint32_t)(unsigned short)fds[i].events | EPOLLET};
  /* Refused (EPERM: a regular file, always ready) or gone (EBADF): the
   * next poll(2) reports it. A descriptor listed twice waits for the
   * events of every entry. */
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
    if (errno == ENOMEM || errno == ENOSPC)
      *unwatched = true;
    if (errno != EEXIST)
      return;
    for (nfds_t k = 0; k < i; k++)
      if (fds[k].fd == fd)
        ev.events |= (uint32_t)(unsigned short)fds[k].events;
    epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  }
}

/* Several, none ready at the first look: wait in weft_poll for an epoll
 * instance holding them all (readable once any of them has an event), and
 * ask again - as poll(2), woken, looks at its descriptors again. */
static int poll_many(struct pollfd *fds, nfds_t n, int64_t deadline)
{
  int r = 0;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    return poll_by_looking(fds, n, deadline);
  bool unwatched = false;
  for (nfds_t i = 0; i < n; i++)
    watch(ep, fds, i, &unwatched);
  if (unwatched)
    r = poll_by_looking(fds, n, deadline);
  while (!unwatched) {
    r = wait_ready(ep, POLLIN, deadline);
    if (r <= 0)
      break;
    drain(ep); /* before the look: what comes after it wakes ep again */
    r = (int)CALL_NEXT(poll, fds, n, 0);
    if (r != 0) {
      if (r < 0)
        r = -errno;
      break;
    }
  }
  close(ep);
  return r;
}

/* Some descriptors: ask poll(2) without waiting first, which takes the
 * array as libc's poll does - nothing here reads or writes it before: one
 * it refuses (NULL, unreadable, more entries than the open-file limit) is
 * EFAULT or EINVAL, and left as it was. Then a cancel or a passed deadline
 * scope fails the call, ready or not (cannot_start), with every revents
 * 0, as an interrupted poll(2) leaves them. */
static int poll_some(struct pollfd *fds, nfds_t n, int64_t deadline)
{
  int r = (int)CALL_NEXT(poll, fds, n, 0);
  if (r < 0)
    return -errno;
  int c = cannot_start(deadline);
  if (c < 0) {
    for (nfds_t i = 0; i < n; i++)
      fds[i].revents = 0;
    return c;
  }
  if (r != 0 || (deadline >= 0 && deadline <= weft_now()))
    return r;
  return n == 1 && fds[0].fd >= 0 ? poll_one(&fds[0], deadline) : poll_many(fds, n, deadline);
}

/* poll(2) in a coroutine: the number of ready entries, or -errno. */
static int poll_until(struct pollfd *fds, nfds_t n, int64_t deadline)
{
  int saved = errno;
  int r = n == 0 ? poll_nothing(deadline) : poll_some(fds, n, deadline);
  errno = saved;
  return r;
}

HOOK int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(poll, fds, n, timeout);
  return (int)libc_result(poll_until(fds, n, deadline_in_ms(timeout)));
}

/* Without a signal mask ppoll is poll with a timespec (left as it is, as
 * glibc's ppoll leaves it). */
HOOK int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(ppoll, fds, n, ts, mask);
  sigset_t copy;
  if (mask)
    return (int)CALL_NEXT(ppoll, fds, n, ts, keeping_sigpipe(mask, &copy));
  if (ts && !timespec_valid(ts)) {
    errno = EINVAL;
    return -1;
  }
  return (int)libc_result(poll_until(fds, n, deadline_in_ts(ts)));
}

/* The _FORTIFY_SOURCE variants (see hook.c): glibc's check - the array
 * holds n entries - then the hooked call. */
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
                size_t fdslen);

NEXT(int, __poll_chk, (struct pollfd *, nfds_t, int, size_t))
NEXT(int, __ppoll_chk,
     (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t))

HOOK int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
  if (fdslen / sizeof(*fds) < n)
    return (int)CALL_NEXT(__poll_chk, fds, n, timeout, fdslen);
  return poll(fds, n, timeout);
}

HOOK int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
                     size_t fdslen)
{
  if (fdslen / sizeof(*fds) < n)
    return (int)CALL_NEXT(__ppoll_chk, fds, n, ts, mask, fdslen);
  return ppoll(fds, n, ts, mask);
}

/* The sets as the kernel reads them: bit arrays of unsigned longs, as long
 * as nfds asks - past FD_SETSIZE too, for a program that allocates bigger
 * sets (FD_ISSET and FD_CLR would refuse those descriptors). */
#define SET_BITS (8 * sizeof(unsigned long))

static bool in_set(const fd_set *s, int fd)
{
  const unsigned long *w = (const unsigned long *)(const void *)s;
  return s && (w[(unsigned)fd / SET_BITS] >> ((unsigned)fd % SET_BITS) & 1);
}

/* Leaves fd in set s only if it is ready for what s asks; 1 if it stays. */
static int keep(fd_set *s, int fd, bool ready)
{
  if (!in_set(s, fd))
    return 0;
  if (!ready)
    ((unsigned long *)(void *)s)[(unsigned)fd / SET_BITS] &= ~(1ul << ((unsigned)fd % SET_BITS));
  return ready;
}

/* The size of the process's descriptor table ("FDSize" in
 * /proc/self/status), or -1. */
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

/* No descriptor lies at or past this: the descriptor table's size or, if
 * that cannot be had, the hard open-file limit; -1 if neither can. errno
 * is left as it was. */
static long fd_bound(void)
{
  int saved = errno;
  long size = fd_table_size();
  struct rlimit rl;
  if (size < 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0)
    size = rl.rlim_max < (rlim_t)INT_MAX ? (long)rl.rlim_max : INT_MAX;
  errno = saved;
  return size;
}

/* select's nfds as Linux takes it: negative is EINVAL, and past the
 * descriptor table it is cut down to the table's size (fd_bound) - no
 * descriptor lies beyond, and the caller's sets need not be any longer.
 * Only an nfds past FD_SETSIZE asks here (a file read); one within it is
 * cut by select_until, and only if a descriptor of the sets is not open.
 * -EINVAL or the count. */
static int select_count(int nfds)
{
  if (nfds < 0)
    return -EINVAL;
  if (nfds <= FD_SETSIZE)
    return nfds;
  long size = fd_bound();
  return size >= 0 && size < nfds ? (int)size : nfds;
}

/* Linux's select(2) looks at no descriptor past the descriptor table: bits
 * set there in the caller's sets are neither EBADF nor ready, and are left
 * as they were. Takes such entries, whose poll said POLLNVAL, out of
 * fds[0, n) (their bits stay untouched: only the entries' are written
 * back). The entries left. */
static nfds_t within_table(struct pollfd *fds, nfds_t n)
{
  long size = fd_bound();
  if (size < 0)
    return n;
  nfds_t k = 0;
  for (nfds_t i = 0; i < n; i++)
    if (!(fds[i].revents & POLLNVAL) || fds[i].fd < size)
      fds[k++] = fds[i];
  return k;
}

/* How many descriptors below nfds are in any of the sets. */
static size_t select_wanted(int nfds, const fd_set *rd, const fd_set *wr, const fd_set *ex)
{
  const fd_set *sets[3] = {rd, wr, ex};
  size_t words = ((size_t)nfds + SET_BITS - 1) / SET_BITS, n = 0;
  for (size_t i = 0; i < words; i++) {
    unsigned long any = 0;
    for (int k = 0; k < 3; k++)
      if (sets[k])
        any |= ((const unsigned long *)(const void *)sets[k])[i];
    if (i == words - 1 && nfds % SET_BITS)
      any &= (1ul << (nfds % SET_BITS)) - 1;
    n += (size_t)__builtin_popcountl(any);
  }
  return n;
}

/* An entry select_until no longer waits for is kept as -1 - fd, which
 * poll(2) skips (revents 0); its descriptor, either way. */
static int entry_fd(const struct pollfd *p)
{
  return p->fd < 0 ? -1 - p->fd : p->fd;
}

/* Linux's mapping of poll events to the three sets: whether entry p is
 * ready for something its descriptor's sets ask; with `clear`, the sets
 * keep its descriptor only where it is. The number of sets it stays in. */
static int selected(const struct pollfd *p, fd_set *rd, fd_set *wr, fd_set *ex, bool clear)
{
  int fd = entry_fd(p);
  short re = p->revents;
  bool r = in_set(rd, fd) && (re & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
  bool w = in_set(wr, fd) && (re & (POLLOUT | POLLERR | POLLNVAL));
  bool x = in_set(ex, fd) && (re & (POLLPRI | POLLNVAL));
  if (clear)
    return keep(rd, fd, r) + keep(wr, fd, w) + keep(ex, fd, x);
  return r + w + x;
}

/* select(2) as poll, with EBADF for a descriptor that is not open. poll
 * reports a hang-up or an error whatever was asked; select(2) counts them
 * only where its mapping puts them, and goes on waiting for a descriptor
 * that has nothing else - asked for writing or exceptional conditions
 * only, say, on a hung-up pipe. So does this, without such descriptors
 * (their state lasts: waiting for them again would come back at once). */
static int select_until(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, int64_t deadline)
{
  size_t want = select_wanted(nfds, rd, wr, ex);
  struct pollfd *fds = malloc(sizeof(*fds) * (want ? want : 1));
  if (!fds)
    return -ENOMEM;
  nfds_t n = 0;
  for (int fd = 0; fd < nfds && n < want; fd++) {
    short ev = (short)((in_set(rd, fd) ? POLLIN : 0) | (in_set(wr, fd) ? POLLOUT : 0) |
                       (in_set(ex, fd) ? POLLPRI : 0));
    if (ev)
      fds[n++] = (struct pollfd){.fd = fd, .events = ev};
  }
  /* Linux's select(2) first finds every descriptor of the sets open, else
   * EBADF - but for those past the descriptor table (within_table); one
   * closed while it waits (the wait holds the file, see poll_one) is then
   * ready in every set it is in. */
  int r = (int)CALL_NEXT(poll, fds, n, 0);
  if (r < 0)
    r = -errno;
  bool closed = false;
  for (nfds_t i = 0; r > 0 && i < n; i++)
    closed |= (fds[i].revents & POLLNVAL) != 0;
  if (closed)
    n = within_table(fds, n);
  for (nfds_t i = 0; closed && i < n; i++)
    if (fds[i].revents & POLLNVAL)
      r = -EBADF;
  while (r >= 0) {
    r = poll_until(fds, n, deadline);
    int any = 0;
    for (nfds_t i = 0; r > 0 && i < n; i++)
      any += selected(&fds[i], rd, wr, ex, false);
    if (r <= 0 || any)
      break;
    for (nfds_t i = 0; i < n; i++)
      if (fds[i].revents)
        fds[i].fd = -1 - fds[i].fd;
  }
  if (r >= 0) {
    r = 0;
    for (nfds_t i = 0; i < n; i++)
      r += selected(&fds[i], rd, wr, ex, true);
  }
  free(fds);
  return r;
}

HOOK int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(select, nfds, rd, wr, ex, tv);
  struct timespec ts = {0, 0};
  if (tv && tv->tv_usec < 0) {
    ts.tv_sec = -1; /* invalid, as it is to select(2) */
  } else if (tv) {
    /* Linux takes a tv_usec of a second or more as whole seconds of it. */
    ts.tv_sec = tv->tv_sec;
    if (ts.tv_sec <= (time_t)(INT64_MAX / WEFT_SEC))
      ts.tv_sec += tv->tv_usec / 1000000;
    ts.tv_nsec = tv->tv_usec % 1000000 * 1000;
  }
  nfds = select_count(nfds);
  if (nfds < 0 || (tv && !timespec_valid(&ts))) {
    errno = EINVAL;
    return -1;
  }
  int64_t deadline = deadline_in_ts(tv ? &ts : NULL);
  int r = select_until(nfds, rd, wr, ex, deadline);
  if (tv) {
    int64_t left = left_until(deadline);
    tv->tv_sec = (time_t)(left / WEFT_SEC);
    tv->tv_usec = (suseconds_t)(left % WEFT_SEC / WEFT_USEC);
  }
  return (int)libc_result(r);
}

/* Without a signal mask pselect is select with a timespec, left as it is. */
HOOK int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
                 const sigset_t *mask)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(pselect, nfds, rd, wr, ex, ts, mask);
  sigset_t copy;
  if (mask)
    return (int)CALL_NEXT(pselect, nfds, rd, wr, ex, ts, keeping_sigpipe(mask, &copy));
  nfds = select_count(nfds);
  if (nfds < 0 || (ts && !timespec_valid(ts))) {
    errno = EINVAL;
    return -1;
  }
  return (int)libc_result(select_until(nfds, rd, wr, ex, deadline_in_ts(ts)));
}

/* ---- epoll ---------------------------------------------------------------------------- */

/* epoll_wait(2) in a coroutine: unless a cancel or a passed deadline scope
 * fails it first (cannot_start), ask without waiting (which also checks the
 * arguments); if nothing is ready, wait in weft_poll for the epoll instance
 * itself - readable once any descriptor in it has an event - and ask again.
 *
 * Unlike epoll_wait(2), which keeps the instance it was given for the
 * whole call, the second look goes by the descriptor: an instance whose
 * descriptor another coroutine or thread closes meanwhile is EBADF once an
 * event wakes the wait (epoll_wait(2) returns the event), or the look
 * reaches whatever the number names by then. Holding a duplicate would
 * cost two more system calls on every wait of an event loop, for code
 * that closes an epoll instance it still waits on. */
static int epoll_until(int ep, struct epoll_event *ev, int max, int64_t deadline)
{
  int r = cannot_start(deadline);
  if (r < 0)
    return r;
  int saved = errno;
  for (;;) {
    r = (int)CALL_NEXT(epoll_wait, ep, ev, max, 0);
    if (r != 0) {
      if (r < 0)
        r = -errno;
      break;
    }
    if (deadline >= 0 && deadline <= weft_now())
      break;
    r = wait_ready(ep, POLLIN, deadline);
    if (r <= 0)
      break;
  }
  errno = saved;
  return r;
}

HOOK int epoll_wait(int ep, struct epoll_event *ev, int max, int timeout)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(epoll_wait, ep, ev, max, timeout);
  return (int)libc_result(epoll_until(ep, ev, max, deadline_in_ms(timeout)));
}

HOOK int epoll_pwait(int ep, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
  if (!in_coroutine())
    return (int)CALL_NEXT(epoll_pwait, ep, ev, max, timeout, mask);
  sigset_t copy;
  if (mask)
    return (int)CALL_NEXT(epoll_pwait, ep, ev, max, timeout, keeping_sigpipe(mask, &copy));
  return (int)libc_result(epoll_until(ep, ev, max, deadline_in_ms(timeout)));
}
