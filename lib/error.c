/* SPDX-License-Identifier: MIT */
#include "weft/common.h"

#include <limits.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

const char *weft_version(void)
{
  /* The header's numbers, so the two cannot differ; meson.build's project
   * version (the shared library's file name) must be changed with them. */
  return STR(WEFT_VERSION_MAJOR) "." STR(WEFT_VERSION_MINOR) "." STR(WEFT_VERSION_PATCH);
}

const char *weft_strerror(int err)
{
  if (err == INT_MIN)
    return "Unknown error"; /* no errno is that large, and -INT_MIN overflows */
  if (err < 0)
    err = -err;
  if (err == 0)
    return "Success";
  /* strerrordesc_np (glibc 2.32) is thread-safe and never formats. */
  const char *s = strerrordesc_np(err);
  return s ? s : "Unknown error";
}
