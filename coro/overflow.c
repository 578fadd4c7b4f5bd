/* SPDX-License-Identifier: MIT */
#include "overflow.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ALTSTACK_SIZE ((size_t)64 << 10)

static struct sigaction previous;        /* the handler we chain to */
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static pthread_key_t altstack_key;
__thread bool weft__coro_thread_ready __attribute__((tls_model("initial-exec")));

static size_t fmt_u64(char *out, uint64_t v)
{
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++)
    out[i] = tmp[n - 1 - i];
  return n;
}

static size_t put(char *buf, size_t at, size_t cap, const char *s, size_t n)
{
  for (size_t i = 0; i < n && at < cap; i++)
    buf[at++] = s[i];
  return at;
}

_Noreturn void weft__overflow_report(const weft__coro *co, const char *detail)
{
  char buf[256], num[24];
  size_t n = 0, cap = sizeof(buf) - 1;
  n = put(buf, n, cap, "weft: stack overflow in coroutine ", 34);
  if (co->name[0]) {
    n = put(buf, n, cap, co->name, strnlen(co->name, sizeof(co->name)));
  } else {
    n = put(buf, n, cap, "#", 1);
    n = put(buf, n, cap, num, fmt_u64(num, co->id));
  }
  n = put(buf, n, cap, " (stack size ", 13);
  n = put(buf, n, cap, num, fmt_u64(num, co->stack.size));
  if (detail) {
    n = put(buf, n, cap, ", ", 2);
    n = put(buf, n, cap, detail, strlen(detail));
  }
  n = put(buf, n, cap, ")\n", 2);
  /* The system call itself: libweft-hook routes write() in a coroutine
   * to weft_write, which must not run in a signal handler. */
  long w = syscall(SYS_write, STDERR_FILENO, buf, n);
  (void)w;
  abort();
}

/* A fault is ours when it hits the running coroutine's guard (a PROT_NONE
 * page or a guard region), or when the stack pointer itself has left its
 * stack (a frame bigger than the guard jumped over it, or a stack without
 * a guard ran past its canary). What the stray frame then faults on is not
 * ours to know: unmapped space below a stack of its own mapping or below a
 * slab, or, below a slab slot, its neighbour's guard region - the
 * neighbour's stack itself does not fault, and is corrupted unseen. */
static bool is_overflow(const weft__coro *co, const siginfo_t *si, const void *uctx)
{
  if (!co)
    return false;
  uintptr_t lo = (uintptr_t)co->stack.map, base = (uintptr_t)co->stack.base;
  uintptr_t addr = (uintptr_t)si->si_addr;
  if (addr >= lo && addr < lo + co->stack.guard)
    return true;
#if defined(__x86_64__)
  const ucontext_t *uc = uctx;
  uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
  if (sp < base && sp + ((uintptr_t)1 << 20) >= lo)
    return true;
#else
  (void)uctx;
#endif
  return false;
}

static void on_segv(int sig, siginfo_t *si, void *uctx)
{
  int saved = errno;
  const weft__coro *co = weft__overflow_current();
  if (is_overflow(co, si, uctx))
    weft__overflow_report(co, NULL);

  /* Not ours: hand it on exactly as the previous disposition would. */
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) {
      previous.sa_sigaction(sig, si, uctx);
      errno = saved;
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    errno = saved;
    return;
  } else if (previous.sa_handler == SIG_IGN && si && si->si_code <= 0) {
    /* Sent by kill(2) or raise(3) to a process that ignored SIGSEGV: it
     * stays ignored. (A real fault cannot be ignored: the kernel kills
     * with the default action, as below.) */
    errno = saved;
    return;
  }
  /* Default action: reinstall it and return; the faulting instruction runs
   * again and the kernel delivers the signal with the default action. A
   * signal sent by kill(2) or raise(3) (si_code <= 0) has no instruction
   * to run again: it is raised anew, or the process would carry on - with
   * this handler gone. */
  signal(sig, SIG_DFL);
  if (si && si->si_code <= 0)
    raise(sig);
  errno = saved;
}

/* At thread exit. Another destructor may still run a coroutine on this
 * thread after this one: it must find the thread not ready, so that
 * weft__coro_thread_init gives it a signal stack again (glibc then runs
 * this destructor once more). */
static void altstack_free(void *p)
{
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  munmap(p, ALTSTACK_SIZE);
  weft__coro_thread_ready = false;
}

/* Whether altstack_key exists: without it a thread's signal stack would
 * never be freed (a leak per thread), though overflows are still caught. */
static bool altstack_key_made;

static void install_handler(void)
{
  altstack_key_made = pthread_key_create(&altstack_key, altstack_free) == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous);
}

int weft__coro_thread_init(void)
{
  if (weft__coro_thread_ready)
    return 0;
  pthread_once(&handler_once, install_handler);
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE) && cur.ss_size >= ALTSTACK_SIZE) {
    weft__coro_thread_ready = true; /* the application already gave this thread one */
    return 0;
  }
  void *p = mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return -ENOMEM;
  stack_t ss = {.ss_sp = p, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) {
    munmap(p, ALTSTACK_SIZE);
    return -errno;
  }
  if (altstack_key_made)
    pthread_setspecific(altstack_key, p);
  weft__coro_thread_ready = true;
  return 0;
}
