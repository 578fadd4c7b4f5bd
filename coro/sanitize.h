/* SPDX-License-Identifier: MIT */
/*
 * Every sanitizer and Valgrind hook the coroutine switch needs, in one place.
 *
 * The hooks key on compiler macros, not on Meson options, so that a parent
 * project compiling weft's sources with -fsanitize=... by other means still
 * gets them. Without a sanitizer each hook is an empty inline function.
 *
 *  - ASan keeps a per-thread notion of "the current stack": it must be told
 *    before every switch (start_switch_fiber, with where its fake frames of
 *    the departing context go) and after it (finish_switch_fiber). A NULL
 *    fake-stack slot tells it the departing context is gone for good.
 *  - TSan models each coroutine as a fiber with its own shadow state.
 *  - Valgrind must know a stack's extent or it reports every switch as a
 *    wild stack pointer move.
 */
#ifndef WEFT_CORO_SANITIZE_H
#define WEFT_CORO_SANITIZE_H

#include <stddef.h>

#if defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define WEFT__ASAN 1
#  endif
#  if __has_feature(thread_sanitizer)
#    define WEFT__TSAN 1
#  endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(WEFT__ASAN)
#  define WEFT__ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(WEFT__TSAN)
#  define WEFT__TSAN 1
#endif

#ifdef WEFT__ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                     size_t *size_old);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif
#ifdef WEFT__TSAN
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
void __tsan_set_fiber_name(void *fiber, const char *name);
#endif
#ifdef WEFT_HAVE_VALGRIND
#  include <valgrind/valgrind.h>
#endif

/* ASan: about to leave the current context for the stack [bottom, bottom+size).
 * `fake_save` NULL means the current context never runs again. */
static inline void weft__asan_start(void **fake_save, const void *bottom, size_t size)
{
#ifdef WEFT__ASAN
  __sanitizer_start_switch_fiber(fake_save, bottom, size);
#else
  (void)fake_save; (void)bottom; (void)size;
#endif
}

/* ASan: arrived; report the stack we came from through bottom_old/size_old. */
static inline void weft__asan_finish(void *fake_save, const void **bottom_old, size_t *size_old)
{
#ifdef WEFT__ASAN
  __sanitizer_finish_switch_fiber(fake_save, bottom_old, size_old);
#else
  (void)fake_save;
  if (bottom_old) *bottom_old = NULL;
  if (size_old) *size_old = 0;
#endif
}

/* ASan: forget poisoning left on a stack by a previous coroutine. */
static inline void weft__asan_unpoison(void *addr, size_t size)
{
#ifdef WEFT__ASAN
  __asan_unpoison_memory_region(addr, size);
#else
  (void)addr; (void)size;
#endif
}

static inline void *weft__tsan_current(void)
{
#ifdef WEFT__TSAN
  return __tsan_get_current_fiber();
#else
  return NULL;
#endif
}

static inline void *weft__tsan_create(const char *name)
{
#ifdef WEFT__TSAN
  void *f = __tsan_create_fiber(0);
  if (name) __tsan_set_fiber_name(f, name);
  return f;
#else
  (void)name;
  return NULL;
#endif
}

static inline void weft__tsan_destroy(void *fiber)
{
#ifdef WEFT__TSAN
  if (fiber) __tsan_destroy_fiber(fiber);
#else
  (void)fiber;
#endif
}

static inline void weft__tsan_switch(void *fiber)
{
#ifdef WEFT__TSAN
  __tsan_switch_to_fiber(fiber, 0);
#else
  (void)fiber;
#endif
}

static inline unsigned weft__valgrind_register(void *lo, void *hi)
{
#ifdef WEFT_HAVE_VALGRIND
  return VALGRIND_STACK_REGISTER(lo, hi);
#else
  (void)lo; (void)hi;
  return 0;
#endif
}

static inline void weft__valgrind_deregister(unsigned id)
{
#ifdef WEFT_HAVE_VALGRIND
  VALGRIND_STACK_DEREGISTER(id);
#else
  (void)id;
#endif
}

#endif
