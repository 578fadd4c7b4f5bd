/* SPDX-License-Identifier: MIT */
/*
 * weft_listener: one multishot accept (IORING_ACCEPT_MULTISHOT, kernel 5.19)
 * kept armed on the opening task's shard; accepted descriptors queue here
 * until weft_listener_accept takes them.
 *
 * The multishot op is an op record (lib/op.h) with its own on_cqe, like the
 * extension API's multishot ops (lib/uring.c): it is not the task's cur_op,
 * so weft_cancel and deadlines end the *wait* in accept, not the op. The op
 * ends (a CQE without IORING_CQE_F_MORE) on an accept error such as -EMFILE,
 * on CQ overflow, or when we cancel it; the next accept that finds the queue
 * empty arms it again. A Unix-domain listener has a second op armed with
 * it, a poll for POLLRDHUP: a shutdown for reading would leave its accept
 * waiting for ever (see arm). The queue is bounded: at QUEUE_MAX the op is cancelled
 * until the queue has been drained, so a server that stops accepting does
 * not take every connection of its backlog into its descriptor table.
 *
 * Threads: everything here runs on the listener's shard - the CQEs are
 * reaped there, and its opener stays there (task->pinned_ops), as does any
 * task while it waits in accept or close - so the listener needs no lock;
 * accept must be called on that shard (by the opener, or by another task on
 * it: the opener is referenced until the close, which may come after it
 * returned), and a close from anywhere else is done there by a helper task.
 * Memory: the struct is freed only after the op's last CQE, which close
 * waits for even in a cancelled task, and after every task in accept has
 * left it: close wakes the one waiting there (-EBADF) and waits for it to
 * return, so a waiter resumed later never reads a freed listener; an
 * accept begun while close waits returns at once. A listener nobody
 * closed is cancelled once every task has returned (weft__listener_sweep)
 * and freed after its shard's thread left, so it cannot keep the runtime
 * from stopping.
 */
#include "net_internal.h"

#include "../coro/fault.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#define QUEUE_MAX 1024u

struct weft_listener {
  weft__op op;              /* first: user_data of the SQE points here */
  weft__op hup;             /* a Unix-domain socket's poll for POLLRDHUP */
  int fd;                   /* the listening socket (not ours) */
  int flags;                /* accept4 flags, SOCK_CLOEXEC included */
  weft_task *owner;         /* the opener, kept on its shard meanwhile (and
                               referenced: another task may close l) */
  weft__shard *sh;          /* the shard whose ring has the op */
  bool armed;               /* the op is in flight (its last CQE is due) */
  bool unix_domain;         /* AF_UNIX: hup watches for a shutdown (see arm) */
  bool hup_armed;           /* hup is in flight */
  bool oneshot;             /* no multishot accept: weft_accept_dl each time */
  bool nomem;               /* a connection was dropped: no memory to queue it */
  bool seen;                /* a CQE of the current arming came */
  uint64_t oneshot_accepts; /* accepts made one at a time (weft_accept_dl): lets
                               the tests see the fallback ran (net_internal.h) */
  rlim_t nofile;            /* RLIMIT_NOFILE when it was armed (see on_accept_cqe) */
  int *q;                   /* accepted fds (>= 0) and accept errors (< 0) */
  unsigned head, count, cap;
  weft__waiter *waiter;     /* the task waiting in accept, if any */
  weft__waiter *closer;     /* the close waiting for the op's end and the users */
  weft_task *acceptor;      /* the task in weft_accept_dl (one at a time), if any */
  unsigned users;           /* tasks inside weft_listener_accept (on l's shard):
                               0 or 1, a second one is refused */
  bool closing;             /* weft_listener_close has begun: accept gives -EBADF */
  weft_listener *sh_prev, *sh_next; /* on sh->listeners while open */
};

static void shard_link(weft_listener *l)
{
  WEFT__DLIST_PUSH(l->sh->listeners, l, sh_prev, sh_next);
}

static void shard_unlink(weft_listener *l)
{
  WEFT__DLIST_UNLINK(l->sh->listeners, l, sh_prev, sh_next);
}

static bool push(weft_listener *l, int v)
{
  if (l->count == l->cap) {
    unsigned cap = l->cap ? l->cap * 2 : 16;
    int *q = weft__malloc(cap * sizeof(*q));
    if (!q)
      return false;
    for (unsigned i = 0; i < l->count; i++)
      q[i] = l->q[(l->head + i) % l->cap];
    free(l->q);
    l->q = q;
    l->cap = cap;
    l->head = 0;
  }
  l->q[(l->head + l->count) % l->cap] = v;
  l->count++;
  return true;
}

static int pop(weft_listener *l)
{
  int v = l->q[l->head];
  l->head = (l->head + 1) % l->cap;
  l->count--;
  return v;
}

/* No lock: the op is never a task's cur_op, so only this shard's thread
 * ever touches its cancel state. */
static void request_cancel(weft_listener *l)
{
  if (l->armed && !l->op.cancel_requested)
    weft__op_queue_cancel(&l->op);
}

/* The same for the hup poll, and both: the listener is closing or swept. */
static void request_cancel_all(weft_listener *l)
{
  request_cancel(l);
  if (l->hup_armed && !l->hup.cancel_requested)
    weft__op_queue_cancel(&l->hup);
}

/* RLIMIT_NOFILE's soft limit now. */
static rlim_t nofile_now(void)
{
  int saved = errno;
  struct rlimit rl;
  rlim_t v = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 0;
  errno = saved;
  return v;
}

/* Wakes the task waiting in *slot, if any (a timeout or a cancel may have
 * claimed it first: it then clears the slot itself). */
static void wake(weft__waiter **slot)
{
  weft__waiter *w = *slot;
  if (w && weft__waiter_claim(w)) {
    *slot = NULL;
    weft__waiter_complete(w, 0);
  }
}

/* Whether fd is a listening socket now (SO_ACCEPTCONN); errno is left as
 * it was. */
static bool listening(int fd)
{
  int saved = errno, on = 0;
  socklen_t len = sizeof(on);
  bool r = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on;
  errno = saved;
  return r;
}

/* The op's CQEs, on the listener's shard. */
static void on_accept_cqe(weft__shard *sh, weft__op *op, int res, unsigned flags)
{
  weft_listener *l = (weft_listener *)(void *)op;
  bool more = flags & IORING_CQE_F_MORE;
  if (!more && res == -EINVAL && !l->seen && listening(l->fd)) {
    /* Refused at once, before any connection, by a socket that listens: a
     * kernel without multishot accept. (One that stopped listening since
     * the open - a TCP listener shut down for reading - gets -EINVAL from
     * any accept: an error of the socket, reported as such.) */
    l->oneshot = true;
  } else if (res == -ECANCELED && !more) {
    /* Our own cancel (close, or a full queue): nothing to report. */
  } else if (res == -EMFILE && !more && nofile_now() > l->nofile) {
    /* The kernel took the descriptor limit when the op was armed, and it
     * has been raised since: not an error any more - arming again (the
     * next accept does) takes the new limit. */
  } else if (!push(l, res)) {
    if (res >= 0) {
      int saved = errno;
      close(res); /* the client sees a reset rather than a leak here */
      errno = saved;
    }
    l->nomem = true;
  }
  l->seen = true; /* an -EINVAL from now on is a real error */
  if (!more) {
    l->armed = false;
    weft__op_ended(sh, op);
  } else if (l->count >= QUEUE_MAX) {
    request_cancel(l);
  }
  wake(&l->waiter);
  if (!more)
    wake(&l->closer);
}

/* Whether a Unix-domain socket fd was shut down for reading (POLLRDHUP);
 * errno is left as it was. */
static bool read_shut(int fd)
{
  int saved = errno;
  struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
  bool r = poll(&pf, 1, 0) == 1 && (pf.revents & POLLRDHUP);
  errno = saved;
  return r;
}

/* The hup poll's CQE, on the listener's shard: the socket may have been
 * shut down. The accept is cancelled; the accept that arms it again (see
 * arm) tells. */
static void on_hup_cqe(weft__shard *sh, weft__op *op, int res, unsigned flags)
{
  (void)flags;
  weft_listener *l = WEFT__CONTAINER_OF(op, weft_listener, hup);
  l->hup_armed = false;
  weft__op_ended(sh, op);
  if (res >= 0 && !l->closing)
    request_cancel(l);
  wake(&l->closer);
}

/* Arms the multishot accept (the calling task is on l's shard). A
 * Unix-domain listener shut down for reading still listens, but a
 * multishot accept of it never ends (the kernel's non-blocking attempts
 * find nothing, and nothing comes): so its shutdown is looked for here -
 * -EINVAL, as accept(2) answers then - and, while the accept is armed,
 * watched for by the hup poll, which cancels the accept when it fires. */
static int arm(weft_listener *l)
{
  weft__op *op = &l->op;
  if (l->unix_domain) {
    if (read_shut(l->fd))
      return -EINVAL;
    if (!l->hup_armed) {
      struct io_uring_sqe *sqe = weft__op_begin_multishot(&l->hup);
      if (!sqe)
        return l->hup.res;
      io_uring_prep_poll_add(sqe, l->fd, POLLRDHUP);
      l->hup.on_cqe = on_hup_cqe;
      l->hup_armed = true;
      weft__op_armed(&l->hup);
    }
  }
  rlim_t nofile = nofile_now(); /* before: the kernel reads it at the SQE's prep */
  /* The op outlives any deadline scope of the task arming it: no timer. */
  struct io_uring_sqe *sqe = weft__op_begin_multishot(op);
  if (!sqe)
    return op->res;
  io_uring_prep_multishot_accept(sqe, l->fd, NULL, NULL, l->flags);
  op->on_cqe = on_accept_cqe;
  l->seen = false;
  l->nofile = nofile;
  l->armed = true;
  weft__op_armed(op);
  return 0;
}

/* Waits in *slot (l->waiter or l->closer) until it is woken - by
 * on_accept_cqe, a close or the last task leaving accept - the deadline
 * passes or (if cancellable) the task is cancelled. The task is held on
 * l's shard while it waits, as the opener is: woken, a stealable task
 * would otherwise be free to resume on another shard, where l's queue, op
 * and list are not its to touch. */
static int wait_in(weft__waiter **slot, int64_t deadline, bool cancellable)
{
  weft_task *t = weft__task_self();
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = !cancellable;
  *slot = &w;
  if (t)
    t->pinned_ops++;
  int r = weft__waiter_wait(&w, deadline);
  if (t)
    t->pinned_ops--;
  if (*slot == &w)
    *slot = NULL; /* timed out or cancelled: the CQE path did not take it */
  return r;
}

int weft_listener_open(weft_listener **out, int fd, int flags)
{
  if (!out || (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)))
    return -EINVAL;
  weft_task *t = weft__task_self();
  if (!t)
    return -EPERM;
  /* Here, not only in arm(): a listener that accepts one at a time (no
   * multishot accept) arms nothing now, and must fail the same. */
  int r = weft__may_wait(t, weft__deadline_for(t, WEFT_NO_DEADLINE));
  if (r < 0)
    return r;
  /* A socket that is not listening would make the first CQE -EINVAL, which
   * is also how a kernel without multishot accept answers: tell them apart
   * here. */
  int on = 0;
  socklen_t len = sizeof(on);
  r = weft_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len);
  if (r < 0)
    return r;
  if (!on)
    return -EINVAL;
  int domain = 0;
  len = sizeof(domain);
  r = weft_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
  if (r < 0)
    return r;
  weft_listener *l = weft__calloc(1, sizeof(*l));
  if (!l)
    return -ENOMEM;
  l->fd = fd;
  l->unix_domain = domain == AF_UNIX;
  l->flags = flags | SOCK_CLOEXEC;
  l->owner = t;
  l->sh = t->shard;
  l->oneshot = atomic_load_explicit(&weft__net_refused, memory_order_relaxed) &
               WEFT__NET_NO_MULTISHOT;
  t->pinned_ops++;
  atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
  /* Armed now, so connections are taken while the opener does other work
   * - unless the socket was shut down, which the first accept reports. */
  if (!l->oneshot && !(l->unix_domain && read_shut(fd)) && (r = arm(l)) < 0) {
    /* The hup poll may be armed, its accept not: it must end before l
     * goes. */
    l->closing = true;
    request_cancel_all(l);
    while (l->hup_armed)
      wait_in(&l->closer, WEFT_NO_DEADLINE, false);
    t->pinned_ops--;
    weft__task_release(t);
    free(l);
    return r;
  }
  shard_link(l);
  *out = l;
  return 0;
}

/* -EBADF rather than -ECANCELED for an accept that meets a close: net.h
 * makes -ECANCELED (and -ETIMEDOUT) the end of one wait, after which the
 * listener is still there to accept from again or to close; after a close
 * it is neither, and the caller must not touch it - as with a descriptor
 * closed under a blocked accept(2). */
#define CLOSED (-EBADF)

/* Closes fd, a connection accepted after the close began. */
static void drop(int fd)
{
  int saved = errno;
  close(fd);
  errno = saved;
}

/* weft_listener_accept on l's shard; the caller counts us in l->users. */
static int accept_here(weft_listener *l, weft_task *t, int64_t deadline)
{
  for (;;) {
    /* First: what is queued once close has begun is close's to close. */
    if (l->closing)
      return CLOSED;
    if (l->count)
      return pop(l);
    if (l->nomem) {
      l->nomem = false;
      return -ENOMEM;
    }
    if (l->oneshot) {
      l->oneshot_accepts++;
      /* Held on l's shard as in wait_in: the accept's completion makes a
       * stealable task runnable, and another shard could take it before it
       * returns - to where l is not its to use. */
      t->pinned_ops++;
      l->acceptor = t; /* for close, which cancels the accept */
      int fd = weft_accept_dl(l->fd, NULL, NULL, l->flags, deadline);
      l->acceptor = NULL;
      t->pinned_ops--;
      if (l->closing) {
        if (fd >= 0)
          drop(fd); /* it won the race with close's cancel */
        return CLOSED;
      }
      return fd;
    }
    if (!l->armed) {
      int r = arm(l);
      if (r < 0)
        return r;
    }
    int r = wait_in(&l->waiter, deadline, true);
    /* A connection that came with the timeout or cancel is handed out
     * (unless close has begun meanwhile: the loop's first check). */
    if (r < 0 && !l->count && !l->closing)
      return r;
  }
}

int weft_listener_accept(weft_listener *l, int64_t deadline)
{
  if (!l)
    return -EINVAL;
  weft_task *t = weft__task_self();
  if (!t)
    return -EPERM;
  if (t->shard != l->sh)
    return -EINVAL; /* the op's CQEs and our queue belong to that shard */
  if (l->closing)
    return CLOSED; /* nothing is armed again once close has begun */
  /* One waiter slot (and one acceptor for close to cancel): a second task
   * would take it over, and the first would never be woken. */
  if (l->users)
    return -EBUSY;
  l->users++;
  int r = accept_here(l, t, weft__deadline_for(t, deadline));
  /* Our last touch of l: once we are out, close may free it. */
  if (--l->users == 0)
    wake(&l->closer);
  return r;
}

/* Closes the connections accepted and not handed out. */
static void close_queued(weft_listener *l)
{
  int saved = errno;
  while (l->count) {
    int fd = pop(l);
    if (fd >= 0)
      close(fd);
  }
  errno = saved;
}

/* The close itself, by a task on l's shard. */
static void close_here(weft_listener *l)
{
  l->closing = true;
  request_cancel_all(l);
  /* A task waiting in accept returns -EBADF: woken here, or (one at a
   * time) by the end of its accept. */
  wake(&l->waiter);
  if (l->acceptor)
    weft__op_cancel_task(l->acceptor);
  /* Even a cancelled task waits here: l must outlive the op's last CQE and
   * every task in accept, woken or not yet (on l's shard: see wait_in). */
  while (l->armed || l->hup_armed || l->users)
    wait_in(&l->closer, WEFT_NO_DEADLINE, false);
  close_queued(l);
  shard_unlink(l);
  l->owner->pinned_ops--;
  weft__task_release(l->owner);
  free(l->q);
  free(l);
}

static void *close_task(void *arg)
{
  close_here(arg);
  return NULL;
}

/* A close from another shard or a plain thread: the op and the queue
 * belong to l's shard, so a task pinned there does it while the caller
 * waits. That wait ignores the caller's cancellation: when close returns,
 * the caller may close the socket and free what the listener used. A
 * helper that cannot be started (no memory for it, or the runtime is
 * stopping, which also cancels it before it runs) leaves l open on its
 * shard's list, where the end of the runtime sweeps it as it does every
 * listener nobody closed - never a free while the kernel may post to l. */
static void close_elsewhere(weft_listener *l)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = l->sh->id;
  o.name = "listener-close";
  weft_task *t;
  if (weft_runtime_submit(l->sh->rt, &o, close_task, l, &t) == 0)
    weft__task_join_uncancellable(t);
}

void weft_listener_close(weft_listener *l)
{
  if (!l)
    return;
  if (weft__shard_self() == l->sh)
    close_here(l);
  else
    close_elsewhere(l);
}

uint64_t weft__listener_oneshot_accepts(const weft_listener *l)
{
  return l->oneshot_accepts;
}

unsigned weft__listener_state(const weft_listener *l)
{
  return (l->waiter || l->acceptor ? WEFT__LST_ACCEPT_WAITS : 0u) |
         (l->closing ? WEFT__LST_CLOSING : 0u) | (l->armed ? WEFT__LST_ARMED : 0u);
}

void weft__listener_sweep(weft__shard *sh)
{
  while (sh->listeners) {
    weft_listener *l = sh->listeners;
    shard_unlink(l);
    request_cancel_all(l);
    l->sh_next = sh->swept;
    sh->swept = l;
  }
}

void weft__listener_free_swept(weft__shard *sh)
{
  while (sh->swept) {
    weft_listener *l = sh->swept;
    sh->swept = l->sh_next;
    close_queued(l);
    free(l->q);
    free(l);
  }
}
