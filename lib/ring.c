/* SPDX-License-Identifier: MIT */
/*
 * Ring setup with flag fallback, and msg_ring sends between rings (wake-ups
 * here; the message lanes of lib/msg.c use the same ring-less path).
 *
 * Wake-ups are IORING_OP_MSG_RING messages carrying WEFT__UD_WAKE into the
 * target's CQ: they wake a shard sleeping in io_uring_enter without any
 * shared file descriptor. A shard sends them through its own ring (batched
 * with its other submissions); a thread without a ring uses the kernel's
 * ring-less send (IORING_REGISTER_SEND_MSG_RING, 6.13) when it works, else a
 * small ring of its own created on first use.
 *
 * The kernel can refuse a msg_ring (it needs memory on the way). A shard
 * that could never be woken would strand what was queued for it, so each
 * shard also polls an eventfd of its own on its ring (multishot, armed at
 * setup): a waker whose message was refused writes to it, which allocates
 * nothing, and the poll's CQE wakes the shard - which then also does what a
 * refused doorbell of a plain thread would have done (weft__msg_catch_up).
 */
#include "core.h"
#include "rawsys.h"
#include "uring_compat.h"

#include "../coro/fault.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

atomic_uint weft__ring_refused;

static const struct {
  unsigned weft, kernel;
} flag_map[] = {
  /* Dropped in this order when the kernel refuses the set: DEFER_TASKRUN
   * first (newest, 6.1, and it needs SINGLE_ISSUER), then SINGLE_ISSUER (6.0),
   * TASKRUN_FLAG and COOP_TASKRUN (5.19), SUBMIT_ALL (5.18). */
  {WEFT_RING_DEFER_TASKRUN, IORING_SETUP_DEFER_TASKRUN},
  {WEFT_RING_SINGLE_ISSUER, IORING_SETUP_SINGLE_ISSUER},
  {WEFT_RING_TASKRUN_FLAG, IORING_SETUP_TASKRUN_FLAG},
  {WEFT_RING_COOP_TASKRUN, IORING_SETUP_COOP_TASKRUN},
  {WEFT_RING_SUBMIT_ALL, IORING_SETUP_SUBMIT_ALL},
};
#define NFLAGS (sizeof(flag_map) / sizeof(flag_map[0]))

static int try_setup(weft__shard *sh, unsigned wflags)
{
  if (wflags & atomic_load_explicit(&weft__ring_refused, memory_order_relaxed))
    return -EINVAL; /* test hook: behave as a kernel without the flag */
  if (weft__fault_hit(WEFT__FAULT_RING))
    return -ENOMEM;
  struct io_uring_params p;
  memset(&p, 0, sizeof(p));
  p.flags = IORING_SETUP_CQSIZE;
  for (unsigned i = 0; i < NFLAGS; i++)
    if (wflags & flag_map[i].weft)
      p.flags |= flag_map[i].kernel;
  weft_config *cfg = &sh->rt->cfg;
  /* The default is capped at the kernel's CQ limit: eight times the
   * largest SQ sizes (above 8192) would be refused, failing the start. */
  unsigned cq = cfg->ring_entries <= 65536 / 8 ? cfg->ring_entries * 8 : 65536;
  p.cq_entries = cfg->cq_entries ? cfg->cq_entries : cq;
  return io_uring_queue_init_params(cfg->ring_entries, &sh->ring, &p);
}

int weft__ring_setup(weft__shard *sh)
{
  unsigned wflags = sh->rt->cfg.ring_flags & WEFT_RING_ALL;
  if (wflags & WEFT_RING_DEFER_TASKRUN)
    wflags |= WEFT_RING_SINGLE_ISSUER;
  /* TASKRUN_FLAG is only valid with one of the task-run modes. */
  if (!(wflags & (WEFT_RING_DEFER_TASKRUN | WEFT_RING_COOP_TASKRUN)))
    wflags &= ~WEFT_RING_TASKRUN_FLAG;
  int r;
  unsigned i = 0;
  for (;;) {
    r = try_setup(sh, wflags);
    if (r != -EINVAL || i == NFLAGS)
      break;
    /* Drop the next flag we still ask for and try again. */
    while (i < NFLAGS && !(wflags & flag_map[i].weft))
      i++;
    if (i == NFLAGS) {
      r = try_setup(sh, 0);
      break;
    }
    wflags &= ~flag_map[i].weft;
    if (flag_map[i].weft == WEFT_RING_SINGLE_ISSUER)
      wflags &= ~WEFT_RING_DEFER_TASKRUN;
    if (!(wflags & (WEFT_RING_DEFER_TASKRUN | WEFT_RING_COOP_TASKRUN)))
      wflags &= ~WEFT_RING_TASKRUN_FLAG;
  }
  if (r < 0) {
    sh->ring_fd = -1;
    return r;
  }
  sh->ring_fd = sh->ring.ring_fd;
  /* A process forked from a coroutine gets no copy of the ring memory:
   * those mappings are shared with the kernel's ring, so a child that
   * wrote an SQE there would write into this ring. Without them such a
   * child faults instead (weft/process.h: no weft in a forked child). */
  r = io_uring_ring_dontfork(&sh->ring);
  if (r < 0) {
    weft__ring_teardown(sh);
    return r;
  }
  sh->ring_flags = wflags;
  sh->ring_entries = sh->ring.sq.ring_entries;
  sh->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (sh->wake_fd < 0) {
    r = -errno;
    weft__ring_teardown(sh);
    return r;
  }
  /* Armed now, from the shard's thread (the ring's only submitter). Not
   * counted in `inflight`: it lives as long as the ring, which cancels it. */
  struct io_uring_sqe *sqe = io_uring_get_sqe(&sh->ring);
  if (sqe) {
    io_uring_prep_poll_multishot(sqe, sh->wake_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, WEFT__UD_WAKE_FD);
  }
  r = sqe ? io_uring_submit(&sh->ring) : -EBUSY; /* a new ring has room */
  if (r < 0) {
    weft__ring_teardown(sh);
    return r;
  }
  return 0;
}

void weft__ring_teardown(weft__shard *sh)
{
  if (sh->ring_fd >= 0) {
    io_uring_queue_exit(&sh->ring);
    sh->ring_fd = -1;
  }
  if (sh->wake_fd >= 0) {
    close(sh->wake_fd);
    sh->wake_fd = -1;
  }
}

bool weft__ring_wake_by_fd(weft__shard *to)
{
  if (weft__fault_hit(WEFT__FAULT_WAKE_FD))
    return false;
  int saved = errno;
  uint64_t one = 1;
  bool ok = weft__sys_write(to->wake_fd, &one, sizeof(one)) == (ssize_t)sizeof(one);
  errno = saved;
  return ok;
}

void weft__ring_wake_fd_cqe(weft__shard *sh, unsigned flags)
{
  int saved = errno;
  uint64_t n;
  while (weft__sys_read(sh->wake_fd, &n, sizeof(n)) == (ssize_t)sizeof(n))
    ; /* nonblocking: drained */
  errno = saved;
  /* A refused doorbell of the plain threads' lanes also ends up here. */
  weft__msg_catch_up(sh);
  if (flags & IORING_CQE_F_MORE)
    return;
  /* The kernel ended the multishot poll (a full CQ, say): arm it again. */
  weft__ring_arm_wake_fd(sh);
}

void weft__ring_arm_wake_fd(weft__shard *sh)
{
  /* A full CQ that ended the poll often leaves the SQ full too (the
   * kernel takes no submission while it overflows): then the loop tries
   * again, or refused wake-ups would go to an eventfd nobody polls. */
  struct io_uring_sqe *sqe = weft__ring_sqe(sh);
  sh->wake_fd_unarmed = !sqe;
  if (sqe) {
    io_uring_prep_poll_multishot(sqe, sh->wake_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, WEFT__UD_WAKE_FD);
  }
}

struct io_uring_sqe *weft__ring_sqe(weft__shard *sh)
{
  if (weft__fault_hit(WEFT__FAULT_SQ_FULL))
    return NULL;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&sh->ring);
  if (!sqe) {
    weft__count(&sh->stats.sq_full_flushes, 1);
    io_uring_submit(&sh->ring);
    weft__count(&sh->stats.enters, 1);
    sh->sq_pending = 0;
    sqe = io_uring_get_sqe(&sh->ring);
  }
  if (sqe)
    sh->sq_pending++;
  return sqe;
}

/* ---- sending wake-ups from threads without a ring --------------------------- */

/* How threads without a ring send (see core.h). */
atomic_int weft__ring_ringless;

/* ---- a small ring of its own for a thread that is not a shard ---------------- */

static pthread_key_t thread_ring_key;
static pthread_once_t thread_ring_once = PTHREAD_ONCE_INIT;
static __thread struct io_uring *thread_ring;

static void thread_ring_free(void *p)
{
  io_uring_queue_exit(p);
  free(p);
}

/* In the child of a fork(), whose one thread is the forking one: the ring's
 * memory was not copied (dontfork, as the shards' rings), and its addresses
 * may hold the child's own mappings later. Only the inherited descriptor
 * is the child's to close; the next use makes a ring of its own. */
static void thread_ring_forget(void)
{
  if (!thread_ring)
    return;
  close(thread_ring->ring_fd);
  free(thread_ring);
  thread_ring = NULL;
  pthread_setspecific(thread_ring_key, NULL);
}

static void thread_ring_key_init(void)
{
  pthread_key_create(&thread_ring_key, thread_ring_free);
  pthread_atfork(NULL, NULL, thread_ring_forget);
}

void weft__thread_ring_drop(void)
{
  if (!thread_ring)
    return;
  thread_ring_free(thread_ring);
  thread_ring = NULL;
  pthread_setspecific(thread_ring_key, NULL);
}

int weft__thread_ring(struct io_uring **out)
{
  if (!thread_ring) {
    pthread_once(&thread_ring_once, thread_ring_key_init);
    struct io_uring *ring = weft__malloc_plain(sizeof(*ring));
    if (!ring)
      return -ENOMEM;
    int r = io_uring_queue_init(4, ring, 0);
    if (r < 0) {
      free(ring);
      return r;
    }
    if ((r = io_uring_ring_dontfork(ring)) < 0) {
      io_uring_queue_exit(ring);
      free(ring);
      return r;
    }
    thread_ring = ring;
    pthread_setspecific(thread_ring_key, ring);
  }
  *out = thread_ring;
  return 0;
}

/* Under WEFT__FAULT_SEND the SQE gets an opcode no kernel has: every kernel
 * fails it at once with -EINVAL in a CQE under the caller's user_data, which
 * is what a refused message looks like to the sender (a NOP told to fail
 * would need 6.10's IORING_NOP_INJECT_RESULT, and older kernels complete
 * it with success instead). */
#define OPCODE_NO_KERNEL_HAS 0xff

void weft__ring_prep_msg(struct io_uring_sqe *sqe, int target_fd, uint32_t len, uint64_t data,
                         uint64_t if_refused)
{
  io_uring_prep_msg_ring(sqe, target_fd, len, data, 0);
  if (if_refused) {
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    io_uring_sqe_set_data64(sqe, if_refused);
  }
  if (weft__fault_hit(WEFT__FAULT_SEND))
    sqe->opcode = OPCODE_NO_KERNEL_HAS;
}

static int send_ringless(int target_fd, uint64_t data, uint32_t len)
{
  struct io_uring_sqe sqe;
  memset(&sqe, 0, sizeof(sqe));
  io_uring_prep_msg_ring(&sqe, target_fd, len, data, 0);
  long r = syscall(__NR_io_uring_register, -1, IORING_REGISTER_SEND_MSG_RING, &sqe, 1);
  return r < 0 ? -errno : (int)r;
}

int weft__thread_ring_submit(struct io_uring *ring)
{
  int r = weft__fault_hit(WEFT__FAULT_TRING_SUBMIT) ? -ENOMEM : io_uring_submit(ring);
  if (r == 1)
    return 0;
  /* The kernel took nothing (one SQE at a time): dropping the ring leaves
   * nothing in flight and no stale SQE for its next user to submit. */
  weft__thread_ring_drop();
  return r < 0 ? r : -EAGAIN;
}

static int send_from_own_ring(int target_fd, uint64_t data, uint32_t len)
{
  struct io_uring *ring;
  int r = weft__thread_ring(&ring);
  if (r < 0)
    return r;
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
  if (!sqe)
    return -EBUSY; /* cannot happen: every use is reaped before it returns */
  io_uring_prep_msg_ring(sqe, target_fd, len, data, 0);
  io_uring_sqe_set_data64(sqe, WEFT__TRING_MSG);
  if ((r = weft__thread_ring_submit(ring)) < 0)
    return r;
  /* The message may complete after the submission returns (the target's
   * lock busy, the work punted): wait for its CQE, through signals, so
   * that the ring's next user finds no CQE of ours. */
  for (;;) {
    struct io_uring_cqe *cqe;
    if (io_uring_wait_cqe(ring, &cqe) < 0)
      continue; /* -EINTR */
    bool ours = io_uring_cqe_get_data64(cqe) == WEFT__TRING_MSG;
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (ours)
      return res;
  }
}

bool weft__ring_replace_wake(weft__shard *to)
{
  if (weft__ring_wake_by_fd(to))
    return false;
  atomic_store_explicit(&to->wake_pending, 0, memory_order_release);
  return true;
}

/* After sending a wake-up to `to` from me's ring: a refusal of it is in
 * me's CQ already - msg_ring is done inline at the submission, among the
 * CQEs posted since `from` (the CQ's tail before it) - and is acted on now,
 * as the loop would at its next reap: the running task may compute for
 * long before that, `to` asleep meanwhile and every other waker of `to`
 * told that a wake-up is on its way. The CQE is then marked for the loop
 * to skip. */
static void act_on_refused_wake(weft__shard *me, weft__shard *to, unsigned from)
{
  uint64_t ud = WEFT__UD_WAKE_SENT | ((uint64_t)to->id << 3);
  struct io_uring_cq *cq = &me->ring.cq;
  unsigned tail = io_uring_smp_load_acquire(cq->ktail);
  for (unsigned i = from; i != tail; i++) {
    struct io_uring_cqe *cqe = &cq->cqes[io_uring_cqe_index(&me->ring, i, cq->ring_mask)];
    if (cqe->user_data != ud)
      continue;
    cqe->user_data = WEFT__UD_IGNORE; /* ours until the loop advances the CQ */
    if (cqe->res < 0)
      weft__ring_replace_wake(to);
  }
}

void weft__ring_send_wake(weft__shard *to)
{
  weft__shard *me = weft__shard_self();
  /* Through our own ring only to a shard of our runtime: a refusal comes
   * back as a CQE naming it by id, and is sent again. Another runtime's
   * shard is posted to synchronously, so a refusal is seen here. */
  if (me && to->rt == me->rt) {
    struct io_uring_sqe *sqe = weft__ring_sqe(me);
    if (sqe) {
      weft__ring_prep_msg(sqe, to->ring_fd, 0, WEFT__UD_WAKE,
                          WEFT__UD_WAKE_SENT | ((uint64_t)to->id << 3));
      /* Sent now, not at the next flush: the running task may compute (or
       * block in weft_runtime_stop) for long, and `wake_pending` already
       * tells other wakers that this message is on its way. */
      me->sq_pending = 0;
      unsigned from = io_uring_smp_load_acquire(me->ring.cq.ktail);
      io_uring_submit(&me->ring);
      weft__count(&me->stats.enters, 1);
      act_on_refused_wake(me, to, from);
      return;
    }
  }
  if (weft__ring_post_msg(to->ring_fd, WEFT__UD_WAKE, 0) < 0)
    weft__ring_replace_wake(to);
}

int weft__ring_post_msg(int target_fd, uint64_t data, uint32_t len)
{
  /* This runs on whatever thread sends (a user's thread too): leave its
   * errno as it was. */
  if (weft__fault_hit(WEFT__FAULT_POST))
    return -ENOMEM;
  int saved = errno;
  int mode = atomic_load_explicit(&weft__ring_ringless, memory_order_relaxed);
  if (mode >= 0) {
    int r = send_ringless(target_fd, data, len);
    if (r >= 0) {
      if (mode == 0)
        atomic_store_explicit(&weft__ring_ringless, 1, memory_order_relaxed);
      errno = saved;
      return 0;
    }
    if (r == -EINVAL || r == -EOPNOTSUPP || r == -ENOSYS) {
      atomic_store_explicit(&weft__ring_ringless, -1, memory_order_relaxed); /* kernel < 6.13 */
    } else if (r != -EBADF || mode > 0) {
      errno = saved;
      return r; /* the kernel refused the message itself (-ENOMEM, ...) */
    }
    /* -EBADF before the first success: a kernel < 6.13 looks fd -1 up as
     * a ring; decided below by whether our own ring can send. */
  }
  int r = send_from_own_ring(target_fd, data, len);
  if (r >= 0 && mode == 0)
    atomic_store_explicit(&weft__ring_ringless, -1, memory_order_relaxed);
  errno = saved;
  return r < 0 ? r : 0;
}
