/* SPDX-License-Identifier: MIT */
/* weft_event: a manual- or auto-reset event on the wait-queue primitive. */
#include "core.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

struct weft_event {
  weft__waitq q;
  atomic_int set;    /* 1 while set (guarded by q.lock for transitions to 1) */
  unsigned flags;
};

int weft_event_create(weft_event **out, unsigned flags)
{
  if (!out || (flags & ~WEFT_EVENT_AUTO_RESET))
    return -EINVAL;
  weft_event *ev = weft__malloc(sizeof(*ev));
  if (!ev)
    return -ENOMEM;
  weft__waitq_init(&ev->q);
  atomic_init(&ev->set, 0);
  ev->flags = flags;
  *out = ev;
  return 0;
}

void weft_event_destroy(weft_event *ev)
{
  /* A waiter may destroy the event as soon as its wait returned, and a
   * wait that found the event set without waiting returns while the set()
   * may still hold the queue's lock: let it go first. */
  if (ev)
    weft__waitq_settle(&ev->q);
  free(ev);
}

int weft_event_set(weft_event *ev)
{
  if (!ev)
    return -EINVAL;
  weft__waiter *ready;
  weft__spin_lock(&ev->q.lock);
  if (ev->flags & WEFT_EVENT_AUTO_RESET) {
    /* Hand the signal to the first waiter still waiting; keep it if none. */
    ready = weft__waitq_take(&ev->q, 1, NULL);
    if (!ready)
      atomic_store_explicit(&ev->set, 1, memory_order_release);
  } else {
    atomic_store_explicit(&ev->set, 1, memory_order_release);
    ready = weft__waitq_take(&ev->q, INT64_MAX, NULL);
  }
  if (weft__test_publish_pause)
    weft__test_publish_pause();
  weft__spin_unlock(&ev->q.lock);
  weft__waiters_complete(ready, 0);
  return 0;
}

int weft_event_reset(weft_event *ev)
{
  if (!ev)
    return -EINVAL;
  atomic_store_explicit(&ev->set, 0, memory_order_release);
  return 0;
}

bool weft_event_is_set(const weft_event *ev)
{
  return ev && atomic_load_explicit(&((weft_event *)ev)->set, memory_order_acquire);
}

/* Takes the signal if it is there: consumes it for an auto-reset event. */
static bool try_take(weft_event *ev)
{
  if (ev->flags & WEFT_EVENT_AUTO_RESET) {
    int one = 1;
    return atomic_compare_exchange_strong_explicit(&ev->set, &one, 0, memory_order_acquire,
                                                   memory_order_relaxed);
  }
  return atomic_load_explicit(&ev->set, memory_order_acquire) != 0;
}

int weft_event_wait_dl(weft_event *ev, int64_t deadline)
{
  if (!ev)
    return -EINVAL;
  if (try_take(ev))
    return 0;
  weft__waiter w;
  weft__waiter_init(&w);
  weft__spin_lock(&ev->q.lock);
  if (try_take(ev)) {
    weft__spin_unlock(&ev->q.lock);
    return 0;
  }
  weft__waitq_append(&ev->q, &w);
  weft__spin_unlock(&ev->q.lock);
  return weft__waiter_wait(&w, deadline);
}

int weft_event_wait(weft_event *ev)
{
  return weft_event_wait_dl(ev, WEFT_NO_DEADLINE);
}
