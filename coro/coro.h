/* SPDX-License-Identifier: MIT */
/*
 * The coroutine object: a function running on its own stack, switched with
 * fcontext. Knows nothing of shards, queues or io_uring; lib/ builds the
 * scheduler on top.
 *
 * Memory layout: one allocation per coroutine. The object (and whatever the
 * caller embeds around it, `obj_size` bytes) sits at the top of the stack it
 * describes, so creating a coroutine is one stack allocation - usually a pop
 * from the thread's stack cache - and no malloc:
 *
 *     map                base                              base+size
 *     | guard / canary   | <- stack grows down ... | frames | object |
 *
 * A coroutine may be resumed from any thread (that is what work stealing
 * needs): every resume records where to come back to, and the sanitizer
 * bookkeeping is redone per switch.
 */
#ifndef WEFT_CORO_CORO_H
#define WEFT_CORO_CORO_H

#include "fcontext.h"
#include "sanitize.h"
#include "stack.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum weft__coro_state {
  WEFT__CORO_CREATED,   /* never run */
  WEFT__CORO_RUNNING,   /* on some thread right now */
  WEFT__CORO_SUSPENDED, /* gave up the CPU, can be resumed */
  WEFT__CORO_FINISHED,  /* its function returned; only destroy is left */
};

#define WEFT__CORO_NAME_MAX 32

typedef struct weft__coro {
  weft__fcontext ctx;       /* where it continues (valid unless RUNNING) */
  weft__fcontext caller;    /* where suspend returns to (set by each resume) */
  void *(*fn)(void *);
  void *arg;
  void *ret;                /* fn's return value once FINISHED */
  struct weft__coro *entered_from; /* who switched to it when it started
                               (NULL: its resumer); read at the top of fn */
  weft__stack stack;        /* the stack this object lives on */
  uint64_t id;              /* process-wide unique, from 1 */
  int state;                /* enum weft__coro_state */
  /* Sanitizer bookkeeping (unused fields cost nothing worth saving). */
  void *asan_fake;          /* ASan fake-stack slot of this coroutine */
  const void *caller_bottom;/* the resumer's stack, for ASan */
  size_t caller_size;
  void *tsan_fiber;         /* this coroutine's TSan fiber */
  void *tsan_caller;        /* the resumer's TSan fiber */
  char name[WEFT__CORO_NAME_MAX]; /* NUL-terminated, may be empty */
} weft__coro;

/* Installs this thread's alternate signal stack (done lazily by resume). */
int weft__coro_thread_init(void);

typedef struct weft__coro_opts {
  void *(*fn)(void *);      /* entry point (required) */
  void *arg;
  size_t stack_size;        /* bytes; 0 or absurd → -EINVAL */
  size_t obj_size;          /* bytes reserved at the top for the object the
                               caller embeds weft__coro in (as its first
                               member); 0 = sizeof(weft__coro) */
  const char *name;         /* copied, truncated; NULL = none */
} weft__coro_opts;

/* Creates a coroutine that will run o->fn(o->arg) when first resumed.
 * -EINVAL for a bad size or missing fn, -ENOMEM when no stack can be had. */
int weft__coro_create(weft__coro **out, const weft__coro_opts *o);

/* The coroutine running on this thread. Only the resume path, which always
 * continues on the thread it started on, and a switch, just before it jumps,
 * read or write it directly; code
 * that runs inside a coroutine uses weft__coro_self(). Initial-exec: no
 * __tls_get_addr call on the switch path, even in the shared library. */
extern __thread weft__coro *weft__coro_tls __attribute__((tls_model("initial-exec")));
/* True once this thread has its alternate signal stack (coro/overflow.c). */
extern __thread bool weft__coro_thread_ready __attribute__((tls_model("initial-exec")));

_Noreturn void weft__overflow_report(const weft__coro *co, const char *detail);

/* ---- switching ------------------------------------------------------------------
 *
 * Two ways in: weft__coro_resume() from the resumer (a scheduler loop or a
 * plain thread), and weft__coro_switch() from one coroutine straight to
 * another - the symmetric hand-over that saves a trip through the resumer
 * when one coroutine wakes the next and then waits. A coroutine entered by a
 * switch inherits the switcher's resumer: when it suspends or finishes,
 * control goes back to whoever resumed the first coroutine of the chain.
 *
 * Every jump carries who is leaving: the resumer passes the coroutine it
 * resumes (so an arrival that sees itself came from the resumer), a switch
 * passes the departing coroutine (the arrival saves that one's context), a
 * suspend or a finish passes the coroutine itself (the resumer learns which
 * coroutine of the chain came back). */

/* The arriving side of a jump into `self`: records where the jump came
 * from. Returns the coroutine that switched to `self`, or NULL when the
 * resumer did. */
static inline weft__coro *weft__coro_arrive_(weft__coro *self, weft__transfer t)
{
  if (t.data == self) {
    self->caller = t.fctx;
    weft__asan_finish(self->asan_fake, &self->caller_bottom, &self->caller_size);
    return NULL;
  }
  weft__coro *from = t.data;
  from->ctx = t.fctx;
  from->state = WEFT__CORO_SUSPENDED;
  /* The stack we came from is a sibling's; our resumer's stays as the
   * switcher handed it over. */
  weft__asan_finish(self->asan_fake, NULL, NULL);
  return from;
}

/* Runs `co` (created or suspended) until control comes back: returns the
 * coroutine that gave it back - `co`, or one `co` switched to - in state
 * FINISHED or SUSPENDED. Must not be called from inside a coroutine of the
 * chain.
 *
 * Inline on purpose: fcontext leaves through an indirect jump, so a `ret`
 * right after a switch always mispredicts; switching (weft__jump) from the
 * resumer's own frame saves that return (measured: about half the cost of
 * a round trip over the bare jump). */
static inline weft__coro *weft__coro_resume_any(weft__coro *co)
{
  weft__coro *prev = weft__coro_tls;
  if (__builtin_expect(!weft__coro_thread_ready, 0))
    weft__coro_thread_init();
  weft__coro_tls = co;
  co->state = WEFT__CORO_RUNNING;
  co->tsan_caller = weft__tsan_current();
  void *fake = NULL;
  weft__asan_start(&fake, co->stack.base, co->stack.size);
  weft__tsan_switch(co->tsan_fiber);
  weft__transfer t = weft__jump(co->ctx, co);
  weft__asan_finish(fake, NULL, NULL);
  weft__coro_tls = prev;

  weft__coro *back = t.data;
  if (!weft__stack_canary_ok(&back->stack))
    weft__overflow_report(back, "unguarded stack, canary overwritten");
  if (back->state != WEFT__CORO_FINISHED) {
    back->ctx = t.fctx;
    back->state = WEFT__CORO_SUSPENDED;
  }
  return back;
}

/* weft__coro_resume_any() for a resumer that does not use switches: the
 * state `co` stopped in. */
static inline int weft__coro_resume(weft__coro *co)
{
  return weft__coro_resume_any(co)->state;
}

/* Gives control back to whoever resumed `self` (the running coroutine), or
 * whoever resumed the coroutine that switched to it. Returns when `self`
 * runs again - possibly on another thread: `self` is still right (it points
 * at the object, not at thread-local state); anything thread-local must be
 * re-read. Returns the coroutine that switched to `self`, NULL if the
 * resumer resumed it. */
static inline weft__coro *weft__coro_suspend(weft__coro *self)
{
  weft__asan_start(&self->asan_fake, self->caller_bottom, self->caller_size);
  weft__tsan_switch(self->tsan_caller);
  weft__transfer t = weft__jump(self->caller, self);
  return weft__coro_arrive_(self, t);
}

/* Switches from the running coroutine `self` straight to `next`, which must
 * be SUSPENDED or CREATED and not running anywhere. `self` is SUSPENDED from
 * then on; `next` runs on this thread with self's resumer as its own (a
 * CREATED one finds self in next->entered_from). Returns like
 * weft__coro_suspend(). */
static inline weft__coro *weft__coro_switch(weft__coro *self, weft__coro *next)
{
  if (!weft__stack_canary_ok(&self->stack))
    weft__overflow_report(self, "unguarded stack, canary overwritten");
  next->caller = self->caller;
  next->caller_bottom = self->caller_bottom;
  next->caller_size = self->caller_size;
  next->tsan_caller = self->tsan_caller;
  next->state = WEFT__CORO_RUNNING;
  weft__coro_tls = next;
  weft__asan_start(&self->asan_fake, next->stack.base, next->stack.size);
  weft__tsan_switch(next->tsan_fiber);
  weft__transfer t = weft__jump(next->ctx, self);
  return weft__coro_arrive_(self, t);
}

/* Releases a coroutine that is not running (finished or not); its object is
 * gone afterwards. A suspended coroutine is dropped without unwinding. */
void weft__coro_destroy(weft__coro *co);

/* The coroutine running on this thread, or NULL. Never inlined and opaque to
 * the optimiser: a coroutine can move to another thread while suspended, so a
 * thread-local address must be re-read after every switch, never cached. */
weft__coro *weft__coro_self(void);


#endif
