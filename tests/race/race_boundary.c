/* SPDX-License-Identifier: MIT */
/*
 * race_boundary: weft_boundary under ThreadSanitizer.
 *
 * A 2-shard runtime. Each round, coroutine callers (on both shards) and
 * plain-thread callers call through one boundary with deadlines picked to
 * expire around the response time, into coroutine servers and a plain-thread
 * server that answer after a random pause; a coroutine cancels random
 * callers meanwhile, and at the end of the round the boundary is closed
 * while calls are still in flight. So responses race deadlines,
 * cancellation and close, and close races withdrawals.
 *
 * Checks: every call ends exactly one way and both sides agree (responses
 * delivered == responses received; late answers <= calls that ended
 * otherwise), every response has exactly one owner (freed once by whoever
 * owns it: TSan/ASan see a double free or a race on it), and the boundary's
 * counters add up. Exit 0 pass, 1 fail, 77 without io_uring.
 */
#include "race_check.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 4
#define CO_CALLERS 6
#define TH_CALLERS 2
#define CALLS 400 /* per caller and round (the close cuts some short) */

typedef struct round {
  weft_boundary *b;
  atomic_long ok, timed_out, cancelled, closed, made;
  atomic_long srv_ok, srv_late;
  atomic_int callers_left;
} round;

static uint32_t xorshift(uint32_t *x)
{
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

static void one_call(round *r, intptr_t req, int64_t deadline)
{
  void *resp = NULL;
  atomic_fetch_add(&r->made, 1);
  int rc = weft_boundary_call(r->b, (void *)req, &resp, 0, deadline);
  if (rc == 0) {
    CHECK(resp && *(intptr_t *)resp == req * 2);
    free(resp);
    atomic_fetch_add(&r->ok, 1);
    return;
  }
  CHECK(resp == NULL);
  if (rc == -ETIMEDOUT)
    atomic_fetch_add(&r->timed_out, 1);
  else if (rc == -ECANCELED)
    atomic_fetch_add(&r->cancelled, 1);
  else if (rc == -EPIPE)
    atomic_fetch_add(&r->closed, 1);
  else
    CHECK(!"unexpected result");
}

typedef struct caller_arg {
  round *r;
  int id;
} caller_arg;

static void *caller(void *arg)
{
  caller_arg *a = arg;
  uint32_t x = 0x9e3779b9u * (uint32_t)(a->id + 1);
  for (int i = 0; i < CALLS; i++) {
    int64_t d = weft_now() + (int64_t)(xorshift(&x) % 100) * WEFT_USEC;
    one_call(a->r, ((intptr_t)a->id << 20) | (i + 1), d);
  }
  atomic_fetch_sub(&a->r->callers_left, 1);
  return NULL;
}

static void *server(void *arg)
{
  round *r = arg;
  uint32_t x = (uint32_t)(uintptr_t)&x | 1u;
  weft_boundary_ticket *t;
  while (weft_boundary_recv(r->b, &t, WEFT_NO_DEADLINE) == 0) {
    uint32_t v = xorshift(&x);
    if (v & 1)
      weft_sleep((int64_t)(v % 60) * WEFT_USEC);
    intptr_t *resp = malloc(sizeof(*resp));
    *resp = (intptr_t)weft_boundary_request(t) * 2;
    if (weft_boundary_respond(t, resp) == 0) {
      atomic_fetch_add(&r->srv_ok, 1);
    } else {
      free(resp);
      atomic_fetch_add(&r->srv_late, 1);
    }
  }
  return NULL;
}

typedef struct canceller_arg {
  round *r;
  weft_task **victims;
} canceller_arg;

static void *canceller(void *arg)
{
  canceller_arg *c = arg;
  uint32_t x = 12345;
  /* A few cancels spread over the round (each victim stops calling
   * through -ECANCELED from then on, quickly). */
  for (int i = 0; i < 2; i++) {
    long seen = atomic_load(&c->r->made);
    while (atomic_load(&c->r->made) < seen + 300 && atomic_load(&c->r->callers_left) > 0)
      weft_sleep(100 * WEFT_USEC);
    weft_cancel(c->victims[xorshift(&x) % CO_CALLERS]);
  }
  return NULL;
}

static int run_round(weft_runtime *rt, int n)
{
  round r = {0};
  if (weft_boundary_create(&r.b, 8) != 0)
    return -1;
  atomic_store(&r.callers_left, CO_CALLERS + TH_CALLERS);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  weft_task *srv[2], *co[CO_CALLERS], *cn;
  for (int i = 0; i < 2; i++)
    CHECK(weft_runtime_submit(rt, &o, server, &r, &srv[i]) == 0);
  pthread_t ths;
  CHECK(pthread_create(&ths, NULL, server, &r) == 0);
  caller_arg ca[CO_CALLERS + TH_CALLERS];
  for (int i = 0; i < CO_CALLERS + TH_CALLERS; i++)
    ca[i] = (caller_arg){.r = &r, .id = n * 100 + i};
  for (int i = 0; i < CO_CALLERS; i++)
    CHECK(weft_runtime_submit(rt, &o, caller, &ca[i], &co[i]) == 0);
  pthread_t th[TH_CALLERS];
  for (int i = 0; i < TH_CALLERS; i++)
    CHECK(pthread_create(&th[i], NULL, caller, &ca[CO_CALLERS + i]) == 0);
  canceller_arg cc = {.r = &r, .victims = co};
  CHECK(weft_runtime_submit(rt, NULL, canceller, &cc, &cn) == 0);

  /* Close while calls are still going on (after some have completed). */
  while (atomic_load(&r.made) < (CO_CALLERS + TH_CALLERS) * CALLS * 3 / 4 &&
         atomic_load(&r.callers_left) > 0)
    weft_sleep(200 * WEFT_USEC);
  CHECK(weft_boundary_close(r.b) == 0);

  weft_join(cn, NULL);
  for (int i = 0; i < CO_CALLERS; i++)
    weft_join(co[i], NULL);
  for (int i = 0; i < TH_CALLERS; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++)
    weft_join(srv[i], NULL);
  pthread_join(ths, NULL);

  long ok = atomic_load(&r.ok), to = atomic_load(&r.timed_out);
  long cancelled = atomic_load(&r.cancelled), closed = atomic_load(&r.closed);
  long made = atomic_load(&r.made);
  CHECK(ok + to + cancelled + closed == made);
  CHECK(atomic_load(&r.srv_ok) == ok);
  CHECK(atomic_load(&r.srv_late) <= to + cancelled + closed);
  struct weft_boundary_stats s;
  CHECK(weft_boundary_stats_get(r.b, &s) == 0);
  CHECK(s.calls == (uint64_t)made);
  CHECK(s.completed == (uint64_t)ok && s.timed_out == (uint64_t)to);
  CHECK(s.cancelled == (uint64_t)cancelled && s.closed == (uint64_t)closed);
  CHECK(s.overloaded == 0 && s.failed == 0);
  CHECK(s.late == (uint64_t)atomic_load(&r.srv_late));
  CHECK(s.queued == 0 && s.serving == 0 && s.room_waiters == 0 && s.recv_waiters == 0);
  printf("round %d: %ld calls: %ld answered, %ld timed out, %ld cancelled, %ld closed, "
         "%ld late answers\n",
         n, made, ok, to, cancelled, closed, atomic_load(&r.srv_late));
  weft_boundary_destroy(r.b);
  return 0;
}

int main(void)
{
  weft_config c;
  weft_config_init(&c);
  c.shards = 2;
  weft_runtime *rt;
  int r = weft_runtime_start(&rt, &c);
  if (r == -EPERM || r == -ENOSYS)
    return 77;
  if (r != 0) {
    fprintf(stderr, "weft_runtime_start: %s\n", weft_strerror(r));
    return 1;
  }
  for (int i = 0; i < ROUNDS; i++)
    if (run_round(rt, i) != 0)
      atomic_fetch_add(&failures, 1);
  CHECK(weft_runtime_stop(rt) == 0);
  return atomic_load(&failures) ? 1 : 0;
}
