/* SPDX-License-Identifier: MIT */
/*
 * Suite "sync_prims": weft_mutex, weft_cond, weft_sem, weft_waitgroup and
 * weft_once. Each under contention on one shard, on two shards and with
 * plain threads mixed in (exact totals); the mutex's FIFO hand-over (a
 * deterministic order check, not a timing one); deadlines, cancellation and
 * the race between a hand-over and a waiter's deadline or cancel; the
 * static initialisers on globals; argument errors.
 *
 * "Queued" is observed through the internal view of the objects (the
 * suite links the internal library), so the tests know a waiter is in the
 * queue before they act, instead of sleeping and hoping.
 */
#include "rt_helpers.h"

#include "sync_impl.h"

#include <unistd.h>

/* Waiters in an object's queue right now. */
static int queued(struct weft_waitq_storage_ *s)
{
  weft__waitq *q = SYNC_VIEW(weft__waitq, s);
  int n = 0;
  weft__spin_lock(&q->lock);
  for (weft__waiter *w = q->head; w; w = w->next)
    n++;
  weft__spin_unlock(&q->lock);
  return n;
}

/* ---- running a crowd: coroutines on the shards plus plain threads ----------------- */

#define MAX_CO 64
#define MAX_TH 16

/* Runs fn(arg) on n_co coroutines (spread over the shards, every third one
 * stealable, the rest pinned) and on n_th plain threads, and joins them all.
 * fn returns NULL when it is happy. `rt` may be NULL: one is started here. */
static void crowd(weft_runtime *rt, int n_co, int n_th, void *(*fn)(void *), void *arg)
{
  int shards = weft_runtime_shards(rt);
  weft_task *t[MAX_CO];
  pthread_t th[MAX_TH];
  for (int i = 0; i < n_co; i++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = i % 3 == 2 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED;
    o.shard = i % shards;
    cr_assert_eq(weft_runtime_submit(rt, &o, fn, arg, &t[i]), 0);
  }
  for (int i = 0; i < n_th; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, fn, arg), 0);
  for (int i = 0; i < n_co; i++) {
    void *v = (void *)-1;
    cr_assert_eq(weft_join(t[i], &v), 0);
    cr_assert_null(v);
  }
  for (int i = 0; i < n_th; i++) {
    void *v = (void *)-1;
    pthread_join(th[i], &v);
    cr_assert_null(v);
  }
}

static weft_task *submit_on(weft_runtime *rt, int placement, int shard, void *(*fn)(void *),
                            void *arg)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = placement;
  o.shard = shard;
  weft_task *t = NULL;
  cr_assert_eq(weft_runtime_submit(rt, &o, fn, arg, &t), 0);
  return t;
}

static void finish(weft_runtime *rt)
{
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- mutex: exact counts under contention ------------------------------------------- */

#define ITERS 10000

struct counter {
  weft_mutex m;
  long value;            /* only touched under m */
  atomic_int inside;     /* holders at this moment: must never pass 1 */
  atomic_int next_id;
};

static void *count_worker(void *arg)
{
  struct counter *c = arg;
  int id = atomic_fetch_add(&c->next_id, 1);
  for (int i = 0; i < ITERS; i++) {
    /* Both kinds of lock, and trylock first now and then. */
    bool got = i % 7 == 3 && weft_mutex_trylock(&c->m) == 0;
    if (!got && id % 2)
      CO_EQ(weft_mutex_lock_dl(&c->m, weft_now() + 60 * WEFT_SEC), 0);
    else if (!got)
      CO_EQ(weft_mutex_lock(&c->m), 0);
    CO_EQ(atomic_fetch_add(&c->inside, 1), 0);
    c->value++;
    if (i % 997 == 11)
      weft_yield(); /* suspended while holding it: fine for a weft mutex */
    atomic_fetch_sub(&c->inside, 1);
    CO_EQ(weft_mutex_unlock(&c->m), 0);
  }
  return NULL;
}

static void counter_case(int shards, int n_co, int n_th)
{
  weft_runtime *rt = rt_start(shards);
  struct counter c = {.m = WEFT_MUTEX_INIT};
  crowd(rt, n_co, n_th, count_worker, &c);
  cr_assert_eq(c.value, (long)(n_co + n_th) * ITERS, "%ld increments", c.value);
  cr_assert_eq(weft_mutex_destroy(&c.m), 0);
  finish(rt);
}

Test(sync_prims, mutex_counter_one_shard, .timeout = 120)
{
  counter_case(1, 8, 0);
}

Test(sync_prims, mutex_counter_two_shards_and_threads, .timeout = 120)
{
  counter_case(2, 8, 2);
}

Test(sync_prims, mutex_counter_one_shard_and_threads, .timeout = 120)
{
  counter_case(1, 8, 2);
}

/* ---- mutex: FIFO hand-over, no barging ------------------------------------------------ */

struct fifo {
  weft_mutex m;
  int log[16];
  int n;                 /* under m */
};

struct fifo_arg {
  struct fifo *f;
  int id;
};

static void *fifo_waiter(void *arg)
{
  struct fifo_arg *a = arg;
  CO_EQ(weft_mutex_lock(&a->f->m), 0);
  a->f->log[a->f->n++] = a->id;
  CO_EQ(weft_mutex_unlock(&a->f->m), 0);
  return NULL;
}

/* The test thread holds m and queues waiters 1..5 one at a time (each seen
 * in the queue before the next starts): coroutines on shard 0, shard 1, a
 * plain thread, a stealable coroutine, shard 0 again. Then it unlocks and at
 * once locks again: the mutex must go to 1, 2, 3, 4, 5 in turn and only then
 * back to the relocker, which was the last to ask. */
Test(sync_prims, mutex_hands_over_in_fifo_order, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  struct fifo f = {.m = WEFT_MUTEX_INIT};
  struct fifo_arg a[6];
  weft_task *t[6] = {0};
  pthread_t th;
  cr_assert_eq(weft_mutex_lock(&f.m), 0);
  for (int id = 1; id <= 5; id++) {
    a[id] = (struct fifo_arg){&f, id};
    if (id == 3)
      cr_assert_eq(pthread_create(&th, NULL, fifo_waiter, &a[id]), 0);
    else
      t[id] = submit_on(rt, id == 4 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED, id == 2,
                        fifo_waiter, &a[id]);
    cr_assert(RT_POLL(queued(&f.m.q_) == id), "waiter %d never queued", id);
  }
  cr_assert_eq(weft_mutex_unlock(&f.m), 0);
  cr_assert_eq(weft_mutex_lock(&f.m), 0);
  f.log[f.n++] = 0;
  cr_assert_eq(f.n, 6);
  for (int i = 0; i < 6; i++)
    cr_assert_eq(f.log[i], (i + 1) % 6, "log[%d] = %d", i, f.log[i]);
  cr_assert_eq(weft_mutex_unlock(&f.m), 0);
  for (int id = 1; id <= 5; id++)
    if (t[id])
      cr_assert_eq(weft_join(t[id], NULL), 0);
  pthread_join(th, NULL);
  cr_assert_eq(weft_mutex_destroy(&f.m), 0);
  finish(rt);
}

/* A coroutine that unlocks and relocks in a tight loop, with a waiter on
 * its own shard (which cannot run until the looper suspends): every relock
 * after the first unlock queues behind the waiter. */
struct looper {
  weft_mutex m;
  int order[4], n;
};

static void *loop_waiter(void *arg)
{
  struct looper *l = arg;
  CO_EQ(weft_mutex_lock(&l->m), 0);
  l->order[l->n++] = 1;
  CO_EQ(weft_mutex_unlock(&l->m), 0);
  return NULL;
}

static void *looper_main(void *arg)
{
  (void)arg;
  for (int shard = 0; shard < 2; shard++) {
    struct looper l = {.m = WEFT_MUTEX_INIT};
    CO_EQ(weft_mutex_lock(&l.m), 0);
    weft_task *t;
    CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, shard, loop_waiter, &l), 0);
    CO_CHECK(RT_POLL(queued(&l.m.q_) == 1));
    for (int i = 0; i < 100; i++) {
      CO_EQ(weft_mutex_unlock(&l.m), 0);
      CO_EQ(weft_mutex_lock(&l.m), 0);
      if (i == 0)
        l.order[l.n++] = 2;
    }
    CO_EQ(l.n, 2);
    CO_EQ(l.order[0], 1); /* the waiter went first */
    CO_EQ(l.order[1], 2);
    CO_EQ(weft_mutex_unlock(&l.m), 0);
    CO_EQ(rt_join_int(t), 0);
    CO_EQ(weft_mutex_destroy(&l.m), 0);
  }
  return NULL;
}

Test(sync_prims, mutex_relocking_loop_does_not_starve_a_waiter, .timeout = 30)
{
  rt_run(2, looper_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- mutex: errors, trylock, deadlines ------------------------------------------------- */

static void *lock_dl_other(void *arg)
{
  weft_mutex *m = arg;
  int r = weft_mutex_lock_dl(m, weft_now() + 2 * WEFT_MSEC);
  CO_EQ(weft_mutex_unlock(m), -EPERM); /* it does not hold m */
  CO_EQ(weft_mutex_trylock(m), -EBUSY);
  CO_EQ(weft_mutex_lock_dl(m, weft_now() - 1), -ETIMEDOUT);
  /* A task's deadline scope bounds lock() too (threads have no scope). */
  if (weft_task_self()) {
    int64_t saved = weft_deadline_push(weft_now() + WEFT_MSEC);
    CO_EQ(weft_mutex_lock(m), -ETIMEDOUT);
    weft_deadline_pop(saved);
  }
  return (void *)(intptr_t)r;
}

static void *errors_main(void *arg)
{
  (void)arg;
  weft_mutex m;
  CO_EQ(weft_mutex_init(&m), 0);
  CO_EQ(weft_mutex_unlock(&m), -EPERM);
  CO_EQ(weft_mutex_lock_dl(&m, weft_now() - 1), 0); /* free: taken whatever the deadline */
  CO_EQ(weft_mutex_lock(&m), -EDEADLK);
  CO_EQ(weft_mutex_lock_dl(&m, weft_now() + WEFT_SEC), -EDEADLK);
  CO_EQ(weft_mutex_trylock(&m), -EBUSY);
  CO_EQ(weft_mutex_destroy(&m), -EBUSY);
  for (int shard = 0; shard < 2; shard++) {
    weft_task *t;
    CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, shard, lock_dl_other, &m), 0);
    CO_EQ(rt_join_int(t), -ETIMEDOUT);
    CO_EQ(queued(&m.q_), 0);
  }
  CO_EQ(weft_mutex_unlock(&m), 0);
  CO_EQ(weft_mutex_unlock(&m), -EPERM);
  CO_EQ(weft_mutex_destroy(&m), 0); /* free, and the waiters bit is gone */
  CO_EQ(weft_mutex_trylock(&m), 0);
  CO_EQ(weft_mutex_unlock(&m), 0);
  return NULL;
}

Test(sync_prims, mutex_errors_trylock_and_deadlines, .timeout = 30)
{
  rt_run(2, errors_main, NULL);
  rt_assert_clean();
  /* A plain thread waiting for a mutex a plain thread holds. */
  weft_mutex m = WEFT_MUTEX_INIT;
  pthread_t th;
  cr_assert_eq(weft_mutex_lock(&m), 0);
  cr_assert_eq(pthread_create(&th, NULL, lock_dl_other, &m), 0);
  void *v = NULL;
  pthread_join(th, &v);
  cr_assert_eq((intptr_t)v, -ETIMEDOUT);
  cr_assert_eq(weft_mutex_unlock(&m), 0);
  cr_assert_eq(weft_mutex_destroy(&m), 0);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- cancellation of every kind of wait ------------------------------------------------- */

enum wait_kind { W_LOCK, W_LOCK_DL, W_COND, W_SEM, W_SEM_DL, W_WG, W_ONCE, W_KINDS };

struct blocked {
  enum wait_kind kind;
  weft_mutex m;
  weft_cond c;
  weft_sem s;
  weft_waitgroup wg;
  weft_once_flag once;
  int still_held;        /* W_COND: the waiter held m again after the wait */
};

static struct weft_waitq_storage_ *blocked_queue(struct blocked *b)
{
  switch (b->kind) {
  case W_LOCK:
  case W_LOCK_DL: return &b->m.q_;
  case W_COND: return &b->c.q_;
  case W_SEM:
  case W_SEM_DL: return &b->s.q_;
  case W_WG: return &b->wg.q_;
  default: return &b->once.q_;
  }
}

static void never_called(void *arg)
{
  (void)arg;
  rt_fail(__FILE__, __LINE__, "once ran fn twice");
}

static void *blocked_waiter(void *arg)
{
  struct blocked *b = arg;
  int64_t far = weft_now() + 60 * WEFT_SEC;
  switch (b->kind) {
  case W_LOCK: return (void *)(intptr_t)weft_mutex_lock(&b->m);
  case W_LOCK_DL: return (void *)(intptr_t)weft_mutex_lock_dl(&b->m, far);
  case W_COND: {
    CO_EQ(weft_mutex_lock(&b->m), 0);
    int r = weft_cond_wait(&b->c, &b->m);
    b->still_held = weft_mutex_unlock(&b->m) == 0;
    return (void *)(intptr_t)r;
  }
  case W_SEM: return (void *)(intptr_t)weft_sem_acquire(&b->s);
  case W_SEM_DL: return (void *)(intptr_t)weft_sem_acquire_dl(&b->s, far);
  case W_WG: return (void *)(intptr_t)weft_waitgroup_wait(&b->wg);
  default: return (void *)(intptr_t)weft_once_dl(&b->once, never_called, NULL, far);
  }
}

static void once_holder(void *arg)
{
  /* Runs fn "for ever": until the test lets it go. */
  while (!atomic_load((atomic_bool *)arg))
    usleep(200);
}

struct once_runner {
  weft_once_flag *once;
  atomic_bool release;
};

static void *run_once_holder(void *arg)
{
  struct once_runner *r = arg;
  CO_EQ(weft_once(r->once, once_holder, &r->release), 0);
  return NULL;
}

Test(sync_prims, cancel_blocked_waits_is_ecanceled, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  for (int kind = 0; kind < W_KINDS; kind++)
    for (int shard = 0; shard < 2; shard++) {
      struct blocked b = {.kind = kind, .m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT,
                          .s = WEFT_SEM_INIT(0), .wg = WEFT_WAITGROUP_INIT,
                          .once = WEFT_ONCE_INIT};
      pthread_t holder;
      struct once_runner runner = {.once = &b.once};
      if (kind == W_LOCK || kind == W_LOCK_DL)
        cr_assert_eq(weft_mutex_lock(&b.m), 0); /* this thread holds it */
      if (kind == W_WG)
        cr_assert_eq(weft_waitgroup_add(&b.wg, 1), 0);
      if (kind == W_ONCE) {
        cr_assert_eq(pthread_create(&holder, NULL, run_once_holder, &runner), 0);
        cr_assert(RT_POLL(__atomic_load_n(&b.once.state_, __ATOMIC_ACQUIRE) != 0));
      }
      weft_task *t = submit_on(rt, WEFT_PLACE_PINNED, shard, blocked_waiter, &b);
      cr_assert(RT_POLL(queued(blocked_queue(&b)) == 1), "kind %d never queued", kind);
      cr_assert_eq(weft_cancel(t), 0);
      void *v = NULL;
      cr_assert_eq(weft_join(t, &v), -ECANCELED);
      cr_assert_eq((intptr_t)v, -ECANCELED, "kind %d: %d", kind, (int)(intptr_t)v);
      cr_assert_eq(queued(blocked_queue(&b)), 0);
      switch (kind) {
      case W_LOCK:
      case W_LOCK_DL: /* still ours, then free */
        cr_assert_eq(weft_mutex_unlock(&b.m), 0);
        cr_assert_eq(weft_mutex_destroy(&b.m), 0);
        break;
      case W_COND:
        cr_assert(b.still_held, "cond_wait returned without the mutex");
        cr_assert_eq(weft_mutex_destroy(&b.m), 0);
        cr_assert_eq(weft_cond_destroy(&b.c), 0);
        break;
      case W_SEM:
      case W_SEM_DL: /* the cancelled waiter took no permit */
        cr_assert_eq(weft_sem_release(&b.s, 1), 0);
        cr_assert_eq(weft_sem_value(&b.s), 1);
        break;
      case W_WG:
        cr_assert_eq(weft_waitgroup_done(&b.wg), 0);
        cr_assert_eq(weft_waitgroup_wait(&b.wg), 0);
        break;
      default:
        cr_assert(!weft_once_done(&b.once));
        atomic_store(&runner.release, true);
        pthread_join(holder, NULL);
        cr_assert(weft_once_done(&b.once));
      }
    }
  finish(rt);
}

/* ---- the hand-over racing a deadline or a cancel -------------------------------------------
 * Each round a holder (a coroutine on shard 0) owns m while a contender
 * waits for it; the holder unlocks around the moment the contender's
 * deadline passes (or another shard cancels it). Whoever wins the claim,
 * the contender holds m exactly when its lock returned 0, and afterwards m is
 * free and its queue empty: the mutex is never lost or held twice. */

#define RACE_ROUNDS 1000

struct race {
  weft_mutex m;
  weft_event *go, *done;
  _Atomic int64_t at;    /* when the holder unlocks */
  int took, gave_up;
};

static void *race_contender(void *arg)
{
  struct race *r = arg;
  for (int i = 0; i < RACE_ROUNDS; i++) {
    CO_EQ(weft_event_wait(r->go), 0); /* the holder holds m */
    int64_t dl = atomic_load(&r->at);
    int res = weft_mutex_lock_dl(&r->m, dl);
    if (res == 0) {
      r->took++;
      CO_EQ(weft_mutex_unlock(&r->m), 0);
    } else {
      CO_EQ(res, -ETIMEDOUT);
      r->gave_up++;
      CO_EQ(weft_mutex_unlock(&r->m), -EPERM);
    }
    CO_EQ(weft_event_set(r->done), 0);
  }
  return NULL;
}

static void *race_holder(void *arg)
{
  struct race *r = arg;
  uint32_t rnd = 777;
  for (int i = 0; i < RACE_ROUNDS; i++) {
    CO_EQ(weft_mutex_lock(&r->m), 0);
    rnd = rnd * 1103515245u + 12345u;
    int64_t jitter = (int64_t)((rnd >> 8) % 61) * WEFT_USEC - 30 * WEFT_USEC;
    int64_t dl = weft_now() + 100 * WEFT_USEC;
    atomic_store(&r->at, dl);
    CO_EQ(weft_event_set(r->go), 0);
    while (weft_now() < dl + jitter)
      ;
    CO_EQ(weft_mutex_unlock(&r->m), 0);
    CO_EQ(weft_event_wait(r->done), 0);
    /* Free again, nobody queued. */
    CO_EQ(weft_mutex_trylock(&r->m), 0);
    CO_EQ(weft_mutex_unlock(&r->m), 0);
    CO_EQ(queued(&r->m.q_), 0);
  }
  return NULL;
}

Test(sync_prims, handover_racing_deadline, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  for (int thread_side = 0; thread_side < 2; thread_side++) {
    struct race r = {.m = WEFT_MUTEX_INIT};
    cr_assert_eq(weft_event_create(&r.go, WEFT_EVENT_AUTO_RESET), 0);
    cr_assert_eq(weft_event_create(&r.done, WEFT_EVENT_AUTO_RESET), 0);
    weft_task *h = submit_on(rt, WEFT_PLACE_PINNED, 0, race_holder, &r);
    if (thread_side) {
      race_contender(&r); /* futex deadline */
    } else {
      weft_task *c = submit_on(rt, WEFT_PLACE_PINNED, 1, race_contender, &r);
      cr_assert_eq(weft_join(c, NULL), 0);
    }
    cr_assert_eq(weft_join(h, NULL), 0);
    cr_assert_eq(r.took + r.gave_up, RACE_ROUNDS);
    cr_log_info("%s contender: %d took the mutex, %d timed out",
                thread_side ? "thread" : "coroutine", r.took, r.gave_up);
    cr_assert_eq(weft_mutex_destroy(&r.m), 0);
    weft_event_destroy(r.go);
    weft_event_destroy(r.done);
  }
  finish(rt);
}

#define CANCEL_ROUNDS 300

/* The cancel side: a coroutine on the victim's shard (the victim is
 * suspended, so it can spin there) cancels the victim while the holder on
 * shard 0 unlocks - two threads racing for the victim's claim. */
struct cancel_race {
  weft_mutex m;
  weft_task *victim;
  atomic_int ready;      /* the canceller spins */
  atomic_int go;         /* cancel now */
  int took;
};

static void *cancel_victim(void *arg)
{
  struct cancel_race *c = arg;
  int r = weft_mutex_lock(&c->m);
  if (r == 0) {
    c->took++;
    CO_EQ(weft_mutex_unlock(&c->m), 0);
  } else {
    CO_EQ(r, -ECANCELED);
    CO_EQ(weft_mutex_unlock(&c->m), -EPERM);
  }
  return (void *)(intptr_t)r;
}

static void *canceller(void *arg)
{
  struct cancel_race *c = arg;
  atomic_store(&c->ready, 1);
  while (!atomic_load(&c->go))
    weft__cpu_relax();
  return (void *)(intptr_t)weft_cancel(c->victim);
}

static void *cancel_holder(void *arg)
{
  struct cancel_race *c = arg;
  int cancelled = 0;
  for (int i = 0; i < CANCEL_ROUNDS; i++) {
    CO_EQ(weft_mutex_lock(&c->m), 0);
    atomic_store(&c->ready, 0);
    atomic_store(&c->go, 0);
    CO_EQ(rt_spawn(&c->victim, WEFT_PLACE_PINNED, 1, cancel_victim, c), 0);
    while (queued(&c->m.q_) != 1)
      weft_yield();
    weft_task *k;
    CO_EQ(rt_spawn(&k, WEFT_PLACE_PINNED, 1, canceller, c), 0);
    while (!atomic_load(&c->ready))
      weft_yield();
    atomic_store(&c->go, 1);
    for (int n = 0; n < (i % 16) * 25; n++)
      weft__cpu_relax();
    CO_EQ(weft_mutex_unlock(&c->m), 0);
    int cancel_result = (int)rt_join_int(k);
    CO_CHECK(cancel_result == 0 || cancel_result == -ESRCH);
    void *res = NULL;
    int j = weft_join(c->victim, &res);
    /* A cancel that came in time counts even if the victim got the mutex. */
    CO_EQ(j, cancel_result == 0 ? -ECANCELED : 0);
    cancelled += (intptr_t)res == -ECANCELED;
    CO_EQ(weft_mutex_trylock(&c->m), 0);
    CO_EQ(weft_mutex_unlock(&c->m), 0);
  }
  return (void *)(intptr_t)cancelled;
}

Test(sync_prims, handover_racing_cancel, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  struct cancel_race c = {.m = WEFT_MUTEX_INIT};
  weft_task *h = submit_on(rt, WEFT_PLACE_PINNED, 0, cancel_holder, &c);
  void *v = NULL;
  cr_assert_eq(weft_join(h, &v), 0);
  rt_assert_clean();
  cr_assert_eq(c.took + (int)(intptr_t)v, CANCEL_ROUNDS);
  cr_log_info("cancel race: %d took the mutex, %d cancelled", c.took, (int)(intptr_t)v);
  cr_assert_eq(weft_mutex_destroy(&c.m), 0);
  finish(rt);
}

/* ---- condition variable ------------------------------------------------------------------ */

struct cv {
  weft_mutex m;
  weft_cond c;
  int woken;             /* under m */
  atomic_int returned;
  atomic_int errors;
};

static void *cv_waiter(void *arg)
{
  struct cv *s = arg;
  CO_EQ(weft_mutex_lock(&s->m), 0);
  int r = weft_cond_wait(&s->c, &s->m); /* no loop: there are no spurious wake-ups */
  CO_EQ(r, 0);
  s->woken++;
  atomic_fetch_add(&s->returned, 1);
  CO_EQ(weft_mutex_unlock(&s->m), 0); /* held again on return */
  return NULL;
}

#define NCV 6

Test(sync_prims, cond_signal_wakes_one_broadcast_wakes_all, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  struct cv s = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
  weft_task *t[NCV - 2];
  pthread_t th[2];
  for (int i = 0; i < NCV - 2; i++)
    t[i] = submit_on(rt, WEFT_PLACE_PINNED, i % 2, cv_waiter, &s);
  for (int i = 0; i < 2; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, cv_waiter, &s), 0);
  cr_assert(RT_POLL(queued(&s.c.q_) == NCV));
  cr_assert_eq(weft_cond_destroy(&s.c), -EBUSY);
  for (int k = 1; k <= 2; k++) {
    cr_assert_eq(weft_cond_signal(&s.c), 0);
    cr_assert(RT_POLL(atomic_load(&s.returned) == k));
    usleep(5000); /* room for a wrong extra wake-up */
    cr_assert_eq(atomic_load(&s.returned), k);
    cr_assert_eq(queued(&s.c.q_), NCV - k);
  }
  cr_assert_eq(weft_cond_broadcast(&s.c), 0);
  cr_assert(RT_POLL(atomic_load(&s.returned) == NCV));
  for (int i = 0; i < NCV - 2; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  cr_assert_eq(s.woken, NCV);
  /* Signals with nobody waiting are not kept. */
  cr_assert_eq(weft_cond_signal(&s.c), 0);
  cr_assert_eq(weft_cond_broadcast(&s.c), 0);
  cr_assert_eq(weft_mutex_lock(&s.m), 0);
  cr_assert_eq(weft_cond_wait_dl(&s.c, &s.m, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  cr_assert_eq(weft_mutex_unlock(&s.m), 0);
  cr_assert_eq(weft_cond_destroy(&s.c), 0);
  cr_assert_eq(weft_mutex_destroy(&s.m), 0);
  finish(rt);
}

/* wait_dl times out while another task holds the mutex: the waiter returns
 * -ETIMEDOUT only once it has the mutex back. The holder must take the
 * mutex before the waiter's deadline passes; on a loaded machine it may
 * not, and then the round proves nothing and is run again with a longer
 * deadline (never a failure: timing decides only whether a round counts). */
struct cv_timeout {
  weft_mutex m;
  weft_cond c;
  int64_t wait_ns;
  atomic_int holder_done;
  atomic_int waiting;
  int saw_done;          /* holder_done when the waiter had the mutex back */
};

static void *cv_timeout_waiter(void *arg)
{
  struct cv_timeout *s = arg;
  CO_EQ(weft_mutex_lock(&s->m), 0);
  atomic_store(&s->waiting, 1);
  int r = weft_cond_wait_dl(&s->c, &s->m, weft_now() + s->wait_ns);
  s->saw_done = atomic_load(&s->holder_done);
  CO_EQ(weft_mutex_unlock(&s->m), 0); /* held again */
  return (void *)(intptr_t)r;
}

static void *cv_timeout_main(void *arg)
{
  (void)arg;
  struct cv_timeout s = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
  CO_EQ(weft_cond_wait(&s.c, &s.m), -EPERM); /* not held: nothing happens */
  CO_EQ(queued(&s.c.q_), 0);
  bool proved = false;
  for (int64_t ns = 2 * WEFT_MSEC; !proved && ns <= 2 * WEFT_SEC; ns *= 2) {
    s.wait_ns = ns;
    s.saw_done = -1;
    atomic_store(&s.waiting, 0);
    atomic_store(&s.holder_done, 0);
    weft_task *t;
    CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, cv_timeout_waiter, &s), 0);
    CO_CHECK(RT_POLL(atomic_load(&s.waiting)));
    CO_EQ(weft_mutex_lock(&s.m), 0); /* the waiter's wait released it */
    /* Still in the condition wait now: its relock must wait for us. */
    proved = queued(&s.c.q_) == 1;
    if (proved) {
      CO_CHECK(RT_POLL(queued(&s.c.q_) == 0));  /* the deadline passed */
      CO_CHECK(RT_POLL(queued(&s.m.q_) == 1));  /* waiting for the mutex now */
      atomic_store(&s.holder_done, 1);
    }
    CO_EQ(weft_mutex_unlock(&s.m), 0);
    CO_EQ(rt_join_int(t), -ETIMEDOUT);
    if (proved)
      CO_EQ(s.saw_done, 1); /* not before the holder let go */
  }
  CO_CHECK(proved);
  /* A deadline already past: the mutex is given back at once. */
  CO_EQ(weft_mutex_lock(&s.m), 0);
  CO_EQ(weft_cond_wait_dl(&s.c, &s.m, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_mutex_unlock(&s.m), 0);
  CO_EQ(weft_mutex_destroy(&s.m), 0);
  CO_EQ(weft_cond_destroy(&s.c), 0);
  return NULL;
}

Test(sync_prims, cond_wait_dl_timeout_reacquires_mutex, .timeout = 30)
{
  rt_run(2, cv_timeout_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A bounded queue on one mutex and two condition variables: producers and
 * consumers on both shards and plain threads, exact sum. */
#define QCAP 8
#define QITEMS 3000

struct bq {
  weft_mutex m;
  weft_cond not_full, not_empty;
  long buf[QCAP];
  int head, len;
  atomic_int next_role;
  atomic_llong consumed_sum;
};

static void *bq_worker(void *arg)
{
  struct bq *q = arg;
  int role = atomic_fetch_add(&q->next_role, 1);
  bool producer = role % 2 == 0;
  for (long i = 1; i <= QITEMS; i++) {
    CO_EQ(weft_mutex_lock(&q->m), 0);
    if (producer) {
      while (q->len == QCAP)
        CO_EQ(weft_cond_wait(&q->not_full, &q->m), 0);
      q->buf[(q->head + q->len++) % QCAP] = i;
      CO_EQ(weft_cond_signal(&q->not_empty), 0);
    } else {
      while (q->len == 0)
        CO_EQ(weft_cond_wait_dl(&q->not_empty, &q->m, weft_now() + 60 * WEFT_SEC), 0);
      atomic_fetch_add(&q->consumed_sum, q->buf[q->head]);
      q->head = (q->head + 1) % QCAP;
      q->len--;
      CO_EQ(weft_cond_signal(&q->not_full), 0);
    }
    CO_EQ(weft_mutex_unlock(&q->m), 0);
  }
  return NULL;
}

Test(sync_prims, cond_bounded_queue_exact_sum, .timeout = 120)
{
  for (int shards = 1; shards <= 2; shards++) {
    weft_runtime *rt = rt_start(shards);
    struct bq q = {.m = WEFT_MUTEX_INIT, .not_full = WEFT_COND_INIT,
                   .not_empty = WEFT_COND_INIT};
    crowd(rt, 6, 2, bq_worker, &q); /* 4 producers, 4 consumers */
    cr_assert_eq(q.len, 0);
    cr_assert_eq(atomic_load(&q.consumed_sum), 4LL * QITEMS * (QITEMS + 1) / 2);
    finish(rt);
  }
}

/* ---- semaphore ------------------------------------------------------------------------------- */

struct semw {
  weft_sem s;
  atomic_int got;
  atomic_int inside, max_inside;
};

static void *sem_waiter(void *arg)
{
  struct semw *w = arg;
  int r = weft_sem_acquire(&w->s);
  CO_EQ(r, 0);
  atomic_fetch_add(&w->got, 1);
  return NULL;
}

Test(sync_prims, sem_counts_exactly, .timeout = 30)
{
  weft_sem s;
  cr_assert_eq(weft_sem_init(&s, -1), -EINVAL);
  cr_assert_eq(weft_sem_init(&s, WEFT_SEM_VALUE_MAX + 1), -EINVAL);
  cr_assert_eq(weft_sem_init(&s, 3), 0);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(weft_sem_try_acquire(&s), 0);
  cr_assert_eq(weft_sem_try_acquire(&s), -EAGAIN);
  cr_assert_eq(weft_sem_acquire_dl(&s, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  cr_assert_eq(weft_sem_value(&s), 0);
  cr_assert_eq(weft_sem_release(&s, 0), 0);
  cr_assert_eq(weft_sem_release(&s, -1), -EINVAL);
  cr_assert_eq(weft_sem_release(&s, 2), 0);
  cr_assert_eq(weft_sem_value(&s), 2);
  cr_assert_eq(weft_sem_acquire(&s), 0);
  cr_assert_eq(weft_sem_acquire_dl(&s, weft_now() - 1), 0); /* free: taken */
  cr_assert_eq(weft_sem_value(&s), 0);
  cr_assert_eq(weft_sem_release(&s, WEFT_SEM_VALUE_MAX), 0);
  cr_assert_eq(weft_sem_release(&s, 1), -EOVERFLOW);
  cr_assert_eq(weft_sem_release(&s, WEFT_SEM_VALUE_MAX + 1), -EOVERFLOW);
  cr_assert_eq(weft_sem_value(&s), WEFT_SEM_VALUE_MAX);
  cr_assert_eq(weft_sem_destroy(&s), 0);

  /* Releases go to queued waiters, one permit each, none kept meanwhile. */
  weft_runtime *rt = rt_start(2);
  struct semw w = {.s = WEFT_SEM_INIT(0)};
  weft_task *t[4];
  pthread_t th;
  for (int i = 0; i < 4; i++)
    t[i] = submit_on(rt, WEFT_PLACE_PINNED, i % 2, sem_waiter, &w);
  cr_assert_eq(pthread_create(&th, NULL, sem_waiter, &w), 0);
  cr_assert(RT_POLL(queued(&w.s.q_) == 5));
  cr_assert_eq(weft_sem_destroy(&w.s), -EBUSY);
  cr_assert_eq(weft_sem_release(&w.s, 3), 0);
  cr_assert(RT_POLL(atomic_load(&w.got) == 3));
  usleep(5000);
  cr_assert_eq(atomic_load(&w.got), 3);
  cr_assert_eq(weft_sem_value(&w.s), 0);
  cr_assert_eq(weft_sem_try_acquire(&w.s), -EAGAIN); /* no barging past the queue */
  cr_assert_eq(weft_sem_release(&w.s, 4), 0);
  cr_assert(RT_POLL(atomic_load(&w.got) == 5));
  cr_assert_eq(weft_sem_value(&w.s), 2);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  pthread_join(th, NULL);
  cr_assert_eq(weft_sem_destroy(&w.s), 0);
  finish(rt);
}

static void *sem_worker(void *arg)
{
  struct semw *w = arg;
  for (int i = 0; i < ITERS / 4; i++) {
    int r = i % 3 ? weft_sem_acquire(&w->s) : weft_sem_acquire_dl(&w->s, weft_now() + 60 * WEFT_SEC);
    CO_EQ(r, 0);
    int in = atomic_fetch_add(&w->inside, 1) + 1;
    CO_CHECK(in <= 3);
    int m = atomic_load(&w->max_inside);
    while (in > m && !atomic_compare_exchange_weak(&w->max_inside, &m, in))
      ;
    if (i % 101 == 5)
      weft_yield();
    atomic_fetch_sub(&w->inside, 1);
    CO_EQ(weft_sem_release(&w->s, 1), 0);
    atomic_fetch_add(&w->got, 1);
  }
  return NULL;
}

Test(sync_prims, sem_bounds_concurrency_under_contention, .timeout = 120)
{
  for (int shards = 1; shards <= 2; shards++) {
    weft_runtime *rt = rt_start(shards);
    struct semw w = {.s = WEFT_SEM_INIT(3)};
    crowd(rt, 8, 2, sem_worker, &w);
    cr_assert_eq(atomic_load(&w.got), 10 * (ITERS / 4));
    cr_assert_eq(weft_sem_value(&w.s), 3);
    cr_assert_leq(atomic_load(&w.max_inside), 3);
    finish(rt);
  }
}

/* ---- wait group ----------------------------------------------------------------------------- */

#define NWG 1000

struct wgtest {
  weft_waitgroup wg;
  atomic_int finished;
  atomic_int waited;
};

static void *wg_job(void *arg)
{
  struct wgtest *w = arg;
  if (atomic_load(&w->finished) % 3 == 0)
    weft_yield();
  atomic_fetch_add(&w->finished, 1);
  CO_EQ(weft_waitgroup_done(&w->wg), 0);
  return NULL;
}

static void *wg_waiter(void *arg)
{
  struct wgtest *w = arg;
  CO_EQ(weft_waitgroup_wait(&w->wg), 0);
  CO_EQ(atomic_load(&w->finished), NWG); /* every job was done before */
  atomic_fetch_add(&w->waited, 1);
  return NULL;
}

static void *wg_main(void *arg)
{
  (void)arg;
  struct wgtest w = {.wg = WEFT_WAITGROUP_INIT};
  CO_EQ(weft_waitgroup_wait(&w.wg), 0); /* zero: at once */
  CO_EQ(weft_waitgroup_add(&w.wg, NWG), 0);
  weft_task *other;
  CO_EQ(rt_spawn(&other, WEFT_PLACE_PINNED, 1, wg_waiter, &w), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, wg_waiter, &w), 0);
  CO_CHECK(RT_POLL(queued(&w.wg.q_) == 2));
  CO_EQ(weft_waitgroup_destroy(&w.wg), -EBUSY);
  CO_EQ(weft_waitgroup_wait_dl(&w.wg, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  for (int i = 0; i < NWG; i++)
    CO_EQ(rt_spawn(NULL, WEFT_PLACE_ROUND_ROBIN, -1, wg_job, &w), 0);
  CO_EQ(weft_waitgroup_wait(&w.wg), 0);
  CO_EQ(atomic_load(&w.finished), NWG);
  CO_EQ(rt_join_int(other), 0);
  pthread_join(th, NULL); /* released already: returns at once */
  CO_EQ(atomic_load(&w.waited), 2);
  /* Go semantics for the counter. */
  CO_EQ(weft_waitgroup_done(&w.wg), -EINVAL);
  CO_EQ(weft_waitgroup_add(&w.wg, 3), 0);
  CO_EQ(weft_waitgroup_add(&w.wg, -4), -EINVAL);
  CO_EQ(weft_waitgroup_add(&w.wg, INT64_MAX), -EOVERFLOW);
  CO_EQ(weft_waitgroup_add(&w.wg, 0), 0);
  CO_EQ(weft_waitgroup_wait_dl(&w.wg, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_waitgroup_add(&w.wg, -3), 0);
  CO_EQ(weft_waitgroup_wait_dl(&w.wg, weft_now() - 1), 0);
  CO_EQ(weft_waitgroup_destroy(&w.wg), 0);
  return NULL;
}

Test(sync_prims, waitgroup_thousand_tasks, .timeout = 60)
{
  rt_run(2, wg_main, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- once ---------------------------------------------------------------------------------- */

#define NONCE_CO 48
#define NONCE_TH 16

struct oncetest {
  weft_once_flag once;
  weft_event *go;
  atomic_int calls;
  atomic_int ran;        /* set at the end of fn */
  atomic_int deadlk;
};

static void once_fn(void *arg)
{
  struct oncetest *o = arg;
  atomic_fetch_add(&o->calls, 1);
  atomic_store(&o->deadlk, weft_once(&o->once, once_fn, o)); /* from inside fn */
  weft_sleep(20 * WEFT_MSEC); /* the others arrive and wait */
  atomic_store(&o->ran, 1);
}

static void *once_caller(void *arg)
{
  struct oncetest *o = arg;
  CO_EQ(weft_event_wait(o->go), 0);
  CO_EQ(weft_once(&o->once, once_fn, o), 0);
  CO_EQ(atomic_load(&o->ran), 1); /* never before fn finished */
  return NULL;
}

static void *once_starter(void *arg)
{
  struct oncetest *o = arg;
  usleep(2000);
  weft_event_set(o->go);
  return NULL;
}

Test(sync_prims, once_runs_fn_exactly_once_for_64_callers, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  struct oncetest o = {.once = WEFT_ONCE_INIT};
  cr_assert_eq(weft_event_create(&o.go, 0), 0);
  pthread_t starter;
  cr_assert_eq(pthread_create(&starter, NULL, once_starter, &o), 0);
  crowd(rt, NONCE_CO, NONCE_TH, once_caller, &o);
  pthread_join(starter, NULL);
  cr_assert_eq(atomic_load(&o.calls), 1);
  cr_assert_eq(atomic_load(&o.deadlk), -EDEADLK);
  cr_assert(weft_once_done(&o.once));
  cr_assert_eq(weft_once(&o.once, once_fn, &o), 0); /* done: fn not run again */
  cr_assert_eq(atomic_load(&o.calls), 1);
  weft_event_destroy(o.go);

  /* A waiter with a deadline gives up while fn runs; later callers don't wait. */
  weft_once_flag f;
  cr_assert_eq(weft_once_flag_init(&f), 0);
  struct once_runner runner = {.once = &f};
  pthread_t holder;
  cr_assert_eq(pthread_create(&holder, NULL, run_once_holder, &runner), 0);
  cr_assert(RT_POLL(__atomic_load_n(&f.state_, __ATOMIC_ACQUIRE) != 0));
  cr_assert_eq(weft_once_dl(&f, never_called, NULL, weft_now() + WEFT_MSEC), -ETIMEDOUT);
  cr_assert(!weft_once_done(&f));
  atomic_store(&runner.release, true);
  pthread_join(holder, NULL);
  cr_assert_eq(weft_once_dl(&f, never_called, NULL, weft_now() - 1), 0);
  finish(rt);
}

/* ---- static initialisers on globals ------------------------------------------------------- */

static weft_mutex g_mutex = WEFT_MUTEX_INIT;
static weft_cond g_cond = WEFT_COND_INIT;
static weft_sem g_sem = WEFT_SEM_INIT(2);
static weft_waitgroup g_wg = WEFT_WAITGROUP_INIT;
static weft_once_flag g_once = WEFT_ONCE_INIT;
static long g_count;
static int g_turn;
static atomic_int g_once_calls;

static void g_init(void *arg)
{
  (void)arg;
  atomic_fetch_add(&g_once_calls, 1);
}

static void *g_worker(void *arg)
{
  int id = (int)(intptr_t)arg;
  CO_EQ(weft_once(&g_once, g_init, NULL), 0);
  CO_EQ(weft_sem_acquire(&g_sem), 0);
  for (int i = 0; i < 1000; i++) {
    CO_EQ(weft_mutex_lock(&g_mutex), 0);
    g_count++;
    CO_EQ(weft_mutex_unlock(&g_mutex), 0);
  }
  CO_EQ(weft_sem_release(&g_sem, 1), 0);
  /* Take turns in id order through the condition variable. */
  CO_EQ(weft_mutex_lock(&g_mutex), 0);
  while (g_turn != id)
    CO_EQ(weft_cond_wait(&g_cond, &g_mutex), 0);
  g_turn++;
  CO_EQ(weft_cond_broadcast(&g_cond), 0);
  CO_EQ(weft_mutex_unlock(&g_mutex), 0);
  CO_EQ(weft_waitgroup_done(&g_wg), 0);
  return NULL;
}

Test(sync_prims, static_initialisers_on_globals, .timeout = 30)
{
  weft_runtime *rt = rt_start(2);
  cr_assert_eq(weft_waitgroup_add(&g_wg, 6), 0);
  weft_task *t[5];
  for (int i = 0; i < 5; i++)
    t[i] = submit_on(rt, WEFT_PLACE_PINNED, i % 2, g_worker, (void *)(intptr_t)(4 - i));
  g_worker((void *)(intptr_t)5); /* this thread goes last */
  cr_assert_eq(weft_waitgroup_wait(&g_wg), 0);
  for (int i = 0; i < 5; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  cr_assert_eq(g_count, 6000);
  cr_assert_eq(g_turn, 6);
  cr_assert_eq(atomic_load(&g_once_calls), 1);
  cr_assert_eq(weft_sem_value(&g_sem), 2);
  cr_assert_eq(weft_mutex_destroy(&g_mutex), 0);
  cr_assert_eq(weft_cond_destroy(&g_cond), 0);
  cr_assert_eq(weft_waitgroup_destroy(&g_wg), 0);
  finish(rt);
}

/* ---- NULL arguments ----------------------------------------------------------------------- */

static void noop(void *arg)
{
  (void)arg;
}

Test(sync_prims, null_arguments_are_einval, .timeout = 10)
{
  weft_mutex m = WEFT_MUTEX_INIT;
  weft_cond c = WEFT_COND_INIT;
  weft_once_flag o = WEFT_ONCE_INIT;
  int64_t dl = weft_now() + WEFT_SEC;
  cr_assert_eq(weft_mutex_init(NULL), -EINVAL);
  cr_assert_eq(weft_mutex_destroy(NULL), -EINVAL);
  cr_assert_eq(weft_mutex_lock(NULL), -EINVAL);
  cr_assert_eq(weft_mutex_lock_dl(NULL, dl), -EINVAL);
  cr_assert_eq(weft_mutex_trylock(NULL), -EINVAL);
  cr_assert_eq(weft_mutex_unlock(NULL), -EINVAL);
  cr_assert_eq(weft_cond_init(NULL), -EINVAL);
  cr_assert_eq(weft_cond_destroy(NULL), -EINVAL);
  cr_assert_eq(weft_cond_wait(NULL, &m), -EINVAL);
  cr_assert_eq(weft_cond_wait(&c, NULL), -EINVAL);
  cr_assert_eq(weft_cond_wait_dl(NULL, &m, dl), -EINVAL);
  cr_assert_eq(weft_cond_wait_dl(&c, NULL, dl), -EINVAL);
  cr_assert_eq(weft_cond_signal(NULL), -EINVAL);
  cr_assert_eq(weft_cond_broadcast(NULL), -EINVAL);
  cr_assert_eq(weft_sem_init(NULL, 1), -EINVAL);
  cr_assert_eq(weft_sem_destroy(NULL), -EINVAL);
  cr_assert_eq(weft_sem_acquire(NULL), -EINVAL);
  cr_assert_eq(weft_sem_acquire_dl(NULL, dl), -EINVAL);
  cr_assert_eq(weft_sem_try_acquire(NULL), -EINVAL);
  cr_assert_eq(weft_sem_release(NULL, 1), -EINVAL);
  cr_assert_eq(weft_sem_value(NULL), -EINVAL);
  cr_assert_eq(weft_waitgroup_init(NULL), -EINVAL);
  cr_assert_eq(weft_waitgroup_destroy(NULL), -EINVAL);
  cr_assert_eq(weft_waitgroup_add(NULL, 1), -EINVAL);
  cr_assert_eq(weft_waitgroup_done(NULL), -EINVAL);
  cr_assert_eq(weft_waitgroup_wait(NULL), -EINVAL);
  cr_assert_eq(weft_waitgroup_wait_dl(NULL, dl), -EINVAL);
  cr_assert_eq(weft_once_flag_init(NULL), -EINVAL);
  cr_assert_eq(weft_once(NULL, noop, NULL), -EINVAL);
  cr_assert_eq(weft_once(&o, NULL, NULL), -EINVAL);
  cr_assert_eq(weft_once_dl(NULL, noop, NULL, dl), -EINVAL);
  cr_assert_eq(weft_once_dl(&o, NULL, NULL, dl), -EINVAL);
  cr_assert(!weft_once_done(NULL));
  cr_assert(!weft_once_done(&o));
  cr_assert_eq(weft_mutex_destroy(&m), 0);
  cr_assert_eq(weft_cond_destroy(&c), 0);
}
