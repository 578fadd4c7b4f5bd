/* SPDX-License-Identifier: MIT */
/* Task groups and cancellation tokens. */
#include "core.h"
#include "fence.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

struct weft_group {
  weft__spin lock;
  weft_task *members;       /* active members (task->group_next links) */
  size_t active;
  bool cancelled;
  int error;                /* first member error, 0 if none */
  bool member_cancelled;    /* some member ended cancelled */
  weft__waitq idle_q;       /* waiters for active == 0 */
};

int weft_group_create(weft_group **out)
{
  if (!out)
    return -EINVAL;
  weft_group *g = weft__calloc(1, sizeof(*g));
  if (!g)
    return -ENOMEM;
  g->lock = (weft__spin)WEFT__SPIN_INIT;
  weft__waitq_init(&g->idle_q);
  *out = g;
  return 0;
}

int weft_group_spawn(weft_group *g, const weft_spawn_opts *o, void *(*fn)(void *), void *arg)
{
  if (!g)
    return -EINVAL;
  weft__shard *cur = weft__shard_self();
  if (!cur || !weft__task_self())
    return -EPERM;
  if (__atomic_load_n(&g->cancelled, __ATOMIC_ACQUIRE))
    return -ECANCELED;
  weft__shard *target;
  weft_task *t;
  /* With a handle: the group holds it until the member returns. */
  int r = weft__task_create(cur->rt, cur, o, fn, arg, &target, &t, true);
  if (r < 0)
    return r;
  weft__spin_lock(&g->lock);
  t->group = g;
  WEFT__DLIST_PUSH(g->members, t, group_prev, group_next);
  g->active++;
  bool cancel = g->cancelled;
  weft__spin_unlock(&g->lock);
  if (cancel)
    weft__task_cancel(t);
  weft__task_start(cur, target, t);
  return 0;
}

/* Called by the shard where member t returned, before its joiners wake. */
void weft__group_member_done(weft_task *t)
{
  weft_group *g = t->group;
  intptr_t v = (intptr_t)t->coro.ret;
  weft__waiter *ready = NULL;
  weft__spin_lock(&g->lock);
  WEFT__DLIST_UNLINK(g->members, t, group_prev, group_next);
  if (!g->error && v < 0 && v > -4096)
    g->error = (int)v;
  if (atomic_load_explicit(&t->cancelled, memory_order_relaxed))
    g->member_cancelled = true;
  if (--g->active == 0) {
    /* The queue's own lock as well: a waiter that times out or is
     * cancelled unlinks itself under that one alone (waitq.c). */
    weft__spin_lock(&g->idle_q.lock);
    ready = weft__waitq_take(&g->idle_q, INT64_MAX, NULL);
    weft__spin_unlock(&g->idle_q.lock);
  }
  weft__spin_unlock(&g->lock);
  weft__waiters_complete(ready, 0);
  weft__task_release(t); /* the group's handle */
}

static int result(weft_group *g)
{
  if (g->error)
    return g->error;
  return g->member_cancelled ? -ECANCELED : 0;
}

static int wait_idle(weft_group *g, int64_t deadline, bool cancellable)
{
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = !cancellable;
  weft__spin_lock(&g->lock);
  if (g->active == 0) {
    int r = result(g);
    weft__spin_unlock(&g->lock);
    return r;
  }
  /* g->lock orders the append against the last member's take; the
   * queue's lock against a waiter leaving it (see weft__group_member_done). */
  weft__spin_lock(&g->idle_q.lock);
  weft__waitq_append(&g->idle_q, &w);
  weft__spin_unlock(&g->idle_q.lock);
  weft__spin_unlock(&g->lock);
  int r = weft__waiter_wait(&w, deadline);
  if (r < 0)
    return r;
  weft__spin_lock(&g->lock);
  r = result(g);
  weft__spin_unlock(&g->lock);
  return r;
}

/* A member waiting for its own group waits for itself: the group is not
 * idle while the member runs. Refused, as weft_join refuses a task joining
 * itself. (t->group is set before t starts, and only t reads it here.) */
static bool caller_is_member(const weft_group *g)
{
  weft_task *t = weft__task_self();
  return t && t->group == g;
}

int weft_group_wait_dl(weft_group *g, int64_t deadline)
{
  if (!g)
    return -EINVAL;
  if (caller_is_member(g))
    return -EDEADLK;
  return wait_idle(g, deadline, true);
}

int weft_group_wait(weft_group *g)
{
  return weft_group_wait_dl(g, WEFT_NO_DEADLINE);
}

int weft_group_cancel(weft_group *g)
{
  if (!g)
    return -EINVAL;
  /* Take a reference to each member under the lock, cancel outside it:
   * cancelling may wake shards (a system call). */
  weft__spin_lock(&g->lock);
  __atomic_store_n(&g->cancelled, true, __ATOMIC_RELEASE);
  size_t n = g->active;
  /* The members, then their runtimes (read before the references go). */
  weft_task **v = n ? weft__malloc(n * (sizeof(*v) + sizeof(weft_runtime *))) : NULL;
  /* From outside a member's runtime, the whole of it is an outside call
   * (weft__outside_enter): once one member is woken, the last may end and
   * the runtime stop while the others are still to be delivered and
   * released. One entry per member, for its runtime, made while the
   * member is sure to be live. */
  weft__shard *self = weft__shard_self();
  weft_runtime **rts = v ? (weft_runtime **)(void *)(v + n) : NULL;
  size_t k = 0;
  if (v)
    for (weft_task *t = g->members; t; t = t->group_next, k++) {
      atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
      v[k] = t;
      rts[k] = weft__outside_enter(t->rt, self) ? t->rt : NULL;
    }
  else
    for (weft_task *t = g->members; t; t = t->group_next)
      weft__task_cancel(t); /* no memory for the list: cancel under the lock */
  weft__spin_unlock(&g->lock);
  /* One barrier for all of them (weft__task_cancel_mark). */
  for (size_t i = 0; i < k; i++)
    weft__task_cancel_mark(v[i]);
  if (k)
    weft__fence_heavy();
  for (size_t i = 0; i < k; i++) {
    weft__task_cancel_deliver(v[i]);
    weft__task_release(v[i]);
  }
  for (size_t i = 0; i < k; i++)
    if (rts[i])
      weft__outside_leave(rts[i], true);
  free(v);
  return 0;
}

size_t weft_group_active(const weft_group *g)
{
  if (!g)
    return 0;
  weft_group *m = (weft_group *)g;
  weft__spin_lock(&m->lock);
  size_t n = m->active;
  weft__spin_unlock(&m->lock);
  return n;
}

int weft_group_destroy(weft_group *g)
{
  if (!g)
    return -EINVAL;
  if (caller_is_member(g))
    return -EDEADLK; /* its uncancellable wait would never end */
  weft_group_cancel(g);
  int r = wait_idle(g, WEFT_NO_DEADLINE, false);
  free(g);
  return r;
}

/* ---- cancellation tokens ----------------------------------------------------------- */

struct weft_cancel_token {
  weft_event *ev; /* manual reset, set once */
};

int weft_cancel_token_create(weft_cancel_token **out)
{
  if (!out)
    return -EINVAL;
  weft_cancel_token *tok = weft__malloc(sizeof(*tok));
  if (!tok)
    return -ENOMEM;
  int r = weft_event_create(&tok->ev, 0);
  if (r < 0) {
    free(tok);
    return r;
  }
  *out = tok;
  return 0;
}

int weft_cancel_token_cancel(weft_cancel_token *tok)
{
  return tok ? weft_event_set(tok->ev) : -EINVAL;
}

bool weft_cancel_token_is_cancelled(const weft_cancel_token *tok)
{
  return tok && weft_event_is_set(tok->ev);
}

int weft_cancel_token_wait(weft_cancel_token *tok, int64_t deadline)
{
  return tok ? weft_event_wait_dl(tok->ev, deadline) : -EINVAL;
}

void weft_cancel_token_destroy(weft_cancel_token *tok)
{
  if (!tok)
    return;
  weft_event_destroy(tok->ev);
  free(tok);
}
