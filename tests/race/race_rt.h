/* SPDX-License-Identifier: MIT */
/* Runtime helpers shared by the race programs. */
#ifndef WEFT_TESTS_RACE_RT_H
#define WEFT_TESTS_RACE_RT_H

#include "weft.h"

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

#endif
