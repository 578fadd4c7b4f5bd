/* SPDX-License-Identifier: MIT */
/*
 * Suite "runtime_life": the runtime as a whole - many tasks, plain-thread
 * submitters, shutdown with blocked tasks, ring flag fallback and start-up
 * failures, stats and dump, yield and the plain-thread side of the task
 * API. Two runtimes at once and refused wake-ups are in test_runtime_two.c.
 * (Suite "runtime" has weft_run, configuration, placement, spawn errors and
 * join / detach / cancel.) Checks inside coroutines go through CO_CHECK /
 * CO_EQ (see rt_helpers.h).
 */
#include "rt_internal.h"
#include "runtime_test.h"

#include "core.h"
#include "fault.h"
#include "stack.h"

#include <dirent.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

static atomic_int ran;

static void *count_run(void *arg)
{
  (void)arg;
  atomic_fetch_add(&ran, 1);
  return NULL;
}

static void *wait_event_ret(void *arg)
{
  CO_EQ(weft_event_wait(arg), 0);
  return (void *)(intptr_t)44;
}


/* ---- volume ------------------------------------------------------------------------ */

static void *many_main(void *arg)
{
  (void)arg;
  static weft_task *t[1000];
  int64_t sum = 0;
  for (int batch = 0; batch < 100; batch++) {
    for (int i = 0; i < 1000; i++) {
      int r = rt_spawn(&t[i], WEFT_PLACE_ROUND_ROBIN, -1, times3,
                       (void *)(intptr_t)(batch * 1000 + i));
      CO_EQ(r, 0);
      if (r < 0)
        return NULL;
    }
    for (int i = 0; i < 1000; i++)
      sum += rt_join_int(t[i]);
  }
  weft_stats s;
  CO_EQ(weft_stats_get(NULL, -1, &s), 0);
  CO_EQ(s.live, 1);
  CO_EQ(s.finished, 100000);
  return (void *)(intptr_t)sum;
}

Test(runtime, hundred_thousand_tasks_checksum, .timeout = 45)
{
  int64_t n = 100000;
  int64_t expect = 3 * (n * (n - 1) / 2) + n;
  intptr_t sum = (intptr_t)rt_run(2, many_main, NULL);
  rt_assert_clean();
  cr_assert_eq(sum, expect, "checksum %lld, expected %lld", (long long)sum, (long long)expect);
}

struct submitter {
  weft_runtime *rt;
  int id;
  int64_t sum;
};

static void *yield_times3(void *arg)
{
  CO_EQ(weft_yield(), 0);
  return times3(arg);
}

static void *submitter_thread(void *arg)
{
  struct submitter *s = arg;
  static __thread weft_task *t[2000];
  for (int i = 0; i < 2000; i++)
    CO_EQ(weft_runtime_submit(s->rt, NULL, yield_times3, (void *)(intptr_t)(s->id * 2000 + i),
                              &t[i]),
          0);
  for (int i = 0; i < 2000; i++) {
    void *v = NULL;
    CO_EQ(weft_join(t[i], &v), 0);
    s->sum += (intptr_t)v;
  }
  return NULL;
}

Test(runtime, submit_from_four_plain_threads, .timeout = 45)
{
  weft_runtime *rt = rt_start(2);
  struct submitter s[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    s[i] = (struct submitter){.rt = rt, .id = i};
    cr_assert_eq(pthread_create(&th[i], NULL, submitter_thread, &s[i]), 0);
  }
  int64_t sum = 0, n = 8000;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    sum += s[i].sum;
  }
  rt_assert_clean();
  cr_assert_eq(sum, 3 * (n * (n - 1) / 2) + n);
  weft_stats st;
  cr_assert_eq(weft_stats_get(rt, -1, &st), 0);
  cr_assert_eq(st.spawned, 8000);
  cr_assert_eq(st.finished, 8000);
  cr_assert_eq(st.live, 0);
  cr_assert_eq(st.shards, 2);
  rt_stop_idle(rt);
}

Test(runtime, stats_count_external_submits_in_the_sum_only, .timeout = 20)
{
  /* weft/stats.h: "spawned: tasks spawned by coroutines running on this
   * shard; the sum (shard -1) adds the tasks submitted from plain threads and
   * other runtimes". */
  weft_runtime *rt = rt_start(2);
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 1;
  for (int i = 0; i < 10; i++) {
    weft_task *t;
    cr_assert_eq(weft_runtime_submit(rt, &o, ret_shard, NULL, &t), 0);
    cr_assert_eq(weft_join(t, NULL), 0);
  }
  weft_stats all, s0, s1;
  cr_assert_eq(weft_stats_get(rt, -1, &all), 0);
  cr_assert_eq(weft_stats_get(rt, 0, &s0), 0);
  cr_assert_eq(weft_stats_get(rt, 1, &s1), 0);
  cr_assert_eq(all.spawned, 10);
  cr_assert_eq(all.finished, 10);
  cr_assert_eq(s1.finished, 10);
  cr_assert_eq(s0.finished, 0);
  cr_assert_eq(s0.spawned, 0);
  cr_assert_eq(s1.spawned, 0, "shard 1 counts %llu plain-thread submits as its own spawns",
               (unsigned long long)s1.spawned);
  cr_assert_eq(all.live, 0);
  rt_stop_idle(rt);
}

/* ---- stopping ---------------------------------------------------------------------- */

static void *sleep_hour(void *arg)
{
  (void)arg;
  return (void *)(intptr_t)weft_sleep(3600 * WEFT_SEC);
}

/* Started / ended-with--ECANCELED counts of the shutdown test's blockers. */
static atomic_int blockers_started, blockers_cancelled;

static void *wait_event_quiet(void *arg)
{
  atomic_fetch_add(&blockers_started, 1);
  int r = weft_event_wait(arg);
  atomic_fetch_add(&blockers_cancelled, r == -ECANCELED);
  return (void *)(intptr_t)r;
}

static void *sleep_hour_counted(void *arg)
{
  atomic_fetch_add(&blockers_started, 1);
  int r = weft_sleep(3600 * WEFT_SEC);
  atomic_fetch_add(&blockers_cancelled, r == -ECANCELED);
  return (void *)(intptr_t)r;
}

static void *shutdown_main(void *arg)
{
  weft_event *never = arg;
  for (int i = 0; i < 1000; i++) {
    CO_EQ(rt_spawn(NULL, WEFT_PLACE_ROUND_ROBIN, -1, wait_event_quiet, never), 0);
    CO_EQ(rt_spawn(NULL, WEFT_PLACE_ROUND_ROBIN, -1, sleep_hour_counted, NULL), 0);
  }
  for (int i = 0; i < 100; i++) { /* handles never joined nor detached */
    weft_task *t;
    CO_EQ(rt_spawn(&t, WEFT_PLACE_ROUND_ROBIN, -1, i % 2 ? sleep_hour_counted : ret_shard, NULL),
          0);
  }
  /* Every blocker is blocked: 1000 event waiters and 1050 sleepers. */
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 2050));
  return (void *)(intptr_t)66;
}

Test(runtime, shutdown_cancels_and_frees_blocked_tasks, .timeout = 45)
{
  weft_event *never;
  cr_assert_eq(weft_event_create(&never, 0), 0);
  /* weft_run must come back (the test's timeout guards that), with main's
   * value; every blocker, all blocked when main returned, was released with
   * -ECANCELED; ASan's leak check covers "freed". */
  int64_t t0 = weft_now();
  void *ret = rt_run(2, shutdown_main, never);
  cr_log_info("weft_run returned after %.1f ms; %d blockers had started",
              (double)(weft_now() - t0) / 1e6, atomic_load(&blockers_started));
  cr_assert_eq((intptr_t)ret, 66);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&blockers_started), 2050);
  cr_assert_eq(atomic_load(&blockers_cancelled), 2050);
  weft_event_destroy(never);
  rt_assert_no_leaks();
}

static int during_stop_spawn = 1, during_stop_submit = 1, during_stop_wait = 1;

static void *stop_observer(void *arg)
{
  weft_runtime *rt = weft_runtime_current();
  during_stop_wait = weft_event_wait(arg);
  during_stop_spawn = rt_spawn(NULL, WEFT_PLACE_PINNED, -1, ret_shard, NULL);
  during_stop_submit = weft_runtime_submit(rt, NULL, ret_shard, NULL, NULL);
  return NULL;
}

static void *stop_self(void *arg)
{
  return (void *)(intptr_t)weft_runtime_stop(arg);
}

Test(runtime, stop_refuses_new_work_and_own_shard, .timeout = 20)
{
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  weft_runtime *rt = rt_start(2);
  weft_task *t;
  cr_assert_eq(weft_runtime_submit(rt, NULL, stop_self, rt, &t), 0);
  void *v = NULL;
  cr_assert_eq(weft_join(t, &v), 0);
  cr_assert_eq((intptr_t)v, -EINVAL, "weft_runtime_stop from its own shard");
  cr_assert_eq(weft_runtime_submit(rt, NULL, stop_observer, ev, NULL), 0);
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 1));
  cr_assert_eq(weft_runtime_stop(rt), 0);
  cr_assert_eq(during_stop_wait, -ECANCELED);
  cr_assert_eq(during_stop_spawn, -ECANCELED);
  cr_assert_eq(during_stop_submit, -ECANCELED);
  weft_event_destroy(ev);
}

/* ---- ring set-up ---------------------------------------------------------------------- */

static void *fallback_main(void *arg)
{
  weft_event *ev = arg;
  weft_task *w, *s;
  CO_EQ(rt_spawn(&w, WEFT_PLACE_PINNED, 1, wait_event_ret, ev), 0);
  CO_EQ(rt_spawn(&s, WEFT_PLACE_PINNED, 1, sleep_hour, NULL), 0);
  CO_CHECK(RT_POLL(rt_dump_count(NULL, " waiting") == 2)); /* both blocked */
  CO_EQ(weft_event_set(ev), 0);
  CO_EQ(rt_join_int(w), 44);
  CO_EQ(weft_cancel(s), 0);
  void *v;
  CO_EQ(weft_join(s, &v), -ECANCELED);
  CO_EQ((intptr_t)v, -ECANCELED);
  weft_stats st;
  CO_EQ(weft_stats_get(NULL, -1, &st), 0);
  return (void *)(uintptr_t)st.ring_flags;
}

static unsigned run_with_refused(unsigned refused)
{
  atomic_store(&weft__ring_refused, refused);
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  unsigned flags = (unsigned)(uintptr_t)rt_run(2, fallback_main, ev);
  atomic_store(&weft__ring_refused, 0);
  weft_event_destroy(ev);
  rt_assert_clean();
  return flags;
}

Test(runtime, ring_flag_fallback, .timeout = 20)
{
  unsigned base = run_with_refused(0);
  cr_assert_eq(base & ~WEFT_RING_ALL, 0);
  unsigned f = run_with_refused(WEFT_RING_DEFER_TASKRUN);
  cr_assert_eq(f, base & ~WEFT_RING_DEFER_TASKRUN, "flags %#x from base %#x", f, base);
  f = run_with_refused(WEFT_RING_SINGLE_ISSUER);
  cr_assert_eq(f, base & ~(WEFT_RING_SINGLE_ISSUER | WEFT_RING_DEFER_TASKRUN),
               "flags %#x from base %#x", f, base);
  f = run_with_refused(WEFT_RING_ALL);
  cr_assert_eq(f, 0, "flags %#x", f);
}

/* io_uring file descriptors of this process. */
static int count_uring_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char path[300], link[128];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, link, sizeof(link) - 1);
    if (len > 0) {
      link[len] = '\0';
      n += strstr(link, "io_uring") != NULL;
    }
  }
  closedir(d);
  return n;
}

static int count_threads(void)
{
  DIR *d = opendir("/proc/self/task");
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

Test(runtime, start_failures_leave_nothing_behind, .timeout = 20)
{
  weft_runtime *probe = rt_start(1); /* skips the test without io_uring */
  cr_assert_eq(weft_runtime_stop(probe), 0);
  int fds = count_uring_fds(), threads = count_threads();
  weft_config c;
  rt_cfg(&c, 2);

  weft__fault_arm(WEFT__FAULT_RING, 1);
  weft_runtime *rt = NULL;
  int r = weft_runtime_start(&rt, &c);
  weft__fault_arm(WEFT__FAULT_RING, 0);
  cr_assert_eq(r, -ENOMEM, "ring failure: %d", r);
  cr_assert_null(rt);

  weft__fault_arm(WEFT__FAULT_RING, 2);
  r = weft_run(&c, count_run, NULL, NULL);
  weft__fault_arm(WEFT__FAULT_RING, 0);
  cr_assert_eq(r, -ENOMEM);
  cr_assert_eq(atomic_load(&ran), 0);

  weft__fault_arm(WEFT__FAULT_THREAD, 2);
  r = weft_runtime_start(&rt, &c);
  long left = atomic_load(&weft__fault_countdown[WEFT__FAULT_THREAD]);
  weft__fault_arm(WEFT__FAULT_THREAD, 0);
  cr_assert_eq(r, -EAGAIN, "thread failure: %d", r);
  cr_assert_eq(left, 0, "second thread creation was not reached");
  cr_assert_null(rt);

  cr_assert_eq(count_uring_fds(), fds, "an io_uring fd leaked");
  cr_assert_eq(count_threads(), threads, "a shard thread was left running");
  rt_assert_no_leaks();
  /* And a runtime still starts normally afterwards. */
  rt = rt_start(2);
  rt_stop_idle(rt);
}

/* A shard thread refused for real - the default thread stack is made larger
 * than the address space, so glibc's mmap for it fails and sets errno -
 * fails the start with -EAGAIN, and errno is still the caller's
 * (weft/common.h), for weft_run as for weft_runtime_start. */
Test(runtime, real_thread_failure_leaves_errno, .timeout = 20)
{
  weft_runtime *probe = rt_start(1); /* skips the test without io_uring */
  cr_assert_eq(weft_runtime_stop(probe), 0);
  pthread_attr_t old, huge;
  cr_assert_eq(pthread_getattr_default_np(&old), 0);
  cr_assert_eq(pthread_attr_init(&huge), 0);
  cr_assert_eq(pthread_attr_setstacksize(&huge, (size_t)1 << 47), 0);
  cr_assert_eq(pthread_setattr_default_np(&huge), 0);
  weft_config c;
  rt_cfg(&c, 2);
  weft_runtime *rt = NULL;
  errno = 4242;
  int r = weft_runtime_start(&rt, &c);
  int e = errno;
  errno = 4242;
  int r2 = weft_run(&c, count_run, NULL, NULL);
  int e2 = errno;
  cr_assert_eq(pthread_setattr_default_np(&old), 0);
  pthread_attr_destroy(&huge);
  pthread_attr_destroy(&old);
  cr_assert_eq(r, -EAGAIN, "start: %d", r);
  cr_assert_null(rt);
  cr_assert_eq(e, 4242, "weft_runtime_start changed errno to %d", e);
  cr_assert_eq(r2, -EAGAIN, "run: %d", r2);
  cr_assert_eq(e2, 4242, "weft_run changed errno to %d", e2);
  cr_assert_eq(atomic_load(&ran), 0);
  rt = rt_start(2);
  rt_stop_idle(rt);
}

Test(runtime, start_walks_every_allocation_failure, .timeout = 20)
{
  weft_runtime *probe = rt_start(1);
  cr_assert_eq(weft_runtime_stop(probe), 0);
  int fds = count_uring_fds(), threads = count_threads();
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &set))
    cpu++;
  weft_config c;
  rt_cfg(&c, 2);
  c.cpus = &cpu;
  c.ncpus = 1;
  int n, r = -ENOMEM;
  for (n = 1; n < 64; n++) {
    weft_runtime *rt = NULL;
    weft__fault_arm(WEFT__FAULT_MALLOC, n);
    r = weft_runtime_start(&rt, &c);
    long left = atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]);
    weft__fault_arm(WEFT__FAULT_MALLOC, 0);
    if (r == 0) {
      cr_assert_gt(left, 0, "start succeeded although allocation %d failed", n);
      rt_stop_idle(rt);
      break;
    }
    cr_assert_eq(r, -ENOMEM, "allocation %d failed: start returned %d", n, r);
    cr_assert_null(rt);
  }
  cr_assert_eq(r, 0);
  cr_assert_gt(n, 1, "start made no allocation through the fault hook");
  cr_assert_eq(count_uring_fds(), fds);
  cr_assert_eq(count_threads(), threads);
  rt_assert_no_leaks();
}

/* Out of file descriptors (a shard needs two: its ring, then its eventfd):
 * with none left the ring fails, with one left the eventfd does after the
 * ring was made. Either way the start fails with -EMFILE, as runtime.h
 * says, and leaves no descriptor or thread behind. */
Test(runtime, start_without_file_descriptors_is_emfile, .timeout = 20)
{
  weft_runtime *probe = rt_start(1);
  cr_assert_eq(weft_runtime_stop(probe), 0);
  int fds = count_uring_fds(), threads = count_threads();
  struct rlimit old;
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
  weft_config c;
  rt_cfg(&c, 1);
  for (int left = 0; left < 2; left++) {
    struct rlimit low = {.rlim_cur = 256, .rlim_max = old.rlim_max};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    int filler[256], n = 0;
    for (int fd; n < 256 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
      filler[n++] = fd;
    cr_assert_geq(n, left, "no descriptor could be opened");
    for (int i = 0; i < left; i++)
      close(filler[--n]);
    weft_runtime *rt = NULL;
    int r = weft_runtime_start(&rt, &c);
    while (n > 0)
      close(filler[--n]);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    cr_assert_eq(r, -EMFILE, "%d descriptor(s) left: %s", left, weft_strerror(r));
    cr_assert_null(rt);
  }
  cr_assert_eq(count_uring_fds(), fds, "an io_uring fd leaked");
  cr_assert_eq(count_threads(), threads, "a shard thread was left running");
  rt_assert_no_leaks();
}

/* ---- stats and dump ------------------------------------------------------------------- */

static void *named_waiter(void *arg)
{
  CO_EQ(weft_event_wait(arg), 0);
  return NULL;
}

Test(runtime, stats_errors_and_dump, .timeout = 20)
{
  weft_stats s;
  cr_assert_eq(weft_stats_get(NULL, -1, &s), -EPERM);
  cr_assert_eq(weft_dump(NULL, stdout), -EPERM);
  weft_runtime *rt = rt_start(2);
  cr_assert_eq(weft_stats_get(rt, 2, &s), -EINVAL);
  cr_assert_eq(weft_stats_get(rt, -2, &s), -EINVAL);
  cr_assert_eq(weft_stats_get(rt, 0, NULL), -EINVAL);
  cr_assert_eq(weft_dump(rt, NULL), -EINVAL);
  cr_assert_eq(weft_stats_get(rt, 1, &s), 0);
  cr_assert_eq(s.shard, 1);
  cr_assert_eq(s.shards, 2);
  cr_assert_eq(s.ring_entries, 256);

  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  weft_task *t[3];
  const char *names[3] = {"dump-alpha", "dump-beta", "dump-gamma"};
  for (int i = 0; i < 3; i++) {
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.name = names[i];
    if (i == 2)
      o.placement = WEFT_PLACE_PINNED; /* listed as "fixed" */
    cr_assert_eq(weft_runtime_submit(rt, &o, named_waiter, ev, &t[i]), 0);
    cr_assert_str_eq(weft_task_name(t[i]), names[i]);
    cr_assert_gt(weft_task_id(t[i]), 0);
  }
  cr_assert_neq(weft_task_id(t[0]), weft_task_id(t[1]));
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 3), "the 3 tasks never showed as waiting");
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  int n = weft_dump(rt, f);
  fclose(f);
  cr_assert_eq(n, 3, "dump listed %d tasks:\n%s", n, buf);
  for (int i = 0; i < 3; i++)
    cr_assert_not_null(strstr(buf, names[i]), "%s missing from:\n%s", names[i], buf);
  cr_assert_eq(rt_dump_count(rt, " stealable waiting"), 2, "%s", buf);
  cr_assert_eq(rt_dump_count(rt, " fixed waiting"), 1, "%s", buf);
  free(buf);
  cr_assert_eq(weft_event_set(ev), 0);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(weft_join(t[i], NULL), 0);
  cr_assert_eq(rt_dump_count(rt, "task "), 0);
  rt_assert_clean();
  rt_stop_idle(rt);
  weft_event_destroy(ev);
}

/* A dump to a stream whose writes fail (the full device, unbuffered: every
 * line is refused, and stdio sets errno) still lists the tasks, and errno
 * is still the caller's (weft/common.h). */
Test(runtime, dump_to_a_failing_stream_leaves_errno, .timeout = 20)
{
  FILE *f = fopen("/dev/full", "w");
  if (!f)
    cr_skip_test("no /dev/full here");
  cr_assert_eq(setvbuf(f, NULL, _IONBF, 0), 0);
  weft_runtime *rt = rt_start(1);
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  weft_task *t = rt_submit_on(rt, 0, named_waiter, ev);
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 1), "the task never showed as waiting");
  errno = 4242;
  int n = weft_dump(rt, f);
  int e = errno;
  fclose(f);
  cr_assert_eq(n, 1);
  cr_assert_eq(e, 4242, "weft_dump changed errno to %d", e);
  cr_assert_eq(weft_event_set(ev), 0);
  cr_assert_eq(weft_join(t, NULL), 0);
  rt_assert_clean();
  rt_stop_idle(rt);
  weft_event_destroy(ev);
}

/* ---- yield, sleep, the plain-thread side ------------------------------------------------ */

struct order {
  char log[16];
  int n;
};

struct yielder_arg {
  struct order *o;
  char me;
};

static void *yielder(void *arg)
{
  struct yielder_arg *a = arg;
  for (int i = 0; i < 3; i++) {
    a->o->log[a->o->n++] = a->me;
    CO_EQ(weft_yield(), 0);
  }
  return NULL;
}

static void *yield_main(void *arg)
{
  struct yielder_arg a = {arg, 'A'}, b = {arg, 'B'};
  weft_task *ta, *tb;
  /* Both queued on main's shard, A first; main then blocks in join. */
  CO_EQ(rt_spawn(&ta, WEFT_PLACE_PINNED, -1, yielder, &a), 0);
  CO_EQ(rt_spawn(&tb, WEFT_PLACE_PINNED, -1, yielder, &b), 0);
  rt_join_int(ta);
  rt_join_int(tb);
  CO_EQ(weft_sleep(0), 0);
  CO_EQ(weft_sleep(-5), 0);
  int64_t dl = weft_now() + WEFT_MSEC;
  CO_EQ(weft_sleep_until(dl), 0);
  CO_CHECK(weft_now() >= dl);
  return NULL;
}

Test(runtime, yield_interleaves_tasks_of_a_shard, .timeout = 20)
{
  struct order o = {.n = 0};
  rt_run(2, yield_main, &o);
  rt_assert_clean();
  o.log[o.n] = '\0';
  cr_assert_str_eq(o.log, "ABABAB");
}

Test(runtime, plain_thread_side, .timeout = 20)
{
  cr_assert_eq(weft_shard_id(), -EPERM);
  cr_assert_eq(weft_shard_count(), -EPERM);
  cr_assert_eq(weft_runtime_shards(NULL), -EPERM);
  cr_assert_null(weft_runtime_current());
  cr_assert_null(weft_task_self());
  cr_assert_eq(weft_yield(), 0);
  cr_assert_eq(weft_sleep(0), 0);
  int64_t t0 = weft_now();
  cr_assert_eq(weft_sleep(2 * WEFT_MSEC), 0);
  cr_assert_geq(weft_now() - t0, 2 * WEFT_MSEC);
  cr_assert_eq(weft_sleep_until(weft_now() - 1), 0);
}

/* A signal handler on a shard's own thread, outside any coroutine (the
 * shard idle in its loop), is not a plain thread: task.h says weft_shard_id
 * and weft_shard_count give that shard's figures there. */
static pthread_t shard1_thread;
static atomic_int handler_shard_id = -100, handler_shard_count = -100;

static void *record_thread(void *arg)
{
  (void)arg;
  shard1_thread = pthread_self();
  return NULL;
}

static void on_usr2(int sig)
{
  (void)sig;
  atomic_store(&handler_shard_count, weft_shard_count());
  atomic_store(&handler_shard_id, weft_shard_id());
}

static void *signal_idle_shard_main(void *arg)
{
  (void)arg;
  weft_task *t;
  CO_EQ(rt_spawn(&t, WEFT_PLACE_PINNED, 1, record_thread, NULL), 0);
  rt_join_int(t);
  CO_EQ(pthread_kill(shard1_thread, SIGUSR2), 0);
  for (int i = 0; i < 10000 && atomic_load(&handler_shard_id) == -100; i++)
    weft_sleep(WEFT_MSEC);
  return NULL;
}

Test(runtime, shard_thread_outside_a_coroutine_is_its_shard, .timeout = 30)
{
  struct sigaction sa = {.sa_handler = on_usr2}, old;
  sigemptyset(&sa.sa_mask);
  cr_assert_eq(sigaction(SIGUSR2, &sa, &old), 0);
  rt_run(2, signal_idle_shard_main, NULL);
  sigaction(SIGUSR2, &old, NULL);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&handler_shard_id), 1);
  cr_assert_eq(atomic_load(&handler_shard_count), 2);
}

/* ---- calls from outside that outlast the runtime's last task ------------------------------- */

/* A plain thread sets the event the runtime's last task waits for, or
 * cancels that task. The task can run and end, and the runtime stop,
 * before that thread is done with the shard it woke (it reads whether the
 * shard sleeps, may send it a wake-up, and a cancel goes on to the task's
 * op): the stop must wait for it, not free the shards under it. The test
 * holds the thread there (weft__test_outside_pause: between queuing the
 * task and waking its shard; weft__test_cancel_pause: at the end of a
 * cancel) until the task has been joined, and 50 ms more; then
 * weft_runtime_stop must return after the thread is through. */
static atomic_bool pause_armed, joined, pause_over;

static void hold_the_caller(void)
{
  if (!atomic_exchange(&pause_armed, false))
    return;
  for (int i = 0; i < 10000 && !atomic_load(&joined); i++)
    usleep(1000);
  usleep(50 * 1000);
  atomic_store(&pause_over, true);
}

static void *wait_for_event(void *arg)
{
  return (void *)(intptr_t)weft_event_wait(arg);
}

static void *set_event(void *arg)
{
  weft_event_set(arg);
  return NULL;
}

static void *cancel_task(void *arg)
{
  weft_cancel(arg);
  return NULL;
}

/* Keeps its shard awake, so that the shard finds the woken task in its
 * inbox without being woken; until the stop cancels it. */
static void *keep_awake(void *arg)
{
  (void)arg;
  while (weft_yield() == 0)
    ;
  return NULL;
}

static void stop_under_an_outside_call(bool cancel)
{
  weft_runtime *rt = rt_start(2);
  weft_event *ev;
  cr_assert_eq(weft_event_create(&ev, 0), 0);
  weft_task *t, *awake;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  o.shard = 0;
  cr_assert_eq(weft_runtime_submit(rt, &o, wait_for_event, ev, &t), 0);
  cr_assert_eq(weft_runtime_submit(rt, &o, keep_awake, NULL, &awake), 0);
  cr_assert_eq(weft_detach(awake), 0);
  cr_assert(RT_POLL(rt_dump_count(rt, " waiting") == 1));
  atomic_store(&joined, false);
  atomic_store(&pause_over, false);
  atomic_store(&pause_armed, true);
  if (cancel)
    weft__test_cancel_pause = hold_the_caller;
  else
    weft__test_outside_pause = hold_the_caller;
  pthread_t caller;
  cr_assert_eq(pthread_create(&caller, NULL, cancel ? cancel_task : set_event,
                              cancel ? (void *)t : (void *)ev), 0);
  void *v = (void *)1;
  cr_assert_eq(weft_join(t, &v), cancel ? -ECANCELED : 0);
  cr_assert_eq((intptr_t)v, cancel ? -ECANCELED : 0);
  atomic_store(&joined, true);
  cr_assert_eq(weft_runtime_stop(rt), 0);
  cr_assert(atomic_load(&pause_over), "the runtime stopped under a caller still in its call");
  pthread_join(caller, NULL);
  weft__test_outside_pause = NULL;
  weft__test_cancel_pause = NULL;
  weft_event_destroy(ev);
  rt_assert_no_leaks();
}

Test(runtime_life, stop_waits_for_a_plain_thread_still_in_its_wake_up, .timeout = 30)
{
  stop_under_an_outside_call(false);
}

Test(runtime_life, stop_waits_for_a_plain_thread_still_in_its_cancel, .timeout = 30)
{
  stop_under_an_outside_call(true);
}
