/* SPDX-License-Identifier: MIT */
/*
 * Suite "chan", part 2 - weft_select: send and receive mixes, closed
 * channels, fairness among ready cases, the same channel twice, more cases
 * than fit on the stack, and a deadline racing a sender.
 */
#include "chan_test.h"

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
    CO_CHECK(chan_queues_empty(c)); /* both of its nodes are gone */
    CO_EQ(weft_select(w.k, 2, 0), -EAGAIN);
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
