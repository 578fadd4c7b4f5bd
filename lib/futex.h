/* SPDX-License-Identifier: MIT */
/* Futex wait/wake for plain threads blocking on weft objects. */
#ifndef WEFT_LIB_FUTEX_H
#define WEFT_LIB_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/* Sleeps while *word == expected, until woken or CLOCK_MONOTONIC passes
 * `deadline` (ns, -1 = none). Returns 0 (woken, or the value differed),
 * -ETIMEDOUT, or -EINTR. */
int weft__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline);

/* Wakes up to n threads sleeping on word. */
void weft__futex_wake(_Atomic uint32_t *word, int n);

#endif
