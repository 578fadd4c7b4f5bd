/* SPDX-License-Identifier: MIT */
#include "wire.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int wire_connect(const char *port, int timeout_ms)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    perror("socket");
    return -1;
  }
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
    perror("connect");
    close(fd);
    return -1;
  }
  return fd;
}

int wire_send(int fd, const void *p, size_t n)
{
  const char *s = p;
  while (n > 0) {
    ssize_t r = send(fd, s, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    s += r;
    n -= (size_t)r;
  }
  return 0;
}

size_t wire_read_all(int fd, char *buf, size_t cap, bool *timed_out)
{
  size_t got = 0;
  *timed_out = false;
  while (got < cap) {
    ssize_t r = recv(fd, buf + got, cap - got, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      *timed_out = true;
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  return got;
}

ssize_t wire_exchange(const char *port, const void *req, size_t n, char *buf, size_t cap,
                      bool keep_open)
{
  int fd = wire_connect(port, 20000);
  if (fd < 0)
    return -1;
  /* A send error is not fatal: the server may answer and close before
   * reading everything (an error answer); what it sent is still read. */
  wire_send(fd, req, n);
  if (!keep_open)
    shutdown(fd, SHUT_WR);
  bool timed_out;
  size_t got = wire_read_all(fd, buf, cap, &timed_out);
  close(fd);
  if (timed_out) {
    fprintf(stderr, "timed out waiting for the server to close (got %zu bytes)\n", got);
    return -1;
  }
  return (ssize_t)got;
}
