/* SPDX-License-Identifier: MIT */
/*
 * Receive streams (include/weft/recv_stream.h).
 *
 * Kernel path: the stream registers a provided-buffer ring of buf_count
 * buffers on its shard's ring (under a buffer group id unique in the
 * process) and keeps one IORING_OP_RECV with IORING_RECV_MULTISHOT and
 * IOSQE_BUFFER_SELECT armed on the socket. Each data CQE names the buffer
 * the kernel filled; the CQE handler (running on the shard, in reap) queues
 * (buffer id, length) and wakes the coroutine if it waits in next(). next()
 * hands the queue out in order and puts the previous buffer back into the
 * ring. The receive ends without IORING_CQE_F_MORE when every buffer is full
 * (-ENOBUFS) or for reasons of the kernel's own; the stream then arms a new
 * one as soon as a buffer is free (from the handler, or from the coroutine
 * once it hands a buffer back), so -ENOBUFS never reaches the caller. EOF,
 * errors and our own cancel end it for good.
 *
 * The stream's record holds the weft__op that is the SQE's user_data, the
 * buffers and the buffer ring; it is freed only by close(), after the last
 * CQE of the receive, and the ring is unregistered there too: nothing the
 * kernel may write goes away early. A deadline in next() is a plain waiter
 * deadline, not the op's, so it never cancels the receive. Everything here
 * runs on the owning shard's thread - the coroutine is pinned there while
 * the stream is open (task->pinned_ops, on either path) and the CQEs are
 * reaped there - so the stream needs no lock; register/unregister calls
 * also happen on the ring's own thread, as SINGLE_ISSUER rings require.
 *
 * Plain path: one IORING_OP_RECV at a time into the stream's buffer, on the
 * op primitive (a deadline cancels that receive, which returns its data if
 * it won the race). Taken when the kernel refuses the buffer ring, when the
 * multishot receive comes back -EINVAL before any data (a 5.19 kernel: the
 * stream switches over inside next() and the answer is cached), or when the
 * process has no buffer group id left.
 */
#include "op.h"
#include "rawsys.h"
#include "recv_stream_internal.h"

#include "../coro/fault.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

atomic_int weft__recv_stream_force_fallback;
atomic_int weft__recv_stream_support;

enum { MODE_RING, MODE_PLAIN };

struct filled {
  unsigned bid; /* buffer id */
  unsigned len; /* bytes in it */
};

struct weft_recv_stream {
  weft__op op;                  /* the multishot receive: its SQEs' user_data */
  weft__held held;              /* on its task until closed (closed for it at its exit) */
  int fd;
  int mode;                     /* MODE_RING or MODE_PLAIN */
  size_t buf_size;
  unsigned buf_count;           /* buffers allocated (1 on the plain path) */
  unsigned char *bufs;          /* buf_count * buf_size bytes */
  struct io_uring_buf_ring *br; /* the provided-buffer ring (MODE_RING) */
  int bgid;                     /* its buffer group id */
  unsigned kfree;               /* buffers in br the kernel may fill */
  struct filled *q;             /* filled buffers not handed out yet */
  unsigned qhead, qcount;       /* (never more than buf_count of them) */
  int cur;                      /* buffer the caller holds, -1 none */
  bool armed;                   /* a receive is in the kernel (last CQE due) */
  bool fresh;                   /* no data CQE since it was armed */
  bool got_data;                /* some CQE ever carried data */
  bool stopped;                 /* close() or a cancel: never arm again */
  bool refused;                 /* the kernel turned the multishot recv down */
  bool probing;                 /* plain path after a refusal: unconfirmed */
  bool finished;                /* the stream is over: next() returns term */
  int term;                     /* 0 (EOF) or -errno */
  weft__waiter *waiter;         /* the coroutine waiting in next(), if any */
  weft__recv_stream_counters n;
};

/* ---- buffer group ids ------------------------------------------------------------
 * Group ids are per ring in the kernel; taking them from one process-wide
 * pool keeps streams on the same ring apart with no per-ring bookkeeping.
 * The pool is the upper half of the ids: the lower half is left to raw ops
 * of the extension API (weft/uring.h), which provide and select buffers on
 * the same ring - a group a stream held there would refuse their provides
 * and hand them the stream's buffers. */

#define GROUP_BASE 32768u
#define NGROUPS 32768u
static pthread_mutex_t groups_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t groups_used[NGROUPS / 64];
static unsigned groups_cursor; /* word to start the next search at */
static unsigned groups_count;

static int group_alloc(void)
{
  int id = -1;
  pthread_mutex_lock(&groups_lock);
  for (unsigned i = 0; i < NGROUPS / 64 && id < 0; i++) {
    unsigned w = (groups_cursor + i) % (NGROUPS / 64);
    if (groups_used[w] != UINT64_MAX) {
      unsigned bit = (unsigned)__builtin_ctzll(~groups_used[w]);
      groups_used[w] |= (uint64_t)1 << bit;
      groups_cursor = w;
      groups_count++;
      id = (int)(GROUP_BASE + w * 64 + bit);
    }
  }
  pthread_mutex_unlock(&groups_lock);
  return id;
}

static void group_free(int id)
{
  pthread_mutex_lock(&groups_lock);
  unsigned i = (unsigned)id - GROUP_BASE;
  groups_used[i / 64] &= ~((uint64_t)1 << (i % 64));
  groups_count--;
  pthread_mutex_unlock(&groups_lock);
}

unsigned weft__recv_stream_groups_in_use(void)
{
  pthread_mutex_lock(&groups_lock);
  unsigned n = groups_count;
  pthread_mutex_unlock(&groups_lock);
  return n;
}

/* ---- the buffer ring ---------------------------------------------------------- */

static void give_back(weft_recv_stream *s, unsigned bid)
{
  io_uring_buf_ring_add(s->br, s->bufs + (size_t)bid * s->buf_size, (unsigned)s->buf_size,
                        (unsigned short)bid, io_uring_buf_ring_mask(s->buf_count), 0);
  io_uring_buf_ring_advance(s->br, 1); /* a release store: the kernel sees the entry */
  s->kfree++;
}

static size_t ring_bytes(unsigned count)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t n = (size_t)count * sizeof(struct io_uring_buf);
  return (n + page - 1) / page * page;
}

/* Registers a buffer ring for s on sh's ring (sh's thread). 0, or -errno
 * and s unchanged. */
static int ring_register(weft_recv_stream *s, weft__shard *sh)
{
  if (atomic_load_explicit(&weft__recv_stream_force_fallback, memory_order_relaxed) ==
      WEFT__RS_FORCE_NO_RING)
    return -EINVAL; /* test hook: a kernel without buffer rings */
  size_t bytes = ring_bytes(s->buf_count);
  void *mem = NULL;
  if (weft__fault_hit(WEFT__FAULT_MALLOC) ||
      posix_memalign(&mem, (size_t)sysconf(_SC_PAGESIZE), bytes) != 0)
    return -ENOMEM;
  memset(mem, 0, bytes);
  struct io_uring_buf_ring *br = mem;
  io_uring_buf_ring_init(br);
  /* A group id some other code registered on this ring directly gives
   * -EEXIST: try a few more, then give up on the ring for this stream. */
  int tried[4], ntried = 0, r = -ENOSPC;
  while (ntried < 4) {
    int id = group_alloc();
    if (id < 0)
      break;
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uint64_t)(uintptr_t)br;
    reg.ring_entries = s->buf_count;
    reg.bgid = (uint16_t)id;
    r = io_uring_register_buf_ring(&sh->ring, &reg, 0);
    if (r == 0) {
      s->bgid = id;
      break;
    }
    tried[ntried++] = id;
    if (r != -EEXIST)
      break;
  }
  for (int i = 0; i < ntried; i++)
    group_free(tried[i]);
  if (r < 0) {
    free(mem);
    return r;
  }
  s->br = br;
  for (unsigned i = 0; i < s->buf_count; i++)
    io_uring_buf_ring_add(br, s->bufs + (size_t)i * s->buf_size, (unsigned)s->buf_size,
                          (unsigned short)i, io_uring_buf_ring_mask(s->buf_count), (int)i);
  io_uring_buf_ring_advance(br, (int)s->buf_count);
  s->kfree = s->buf_count;
  return 0;
}

/* Unregisters and frees the buffer ring (the receive is over). */
static void ring_unregister(weft_recv_stream *s)
{
  /* The task is pinned: this is the shard whose ring has the group. */
  weft__shard *sh = s->op.sh;
  io_uring_unregister_buf_ring(&sh->ring, s->bgid);
  group_free(s->bgid);
  free(s->br);
  s->br = NULL;
  s->bgid = -1;
}

/* ---- the multishot receive (shard side) ------------------------------------------- */

static void wake(weft_recv_stream *s)
{
  weft__waiter *w = s->waiter;
  if (w && weft__waiter_claim(w)) {
    s->waiter = NULL;
    weft__waiter_complete(w, 0);
  }
}

/* Submits a multishot receive (at the shard's next flush). -EBUSY when the
 * SQ has no room even after a submit: the caller tries again later. */
static int arm(weft_recv_stream *s)
{
  weft__shard *sh = s->op.sh;
  struct io_uring_sqe *sqe = weft__ring_sqe(sh);
  if (!sqe)
    return -EBUSY;
  io_uring_prep_recv(sqe, s->fd, NULL, 0, 0);
  sqe->ioprio |= IORING_RECV_MULTISHOT;
  if (atomic_load_explicit(&weft__recv_stream_force_fallback, memory_order_relaxed) ==
      WEFT__RS_FORCE_NO_MULTISHOT)
    sqe->ioprio |= 1u << 15; /* test hook: a flag no kernel knows -> -EINVAL */
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = (uint16_t)s->bgid;
  weft__op_rearm(&s->op, sqe);
  s->armed = true;
  s->fresh = true;
  s->n.arms++;
  return 0;
}

static bool may_arm(const weft_recv_stream *s)
{
  return !s->armed && !s->stopped && !s->finished && !s->refused && s->kfree > 0;
}

/* The receive's last CQE (no IORING_CQE_F_MORE). */
static void on_last_cqe(weft__shard *sh, weft_recv_stream *s, int res)
{
  weft__op *op = &s->op;
  bool fresh = s->fresh;
  s->armed = false;
  weft__op_ended(sh, op);
  if (res == -ECANCELED)
    weft__count(&sh->stats.ops_cancelled, 1);
  if ((res > 0 || res == -ENOBUFS) && !s->stopped) {
    if (res == -ENOBUFS)
      s->n.nobufs++;
    else
      s->n.restarts++;
    /* Re-arm now if a buffer is free (the consumer gave one back before
     * this CQE was reaped); otherwise next()/release() does when it gives
     * one back. An -ENOBUFS on a receive that found buffers in the ring
     * when it was armed would repeat at once: leave that to the coroutine,
     * at its own pace. */
    if (may_arm(s) && !(res == -ENOBUFS && fresh))
      arm(s);
    return;
  }
  if (res == -EINVAL && !s->got_data &&
      atomic_load_explicit(&weft__recv_stream_support, memory_order_relaxed) != 1) {
    s->refused = true; /* next() switches to the plain path */
    return;
  }
  s->finished = true;
  s->term = res > 0 || res == -ENOBUFS ? -ECANCELED : res;
}

static void on_cqe(weft__shard *sh, weft__op *op, int res, unsigned flags)
{
  weft_recv_stream *s = WEFT__CONTAINER_OF(op, weft_recv_stream, op);
  s->n.cqes++;
  if (flags & IORING_CQE_F_BUFFER) {
    unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
    if (bid < s->buf_count) {
      s->kfree--;
      if (res > 0) {
        s->q[(s->qhead + s->qcount) % s->buf_count] = (struct filled){bid, (unsigned)res};
        s->qcount++;
        s->got_data = true;
        s->fresh = false;
      } else {
        give_back(s, bid); /* a buffer taken for nothing (EOF, error) */
      }
    }
  }
  if (flags & IORING_CQE_F_MORE) {
    if (atomic_load_explicit(&weft__recv_stream_support, memory_order_relaxed) != 1)
      atomic_store_explicit(&weft__recv_stream_support, 1, memory_order_relaxed);
  } else {
    on_last_cqe(sh, s, res);
  }
  wake(s);
}

/* ---- the coroutine side -------------------------------------------------------------- */

static bool task_cancelled(weft_task *t)
{
  return atomic_load_explicit(&t->cancelled, memory_order_relaxed);
}

/* Suspends until on_cqe wakes us, the deadline passes or (if cancellable)
 * the task is cancelled; returns the wait's result. */
static int wait_cqe(weft_recv_stream *s, int64_t deadline, bool cancellable)
{
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = !cancellable;
  s->waiter = &w;
  int r = weft__waiter_wait(&w, deadline);
  if (s->waiter == &w)
    s->waiter = NULL; /* timed out or cancelled: the CQE path did not take it */
  return r;
}

/* Never arm again; cancel the receive if it is in the kernel. */
static void stop(weft_recv_stream *s)
{
  s->stopped = true;
  if (!s->armed || s->op.cancel_requested)
    return;
  weft_task *t = s->op.task;
  weft__spin_lock(&t->wait_lock);
  weft__op_queue_cancel(&s->op);
  weft__spin_unlock(&t->wait_lock);
}

/* The kernel turned the multishot receive down: go on with plain receives.
 * The first of them tells whether the refusal was the kernel's (cached) or
 * the socket's (it fails the same way). */
static void switch_to_plain(weft_recv_stream *s)
{
  ring_unregister(s);
  s->mode = MODE_PLAIN; /* the task stays pinned: see weft_recv_stream_open */
  s->refused = false;
  s->probing = true;
  s->kfree = 0;
}

/* ring_next's answer when the stream must go on with plain receives. */
#define SWITCH_TO_PLAIN ((ssize_t)INT_MIN)

static ssize_t ring_next(weft_recv_stream *s, const void **data, int64_t deadline)
{
  weft_task *t = s->op.task;
  if (s->cur >= 0) {
    give_back(s, (unsigned)s->cur);
    s->cur = -1;
  }
  for (;;) {
    if (task_cancelled(t)) {
      stop(s);
      return -ECANCELED;
    }
    if (s->qcount) {
      struct filled f = s->q[s->qhead];
      s->qhead = (s->qhead + 1) % s->buf_count;
      s->qcount--;
      s->cur = (int)f.bid;
      *data = s->bufs + (size_t)f.bid * s->buf_size;
      s->n.bytes += f.len;
      /* Keep the kernel receiving while the caller works on this one. */
      if (may_arm(s))
        arm(s);
      return (ssize_t)f.len;
    }
    if (s->finished)
      return s->term;
    if (s->refused)
      return SWITCH_TO_PLAIN;
    if (may_arm(s) && arm(s) < 0) {
      weft_yield(); /* a full SQ: the shard flushes it, then we try again */
      continue;
    }
    int r = wait_cqe(s, deadline, true);
    if (r == -ETIMEDOUT && !s->qcount && !s->finished && !s->refused)
      return r;
    /* No memory for the deadline's timer: the wait never began, and
     * trying again at once would spin without ever letting the shard reap
     * the CQE that ends it. The stream goes on, as after a timeout. */
    if (r == -ENOMEM)
      return r;
  }
}

/* Results of a plain receive that leave the stream going. */
static bool transient(int r)
{
  return r == -ETIMEDOUT || r == -ECANCELED || r == -ENOMEM || r == -EINTR;
}

/* A receive that does not wait, for a deadline already past: what has
 * arrived, as the kernel path hands out what it has queued whatever the
 * deadline. -ETIMEDOUT when nothing has. Never inlined: its caller loops
 * over suspensions, and errno's address must be this thread's. */
__attribute__((noinline)) static int recv_now(weft_recv_stream *s)
{
  int saved = errno;
  ssize_t n = weft__sys_recv(s->fd, s->bufs, s->buf_size, MSG_DONTWAIT);
  int r = n >= 0 ? (int)n : errno == EAGAIN ? -ETIMEDOUT : -errno;
  errno = saved;
  return r;
}

static ssize_t plain_next(weft_recv_stream *s, const void **data, int64_t deadline)
{
  s->cur = -1;
  for (;;) {
    if (task_cancelled(s->op.task))
      return -ECANCELED;
    if (s->finished)
      return s->term;
    int r;
    int64_t dl = weft__deadline_for(s->op.task, deadline);
    if (dl >= 0 && dl <= weft__now()) {
      r = recv_now(s);
    } else {
      weft__op op;
      struct io_uring_sqe *sqe = weft__op_begin(&op, deadline);
      if (!sqe) {
        if (op.res == -EBUSY) {
          weft_yield();
          continue;
        }
        return op.res;
      }
      io_uring_prep_recv(sqe, s->fd, s->bufs, s->buf_size, 0);
      r = weft__op_wait(&op);
    }
    if (s->probing && !transient(r)) {
      s->probing = false;
      if (r != -EINVAL) /* the socket takes receives: the kernel refused multishot */
        atomic_store_explicit(&weft__recv_stream_support, -1, memory_order_relaxed);
    }
    if (r > 0) {
      s->cur = 0;
      *data = s->bufs;
      s->n.bytes += (uint64_t)r;
      return r;
    }
    if (!transient(r)) {
      s->finished = true;
      s->term = r;
    }
    return r;
  }
}

/* ---- the API ------------------------------------------------------------------------- */

void weft_recv_stream_opts_init(weft_recv_stream_opts *o)
{
  if (!o)
    return;
  o->buf_size = WEFT_RECV_STREAM_BUF_SIZE;
  o->buf_count = WEFT_RECV_STREAM_BUF_COUNT;
}

static void stream_free(weft_recv_stream *s)
{
  free(s->q);
  free(s->bufs);
  free(s);
}

static void close_held(weft__held *h)
{
  weft_recv_stream_close(WEFT__CONTAINER_OF(h, weft_recv_stream, held));
}

int weft_recv_stream_open(weft_recv_stream **out, int fd, const weft_recv_stream_opts *o)
{
  if (!out)
    return -EINVAL;
  size_t size = o && o->buf_size ? o->buf_size : WEFT_RECV_STREAM_BUF_SIZE;
  unsigned count = o && o->buf_count ? o->buf_count : WEFT_RECV_STREAM_BUF_COUNT;
  if (size > WEFT_RECV_STREAM_MAX_BUF_SIZE || count > WEFT_RECV_STREAM_MAX_BUF_COUNT ||
      (count & (count - 1)) != 0 || size > SIZE_MAX / count)
    return -EINVAL;
  if (fd < 0)
    return -EBADF;
  if (!weft__task_self())
    return -EPERM;
  int saved = errno; /* sysconf and the allocator may touch it */
  weft_recv_stream *s = weft__calloc(1, sizeof(*s));
  int r = s ? weft__op_prepare_multishot(&s->op) : -ENOMEM;
  if (r < 0)
    goto fail;
  s->op.on_cqe = on_cqe;
  s->fd = fd;
  s->buf_size = size;
  s->bgid = -1;
  s->cur = -1;
  bool ring = atomic_load_explicit(&weft__recv_stream_support, memory_order_relaxed) >= 0;
  s->buf_count = ring ? count : 1;
  r = -ENOMEM;
  if (!(s->bufs = weft__malloc(s->buf_count * size)))
    goto fail;
  if (ring) {
    if (!(s->q = weft__malloc(count * sizeof(*s->q))))
      goto fail;
    int rr = ring_register(s, s->op.sh);
    if (rr == -EINVAL || rr == -EOPNOTSUPP || rr == -ENOSYS) {
      /* No buffer rings in this kernel (5.19+): say so for every stream,
       * unless it is the test hook pretending. */
      if (!atomic_load_explicit(&weft__recv_stream_force_fallback, memory_order_relaxed))
        atomic_store_explicit(&weft__recv_stream_support, -1, memory_order_relaxed);
    }
    ring = rr == 0;
  }
  s->mode = ring ? MODE_RING : MODE_PLAIN;
  /* Pinned on both paths, as recv_stream.h promises: the plain path needs
   * no particular shard, but the owner's shard must not change under it
   * with the path the kernel happens to allow (or when a refused multishot
   * receive switches an open stream over). Undone by close. */
  s->op.task->pinned_ops++;
  if (ring)
    arm(s); /* or next() arms it, if the SQ is full now */
  weft__task_hold(s->op.task, &s->held, close_held);
  *out = s;
  errno = saved;
  return 0;
fail:
  if (s)
    stream_free(s);
  errno = saved;
  return r;
}

ssize_t weft_recv_stream_next(weft_recv_stream *s, const void **data, int64_t deadline)
{
  if (!s || !data)
    return -EINVAL;
  if (weft__task_self() != s->op.task)
    return -EPERM;
  if (s->mode == MODE_RING) {
    ssize_t r = ring_next(s, data, deadline);
    if (r != SWITCH_TO_PLAIN)
      return r;
    switch_to_plain(s);
  }
  return plain_next(s, data, deadline);
}

void weft_recv_stream_release(weft_recv_stream *s)
{
  if (!s || s->cur < 0 || weft__task_self() != s->op.task)
    return;
  if (s->mode == MODE_RING) {
    give_back(s, (unsigned)s->cur);
    if (may_arm(s))
      arm(s);
  }
  s->cur = -1;
}

int weft_recv_stream_close(weft_recv_stream *s)
{
  if (!s)
    return -EINVAL;
  if (weft__task_self() != s->op.task)
    return -EPERM;
  if (s->mode == MODE_RING) {
    stop(s);
    /* Wait even in a cancelled task or an ended deadline scope: the kernel
     * may write into s->bufs until the last CQE. */
    while (s->armed)
      wait_cqe(s, WEFT_NO_DEADLINE, false);
    ring_unregister(s);
  }
  s->op.task->pinned_ops--;
  weft__task_unhold(s->op.task, &s->held);
  stream_free(s);
  return 0;
}

int weft_recv_stream_multishot(const weft_recv_stream *s)
{
  if (!s)
    return -EINVAL;
  return s->mode == MODE_RING;
}

void weft__recv_stream_get_counters(const weft_recv_stream *s, weft__recv_stream_counters *out)
{
  *out = s->n;
}
