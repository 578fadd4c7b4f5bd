/* SPDX-License-Identifier: MIT */
/*
 * Suite "boundary": weft_boundary - plain threads calling into coroutine
 * servers on two shards and the reverse, backpressure (NOWAIT and waiting
 * for room), caller deadlines against late responses, cancelled callers,
 * close with calls in every stage, server receive deadlines, server errors,
 * bad arguments and allocation failures, and a stress run where deadlines
 * and cancellation race responses: every call must end exactly one way, on
 * both sides, and every response must end with exactly one owner (ASan's
 * leak check and double-free detection see to the latter).
 *
 * Stages (queued, waiting for room, served, waiting in recv) are reached by
 * polling the boundary's gauges, so no result depends on timing. Requests
 * and responses are integers in pointers unless ownership is under test.
 */
#include "rt_helpers.h"

#include "core.h" /* the shard's timer heap, for the timer-allocation failure */
#include "fault.h"

#include <time.h>

static struct weft_boundary_stats bstats(weft_boundary *b)
{
  struct weft_boundary_stats s;
  memset(&s, 0xff, sizeof(s));
  cr_assert_eq(weft_boundary_stats_get(b, &s), 0);
  return s;
}

/* The counters of b; `busy` calls are still in progress (not yet counted
 * in an outcome). */
static void assert_counts_busy(weft_boundary *b, uint64_t calls, uint64_t completed,
                               uint64_t overloaded, uint64_t timed_out, uint64_t cancelled,
                               uint64_t closed, uint64_t failed, uint64_t busy)
{
  struct weft_boundary_stats s = bstats(b);
  cr_assert_eq(s.calls, calls, "calls %llu", (unsigned long long)s.calls);
  cr_assert_eq(s.completed, completed, "completed %llu", (unsigned long long)s.completed);
  cr_assert_eq(s.overloaded, overloaded, "overloaded %llu", (unsigned long long)s.overloaded);
  cr_assert_eq(s.timed_out, timed_out, "timed_out %llu", (unsigned long long)s.timed_out);
  cr_assert_eq(s.cancelled, cancelled, "cancelled %llu", (unsigned long long)s.cancelled);
  cr_assert_eq(s.closed, closed, "closed %llu", (unsigned long long)s.closed);
  cr_assert_eq(s.failed, failed, "failed %llu", (unsigned long long)s.failed);
  cr_assert_eq(s.calls, s.completed + s.overloaded + s.timed_out + s.cancelled + s.closed +
                            s.failed + busy);
}

#define assert_counts(b, calls, completed, overloaded, timed_out, cancelled, closed, failed)    \
  assert_counts_busy(b, calls, completed, overloaded, timed_out, cancelled, closed, failed, 0)

/* Polls a gauge of b (from a thread or a coroutine). */
#define GAUGE(b, field)                                                                       \
  __extension__({                                                                             \
    struct weft_boundary_stats g_;                                                            \
    weft_boundary_stats_get((b), &g_) == 0 ? g_.field : UINT64_MAX;                           \
  })

#define IP(x) ((void *)(intptr_t)(x))
#define PI(p) ((intptr_t)(p))

/* ---- one call on its own thread ------------------------------------------------------ */

typedef struct caller {
  pthread_t th;
  weft_boundary *b;
  intptr_t req;
  unsigned flags;
  int64_t deadline;
  atomic_bool returned;
  int result;
  void *resp;
} caller;

static void *caller_main(void *arg)
{
  caller *c = arg;
  c->resp = IP(-1);
  c->result = weft_boundary_call(c->b, IP(c->req), &c->resp, c->flags, c->deadline);
  atomic_store(&c->returned, true);
  return NULL;
}

static void start_caller(caller *c, weft_boundary *b, intptr_t req, int64_t deadline)
{
  memset(c, 0, sizeof(*c));
  c->b = b;
  c->req = req;
  c->deadline = deadline;
  cr_assert_eq(pthread_create(&c->th, NULL, caller_main, c), 0);
}

static void join_caller(caller *c)
{
  cr_assert_eq(pthread_join(c->th, NULL), 0);
}

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
  weft_runtime *rt = rt_start(2);
  weft_boundary *b;
  cr_assert_eq(weft_boundary_create(&b, 4), 0);
  caller c;
  memset(&c, 0, sizeof(c));
  c.b = b;
  c.req = 3;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  weft_task *ct;
  cr_assert_eq(weft_runtime_submit(rt, &o, call_without_timer, &c, &ct), 0);
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

static void *co_call_once(void *arg)
{
  caller *c = arg;
  caller_main(c);
  return NULL;
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
  weft_join(ct, NULL);

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
  weft_join(ct, NULL);

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
  weft_join(t1, NULL);
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
    weft_join(doomed[i], NULL);
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
  /* Every call ended exactly one way, and both sides agree on it. */
  cr_assert_eq(ok + to + cancel, total);
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
