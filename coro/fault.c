/* SPDX-License-Identifier: MIT */
#include "fault.h"

#include <errno.h>
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

/* The allocators below leave errno as it was: glibc sets it to ENOMEM on a
 * failure, and no weft call may change the caller's errno (weft/common.h). */

void *weft__malloc(size_t n)
{
  if (weft__fault_hit(WEFT__FAULT_MALLOC))
    return NULL;
  return weft__malloc_plain(n);
}

void *weft__calloc(size_t n, size_t size)
{
  if (weft__fault_hit(WEFT__FAULT_MALLOC))
    return NULL;
  return weft__calloc_plain(n, size);
}

void *weft__calloc_aligned(size_t n, size_t size, size_t align)
{
  if (weft__fault_hit(WEFT__FAULT_MALLOC) || (size && n > SIZE_MAX / size))
    return NULL;
  int saved = errno;
  void *p = NULL;
  int r = posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, n * size);
  errno = saved;
  return r == 0 ? memset(p, 0, n * size) : NULL;
}

void *weft__malloc_plain(size_t n)
{
  int saved = errno;
  void *p = malloc(n);
  errno = saved;
  return p;
}

void *weft__calloc_plain(size_t n, size_t size)
{
  int saved = errno;
  void *p = calloc(n, size);
  errno = saved;
  return p;
}

void *weft__realloc(void *old, size_t n)
{
  int saved = errno;
  void *p = realloc(old, n);
  errno = saved;
  return p;
}

char *weft__strdup(const char *s)
{
  int saved = errno;
  char *p = strdup(s);
  errno = saved;
  return p;
}
