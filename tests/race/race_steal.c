/* SPDX-License-Identifier: MIT */
/*
 * race_steal: the stealable queues under ThreadSanitizer.
 *
 * Part 1 drives lib/deque.h directly from plain threads: one owner pushes
 * 1..N (fake task pointers, never dereferenced) and now and then takes one
 * itself, while two thieves take batches of 1..8. Every value must come out
 * exactly once (a per-value count and the sum).
 *
 * Part 2 hammers the queues through the runtime: a 2-shard runtime where
 * trees of stealable tasks grow on both shards - each task yields a few
 * times (so it may move between yields), checks that weft_shard_id() names
 * the thread it runs on, and spawns its children - while two plain threads
 * submit more trees with stealable placements. Every task must run exactly
 * once; the counters must add up.
 *
 * Exit 0 when everything matches, 1 otherwise, 77 without io_uring.
 */
#include "race_check.h"
#include "race_rt.h"
#include "core.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- part 1: the deque alone ---------------------------------------------------------- */

#define DQ_CAPACITY 64
#define DQ_ITEMS 200000
#define DQ_THIEVES 2

static weft__deque dq;
static atomic_uchar dq_seen[DQ_ITEMS + 1];
static _Atomic uint64_t dq_sum, dq_count;
static atomic_bool dq_owner_done;

static void dq_record(weft_task **v, uint32_t n)
{
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t x = (uintptr_t)v[i];
    if (x == 0 || x > DQ_ITEMS) {
      CHECK(!"value out of range");
      continue;
    }
    if (atomic_fetch_add_explicit(&dq_seen[x], 1, memory_order_relaxed) != 0)
      CHECK(!"value taken twice");
    atomic_fetch_add_explicit(&dq_sum, x, memory_order_relaxed);
    atomic_fetch_add_explicit(&dq_count, 1, memory_order_relaxed);
  }
}

static void *dq_thief(void *arg)
{
  uint32_t want = 1;
  weft_task *got[8];
  (void)arg;
  for (;;) {
    /* Read the flag first: after it is set nothing is pushed any more, so
     * an empty take after that means empty for good. */
    bool done = atomic_load(&dq_owner_done);
    uint32_t n = weft__deque_take(&dq, got, want);
    dq_record(got, n);
    want = want % 8 + 1;
    if (n == 0) {
      if (done)
        return NULL;
      sched_yield();
    }
  }
}

static void *dq_owner(void *arg)
{
  weft_task *one;
  (void)arg;
  for (uintptr_t v = 1; v <= DQ_ITEMS; v++) {
    while (!weft__deque_push(&dq, (weft_task *)v, v)) {
      /* Full: do some of the work ourselves, like a shard does. */
      dq_record(&one, weft__deque_take(&dq, &one, 1));
    }
    if (v % 7 == 0)
      dq_record(&one, weft__deque_take(&dq, &one, 1));
  }
  atomic_store(&dq_owner_done, true);
  while (weft__deque_take(&dq, &one, 1))
    dq_record(&one, 1);
  return NULL;
}

static int deque_part(void)
{
  if (weft__deque_init(&dq, DQ_CAPACITY) < 0) {
    fprintf(stderr, "weft__deque_init failed\n");
    return 1;
  }
  pthread_t owner, thief[DQ_THIEVES];
  if (pthread_create(&owner, NULL, dq_owner, NULL) != 0)
    return 1;
  for (int i = 0; i < DQ_THIEVES; i++)
    if (pthread_create(&thief[i], NULL, dq_thief, NULL) != 0)
      return 1;
  pthread_join(owner, NULL);
  for (int i = 0; i < DQ_THIEVES; i++)
    pthread_join(thief[i], NULL);
  CHECK(weft__deque_len(&dq) == 0);
  int missing = 0;
  for (uint32_t v = 1; v <= DQ_ITEMS; v++)
    missing += atomic_load(&dq_seen[v]) != 1;
  CHECK(missing == 0);
  CHECK(atomic_load(&dq_count) == DQ_ITEMS);
  CHECK(atomic_load(&dq_sum) == (uint64_t)DQ_ITEMS * (DQ_ITEMS + 1) / 2);
  weft__deque_term(&dq);
  printf("race_steal: deque: %d values through 1 owner + %d thieves, %d missing\n", DQ_ITEMS,
         DQ_THIEVES, missing);
  return 0;
}

/* ---- part 2: the runtime ---------------------------------------------------------------- */

#define DEPTH 6                          /* a tree has 2^(DEPTH+1) - 1 tasks */
#define TREE ((1 << (DEPTH + 1)) - 1)
#define SHARD0_TREES 10                  /* grown from inside shard 0 ... */
#define SHARD1_TREES 2                   /* ... and shard 1: uneven, so thieves work */
#define THREAD_TREES 12                  /* per plain thread */
#define SUBMITTERS 2
#define TREES (SHARD0_TREES + SHARD1_TREES + SUBMITTERS * THREAD_TREES)
#define TASKS (TREES * TREE)
#define YIELDS 3

static atomic_int runs[TASKS];
static atomic_int finished_tasks, moves, wrong_thread;
static pid_t shard_tid[2];

static pid_t tid_now(void)
{
  return (pid_t)syscall(SYS_gettid);
}

/* The argument: tree index * TREE + heap index in the tree. */
static void *node(void *arg)
{
  int id = (int)(intptr_t)arg, tree = id / TREE, k = id % TREE;
  atomic_fetch_add(&runs[id], 1);
  int s = weft_shard_id();
  for (int y = 0; y < YIELDS; y++) {
    CHECK(weft_yield() == 0);
    int now = weft_shard_id();
    if ((now != 0 && now != 1) || shard_tid[now] != tid_now())
      atomic_fetch_add(&wrong_thread, 1);
    else if (now != s)
      atomic_fetch_add(&moves, 1);
    s = now;
  }
  for (int c = 2 * k + 1; c <= 2 * k + 2 && c < TREE; c++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    if (c % 8 == 0) { /* some children are handed to the other shard */
      o.placement = WEFT_PLACE_STEALABLE_PREFERRED;
      o.shard = s ^ 1;
    }
    CHECK(weft_spawn(NULL, &o, node, (void *)(intptr_t)(tree * TREE + c)) == 0);
  }
  atomic_fetch_add(&finished_tasks, 1);
  return NULL;
}

static void *note_tid(void *arg)
{
  (void)arg;
  shard_tid[weft_shard_id()] = tid_now();
  return NULL;
}

/* Pinned on a shard: grows its trees from there. */
static void *grower(void *arg)
{
  int first = (int)(intptr_t)arg;
  int n = first == 0 ? SHARD0_TREES : SHARD1_TREES;
  for (int i = 0; i < n; i++)
    CHECK(weft_spawn(NULL, NULL, node, (void *)(intptr_t)((first + i) * TREE)) == 0);
  return NULL;
}

struct submitter {
  weft_runtime *rt;
  int first_tree;
};

static void *submitter_main(void *arg)
{
  struct submitter *s = arg;
  for (int i = 0; i < THREAD_TREES; i++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    if (i % 2) {
      o.placement = WEFT_PLACE_STEALABLE_PREFERRED;
      o.shard = i % 4 == 1;
    }
    /* (Stealable from a plain thread: round-robin.) */
    CHECK(weft_runtime_submit(s->rt, &o, node, (void *)(intptr_t)((s->first_tree + i) * TREE),
                              NULL) == 0);
  }
  return NULL;
}

/* Whether the trees above were stolen from depends on how the machine
 * schedules the two shard threads: on a loaded one, both can stay busy
 * with their own work until the end. So the run ends with a steal that is
 * sure to come: a task pinned on shard 0 spawns stealable probes there -
 * into its own queue, which wakes the idle shard 1 - and then keeps the
 * shard busy (never yielding: the probes cannot run on shard 0 meanwhile)
 * until the runtime's stats show a steal, for at most 60 s. */
#define PROBES 8

static atomic_int probes_ran;

static void *probe(void *arg)
{
  (void)arg;
  atomic_fetch_add(&probes_ran, 1);
  return NULL;
}

static void *hog_until_stolen(void *arg)
{
  weft_runtime *rt = arg;
  for (int i = 0; i < PROBES; i++)
    CHECK(weft_spawn(NULL, NULL, probe, NULL) == 0);
  int64_t give_up = weft_now() + 60 * WEFT_SEC;
  weft_stats st = {0};
  while (weft_now() < give_up && weft_stats_get(rt, -1, &st) == 0 && st.steal_success == 0)
    sched_yield();
  CHECK(st.steal_success > 0);
  return NULL;
}

static int pin_and_join(weft_runtime *rt, int shard, void *(*fn)(void *), void *arg)
{
  weft_task *t;
  int r = race_submit_on(rt, WEFT_PLACE_PINNED, shard, fn, arg, &t);
  if (r == 0)
    r = weft_join(t, NULL);
  return r;
}

static int runtime_part(void)
{
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  cfg.stack_size = 64 * 1024;
  weft_runtime *rt;
  int r = weft_runtime_start(&rt, &cfg);
  if (r == -EPERM || r == -ENOSYS) {
    printf("race_steal: io_uring unavailable (%s), skipped\n", weft_strerror(r));
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "weft_runtime_start: %s\n", weft_strerror(r));
    return 1;
  }
  for (int s = 0; s < 2; s++)
    CHECK(pin_and_join(rt, s, note_tid, NULL) == 0);
  CHECK(shard_tid[0] && shard_tid[1] && shard_tid[0] != shard_tid[1]);

  /* Growers on both shards and the plain-thread submitters, all at once. */
  weft_task *g[2];
  for (int s = 0; s < 2; s++)
    CHECK(race_submit_on(rt, WEFT_PLACE_PINNED, s, grower, (void *)(intptr_t)(s * SHARD0_TREES),
                         &g[s]) == 0);
  struct submitter sub[SUBMITTERS];
  pthread_t th[SUBMITTERS];
  for (int i = 0; i < SUBMITTERS; i++) {
    sub[i] = (struct submitter){.rt = rt,
                                .first_tree = SHARD0_TREES + SHARD1_TREES + i * THREAD_TREES};
    if (pthread_create(&th[i], NULL, submitter_main, &sub[i]) != 0)
      return 1;
  }
  for (int i = 0; i < SUBMITTERS; i++)
    pthread_join(th[i], NULL);
  for (int s = 0; s < 2; s++)
    CHECK(weft_join(g[s], NULL) == 0);

  /* Every task returns (bounded: 60 s), then the live count reaches 0. */
  weft_stats st;
  for (int i = 0; i < 600000 && atomic_load(&finished_tasks) < TASKS; i++)
    weft_sleep(100 * WEFT_USEC);
  CHECK(atomic_load(&finished_tasks) == TASKS);
  CHECK(pin_and_join(rt, 0, hog_until_stolen, rt) == 0);
  for (int i = 0; i < 600000 && atomic_load(&probes_ran) < PROBES; i++)
    weft_sleep(100 * WEFT_USEC);
  CHECK(atomic_load(&probes_ran) == PROBES);
  for (int i = 0; i < 100000; i++) {
    CHECK(weft_stats_get(rt, -1, &st) == 0);
    if (st.live == 0)
      break;
    weft_sleep(100 * WEFT_USEC);
  }
  CHECK(st.live == 0);
  uint64_t all = (uint64_t)TASKS + 2 + 2 + 1 + PROBES; /* + note_tid x2 + growers + the hog's */
  CHECK(st.spawned == all);
  CHECK(st.finished == all);
  CHECK(st.steal_success > 0);
  int bad = 0;
  for (int i = 0; i < TASKS; i++)
    bad += atomic_load(&runs[i]) != 1;
  CHECK(bad == 0);
  CHECK(atomic_load(&wrong_thread) == 0);
  CHECK(weft_runtime_stop(rt) == 0);
  printf("race_steal: runtime: %d tasks, %d ran other than once, %llu stolen, %d moves "
         "across yields, %d wrong-thread resumes\n",
         TASKS, bad, (unsigned long long)st.steal_success, atomic_load(&moves),
         atomic_load(&wrong_thread));
  return 0;
}

int main(void)
{
  if (deque_part() != 0)
    return 1;
  int r = runtime_part();
  if (r == 77)
    return atomic_load(&failures) ? 1 : 77;
  if (r != 0)
    return 1;
  int f = atomic_load(&failures);
  printf("race_steal: %s\n", f ? "FAIL" : "ok");
  return f ? 1 : 0;
}
