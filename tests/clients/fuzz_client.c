/* SPDX-License-Identifier: MIT */
/*
 * fuzz_client: throws malformed input at http_server or kv_server, then
 * checks that the server still answers a valid request.
 *
 *   fuzz_client http|resp PORT [ITERATIONS] [SEED]     (default 2000, 1)
 *
 * Each iteration opens a connection and sends one case: a valid request
 * mutated (bytes flipped, inserted, deleted, cut short, repeated), random
 * bytes, or one of the nasty ones (huge lengths, negative lengths, bad RESP
 * types, oversized lines, NUL bytes). It then either shuts down its side and
 * reads the answer until the server closes (the answer must start like a
 * response of the protocol, and the server must close within the receive
 * timeout: a hung connection is a failure), or drops the connection at
 * once, sometimes with a reset. Deterministic for a given seed.
 */
#include "wire.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CASE_MAX (96 * 1024)

static uint64_t rng;

static uint64_t next(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static size_t below(size_t n)
{
  return n ? (size_t)(next() % n) : 0;
}

static const char *const http_seeds[] = {
  "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
  "GET /file/hello.txt HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
  "HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
  "POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
  "GET / HTTP/1.1\r\nContent-Length: 4\r\n\r\nbodyGET /nope HTTP/1.1\r\n\r\n",
  "GET /file/../../etc/passwd HTTP/1.1\r\nConnection: close\r\n\r\n",
  "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
  "GET / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
};

static const char *const resp_seeds[] = {
  "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n",
  "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n*1\r\n$4\r\nPING\r\n",
  "*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n",
  "*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n",
  "*2\r\n$4\r\nINCR\r\n$1\r\na\r\n*3\r\n$3\r\nDEL\r\n$1\r\na\r\n$1\r\nb\r\n",
  "PING\r\nSET x 1\r\nINCR x\r\nEXISTS x y\r\n",
  "*1\r\n$2147483648\r\n",
  "*-1\r\n*0\r\n*2\r\n$-1\r\n$0\r\n\r\n",
  "+OK\r\n-ERR x\r\n:12\r\n$3\r\nabc\r\n",
  "*1\r\n*1\r\n$4\r\nPING\r\n",
  "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\nabc",
  "*9223372036854775807\r\n",
};

/* Fills out with one case; returns its length. */
static size_t make_case(bool http, char *out)
{
  const char *const *seeds = http ? http_seeds : resp_seeds;
  size_t nseeds = http ? sizeof(http_seeds) / sizeof(*http_seeds)
                       : sizeof(resp_seeds) / sizeof(*resp_seeds);
  size_t n = 0;
  switch (below(8)) {
  case 0: /* random bytes, printable or not */
    n = 1 + below(2048);
    for (size_t i = 0; i < n; i++)
      out[i] = below(2) ? (char)next() : " \r\n:*$+-0123456789GETSPOHTP/"[below(28)];
    return n;
  case 1: { /* one long line (past every line limit) */
    n = 8000 + below(CASE_MAX - 8100);
    memset(out, http ? 'a' : '*', n);
    if (!http)
      out[0] = below(2) ? '*' : '$';
    memcpy(out + n, "\r\n\r\n", 4);
    return n + 4;
  }
  default:
    break;
  }
  /* A few seeds back to back, then mutations. */
  for (int k = 1 + (int)below(3); k > 0; k--) {
    const char *s = seeds[below(nseeds)];
    size_t l = strlen(s);
    memcpy(out + n, s, l);
    n += l;
  }
  for (int m = (int)below(4); m > 0 && n > 0; m--) {
    size_t at = below(n);
    switch (below(6)) {
    case 0: out[at] = (char)next(); break;                        /* flip a byte */
    case 1: out[at] = "\r\n\0 :$*-9"[below(9)]; break;            /* a structural byte */
    case 2: memmove(out + at, out + at + 1, n - at - 1); n--; break; /* delete */
    case 3:                                                       /* insert digits */
      if (n + 12 < CASE_MAX) {
        memmove(out + at + 12, out + at, n - at);
        memcpy(out + at, "999999999999", 12);
        n += 12;
      }
      break;
    case 4: n = at; break;                                        /* cut short */
    case 5:                                                       /* repeat a piece */
      if (2 * n < CASE_MAX) {
        memcpy(out + n, out + at, n - at);
        n += n - at;
      }
      break;
    }
  }
  return n;
}

/* The answer, if any, must start like one of the protocol's. */
static bool plausible(bool http, const char *buf, size_t n)
{
  if (n == 0)
    return true;
  if (http)
    return n >= 9 ? memcmp(buf, "HTTP/1.1 ", 9) == 0 : memcmp(buf, "HTTP/1.1 ", n) == 0;
  return strchr("+-:$*", buf[0]) != NULL && buf[0];
}

static int run_case(bool http, const char *port, const char *c, size_t n, char *buf, size_t cap)
{
  int fd = wire_connect(port, 20000);
  if (fd < 0)
    return -1;
  int mode = (int)below(10);
  if (mode == 0) {
    /* Send a prefix and reset the connection. */
    wire_send(fd, c, below(n + 1));
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    return 0;
  }
  if (mode == 1) {
    wire_send(fd, c, n); /* and go away without reading */
    close(fd);
    return 0;
  }
  /* Sometimes in two pieces, to split tokens across reads. */
  size_t cut = mode == 2 ? below(n + 1) : n;
  wire_send(fd, c, cut);
  if (cut < n) {
    usleep(1000);
    wire_send(fd, c + cut, n - cut);
  }
  shutdown(fd, SHUT_WR);
  bool timed_out;
  size_t got = wire_read_all(fd, buf, cap, &timed_out);
  close(fd);
  if (timed_out) {
    fprintf(stderr, "fuzz_client: the server did not close the connection\n");
    return -1;
  }
  if (!plausible(http, buf, got)) {
    fprintf(stderr, "fuzz_client: implausible answer \"%.40s\"\n", buf);
    return -1;
  }
  return 0;
}

/* After the storm: one valid request must get the right answer. */
static int final_check(bool http, const char *port, char *buf, size_t cap)
{
  const char *req = http ? "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                         : "*3\r\n$3\r\nSET\r\n$5\r\nfinal\r\n$2\r\nok\r\n"
                           "*2\r\n$3\r\nGET\r\n$5\r\nfinal\r\nPING\r\n";
  const char *want = http ? "Hello, World!\n" : "+OK\r\n$2\r\nok\r\n+PONG\r\n";
  ssize_t n = wire_exchange(port, req, strlen(req), buf, cap - 1, false);
  if (n < 0)
    return -1;
  buf[n] = '\0';
  bool ok = http ? strncmp(buf, "HTTP/1.1 200 ", 13) == 0 && strstr(buf, "\r\n\r\n") &&
                       strcmp(strstr(buf, "\r\n\r\n") + 4, want) == 0
                 : strcmp(buf, want) == 0;
  if (!ok)
    fprintf(stderr, "fuzz_client: final check: got \"%.80s\"\n", buf);
  return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
  if (argc < 3 || argc > 5 || (strcmp(argv[1], "http") && strcmp(argv[1], "resp"))) {
    fprintf(stderr, "usage: %s http|resp PORT [ITERATIONS] [SEED]\n", argv[0]);
    return 2;
  }
  bool http = strcmp(argv[1], "http") == 0;
  long iters = argc > 3 ? atol(argv[3]) : 2000;
  rng = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
  rng = rng * 0x9e3779b97f4a7c15ull | 1;
  static char c[CASE_MAX + 16], buf[1 << 20];
  for (long i = 0; i < iters; i++) {
    size_t n = make_case(http, c);
    if (run_case(http, argv[2], c, n, buf, sizeof(buf)) < 0) {
      fprintf(stderr, "fuzz_client: case %ld failed (%zu bytes: \"%.60s\")\n", i, n, c);
      return 1;
    }
  }
  if (final_check(http, argv[2], buf, sizeof(buf)) < 0)
    return 1;
  printf("fuzz_client: %ld %s cases, the server still answers\n", iters, argv[1]);
  return 0;
}
