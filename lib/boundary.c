/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
typedef int weft__placeholder_boundary;
