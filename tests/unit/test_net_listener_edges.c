/* SPDX-License-Identifier: MIT */
/*
 * Suite "net", part 5 - a listener used in ways it refuses: a second task
 * accepting while one already waits (-EBUSY, the waiter unharmed), with
 * the multishot accept and one at a time; a listening socket shut down for
 * reading (-EINVAL, and not taken for a kernel without multishot accept).
 */
#include "net_test.h"

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
