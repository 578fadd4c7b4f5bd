/* SPDX-License-Identifier: MIT */
/*
 * Counters and a dump of live coroutines, for monitoring and debugging. The
 * counters are read without stopping the shards, so a snapshot of several of
 * them is only approximately consistent.
 */
#ifndef WEFT_STATS_H
#define WEFT_STATS_H

#include "common.h"
#include "runtime.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_stats {
  int shard;                /* the shard described, or -1 for the sum of all */
  int shards;               /* shards in the runtime */
  uint64_t live;            /* tasks spawned and not yet finished (runtime-wide) */
  uint64_t spawned;         /* tasks spawned by coroutines running on this shard;
                               the sum (shard -1) adds the tasks submitted from
                               plain threads and other runtimes */
  uint64_t finished;        /* tasks that returned on this shard, or that it
                               finished without running them (cancelled
                               before they ever ran) */
  uint64_t switches;        /* coroutine resumptions (hand-overs included) */
  uint64_t handoffs;        /* of them, direct hand-overs from a coroutine that
                               waited or yielded to the next runnable one
                               (weft_config.handoff) */
  uint64_t inbox_received;  /* tasks handed over by other threads */
  uint64_t wakes_sent;      /* wake-ups sent to this shard: msg_ring messages
                               (one the kernel refused counts once, with the
                               eventfd write that stands in for it) */
  uint64_t wakes_coalesced; /* wake-ups not sent: one was already on its way */
  uint64_t parks;           /* times the shard slept in the kernel */
  uint64_t enters;          /* io_uring_enter system calls */
  uint64_t cqes;            /* completions reaped */
  uint64_t timers_armed;    /* timers armed on this shard */
  uint64_t timers_fired;    /* timers that expired */
  uint64_t timers_cancelled;/* timers disarmed before they fired */
  uint64_t ops_submitted;   /* io_uring operations started by coroutines */
  uint64_t ops_completed;   /* ... whose last completion was reaped */
  uint64_t ops_cancelled;   /* ... that ended cancelled (weft_cancel: a call
                               waiting for one returns -ECANCELED) */
  uint64_t ops_timed_out;   /* ... that ended cancelled by their deadline
                               (-ETIMEDOUT) */
  uint64_t sq_full_flushes; /* submissions forced by a full SQ */
  uint64_t cq_overflows;    /* times completions had overflowed the CQ (none lost:
                               the kernel keeps them until they are reaped) */
  /* The blocking pool (weft/blocking.h) is the runtime's: every shard's
   * snapshot and the sum give the same, runtime-wide, values. */
  uint64_t pool_jobs;       /* blocking-pool jobs finished (runtime-wide) */
  uint64_t pool_queued;     /* jobs waiting for a pool thread now */
  uint64_t pool_threads;    /* pool threads alive now */
  /* Work stealing (counted on the shard that does it). */
  uint64_t steal_attempts;  /* victims probed */
  uint64_t steal_scans;     /* probe groups (of steal_probes victims, the
                               longest queue picked) that found a non-empty
                               victim; a round makes more groups while its
                               budget lasts and other shards are left to
                               probe, so it may count several */
  uint64_t steal_success;   /* tasks stolen */
  uint64_t steal_takes;     /* probes that took at least one task (a batch) */
  uint64_t steal_skipped_backoff;  /* rounds skipped in a cooldown */
  uint64_t steal_skipped_locality; /* victims left alone: queue too short */
  uint64_t steal_stuck;            /* short queues taken from anyway: they had
                                      not moved for steal_stuck_ns */
  uint64_t steal_backpressure;     /* tasks that found the stealable queue full */
  uint64_t steal_wakes;     /* sleeping shards woken to steal */
  uint64_t steal_local_hits;/* stealable tasks run by the shard that queued them
                               (counted while stealing is possible: steal on and
                               more than one shard). A thief runs the first task
                               of a stolen batch at once and queues the rest on
                               its own stealable queue: each of those it runs
                               from there counts here too, so such a task is in
                               both steal_success and steal_local_hits */
  /* The three ratios are 0 when their divisor is 0 (nothing stolen or
   * queued, no probe, no scan): never NaN. */
  double local_hit_ratio;   /* steal_local_hits / (steal_local_hits + steal_success);
                               with batches (steal_batch > 1) the rest of a batch
                               run by its thief counts on both sides */
  double steal_success_rate;/* steal_takes / steal_attempts: share of probes
                               that found something to take (<= 1) */
  double stolen_per_scan;   /* steal_success / steal_scans */
  /* Messages (weft/msg.h); plain threads' sends are counted only where
   * they are received. */
  uint64_t msgs_sent;       /* messages sent by coroutines of this shard
                               (direct, ticketed ones the kernel took, and
                               batched ones queued) */
  uint64_t msgs_received;   /* messages queued for receivers on this shard */
  uint64_t msg_doorbells;   /* lane/counter doorbells and flush acks sent */
  uint64_t msg_doorbells_coalesced; /* batches and counter adds that needed
                               no doorbell: one was already on its way */
  uint64_t msg_backpressure;/* messages weft_msg_send_many refused because
                               their lane was full (each time: a message
                               offered again and refused again counts again) */
  uint64_t msg_failed;      /* msg_ring sends the kernel refused (sent again,
                               stopping runtime or not, unless the target
                               shard has left; a ticketed send's refusal is
                               returned to its caller instead) */
  uint64_t msg_queue_full;  /* times a lane into this shard was left holding
                               messages because a receive queue was at
                               weft_config.msg_queue_limit, or full with no
                               memory to grow */
  unsigned ring_flags;      /* WEFT_RING_* in use (sum: those every shard uses) */
  unsigned ring_entries;    /* SQ size of the ring (sum: of all the rings) */
} weft_stats;

/* Fills *out for one shard of rt (shard -1: the sum over all shards);
 * rt NULL = the calling coroutine's runtime. Returns 0, -EINVAL (bad shard or
 * NULL out), -EPERM (rt NULL on a plain thread). */
WEFT_API int weft_stats_get(weft_runtime *rt, int shard, weft_stats *out);

/* Writes one line per live task of rt (NULL = current): id, name ("-" if
 * it has none), shard, "stealable" (placed STEALABLE or STEALABLE_PREFERRED
 * and not pinned since) or "fixed", and state ("runnable", "running",
 * "waiting"; " cancelled" after it when cancelled), as
 *   task 7 reader               shard 1 stealable waiting
 * Returns the number of tasks listed, or -EPERM / -EINVAL. */
WEFT_API int weft_dump(weft_runtime *rt, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
