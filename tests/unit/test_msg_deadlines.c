/* SPDX-License-Identifier: MIT */
/*
 * Suite "msg", the end of a wait: receive deadlines and cancellation of
 * each kind of blocked receive (direct, hot, counter), messages already
 * queued being received past the deadline and in a cancelled task, a
 * ticketed send from a cancelled task, and a timeout or a cancel racing an
 * arrival without losing or duplicating a message. The rest of the raw
 * messages are in test_msg.c. Checks inside coroutines go through CO_CHECK
 * / CO_EQ.
 */
#include "msg_test.h"

/* ---- deadlines and cancellation --------------------------------------------------------- */

static atomic_int blocked_kind;

static void *blocked_recv(void *arg)
{
  (void)arg;
  weft_msg m;
  if (atomic_load(&blocked_kind) == 0)
    return (void *)(intptr_t)weft_msg_recv(&m, WEFT_NO_DEADLINE);
  if (atomic_load(&blocked_kind) == 1)
    return (void *)(intptr_t)weft_msg_recv_hot(&m, WEFT_NO_DEADLINE);
  return (void *)(intptr_t)weft_counter_take(1, WEFT_NO_DEADLINE);
}

static void *deadline_main(void *arg)
{
  (void)arg;
  weft_msg m;
  int64_t t0 = weft_now();
  CO_EQ(weft_msg_recv(&m, in_ms(20)), -ETIMEDOUT);
  CO_CHECK(weft_now() - t0 >= 20 * WEFT_MSEC);
  CO_EQ(weft_msg_recv_hot(&m, in_ms(5)), -ETIMEDOUT);
  CO_EQ(weft_msg_recv_many(&m, 1, 0, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_counter_take(1, in_ms(5)), -ETIMEDOUT);
  /* A message that comes after a timeout is not lost. */
  CO_EQ(weft_msg_send_wait(0, 4, 44), 0);
  CO_EQ(weft_msg_recv(&m, in_ms(5000)), 0);
  CO_EQ(m.val, 44);
  /* Cancelling each kind of blocked receive. */
  for (int kind = 0; kind < 3; kind++) {
    atomic_store(&blocked_kind, kind);
    weft_task *t = spawn_on(1, blocked_recv, NULL);
    CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") >= 1));
    CO_EQ(weft_cancel(t), 0);
    void *v;
    CO_EQ(weft_join(t, &v), -ECANCELED);
    CO_EQ((intptr_t)v, -ECANCELED);
  }
  /* The cancelled receivers took nothing: a new one gets the message. */
  CO_EQ(weft_msg_send(1, 6, 66), 0);
  atomic_store(&blocked_kind, 0);
  weft_task *t = spawn_on(1, blocked_recv, NULL);
  CO_EQ(rt_join_int(t), 0);
  return NULL;
}

Test(msg, recv_deadline_and_cancel, .timeout = 30)
{
  rt_run(2, deadline_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A message (or counter sum) already queued is returned even past the
 * deadline or in a cancelled task: those end only a wait. */
static void *drain_when_cancelled(void *arg)
{
  (void)arg;
  /* Three direct messages, then a counter add, are delivered here. */
  CO_CHECK(RT_POLL(shard_stats(1).msgs_received == 3));
  weft_msg m = {0};
  CO_EQ(weft_msg_recv(&m, weft_now() - 1), 0); /* deadline passed */
  CO_EQ(m.val, 71);
  CO_EQ(weft_cancel(weft_task_self()), 0);
  CO_EQ(weft_msg_recv(&m, WEFT_NO_DEADLINE), 0);
  CO_EQ(m.val, 72);
  CO_EQ(weft_msg_try_recv(&m, 0), 0);
  CO_EQ(m.val, 73);
  CO_EQ(weft_counter_take(2, WEFT_NO_DEADLINE), 9);
  /* Nothing left: now the cancel ends the waits. */
  CO_EQ(weft_msg_recv(&m, WEFT_NO_DEADLINE), -ECANCELED);
  CO_EQ(weft_counter_take(2, WEFT_NO_DEADLINE), -ECANCELED);
  return NULL;
}

/* A ticketed send from a cancelled task is not made. */
static void *cancelled_send_wait(void *arg)
{
  (void)arg;
  CO_EQ(weft_cancel(weft_task_self()), 0);
  CO_EQ(weft_msg_send_wait(1, 5, 99), -ECANCELED);
  return NULL;
}

static void *try_recv_nothing(void *arg)
{
  (void)arg;
  weft_msg m;
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN);
  return NULL;
}

static void *drain_main(void *arg)
{
  (void)arg;
  weft_task *c = spawn_on(0, cancelled_send_wait, NULL);
  CO_EQ(weft_join(c, NULL), -ECANCELED);
  CO_EQ(weft_msg_flush(), 0);
  CO_EQ(rt_join_int(spawn_on(1, try_recv_nothing, NULL)), 0);
  for (uint32_t v = 71; v <= 73; v++)
    CO_EQ(weft_msg_send(1, 5, v), 0);
  CO_EQ(weft_counter_add(1, 2, 9), 0);
  CO_EQ(weft_msg_flush(), 0);
  weft_task *t = spawn_on(1, drain_when_cancelled, NULL);
  CO_EQ(weft_join(t, NULL), -ECANCELED);
  return NULL;
}

Test(msg, queued_messages_are_received_past_the_deadline_and_when_cancelled, .timeout = 30)
{
  rt_run(2, drain_main, NULL);
  rt_assert_clean();
}

/* ---- a timeout racing an arrival --------------------------------------------------------
 * Each round the receiver publishes a deadline ~100 us ahead and waits in
 * weft_msg_recv; the sender (another shard) sends one message at the
 * deadline + jitter (-50..+50 us) with weft_msg_send_wait, so that once it
 * returns the message is posted. Whichever wins, the round's message is
 * received exactly once: by the wait, or - it timed out - by the next
 * receive, never lost and never twice. */

#define MSG_RACE_ROUNDS 1000

struct msg_race {
  weft_event *go, *done;
  _Atomic int64_t deadline;
  int in_wait, after_timeout;
};

static void *msg_race_receiver(void *arg)
{
  struct msg_race *r = arg;
  for (uint32_t i = 0; i < MSG_RACE_ROUNDS; i++) {
    int64_t dl = weft_now() + 100 * WEFT_USEC;
    atomic_store(&r->deadline, dl);
    CO_EQ(weft_event_set(r->go), 0);
    weft_msg m = {0};
    int res = weft_msg_recv(&m, dl);
    CO_CHECK(res == 0 || res == -ETIMEDOUT);
    CO_EQ(weft_event_wait(r->done), 0); /* the send has been posted */
    if (res == 0) {
      CO_EQ(m.val, i);
      r->in_wait++;
    } else {
      CO_EQ(weft_msg_try_recv(&m, 0), 0); /* kept for the next receive */
      CO_EQ(m.val, i);
      r->after_timeout++;
    }
    CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN); /* and only once */
  }
  return NULL;
}

static void *msg_race_sender(void *arg)
{
  struct msg_race *r = arg;
  uint32_t rnd = 4321;
  for (uint32_t i = 0; i < MSG_RACE_ROUNDS; i++) {
    CO_EQ(weft_event_wait(r->go), 0);
    rnd = rnd * 1103515245u + 12345u;
    int64_t jitter = (int64_t)((rnd >> 8) % 101) * WEFT_USEC - 50 * WEFT_USEC;
    int64_t at = atomic_load(&r->deadline) + jitter;
    while (weft_now() < at)
      ; /* land the send as close to the deadline as the clock allows */
    CO_EQ(weft_msg_send_wait(1, 7, i), 0);
    CO_EQ(weft_event_set(r->done), 0);
  }
  return NULL;
}

static void *msg_race_main(void *arg)
{
  struct msg_race *r = arg;
  CO_EQ(weft_event_create(&r->go, WEFT_EVENT_AUTO_RESET), 0);
  CO_EQ(weft_event_create(&r->done, WEFT_EVENT_AUTO_RESET), 0);
  weft_task *rx = spawn_on(1, msg_race_receiver, r), *tx = spawn_on(0, msg_race_sender, r);
  CO_EQ(weft_join(rx, NULL), 0);
  CO_EQ(weft_join(tx, NULL), 0);
  weft_event_destroy(r->go);
  weft_event_destroy(r->done);
  return NULL;
}

Test(msg, a_timeout_racing_an_arrival_loses_no_message, .timeout = 60)
{
  struct msg_race r = {0};
  rt_run(2, msg_race_main, &r);
  rt_assert_clean();
  cr_assert_eq(r.in_wait + r.after_timeout, MSG_RACE_ROUNDS);
  cr_log_info("%d received in the wait, %d after it timed out", r.in_wait, r.after_timeout);
}

/* A cancel from another shard just before or just after the arrival (one
 * receiver per round: a cancel is for good): a receiver the cancel ended
 * finds the message kept for it, one that got it finds nothing more. The
 * window in which a hand-off meets a waiter claimed by a canceller but not
 * yet unqueued is nanoseconds wide; these rounds do not reach into it. */
#define MSG_CANCEL_ROUNDS 300

struct msg_cancel_round {
  uint32_t want;
  atomic_bool sent;
  int result; /* of the waiting receive */
};

static void *msg_cancel_receiver(void *arg)
{
  struct msg_cancel_round *c = arg;
  weft_msg m = {0};
  c->result = weft_msg_recv(&m, WEFT_NO_DEADLINE);
  CO_CHECK(c->result == 0 || c->result == -ECANCELED);
  if (c->result == -ECANCELED) {
    while (!atomic_load(&c->sent))
      ; /* a cancelled task cannot wait: the send is posted in microseconds */
    CO_EQ(weft_msg_try_recv(&m, 0), 0); /* kept for it */
  }
  CO_EQ(m.val, c->want);
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN); /* and only once */
  return NULL;
}

static void *msg_cancel_race_main(void *arg)
{
  int *cancelled_first = arg;
  uint32_t rnd = 777;
  for (uint32_t i = 0; i < MSG_CANCEL_ROUNDS; i++) {
    struct msg_cancel_round c = {.want = i};
    weft_task *t = spawn_on(1, msg_cancel_receiver, &c);
    CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1));
    rnd = rnd * 1103515245u + 12345u;
    bool cancel_first = rnd >> 31;
    int64_t until = weft_now() + (int64_t)((rnd >> 8) % 20) * WEFT_USEC;
    if (cancel_first)
      CO_EQ(weft_cancel(t), 0);
    while (weft_now() < until)
      ;
    CO_EQ(weft_msg_send_wait(1, 8, i), 0);
    atomic_store(&c.sent, true);
    if (!cancel_first)
      weft_cancel(t); /* 0, or -ESRCH: it may have returned */
    weft_join(t, NULL);
    *cancelled_first += c.result == -ECANCELED;
  }
  return NULL;
}

Test(msg, a_cancel_just_before_or_after_an_arrival_loses_no_message, .timeout = 60)
{
  int cancelled = 0;
  rt_run(2, msg_cancel_race_main, &cancelled);
  rt_assert_clean();
  cr_log_info("%d of %d receives ended by the cancel", cancelled, MSG_CANCEL_ROUNDS);
}
