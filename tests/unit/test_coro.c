/* SPDX-License-Identifier: MIT */
/*
 * The coroutine layer on its own (coro/): no runtime, no shard. Coroutines
 * are created, resumed and destroyed straight from the test thread.
 *
 * Criterion runs every test in a process of its own, so the process-wide
 * stack counters start fresh in each; tests still compare against a reading
 * taken at their start rather than against zero.
 */
#include "coro.h"
#include "fault.h"
#include "stack.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#  define UNDER_ASAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define UNDER_ASAN 1
#  endif
#endif

#define STACK ((size_t)64 << 10)

extern char **environ;

static weft__coro *make(void *(*fn)(void *), void *arg, size_t stack, const char *name)
{
  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = fn, .arg = arg, .stack_size = stack, .name = name};
  int r = weft__coro_create(&co, &o);
  cr_assert_eq(r, 0, "weft__coro_create: %d", r);
  cr_assert_not_null(co);
  return co;
}

/* ---- many switches, values and callee-saved registers ---------------------- */

#define NCORO 8
#define NSTEP 10000

static inline uint64_t rotl(uint64_t x, int r)
{
  return (x << r) | (x >> (64 - r));
}

/* Ten values that all feed each other (a Fibonacci pair, an LCG, xor-rotate
 * mixes), so every one stays live from one step to the next. */
#define STEP(a, b, c, d, e, f, g, h, i, j, k)                    \
  do {                                                           \
    uint64_t fib_ = (a) + (b);                                   \
    (a) = (b);                                                   \
    (b) = fib_ ^ (k);                                            \
    (c) = rotl((c) + (d), 7) ^ (j);                              \
    (d) = (d) * 0x9E3779B97F4A7C15u + (e);                       \
    (e) ^= rotl((f), 13) + (a);                                  \
    (f) += (g) * 3 + (c);                                        \
    (g) = rotl((g) ^ (h), 29) - (d);                             \
    (h) += (i) ^ (e);                                            \
    (i) = (i) * 6364136223846793005u + 1442695040888963407u + (f); \
    (j) ^= (g) + rotl((b), 17) + (h);                            \
  } while (0)

#define FOLD(a, b, c, d, e, f, g, h, i, j) \
  ((a) ^ rotl(b, 3) ^ rotl(c, 9) ^ rotl(d, 15) ^ rotl(e, 21) ^ rotl(f, 27) ^ \
   rotl(g, 33) ^ rotl(h, 39) ^ rotl(i, 45) ^ rotl(j, 51))

struct hash_job {
  weft__coro *co;
  uint64_t seed;
  uint64_t published;   /* FOLD after each step, read by the driver */
  unsigned self_wrong;  /* steps where weft__coro_self() was not co */
};

static void *hash_fn(void *arg)
{
  struct hash_job *job = arg;
  uint64_t a = job->seed, b = 1, c = a * 3, d = a ^ 0x55, e = 7, f = a + 11, g = 13,
           h = a << 7, i = 17, j = ~a;
  for (uint64_t k = 0; k < NSTEP; k++) {
    STEP(a, b, c, d, e, f, g, h, i, j, k);
    job->published = FOLD(a, b, c, d, e, f, g, h, i, j);
    weft__coro *self = weft__coro_self();
    if (self != job->co)
      job->self_wrong++;
    weft__coro_suspend(self);
  }
  return (void *)(uintptr_t)FOLD(a, b, c, d, e, f, g, h, i, j);
}

/* The same computation without coroutines. */
static void hash_reference(uint64_t seed, uint64_t *per_step, uint64_t *final)
{
  uint64_t a = seed, b = 1, c = a * 3, d = a ^ 0x55, e = 7, f = a + 11, g = 13, h = a << 7,
           i = 17, j = ~a;
  for (uint64_t k = 0; k < NSTEP; k++) {
    STEP(a, b, c, d, e, f, g, h, i, j, k);
    per_step[k] = FOLD(a, b, c, d, e, f, g, h, i, j);
  }
  *final = FOLD(a, b, c, d, e, f, g, h, i, j);
}

Test(coro, switches_keep_values_and_registers, .timeout = 60)
{
  static struct hash_job jobs[NCORO];
  static uint64_t expect[NCORO][NSTEP], seen[NSTEP][NCORO];
  uint64_t expect_final[NCORO];
  for (int n = 0; n < NCORO; n++) {
    jobs[n] = (struct hash_job){.seed = 0x1234567ull * (uint64_t)(n + 1)};
    jobs[n].co = make(hash_fn, &jobs[n], STACK, "hash");
    hash_reference(jobs[n].seed, expect[n], &expect_final[n]);
  }

  /* The driver keeps accumulators of its own live across every resume: if a
   * switch lost one of the test thread's callee-saved registers they drift. */
  uint64_t x0 = 0, x1 = 1, x2 = 2, x3 = 3, x4 = 4, x5 = 5;
  for (int k = 0; k < NSTEP; k++) {
    for (int n = 0; n < NCORO; n++) {
      int st = weft__coro_resume(jobs[n].co);
      uint64_t p = jobs[n].published;
      seen[k][n] = p;
      x0 += p;
      x1 = rotl(x1 ^ p, 5);
      x2 = x2 * 31 + p;
      x3 ^= p >> 3;
      x4 = rotl(x4 + p, 11);
      x5 += x0 ^ x3;
      if (st != WEFT__CORO_SUSPENDED || p != expect[n][k])
        cr_assert_fail("coroutine %d step %d: state %d, value %#llx, want %#llx", n, k, st,
                       (unsigned long long)p, (unsigned long long)expect[n][k]);
    }
  }
  for (int n = 0; n < NCORO; n++) {
    cr_assert_eq(weft__coro_resume(jobs[n].co), WEFT__CORO_FINISHED);
    cr_assert_eq((uint64_t)(uintptr_t)jobs[n].co->ret, expect_final[n]);
    cr_assert_eq(jobs[n].self_wrong, 0);
    weft__coro_destroy(jobs[n].co);
  }

  uint64_t y0 = 0, y1 = 1, y2 = 2, y3 = 3, y4 = 4, y5 = 5;
  for (int k = 0; k < NSTEP; k++) {
    for (int n = 0; n < NCORO; n++) {
      uint64_t p = seen[k][n];
      y0 += p;
      y1 = rotl(y1 ^ p, 5);
      y2 = y2 * 31 + p;
      y3 ^= p >> 3;
      y4 = rotl(y4 + p, 11);
      y5 += y0 ^ y3;
    }
  }
  cr_assert(x0 == y0 && x1 == y1 && x2 == y2 && x3 == y3 && x4 == y4 && x5 == y5,
            "the test thread's registers changed across switches");
  cr_assert_null(weft__coro_self());
}

/* ---- return values and states ----------------------------------------------- */

struct state_probe {
  int state_inside;      /* co->state as seen while running */
  weft__coro *self_inside;
};

static void *state_fn(void *arg)
{
  struct state_probe *p = arg;
  weft__coro *self = weft__coro_self();
  p->self_inside = self;
  p->state_inside = self->state;
  weft__coro_suspend(self);
  return (void *)(uintptr_t)0xC0FFEE;
}

static void *never_fn(void *arg)
{
  int *ran = arg;
  *ran = 1;
  return NULL;
}

Test(coro, return_value_and_states, .timeout = 30)
{
  struct state_probe p = {.state_inside = -1};
  weft__coro *co = make(state_fn, &p, STACK, NULL);
  cr_assert_eq(co->state, WEFT__CORO_CREATED);
  cr_assert_null(co->ret);

  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_SUSPENDED);
  cr_assert_eq(co->state, WEFT__CORO_SUSPENDED);
  cr_assert_eq(p.state_inside, WEFT__CORO_RUNNING);
  cr_assert_eq(p.self_inside, co);
  cr_assert_null(weft__coro_self(), "self must be NULL again outside the coroutine");

  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  cr_assert_eq(co->state, WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)co->ret, 0xC0FFEE);
  weft__coro_destroy(co);

  /* Destroying a coroutine that never ran or sits suspended is allowed, and
   * the never-run one's function is never called. */
  int ran = 0;
  weft__coro *idle = make(never_fn, &ran, STACK, "idle");
  weft__coro_destroy(idle);
  cr_assert_eq(ran, 0);
  weft__coro *half = make(state_fn, &p, STACK, "half");
  cr_assert_eq(weft__coro_resume(half), WEFT__CORO_SUSPENDED);
  weft__coro_destroy(half);
}

/* ---- names and ids ---------------------------------------------------------- */

static void *ret_arg_fn(void *arg)
{
  return arg;
}

Test(coro, names_copied_truncated_ids_increasing, .timeout = 30)
{
  char name[64] = "worker";
  weft__coro *a = make(ret_arg_fn, NULL, STACK, name);
  strcpy(name, "clobbered"); /* the coroutine keeps its own copy */
  cr_assert_str_eq(a->name, "worker");

  const char *longname = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"; /* 42 chars */
  weft__coro *b = make(ret_arg_fn, NULL, STACK, longname);
  cr_assert_eq(strlen(b->name), WEFT__CORO_NAME_MAX - 1);
  cr_assert_eq(strncmp(b->name, longname, WEFT__CORO_NAME_MAX - 1), 0);

  weft__coro *c = make(ret_arg_fn, NULL, STACK, NULL);
  cr_assert_str_eq(c->name, "");

  const char *exact = "0123456789012345678901234567890"; /* 31 chars: kept whole */
  weft__coro *d = make(ret_arg_fn, NULL, STACK, exact);
  cr_assert_str_eq(d->name, exact);

  cr_assert_gt(a->id, 0);
  cr_assert_gt(b->id, a->id);
  cr_assert_gt(c->id, b->id);
  cr_assert_gt(d->id, c->id);

  /* Ids are never reused, even when the stack is. */
  uint64_t last = d->id;
  weft__coro_destroy(d);
  weft__coro *e = make(ret_arg_fn, NULL, STACK, NULL);
  cr_assert_gt(e->id, last);

  weft__coro *all[] = {a, b, c, e};
  for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
    cr_assert_eq(weft__coro_resume(all[k]), WEFT__CORO_FINISHED);
    weft__coro_destroy(all[k]);
  }
}

/* ---- 10,000 alive at once --------------------------------------------------- */

#define NALIVE 10000

static void *two_phase_fn(void *arg)
{
  uint64_t i = (uint64_t)(uintptr_t)arg;
  uint64_t before = i * 2654435761u + 1; /* lives on this stack across the suspend */
  weft__coro_suspend(weft__coro_self());
  return (void *)(uintptr_t)(before ^ (i << 32));
}

Test(coro, ten_thousand_alive, .timeout = 90)
{
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  weft__coro **cos = calloc(NALIVE, sizeof(*cos));
  cr_assert_not_null(cos);
  for (uint64_t i = 0; i < NALIVE; i++)
    cos[i] = make(two_phase_fn, (void *)(uintptr_t)i, WEFT__STACK_MIN, NULL);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.guarded_live + c1.slab_live, c0.guarded_live + c0.slab_live + NALIVE);

  for (int i = 0; i < NALIVE; i++)
    cr_assert_eq(weft__coro_resume(cos[i]), WEFT__CORO_SUSPENDED, "coroutine %d", i);
  /* Finish them in reverse, so neighbours' stacks are touched out of order. */
  for (int i = NALIVE - 1; i >= 0; i--) {
    cr_assert_eq(weft__coro_resume(cos[i]), WEFT__CORO_FINISHED, "coroutine %d", i);
    uint64_t want = ((uint64_t)i * 2654435761u + 1) ^ ((uint64_t)i << 32);
    cr_assert_eq((uint64_t)(uintptr_t)cos[i]->ret, want, "coroutine %d", i);
  }
  for (int i = 0; i < NALIVE; i++)
    weft__coro_destroy(cos[i]);
  free(cos);

  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.guarded_live, c0.guarded_live, "guarded stacks leaked");
  cr_assert_eq(c1.slab_live, c0.slab_live, "slab stacks leaked");
}

/* ---- the stack cache -------------------------------------------------------- */

Test(coro, stack_cache_reuse, .timeout = 30)
{
  weft__stack_counters c0, c1, c2;
  weft__coro *co = make(ret_arg_fn, NULL, STACK, NULL);
  weft__coro_destroy(co);
  weft__stack_get_counters(&c0);

  weft__coro *again = make(ret_arg_fn, NULL, STACK, NULL);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.mmaps, c0.mmaps, "a cached stack of the same size must be reused");
  cr_assert_eq(c1.cache_hits, c0.cache_hits + 1);
  cr_assert_eq(again, co, "the one cached stack comes back (same object address)");
  cr_assert_eq(weft__coro_resume(again), WEFT__CORO_FINISHED, "a reused stack must work");
  weft__coro_destroy(again);

  /* Another size does not take it. */
  weft__coro *big = make(ret_arg_fn, NULL, 2 * STACK, NULL);
  weft__stack_get_counters(&c2);
  cr_assert_eq(c2.mmaps, c1.mmaps + 1);
  cr_assert_eq(c2.cache_hits, c1.cache_hits);
  weft__coro_destroy(big);

  /* With no room in the cache a freed stack goes back to the system. */
  weft__stack_cache_drain();
  weft__stack_set_cache_limit(0);
  weft__stack_get_counters(&c1);
  co = make(ret_arg_fn, NULL, STACK, NULL);
  weft__coro_destroy(co);
  weft__stack_get_counters(&c2);
  cr_assert_eq(c2.mmaps, c1.mmaps + 1);
  cr_assert_eq(c2.munmaps, c1.munmaps + 1);
  cr_assert_eq(c2.guarded_live, c1.guarded_live);
  weft__stack_set_cache_limit(64);
}

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
}

Test(coro, guard_page_overflow_anonymous, .timeout = 30)
{
  static struct death d;
  run_helper("anon", &d);
  expect_overflow_report(&d, "#");
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

#define NSLAB 100

Test(coro, slab_stacks_past_guard_budget, .timeout = 30)
{
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
  for (int i = 0; i < NSLAB; i++) {
    cr_assert_eq(weft__coro_resume(cos[i]), WEFT__CORO_FINISHED);
    cr_assert_eq((uint64_t)(uintptr_t)cos[i]->ret, deep_expect((uint64_t)i));
    weft__coro_destroy(cos[i]);
  }
  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.slab_live, c0.slab_live);

  /* Freed slots are handed out again, without a new mapping. */
  weft__stack_get_counters(&c0);
  weft__coro *again = make(deep_fn, (void *)(uintptr_t)7, STACK, "slab");
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.mmaps, c0.mmaps);
  cr_assert_eq(weft__coro_resume(again), WEFT__CORO_SUSPENDED);
  cr_assert_eq(weft__coro_resume(again), WEFT__CORO_FINISHED);
  cr_assert_eq((uint64_t)(uintptr_t)again->ret, deep_expect(7));
  weft__coro_destroy(again);

  weft__stack_set_guard_budget(-1);
  weft__stack_get_counters(&c1);
  cr_assert_gt(c1.guard_budget, 0);
  /* Another size, so that no cached slab stack can serve it. */
  weft__coro *guarded = make(ret_arg_fn, NULL, 2 * STACK, NULL);
  cr_assert_eq(guarded->stack.kind, WEFT__STACK_GUARDED);
  weft__coro_destroy(guarded);
}

static void *park_fn(void *arg)
{
  (void)arg;
  weft__coro_suspend(weft__coro_self());
  return NULL;
}

/* A slab stack dirtied while its coroutine was suspended (nothing checks at
 * destroy) must not make its size class unusable: create may refuse that
 * slot once, but the next create has to get a clean stack. */
Test(coro, dirty_slab_slot_not_reissued, .timeout = 30)
{
  weft__stack_cache_drain();
  weft__stack_set_guard_budget(0);
  weft__coro *co = make(park_fn, NULL, STACK, NULL);
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_SUSPENDED);
  co->stack.map[0] = 1; /* as a stray write from elsewhere would */
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

/* ---- one coroutine, two threads --------------------------------------------- */

struct hop {
  weft__coro *co;
  pthread_t thread[2];       /* pthread_self() seen by each step */
  weft__coro *self[2];       /* weft__coro_self() seen by each step */
  uint64_t locals_ok;
};

static void *hop_fn(void *arg)
{
  struct hop *h = arg;
  uint64_t a = 0xA5A5, b = 0x5A5A5A, c = 12345;
  char buf[64];
  memset(buf, 0x3C, sizeof(buf));
  h->thread[0] = pthread_self();
  h->self[0] = weft__coro_self();
  weft__coro_suspend(h->self[0]);
  /* Now on the other thread: the thread-local "current" must be re-read. */
  h->thread[1] = pthread_self();
  h->self[1] = weft__coro_self();
  int buf_ok = 1;
  for (size_t i = 0; i < sizeof(buf); i++)
    buf_ok &= buf[i] == 0x3C;
  h->locals_ok = buf_ok && a == 0xA5A5 && b == 0x5A5A5A && c == 12345;
  return (void *)(uintptr_t)(a + b + c);
}

struct resumer {
  weft__coro *co;
  int result;
  weft__coro *self_after;  /* weft__coro_self() on that thread after resume */
};

static void *resumer_main(void *arg)
{
  struct resumer *r = arg;
  r->result = weft__coro_resume(r->co);
  r->self_after = weft__coro_self();
  return NULL;
}

Test(coro, resumed_from_two_threads, .timeout = 30)
{
  struct hop h = {0};
  h.co = make(hop_fn, &h, STACK, "hopper");
  struct resumer ra = {.co = h.co, .result = -1}, rb = {.co = h.co, .result = -1};
  pthread_t ta, tb;

  cr_assert_eq(pthread_create(&ta, NULL, resumer_main, &ra), 0);
  cr_assert_eq(pthread_join(ta, NULL), 0);
  cr_assert_eq(ra.result, WEFT__CORO_SUSPENDED);
  cr_assert_null(ra.self_after);

  cr_assert_eq(pthread_create(&tb, NULL, resumer_main, &rb), 0);
  cr_assert_eq(pthread_join(tb, NULL), 0);
  cr_assert_eq(rb.result, WEFT__CORO_FINISHED);
  cr_assert_null(rb.self_after);

  cr_assert(pthread_equal(h.thread[0], ta));
  cr_assert(pthread_equal(h.thread[1], tb));
  cr_assert_eq(h.self[0], h.co);
  cr_assert_eq(h.self[1], h.co);
  cr_assert_eq(h.locals_ok, 1);
  cr_assert_eq((uintptr_t)h.co->ret, 0xA5A5 + 0x5A5A5A + 12345);
  cr_assert_null(weft__coro_self());
  weft__coro_destroy(h.co);
}

/* ---- nesting and embedding -------------------------------------------------- */

struct nest {
  weft__coro *outer, *inner;
  weft__coro *seen[4];
  int inner_states[2];
};

static void *inner_fn(void *arg)
{
  struct nest *n = arg;
  n->seen[1] = weft__coro_self();
  weft__coro_suspend(n->seen[1]);
  n->seen[3] = weft__coro_self();
  return NULL;
}

static void *outer_fn(void *arg)
{
  struct nest *n = arg;
  n->inner_states[0] = weft__coro_resume(n->inner);
  n->seen[0] = weft__coro_self(); /* back in outer after inner suspended */
  n->inner_states[1] = weft__coro_resume(n->inner);
  n->seen[2] = weft__coro_self();
  return NULL;
}

Test(coro, nested_resume_restores_self, .timeout = 30)
{
  struct nest n = {0};
  n.outer = make(outer_fn, &n, STACK, "outer");
  n.inner = make(inner_fn, &n, STACK, "inner");
  cr_assert_eq(weft__coro_resume(n.outer), WEFT__CORO_FINISHED);
  cr_assert_eq(n.inner_states[0], WEFT__CORO_SUSPENDED);
  cr_assert_eq(n.inner_states[1], WEFT__CORO_FINISHED);
  cr_assert_eq(n.seen[0], n.outer);
  cr_assert_eq(n.seen[1], n.inner);
  cr_assert_eq(n.seen[2], n.outer);
  cr_assert_eq(n.seen[3], n.inner);
  cr_assert_null(weft__coro_self());
  weft__coro_destroy(n.inner);
  weft__coro_destroy(n.outer);
}

/* A caller's object wrapped around the coroutine (obj_size) sits at the top
 * of the stack, above every frame: deep frames must not reach it. */
struct task_like {
  weft__coro co;        /* first member, as the header requires */
  uint64_t guard[16];
};

static void *fill_fn(void *arg)
{
  volatile char buf[16384];
  for (size_t k = 0; k < sizeof(buf); k++)
    buf[k] = (char)0xEE;
  struct task_like *t = (struct task_like *)weft__coro_self();
  return (void *)(uintptr_t)(t->guard[0] + (uint64_t)(unsigned char)buf[100] + (uint64_t)(uintptr_t)arg);
}

Test(coro, embedded_object_above_frames, .timeout = 30)
{
  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = fill_fn, .arg = (void *)(uintptr_t)1, .stack_size = STACK,
                       .obj_size = sizeof(struct task_like)};
  cr_assert_eq(weft__coro_create(&co, &o), 0);
  cr_assert_eq((uintptr_t)co % alignof(max_align_t), 0);
  cr_assert((char *)co >= co->stack.base &&
            (char *)co + sizeof(struct task_like) <= co->stack.base + co->stack.size);
  struct task_like *t = (struct task_like *)co;
  for (int k = 0; k < 16; k++)
    t->guard[k] = 0x1111111111111111u * (uint64_t)(k + 1);
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  for (int k = 0; k < 16; k++)
    cr_assert_eq(t->guard[k], 0x1111111111111111u * (uint64_t)(k + 1), "guard[%d] clobbered", k);
  cr_assert_eq((uintptr_t)co->ret, 0x1111111111111111u + 0xEE + 1);
  weft__coro_destroy(co);
}
