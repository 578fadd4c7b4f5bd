/* SPDX-License-Identifier: MIT */
/*
 * ws_echo: a WebSocket echo server. Every connection is upgraded with
 * weft_ws_accept_opts - agreeing on the subprotocol "echo.v1" when the
 * client offers it, going on without one otherwise - and each message sent
 * back as it came, text as text and binary as binary, up to 16 MiB; a close
 * from the client is answered and ends the connection.
 *
 *   ws_echo [--host H] [--port N] [--shards N]
 *
 * Try it with any WebSocket client on ws://127.0.0.1:PORT/ (tests/clients
 * drives it with Python's websockets library). Prints "listening on PORT",
 * stops on SIGINT/SIGTERM (serve.c, shared with the other example servers).
 */
#include <weft.h>

#include "serve.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_MESSAGE (16u << 20)
#define HANDSHAKE_TIMEOUT (10 * WEFT_SEC)

static void *ws_conn(void *arg)
{
  int fd = (int)(intptr_t)arg;
  static const char *const protocols[] = {"echo.v1", NULL};
  const weft_ws_opts opts = {.protocols = protocols};
  weft_ws *ws;
  int r = weft_ws_accept_opts(&ws, fd, &opts, weft_now() + HANDSHAKE_TIMEOUT);
  char *msg = r == 0 ? malloc(MAX_MESSAGE) : NULL;
  if (r == 0 && !msg)
    weft_ws_close(ws, 1011, "out of memory", weft_now() + WEFT_SEC);
  for (;;) {
    if (!msg)
      break;
    int type;
    ssize_t n = weft_ws_recv(ws, msg, MAX_MESSAGE, &type, WEFT_NO_DEADLINE);
    if (n < 0 || type == WEFT_WS_CLOSE)
      break; /* a close was answered; an error was reported to the peer */
    if (weft_ws_send(ws, type, msg, (size_t)n, WEFT_NO_DEADLINE) < 0)
      break;
  }
  free(msg);
  if (r == 0)
    weft_ws_free(ws);
  weft_close(fd);
  return NULL;
}

int main(int argc, char **argv)
{
  struct serve s = {.name = "ws_echo", .conn_name = "ws-conn", .conn = ws_conn};
  int r = serve_parse(&s, argc, argv, NULL, NULL, NULL);
  return r ? r : serve_run(&s);
}
