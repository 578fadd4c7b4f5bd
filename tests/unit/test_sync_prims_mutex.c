/* SPDX-License-Identifier: MIT */
/*
 * Suite "sync_prims", part 1 - weft_mutex: exact counts under contention on
 * one shard, on two shards and with plain threads mixed in; the FIFO
 * hand-over (a deterministic order check, not a timing one) and no barging;
 * errors, trylock and deadlines; cancellation of every kind of blocked wait
 * (mutex, cond, sem, waitgroup, once); and the race between a hand-over and
 * a waiter's deadline or cancel. The other primitives are in
 * test_sync_prims_coord.c.
 */
#include "sync_prims_test.h"

/* ---- mutex: exact counts under contention ------------------------------------------- */

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

/* ---- mutex: an owner that has gone ---------------------------------------------------- */

/* A task that returns while holding a mutex leaves it locked for ever, and so
 * does a plain thread that exits (sync.h): whoever comes later is not the
 * owner - its unlock is -EPERM, its lock waits (-ETIMEDOUT past a deadline,
 * not -EDEADLK), its cond wait is -EPERM. The next task on a shard usually
 * gets the memory of the one that returned (the shard's stack cache), and the
 * next thread the stack and thread-local block of the one that exited
 * (glibc's stack cache): the heirs are run until one sits where the locker
 * sat, and each must be a stranger to m. */
struct gone {
  weft_mutex m;
  weft_cond c;
  uintptr_t where;       /* the locker's weft_task_self(), or pthread_self() */
  int heirs_there;       /* heirs that ran at that same address */
};

static uintptr_t whereabouts(void)
{
  weft_task *t = weft_task_self();
  return t ? (uintptr_t)(void *)t : (uintptr_t)pthread_self();
}

static void *lock_and_leave(void *arg)
{
  struct gone *g = arg;
  CO_EQ(weft_mutex_lock(&g->m), 0);
  g->where = whereabouts();
  return NULL; /* still holding m */
}

static void *heir(void *arg)
{
  struct gone *g = arg;
  if (whereabouts() == g->where)
    g->heirs_there++;
  CO_EQ(weft_mutex_unlock(&g->m), -EPERM);
  CO_EQ(weft_mutex_trylock(&g->m), -EBUSY);
  CO_EQ(weft_mutex_lock_dl(&g->m, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_cond_wait_dl(&g->c, &g->m, weft_now() - 1), -EPERM);
  return NULL;
}

#define HEIRS 64

static void *gone_task_main(void *arg)
{
  struct gone *g = arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 0, lock_and_leave, g), 0);
  CO_EQ(rt_join_int(t), 0);
  for (int i = 0; i < HEIRS && !g->heirs_there; i++) {
    CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 0, heir, g), 0);
    CO_EQ(rt_join_int(t), 0);
  }
  return NULL;
}

Test(sync_prims, mutex_left_locked_by_a_gone_owner_stays_locked, .timeout = 30)
{
  struct gone g = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
  rt_run(1, gone_task_main, &g);
  rt_assert_clean();
  cr_assert_eq(weft_mutex_destroy(&g.m), -EBUSY);

  struct gone h = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, lock_and_leave, &h), 0);
  pthread_join(th, NULL);
  for (int i = 0; i < HEIRS && !h.heirs_there; i++) {
    cr_assert_eq(pthread_create(&th, NULL, heir, &h), 0);
    pthread_join(th, NULL);
  }
  rt_assert_clean();
  cr_assert_eq(weft_mutex_destroy(&h.m), -EBUSY);
  rt_assert_no_leaks();
}

/* ---- mutex: freed by an unlock whose waiters all gave up ---------------------------------- */

/* An unlock that finds only waiters that gave up (their deadline or cancel
 * claimed them, and they are still queued) frees the mutex under its queue's
 * lock and lets go of that lock after. A trylock (or lock) that takes the
 * free mutex meanwhile must not return before that - its caller may unlock
 * and free the mutex at once, as after a hand-over. The waiter that gave up:
 * a coroutine cancelled by this thread, which is held between the claim and
 * the unqueue (weft__test_claim_pause) and unlocks there; the unlock is held
 * in turn (rt_publish_hold) while a plain thread tries the mutex. */
static weft_mutex *unlock_at_claim_m;

static void unlock_at_claim(void)
{
  weft_mutex *m = unlock_at_claim_m;
  unlock_at_claim_m = NULL;
  if (m)
    CO_EQ(weft_mutex_unlock(m), 0);
}

static void *lock_forever(void *arg)
{
  return (void *)(intptr_t)weft_mutex_lock(arg);
}

static int try_and_unlock(void *m)
{
  int r = weft_mutex_trylock(m);
  if (r == 0)
    CO_EQ(weft_mutex_unlock(m), 0);
  return r;
}

struct early_try {
  weft_mutex *m;
  int result;
  bool early;
};

static void *early_try(void *arg)
{
  struct early_try *e = arg;
  e->early = rt_call_while_held(try_and_unlock, e->m, &e->result);
  return NULL;
}

Test(sync_prims, lock_taken_from_an_unlock_with_only_stale_waiters_returns_after_it, .timeout = 30)
{
  weft_runtime *rt = rt_start(1);
  weft_mutex m = WEFT_MUTEX_INIT;
  cr_assert_eq(weft_mutex_lock(&m), 0);
  weft_task *t = submit_on(rt, WEFT_PLACE_PINNED, 0, lock_forever, &m);
  cr_assert(RT_POLL(queued(&m.q_) == 1));
  struct early_try e = {.m = &m, .result = -1};
  pthread_t th;
  rt_publish_hold();
  cr_assert_eq(pthread_create(&th, NULL, early_try, &e), 0);
  unlock_at_claim_m = &m;
  weft__test_claim_pause = unlock_at_claim;
  cr_assert_eq(weft_cancel(t), 0);
  weft__test_claim_pause = NULL;
  pthread_join(th, NULL);
  rt_publish_unhold();
  cr_assert_null(unlock_at_claim_m, "the cancel never claimed the waiter");
  void *v = NULL;
  cr_assert_eq(weft_join(t, &v), -ECANCELED);
  cr_assert_eq((intptr_t)v, -ECANCELED);
  cr_expect(!e.early, "trylock returned while the unlock was still in its call");
  cr_expect_eq(e.result, 0);
  cr_assert_eq(weft_mutex_destroy(&m), 0);
  finish(rt);
}

/* ---- mutex: the spin of a locker is a wait too ------------------------------------------
 * A locker that finds the mutex held spins a few microseconds before it
 * queues. That spin is waiting for somebody else's unlock, so a cancel (made
 * before the lock or during the spin) and a deadline scope that has passed
 * end it as they end a queued wait, even when the holder lets go of the
 * mutex during the spin: this thread holds m and lets go of it while the
 * locker is held at the start of its spin (weft__test_spin_pause). */
enum spin_mode { SPIN_CANCEL_BEFORE, SPIN_CANCEL_DURING, SPIN_SCOPE_PASSED, SPIN_DL_PASSED, SPIN_MODES };

struct spin_case {
  weft_mutex m;
  enum spin_mode mode;
  atomic_bool in_spin;   /* the locker is held in its spin */
  atomic_bool released;  /* this thread has unlocked m */
  atomic_bool returned;  /* the locker's lock returned */
};

static struct spin_case *spin_cur;

static void spin_hold(void)
{
  struct spin_case *sc = spin_cur;
  if (!sc || atomic_exchange(&sc->in_spin, true))
    return;
  if (sc->mode == SPIN_CANCEL_DURING)
    CO_EQ(weft_cancel(weft_task_self()), 0);
  while (!atomic_load(&sc->released))
    usleep(100);
}

static void *spin_locker(void *arg)
{
  struct spin_case *sc = arg;
  int64_t saved = WEFT_NO_DEADLINE;
  if (sc->mode == SPIN_CANCEL_BEFORE)
    CO_EQ(weft_cancel(weft_task_self()), 0);
  if (sc->mode == SPIN_SCOPE_PASSED)
    saved = weft_deadline_push(weft_now() - 1);
  int r = sc->mode == SPIN_DL_PASSED ? weft_mutex_lock_dl(&sc->m, weft_now() - 1)
                                     : weft_mutex_lock(&sc->m);
  if (sc->mode == SPIN_SCOPE_PASSED)
    weft_deadline_pop(saved);
  atomic_store(&sc->returned, true);
  if (r == 0)
    CO_EQ(weft_mutex_unlock(&sc->m), 0);
  return (void *)(intptr_t)r;
}

Test(sync_prims, mutex_spin_ends_on_cancel_and_passed_deadline, .timeout = 30)
{
  static const int want[SPIN_MODES] = {-ECANCELED, -ECANCELED, -ETIMEDOUT, -ETIMEDOUT};
  weft_runtime *rt = rt_start(1);
  weft__test_spin_pause = spin_hold;
  for (int mode = 0; mode < SPIN_MODES; mode++) {
    struct spin_case sc = {.m = WEFT_MUTEX_INIT, .mode = mode};
    cr_assert_eq(weft_mutex_lock(&sc.m), 0); /* this thread holds it */
    spin_cur = &sc;
    weft_task *t = submit_on(rt, WEFT_PLACE_PINNED, 0, spin_locker, &sc);
    cr_assert(RT_POLL(atomic_load(&sc.in_spin) || atomic_load(&sc.returned)));
    cr_assert_eq(weft_mutex_unlock(&sc.m), 0);
    atomic_store(&sc.released, true);
    void *v = NULL;
    int j = weft_join(t, &v);
    spin_cur = NULL;
    cr_expect_eq((int)(intptr_t)v, want[mode], "mode %d: lock returned %d (spun: %d)", mode,
                 (int)(intptr_t)v, (int)atomic_load(&sc.in_spin));
    cr_expect_eq(j, mode <= SPIN_CANCEL_DURING ? -ECANCELED : 0, "mode %d: join %d", mode, j);
    cr_assert_eq(weft_mutex_destroy(&sc.m), 0);
  }
  weft__test_spin_pause = NULL;
  finish(rt);
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
  cr_log_info("cancel race: %d took the mutex, %d cancelled", c.took, (int)(intptr_t)v);
  cr_assert_eq(weft_mutex_destroy(&c.m), 0);
  finish(rt);
}
