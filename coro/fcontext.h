/* SPDX-License-Identifier: MIT */
/*
 * The three entry points of Boost.Context's fcontext assembly, declared once.
 *
 * They come from Debian's libboost_context.a (make_x86_64_sysv_elf_gas.o,
 * jump_x86_64_sysv_elf_gas.o, ontop_x86_64_sysv_elf_gas.o); the archive's C++
 * member (stack_traits.o) is never referenced, so the linker leaves it out and
 * nothing of libstdc++ is needed. The ABI is Boost's (boost/context/detail/
 * fcontext.hpp): an fcontext_t is the stack pointer of a suspended context,
 * and a switch hands a transfer_t {context we came from, user word} to the
 * other side.
 */
#ifndef WEFT_CORO_FCONTEXT_H
#define WEFT_CORO_FCONTEXT_H

#include <stddef.h>

typedef void *weft__fcontext;

typedef struct weft__transfer {
  weft__fcontext fctx; /* the context that just switched to us */
  void *data;          /* the word it passed along */
} weft__transfer;

/* Switch to `to`, passing `vp`; returns when something switches back. */
weft__transfer jump_fcontext(weft__fcontext const to, void *vp);

/* Prepare a context at the top of a stack (`sp` is the highest address) that
 * runs `fn` when first jumped to. `fn` must never return. */
weft__fcontext make_fcontext(void *sp, size_t size, void (*fn)(weft__transfer));

/* Switch to `to` and run `fn` on top of it before it resumes. */
weft__transfer ontop_fcontext(weft__fcontext const to, void *vp,
                              weft__transfer (*fn)(weft__transfer));

#endif
