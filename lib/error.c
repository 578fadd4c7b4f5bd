/* SPDX-License-Identifier: MIT */
#include "weft/common.h"

#include <string.h>

const char *weft_version(void)
{
  return "0.1.0";
}

const char *weft_strerror(int err)
{
  if (err < 0)
    err = -err;
  if (err == 0)
    return "Success";
  /* strerrordesc_np (glibc 2.32) is thread-safe and never formats. */
  const char *s = strerrordesc_np(err);
  return s ? s : "Unknown error";
}
