/* SPDX-License-Identifier: MIT */
/*
 * Work stealing: the stealable run queue of each shard, the policy an idle
 * shard follows to take work from busy ones, and waking a sleeping shard when
 * work piles up.
 *
 * What may move: a task placed STEALABLE or STEALABLE_PREFERRED, whenever it
 * is runnable - at its first run and after every wake-up (it has no SQE in
 * flight then: a task waiting for a completion is not runnable). With
 * cfg.steal_started off, only tasks that never ran are stealable.
 *
 * The policy is the seed's (spargio), tick for tick: a round probes
 * `steal_probes` victims (cursor advancing by `steal_stride`), picks the one
 * with the longest queue, and skips it unless that queue is longer than the
 * migration cost (1 + min(failures, 4) * fail_cost) plus the locality margin;
 * it then takes up to `steal_batch` tasks. A round that takes nothing starts a
 * cooldown of backoff_min << (failures - 1) ticks, capped at backoff_max
 * (the seed also stops the shift at 8; weft lets it reach backoff_max).
 *
 * Two additions, both for a long task that holds up short ones: a queue the
 * gate refuses is taken from anyway once its head has not moved for
 * steal_stuck_ns (its owner is stuck in one task), and of a stolen batch
 * only the first task is kept for the thief's next run - the rest go on the
 * thief's stealable queue, so a long task among them strands nothing.
 */
#include "core.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdlib.h>

int weft__deque_init(weft__deque *d, uint32_t capacity)
{
  atomic_init(&d->head, 0);
  atomic_init(&d->tail, 0);
  d->mask = capacity - 1;
  d->slots = weft__calloc(capacity, sizeof(*d->slots));
  d->seqs = d->slots ? weft__calloc(capacity, sizeof(*d->seqs)) : NULL;
  if (!d->seqs) {
    free(d->slots);
    d->slots = NULL;
    return -ENOMEM;
  }
  return 0;
}

void weft__deque_term(weft__deque *d)
{
  free(d->slots);
  free(d->seqs);
  d->slots = NULL;
  d->seqs = NULL;
}

/* Wakes one sleeping shard other than sh (one not already being woken),
 * when sh has queued stealable work that it would not get to soon. */
void (*weft__test_wake_thief_pause)(void);

void weft__steal_wake_thief(weft__shard *sh)
{
  weft_runtime *rt = sh->rt;
  /* Our push, then their `sleeping`: the mirror of park()'s fence. */
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&rt->sleeping, memory_order_relaxed))
    return;
  for (int i = 1; i < rt->nshards; i++) {
    weft__shard *o = &rt->shards[(sh->id + i) % rt->nshards];
    if (atomic_load_explicit(&o->parked, memory_order_relaxed) &&
        !atomic_load_explicit(&o->wake_pending, memory_order_relaxed)) {
      if (weft__test_wake_thief_pause)
        weft__test_wake_thief_pause();
      /* Counted if sent: another waker may have woken o since we looked. */
      if (weft__shard_notify(o))
        weft__count(&sh->stats.steal_wakes, 1);
      return;
    }
  }
}

bool weft__steal_enqueue(weft__shard *sh, weft_task *t)
{
  if (!weft__deque_push(&sh->deque, t, t->ready_seq)) {
    weft__count(&sh->stats.steal_backpressure, 1);
    return false;
  }
  /* A queue becomes worth a thief when it is long enough to pass the
   * locality gate of a thief with no failures behind it. The epoch tells
   * spinning thieves in a cooldown to look again; it is bumped only when a
   * queue reaches that length, to keep its cache line quiet. */
  if (sh->rt->nshards > 1 && weft__deque_len(&sh->deque) == weft__steal_threshold(sh->rt)) {
    atomic_fetch_add_explicit(&sh->rt->steal_epoch, 1, memory_order_release);
    weft__steal_wake_thief(sh);
  }
  return true;
}

weft_task *weft__steal_pop_local(weft__shard *sh)
{
  weft_task *t;
  if (weft__deque_take(&sh->deque, &t, 1) == 0)
    return NULL;
  /* A hit is a task run here (stats.h). One cancelled before it ever ran
   * is finished without running (run_one, weft__task_suspend): no hit. A
   * cancel landing between this look and that check still counts one. */
  if (t->coro.state != WEFT__CORO_CREATED ||
      !atomic_load_explicit(&t->cancelled, memory_order_relaxed))
    weft__count(&sh->stats.steal_local_hits, 1);
  return t;
}

bool weft__steal_work_elsewhere(weft__shard *sh)
{
  weft_runtime *rt = sh->rt;
  if (!rt->cfg.steal)
    return false;
  for (int i = 0; i < rt->nshards; i++)
    if (i != sh->id && weft__deque_len(&rt->shards[i].deque) >= weft__steal_threshold(rt))
      return true;
  return false;
}

void weft__steal_reset_backoff(weft__shard *sh)
{
  sh->steal.failed_streak = 0;
  sh->steal.cooldown = 0;
}

/* The next victim in the walk: the cursor advances by the stride. When the
 * stride shares a factor with the shard count, the walk would cycle through
 * a subset, so it slips by one after each `cycle` steps to reach everyone;
 * `cycle` is 0 when the stride is coprime with the count (no slip).
 *
 * Only then: a slip after a coprime walk's full cycle could land on the
 * thief itself twice in a row (stride 1 on 2 shards gave 0, 1, 1, 0, 0, ...)
 * and, with one probe per round, a third of the rounds probed nobody and
 * counted as failures - each one a backoff of a few hundred ns in a thief
 * that had work waiting (measured in the fanout bench). Without a slip two
 * steps in a row never meet the same shard (stride % n is not 0), and with
 * one they do not either: the slip moves to another residue class. */
static unsigned next_victim(struct weft__steal_state *st, unsigned n, unsigned stride,
                            unsigned cycle)
{
  unsigned cand = st->cursor % n;
  st->cursor = (st->cursor + stride) % n;
  if (cycle && ++st->steps >= cycle) {
    st->steps = 0;
    st->cursor = (st->cursor + 1) % n;
  }
  return cand;
}

/* The next victim in the walk that is neither the thief nor probed yet
 * this round (bits set in `probed`, the thief's among them); there is one
 * (fewer than n - 1 were probed). The walk reaches every shard within 2n
 * steps: without a slip any n steps in a row do; with one, every cycle of
 * n / g steps covers one residue class mod g and the next cycle starts in
 * the next class, so the n steps after the first slip - at most n / g
 * steps away - cover them all. Past that bound (which the walk never
 * reaches) the lowest shard not probed is taken, so the round ends. */
static unsigned next_unprobed(struct weft__steal_state *st, unsigned n, unsigned stride,
                              unsigned cycle, const uint64_t *probed)
{
  for (unsigned i = 0; i < 2 * n; i++) {
    unsigned cand = next_victim(st, n, stride, cycle);
    if (!(probed[cand / 64] & (UINT64_C(1) << (cand % 64))))
      return cand;
  }
  unsigned cand = 0;
  while (probed[cand / 64] & (UINT64_C(1) << (cand % 64)))
    cand++;
  return cand;
}

static unsigned gcd(unsigned a, unsigned b)
{
  while (b) {
    unsigned t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* t was stolen: the victim's thread wrote last what resuming it reads
 * first - the context saved on its stack and, for a task that has not run
 * yet, its argument (most often a struct it starts with). Fetching those
 * now, while the thief still runs something else, takes the transfers
 * between cores off the path from one task to the next. Prefetches never
 * fault, whatever the argument is. */
static void prefetch_run(weft_task *t)
{
  const char *ctx = t->coro.ctx;
  __builtin_prefetch(ctx);
  __builtin_prefetch(ctx + 64);
  if (t->coro.state == WEFT__CORO_CREATED)
    __builtin_prefetch(t->body_arg);
}

/* The stuck rule: true once `v`'s queue (non-empty, refused by the gate)
 * has kept its head for steal_stuck_ns, as seen by this thief's rounds.
 * Each victim keeps its own mark: with one mark for all, a thief whose
 * rounds refuse two short queues in turn (probe groups of one, or the
 * cursor moving the groups) restarted the clock at every look and never
 * took from either. A head that has not moved since the mark means that
 * nothing was taken from the queue since: its oldest task has waited at
 * least that long, however long ago the mark was made. */
static bool queue_stuck(weft__shard *sh, weft__shard *v)
{
  int64_t limit = sh->rt->cfg.steal_stuck_ns;
  if (limit <= 0)
    return false;
  struct weft__steal_state *st = &sh->steal;
  uint32_t head = atomic_load_explicit(&v->deque.head, memory_order_relaxed);
  int64_t now = weft__now();
  if (st->stuck_since[v->id] == 0 || st->stuck_head[v->id] != head) {
    st->stuck_head[v->id] = head;
    st->stuck_since[v->id] = now;
    return false;
  }
  return now - st->stuck_since[v->id] >= limit;
}

void (*weft__test_steal_pause)(void);

unsigned weft__steal_round(weft__shard *sh)
{
  weft_runtime *rt = sh->rt;
  const weft_config *c = &rt->cfg;
  unsigned n = (unsigned)rt->nshards;
  if (!c->steal || n <= 1)
    return 0;
  struct weft__steal_state *st = &sh->steal;
  /* Read before any queue is looked at, and kept as the failure's epoch:
   * work queued while this round probes is new to it, and must end the
   * cooldown the round may start. Read after a failed round, the epoch
   * already counted such work - pushed behind the probe that found its
   * queue empty - and the thief slept through the whole cooldown next to
   * it. Acquire, with the release of the bump: a thief that sees the new
   * epoch sees the push before it. */
  unsigned epoch = atomic_load_explicit(&rt->steal_epoch, memory_order_acquire);
  if (st->cooldown > 0 && epoch != st->seen_epoch)
    weft__steal_reset_backoff(sh); /* new work was queued since the last failure */
  if (st->cooldown > 0) {
    st->cooldown--;
    weft__count(&sh->stats.steal_skipped_backoff, 1);
    return 0;
  }

  unsigned stride = c->steal_stride % n;
  if (stride == 0)
    stride = 1;
  unsigned g = gcd(stride, n);
  unsigned cycle = g > 1 ? n / g : 0;
  /* Each round looks at every other shard at most once: n - 1 probes, each
   * of a shard not probed yet. The walk alone does not see to that - with
   * a stride that shares a factor with n, n - 1 steps that start inside a
   * cycle of it reach some shard twice and miss another (4 shards, stride
   * 2: 1, 2, 1), and a missed queue may be the only one with work. */
  uint64_t probed[(WEFT_MAX_SHARDS + 63) / 64] = {0};
  probed[(unsigned)sh->id / 64] |= UINT64_C(1) << ((unsigned)sh->id % 64);
  unsigned max_attempts = n - 1;
  unsigned probes = c->steal_probes < max_attempts ? c->steal_probes : max_attempts;
  unsigned remaining = c->steal_budget, attempts = 0, stolen = 0;
  /* 64-bit and saturating: the knobs are unsigned ints and may be huge. */
  uint64_t failures = st->failed_streak < 4 ? st->failed_streak : 4;
  uint64_t gate = 1 + failures * c->steal_fail_cost + c->steal_locality_margin;
  weft_task *batch[64];
  /* The probe group: its shards and the queue lengths seen. */
  _Static_assert(WEFT_MAX_SHARDS <= UINT16_MAX + 1, "shard ids fit group[]");
  uint16_t group[WEFT_MAX_SHARDS];
  uint32_t group_len[WEFT_MAX_SHARDS];

  while (remaining > 0 && attempts < max_attempts) {
    weft__shard *best = NULL;
    uint32_t best_len = 0;
    unsigned ng = 0;
    for (unsigned p = 0; p < probes && attempts < max_attempts; p++) {
      unsigned cand = next_unprobed(st, n, stride, cycle, probed);
      probed[cand / 64] |= UINT64_C(1) << (cand % 64);
      attempts++;
      weft__count(&sh->stats.steal_attempts, 1);
      uint32_t len = weft__deque_len(&rt->shards[cand].deque);
      group[ng] = (uint16_t)cand;
      group_len[ng++] = len;
      if (len > best_len) {
        best_len = len;
        best = &rt->shards[cand];
      }
    }
    if (!best)
      break;
    weft__count(&sh->stats.steal_scans, 1);
    uint32_t want;
    bool stuck = false;
    if (best_len > gate) {
      want = best_len > gate + 1 ? (c->steal_batch < best_len ? c->steal_batch : best_len) : 1;
    } else {
      /* The gate refuses every queue of the group (best is the longest).
       * The stuck rule looks at each one that is not empty, not just the
       * longest: a queue behind a long task may be as short as one that
       * moves, and each queue's clock starts only when it is looked at.
       * The longest that stood still is taken from. */
      best = NULL;
      best_len = 0;
      for (unsigned i = 0; i < ng; i++)
        if (group_len[i] > 0 && queue_stuck(sh, &rt->shards[group[i]]) &&
            group_len[i] > best_len) {
          best = &rt->shards[group[i]];
          best_len = group_len[i];
        }
      if (!best) {
        weft__count(&sh->stats.steal_skipped_locality, 1);
        continue;
      }
      /* All of it: every task there waits for the same long one. */
      want = c->steal_batch < best_len ? c->steal_batch : best_len;
      stuck = true;
    }
    if (want > remaining)
      want = remaining;
    if (want > 64)
      want = 64;
    if (weft__test_steal_pause)
      weft__test_steal_pause();
    uint32_t got = weft__deque_take(&best->deque, batch, want);
    for (uint32_t i = 0; i < got; i++) {
      /* Before queuing: once queued, another thief may take the task, run
       * it and even free it. */
      prefetch_run(batch[i]);
      /* The first task runs here next, from the local queue, so every steal
       * makes progress. The rest stay stealable: a long task among them
       * must not hold the others back while a shard sits idle. */
      if (i == 0 && stolen == 0)
        weft__shard_ready_local(sh, batch[i]);
      else
        weft__shard_ready(sh, batch[i]);
    }
    /* Counted once taken: the owner or another thief may have emptied the
     * queue since we looked (stats.h: queues taken from). */
    if (got)
      weft__count(&sh->stats.steal_takes, 1);
    if (got && stuck)
      weft__count(&sh->stats.steal_stuck, 1);
    remaining -= got;
    stolen += got;
  }

  if (stolen) {
    weft__count(&sh->stats.steal_success, stolen);
    weft__steal_reset_backoff(sh);
  } else {
    st->failed_streak++;
    st->seen_epoch = epoch;
    /* The seed stops the shift at 8, which left any steal_backoff_max above
     * backoff_min << 8 out of reach; runtime.h promises the doubling up to
     * the max. A 64-bit shift of at most 32 cannot overflow an unsigned. */
    unsigned shift = st->failed_streak - 1 < 32 ? st->failed_streak - 1 : 32;
    uint64_t max = c->steal_backoff_max > c->steal_backoff_min ? c->steal_backoff_max
                                                               : c->steal_backoff_min;
    uint64_t cd = (uint64_t)c->steal_backoff_min << shift;
    st->cooldown = (unsigned)(cd < max ? cd : max);
    if (st->cooldown == 0)
      st->cooldown = 1;
  }
  return stolen;
}
