/* SPDX-License-Identifier: MIT */
/* Counters and the live-task dump. */
#include "core.h"

#include <errno.h>
#include <string.h>

static void add_shard(weft_stats *out, const weft__shard *sh)
{
  const weft__shard_stats *s = &sh->stats;
  out->spawned += weft__counter_get(&s->spawned);
  out->finished += weft__counter_get(&s->finished);
  out->switches += weft__counter_get(&s->switches);
  out->handoffs += weft__counter_get(&s->handoffs);
  out->inbox_received += weft__counter_get(&s->inbox_received);
  out->wakes_sent += weft__counter_get(&s->wakes_sent);
  out->wakes_coalesced += weft__counter_get(&s->wakes_coalesced);
  out->parks += weft__counter_get(&s->parks);
  out->enters += weft__counter_get(&s->enters);
  out->cqes += weft__counter_get(&s->cqes);
  out->timers_armed += weft__counter_get(&s->timers_armed);
  out->timers_fired += weft__counter_get(&s->timers_fired);
  out->timers_cancelled += weft__counter_get(&s->timers_cancelled);
  out->ops_submitted += weft__counter_get(&s->ops_submitted);
  out->ops_completed += weft__counter_get(&s->ops_completed);
  out->ops_cancelled += weft__counter_get(&s->ops_cancelled);
  out->ops_timed_out += weft__counter_get(&s->ops_timed_out);
  out->sq_full_flushes += weft__counter_get(&s->sq_full_flushes);
  out->cq_overflows += weft__counter_get(&s->cq_overflows);
  out->steal_attempts += weft__counter_get(&s->steal_attempts);
  out->steal_scans += weft__counter_get(&s->steal_scans);
  out->steal_success += weft__counter_get(&s->steal_success);
  out->steal_skipped_backoff += weft__counter_get(&s->steal_skipped_backoff);
  out->steal_skipped_locality += weft__counter_get(&s->steal_skipped_locality);
  out->steal_stuck += weft__counter_get(&s->steal_stuck);
  out->steal_backpressure += weft__counter_get(&s->steal_backpressure);
  out->steal_wakes += weft__counter_get(&s->steal_wakes);
  out->steal_local_hits += weft__counter_get(&s->steal_local_hits);
  out->steal_takes += weft__counter_get(&s->steal_takes);
  out->msgs_sent += weft__counter_get(&s->msgs_sent);
  out->msgs_received += weft__counter_get(&s->msgs_received);
  out->msg_doorbells += weft__counter_get(&s->msg_doorbells);
  out->msg_doorbells_coalesced += weft__counter_get(&s->msg_doorbells_coalesced);
  out->msg_backpressure += weft__counter_get(&s->msg_backpressure);
  out->msg_failed += weft__counter_get(&s->msg_failed);
  out->msg_queue_full += weft__counter_get(&s->msg_queue_full);
}

static double ratio(uint64_t a, uint64_t b)
{
  return b ? (double)a / (double)b : 0.0;
}

static void derive(weft_stats *out)
{
  out->local_hit_ratio = ratio(out->steal_local_hits, out->steal_local_hits + out->steal_success);
  /* Read one by one while the shard steals on, steal_takes may include a
   * take whose probe came after steal_attempts was read: never above 1. */
  uint64_t takes = out->steal_takes < out->steal_attempts ? out->steal_takes : out->steal_attempts;
  out->steal_success_rate = ratio(takes, out->steal_attempts);
  out->stolen_per_scan = ratio(out->steal_success, out->steal_scans);
}

int weft_stats_get(weft_runtime *rt, int shard, weft_stats *out)
{
  if (!rt)
    rt = weft_runtime_current();
  if (!rt)
    return -EPERM;
  if (!out || shard < -1 || shard >= rt->nshards)
    return -EINVAL;
  memset(out, 0, sizeof(*out));
  out->shard = shard;
  out->shards = rt->nshards;
  int64_t live = weft__runtime_live(rt);
  weft__pool_stats(&rt->pool, &out->pool_jobs, &out->pool_queued, &out->pool_threads);
  out->live = live > 0 ? (uint64_t)live : 0;
  if (shard >= 0) {
    add_shard(out, &rt->shards[shard]);
    out->ring_flags = rt->shards[shard].ring_flags;
    out->ring_entries = rt->shards[shard].ring_entries;
    derive(out);
    return 0;
  }
  out->ring_flags = WEFT_RING_ALL;
  for (int i = 0; i < rt->nshards; i++) {
    add_shard(out, &rt->shards[i]);
    out->ring_flags &= rt->shards[i].ring_flags;
    out->ring_entries += rt->shards[i].ring_entries;
  }
  out->spawned += weft__counter_get(&rt->external_spawned);
  derive(out);
  return 0;
}

static const char *state_name(int s)
{
  switch (s) {
  case WEFT__T_QUEUED: return "runnable";
  case WEFT__T_RUNNING: return "running";
  case WEFT__T_WAITING: return "waiting";
  case WEFT__T_FINISHED: return "finished";
  default: return "?";
  }
}

int weft_dump(weft_runtime *rt, FILE *out)
{
  if (!rt)
    rt = weft_runtime_current();
  if (!rt)
    return -EPERM;
  if (!out)
    return -EINVAL;
  /* stdio sets errno when a write fails; weft calls leave it alone. */
  int saved = errno;
  int n = 0;
  for (int i = 0; i < rt->nshards; i++) {
    weft__shard *sh = &rt->shards[i];
    /* Printing under the list lock keeps the tasks alive while we read
     * them; the lock is only contended by spawns and frees. */
    weft__spin_lock(&sh->list_lock);
    for (weft_task *t = sh->list_head; t; t = t->list_next) {
      int st = atomic_load_explicit(&t->state, memory_order_relaxed);
      if (st == WEFT__T_FINISHED)
        continue;
      /* Written by weft_task_pin on the task's own thread, hence atomic. */
      int place = __atomic_load_n(&t->placement, __ATOMIC_RELAXED);
      bool mobile = place == WEFT_PLACE_STEALABLE || place == WEFT_PLACE_STEALABLE_PREFERRED;
      fprintf(out, "task %llu %-20s shard %d %s %s%s\n", (unsigned long long)t->coro.id,
              t->coro.name[0] ? t->coro.name : "-", t->shard->id,
              mobile ? "stealable" : "fixed", state_name(st),
              atomic_load_explicit(&t->cancelled, memory_order_relaxed) ? " cancelled" : "");
      n++;
    }
    weft__spin_unlock(&sh->list_lock);
  }
  errno = saved;
  return n;
}
