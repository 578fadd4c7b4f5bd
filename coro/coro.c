/* SPDX-License-Identifier: MIT */
#include "coro.h"

#include "overflow.h"
#include "sanitize.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

/* Ids come in per-thread blocks: one shared atomic add per 1024 coroutines
 * instead of one per coroutine (a contended line when shards spawn at once). */
#define ID_BLOCK 1024
static _Atomic uint64_t next_id_block = 1;
static __thread uint64_t id_next, id_end;

static uint64_t new_id(void)
{
  if (id_next == id_end) {
    id_next = atomic_fetch_add_explicit(&next_id_block, ID_BLOCK, memory_order_relaxed);
    id_end = id_next + ID_BLOCK;
  }
  return id_next++;
}
__thread weft__coro *weft__coro_tls __attribute__((tls_model("initial-exec")));

__attribute__((noinline, noipa)) weft__coro *weft__coro_self(void)
{
  weft__coro *co;
  /* The empty asm makes the load opaque even to link-time optimisation. */
  __asm__ volatile("" ::: "memory");
  co = weft__coro_tls;
  return co;
}

weft__coro *weft__overflow_current(void)
{
  return weft__coro_tls;
}

/* Entry of every coroutine, on its own stack, entered from its resumer or
 * by a switch from another coroutine. Both set the thread's current
 * coroutine just before the jump, so that is who we are; the transfer
 * says who jumped (see weft__coro_arrive_). */
static void trampoline(weft__transfer t)
{
  weft__coro *co = weft__coro_tls;
  co->entered_from = weft__coro_arrive_(co, t);

  co->ret = co->fn(co->arg);

  /* Re-read: the coroutine may have been resumed on another thread since. */
  co = weft__coro_self();
  weft__asan_start(NULL, co->caller_bottom, co->caller_size);
  weft__tsan_switch(co->tsan_caller);
  /* Set before the jump, read by the resumer on this same thread after it. */
  co->state = WEFT__CORO_FINISHED;
  weft__jump(co->caller, co);
  __builtin_unreachable();
}

int weft__coro_create(weft__coro **out, const weft__coro_opts *o)
{
  if (!out || !o || !o->fn)
    return -EINVAL;
  size_t obj = o->obj_size ? o->obj_size : sizeof(weft__coro);
  if (obj < sizeof(weft__coro))
    return -EINVAL;
  obj = (obj + 63) & ~(size_t)63;
  if (o->stack_size == 0 || o->stack_size > WEFT__STACK_MAX || obj + 4096 > o->stack_size)
    return -EINVAL;

  weft__stack st;
  int r = weft__stack_alloc(&st, o->stack_size);
  if (r < 0)
    return r;

  char *top = st.base + st.size;
  weft__coro *co = (weft__coro *)(void *)(top - obj);
  /* Field by field rather than memset: a fixed-size memset becomes
   * `rep stos`, slow to start on some CPUs, on the spawn path. */
  co->ret = NULL;
  co->entered_from = NULL;
  co->asan_fake = NULL;
  co->caller_bottom = NULL;
  co->caller_size = 0;
  co->tsan_caller = NULL;
  co->fn = o->fn;
  co->arg = o->arg;
  co->stack = st;
  co->id = new_id();
  co->state = WEFT__CORO_CREATED;
  co->name[0] = '\0';
  if (o->name) {
    strncpy(co->name, o->name, sizeof(co->name) - 1);
    co->name[sizeof(co->name) - 1] = '\0';
  }
  /* The frames start just below the object, 64-byte aligned. */
  co->ctx = make_fcontext(co, (size_t)((char *)co - st.base), trampoline);
  co->tsan_fiber = weft__tsan_create(co->name[0] ? co->name : NULL);
  *out = co;
  return 0;
}

void weft__coro_destroy(weft__coro *co)
{
  weft__tsan_destroy(co->tsan_fiber);
  weft__stack st = co->stack; /* the object dies with its stack */
  weft__stack_free(&st);
}
