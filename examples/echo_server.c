/* SPDX-License-Identifier: MIT */
/*
 * echo_server: a TCP echo server written like a thread-per-connection
 * server - accept, spawn, and a plain read/write loop per connection - where
 * every "thread" is a weft coroutine and every blocking call one io_uring
 * operation.
 *
 *   echo_server [--host H] [--port N] [--shards N]
 *
 * --port 0 (the default) takes any free port; the port is printed as
 * "listening on PORT". --shards 0 (the default) = one shard per CPU.
 * SIGINT or SIGTERM stops it cleanly (exit 0). Try it with echo_client.
 *
 * What it shows: the server itself is one function - a plain read/write
 * loop per connection. Listening, the accept loop on a multishot
 * weft_listener, the round-robin placement of connections and the clean
 * stop on SIGINT/SIGTERM are in serve.c, shared with http_server and
 * kv_server (serve.h says how the stop works and why round-robin).
 */
#include <weft.h>

#include "serve.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stddef.h>

/* One connection: echo until the peer closes, an error, or cancellation. */
static void *echo_conn(void *arg)
{
  int fd = (int)(intptr_t)arg;
  char buf[16384];
  int one = 1;
  weft_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  for (;;) {
    ssize_t n = weft_recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      break;
    if (weft_send_all(fd, buf, (size_t)n, NULL) < 0)
      break;
  }
  weft_close(fd);
  return NULL;
}

int main(int argc, char **argv)
{
  struct serve s = {.name = "echo_server", .conn_name = "echo-conn", .conn = echo_conn};
  int r = serve_parse(&s, argc, argv, NULL, NULL, NULL);
  return r ? r : serve_run(&s);
}
