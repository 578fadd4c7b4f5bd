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

/* jump_fcontext, entered by a jump instead of a call: the switch must not
 * leave the CPU's return-stack predictor out of step with the stacks.
 *
 * jump_fcontext leaves by an indirect jump. Entered by a call, it would
 * leave one predicted return address behind at every switch, and every
 * return up the resumed coroutine's call chain would then be predicted one
 * frame off (four or five mispredicted returns per switch on the wait
 * path). Here the resume address is pushed by hand and jump_fcontext is
 * entered by a plain jump, so a switch pushes and pops nothing on the
 * predictor: the resumed side inherits the switcher's predicted returns,
 * which are right whenever both wait through the same calls (a ping-pong,
 * a yield loop, a lock handed back and forth).
 *
 * Everything the SysV ABI lets a call clobber is declared clobbered, as the
 * other side runs arbitrary code; jump_fcontext itself saves rbx, rbp,
 * r12-r15, MXCSR and the x87 control word. The 128 bytes below rsp (the red
 * zone a leaf function may use) are stepped over before the push. */
#if defined(__AVX512F__)
#define WEFT__JUMP_CLOBBER_AVX512                                                          \
  , "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",      \
    "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "k1", "k2", "k3", "k4", \
    "k5", "k6", "k7"
#else
#define WEFT__JUMP_CLOBBER_AVX512
#endif

static inline __attribute__((always_inline)) weft__transfer weft__jump(weft__fcontext const to,
                                                                       void *vp)
{
  register void *rdi __asm__("rdi") = to;
  register void *rsi __asm__("rsi") = vp;
  register void *rax __asm__("rax");
  register void *rdx __asm__("rdx");
  __asm__ volatile("leaq -128(%%rsp), %%rsp\n\t"
                   "leaq 1f(%%rip), %%rax\n\t"
                   "pushq %%rax\n\t"
                   "jmp jump_fcontext@PLT\n"
                   "1:\n\t"
                   "leaq 128(%%rsp), %%rsp"
                   : "+r"(rdi), "+r"(rsi), "=r"(rax), "=r"(rdx)
                   :
                   : "rcx", "r8", "r9", "r10", "r11", "memory", "cc", "xmm0", "xmm1", "xmm2",
                     "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
                     "xmm12", "xmm13", "xmm14", "xmm15", "st", "st(1)", "st(2)", "st(3)",
                     "st(4)", "st(5)", "st(6)", "st(7)", "mm0", "mm1", "mm2", "mm3", "mm4",
                     "mm5", "mm6", "mm7" WEFT__JUMP_CLOBBER_AVX512);
  return (weft__transfer){rax, rdx};
}

/* Prepare a context at the top of a stack (`sp` is the highest address) that
 * runs `fn` when first jumped to. `fn` must never return. */
weft__fcontext make_fcontext(void *sp, size_t size, void (*fn)(weft__transfer));

/* Switch to `to` and run `fn` on top of it before it resumes. */
weft__transfer ontop_fcontext(weft__fcontext const to, void *vp,
                              weft__transfer (*fn)(weft__transfer));

#endif
