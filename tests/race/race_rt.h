/* SPDX-License-Identifier: MIT */
/* Runtime helpers shared by the race programs: starting a runtime (or
 * skipping), submitting with a placement, and a canceller that runs as a
 * coroutine or a plain thread. */
#ifndef WEFT_TESTS_RACE_RT_H
#define WEFT_TESTS_RACE_RT_H

#include "race_check.h"
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>

/* Starts a runtime with cfg (NULL: 2 shards, the rest default) for program
 * `name`: 0, or the exit status main should return - 77 without io_uring,
 * 1 on another error - with a line saying why. */
static inline int race_start(weft_runtime **rt, const weft_config *cfg, const char *name)
{
  weft_config two;
  if (!cfg) {
    weft_config_init(&two);
    two.shards = 2;
    cfg = &two;
  }
  int r = weft_runtime_start(rt, cfg);
  if (r == -EPERM || r == -ENOSYS) {
    printf("%s: io_uring unavailable (%s), skipped\n", name, weft_strerror(r));
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "%s: weft_runtime_start: %s\n", name, weft_strerror(r));
    return 1;
  }
  return 0;
}

/* For a program about messages, after race_start: 0 when rt's messages
 * work, else rt is stopped and the exit status main should return - 77
 * when the kernel has no msg_ring (weft's messages are -EOPNOTSUPP then), 1
 * on another error - with a line saying why. A plain thread's flush is the
 * probe: with nothing sent it returns at once. */
static inline int race_need_msg(weft_runtime *rt, const char *name)
{
  int r = weft_msg_flush_rt(rt, -1);
  if (r == 0)
    return 0;
  weft_runtime_stop(rt);
  if (r == -EOPNOTSUPP) {
    printf("%s: the kernel has no msg_ring (%s), skipped\n", name, weft_strerror(r));
    return 77;
  }
  fprintf(stderr, "%s: weft_msg_flush_rt: %s\n", name, weft_strerror(r));
  return 1;
}

/* weft_runtime_submit() with a placement and a shard (-1: any). */
static inline int race_submit_on(weft_runtime *rt, int placement, int shard,
                                 void *(*fn)(void *), void *arg, weft_task **t)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = placement;
  o.shard = shard;
  return weft_runtime_submit(rt, &o, fn, arg, t);
}

/* A share of cancels: v[first], v[first + step], ... below v[n], one after
 * another, yielding (sched_yield on a plain thread) every `yield_every`
 * cancels so that they interleave with the work. `sent` (if not NULL)
 * counts the cancels made. Run race_canceller(&share) from a coroutine or a
 * plain thread. */
struct race_cancel_share {
  weft_task **v;
  int n, first, step, yield_every;
  atomic_int *sent;
};

static inline void *race_canceller(void *arg)
{
  const struct race_cancel_share *c = arg;
  for (int i = c->first, k = 0; i < c->n; i += c->step, k++) {
    int r = weft_cancel(c->v[i]);
    CHECK(r == 0 || r == -ESRCH);
    if (c->sent)
      atomic_fetch_add(c->sent, 1);
    if (k % c->yield_every == 0)
      weft_yield();
  }
  return NULL;
}

#endif
