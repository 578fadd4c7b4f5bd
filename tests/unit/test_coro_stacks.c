/* SPDX-License-Identifier: MIT */
/*
 * Suite "coro", part 2 - coroutine stacks: death tests through
 * overflow_helper (overflow reports from a guard region and from a guard
 * page, and from a frame that jumps over a slab slot's guard, foreign
 * SIGSEGVs passed on, a slab canary overwrite), slab stacks with guard
 * regions, slab stacks past the guard budget of kernels without
 * them, dirty slab slots not reissued, bad input (-EINVAL) and mmap or
 * guard failure (-ENOMEM).
 *
 * Criterion runs every test in a process of its own, so the process-wide
 * stack counters start fresh in each; tests still compare against a reading
 * taken at their start rather than against zero.
 */
#include "coro_test.h"

#include <sys/resource.h>

#if defined(__SANITIZE_ADDRESS__)
#  define UNDER_ASAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define UNDER_ASAN 1
#  endif
#endif

extern char **environ;

/* ---- death tests through overflow_helper ------------------------------------ */

struct death {
  int signaled;   /* terminating signal, 0 if it exited */
  int exit_code;
  char err[16384];/* the start of its stderr */
};

/* Runs the helper with `mode`, collecting its stderr, and waits for it. */
static void run_helper(const char *mode, struct death *d)
{
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  /* Criterion's worker may block or catch signals; the helper must start
   * with default dispositions and nothing blocked. */
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none, deflt;
  sigemptyset(&none);
  sigemptyset(&deflt);
  sigaddset(&deflt, SIGSEGV);
  sigaddset(&deflt, SIGABRT);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &deflt);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  char *argv[] = {(char *)OVERFLOW_HELPER, (char *)mode, NULL};
  pid_t pid;
  int r = posix_spawn(&pid, OVERFLOW_HELPER, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(fds[1]);
  cr_assert_eq(r, 0, "posix_spawn %s: %s", OVERFLOW_HELPER, strerror(r));

  /* Read to the end (keeping the start) so the helper never blocks on a
   * full pipe, however long a sanitizer report gets. */
  size_t n = 0;
  char sink[4096];
  for (;;) {
    size_t room = sizeof(d->err) - 1 - n;
    ssize_t got = room ? read(fds[0], d->err + n, room) : read(fds[0], sink, sizeof(sink));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    if (room)
      n += (size_t)got;
  }
  d->err[n] = '\0';
  close(fds[0]);

  int status;
  while (waitpid(pid, &status, 0) < 0)
    cr_assert_eq(errno, EINTR);
  d->signaled = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  d->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void expect_overflow_report(const struct death *d, const char *who)
{
#ifdef UNDER_ASAN
  /* ASan has a SIGSEGV handler of its own. By default it lets the program
   * install another one over it (allow_user_segv_handler=1), so weft's report
   * comes first and is checked below; only if the user's ASAN_OPTIONS forbid
   * that does ASan catch the guard-page fault itself, and its own
   * stack-overflow report is then the right outcome. */
  if (strstr(d->err, "AddressSanitizer: stack-overflow"))
    return;
#endif
  cr_assert_eq(d->signaled, SIGABRT, "helper: signal %d, exit %d, stderr:\n%s", d->signaled,
               d->exit_code, d->err);
  char want[128];
  snprintf(want, sizeof(want), "weft: stack overflow in coroutine %s", who);
  cr_assert_not_null(strstr(d->err, want), "no \"%s\" in:\n%s", want, d->err);
  cr_assert_not_null(strstr(d->err, "(stack size "), "stderr:\n%s", d->err);
}

Test(coro, guard_page_overflow_named, .timeout = 30)
{
  static struct death d;
  run_helper("named", &d);
  expect_overflow_report(&d, "deep-recursion");
  /* Where the kernel has guard regions the default stack is a slab slot
   * with one, and its guard is what caught the overflow. */
  char want[64];
  snprintf(want, sizeof(want), "overflow_helper: %s stack, guard %zu",
           weft__stack_guard_regions() ? "slab" : "mapped", WEFT__STACK_GUARD);
  cr_assert_not_null(strstr(d.err, want), "no \"%s\" in:\n%s", want, d.err);
}

Test(coro, guard_page_overflow_on_own_mapping, .timeout = 30)
{
  static struct death d;
  run_helper("mapped", &d);
  expect_overflow_report(&d, "deep-recursion");
  char want[64];
  snprintf(want, sizeof(want), "overflow_helper: mapped stack, guard %zu", WEFT__STACK_GUARD);
  cr_assert_not_null(strstr(d.err, want), "no \"%s\" in:\n%s", want, d.err);
}

Test(coro, guard_page_overflow_anonymous, .timeout = 30)
{
  static struct death d;
  run_helper("anon", &d);
  expect_overflow_report(&d, "#");
}

/* A process that has used up its pthread keys still runs coroutines, and
 * weft then uses no key it failed to make: the stacks are not cached, and
 * the signal stack of each thread is kept. */
Test(coro, no_pthread_keys_left, .timeout = 30)
{
  static struct death d;
  run_helper("no-keys", &d);
  cr_assert_eq(d.signaled, 0, "helper: signal %d, stderr:\n%s", d.signaled, d.err);
  cr_assert_eq(d.exit_code, 0, "helper: exit %d, stderr:\n%s", d.exit_code, d.err);
}

/* A coroutine run by a thread-exit destructor that runs after weft's own,
 * which took the thread's signal stack away: the overflow is still
 * reported, on a signal stack given anew, rather than killing the process
 * silently (a fault with no stack to handle it on). */
Test(coro, guard_page_overflow_after_the_signal_stack_was_freed, .timeout = 30)
{
  static struct death d;
  run_helper("at-exit", &d);
  expect_overflow_report(&d, "late-recursion");
}

/* A frame bigger than the guard moves the stack pointer past it in one
 * step; where the first touch faults - in the guard of the slab slot below
 * - is not this coroutine's guard, but its stack pointer has left its
 * stack: an overflow, reported as one, not passed on as a foreign fault. */
Test(coro, frame_jumping_over_a_slab_guard_reported, .timeout = 30)
{
  if (!weft__stack_guard_regions())
    cr_skip_test("no guard regions (MADV_GUARD_INSTALL, Linux 6.13)");
  static struct death d;
  run_helper("jump", &d);
  expect_overflow_report(&d, "big-frame");
}

/* A slab slot without a guard (an old kernel past the guard budget) whose
 * overflow faults before the next switch could check the canary - below
 * the lowest slot of a slab there may be nothing mapped: the stack pointer
 * has left the stack, so it is still reported as an overflow. */
Test(coro, unguarded_slab_overflow_that_faults_reported, .timeout = 30)
{
  static struct death d;
  run_helper("unguarded", &d);
  if (d.exit_code == 77)
    cr_skip_test("something is mapped right below the slab");
  expect_overflow_report(&d, "no-guard-recursion");
}

/* A fault that is not an overflow must reach the previous disposition: the
 * default action (death by SIGSEGV), or under ASan its own SEGV report
 * (ASan's handler was installed first, so weft chains to it). Either way
 * weft says nothing. */
static void expect_foreign_segv(const struct death *d)
{
  cr_assert_null(strstr(d->err, "weft:"), "weft claimed a foreign fault:\n%s", d->err);
#ifdef UNDER_ASAN
  if (strstr(d->err, "AddressSanitizer: SEGV")) {
    cr_assert(d->signaled || d->exit_code != 0);
    return;
  }
#endif
  cr_assert_eq(d->signaled, SIGSEGV, "helper: signal %d, exit %d, stderr:\n%s", d->signaled,
               d->exit_code, d->err);
}

Test(coro, foreign_segv_inside_coroutine_passed_on, .timeout = 30)
{
  static struct death d;
  run_helper("segv-in", &d);
  expect_foreign_segv(&d);
}

Test(coro, foreign_segv_outside_coroutine_passed_on, .timeout = 30)
{
  static struct death d;
  run_helper("segv-out", &d);
  expect_foreign_segv(&d);
}

Test(coro, slab_canary_overwrite_reported, .timeout = 30)
{
  static struct death d;
  run_helper("canary", &d);
  cr_assert_eq(d.signaled, SIGABRT, "helper: signal %d, exit %d, stderr:\n%s", d.signaled,
               d.exit_code, d.err);
  cr_assert_not_null(strstr(d.err, "overflow_helper: slab stack, guard 0\n"), "%s", d.err);
  cr_assert_not_null(strstr(d.err, "weft: stack overflow in coroutine scribbler"), "%s", d.err);
  cr_assert_not_null(strstr(d.err, "canary"), "%s", d.err);
}

/* ---- slab stacks past the guard budget -------------------------------------- */

static void *deep_fn(void *arg)
{
  /* Touches a good part of the stack, so slab slots are really used. */
  volatile char buf[8192];
  uint64_t i = (uint64_t)(uintptr_t)arg;
  for (size_t k = 0; k < sizeof(buf); k++)
    buf[k] = (char)(i + k);
  weft__coro_suspend(weft__coro_self());
  uint64_t sum = 0;
  for (size_t k = 0; k < sizeof(buf); k++)
    sum += (unsigned char)buf[k];
  return (void *)(uintptr_t)sum;
}

static uint64_t deep_expect(uint64_t i)
{
  uint64_t sum = 0;
  for (size_t k = 0; k < 8192; k++)
    sum += (unsigned char)(char)(i + k);
  return sum;
}

/* Runs a deep_fn coroutine made with argument i (suspended once) to its
 * end, checks what it read back and destroys it. */
static void finish_deep(weft__coro *co, uint64_t i)
{
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  cr_assert_eq((uint64_t)(uintptr_t)co->ret, deep_expect(i));
  weft__coro_destroy(co);
}

#define NSLAB 100

Test(coro, slab_stacks_past_guard_budget, .timeout = 30)
{
  weft__stack_set_guard_regions(0); /* the budget matters only without them */
  weft__stack_cache_drain(); /* a cached guarded stack would be reused */
  weft__stack_set_guard_budget(0);
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  cr_assert_eq(c0.guard_budget, 0);

  weft__coro *cos[NSLAB];
  for (int i = 0; i < NSLAB; i++)
    cos[i] = make(deep_fn, (void *)(uintptr_t)i, STACK, "slab");
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.guarded_live, c0.guarded_live);
  cr_assert_eq(c1.slab_live, c0.slab_live + NSLAB);
  cr_assert_eq(cos[0]->stack.kind, WEFT__STACK_SLAB);
  cr_assert_lt(c1.mmaps - c0.mmaps, 3, "slab stacks share mappings");

  for (int i = 0; i < NSLAB; i++)
    cr_assert_eq(weft__coro_resume(cos[i]), WEFT__CORO_SUSPENDED);
  for (int i = 0; i < NSLAB; i++)
    finish_deep(cos[i], (uint64_t)i);
  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.slab_live, c0.slab_live);

  /* Freed slots are handed out again, without a new mapping. */
  weft__stack_get_counters(&c0);
  weft__coro *again = make(deep_fn, (void *)(uintptr_t)7, STACK, "slab");
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.mmaps, c0.mmaps);
  cr_assert_eq(weft__coro_resume(again), WEFT__CORO_SUSPENDED);
  finish_deep(again, 7);

  weft__stack_set_guard_budget(-1);
  weft__stack_get_counters(&c1);
  cr_assert_gt(c1.guard_budget, 0);
  /* Another size, so that no cached slab stack can serve it. */
  weft__coro *guarded = make(ret_arg_fn, NULL, 2 * STACK, NULL);
  cr_assert_eq(guarded->stack.kind, WEFT__STACK_GUARDED);
  weft__coro_destroy(guarded);
  weft__stack_set_guard_regions(-1);
}

static void skip_without_guard_regions(void)
{
  if (!weft__stack_guard_regions())
    cr_skip_test("no guard regions (MADV_GUARD_INSTALL, Linux 6.13)");
}

/* With guard regions every stack is a guarded slab slot: no mapping of its
 * own, however many there are. */
Test(coro, slab_stacks_get_guard_regions, .timeout = 30)
{
  skip_without_guard_regions();
  weft__stack_cache_drain();
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  weft__coro *cos[NSLAB];
  for (int i = 0; i < NSLAB; i++)
    cos[i] = make(deep_fn, (void *)(uintptr_t)i, STACK, "guarded-slab");
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.guarded_live, c0.guarded_live);
  cr_assert_eq(c1.slab_live, c0.slab_live + NSLAB);
  cr_assert_lt(c1.mmaps - c0.mmaps, 3, "guarded slab stacks share mappings");
  for (int i = 0; i < NSLAB; i++) {
    cr_assert_eq(cos[i]->stack.kind, WEFT__STACK_SLAB);
    cr_assert_eq(cos[i]->stack.guard, WEFT__STACK_GUARD);
    cr_assert_eq(cos[i]->stack.base, cos[i]->stack.map + WEFT__STACK_GUARD + WEFT__STACK_CANARY);
    cr_assert_eq(weft__coro_resume(cos[i]), WEFT__CORO_SUSPENDED);
  }
  for (int i = 0; i < NSLAB; i++)
    finish_deep(cos[i], (uint64_t)i);
  /* Released slots keep their guards: the next stack of the size reuses
   * one, without a new mapping, and an overflow on it still faults (the
   * death test above runs on such a slot). */
  weft__stack_cache_drain();
  weft__stack_get_counters(&c0);
  weft__coro *again = make(deep_fn, (void *)(uintptr_t)3, STACK, NULL);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.mmaps, c0.mmaps);
  cr_assert_eq(again->stack.guard, WEFT__STACK_GUARD);
  cr_assert_eq(weft__coro_resume(again), WEFT__CORO_SUSPENDED);
  cr_assert_eq(weft__coro_resume(again), WEFT__CORO_FINISHED);
  weft__coro_destroy(again);
}

static void *park_fn(void *arg)
{
  (void)arg;
  weft__coro_suspend(weft__coro_self());
  return NULL;
}

/* A slab stack dirtied while its coroutine was suspended (nothing checks at
 * destroy) must not make its size class unusable: create may refuse that
 * slot once, but the next create has to get a clean stack. Only slab slots
 * without a guard region have their canary watched. */
Test(coro, dirty_slab_slot_not_reissued, .timeout = 30)
{
  weft__stack_cache_drain();
  weft__stack_set_guard_regions(0);
  weft__stack_set_guard_budget(0);
  weft__coro *co = make(park_fn, NULL, STACK, NULL);
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_SUSPENDED);
  co->stack.base[-(ptrdiff_t)WEFT__STACK_CANARY] = 1; /* a stray write into the canary */
  weft__coro_destroy(co);

  weft__coro *next = NULL;
  weft__coro_opts o = {.fn = park_fn, .stack_size = STACK};
  int r = weft__coro_create(&next, &o);
  if (r == -ENOMEM) /* the dirty slot was caught; it must now be out of reach */
    r = weft__coro_create(&next, &o);
  cr_assert_eq(r, 0, "a dirty slab slot keeps failing creation: %d", r);
  cr_assert(weft__stack_canary_ok(&next->stack));
  cr_assert_eq(weft__coro_resume(next), WEFT__CORO_SUSPENDED);
  cr_assert_eq(weft__coro_resume(next), WEFT__CORO_FINISHED);
  weft__coro_destroy(next);
  weft__stack_set_guard_budget(-1);
  weft__stack_set_guard_regions(-1);
}

/* With a guard region below it, a slot's canary is just more stack: a
 * write there is not a reason to give the slot back, and freeing does not
 * read it. */
Test(coro, guarded_slab_slot_cached_despite_canary, .timeout = 30)
{
  if (!weft__stack_guard_regions())
    cr_skip_test("no guard regions on this kernel");
  weft__stack_cache_drain();
  weft__coro *co = make(park_fn, NULL, STACK, NULL);
  cr_assert_eq(co->stack.kind, WEFT__STACK_SLAB);
  cr_assert_eq(co->stack.guard, WEFT__STACK_GUARD);
  char *base = co->stack.base;
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_SUSPENDED);
  base[-(ptrdiff_t)WEFT__STACK_CANARY] = 1;
  weft__coro_destroy(co);
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  weft__coro *next = make(park_fn, NULL, STACK, NULL);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.cache_hits, c0.cache_hits + 1, "the slot was given back, not cached");
  cr_assert_eq(next->stack.base, base);
  cr_assert_eq(weft__coro_resume(next), WEFT__CORO_SUSPENDED);
  cr_assert_eq(weft__coro_resume(next), WEFT__CORO_FINISHED);
  weft__coro_destroy(next);
}

/* ---- bad input and resource failure ----------------------------------------- */

static void assert_counters_equal(const weft__stack_counters *a, const weft__stack_counters *b)
{
  cr_assert_eq(a->mmaps, b->mmaps);
  cr_assert_eq(a->munmaps, b->munmaps);
  cr_assert_eq(a->guarded_live, b->guarded_live);
  cr_assert_eq(a->slab_live, b->slab_live);
}

Test(coro, bad_input_einval, .timeout = 30)
{
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  weft__coro *co = (weft__coro *)(uintptr_t)0x1; /* must stay untouched */
  weft__coro_opts o = {.fn = ret_arg_fn, .stack_size = STACK};

  o.stack_size = 0;
  cr_assert_eq(weft__coro_create(&co, &o), -EINVAL);
  o.stack_size = WEFT__STACK_MAX + 1;
  cr_assert_eq(weft__coro_create(&co, &o), -EINVAL);
  o.stack_size = SIZE_MAX;
  cr_assert_eq(weft__coro_create(&co, &o), -EINVAL);

  o.stack_size = STACK;
  o.fn = NULL;
  cr_assert_eq(weft__coro_create(&co, &o), -EINVAL);
  o.fn = ret_arg_fn;

  o.obj_size = STACK + 1; /* bigger than the stack */
  cr_assert_eq(weft__coro_create(&co, &o), -EINVAL);
  o.obj_size = STACK - 64; /* fits, but leaves no room for frames */
  cr_assert_eq(weft__coro_create(&co, &o), -EINVAL);
  o.obj_size = sizeof(weft__coro) - 1; /* cannot hold the coroutine */
  cr_assert_eq(weft__coro_create(&co, &o), -EINVAL);
  o.obj_size = 0;

  cr_assert_eq(weft__coro_create(NULL, &o), -EINVAL);
  cr_assert_eq(weft__coro_create(&co, NULL), -EINVAL);

  cr_assert_eq(co, (weft__coro *)(uintptr_t)0x1, "*out written on failure");
  weft__stack_get_counters(&c1);
  assert_counters_equal(&c0, &c1);
}

Test(coro, mmap_failure_enomem_guarded, .timeout = 30)
{
  weft__stack_set_guard_regions(0); /* stacks of their own mapping */
  weft__stack_cache_drain(); /* otherwise a cached stack needs no mmap */
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);

  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = ret_arg_fn, .arg = (void *)(uintptr_t)5, .stack_size = STACK};
  weft__fault_arm(WEFT__FAULT_MMAP, 1);
  cr_assert_eq(weft__coro_create(&co, &o), -ENOMEM);
  cr_assert_null(co);
  weft__stack_get_counters(&c1);
  assert_counters_equal(&c0, &c1);

  weft__fault_arm(WEFT__FAULT_MMAP, 0);
  cr_assert_eq(weft__coro_create(&co, &o), 0);
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)co->ret, 5);
  weft__coro_destroy(co);
  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.guarded_live, c0.guarded_live);
  cr_assert_eq(c1.mmaps - c0.mmaps, c1.munmaps - c0.munmaps, "a mapping leaked");
  weft__stack_set_guard_regions(-1);
}

/* The guard region of a new slot cannot be installed: -ENOMEM, and the slot
 * is not handed out without it - the next create gets it, guarded. */
Test(coro, guard_region_failure_enomem, .timeout = 30)
{
  skip_without_guard_regions();
  weft__stack_cache_drain();
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = ret_arg_fn, .arg = (void *)(uintptr_t)8, .stack_size = 3 * STACK};
  weft__fault_arm(WEFT__FAULT_MMAP, 2); /* the slab maps, its first guard fails */
  cr_assert_eq(weft__coro_create(&co, &o), -ENOMEM);
  cr_assert_null(co);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.slab_live, c0.slab_live);
  cr_assert_eq(c1.mmaps, c0.mmaps + 1, "the slab itself was mapped");

  weft__fault_arm(WEFT__FAULT_MMAP, 0);
  cr_assert_eq(weft__coro_create(&co, &o), 0);
  cr_assert_eq(co->stack.guard, WEFT__STACK_GUARD);
  weft__stack_get_counters(&c0);
  cr_assert_eq(c0.mmaps, c1.mmaps, "the slab's first slot was still free");
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)co->ret, 8);
  weft__coro_destroy(co);
}

Test(coro, mmap_failure_enomem_slab, .timeout = 30)
{
  weft__stack_cache_drain();
  weft__stack_set_guard_budget(0);
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);

  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = ret_arg_fn, .arg = (void *)(uintptr_t)6, .stack_size = STACK};
  weft__fault_arm(WEFT__FAULT_MMAP, 1); /* the first slab of this size */
  cr_assert_eq(weft__coro_create(&co, &o), -ENOMEM);
  cr_assert_null(co);
  weft__stack_get_counters(&c1);
  assert_counters_equal(&c0, &c1);

  weft__fault_arm(WEFT__FAULT_MMAP, 0);
  cr_assert_eq(weft__coro_create(&co, &o), 0);
  cr_assert_eq(co->stack.kind, WEFT__STACK_SLAB);
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)co->ret, 6);
  weft__coro_destroy(co);
  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.slab_live, c0.slab_live);
  weft__stack_set_guard_budget(-1);
}

/* The address-space cap tests below do not run under a sanitizer, whose
 * own mappings the cap would refuse: their bodies are not built there. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static void *noop_body(void *arg)
{
  return arg;
}
#endif

/* No memory for a stack, for real (the address space is capped): the
 * create fails with -ENOMEM from the kernel's refusal - which sets errno -
 * and errno is still the caller's (weft/common.h). Not under ASan, whose
 * own mappings the cap would refuse too. */
Test(coro, real_enomem_for_a_stack_leaves_errno, .timeout = 30)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  cr_skip_test("the address space cap would starve the sanitizer");
#else
  struct rlimit lim = {.rlim_cur = (rlim_t)8 << 30, .rlim_max = RLIM_INFINITY};
  cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);
  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = noop_body, .stack_size = WEFT__STACK_MAX};
  errno = 4242;
  int r = 0;
  /* Enough of them to exhaust 8 GiB, whatever is mapped already. */
  weft__coro *made[16];
  int n = 0;
  while (n < 16 && (r = weft__coro_create(&co, &o)) == 0)
    made[n++] = co;
  cr_assert_eq(r, -ENOMEM);
  cr_assert_eq(errno, 4242);
  while (n > 0)
    weft__coro_destroy(made[--n]);
  cr_assert_eq(errno, 4242);
#endif
}

/* A big stack takes about its own size of address space, not a slab of
 * sixteen: under a 4 GiB cap (ulimit -v, or strict overcommit charging
 * every mapping) a 1 GiB stack - the largest documented - is still made. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static void *touch_body(void *arg)
{
  volatile char buf[4096];
  buf[0] = 1;
  return (void *)(uintptr_t)(buf[0] + (uintptr_t)arg);
}
#endif

Test(coro, largest_stack_fits_an_address_space_a_few_times_its_size, .timeout = 30)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  cr_skip_test("the address space cap would starve the sanitizer");
#else
  struct rlimit lim = {.rlim_cur = (rlim_t)4 << 30, .rlim_max = RLIM_INFINITY};
  cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);
  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = touch_body, .arg = (void *)(uintptr_t)2, .stack_size = WEFT__STACK_MAX};
  int r = weft__coro_create(&co, &o);
  cr_assert_eq(r, 0, "a 1 GiB stack under a 4 GiB cap: %d", r);
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)co->ret, 3);
  weft__coro_destroy(co);
#endif
}

/* A SIGSEGV sent with kill(2) is not a fault of ours and has no faulting
 * instruction to run again: with no handler before ours, the process must
 * die of it - it carried on, with the overflow handler gone. */
Test(coro, a_sigsegv_sent_by_kill_still_kills, .timeout = 30)
{
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);
    if (weft__coro_thread_init() != 0) /* installs the handler, as a shard does */
      _exit(3);
    kill(getpid(), SIGSEGV);
    usleep(200000);
    _exit(0); /* survived */
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "the child %s",
            WIFEXITED(status) ? "survived" : "died of another signal");
}

/* The same with SIGSEGV ignored before weft installed its handler: the
 * signal sent by kill(2) is ignored, as it was - the handler must pass it
 * on to that disposition, not to the default action. */
Test(coro, a_sigsegv_sent_by_kill_stays_ignored, .timeout = 30)
{
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    signal(SIGSEGV, SIG_IGN);
    if (weft__coro_thread_init() != 0)
      _exit(3);
    kill(getpid(), SIGSEGV);
    _exit(0); /* kill(2) to oneself delivers before it returns */
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child %s %d",
            WIFEXITED(status) ? "exited with" : "died of signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}
