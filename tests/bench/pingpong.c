/* SPDX-License-Identifier: MIT */
/*
 * pingpong: round trip between a coroutine pinned to shard 0 and one pinned
 * to shard 1, through two auto-reset events (set the other's, wait on one's
 * own). Each hop is a cross-shard wake-up: the waiter is pushed onto the
 * other shard's inbox, plus a msg_ring message if that shard sleeps.
 *
 *  pingpong         default spin_ns: the shards poll between messages, so a
 *                   hop is an inbox push seen by a spinning shard. Reference:
 *                   two plain threads bouncing a counter on one cache line
 *                   with an atomic store / load loop. Target ratio <= 8.
 *  pingpong_parked  spin_ns = 0: each shard sleeps in io_uring_enter between
 *                   messages and is woken by msg_ring. Reference: two plain
 *                   threads waking each other with FUTEX_WAIT / FUTEX_WAKE on
 *                   two words. Target ratio <= 0.7. Extra fields: the same
 *                   round trip on bare liburing (two rings, one msg_ring per
 *                   hop, sent and slept on in one io_uring_enter) - the floor
 *                   of the mechanism weft parks on.
 *
 * Extra fields give the runtime's wake-up counters per round trip (summed
 * over both shards, timed batches only), which tell how a hop travelled.
 * The thread that called weft_run() blocks in a futex meanwhile, so on a
 * 2-core machine the two shards (or the two reference threads) have a core
 * each; both sides are pinned to two distinct CPUs (see "placement").
 */
#include "bench_util.h"

#include "weft.h"

#include <liburing.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pingpong_ref.h"

/* Reference 3 (extra field of pingpong_parked): the mechanism weft parks on,
 * bare. Each side sleeps in io_uring_enter on its own ring and is woken by an
 * IORING_OP_MSG_RING from the other, sending and sleeping in one system call
 * per hop - the least a msg_ring-based runtime can do. Same setup flags as a
 * weft shard asks for first. */
static struct io_uring msg_rings[2];
static pthread_barrier_t msg_barrier;
static atomic_int msg_setup_err;

static int msg_ring_init(struct io_uring *r)
{
  struct io_uring_params p;
  memset(&p, 0, sizeof(p));
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN |
            IORING_SETUP_SUBMIT_ALL;
  int e = io_uring_queue_init_params(8, r, &p);
  if (e == -EINVAL) {
    memset(&p, 0, sizeof(p));
    e = io_uring_queue_init_params(8, r, &p);
  }
  return e;
}

/* Queues a wake-up for the other side's ring; its own CQE only on failure. */
static void msg_prep(struct io_uring *r, int to)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(r);
  io_uring_prep_msg_ring(sqe, msg_rings[to].ring_fd, 0, 1, 0);
  sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

static void msg_consume(struct io_uring *r)
{
  struct io_uring_cqe *cqe;
  if (io_uring_wait_cqe(r, &cqe) == 0)
    io_uring_cqe_seen(r, cqe);
}

/* Rings are created on their threads (SINGLE_ISSUER); both exist before any
 * message is sent. Returns false if either side failed. */
static bool msg_side_setup(int side)
{
  int e = msg_ring_init(&msg_rings[side]);
  if (e < 0)
    msg_setup_err = e;
  pthread_barrier_wait(&msg_barrier);
  bool ok = msg_setup_err == 0;
  pthread_barrier_wait(&msg_barrier); /* both have read the verdict */
  if (!ok && e == 0)
    io_uring_queue_exit(&msg_rings[side]);
  return ok;
}

static void *msg_echo(void *arg)
{
  long n = total_trips(arg);
  if (!msg_side_setup(1))
    return NULL;
  struct io_uring *r = &msg_rings[1];
  msg_consume(r);
  for (long k = 0; k < n; k++) {
    msg_prep(r, 0);
    if (k == n - 1) {
      io_uring_submit(r);
      break;
    }
    io_uring_submit_and_wait(r, 1);
    msg_consume(r);
  }
  pthread_barrier_wait(&msg_barrier); /* the pinger has its last reply */
  io_uring_queue_exit(r);
  return NULL;
}

static void msg_hop(struct io_uring *r)
{
  msg_prep(r, 1);
  io_uring_submit_and_wait(r, 1);
  msg_consume(r);
}

static void *msg_pinger(void *arg)
{
  struct ref_run *rr = arg;
  if (!msg_side_setup(0))
    return NULL;
  struct io_uring *r = &msg_rings[0];
  for (int i = 0; i < rr->p->warm; i++)
    msg_hop(r);
  for (int b = 0; b < rr->p->batches; b++) {
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < rr->p->iters; i++)
      msg_hop(r);
    rr->samples[b] = (double)(bench_now_ns() - t0) / rr->p->iters;
  }
  pthread_barrier_wait(&msg_barrier);
  io_uring_queue_exit(r);
  return NULL;
}

/* ---- weft: two coroutines on two shards ------------------------------------------- */

struct weft_pp {
  const struct params *p;
  weft_event *ping, *pong;
  double samples[MAX_BATCHES];
  weft_stats s0, s1; /* around the timed batches */
  int err;
};

/* Pinned to shard 1: answers every ping. */
static void *ponger(void *arg)
{
  struct weft_pp *w = arg;
  long n = total_trips(w->p);
  for (long k = 0; k < n; k++) {
    int r = weft_event_wait(w->pong);
    if (r < 0)
      return (void *)(intptr_t)r;
    weft_event_set(w->ping);
  }
  return NULL;
}

static int hop(struct weft_pp *w)
{
  weft_event_set(w->pong);
  return weft_event_wait(w->ping);
}

/* The main coroutine (pinned to shard 0) is the pinger. */
static void *pinger(void *arg)
{
  struct weft_pp *w = arg;
  const struct params *p = w->p;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *t;
  int r = weft_spawn(&t, &o, ponger, w);
  if (r < 0) {
    w->err = r;
    return NULL;
  }
  for (int i = 0; i < p->warm && r == 0; i++)
    r = hop(w);
  weft_stats_get(NULL, -1, &w->s0);
  for (int b = 0; b < p->batches && r == 0; b++) {
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < p->iters && r == 0; i++)
      r = hop(w);
    w->samples[b] = (double)(bench_now_ns() - t0) / p->iters;
  }
  weft_stats_get(NULL, -1, &w->s1);
  void *ret;
  weft_join(t, &ret);
  w->err = r < 0 ? r : (int)(intptr_t)ret;
  return NULL;
}

/* spin_ns < 0 keeps the default. */
static int run_weft(const struct params *p, int64_t spin_ns, struct result *out,
                    struct weft_pp *w)
{
  w->p = p;
  int r = weft_event_create(&w->ping, WEFT_EVENT_AUTO_RESET);
  if (r < 0)
    return r;
  r = weft_event_create(&w->pong, WEFT_EVENT_AUTO_RESET);
  if (r < 0) {
    weft_event_destroy(w->ping);
    return r;
  }
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  cfg.cpus = pin_cpus;
  cfg.ncpus = pin_n;
  if (spin_ns >= 0)
    cfg.spin_ns = spin_ns; /* else the default: shards poll between hops */
  r = weft_run(&cfg, pinger, w, NULL);
  if (r == 0)
    r = w->err;
  weft_event_destroy(w->ping);
  weft_event_destroy(w->pong);
  if (r == 0)
    *out = summarise(w->samples, p->batches);
  return r;
}

/* `raw` (may be NULL): the bare msg_ring round trip, for pingpong_parked. */
static void print_line(const char *bench, const char *ref_name, const struct result *v,
                       const struct result *ref, const struct weft_pp *w, double target,
                       const struct result *raw)
{
  double n = (double)w->p->iters * w->p->batches;
  double ratio = v->best / ref->best;
  char msg[160] = "";
  int len = 0;
  if (raw)
    len = snprintf(msg, sizeof(msg), ",\"msg_ring_rtt_ns\":%.1f,\"ratio_to_msg_ring\":%.3f",
                   raw->best, v->best / raw->best);
  if (ref->slept_share >= 0)
    snprintf(msg + len, sizeof(msg) - (size_t)len, ",\"ref_slept_share\":%.3f", ref->slept_share);
  bench_print(bench, "rtt_ns", v->best, ref_name, ref->best, ratio,
              ",\"median\":%.1f,\"ref_median\":%.1f,\"target_ratio\":%.2f,\"target_met\":%s,"
              "\"wakes_sent_per_rtt\":%.3f,\"wakes_coalesced_per_rtt\":%.3f,"
              "\"parks_per_rtt\":%.3f,\"enters_per_rtt\":%.3f,\"pinned\":%s%s",
              v->median, ref->median, target, ratio <= target ? "true" : "false",
              (double)(w->s1.wakes_sent - w->s0.wakes_sent) / n,
              (double)(w->s1.wakes_coalesced - w->s0.wakes_coalesced) / n,
              (double)(w->s1.parks - w->s0.parks) / n, (double)(w->s1.enters - w->s0.enters) / n,
              pin_n == 2 ? "true" : "false", msg);
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("pingpong", quick ? 30 : 120);
  /* A busy round trip takes ~0.1-1 us, a parked one ~10-20 us, and several
   * times that on a loaded machine: sized so that a full run stays well
   * under a minute even then. */
  struct params busy = {.warm = 2000, .iters = quick ? 20000 : 50000, .batches = quick ? 5 : 10};
  struct params parked = {.warm = 200, .iters = quick ? 1000 : 4000, .batches = quick ? 5 : 10};

  struct result ref, val;
  static struct weft_pp w;
  choose_cpus();
  if (run_ref(spin_pinger, spin_echo, &busy, &ref) < 0) {
    fprintf(stderr, "pingpong: pthread_create failed\n");
    return 1;
  }
  int r = run_weft(&busy, -1, &val, &w);
  if (bench_uring_missing(r)) {
    fprintf(stderr, "pingpong: io_uring unavailable (%d), skipped\n", r);
    return BENCH_SKIP;
  }
  if (r < 0) {
    fprintf(stderr, "pingpong: %s\n", weft_strerror(r));
    return 1;
  }
  print_line("pingpong", "spin_rtt_ns", &val, &ref, &w, 8.0, NULL);

  atomic_store(&fx_ping, 0);
  atomic_store(&fx_pong, 0);
  if (run_ref(futex_pinger, futex_echo, &parked, &ref) < 0) {
    fprintf(stderr, "pingpong: pthread_create failed\n");
    return 1;
  }
  memset(&w, 0, sizeof(w));
  r = run_weft(&parked, 0, &val, &w);
  if (r < 0) {
    fprintf(stderr, "pingpong_parked: %s\n", weft_strerror(r));
    return 1;
  }
  struct result raw;
  pthread_barrier_init(&msg_barrier, NULL, 2);
  r = run_ref(msg_pinger, msg_echo, &parked, &raw);
  pthread_barrier_destroy(&msg_barrier);
  if (r < 0 || msg_setup_err < 0) {
    fprintf(stderr, "pingpong_parked: bare msg_ring reference failed (%d)\n", msg_setup_err);
    return 1;
  }
  print_line("pingpong_parked", "futex_rtt_ns", &val, &ref, &w, 0.7, &raw);
  return 0;
}
