/* SPDX-License-Identifier: MIT */
/*
 * demo: weft in a few seconds, on every core of the machine.
 *
 * 1. A crowd: 100,000 coroutines spread round-robin over the shards, all
 *    alive at once (each waits on one shared event), then each yields 10
 *    times. Prints the spawn cost and the switch cost: the time from one
 *    coroutine's yield until the next one runs, measured per shard.
 * 2. Cross-shard hand-offs: a task pinned to shard 0 and one pinned to the
 *    last shard play ping-pong through two auto-reset weft_events, 100,000
 *    round trips. Each hand-off to the other shard is an inbox push plus,
 *    when that shard sleeps in io_uring_enter, one msg_ring wake-up.
 * 3. The runtime's counters (weft_stats_get): spawns, switches, wake-ups
 *    sent and coalesced, parks, and the io_uring setup flags the kernel took.
 *
 * Build and run: meson setup build && ninja -C build && build/examples/demo
 * Exits 0 on success, 77 if io_uring is not available to the process.
 */
#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define CROWD 100000
#define YIELDS 10
#define ROUND_TRIPS 100000

/* Per-shard span of the yield loops: only the shard's own thread writes its
 * slot (round-robin tasks never move) and weft_join() orders those writes
 * before main reads them. */
struct span {
  int64_t first, last;
  uint64_t yields;
};

struct crowd {
  weft_event *go;       /* manual-reset: one set() releases everybody */
  struct span *spans;   /* one per shard */
};

static void *crowd_member(void *arg)
{
  struct crowd *c = arg;
  if (weft_event_wait(c->go) < 0)
    return (void *)1;
  struct span *s = &c->spans[weft_shard_id()];
  int64_t t = weft_now();
  if (s->first == 0 || t < s->first)
    s->first = t;
  for (int i = 0; i < YIELDS; i++)
    if (weft_yield() < 0)
      return (void *)1;
  t = weft_now();
  if (t > s->last)
    s->last = t;
  s->yields += YIELDS;
  return NULL;
}

static int fail(const char *what, int err)
{
  fprintf(stderr, "demo: %s: %s\n", what, weft_strerror(err));
  return -1;
}

/* Spawns the crowd, releases it, joins it and prints what it measured. */
static int crowd_run(struct crowd *c, weft_task **tasks, int shards)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  /* These bodies need little stack: 64 KiB keeps 100,000 of them at 6 GiB
   * of address space (pages are committed only when touched). */
  o.stack_size = 64 * 1024;

  int r = 0, spawned = 0, bad = 0;
  int64_t t0 = weft_now();
  for (; spawned < CROWD; spawned++)
    if ((r = weft_spawn(&tasks[spawned], &o, crowd_member, c)) < 0) {
      fail("weft_spawn", r);
      break;
    }
  int64_t t1 = weft_now();
  int sr = weft_event_set(c->go);
  if (sr < 0) {
    /* Nobody can be released: cancel the waiters so that the joins end. */
    r = fail("weft_event_set", sr);
    for (int i = 0; i < spawned; i++)
      weft_cancel(tasks[i]);
  }
  for (int i = 0; i < spawned; i++) {
    void *ret;
    if (weft_join(tasks[i], &ret) < 0 || ret != NULL)
      bad++;
  }
  int64_t t2 = weft_now();
  if (r < 0)
    return r;
  if (bad) {
    fprintf(stderr, "demo: %d crowd members failed\n", bad);
    return -1;
  }

  double per_yield = 0;
  int active = 0;
  for (int s = 0; s < shards; s++)
    if (c->spans[s].yields) {
      per_yield += (double)(c->spans[s].last - c->spans[s].first) / (double)c->spans[s].yields;
      active++;
    }
  printf("crowd:     %d coroutines, %d yields each\n", CROWD, YIELDS);
  printf("  spawn:   %.1f ms (%.0f ns per spawn)\n", (double)(t1 - t0) / 1e6,
         (double)(t1 - t0) / CROWD);
  printf("  switch:  %.0f ns per yield (task -> scheduler -> next task, per shard)\n",
         active ? per_yield / active : 0.0);
  printf("  total:   %.1f ms for spawn, %d yields and join\n", (double)(t2 - t0) / 1e6,
         CROWD * YIELDS);
  return 0;
}

static int demo_crowd(int shards)
{
  struct crowd c = {0};
  weft_task **tasks = calloc(CROWD, sizeof(*tasks));
  c.spans = calloc((size_t)shards, sizeof(*c.spans));
  int r = -ENOMEM;
  if (!tasks || !c.spans)
    fail("crowd", r);
  else if ((r = weft_event_create(&c.go, 0)) < 0)
    fail("weft_event_create", r);
  else
    r = crowd_run(&c, tasks, shards);
  if (c.go)
    weft_event_destroy(c.go);
  free(c.spans);
  free(tasks);
  return r;
}

struct pingpong {
  weft_event *ping, *pong;  /* auto-reset: each set() releases one wait() */
  int64_t elapsed;
};

static void *pinger(void *arg)
{
  struct pingpong *p = arg;
  int64_t t0 = weft_now();
  for (int i = 0; i < ROUND_TRIPS; i++)
    if (weft_event_set(p->ping) < 0 || weft_event_wait(p->pong) < 0)
      return (void *)1;
  p->elapsed = weft_now() - t0;
  return NULL;
}

static void *ponger(void *arg)
{
  struct pingpong *p = arg;
  for (int i = 0; i < ROUND_TRIPS; i++)
    if (weft_event_wait(p->ping) < 0 || weft_event_set(p->pong) < 0)
      return (void *)1;
  return NULL;
}

static int spawn_pinned(weft_task **t, int shard, void *(*fn)(void *), void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = shard;
  return weft_spawn(t, &o, fn, arg);
}

/* Runs the two players, shard 0 against the last shard, and prints the RTT. */
static int pingpong_run(struct pingpong *p, int shards)
{
  weft_task *a, *b;
  void *ra = NULL, *rb = NULL;
  int r = spawn_pinned(&b, shards - 1, ponger, p);
  if (r < 0)
    return fail("weft_spawn", r);
  if ((r = spawn_pinned(&a, 0, pinger, p)) < 0) {
    /* The ponger waits for pings that never come: cancel it. */
    weft_cancel(b);
    weft_join(b, NULL);
    return fail("weft_spawn", r);
  }
  int ja = weft_join(a, &ra);
  if (ja < 0 || ra)
    weft_cancel(b); /* the pinger gave up: do not leave the ponger waiting */
  int jb = weft_join(b, &rb);
  if (ja < 0 || jb < 0 || ra || rb) {
    fprintf(stderr, "demo: ping-pong failed\n");
    return -1;
  }
  printf("pingpong:  shard 0 <-> shard %d%s, %d round trips\n", shards - 1,
         shards == 1 ? " (one shard only: not cross-shard)" : "", ROUND_TRIPS);
  printf("  rtt:     %.0f ns per round trip (%.1f ms in all)\n",
         (double)p->elapsed / ROUND_TRIPS, (double)p->elapsed / 1e6);
  return 0;
}

static int demo_pingpong(int shards)
{
  struct pingpong p = {0};
  int r;
  if ((r = weft_event_create(&p.ping, WEFT_EVENT_AUTO_RESET)) < 0 ||
      (r = weft_event_create(&p.pong, WEFT_EVENT_AUTO_RESET)) < 0)
    fail("weft_event_create", r);
  else
    r = pingpong_run(&p, shards);
  if (p.ping)
    weft_event_destroy(p.ping);
  if (p.pong)
    weft_event_destroy(p.pong);
  return r;
}

static void print_stats(void)
{
  weft_stats s;
  int r = weft_stats_get(NULL, -1, &s);
  if (r < 0) {
    fail("weft_stats_get", r);
    return;
  }
  printf("stats:     sums over the %d shard%s\n", s.shards, s.shards == 1 ? "" : "s");
  printf("  tasks:   %llu spawned, %llu finished, %llu live (this main task)\n",
         (unsigned long long)s.spawned, (unsigned long long)s.finished,
         (unsigned long long)s.live);
  printf("  switch:  %llu coroutine resumptions\n", (unsigned long long)s.switches);
  printf("  wakes:   %llu msg_ring wake-ups sent, %llu coalesced\n",
         (unsigned long long)s.wakes_sent, (unsigned long long)s.wakes_coalesced);
  printf("  kernel:  %llu parks, %llu io_uring_enter calls, %llu CQEs\n",
         (unsigned long long)s.parks, (unsigned long long)s.enters,
         (unsigned long long)s.cqes);
  printf("  rings:   %u SQ entries in all; flags on every shard:%s%s%s%s%s%s\n",
         s.ring_entries, s.ring_flags & WEFT_RING_SINGLE_ISSUER ? " SINGLE_ISSUER" : "",
         s.ring_flags & WEFT_RING_DEFER_TASKRUN ? " DEFER_TASKRUN" : "",
         s.ring_flags & WEFT_RING_COOP_TASKRUN ? " COOP_TASKRUN" : "",
         s.ring_flags & WEFT_RING_SUBMIT_ALL ? " SUBMIT_ALL" : "",
         s.ring_flags & WEFT_RING_TASKRUN_FLAG ? " TASKRUN_FLAG" : "",
         s.ring_flags ? "" : " none");
}

/* The main coroutine: weft_run() starts it pinned to shard 0. */
static void *demo_main(void *arg)
{
  (void)arg;
  int shards = weft_shard_count();
  printf("weft %s: %d shard%s\n", weft_version(), shards, shards == 1 ? "" : "s");
  if (demo_crowd(shards) < 0 || demo_pingpong(shards) < 0)
    return (void *)1;
  print_stats();
  return NULL;
}

int main(void)
{
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 0; /* one per CPU this process may use */
  void *ret = NULL;
  int r = weft_run(&cfg, demo_main, NULL, &ret);
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "demo: io_uring is not available here (%s): skipped\n",
            weft_strerror(r));
    return 77;
  }
  if (r < 0) {
    fail("weft_run", r);
    return 1;
  }
  return ret == NULL ? 0 : 1;
}
