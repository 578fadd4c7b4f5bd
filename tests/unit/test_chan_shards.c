/* SPDX-License-Identifier: MIT */
/*
 * Suite "chan", part 3 - coroutines on two shards mixed with plain threads
 * for element sizes 1, 8 and 1000, and runtime shutdown with tasks blocked
 * in channel operations.
 */
#include "chan_test.h"

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
  cr_assert(chan_queues_empty(b.empty));
  cr_assert(chan_queues_empty(b.full));
  cr_assert(chan_queues_empty(b.rdv));
  cr_assert_eq(weft_chan_try_recv(b.empty, &v), -EAGAIN);
  cr_assert_eq(weft_chan_try_send(b.rdv, &v), -EAGAIN);
  cr_assert_eq(weft_chan_try_recv(b.rdv, &v), -EAGAIN);
  cr_assert_eq(weft_chan_try_recv(b.full, &v), 0);
  cr_assert_eq(v, 1);
  cr_assert_eq(weft_chan_try_recv(b.full, &v), -EAGAIN);
  weft_chan_unref(b.empty);
  weft_chan_unref(b.full);
  weft_chan_unref(b.rdv);
  rt_assert_no_leaks();
}
