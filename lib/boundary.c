/* SPDX-License-Identifier: MIT */
/*
 * weft_boundary: request/response between any threads and coroutines, on the
 * wait-queue primitive.
 *
 * Every call has a heap record, the ticket, shared by the caller and the
 * server side and freed by whichever drops the last of its two references
 * (the caller's, and the queue's that passes to the server that receives
 * it). The caller's waiter lives in the ticket, not on the caller's stack,
 * so a server that races a timeout never touches memory that is gone.
 *
 * Who ends a call is decided by one CAS on ticket->state, from PENDING to the
 * outcome: the server (respond/fail), the caller (its wait ended by deadline
 * or cancellation) or close. The winner of that CAS alone may wake the
 * caller, through the waiter claim; the waiter's own result only tells the
 * caller when to look at the state. So if the caller's deadline timer fires
 * just after a server decided, the caller still returns the response (the
 * server was told 0: it cannot be lost), and a response that loses is
 * reported to the server, which keeps it.
 *
 * Locks: b->lock guards the queue, the list of received tickets, `where` and
 * the counts; the two wait queues have their own lock (taken inside b->lock,
 * and alone by waitq.c when a waiter times out). Wake-ups run after every
 * lock is dropped.
 */
#include "core.h"
#include "op.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

enum { T_PENDING, T_RESPONDED, T_FAILED, T_TIMEDOUT, T_CANCELLED, T_CLOSED, T_ABANDONED };
enum { W_NONE, W_QUEUED, W_TAKEN }; /* where a ticket is (b->lock) */

struct weft_boundary_ticket {
  weft_boundary_ticket *next, *prev; /* in b's queue or taken list; after
                                        leaving them, close's wake list */
  weft_boundary *b;                  /* holds a reference on b */
  void *req;
  void *resp;                        /* written by the server before its CAS */
  int err;                           /* fail()'s error */
  int where;                         /* W_* (b->lock) */
  int64_t deadline;                  /* the caller's effective deadline */
  _Atomic int state;                 /* T_*: leaves T_PENDING once */
  _Atomic int refs;                  /* caller + queue/server (+ close, briefly) */
  weft__waiter w;                    /* the caller waits here for the outcome */
};

struct tlist {
  weft_boundary_ticket *head, *tail;
};

struct weft_boundary {
  weft__spin lock;
  bool closed;
  size_t capacity;
  size_t nqueued, nserving;
  size_t nroom_waiters, nrecv_waiters; /* inside a wait (gauges for stats) */
  struct tlist queue;   /* sent, not received: oldest first */
  struct tlist taken;   /* received, call not over (for close) */
  weft__waitq room_q;   /* callers waiting for room */
  weft__waitq recv_q;   /* servers waiting for a request */
  _Atomic int refs;     /* the creator's + one per ticket */
  weft__counter calls, completed, overloaded, timed_out, cancelled, closed_calls, failed, late;
};

/* ---- lists and references --------------------------------------------------- */

static void tlist_push(struct tlist *l, weft_boundary_ticket *t)
{
  WEFT__DQUEUE_PUSH(l->head, l->tail, t, prev, next);
}

static void tlist_remove(struct tlist *l, weft_boundary_ticket *t)
{
  WEFT__DQUEUE_UNLINK(l->head, l->tail, t, prev, next);
}

/* Takes t out of whichever list holds it (b locked). */
static void detach_locked(weft_boundary *b, weft_boundary_ticket *t)
{
  if (t->where == W_QUEUED) {
    tlist_remove(&b->queue, t);
    b->nqueued--;
  } else if (t->where == W_TAKEN) {
    tlist_remove(&b->taken, t);
    b->nserving--;
  }
  t->where = W_NONE;
}

static void boundary_unref(weft_boundary *b)
{
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
    free(b);
}

static void ticket_unref(weft_boundary_ticket *t)
{
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
    return;
  weft_boundary *b = t->b;
  free(t);
  boundary_unref(b);
}

/* Pops and claims the first waiter of q still waiting, or NULL (b locked).
 * The caller completes it after dropping the locks. */
static weft__waiter *claim_one(weft__waitq *q)
{
  weft__waiter *w;
  weft__spin_lock(&q->lock);
  while ((w = weft__waitq_pop(q)) && !weft__waiter_claim(w))
    ;
  weft__spin_unlock(&q->lock);
  if (w)
    w->next = NULL;
  return w;
}

/* Pops and claims every waiter of q, linked through ->next (b locked). */
static weft__waiter *claim_all(weft__waitq *q, weft__waiter *list)
{
  weft__spin_lock(&q->lock);
  for (weft__waiter *w; (w = weft__waitq_pop(q));)
    if (weft__waiter_claim(w)) {
      w->next = list;
      list = w;
    }
  weft__spin_unlock(&q->lock);
  return list;
}

static void complete_all(weft__waiter *list, int result)
{
  while (list) {
    weft__waiter *next = list->next;
    weft__waiter_complete(list, result);
    list = next;
  }
}

/* Appends a fresh waiter w to q (b locked). */
static void wait_on(weft__waitq *q, weft__waiter *w)
{
  weft__waiter_init(w);
  weft__spin_lock(&q->lock);
  weft__waitq_append(q, w);
  weft__spin_unlock(&q->lock);
}

/* ---- creating and closing ----------------------------------------------------- */

int weft_boundary_create(weft_boundary **out, size_t capacity)
{
  if (!out || capacity == 0)
    return -EINVAL;
  weft_boundary *b = weft__malloc(sizeof(*b));
  if (!b)
    return -ENOMEM;
  *b = (weft_boundary){.lock = WEFT__SPIN_INIT, .capacity = capacity};
  weft__waitq_init(&b->room_q);
  weft__waitq_init(&b->recv_q);
  atomic_init(&b->refs, 1);
  *out = b;
  return 0;
}

int weft_boundary_close(weft_boundary *b)
{
  if (!b)
    return -EINVAL;
  weft__waiter *waiters = NULL;
  weft_boundary_ticket *wake = NULL, *drop = NULL;
  weft__spin_lock(&b->lock);
  if (b->closed) {
    weft__spin_unlock(&b->lock);
    return 0;
  }
  b->closed = true;
  /* Queued requests: the queue's reference is ours now. */
  for (weft_boundary_ticket *t; (t = b->queue.head);) {
    detach_locked(b, t);
    int st = T_PENDING;
    bool mine = atomic_compare_exchange_strong_explicit(&t->state, &st, T_CLOSED,
                                                        memory_order_acq_rel,
                                                        memory_order_acquire);
    if (mine) {
      t->next = wake;
      wake = t;
    } else {
      t->next = drop; /* its caller gave up and will find it gone */
      drop = t;
    }
  }
  /* Requests being served: the server keeps its reference (respond will say
   * -EPIPE); take one of our own for the wake-up. */
  for (weft_boundary_ticket *t; (t = b->taken.head);) {
    detach_locked(b, t);
    int st = T_PENDING;
    if (atomic_compare_exchange_strong_explicit(&t->state, &st, T_CLOSED, memory_order_acq_rel,
                                                memory_order_acquire)) {
      atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
      t->next = wake;
      wake = t;
    }
  }
  waiters = claim_all(&b->room_q, waiters);
  waiters = claim_all(&b->recv_q, waiters);
  weft__spin_unlock(&b->lock);

  complete_all(waiters, -EPIPE);
  while (wake) {
    weft_boundary_ticket *next = wake->next;
    if (weft__waiter_claim(&wake->w))
      weft__waiter_complete(&wake->w, 0);
    ticket_unref(wake);
    wake = next;
  }
  while (drop) {
    weft_boundary_ticket *next = drop->next;
    ticket_unref(drop);
    drop = next;
  }
  return 0;
}

void weft_boundary_destroy(weft_boundary *b)
{
  if (!b)
    return;
  weft_boundary_close(b);
  boundary_unref(b);
}

/* ---- the client side --------------------------------------------------------- */

/* Queues t, waiting for room unless NOWAIT. Returns 0 (t is visible to
 * servers now) or the error that ends the call (t was never visible). */
static int enqueue(weft_boundary *b, weft_boundary_ticket *t, unsigned flags, int64_t deadline)
{
  for (;;) {
    weft__waiter rw;
    weft__spin_lock(&b->lock);
    if (b->closed) {
      weft__spin_unlock(&b->lock);
      return -EPIPE;
    }
    if (b->nqueued < b->capacity) {
      tlist_push(&b->queue, t);
      t->where = W_QUEUED;
      b->nqueued++;
      weft__waiter *server = claim_one(&b->recv_q);
      weft__spin_unlock(&b->lock);
      if (server)
        weft__waiter_complete(server, 0);
      return 0;
    }
    if (flags & WEFT_BOUNDARY_NOWAIT) {
      weft__spin_unlock(&b->lock);
      return -EAGAIN;
    }
    wait_on(&b->room_q, &rw);
    b->nroom_waiters++;
    weft__spin_unlock(&b->lock);
    /* 0: a place was freed (someone may take it first: look again);
     * -EPIPE from close; -ETIMEDOUT / -ECANCELED / -ENOMEM end the call. */
    int r = weft__waiter_wait(&rw, deadline);
    weft__spin_lock(&b->lock);
    b->nroom_waiters--;
    weft__spin_unlock(&b->lock);
    if (r < 0)
      return r;
  }
}

/* Wakes one caller waiting for room for each place freed (b unlocked). */
static void free_places(weft_boundary *b, unsigned n)
{
  weft__waiter *list = NULL;
  weft__spin_lock(&b->lock);
  while (n--) {
    weft__waiter *w = claim_one(&b->room_q);
    if (!w)
      break;
    w->next = list;
    list = w;
  }
  weft__spin_unlock(&b->lock);
  complete_all(list, 0);
}

static weft__counter *outcome_counter(weft_boundary *b, int st);

/* Waits for the outcome of queued t, ends the call (counted) and drops the
 * caller's reference. Returns the call's result. */
static int await_outcome(weft_boundary *b, weft_boundary_ticket *t, int64_t deadline,
                         void **resp)
{
  int st;
  int r = weft__waiter_wait(&t->w, deadline);
  if (r == 0) {
    /* Completed by whoever decided (they decide before they wake). */
    st = atomic_load_explicit(&t->state, memory_order_acquire);
  } else {
    /* Our deadline or cancellation took the waiter; the call may still have
     * been decided by someone else first - then theirs is the outcome. */
    int mine = r == -ETIMEDOUT ? T_TIMEDOUT : r == -ECANCELED ? T_CANCELLED : T_ABANDONED;
    int cur = T_PENDING;
    if (atomic_compare_exchange_strong_explicit(&t->state, &cur, mine, memory_order_acq_rel,
                                                memory_order_acquire)) {
      cur = mine;
      /* Withdraw: a queued request leaves the queue (its reference is
       * ours to drop); a served one leaves the taken list. */
      weft__spin_lock(&b->lock);
      bool was_queued = t->where == W_QUEUED;
      detach_locked(b, t);
      weft__spin_unlock(&b->lock);
      if (was_queued) {
        atomic_fetch_sub_explicit(&t->refs, 1, memory_order_relaxed); /* never the last */
        free_places(b, 1);
      }
    }
    st = cur;
  }
  switch (st) {
  case T_RESPONDED:
    *resp = t->resp;
    r = 0;
    break;
  case T_FAILED:
    r = t->err;
    break;
  case T_ABANDONED:
    /* Only this caller abandons: r is its wait's error. Not t->err, which
     * a server whose fail() lost the race may still be writing. */
    break;
  case T_TIMEDOUT:
    r = -ETIMEDOUT;
    break;
  case T_CANCELLED:
    r = -ECANCELED;
    break;
  default:
    r = -EPIPE;
    break;
  }
  weft__count_shared(outcome_counter(b, st), 1);
  ticket_unref(t);
  return r;
}

static weft__counter *outcome_counter(weft_boundary *b, int st)
{
  switch (st) {
  case T_RESPONDED:
    return &b->completed;
  case T_TIMEDOUT:
    return &b->timed_out;
  case T_CANCELLED:
    return &b->cancelled;
  case T_CLOSED:
    return &b->closed_calls;
  default:
    return &b->failed;
  }
}

/* The state a call that never reached the queue ended in. */
static int early_state(int r)
{
  switch (r) {
  case -ETIMEDOUT:
    return T_TIMEDOUT;
  case -ECANCELED:
    return T_CANCELLED;
  case -EPIPE:
    return T_CLOSED;
  default:
    return T_FAILED;
  }
}

int weft_boundary_call(weft_boundary *b, void *req, void **resp, unsigned flags,
                       int64_t deadline)
{
  if (!b || !resp || (flags & ~WEFT_BOUNDARY_NOWAIT))
    return -EINVAL;
  *resp = NULL;
  weft__count_shared(&b->calls, 1);

  /* The deadline the waits will use (the task's scope may be earlier), so
   * the server sees the real one - WEFT_NO_DEADLINE for none, whichever
   * negative value the caller gave (weft/time.h). */
  weft_task *self = weft__task_self();
  deadline = weft__deadline_for(self, deadline);

  weft_boundary_ticket *t = NULL;
  int r = weft__may_wait(self, deadline);
  if (r == 0 && !(t = weft__malloc(sizeof(*t))))
    r = -ENOMEM;
  else if (r == 0) {
    t->next = t->prev = NULL;
    t->b = b;
    t->req = req;
    t->resp = NULL;
    t->err = 0;
    t->where = W_NONE;
    t->deadline = deadline;
    atomic_init(&t->state, T_PENDING);
    atomic_init(&t->refs, 2);
    weft__waiter_init(&t->w); /* before a server can see it */
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    r = enqueue(b, t, flags, deadline);
    if (r == 0) {
      /* A server may take the request from here on, before our wait
       * arms its deadline timer - which can still fail (-ENOMEM). */
      if (weft__test_call_queued_pause)
        weft__test_call_queued_pause();
      return await_outcome(b, t, deadline, resp);
    }
    ticket_unref(t); /* never seen by anyone: both references are ours */
    ticket_unref(t);
  }
  if (r == -EAGAIN)
    weft__count_shared(&b->overloaded, 1);
  else
    weft__count_shared(outcome_counter(b, early_state(r)), 1);
  return r;
}

/* ---- the server side ----------------------------------------------------------- */

int weft_boundary_recv(weft_boundary *b, weft_boundary_ticket **out, int64_t deadline)
{
  if (!b || !out)
    return -EINVAL;
  *out = NULL;
  for (;;) {
    weft__waiter sw;
    weft_boundary_ticket *t, *gone = NULL;
    unsigned freed = 0;
    weft__spin_lock(&b->lock);
    /* Skip requests whose caller gave up and has not withdrawn them yet. */
    while ((t = b->queue.head)) {
      detach_locked(b, t);
      freed++;
      if (atomic_load_explicit(&t->state, memory_order_acquire) == T_PENDING)
        break;
      t->next = gone;
      gone = t;
    }
    if (t) {
      tlist_push(&b->taken, t);
      t->where = W_TAKEN;
      b->nserving++;
    }
    bool closed = b->closed;
    if (!t && !closed) {
      wait_on(&b->recv_q, &sw);
      b->nrecv_waiters++;
    }
    weft__spin_unlock(&b->lock);

    while (gone) {
      weft_boundary_ticket *next = gone->next;
      ticket_unref(gone);
      gone = next;
    }
    if (freed)
      free_places(b, freed);
    if (t) {
      *out = t;
      return 0;
    }
    if (closed)
      return -EPIPE;
    /* 0: a request was queued (another server may take it first). */
    int r = weft__waiter_wait(&sw, deadline);
    weft__spin_lock(&b->lock);
    b->nrecv_waiters--;
    weft__spin_unlock(&b->lock);
    if (r < 0)
      return r;
  }
}

void *weft_boundary_request(const weft_boundary_ticket *t)
{
  return t ? t->req : NULL;
}

int64_t weft_boundary_deadline(const weft_boundary_ticket *t)
{
  return t ? t->deadline : WEFT_NO_DEADLINE;
}

bool weft_boundary_waiting(const weft_boundary_ticket *t)
{
  return t && atomic_load_explicit(&((weft_boundary_ticket *)t)->state,
                                   memory_order_acquire) == T_PENDING;
}

/* Ends t's call with `st` if nobody did yet, and drops the server's
 * reference. The resp/err fields were written before: the CAS publishes
 * them, and the caller reads them only if this CAS won. */
static int finish(weft_boundary_ticket *t, int st)
{
  weft_boundary *b = t->b;
  int cur = T_PENDING, r = 0;
  if (atomic_compare_exchange_strong_explicit(&t->state, &cur, st, memory_order_acq_rel,
                                              memory_order_acquire)) {
    weft__spin_lock(&b->lock);
    detach_locked(b, t);
    weft__spin_unlock(&b->lock);
    /* Lost only to the caller's own deadline or cancel that fired after our
     * CAS: the caller then finds our outcome in the state. */
    if (weft__waiter_claim(&t->w))
      weft__waiter_complete(&t->w, 0);
  } else {
    r = cur == T_TIMEDOUT ? -ETIMEDOUT : cur == T_CLOSED ? -EPIPE : -ECANCELED;
    weft__count_shared(&b->late, 1);
  }
  ticket_unref(t);
  return r;
}

int weft_boundary_respond(weft_boundary_ticket *t, void *resp)
{
  if (!t)
    return -EINVAL;
  t->resp = resp;
  return finish(t, T_RESPONDED);
}

int weft_boundary_fail(weft_boundary_ticket *t, int err)
{
  if (!t || err >= 0)
    return -EINVAL;
  t->err = err;
  return finish(t, T_FAILED);
}

void (*weft__test_call_queued_pause)(void);

int weft_boundary_stats_get(const weft_boundary *cb, struct weft_boundary_stats *s)
{
  if (!cb || !s)
    return -EINVAL;
  weft_boundary *b = (weft_boundary *)cb;
  weft__spin_lock(&b->lock);
  s->queued = b->nqueued;
  s->serving = b->nserving;
  s->room_waiters = b->nroom_waiters;
  s->recv_waiters = b->nrecv_waiters;
  weft__spin_unlock(&b->lock);
  s->calls = weft__counter_get(&b->calls);
  s->completed = weft__counter_get(&b->completed);
  s->overloaded = weft__counter_get(&b->overloaded);
  s->timed_out = weft__counter_get(&b->timed_out);
  s->cancelled = weft__counter_get(&b->cancelled);
  s->closed = weft__counter_get(&b->closed_calls);
  s->failed = weft__counter_get(&b->failed);
  s->late = weft__counter_get(&b->late);
  return 0;
}
