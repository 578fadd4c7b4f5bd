/* SPDX-License-Identifier: MIT */
/*
 * Suite "msg", the kernel refusing what a shard sends through its own ring
 * (WEFT__FAULT_SEND: the SQE fails at once with -EINVAL in its CQE, as a
 * msg_ring the kernel has no memory for fails). A direct message is sent
 * again and arrives after the ones sent meanwhile; a lane's doorbell is rung
 * again; a wake-up falls back to the target's eventfd; a ticketed send and a
 * flush return the error; a flush right after a refused direct message
 * returns only once it was sent again and posted. Refusals seen by plain
 * threads, which post synchronously, are in test_msg_outside.c; a message
 * refused while the runtime stops, in test_task_exit.c.
 */
#include "msg_test.h"
#include "rt_internal.h"

#include "msg_internal.h"

#include <signal.h>

#define TAG 9
#define N_LANE 10

static long send_faults_left(void)
{
  return atomic_load(&weft__fault_countdown[WEFT__FAULT_SEND]);
}

/* Receives n messages on this shard into vals[] (10 s each at most). */
static void recv_n(uint32_t *vals, int n)
{
  for (int i = 0; i < n; i++) {
    weft_msg m;
    int r = weft_msg_recv(&m, in_ms(10000));
    CO_EQ(r, 0);
    if (r < 0)
      return;
    CO_EQ(m.sender, 0);
    CO_EQ(m.tag, TAG);
    vals[i] = m.val;
  }
}

/* ---- a direct message -------------------------------------------------------------- */

static void *recv_three(void *arg)
{
  recv_n(arg, 3);
  weft_msg m;
  CO_EQ(weft_msg_try_recv(&m, 0), -EAGAIN); /* sent again once, not twice */
  return NULL;
}

static void *direct_main(void *arg)
{
  (void)arg;
  uint32_t got[3] = {99, 99, 99};
  weft_task *r = spawn_on(1, recv_three, got);
  /* All three are queued on this shard's ring before any is submitted:
   * the second is refused when they are, and is sent again only when its
   * CQE is reaped. */
  weft__fault_arm(WEFT__FAULT_SEND, 2);
  for (uint32_t v = 0; v < 3; v++)
    CO_EQ(weft_msg_send(1, TAG, v), 0);
  CO_EQ(send_faults_left(), 0);
  CO_EQ(weft_join(r, NULL), 0);
  CO_EQ(got[0], 0);
  CO_EQ(got[1], 2);
  CO_EQ(got[2], 1);
  CO_EQ(shard_stats(0).msg_failed, 1);
  return NULL;
}

Test(msg, refused_direct_message_is_sent_again_after_the_ones_sent_meanwhile, .timeout = 60)
{
  cr_assert_null(rt_run(2, direct_main, NULL));
  rt_assert_clean();
}

/* ---- a lane's doorbell ------------------------------------------------------------- */

static void *recv_lane(void *arg)
{
  recv_n(arg, N_LANE);
  return NULL;
}

/* One batch to shard 1 with the doorbell's way broken by `arm` (its
 * faults, each to be hit once): every message still arrives, in order, and
 * shard 0 counts one failure. */
static void *send_batch_through(void (*arm)(void))
{
  uint32_t got[N_LANE];
  weft_task *r = spawn_on(1, recv_lane, got);
  weft_msg batch[N_LANE];
  for (uint32_t i = 0; i < N_LANE; i++)
    batch[i] = (weft_msg){.tag = TAG, .val = i};
  arm();
  CO_EQ(weft_msg_send_many(1, batch, N_LANE), N_LANE);
  for (int site = 0; site < WEFT__FAULT_NSITES; site++)
    CO_EQ(atomic_load(&weft__fault_countdown[site]), 0);
  CO_EQ(weft_join(r, NULL), 0);
  for (uint32_t i = 0; i < N_LANE; i++)
    CO_EQ(got[i], i);
  CO_EQ(shard_stats(0).msg_failed, 1);
  return NULL;
}

/* One batch, one doorbell, refused: nobody flushes, so only ringing it
 * again gets the lane drained. */
static void refuse_the_bell(void)
{
  weft__fault_arm(WEFT__FAULT_SEND, 1);
}

static void *bell_main(void *arg)
{
  (void)arg;
  return send_batch_through(refuse_the_bell);
}

Test(msg, refused_lane_doorbell_is_rung_again, .timeout = 60)
{
  cr_assert_null(rt_run(2, bell_main, NULL));
  rt_assert_clean();
}

/* ---- a wake-up ---------------------------------------------------------------------- */

static void *where_am_i(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_shard_id();
}

static void *wake_main(void *arg)
{
  (void)arg;
  /* Shard 1 sleeps: a task pinned there makes this shard send it a
   * wake-up, which is refused. Nothing else would wake it (an idle shard
   * has no timer), and the wake-up stays marked as on its way. */
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  weft_task *t = spawn_on(1, where_am_i, NULL);
  void *v = NULL;
  CO_EQ(weft_join_dl(t, &v, in_ms(10000)), 0);
  CO_EQ((intptr_t)v, 1);
  CO_EQ(send_faults_left(), 0);
  return NULL;
}

/* The refusal is acted on by the sender at once, not at its next reap:
 * here the sender computes (without suspending) until the woken task has
 * run, for 10 s at most - for ever, were the fallback left to its loop. */
static atomic_bool woken_ran;

static void *note_run(void *arg)
{
  (void)arg;
  atomic_store(&woken_ran, true);
  return NULL;
}

static void *wake_then_compute_main(void *arg)
{
  (void)arg;
  atomic_store(&woken_ran, false);
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  weft_task *t = spawn_on(1, note_run, NULL);
  int64_t until = in_ms(10000);
  while (!atomic_load(&woken_ran) && weft_now() < until)
    ;
  CO_CHECK(atomic_load(&woken_ran));
  CO_EQ(send_faults_left(), 0);
  CO_EQ(weft_join(t, NULL), 0);
  return NULL;
}

Test(msg, refused_wake_up_is_replaced_before_the_sender_reaps, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  cr_assert(rt_wait_parked(rt, 1), "shard 1 never slept");
  cr_assert_eq(weft_join(rt_submit_on(rt, 0, wake_then_compute_main, NULL), NULL), 0);
  rt_assert_clean();
  rt_stop_idle(rt);
}

Test(msg, refused_wake_up_falls_back_to_the_eventfd, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  cr_assert(rt_wait_parked(rt, 1), "shard 1 never slept");
  cr_assert_eq(weft_join(rt_submit_on(rt, 0, wake_main, NULL), NULL), 0);
  rt_assert_clean();
  /* Woken the same way again, and stoppable: the refusal left nothing
   * marked as on its way. */
  cr_assert(rt_wait_parked(rt, 1), "shard 1 never slept again");
  void *v = NULL;
  cr_assert_eq(weft_join(rt_submit_on(rt, 0, wake_main, NULL), &v), 0);
  rt_assert_clean();
  rt_stop_idle(rt);
}

/* ---- a ticketed send and a flush --------------------------------------------------- */

static void *try_recv_all(void *arg)
{
  uint32_t *out = arg; /* out[0]: how many; then the values */
  weft_msg m;
  int r;
  while ((r = weft_msg_try_recv(&m, 0)) == 0)
    out[1 + out[0]++] = m.val;
  CO_EQ(r, -EAGAIN);
  return NULL;
}

static void *ticketed_main(void *arg)
{
  (void)arg;
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  CO_EQ(weft_msg_send_wait(1, TAG, 5), -EINVAL);
  CO_EQ(weft_msg_send_wait(1, TAG, 6), 0);
  /* What a ticketed send posted is there for a receive that does not wait;
   * the refused one is not, and is not sent again. */
  uint32_t got[4] = {0};
  CO_EQ(weft_join(spawn_on(1, try_recv_all, got), NULL), 0);
  CO_EQ(got[0], 1);
  CO_EQ(got[1], 6);

  /* A flush whose marker is refused returns the error; the direct message
   * before it still arrives. */
  CO_EQ(weft_msg_send(1, TAG, 7), 0);
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  CO_EQ(weft_msg_flush(), -EINVAL);
  CO_EQ(send_faults_left(), 0);
  CO_EQ(weft_msg_flush(), 0);
  memset(got, 0, sizeof(got));
  CO_EQ(weft_join(spawn_on(1, try_recv_all, got), NULL), 0);
  CO_EQ(got[0], 1);
  CO_EQ(got[1], 7);
  return NULL;
}

Test(msg, refused_ticketed_send_and_flush_marker_return_the_error, .timeout = 60)
{
  cr_assert_null(rt_run(2, ticketed_main, NULL));
  rt_assert_clean();
}

/* ---- a flush right after a refused direct message ------------------------------- */

struct hold {
  atomic_bool running, look, looked, found;
};

/* Whether ring's CQ holds an unreaped CQE with this user_data and res. */
static bool cq_holds(struct io_uring *ring, uint64_t ud, int res)
{
  unsigned head;
  struct io_uring_cqe *cqe;
  bool found = false;
  io_uring_for_each_cqe(ring, head, cqe) {
    if (cqe->user_data == ud && cqe->res == res)
      found = true;
  }
  return found;
}

/* Holds shard 1 (it reaps nothing meanwhile) until told to look: then asks
 * the kernel for what was posted to its ring (with DEFER_TASKRUN a posted
 * message waits as task work until then) and looks for the message. */
static void *hold_shard(void *arg)
{
  struct hold *h = arg;
  atomic_store(&h->running, true);
  while (!atomic_load(&h->look))
    ;
  struct io_uring *ring = &weft__shard_self()->ring;
  io_uring_get_events(ring);
  atomic_store(&h->found, cq_holds(ring, ud_msg(0, TAG), 8));
  atomic_store(&h->looked, true);
  return NULL;
}

/* The direct message is refused; the flush's marker goes before the
 * message is queued again (that happens when the refusal's CQE is reaped).
 * The flush must not return on that marker alone: when it returns, the
 * message was posted. Shard 1 looks while this shard stays in this task -
 * its loop, which would submit anything left queued, does not run. */
static void *flush_after_refusal_main(void *arg)
{
  (void)arg;
  struct hold h = {false, false, false, false};
  weft_task *holder = spawn_on(1, hold_shard, &h);
  while (!atomic_load(&h.running))
    weft_yield();
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  CO_EQ(weft_msg_send(1, TAG, 8), 0);
  CO_EQ(weft_msg_flush(), 0);
  CO_EQ(send_faults_left(), 0);
  atomic_store(&h.look, true);
  while (!atomic_load(&h.looked))
    ;
  CO_CHECK(atomic_load(&h.found));
  CO_EQ(weft_join(holder, NULL), 0);
  uint32_t got[4] = {0};
  CO_EQ(weft_join(spawn_on(1, try_recv_all, got), NULL), 0);
  CO_EQ(got[0], 1);
  CO_EQ(got[1], 8);
  CO_EQ(shard_stats(0).msg_failed, 1);
  return NULL;
}

Test(msg, flush_waits_for_a_refused_message_sent_again, .timeout = 60)
{
  cr_assert_null(rt_run(2, flush_after_refusal_main, NULL));
  rt_assert_clean();
}

/* ---- doorbells that can be neither queued nor posted ------------------------------ */

/* The SQ stays full after a submit and the synchronous post is refused too:
 * the doorbell goes by the target's eventfd, and the target catches up on
 * everything a doorbell would have told it. Dropped, it left the lane
 * unrung (a full lane for good), a counter's taker or a flusher asleep. */
static void no_way_to_ring(void)
{
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  weft__fault_arm(WEFT__FAULT_POST, 1);
}

static void *unrung_lane_main(void *arg)
{
  (void)arg;
  return send_batch_through(no_way_to_ring);
}

Test(msg, lane_doorbell_neither_queued_nor_posted_goes_by_eventfd, .timeout = 60)
{
  cr_assert_null(rt_run(2, unrung_lane_main, NULL));
  rt_assert_clean();
}

static atomic_bool taker_waiting;

static void *counter_taker(void *arg)
{
  (void)arg;
  atomic_store(&taker_waiting, true);
  return (void *)(intptr_t)weft_counter_take(TAG, in_ms(10000));
}

/* A taker waits on shard 1; shard 0's add finds no SQE and no post for
 * its doorbell - and, with `no_eventfd`, no eventfd either. */
static void *unrung_counter_main(void *arg)
{
  bool no_eventfd = arg != NULL;
  atomic_store(&taker_waiting, false);
  weft_task *t = spawn_on(1, counter_taker, NULL);
  while (!atomic_load(&taker_waiting))
    weft_yield();
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1)); /* asleep in the take */
  no_way_to_ring();
  if (no_eventfd)
    weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  CO_EQ(weft_counter_add(1, TAG, 5), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[no_eventfd ? WEFT__FAULT_WAKE_FD : WEFT__FAULT_POST]),
        0);
  void *v;
  CO_EQ(weft_join(t, &v), 0);
  CO_EQ((intptr_t)v, 5);
  return NULL;
}

/* The eventfd does what the doorbell would have. */
Test(msg, counter_doorbell_neither_queued_nor_posted_goes_by_eventfd, .timeout = 60)
{
  cr_assert_null(rt_run(2, unrung_counter_main, NULL));
  rt_assert_clean();
}

/* No eventfd either: the add still counts, and its doorbell waits in the
 * shard's backlog, rung from there as SQEs come - a waiting taker wakes
 * without another add. (Were there no memory for the backlog either, the
 * next add would ring in its place.) */
Test(msg, counter_doorbell_that_goes_no_way_is_rung_from_the_backlog, .timeout = 60)
{
  static int no_eventfd = 1;
  cr_assert_null(rt_run(2, unrung_counter_main, &no_eventfd));
  rt_assert_clean();
}

/* Shard 1 is held while shard 0 sends to it and starts a flush; then it
 * arms the faults and returns (detached: no joiner to wake), so that the
 * first thing its loop sends is the flush's acknowledgement. With
 * ack_no_eventfd, the eventfd refuses too: the ack waits in the backlog. */
static atomic_bool ack_no_eventfd;

static void *hold_then_fail_ack(void *arg)
{
  struct hold *h = arg;
  atomic_store(&h->running, true);
  while (!atomic_load(&h->look))
    ;
  no_way_to_ring();
  if (atomic_load(&ack_no_eventfd))
    weft__fault_arm(WEFT__FAULT_WAKE_FD, 1);
  atomic_store(&h->looked, true);
  return NULL;
}

static void *flush_waiter(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_msg_flush();
}

static void *unrung_ack_main(void *arg)
{
  (void)arg;
  struct hold h = {false, false, false, false};
  CO_EQ(weft_detach(spawn_on(1, hold_then_fail_ack, &h)), 0);
  while (!atomic_load(&h.running))
    weft_yield();
  weft_msg m = {.tag = TAG, .val = 3};
  CO_EQ(weft_msg_send_many(1, &m, 1), 1);
  weft_task *f = spawn_on(0, flush_waiter, NULL);
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1)); /* the flusher waits for the ack */
  atomic_store(&h.look, true);
  void *v;
  CO_EQ(weft_join(f, &v), 0);
  CO_EQ((intptr_t)v, 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_POST]), 0);
  CO_EQ(shard_stats(1).msg_failed, 1);
  uint32_t got[4] = {0};
  CO_EQ(weft_join(spawn_on(1, try_recv_all, got), NULL), 0);
  CO_EQ(got[0], 1);
  CO_EQ(got[1], 3);
  return NULL;
}

Test(msg, flush_ack_neither_queued_nor_posted_goes_by_eventfd, .timeout = 60)
{
  cr_assert_null(rt_run(2, unrung_ack_main, NULL));
  rt_assert_clean();
}

Test(msg, flush_ack_that_goes_no_way_is_sent_from_the_backlog, .timeout = 60)
{
  atomic_store(&ack_no_eventfd, true);
  cr_assert_null(rt_run(2, unrung_ack_main, NULL));
  rt_assert_clean();
}


/* ---- the SQ with no room even after a submit ------------------------------------------ */

static void *recv_two(void *arg)
{
  uint32_t *vals = arg;
  recv_n(vals, 2);
  return NULL;
}

static void *recv_one(void *arg)
{
  uint32_t *vals = arg;
  recv_n(vals, 1);
  return NULL;
}

/* The second of two direct messages finds no SQE: it waits in the
 * sender's backlog and is sent from the loop - after the first, still in
 * the SQ, never ahead of it (a synchronous post would overtake it). A
 * third, sent while the second waits, goes behind it. A flush right then
 * returns only once all three were posted. */
static void *backlog_order_main(void *arg)
{
  (void)arg;
  uint32_t vals[3] = {0};
  weft_task *t = spawn_on(1, recv_two, vals);
  CO_EQ(weft_msg_send(1, TAG, 1), 0);
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  CO_EQ(weft_msg_send(1, TAG, 2), 0);
  CO_EQ(weft_msg_flush(), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(vals[0], 1);
  CO_EQ(vals[1], 2);
  /* Again with a third behind the waiting one, received after a flush. */
  t = spawn_on(1, recv_two, vals);
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  CO_EQ(weft_msg_send(1, TAG, 3), 0);
  CO_EQ(weft_msg_send(1, TAG, 4), 0);
  CO_EQ(weft_msg_flush(), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(vals[0], 3);
  CO_EQ(vals[1], 4);
  return NULL;
}

Test(msg, direct_message_without_an_sqe_waits_its_turn, .timeout = 60)
{
  cr_assert_null(rt_run(2, backlog_order_main, NULL));
  rt_assert_clean();
}

/* A ticketed send behind a direct message waiting in the backlog (still
 * there when the send looks): it is a direct message too, so it is posted
 * after that one, never ahead of it - and when it returns both are there
 * for a receive that does not wait. */
static void *ticketed_behind_backlog_main(void *arg)
{
  (void)arg;
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  CO_EQ(weft_msg_send(1, TAG, 1), 0); /* waits in the backlog */
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1); /* still, when the ticketed send looks */
  CO_EQ(weft_msg_send_wait(1, TAG, 2), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]), 0);
  uint32_t got[4] = {0};
  CO_EQ(weft_join(spawn_on(1, try_recv_all, got), NULL), 0);
  CO_EQ(got[0], 2);
  CO_EQ(got[1], 1);
  CO_EQ(got[2], 2);
  return NULL;
}

Test(msg, ticketed_send_goes_behind_a_direct_message_without_an_sqe, .timeout = 60)
{
  cr_assert_null(rt_run(2, ticketed_behind_backlog_main, NULL));
  rt_assert_clean();
}

/* A flush whose deadline has passed while a direct message still waits in
 * the backlog for an SQE: -ETIMEDOUT - but in a cancelled task -ECANCELED,
 * as from every other wait of a flush (the marker's op, the lanes' wait, a
 * plain thread's flush): a cancel wins over a passed deadline. The message
 * is sent from the backlog all the same. */
static void *flush_past_backlog(void *arg)
{
  bool cancelled = arg != NULL;
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  CO_EQ(weft_msg_send(1, TAG, cancelled ? 2 : 1), 0); /* waits in the backlog */
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);             /* still, when the flush looks */
  if (cancelled)
    CO_EQ(weft_cancel(weft_task_self()), 0);
  CO_EQ(weft_msg_flush_rt(NULL, weft_now()), cancelled ? -ECANCELED : -ETIMEDOUT);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]), 0);
  return NULL;
}

static void *flush_past_backlog_main(void *arg)
{
  (void)arg;
  CO_EQ(weft_join(spawn_on(0, flush_past_backlog, NULL), NULL), 0);
  CO_EQ(weft_join(spawn_on(0, flush_past_backlog, (void *)1), NULL), -ECANCELED);
  uint32_t vals[2] = {0, 0};
  CO_EQ(weft_join(spawn_on(1, recv_two, vals), NULL), 0);
  CO_EQ(vals[0], 1);
  CO_EQ(vals[1], 2);
  return NULL;
}

Test(msg, flush_in_a_cancelled_task_past_its_deadline_is_cancelled_with_a_backlog_too,
     .timeout = 60)
{
  cr_assert_null(rt_run(2, flush_past_backlog_main, NULL));
  rt_assert_clean();
}

/* Sends 42 to a receiver waiting on shard 1 (it stores it in vals[0]),
 * and the kernel refuses it: the resend comes when shard 0 next reaps,
 * once the caller suspends - after it has armed the faults that resend is
 * to meet. Returns the receiver. */
static weft_task *refused_send_to_a_waiter(uint32_t *vals)
{
  weft_task *t = spawn_on(1, recv_one, vals);
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1)); /* the receiver waits */
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  CO_EQ(weft_msg_send(1, TAG, 42), 0);
  return t;
}

/* A refused direct message whose resend finds no SQE: it waits in the
 * backlog and arrives (before, the synchronous post was refused too and
 * the message was gone). */
static void *refused_then_no_sqe_main(void *arg)
{
  (void)arg;
  uint32_t vals[1] = {0};
  weft_task *t = refused_send_to_a_waiter(vals);
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1); /* for the resend */
  weft__fault_arm(WEFT__FAULT_POST, 1);    /* were it posted instead */
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(vals[0], 42);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]), 0);
  weft__fault_arm(WEFT__FAULT_POST, 0);
  return NULL;
}

Test(msg, refused_direct_message_without_an_sqe_is_not_lost, .timeout = 60)
{
  cr_assert_null(rt_run(2, refused_then_no_sqe_main, NULL));
  rt_assert_clean();
}

/* The same, and the backlog has no memory to hold it: it is posted at once
 * (before, it was dropped, and the receiver waited out its 10 s). */
static void *refused_no_sqe_no_memory_main(void *arg)
{
  (void)arg;
  uint32_t vals[1] = {0};
  weft_task *t = refused_send_to_a_waiter(vals);
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1); /* for the resend */
  weft__fault_arm(WEFT__FAULT_BACKLOG, 1); /* and for the backlog it would wait in */
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(vals[0], 42);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_BACKLOG]), 0);
  CO_EQ(shard_stats(0).msg_failed, 1);
  return NULL;
}

Test(msg, refused_direct_message_without_an_sqe_or_memory_is_posted_at_once, .timeout = 60)
{
  cr_assert_null(rt_run(2, refused_no_sqe_no_memory_main, NULL));
  rt_assert_clean();
}

/* And with the kernel refusing that post as well, the process aborts
 * rather than lose the message (msg.h). */
static void *refused_everywhere_main(void *arg)
{
  (void)arg;
  uint32_t vals[1] = {0};
  weft_task *t = refused_send_to_a_waiter(vals);
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  weft__fault_arm(WEFT__FAULT_BACKLOG, 1);
  weft__fault_arm(WEFT__FAULT_POST, 1);
  weft_join(t, NULL); /* not reached: the resend aborts first */
  return NULL;
}

Test(msg, refused_direct_message_that_cannot_be_sent_again_aborts, .signal = SIGABRT,
     .timeout = 60)
{
  rt_run(2, refused_everywhere_main, NULL);
}

/* A direct message that finds no SQE and no memory to wait in the backlog
 * is not sent: -ENOMEM, and the next ones go as usual. */
static void *no_backlog_memory_main(void *arg)
{
  (void)arg;
  uint32_t vals[2] = {0, 0};
  weft_task *t = spawn_on(1, recv_two, vals);
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1);
  weft__fault_arm(WEFT__FAULT_BACKLOG, 1);
  CO_EQ(weft_msg_send(1, TAG, 41), -ENOMEM);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_BACKLOG]), 0);
  CO_EQ(weft_msg_send(1, TAG, 42), 0);
  CO_EQ(weft_msg_send_wait(1, TAG, 43), 0); /* posted behind 42 */
  CO_EQ(weft_msg_flush(), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(vals[0], 42); /* not 41: it was never sent */
  CO_EQ(vals[1], 43);
  CO_EQ(shard_stats(0).msgs_sent, 2);
  return NULL;
}

Test(msg, direct_message_without_an_sqe_or_backlog_memory_is_enomem, .timeout = 60)
{
  cr_assert_null(rt_run(2, no_backlog_memory_main, NULL));
  rt_assert_clean();
}

/* ---- the eventfd's poll, ended and not armed at once -------------------------------------- */

/* Shard 1's poll on its eventfd ends (cancelled here, as a full CQ ends
 * it) when there is no SQE to arm it again: the loop arms it a pass later
 * (meanwhile the shard sleeps 1 ms at most). Then a refused wake-up to the
 * sleeping shard 1, which goes by the eventfd, is heard. */
static void *end_the_eventfd_poll(void *arg)
{
  (void)arg;
  weft__shard *sh = weft__shard_self();
  struct io_uring_sqe *sqe = io_uring_get_sqe(&sh->ring);
  CO_CHECK(sqe != NULL);
  if (!sqe)
    return NULL;
  io_uring_prep_cancel64(sqe, WEFT__UD_WAKE_FD, 0);
  io_uring_sqe_set_data64(sqe, WEFT__UD_IGNORE);
  sh->sq_pending++;
  weft__fault_arm(WEFT__FAULT_SQ_FULL, 1); /* for the poll's next arming */
  /* The loop submits the cancel, reaps the poll's last CQE, finds no SQE. */
  for (int i = 0; i < 10000 && atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]); i++)
    weft_sleep(100 * WEFT_USEC);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_SQ_FULL]), 0);
  /* Armed again by the loop, a pass later. */
  CO_CHECK(RT_POLL(!sh->wake_fd_unarmed));
  return NULL;
}

static void *wake_by_fd_main(void *arg)
{
  (void)arg;
  weft__fault_arm(WEFT__FAULT_SEND, 1);
  weft_task *t = spawn_on(1, where_am_i, NULL);
  void *v = NULL;
  CO_EQ(weft_join_dl(t, &v, in_ms(10000)), 0);
  CO_EQ((intptr_t)v, 1);
  return NULL;
}

Test(msg, eventfd_poll_without_an_sqe_is_armed_again_by_the_loop, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  cr_assert_eq(weft_join(rt_submit_on(rt, 1, end_the_eventfd_poll, NULL), NULL), 0);
  cr_assert(rt_wait_parked(rt, 1), "shard 1 never slept");
  cr_assert_eq(weft_join(rt_submit_on(rt, 0, wake_by_fd_main, NULL), NULL), 0);
  rt_assert_clean();
  rt_stop_idle(rt);
}

/* ---- a message for a waiter its canceller has claimed ------------------------------------ */

/* A plain thread cancels a receiver and is held (weft__test_claim_pause)
 * after claiming its waiter and before taking it off the queue. A message
 * that arrives then finds the claimed waiter first in the queue: it must
 * pass it by and be kept, so that the cancelled receiver drains it. */
static atomic_bool claim_held, claim_release;

static void hold_after_claim(void)
{
  atomic_store(&claim_held, true);
  while (!atomic_load(&claim_release))
    sched_yield();
}

static void *claimed_receiver(void *arg)
{
  (void)arg;
  weft_msg m = {0};
  int r = weft_msg_recv(&m, WEFT_NO_DEADLINE);
  CO_EQ(r, -ECANCELED);
  CO_EQ(weft_msg_try_recv(&m, 0), 0); /* kept for it */
  CO_EQ(m.val, 42);
  return NULL;
}

static void *cancel_from_thread(void *arg)
{
  weft__test_claim_pause = hold_after_claim;
  int r = weft_cancel(arg);
  return (void *)(intptr_t)r;
}

static void *claimed_main(void *arg)
{
  (void)arg;
  atomic_store(&claim_held, false);
  atomic_store(&claim_release, false);
  weft_task *t = spawn_on(1, claimed_receiver, NULL);
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 1));
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, cancel_from_thread, t), 0);
  CO_CHECK(RT_POLL(atomic_load(&claim_held)));
  CO_EQ(weft_msg_send_wait(1, TAG, 42), 0);
  CO_CHECK(RT_POLL(shard_stats(1).msgs_received == 1)); /* shard 1 met the claimed waiter */
  weft__test_claim_pause = NULL;
  atomic_store(&claim_release, true);
  void *c = NULL;
  pthread_join(th, &c);
  CO_EQ((intptr_t)c, 0);
  CO_EQ(weft_join(t, NULL), -ECANCELED);
  return NULL;
}

Test(msg, a_message_for_a_waiter_its_canceller_claimed_is_kept, .timeout = 30)
{
  cr_assert_null(rt_run(2, claimed_main, NULL));
  rt_assert_clean();
}
