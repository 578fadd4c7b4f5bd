/* SPDX-License-Identifier: MIT */
/* The blocking pool (include/weft/blocking.h). */
#include "core.h"
#include "op.h"

#include "weft/blocking.h"

#include "../coro/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* A job lives on the waiting coroutine's stack: it is always awaited until
 * the pool is done with it (see weft_blocking_dl). */
typedef struct weft__job {
  struct weft__job *next;   /* pool queue link */
  void *(*fn)(void *);
  void *arg;
  void *ret;
  /* QUEUED, RUNNING (pool lock), DONE (done_q.lock). Atomic: the pool
   * thread sets RUNNING under the pool lock while a waiter reads it under
   * done_q.lock - only DONE matters to that read, which the lock orders. */
  _Atomic int state;
  weft__waitq done_q;       /* the coroutine waits here for DONE */
} weft__job;

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

static void *pool_thread(void *arg);

int weft__pool_init(weft__pool *p, unsigned max_threads, int64_t idle_ns,
                    const cpu_set_t *cpus, const char *thread_name)
{
  snprintf(p->name, sizeof(p->name), "%.10s-pool", thread_name); /* the kernel's 15 */
  if (pthread_mutex_init(&p->lock, NULL))
    return -ENOMEM;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int e = pthread_cond_init(&p->work, &ca);
  if (!e)
    e = pthread_cond_init(&p->gone, &ca);
  pthread_condattr_destroy(&ca);
  if (e) {
    pthread_mutex_destroy(&p->lock);
    return -ENOMEM;
  }
  p->head = p->tail = NULL;
  p->max_threads = max_threads;
  p->idle_ns = idle_ns;
  p->threads = p->idle = 0;
  p->queued = 0;
  p->cpus = cpus;
  p->stopping = false;
  atomic_init(&p->jobs_done, 0);
  return 0;
}

void weft__pool_term(weft__pool *p)
{
  pthread_mutex_lock(&p->lock);
  p->stopping = true;
  pthread_cond_broadcast(&p->work);
  while (p->threads)
    pthread_cond_wait(&p->gone, &p->lock);
  pthread_mutex_unlock(&p->lock);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->gone);
  pthread_mutex_destroy(&p->lock);
}

static void finish(weft__job *j)
{
  weft__spin_lock(&j->done_q.lock);
  atomic_store_explicit(&j->state, JOB_DONE, memory_order_relaxed); /* read under done_q.lock */
  weft__waiter *ready = weft__waitq_take(&j->done_q, INT64_MAX, NULL);
  weft__spin_unlock(&j->done_q.lock);
  weft__waiters_complete(ready, 0); /* wakes the shards through msg_ring */
}

/* Set on pool threads: a job that stops its own runtime must be refused
 * (weft_runtime_stop), as the stop could never finish. */
static __thread weft__pool *tls_pool;

weft__pool *weft__pool_self(void)
{
  return tls_pool;
}

static void *pool_thread(void *arg)
{
  weft__pool *p = arg;
  tls_pool = p;
  /* Not the starting shard's name, inherited: its jobs' time is not its. */
  pthread_setname_np(pthread_self(), p->name);
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->head && !p->stopping) {
      struct timespec until;
      clock_gettime(CLOCK_MONOTONIC, &until);
      /* Saturating: idle_ns may be anything > 0 (INT64_MAX: never leave); a
       * sum that wrapped gave a negative time, which the wait refuses at
       * once (-EINVAL) - this loop then spun holding the pool's lock. */
      int64_t t = weft__add_sat((int64_t)until.tv_sec * 1000000000 + until.tv_nsec, p->idle_ns);
      until.tv_sec = t / 1000000000;
      until.tv_nsec = t % 1000000000;
      p->idle++;
      int e = pthread_cond_timedwait(&p->work, &p->lock, &until);
      p->idle--;
      if (e == ETIMEDOUT && !p->head)
        goto leave; /* idle for too long */
    }
    if (!p->head)
      goto leave; /* stopping */
    weft__job *j = p->head;
    p->head = j->next;
    if (!p->head)
      p->tail = NULL;
    p->queued--;
    atomic_store_explicit(&j->state, JOB_RUNNING, memory_order_relaxed);
    pthread_mutex_unlock(&p->lock);

    j->ret = j->fn(j->arg);
    atomic_fetch_add_explicit(&p->jobs_done, 1, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    /* DONE is set under both locks: the pool's (for dequeue decisions) and
     * the job's (for its waiters). */
    finish(j);
  }
leave:
  p->threads--;
  pthread_cond_broadcast(&p->gone);
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Queues j, starting a thread if none is idle. 0 or -EAGAIN/-ENOMEM. */
static int submit(weft__pool *p, weft__job *j)
{
  pthread_mutex_lock(&p->lock);
  if (p->idle <= p->queued && p->threads < p->max_threads) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Mostly made by shard threads, which may be pinned to one CPU: a
     * job would compete with its shard there, all other CPUs idle. */
    if (p->cpus)
      pthread_attr_setaffinity_np(&attr, sizeof(*p->cpus), p->cpus);
    int saved = errno; /* pthread_create returns its error, but may leave errno set */
    int e = weft__fault_hit(WEFT__FAULT_THREAD) ? EAGAIN : pthread_create(&th, &attr, pool_thread, p);
    pthread_attr_destroy(&attr);
    errno = saved;
    if (e == 0)
      p->threads++;
    else if (p->threads == 0) {
      pthread_mutex_unlock(&p->lock);
      return -e;
    }
    /* else: the threads there will get to it */
  }
  j->next = NULL;
  atomic_store_explicit(&j->state, JOB_QUEUED, memory_order_relaxed);
  if (p->tail)
    p->tail->next = j;
  else
    p->head = j;
  p->tail = j;
  p->queued++;
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->lock);
  return 0;
}

/* Takes j out of the queue if no thread has taken it yet. */
static bool withdraw(weft__pool *p, weft__job *j)
{
  bool taken = false;
  pthread_mutex_lock(&p->lock);
  if (atomic_load_explicit(&j->state, memory_order_relaxed) == JOB_QUEUED) {
    weft__job **pp = &p->head, *prev = NULL;
    while (*pp && *pp != j) {
      prev = *pp;
      pp = &(*pp)->next;
    }
    if (*pp) {
      *pp = j->next;
      if (p->tail == j)
        p->tail = prev;
      p->queued--;
      taken = true;
    }
  }
  pthread_mutex_unlock(&p->lock);
  return taken;
}

/* Waits for j to be DONE: cancellable/deadline-bound when `bounded`. */
static int wait_done(weft__job *j, int64_t deadline, bool bounded)
{
  weft__waiter w;
  weft__waiter_init(&w);
  w.uncancellable = !bounded;
  weft__spin_lock(&j->done_q.lock);
  if (atomic_load_explicit(&j->state, memory_order_relaxed) == JOB_DONE) {
    weft__spin_unlock(&j->done_q.lock);
    return 0;
  }
  weft__waitq_append(&j->done_q, &w);
  weft__spin_unlock(&j->done_q.lock);
  return weft__waiter_wait(&w, bounded ? deadline : WEFT_NO_DEADLINE);
}

int weft_blocking_dl(void *(*fn)(void *), void *arg, void **ret, int64_t deadline)
{
  if (!fn)
    return -EINVAL;
  weft__shard *sh = weft__shard_self();
  weft_task *t = weft__task_self();
  if (!sh || !t) {
    /* As in a coroutine: a deadline already passed starts nothing. */
    if (deadline >= 0 && deadline <= weft__now())
      return -ETIMEDOUT;
    /* fn's errno is the running thread's - the caller's here: kept from
     * it as a pool thread's is, since no weft call touches errno. */
    int saved = errno;
    void *v = fn(arg);
    errno = saved;
    if (ret)
      *ret = v;
    return 0;
  }
  int64_t dl = weft__deadline_for(t, deadline);
  int r = weft__may_wait(t, dl);
  if (r < 0)
    return r; /* do not start a job we would then have to wait out */
  weft__pool *p = &sh->rt->pool;
  weft__job j = {.fn = fn, .arg = arg};
  weft__waitq_init(&j.done_q);
  r = submit(p, &j);
  if (r < 0)
    return r;
  r = wait_done(&j, deadline, true);
  if (r < 0) {
    /* Given up: drop the job if it has not started, else wait it out - fn
     * may be using memory of ours. */
    if (withdraw(p, &j))
      return r;
    wait_done(&j, WEFT_NO_DEADLINE, false);
    /* -ENOMEM (no room for the deadline's timer) says the job did not
     * run, and this one did: say what a bounded wait would have. */
    if (r == -ENOMEM)
      r = weft__may_wait(t, dl);
  }
  if (ret)
    *ret = j.ret;
  return r;
}

int weft_blocking(void *(*fn)(void *), void *arg, void **ret)
{
  return weft_blocking_dl(fn, arg, ret, WEFT_NO_DEADLINE);
}

void weft__pool_stats(weft__pool *p, uint64_t *jobs, uint64_t *queued, uint64_t *threads)
{
  pthread_mutex_lock(&p->lock);
  *queued = p->queued;
  *threads = p->threads;
  pthread_mutex_unlock(&p->lock);
  *jobs = atomic_load_explicit(&p->jobs_done, memory_order_relaxed);
}
