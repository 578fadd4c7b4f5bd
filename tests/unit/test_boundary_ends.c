/* SPDX-License-Identifier: MIT */
/*
 * Suite "boundary", part 2 - calls that end another way: server errors,
 * cancelled callers, server receive deadlines, cancellation and close,
 * close with calls in every stage, tickets outliving destroy, and a stress
 * run where deadlines and cancellation race responses: every call must end
 * exactly one way, on both sides, and every response must end with exactly
 * one owner (ASan's leak check and double-free detection see to the
 * latter); then close racing calls in flight.
 */
#include "boundary_test.h"

/* ---- server errors ---------------------------------------------------------------------- */

Test(boundary, fail_hands_the_server_error_to_the_caller, .timeout = 30)
{
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);
  caller c;
  start_caller(&c, b, 8, WEFT_NO_DEADLINE);
  weft_boundary_ticket *t;
  cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), 0);
  cr_assert_eq(weft_boundary_fail(t, 0), -EINVAL);
  cr_assert_eq(weft_boundary_fail(t, 5), -EINVAL);
  cr_assert(weft_boundary_waiting(t), "an -EINVAL fail consumed the ticket");
  cr_assert_eq(weft_boundary_fail(t, -EIO), 0);
  join_caller(&c);
  cr_assert_eq(c.result, -EIO);
  cr_assert_null(c.resp);
  assert_counts(b, 1, 0, 0, 0, 0, 0, 1);
  weft_boundary_destroy(b);
  rt_assert_no_leaks();
}

/* ---- cancellation -------------------------------------------------------------------------- */

Test(boundary, cancelled_caller_coroutine_ends_the_call_on_both_sides, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;

  /* Cancelled while a server holds the request. */
  caller c;
  memset(&c, 0, sizeof(c));
  c.b = b;
  c.req = 9;
  c.deadline = WEFT_NO_DEADLINE;
  weft_task *ct;
  cr_assert_eq(weft_runtime_submit(rt, &o, co_call_once, &c, &ct), 0);
  weft_boundary_ticket *t;
  cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), 0);
  cr_assert(weft_boundary_waiting(t));
  cr_assert_eq(weft_cancel(ct), 0);
  cr_assert(RT_POLL(atomic_load(&c.returned)));
  cr_assert_eq(c.result, -ECANCELED);
  cr_assert_null(c.resp);
  cr_assert(!weft_boundary_waiting(t));
  int *late = malloc(sizeof(*late));
  cr_assert_eq(weft_boundary_respond(t, late), -ECANCELED);
  free(late);
  cr_assert_eq(weft_join(ct, NULL), -ECANCELED);

  /* Cancelled while its request is queued: withdrawn. */
  memset(&c, 0, sizeof(c));
  c.b = b;
  c.req = 10;
  c.deadline = WEFT_NO_DEADLINE;
  cr_assert_eq(weft_runtime_submit(rt, &o, co_call_once, &c, &ct), 0);
  cr_assert(RT_POLL(GAUGE(b, queued) == 1));
  cr_assert_eq(weft_cancel(ct), 0);
  cr_assert(RT_POLL(atomic_load(&c.returned)));
  cr_assert_eq(c.result, -ECANCELED);
  cr_assert_eq(GAUGE(b, queued), 0);
  cr_assert_eq(weft_boundary_recv(b, &t, weft_now() - 1), -ETIMEDOUT);
  cr_assert_eq(weft_join(ct, NULL), -ECANCELED);

  assert_counts(b, 2, 0, 0, 0, 2, 0, 0);
  cr_assert_eq(bstats(b).late, 1);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- server receive: deadlines, cancellation, close ---------------------------------------- */

typedef struct rcv {
  weft_boundary *b;
  int64_t deadline;
  atomic_bool returned;
  int result;
} rcv;

static void *recv_once(void *arg)
{
  rcv *r = arg;
  weft_boundary_ticket *t = IP(1);
  r->result = weft_boundary_recv(r->b, &t, r->deadline);
  CO_CHECK(t == NULL);
  atomic_store(&r->returned, true);
  return NULL;
}

Test(boundary, server_recv_deadline_cancel_and_close, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);

  /* Deadlines: a coroutine and a plain thread. */
  rcv r1 = {.b = b, .deadline = weft_now() + 10 * WEFT_MSEC};
  weft_task *t1;
  cr_assert_eq(weft_runtime_submit(rt, NULL, recv_once, &r1, &t1), 0);
  rcv r2 = {.b = b, .deadline = weft_now() + 10 * WEFT_MSEC};
  recv_once(&r2);
  cr_assert_eq(r2.result, -ETIMEDOUT);
  cr_assert_eq(weft_join(t1, NULL), 0);
  cr_assert_eq(r1.result, -ETIMEDOUT);

  /* Cancellation of a coroutine waiting in recv. */
  rcv r3 = {.b = b, .deadline = WEFT_NO_DEADLINE};
  cr_assert_eq(weft_runtime_submit(rt, NULL, recv_once, &r3, &t1), 0);
  cr_assert(RT_POLL(GAUGE(b, recv_waiters) == 1));
  cr_assert_eq(weft_cancel(t1), 0);
  cr_assert(RT_POLL(atomic_load(&r3.returned)));
  cr_assert_eq(r3.result, -ECANCELED);
  cr_assert_eq(weft_join(t1, NULL), -ECANCELED);
  cr_assert(RT_POLL(GAUGE(b, recv_waiters) == 0));

  /* Close releases a waiting coroutine and a waiting thread. */
  rcv r4 = {.b = b, .deadline = WEFT_NO_DEADLINE}, r5 = r4;
  cr_assert_eq(weft_runtime_submit(rt, NULL, recv_once, &r4, &t1), 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, recv_once, &r5), 0);
  cr_assert(RT_POLL(GAUGE(b, recv_waiters) == 2));
  cr_assert_eq(weft_boundary_close(b), 0);
  cr_assert_eq(pthread_join(th, NULL), 0);
  cr_assert_eq(weft_join(t1, NULL), 0);
  cr_assert_eq(r4.result, -EPIPE);
  cr_assert_eq(r5.result, -EPIPE);
  weft_boundary_ticket *t;
  cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), -EPIPE);
  rt_assert_clean();
  assert_counts(b, 0, 0, 0, 0, 0, 0, 0);
  weft_boundary_destroy(b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- close with calls in every stage -------------------------------------------------------- */

Test(boundary, close_fails_every_call_in_every_stage, .timeout = 30)
{
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 2), 0);
  caller c[4];
  start_caller(&c[0], b, 1, WEFT_NO_DEADLINE); /* will be served */
  weft_boundary_ticket *t;
  cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), 0);
  start_caller(&c[1], b, 2, WEFT_NO_DEADLINE); /* queued */
  start_caller(&c[2], b, 3, WEFT_NO_DEADLINE); /* queued */
  cr_assert(RT_POLL(GAUGE(b, queued) == 2));
  start_caller(&c[3], b, 4, weft_now() + 60 * WEFT_SEC); /* waiting for room */
  cr_assert(RT_POLL(GAUGE(b, room_waiters) == 1));
  struct weft_boundary_stats s = bstats(b);
  cr_assert_eq(s.serving, 1);

  cr_assert_eq(weft_boundary_close(b), 0);
  for (int i = 0; i < 4; i++) {
    join_caller(&c[i]);
    cr_assert_eq(c[i].result, -EPIPE, "caller %d: %d", i, c[i].result);
    cr_assert_null(c[i].resp);
  }
  int *late = malloc(sizeof(*late));
  cr_assert_eq(weft_boundary_respond(t, late), -EPIPE);
  free(late);
  cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), -EPIPE);
  void *resp;
  cr_assert_eq(weft_boundary_call(b, IP(5), &resp, 0, WEFT_NO_DEADLINE), -EPIPE);
  cr_assert_eq(weft_boundary_call(b, IP(6), &resp, WEFT_BOUNDARY_NOWAIT, WEFT_NO_DEADLINE),
               -EPIPE);
  cr_assert_eq(weft_boundary_close(b), 0, "close is idempotent");
  assert_counts(b, 6, 0, 0, 0, 0, 6, 0);
  s = bstats(b);
  cr_assert_eq(s.queued + s.serving + s.room_waiters + s.recv_waiters, 0);
  cr_assert_eq(s.late, 1);
  weft_boundary_destroy(b);
  rt_assert_no_leaks();
}

/* A ticket received before destroy stays valid after it. */
Test(boundary, ticket_outlives_destroy, .timeout = 30)
{
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 1), 0);
  caller c;
  start_caller(&c, b, 77, WEFT_NO_DEADLINE);
  weft_boundary_ticket *t;
  cr_assert_eq(weft_boundary_recv(b, &t, WEFT_NO_DEADLINE), 0);
  weft_boundary_close(b);
  join_caller(&c);
  cr_assert_eq(c.result, -EPIPE);
  weft_boundary_destroy(b);
  cr_assert_eq(PI(weft_boundary_request(t)), 77);
  cr_assert(!weft_boundary_waiting(t));
  cr_assert_eq(weft_boundary_respond(t, NULL), -EPIPE);
  rt_assert_no_leaks();
}

/* ---- stress: deadlines and cancellation racing responses ------------------------------------- */

#define ST_CO 8          /* coroutine callers */
#define ST_TH 2          /* plain-thread callers */
#define ST_CALLS 2000    /* per caller: 20,000 in all */
#define ST_DOOMED 4      /* extra coroutine callers that get cancelled */

typedef struct stress {
  weft_boundary *b;
  atomic_long caller_ok, caller_to, caller_cancel, caller_other;
  atomic_long server_ok, server_to, server_cancel, server_other;
  atomic_long doomed_calls;
} stress;

typedef struct st_caller {
  stress *s;
  int id;
  atomic_long calls; /* a doomed caller's calls so far */
} st_caller;

static uint32_t xorshift(uint32_t *x)
{
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

static void spin_ns(int64_t ns)
{
  int64_t end = weft_now() + ns;
  while (weft_now() < end)
    ;
}

/* One call; returns its result after checking and freeing the response. */
static int st_call(stress *s, intptr_t req, int64_t deadline)
{
  void *resp = IP(-1);
  int r = weft_boundary_call(s->b, IP(req), &resp, 0, deadline);
  if (r == 0) {
    CO_CHECK(resp && *(intptr_t *)resp == req + 1);
    free(resp);
    atomic_fetch_add(&s->caller_ok, 1);
  } else {
    CO_CHECK(resp == NULL);
    if (r == -ETIMEDOUT)
      atomic_fetch_add(&s->caller_to, 1);
    else if (r == -ECANCELED)
      atomic_fetch_add(&s->caller_cancel, 1);
    else
      atomic_fetch_add(&s->caller_other, 1);
  }
  return r;
}

static void *st_caller_main(void *arg)
{
  st_caller *c = arg;
  uint32_t x = 2463534242u + (uint32_t)c->id * 7919u;
  for (int i = 0; i < ST_CALLS; i++) {
    /* Deadlines from "already nearly over" to a little past a slow answer. */
    int64_t d = weft_now() + (int64_t)(xorshift(&x) % 80) * WEFT_USEC;
    st_call(c->s, ((intptr_t)c->id << 24) | i, d);
  }
  return NULL;
}

/* Calls without a deadline until cancelled; counts its calls. */
static void *st_doomed(void *arg)
{
  st_caller *c = arg;
  for (int i = 0; i < 1 << 20; i++) {
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_add(&c->s->doomed_calls, 1);
    if (st_call(c->s, ((intptr_t)c->id << 24) | i, WEFT_NO_DEADLINE) == -ECANCELED)
      break;
  }
  return NULL;
}

static void *st_server(void *arg)
{
  stress *s = arg;
  uint32_t x = 88172645u ^ (uint32_t)(uintptr_t)&x;
  weft_boundary_ticket *t;
  while (weft_boundary_recv(s->b, &t, WEFT_NO_DEADLINE) == 0) {
    uint32_t v = xorshift(&x);
    if (v % 4 == 0)
      weft_yield();
    else if (v % 4 == 1)
      spin_ns((int64_t)(v >> 8) % (50 * WEFT_USEC));
    intptr_t *resp = malloc(sizeof(*resp));
    *resp = PI(weft_boundary_request(t)) + 1;
    int r = weft_boundary_respond(t, resp);
    if (r == 0)
      atomic_fetch_add(&s->server_ok, 1);
    else {
      free(resp);
      if (r == -ETIMEDOUT)
        atomic_fetch_add(&s->server_to, 1);
      else if (r == -ECANCELED)
        atomic_fetch_add(&s->server_cancel, 1);
      else
        atomic_fetch_add(&s->server_other, 1);
    }
  }
  return NULL;
}

Test(boundary, stress_deadlines_and_cancels_race_responses, .timeout = 110)
{
  weft_runtime *rt = rt_start(2);
  stress s = {0};
  cr_assert_eq(weft_boundary_create(&s.b, 8), 0);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  weft_task *srv[3], *co[ST_CO], *doomed[ST_DOOMED];
  for (int i = 0; i < 3; i++)
    cr_assert_eq(weft_runtime_submit(rt, &o, st_server, &s, &srv[i]), 0);
  pthread_t thsrv;
  cr_assert_eq(pthread_create(&thsrv, NULL, st_server, &s), 0);

  st_caller cc[ST_CO + ST_TH + ST_DOOMED];
  for (int i = 0; i < ST_CO + ST_TH + ST_DOOMED; i++) {
    cc[i].s = &s;
    cc[i].id = i + 1;
    atomic_init(&cc[i].calls, 0);
  }
  for (int i = 0; i < ST_CO; i++)
    cr_assert_eq(weft_runtime_submit(rt, &o, st_caller_main, &cc[i], &co[i]), 0);
  pthread_t th[ST_TH];
  for (int i = 0; i < ST_TH; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, st_caller_main, &cc[ST_CO + i]), 0);
  for (int i = 0; i < ST_DOOMED; i++)
    cr_assert_eq(weft_runtime_submit(rt, &o, st_doomed, &cc[ST_CO + ST_TH + i], &doomed[i]), 0);

  /* Cancel the doomed callers one by one while the others run (each has
   * started calling: one cancelled before it ran would make no call). */
  for (int i = 0; i < ST_DOOMED; i++) {
    st_caller *d = &cc[ST_CO + ST_TH + i];
    cr_assert(RT_POLL(atomic_load(&d->calls) > 20 * (i + 1)));
    cr_assert_eq(weft_cancel(doomed[i]), 0);
  }
  for (int i = 0; i < ST_CO; i++)
    cr_assert_eq(weft_join(co[i], NULL), 0);
  for (int i = 0; i < ST_TH; i++)
    cr_assert_eq(pthread_join(th[i], NULL), 0);
  for (int i = 0; i < ST_DOOMED; i++)
    cr_assert_eq(weft_join(doomed[i], NULL), -ECANCELED);
  cr_assert_eq(weft_boundary_close(s.b), 0);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(weft_join(srv[i], NULL), 0);
  cr_assert_eq(pthread_join(thsrv, NULL), 0);
  rt_assert_clean();

  long ok = atomic_load(&s.caller_ok), to = atomic_load(&s.caller_to);
  long cancel = atomic_load(&s.caller_cancel);
  long total = (long)(ST_CO + ST_TH) * ST_CALLS + atomic_load(&s.doomed_calls);
  cr_log_info("boundary stress: %ld calls: %ld answered, %ld timed out (%ld late answers), "
              "%ld cancelled (%ld late answers)",
              total, ok, to, atomic_load(&s.server_to), cancel, atomic_load(&s.server_cancel));
  cr_assert_eq(atomic_load(&s.caller_other), 0);
  cr_assert_eq(atomic_load(&s.server_other), 0);
  /* Both sides agree on how each call ended. */
  cr_assert_eq(atomic_load(&s.server_ok), ok, "responses delivered != responses received");
  cr_assert_leq(atomic_load(&s.server_to), to);
  cr_assert_leq(atomic_load(&s.server_cancel), cancel);
  cr_assert_eq(cancel, ST_DOOMED, "each doomed caller ends with exactly one cancelled call");
  assert_counts(s.b, (uint64_t)total, (uint64_t)ok, 0, (uint64_t)to, (uint64_t)cancel, 0, 0);
  struct weft_boundary_stats bs = bstats(s.b);
  cr_assert_eq(bs.late, (uint64_t)(atomic_load(&s.server_to) + atomic_load(&s.server_cancel)));
  cr_assert_eq(bs.queued + bs.serving + bs.room_waiters + bs.recv_waiters, 0);
  weft_boundary_destroy(s.b);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- close racing calls in flight -------------------------------------------------------------- */

typedef struct closing {
  weft_boundary *b;
  atomic_long made, ok, closed, other, srv_ok, srv_late;
} closing;

static void *closing_caller(void *arg)
{
  closing *c = arg;
  for (intptr_t i = 1;; i++) {
    void *resp = IP(-1);
    atomic_fetch_add(&c->made, 1);
    int r = weft_boundary_call(c->b, IP(i), &resp, 0, WEFT_NO_DEADLINE);
    if (r == 0) {
      CO_EQ(PI(resp), i + 7);
      atomic_fetch_add(&c->ok, 1);
    } else if (r == -EPIPE) {
      CO_CHECK(resp == NULL);
      atomic_fetch_add(&c->closed, 1);
      return NULL; /* every later call would fail the same way */
    } else {
      atomic_fetch_add(&c->other, 1);
      return NULL;
    }
  }
}

static void *closing_server(void *arg)
{
  closing *c = arg;
  weft_boundary_ticket *t;
  unsigned n = 0;
  while (weft_boundary_recv(c->b, &t, WEFT_NO_DEADLINE) == 0) {
    if (++n % 3 == 0)
      weft_yield();
    if (weft_boundary_respond(t, IP(PI(weft_boundary_request(t)) + 7)) == 0)
      atomic_fetch_add(&c->srv_ok, 1);
    else
      atomic_fetch_add(&c->srv_late, 1);
  }
  return NULL;
}

Test(boundary, close_races_calls_in_flight, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  for (int round = 0; round < 10; round++) {
    closing c = {0};
    cr_assert_eq(weft_boundary_create(&c.b, 3), 0);
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_ROUND_ROBIN;
    weft_task *srv[2], *co[4];
    pthread_t th[3];
    for (int i = 0; i < 2; i++)
      cr_assert_eq(weft_runtime_submit(rt, &o, closing_server, &c, &srv[i]), 0);
    cr_assert_eq(pthread_create(&th[0], NULL, closing_server, &c), 0);
    for (int i = 0; i < 4; i++)
      cr_assert_eq(weft_runtime_submit(rt, &o, closing_caller, &c, &co[i]), 0);
    for (int i = 1; i < 3; i++)
      cr_assert_eq(pthread_create(&th[i], NULL, closing_caller, &c), 0);
    /* Close at a different point of the traffic each round. */
    cr_assert(RT_POLL(atomic_load(&c.ok) >= 100 * (round + 1)));
    cr_assert_eq(weft_boundary_close(c.b), 0);
    for (int i = 0; i < 4; i++)
      cr_assert_eq(weft_join(co[i], NULL), 0);
    for (int i = 0; i < 2; i++)
      cr_assert_eq(weft_join(srv[i], NULL), 0);
    for (int i = 0; i < 3; i++)
      cr_assert_eq(pthread_join(th[i], NULL), 0);
    rt_assert_clean();
    long ok = atomic_load(&c.ok);
    cr_assert_eq(atomic_load(&c.other), 0);
    cr_assert_eq(atomic_load(&c.closed), 6, "each caller ends with exactly one -EPIPE");
    cr_assert_eq(atomic_load(&c.srv_ok), ok);
    cr_assert_leq(atomic_load(&c.srv_late), 6);
    assert_counts(c.b, (uint64_t)atomic_load(&c.made), (uint64_t)ok, 0, 0, 0, 6, 0);
    cr_assert_eq(bstats(c.b).late, (uint64_t)atomic_load(&c.srv_late));
    weft_boundary_destroy(c.b);
  }
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}
