/* SPDX-License-Identifier: MIT */
/*
 * Dies on purpose, for the death tests in test_coro.c. It installs no signal
 * handler of its own: whatever report appears comes from the library's
 * SIGSEGV handler (installed by the first weft__coro_resume) or from the
 * default action it passes foreign faults on to.
 *
 *   overflow_helper named     unbounded recursion in "deep-recursion" (on a
 *                             slab stack with a guard region where the kernel
 *                             has them, else on a stack of its own mapping)
 *   overflow_helper mapped    the same on a stack of its own mapping, guard
 *                             regions turned off
 *   overflow_helper anon      the same as named in a coroutine without a name
 *   overflow_helper segv-in   a fault on an inaccessible page inside a coroutine
 *   overflow_helper segv-out  the same outside any coroutine, handler installed
 *   overflow_helper canary    a slab stack without a guard region (guard
 *                             regions and the guard budget turned off) whose
 *                             canary is dirtied
 *
 * Before it runs the coroutine it prints the kind of stack it got
 * ("overflow_helper: slab stack, guard 16384").
 *
 * Exit 2 means the helper survived what should have killed it; exit 3 means
 * its setup failed.
 */
#include "coro.h"
#include "stack.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define STACK_SIZE ((size_t)64 << 10)

/* Far deeper than any stack here; volatile so the compiler sees an exit. */
static volatile unsigned max_depth = 1u << 30;

/* Each frame keeps a buffer alive across the call, so the compiler can make
 * neither a loop nor a tail call of it. */
__attribute__((noinline)) static unsigned recurse(unsigned depth, volatile char *prev)
{
  volatile char frame[256];
  if (depth >= max_depth)
    return depth;
  frame[0] = (char)depth;
  frame[255] = prev ? prev[0] : 0;
  return recurse(depth + 1, frame) + frame[0] + frame[255];
}

static void *overflow_fn(void *arg)
{
  (void)arg;
  return (void *)(uintptr_t)recurse(0, NULL);
}

/* An address no one may touch: a fault there is a plain segmentation fault.
 * It is the middle of a 4 MiB inaccessible region, megabytes from any
 * coroutine stack, so that no heuristic (ASan's calls any fault within 64 KiB
 * of the stack pointer a stack overflow) can take it for one. */
static volatile int *forbidden_address(void)
{
  size_t len = (size_t)4 << 20;
  char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : (volatile int *)(void *)(p + len / 2);
}

static void *segv_fn(void *arg)
{
  volatile int *bad = arg;
  *bad = 1;
  return NULL;
}

static void *noop_fn(void *arg)
{
  return arg;
}

/* Dirties the lowest byte of its own slab stack, well away from any frame,
 * then lets the resumer find it at the next switch. */
static void *canary_fn(void *arg)
{
  (void)arg;
  weft__coro *self = weft__coro_self();
  self->stack.base[-(ptrdiff_t)WEFT__STACK_CANARY] = 1; /* the canary's first byte */
  weft__coro_suspend(self);
  return NULL;
}

static int run(void *(*fn)(void *), void *arg, const char *name)
{
  weft__coro *co;
  weft__coro_opts o = {.fn = fn, .arg = arg, .stack_size = STACK_SIZE, .name = name};
  if (weft__coro_create(&co, &o) != 0) {
    fprintf(stderr, "overflow_helper: cannot create the coroutine\n");
    return 3;
  }
  fprintf(stderr, "overflow_helper: %s stack, guard %zu\n",
          co->stack.kind == WEFT__STACK_SLAB ? "slab" : "mapped", co->stack.guard);
  if (weft__coro_resume(co) == WEFT__CORO_SUSPENDED)
    weft__coro_resume(co);
  weft__coro_destroy(co);
  fprintf(stderr, "overflow_helper: survived\n");
  return 2;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "named"))
    return run(overflow_fn, NULL, "deep-recursion");
  if (!strcmp(mode, "mapped")) {
    weft__stack_set_guard_regions(0);
    return run(overflow_fn, NULL, "deep-recursion");
  }
  if (!strcmp(mode, "anon"))
    return run(overflow_fn, NULL, NULL);
  if (!strcmp(mode, "segv-in") || !strcmp(mode, "segv-out")) {
    volatile int *bad = forbidden_address();
    if (!bad)
      return 3;
    if (!strcmp(mode, "segv-in"))
      return run(segv_fn, (void *)bad, "faulty");
    /* A finished coroutine first, so the handler is installed and no
     * coroutine is current when the fault comes. */
    weft__coro *co;
    weft__coro_opts o = {.fn = noop_fn, .stack_size = STACK_SIZE, .name = "faulty"};
    if (weft__coro_create(&co, &o) != 0 || weft__coro_resume(co) != WEFT__CORO_FINISHED)
      return 3;
    weft__coro_destroy(co);
    *bad = 1;
    fprintf(stderr, "overflow_helper: survived\n");
    return 2;
  }
  if (!strcmp(mode, "canary")) {
    /* Only a slab slot without a guard region is watched by its canary. */
    weft__stack_set_guard_regions(0);
    weft__stack_set_guard_budget(0);
    return run(canary_fn, NULL, "scribbler");
  }
  fprintf(stderr, "usage: overflow_helper named|mapped|anon|segv-in|segv-out|canary\n");
  return 3;
}
