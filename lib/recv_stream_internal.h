/* SPDX-License-Identifier: MIT */
/*
 * Test hooks and counters of the receive streams (lib/recv_stream.c), for
 * weft's own tests and benchmarks only.
 */
#ifndef WEFT_LIB_RECV_STREAM_INTERNAL_H
#define WEFT_LIB_RECV_STREAM_INTERNAL_H

#include "weft/recv_stream.h"

#include <stdatomic.h>
#include <stdint.h>

/* Test hook: makes new streams behave as on an older kernel.
 *   WEFT__RS_FORCE_NO_RING:      registering the buffer ring is refused;
 *   WEFT__RS_FORCE_NO_MULTISHOT: the ring registers, but the kernel turns
 *                                the multishot receive down (-EINVAL on its
 *                                first CQE), as a 5.19 kernel does. */
enum { WEFT__RS_FORCE_NONE = 0, WEFT__RS_FORCE_NO_RING = 1, WEFT__RS_FORCE_NO_MULTISHOT = 2 };
extern atomic_int weft__recv_stream_force_fallback;

/* What the process learned about the kernel: 1 multishot receives with
 * buffer rings work, -1 they do not (new streams take the plain path),
 * 0 not known yet. Tests may reset it to 0. */
extern atomic_int weft__recv_stream_support;

typedef struct weft__recv_stream_counters {
  uint64_t arms;      /* multishot receives submitted (the first + re-arms) */
  uint64_t nobufs;    /* times it ended with -ENOBUFS (all buffers full) */
  uint64_t restarts;  /* times it ended for another reason and was re-armed */
  uint64_t cqes;      /* CQEs of the multishot receive */
  uint64_t bytes;     /* bytes handed out by next() */
} weft__recv_stream_counters;

void weft__recv_stream_get_counters(const weft_recv_stream *s, weft__recv_stream_counters *out);

/* Buffer group ids in use in the process (for leak checks in tests). */
unsigned weft__recv_stream_groups_in_use(void);

#endif
