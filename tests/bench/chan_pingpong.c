/* SPDX-License-Identifier: MIT */
/* Placeholder: being written. */
int main(void)
{
  return 77;
}
