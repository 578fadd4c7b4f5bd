/* SPDX-License-Identifier: MIT */
/*
 * million: 1,000,000 coroutines asleep at once on a 2-shard runtime with the
 * default 256 KiB stacks, on a stock kernel (vm.max_map_count 65530), then
 * a shutdown that cancels them all (DESIGN.md section 5: runs on a stock
 * kernel, <= 5 KiB of RSS each).
 *
 * A coroutine on shard 0 spawns them round-robin; each sleeps for an hour.
 * Once all have started, the resident set is read from /proc/self/status:
 * value = (RSS then - RSS before the spawns) / coroutines. The reference is
 * the page size - the least a coroutine can cost, the one page its stack
 * must touch - so `ratio` is in pages per coroutine. Extra fields: the
 * spawn rate, the mappings the process has at its peak (/proc/self/maps,
 * against vm.max_map_count), and the teardown: main returns, weft_run()
 * cancels every sleeper (each must see -ECANCELED), frees them and comes
 * back; with the stacks the teardown gave back to the system and the
 * system calls that did it (neighbouring slab slots share an madvise).
 * --quick runs 100,000.
 */
#include "bench_util.h"

#include "stack.h"

#include "weft.h"

#include <stdatomic.h>

struct million {
  long n;
  _Atomic long started, cancelled, other;
  long rss_before, rss_peak, maps_peak;
  int64_t spawn_ns, main_end;
  weft__stack_counters at_end; /* when main returned */
  int err;
};

/* A field of /proc/self/status in bytes ("VmRSS:   1234 kB"), or -1. */
static long status_kb(const char *field)
{
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return -1;
  char line[256];
  long v = -1;
  size_t len = strlen(field);
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, field, len) == 0) {
      v = strtol(line + len, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

static long count_maps(void)
{
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f)
    return -1;
  long n = 0;
  int c;
  while ((c = fgetc(f)) != EOF)
    n += c == '\n';
  fclose(f);
  return n;
}

static long max_map_count(void)
{
  FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
  long v = -1;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1)
      v = -1;
    fclose(f);
  }
  return v;
}

static void *sleeper(void *arg)
{
  struct million *m = arg;
  atomic_fetch_add_explicit(&m->started, 1, memory_order_relaxed);
  int r = weft_sleep(3600 * WEFT_SEC);
  atomic_fetch_add_explicit(r == -ECANCELED ? &m->cancelled : &m->other, 1,
                            memory_order_relaxed);
  return NULL;
}

static void *million_main(void *arg)
{
  struct million *m = arg;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  m->rss_before = status_kb("VmRSS:");
  int64_t t0 = bench_now_ns();
  for (long i = 0; i < m->n; i++) {
    int e = weft_spawn(NULL, &o, sleeper, m);
    if (e < 0) {
      m->err = e;
      return NULL;
    }
    if (i % 4096 == 4095)
      weft_yield(); /* let this shard start its share as they come */
  }
  while (atomic_load_explicit(&m->started, memory_order_relaxed) < m->n)
    weft_sleep(WEFT_MSEC);
  m->spawn_ns = bench_now_ns() - t0;
  weft_sleep(10 * WEFT_MSEC); /* the last ones reach their sleep */
  m->rss_peak = status_kb("VmRSS:");
  m->maps_peak = count_maps();
  weft__stack_get_counters(&m->at_end);
  m->main_end = bench_now_ns();
  return NULL;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("million", quick ? 60 : 300);
  struct million m = {.n = quick ? 100000 : 1000000};
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  int r = weft_run(&cfg, million_main, &m, NULL);
  int64_t end = bench_now_ns();
  weft__stack_counters after;
  weft__stack_get_counters(&after);
  if (bench_uring_missing(r)) {
    fprintf(stderr, "million: io_uring unavailable (%d), skipped\n", r);
    return BENCH_SKIP;
  }
  if (r < 0 || m.err < 0) {
    fprintf(stderr, "million: %s\n", weft_strerror(r < 0 ? r : m.err));
    return 1;
  }
  long cancelled = atomic_load(&m.cancelled), other = atomic_load(&m.other);
  if (cancelled != m.n || other != 0) {
    fprintf(stderr, "million: %ld of %ld sleepers cancelled, %ld ended otherwise\n", cancelled,
            m.n, other);
    return 1;
  }
  double per = (double)(m.rss_peak - m.rss_before) * 1024.0 / (double)m.n;
  double page = (double)sysconf(_SC_PAGESIZE);
  bench_print("million", "rss_bytes_per_coro", per, "page_bytes", page, per / page,
              ",\"coroutines\":%ld,\"stack_kib\":%zu,\"spawn_ns_per_coro\":%.1f,"
              "\"maps_peak\":%ld,\"max_map_count\":%ld,\"teardown_ms\":%.1f,"
              "\"teardown_releases\":%llu,\"teardown_release_calls\":%llu,"
              "\"target_bytes\":5120,\"target_met\":%s",
              m.n, cfg.stack_size >> 10, (double)m.spawn_ns / (double)m.n, m.maps_peak,
              max_map_count(), (double)(end - m.main_end) / 1e6,
              (unsigned long long)(after.releases - m.at_end.releases),
              (unsigned long long)(after.release_calls - m.at_end.release_calls),
              per <= 5120.0 ? "true" : "false");
  return 0;
}
