/* SPDX-License-Identifier: MIT */
/*
 * echo_client: a load generator for echo_server (or any TCP echo server).
 *
 *   echo_client [--host H] [--port N] [--conns N] [--msgs N] [--size N] [--shards N]
 *
 * Opens --conns connections (default 16), each a coroutine that sends --msgs
 * messages (default 1000) of --size bytes (default 256) one at a time and
 * waits for each echo, checking it byte for byte. Prints the round trips per
 * second over the whole run and the p50/p99 round-trip latency:
 *
 *   echo_client: 16 conns x 1000 msgs x 256 B: 16000 round trips in 0.21 s,
 *   76190 round trips/s, p50 180.2 us, p99 610.9 us
 *
 * Exits 0 when every round trip came back intact, 1 otherwise, 77 when
 * io_uring is not available.
 *
 * What it shows: a client is the same blocking-looking code as a server -
 * weft_tcp_connect (name resolution on the blocking pool), weft_send_all and
 * weft_recv_exact - with the connections dealt round-robin over the shards
 * and joined by the main coroutine.
 */
#include <weft.h>

#include "args.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct client {
  const char *host, *port;
  int conns;
  long msgs;
  size_t size;
  int64_t *lat;          /* conns x msgs round-trip times, ns */
  atomic_int failed;     /* connections that did not finish */
};

struct conn_arg {
  struct client *cl;
  int idx;
};

/* Message m of connection idx: a pattern that differs per message, so that
 * an echo of the wrong message is caught. */
static void fill(unsigned char *p, size_t n, int idx, long m)
{
  uint32_t x = (uint32_t)idx * 2654435761u ^ (uint32_t)m * 40503u;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = (unsigned char)(x >> 24);
  }
}

static int conn_fail(struct client *cl, int idx, const char *what, long r)
{
  fprintf(stderr, "echo_client: connection %d: %s: %s\n", idx, what, weft_strerror((int)r));
  atomic_fetch_add(&cl->failed, 1);
  return -1;
}

static int conn_run(struct client *cl, int idx, unsigned char *out, unsigned char *in)
{
  int fd = weft_tcp_connect_dl(cl->host, cl->port, weft_now() + 10 * WEFT_SEC);
  if (fd < 0)
    return conn_fail(cl, idx, "connect", fd);
  int one = 1;
  weft_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc = 0;
  for (long m = 0; m < cl->msgs; m++) {
    fill(out, cl->size, idx, m);
    int64_t t0 = weft_now();
    ssize_t r = weft_send_all(fd, out, cl->size, NULL);
    if (r < 0) {
      rc = conn_fail(cl, idx, "send", r);
      break;
    }
    r = weft_recv_exact(fd, in, cl->size, NULL);
    if (r != (ssize_t)cl->size) {
      rc = conn_fail(cl, idx, "recv", r == 0 ? -EPIPE : r);
      break;
    }
    cl->lat[(size_t)idx * (size_t)cl->msgs + (size_t)m] = weft_now() - t0;
    if (memcmp(out, in, cl->size) != 0) {
      rc = conn_fail(cl, idx, "echo differs from what was sent", -EPROTO);
      break;
    }
  }
  weft_close(fd);
  return rc;
}

static void *conn_main(void *arg)
{
  struct conn_arg *a = arg;
  unsigned char *out = malloc(a->cl->size ? a->cl->size : 1);
  unsigned char *in = malloc(a->cl->size ? a->cl->size : 1);
  if (!out || !in)
    conn_fail(a->cl, a->idx, "buffers", -ENOMEM);
  else
    conn_run(a->cl, a->idx, out, in);
  free(out);
  free(in);
  return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void *client_main(void *arg)
{
  struct client *cl = arg;
  weft_task **tasks = calloc((size_t)cl->conns, sizeof(*tasks));
  struct conn_arg *args = calloc((size_t)cl->conns, sizeof(*args));
  if (!tasks || !args) {
    free(tasks);
    free(args);
    return (void *)1;
  }
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  int64_t t0 = weft_now();
  int spawned = 0;
  for (; spawned < cl->conns; spawned++) {
    args[spawned] = (struct conn_arg){cl, spawned};
    int r = weft_spawn(&tasks[spawned], &o, conn_main, &args[spawned]);
    if (r < 0) {
      fprintf(stderr, "echo_client: spawn: %s\n", weft_strerror(r));
      atomic_fetch_add(&cl->failed, cl->conns - spawned);
      break;
    }
  }
  for (int i = 0; i < spawned; i++)
    weft_join(tasks[i], NULL);
  int64_t elapsed = weft_now() - t0;
  free(tasks);
  free(args);

  int failed = atomic_load(&cl->failed);
  size_t n = (size_t)cl->conns * (size_t)cl->msgs;
  if (failed) {
    fprintf(stderr, "echo_client: %d of %d connections failed\n", failed, cl->conns);
    return (void *)1;
  }
  qsort(cl->lat, n, sizeof(*cl->lat), cmp_i64);
  double secs = (double)elapsed / 1e9;
  printf("echo_client: %d conns x %ld msgs x %zu B: %zu round trips in %.2f s, "
         "%.0f round trips/s, p50 %.1f us, p99 %.1f us\n",
         cl->conns, cl->msgs, cl->size, n, secs, secs > 0 ? (double)n / secs : 0.0,
         n ? (double)cl->lat[n / 2] / 1e3 : 0.0,
         n ? (double)cl->lat[n - 1 - n / 100] / 1e3 : 0.0);
  return NULL;
}

static int usage(const char *argv0)
{
  fprintf(stderr,
          "usage: %s [--host H] [--port N] [--conns N] [--msgs N] [--size N] [--shards N]\n",
          argv0);
  return 2;
}

int main(int argc, char **argv)
{
  struct client cl = {.host = "127.0.0.1", .port = "7", .conns = 16, .msgs = 1000, .size = 256};
  int shards = 0;
  static const struct option longopts[] = {
    {"host", required_argument, NULL, 'h'},
    {"port", required_argument, NULL, 'p'},
    {"conns", required_argument, NULL, 'c'},
    {"msgs", required_argument, NULL, 'm'},
    {"size", required_argument, NULL, 'z'},
    {"shards", required_argument, NULL, 's'},
    {NULL, 0, NULL, 0},
  };
  long long conns = cl.conns, msgs = cl.msgs, size = (long long)cl.size, nshards = shards;
  bool ok = true;
  int c;
  while (ok && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'h': cl.host = optarg; break;
    case 'p': cl.port = optarg; break;
    case 'c': ok = arg_number(optarg, 1, 100000, &conns); break;
    case 'm': ok = arg_number(optarg, 1, 100000000, &msgs); break;
    case 'z': ok = arg_number(optarg, 1, 64 << 20, &size); break;
    case 's': ok = arg_number(optarg, 0, WEFT_MAX_SHARDS, &nshards); break;
    default: return usage(argv[0]);
    }
  }
  if (!ok)
    return usage(argv[0]);
  cl.conns = (int)conns;
  cl.msgs = (long)msgs;
  cl.size = (size_t)size;
  shards = (int)nshards;
  /* Bounds that keep the latency table (8 bytes per round trip) sane. */
  if (optind != argc || cl.conns < 1 || cl.conns > 100000 || cl.msgs < 1 ||
      (double)cl.conns * (double)cl.msgs > 1e8 || cl.size < 1 || cl.size > (64u << 20) ||
      shards < 0 || shards > WEFT_MAX_SHARDS)
    return usage(argv[0]);
  cl.lat = calloc((size_t)cl.conns * (size_t)cl.msgs, sizeof(*cl.lat));
  if (!cl.lat) {
    fprintf(stderr, "echo_client: out of memory\n");
    return 1;
  }

  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = shards;
  void *ret = NULL;
  int r = weft_run(&cfg, client_main, &cl, &ret);
  free(cl.lat);
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "echo_client: io_uring is not available here (%s)\n", weft_strerror(r));
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "echo_client: weft_run: %s\n", weft_strerror(r));
    return 1;
  }
  return ret == NULL ? 0 : 1;
}
