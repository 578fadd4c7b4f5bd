/* SPDX-License-Identifier: MIT */
/*
 * The op primitive's round trip: one IORING_OP_NOP through weft_nop() (SQE,
 * suspend, the shard's flush + reap, resume) in a coroutine, against a bare
 * liburing loop on a plain ring (get_sqe, prep_nop, submit_and_wait, take
 * the CQE) - the floor. Target (DESIGN.md) ratio <= 2.
 *
 * Both run in one coroutine, in alternating batches (the bare ring is the
 * coroutine's own, so nothing else competes), and each keeps its best
 * batch. Lines: 1 shard (spin default), then the same with 2 shards (the
 * second one idle). Extra fields: the medians, and the bare loop on a ring
 * with the flags weft's shard got (DEFER_TASKRUN etc.), for comparison.
 *
 *   bench_nop [--quick]
 */
#include "bench_util.h"

#include "weft.h"

#include <liburing.h>

struct nop_run {
  long iters;
  int batches;
  double *weft, *bare, *bare_flags;
  unsigned ring_flags; /* WEFT_RING_* the shard got */
  int err;
};

static double weft_batch(long n)
{
  int64_t t0 = bench_now_ns();
  for (long i = 0; i < n; i++)
    if (__builtin_expect(weft_nop() != 0, 0))
      return -1;
  return (double)(bench_now_ns() - t0) / (double)n;
}

static double bare_batch(struct io_uring *ring, long n)
{
  int64_t t0 = bench_now_ns();
  for (long i = 0; i < n; i++) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    io_uring_prep_nop(sqe);
    if (io_uring_submit_and_wait(ring, 1) < 1)
      return -1;
    struct io_uring_cqe *cqe;
    if (io_uring_peek_cqe(ring, &cqe) != 0 || cqe->res != 0)
      return -1;
    io_uring_cqe_seen(ring, cqe);
  }
  return (double)(bench_now_ns() - t0) / (double)n;
}

/* The kernel flags matching the shard's WEFT_RING_* set. */
static unsigned kernel_flags(unsigned w)
{
  unsigned k = 0;
  if (w & WEFT_RING_SINGLE_ISSUER)
    k |= IORING_SETUP_SINGLE_ISSUER;
  if (w & WEFT_RING_DEFER_TASKRUN)
    k |= IORING_SETUP_DEFER_TASKRUN;
  if (w & WEFT_RING_COOP_TASKRUN)
    k |= IORING_SETUP_COOP_TASKRUN;
  if (w & WEFT_RING_SUBMIT_ALL)
    k |= IORING_SETUP_SUBMIT_ALL;
  if (w & WEFT_RING_TASKRUN_FLAG)
    k |= IORING_SETUP_TASKRUN_FLAG;
  return k;
}

static void *nop_main(void *arg)
{
  struct nop_run *nr = arg;
  weft_stats st;
  weft_stats_get(NULL, 0, &st);
  nr->ring_flags = st.ring_flags;
  struct io_uring plain, flagged;
  int r = io_uring_queue_init(8, &plain, 0);
  if (r < 0) {
    nr->err = r;
    return NULL;
  }
  /* Created on this shard's thread, as SINGLE_ISSUER / DEFER_TASKRUN need. */
  r = io_uring_queue_init(8, &flagged, kernel_flags(st.ring_flags));
  if (r < 0) {
    io_uring_queue_exit(&plain);
    nr->err = r;
    return NULL;
  }
  /* Warm-up. */
  weft_batch(nr->iters / 10);
  bare_batch(&plain, nr->iters / 10);
  bare_batch(&flagged, nr->iters / 10);
  for (int b = 0; b < nr->batches; b++) {
    nr->weft[b] = weft_batch(nr->iters);
    nr->bare[b] = bare_batch(&plain, nr->iters);
    nr->bare_flags[b] = bare_batch(&flagged, nr->iters);
    if (nr->weft[b] < 0 || nr->bare[b] < 0 || nr->bare_flags[b] < 0) {
      nr->err = -EIO;
      break;
    }
  }
  io_uring_queue_exit(&plain);
  io_uring_queue_exit(&flagged);
  return NULL;
}

static int run(int shards, bool quick)
{
  struct nop_run nr = {.iters = quick ? 50000 : 300000, .batches = quick ? 5 : 15};
  nr.weft = calloc((size_t)nr.batches, sizeof(double));
  nr.bare = calloc((size_t)nr.batches, sizeof(double));
  nr.bare_flags = calloc((size_t)nr.batches, sizeof(double));
  weft_config c;
  weft_config_init(&c);
  c.shards = shards;
  int r = weft_run(&c, nop_main, &nr, NULL);
  if (bench_uring_missing(r)) {
    printf("bench_nop: io_uring unavailable (%d), skipped\n", r);
    return BENCH_SKIP;
  }
  if (r != 0 || nr.err != 0) {
    fprintf(stderr, "bench_nop: weft_run %d, error %d\n", r, nr.err);
    return 1;
  }
  size_t n = (size_t)nr.batches;
  double w = bench_min(nr.weft, n), b = bench_min(nr.bare, n), bf = bench_min(nr.bare_flags, n);
  double wm = bench_median(nr.weft, n), bm = bench_median(nr.bare, n);
  bench_print("nop", shards == 1 ? "rtt_ns" : "rtt_ns_2shards", w, "bare_liburing_nop_ns", b,
              w / b,
              ",\"shards\":%d,\"median_ns\":%.1f,\"ref_median_ns\":%.1f,"
              "\"bare_weft_flags_ns\":%.1f,\"ring_flags\":%u,\"iters\":%ld,\"batches\":%d",
              shards, wm, bm, bf, nr.ring_flags, nr.iters, nr.batches);
  free(nr.weft);
  free(nr.bare);
  free(nr.bare_flags);
  return 0;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("bench_nop", quick ? 60 : 300);
  int r = run(1, quick);
  if (r != 0)
    return r;
  return run(2, quick);
}
