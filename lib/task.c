/* SPDX-License-Identifier: MIT */
/* Tasks: spawn with placement, join, detach, cancel, yield. */
#include "core.h"
#include "fence.h"
#include "op.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

void weft_spawn_opts_init(weft_spawn_opts *o)
{
  if (!o)
    return;
  memset(o, 0, sizeof(*o));
  o->placement = WEFT_PLACE_STEALABLE;
  o->shard = -1;
}

/* splitmix64's finaliser: sticky keys that differ in any bit spread evenly. */
static uint64_t mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

static int pick_shard(weft_runtime *rt, weft__shard *cur, const weft_spawn_opts *o)
{
  int here = (cur && cur->rt == rt) ? cur->id : -1;
  int n = rt->nshards, s;
  if (o->shard < -1 || o->shard >= n)
    return -EINVAL;
  switch (o->placement) {
  case WEFT_PLACE_STEALABLE:
  case WEFT_PLACE_STEALABLE_PREFERRED:
  case WEFT_PLACE_PINNED:
    s = o->shard >= 0 ? o->shard : here;
    if (s < 0)
      s = (int)(atomic_fetch_add_explicit(&rt->rr_next, 1, memory_order_relaxed) % (unsigned)n);
    return s;
  case WEFT_PLACE_ROUND_ROBIN:
    return (int)(atomic_fetch_add_explicit(&rt->rr_next, 1, memory_order_relaxed) % (unsigned)n);
  case WEFT_PLACE_STICKY:
    return (int)(mix64(o->key) % (uint64_t)n);
  default:
    return -EINVAL;
  }
}

/* Every task's coroutine runs this: the bookkeeping of a hand-over that
 * started it, the spawned function, then whatever it left open is ended
 * here, by the task itself (it may have to wait for the kernel's last
 * completion), before the task counts as finished. */
static void *task_body(void *arg)
{
  weft_task *t = arg;
  if (t->coro.entered_from) /* started by a hand-over, not by the loop */
    weft__shard_handed_over(t->shard, (weft_task *)(void *)t->coro.entered_from);
  void *ret = t->body(t->body_arg);
  /* SQEs it took from weft_uring_sqe and passed to no call would run at
   * the shard's next submission, into memory of a task that is gone, and
   * make the next caller's weft_uring_wait fail: none of them runs. */
  weft__shard *sh = weft__shard_self();
  if (sh->uring_unadopted)
    weft__uring_abandon(sh);
  while (t->held)
    t->held->end(t->held);
  return ret;
}

void weft__task_hold(weft_task *t, weft__held *h, void (*end)(weft__held *h))
{
  h->end = end;
  WEFT__DLIST_PUSH(t->held, h, prev, next);
}

void weft__task_unhold(weft_task *t, weft__held *h)
{
  WEFT__DLIST_UNLINK(t->held, h, prev, next);
}

static void list_add(weft__shard *sh, weft_task *t)
{
  t->list_shard = sh;
  WEFT__DLIST_PUSH(sh->list_head, t, list_prev, list_next);
}

static void list_remove(weft_task *t)
{
  weft__shard *sh = t->list_shard;
  weft__spin_lock(&sh->list_lock);
  WEFT__DLIST_UNLINK(sh->list_head, t, list_prev, list_next);
  weft__spin_unlock(&sh->list_lock);
}

int weft__task_create(weft_runtime *rt, weft__shard *cur, const weft_spawn_opts *o,
                      void *(*fn)(void *), void *arg, weft__shard **target, weft_task **out,
                      bool want_handle)
{
  weft_spawn_opts defaults;
  if (!o) {
    weft_spawn_opts_init(&defaults);
    o = &defaults;
  }
  if (!fn)
    return -EINVAL;
  if (atomic_load_explicit(&rt->stopping, memory_order_acquire))
    return -ECANCELED;
  int s = pick_shard(rt, cur, o);
  if (s < 0)
    return s;

  weft__coro_opts co = {
    .fn = task_body,
    .arg = NULL, /* the task itself, set below */
    .stack_size = o->stack_size ? o->stack_size : rt->cfg.stack_size,
    .obj_size = sizeof(weft_task),
    .name = o->name,
  };
  weft__coro *c;
  int r = weft__coro_create(&c, &co);
  if (r < 0)
    return r;

  weft_task *t = (weft_task *)(void *)c;
  c->arg = t;
  t->body = fn;
  t->body_arg = arg;
  t->held = NULL;
  weft__shard *sh = &rt->shards[s];
  /* Every field set explicitly (no memset on the spawn path). */
  t->next = NULL;
  t->yielding = false;
  atomic_init(&t->cur_waiter, NULL);
  t->cur_op = NULL;
  t->pinned_ops = 0;
  t->armed_timer = NULL;
  t->group = NULL;
  t->group_prev = t->group_next = NULL;
  t->rt = rt;
  t->shard = sh;
  t->placement = o->placement;
  atomic_init(&t->state, WEFT__T_QUEUED);
  atomic_init(&t->refs, want_handle ? 2 : 1);
  atomic_init(&t->cancelled, false);
  t->wait_lock = (weft__spin)WEFT__SPIN_INIT;
  atomic_init(&t->done, false);
  weft__waitq_init(&t->done_q);
  t->deadline = -1;

  /* Counted before anyone can see the task, so that a count of finished
   * tasks never runs ahead of the count of created ones. */
  if (cur && cur->rt == rt)
    weft__count_release(&cur->stats.spawned, 1);
  else
    atomic_fetch_add_explicit(&rt->external_spawned.v, 1, memory_order_acq_rel);
  weft__spin_lock(&sh->list_lock);
  list_add(sh, t);
  /* Checked again under the list lock: a stop that sweeps this list after
   * this point sees the task; one that swept it before has set `stopping`. */
  if (atomic_load_explicit(&rt->stopping, memory_order_seq_cst))
    atomic_store_explicit(&t->cancelled, true, memory_order_relaxed);
  weft__spin_unlock(&sh->list_lock);

  *target = sh;
  *out = t;
  return 0;
}

void weft__task_start(weft__shard *cur, weft__shard *target, weft_task *t)
{
  if (cur == target)
    weft__shard_ready(target, t);
  else
    weft__shard_push_remote(target, t, cur);
}

int weft_spawn(weft_task **out, const weft_spawn_opts *o, void *(*fn)(void *), void *arg)
{
  weft__shard *cur = weft__shard_self();
  if (!cur || !weft__task_self())
    return -EPERM;
  weft__shard *target;
  weft_task *t;
  int r = weft__task_create(cur->rt, cur, o, fn, arg, &target, &t, out != NULL);
  if (r < 0)
    return r;
  if (out)
    *out = t;
  weft__task_start(cur, target, t);
  return 0;
}

int weft_runtime_submit(weft_runtime *rt, const weft_spawn_opts *o, void *(*fn)(void *),
                        void *arg, weft_task **out)
{
  if (!rt)
    return -EINVAL;
  weft__shard *target;
  weft_task *t;
  weft__shard *cur = weft__shard_self();
  int r = weft__task_create(rt, cur, o, fn, arg, &target, &t, out != NULL);
  if (r < 0)
    return r;
  if (out)
    *out = t;
  weft__task_start(cur, target, t);
  return 0;
}

void weft__task_release(weft_task *t)
{
  /* The last reference needs no locked decrement: nobody else holds one. */
  if (atomic_load_explicit(&t->refs, memory_order_acquire) != 1 &&
      atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
    return;
  list_remove(t);
  weft__coro_destroy(&t->coro);
}

static void complete(weft__shard *sh, weft_task *t)
{
  weft_runtime *rt = t->rt;
  atomic_store_explicit(&t->state, WEFT__T_FINISHED, memory_order_relaxed);
  /* Counted before joiners wake, so a joiner that reads the stats sees it. */
  weft__count_release(&sh->stats.finished, 1);

  /* Release every joiner. They are collected under the lock and completed
   * after it, so no wake-up (which may be a system call) runs under it. */
  weft__spin_lock(&t->done_q.lock);
  atomic_store_explicit(&t->done, true, memory_order_release);
  weft__waiter *ready = weft__waitq_take(&t->done_q, INT64_MAX, NULL);
  weft__spin_unlock(&t->done_q.lock);
  weft__waiters_complete(ready, 0);
  if (t->group)
    weft__group_member_done(t); /* drops the group's reference */

  weft__task_release(t);
  /* Dekker with weft_runtime_stop(): we count the finish, then read
   * `stopping`; it stores `stopping`, then reads the finish counts, with
   * the heavy fence of cancel_all() in between. Without this half, both
   * could read the old values (the C11 model allows it; the locked
   * instructions above only happen to forbid it on x86), and the stop
   * would sleep out its 10 ms timeout before seeing this task end. */
  weft__fence_light();
  if (atomic_load_explicit(&rt->stopping, memory_order_acquire)) {
    /* weft_runtime_stop() is waiting for the last task: it is woken when
     * the count reaches the one it expects for the last (a system call per
     * stop, not per task, while every task of the runtime ends at once). */
    uint32_t seq = atomic_fetch_add_explicit(&rt->finish_seq, 1, memory_order_seq_cst) + 1;
    uint32_t target = atomic_load_explicit(&rt->stop_target, memory_order_seq_cst);
    if ((int32_t)(seq - target) >= 0 && !atomic_load_explicit(&rt->stop_woken, memory_order_seq_cst) &&
        !atomic_exchange_explicit(&rt->stop_woken, 1, memory_order_seq_cst))
      weft__futex_wake(&rt->stop_woken, 1);
  }
}

void weft__task_finished(weft__shard *sh, weft_task *t)
{
  complete(sh, t);
}

void weft__task_finish_unstarted(weft__shard *sh, weft_task *t)
{
  t->coro.ret = NULL;
  t->coro.state = WEFT__CORO_FINISHED;
  complete(sh, t);
}

/* Waits for t's completion: 0, or what ended the wait first. */
static int wait_done(weft_task *t, int64_t deadline, bool uncancellable)
{
  if (atomic_load_explicit(&t->done, memory_order_acquire))
    return 0;
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = uncancellable;
  weft__spin_lock(&t->done_q.lock);
  if (atomic_load_explicit(&t->done, memory_order_relaxed)) {
    weft__spin_unlock(&t->done_q.lock);
    return 0;
  }
  weft__waitq_append(&t->done_q, &w);
  weft__spin_unlock(&t->done_q.lock);
  return weft__waiter_wait(&w, deadline);
}

int weft_join_dl(weft_task *t, void **ret, int64_t deadline)
{
  if (!t)
    return -EINVAL;
  if (t == weft__task_self())
    return -EDEADLK;
  int r = wait_done(t, deadline, false);
  if (r == -ECANCELED) {
    /* The joiner was cancelled. Returning now would leave t running with
     * whatever the joiner lent it (often the joiner's own stack): cancel
     * t as well and wait - uncancellably - until it has returned, so that
     * -ECANCELED always means "t is over and the handle is released". */
    weft__task_cancel(t);
    wait_done(t, WEFT_NO_DEADLINE, true);
  } else if (r < 0) {
    return r; /* -ETIMEDOUT, -ENOMEM: the handle is still the caller's */
  }
  if (ret)
    *ret = t->coro.ret;
  if (atomic_load_explicit(&t->cancelled, memory_order_relaxed))
    r = -ECANCELED;
  weft__task_release(t);
  return r;
}

void *weft__task_join_uncancellable(weft_task *t)
{
  wait_done(t, WEFT_NO_DEADLINE, true);
  void *ret = t->coro.ret;
  weft__task_release(t);
  return ret;
}

int weft_task_pin(void)
{
  weft_task *t = weft__task_self();
  if (!t)
    return -EPERM;
  /* Read only by the shard threads that queue t, which happens after t
   * suspends; t runs on this shard until then. */
  __atomic_store_n(&t->placement, WEFT_PLACE_PINNED, __ATOMIC_RELAXED);
  return t->shard->id;
}

int weft_join(weft_task *t, void **ret)
{
  return weft_join_dl(t, ret, WEFT_NO_DEADLINE);
}

int weft_detach(weft_task *t)
{
  if (!t)
    return -EINVAL;
  weft__task_release(t);
  return 0;
}

void weft__task_cancel_mark(weft_task *t)
{
  atomic_store_explicit(&t->cancelled, true, memory_order_seq_cst);
}

void weft__task_cancel_deliver(weft_task *t)
{
  weft__task_cancel_wait(t);
  weft__op_cancel_task(t);
}

void weft__task_cancel(weft_task *t)
{
  /* From outside the runtime, the whole of it counts as one outside call:
   * the wake-up of the first step may let t (the runtime's last task) end
   * and the runtime stop while the op cancel of the second is still to
   * come. */
  weft_runtime *rt = t->rt;
  bool outside = weft__outside_enter(rt, weft__shard_self());
  weft__task_cancel_mark(t);
  weft__fence_heavy();
  weft__task_cancel_deliver(t);
  if (outside && weft__test_cancel_pause)
    weft__test_cancel_pause();
  weft__outside_leave(rt, outside);
}

int weft_cancel(weft_task *t)
{
  if (!t)
    return -EINVAL;
  if (atomic_load_explicit(&t->done, memory_order_acquire))
    return -ESRCH;
  weft__task_cancel(t);
  return 0;
}

int weft_yield(void)
{
  weft_task *t = weft__task_self();
  if (!t) {
    sched_yield();
    return 0;
  }
  t->yielding = true;
  weft__task_suspend(t);
  return atomic_load_explicit(&t->cancelled, memory_order_relaxed) ? -ECANCELED : 0;
}

weft_task *weft_task_self(void)
{
  return weft__task_self();
}

uint64_t weft_task_id(const weft_task *t)
{
  return t ? t->coro.id : 0;
}

const char *weft_task_name(const weft_task *t)
{
  return t ? t->coro.name : "";
}

int weft_shard_id(void)
{
  weft__shard *sh = weft__shard_self();
  return sh ? sh->id : -EPERM;
}

int weft_shard_count(void)
{
  weft__shard *sh = weft__shard_self();
  return sh ? sh->rt->nshards : -EPERM;
}
