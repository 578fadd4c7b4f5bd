/* SPDX-License-Identifier: MIT */
/*
 * A test-and-test-and-set spinlock for the very short critical sections of
 * wait queues and task lists (a few pointer writes). Never held across a
 * suspension or a system call.
 */
#ifndef WEFT_LIB_SPIN_H
#define WEFT_LIB_SPIN_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct weft__spin {
  atomic_bool held;
} weft__spin;

#define WEFT__SPIN_INIT {false}

static inline void weft__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static inline void weft__spin_lock(weft__spin *s)
{
  for (;;) {
    if (!atomic_exchange_explicit(&s->held, true, memory_order_acquire))
      return;
    while (atomic_load_explicit(&s->held, memory_order_relaxed))
      weft__cpu_relax();
  }
}

static inline void weft__spin_unlock(weft__spin *s)
{
  atomic_store_explicit(&s->held, false, memory_order_release);
}

#endif
