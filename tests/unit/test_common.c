/* SPDX-License-Identifier: MIT */
/*
 * Suite "runtime", weft/common.h: the version of the library actually
 * linked agrees with the header's, and weft_strerror describes an error
 * whichever sign it comes with, never returning NULL.
 */
#include "rt_helpers.h"

#include <limits.h>

Test(runtime, version_is_the_headers)
{
  char want[32];
  snprintf(want, sizeof(want), "%d.%d.%d", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
           WEFT_VERSION_PATCH);
  cr_assert_str_eq(weft_version(), want);
}

Test(runtime, strerror_takes_either_sign)
{
  cr_assert_str_eq(weft_strerror(0), "Success");
  cr_assert_str_eq(weft_strerror(-EBADF), "Bad file descriptor");
  cr_assert_str_eq(weft_strerror(EBADF), "Bad file descriptor");
  cr_assert_str_eq(weft_strerror(-ETIMEDOUT), "Connection timed out");
  cr_assert_str_eq(weft_strerror(-ECANCELED), "Operation canceled");
}

Test(runtime, strerror_of_a_code_nobody_has_is_unknown)
{
  cr_assert_str_eq(weft_strerror(-100000), "Unknown error");
  cr_assert_str_eq(weft_strerror(100000), "Unknown error");
  /* The one negative int without a positive counterpart. */
  cr_assert_str_eq(weft_strerror(INT_MIN), "Unknown error");
  cr_assert_str_eq(weft_strerror(INT_MAX), "Unknown error");
}
