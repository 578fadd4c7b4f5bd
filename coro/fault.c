/* SPDX-License-Identifier: MIT */
#include "fault.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

void *weft__calloc_aligned(size_t n, size_t size, size_t align)
{
  if (weft__fault_hit(WEFT__FAULT_MALLOC) || (size && n > SIZE_MAX / size))
    return NULL;
  void *p = NULL;
  if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, n * size) != 0)
    return NULL;
  return memset(p, 0, n * size);
}
