/* SPDX-License-Identifier: MIT */
/*
 * echo: 256-byte TCP round trips over loopback against a plain blocking echo
 * server in this process (one thread per connection, TCP_NODELAY on both
 * ends).
 *
 *  reference  a plain thread: send(2), then recv(2) until the 256 bytes are
 *             back. It sleeps in recv for every round trip, so each trip
 *             costs two thread wake-ups (the server's and its own).
 *  value      a weft coroutine doing the same with weft_send_all and
 *             weft_recv_exact, on a runtime of ONE shard. The shard polls
 *             (spin_ns, default 20 us) before it parks, so the echo is
 *             usually picked up without a wake-up of the client side: one
 *             wake-up per trip. One shard is the fair setting: there is one
 *             client, and on a 2-core machine a second shard would only
 *             compete with the server thread for the other core.
 *
 * Extra: a plain client that never sleeps (recv with MSG_DONTWAIT in a
 * loop), the floor for any client that polls, and weft's ratio to it.
 *
 * They are measured in alternating batches (reference, busy-polling client,
 * weft, weft with a 250 us spin, reference, ...) on the same machine moments, because on a
 * shared machine the noise moves by several times between seconds. While
 * one runs the other is idle: the runtime's shard parks, the plain thread
 * waits in weft_join. The server and the client side (the plain thread, the
 * shards) are pinned to two distinct CPUs when the process may use two.
 * 50,000 round trips per side (5,000 with --quick) in 10 batches after a
 * warm-up; the best batch of each is reported (bench_util.h explains why),
 * medians in extra fields, with the shard's parks and io_uring_enter calls
 * per round trip. Target: ratio <= 0.6.
 */
#include "bench_util.h"
#include "bench_pin.h"

#include "weft.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>

#define MSG 256
#define BATCHES 10
#define LONG_SPIN_NS (250 * 1000)

static int per_batch;
static void nodelay(int fd)
{
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- the server: plain blocking, a thread per connection -------------------------- */

static int listen_fd;
static struct sockaddr_in server_addr;

static void *server_conn(void *arg)
{
  int fd = (int)(intptr_t)arg;
  pin_self(1);
  nodelay(fd);
  char buf[MSG];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
    for (ssize_t off = 0; off < n;) {
      ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
      if (w <= 0)
        break;
      off += w;
    }
  close(fd);
  return NULL;
}

static void *server(void *arg)
{
  (void)arg;
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      return NULL; /* the listener was shut down: the run is over */
    pthread_t th;
    if (pthread_create(&th, NULL, server_conn, (void *)(intptr_t)fd) == 0)
      pthread_detach(th);
    else
      close(fd);
  }
}

static int start_server(pthread_t *th)
{
  listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  server_addr.sin_family = AF_INET;
  server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(server_addr);
  if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&server_addr, len) < 0 ||
      listen(listen_fd, 8) < 0 ||
      getsockname(listen_fd, (struct sockaddr *)&server_addr, &len) < 0)
    return -1;
  return pthread_create(th, NULL, server, NULL) ? -1 : 0;
}

/* ---- the reference: a plain blocking client --------------------------------------- */

/* `busy`: recv with MSG_DONTWAIT in a loop - a client that never sleeps,
 * the floor for anything that polls (an extra field, not the reference). */
static bool plain_trip(int fd, char *out, char *in, bool busy)
{
  if (send(fd, out, MSG, MSG_NOSIGNAL) != MSG)
    return false;
  for (size_t got = 0; got < MSG;) {
    ssize_t n = recv(fd, in + got, MSG - got, busy ? MSG_DONTWAIT : 0);
    if (n < 0 && busy && errno == EAGAIN)
      continue;
    if (n <= 0)
      return false;
    got += (size_t)n;
  }
  return true;
}

/* n round trips; ns per trip, or -1 on a failed transfer. */
static double plain_batch(int fd, int n, bool busy)
{
  char out[MSG], in[MSG];
  memset(out, 'p', sizeof(out));
  int64_t t0 = bench_now_ns();
  for (int i = 0; i < n; i++)
    if (!plain_trip(fd, out, in, busy))
      return -1;
  return (double)(bench_now_ns() - t0) / n;
}

/* ---- weft: a coroutine client on a one-shard runtime ---------------------------- */

struct weft_side {
  weft_runtime *rt;
  int fd;                /* its connection, made by the first batch */
  int n;                 /* round trips of the next batch */
  double ns;             /* result of the last batch: ns per trip, -1 failed */
  uint64_t parks, enters;/* summed over the timed batches */
  double samples[BATCHES];
};

static bool weft_trip(int fd, char *out, char *in)
{
  return weft_send_all(fd, out, MSG, NULL) == MSG && weft_recv_exact(fd, in, MSG, NULL) == MSG;
}

static void *weft_batch(void *arg)
{
  struct weft_side *w = arg;
  w->ns = -1;
  if (w->fd < 0) {
    char port[8];
    snprintf(port, sizeof(port), "%d", ntohs(server_addr.sin_port));
    w->fd = weft_tcp_connect("127.0.0.1", port);
    if (w->fd < 0)
      return NULL;
    int one = 1;
    weft_setsockopt(w->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  char out[MSG], in[MSG];
  memset(out, 'w', sizeof(out));
  weft_stats s0, s1;
  weft_stats_get(NULL, -1, &s0);
  int64_t t0 = bench_now_ns();
  for (int i = 0; i < w->n; i++)
    if (!weft_trip(w->fd, out, in))
      return NULL;
  w->ns = (double)(bench_now_ns() - t0) / w->n;
  weft_stats_get(NULL, -1, &s1);
  w->parks += s1.parks - s0.parks;
  w->enters += s1.enters - s0.enters;
  return NULL;
}

/* Runs one batch on w's runtime and waits for it from this plain thread. */
static int run_weft_batch(struct weft_side *w, int n)
{
  w->n = n;
  weft_task *t;
  int r = weft_runtime_submit(w->rt, NULL, weft_batch, w, &t);
  if (r == 0)
    r = weft_join(t, NULL);
  return r < 0 ? r : w->ns < 0 ? -EIO : 0;
}

static int start_side(struct weft_side *w, int64_t spin_ns)
{
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 1;
  if (spin_ns >= 0)
    cfg.spin_ns = spin_ns;
  if (pin_n == 2) {
    cfg.cpus = &pin_cpus[0];
    cfg.ncpus = 1;
  }
  w->fd = -1;
  return weft_runtime_start(&w->rt, &cfg);
}

static void stop_side(struct weft_side *w)
{
  if (!w->rt)
    return;
  if (w->fd >= 0)
    close(w->fd);
  weft_runtime_stop(w->rt);
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("echo", quick ? 60 : 300);
  int trips = quick ? 5000 : 50000;
  per_batch = trips / BATCHES;
  choose_cpus();
  pin_self(0); /* this thread is the plain client */
  pthread_t srv;
  if (start_server(&srv) < 0) {
    fprintf(stderr, "echo: cannot start the server\n");
    return 1;
  }
  int pfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (pfd < 0 || connect(pfd, (struct sockaddr *)&server_addr, sizeof(server_addr)) < 0) {
    fprintf(stderr, "echo: cannot connect\n");
    return 1;
  }
  nodelay(pfd);

  struct weft_side def = {0}, spin = {0};
  int r = start_side(&def, -1);
  if (r == 0)
    r = start_side(&spin, LONG_SPIN_NS);
  double ref[BATCHES], busy[BATCHES];
  /* Warm-up: a tenth of the trips each, not timed. */
  if (r == 0 && plain_batch(pfd, trips / 10, false) < 0)
    r = -EIO;
  if (r == 0)
    r = run_weft_batch(&def, trips / 10);
  if (r == 0)
    r = run_weft_batch(&spin, trips / 10);
  def.parks = def.enters = spin.parks = spin.enters = 0;
  for (int b = 0; b < BATCHES && r == 0; b++) {
    ref[b] = plain_batch(pfd, per_batch, false);
    busy[b] = plain_batch(pfd, per_batch, true);
    if (ref[b] < 0 || busy[b] < 0)
      r = -EIO;
    if (r == 0 && (r = run_weft_batch(&def, per_batch)) == 0)
      def.samples[b] = def.ns;
    if (r == 0 && (r = run_weft_batch(&spin, per_batch)) == 0)
      spin.samples[b] = spin.ns;
  }
  close(pfd);
  stop_side(&def);
  stop_side(&spin);
  shutdown(listen_fd, SHUT_RDWR); /* ends the server's accept */
  pthread_join(srv, NULL);
  close(listen_fd);
  if (bench_uring_missing(r)) {
    fprintf(stderr, "echo: io_uring is not available: %s\n", weft_strerror(r));
    return BENCH_SKIP;
  }
  if (r < 0) {
    fprintf(stderr, "echo: a run failed: %s\n", weft_strerror(r));
    return 1;
  }
  double n = (double)per_batch * BATCHES;
  double rv = bench_min(ref, BATCHES), dv = bench_min(def.samples, BATCHES);
  double sv = bench_min(spin.samples, BATCHES);
  bench_print("echo", "rtt_ns", dv, "blocking_client_rtt_ns", rv, dv / rv,
              ",\"median\":%.1f,\"ref_median\":%.1f,\"round_trips\":%d,\"shards\":1,"
              "\"pinned\":%s,\"parks_per_rtt\":%.3f,\"enters_per_rtt\":%.3f,"
              "\"spin_250us_rtt_ns\":%.1f,\"spin_250us_ratio\":%.3f,"
              "\"spin_250us_parks_per_rtt\":%.3f,\"busy_poll_client_rtt_ns\":%.1f,"
              "\"ratio_to_busy_poll\":%.3f",
              bench_median(def.samples, BATCHES), bench_median(ref, BATCHES),
              per_batch * BATCHES, pin_n == 2 ? "true" : "false", (double)def.parks / n,
              (double)def.enters / n, sv, sv / rv, (double)spin.parks / n,
              bench_min(busy, BATCHES), dv / bench_min(busy, BATCHES));
  return 0;
}
