/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook", part 2: epoll_wait/epoll_pwait of legacy code suspend the
 * coroutine (on ONE shard, so they hang without the hook, as in
 * test_hook.c), and name lookups run on the blocking pool, where glibc's
 * resolver may wait on DNS without holding up the shard.
 */
#include "io_helpers.h"
#include "legacy.h"

#include <netdb.h>
#include <sys/epoll.h>

/* ---- epoll ---------------------------------------------------------------------------- */

struct epoller {
  int ep;
  int pwait;
  int result;
  uint64_t data;
};

static void *epoller(void *arg)
{
  struct epoller *e = arg;
  e->result = legacy_epoll_wait(e->ep, -1, e->pwait, &e->data);
  return NULL;
}

static void *epoll_main(void *arg)
{
  (void)arg;
  int a[2];
  CO_EQ(io_pipe(a), 0);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  CO_CHECK(ep >= 0);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x5eed};
  CO_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, a[0], &ev), 0);

  /* Waiting without a timeout on the only shard, in both calls: woken by a
   * later write of this coroutine. */
  for (int pwait = 0; pwait <= 1; pwait++) {
    struct epoller e = {.ep = ep, .pwait = pwait};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 0, epoller, &e), 0);
    CO_CHECK(io_wait_suspended(1));
    CO_EQ(write(a[1], "e", 1), 1);
    CO_EQ(weft_join(t, NULL), 0);
    CO_EQ(e.result, 1);
    CO_EQ(e.data, 0x5eed);
    char c;
    CO_EQ(read(a[0], &c, 1), 1);
  }

  /* Nothing ready: 0 at the timeout, at once with 0. */
  uint64_t data = 0;
  int64_t t0 = weft_now();
  CO_EQ(legacy_epoll_wait(ep, 20, 0, &data), 0);
  CO_EQ(legacy_epoll_wait(ep, 20, 1, &data), 0);
  CO_CHECK(weft_now() >= t0 + 40 * WEFT_MSEC);
  CO_EQ(legacy_epoll_wait(ep, 0, 0, &data), 0);
  /* Ready at once. */
  CO_EQ(write(a[1], "f", 1), 1);
  CO_EQ(legacy_epoll_wait(ep, -1, 0, &data), 1);

  /* The kernel's argument errors. */
  CO_EQ(legacy_epoll_wait(100000, -1, 0, &data), -EBADF);
  CO_EQ(legacy_epoll_wait(a[0], -1, 0, &data), -EINVAL); /* not an epoll instance */

  /* A deadline scope that ends first: ETIMEDOUT, not epoll's 0; a
   * cancelled task: ECANCELED. */
  char c;
  CO_EQ(read(a[0], &c, 1), 1);
  int64_t saved = weft_deadline_push(weft_now() + 20 * WEFT_MSEC);
  CO_EQ(legacy_epoll_wait(ep, 3600 * 1000, 0, &data), -ETIMEDOUT);
  CO_EQ(legacy_epoll_wait(ep, -1, 1, &data), -ETIMEDOUT);
  weft_deadline_pop(saved);
  /* Already over, or cancelled: that first, even with an event ready (a
   * timeout of 0 cannot wait: epoll's own answer). */
  CO_EQ(write(a[1], "g", 1), 1);
  saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(legacy_epoll_wait(ep, -1, 0, &data), -ETIMEDOUT);
  CO_EQ(legacy_epoll_wait(ep, 3600 * 1000, 1, &data), -ETIMEDOUT);
  CO_EQ(legacy_epoll_wait(ep, 0, 0, &data), 1);
  weft_deadline_pop(saved);
  weft_cancel(weft_task_self());
  CO_EQ(legacy_epoll_wait(ep, -1, 0, &data), -ECANCELED);
  CO_EQ(legacy_epoll_wait(ep, -1, 1, &data), -ECANCELED);
  CO_EQ(legacy_epoll_wait(ep, 0, 0, &data), 1);
  CO_EQ(syscall(SYS_read, a[0], &c, 1), 1); /* read() is hooked: ECANCELED now */
  CO_EQ(legacy_epoll_wait(ep, -1, 0, &data), -ECANCELED);
  close(ep);
  io_close_pipe(a);
  return NULL;
}

Test(hook, epoll_waits_as_a_coroutine, .timeout = 30)
{
  rt_run(1, epoll_main, NULL);
  rt_assert_clean();
}

/* ---- name lookups ----------------------------------------------------------------------- */

static uint64_t pool_jobs(void)
{
  return io_stats().pool_jobs;
}

static void *lookup_main(void *arg)
{
  (void)arg;
  char buf[64], serv[32];
  int err = 0;
  /* A lookup goes to the pool: even a dotted address, whose flags do not
   * say it is one (nothing here needs DNS or files that may be missing). */
  uint64_t jobs = pool_jobs();
  CO_EQ(legacy_resolve("127.0.0.1", "80", 0, buf, sizeof(buf), &err), 0);
  CO_CHECK(strcmp(buf, "127.0.0.1") == 0);
  CO_EQ(pool_jobs(), jobs + 1);
  /* Numbers said to be numbers: nothing to wait for, answered here. */
  CO_EQ(legacy_resolve("127.0.0.2", "80", AI_NUMERICHOST | AI_NUMERICSERV, buf, sizeof(buf), &err),
        0);
  CO_CHECK(strcmp(buf, "127.0.0.2") == 0);
  CO_EQ(pool_jobs(), jobs + 1);
  /* getaddrinfo's own errors come back as they are. */
  CO_EQ(legacy_resolve(NULL, NULL, 0, buf, sizeof(buf), &err), EAI_NONAME);
  CO_EQ(legacy_resolve("not an address", "80", AI_NUMERICHOST | AI_NUMERICSERV, buf, sizeof(buf),
                       &err),
        EAI_NONAME);
  CO_EQ(pool_jobs(), jobs + 2);

  /* getnameinfo: a service name (from /etc/services, or the number where
   * it has none) is looked up on the pool; numbers only are not. */
  CO_EQ(legacy_name_of(80, NI_NUMERICHOST, buf, sizeof(buf), serv, sizeof(serv)), 0);
  CO_CHECK(strcmp(buf, "127.0.0.1") == 0);
  CO_CHECK(strcmp(serv, "http") == 0 || strcmp(serv, "80") == 0);
  CO_EQ(pool_jobs(), jobs + 3);
  CO_EQ(legacy_name_of(8080, NI_NUMERICHOST | NI_NUMERICSERV, buf, sizeof(buf), serv,
                       sizeof(serv)),
        0);
  CO_CHECK(strcmp(serv, "8080") == 0);
  CO_EQ(pool_jobs(), jobs + 3);

  /* A lookup that cannot start: EAI_SYSTEM, and why in errno. */
  int64_t saved = weft_deadline_push(weft_now() - 1);
  CO_EQ(legacy_resolve("127.0.0.1", "80", 0, buf, sizeof(buf), &err), EAI_SYSTEM);
  CO_EQ(err, -ETIMEDOUT);
  weft_deadline_pop(saved);
  weft_cancel(weft_task_self());
  err = 0;
  CO_EQ(legacy_resolve("127.0.0.1", "80", 0, buf, sizeof(buf), &err), EAI_SYSTEM);
  CO_EQ(err, -ECANCELED);
  CO_EQ(legacy_name_of(80, 0, buf, sizeof(buf), serv, sizeof(serv)), EAI_SYSTEM);
  CO_EQ(pool_jobs(), jobs + 3);
  return NULL;
}

Test(hook, name_lookups_run_on_the_pool, .timeout = 30)
{
  rt_run(1, lookup_main, NULL);
  rt_assert_clean();
}

Test(hook, plain_threads_look_up_with_libc, .timeout = 30)
{
  char buf[64];
  int err = 0;
  cr_assert_eq(legacy_resolve("127.0.0.1", "80", 0, buf, sizeof(buf), &err), 0);
  cr_assert_str_eq(buf, "127.0.0.1");
  cr_assert_eq(legacy_resolve(NULL, NULL, 0, buf, sizeof(buf), &err), EAI_NONAME);
}
