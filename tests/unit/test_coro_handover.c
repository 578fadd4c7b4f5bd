/* SPDX-License-Identifier: MIT */
/*
 * weft__coro_switch: one coroutine hands the thread straight to another,
 * which inherits the first one's resumer. Checks who the resumer gets back,
 * what each side sees as `from`, that the departing coroutine's context is
 * saved (it resumes where it left, with its locals), and that a chain
 * started on one thread can be resumed link by link from another.
 */
#include "coro_test.h"

/* A script for one coroutine: what it does at each of its steps. */
enum step { SUSPEND, SWITCH, RETURN };

struct actor {
  weft__coro *co;
  struct actor *peer;          /* the target of SWITCH */
  enum step steps[4];
  int nsteps;
  /* What it saw: per step, the coroutine that switched to it when it came
   * back (NULL: its resumer), and its own state and the peer's state then. */
  weft__coro *from[4];
  int self_state[4];
  int peer_state[4];
  uint64_t canary;             /* a local's value, checked after every step */
  int done_steps;
};

static void *actor_fn(void *arg)
{
  struct actor *a = arg;
  volatile uint64_t local = a->canary; /* lives on this coroutine's stack */
  for (int i = 0; i < a->nsteps; i++) {
    weft__coro *self = weft__coro_self();
    weft__coro *from = NULL;
    switch (a->steps[i]) {
    case SUSPEND:
      from = weft__coro_suspend(self);
      break;
    case SWITCH:
      from = weft__coro_switch(self, a->peer->co);
      break;
    case RETURN:
      a->done_steps = i + 1;
      return (void *)(uintptr_t)local;
    }
    a->from[i] = from;
    a->self_state[i] = self->state;
    a->peer_state[i] = a->peer ? a->peer->co->state : -1;
    if (local != a->canary)
      return NULL; /* the caller checks the return value */
    a->done_steps = i + 1;
  }
  return (void *)(uintptr_t)local;
}

static struct actor *actor(struct actor *a, uint64_t canary, const enum step *steps, int n)
{
  memset(a, 0, sizeof(*a));
  a->canary = canary;
  memcpy(a->steps, steps, sizeof(*steps) * (size_t)n);
  a->nsteps = n;
  a->co = make(actor_fn, a, STACK, NULL);
  return a;
}

Test(coro, switch_hands_the_thread_over_and_the_resumer_gets_the_last_one, .timeout = 30)
{
  struct actor a, b;
  actor(&a, 0xA11CE, (enum step[]){SUSPEND, SWITCH, RETURN}, 3);
  actor(&b, 0xB0B, (enum step[]){SUSPEND, SUSPEND, RETURN}, 3);
  a.peer = &b;
  b.peer = &a;

  /* Both run once and suspend back to us. */
  cr_assert_eq(weft__coro_resume_any(a.co), a.co);
  cr_assert_eq(weft__coro_resume_any(b.co), b.co);
  cr_assert_eq(a.co->state, WEFT__CORO_SUSPENDED);
  cr_assert_eq(b.co->state, WEFT__CORO_SUSPENDED);

  /* A comes back from its resumer, then switches to B; B suspends, and
   * what comes back to us is B, not A. */
  cr_assert_eq(weft__coro_resume_any(a.co), b.co);
  cr_assert_null(a.from[0], "A was resumed by its resumer");
  cr_assert_eq(b.from[0], a.co, "B must see that A switched to it");
  cr_assert_eq(b.self_state[0], WEFT__CORO_RUNNING);
  cr_assert_eq(b.peer_state[0], WEFT__CORO_SUSPENDED, "A's context is saved on arrival");
  cr_assert_eq(a.co->state, WEFT__CORO_SUSPENDED);
  cr_assert_eq(b.co->state, WEFT__CORO_SUSPENDED);
  cr_assert_null(weft__coro_self());

  /* A continues after its switch, from its resumer this time, and ends. */
  cr_assert_eq(weft__coro_resume_any(a.co), a.co);
  cr_assert_null(a.from[1]);
  cr_assert_eq(a.co->state, WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)a.co->ret, 0xA11CE, "A's stack must have survived the switch");
  cr_assert_eq(a.done_steps, 3);

  /* B continues after its second suspend and ends. */
  cr_assert_eq(weft__coro_resume(b.co), WEFT__CORO_FINISHED);
  cr_assert_null(b.from[1]);
  cr_assert_eq((uintptr_t)b.co->ret, 0xB0B);
  weft__coro_destroy(a.co);
  weft__coro_destroy(b.co);
}

Test(coro, switch_chain_ends_in_the_resumer_with_the_one_that_finished, .timeout = 30)
{
  /* A -> B -> C, and C returns: the resumer of A gets C, FINISHED. */
  struct actor a, b, c;
  actor(&a, 1, (enum step[]){SUSPEND, SWITCH, RETURN}, 3);
  actor(&b, 2, (enum step[]){SUSPEND, SWITCH, RETURN}, 3);
  actor(&c, 3, (enum step[]){SUSPEND, RETURN}, 2);
  a.peer = &b;
  b.peer = &c;
  c.peer = &a;
  struct actor *all[] = {&a, &b, &c};
  for (int i = 0; i < 3; i++)
    cr_assert_eq(weft__coro_resume_any(all[i]->co), all[i]->co);

  weft__coro *back = weft__coro_resume_any(a.co);
  cr_assert_eq(back, c.co);
  cr_assert_eq(c.co->state, WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)c.co->ret, 3);
  cr_assert_eq(c.from[0], b.co);
  cr_assert_eq(b.from[0], a.co);
  cr_assert_eq(a.co->state, WEFT__CORO_SUSPENDED);
  cr_assert_eq(b.co->state, WEFT__CORO_SUSPENDED);

  /* The two left in the middle resume independently, in any order. */
  cr_assert_eq(weft__coro_resume(b.co), WEFT__CORO_FINISHED);
  cr_assert_null(b.from[1]);
  cr_assert_eq((uintptr_t)b.co->ret, 2);
  cr_assert_eq(weft__coro_resume(a.co), WEFT__CORO_FINISHED);
  cr_assert_null(a.from[1]);
  cr_assert_eq((uintptr_t)a.co->ret, 1);
  weft__coro_destroy(a.co);
  weft__coro_destroy(b.co);
  weft__coro_destroy(c.co);
}

/* ---- the halves of a chain resumed on other threads ------------------------------------------- */

struct resume_on_thread {
  weft__coro *co;
  weft__coro *back;
};

static void *resume_thread(void *arg)
{
  struct resume_on_thread *r = arg;
  r->back = weft__coro_resume_any(r->co);
  return NULL;
}

static weft__coro *resume_elsewhere(weft__coro *co)
{
  struct resume_on_thread r = {.co = co};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, resume_thread, &r), 0);
  cr_assert_eq(pthread_join(th, NULL), 0);
  return r.back;
}

Test(coro, switch_chain_continues_on_other_threads, .timeout = 30)
{
  struct actor a, b;
  actor(&a, 0xAAAA, (enum step[]){SUSPEND, SWITCH, SWITCH, RETURN}, 4);
  actor(&b, 0xBBBB, (enum step[]){SUSPEND, SWITCH, RETURN}, 3);
  a.peer = &b;
  b.peer = &a;
  cr_assert_eq(resume_elsewhere(a.co), a.co);
  cr_assert_eq(weft__coro_resume_any(b.co), b.co);

  /* Thread 1: A switches to B, B switches back to A, A switches to B
   * again, B returns - all under one resume. */
  cr_assert_eq(resume_elsewhere(a.co), b.co);
  cr_assert_eq(b.co->state, WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)b.co->ret, 0xBBBB);
  cr_assert_eq(b.from[0], a.co);
  cr_assert_eq(a.from[1], b.co, "B switched back to A");
  cr_assert_eq(a.peer_state[1], WEFT__CORO_SUSPENDED);

  /* A, left after its second switch, resumes on this thread and ends. */
  cr_assert_eq(weft__coro_resume_any(a.co), a.co);
  cr_assert_null(a.from[2]);
  cr_assert_eq((uintptr_t)a.co->ret, 0xAAAA);
  weft__coro_destroy(a.co);
  weft__coro_destroy(b.co);
}

Test(coro, switch_starts_a_coroutine_that_never_ran, .timeout = 30)
{
  /* A switches to C, which never ran: C starts with A as entered_from,
   * runs to its end, and the resumer of A gets C back, FINISHED. */
  struct actor a, c;
  actor(&a, 0xA, (enum step[]){SUSPEND, SWITCH, RETURN}, 3);
  actor(&c, 0xC, (enum step[]){RETURN}, 1);
  a.peer = &c;
  cr_assert_eq(weft__coro_resume_any(a.co), a.co);
  cr_assert_eq(c.co->state, WEFT__CORO_CREATED);

  cr_assert_eq(weft__coro_resume_any(a.co), c.co);
  cr_assert_eq(c.co->state, WEFT__CORO_FINISHED);
  cr_assert_eq(c.co->entered_from, a.co);
  cr_assert_eq((uintptr_t)c.co->ret, 0xC);
  cr_assert_eq(a.co->state, WEFT__CORO_SUSPENDED);

  cr_assert_eq(weft__coro_resume(a.co), WEFT__CORO_FINISHED);
  cr_assert_null(a.co->entered_from, "A was started by its resumer");
  cr_assert_eq((uintptr_t)a.co->ret, 0xA);
  weft__coro_destroy(a.co);
  weft__coro_destroy(c.co);
}
