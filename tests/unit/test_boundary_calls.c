/* SPDX-License-Identifier: MIT */
/*
 * Suite "boundary", part 1 - weft_boundary calls that get through or are
 * refused: bad arguments and allocation failures, plain threads calling
 * into coroutine servers on two shards and the reverse, backpressure
 * (NOWAIT and waiting for room), and caller deadlines against late
 * responses. Errors, cancellation, close and the stress run are in
 * test_boundary_ends.c.
 */
#include "boundary_test.h"

#include <sched.h>

/* ---- arguments and allocation failures ---------------------------------------------- */

Test(boundary, bad_arguments_and_no_memory, .timeout = 30)
{
  weft_boundary *b = NULL;
  void *resp = IP(7);
  weft_boundary_ticket *t = IP(7);
  struct weft_boundary_stats s;
  cr_assert_eq(weft_boundary_create(NULL, 4), -EINVAL);
  cr_assert_eq(weft_boundary_create(&b, 0), -EINVAL);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  cr_assert_eq(weft_boundary_create(&b, 4), -ENOMEM);
  cr_assert_eq(weft_boundary_create(&b, 4), 0);

  cr_assert_eq(weft_boundary_call(NULL, NULL, &resp, 0, -1), -EINVAL);
  cr_assert_eq(weft_boundary_call(b, NULL, NULL, 0, -1), -EINVAL);
  cr_assert_eq(weft_boundary_call(b, NULL, &resp, 0x80, -1), -EINVAL);
  cr_assert_eq(resp, IP(7), "an -EINVAL call wrote *resp");
  cr_assert_eq(weft_boundary_recv(NULL, &t, -1), -EINVAL);
  cr_assert_eq(t, IP(7), "an -EINVAL recv wrote *t");
  cr_assert_eq(weft_boundary_recv(b, NULL, -1), -EINVAL);
  cr_assert_eq(weft_boundary_respond(NULL, NULL), -EINVAL);
  cr_assert_eq(weft_boundary_fail(NULL, -EIO), -EINVAL);
  cr_assert_eq(weft_boundary_close(NULL), -EINVAL);
  cr_assert_eq(weft_boundary_stats_get(NULL, &s), -EINVAL);
  cr_assert_eq(weft_boundary_stats_get(b, NULL), -EINVAL);
  cr_assert_null(weft_boundary_request(NULL));
  cr_assert_eq(weft_boundary_deadline(NULL), WEFT_NO_DEADLINE);
  cr_assert(!weft_boundary_waiting(NULL));
  weft_boundary_destroy(NULL);
  assert_counts(b, 0, 0, 0, 0, 0, 0, 0);

  /* No memory for the call's record: counted, nothing queued. */
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  cr_assert_eq(weft_boundary_call(b, IP(1), &resp, 0, -1), -ENOMEM);
  cr_assert_null(resp);
  assert_counts(b, 1, 0, 0, 0, 0, 0, 1);
  cr_assert_eq(GAUGE(b, queued), 0);

  /* A deadline already past fails before anything is queued. */
  cr_assert_eq(weft_boundary_call(b, IP(1), &resp, 0, weft_now() - 1), -ETIMEDOUT);
  assert_counts(b, 2, 0, 0, 1, 0, 0, 1);
  cr_assert_eq(weft_boundary_recv(b, &t, weft_now() - 1), -ETIMEDOUT, "polling an empty queue");
  cr_assert_null(t);
  weft_boundary_destroy(b);
  rt_assert_no_leaks();
}

/* For the tests of a call whose deadline timer gets no memory: a 2-shard
 * runtime, a boundary of 4 places, and caller c (request req) running fn
 * pinned to shard 1, whose timer heap nothing has used yet. */
static weft_task *call_on_a_fresh_shard(weft_runtime **rt, weft_boundary **b, caller *c,
                                        intptr_t req, void *(*fn)(void *))
{
  *rt = rt_start(2);
  cr_assert_eq(weft_boundary_create(b, 4), 0);
  memset(c, 0, sizeof(*c));
  c->b = *b;
  c->req = req;
  return submit_pinned(*rt, 1, fn, c);
}

/* A coroutine's deadline timer cannot be armed (the shard's timer heap cannot
 * grow): the call fails with -ENOMEM and its request is withdrawn. */
static void *call_without_timer(void *arg)
{
  caller *c = arg;
  if (weft__shard_self()->timers.cap != 0)
    return IP(1); /* this shard armed a timer already: no allocation to fail */
  weft__fault_arm(WEFT__FAULT_MALLOC, 2); /* 1: the call's record, 2: the heap */
  c->resp = IP(-1);
  c->result = weft_boundary_call(c->b, IP(c->req), &c->resp, 0, weft_now() + 60 * WEFT_SEC);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  return NULL;
}

Test(boundary, deadline_timer_without_memory_fails_the_call, .timeout = 30)
{
  weft_runtime *rt;
  weft_boundary *b;
  caller c;
  weft_task *ct = call_on_a_fresh_shard(&rt, &b, &c, 3, call_without_timer);
  void *v = NULL;
  cr_assert_eq(weft_join(ct, &v), 0);
  if (v)
    cr_skip_test("shard 1 had armed a timer before the test could fail its allocation");
  cr_assert_eq(c.result, -ENOMEM);
  cr_assert_null(c.resp);
  cr_assert_eq(GAUGE(b, queued), 0);
  weft_boundary_ticket *t;
  cr_assert_eq(weft_boundary_recv(b, &t, weft_now() - 1), -ETIMEDOUT);
  assert_counts(b, 1, 0, 0, 0, 0, 0, 1);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* The same for a server: a recv that would wait with a deadline and has no
 * memory for its timer is -ENOMEM, and takes nothing. */
static void *recv_without_timer(void *arg)
{
  weft_boundary *b = arg;
  if (weft__shard_self()->timers.cap != 0)
    return IP(1); /* this shard armed a timer already: no allocation to fail */
  weft_boundary_ticket *t = (weft_boundary_ticket *)IP(-1);
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int r = weft_boundary_recv(b, &t, weft_now() + 60 * WEFT_SEC);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(r, -ENOMEM);
  CO_CHECK(t == NULL); /* *t is NULL on every failure */
  return NULL;
}

Test(boundary, recv_deadline_timer_without_memory_is_enomem, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);
  weft_task *st = submit_pinned(rt, 1, recv_without_timer, b);
  void *v = NULL;
  cr_assert_eq(weft_join(st, &v), 0);
  rt_assert_clean();
  if (v)
    cr_skip_test("shard 1 had armed a timer before the test could fail its allocation");
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* A server holds the request when the caller's deadline timer cannot be
 * armed: the call ends -ENOMEM all the same, and the server's respond() is
 * told -ECANCELED (boundary.h) and keeps its response. A server can take
 * the request only between the caller's enqueue and its timer's arming,
 * with no suspension in between, so a test hook
 * (weft__test_call_queued_pause) holds the caller there until the server
 * has it, and only then arms the fault: the next allocation is the timer
 * heap's. */
static weft_boundary *queued_b;

static void wait_until_served(void)
{
  while (GAUGE(queued_b, serving) != 1)
    sched_yield();
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
}

static void *call_served_without_timer(void *arg)
{
  caller *c = arg;
  if (weft__shard_self()->timers.cap != 0) {
    weft_boundary_close(c->b); /* ends the server's wait: -EPIPE */
    return IP(1); /* this shard armed a timer already: no allocation to fail */
  }
  queued_b = c->b;
  weft__test_call_queued_pause = wait_until_served;
  c->resp = IP(-1);
  c->result = weft_boundary_call(c->b, IP(c->req), &c->resp, 0, weft_now() + 60 * WEFT_SEC);
  weft__test_call_queued_pause = NULL;
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 0); /* the heap's failed */
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  return NULL;
}

Test(boundary, respond_after_a_call_ended_without_timer_memory_is_ecanceled, .timeout = 30)
{
  weft_runtime *rt;
  weft_boundary *b;
  caller c;
  weft_task *ct = call_on_a_fresh_shard(&rt, &b, &c, 5, call_served_without_timer);
  /* This thread is the server: it takes the request the caller is held
   * after queuing. */
  weft_boundary_ticket *t = NULL;
  int r = weft_boundary_recv(b, &t, WEFT_NO_DEADLINE);
  void *v = NULL;
  cr_assert_eq(weft_join(ct, &v), 0);
  if (v)
    cr_skip_test("shard 1 had armed a timer before the test could fail its allocation");
  rt_assert_clean();
  cr_assert_eq(r, 0);
  cr_assert_eq(PI(weft_boundary_request(t)), 5);
  cr_assert_eq(c.result, -ENOMEM);
  cr_assert_null(c.resp);
  cr_assert(!weft_boundary_waiting(t));
  assert_counts(b, 1, 0, 0, 0, 0, 0, 1);
  cr_assert_eq(GAUGE(b, serving), 0);
  int *resp = malloc(sizeof(*resp));
  cr_assert_eq(weft_boundary_respond(t, resp), -ECANCELED);
  t = NULL; /* consumed: the leak check below must not find it through us */
  free(resp); /* still ours: ASan would report a leak or a double free */
  cr_assert_eq(bstats(b).late, 1);
  assert_counts(b, 1, 0, 0, 0, 0, 0, 1);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* Any negative deadline is no deadline (weft/time.h), and the server is
 * told so in the one value it can compare with. */
Test(boundary, a_negative_deadline_reaches_the_server_as_none, .timeout = 30)
{
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);
  caller c;
  start_caller(&c, b, 9, -5);
  weft_boundary_ticket *t = NULL;
  cr_assert_eq(weft_boundary_recv(b, &t, weft_now() + 10 * WEFT_SEC), 0);
  cr_assert_eq(PI(weft_boundary_request(t)), 9);
  cr_assert_eq(weft_boundary_deadline(t), WEFT_NO_DEADLINE);
  cr_assert_eq(weft_boundary_respond(t, IP(27)), 0);
  join_caller(&c);
  cr_assert_eq(c.result, 0);
  cr_assert_eq(PI(c.resp), 27);
  weft_boundary_destroy(b);
}

/* ---- external threads calling coroutine servers on two shards ---------------------- */

#define EXT_THREADS 4
#define EXT_CALLS 2500

typedef struct ext {
  weft_boundary *b;
  int id;
  int shard; /* of a server */
  int bad;   /* wrong responses seen by a caller */
} ext;

static void *serve_triple(void *arg)
{
  ext *e = arg;
  e->shard = weft_shard_id();
  intptr_t served = 0;
  weft_boundary_ticket *t;
  int r;
  while ((r = weft_boundary_recv(e->b, &t, WEFT_NO_DEADLINE)) == 0) {
    CO_CHECK(weft_boundary_waiting(t));
    CO_EQ(weft_boundary_deadline(t), WEFT_NO_DEADLINE);
    CO_EQ(weft_boundary_respond(t, IP(PI(weft_boundary_request(t)) * 3)), 0);
    served++;
    if (served % 64 == 0)
      weft_yield(); /* let the other server of this shard in */
  }
  CO_EQ(r, -EPIPE);
  return IP(served);
}

static void *ext_caller(void *arg)
{
  ext *e = arg;
  for (int i = 0; i < EXT_CALLS; i++) {
    intptr_t req = ((intptr_t)e->id << 20) | (i + 1);
    void *resp = NULL;
    int r = weft_boundary_call(e->b, IP(req), &resp, 0, WEFT_NO_DEADLINE);
    if (r != 0 || PI(resp) != req * 3)
      e->bad++;
  }
  return NULL;
}

Test(boundary, external_threads_call_coroutine_servers_on_two_shards, .timeout = 90)
{
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 16), 0);
  ext srv[4], cl[EXT_THREADS];
  weft_task *st[4];
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  for (int i = 0; i < 4; i++) {
    srv[i] = (ext){.b = b, .id = i, .shard = -1};
    cr_assert_eq(weft_runtime_submit(rt, &o, serve_triple, &srv[i], &st[i]), 0);
  }
  pthread_t th[EXT_THREADS];
  for (int i = 0; i < EXT_THREADS; i++) {
    cl[i] = (ext){.b = b, .id = i + 1};
    cr_assert_eq(pthread_create(&th[i], NULL, ext_caller, &cl[i]), 0);
  }
  for (int i = 0; i < EXT_THREADS; i++) {
    cr_assert_eq(pthread_join(th[i], NULL), 0);
    cr_assert_eq(cl[i].bad, 0, "caller %d saw %d wrong results", i, cl[i].bad);
  }
  assert_counts(b, EXT_THREADS * EXT_CALLS, EXT_THREADS * EXT_CALLS, 0, 0, 0, 0, 0);
  cr_assert_eq(weft_boundary_close(b), 0);
  intptr_t served = 0;
  bool on[2] = {false, false};
  for (int i = 0; i < 4; i++) {
    void *v = NULL;
    cr_assert_eq(weft_join(st[i], &v), 0);
    served += PI(v);
    cr_assert(srv[i].shard == 0 || srv[i].shard == 1);
    on[srv[i].shard] = true;
  }
  cr_assert(on[0] && on[1], "the servers did not run on both shards");
  rt_assert_clean();
  cr_assert_eq(served, EXT_THREADS * EXT_CALLS);
  struct weft_boundary_stats s = bstats(b);
  cr_assert_eq(s.queued + s.serving + s.late + s.room_waiters + s.recv_waiters, 0);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- coroutines calling a plain-thread server ---------------------------------------- */

#define CO_CALLERS 8
#define CO_CALLS 500

static void *co_caller(void *arg)
{
  ext *e = arg;
  for (int i = 0; i < CO_CALLS; i++) {
    intptr_t req = ((intptr_t)e->id << 20) | (i + 1);
    void *resp = NULL;
    int r = weft_boundary_call(e->b, IP(req), &resp, 0, WEFT_NO_DEADLINE);
    CO_EQ(r, 0);
    CO_EQ(PI(resp), req * 3);
  }
  return NULL;
}

static void *thread_server(void *arg)
{
  ext *e = arg;
  intptr_t served = 0;
  weft_boundary_ticket *t;
  int r;
  while ((r = weft_boundary_recv(e->b, &t, WEFT_NO_DEADLINE)) == 0) {
    CO_EQ(weft_boundary_respond(t, IP(PI(weft_boundary_request(t)) * 3)), 0);
    served++;
  }
  CO_EQ(r, -EPIPE);
  return IP(served);
}

Test(boundary, coroutines_call_plain_thread_servers, .timeout = 90)
{
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);
  ext srv[2], cl[CO_CALLERS];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    srv[i] = (ext){.b = b};
    cr_assert_eq(pthread_create(&th[i], NULL, thread_server, &srv[i]), 0);
  }
  weft_task *t[CO_CALLERS];
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  for (int i = 0; i < CO_CALLERS; i++) {
    cl[i] = (ext){.b = b, .id = i + 1};
    cr_assert_eq(weft_runtime_submit(rt, &o, co_caller, &cl[i], &t[i]), 0);
  }
  for (int i = 0; i < CO_CALLERS; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  rt_assert_clean();
  cr_assert_eq(weft_boundary_close(b), 0);
  intptr_t served = 0;
  for (int i = 0; i < 2; i++) {
    void *v = NULL;
    cr_assert_eq(pthread_join(th[i], &v), 0);
    served += PI(v);
  }
  rt_assert_clean();
  cr_assert_eq(served, CO_CALLERS * CO_CALLS);
  assert_counts(b, CO_CALLERS * CO_CALLS, CO_CALLERS * CO_CALLS, 0, 0, 0, 0, 0);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- backpressure --------------------------------------------------------------------- */

Test(boundary, nowait_on_a_full_queue_is_overloaded, .timeout = 30)
{
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 2), 0);
  caller c[2];
  start_caller(&c[0], b, 10, WEFT_NO_DEADLINE);
  cr_assert(RT_POLL(GAUGE(b, queued) == 1));
  start_caller(&c[1], b, 11, WEFT_NO_DEADLINE);
  cr_assert(RT_POLL(GAUGE(b, queued) == 2));

  void *resp = IP(7);
  cr_assert_eq(weft_boundary_call(b, IP(12), &resp, WEFT_BOUNDARY_NOWAIT, WEFT_NO_DEADLINE),
               -EAGAIN);
  cr_assert_null(resp);
  cr_assert_eq(weft_boundary_call(b, IP(13), &resp, WEFT_BOUNDARY_NOWAIT,
                                  weft_now() + 10 * WEFT_SEC),
               -EAGAIN);
  assert_counts_busy(b, 4, 0, 2, 0, 0, 0, 0, 2);

  /* Oldest first; the rejected requests never reached the queue. */
  for (int i = 0; i < 2; i++) {
    weft_boundary_ticket *t;
    cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), 0);
    cr_assert_eq(PI(weft_boundary_request(t)), 10 + i);
    cr_assert_eq(weft_boundary_respond(t, IP(100 + i)), 0);
  }
  weft_boundary_ticket *t;
  cr_assert_eq(weft_boundary_recv(b, &t, weft_now() - 1), -ETIMEDOUT);
  for (int i = 0; i < 2; i++) {
    join_caller(&c[i]);
    cr_assert_eq(c[i].result, 0);
    cr_assert_eq(PI(c[i].resp), 100 + i);
  }
  /* With room, NOWAIT queues and waits for the response like any call. */
  start_caller(&c[0], b, 14, WEFT_NO_DEADLINE);
  cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), 0);
  cr_assert_eq(weft_boundary_respond(t, IP(114)), 0);
  join_caller(&c[0]);
  cr_assert_eq(PI(c[0].resp), 114);
  assert_counts(b, 5, 3, 2, 0, 0, 0, 0);
  weft_boundary_destroy(b);
  rt_assert_no_leaks();
}

Test(boundary, callers_wait_for_room_within_their_deadline, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 1), 0);
  caller a, c, d;
  start_caller(&a, b, 1, WEFT_NO_DEADLINE);
  cr_assert(RT_POLL(GAUGE(b, queued) == 1));
  /* A coroutine waits for room. */
  memset(&c, 0, sizeof(c));
  c.b = b;
  c.req = 2;
  c.deadline = WEFT_NO_DEADLINE;
  weft_task *ct;
  cr_assert_eq(weft_runtime_submit(rt, NULL, co_call_once, &c, &ct), 0);
  cr_assert(RT_POLL(GAUGE(b, room_waiters) == 1));
  /* A plain thread waits for room with a deadline, which passes. */
  start_caller(&d, b, 3, weft_now() + 20 * WEFT_MSEC);
  join_caller(&d);
  cr_assert_eq(d.result, -ETIMEDOUT);
  cr_assert_null(d.resp);
  cr_assert_eq(GAUGE(b, room_waiters), 1);
  cr_assert(!atomic_load(&c.returned));

  /* Receiving frees the place: the waiting coroutine's request moves in. */
  weft_boundary_ticket *t1, *t2;
  cr_assert_eq(weft_boundary_recv(b, &t1, WEFT_NO_DEADLINE), 0);
  cr_assert_eq(PI(weft_boundary_request(t1)), 1);
  cr_assert(RT_POLL(GAUGE(b, queued) == 1));
  cr_assert_eq(GAUGE(b, room_waiters), 0);
  cr_assert_eq(GAUGE(b, serving), 1);
  cr_assert_eq(weft_boundary_recv(b, &t2, WEFT_NO_DEADLINE), 0);
  cr_assert_eq(PI(weft_boundary_request(t2)), 2, "the timed-out request reached the server");
  cr_assert_eq(weft_boundary_respond(t2, IP(202)), 0);
  cr_assert_eq(weft_boundary_respond(t1, IP(101)), 0);
  cr_assert_eq(weft_boundary_recv(b, &t1, weft_now() - 1), -ETIMEDOUT);
  join_caller(&a);
  cr_assert_eq(weft_join(ct, NULL), 0);
  cr_assert_eq(a.result, 0);
  cr_assert_eq(PI(a.resp), 101);
  cr_assert_eq(c.result, 0);
  cr_assert_eq(PI(c.resp), 202);
  assert_counts(b, 3, 2, 0, 1, 0, 0, 0);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- deadlines and late responses ------------------------------------------------------ */

static void *co_call_in_scope(void *arg)
{
  caller *c = arg;
  /* The call itself has no deadline: the task's scope gives it one. */
  int64_t saved = weft_deadline_push(c->deadline);
  c->resp = IP(-1);
  c->result = weft_boundary_call(c->b, IP(c->req), &c->resp, 0, WEFT_NO_DEADLINE);
  weft_deadline_pop(saved);
  atomic_store(&c->returned, true);
  return NULL;
}

/* Starts a caller (a coroutine on rt, or a plain thread if rt is NULL) whose
 * deadline is to pass while the server holds its request, and receives that
 * request. On a slow machine the deadline may pass before the server gets
 * there (the caller then withdraws its request): try again with a longer
 * deadline; *withdrawn counts those calls (timed out, never served). */
static weft_boundary_ticket *recv_before_deadline(weft_boundary *b, weft_runtime *rt, caller *c,
                                                  intptr_t req, weft_task **ct, int *withdrawn)
{
  for (int64_t span = 20 * WEFT_MSEC;; span *= 2) {
    cr_assert_lt(span, 20 * WEFT_SEC);
    if (rt) {
      memset(c, 0, sizeof(*c));
      c->b = b;
      c->req = req;
      c->deadline = weft_now() + span;
      cr_assert_eq(weft_runtime_submit(rt, NULL, co_call_in_scope, c, ct), 0);
    } else {
      start_caller(c, b, req, weft_now() + span);
    }
    weft_boundary_ticket *t = NULL;
    int r = weft_boundary_recv(b, &t, c->deadline);
    if (r == 0)
      return t;
    cr_assert_eq(r, -ETIMEDOUT);
    if (rt)
      cr_assert_eq(weft_join(*ct, NULL), 0);
    else
      join_caller(c);
    cr_assert_eq(c->result, -ETIMEDOUT);
    cr_assert_eq(GAUGE(b, queued), 0);
    (*withdrawn)++;
  }
}

Test(boundary, caller_deadline_wins_and_the_late_response_stays_with_the_server, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);
  int withdrawn = 0;

  /* A coroutine caller (deadline from its scope), a plain-thread server. */
  caller c;
  weft_task *ct;
  weft_boundary_ticket *t = recv_before_deadline(b, rt, &c, 5, &ct, &withdrawn);
  cr_assert_eq(PI(weft_boundary_request(t)), 5);
  cr_assert_eq(weft_boundary_deadline(t), c.deadline);
  cr_assert(RT_POLL(atomic_load(&c.returned)));
  cr_assert_eq(c.result, -ETIMEDOUT);
  cr_assert_null(c.resp);
  cr_assert(!weft_boundary_waiting(t));
  cr_assert_eq(GAUGE(b, serving), 0);
  int *late = malloc(sizeof(*late));
  cr_assert_eq(weft_boundary_respond(t, late), -ETIMEDOUT);
  free(late); /* still ours: ASan would report a leak or a double free */
  cr_assert_eq(weft_join(ct, NULL), 0);

  /* A plain-thread caller, with fail() coming late. */
  caller d;
  t = recv_before_deadline(b, NULL, &d, 6, NULL, &withdrawn);
  cr_assert_eq(PI(weft_boundary_request(t)), 6);
  join_caller(&d);
  cr_assert_eq(d.result, -ETIMEDOUT);
  cr_assert_eq(weft_boundary_fail(t, -EIO), -ETIMEDOUT);

  /* A request whose caller timed out while it was queued is withdrawn. */
  start_caller(&d, b, 7, weft_now() + 10 * WEFT_MSEC);
  join_caller(&d);
  cr_assert_eq(d.result, -ETIMEDOUT);
  cr_assert_eq(GAUGE(b, queued), 0);
  cr_assert_eq(weft_boundary_recv(b, &t, weft_now() - 1), -ETIMEDOUT);

  assert_counts(b, 3 + withdrawn, 0, 0, 3 + withdrawn, 0, 0, 0);
  cr_assert_eq(bstats(b).late, 2);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}
