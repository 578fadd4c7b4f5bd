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
 *   overflow_helper no-keys   no death: with every pthread key in use,
 *                             a thread runs coroutines and exits; exit 0
 *                             unless weft used a key it had not made
 *                             (a destructor of the program's then gets
 *                             weft's value: exit 4)
 *   overflow_helper jump      a frame far bigger than a guard, in "big-frame",
 *                             whose stack pointer lands in the guard of the
 *                             stack below its own (guard regions on: the
 *                             slot below in the same slab)
 *   overflow_helper unguarded unbounded recursion in "no-guard-recursion" on
 *                             the lowest slot of a slab without guard
 *                             regions (guard regions and the guard budget
 *                             turned off), with an inaccessible page just
 *                             below the slab
 *   overflow_helper at-exit   the overflow of "late-recursion", run by a
 *                             thread-exit destructor of the program's that
 *                             runs after weft's own (which frees the
 *                             thread's signal stack)
 *
 * Before it runs the coroutine it prints the kind of stack it got
 * ("overflow_helper: slab stack, guard 16384").
 *
 * Exit 2 means the helper survived what should have killed it; exit 3 means
 * its setup failed.
 */
#include "coro.h"
#include "stack.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* ---- jump: a frame that jumps over the guard ---- */

static weft__coro *jump_below; /* the stack under the jumper's */

/* Moves the stack pointer into the middle of the guard of the stack below
 * in one frame (as a large local array does), and touches it. */
static void *jump_fn(void *arg)
{
  (void)arg;
  char *here = __builtin_frame_address(0);
  char *target = jump_below->stack.map + jump_below->stack.guard / 2;
  volatile char *p = __builtin_alloca((size_t)(here - target));
  p[0] = 1;
  return (void *)(uintptr_t)p[0];
}

static int jump_mode(void)
{
  if (!weft__stack_guard_regions())
    return 77; /* no guard in the slot below */
  /* Two slots carved one after the other: the second lies just above. */
  weft__coro_opts o = {.fn = noop_fn, .stack_size = STACK_SIZE};
  if (weft__coro_create(&jump_below, &o) != 0)
    return 3;
  weft__coro *co;
  o.fn = jump_fn;
  o.name = "big-frame";
  if (weft__coro_create(&co, &o) != 0 || co->stack.map != jump_below->stack.map +
                                                              jump_below->stack.map_len)
    return 3;
  fprintf(stderr, "overflow_helper: slab stack, guard %zu\n", co->stack.guard);
  weft__coro_resume(co);
  fprintf(stderr, "overflow_helper: survived\n");
  return 2;
}

/* ---- unguarded: the lowest slab slot overflows into what lies below ---- */

static int unguarded_mode(void)
{
  weft__stack_set_guard_regions(0);
  weft__stack_set_guard_budget(0);
  weft__coro *co;
  weft__coro_opts o = {.fn = overflow_fn, .stack_size = STACK_SIZE, .name = "no-guard-recursion"};
  if (weft__coro_create(&co, &o) != 0 || co->stack.kind != WEFT__STACK_SLAB || co->stack.guard)
    return 3;
  /* The first slot of this process's first slab: below it lies whatever
   * the process maps next - made an inaccessible page here, so the fault
   * comes right below the slot, as unmapped space or a PROT_NONE page
   * below a slab would make it. */
  long ps = sysconf(_SC_PAGESIZE);
  void *below = mmap(co->stack.map - ps, (size_t)ps, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (below != co->stack.map - ps)
    return 77; /* something is mapped there already */
  fprintf(stderr, "overflow_helper: slab stack, guard %zu\n", co->stack.guard);
  weft__coro_resume(co);
  fprintf(stderr, "overflow_helper: survived\n");
  return 2;
}

/* ---- at-exit: a coroutine run by a destructor at thread exit ---- */

static pthread_key_t late_key;

static void late_destructor(void *unused)
{
  (void)unused;
  exit(run(overflow_fn, NULL, "late-recursion"));
}

static void *late_thread(void *unused)
{
  (void)unused;
  /* A first coroutine gives this thread weft's signal stack (and its
   * destructor); the program's key, made after weft's, is destroyed after
   * it in glibc's order. */
  weft__coro *co;
  weft__coro_opts o = {.fn = noop_fn, .stack_size = STACK_SIZE};
  if (weft__coro_create(&co, &o) != 0 || weft__coro_resume(co) != WEFT__CORO_FINISHED)
    exit(3);
  weft__coro_destroy(co);
  if (pthread_key_create(&late_key, late_destructor) != 0 ||
      pthread_setspecific(late_key, &late_key) != 0)
    exit(3);
  return NULL;
}

static int at_exit_mode(void)
{
  pthread_t th;
  if (pthread_create(&th, NULL, late_thread, NULL) != 0)
    return 3;
  pthread_join(th, NULL);
  fprintf(stderr, "overflow_helper: the destructor never ran\n");
  return 3;
}

/* ---- no-keys: the process has used up its pthread keys ---- */

static void foreign_destructor(void *value)
{
  if (value != &late_key) {
    fprintf(stderr, "overflow_helper: a key of the program's was given %p\n", value);
    _Exit(4);
  }
}

static pthread_key_t program_keys[PTHREAD_KEYS_MAX];
static int program_nkeys;

static void *coroutines_thread(void *unused)
{
  (void)unused;
  /* Every key of the program's holds the value its destructor checks. */
  for (int i = 0; i < program_nkeys; i++)
    if (pthread_setspecific(program_keys[i], &late_key) != 0)
      exit(3);
  for (int i = 0; i < 8; i++) {
    weft__coro *co;
    weft__coro_opts o = {.fn = noop_fn, .stack_size = STACK_SIZE};
    if (weft__coro_create(&co, &o) != 0 || weft__coro_resume(co) != WEFT__CORO_FINISHED)
      exit(3);
    weft__coro_destroy(co);
  }
  return NULL;
}

static int no_keys_mode(void)
{
  while (program_nkeys < PTHREAD_KEYS_MAX &&
         pthread_key_create(&program_keys[program_nkeys], foreign_destructor) == 0)
    program_nkeys++;
  pthread_key_t spare;
  if (program_nkeys == 0 || pthread_key_create(&spare, NULL) == 0)
    return 3; /* keys left over: no test */
  pthread_t th;
  if (pthread_create(&th, NULL, coroutines_thread, NULL) != 0)
    return 3;
  pthread_join(th, NULL);
  return 0;
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
  if (!strcmp(mode, "no-keys"))
    return no_keys_mode();
  if (!strcmp(mode, "at-exit"))
    return at_exit_mode();
  if (!strcmp(mode, "jump"))
    return jump_mode();
  if (!strcmp(mode, "unguarded"))
    return unguarded_mode();
  fprintf(stderr, "usage: overflow_helper named|mapped|anon|segv-in|segv-out|canary|no-keys|at-exit|jump|unguarded\n");
  return 3;
}
