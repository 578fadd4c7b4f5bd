/* SPDX-License-Identifier: MIT */
/*
 * stress_shutdown: a runtime stopped with 100,000 coroutines blocked (10,000
 * with --quick), DESIGN.md section 6: 40% asleep for an hour, 40% waiting on
 * a channel nobody sends to, 20% in a read(2) on one of 100 empty pipes (so
 * each pipe has hundreds of reads queued in the kernel). main returns once
 * all have blocked; weft_run() then cancels every one, waits for the
 * kernel's last completion of each read, frees everything and returns.
 *
 * Checks, exactly: every blocker started, and every one ended with
 * -ECANCELED (counted per kind). "Freed" is LeakSanitizer's part in the
 * ASan build (leaks fail the process at exit). Prints the teardown time.
 *
 * Exit status: 0 pass, 1 fail, 77 io_uring unavailable.
 */
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PIPES 100

enum { SLEEP, CHAN, READ, KINDS };
static const char *const kind_name[KINDS] = {"sleep", "chan", "read"};

struct shutdown {
  long n;
  weft_chan *silent;
  int pipes[PIPES][2];
  _Atomic long started;
  _Atomic long cancelled[KINDS], other[KINDS];
  int64_t main_end;
  int err;
};

static struct shutdown S;

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void ended(int kind, long r)
{
  atomic_fetch_add(r == -ECANCELED ? &S.cancelled[kind] : &S.other[kind], 1);
}

static void *blocker(void *arg)
{
  long i = (long)(intptr_t)arg;
  atomic_fetch_add_explicit(&S.started, 1, memory_order_relaxed);
  switch (i % 5) {
  case 0:
  case 1:
    ended(SLEEP, weft_sleep(3600 * (int64_t)WEFT_SEC));
    break;
  case 2:
  case 3: {
    uint64_t v;
    ended(CHAN, weft_chan_recv(S.silent, &v));
    break;
  }
  default: {
    char buf[16]; /* the kernel writes here until the read's last CQE */
    ended(READ, (long)weft_read(S.pipes[(i / 5) % PIPES][0], buf, sizeof(buf)));
    break;
  }
  }
  return NULL;
}

static void *shutdown_main(void *arg)
{
  (void)arg;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  for (long i = 0; i < S.n; i++) {
    int e = weft_spawn(NULL, &o, blocker, (void *)(intptr_t)i);
    if (e < 0) {
      S.err = e;
      return NULL;
    }
    if (i % 4096 == 4095)
      weft_yield();
  }
  while (atomic_load_explicit(&S.started, memory_order_relaxed) < S.n)
    weft_sleep(WEFT_MSEC);
  /* Every blocker is in its wait now: it counts itself right before its
   * call, with nothing that could suspend in between. This sleep only lets
   * both shards pass through their loops, which hand the last reads' SQEs
   * to the kernel, so that those reads are queued there when we stop. */
  weft_sleep(20 * WEFT_MSEC);
  S.main_end = now_ns();
  return NULL;
}

int main(int argc, char **argv)
{
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  S.n = quick ? 10000 : 100000;
  for (int p = 0; p < PIPES; p++)
    if (pipe(S.pipes[p]) != 0) {
      perror("stress_shutdown: pipe");
      return 1;
    }
  if (weft_chan_create(&S.silent, sizeof(uint64_t), 1) != 0) {
    fprintf(stderr, "stress_shutdown: weft_chan_create failed\n");
    return 1;
  }
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  int r = weft_run(&cfg, shutdown_main, NULL, NULL);
  int64_t end = now_ns();
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "stress_shutdown: io_uring unavailable (%d), skipped\n", r);
    return 77;
  }
  int fail = 0;
  if (r < 0 || S.err < 0) {
    fprintf(stderr, "stress_shutdown: %s\n", weft_strerror(r < 0 ? r : S.err));
    fail = 1;
  }
  long total = 0;
  for (int k = 0; k < KINDS; k++) {
    long c = atomic_load(&S.cancelled[k]), o = atomic_load(&S.other[k]);
    total += c;
    if (o) {
      fprintf(stderr, "stress_shutdown: %ld %s blockers ended otherwise than -ECANCELED\n", o,
              kind_name[k]);
      fail = 1;
    }
  }
  if (total != S.n || atomic_load(&S.started) != S.n) {
    fprintf(stderr, "stress_shutdown: %ld started, %ld cancelled, of %ld\n",
            atomic_load(&S.started), total, S.n);
    fail = 1;
  }
  weft_chan_unref(S.silent);
  for (int p = 0; p < PIPES; p++) {
    close(S.pipes[p][0]);
    close(S.pipes[p][1]);
  }
  printf("stress_shutdown: %ld blockers (sleep %ld, chan %ld, read %ld) all cancelled; "
         "teardown %.1f ms%s\n",
         S.n, atomic_load(&S.cancelled[SLEEP]), atomic_load(&S.cancelled[CHAN]),
         atomic_load(&S.cancelled[READ]), (double)(end - S.main_end) / 1e6,
         fail ? " - FAILED" : "");
  return fail;
}
