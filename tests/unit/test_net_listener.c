/* SPDX-License-Identifier: MIT */
/*
 * Suite "net", part 3 - the multishot listener: 1100 connections (more than
 * it queues), the one-at-a-time fallback, close with queued connections,
 * deadlines, cancellation, hand-over between shards, -EPERM on a plain
 * thread, an open that fails (cancelled task, deadline scope passed, no
 * memory, no SQE) and leaves nothing behind, closing from another shard or a plain
 * thread, and stealable acceptors that must not be stolen while they wait
 * (with the multishot accept and one at a time).
 */
#include "net_test.h"

#include "fault.h"

#include <poll.h>
#include <sys/utsname.h>

/* ---- the multishot listener -------------------------------------------------------- */

/* More connections than the listener queues (1024): it stops accepting at
 * the bound and starts again once drained. */
#define NCONN 1100

#define LISTENER_QUEUE 1024

struct lst_ctx {
  int port;
  int from, n; /* clients from..n-1 connect */
  int fds[NCONN];
};

static void *lst_clients(void *arg)
{
  struct lst_ctx *c = arg;
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", c->port);
  for (int i = c->from; i < c->n; i++) {
    c->fds[i] = weft_tcp_connect("127.0.0.1", ps);
    CO_CHECK(c->fds[i] >= 0);
    uint32_t id = (uint32_t)i;
    CO_EQ(weft_send(c->fds[i], &id, sizeof(id), 0), sizeof(id));
  }
  return NULL;
}

/* Serves n clients, then times out once and serves one more client.
 * Returns how many of those accepts the listener made one at a time (its
 * fallback without multishot accept), read before it is closed. */
static uint64_t listener_serve(int n)
{
  int lfd = weft_tcp_listen("127.0.0.1", "0", 2048);
  CO_CHECK(lfd >= 0);
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  struct lst_ctx *c = calloc(1, sizeof(*c));
  c->port = port_of(lfd);
  c->n = n;
  weft_task *t;
  int base = count_fds();
  /* Every client connects before the first accept: they pile up in the
   * listener's queue and the kernel's backlog. With more than the queue
   * holds, the first LISTENER_QUEUE come first: once the listener has them
   * all it stops accepting, and the others stay in the kernel's backlog.
   * (Connections that came all at once would be accepted in one burst by
   * the kernel, before the listener could stop: net.h says so.) */
  if (n > LISTENER_QUEUE) {
    c->n = LISTENER_QUEUE;
    CO_EQ(io_spawn_on(&t, 1, lst_clients, c), 0);
    rt_join_int(t);
    CO_CHECK(RT_POLL(count_fds() - base == 2 * LISTENER_QUEUE));
    weft_sleep(20 * WEFT_MSEC); /* the stop (a cancel of the accept) completes */
    c->from = LISTENER_QUEUE;
    c->n = n;
  }
  CO_EQ(io_spawn_on(&t, 1, lst_clients, c), 0);
  rt_join_int(t);
  if (n > LISTENER_QUEUE) {
    weft_sleep(20 * WEFT_MSEC); /* an accept still armed would take them meanwhile */
    CO_EQ(count_fds() - base - n, LISTENER_QUEUE);
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    CO_EQ(poll(&pf, 1, 0), 1);
  }
  char *seen = calloc((size_t)n, 1);
  for (int i = 0; i < n; i++) {
    int fd = weft_listener_accept(l, weft_now() + 10 * WEFT_SEC);
    CO_CHECK(fd >= 0);
    if (fd < 0)
      break;
    CO_EQ(weft_shard_id(), 0);
    CO_CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    uint32_t id = UINT32_MAX;
    CO_EQ(weft_recv_exact(fd, &id, sizeof(id), NULL), sizeof(id));
    CO_CHECK(id < (uint32_t)n && !seen[id]);
    if (id < (uint32_t)n)
      seen[id] = 1;
    close(fd);
  }
  /* Nothing more: the deadline ends the wait, not the listener. */
  CO_EQ(weft_listener_accept(l, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", c->port);
  int fd = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(fd >= 0);
  int s = weft_listener_accept(l, weft_now() + 10 * WEFT_SEC);
  CO_CHECK(s >= 0);
  close(s);
  close(fd);
  uint64_t oneshot = weft__listener_oneshot_accepts(l);
  weft_listener_close(l);
  for (int i = 0; i < n; i++)
    close(c->fds[i]);
  free(seen);
  free(c);
  close(lfd);
  return oneshot;
}

/* Whether the kernel has multishot accept (Linux 5.19); without it the
 * listener falls back to one accept at a time, as it should. */
static bool kernel_has_multishot_accept(void)
{
  struct utsname u;
  int major = 0, minor = 0;
  return uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 5 || (major == 5 && minor >= 19));
}

static void *listener_many_body(void *arg)
{
  (void)arg;
  uint64_t oneshot = listener_serve(NCONN);
  /* Every connection came from the multishot accept: none one at a time. */
  if (kernel_has_multishot_accept())
    CO_EQ(oneshot, 0);
  return NULL;
}

Test(net, listener_1100_connections, .timeout = 120)
{
  rt_run(2, listener_many_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static void *listener_oneshot_body(void *arg)
{
  (void)arg;
  atomic_store(&weft__net_refused, WEFT__NET_NO_MULTISHOT);
  /* Every accept was made one at a time - the 100, the one that timed out
   * and the last - not taken by a multishot accept, which would serve the
   * same connections on this kernel and hide a fallback that never ran. */
  CO_EQ(listener_serve(100), 100 + 2);
  atomic_store(&weft__net_refused, 0);
  return NULL;
}

Test(net, listener_oneshot_fallback, .timeout = 60)
{
  rt_run(2, listener_oneshot_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* Closing a listener with connections accepted but not handed out closes
 * them: no descriptor leaks. */
static void *close_queued_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 64);
  CO_CHECK(lfd >= 0);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int base = count_fds();
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  int cfd[50];
  for (int i = 0; i < 50; i++) {
    cfd[i] = weft_tcp_connect("127.0.0.1", ps);
    CO_CHECK(cfd[i] >= 0);
  }
  /* The shard accepts them into the listener's queue meanwhile. */
  CO_CHECK(RT_POLL(count_fds() == base + 100));
  weft_listener_close(l);
  CO_EQ(count_fds(), base + 50);
  /* The clients see their connections closed. */
  char b;
  CO_EQ(weft_recv(cfd[0], &b, 1, 0), 0);
  for (int i = 0; i < 50; i++)
    close(cfd[i]);
  CO_EQ(count_fds(), base);
  close(lfd);
  return NULL;
}

Test(net, listener_close_queued, .timeout = 60)
{
  rt_run(1, close_queued_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

static weft_listener *other_shard_l;

static void *other_shard_accept(void *arg)
{
  (void)arg;
  CO_EQ(weft_listener_accept(other_shard_l, WEFT_NO_DEADLINE), -EINVAL);
  return NULL;
}

static void *cancelled_acceptor(void *arg)
{
  int lfd = *(int *)arg;
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  CO_EQ(weft_listener_accept(l, WEFT_NO_DEADLINE), -ECANCELED);
  CO_EQ(weft_listener_accept(l, WEFT_NO_DEADLINE), -ECANCELED); /* and every later one */
  weft_listener_close(l); /* still works in a cancelled task */
  return (void *)1;
}

/* The opener returns; another task on its shard uses and closes the
 * listener. */
struct handover {
  int lfd;
  weft_listener *l;
};

static void *handover_opener(void *arg)
{
  struct handover *h = arg;
  CO_EQ(weft_listener_open(&h->l, h->lfd, 0), 0);
  return NULL;
}

static void *handover_user(void *arg)
{
  struct handover *h = arg;
  int fd = weft_listener_accept(h->l, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(fd >= 0);
  close(fd);
  weft_listener_close(h->l);
  return NULL;
}

static void *listener_api_body(void *arg)
{
  (void)arg;
  weft_listener *l = NULL;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  int s = weft_socket(AF_INET, SOCK_STREAM, 0);
  CO_EQ(weft_listener_open(&l, s, 0), -EINVAL); /* not listening */
  close(s);
  CO_EQ(weft_listener_open(&l, -1, 0), -EBADF);
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(weft_listener_open(&l, p[0], 0), -ENOTSOCK);
  io_close_pipe(p);
  CO_EQ(weft_listener_open(NULL, lfd, 0), -EINVAL);
  CO_EQ(weft_listener_open(&l, lfd, 0x4), -EINVAL);
  CO_EQ(weft_listener_accept(NULL, WEFT_NO_DEADLINE), -EINVAL);
  weft_listener_close(NULL);

  /* Deadline, then a connection: the multishot accept outlived the wait. */
  CO_EQ(weft_listener_open(&l, lfd, SOCK_NONBLOCK), 0);
  CO_EQ(weft_listener_accept(l, weft_now() + 30 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_listener_accept(l, weft_now() - 1), -ETIMEDOUT);
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  int c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  int a = weft_listener_accept(l, weft_now() + 5 * WEFT_SEC);
  CO_CHECK(a >= 0);
  CO_CHECK(fcntl(a, F_GETFL) & O_NONBLOCK); /* flags as for accept4 */
  close(a);
  close(c);
  /* Only on the listener's shard. */
  other_shard_l = l;
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, other_shard_accept, NULL), 0);
  rt_join_int(t);
  weft_listener_close(l);

  /* Cancellation ends the wait with -ECANCELED. */
  CO_EQ(io_spawn_on(&t, 0, cancelled_acceptor, &lfd), 0);
  CO_CHECK(io_wait_suspended(1)); /* a wait to end, not a call not yet made */
  CO_EQ(weft_cancel(t), 0);
  void *ret = NULL;
  CO_EQ(weft_join(t, &ret), -ECANCELED);
  CO_EQ((intptr_t)ret, 1);

  struct handover h = {.lfd = lfd};
  CO_EQ(io_spawn_on(&t, 0, handover_opener, &h), 0);
  rt_join_int(t);
  c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  CO_EQ(io_spawn_on(&t, 0, handover_user, &h), 0);
  rt_join_int(t);
  close(c);
  close(lfd);
  return NULL;
}

Test(net, listener_api, .timeout = 60)
{
  rt_run(2, listener_api_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, listener_plain_thread, .timeout = 10)
{
  weft_listener *l = NULL;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 1);
  cr_assert_geq(lfd, 0);
  cr_assert_eq(weft_listener_open(&l, lfd, 0), -EPERM);
  cr_assert_eq(weft_listener_accept((weft_listener *)&lfd, 0), -EPERM);
  close(lfd);
}

/* ---- an open that fails ---------------------------------------------------------- */

/* What a successful open changes besides *l: the opener is referenced and
 * held on its shard, the listener is on the shard's list (for the sweep at
 * the runtime's end) and its accept is in flight. A failed open must leave
 * all of it as it was: a hold left behind keeps the task on its shard for
 * good, a reference keeps it from being freed, a list entry would be swept
 * after its free, an accept in flight would take the socket's connections. */
struct open_marks {
  int refs;
  unsigned pinned_ops;
  unsigned inflight;
  weft_listener *listeners;
  int fds;
};

static struct open_marks open_marks(void)
{
  weft_task *t = weft__task_self();
  return (struct open_marks){.refs = atomic_load(&t->refs),
                             .pinned_ops = t->pinned_ops,
                             .inflight = t->shard->inflight,
                             .listeners = t->shard->listeners,
                             .fds = count_fds()};
}

/* weft_listener_open(lfd) must fail with err, changing nothing. With
 * nth > 0, fault `site` is armed for the open alone and must have been used
 * up by it (the failure is the open's own). */
static void open_fails_at(int lfd, int err, enum weft__fault_site site, long nth)
{
  weft_listener *l = (weft_listener *)&lfd; /* not a listener: must stay as it is */
  struct open_marks before = open_marks();
  if (nth > 0)
    weft__fault_arm(site, nth);
  CO_EQ(weft_listener_open(&l, lfd, 0), err);
  CO_EQ(atomic_load(&weft__fault_countdown[site]), 0);
  weft__fault_arm(site, 0);
  struct open_marks after = open_marks();
  CO_CHECK(l == (weft_listener *)&lfd);
  CO_EQ(after.refs, before.refs);
  CO_EQ(after.pinned_ops, before.pinned_ops);
  CO_EQ(after.inflight, before.inflight);
  CO_CHECK(after.listeners == before.listeners);
  CO_EQ(after.fds, before.fds); /* lfd not closed, nothing accepted */
}

static void open_fails(int lfd, int err, long malloc_nth)
{
  open_fails_at(lfd, err, WEFT__FAULT_MALLOC, malloc_nth);
}

/* lfd still serves after failed opens: the socket was neither closed nor
 * taken over, and a listener opened on it now accepts a connection. */
static void still_serves(int lfd)
{
  char ps[8];
  snprintf(ps, sizeof(ps), "%d", port_of(lfd));
  weft_listener *l = NULL;
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  int c = weft_tcp_connect("127.0.0.1", ps);
  CO_CHECK(c >= 0);
  int s = weft_listener_accept(l, weft_now() + 10 * WEFT_SEC);
  CO_CHECK(s >= 0);
  CO_EQ(weft_send(c, "ok", 2, 0), 2);
  char buf[2];
  CO_EQ(weft_recv_exact(s, buf, 2, NULL), 2);
  close(s);
  close(c);
  weft_listener_close(l);
}

/* The task cancels itself first, so the open meets a cancelled task for
 * certain - with a multishot accept to arm and, as on a kernel without one,
 * with none (the open then arms nothing, and must fail all the same). */
static void *cancelled_opener(void *arg)
{
  CO_EQ(weft_cancel(weft_task_self()), 0);
  open_fails(*(int *)arg, -ECANCELED, 0);
  atomic_store(&weft__net_refused, WEFT__NET_NO_MULTISHOT);
  open_fails(*(int *)arg, -ECANCELED, 0);
  atomic_store(&weft__net_refused, 0);
  return (void *)1;
}

static void *open_cancelled_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 0, cancelled_opener, &lfd), 0);
  void *ret = NULL;
  CO_EQ(weft_join(t, &ret), -ECANCELED);
  CO_EQ((intptr_t)ret, 1); /* it ran its checks to the end */
  still_serves(lfd);
  close(lfd);
  return NULL;
}

Test(net, listener_open_cancelled, .timeout = 30)
{
  rt_run(1, open_cancelled_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* A deadline scope already over at the open: -ETIMEDOUT, whether there is
 * an accept to arm or not. */
static void *open_scope_passed_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  int64_t saved = weft_deadline_push(weft_now() - 1);
  open_fails(lfd, -ETIMEDOUT, 0);
  atomic_store(&weft__net_refused, WEFT__NET_NO_MULTISHOT); /* nothing to arm */
  open_fails(lfd, -ETIMEDOUT, 0);
  atomic_store(&weft__net_refused, 0);
  weft_deadline_pop(saved);
  still_serves(lfd);
  close(lfd);
  return NULL;
}

Test(net, listener_open_deadline_scope_passed, .timeout = 30)
{
  rt_run(1, open_scope_passed_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* -ENOMEM from the one allocation an open can fail in: the listener. Not
 * from the shard's timer heap inside a deadline scope: the multishot
 * accept outlives the scope and has no deadline, so no timer slot is
 * reserved for it (once one was, never used, and the open failed when the
 * heap could not grow). */
static void *open_nomem_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  open_fails(lfd, -ENOMEM, 1);
  /* Nothing has waited with a deadline on this shard yet: the heap has no
   * room, and a slot would be its first growth - the second allocation. */
  weft__timer_heap *h = &weft__task_self()->shard->timers;
  CO_EQ(h->n, h->cap);
  int64_t saved = weft_deadline_push(weft_now() + 60 * WEFT_SEC);
  weft_listener *l = NULL;
  weft__fault_arm(WEFT__FAULT_MALLOC, 2);
  CO_EQ(weft_listener_open(&l, lfd, 0), 0);
  CO_EQ(atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]), 1); /* only the listener */
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(h->n, h->cap); /* and the heap did not grow */
  weft_listener_close(l);
  weft_deadline_pop(saved);
  still_serves(lfd);
  close(lfd);
  return NULL;
}

Test(net, listener_open_without_memory, .timeout = 30)
{
  rt_run(1, open_nomem_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* No SQE for the accept even after a submit: -EBUSY, after the listener
 * was made, which is undone. */
static void *open_sq_full_body(void *arg)
{
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(lfd >= 0);
  open_fails_at(lfd, -EBUSY, WEFT__FAULT_OP_SQ, 1);
  still_serves(lfd);
  close(lfd);
  return NULL;
}

Test(net, listener_open_sq_full, .timeout = 30)
{
  rt_run(1, open_sq_full_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* ---- closing from elsewhere ----------------------------------------------------- */

/* True when a connection waits in lfd's backlog: nothing accepts it. */
static bool in_backlog(int lfd)
{
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

struct far {
  int lfd;
  char port[8];
  weft_listener *l;
  int client;   /* connected, and accepted into l's queue */
  int fds_open; /* descriptors with l open and that connection queued */
};

static void *far_opener(void *arg)
{
  struct far *f = arg;
  CO_EQ(weft_listener_open(&f->l, f->lfd, 0), 0);
  return NULL;
}

/* A listener opened on shard 1 by a task that has returned, with one
 * connection queued in it. */
static void far_setup(struct far *f, weft_task *opener)
{
  void *ret;
  CO_EQ(weft_join(opener, &ret), 0);
  int base = count_fds();
  f->client = weft_tcp_connect("127.0.0.1", f->port);
  CO_CHECK(f->client >= 0);
  CO_CHECK(RT_POLL(count_fds() == base + 2)); /* the client and the accepted one */
  f->fds_open = base + 2;
}

/* After the close: the queued connection was closed (the client reads the
 * end), and no accept is armed any more - a new connection stays in the
 * kernel's backlog. */
static void far_check_closed(struct far *f)
{
  CO_EQ(count_fds(), f->fds_open - 1);
  char b;
  CO_EQ(recv(f->client, &b, 1, 0), 0);
  close(f->client);
  int c = weft_tcp_connect("127.0.0.1", f->port);
  CO_CHECK(c >= 0);
  weft_sleep(50 * WEFT_MSEC); /* an armed accept would take it by then */
  CO_CHECK(in_backlog(f->lfd));
  close(c);
  close(f->lfd);
}

/* Keeps shard 1 busy for 100 ms, so that a task queued there does not
 * start before its caller's cancellation could reach it. */
static atomic_bool hog_running;

static void *hog(void *arg)
{
  (void)arg;
  atomic_store(&hog_running, true);
  for (int64_t end = weft_now() + 100 * WEFT_MSEC; weft_now() < end;)
    ;
  return NULL;
}

/* Closes from shard 0, in a task cancelled beforehand, while shard 1 is
 * busy: the close is not cut short by the cancellation (the helper on
 * shard 1 is not cancelled with the caller before it could start). */
static void *far_closer(void *arg)
{
  struct far *f = arg;
  CO_EQ(weft_cancel(weft_task_self()), 0);
  weft_listener_close(f->l);
  CO_EQ(weft_shard_id(), 0);
  return NULL;
}

static void *close_other_shard_body(void *arg)
{
  (void)arg;
  struct far f = {.lfd = weft_tcp_listen("127.0.0.1", "0", 16)};
  CO_CHECK(f.lfd >= 0);
  snprintf(f.port, sizeof(f.port), "%d", port_of(f.lfd));
  weft_task *t;
  CO_EQ(io_spawn_on(&t, 1, far_opener, &f), 0);
  far_setup(&f, t);
  weft_task *h;
  CO_EQ(io_spawn_on(&h, 1, hog, NULL), 0);
  CO_CHECK(RT_POLL(atomic_load(&hog_running)));
  CO_EQ(io_spawn_on(&t, 0, far_closer, &f), 0);
  void *ret;
  CO_EQ(weft_join(t, &ret), -ECANCELED);
  CO_EQ(weft_join(h, &ret), 0);
  far_check_closed(&f);
  return NULL;
}

Test(net, listener_close_from_other_shard, .timeout = 60)
{
  rt_run(2, close_other_shard_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

/* The same close from a plain thread (the runtime kept by weft_runtime_start). */
Test(net, listener_close_from_plain_thread, .timeout = 60)
{
  weft_runtime *rt = rt_start(2);
  struct far f = {.lfd = weft_tcp_listen("127.0.0.1", "0", 16)};
  cr_assert_geq(f.lfd, 0);
  snprintf(f.port, sizeof(f.port), "%d", port_of(f.lfd));
  far_setup(&f, rt_submit_on(rt, 1, far_opener, &f));
  rt_assert_clean();
  weft_listener_close(f.l);
  far_check_closed(&f);
  rt_assert_clean();
  rt_stop_idle(rt);
  rt_assert_no_leaks();
}

/* ---- a stealable task waiting in accept stays on the listener's shard ----------- */

#define STAY_CONNS 300

struct stay {
  weft_listener *l;
  int port;
  atomic_int accepted;
  atomic_int moved;      /* accepts that returned on another shard */
  atomic_bool started;   /* the acceptor runs (on shard 0) */
  atomic_bool keeping;   /* the keeper holds shard 1 */
  atomic_bool clients_done;
};

static void *stay_clients(void *arg)
{
  struct stay *s = arg;
  for (int i = 0; i < STAY_CONNS; i++) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CO_EQ(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(c);
    usleep(200);
  }
  atomic_store(&s->clients_done, true);
  return NULL;
}

/* Default placement: stealable. Each accept must return on the shard it
 * was called on - the listener's queue and op belong to that shard. */
static void *stay_acceptor(void *arg)
{
  struct stay *s = arg;
  CO_EQ(weft_shard_id(), 0); /* shard 1 is held until it has started */
  atomic_store(&s->started, true);
  while (atomic_load(&s->accepted) < STAY_CONNS) {
    int me = weft_shard_id();
    int fd = weft_listener_accept(s->l, weft_now() + 50 * WEFT_MSEC);
    if (weft_shard_id() != me) {
      atomic_fetch_add(&s->moved, 1);
      if (fd >= 0)
        close(fd);
      return NULL;
    }
    if (fd >= 0) {
      atomic_fetch_add(&s->accepted, 1);
      close(fd);
    } else if (fd != -ETIMEDOUT) {
      CO_EQ(fd, -ETIMEDOUT);
      return NULL;
    }
  }
  return NULL;
}

/* Holds shard 1 until the acceptor has started on shard 0 (it runs from
 * its start into its first wait without suspending); then keeps it awake,
 * ready to steal. (One acceptor: a listener takes one at a time.) */
static void *stay_keeper(void *arg)
{
  struct stay *s = arg;
  atomic_store(&s->keeping, true);
  while (!atomic_load(&s->started))
    ;
  while (!atomic_load(&s->clients_done))
    weft_sleep(30 * WEFT_USEC);
  return NULL;
}

static void burn(int64_t ns)
{
  int64_t end = weft_now() + ns;
  while (weft_now() < end)
    ;
}

/* The opener keeps its shard busy between yields, so an acceptor woken by
 * a connection waits in the stealable queue long enough for shard 1's
 * stuck-queue rule to take it - which it must not: while a task waits in
 * accept it is held on the listener's shard, as the opener is. arg non-NULL:
 * as on a kernel without multishot accept, where each accept is one
 * weft_accept_dl and the acceptor is woken by its completion instead. */
static void *stay_body(void *arg)
{
  bool oneshot = arg != NULL;
  struct stay s = {0};
  if (oneshot)
    atomic_store(&weft__net_refused, WEFT__NET_NO_MULTISHOT);
  int lfd = weft_tcp_listen("127.0.0.1", "0", 1024);
  CO_CHECK(lfd >= 0);
  s.port = port_of(lfd);
  CO_EQ(weft_listener_open(&s.l, lfd, 0), 0);
  weft_task *keeper, *acc;
  CO_EQ(rt_spawn(&keeper, WEFT_PLACE_PINNED, 1, stay_keeper, &s), 0);
  while (!atomic_load(&s.keeping))
    weft_yield();
  CO_EQ(weft_spawn(&acc, NULL, stay_acceptor, &s), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, stay_clients, &s), 0);
  while (!atomic_load(&s.clients_done) && !atomic_load(&s.moved)) {
    burn(300 * WEFT_USEC);
    weft_yield();
  }
  pthread_join(th, NULL);
  /* Whatever is still queued is handed out; then the acceptor stops. */
  while (atomic_load(&s.accepted) < STAY_CONNS && !atomic_load(&s.moved))
    weft_sleep(WEFT_MSEC);
  atomic_store(&s.accepted, STAY_CONNS);
  rt_join_int(acc);
  rt_join_int(keeper);
  CO_EQ(atomic_load(&s.moved), 0);
  if (!atomic_load(&s.moved)) /* else its op may be on the wrong ring: left to the sweep */
    weft_listener_close(s.l);
  close(lfd);
  atomic_store(&weft__net_refused, 0);
  return NULL;
}

Test(net, listener_acceptors_are_not_stolen_while_waiting, .timeout = 60)
{
  rt_run(2, stay_body, NULL);
  rt_assert_clean();
  rt_assert_no_leaks();
}

Test(net, listener_oneshot_acceptors_are_not_stolen_while_waiting, .timeout = 60)
{
  rt_run(2, stay_body, (void *)1);
  rt_assert_clean();
  rt_assert_no_leaks();
}
