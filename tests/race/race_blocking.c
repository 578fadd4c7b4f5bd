/* SPDX-License-Identifier: MIT */
/*
 * race_blocking: the blocking pool under ThreadSanitizer - jobs queued,
 * taken by pool threads that come and go (an idle time of 1 ns), waited
 * for with deadlines of microseconds that end some waits while their job is
 * queued and others while it runs, and waiters cancelled in the middle.
 *
 * A job's state is written by the pool thread that takes it and read by
 * the waiter deciding whether the job is done (lib/blocking.c); the two
 * hold different locks, so the state itself must be safe to share.
 *
 * Checks: every wait ends with 0 and the job's own result, -ETIMEDOUT or
 * -ECANCELED (the last only in a cancelled waiter, which then stops); no
 * job runs twice, every job whose wait said 0 ran once (timed-out and
 * cancelled ones may have run or been dropped). Exit 0 pass, 1 fail, 77
 * without io_uring.
 */
#include "race_check.h"
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define WAITERS 8
#define CALLS 300

static atomic_int ran, finished, timed_out, cancelled;
/* Runs of each job, and how many calls each waiter has made. */
static atomic_int runs[WAITERS + 1][CALLS];
static atomic_int progress[WAITERS + 1];

static void *job(void *arg)
{
  intptr_t v = (intptr_t)arg;
  atomic_fetch_add(&runs[v / 1000][v % 1000], 1);
  atomic_fetch_add(&ran, 1);
  if ((intptr_t)arg % 3 == 0)
    usleep(50);
  return arg;
}

static void *waiter(void *arg)
{
  intptr_t id = (intptr_t)arg;
  for (int i = 0; i < CALLS; i++) {
    void *ret = NULL;
    void *want = (void *)(id * 1000 + i);
    int r = i % 4 == 0 ? weft_blocking_dl(job, want, &ret, weft_now() + 20 * WEFT_USEC)
                       : weft_blocking(job, want, &ret);
    CHECK(r == 0 || r == -ETIMEDOUT || (r == -ECANCELED && id == WAITERS)); /* the cancelled one */
    atomic_fetch_add(&progress[id], 1);
    if (r == 0) {
      CHECK(ret == want);
      CHECK(atomic_load(&runs[id][i]) == 1);
      atomic_fetch_add(&finished, 1);
    } else if (r == -ETIMEDOUT) {
      atomic_fetch_add(&timed_out, 1);
    } else {
      atomic_fetch_add(&cancelled, 1);
      return NULL;
    }
  }
  return NULL;
}

static void *race_main(void *arg)
{
  (void)arg;
  weft_task *t[WAITERS];
  for (intptr_t i = 0; i < WAITERS; i++)
    CHECK(weft_spawn(&t[i], NULL, waiter, (void *)(i + 1)) == 0);
  /* The cancel lands among the last waiter's calls, not before them. */
  while (atomic_load(&progress[WAITERS]) < 20)
    weft_sleep(50 * WEFT_USEC);
  int c = weft_cancel(t[WAITERS - 1]);
  CHECK(c == 0 || c == -ESRCH); /* it may have finished */
  for (int i = 0; i < WAITERS; i++) {
    int j = weft_join(t[i], NULL);
    CHECK(j == (i == WAITERS - 1 && c == 0 ? -ECANCELED : 0));
  }
  CHECK(atomic_load(&cancelled) <= 1);
  return NULL;
}

int main(void)
{
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  cfg.blocking_threads = 2;
  cfg.blocking_idle_ns = 1;
  int r = weft_run(&cfg, race_main, NULL, NULL);
  if (r == -ENOSYS || r == -EPERM)
    return 77;
  CHECK(r == 0);
  /* A timed-out job may still run, or have been dropped from the queue;
   * none runs twice, and none runs that no call asked for. */
  for (int w = 1; w <= WAITERS; w++)
    for (int i = 0; i < CALLS; i++)
      CHECK(atomic_load(&runs[w][i]) <= 1);
  CHECK(atomic_load(&ran) >= atomic_load(&finished));
  CHECK(atomic_load(&ran) <=
        atomic_load(&finished) + atomic_load(&timed_out) + atomic_load(&cancelled));
  int f = atomic_load(&failures);
  printf("race_blocking: %d finished, %d timed out, %d cancelled, %d ran, %d failures\n",
         atomic_load(&finished), atomic_load(&timed_out), atomic_load(&cancelled),
         atomic_load(&ran), f);
  return f == 0 ? 0 : 1;
}
