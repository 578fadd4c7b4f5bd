/* SPDX-License-Identifier: MIT */
/*
 * Suite "chan", part 1 - weft_chan's single operations: argument errors and
 * -ENOMEM by fault injection, buffer FIFO and try variants on a plain
 * thread, reference counting, FIFO per producer with several producers and
 * consumers (capacity 0, 1, N), rendezvous hand-over, close (drain, then
 * -EPIPE; blocked senders and receivers woken), deadlines and cancellation
 * with nothing transferred - with membarrier, without it, refused for want
 * of memory, and forbidden by a seccomp filter after registration. weft_select is in test_chan_select.c; two
 * shards mixed with plain threads and runtime shutdown in test_chan_shards.c.
 */
#include "chan_test.h"
#include "fence.h"

#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/membarrier.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* ---- arguments and faults ------------------------------------------------------------ */

/* Under ASan, an allocation the system refuses returns NULL, as malloc's
 * does, instead of stopping the process (chan/real_enomem_leaves_errno). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
  return "allocator_may_return_null=1";
}

/* A channel the system has no memory for (a petabyte): -ENOMEM, from a
 * real malloc failure - which sets errno in glibc - and errno is still the
 * caller's (weft/common.h: no weft call touches it). */
Test(chan, real_enomem_leaves_errno, .timeout = 20)
{
  weft_chan *c = NULL;
  errno = 4242;
  cr_assert_eq(weft_chan_create(&c, 1, (size_t)1 << 50), -ENOMEM);
  cr_assert_eq(errno, 4242);
  cr_assert_null(c);
}

Test(chan, bad_arguments_are_einval, .timeout = 20)
{
  weft_chan *c = (weft_chan *)(void *)&c;
  cr_assert_eq(weft_chan_create(NULL, 8, 1), -EINVAL);
  cr_assert_eq(weft_chan_create(&c, 0, 1), -EINVAL);
  cr_assert_eq(weft_chan_create(&c, 0, 0), -EINVAL);
  cr_assert_eq(weft_chan_create(&c, SIZE_MAX / 2, 4), -EINVAL);
  cr_assert_eq(weft_chan_create(&c, 8, SIZE_MAX / 4), -EINVAL);
  cr_assert_eq(c, (weft_chan *)(void *)&c, "*c written on failure");

  uint64_t v = 1;
  cr_assert_eq(weft_chan_send(NULL, &v), -EINVAL);
  cr_assert_eq(weft_chan_send_dl(NULL, &v, -1), -EINVAL);
  cr_assert_eq(weft_chan_try_send(NULL, &v), -EINVAL);
  cr_assert_eq(weft_chan_recv(NULL, &v), -EINVAL);
  cr_assert_eq(weft_chan_recv_dl(NULL, &v, -1), -EINVAL);
  cr_assert_eq(weft_chan_try_recv(NULL, &v), -EINVAL);
  cr_assert_eq(weft_chan_close(NULL), -EINVAL);
  cr_assert(!weft_chan_is_closed(NULL));
  cr_assert_eq(weft_chan_len(NULL), 0);
  cr_assert_eq(weft_chan_cap(NULL), 0);
  cr_assert_eq(weft_chan_elem_size(NULL), 0);
  cr_assert_null(weft_chan_ref(NULL));
  weft_chan_unref(NULL);

  cr_assert_eq(weft_chan_create(&c, 8, 2), 0);
  cr_assert_eq(weft_chan_cap(c), 2);
  cr_assert_eq(weft_chan_elem_size(c), 8);
  cr_assert_eq(weft_chan_send(c, NULL), -EINVAL);
  cr_assert_eq(weft_chan_try_send(c, NULL), -EINVAL);
  cr_assert_eq(weft_chan_len(c), 0);

  /* select: NULL cases, bad op, send with NULL elem; nothing happens. */
  cr_assert_eq(weft_select(NULL, 1, 0), -EINVAL);
  weft_select_case k[2] = {weft_select_send(c, &v), weft_select_recv(c, &v)};
  k[1].op = 7;
  cr_assert_eq(weft_select(k, 2, 0), -EINVAL);
  k[1] = weft_select_send(c, NULL);
  cr_assert_eq(weft_select(k, 2, 0), -EINVAL);
  cr_assert_eq(weft_chan_len(c), 0);
  /* Nothing to poll: -EAGAIN; all cases disabled likewise. */
  cr_assert_eq(weft_select(NULL, 0, 0), -EAGAIN);
  k[0].chan = k[1].chan = NULL;
  cr_assert_eq(weft_select(k, 2, 0), -EAGAIN);
  cr_assert_eq(weft_select(k, 2, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  weft_chan_unref(c);
}

Test(chan, enomem_by_fault_injection, .timeout = 20)
{
  weft_chan *c = (weft_chan *)(void *)&c;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int r = weft_chan_create(&c, 8, 4);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  cr_assert_eq(r, -ENOMEM);
  cr_assert_eq(c, (weft_chan *)(void *)&c, "*c written on failure");

  /* A select of more cases than fit on the stack needs a heap block. */
  cr_assert_eq(weft_chan_create(&c, 8, 4), 0);
  uint64_t v = 42, got[20];
  cr_assert_eq(weft_chan_send(c, &v), 0);
  weft_select_case k[20];
  for (int i = 0; i < 20; i++)
    k[i] = weft_select_recv(c, &got[i]);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  r = weft_select(k, 20, WEFT_NO_DEADLINE);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  cr_assert_eq(r, -ENOMEM);
  cr_assert_eq(weft_chan_len(c), 1, "nothing may be taken on -ENOMEM");
  r = weft_select(k, 20, WEFT_NO_DEADLINE);
  cr_assert(r >= 0 && r < 20);
  cr_assert_eq(k[r].result, 0);
  cr_assert_eq(got[r], 42);
  cr_assert_eq(weft_chan_len(c), 0);
  weft_chan_unref(c);
  rt_assert_no_leaks();
}

/* A deadline needs a timer: the first one a shard arms allocates its heap.
 * Without memory for it a waiting send, receive or select is -ENOMEM, with
 * nothing transferred and nobody left queued. */
static void *timer_enomem_main(void *arg)
{
  (void)arg;
  weft_chan *c;
  CO_EQ(weft_chan_create(&c, sizeof(uint64_t), 1), 0);
  uint64_t v = 5, got = 0;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_chan_recv_dl(c, &got, weft_now() + WEFT_SEC), -ENOMEM);
  CO_CHECK(chan_queues_empty(c));
  CO_EQ(weft_chan_send(c, &v), 0); /* full now */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_chan_send_dl(c, &v, weft_now() + WEFT_SEC), -ENOMEM);
  CO_CHECK(chan_queues_empty(c));
  CO_EQ(weft_chan_len(c), 1);
  weft_select_case k[1] = {weft_select_send(c, &v)};
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  CO_EQ(weft_select(k, 1, weft_now() + WEFT_SEC), -ENOMEM);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_CHECK(chan_queues_empty(c));
  CO_EQ(weft_chan_len(c), 1);
  CO_EQ(weft_chan_try_recv(c, &got), 0);
  CO_EQ(got, 5);
  /* With memory, the same wait times out. */
  CO_EQ(weft_chan_recv_dl(c, &got, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  weft_chan_unref(c);
  return NULL;
}

Test(chan, deadline_without_memory_for_its_timer_is_enomem, .timeout = 20)
{
  rt_run(1, timer_enomem_main, NULL);
  rt_assert_clean();
}

/* More cases than an int can number: refused before any case is read. */
Test(chan, select_of_more_than_int_max_cases_is_einval, .timeout = 20)
{
  weft_select_case k[1];
  cr_assert_eq(weft_select(k, (size_t)INT_MAX + 1, 0), -EINVAL);
}

/* ---- plain-thread basics: buffer, try variants, sizes --------------------------------- */

Test(chan, buffer_fifo_and_try_variants_on_a_thread, .timeout = 20)
{
  static const size_t sizes[] = {1, 8, 1000};
  static const size_t caps[] = {1, 5};
  for (size_t si = 0; si < 3; si++)
    for (size_t ci = 0; ci < 2; ci++) {
      size_t sz = sizes[si], cap = caps[ci];
      weft_chan *c;
      cr_assert_eq(weft_chan_create(&c, sz, cap), 0);
      unsigned char in[1001], out[1001]; /* one more: the byte after an element */
      cr_assert_eq(weft_chan_try_recv(c, out), -EAGAIN);
      for (unsigned round = 0; round < 3; round++) {
        for (size_t i = 0; i < cap; i++) {
          fill_pattern(in, sz, round * 10 + (unsigned)i);
          cr_assert_eq(weft_chan_try_send(c, in), 0);
          cr_assert_eq(weft_chan_len(c), i + 1);
        }
        cr_assert_eq(weft_chan_try_send(c, in), -EAGAIN);
        cr_assert_eq(weft_chan_send_dl(c, in, weft_now() - 1), -ETIMEDOUT);
        cr_assert_eq(weft_chan_len(c), cap);
        for (size_t i = 0; i < cap; i++) {
          memset(out, 0xee, sizeof(out));
          cr_assert_eq(weft_chan_try_recv(c, out), 0);
          cr_assert(check_pattern(out, sz, round * 10 + (unsigned)i), "size %zu item %zu", sz, i);
          cr_assert_eq(out[sz], 0xee, "overwrite");
        }
        cr_assert_eq(weft_chan_try_recv(c, out), -EAGAIN);
        cr_assert_eq(weft_chan_recv_dl(c, out, weft_now() - 1), -ETIMEDOUT);
      }
      /* A receive into NULL drops the element. */
      cr_assert_eq(weft_chan_try_send(c, in), 0);
      cr_assert_eq(weft_chan_try_recv(c, NULL), 0);
      cr_assert_eq(weft_chan_len(c), 0);
      weft_chan_unref(c);
    }
}

Test(chan, references_keep_the_channel, .timeout = 20)
{
  weft_chan *c;
  cr_assert_eq(weft_chan_create(&c, 4, 2), 0);
  cr_assert_eq(weft_chan_ref(c), c);
  cr_assert_eq(weft_chan_ref(c), c);
  uint32_t v = 7;
  cr_assert_eq(weft_chan_send(c, &v), 0);
  weft_chan_unref(c);
  weft_chan_unref(c);
  /* The creator's reference is the last: the channel still works. */
  cr_assert_eq(weft_chan_recv(c, &v), 0);
  cr_assert_eq(v, 7);
  cr_assert_eq(weft_chan_send(c, &v), 0); /* buffered elements go with it */
  weft_chan_unref(c);
  rt_assert_no_leaks();
}

/* ---- FIFO per producer, several producers and consumers -------------------------------- */

#define NPROD 4
#define NCONS 3
#define PER_PROD 3000

struct fifo {
  weft_chan *c;
  atomic_int next_id;
  atomic_int seen[NPROD][PER_PROD]; /* times each element was received */
  int64_t sum;                      /* consumers' sums (atomic add) */
};

static void *fifo_producer(void *arg)
{
  struct fifo *f = arg;
  uint64_t id = (uint64_t)atomic_fetch_add(&f->next_id, 1);
  for (uint64_t s = 0; s < PER_PROD; s++) {
    uint64_t v = id << 32 | s;
    CO_EQ(weft_chan_send(f->c, &v), 0);
  }
  weft_chan_unref(f->c);
  return NULL;
}

static void *fifo_consumer(void *arg)
{
  struct fifo *f = arg;
  int64_t last[NPROD], sum = 0;
  for (int i = 0; i < NPROD; i++)
    last[i] = -1;
  uint64_t v;
  int r;
  while ((r = weft_chan_recv(f->c, &v)) == 0) {
    unsigned id = (unsigned)(v >> 32);
    int64_t s = (int64_t)(v & 0xffffffffu);
    CO_CHECK(id < NPROD && s < PER_PROD);
    if (id >= NPROD || s >= PER_PROD)
      break;
    CO_CHECK(s > last[id]); /* per-producer order, as this consumer sees it */
    last[id] = s;
    atomic_fetch_add(&f->seen[id][s], 1);
    sum += s;
  }
  CO_EQ(r, -EPIPE);
  __atomic_fetch_add(&f->sum, sum, __ATOMIC_RELAXED);
  weft_chan_unref(f->c);
  return NULL;
}

static void *fifo_main(void *arg)
{
  size_t cap = (size_t)(uintptr_t)arg;
  struct fifo *f = calloc(1, sizeof(*f));
  CO_CHECK(f);
  CO_EQ(weft_chan_create(&f->c, sizeof(uint64_t), cap), 0);
  weft_task *p[NPROD], *q[NCONS];
  /* Each task gets its own reference, taken before it can run. */
  for (int i = 0; i < NCONS; i++) {
    weft_chan_ref(f->c);
    q[i] = spawn_on(i % 2, fifo_consumer, f);
  }
  for (int i = 0; i < NPROD; i++) {
    weft_chan_ref(f->c);
    p[i] = spawn_on((i + 1) % 2, fifo_producer, f);
  }
  for (int i = 0; i < NPROD; i++)
    CO_EQ(rt_join_int(p[i]), 0);
  CO_EQ(weft_chan_close(f->c), 0);
  for (int i = 0; i < NCONS; i++)
    CO_EQ(rt_join_int(q[i]), 0);
  for (int i = 0; i < NPROD; i++)
    for (int s = 0; s < PER_PROD; s++)
      if (atomic_load(&f->seen[i][s]) != 1) {
        CO_EQ(atomic_load(&f->seen[i][s]), 1);
        i = NPROD;
        break;
      }
  CO_EQ(f->sum, (int64_t)NPROD * PER_PROD * (PER_PROD - 1) / 2);
  CO_EQ(weft_chan_len(f->c), 0);
  weft_chan_unref(f->c);
  free(f);
  return NULL;
}

Test(chan, fifo_per_producer_rendezvous, .timeout = 60)
{
  rt_run(2, fifo_main, (void *)(uintptr_t)0);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(chan, fifo_per_producer_capacity_1, .timeout = 60)
{
  rt_run(2, fifo_main, (void *)(uintptr_t)1);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(chan, fifo_per_producer_capacity_n, .timeout = 60)
{
  rt_run(2, fifo_main, (void *)(uintptr_t)16);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- rendezvous --------------------------------------------------------------------------- */

static void *rendezvous_main(void *arg)
{
  (void)arg;
  weft_chan *c;
  CO_EQ(weft_chan_create(&c, sizeof(uint64_t), 0), 0);
  uint64_t v = 5;
  CO_EQ(weft_chan_try_send(c, &v), -EAGAIN); /* nobody receives */
  CO_EQ(weft_chan_try_recv(c, &v), -EAGAIN);
  for (int shard = 0; shard < 2; shard++) {
    /* The send waits until a receiver takes the element. */
    struct one o = {.c = c, .v = 77 + (uint64_t)shard, .deadline = -1};
    weft_task *t = spawn_on(shard, send_one, &o);
    wait_suspended(1);
    CO_EQ(weft_sleep(2 * WEFT_MSEC), 0);
    CO_EQ(atomic_load(&o.done), 0);
    CO_EQ(weft_chan_len(c), 0);
    uint64_t got = 0;
    CO_EQ(shard ? weft_chan_recv(c, &got) : weft_chan_try_recv(c, &got), 0);
    CO_EQ(got, 77 + shard);
    CO_EQ(rt_join_int(t), 0);
    CO_EQ(atomic_load(&o.done), 1);

    /* A waiting receiver makes try_send succeed. */
    struct one r = {.c = c, .deadline = -1};
    t = spawn_on(shard, recv_one, &r);
    wait_suspended(1);
    v = 1234;
    CO_EQ(weft_chan_try_send(c, &v), 0);
    CO_EQ(rt_join_int(t), 0);
    CO_EQ(r.v, 1234);
    CO_EQ(weft_chan_try_send(c, &v), -EAGAIN);
  }
  weft_chan_unref(c);
  return NULL;
}

Test(chan, rendezvous_send_completes_only_when_received, .timeout = 30)
{
  rt_run(2, rendezvous_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- close ---------------------------------------------------------------------------------- */

static void *close_main(void *arg)
{
  (void)arg;
  weft_chan *c;
  CO_EQ(weft_chan_create(&c, sizeof(uint64_t), 3), 0);
  for (uint64_t i = 1; i <= 3; i++)
    CO_EQ(weft_chan_send(c, &i), 0);
  /* Two senders blocked on the full buffer (one per shard). */
  struct one s[2] = {{.c = c, .v = 100, .deadline = -1}, {.c = c, .v = 200, .deadline = -1}};
  weft_task *ts[2] = {spawn_on(0, send_one, &s[0]), spawn_on(1, send_one, &s[1])};
  wait_suspended(2);
  CO_CHECK(!weft_chan_is_closed(c));
  CO_EQ(weft_chan_close(c), 0);
  CO_CHECK(weft_chan_is_closed(c));
  CO_EQ(rt_join_int(ts[0]), -EPIPE);
  CO_EQ(rt_join_int(ts[1]), -EPIPE);
  uint64_t v = 9;
  CO_EQ(weft_chan_send(c, &v), -EPIPE);
  CO_EQ(weft_chan_try_send(c, &v), -EPIPE);
  CO_EQ(weft_chan_send_dl(c, &v, weft_now() + WEFT_SEC), -EPIPE);
  CO_EQ(weft_chan_close(c), 0); /* idempotent */
  CO_EQ(weft_chan_len(c), 3);
  /* Drained in order - the blocked senders' elements never got in - then
   * -EPIPE for every kind of receive. */
  for (uint64_t i = 1; i <= 3; i++) {
    CO_EQ(i == 2 ? weft_chan_try_recv(c, &v) : weft_chan_recv(c, &v), 0);
    CO_EQ(v, i);
  }
  CO_EQ(weft_chan_recv(c, &v), -EPIPE);
  CO_EQ(weft_chan_try_recv(c, &v), -EPIPE);
  CO_EQ(weft_chan_recv_dl(c, &v, weft_now() + WEFT_SEC), -EPIPE);
  weft_chan_unref(c);

  /* Receivers blocked on an empty channel (buffered and rendezvous). */
  for (size_t cap = 0; cap < 2; cap++) {
    CO_EQ(weft_chan_create(&c, sizeof(uint64_t), cap), 0);
    struct one r[2] = {{.c = c, .deadline = -1}, {.c = c, .deadline = weft_now() + 60 * WEFT_SEC}};
    weft_task *tr[2] = {spawn_on(1, recv_one, &r[0]), spawn_on(0, recv_one, &r[1])};
    wait_suspended(2);
    CO_EQ(weft_chan_close(c), 0);
    CO_EQ(rt_join_int(tr[0]), -EPIPE);
    CO_EQ(rt_join_int(tr[1]), -EPIPE);
    /* A blocked rendezvous sender gets -EPIPE too. */
    weft_chan_unref(c);
    CO_EQ(weft_chan_create(&c, sizeof(uint64_t), cap), 0);
    if (cap == 1)
      CO_EQ(weft_chan_send(c, &v), 0);
    struct one s1 = {.c = c, .v = 5, .deadline = -1};
    weft_task *t = spawn_on(1, send_one, &s1);
    wait_suspended(1);
    CO_EQ(weft_chan_close(c), 0);
    CO_EQ(rt_join_int(t), -EPIPE);
    CO_EQ(weft_chan_len(c), cap);
    CO_EQ(weft_chan_try_recv(c, &v), cap ? 0 : -EPIPE);
    CO_EQ(weft_chan_try_recv(c, &v), -EPIPE);
    weft_chan_unref(c);
  }
  return NULL;
}

Test(chan, close_drains_then_epipe_and_wakes_everyone, .timeout = 30)
{
  rt_run(2, close_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- deadlines --------------------------------------------------------------------------- */

static void check_deadlines(void)
{
  for (size_t cap = 0; cap < 3; cap += 2) {
    weft_chan *c;
    CO_EQ(weft_chan_create(&c, sizeof(uint64_t), cap), 0);
    uint64_t v = 0;
    int64_t dl = weft_now() + 2 * WEFT_MSEC;
    CO_EQ(weft_chan_recv_dl(c, &v, dl), -ETIMEDOUT);
    CO_CHECK(weft_now() >= dl);
    CO_CHECK(chan_queues_empty(c));
    CO_EQ(weft_chan_recv_dl(c, &v, 0), -ETIMEDOUT);
    /* Fill, then a send times out and leaves the buffer as it was. */
    for (uint64_t i = 0; i < cap; i++)
      CO_EQ(weft_chan_send_dl(c, &i, weft_now() - 1), 0); /* ready: no timeout */
    v = 99;
    dl = weft_now() + 2 * WEFT_MSEC;
    CO_EQ(weft_chan_send_dl(c, &v, dl), -ETIMEDOUT);
    CO_CHECK(weft_now() >= dl);
    CO_CHECK(chan_queues_empty(c));
    CO_EQ(weft_chan_len(c), cap);
    for (uint64_t i = 0; i < cap; i++) {
      CO_EQ(weft_chan_recv_dl(c, &v, weft_now() - 1), 0);
      CO_EQ(v, i);
    }
    CO_EQ(weft_chan_try_recv(c, &v), -EAGAIN); /* the timed-out element is not there */
    /* Select: nothing happens either. */
    weft_select_case k[2] = {weft_select_recv(c, &v), weft_select_recv(c, &v)};
    dl = weft_now() + 2 * WEFT_MSEC;
    CO_EQ(weft_select(k, 2, dl), -ETIMEDOUT);
    CO_CHECK(weft_now() >= dl);
    CO_CHECK(chan_queues_empty(c));
    CO_EQ(weft_select(k, 2, weft_now() - 1), -ETIMEDOUT);
    CO_EQ(weft_select(k, 2, 0), -EAGAIN);
    weft_chan_unref(c);
  }
}

static void *deadline_main(void *arg)
{
  (void)arg;
  check_deadlines();
  /* The task's deadline scope bounds the waits too. */
  weft_chan *c;
  CO_EQ(weft_chan_create(&c, 1, 1), 0);
  char b = 0;
  int64_t saved = weft_deadline_push(weft_now() + 2 * WEFT_MSEC);
  CO_EQ(weft_chan_recv(c, &b), -ETIMEDOUT);
  weft_deadline_pop(saved);
  weft_chan_unref(c);
  return NULL;
}

Test(chan, deadlines_time_out_with_nothing_transferred, .timeout = 30)
{
  rt_run(2, deadline_main, NULL);
  rt_assert_clean();
  check_deadlines(); /* a plain thread: the futex path */
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- cancellation ------------------------------------------------------------------------ */

struct canc {
  weft_chan *a, *b;
  int kind; /* 0 recv, 1 send, 2 select */
  atomic_int arrived;
  int after; /* a blocking call made after the cancel */
  int try_after;
};

static void *canc_body(void *arg)
{
  struct canc *k = arg;
  uint64_t v = 555;
  int r;
  atomic_store(&k->arrived, 1);
  if (k->kind == 0) {
    r = weft_chan_recv(k->a, &v);
  } else if (k->kind == 1) {
    r = weft_chan_send(k->a, &v);
  } else {
    weft_select_case c[2] = {weft_select_recv(k->a, &v), weft_select_send(k->b, &v)};
    r = weft_select(c, 2, weft_now() + 60 * WEFT_SEC);
  }
  /* Later blocking calls end at once, even when they could proceed; the
   * try variants still work. */
  k->after = weft_chan_send(k->b, &v);
  k->try_after = weft_chan_try_send(k->b, &v);
  return (void *)(intptr_t)r;
}

static void cancel_case(weft_runtime *rt, int kind, int shard, size_t cap_b)
{
  struct canc k = {.kind = kind};
  CO_EQ(weft_chan_create(&k.a, sizeof(uint64_t), 0), 0);
  CO_EQ(weft_chan_create(&k.b, sizeof(uint64_t), cap_b), 0);
  uint64_t fill = 1;
  if (kind == 2)
    for (size_t i = 0; i < cap_b; i++)
      CO_EQ(weft_chan_try_send(k.b, &fill), 0); /* the select's send case is blocked */
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = shard;
  weft_task *t;
  CO_EQ(weft_runtime_submit(rt, &o, canc_body, &k, &t), 0);
  CO_CHECK(RT_POLL(atomic_load(&k.arrived) == 1));
  CO_CHECK(RT_POLL(rt_dump_count(rt, " waiting") == 1));
  CO_EQ(weft_cancel(t), 0);
  void *v = NULL;
  CO_EQ(weft_join(t, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  CO_EQ(k.after, -ECANCELED);
  if (kind == 2) {
    CO_EQ(k.try_after, -EAGAIN); /* b is still full */
    CO_EQ(weft_chan_len(k.b), cap_b);
  } else {
    /* b has room for one (cap 1) in the recv/send cases. */
    CO_EQ(k.try_after, cap_b ? 0 : -EAGAIN);
  }
  /* Nothing was transferred: a is empty, and an element sent now stays
   * for a new receiver (nobody is queued any more). */
  CO_CHECK(chan_queues_empty(k.a));
  CO_CHECK(chan_queues_empty(k.b));
  uint64_t x = 0;
  CO_EQ(weft_chan_try_recv(k.a, &x), -EAGAIN);
  CO_EQ(weft_chan_try_send(k.a, &x), -EAGAIN);
  weft_chan_unref(k.a);
  weft_chan_unref(k.b);
}

static void cancel_all(weft_runtime *rt)
{
  for (int kind = 0; kind < 3; kind++)
    for (int shard = 0; shard < 2; shard++)
      cancel_case(rt, kind, shard, kind == 2 ? 2 : 1);
}

static void *cancel_main(void *arg)
{
  (void)arg;
  cancel_all(weft_runtime_current());
  return NULL;
}

Test(chan, cancellation_is_ecanceled_with_nothing_transferred, .timeout = 45)
{
  rt_run(2, cancel_main, NULL); /* cancelled by a coroutine */
  rt_assert_clean();
  weft_runtime *rt = rt_start(2); /* cancelled by a plain thread */
  cancel_all(rt);
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* The same where the kernel has no membarrier: waiters and cancellers then
 * both use real fences (lib/fence.h). Each test is its own process, so the
 * mode forced here holds for this test only. */
Test(chan, cancellation_with_symmetric_fences, .timeout = 45)
{
  weft__fence_force_symmetric();
  rt_run(2, cancel_main, NULL);
  cr_assert(!atomic_load(&weft__fence_asymmetric), "a runtime start turned them back on");
  weft_runtime *rt = rt_start(2);
  cancel_all(rt);
  rt_stop_idle(rt);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A canceller's membarrier refused for want of memory (the kernel allocates
 * per call): it waits and tries again - the barrier cannot be skipped, nor
 * may the process abort. */
Test(chan, cancellation_survives_a_refused_membarrier, .timeout = 45)
{
  weft_runtime *rt = rt_start(2);
  weft__fault_arm(WEFT__FAULT_MEMBARRIER, 1);
  cancel_all(rt);
  if (atomic_load(&weft__fence_asymmetric))
    cr_assert_eq(atomic_load(&weft__fault_countdown[WEFT__FAULT_MEMBARRIER]), 0,
                 "no cancel went through the membarrier");
  weft__fault_arm(WEFT__FAULT_MEMBARRIER, 0);
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* Installs, on every thread of the process, a seccomp filter under which
 * membarrier(2) fails with EPERM - what a server that sandboxes itself
 * once started does to a library that registered before. False where
 * seccomp filters cannot be installed. */
static bool forbid_membarrier(void)
{
#if defined(__x86_64__)
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0;
#else
  return false;
#endif
}

/* membarrier forbidden after the runtime registered for it (a seccomp
 * filter installed once the server runs): cancellation still works - the
 * canceller's barrier is then a TLB shootdown - and the process does not
 * abort. */
Test(chan, cancellation_after_membarrier_is_forbidden, .timeout = 45)
{
  weft_runtime *rt = rt_start(2);
  if (!atomic_load(&weft__fence_asymmetric)) {
    rt_stop_idle(rt);
    cr_skip_test("membarrier is not registered here: fences are symmetric already");
  }
  if (!forbid_membarrier()) {
    rt_stop_idle(rt);
    cr_skip_test("cannot install a seccomp filter here");
  }
  cr_assert_eq(syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0), -1);
  cr_assert_eq(errno, EPERM);
  cancel_all(rt);
  cr_assert_gt(atomic_load(&weft__fence_shootdowns), 0, "no cancel took the fallback");
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

