/* SPDX-License-Identifier: MIT */
/*
 * The wait-queue primitive every waiting call is built on (events, joins,
 * sleeps; later mutexes and channels): a waiter is appended to a queue under
 * the queue's lock, the caller suspends (a task) or blocks on a futex (a
 * plain thread), and exactly one of {a signal, the deadline, cancellation}
 * claims the waiter and completes it. See core.h for the claim protocol.
 *
 * The futex wait and wake that plain threads block with are at the end:
 * the wait queue is what they are for (the runtime's stop, a plain thread
 * waiting for the last task, is their only other user).
 */
#include "core.h"
#include "fence.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void weft__waitq_init(weft__waitq *q)
{
  q->lock = (weft__spin)WEFT__SPIN_INIT;
  q->head = q->tail = NULL;
}

void weft__waiter_init(weft__waiter *w)
{
  weft__waiter_init_for(w, weft__task_self());
}

void weft__waitq_append(weft__waitq *q, weft__waiter *w)
{
  w->q = q;
  WEFT__DQUEUE_PUSH(q->head, q->tail, w, prev, next);
  w->queued = true;
}

static void unlink_locked(weft__waitq *q, weft__waiter *w)
{
  WEFT__DQUEUE_UNLINK(q->head, q->tail, w, prev, next);
  w->queued = false;
}

weft__waiter *weft__waitq_pop(weft__waitq *q)
{
  weft__waiter *w = q->head;
  if (w)
    unlink_locked(q, w);
  return w;
}

void weft__waitq_release(weft__waitq *q, int64_t max, int result)
{
  weft__spin_lock(&q->lock);
  weft__waiter *list = weft__waitq_take(q, max, NULL);
  weft__spin_unlock(&q->lock);
  weft__waiters_complete(list, result);
}

/* The caller saw the published state with an acquire load (or CAS), and
 * the waker stored it after taking q's lock: so this load cannot return a
 * value older than the waker's lock, and "free" is its unlock or a later
 * one - after which the waker does not touch the object. */
void weft__waitq_settle_slow(weft__waitq *q)
{
  if (weft__test_settle_pause)
    weft__test_settle_pause();
  while (atomic_load_explicit(&q->lock.held, memory_order_acquire))
    weft__cpu_relax();
}

/* Takes a claimed waiter off its queue, if a signaller has not already. */
static void unqueue(weft__waiter *w)
{
  weft__waitq *q = w->q;
  if (!q)
    return;
  weft__spin_lock(&q->lock);
  if (w->queued)
    unlink_locked(q, w);
  weft__spin_unlock(&q->lock);
}

/* The thread may see DONE before the wake (a futex wait that returned for
 * another reason) and leave with w's frame: the wake then lands on whatever
 * waits at that address later. A private futex wake only uses the address,
 * so the frame being gone is harmless; and every futex waiter takes wake-ups
 * as hints - a later weft waiter of the same thread at the same address
 * re-reads its own state (wait_thread) and sleeps again, it never takes the
 * stale wake for its result. */
void weft__waiter_complete_thread(weft__waiter *w)
{
  atomic_store_explicit(&w->state, WEFT__W_DONE, memory_order_release);
  weft__futex_wake(&w->state, 1);
}

/* Fires on the task's shard when its deadline passes. */
static void on_deadline(weft__timer *tm)
{
  weft__waiter *w = WEFT__CONTAINER_OF(tm, weft__waiter, timer);
  if (!weft__waiter_claim(w))
    return; /* a signal or cancel won; its wake-up is on the way */
  w->task->armed_timer = NULL;
  unqueue(w);
  weft__waiter_complete(w, -ETIMEDOUT);
}

static int give_up(weft__waiter *w, int result)
{
  unqueue(w);
  w->result = result;
  atomic_store_explicit(&w->state, WEFT__W_DONE, memory_order_relaxed);
  return result;
}

bool weft__waiter_withdraw(weft__waiter *w)
{
  if (!weft__waiter_claim(w))
    return false;
  give_up(w, 0);
  return true;
}

static int wait_thread(weft__waiter *w, int64_t deadline)
{
  for (;;) {
    uint32_t s = atomic_load_explicit(&w->state, memory_order_acquire);
    if (s == WEFT__W_DONE)
      return w->result;
    int r = weft__futex_wait(&w->state, s, s == WEFT__W_WAITING ? deadline : -1);
    if (r == -ETIMEDOUT && weft__waiter_claim(w))
      return give_up(w, -ETIMEDOUT);
  }
}

/* ---- the current waiter, for cancellers -------------------------------------
 * A waiting task publishes its waiter in t->cur_waiter and then reads
 * t->cancelled; a canceller sets t->cancelled and then reads t->cur_waiter.
 * A full barrier between the store and the load on each side makes at least
 * one of them see the other: the task notices it is cancelled, or the
 * canceller finds the waiter and claims it. The canceller's barrier is a
 * membarrier (fence.h), so the task's wait takes no locked instruction for
 * it. Cancellers serialise on t->wait_lock and hold it while they touch the
 * waiter they found; a task that leaves a wait after seeing the flag takes
 * that lock once, so that no canceller still holds the waiter when its frame
 * goes away. */

/* Takes t's waiter back from the cancellers' view. */
static void unpublish(weft_task *t)
{
  atomic_store_explicit(&t->cur_waiter, NULL, memory_order_relaxed);
  weft__fence_light();
  if (atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
    /* A canceller may be holding the waiter: wait until it lets go. */
    weft__spin_lock(&t->wait_lock);
    weft__spin_unlock(&t->wait_lock);
  }
}

int weft__waiter_wait(weft__waiter *w, int64_t deadline)
{
  weft_task *t = w->task;
  if (!t)
    return wait_thread(w, deadline);
  bool cancellable = !w->uncancellable;
  /* The task's deadline scope bounds every wait - except the waits that
   * must not end early (they wait for something that uses their memory). */
  if (cancellable && t->deadline >= 0 && (deadline < 0 || t->deadline < deadline))
    deadline = t->deadline;

  bool armable = true;
  if (cancellable) {
    atomic_store_explicit(&t->cur_waiter, w, memory_order_release);
    weft__fence_light();
    if (atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
      bool mine = weft__waiter_claim(w);
      unpublish(t);
      if (mine)
        return give_up(w, -ECANCELED);
      /* Someone claimed w already: their wake-up must be consumed below. */
      armable = false;
    }
  }
  if (armable && deadline >= 0 &&
      atomic_load_explicit(&w->state, memory_order_relaxed) == WEFT__W_WAITING) {
    weft__shard *sh = t->shard;
    int r = 0;
    if (deadline <= weft__now()) {
      r = -ETIMEDOUT;
    } else {
      w->timer.deadline = deadline;
      w->timer.fire = on_deadline;
      r = weft__timer_arm(&sh->timers, &w->timer);
      if (r == 0) {
        t->armed_timer = &w->timer;
        weft__count(&sh->stats.timers_armed, 1);
      }
    }
    if (r < 0 && weft__waiter_claim(w)) {
      if (cancellable)
        unpublish(t);
      return give_up(w, r);
    }
  }
  weft__task_suspend(t);
  /* Back on some shard; the deadline timer was disarmed before we ran. */
  t = w->task;
  if (cancellable)
    unpublish(t);
  return w->result;
}

void weft__task_cancel_wait(weft_task *t)
{
  /* t->cancelled is set and weft__fence_heavy() has run (weft__task_cancel). */
  weft__spin_lock(&t->wait_lock);
  weft__waiter *w = atomic_load_explicit(&t->cur_waiter, memory_order_acquire);
  bool mine = w && weft__waiter_claim(w);
  weft__spin_unlock(&t->wait_lock);
  if (!mine)
    return;
  /* Until the unqueue, w is claimed but still queued: whoever pops it
   * meanwhile must pass it by (and keep what it brought). */
  if (weft__test_claim_pause)
    weft__test_claim_pause();
  unqueue(w);
  weft__waiter_complete(w, -ECANCELED);
}

void (*weft__test_claim_pause)(void);
void (*weft__test_publish_pause)(void);
void (*weft__test_settle_pause)(void);

/* ---- futex wait and wake, for plain threads ----------------------------------- */

int weft__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline)
{
  struct timespec ts, *tsp = NULL;
  if (deadline >= 0) {
    ts.tv_sec = deadline / 1000000000;
    ts.tv_nsec = deadline % 1000000000;
    tsp = &ts;
  }
  /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time. The
   * caller's errno is left as it was. */
  int saved = errno;
  long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
                   expected, tsp, NULL, FUTEX_BITSET_MATCH_ANY);
  int e = r == 0 ? 0 : errno;
  errno = saved;
  if (e == 0 || e == EAGAIN)
    return 0;
  return -e;
}

void weft__futex_wake(_Atomic uint32_t *word, int n)
{
  int saved = errno;
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n < 0 ? INT_MAX : n,
          NULL, NULL, 0);
  errno = saved;
}
