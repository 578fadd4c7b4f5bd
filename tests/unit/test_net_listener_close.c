/* SPDX-License-Identifier: MIT */
/*
 * Suite "net", part 4 - closing a listener while a task waits in its accept,
 * the classic way to stop an accept loop: from the listener's shard, from
 * another shard and from a plain thread, with the multishot accept and one
 * at a time. The waiter gets -EBADF, and it has returned (it touches the
 * listener no more) by the time the close has: a cancel sent to it after
 * the close finds nothing to end - where it would once have woken it to read
 * the freed listener (ASan: heap-use-after-free). And an accept begun while
 * the close waits for the op's last completion gets -EBADF at once, without
 * arming the op again; one woken by a connection but not run yet when the
 * close begins gets -EBADF too, and the close closes that connection.
 */
#include "net_test.h"

#define RESULT_NONE INT_MIN

struct cw {
  int lfd;
  bool oneshot;         /* no multishot accept: the accept is weft_accept_dl */
  weft_listener *l;
  weft_task *acceptor;  /* waits in weft_listener_accept(l) */
  atomic_int result;    /* the acceptor's result, RESULT_NONE until it returned */
  int fds;              /* open descriptors with l open and nothing accepted */
};

static void *acceptor(void *arg)
{
  struct cw *c = arg;
  atomic_store(&c->result, weft_listener_accept(c->l, WEFT_NO_DEADLINE));
  return NULL;
}

/* Polls with weft_yield (on l's shard) until hook bits `bits` are all set. */
static bool until_state(weft_listener *l, unsigned bits)
{
  for (int i = 0; i < 1000000; i++) {
    if ((weft__listener_state(l) & bits) == bits)
      return true;
    weft_yield();
  }
  return false;
}

/* On the shard the listener is to live on: opens it and starts the
 * acceptor there, and returns once that waits in the accept. */
static void *open_and_wait(void *arg)
{
  struct cw *c = arg;
  atomic_store(&weft__net_refused, c->oneshot ? WEFT__NET_NO_MULTISHOT : 0u);
  CO_EQ(weft_listener_open(&c->l, c->lfd, 0), 0);
  atomic_store(&weft__net_refused, 0);
  c->fds = count_fds();
  atomic_store(&c->result, RESULT_NONE);
  CO_EQ(io_spawn_on(&c->acceptor, weft_shard_id(), acceptor, c), 0);
  CO_CHECK(until_state(c->l, WEFT__LST_ACCEPT_WAITS));
  return NULL;
}

/* Right after weft_listener_close(l) returned: the waiter had its -EBADF by
 * then. A cancel must find it done - before, the cancel woke a waiter left
 * in the freed listener. Nothing was accepted or left open. */
static void check_after_close(struct cw *c)
{
  CO_EQ(atomic_load(&c->result), -EBADF);
  weft_cancel(c->acceptor); /* harmless once it returned */
  void *ret;
  CO_EQ(weft_join(c->acceptor, &ret), 0);
  CO_EQ(atomic_load(&c->result), -EBADF);
  CO_EQ(count_fds(), c->fds);
  close(c->lfd);
}

static void cw_init(struct cw *c, bool oneshot)
{
  memset(c, 0, sizeof(*c));
  c->lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(c->lfd >= 0);
  c->oneshot = oneshot;
}

/* ---- from the listener's shard -------------------------------------------------- */

static void *same_shard_body(void *arg)
{
  (void)arg;
  for (int oneshot = 0; oneshot < 2; oneshot++) {
    struct cw c;
    cw_init(&c, oneshot);
    open_and_wait(&c);
    weft_listener_close(c.l);
    check_after_close(&c);
  }
  return NULL;
}

Test(net, listener_close_while_accepting_same_shard, .timeout = 60)
{
  rt_run(1, same_shard_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- from another shard ----------------------------------------------------------- */

static void *other_shard_body(void *arg)
{
  (void)arg;
  for (int oneshot = 0; oneshot < 2; oneshot++) {
    struct cw c;
    cw_init(&c, oneshot);
    weft_task *t;
    CO_EQ(io_spawn_on(&t, 1, open_and_wait, &c), 0);
    rt_join_int(t);
    weft_listener_close(c.l); /* on shard 0 */
    CO_EQ(weft_shard_id(), 0);
    check_after_close(&c);
  }
  return NULL;
}

Test(net, listener_close_while_accepting_other_shard, .timeout = 60)
{
  rt_run(2, other_shard_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- from a plain thread ----------------------------------------------------------- */

Test(net, listener_close_while_accepting_plain_thread, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  for (int oneshot = 0; oneshot < 2; oneshot++) {
    struct cw c;
    cw_init(&c, oneshot);
    void *ret;
    cr_assert_eq(weft_join(rt_submit_on(rt, 1, open_and_wait, &c), &ret), 0);
    rt_assert_clean();
    weft_listener_close(c.l);
    check_after_close(&c);
    rt_assert_clean();
  }
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- an accept begun while the close waits ------------------------------------------- */

struct late {
  weft_listener *l;
  atomic_bool closed; /* the close returned: l is gone */
};

static void *late_closer(void *arg)
{
  struct late *s = arg;
  weft_listener_close(s->l);
  atomic_store(&s->closed, true);
  return NULL;
}

/* Once a close on this shard has begun - and not returned: checked before
 * each look at l, with no suspension in between - an accept returns -EBADF
 * at once, and arms nothing (no op more in flight on the shard). Whether
 * the look comes while the close still waits for the cancelled op's last
 * completion is up to the ring, so the scenario is repeated until it did;
 * false if it never did. */
static bool accept_during_close(int lfd)
{
  struct late s = {0};
  CO_EQ(weft_listener_open(&s.l, lfd, 0), 0);
  weft_task *closer;
  CO_EQ(io_spawn_on(&closer, weft_shard_id(), late_closer, &s), 0);
  bool seen = false;
  while (!atomic_load(&s.closed)) {
    unsigned st = weft__listener_state(s.l);
    if ((st & WEFT__LST_CLOSING) && (st & WEFT__LST_ARMED)) {
      weft__shard *sh = weft__task_self()->shard;
      unsigned inflight = sh->inflight;
      CO_EQ(weft_listener_accept(s.l, WEFT_NO_DEADLINE), -EBADF);
      CO_EQ(sh->inflight, inflight);
      CO_CHECK(!atomic_load(&s.closed)); /* it returned at once */
      seen = true;
      break;
    }
    weft_yield();
  }
  rt_join_int(closer);
  return seen;
}

static void *accept_during_close_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  int base = count_fds();
  bool seen = false;
  for (int i = 0; i < 100 && !seen; i++)
    seen = accept_during_close(lfd);
  CO_CHECK(seen);
  CO_EQ(count_fds(), base);
  close(lfd);
  return NULL;
}

Test(net, listener_accept_begun_during_close, .timeout = 60)
{
  rt_run(1, accept_during_close_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- a connection that came just before the close ------------------------------------ */

/* The acceptor was woken by its connection's completion and has not run
 * yet when the close begins (checked with no suspension in between): it
 * gets -EBADF, and the connection queued for it is closed by the close -
 * the client reads the end - rather than handed out after the close began.
 * Which of the two runs first after the completion is the scheduler's
 * choice, so the scenario is repeated until the close came first; false if
 * it never did. */
static bool close_before_woken_acceptor(int lfd)
{
  struct cw c = {.lfd = lfd};
  CO_EQ(weft_listener_open(&c.l, lfd, 0), 0);
  atomic_store(&c.result, RESULT_NONE);
  CO_EQ(io_spawn_on(&c.acceptor, weft_shard_id(), acceptor, &c), 0);
  CO_CHECK(until_state(c.l, WEFT__LST_ACCEPT_WAITS));
  int cl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_of(lfd))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CO_EQ(connect(cl, (struct sockaddr *)&a, sizeof(a)), 0); /* loopback: at once */
  bool first = false;
  for (int i = 0; i < 1000000; i++) {
    weft_yield();
    if (atomic_load(&c.result) != RESULT_NONE)
      break; /* the acceptor ran first and has the connection */
    if (!(weft__listener_state(c.l) & WEFT__LST_ACCEPT_WAITS)) {
      first = true; /* woken, not run yet: close now */
      break;
    }
  }
  weft_listener_close(c.l);
  void *ret;
  CO_EQ(weft_join(c.acceptor, &ret), 0);
  int r = atomic_load(&c.result);
  if (first)
    CO_EQ(r, -EBADF);
  if (r >= 0) {
    close(r);
  } else if (first) {
    char b;
    CO_EQ(recv(cl, &b, 1, 0), 0); /* closed by the close */
  }
  close(cl);
  return first;
}

static void *close_before_woken_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  int base = count_fds();
  bool seen = false;
  for (int i = 0; i < 100 && !seen; i++)
    seen = close_before_woken_acceptor(lfd);
  CO_CHECK(seen);
  CO_EQ(count_fds(), base);
  close(lfd);
  return NULL;
}

Test(net, listener_close_before_the_woken_acceptor_runs, .timeout = 60)
{
  rt_run(1, close_before_woken_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}
