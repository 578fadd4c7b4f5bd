/* SPDX-License-Identifier: MIT */
/*
 * Suite "net", part 5 - a listener used in ways it refuses: a second task
 * accepting while one already waits (-EBUSY, the waiter unharmed), with
 * the multishot accept and one at a time; a listening socket shut down for
 * reading (-EINVAL, and not taken for a kernel without multishot accept).
 */
#include "net_test.h"

#include "fault.h"

#define RESULT_NONE INT_MIN

struct busy {
  weft_listener *l;
  atomic_int result; /* the first acceptor's result, RESULT_NONE until it returned */
};

static void *first_acceptor(void *arg)
{
  struct busy *b = arg;
  atomic_store(&b->result, weft_listener_accept(b->l, weft_now() + 10 * WEFT_SEC));
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

/* One waiter slot: a second accept used to take it over, and the first
 * waiter was never woken again. */
static void *second_accept_body(void *arg)
{
  (void)arg;
  for (int oneshot = 0; oneshot < 2; oneshot++) {
    int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
    CO_CHECK(lfd >= 0);
    struct busy b = {.result = RESULT_NONE};
    atomic_store(&weft__net_refused, oneshot ? WEFT__NET_NO_MULTISHOT : 0u);
    CO_EQ(weft_listener_open(&b.l, lfd, 0), 0);
    atomic_store(&weft__net_refused, 0);
    weft_task *t;
    CO_EQ(io_spawn_on(&t, weft_shard_id(), first_acceptor, &b), 0);
    CO_CHECK(until_state(b.l, WEFT__LST_ACCEPT_WAITS));
    CO_EQ(weft_listener_accept(b.l, weft_now() + 100 * WEFT_MSEC), -EBUSY);
    CO_EQ(atomic_load(&b.result), RESULT_NONE);
    char ps[8];
    snprintf(ps, sizeof(ps), "%d", port_of(lfd));
    int c = weft_tcp_connect("127.0.0.1", ps);
    CO_CHECK(c >= 0);
    rt_join_int(t);
    int s = atomic_load(&b.result);
    CO_CHECK(s >= 0);
    /* Once it has returned, the listener takes the next caller. */
    int c2 = weft_tcp_connect("127.0.0.1", ps);
    CO_CHECK(c2 >= 0);
    int s2 = weft_listener_accept(b.l, weft_now() + 10 * WEFT_SEC);
    CO_CHECK(s2 >= 0);
    weft_listener_close(b.l);
    close(s2);
    close(c2);
    close(s);
    close(c);
    close(lfd);
  }
  return NULL;
}

Test(net, listener_second_accept_is_busy, .timeout = 60)
{
  rt_run(1, second_accept_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- a listening socket shut down for reading ------------------------------------- */

/* A TCP listener shut down for reading stops listening, and the armed
 * multishot accept ends with -EINVAL before any connection - which is
 * also how a kernel without multishot accept answers. It must not be
 * taken for one: the accept reports -EINVAL, and once the socket listens
 * again the listener goes on with the multishot accept. */
static void *tcp_shut_rd_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  weft_listener *l;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  CO_EQ(weft_shutdown(lfd, SHUT_RD), 0);
  CO_EQ(weft_listener_accept(l, weft_now() + 10 * WEFT_SEC), -EINVAL);
  CO_EQ(weft__listener_oneshot_accepts(l), 0);
  CO_EQ(weft_listen(lfd, 16), 0);
  char ps[8]; /* a port bound as "0" is given up with the listening */
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  int s = weft_listener_accept(l, weft_now() + 10 * WEFT_SEC);
  CO_CHECK(s >= 0);
  CO_EQ(weft__listener_oneshot_accepts(l), 0);
  weft_listener_close(l);
  close(s);
  close(c);
  close(lfd);
  return NULL;
}

Test(net, listener_tcp_shut_rd_is_not_a_missing_multishot, .timeout = 60)
{
  rt_run(1, tcp_shut_rd_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A Unix-domain listener shut down for reading still listens, but every
 * accept of it fails - at once with -EINVAL where it may wait, and with
 * -EAGAIN where it may not, which io_uring then polls for again and again:
 * the listener's accept would never end. It is -EINVAL, both ways the
 * listener accepts, and for a listener opened after the shutdown too. */
static void *unix_shut_rd_body(void *arg)
{
  (void)arg;
  char path[64];
  snprintf(path, sizeof(path), "@weft-test-shut-rd-%d", (int)getpid());
  for (int oneshot = 0; oneshot < 2; oneshot++) {
    for (int before = 0; before < 2; before++) {
      int lfd = weft_unix_listen(path, SOCK_STREAM, 4);
      CO_CHECK(lfd >= 0);
      weft_listener *l;
      atomic_store(&weft__net_refused, oneshot ? WEFT__NET_NO_MULTISHOT : 0u);
      if (before)
        CO_EQ(weft_shutdown(lfd, SHUT_RD), 0);
      CO_EQ(weft_listener_open(&l, lfd, 0), 0);
      atomic_store(&weft__net_refused, 0);
      if (!before) {
        /* It serves until then. */
        int c = weft_unix_connect(path, SOCK_STREAM);
        CO_CHECK(c >= 0);
        int s = weft_listener_accept(l, weft_now() + 5 * WEFT_SEC);
        CO_CHECK(s >= 0);
        close(s);
        close(c);
        CO_EQ(weft_shutdown(lfd, SHUT_RD), 0);
      }
      CO_EQ(weft_listener_accept(l, weft_now() + 5 * WEFT_SEC), -EINVAL);
      weft_listener_close(l);
      close(lfd);
    }
  }
  return NULL;
}

/* An open whose accept cannot be armed after its hup poll was (no SQE for
 * it) ends that poll before it fails: nothing is left in flight. */
static void *unix_open_sq_full_body(void *arg)
{
  (void)arg;
  char path[64];
  snprintf(path, sizeof(path), "@weft-test-open-sq-%d", (int)getpid());
  int lfd = weft_unix_listen(path, SOCK_STREAM, 4);
  CO_CHECK(lfd >= 0);
  weft_stats s0 = io_stats();
  weft__fault_arm(WEFT__FAULT_OP_SQ, 2);
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), -EBUSY);
  weft__fault_arm(WEFT__FAULT_OP_SQ, 0);
  CO_CHECK(l == NULL);
  weft_stats s1 = io_stats();
  CO_EQ(s1.ops_submitted - s0.ops_submitted, 1);
  CO_EQ(s1.ops_completed - s0.ops_completed, 1);
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  weft_listener_close(l);
  close(lfd);
  return NULL;
}

Test(net, listener_unix_open_without_an_sqe_for_its_accept, .timeout = 30)
{
  rt_run(1, unix_open_sq_full_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, listener_unix_shut_rd_is_einval, .timeout = 60)
{
  rt_run(1, unix_shut_rd_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}
