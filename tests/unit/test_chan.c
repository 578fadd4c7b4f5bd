/* SPDX-License-Identifier: MIT */
/*
 * Suite "chan": weft_chan and weft_select. Exact results throughout: FIFO
 * per producer with several producers (capacity 0, 1, N), rendezvous
 * hand-over, close (drain, then -EPIPE; blocked senders and receivers woken),
 * try variants, deadlines and cancellation with nothing transferred, select
 * over send and receive mixes, closed channels, polling, fairness, the same
 * channel twice, more cases than fit on the stack, coroutines on two shards
 * mixed with plain threads, element sizes 1, 8 and 1000, reference counting,
 * argument errors and -ENOMEM by fault injection.
 */
#include "rt_helpers.h"

#include "fault.h"

#include <unistd.h>

static weft_task *spawn_on(int shard, void *(*fn)(void *), void *arg)
{
  weft_task *t = NULL;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, shard, fn, arg), 0);
  return t;
}

/* Waits until `n` tasks of the current runtime are suspended. */
static void wait_suspended(int n)
{
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == n));
}

/* ---- arguments and faults ------------------------------------------------------------ */

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

/* ---- plain-thread basics: buffer, try variants, sizes --------------------------------- */

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(seed * 131 + i * 7 + 1);
}

static bool check_pattern(const unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed * 131 + i * 7 + 1))
      return false;
  return true;
}

Test(chan, buffer_fifo_and_try_variants_on_a_thread, .timeout = 20)
{
  static const size_t sizes[] = {1, 8, 1000};
  static const size_t caps[] = {1, 5};
  for (size_t si = 0; si < 3; si++)
    for (size_t ci = 0; ci < 2; ci++) {
      size_t sz = sizes[si], cap = caps[ci];
      weft_chan *c;
      cr_assert_eq(weft_chan_create(&c, sz, cap), 0);
      unsigned char in[1000], out[1000];
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
          cr_assert_eq(out[sz < 1000 ? sz : 999], sz < 1000 ? 0xee : out[999], "overwrite");
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

struct one {
  weft_chan *c;
  uint64_t v;
  atomic_int done;
  int64_t deadline;
};

static void *send_one(void *arg)
{
  struct one *o = arg;
  int r = weft_chan_send_dl(o->c, &o->v, o->deadline);
  atomic_store(&o->done, 1);
  return (void *)(intptr_t)r;
}

static void *recv_one(void *arg)
{
  struct one *o = arg;
  int r = weft_chan_recv_dl(o->c, &o->v, o->deadline);
  atomic_store(&o->done, 1);
  return (void *)(intptr_t)r;
}

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
    CO_EQ(weft_chan_recv_dl(c, &v, 0), -ETIMEDOUT);
    /* Fill, then a send times out and leaves the buffer as it was. */
    for (uint64_t i = 0; i < cap; i++)
      CO_EQ(weft_chan_send_dl(c, &i, weft_now() - 1), 0); /* ready: no timeout */
    v = 99;
    dl = weft_now() + 2 * WEFT_MSEC;
    CO_EQ(weft_chan_send_dl(c, &v, dl), -ETIMEDOUT);
    CO_CHECK(weft_now() >= dl);
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

/* ---- select ------------------------------------------------------------------------------ */

static void *select_mix_main(void *arg)
{
  (void)arg;
  weft_chan *a, *b;
  CO_EQ(weft_chan_create(&a, sizeof(uint64_t), 1), 0);
  CO_EQ(weft_chan_create(&b, sizeof(uint64_t), 1), 0);
  uint64_t one = 1, two = 2, out = 0, in = 0;
  CO_EQ(weft_chan_send(a, &one), 0); /* a full: its send case is not ready */
  CO_EQ(weft_chan_send(b, &two), 0); /* b holds 2: its recv case is ready */
  weft_select_case k[2] = {weft_select_send(a, &out), weft_select_recv(b, &in)};
  for (int i = 0; i < 2; i++)
    k[i].result = 12345;
  CO_EQ(weft_select(k, 2, WEFT_NO_DEADLINE), 1);
  CO_EQ(k[1].result, 0);
  CO_EQ(in, 2);
  CO_EQ(k[0].result, 12345); /* untouched */
  /* Now nothing is ready: polling says so, blocking waits for a peer. */
  CO_EQ(weft_select(k, 2, 0), -EAGAIN);
  struct one r = {.c = a, .deadline = -1};
  weft_task *t = spawn_on(1, recv_one, &r); /* makes room in a */
  out = 3;
  CO_EQ(weft_select(k, 2, WEFT_NO_DEADLINE), 0);
  CO_EQ(k[0].result, 0);
  CO_EQ(rt_join_int(t), 0);
  CO_EQ(r.v, 1);
  CO_EQ(weft_chan_len(a), 1);
  CO_EQ(weft_chan_try_recv(a, &in), 0);
  CO_EQ(in, 3);
  /* A blocked select woken by a send on b (the recv case). */
  CO_EQ(weft_chan_send(a, &one), 0);
  struct one s = {.c = b, .v = 44, .deadline = -1};
  in = 0;
  t = spawn_on(1, send_one, &s);
  CO_EQ(weft_select(k, 2, weft_now() + 60 * WEFT_SEC), 1);
  CO_EQ(in, 44);
  CO_EQ(rt_join_int(t), 0);
  CO_EQ(weft_chan_len(a), 1);
  CO_EQ(weft_chan_len(b), 0);
  weft_chan_unref(a);
  weft_chan_unref(b);
  return NULL;
}

Test(chan, select_send_and_recv_mix, .timeout = 30)
{
  rt_run(2, select_mix_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

struct sel_waiter {
  weft_select_case k[2];
  uint64_t a_in, b_in;
  atomic_int arrived;
};

static void *select_waiter(void *arg)
{
  struct sel_waiter *w = arg;
  atomic_store(&w->arrived, 1);
  return (void *)(intptr_t)weft_select(w->k, 2, WEFT_NO_DEADLINE);
}

static void *select_closed_main(void *arg)
{
  (void)arg;
  weft_chan *a, *b;
  CO_EQ(weft_chan_create(&a, sizeof(uint64_t), 0), 0);
  CO_EQ(weft_chan_create(&b, sizeof(uint64_t), 2), 0);
  uint64_t v = 8;
  CO_EQ(weft_chan_close(a), 0);
  weft_select_case k[2] = {weft_select_recv(a, &v), weft_select_recv(b, &v)};
  CO_EQ(weft_select(k, 2, 0), 0); /* a closed recv case is ready: -EPIPE */
  CO_EQ(k[0].result, -EPIPE);
  CO_EQ(v, 8);
  k[0] = weft_select_send(a, &v);
  CO_EQ(weft_select(k, 2, WEFT_NO_DEADLINE), 0);
  CO_EQ(k[0].result, -EPIPE);
  /* Disabling the closed case leaves only b. */
  k[0].chan = NULL;
  CO_EQ(weft_select(k, 2, 0), -EAGAIN);
  weft_chan_unref(a);

  /* A blocked select woken by a close. */
  CO_EQ(weft_chan_create(&a, sizeof(uint64_t), 0), 0);
  struct sel_waiter w;
  memset(&w, 0, sizeof(w));
  w.k[0] = weft_select_recv(a, &w.a_in);
  w.k[1] = weft_select_recv(b, &w.b_in);
  weft_task *t = spawn_on(1, select_waiter, &w);
  wait_suspended(1);
  CO_EQ(weft_chan_close(b), 0);
  CO_EQ(rt_join_int(t), 1);
  CO_EQ(w.k[1].result, -EPIPE);
  /* And a close of a channel buffering something: drained first. */
  weft_chan_unref(b);
  CO_EQ(weft_chan_create(&b, sizeof(uint64_t), 2), 0);
  v = 31;
  CO_EQ(weft_chan_send(b, &v), 0);
  CO_EQ(weft_chan_close(b), 0);
  weft_select_case k2[1] = {weft_select_recv(b, &v)};
  v = 0;
  CO_EQ(weft_select(k2, 1, 0), 0);
  CO_EQ(k2[0].result, 0);
  CO_EQ(v, 31);
  CO_EQ(weft_select(k2, 1, 0), 0);
  CO_EQ(k2[0].result, -EPIPE);
  weft_chan_unref(a);
  weft_chan_unref(b);
  return NULL;
}

Test(chan, select_closed_channel_case, .timeout = 30)
{
  rt_run(2, select_closed_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

#define FAIR_ROUNDS 10000

/* Two always-ready cases (plus, in the second run, a never-ready one
 * between them): each ready case must win about half of the rounds. With
 * 10,000 rounds the standard deviation is 50, so the 40-60% band is 20
 * deviations wide: a fair choice never fails it, an unfair one (always the
 * first ready case, or 2/3 : 1/3 from a rotating start) always does. */
static void fairness(bool with_blocked_case)
{
  weft_chan *a, *b, *never;
  CO_EQ(weft_chan_create(&a, sizeof(uint64_t), 1), 0);
  CO_EQ(weft_chan_create(&b, sizeof(uint64_t), 1), 0);
  CO_EQ(weft_chan_create(&never, sizeof(uint64_t), 0), 0);
  uint64_t va = 1, vb = 2, in = 0;
  CO_EQ(weft_chan_send(a, &va), 0);
  CO_EQ(weft_chan_send(b, &vb), 0);
  weft_select_case k[3];
  int n = 0, ia, ib;
  ia = n, k[n++] = weft_select_recv(a, &in);
  if (with_blocked_case)
    k[n++] = weft_select_recv(never, &in);
  ib = n, k[n++] = weft_select_recv(b, &in);
  int wins[3] = {0, 0, 0};
  for (int i = 0; i < FAIR_ROUNDS; i++) {
    int r = weft_select(k, (size_t)n, WEFT_NO_DEADLINE);
    CO_CHECK(r == ia || r == ib);
    if (r != ia && r != ib)
      break;
    wins[r]++;
    CO_EQ(in, r == ia ? 1 : 2);
    CO_EQ(weft_chan_send(r == ia ? a : b, r == ia ? &va : &vb), 0); /* ready again */
  }
  CO_EQ(wins[ia] + wins[ib], FAIR_ROUNDS);
  CO_CHECK(wins[ia] >= FAIR_ROUNDS * 4 / 10 && wins[ia] <= FAIR_ROUNDS * 6 / 10);
  CO_CHECK(wins[ib] >= FAIR_ROUNDS * 4 / 10 && wins[ib] <= FAIR_ROUNDS * 6 / 10);
  cr_log_info("fairness%s: %d / %d", with_blocked_case ? " (3 cases)" : "", wins[ia], wins[ib]);
  weft_chan_unref(a);
  weft_chan_unref(b);
  weft_chan_unref(never);
}

static void *fairness_main(void *arg)
{
  (void)arg;
  fairness(false);
  fairness(true);
  return NULL;
}

Test(chan, select_is_fair_among_ready_cases, .timeout = 60)
{
  rt_run(1, fairness_main, NULL);
  fairness(false); /* and on a plain thread */
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *same_channel_main(void *arg)
{
  (void)arg;
  /* Rendezvous: a select that both sends to and receives from c never
   * matches itself; a peer completes one side or the other. */
  weft_chan *c;
  CO_EQ(weft_chan_create(&c, sizeof(uint64_t), 0), 0);
  for (int side = 0; side < 2; side++) {
    struct sel_waiter w;
    memset(&w, 0, sizeof(w));
    w.a_in = 70; /* what the send case sends */
    w.k[0] = weft_select_send(c, &w.a_in);
    w.k[1] = weft_select_recv(c, &w.b_in);
    weft_task *t = spawn_on(1, select_waiter, &w);
    wait_suspended(1);
    uint64_t v = 71;
    if (side == 0) {
      CO_EQ(weft_chan_recv(c, &v), 0);
      CO_EQ(v, 70);
      CO_EQ(rt_join_int(t), 0);
      CO_EQ(w.b_in, 0);
    } else {
      CO_EQ(weft_chan_send(c, &v), 0);
      CO_EQ(rt_join_int(t), 1);
      CO_EQ(w.b_in, 71);
    }
    CO_EQ(weft_select(w.k, 2, 0), -EAGAIN); /* its nodes are gone */
  }
  weft_chan_unref(c);

  /* Buffered, half full: both cases ready; both get chosen over time and
   * the channel contents stay exact. */
  CO_EQ(weft_chan_create(&c, sizeof(uint64_t), 2), 0);
  uint64_t seq = 0, expect = 0, in = 0, out = 0;
  CO_EQ(weft_chan_send(c, &seq), 0);
  seq++;
  weft_select_case k[2] = {weft_select_send(c, &out), weft_select_recv(c, &in)};
  int wins[2] = {0, 0};
  for (int i = 0; i < 2000; i++) {
    out = seq;
    int r = weft_select(k, 2, WEFT_NO_DEADLINE);
    CO_CHECK(r == 0 || r == 1);
    wins[r & 1]++;
    if (r == 0) {
      seq++;
    } else {
      CO_EQ(in, expect);
      expect++;
    }
    CO_EQ(weft_chan_len(c), seq - expect);
  }
  CO_CHECK(wins[0] > 100 && wins[1] > 100);
  /* Two receive cases on one channel: exactly one fires per element. */
  uint64_t x0 = 0xdead, x1 = 0xdead;
  weft_select_case k2[2] = {weft_select_recv(c, &x0), weft_select_recv(c, &x1)};
  while (expect < seq) {
    x0 = x1 = 0xdead;
    int r = weft_select(k2, 2, 0);
    CO_CHECK(r == 0 || r == 1);
    CO_EQ(r == 0 ? x0 : x1, expect);
    CO_EQ(r == 0 ? x1 : x0, 0xdead);
    expect++;
  }
  CO_EQ(weft_select(k2, 2, 0), -EAGAIN);
  weft_chan_unref(c);
  return NULL;
}

Test(chan, select_with_the_same_channel_twice, .timeout = 30)
{
  rt_run(2, same_channel_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* More cases than fit on the stack, some disabled, over 5 channels; a peer
 * on the other shard feeds the last channel. */
#define MANY 40

static void *feed_last(void *arg)
{
  weft_chan *c = arg;
  for (uint64_t i = 0; i < 100; i++)
    CO_EQ(weft_chan_send(c, &i), 0);
  return NULL;
}

static void *many_cases_main(void *arg)
{
  (void)arg;
  weft_chan *ch[5];
  for (int i = 0; i < 5; i++)
    CO_EQ(weft_chan_create(&ch[i], sizeof(uint64_t), (size_t)i), 0);
  weft_select_case k[MANY];
  uint64_t in[MANY];
  for (int i = 0; i < MANY; i++)
    k[i] = weft_select_recv(i % 3 == 2 ? NULL : ch[i % 4], &in[i]);
  k[MANY - 1] = weft_select_recv(ch[4], &in[MANY - 1]);
  weft_task *t = spawn_on(1, feed_last, ch[4]);
  for (uint64_t i = 0; i < 100; i++) {
    int r = weft_select(k, MANY, weft_now() + 60 * WEFT_SEC);
    CO_EQ(r, MANY - 1);
    if (r != MANY - 1)
      break;
    CO_EQ(in[r], i);
  }
  CO_EQ(rt_join_int(t), 0);
  CO_EQ(weft_select(k, MANY, 0), -EAGAIN);
  for (int i = 0; i < 5; i++)
    weft_chan_unref(ch[i]);
  return NULL;
}

Test(chan, select_with_many_cases, .timeout = 30)
{
  rt_run(2, many_cases_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A select with a short deadline racing a sender, many times over: each
 * element is received exactly once and in order, whichever wins a round. */
struct race {
  weft_chan *c;
  int n;
};

static void *race_sender(void *arg)
{
  struct race *r = arg;
  for (uint64_t i = 0; i < (uint64_t)r->n; i++)
    CO_EQ(weft_chan_send(r->c, &i), 0);
  return NULL;
}

static void *race_main(void *arg)
{
  (void)arg;
  struct race r = {.n = 3000};
  CO_EQ(weft_chan_create(&r.c, sizeof(uint64_t), 0), 0);
  weft_task *t = spawn_on(1, race_sender, &r);
  uint64_t expect = 0, v;
  int timeouts = 0;
  weft_select_case k[1] = {weft_select_recv(r.c, &v)};
  while (expect < (uint64_t)r.n) {
    int res = weft_select(k, 1, weft_now() + (int64_t)(expect % 7) * 10 * WEFT_USEC);
    if (res == -ETIMEDOUT) {
      timeouts++;
      continue;
    }
    CO_EQ(res, 0);
    CO_EQ(v, expect);
    if (res != 0 || v != expect)
      break;
    expect++;
  }
  CO_EQ(rt_join_int(t), 0);
  CO_EQ(weft_chan_try_recv(r.c, &v), -EAGAIN);
  cr_log_info("select timeout race: %d timeouts", timeouts);
  weft_chan_unref(r.c);
  return NULL;
}

Test(chan, select_deadline_racing_a_sender, .timeout = 60)
{
  rt_run(2, race_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- coroutines on two shards with plain threads, element sizes ---------------------------- */

#define MIX_N 2000

struct mix {
  weft_chan *c;
  size_t sz;
  atomic_int next_id;
  atomic_llong sum_sent, sum_recv, count_recv;
};

/* Element: a 4-byte producer id, a 4-byte sequence number, then a pattern
 * derived from both (sizes >= 8); size 1 carries just a byte. */
static void *mix_producer(void *arg)
{
  struct mix *m = arg;
  unsigned id = (unsigned)atomic_fetch_add(&m->next_id, 1);
  unsigned char e[1000];
  long long sum = 0;
  for (unsigned s = 0; s < MIX_N; s++) {
    if (m->sz == 1) {
      e[0] = (unsigned char)(s % 251);
    } else {
      memcpy(e, &id, 4);
      memcpy(e + 4, &s, 4);
      fill_pattern(e + 8, m->sz - 8, id * 7919 + s);
    }
    sum += m->sz == 1 ? e[0] : s;
    int r = s % 2 ? weft_chan_send(m->c, e)
                  : weft_chan_send_dl(m->c, e, weft_now() + 60 * WEFT_SEC);
    CO_EQ(r, 0);
  }
  atomic_fetch_add(&m->sum_sent, sum);
  return NULL;
}

static void *mix_consumer(void *arg)
{
  struct mix *m = arg;
  unsigned char e[1000];
  unsigned last[8];
  memset(last, 0xff, sizeof(last));
  long long sum = 0, count = 0;
  int r;
  for (;;) {
    /* Alternate plain receives with a one-case select. */
    if (count % 2) {
      r = weft_chan_recv(m->c, e);
    } else {
      weft_select_case k[1] = {weft_select_recv(m->c, e)};
      r = weft_select(k, 1, WEFT_NO_DEADLINE);
      if (r == 0)
        r = k[0].result;
    }
    if (r < 0)
      break;
    count++;
    if (m->sz == 1) {
      sum += e[0];
      continue;
    }
    unsigned id, s;
    memcpy(&id, e, 4);
    memcpy(&s, e + 4, 4);
    CO_CHECK(id < 8 && s < MIX_N);
    if (id >= 8)
      break;
    CO_CHECK(last[id] == 0xffffffffu || s > last[id]);
    last[id] = s;
    CO_CHECK(check_pattern(e + 8, m->sz - 8, id * 7919 + s));
    sum += s;
  }
  CO_EQ(r, -EPIPE);
  atomic_fetch_add(&m->sum_recv, sum);
  atomic_fetch_add(&m->count_recv, count);
  return NULL;
}

static void mix_run(weft_runtime *rt, size_t sz, size_t cap)
{
  struct mix m = {.sz = sz};
  cr_assert_eq(weft_chan_create(&m.c, sz, cap), 0);
  weft_task *tp[2], *tc[2];
  pthread_t hp[2], hc[2];
  for (int i = 0; i < 2; i++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_PINNED;
    o.shard = i;
    cr_assert_eq(weft_runtime_submit(rt, &o, mix_producer, &m, &tp[i]), 0);
    o.shard = 1 - i;
    cr_assert_eq(weft_runtime_submit(rt, &o, mix_consumer, &m, &tc[i]), 0);
    cr_assert_eq(pthread_create(&hp[i], NULL, mix_producer, &m), 0);
    cr_assert_eq(pthread_create(&hc[i], NULL, mix_consumer, &m), 0);
  }
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(weft_join(tp[i], NULL), 0);
    pthread_join(hp[i], NULL);
  }
  cr_assert_eq(weft_chan_close(m.c), 0);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(weft_join(tc[i], NULL), 0);
    pthread_join(hc[i], NULL);
  }
  rt_assert_clean();
  cr_assert_eq(atomic_load(&m.count_recv), 4 * MIX_N, "size %zu cap %zu", sz, cap);
  cr_assert_eq(atomic_load(&m.sum_recv), atomic_load(&m.sum_sent), "size %zu cap %zu", sz, cap);
  weft_chan_unref(m.c);
}

Test(chan, two_shards_and_plain_threads_all_sizes, .timeout = 120)
{
  weft_runtime *rt = rt_start(2);
  static const size_t sizes[] = {1, 8, 1000};
  for (int i = 0; i < 3; i++) {
    mix_run(rt, sizes[i], 0);
    mix_run(rt, sizes[i], 1);
    mix_run(rt, sizes[i], 7);
  }
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- runtime shutdown with tasks blocked in channels ------------------------------------- */

#define NBLOCKED 60

struct blocked {
  weft_chan *empty, *full, *rdv;
  atomic_int arrived, ended_cancelled;
};

static void *blocked_body(void *arg)
{
  struct blocked *b = arg;
  int i = atomic_fetch_add(&b->arrived, 1);
  uint64_t v = (uint64_t)i;
  int r;
  switch (i % 4) {
  case 0:
    r = weft_chan_recv(b->empty, &v);
    break;
  case 1:
    r = weft_chan_send(b->full, &v);
    break;
  case 2:
    r = weft_chan_send_dl(b->rdv, &v, weft_now() + 600 * WEFT_SEC);
    break;
  default: {
    weft_select_case k[3] = {weft_select_recv(b->empty, &v), weft_select_send(b->full, &v),
                             weft_select_send(b->rdv, &v)};
    r = weft_select(k, 3, WEFT_NO_DEADLINE);
    break;
  }
  }
  if (r == -ECANCELED)
    atomic_fetch_add(&b->ended_cancelled, 1);
  return NULL;
}

/* weft_runtime_stop cancels every task: each blocked channel operation
 * ends with -ECANCELED, leaves its channel's queues, and nothing leaks. */
Test(chan, runtime_stop_cancels_blocked_operations, .timeout = 60)
{
  struct blocked b = {0};
  cr_assert_eq(weft_chan_create(&b.empty, sizeof(uint64_t), 4), 0);
  cr_assert_eq(weft_chan_create(&b.full, sizeof(uint64_t), 1), 0);
  cr_assert_eq(weft_chan_create(&b.rdv, sizeof(uint64_t), 0), 0);
  uint64_t one = 1;
  cr_assert_eq(weft_chan_send(b.full, &one), 0);
  weft_runtime *rt = rt_start(2);
  for (int i = 0; i < NBLOCKED; i++)
    cr_assert_eq(weft_runtime_submit(rt, NULL, blocked_body, &b, NULL), 0);
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == NBLOCKED));
  cr_assert_eq(weft_runtime_stop(rt), 0);
  cr_assert_eq(atomic_load(&b.ended_cancelled), NBLOCKED);
  /* The queues are empty again: the channels behave as before. */
  uint64_t v = 0;
  cr_assert_eq(weft_chan_try_recv(b.empty, &v), -EAGAIN);
  cr_assert_eq(weft_chan_try_send(b.rdv, &v), -EAGAIN);
  cr_assert_eq(weft_chan_try_recv(b.full, &v), 0);
  cr_assert_eq(v, 1);
  cr_assert_eq(weft_chan_try_recv(b.full, &v), -EAGAIN);
  weft_chan_unref(b.empty);
  weft_chan_unref(b.full);
  weft_chan_unref(b.rdv);
  rt_assert_no_leaks();
}
