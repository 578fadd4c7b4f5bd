/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
#include <criterion/criterion.h>
Test(boundary, placeholder, .timeout = 10) { cr_assert_eq(1 + 1, 2); }
