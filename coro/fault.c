/* SPDX-License-Identifier: MIT */
#include "fault.h"

#include <stdlib.h>
#include <sys/mman.h>

_Atomic long weft__fault_countdown[WEFT__FAULT_NSITES];

void weft__fault_arm(enum weft__fault_site site, long nth)
{
  atomic_store(&weft__fault_countdown[site], nth < 0 ? 0 : nth);
}

void *weft__mmap(void *addr, size_t len, int prot, int flags)
{
  if (weft__fault_hit(WEFT__FAULT_MMAP))
    return MAP_FAILED;
  return mmap(addr, len, prot, flags, -1, 0);
}

void *weft__malloc(size_t n)
{
  if (weft__fault_hit(WEFT__FAULT_MALLOC))
    return NULL;
  return malloc(n);
}

void *weft__calloc(size_t n, size_t size)
{
  if (weft__fault_hit(WEFT__FAULT_MALLOC))
    return NULL;
  return calloc(n, size);
}
