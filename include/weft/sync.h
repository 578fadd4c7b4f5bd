/* SPDX-License-Identifier: MIT */
/*
 * Synchronisation between coroutines - on any shard of any runtime - and
 * plain threads. A coroutine that waits is suspended (its shard runs others);
 * a plain thread that waits blocks on a futex.
 */
#ifndef WEFT_SYNC_H
#define WEFT_SYNC_H

#include "common.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_event weft_event;

/* Flags for weft_event_create(). */
#define WEFT_EVENT_AUTO_RESET 0x1u /* set() releases one waiter (or the next
                                      wait) and the event resets itself;
                                      without it set() releases every waiter
                                      and the event stays set until reset() */

/* Creates an unset event. Returns 0, -EINVAL (NULL or unknown flags), -ENOMEM. */
WEFT_API int weft_event_create(weft_event **ev, unsigned flags);

/* Frees an event nobody waits on any more. */
WEFT_API void weft_event_destroy(weft_event *ev);

/* Sets the event (see WEFT_EVENT_AUTO_RESET). Returns 0 or -EINVAL. Never
 * blocks; callable from any thread. */
WEFT_API int weft_event_set(weft_event *ev);

/* Clears the event. Returns 0 or -EINVAL. */
WEFT_API int weft_event_reset(weft_event *ev);

/* True if the event is set right now. */
WEFT_API bool weft_event_is_set(const weft_event *ev);

/* Waits until the event is set. Returns 0, or -ECANCELED (the calling task
 * was cancelled), -EINVAL. */
WEFT_API int weft_event_wait(weft_event *ev);

/* weft_event_wait() with an absolute deadline: -ETIMEDOUT once it passes,
 * -ENOMEM if the shard's timer heap cannot grow. */
WEFT_API int weft_event_wait_dl(weft_event *ev, int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
