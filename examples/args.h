/* SPDX-License-Identifier: MIT */
/*
 * Command-line numbers for the examples: the whole argument must be a
 * decimal number within bounds, so that "--shards 3x" or "--idle-ms 5abc"
 * is a usage error rather than 3 or 5 (atoi's reading).
 */
#ifndef WEFT_EXAMPLES_ARGS_H
#define WEFT_EXAMPLES_ARGS_H

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* True with *out set when s is a number in [min, max]. */
static inline bool arg_number(const char *s, long long min, long long max, long long *out)
{
  char *end;
  int saved = errno;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  bool ok = end != s && *end == '\0' && errno == 0 && v >= min && v <= max;
  errno = saved;
  if (ok)
    *out = v;
  return ok;
}

#endif
