/* SPDX-License-Identifier: MIT */
/*
 * Time and sleeping. Each shard keeps its timers in user space (arming and
 * cancelling them costs no system call); a shard with nothing to run sleeps
 * in the kernel until its nearest deadline.
 */
#ifndef WEFT_TIME_H
#define WEFT_TIME_H

#include "common.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC in nanoseconds: the clock of every weft deadline. */
WEFT_API int64_t weft_now(void);

/* Suspends the calling coroutine for `ns` nanoseconds (returns at once for
 * ns <= 0). Returns 0, or -ECANCELED if the task is cancelled (already, or
 * meanwhile: also for ns <= 0, so that a loop of sleeps in a cancelled task
 * ends), -ETIMEDOUT if a deadline scope (below) ends first, -ENOMEM if the
 * shard's timer heap cannot grow. On a plain thread the thread sleeps. */
WEFT_API int weft_sleep(int64_t ns);

/* Suspends until weft_now() >= deadline; as weft_sleep(). A deadline that
 * has already passed returns at once (0, or -ECANCELED in a cancelled
 * task), without suspending; so does any negative deadline, WEFT_NO_DEADLINE
 * included (to wait until cancelled, wait on something that never comes,
 * such as a weft_cancel_token nobody cancels). Such a call
 * does not wait behind timers of its shard that expired but have not fired
 * yet (timers fire in deadline order; a sleep that armed none is not one). */
WEFT_API int weft_sleep_until(int64_t deadline);

/* Deadline scopes: until the matching pop, every blocking call of the calling
 * task uses min(its own deadline, the scope's) and returns -ETIMEDOUT when
 * the scope's deadline passes - the seed's timeout()/timeout_at():
 *
 *     int64_t saved = weft_deadline_push(weft_now() + 50 * WEFT_MSEC);
 *     ... any weft calls ...
 *     weft_deadline_pop(saved);
 *
 * A wait bounded by a scope needs a timer: when the shard's timer heap
 * cannot grow for it, the call returns -ENOMEM (the wait did not begin) -
 * also a call that has no deadline of its own, such as weft_join().
 *
 * Scopes nest (an inner scope cannot extend an outer one). push returns the
 * value to hand back to pop; on a plain thread both do nothing (push returns
 * WEFT_NO_DEADLINE). The task's current deadline is weft_deadline(). */
WEFT_API int64_t weft_deadline_push(int64_t deadline);
WEFT_API void weft_deadline_pop(int64_t saved);
WEFT_API int64_t weft_deadline(void);

/* Intervals: ticks every `period` ns from `start` (absolute; <= 0 means
 * "now + period"). What happens when a tick is missed (the coroutine was
 * busy past it) follows `missed`: */
enum weft_missed_tick {
  WEFT_MISSED_BURST = 0, /* fire the missed ticks at once, one per call,
                            until the schedule is caught up */
  WEFT_MISSED_DELAY,     /* when next() is called after the tick was due,
                            the next tick is one period after that late one;
                            ticks waited for in time keep the grid */
  WEFT_MISSED_SKIP,      /* drop missed ticks; next tick on the original grid */
};

typedef struct weft_interval weft_interval;

/* Returns 0, -EINVAL (period <= 0, bad `missed`, NULL), -ENOMEM. */
WEFT_API int weft_interval_create(weft_interval **iv, int64_t period, int64_t start, int missed);

/* Waits for the next tick; returns 0, -ECANCELED, -ETIMEDOUT when a
 * deadline scope ends first, -ENOMEM (a coroutine whose shard's timer heap
 * cannot grow: the wait did not begin), -EINVAL for NULL. Also on plain
 * threads. */
WEFT_API int weft_interval_next(weft_interval *iv);

/* When the next tick is due (absolute ns). */
WEFT_API int64_t weft_interval_deadline(const weft_interval *iv);

/* Moves the schedule: the next tick is at `start` (absolute; <= 0 means
 * "now + period", as in create), then every period. 0, or -EINVAL (NULL). */
WEFT_API int weft_interval_reset(weft_interval *iv, int64_t start);

WEFT_API void weft_interval_destroy(weft_interval *iv);

/* A resettable sleep (the seed's Sleep::reset): coroutines and threads wait
 * until its deadline; moving the deadline (earlier or later) takes effect
 * for those already waiting. */
typedef struct weft_timer weft_timer;

/* Creates a timer due at `deadline` (WEFT_NO_DEADLINE, or any negative
 * value: never, until reset - unlike weft_sleep_until, for which a negative
 * deadline has passed). */
WEFT_API int weft_timer_create(weft_timer **tm, int64_t deadline);

/* Waits until the timer is due: 0, or -ECANCELED, -ETIMEDOUT when a deadline
 * scope ends first, -ENOMEM if the shard's timer heap cannot grow. A timer
 * already due returns at once: 0, or -ECANCELED in a cancelled task (as
 * weft_sleep_until with a passed deadline). */
WEFT_API int weft_timer_wait(weft_timer *tm);

/* Sets a new deadline (negative: never); waiters re-check it. Returns 0
 * or -EINVAL. */
WEFT_API int weft_timer_reset(weft_timer *tm, int64_t deadline);

WEFT_API int64_t weft_timer_deadline(const weft_timer *tm);

/* Frees a timer nobody waits on. */
WEFT_API void weft_timer_destroy(weft_timer *tm);

#ifdef __cplusplus
}
#endif

#endif
