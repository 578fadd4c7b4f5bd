/* SPDX-License-Identifier: MIT */
/*
 * ws_client: a WebSocket client that checks an echo service, such as ws_echo.
 *
 *   ws_client URL [--conns N] [--msgs N] [--size N] [--protocol P]... [--header H]...
 *
 * Dials URL (ws://host[:port][/path]) --conns times at once (default 4),
 * each connection a coroutine that sends --msgs messages (default 100) of
 * --size bytes (default 1000), text and binary in turn, and checks each echo
 * byte for byte; then closes with status 1000. --protocol offers a
 * subprotocol (repeat it for more, in order of preference), --header adds a
 * request header ("Origin: https://example.com"). Prints what was agreed and
 * how it went:
 *
 *   ws_client: 4 conns x 100 msgs x 1000 B, subprotocol "echo.v1": ok
 *
 * Exits 0 when every echo came back intact and every close was answered,
 * 1 otherwise, 2 for bad arguments, 77 when io_uring is not available.
 *
 * What it shows: weft_ws_dial (resolve, connect and the opening handshake
 * from a URL), options of the handshake, and whole messages in and out from
 * blocking-looking code.
 */
#include <weft.h>

#include "args.h"

#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 16

struct client {
  const char *url;
  int conns;
  long msgs;
  size_t size;
  const char *protocols[MAX_LIST + 1]; /* NULL-terminated */
  const char *headers[MAX_LIST + 1];
  atomic_int failed;                   /* connections that did not finish */
  char agreed[64];                     /* the first connection's subprotocol */
};

struct conn_arg {
  struct client *cl;
  int idx;
};

/* Message m of connection idx: text is printable ASCII, binary any byte,
 * and each message differs, so that an echo of the wrong one is caught. */
static void fill(unsigned char *p, size_t n, int idx, long m, bool text)
{
  uint32_t x = (uint32_t)idx * 2654435761u ^ (uint32_t)m * 40503u;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = text ? (unsigned char)(' ' + (x >> 24) % 95) : (unsigned char)(x >> 24);
  }
}

static void *conn_main(void *arg)
{
  struct conn_arg *a = arg;
  struct client *cl = a->cl;
  unsigned char *out = malloc(cl->size ? cl->size : 1), *in = malloc(cl->size + 1);
  weft_ws_opts o = {.protocols = cl->protocols, .headers = cl->headers};
  weft_ws *ws = NULL;
  int fd = -1;
  int r = out && in ? weft_ws_dial(&ws, &fd, cl->url, &o, weft_now() + 10 * WEFT_SEC) : -ENOMEM;
  if (r < 0) {
    fprintf(stderr, "ws_client: connection %d: %s\n", a->idx, weft_strerror(r));
    goto out;
  }
  if (a->idx == 0)
    snprintf(cl->agreed, sizeof(cl->agreed), "%s", weft_ws_protocol(ws));
  for (long m = 0; m < cl->msgs; m++) {
    int type = m % 2 ? WEFT_WS_BINARY : WEFT_WS_TEXT;
    fill(out, cl->size, a->idx, m, type == WEFT_WS_TEXT);
    if ((r = weft_ws_send(ws, type, out, cl->size, WEFT_NO_DEADLINE)) < 0) {
      fprintf(stderr, "ws_client: connection %d: send: %s\n", a->idx, weft_strerror(r));
      goto out;
    }
    int got_type = 0;
    ssize_t n = weft_ws_recv(ws, in, cl->size + 1, &got_type, weft_now() + 10 * WEFT_SEC);
    if (n != (ssize_t)cl->size || got_type != type || memcmp(in, out, cl->size) != 0) {
      fprintf(stderr, "ws_client: connection %d: message %ld came back wrong (%s)\n", a->idx, m,
              n < 0 ? weft_strerror((int)n) : "content");
      r = -EPROTO;
      goto out;
    }
  }
  r = weft_ws_close(ws, 1000, "done", weft_now() + 10 * WEFT_SEC);
  if (r < 0)
    fprintf(stderr, "ws_client: connection %d: close: %s\n", a->idx, weft_strerror(r));
out:
  if (r < 0)
    atomic_fetch_add(&cl->failed, 1);
  weft_ws_free(ws);
  if (fd >= 0)
    weft_close(fd);
  free(out);
  free(in);
  return NULL;
}

static void *client_main(void *arg)
{
  struct client *cl = arg;
  weft_task **t = calloc((size_t)cl->conns, sizeof(*t));
  struct conn_arg *a = calloc((size_t)cl->conns, sizeof(*a));
  if (!t || !a) {
    atomic_store(&cl->failed, cl->conns);
    free(t);
    free(a);
    return NULL;
  }
  for (int i = 0; i < cl->conns; i++) {
    a[i] = (struct conn_arg){.cl = cl, .idx = i};
    weft_spawn_opts o;
    weft_spawn_opts_init(&o);
    o.placement = WEFT_PLACE_ROUND_ROBIN;
    if (weft_spawn(&t[i], &o, conn_main, &a[i]) < 0) {
      t[i] = NULL;
      atomic_fetch_add(&cl->failed, 1);
    }
  }
  for (int i = 0; i < cl->conns; i++)
    if (t[i])
      weft_join(t[i], NULL);
  free(t);
  free(a);
  return NULL;
}

static int usage(void)
{
  fprintf(stderr, "usage: ws_client URL [--conns N] [--msgs N] [--size N] [--protocol P]... "
                  "[--header 'Name: value']...\n");
  return 2;
}

int main(int argc, char **argv)
{
  struct client cl = {.conns = 4, .msgs = 100, .size = 1000};
  int np = 0, nh = 0;
  static const struct option longs[] = {
      {"conns", required_argument, NULL, 'c'},    {"msgs", required_argument, NULL, 'm'},
      {"size", required_argument, NULL, 's'},     {"protocol", required_argument, NULL, 'p'},
      {"header", required_argument, NULL, 'H'},   {NULL, 0, NULL, 0}};
  long long conns = cl.conns, msgs = cl.msgs, size = (long long)cl.size;
  bool ok = true;
  for (int c; ok && (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    switch (c) {
    case 'c': ok = arg_number(optarg, 1, 100000, &conns); break;
    case 'm': ok = arg_number(optarg, 0, 100000000, &msgs); break;
    case 's': ok = arg_number(optarg, 0, 16 << 20, &size); break;
    case 'p':
      if (np == MAX_LIST)
        return usage();
      cl.protocols[np++] = optarg;
      break;
    case 'H':
      if (nh == MAX_LIST)
        return usage();
      cl.headers[nh++] = optarg;
      break;
    default: return usage();
    }
  }
  if (!ok || optind != argc - 1)
    return usage();
  cl.conns = (int)conns;
  cl.msgs = (long)msgs;
  cl.size = (size_t)size;
  cl.url = argv[optind];
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  int r = weft_run(&cfg, client_main, &cl, NULL);
  if (r == -ENOSYS || r == -EPERM)
    return 77;
  if (r < 0) {
    fprintf(stderr, "ws_client: weft_run: %s\n", weft_strerror(r));
    return 1;
  }
  int failed = atomic_load(&cl.failed);
  printf("ws_client: %d conns x %ld msgs x %zu B, subprotocol \"%s\": %s\n", cl.conns, cl.msgs,
         cl.size, cl.agreed, failed ? "FAILED" : "ok");
  if (failed)
    fprintf(stderr, "ws_client: %d of %d connections failed\n", failed, cl.conns);
  return failed ? 1 : 0;
}
