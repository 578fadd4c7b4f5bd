/* SPDX-License-Identifier: MIT */
/*
 * Structured concurrency: task groups and cancellation tokens.
 *
 * A group owns the tasks spawned into it: weft_group_wait() waits for all of
 * them, weft_group_cancel() cancels every member's current and later
 * blocking calls (in-flight I/O included), and weft_group_destroy() cancels
 * what is left, waits for it and frees the group - no member outlives its
 * group.
 *
 * Member errors: a member that returns (void *)(intptr_t)-E with E a positive
 * errno value reports error -E. weft_group_wait() returns the first such
 * error (or -ECANCELED if a member was cancelled and none reported one), 0
 * if every member returned something else.
 */
#ifndef WEFT_GROUP_H
#define WEFT_GROUP_H

#include "common.h"
#include "task.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_group weft_group;

/* Returns 0, -EINVAL, -ENOMEM. */
WEFT_API int weft_group_create(weft_group **g);

/* weft_spawn() into the group (no handle: the group keeps it). Same errors,
 * plus -ECANCELED once the group has been cancelled. A spawn made while
 * weft_group_cancel() runs may return 0 instead: the task counts as a
 * member the cancel reached before it started, so it never runs (like any
 * member cancelled before it started: fn does not get to free arg), and
 * weft_group_wait() counts it as a cancelled member. */
WEFT_API int weft_group_spawn(weft_group *g, const weft_spawn_opts *o, void *(*fn)(void *),
                              void *arg);

/* Waits until every member spawned so far has returned; see above for the
 * result. _dl: -ETIMEDOUT when the deadline passes first; -ENOMEM in a
 * coroutine when its shard's timer heap cannot grow for the deadline (the
 * wait did not begin). A coroutine that is
 * itself cancelled gets -ECANCELED if it has to wait; with nothing to wait
 * for (no member left) it gets the result, as any wait that need not wait.
 * In a deadline scope, weft_group_wait can end as _dl does: -ETIMEDOUT,
 * -ENOMEM. From plain threads too. A member of g waiting for g would wait
 * for itself: -EDEADLK, at once (as weft_join of the calling task). */
WEFT_API int weft_group_wait(weft_group *g);
WEFT_API int weft_group_wait_dl(weft_group *g, int64_t deadline);

/* Cancels every member (and members spawned later). Returns 0 or -EINVAL. */
WEFT_API int weft_group_cancel(weft_group *g);

/* Members that have not returned yet. */
WEFT_API size_t weft_group_active(const weft_group *g);

/* Cancels, waits for every member (not cancellable itself) and frees g.
 * Returns weft_group_wait()'s result, -EINVAL, or -EDEADLK (called by a
 * member of g: nothing is done). */
WEFT_API int weft_group_destroy(weft_group *g);

/* Cancellation tokens (the seed's CancellationToken): a flag that can be
 * raised once and waited for, to tell cooperating code to stop. */
typedef struct weft_cancel_token weft_cancel_token;

WEFT_API int weft_cancel_token_create(weft_cancel_token **tok);
/* Raises the flag and releases every waiter; 0 or -EINVAL. */
WEFT_API int weft_cancel_token_cancel(weft_cancel_token *tok);
WEFT_API bool weft_cancel_token_is_cancelled(const weft_cancel_token *tok);
/* Waits until the token is cancelled: 0, -ETIMEDOUT, or -ECANCELED if the
 * waiting task itself is cancelled; -ENOMEM in a coroutine when its shard's
 * timer heap cannot grow for the deadline (the wait did not begin). */
WEFT_API int weft_cancel_token_wait(weft_cancel_token *tok, int64_t deadline);
WEFT_API void weft_cancel_token_destroy(weft_cancel_token *tok);

#ifdef __cplusplus
}
#endif

#endif
