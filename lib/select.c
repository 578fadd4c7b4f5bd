/* SPDX-License-Identifier: MIT */
/*
 * weft_select: wait for the first of several channel operations.
 *
 * The select takes the locks of all its channels (in address order, each
 * channel once), looks at the cases in a random order and performs the first
 * one that is ready. If none is, it queues one node per case - all sharing
 * one waiter - before it drops the locks, so no peer can slip in between the
 * look and the queueing, and the select never meets its own nodes while it
 * looks (they are queued only when the look found nothing). Then it waits:
 * the peer that claims the waiter performs that node's operation and records
 * the case index; a deadline or cancellation claims it with nothing done.
 * Afterwards the select unlinks its remaining nodes one channel lock at a
 * time. Only a select ever holds two channel locks, always in address order,
 * so there is no deadlock; everything else holds one.
 *
 * The random order is a fresh permutation per call (Fisher-Yates from a
 * per-thread xorshift), so among the ready cases each is equally likely.
 */
#include "chan_internal.h"

#include "../coro/fault.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

/* Cases handled with storage on the stack; more need one heap block. */
#define SELECT_STACK_CASES 16

/* Per-thread xorshift64*. Not inlined, and the state's address is never kept
 * across a suspension: a stealable task may resume on another thread. */
__attribute__((noinline)) static uint32_t select_rand(void)
{
  static _Thread_local uint64_t s;
  uint64_t x = s;
  if (__builtin_expect(x == 0, 0))
    x = ((uint64_t)(uintptr_t)&s * 0x9e3779b97f4a7c15ull) ^ (uint64_t)weft__now() ^ 1;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  s = x;
  return (uint32_t)((x * 0x2545f4914f6cdd1dull) >> 32);
}

/* Uniform in [0, n) (n <= 2^32), by multiply-shift. */
static inline uint32_t rand_below(uint32_t n)
{
  return (uint32_t)(((uint64_t)select_rand() * n) >> 32);
}

static int cmp_chan(const void *a, const void *b)
{
  uintptr_t x = (uintptr_t) * (weft_chan *const *)a, y = (uintptr_t) * (weft_chan *const *)b;
  return (x > y) - (x < y);
}

/* Sorts the m channels by address and drops repeats; returns how many are
 * left. Insertion sort for the usual handful, qsort beyond. */
static size_t lock_order(weft_chan **ch, size_t m)
{
  if (m > SELECT_STACK_CASES) {
    qsort(ch, m, sizeof(*ch), cmp_chan);
  } else {
    for (size_t i = 1; i < m; i++) {
      weft_chan *c = ch[i];
      size_t j = i;
      for (; j > 0 && (uintptr_t)ch[j - 1] > (uintptr_t)c; j--)
        ch[j] = ch[j - 1];
      ch[j] = c;
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < m; i++)
    if (k == 0 || ch[k - 1] != ch[i])
      ch[k++] = ch[i];
  return k;
}

static void lock_all(weft_chan **ch, size_t m)
{
  for (size_t i = 0; i < m; i++)
    weft__spin_lock(&ch[i]->lock);
}

static void unlock_all(weft_chan **ch, size_t m)
{
  for (size_t i = m; i-- > 0;)
    weft__spin_unlock(&ch[i]->lock);
}

static weft__chan_queue *queue_of(weft_select_case *k)
{
  return k->op == WEFT_SELECT_SEND ? &k->chan->sendq : &k->chan->recvq;
}

/* The storage one select needs: a node and a lock slot per case, and the
 * visiting order. */
struct select_mem {
  weft__chan_node *nodes;
  weft_chan **locks;
  uint32_t *order;
};

static int select_mem_get(struct select_mem *m, size_t n, void *stack_block)
{
  void *p = stack_block;
  if (n > SELECT_STACK_CASES) {
    p = weft__malloc(n * (sizeof(weft__chan_node) + sizeof(weft_chan *) + sizeof(uint32_t)));
    if (!p)
      return -ENOMEM;
  }
  m->nodes = p;
  m->locks = (weft_chan **)(void *)(m->nodes + n);
  m->order = (uint32_t *)(void *)(m->locks + n);
  return 0;
}

/* Checks the cases; returns the number of enabled ones or -EINVAL. */
static int check_cases(const weft_select_case *cases, size_t n)
{
  if (n > 0 && !cases)
    return -EINVAL;
  if (n > INT_MAX)
    return -EINVAL;
  int enabled = 0;
  for (size_t i = 0; i < n; i++) {
    const weft_select_case *k = &cases[i];
    if (!k->chan)
      continue;
    if (k->op != WEFT_SELECT_SEND && k->op != WEFT_SELECT_RECV)
      return -EINVAL;
    if (k->op == WEFT_SELECT_SEND && !k->elem)
      return -EINVAL;
    enabled++;
  }
  return enabled;
}

/* Looks at the cases (all locks held) in m->order and performs the first
 * ready one. Returns its index (result stored in the case) or -1. */
static int poll_cases(weft_select_case *cases, size_t n, struct select_mem *m,
                      weft__waiter **wake)
{
  for (size_t i = 0; i < n; i++) {
    /* Inside-out Fisher-Yates: order[0..i] is a uniform permutation. */
    uint32_t j = rand_below((uint32_t)i + 1);
    if (j != i)
      m->order[i] = m->order[j]; /* order[i] itself is not set yet */
    m->order[j] = (uint32_t)i;
  }
  for (size_t i = 0; i < n; i++) {
    weft_select_case *k = &cases[m->order[i]];
    if (!k->chan)
      continue;
    int r = k->op == WEFT_SELECT_SEND ? weft__chan_send_locked(k->chan, k->elem, wake)
                                      : weft__chan_recv_locked(k->chan, k->elem, wake);
    if (r != -EAGAIN) {
      k->result = r;
      return (int)m->order[i];
    }
  }
  return -1;
}

int weft_select(weft_select_case *cases, size_t n, int64_t deadline)
{
  int enabled = check_cases(cases, n);
  if (enabled < 0)
    return enabled;
  bool poll = deadline == 0;
  if (!poll && weft__self_cancelled())
    return -ECANCELED;

  /* One block on the stack covers the usual small select. */
  _Alignas(weft__chan_node) unsigned char
      stack_block[SELECT_STACK_CASES *
                  (sizeof(weft__chan_node) + sizeof(weft_chan *) + sizeof(uint32_t))];
  struct select_mem m;
  int ret = select_mem_get(&m, n, stack_block);
  if (ret < 0)
    return ret;

  size_t nl = 0;
  for (size_t i = 0; i < n; i++)
    if (cases[i].chan)
      m.locks[nl++] = cases[i].chan;
  nl = lock_order(m.locks, nl);
  lock_all(m.locks, nl);

  weft__waiter *wake = NULL;
  ret = poll_cases(cases, n, &m, &wake);
  if (ret >= 0 || poll || (deadline > 0 && deadline <= weft__now())) {
    unlock_all(m.locks, nl);
    if (wake)
      weft__waiter_complete(wake, 0);
    if (ret < 0)
      ret = poll ? -EAGAIN : -ETIMEDOUT;
    goto out;
  }

  weft__waiter w;
  weft__waiter_init(&w);
  for (size_t i = 0; i < n; i++) {
    if (!cases[i].chan)
      continue;
    m.nodes[i] = (weft__chan_node){.w = &w, .elem = cases[i].elem, .index = (unsigned)i};
    weft__chan_enqueue(queue_of(&cases[i]), &m.nodes[i]);
  }
  unlock_all(m.locks, nl);

  int r = weft__waiter_wait(&w, deadline);

  /* Whoever claimed w unlinked its node; peers unlinked some stale ones.
   * The rest are ours to unlink, under their locks: a peer may be looking at
   * them right now. */
  for (size_t i = 0; i < n; i++) {
    if (!cases[i].chan)
      continue;
    weft__spin_lock(&cases[i].chan->lock);
    if (m.nodes[i].queued)
      weft__chan_unlink(queue_of(&cases[i]), &m.nodes[i]);
    weft__spin_unlock(&cases[i].chan->lock);
  }
  if (r == 0 || r == -EPIPE) {
    ret = (int)w.data;
    cases[ret].result = r;
  } else {
    ret = r;
  }
out:
  if (n > SELECT_STACK_CASES)
    free(m.nodes);
  return ret;
}
