/* SPDX-License-Identifier: MIT */
/*
 * http_check: protocol checks against a running http_server, over plain
 * sockets: pipelining, keep-alive and close rules, every error status, size
 * limits, the idle timeout. The server must serve a --dir holding hello.txt
 * = "hello file\n" and run with a short --idle-ms (the idle check waits for
 * it, bounded by a 20 s receive timeout), and big.bin of 32 MiB for a slow
 * download. With "patient", against a server with an --idle-ms of 20 s,
 * it checks what must be answered long before that.
 *
 *   http_check PORT [patient]   exit 0 pass, 1 fail
 */
#include "wire.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define CAP (1 << 20)

static int failures;
static const char *port;
static char buf[CAP];

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      failures++;                                                         \
      fprintf(stderr, "FAIL %s:%d (%s): ", __func__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
    }                                                                     \
  } while (0)

struct response {
  int status;
  long long clen;        /* -1: none */
  bool close;            /* Connection: close */
  bool keep_alive;       /* Connection: keep-alive */
  bool allow;            /* an Allow header */
  const char *body;
  size_t blen;
};

/* Parses the response at buf[*pos..len) (no body if head_only). 0 or -1. */
static int next_response(size_t len, size_t *pos, bool head_only, struct response *r)
{
  const char *p = buf + *pos;
  size_t n = len - *pos;
  const char *end = memmem(p, n, "\r\n\r\n", 4);
  *r = (struct response){.clen = -1};
  if (!end || n < 12 || strncmp(p, "HTTP/1.1 ", 9) != 0)
    return -1;
  r->status = atoi(p + 9);
  for (const char *l = strstr(p, "\r\n") + 2; l < end; l = strstr(l, "\r\n") + 2) {
    if (strncasecmp(l, "Content-Length:", 15) == 0)
      r->clen = atoll(l + 15);
    else if (strncasecmp(l, "Connection: close\r", 18) == 0)
      r->close = true;
    else if (strncasecmp(l, "Connection: keep-alive\r", 23) == 0)
      r->keep_alive = true;
    else if (strncasecmp(l, "Allow:", 6) == 0)
      r->allow = true;
  }
  size_t hl = (size_t)(end + 4 - p);
  if (r->clen < 0)
    return -1;
  if (head_only) {
    *pos += hl;
    return 0;
  }
  if (hl + (size_t)r->clen > n)
    return -1;
  r->body = p + hl;
  r->blen = (size_t)r->clen;
  *pos += hl + (size_t)r->clen;
  return 0;
}

/* Sends req (then end of file) and checks that the answers are exactly the
 * statuses `want` (n of them, bit i of `heads` set for a HEAD), in order,
 * followed by the server closing. The responses are stored in out. */
static void exchange(const char *req, size_t reqlen, const int *want, int n, unsigned heads,
                     struct response *out)
{
  ssize_t len = wire_exchange(port, req, reqlen, buf, sizeof(buf), false);
  CHECK(len >= 0, "exchange failed for %.40s", req);
  if (len < 0)
    return;
  size_t pos = 0;
  for (int i = 0; i < n; i++) {
    struct response r;
    int rc = next_response((size_t)len, &pos, heads >> i & 1, &r);
    CHECK(rc == 0, "response %d to %.40s is missing or malformed", i, req);
    if (rc)
      return;
    CHECK(r.status == want[i], "response %d to %.40s: status %d, want %d", i, req, r.status,
          want[i]);
    if (out)
      out[i] = r;
  }
  CHECK(pos == (size_t)len, "%zu extra bytes after the answers to %.40s", (size_t)len - pos, req);
}

static void one(const char *req, int status)
{
  exchange(req, strlen(req), &status, 1, 0, NULL);
}

static void check_basics(void)
{
  struct response r[4];
  int ok = 200;
  exchange("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, &ok, 1, 0, r);
  CHECK(r[0].blen == 14 && memcmp(r[0].body, "Hello, World!\n", 14) == 0, "body of /");
  exchange("GET /file/hello.txt HTTP/1.1\r\n\r\n", 32, &ok, 1, 0, r);
  CHECK(r[0].blen == 11 && memcmp(r[0].body, "hello file\n", 11) == 0, "body of hello.txt");
  exchange("HEAD / HTTP/1.1\r\n\r\n", 19, &ok, 1, 1, r);
  CHECK(r[0].clen == 14, "HEAD Content-Length %lld", r[0].clen);
  one("GET /?q=1 HTTP/1.1\r\n\r\n", 200);
  one("\r\nGET / HTTP/1.1\r\n\r\n", 200);      /* an empty line before the request */
  one("GET / HTTP/1.1\nHost: x\n\n", 200);     /* bare LF line ends */
  one("GET /nope HTTP/1.1\r\n\r\n", 404);
  one("GET /file/missing HTTP/1.1\r\n\r\n", 404);
  one("GET /file/ HTTP/1.1\r\n\r\n", 404);
  one("GET /file/../hello.txt HTTP/1.1\r\n\r\n", 400);
  one("GET /file/a..b HTTP/1.1\r\n\r\n", 400);
  one("GET /file/sub/x HTTP/1.1\r\n\r\n", 400);
}

static void check_pipelining(void)
{
  static const char req[] = "GET / HTTP/1.1\r\n\r\n"
                            "GET /nope HTTP/1.1\r\n\r\n"
                            "HEAD / HTTP/1.1\r\n\r\n"
                            "GET /file/hello.txt HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                            "GET / HTTP/1.1\r\n\r\n";
  const int want[] = {200, 404, 200, 200, 200};
  struct response r[5];
  exchange(req, sizeof(req) - 1, want, 5, 1u << 2, r);
  CHECK(r[3].blen == 11 && memcmp(r[3].body, "hello file\n", 11) == 0, "pipelined file body");
}

static void check_connection_rules(void)
{
  struct response r[2];
  int ok = 200;
  const int two[] = {200, 200};
  /* HTTP/1.1 "Connection: close": one answer, then the server closes even
   * though a second request follows. */
  static const char close11[] = "GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n";
  exchange(close11, sizeof(close11) - 1, &ok, 1, 0, r);
  CHECK(r[0].close, "no Connection: close in the answer");
  /* HTTP/1.0: closed after one answer, unless keep-alive is asked for. */
  static const char plain10[] = "GET / HTTP/1.0\r\n\r\nGET / HTTP/1.0\r\n\r\n";
  exchange(plain10, sizeof(plain10) - 1, &ok, 1, 0, r);
  CHECK(r[0].close, "HTTP/1.0 answer without Connection: close");
  static const char ka10[] = "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n";
  exchange(ka10, sizeof(ka10) - 1, two, 2, 0, r);
  CHECK(r[0].keep_alive && r[1].close, "HTTP/1.0 keep-alive headers");
}

static void check_errors(void)
{
  struct response r;
  int st = 405;
  exchange("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 41, &st, 1, 0, &r);
  CHECK(r.allow && r.close, "405 without Allow or Connection: close");
  one("GET /\r\n\r\n", 400);                         /* no version */
  one("GET\r\n\r\n", 400);
  one("garbage\r\n\r\n", 400);
  one("GET  / HTTP/1.1\r\n\r\n", 400);
  one("G(T / HTTP/1.1\r\n\r\n", 400);
  one("GET http://x/ HTTP/1.1\r\n\r\n", 400);
  one("GET / HTTP/2.0\r\n\r\n", 505);
  one("GET / FTP/1.1\r\n\r\n", 400);
  one("GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400);
  one("GET / HTTP/1.1\r\n folded: x\r\n\r\n", 400);
  one("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
  one("GET / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400);
  one("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400);
  one("GET / HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", 413);
  one("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501);
  static const char nul[] = "GET /\0 HTTP/1.1\r\n\r\n";
  int bad = 400;
  exchange(nul, sizeof(nul) - 1, &bad, 1, 0, NULL);

  /* One header line over 8 KiB, and a section over 8 KiB in short lines. */
  static char big[40000];
  int n = snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nX-Big: ");
  memset(big + n, 'a', 9000);
  strcpy(big + n + 9000, "\r\n\r\n");
  one(big, 431);
  n = snprintf(big, sizeof(big), "GET / HTTP/1.1\r\n");
  for (int i = 0; i < 90; i++)
    n += snprintf(big + n, sizeof(big) - (size_t)n, "X-H%02d: %0100d\r\n", i, i);
  strcpy(big + n, "\r\n");
  one(big, 431);
  /* Too many (short) header lines. */
  n = snprintf(big, sizeof(big), "GET / HTTP/1.1\r\n");
  for (int i = 0; i < 150; i++)
    n += snprintf(big + n, sizeof(big) - (size_t)n, "X%d: y\r\n", i);
  strcpy(big + n, "\r\n");
  one(big, 400);
  /* A request line too long. */
  n = snprintf(big, sizeof(big), "GET /");
  memset(big + n, 'a', 9000);
  strcpy(big + n + 9000, " HTTP/1.1\r\n\r\n");
  one(big, 400);
}

/* A connection that sends nothing is closed by the server (--idle-ms),
 * well within the 20 s receive timeout; so is one that stops half-way. */
static void check_idle(void)
{
  ssize_t len = wire_exchange(port, "", 0, buf, sizeof(buf), true);
  CHECK(len == 0, "idle connection: %zd bytes or a timeout", len);
  len = wire_exchange(port, "GET / HTTP/1.1\r\nHost:", 21, buf, sizeof(buf), true);
  CHECK(len == 0, "half-sent request: %zd bytes or a timeout", len);
}

/* A download that takes longer than the idle time is not cut off while
 * the client keeps reading: here big.bin (BIG_FILE bytes) read at about
 * 10 MiB/s, three times the server's --idle-ms of 1 s in all, with every
 * MiB well within it. */
#define BIG_FILE (32 << 20)

static void check_slow_download(void)
{
  int fd = wire_connect(port, 20000);
  CHECK(fd >= 0, "connect failed");
  if (fd < 0)
    return;
  static const char req[] = "GET /file/big.bin HTTP/1.1\r\nConnection: close\r\n\r\n";
  CHECK(wire_send(fd, req, sizeof(req) - 1) == 0, "send failed");
  size_t got = 0, next_pause = 1 << 20;
  for (;;) {
    ssize_t n = recv(fd, buf, 128 << 10, 0);
    if (n <= 0)
      break;
    got += (size_t)n;
    if (got >= next_pause) {
      usleep(100 * 1000);
      next_pause += 1 << 20;
    }
  }
  close(fd);
  /* The head, then every byte of the file. */
  CHECK(got > BIG_FILE && got < BIG_FILE + 512, "slow download: %zu bytes of %d", got, BIG_FILE);
}

/* "patient" mode, against a server with a long --idle-ms (20 s): blank
 * lines after a request (which a client may send, RFC 9112 2.2) must not
 * hold its answer back until the idle time ends - the answer comes while
 * the connection is open (10 s receive timeout), and a second request on
 * it is answered too. */
static void check_blank_lines_after_a_request(void)
{
  int fd = wire_connect(port, 10000);
  CHECK(fd >= 0, "connect failed");
  if (fd < 0)
    return;
  static const char req[] = "GET / HTTP/1.1\r\n\r\n\r\n\r\n";
  CHECK(wire_send(fd, req, sizeof(req) - 1) == 0, "send failed");
  for (int i = 0; i < 2; i++) {
    size_t len = 0, pos = 0;
    struct response r;
    while (len < sizeof(buf) && next_response(len, &pos, false, &r) != 0) {
      ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);
      if (n <= 0)
        break;
      len += (size_t)n;
    }
    pos = 0;
    CHECK(next_response(len, &pos, false, &r) == 0 && r.status == 200,
          "answer %d held back (%zu bytes before a timeout or close)", i, len);
    static const char again[] = "GET / HTTP/1.1\r\n\r\n";
    if (i == 0)
      CHECK(wire_send(fd, again, sizeof(again) - 1) == 0, "second send failed");
  }
  close(fd);
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[2], "patient") == 0) {
    port = argv[1];
    check_blank_lines_after_a_request();
    printf("http_check patient: %s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: %s PORT [patient]\n", argv[0]);
    return 2;
  }
  port = argv[1];
  check_basics();
  check_pipelining();
  check_connection_rules();
  check_errors();
  check_idle();
  check_slow_download();
  printf("http_check: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
