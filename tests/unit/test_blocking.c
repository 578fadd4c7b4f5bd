/* SPDX-License-Identifier: MIT */
/*
 * Suite "blocking": weft_blocking / weft_blocking_dl - the job runs on a
 * pool thread and its result comes back, many jobs from two shards share a
 * bounded pool, the pool's stats, deadlines and cancellation (a running job
 * is waited for, a queued one dropped at once), the plain-thread path, bad
 * arguments and a pool thread that cannot be created. Checks inside
 * coroutines go through CO_CHECK / CO_EQ (rt_helpers.h).
 *
 * Jobs that must still be running (or queued) at some point block on a
 * "release" flag the test sets only after it has seen what it wanted, so no
 * result depends on timing.
 */
#include "rt_helpers.h"

#include "fault.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

static void nap_us(long us)
{
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static weft_runtime *start_pool(int shards, unsigned threads)
{
  weft_config c;
  rt_cfg(&c, shards);
  c.blocking_threads = threads;
  return rt_start_cfg(&c);
}

static weft_task *submit(weft_runtime *rt, void *(*fn)(void *), void *arg)
{
  weft_task *t = NULL;
  cr_assert_eq(weft_runtime_submit(rt, NULL, fn, arg, &t), 0);
  return t;
}

static void stats(weft_runtime *rt, weft_stats *s)
{
  cr_assert_eq(weft_stats_get(rt, -1, s), 0);
}

/* ---- a job runs elsewhere and returns its value ---------------------------------- */

typedef struct where {
  pthread_t caller, runner;
  int runs;
} where;

static void *record_thread(void *arg)
{
  where *w = arg;
  w->runner = pthread_self();
  w->runs++;
  return (void *)(intptr_t)4242;
}

static void *call_record(void *arg)
{
  where *w = arg;
  w->caller = pthread_self();
  void *ret = NULL;
  CO_EQ(weft_blocking(record_thread, w, &ret), 0);
  CO_EQ((intptr_t)ret, 4242);
  /* ret NULL is allowed. */
  CO_EQ(weft_blocking(record_thread, w, NULL), 0);
  return NULL;
}

Test(blocking, runs_fn_on_another_thread_and_returns_its_result, .timeout = 30)
{
  where w = {.runs = 0};
  rt_run(1, call_record, &w);
  rt_assert_clean();
  cr_assert_eq(w.runs, 2);
  cr_assert(!pthread_equal(w.caller, w.runner), "the job ran on the shard thread");
  cr_assert(!pthread_equal(w.runner, pthread_self()), "the job ran on the test thread");
}

/* ---- many jobs from two shards share a bounded pool ------------------------------ */

static atomic_int running, max_running, finished_jobs;

static void *counted_job(void *arg)
{
  int now = atomic_fetch_add(&running, 1) + 1;
  for (int m = atomic_load(&max_running); now > m && !atomic_compare_exchange_weak(&max_running, &m, now);)
    ;
  nap_us(500);
  atomic_fetch_sub(&running, 1);
  atomic_fetch_add(&finished_jobs, 1);
  return arg;
}

static void *one_job(void *arg)
{
  void *ret = NULL;
  CO_EQ(weft_blocking(counted_job, arg, &ret), 0);
  CO_EQ(ret, arg);
  return NULL;
}

Test(blocking, two_hundred_jobs_from_two_shards_on_four_threads, .timeout = 60)
{
  weft_runtime *rt = start_pool(2, 4);
  weft_task *t[200];
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN; /* half of the callers on each shard */
  for (int i = 0; i < 200; i++)
    cr_assert_eq(weft_runtime_submit(rt, &o, one_job, (void *)(intptr_t)(i + 1), &t[i]), 0);
  for (int i = 0; i < 200; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&finished_jobs), 200);
  cr_assert_leq(atomic_load(&max_running), 4, "%d jobs ran at once with 4 threads",
                atomic_load(&max_running));
  weft_stats s;
  stats(rt, &s);
  cr_assert_eq(s.pool_jobs, 200);
  cr_assert_eq(s.pool_queued, 0);
  cr_assert_leq(s.pool_threads, 4);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- deadlines ---------------------------------------------------------------------- */

typedef struct slow {
  int64_t until;          /* runs until weft_now() passes this */
  atomic_bool started, done;
  atomic_bool release;    /* for jobs that wait to be released */
  atomic_bool returned;   /* the caller got its result */
  int result;
} slow;

static void *slow_job(void *arg)
{
  slow *s = arg;
  atomic_store(&s->started, true);
  while (weft_now() < s->until)
    nap_us(1000);
  atomic_store(&s->done, true);
  return (void *)(intptr_t)77;
}

static void *deadline_running(void *arg)
{
  slow *s = arg;
  /* The job must start before the deadline for this to show anything: a
   * pool thread slow to start leaves it queued, and then it is dropped at
   * once. Such a round is run again with a longer deadline. */
  int64_t margin = 10 * WEFT_MSEC;
  for (int round = 0; round < 6; round++, margin *= 2) {
    atomic_store(&s->started, false);
    atomic_store(&s->done, false);
    int64_t deadline = weft_now() + margin;
    s->until = deadline + 40 * WEFT_MSEC;
    void *ret = NULL;
    s->result = weft_blocking_dl(slow_job, s, &ret, deadline);
    if (!atomic_load(&s->started)) {
      CO_CHECK(ret == NULL); /* dropped before it ran */
      continue;
    }
    /* It must not come back before the job has finished with its memory. */
    CO_CHECK(atomic_load(&s->done));
    CO_CHECK(weft_now() >= s->until);
    CO_EQ((intptr_t)ret, 77); /* the job ran: its result is stored */
    return NULL;
  }
  CO_CHECK(!"the job never started before its deadline");
  return NULL;
}

Test(blocking, deadline_waits_for_the_running_job_then_times_out, .timeout = 30)
{
  slow s = {.result = 1};
  rt_run(1, deadline_running, &s);
  rt_assert_clean();
  rt_assert_no_leaks();
  cr_assert_eq(s.result, -ETIMEDOUT);
}

static void *blocker_job(void *arg)
{
  slow *s = arg;
  atomic_store(&s->started, true);
  while (!atomic_load(&s->release))
    nap_us(200);
  atomic_store(&s->done, true);
  return NULL;
}

static void *occupy(void *arg)
{
  CO_EQ(weft_blocking(blocker_job, arg, NULL), 0);
  return NULL;
}

static atomic_int marker_runs;

static void *marker_job(void *arg)
{
  atomic_fetch_add(&marker_runs, 1);
  return arg;
}

static void *queued_with_deadline(void *arg)
{
  slow *s = arg;
  void *ret = (void *)(intptr_t)-5;
  s->result = weft_blocking_dl(marker_job, (void *)1, &ret, weft_now() + 20 * WEFT_MSEC);
  atomic_store(&s->returned, true);
  CO_EQ((intptr_t)ret, -5); /* never ran: *ret untouched */
  /* The occupying job was never waited for by us. */
  CO_CHECK(!atomic_load(&s->done));
  return NULL;
}

Test(blocking, deadline_drops_a_queued_job_at_once, .timeout = 30)
{
  weft_runtime *rt = start_pool(1, 1);
  slow busy = {.result = 1}, q = {.result = 1};
  weft_task *a = submit(rt, occupy, &busy);
  while (!atomic_load(&busy.started))
    nap_us(100);
  weft_task *b = submit(rt, queued_with_deadline, &q);
  cr_assert_eq(weft_join(b, NULL), 0); /* returns while the only thread is still busy */
  cr_assert(atomic_load(&q.returned));
  cr_assert_eq(q.result, -ETIMEDOUT);
  atomic_store(&busy.release, true);
  cr_assert_eq(weft_join(a, NULL), 0);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&marker_runs), 0, "a dropped job ran");
  weft_stats s;
  stats(rt, &s);
  cr_assert_eq(s.pool_jobs, 1);
  cr_assert_eq(s.pool_queued, 0);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- cancellation ---------------------------------------------------------------------- */

static void *wait_blocker(void *arg)
{
  slow *s = arg;
  void *ret = (void *)(intptr_t)-5;
  s->result = weft_blocking(blocker_job, s, &ret);
  atomic_store(&s->returned, true);
  CO_CHECK(atomic_load(&s->done)); /* waited for the running job */
  CO_EQ((intptr_t)ret, 0);         /* blocker_job returns NULL: *ret was set */
  return NULL;
}

static void *queued_marker(void *arg)
{
  slow *s = arg;
  void *ret = (void *)(intptr_t)-5;
  s->result = weft_blocking(marker_job, (void *)1, &ret);
  atomic_store(&s->returned, true);
  CO_EQ((intptr_t)ret, -5);
  return NULL;
}

Test(blocking, cancel_waits_for_a_running_job_and_drops_a_queued_one, .timeout = 30)
{
  weft_runtime *rt = start_pool(1, 1);
  slow run = {.result = 1}, q = {.result = 1};
  weft_task *a = submit(rt, wait_blocker, &run);
  while (!atomic_load(&run.started))
    nap_us(100);
  weft_task *b = submit(rt, queued_marker, &q);
  /* b's job is queued behind a's: cancelling b returns at once. */
  weft_stats s;
  for (int i = 0; i < 100000; i++) {
    stats(rt, &s);
    if (s.pool_queued == 1)
      break;
    nap_us(100);
  }
  cr_assert_eq(s.pool_queued, 1);
  cr_assert_eq(weft_cancel(b), 0);
  cr_assert_eq(weft_join(b, NULL), -ECANCELED);
  cr_assert_eq(q.result, -ECANCELED);
  cr_assert_eq(atomic_load(&marker_runs), 0);
  /* a's job runs: cancelling a waits for it to finish. */
  cr_assert_eq(weft_cancel(a), 0);
  /* Cancelled, and waiting (again) for its job, which still runs. */
  cr_assert(RT_POLL(rt_dump_count(rt, "waiting cancelled") == 1));
  cr_assert(!atomic_load(&run.returned), "returned while its job was still running");
  atomic_store(&run.release, true);
  cr_assert_eq(weft_join(a, NULL), -ECANCELED);
  cr_assert_eq(run.result, -ECANCELED);
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

static void *cancelled_first(void *arg)
{
  (void)arg;
  CO_EQ(weft_cancel(weft_task_self()), 0);
  CO_EQ(weft_blocking(marker_job, NULL, NULL), -ECANCELED);
  return NULL;
}

Test(blocking, a_cancelled_task_does_not_start_a_job, .timeout = 30)
{
  rt_run(1, cancelled_first, NULL);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&marker_runs), 0);
}

/* ---- plain threads, bad arguments, no thread ---------------------------------------- */

static void *same_thread(void *arg)
{
  *(pthread_t *)arg = pthread_self();
  return (void *)(intptr_t)9;
}

Test(blocking, plain_thread_runs_fn_inline, .timeout = 30)
{
  pthread_t ran_on;
  void *ret = NULL;
  cr_assert_eq(weft_blocking(same_thread, &ran_on, &ret), 0);
  cr_assert(pthread_equal(ran_on, pthread_self()));
  cr_assert_eq((intptr_t)ret, 9);
  /* A deadline does not interrupt an inline call; one already passed does
   * not start it, as in a coroutine. */
  ret = NULL;
  cr_assert_eq(weft_blocking_dl(same_thread, &ran_on, &ret, weft_now() + WEFT_SEC), 0);
  cr_assert_eq((intptr_t)ret, 9);
  ret = NULL;
  cr_assert_eq(weft_blocking_dl(same_thread, &ran_on, &ret, weft_now() - 1), -ETIMEDOUT);
  cr_assert_null(ret);
}

/* A job's errno is the errno of the thread it runs on, and it stays there:
 * the caller's is left as it was - in a coroutine, where the job runs on a
 * pool thread, and on a plain thread, where it runs inline (weft's calls
 * never touch errno; fn passes an error back through its result). */
static void *set_errno(void *arg)
{
  errno = (int)(intptr_t)arg;
  return (void *)(intptr_t)errno;
}

static void *errno_in_coroutine(void *arg)
{
  (void)arg;
  void *ret = NULL;
  errno = 0;
  CO_EQ(weft_blocking(set_errno, (void *)(intptr_t)EDOM, &ret), 0);
  CO_EQ(errno, 0);
  CO_EQ((intptr_t)ret, EDOM);
  return NULL;
}

Test(blocking, the_callers_errno_is_left_as_it_was, .timeout = 30)
{
  void *ret = NULL;
  errno = 0;
  cr_assert_eq(weft_blocking(set_errno, (void *)(intptr_t)EDOM, &ret), 0);
  cr_assert_eq(errno, 0, "the job's errno reached the caller: %d", errno);
  cr_assert_eq((intptr_t)ret, EDOM);
  errno = ERANGE;
  cr_assert_eq(weft_blocking_dl(set_errno, (void *)(intptr_t)EDOM, NULL, weft_now() + WEFT_SEC),
               0);
  cr_assert_eq(errno, ERANGE, "the job's errno reached the caller: %d", errno);
  rt_run(1, errno_in_coroutine, NULL);
  rt_assert_clean();
}

static void *null_fn(void *arg)
{
  (void)arg;
  CO_EQ(weft_blocking(NULL, NULL, NULL), -EINVAL);
  CO_EQ(weft_blocking_dl(NULL, NULL, NULL, WEFT_NO_DEADLINE), -EINVAL);
  return NULL;
}

Test(blocking, null_fn_is_einval, .timeout = 30)
{
  cr_assert_eq(weft_blocking(NULL, NULL, NULL), -EINVAL);
  rt_run(1, null_fn, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *no_thread(void *arg)
{
  (void)arg;
  weft_stats s;
  CO_EQ(weft_stats_get(NULL, -1, &s), 0);
  CO_EQ(s.pool_threads, 0); /* the premise: no pool thread to fall back on */
  weft__fault_arm(WEFT__FAULT_THREAD, 1);
  void *ret = (void *)(intptr_t)-5;
  CO_EQ(weft_blocking(marker_job, (void *)1, &ret), -EAGAIN);
  CO_EQ((intptr_t)ret, -5);
  CO_EQ(atomic_load(&marker_runs), 0);
  /* The next start works. */
  CO_EQ(weft_blocking(marker_job, (void *)1, &ret), 0);
  CO_EQ((intptr_t)ret, 1);
  return NULL;
}

Test(blocking, thread_creation_failure_is_eagain, .timeout = 30)
{
  rt_run(1, no_thread, NULL);
  weft__fault_arm(WEFT__FAULT_THREAD, 0);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&marker_runs), 1);
}

/* Every pool thread busy, and no other can be started: the job is not
 * refused but waits for one of them. */
static atomic_bool hold_job_running, hold_job_release;

static void *hold_job(void *arg)
{
  atomic_store(&hold_job_running, true);
  while (!atomic_load(&hold_job_release))
    usleep(1000);
  return arg;
}

static void *holder(void *arg)
{
  (void)arg;
  void *ret = NULL;
  CO_EQ(weft_blocking(hold_job, (void *)2, &ret), 0);
  CO_EQ((intptr_t)ret, 2);
  return NULL;
}

static void *release_later(void *arg)
{
  (void)arg;
  weft_sleep(20 * WEFT_MSEC);
  atomic_store(&hold_job_release, true);
  return NULL;
}

static void *busy_pool(void *arg)
{
  (void)arg;
  weft_stats s;
  CO_EQ(weft_stats_get(NULL, -1, &s), 0);
  CO_EQ(s.pool_threads, 0);
  weft_task *h;
  CO_EQ(weft_spawn(&h, NULL, holder, NULL), 0);
  while (!atomic_load(&hold_job_running))
    weft_sleep(WEFT_MSEC);
  CO_EQ(weft_stats_get(NULL, -1, &s), 0);
  CO_EQ(s.pool_threads, 1); /* the premise: one thread, busy */
  weft__fault_arm(WEFT__FAULT_THREAD, 1);
  weft_task *r;
  CO_EQ(weft_spawn(&r, NULL, release_later, NULL), 0); /* while we wait */
  void *ret = NULL;
  CO_EQ(weft_blocking(marker_job, (void *)3, &ret), 0);
  CO_EQ((intptr_t)ret, 3);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_THREAD]), 0); /* a start was refused */
  CO_EQ(weft_join(h, NULL), 0);
  CO_EQ(weft_join(r, NULL), 0);
  return NULL;
}

Test(blocking, busy_pool_that_cannot_grow_queues_the_job, .timeout = 30)
{
  rt_run(1, busy_pool, NULL);
  weft__fault_arm(WEFT__FAULT_THREAD, 0);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&marker_runs), 1);
}

/* ---- no memory for the deadline's timer ---------------------------------------------- */

/* A wait with a deadline arms a timer on the shard; when its heap cannot
 * grow for it (-ENOMEM) a queued job is dropped - "the job did not run",
 * as the header says of -ENOMEM - and a running one is waited for: it ran,
 * so the call must not say -ENOMEM but what it says of any job that ran.
 * Each part runs in a runtime of its own, whose timer heap is still empty:
 * the wait's timer is the first, and its heap's allocation the one that
 * fails. */
static atomic_bool nomem_started, nomem_release;

static void *nomem_blocker(void *arg)
{
  (void)arg;
  atomic_store(&nomem_started, true);
  while (!atomic_load(&nomem_release))
    nap_us(200);
  return NULL;
}

static void *nomem_occupy(void *arg)
{
  (void)arg;
  CO_EQ(weft_blocking(nomem_blocker, NULL, NULL), 0);
  return NULL;
}

static void *nomem_queued(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(weft_spawn(&t, NULL, nomem_occupy, NULL), 0);
  while (!atomic_load(&nomem_started)) { /* no timer of ours before the one that fails */
    weft_yield();
    nap_us(100);
  }
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  void *ret = (void *)(intptr_t)-5;
  CO_EQ(weft_blocking_dl(marker_job, (void *)1, &ret, weft_now() + 60 * WEFT_SEC), -ENOMEM);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 0); /* the heap's failed */
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ((intptr_t)ret, -5);
  CO_EQ(atomic_load(&marker_runs), 0); /* dropped: it never ran */
  atomic_store(&nomem_release, true);
  CO_EQ(weft_join(t, NULL), 0);
  return NULL;
}

/* The running case needs the pool thread to take the job between the
 * caller's submit and its arming of the timer, which the caller does
 * without a pause. So the pool thread is made a real-time thread on the
 * caller's CPU: the submit's wake-up hands it that CPU at once, and the
 * caller goes on only when the job sleeps - after it has made the next
 * allocation fail, which is the timer heap's. */
static void *make_realtime(void *arg)
{
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(*(int *)arg, &s);
  struct sched_param sp = {.sched_priority = 1};
  bool ok = sched_setaffinity(0, sizeof(s), &s) == 0 &&
            sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
  return (void *)(intptr_t)ok;
}

static atomic_bool nomem_failed_first;

static void *fail_next_alloc(void *arg)
{
  (void)arg;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  for (int i = 0; i < 100000 && atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]); i++)
    nap_us(100);
  atomic_store(&nomem_failed_first, !atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]));
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  return (void *)(intptr_t)7;
}

static void *nomem_running(void *arg)
{
  int *realtime = arg;
  int cpu = sched_getcpu();
  void *ok = NULL;
  CO_EQ(weft_blocking(make_realtime, &cpu, &ok), 0); /* the pool's one thread */
  *realtime = ok != NULL;
  if (!ok)
    return NULL;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  CO_EQ(sched_setaffinity(0, sizeof(s), &s), 0); /* this shard's thread */
  void *ret = (void *)(intptr_t)-5;
  CO_EQ(weft_blocking_dl(fail_next_alloc, NULL, &ret, weft_now() + 60 * WEFT_SEC), 0);
  CO_CHECK(atomic_load(&nomem_failed_first)); /* the premise: the timer had no memory */
  CO_EQ((intptr_t)ret, 7);
  return NULL;
}

Test(blocking, no_memory_for_the_deadline_timer_drops_a_queued_job_waits_for_a_running_one,
     .timeout = 60)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.blocking_threads = 1;
  int r = weft_run(&c, nomem_queued, NULL, NULL);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
  int realtime = 0;
  cr_assert_eq(weft_run(&c, nomem_running, &realtime, NULL), 0);
  rt_assert_clean();
  rt_assert_no_leaks();
  if (!realtime)
    cr_skip_test("SCHED_FIFO is not allowed here: the running case was not tried");
}

/* ---- a job that stops its own runtime ------------------------------------------------- */

/* A job runs on a pool thread of the runtime, which no stop can finish:
 * the stop waits for the task that waits for the job (uncancellably, since
 * fn may use its memory), and frees the pool only once every pool thread
 * has left - this one included. So the stop refuses it, as it refuses a
 * call from one of the runtime's shards. */
static void *stop_job(void *arg)
{
  return (void *)(intptr_t)weft_runtime_stop(arg);
}

static void *stop_from_a_job(void *arg)
{
  void *ret = (void *)1;
  CO_EQ(weft_blocking(stop_job, arg, &ret), 0);
  return ret;
}

Test(blocking, a_job_cannot_stop_its_own_runtime, .timeout = 30)
{
  weft_runtime *rt = start_pool(1, 2);
  void *v = NULL;
  cr_assert_eq(weft_join(submit(rt, stop_from_a_job, rt), &v), 0);
  cr_assert_eq((intptr_t)v, -EINVAL);
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}
/* ---- pool threads' names ---------------------------------------------------------------- */

/* "<thread_name>-<i>" names shard i. A new thread takes its creator's name,
 * and pool threads are started by shards: each was named after the shard
 * that started it - two threads "weft-0", the pool's time counted to the
 * shard in top -H or perf. They are "<thread_name>-pool". */
static void *name_job(void *arg)
{
  char *name = arg;
  if (pthread_getname_np(pthread_self(), name, 16) != 0)
    strcpy(name, "?");
  return NULL;
}

static void *name_of_a_pool_thread(void *arg)
{
  CO_EQ(weft_blocking(name_job, arg, NULL), 0);
  return NULL;
}

Test(blocking, pool_threads_are_named_as_the_pools, .timeout = 30)
{
  weft_config c;
  rt_cfg(&c, 1);
  c.thread_name = "tst";
  char name[16] = "";
  void *ret = NULL;
  int r = weft_run(&c, name_of_a_pool_thread, name, &ret);
  RT_SKIP_IF_NO_URING(r);
  cr_assert_eq(r, 0);
  rt_assert_clean();
  cr_assert_str_eq(name, "tst-pool");
}
