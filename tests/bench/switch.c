/* SPDX-License-Identifier: MIT */
/*
 * Coroutine switch cost: one round trip (weft__coro_resume from the thread,
 * weft__coro_suspend back) against the floor, a bare jump_fcontext round trip
 * between the thread and a context made with make_fcontext on a stack of our
 * own. Both run in the same process, in alternating batches, and each keeps
 * its best batch: the minimum is the least disturbed by a noisy machine.
 *
 *   bench_switch [--quick]
 *
 * Prints one JSON line; the target (DESIGN.md §5) is ratio <= 3.
 */
#include "coro.h"
#include "fcontext.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define STACK_SIZE ((size_t)64 << 10)

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- weft: resume + suspend ------------------------------------------------ */

static volatile bool weft_stop;

static void *yielder(void *arg)
{
  (void)arg;
  while (!weft_stop)
    weft__coro_suspend(weft__coro_self());
  return NULL;
}

/* Nanoseconds per round trip over `n` round trips, or a negative value if
 * the coroutine did not behave. */
static double weft_batch(weft__coro *co, long n)
{
  int64_t t0 = now_ns();
  for (long i = 0; i < n; i++)
    if (__builtin_expect(weft__coro_resume(co) != WEFT__CORO_SUSPENDED, 0))
      return -1;
  return (double)(now_ns() - t0) / (double)n;
}

/* ---- the floor: bare jump_fcontext ----------------------------------------- */

/* Bounces straight back to whoever jumped here, forever. */
static void bouncer(weft__transfer t)
{
  for (;;)
    t = jump_fcontext(t.fctx, NULL);
}

static double jump_batch(weft__fcontext *ctx, long n)
{
  weft__fcontext c = *ctx;
  int64_t t0 = now_ns();
  for (long i = 0; i < n; i++)
    c = jump_fcontext(c, NULL).fctx;
  double per = (double)(now_ns() - t0) / (double)n;
  *ctx = c;
  return per;
}

int main(int argc, char **argv)
{
  bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  long iters = quick ? 1000000 : 5000000; /* round trips per batch */
  int batches = quick ? 5 : 15;

  weft__coro *co;
  weft__coro_opts o = {.fn = yielder, .stack_size = STACK_SIZE, .name = "bench-switch"};
  int r = weft__coro_create(&co, &o);
  if (r < 0) {
    fprintf(stderr, "bench_switch: weft__coro_create: %s\n", strerror(-r));
    return 1;
  }
  char *stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) {
    perror("bench_switch: mmap");
    return 1;
  }
  weft__fcontext ctx = make_fcontext(stack + STACK_SIZE, STACK_SIZE, bouncer);

  /* Warm-up: first touches of both stacks, caches, branch predictors. */
  if (weft_batch(co, iters / 10) < 0) {
    fprintf(stderr, "bench_switch: the coroutine finished early\n");
    return 1;
  }
  jump_batch(&ctx, iters / 10);

  double best_weft = 1e30, best_jump = 1e30;
  for (int b = 0; b < batches; b++) {
    double w = weft_batch(co, iters), j = jump_batch(&ctx, iters);
    if (w < 0) {
      fprintf(stderr, "bench_switch: the coroutine finished early\n");
      return 1;
    }
    if (w < best_weft)
      best_weft = w;
    if (j < best_jump)
      best_jump = j;
  }

  weft_stop = true;
  if (weft__coro_resume(co) != WEFT__CORO_FINISHED) {
    fprintf(stderr, "bench_switch: the coroutine did not finish\n");
    return 1;
  }
  weft__coro_destroy(co);
  /* The bouncer is parked inside jump_fcontext for good; its stack can go. */
  munmap(stack, STACK_SIZE);

  printf("{\"bench\":\"switch\",\"metric\":\"roundtrip_ns\",\"value\":%.2f,"
         "\"ref\":\"jump_fcontext_roundtrip_ns\",\"ref_value\":%.2f,\"ratio\":%.2f,"
         "\"batches\":%d,\"iters\":%ld}\n",
         best_weft, best_jump, best_weft / best_jump, batches, iters);
  return 0;
}
