/* SPDX-License-Identifier: MIT */
/*
 * resp_check: protocol checks against a running kv_server over plain
 * sockets: RESP arrays and inline commands, pipelining, every error reply,
 * protocol errors (reply, then close), binary-safe and large values, keys
 * spread over every shard.
 *
 *   resp_check PORT          exit 0 pass, 1 fail
 */
#include "wire.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CAP (8 << 20)

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

/* Sends req (n bytes), then end of file, and checks that the whole answer
 * is exactly want (wn bytes). */
static void expect_n(const char *req, size_t n, const char *want, size_t wn)
{
  ssize_t len = wire_exchange(port, req, n, buf, sizeof(buf), false);
  CHECK(len == (ssize_t)wn && memcmp(buf, want, wn) == 0,
        "request %.40s: got %zd bytes \"%.60s\", want \"%.60s\"", req, len,
        len > 0 ? buf : "", want);
}

static void expect(const char *req, const char *want)
{
  expect_n(req, strlen(req), want, strlen(want));
}

/* A RESP array of the given words. Returns its length. */
static size_t cmd(char *out, size_t cap, int argc, const char *const *argv)
{
  size_t n = (size_t)snprintf(out, cap, "*%d\r\n", argc);
  for (int i = 0; i < argc; i++)
    n += (size_t)snprintf(out + n, cap - n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
  return n;
}

static void check_commands(void)
{
  expect("PING\r\n", "+PONG\r\n");
  expect("ping\n", "+PONG\r\n");
  expect("*1\r\n$4\r\nPING\r\n", "+PONG\r\n");
  expect("*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n", "$2\r\nhi\r\n");
  expect("ECHO abc\r\n", "$3\r\nabc\r\n");
  expect("SET k1 v1\r\nGET k1\r\nGET nokey\r\n", "+OK\r\n$2\r\nv1\r\n$-1\r\n");
  expect("SET c 10\r\nINCR c\r\nINCR c\r\nINCR newcounter\r\n", "+OK\r\n:11\r\n:12\r\n:1\r\n");
  expect("SET s abc\r\nINCR s\r\n", "+OK\r\n-ERR value is not an integer or out of range\r\n");
  expect("SET m 9223372036854775807\r\nINCR m\r\n",
         "+OK\r\n-ERR increment or decrement would overflow\r\n");
  expect("SET z 007\r\nINCR z\r\n", "+OK\r\n-ERR value is not an integer or out of range\r\n");
  expect("SET n -5\r\nINCR n\r\n", "+OK\r\n:-4\r\n");
  expect("MSET a 1 b 2 c 3\r\nMGET a b nokey c\r\n",
         "+OK\r\n*4\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n$1\r\n3\r\n");
  expect("EXISTS a b nokey a\r\nDEL a b nokey\r\nEXISTS a b\r\n", ":3\r\n:2\r\n:0\r\n");
  expect("MSET d 1 d 2\r\nGET d\r\n", "+OK\r\n$1\r\n2\r\n");
  expect("CONFIG GET save\r\n", "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
  expect("CONFIG GET appendonly\r\n", "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
  expect("CONFIG GET maxmemory\r\n", "*0\r\n");
  expect("COMMAND\r\nCOMMAND DOCS\r\n", "*0\r\n*0\r\n");
  expect("\r\n*0\r\n*-1\r\nPING\r\n", "+PONG\r\n"); /* empty commands get no reply */
  expect("QUIT\r\nPING\r\n", "+OK\r\n");            /* nothing after QUIT */
}

static void check_errors(void)
{
  expect("NOSUCH x\r\n", "-ERR unknown command 'NOSUCH'\r\n");
  expect("GET\r\n", "-ERR wrong number of arguments for 'get' command\r\n");
  expect("SET k\r\n", "-ERR wrong number of arguments for 'set' command\r\n");
  expect("SET k v EX 10\r\n", "-ERR syntax error\r\n");
  expect("MSET a 1 b\r\n", "-ERR wrong number of arguments for 'mset' command\r\n");
  expect("INCR\r\n", "-ERR wrong number of arguments for 'incr' command\r\n");
  expect("PING a b\r\n", "-ERR wrong number of arguments for 'ping' command\r\n");
  expect("CONFIG SET save x\r\n", "-ERR unsupported CONFIG subcommand\r\n");
  /* Bytes that would break the reply are replaced. */
  expect("*1\r\n$5\r\nA\r\nBC\r\n", "-ERR unknown command 'A??BC'\r\n");
  /* Protocol errors: the reply, then the server closes at once. */
  expect("*abc\r\nPING\r\n", "-ERR Protocol error: invalid multibulk length\r\n");
  expect("*9999999\r\n", "-ERR Protocol error: invalid multibulk length\r\n");
  expect("*1\r\n$600000000\r\n", "-ERR Protocol error: invalid bulk length\r\n");
  expect("*1\r\n$-3\r\n", "-ERR Protocol error: invalid bulk length\r\n");
  expect("*1\r\n$99999999999999999999\r\n", "-ERR Protocol error: invalid bulk length\r\n");
  expect("*1\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'\r\n");
  expect("*1\r\n$4\r\nPINGxx", "-ERR Protocol error: invalid bulk terminator\r\n");
  /* Truncated commands: no reply, the server just closes. */
  expect("*2\r\n$3\r\nGET\r\n", "");
  expect("*1\r\n$100000000\r\nabc", "");
  expect("PING", "");
  static char line[70000];
  memset(line, 'a', sizeof(line) - 2);
  memcpy(line + sizeof(line) - 2, "\r\n", 2);
  expect_n(line, sizeof(line), "-ERR Protocol error: too big inline request\r\n", 45);
}

/* Binary values (NUL, CR, LF inside), a 3 MiB value, and 500 keys, which
 * land on every shard, set and read back in one MSET/MGET each. */
static void check_data(void)
{
  static const char bin[] = "*3\r\n$3\r\nSET\r\n$4\r\nb\0\r\n\r\n$5\r\n\r\n\0x\n\r\n"
                            "*2\r\n$3\r\nGET\r\n$4\r\nb\0\r\n\r\n";
  static const char binwant[] = "+OK\r\n$5\r\n\r\n\0x\n\r\n";
  expect_n(bin, sizeof(bin) - 1, binwant, sizeof(binwant) - 1);

  size_t big = 3 << 20;
  char *req = malloc(big + 200), *want = malloc(big + 200);
  if (!req || !want) {
    CHECK(0, "out of memory");
    free(req);
    free(want);
    return;
  }
  size_t n = (size_t)sprintf(req, "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%zu\r\n", big);
  for (size_t i = 0; i < big; i++)
    req[n + i] = (char)('a' + i % 26);
  n += big;
  n += (size_t)sprintf(req + n, "\r\n*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n");
  size_t wn = (size_t)sprintf(want, "+OK\r\n$%zu\r\n", big);
  for (size_t i = 0; i < big; i++)
    want[wn + i] = (char)('a' + i % 26);
  wn += big;
  memcpy(want + wn, "\r\n", 2);
  expect_n(req, n, want, wn + 2);

  enum { KEYS = 500 };
  static char keys[KEYS][16], vals[KEYS][16];
  const char *argv[2 * KEYS + 1];
  argv[0] = "MSET";
  for (int i = 0; i < KEYS; i++) {
    snprintf(keys[i], sizeof(keys[i]), "key:%d", i);
    snprintf(vals[i], sizeof(vals[i]), "val:%d", i * 7);
    argv[1 + 2 * i] = keys[i];
    argv[2 + 2 * i] = vals[i];
  }
  n = cmd(req, big, 2 * KEYS + 1, argv);
  argv[0] = "MGET";
  for (int i = 0; i < KEYS; i++)
    argv[1 + i] = keys[i];
  n += cmd(req + n, big - n, KEYS + 1, argv);
  wn = (size_t)sprintf(want, "+OK\r\n*%d\r\n", KEYS);
  for (int i = 0; i < KEYS; i++)
    wn += (size_t)sprintf(want + wn, "$%zu\r\n%s\r\n", strlen(vals[i]), vals[i]);
  expect_n(req, n, want, wn);
  argv[0] = "DEL";
  n = cmd(req, big, KEYS + 1, argv);
  wn = (size_t)sprintf(want, ":%d\r\n", KEYS);
  expect_n(req, n, want, wn);
  free(req);
  free(want);
}

/* Reads on fd until exactly want has come (10 s receive timeout). */
static bool receive_exactly(int fd, const char *want)
{
  size_t wn = strlen(want), got = 0;
  while (got < wn) {
    ssize_t n = recv(fd, buf + got, wn - got, 0);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  return got == wn && memcmp(buf, want, wn) == 0;
}

/* A command, then the start of the next one: the first reply must not wait
 * for the rest (a client may wait for it before sending more), inline or
 * in RESP arrays. kv_server has no idle timeout: a reply held back would be
 * held for good, and the receive times out. */
static void check_partial_next_command(void)
{
  static const char *const parts[][4] = {
      {"SET pk v\r\nGET", "+OK\r\n", " pk\r\n", "$1\r\nv\r\n"},
      {"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGE", "+PONG\r\n", "T\r\n$2\r\npk\r\n", "$1\r\nv\r\n"},
      {"PING\r\n*2\r\n$3\r\nGET\r\n$2\r\np", "+PONG\r\n", "k\r\n", "$1\r\nv\r\n"},
  };
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
    int fd = wire_connect(port, 10000);
    CHECK(fd >= 0, "connect failed");
    if (fd < 0)
      return;
    CHECK(wire_send(fd, parts[i][0], strlen(parts[i][0])) == 0, "send failed");
    CHECK(receive_exactly(fd, parts[i][1]), "case %zu: no %.10s before the rest came", i,
          parts[i][1]);
    CHECK(wire_send(fd, parts[i][2], strlen(parts[i][2])) == 0, "send failed");
    CHECK(receive_exactly(fd, parts[i][3]), "case %zu: second reply", i);
    close(fd);
  }
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  port = argv[1];
  check_commands();
  check_errors();
  check_data();
  check_partial_next_command();
  printf("resp_check: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
