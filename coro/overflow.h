/* SPDX-License-Identifier: MIT */
/*
 * Stack overflow reports. A guarded stack's overflow faults in its guard page;
 * a SIGSEGV handler running on a per-thread alternate stack recognises the
 * fault as belonging to the coroutine running on that thread, prints
 *   weft: stack overflow in coroutine <name or #id> (stack size N)
 * and aborts. Any other SIGSEGV goes to whatever handler was there before.
 */
#ifndef WEFT_CORO_OVERFLOW_H
#define WEFT_CORO_OVERFLOW_H

#include "coro.h"

#include <stdbool.h>

/* weft__overflow_report(co, detail), declared in coro.h: prints the report
 * for `co` (with `detail` if not NULL) and aborts. Only async-signal-safe
 * calls. */

/* The running coroutine, read directly: for the signal handler only. */
weft__coro *weft__overflow_current(void);

#endif
