/* SPDX-License-Identifier: MIT */
/*
 * Suite "sync_prims", part 2 - weft_cond, weft_sem, weft_waitgroup and
 * weft_once: signal / broadcast, timed waits that reacquire the mutex, a
 * bounded queue and bounded concurrency with exact totals, a thousand tasks
 * on a wait group, once for 64 callers; the static initialisers on globals;
 * NULL arguments.
 */
#include "sync_prims_test.h"

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
  /* More than the maximum at once is refused even though the waiters would
   * take five of it (the value would end at the maximum): nobody is served. */
  cr_assert_eq(weft_sem_release(&w.s, WEFT_SEM_VALUE_MAX + 5), -EOVERFLOW);
  cr_assert_eq(queued(&w.s.q_), 5);
  cr_assert_eq(weft_sem_value(&w.s), 0);
  cr_assert_eq(weft_sem_release(&w.s, 3), 0);
  /* No barging past the queue: the permits went to three waiters, none of
   * which may have run yet - a try right after the release finds none. */
  cr_assert_eq(weft_sem_try_acquire(&w.s), -EAGAIN);
  cr_assert_eq(weft_sem_value(&w.s), 0);
  cr_assert(RT_POLL(atomic_load(&w.got) == 3));
  cr_assert_eq(queued(&w.s.q_), 2); /* the other two still wait */
  cr_assert_eq(atomic_load(&w.got), 3);
  cr_assert_eq(weft_sem_value(&w.s), 0);
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
  CO_EQ(weft_waitgroup_add(&w.wg, INT64_MIN), -EINVAL); /* nothing changed: see below */
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
  /* Every other caller arrives and waits for fn to finish. */
  CO_CHECK(RT_POLL(queued(&o->once.q_) == NONCE_CO + NONCE_TH - 1));
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

/* ---- a call that need not wait returns after its waker let go ------------------------------ */

/* A caller may let a semaphore, wait group or once flag go as soon as its
 * call returned - one on its stack, say, once the worker it waits for has
 * released its permit or counted down: a call that waited is completed
 * only after the waker let go of the object. One that found the permit,
 * the zero or the finished once without waiting must not return earlier
 * either: the waker published that state under the object's lock and still
 * writes the lock after. The waker is held there (rt_publish_hold) while a
 * plain thread makes the call. */
struct early_call {
  int (*call)(void *);
  void *obj;
  int result;
  bool early;            /* returned while the waker was still held */
};

static void *early_caller(void *arg)
{
  struct early_call *e = arg;
  e->early = rt_call_while_held(e->call, e->obj, &e->result);
  return NULL;
}

static int sem_try(void *s)
{
  return weft_sem_try_acquire(s);
}

static int sem_take(void *s)
{
  return weft_sem_acquire_dl(s, weft_now() + 60 * WEFT_SEC);
}

static int wg_wait(void *wg)
{
  return weft_waitgroup_wait(wg);
}

static int once_again(void *o)
{
  return weft_once(o, never_called, NULL);
}

static int once_seen_done(void *o)
{
  return weft_once_done(o) ? 0 : -1;
}

enum waker { WAKE_RELEASE, WAKE_DONE, WAKE_ONCE };

static void call_while_waker_held(const char *what, int (*call)(void *), void *obj,
                                  enum waker waker)
{
  struct early_call e = {.call = call, .obj = obj, .result = -1};
  pthread_t th;
  rt_publish_hold();
  cr_assert_eq(pthread_create(&th, NULL, early_caller, &e), 0);
  switch (waker) {
  case WAKE_RELEASE: cr_assert_eq(weft_sem_release(obj, 1), 0); break;
  case WAKE_DONE: cr_assert_eq(weft_waitgroup_done(obj), 0); break;
  case WAKE_ONCE: cr_assert_eq(weft_once(obj, noop, NULL), 0); break;
  }
  pthread_join(th, NULL);
  rt_publish_unhold();
  cr_expect(!e.early, "%s returned while its waker was still in its call", what);
  cr_expect_eq(e.result, 0, "%s: %d", what, e.result);
}

Test(sync_prims, calls_that_need_not_wait_return_after_their_waker, .timeout = 30)
{
  weft_sem s = WEFT_SEM_INIT(0);
  call_while_waker_held("sem_try_acquire", sem_try, &s, WAKE_RELEASE);
  call_while_waker_held("sem_acquire_dl", sem_take, &s, WAKE_RELEASE);
  cr_assert_eq(weft_sem_value(&s), 0);
  weft_waitgroup wg = WEFT_WAITGROUP_INIT;
  cr_assert_eq(weft_waitgroup_add(&wg, 1), 0);
  call_while_waker_held("waitgroup_wait", wg_wait, &wg, WAKE_DONE);
  weft_once_flag o = WEFT_ONCE_INIT;
  call_while_waker_held("once", once_again, &o, WAKE_ONCE);
  cr_assert(weft_once_done(&o));
  weft_once_flag o2 = WEFT_ONCE_INIT;
  call_while_waker_held("once_done", once_seen_done, &o2, WAKE_ONCE);
}
