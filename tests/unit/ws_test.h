/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the websocket suites: a socketpair, and the raw side of a
 * connection, played by the test byte by byte.
 */
#ifndef WEFT_TESTS_WS_TEST_H
#define WEFT_TESTS_WS_TEST_H

#include "io_helpers.h"
#include "ws_internal.h"

#include <sys/socket.h>

static inline void pair(int sv[2])
{
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static inline void raw_send(int fd, const void *p, size_t n)
{
  CO_EQ(weft_send_all(fd, p, n, NULL), (ssize_t)n);
}

/* Reads exactly n raw bytes. */
static inline void raw_recv(int fd, void *p, size_t n)
{
  CO_EQ(weft_recv_exact(fd, p, n, NULL), (ssize_t)n);
}

/* Reads the raw HTTP head the other side wrote (through the blank line). */
static inline void raw_head(int fd, char *buf, size_t cap)
{
  size_t n = 0;
  while (n + 1 < cap) {
    CO_EQ(weft_recv(fd, buf + n, 1, 0), 1);
    n++;
    if (n >= 4 && memcmp(buf + n - 4, "\r\n\r\n", 4) == 0)
      break;
  }
  buf[n] = '\0';
}

/* A weft client (weft_ws_connect_opts with o, NULL for the plain
 * handshake) to a server the test plays, in a task: host
 * server.example.com, path /chat. */
struct connecting {
  int fd;
  const weft_ws_opts *o;
  int r;
  weft_ws *ws;
};

static inline void *connect_task(void *arg)
{
  struct connecting *c = arg;
  c->r = weft_ws_connect_opts(&c->ws, c->fd, "server.example.com", "/chat", c->o,
                              weft_now() + 5 * WEFT_SEC);
  return NULL;
}

#endif
