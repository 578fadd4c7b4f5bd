/* SPDX-License-Identifier: MIT */
/* Runtime configuration, start and stop. */
#include "core.h"
#include "fence.h"

#include "../coro/fault.h"
#include "weft_build_config.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void weft_config_init(weft_config *cfg)
{
  if (!cfg)
    return;
  memset(cfg, 0, sizeof(*cfg));
  cfg->shards = 0;
  cfg->thread_name = "weft";
  cfg->stack_size = WEFT_DEFAULT_STACK_SIZE;
  cfg->ring_entries = 256;
  cfg->cq_entries = 0;
  cfg->ring_flags = WEFT_RING_ALL;
  cfg->spin_ns = 20 * WEFT_USEC;
  cfg->spin_max_ns = 200 * WEFT_USEC;
  cfg->run_budget = 64;
  cfg->handoff = true;
  cfg->blocking_threads = 64;
  cfg->blocking_idle_ns = 10 * WEFT_SEC;
  cfg->steal = true;
  cfg->steal_started = true;
  cfg->steal_budget = 64;
  cfg->steal_stride = 1;
  cfg->steal_probes = 2;
  cfg->steal_batch = 4;
  cfg->steal_locality_margin = 1;
  cfg->steal_fail_cost = 1;
  cfg->steal_backoff_min = 1;
  cfg->steal_backoff_max = 32;
  cfg->steal_stuck_ns = 10 * WEFT_USEC;
  cfg->steal_queue_capacity = 4096;
  cfg->msg_lane_capacity = 4096;
  cfg->msg_counters = 256;
  cfg->msg_queue_limit = 65536;
}

atomic_int weft__usable_cpus_seen;

/* The CPUs the process may use, for a runtime started by this thread:
 * its own affinity - unless it is a shard, which may be pinned to one CPU
 * by weft itself (cfg.cpus): then those of the shard's runtime. False when
 * they cannot be known. */
static bool process_cpus(cpu_set_t *set)
{
  weft__shard *me = weft__shard_self();
  if (me) {
    *set = me->rt->cpus_allowed;
    return me->rt->cpus_known;
  }
  return sched_getaffinity(0, sizeof(*set), set) == 0 && CPU_COUNT(set) > 0;
}

static int usable_cpus(const cpu_set_t *set, bool known)
{
  int seen = atomic_load_explicit(&weft__usable_cpus_seen, memory_order_relaxed);
  if (seen > 0)
    return seen; /* test hook */
  return known ? CPU_COUNT(set) : 1;
}

static int validate(const weft_config *cfg, const cpu_set_t *allowed, bool known)
{
  if (cfg->shards < 0 || cfg->shards > WEFT_MAX_SHARDS)
    return -EINVAL;
  if (cfg->ring_entries == 0 || cfg->ring_entries > 32768)
    return -EINVAL;
  if (cfg->cq_entries && (cfg->cq_entries < cfg->ring_entries || cfg->cq_entries > 65536))
    return -EINVAL;
  if (cfg->stack_size < 16384 || cfg->stack_size > ((size_t)1 << 30))
    return -EINVAL;
  if (cfg->spin_ns < 0 || cfg->spin_max_ns < 0 || cfg->run_budget == 0)
    return -EINVAL;
  if (cfg->blocking_threads == 0 || cfg->blocking_threads > 4096 || cfg->blocking_idle_ns <= 0)
    return -EINVAL;
  if (cfg->ring_flags & ~WEFT_RING_ALL)
    return -EINVAL;
  if (!cfg->steal_budget || !cfg->steal_stride || !cfg->steal_probes || !cfg->steal_batch ||
      cfg->steal_batch > 64 || !cfg->steal_fail_cost || !cfg->steal_backoff_min ||
      cfg->steal_backoff_max < cfg->steal_backoff_min || cfg->steal_stuck_ns < 0)
    return -EINVAL;
  unsigned cap = cfg->steal_queue_capacity;
  if (cap < 2 || cap > (1u << 24) || (cap & (cap - 1)))
    return -EINVAL;
  unsigned lane = cfg->msg_lane_capacity;
  if (lane < 2 || lane > (1u << 24) || (lane & (lane - 1)))
    return -EINVAL;
  if (cfg->msg_counters == 0 || cfg->msg_counters > 65536 || cfg->msg_queue_limit == 0 ||
      cfg->msg_queue_limit > INT32_MAX)
    return -EINVAL;
  if (cfg->ncpus < 0 || (cfg->ncpus > 0 && !cfg->cpus))
    return -EINVAL;
  for (int i = 0; i < cfg->ncpus; i++)
    if (!known || cfg->cpus[i] < 0 || cfg->cpus[i] >= CPU_SETSIZE ||
        !CPU_ISSET(cfg->cpus[i], allowed))
      return -EINVAL;
  return 0;
}

/* After every shard thread has been joined. */
static void runtime_free(weft_runtime *rt)
{
  weft__pool_term(&rt->pool);
  for (int i = 0; i < rt->nshards; i++)
    weft__ring_teardown(&rt->shards[i]);
  weft__msg_term(rt);
  for (int i = 0; i < rt->nshards; i++)
    weft__deque_term(&rt->shards[i].deque);
  pthread_mutex_destroy(&rt->start_lock);
  pthread_cond_destroy(&rt->start_cond);
  free(rt->shards);
  free(rt);
}

int weft_runtime_start(weft_runtime **out, const weft_config *cfg_in)
{
  if (!out)
    return -EINVAL;
  /* Before any task can wait: waits and cancels rely on it (fence.h). */
  weft__fence_init();
  weft_config cfg;
  if (cfg_in)
    cfg = *cfg_in;
  else
    weft_config_init(&cfg);
  cpu_set_t allowed;
  bool known = process_cpus(&allowed);
  int r = validate(&cfg, &allowed, known);
  if (r < 0)
    return r;
  /* At most WEFT_MAX_SHARDS, on any machine: per-shard tables (the
   * steal rounds' and the message snapshots) have that many entries. */
  if (cfg.shards == 0) {
    int n = usable_cpus(&allowed, known);
    cfg.shards = n < WEFT_MAX_SHARDS ? n : WEFT_MAX_SHARDS;
  }
  if (!cfg.thread_name)
    cfg.thread_name = "weft";

  weft_runtime *rt = weft__calloc_aligned(1, sizeof(*rt), _Alignof(weft_runtime));
  if (!rt)
    return -ENOMEM;
  rt->shards = weft__calloc_aligned((size_t)cfg.shards, sizeof(weft__shard), _Alignof(weft__shard));
  if (!rt->shards) {
    free(rt);
    return -ENOMEM;
  }
  for (int i = 0; i < cfg.shards; i++) {
    weft__shard *sh = &rt->shards[i];
    sh->rt = rt;
    sh->id = i;
    sh->ring_fd = -1; /* no ring yet: runtime_free must not close fd 0 */
    sh->wake_fd = -1;
    sh->list_lock = (weft__spin)WEFT__SPIN_INIT;
  }
  rt->cfg = cfg;
  rt->cfg.cpus = NULL; /* the caller's array need not outlive this call */
  rt->cfg.ncpus = 0;
  int *cpus = NULL;
  snprintf(rt->thread_name, sizeof(rt->thread_name), "%.11s", cfg.thread_name);
  rt->cfg.thread_name = rt->thread_name;
  rt->nshards = cfg.shards;
  rt->cpus_allowed = allowed;
  rt->cpus_known = known;
  pthread_mutex_init(&rt->start_lock, NULL);
  pthread_cond_init(&rt->start_cond, NULL);
  r = weft__pool_init(&rt->pool, cfg.blocking_threads, cfg.blocking_idle_ns,
                      known ? &rt->cpus_allowed : NULL, rt->thread_name);
  if (r < 0) {
    pthread_mutex_destroy(&rt->start_lock);
    pthread_cond_destroy(&rt->start_cond);
    free(rt->shards);
    free(rt);
    return r;
  }
  if (cfg.ncpus > 0) {
    cpus = weft__malloc((size_t)cfg.ncpus * sizeof(int));
    if (!cpus) {
      runtime_free(rt);
      return -ENOMEM;
    }
    memcpy(cpus, cfg.cpus, (size_t)cfg.ncpus * sizeof(int));
    rt->cfg.cpus = cpus;
    rt->cfg.ncpus = cfg.ncpus;
  }

  for (int i = 0; i < rt->nshards; i++) {
    r = weft__deque_init(&rt->shards[i].deque, cfg.steal_queue_capacity);
    if (r < 0) {
      free(cpus);
      runtime_free(rt);
      return r;
    }
  }

  r = weft__msg_init(rt);
  if (r < 0) {
    free(cpus);
    runtime_free(rt);
    return r;
  }

  /* Shards with cpus pin themselves; the others keep these CPUs, not the
   * starter's pinning (a shard of another runtime). */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (known)
    pthread_attr_setaffinity_np(&attr, sizeof(rt->cpus_allowed), &rt->cpus_allowed);
  int created = 0;
  for (int i = 0; i < rt->nshards; i++) {
    weft__shard *sh = &rt->shards[i];
    if (weft__fault_hit(WEFT__FAULT_THREAD)) {
      r = -EAGAIN;
      break;
    }
    /* pthread_create returns its error, but may leave errno set (a failed
     * mmap of the thread's stack): the caller's errno is left as it was. */
    int saved = errno;
    int e = pthread_create(&sh->thread, &attr, weft__shard_main, sh);
    errno = saved;
    if (e) {
      r = -e;
      break;
    }
    created++;
  }
  pthread_attr_destroy(&attr);

  /* Wait for every created shard to report its ring setup. */
  pthread_mutex_lock(&rt->start_lock);
  while (rt->started < created)
    pthread_cond_wait(&rt->start_cond, &rt->start_lock);
  for (int i = 0; i < created && r == 0; i++)
    if (rt->shards[i].setup_result < 0)
      r = rt->shards[i].setup_result;
  rt->start_verdict = r < 0 ? -1 : 1; /* on failure the shards that came up leave */
  pthread_cond_broadcast(&rt->start_cond);
  pthread_mutex_unlock(&rt->start_lock);

  if (r < 0) {
    for (int i = 0; i < created; i++)
      pthread_join(rt->shards[i].thread, NULL);
    free(cpus);
    runtime_free(rt);
    return r;
  }
  *out = rt;
  return 0;
}

/* Cancels every task registered on sh's list, with one barrier for all. */
static void cancel_all(weft__shard *sh)
{
  weft__spin_lock(&sh->list_lock);
  for (weft_task *t = sh->list_head; t; t = t->list_next)
    if (!atomic_load_explicit(&t->done, memory_order_acquire))
      weft__task_cancel_mark(t);
  weft__fence_heavy();
  for (weft_task *t = sh->list_head; t; t = t->list_next)
    if (!atomic_load_explicit(&t->done, memory_order_acquire))
      weft__task_cancel_deliver(t); /* marked above: done never goes back */
  weft__spin_unlock(&sh->list_lock);
}

static uint64_t sum_created(weft_runtime *rt)
{
  uint64_t n = atomic_load_explicit(&rt->external_spawned.v, memory_order_acquire);
  for (int i = 0; i < rt->nshards; i++)
    n += weft__counter_acquire(&rt->shards[i].stats.spawned);
  return n;
}

static uint64_t sum_finished(weft_runtime *rt)
{
  uint64_t n = 0;
  for (int i = 0; i < rt->nshards; i++)
    n += weft__counter_acquire(&rt->shards[i].stats.finished);
  return n;
}

int64_t weft__runtime_live(weft_runtime *rt)
{
  uint64_t f = sum_finished(rt);
  return (int64_t)(sum_created(rt) - f);
}

/* True when every task created so far has finished. Finished counts are
 * read between two reads of the created counts: a task counted as finished
 * was created before (its creation is counted first, with release, and read
 * with acquire), so finished <= created; if the created counts did not move
 * across the reads and equal the finished ones, no task is left. */
static bool quiescent(weft_runtime *rt)
{
  uint64_t c1 = sum_created(rt);
  uint64_t f = sum_finished(rt);
  uint64_t c2 = sum_created(rt);
  return c1 == c2 && f == c1;
}

/* A wake-up from a plain thread that the kernel refuses and the eventfd
 * cannot stand in for is dropped, for the next waker to make up for (the
 * shard is not left marked as being woken). The stop's wake-ups have no
 * next waker: the cancels' (a cancelled task queued on a sleeping shard)
 * and the one that lets a shard leave. So a stop that waits in vain wakes
 * the shards again (weft__shard_notify sends nothing to a shard that is
 * awake or has a wake-up on its way). */
static void notify_all(weft_runtime *rt)
{
  for (int i = 0; i < rt->nshards; i++)
    weft__shard_notify(&rt->shards[i]);
}

/* A stop called from a coroutine (of another runtime) waits for rt's tasks
 * suspended, not asleep on its shard's thread: a cancelled task of rt may
 * be waiting for a task of that shard to return (a weft_join across
 * runtimes, which a cancel turns into an uncancellable wait), and that
 * task must run meanwhile. Polled: the tasks' wake-ups of the stopper are
 * a futex's. Not cancellable: the stop must finish once begun. */
static void stop_pause(void)
{
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = true;
  if (weft__waiter_wait(&w, weft__now() + WEFT_MSEC) == -ENOMEM)
    sched_yield(); /* no timer for it: poll from the thread, as a plain thread would */
}

static void join_shard(weft_runtime *rt, weft__shard *sh)
{
  int saved = errno; /* the caller's, whatever the clock and join do */
  for (;;) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until); /* pthread_timedjoin_np's clock */
    until.tv_nsec += 10 * WEFT_MSEC;
    if (until.tv_nsec >= WEFT_SEC) {
      until.tv_sec++;
      until.tv_nsec -= WEFT_SEC;
    }
    if (pthread_timedjoin_np(sh->thread, NULL, &until) != ETIMEDOUT)
      break;
    notify_all(rt);
  }
  errno = saved;
}

int weft_runtime_stop(weft_runtime *rt)
{
  if (!rt)
    return -EINVAL;
  weft__shard *me = weft__shard_self();
  if (me && me->rt == rt)
    return -EINVAL;
  /* A job of rt's pool: its task waits for it to return, and the pool is
   * freed only once all its threads have left - neither ever happens. */
  if (weft__pool_self() == &rt->pool)
    return -EINVAL;
  atomic_store_explicit(&rt->stopping, true, memory_order_seq_cst);
  /* Every task is about to end at once: the stacks given back to the
   * system meanwhile go in address order at the end, a run of neighbouring
   * slots per madvise, rather than as each shard happens to free them. */
  weft__stack_defer_releases();
  /* cancel_all's heavy fence also puts the `stopping` store before the
   * finish counts read below: a task that ends meanwhile either is seen
   * to have finished or sees `stopping` and wakes us (complete(), task.c,
   * has the other half). */
  for (int i = 0; i < rt->nshards; i++)
    cancel_all(&rt->shards[i]);
  /* Wait for the cancelled tasks to return: asleep until the finish count
   * reaches what it will be when the last one has. No task is created any
   * more, so that is the count so far plus the tasks still live - read in
   * that order, so a task finishing in between is left out of both and the
   * target is early, never late (an early wake-up sets it again). The
   * timeout only bounds how long a missed wake-up could delay us; it is not
   * a grace period. */
  unsigned pauses = 0;
  for (;;) {
    uint32_t seq = atomic_load_explicit(&rt->finish_seq, memory_order_seq_cst);
    int64_t live = weft__runtime_live(rt);
    atomic_store_explicit(&rt->stop_target, seq + (uint32_t)(live > 0 ? live : 0),
                          memory_order_seq_cst);
    atomic_store_explicit(&rt->stop_woken, 0, memory_order_seq_cst);
    /* A task whose count came before that store may have seen stop_woken
     * still at 1 from an earlier wake-up, and not woken us: this load reads
     * its count or a later one, so quiescent() sees that it finished. */
    (void)atomic_load_explicit(&rt->finish_seq, memory_order_seq_cst);
    if (quiescent(rt))
      break;
    if (weft__task_self()) {
      stop_pause();
      if (++pauses % 10 == 0)
        notify_all(rt); /* every 10 ms, as the futex wait's timeout below */
    } else if (weft__futex_wait(&rt->stop_woken, 0, weft__now() + 10 * WEFT_MSEC) == -ETIMEDOUT) {
      notify_all(rt);
    }
  }
  atomic_store_explicit(&rt->exiting, true, memory_order_seq_cst);
  notify_all(rt);
  for (int i = 0; i < rt->nshards; i++)
    join_shard(rt, &rt->shards[i]);
  /* A plain thread may still be in the wake-up (or cancel) that let the
   * last task end: it is done with the shards within microseconds, unless
   * the system holds it up. */
  while (atomic_load_explicit(&rt->outside_calls, memory_order_acquire) > 0)
    sched_yield();
  for (int i = 0; i < rt->nshards; i++)
    weft__listener_free_swept(&rt->shards[i]);
  /* Task objects whose handles were never joined or detached (and openers
   * of listeners nobody closed). */
  for (int i = 0; i < rt->nshards; i++) {
    weft__shard *sh = &rt->shards[i];
    while (sh->list_head) {
      weft_task *t = sh->list_head;
      sh->list_head = t->list_next;
      weft__coro_destroy(&t->coro);
    }
  }
  weft__stack_release_deferred();
  /* The shards' caches went with their threads, but what they overflowed
   * into the depot, and what the un-joined tasks above left in this
   * thread's cache, would keep their committed pages for a runtime that may
   * never come. Another runtime still running only loses free stacks it
   * can map again. */
  weft__stack_cache_drain();
  free((void *)rt->cfg.cpus);
  runtime_free(rt);
  return 0;
}

weft_runtime *weft_runtime_current(void)
{
  weft__shard *sh = weft__shard_self();
  return sh ? sh->rt : NULL;
}

int weft_runtime_shards(const weft_runtime *rt)
{
  if (!rt)
    rt = weft_runtime_current();
  return rt ? rt->nshards : -EPERM;
}

int weft_run(const weft_config *cfg, void *(*main_fn)(void *), void *arg, void **ret)
{
  if (!main_fn)
    return -EINVAL;
  weft_runtime *rt;
  int r = weft_runtime_start(&rt, cfg);
  if (r < 0)
    return r;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 0;
  o.name = "main";
  weft_task *t;
  r = weft_runtime_submit(rt, &o, main_fn, arg, &t);
  if (r == 0) {
    void *v = NULL;
    /* From a plain thread: blocks on a futex. From a coroutine (of another
     * runtime), its deadline scope may end the join with main still
     * running and the handle still ours: then main is cancelled, as for a
     * cancelled caller, and waited for all the same - the stop would
     * cancel it anyway, and what it returns is main's result. */
    int j = weft_join(t, &v);
    if (j == -ETIMEDOUT || j == -ENOMEM) {
      weft_cancel(t);
      v = weft__task_join_uncancellable(t);
    }
    if (ret)
      *ret = v;
  }
  weft_runtime_stop(rt);
  return r;
}
