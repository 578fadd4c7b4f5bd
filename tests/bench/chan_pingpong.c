/* SPDX-License-Identifier: MIT */
/*
 * chan_pingpong: a round trip through two channels (capacity 1, 8-byte
 * elements): the pinger sends on `ping` and receives from `pong`, the ponger
 * the other way round.
 *
 *  chan_pingpong         pinger pinned to shard 0, ponger to shard 1, default
 *                        spin_ns (shards poll between messages). Reference:
 *                        two plain threads bouncing a counter on one cache
 *                        line. Target ratio <= 8 (as for pingpong).
 *  chan_pingpong_parked  the same with spin_ns = 0: each hop wakes a parked
 *                        shard with msg_ring. Reference: two plain threads
 *                        waking each other by FUTEX_WAIT / FUTEX_WAKE.
 *                        Target ratio <= 0.7.
 *  chan_pingpong_local   both coroutines on one shard (a 1-shard runtime);
 *                        the reference is a weft_yield() round trip between
 *                        two coroutines measured in the same run (the two
 *                        context switches a local hand-over cannot avoid).
 *                        Target value <= 100 ns (DESIGN.md section 5).
 *
 * Best of several batches for each value and reference (see bench_util.h);
 * medians in extra fields. Both sides of the cross-shard variants are
 * pinned to two distinct CPUs, the reference threads as well as the shards.
 */
#include "bench_util.h"

#include "weft.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#include "pingpong_ref.h"

/* ---- weft: channel round trips ------------------------------------------------------ */

struct chan_pp {
  const struct params *p;
  int pong_shard;           /* where the ponger runs: 1, or 0 for local */
  weft_chan *ping, *pong;
  double samples[MAX_BATCHES];
  int err;
};

static void *ponger(void *arg)
{
  struct chan_pp *w = arg;
  long n = total_trips(w->p);
  uint64_t v;
  for (long k = 0; k < n; k++) {
    int r = weft_chan_recv(w->ping, &v);
    if (r == 0)
      r = weft_chan_send(w->pong, &v);
    if (r < 0)
      return (void *)(intptr_t)r;
  }
  return NULL;
}

static int hop(struct chan_pp *w, uint64_t k)
{
  uint64_t v = k;
  int r = weft_chan_send(w->ping, &v);
  if (r == 0)
    r = weft_chan_recv(w->pong, &v);
  if (r == 0 && v != k)
    r = -EPROTO;
  return r;
}

static void *pinger(void *arg)
{
  struct chan_pp *w = arg;
  const struct params *p = w->p;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = w->pong_shard;
  weft_task *t;
  int r = weft_spawn(&t, &o, ponger, w);
  if (r < 0) {
    w->err = r;
    return NULL;
  }
  uint64_t k = 0;
  for (int i = 0; i < p->warm && r == 0; i++)
    r = hop(w, k++);
  for (int b = 0; b < p->batches && r == 0; b++) {
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < p->iters && r == 0; i++)
      r = hop(w, k++);
    w->samples[b] = (double)(bench_now_ns() - t0) / p->iters;
  }
  if (r < 0) {
    /* Let the ponger go before joining it. */
    weft_chan_close(w->ping);
    weft_chan_close(w->pong);
  }
  void *ret = NULL;
  weft_join(t, &ret);
  w->err = r < 0 ? r : (int)(intptr_t)ret;
  return NULL;
}

/* shards: 2 (cross-shard) or 1 (local); spin_ns < 0 keeps the default. */
static int run_chan(const struct params *p, int shards, int64_t spin_ns, struct result *out)
{
  static struct chan_pp w;
  memset(&w, 0, sizeof(w));
  w.p = p;
  w.pong_shard = shards - 1;
  int r = weft_chan_create(&w.ping, sizeof(uint64_t), 1);
  if (r < 0)
    return r;
  r = weft_chan_create(&w.pong, sizeof(uint64_t), 1);
  if (r < 0) {
    weft_chan_unref(w.ping);
    return r;
  }
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = shards;
  cfg.cpus = pin_cpus;
  cfg.ncpus = pin_n;
  if (spin_ns >= 0)
    cfg.spin_ns = spin_ns;
  r = weft_run(&cfg, pinger, &w, NULL);
  if (r == 0)
    r = w.err;
  weft_chan_unref(w.ping);
  weft_chan_unref(w.pong);
  if (r == 0)
    *out = summarise(w.samples, p->batches);
  return r;
}

/* ---- the local reference: a yield round trip between two coroutines ---------------- */

struct yield_run {
  const struct params *p;
  double samples[MAX_BATCHES];
};

static void *yield_partner(void *arg)
{
  long n = total_trips(arg) + 1;
  for (long k = 0; k < n; k++)
    weft_yield();
  return NULL;
}

static void *yield_main(void *arg)
{
  struct yield_run *y = arg;
  const struct params *p = y->p;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 0;
  weft_task *t;
  if (weft_spawn(&t, &o, yield_partner, (void *)p) < 0)
    return (void *)(intptr_t)-1;
  /* Each yield of ours runs the partner's yield once: one round trip. */
  for (int i = 0; i < p->warm; i++)
    weft_yield();
  for (int b = 0; b < p->batches; b++) {
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < p->iters; i++)
      weft_yield();
    y->samples[b] = (double)(bench_now_ns() - t0) / p->iters;
  }
  weft_join(t, NULL);
  return NULL;
}

static int run_yield(const struct params *p, struct result *out)
{
  static struct yield_run y;
  memset(&y, 0, sizeof(y));
  y.p = p;
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 1;
  cfg.cpus = pin_cpus;
  cfg.ncpus = pin_n ? 1 : 0;
  void *ret = NULL;
  int r = weft_run(&cfg, yield_main, &y, &ret);
  if (r == 0 && ret)
    r = -EAGAIN;
  if (r == 0)
    *out = summarise(y.samples, p->batches);
  return r;
}

/* ---- output ------------------------------------------------------------------------- */

static void print_line(const char *bench, const char *ref_name, const struct result *v,
                       const struct result *ref, double target, bool target_is_value)
{
  double ratio = v->best / ref->best;
  bool met = target_is_value ? v->best <= target : ratio <= target;
  char slept[48] = "";
  if (ref->slept_share >= 0)
    snprintf(slept, sizeof(slept), ",\"ref_slept_share\":%.3f", ref->slept_share);
  bench_print(bench, "rtt_ns", v->best, ref_name, ref->best, ratio,
              ",\"median\":%.1f,\"ref_median\":%.1f,\"%s\":%.2f,\"target_met\":%s,"
              "\"capacity\":1,\"pinned\":%s%s",
              v->median, ref->median, target_is_value ? "target_ns" : "target_ratio", target,
              met ? "true" : "false", pin_n == 2 ? "true" : "false", slept);
}

static int fail(const char *what, int r)
{
  if (bench_uring_missing(r)) {
    fprintf(stderr, "chan_pingpong: io_uring unavailable (%d), skipped\n", r);
    return BENCH_SKIP;
  }
  fprintf(stderr, "chan_pingpong: %s: %s\n", what, r == -1 ? "pthread_create failed"
                                                           : weft_strerror(r));
  return 1;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("chan_pingpong", quick ? 30 : 120);
  struct params busy = {.warm = 1000, .iters = quick ? 10000 : 50000, .batches = quick ? 5 : 10};
  struct params parked = {.warm = 100, .iters = quick ? 600 : 4000, .batches = quick ? 5 : 10};
  struct params local = {.warm = 10000, .iters = quick ? 200000 : 1000000,
                         .batches = quick ? 5 : 10};
  choose_cpus();

  struct result ref, val;
  int r;
  if (run_ref(spin_pinger, spin_echo, &busy, &ref) < 0)
    return fail("reference", -1);
  if ((r = run_chan(&busy, 2, -1, &val)) < 0)
    return fail("chan_pingpong", r);
  print_line("chan_pingpong", "spin_rtt_ns", &val, &ref, 8.0, false);

  if (run_ref(futex_pinger, futex_echo, &parked, &ref) < 0)
    return fail("reference", -1);
  if ((r = run_chan(&parked, 2, 0, &val)) < 0)
    return fail("chan_pingpong_parked", r);
  print_line("chan_pingpong_parked", "futex_rtt_ns", &val, &ref, 0.7, false);

  /* Alternate the two local measurements so that both see the same noise. */
  struct result yv[2], cv[2];
  for (int i = 0; i < 2; i++) {
    if ((r = run_yield(&local, &yv[i])) < 0)
      return fail("yield reference", r);
    if ((r = run_chan(&local, 1, -1, &cv[i])) < 0)
      return fail("chan_pingpong_local", r);
  }
  ref = yv[yv[1].best < yv[0].best];
  val = cv[cv[1].best < cv[0].best];
  print_line("chan_pingpong_local", "switch_rtt_ns", &val, &ref, 100.0, true);
  return 0;
}
