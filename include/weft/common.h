/* SPDX-License-Identifier: MIT */
/*
 * Conventions shared by every weft header.
 *
 * Results: every function that can fail returns an int (or ssize_t) that is
 * >= 0 on success and a negative errno value on failure, like cqe->res. No
 * weft function reads or writes errno: a coroutine can move between threads
 * while it is suspended, and errno is thread-local.
 *
 * Time: absolute deadlines and durations are int64_t nanoseconds on
 * CLOCK_MONOTONIC (see weft_now()). A deadline of WEFT_NO_DEADLINE (-1) means
 * "wait for ever".
 *
 * Threads: a "coroutine" is a weft task running on a shard thread. Calls that
 * can wait suspend the calling coroutine and let the shard run others; called
 * from a plain thread they block the thread instead (documented per call).
 */
#ifndef WEFT_COMMON_H
#define WEFT_COMMON_H

#include <stdint.h>

#if defined(__GNUC__)
#  define WEFT_API __attribute__((visibility("default")))
#else
#  define WEFT_API
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

#define WEFT_NO_DEADLINE ((int64_t)-1)

#define WEFT_NSEC ((int64_t)1)
#define WEFT_USEC ((int64_t)1000)
#define WEFT_MSEC ((int64_t)1000000)
#define WEFT_SEC ((int64_t)1000000000)

#ifdef __cplusplus
extern "C" {
#endif

/* "major.minor.patch" of the library actually linked. */
WEFT_API const char *weft_version(void);

/* A static description of an error code; `err` may be negative (as weft
 * returns it) or positive. Never NULL. */
WEFT_API const char *weft_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
