/* SPDX-License-Identifier: MIT */
/*
 * ported_echo: a thread-per-connection echo server ported to weft without
 * touching its connection code. serve_conn() below is what the threaded
 * server ran per connection - plain read(2), write(2) and close(2), errno
 * and all; it does not include weft.h. The port consists of the spawn
 * (serve.c starts one coroutine per connection where the old server called
 * pthread_create) and of linking libweft-hook, which makes those read and
 * write calls suspend the coroutine instead of blocking the shard's thread.
 *
 *   ported_echo [--host H] [--port N] [--shards N]
 *
 * As echo_server: prints "listening on PORT", stops on SIGINT/SIGTERM.
 * serve_conn reads errno after its calls, so its coroutine must not change
 * threads inside it: connections are spawned round-robin (serve.c), and the
 * hook pins a coroutine to its shard at its first hooked call anyway.
 */
#include <weft.h>

#include "serve.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* ---- the connection code, as it was ------------------------------------------------ */

static int write_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void serve_conn(int fd)
{
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || write_all(fd, buf, (size_t)n) < 0)
      break;
  }
  close(fd);
}

/* ---- the port ---------------------------------------------------------------------------- */

static void *conn_main(void *arg)
{
  serve_conn((int)(intptr_t)arg);
  return NULL;
}

int main(int argc, char **argv)
{
  struct serve s = {.name = "ported_echo", .conn_name = "ported-conn", .conn = conn_main};
  int r = serve_parse(&s, argc, argv, NULL, NULL, NULL);
  return r ? r : serve_run(&s);
}
