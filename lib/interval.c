/* SPDX-License-Identifier: MIT */
/* Deadline scopes, intervals and resettable timers. */
#include "core.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

int64_t weft_deadline_push(int64_t deadline)
{
  weft_task *t = weft__task_self();
  if (!t)
    return WEFT_NO_DEADLINE;
  int64_t saved = t->deadline;
  if (deadline >= 0 && (saved < 0 || deadline < saved))
    t->deadline = deadline;
  return saved;
}

void weft_deadline_pop(int64_t saved)
{
  weft_task *t = weft__task_self();
  if (t)
    t->deadline = saved;
}

int64_t weft_deadline(void)
{
  weft_task *t = weft__task_self();
  return t ? t->deadline : WEFT_NO_DEADLINE;
}

/* ---- intervals ------------------------------------------------------------------ */

struct weft_interval {
  int64_t period;
  int64_t next;     /* when the next tick is due */
  int missed;       /* enum weft_missed_tick */
};

int weft_interval_create(weft_interval **out, int64_t period, int64_t start, int missed)
{
  if (!out || period <= 0 || missed < WEFT_MISSED_BURST || missed > WEFT_MISSED_SKIP)
    return -EINVAL;
  weft_interval *iv = weft__malloc(sizeof(*iv));
  if (!iv)
    return -ENOMEM;
  iv->period = period;
  iv->missed = missed;
  iv->next = start > 0 ? start : weft__add_sat(weft__now(), period);
  *out = iv;
  return 0;
}

int weft_interval_next(weft_interval *iv)
{
  if (!iv)
    return -EINVAL;
  /* Late means the caller came for this tick after it was due. */
  bool late = weft__now() > iv->next;
  int r = weft_sleep_until(iv->next); /* -ETIMEDOUT from a deadline scope */
  if (r < 0)
    return r;
  int64_t now = weft__now();
  int64_t due = iv->next;
  switch (iv->missed) {
  case WEFT_MISSED_BURST:
    iv->next = weft__add_sat(due, iv->period); /* late ticks follow back to back */
    break;
  case WEFT_MISSED_DELAY:
    /* Restart the schedule from a late tick; on-time ticks keep the grid
     * (the wake-up's own latency does not make a tick late). */
    iv->next = weft__add_sat(late ? now : due, iv->period);
    break;
  case WEFT_MISSED_SKIP:
    iv->next = weft__add_sat(due, iv->period);
    if (iv->next <= now) /* now - due < period * (k + 1) <= the room left */
      iv->next = weft__add_sat(due, ((now - due) / iv->period + 1) * iv->period);
    break;
  }
  return 0;
}

int64_t weft_interval_deadline(const weft_interval *iv)
{
  return iv ? iv->next : WEFT_NO_DEADLINE;
}

int weft_interval_reset(weft_interval *iv, int64_t start)
{
  if (!iv)
    return -EINVAL;
  iv->next = start > 0 ? start : weft__add_sat(weft__now(), iv->period);
  return 0;
}

void weft_interval_destroy(weft_interval *iv)
{
  free(iv);
}

/* ---- resettable timers --------------------------------------------------------------- */

struct weft_timer {
  weft__waitq q;          /* waiters; reset() wakes them to re-read the deadline */
  _Atomic int64_t deadline;
};

int weft_timer_create(weft_timer **out, int64_t deadline)
{
  if (!out)
    return -EINVAL;
  weft_timer *tm = weft__malloc(sizeof(*tm));
  if (!tm)
    return -ENOMEM;
  weft__waitq_init(&tm->q);
  atomic_init(&tm->deadline, deadline);
  *out = tm;
  return 0;
}

int weft_timer_wait(weft_timer *tm)
{
  if (!tm)
    return -EINVAL;
  for (;;) {
    weft__waiter w;
    weft__waiter_init(&w);
    weft__spin_lock(&tm->q.lock);
    int64_t due = atomic_load_explicit(&tm->deadline, memory_order_acquire);
    if (due >= 0 && due <= weft__now()) {
      weft__spin_unlock(&tm->q.lock);
      return weft__ready_result(); /* due: as weft_sleep_until's past deadline */
    }
    weft__waitq_append(&tm->q, &w);
    weft__spin_unlock(&tm->q.lock);
    int r = weft__waiter_wait(&w, due);
    if (r == -ECANCELED || r == -ENOMEM)
      return r;
    if (r == -ETIMEDOUT) {
      /* Our deadline, or the task's deadline scope? */
      int64_t scope = weft_deadline();
      if (scope >= 0 && scope <= weft__now() && (due < 0 || scope < due))
        return -ETIMEDOUT;
    }
    /* 0: reset() moved the deadline; -ETIMEDOUT: it passed. Look again. */
  }
}

int weft_timer_reset(weft_timer *tm, int64_t deadline)
{
  if (!tm)
    return -EINVAL;
  weft__spin_lock(&tm->q.lock);
  atomic_store_explicit(&tm->deadline, deadline, memory_order_release);
  weft__waiter *ready = weft__waitq_take(&tm->q, INT64_MAX, NULL);
  weft__spin_unlock(&tm->q.lock);
  weft__waiters_complete(ready, 0);
  return 0;
}

int64_t weft_timer_deadline(const weft_timer *tm)
{
  return tm ? atomic_load_explicit(&((weft_timer *)tm)->deadline, memory_order_acquire)
            : WEFT_NO_DEADLINE;
}

void weft_timer_destroy(weft_timer *tm)
{
  free(tm);
}
