/* SPDX-License-Identifier: MIT */
/*
 * Suite "websocket", part 2: the options of the opening handshake. The
 * subprotocol a server chooses (the client's first offer it speaks), what a
 * client accepts in the answer (only a subprotocol it offered, once; no
 * extension), extra request headers and the peer's headers as read back,
 * a server's check refusing a request with the status it returns, the
 * options refused before anything is written, Connection lines repeated
 * (they count together), the key, version and accept lines repeated (they
 * may come once), request lines parsed exactly, and the 8 KiB limit of a
 * request head to the byte, for the server reading it and the client
 * writing it.
 */
#include "ws_test.h"

#include "../../coro/fault.h"

#define DEADLINE() (weft_now() + 5 * WEFT_SEC)

/* ---- a weft server, the test as the client ------------------------------------------------- */

struct accepting {
  int fd;
  const weft_ws_opts *o;
  int r;
  weft_ws *ws;
};

static void *accept_task(void *arg)
{
  struct accepting *a = arg;
  a->r = weft_ws_accept_opts(&a->ws, a->fd, a->o, DEADLINE());
  return NULL;
}

/* Sends `request` to a weft server accepting with o on sv[0]; its answer's
 * head into head[cap], the server's result in *r. */
static weft_ws *server_answers(int sv[2], const char *request, const weft_ws_opts *o, int *r,
                              char *head, size_t cap)
{
  struct accepting a = {.fd = sv[0], .o = o, .r = 1};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, weft_shard_id(), accept_task, &a), 0);
  raw_send(sv[1], request, strlen(request));
  raw_head(sv[1], head, cap);
  CO_EQ(weft_join(t, NULL), 0);
  *r = a.r;
  return a.ws;
}

#define REQUEST_HEAD                                                                          \
  "GET /chat?room=1 HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n"         \
  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"                   \
  "Sec-WebSocket-Version: 13\r\nOrigin:   http://example.com  \r\n"

static const char *const chat_protocols[] = {"chat.v1", "chat.v2", NULL};

/* What the check saw, and what it answers. */
struct verdict {
  int status;
  int calls;
  char path[64], origin[64], protocol[32];
};

static int check(weft_ws *ws, void *arg)
{
  struct verdict *v = arg;
  v->calls++;
  const char *origin = weft_ws_header(ws, "ORIGIN");
  snprintf(v->path, sizeof(v->path), "%s", weft_ws_path(ws));
  snprintf(v->origin, sizeof(v->origin), "%s", origin ? origin : "(none)");
  snprintf(v->protocol, sizeof(v->protocol), "%s", weft_ws_protocol(ws));
  return v->status;
}

static void *server_main(void *arg)
{
  (void)arg;
  int sv[2], r;
  char head[1024];
  weft_ws_opts o = {.protocols = chat_protocols};

  /* The client's first offer we speak, across two header lines. */
  pair(sv);
  weft_ws *ws = server_answers(sv,
                               REQUEST_HEAD "Sec-WebSocket-Protocol: mqtt, chat.v2\r\n"
                                            "Sec-WebSocket-Protocol: chat.v1\r\n\r\n",
                               &o, &r, head, sizeof(head));
  CO_EQ(r, 0);
  CO_CHECK(strncmp(head, "HTTP/1.1 101 ", 13) == 0);
  CO_CHECK(strstr(head, "\r\nSec-WebSocket-Protocol: chat.v2\r\n") != NULL);
  CO_CHECK(strcmp(weft_ws_protocol(ws), "chat.v2") == 0);
  /* The request's headers, looked up in any case, without blanks around. */
  CO_CHECK(strcmp(weft_ws_header(ws, "origin"), "http://example.com") == 0);
  CO_CHECK(strcmp(weft_ws_header(ws, "sec-websocket-protocol"), "mqtt, chat.v2") == 0);
  CO_CHECK(weft_ws_header(ws, "Cookie") == NULL);
  CO_CHECK(weft_ws_header(ws, NULL) == NULL);
  CO_CHECK(strcmp(weft_ws_path(ws), "/chat?room=1") == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* Matching is case-sensitive; nothing matches: no subprotocol header. */
  pair(sv);
  ws = server_answers(sv, REQUEST_HEAD "Sec-WebSocket-Protocol: CHAT.V1, mqtt\r\n\r\n", &o, &r,
                      head, sizeof(head));
  CO_EQ(r, 0);
  CO_CHECK(strstr(head, "Sec-WebSocket-Protocol") == NULL);
  CO_CHECK(strcmp(weft_ws_protocol(ws), "") == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* A server without a list answers without one, whatever is offered. */
  pair(sv);
  ws = server_answers(sv, REQUEST_HEAD "Sec-WebSocket-Protocol: chat.v1\r\n\r\n", NULL, &r, head,
                      sizeof(head));
  CO_EQ(r, 0);
  CO_CHECK(strstr(head, "Sec-WebSocket-Protocol") == NULL);
  CO_CHECK(strcmp(weft_ws_protocol(ws), "") == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* The check sees path, headers and the chosen subprotocol; 0 accepts. */
  struct verdict v = {.status = 0};
  o.check = check;
  o.check_arg = &v;
  pair(sv);
  ws = server_answers(sv, REQUEST_HEAD "Sec-WebSocket-Protocol: chat.v1\r\n\r\n", &o, &r, head,
                      sizeof(head));
  CO_EQ(r, 0);
  CO_EQ(v.calls, 1);
  CO_CHECK(strcmp(v.path, "/chat?room=1") == 0);
  CO_CHECK(strcmp(v.origin, "http://example.com") == 0);
  CO_CHECK(strcmp(v.protocol, "chat.v1") == 0);
  CO_CHECK(strncmp(head, "HTTP/1.1 101 ", 13) == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* A status refuses with that status; anything else but 0 with 500. */
  static const struct {
    int status;
    const char *line;
  } refusals[] = {{403, "HTTP/1.1 403 Forbidden\r\n"},
                  {401, "HTTP/1.1 401 Unauthorized\r\n"},
                  {418, "HTTP/1.1 418 Refused\r\n"},
                  {7, "HTTP/1.1 500 Internal Server Error\r\n"},
                  {-1, "HTTP/1.1 500 Internal Server Error\r\n"},
                  {600, "HTTP/1.1 500 Internal Server Error\r\n"}};
  for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
    v.status = refusals[i].status;
    pair(sv);
    ws = server_answers(sv, REQUEST_HEAD "\r\n", &o, &r, head, sizeof(head));
    CO_EQ(r, -ECONNREFUSED);
    CO_CHECK(ws == NULL);
    if (strncmp(head, refusals[i].line, strlen(refusals[i].line)) != 0)
      rt_fail(__FILE__, __LINE__, "check returned %d, answer: %s", refusals[i].status, head);
    CO_CHECK(strstr(head, "\r\nConnection: close\r\n") != NULL);
    io_close_pipe(sv);
  }
  /* A request that is not an upgrade never reaches the check. */
  int calls = v.calls;
  pair(sv);
  ws = server_answers(sv, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", &o, &r, head, sizeof(head));
  CO_EQ(r, -EPROTO);
  CO_CHECK(strncmp(head, "HTTP/1.1 400 ", 13) == 0);
  CO_EQ(v.calls, calls);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, server_chooses_subprotocol_and_check_refuses, .timeout = 30)
{
  rt_run(1, server_main, NULL);
  rt_assert_clean();
}

/* Every allocation of a server's handshake failing in turn: -ENOMEM each
 * time (ASan checks that nothing leaks), until the handshake succeeds. A
 * long request makes the kept headers grow past their first block. */
static void *enomem_main(void *arg)
{
  (void)arg;
  static char request[4096];
  int len = snprintf(request, sizeof(request), "%s", REQUEST_HEAD);
  for (int i = 0; i < 40; i++)
    len += snprintf(request + len, sizeof(request) - (size_t)len, "X-Filler-%02d: %040d\r\n", i, i);
  snprintf(request + len, sizeof(request) - (size_t)len,
           "Sec-WebSocket-Protocol: chat.v2\r\n\r\n");
  weft_ws_opts o = {.protocols = chat_protocols};
  int failures = 0;
  for (long nth = 1; nth < 64; nth++) {
    int sv[2];
    pair(sv);
    raw_send(sv[1], request, strlen(request));
    weft_ws *ws = NULL;
    weft__fault_arm(WEFT__FAULT_MALLOC, nth);
    int r = weft_ws_accept_opts(&ws, sv[0], &o, DEADLINE());
    weft__fault_arm(WEFT__FAULT_MALLOC, 0);
    if (r == 0) {
      CO_CHECK(strcmp(weft_ws_protocol(ws), "chat.v2") == 0);
      CO_CHECK(strcmp(weft_ws_header(ws, "x-filler-39"), "0000000000000000000000000000000000000039") == 0);
      weft_ws_free(ws);
      io_close_pipe(sv);
      break;
    }
    CO_EQ(r, -ENOMEM);
    CO_CHECK(ws == NULL);
    failures++;
    io_close_pipe(sv);
  }
  /* The connection, its reader, the head and the headers' growth. */
  CO_CHECK(failures >= 5);
  return NULL;
}

Test(websocket, handshake_allocation_failures_are_enomem, .timeout = 30)
{
  rt_run(1, enomem_main, NULL);
  rt_assert_clean();
}

/* ---- a weft client, the test as the server ------------------------------------------------- */

/* Runs a weft client with o on sv[0]; reads its request into head[cap] and
 * answers with a valid 101 plus `extra` header lines. The client's result
 * in *r (with head "" if it failed before writing a byte). */
static weft_ws *client_gets(int sv[2], const weft_ws_opts *o, const char *extra, int *r,
                            char *head, size_t cap)
{
  struct connecting c = {.fd = sv[0], .o = o, .r = 1};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, weft_shard_id(), connect_task, &c), 0);
  CO_CHECK(RT_POLL(io_pending(sv[1]) > 0 || c.r != 1));
  if (c.r != 1) {
    CO_EQ(weft_join(t, NULL), 0);
    head[0] = '\0';
    *r = c.r;
    return c.ws;
  }
  raw_head(sv[1], head, cap);
  const char *k = strstr(head, "\r\nSec-WebSocket-Key: ");
  CO_CHECK(k != NULL);
  char key[25] = "", acc[29], answer[1024];
  if (k)
    memcpy(key, k + 21, 24);
  weft__ws_accept_value(key, acc);
  snprintf(answer, sizeof(answer),
           "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Accept: %s\r\n%s\r\n",
           acc, extra);
  raw_send(sv[1], answer, strlen(answer));
  CO_EQ(weft_join(t, NULL), 0);
  *r = c.r;
  return c.ws;
}

static void *client_main(void *arg)
{
  (void)arg;
  int sv[2], r;
  char head[2048];
  static const char *const extra[] = {"Origin: https://app.example", "Authorization:Bearer t0k",
                                      "X-Empty:", NULL};
  weft_ws_opts o = {.protocols = chat_protocols, .headers = extra};

  /* The request offers the list in order and carries the extra lines. */
  pair(sv);
  weft_ws *ws = client_gets(sv, &o, "Sec-WebSocket-Protocol: chat.v2\r\nServer: raw\r\n", &r,
                            head, sizeof(head));
  CO_EQ(r, 0);
  CO_CHECK(strstr(head, "\r\nSec-WebSocket-Protocol: chat.v1, chat.v2\r\n") != NULL);
  CO_CHECK(strstr(head, "\r\nOrigin: https://app.example\r\n") != NULL);
  CO_CHECK(strstr(head, "\r\nAuthorization:Bearer t0k\r\n") != NULL);
  CO_CHECK(strstr(head, "\r\nX-Empty:\r\n") != NULL);
  CO_CHECK(strcmp(weft_ws_protocol(ws), "chat.v2") == 0);
  CO_CHECK(strcmp(weft_ws_header(ws, "server"), "raw") == 0);
  CO_CHECK(strcmp(weft_ws_path(ws), "") == 0);
  /* And the connection works. */
  CO_EQ(weft_ws_send(ws, WEFT_WS_TEXT, "hi", 2, WEFT_NO_DEADLINE), 0);
  unsigned char frame[8];
  raw_recv(sv[1], frame, 8);
  CO_EQ(frame[0], 0x81);
  CO_EQ(frame[1], 0x82);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* A server that chooses none: accepted, no subprotocol. */
  pair(sv);
  ws = client_gets(sv, &o, "", &r, head, sizeof(head));
  CO_EQ(r, 0);
  CO_CHECK(strcmp(weft_ws_protocol(ws), "") == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* Answers a client must fail: a subprotocol not offered (or offered in
   * another case), one given twice, one with no offer at all, an
   * extension. */
  static const struct {
    const char *extra;
    bool offer;
  } bad[] = {{"Sec-WebSocket-Protocol: mqtt\r\n", true},
             {"Sec-WebSocket-Protocol: CHAT.V1\r\n", true},
             {"Sec-WebSocket-Protocol: chat.v1, chat.v2\r\n", true},
             {"Sec-WebSocket-Protocol: chat.v1\r\nSec-WebSocket-Protocol: chat.v1\r\n", true},
             {"Sec-WebSocket-Protocol: chat.v1\r\n", false},
             {"Sec-WebSocket-Extensions: permessage-deflate\r\n", true}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_ws_opts plain = {0};
    pair(sv);
    ws = client_gets(sv, bad[i].offer ? &o : &plain, bad[i].extra, &r, head, sizeof(head));
    if (r != -EPROTO)
      rt_fail(__FILE__, __LINE__, "answer with %s: %d", bad[i].extra, r);
    CO_CHECK(ws == NULL);
    io_close_pipe(sv);
  }
  return NULL;
}

Test(websocket, client_offers_subprotocols_and_checks_the_answer, .timeout = 30)
{
  rt_run(1, client_main, NULL);
  rt_assert_clean();
}

/* ---- options refused before anything is written ------------------------------------------- */

/* Nothing may have been written to sv[0]'s peer. */
static void nothing_sent(int sv[2])
{
  CO_EQ(io_pending(sv[1]), 0);
}

static void *refused_main(void *arg)
{
  (void)arg;
  int sv[2];
  pair(sv);
  weft_ws *ws = NULL;
  static const char *const bad_protocols[][2] = {{"", NULL},          {"two words", NULL},
                                                 {"a,b", NULL},       {"semi;colon", NULL},
                                                 {"tab\tbed", NULL},  {"caf\xc3\xa9", NULL}};
  for (size_t i = 0; i < sizeof(bad_protocols) / sizeof(bad_protocols[0]); i++) {
    weft_ws_opts o = {.protocols = bad_protocols[i]};
    if (weft_ws_connect_opts(&ws, sv[0], "h", "/", &o, DEADLINE()) != -EINVAL ||
        weft_ws_accept_opts(&ws, sv[0], &o, DEADLINE()) != -EINVAL)
      rt_fail(__FILE__, __LINE__, "subprotocol \"%s\" taken", bad_protocols[i][0]);
  }
  /* 256 bytes: one more than the header allows. */
  static char long_protocol[WS_PROTOCOL_MAX + 1];
  memset(long_protocol, 'p', WS_PROTOCOL_MAX);
  CO_EQ(strlen(long_protocol), 256);
  const char *const too_long[] = {long_protocol, NULL};
  weft_ws_opts o = {.protocols = too_long};
  CO_EQ(weft_ws_connect_opts(&ws, sv[0], "h", "/", &o, DEADLINE()), -EINVAL);
  CO_EQ(weft_ws_accept_opts(&ws, sv[0], &o, DEADLINE()), -EINVAL);

  static const char *const bad_headers[] = {
      "NoColon",      ": no name",         "Two Words: x",         "X: a\r\nInjected: b",
      "X: bell\a",    "X: del\x7f",        "Host: evil.example",   "connection: close",
      "Upgrade: h2c", "Content-Length: 5", "Transfer-Encoding: x", "Sec-WebSocket-Key: x",
      "sec-websocket-extensions: permessage-deflate"};
  for (size_t i = 0; i < sizeof(bad_headers) / sizeof(bad_headers[0]); i++) {
    const char *const list[] = {bad_headers[i], NULL};
    weft_ws_opts h = {.headers = list};
    if (weft_ws_connect_opts(&ws, sv[0], "h", "/", &h, DEADLINE()) != -EINVAL)
      rt_fail(__FILE__, __LINE__, "header \"%s\" taken", bad_headers[i]);
  }
  /* A request head over 8 KiB. */
  static char big[9000];
  memcpy(big, "X-Big: ", 7);
  memset(big + 7, 'b', sizeof(big) - 8);
  const char *const big_list[] = {big, NULL};
  weft_ws_opts b = {.headers = big_list};
  CO_EQ(weft_ws_connect_opts(&ws, sv[0], "h", "/", &b, DEADLINE()), -EINVAL);
  /* Options of the other side. */
  static const char *const fine[] = {"X-Fine: yes", NULL};
  weft_ws_opts server_only = {.check = check};
  weft_ws_opts client_only = {.headers = fine};
  CO_EQ(weft_ws_connect_opts(&ws, sv[0], "h", "/", &server_only, DEADLINE()), -EINVAL);
  CO_EQ(weft_ws_accept_opts(&ws, sv[0], &client_only, DEADLINE()), -EINVAL);
  /* A host or path that would break the request: blanks, control
   * characters, an empty host. */
  static const char *const bad_paths[] = {"/a b", "/a\tb", "/a\x01", "/a\x7f"};
  for (size_t i = 0; i < 4; i++)
    CO_EQ(weft_ws_connect(&ws, sv[0], "h", bad_paths[i], DEADLINE()), -EINVAL);
  CO_EQ(weft_ws_connect(&ws, sv[0], "h x", "/", DEADLINE()), -EINVAL);
  CO_EQ(weft_ws_connect(&ws, sv[0], "", "/", DEADLINE()), -EINVAL);
  CO_CHECK(ws == NULL);
  nothing_sent(sv);
  /* NULL is fine for both getters. */
  CO_CHECK(strcmp(weft_ws_protocol(NULL), "") == 0);
  CO_CHECK(weft_ws_header(NULL, "Origin") == NULL);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, handshake_options_refused_before_writing, .timeout = 30)
{
  rt_run(1, refused_main, NULL);
  rt_assert_clean();
}

/* ---- list headers over several lines, the request line exactly -------------------------- */

static void *request_lines_main(void *arg)
{
  (void)arg;
  int sv[2], r;
  char head[2048];
  /* A proxy's own Connection line after the client's: both count. */
  pair(sv);
  weft_ws *ws = server_answers(sv,
                               "GET /a HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
                               "Connection: Upgrade\r\nConnection: keep-alive\r\n"
                               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                               "Sec-WebSocket-Version: 13\r\n\r\n",
                               NULL, &r, head, sizeof(head));
  CO_EQ(r, 0);
  CO_CHECK(strncmp(head, "HTTP/1.1 101 ", 13) == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);
  /* The client likewise, for the server's answer. */
  pair(sv);
  ws = client_gets(sv, NULL, "Connection: keep-alive\r\n", &r, head, sizeof(head));
  CO_EQ(r, 0);
  weft_ws_free(ws);
  io_close_pipe(sv);
  /* A folded header line, or blanks before a colon: 400 (RFC 7230 3.2.4). */
  static const char *const malformed[] = {"X-A: b\r\n c: d\r\n", "Upgrade : h2c\r\n"};
  for (size_t i = 0; i < 2; i++) {
    char bad[512];
    snprintf(bad, sizeof(bad), "%s%s\r\n", REQUEST_HEAD, malformed[i]);
    pair(sv);
    ws = server_answers(sv, bad, NULL, &r, head, sizeof(head));
    CO_EQ(r, -EPROTO);
    CO_CHECK(strncmp(head, "HTTP/1.1 400 ", 13) == 0);
    io_close_pipe(sv);
  }
  /* Targets: the longest that fits is taken whole; one byte more, and
   * anything after the version, are refused (400), not cut short. */
  static char req[4096];
  for (int extra = 0; extra < 3; extra++) {
    size_t tlen = extra == 2 ? 10 : WS_PATH_MAX - 1 + (size_t)extra;
    char *p = req;
    p += sprintf(p, "GET /");
    memset(p, 'a', tlen - 1);
    p += tlen - 1;
    p += sprintf(p, extra == 2 ? " HTTP/1.1 junk\r\n" : " HTTP/1.1\r\n");
    sprintf(p, "Host: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    pair(sv);
    ws = server_answers(sv, req, NULL, &r, head, sizeof(head));
    if (extra == 0) {
      CO_EQ(r, 0);
      CO_EQ(strlen(weft_ws_path(ws)), WS_PATH_MAX - 1);
      weft_ws_free(ws);
    } else {
      CO_EQ(r, -EPROTO);
      CO_CHECK(strncmp(head, "HTTP/1.1 400 ", 13) == 0);
    }
    io_close_pipe(sv);
  }
  return NULL;
}

Test(websocket, list_headers_over_lines_and_exact_request_lines, .timeout = 30)
{
  rt_run(1, request_lines_main, NULL);
  rt_assert_clean();
}

/* ---- fields the RFC allows once ------------------------------------------------------- */

/* Sec-WebSocket-Key and -Version may not appear twice in a request, nor
 * Sec-WebSocket-Accept in an answer (RFC 6455 11.3.1, 11.3.5, 11.3.3): as
 * one list, their values are no key, version or accept value. Taking one
 * of them would also answer for a key weft_ws_header does not return. */
static void *repeated_main(void *arg)
{
  (void)arg;
  int sv[2], r;
  char head[2048], req[1024];
  static const char *const twice[] = {
      "Sec-WebSocket-Key: short\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\nSec-WebSocket-Version: 13\r\n",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n"
      "Sec-WebSocket-Version: 13\r\n",
  };
  for (size_t i = 0; i < sizeof(twice) / sizeof(twice[0]); i++) {
    snprintf(req, sizeof(req),
             "GET /a HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n%s\r\n",
             twice[i]);
    pair(sv);
    weft_ws *ws = server_answers(sv, req, NULL, &r, head, sizeof(head));
    CO_EQ(r, -EPROTO);
    CO_CHECK(ws == NULL);
    CO_CHECK(strncmp(head, "HTTP/1.1 400 ", 13) == 0);
    weft_ws_free(ws);
    io_close_pipe(sv);
  }
  /* The client: the right accept value, twice. */
  pair(sv);
  struct connecting c = {.fd = sv[0], .r = 1};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, weft_shard_id(), connect_task, &c), 0);
  raw_head(sv[1], head, sizeof(head));
  const char *k = strstr(head, "\r\nSec-WebSocket-Key: ");
  CO_CHECK(k != NULL);
  char key[25] = "", acc[29], answer[512];
  if (k)
    memcpy(key, k + 21, 24);
  weft__ws_accept_value(key, acc);
  snprintf(answer, sizeof(answer),
           "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Accept: %s\r\n\r\n",
           acc, acc);
  raw_send(sv[1], answer, strlen(answer));
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(c.r, -EPROTO);
  CO_CHECK(c.ws == NULL);
  weft_ws_free(c.ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, fields_allowed_once_are_refused_twice, .timeout = 30)
{
  rt_run(1, repeated_main, NULL);
  rt_assert_clean();
}

/* Host must come exactly once (RFC 6455 4.2.1 item 2; RFC 7230 5.4 has a
 * server answer 400 to a request without it, or with it twice). */
static void *host_main(void *arg)
{
  (void)arg;
  int sv[2], r;
  char head[2048], req[1024];
  static const char *const hosts[] = {"", "Host: a\r\nHost: b\r\n", "host: a\r\nHOST: a\r\n"};
  for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
    snprintf(req, sizeof(req),
             "GET /a HTTP/1.1\r\n%sUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
             hosts[i]);
    pair(sv);
    weft_ws *ws = server_answers(sv, req, NULL, &r, head, sizeof(head));
    CO_EQ(r, -EPROTO);
    CO_CHECK(ws == NULL);
    CO_CHECK(strncmp(head, "HTTP/1.1 400 ", 13) == 0);
    weft_ws_free(ws);
    io_close_pipe(sv);
  }
  return NULL;
}

Test(websocket, a_request_needs_exactly_one_host, .timeout = 30)
{
  rt_run(1, host_main, NULL);
  rt_assert_clean();
}

/* Bytes RFC 7230 does not allow in a head: a control character (but a tab)
 * anywhere - a NUL or a bare CR would hide the rest of a line from
 * weft_ws_header, which a proxy in front may read differently - a header
 * name that is not a token, a target with a byte outside visible ASCII
 * (RFC 3986). Refused with 400, not handed to weft_ws_path or
 * weft_ws_header; a client refuses such an answer. */
static void *odd_bytes_main(void *arg)
{
  (void)arg;
  int sv[2], r;
  char head[2048], req[1024];
  static const struct {
    const char *target, *line;
    size_t line_len;
  } odd[] = {
      {"/a", "X-A: a\x01z\r\n", 10},     {"/a", "X-A: a\rHost: b\r\n", 16},
      {"/a", "X-A: a\0Host: b\r\n", 16}, {"/a", "X-A: del\x7f\r\n", 11},
      {"/a", "X\x01Y: z\r\n", 8},        {"/a", "X(Y): z\r\n", 9},
      {"/a\x01", "", 0},                 {"/a\x80", "", 0},
      {"/a\x7f", "", 0},
  };
  for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n", odd[i].target);
    memcpy(req + n, odd[i].line, odd[i].line_len);
    n += (int)odd[i].line_len;
    n += snprintf(req + n, sizeof(req) - (size_t)n,
                  "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    pair(sv);
    struct accepting a = {.fd = sv[0], .r = 1};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, weft_shard_id(), accept_task, &a), 0);
    raw_send(sv[1], req, (size_t)n);
    raw_head(sv[1], head, sizeof(head));
    CO_EQ(weft_join(t, NULL), 0);
    if (a.r != -EPROTO || strncmp(head, "HTTP/1.1 400 ", 13) != 0)
      rt_fail(__FILE__, __LINE__, "case %zu: %d, %.20s", i, a.r, head);
    weft_ws_free(a.ws);
    io_close_pipe(sv);
  }
  /* A client, answered with a control character in a header value. */
  pair(sv);
  weft_ws *ws = client_gets(sv, NULL, "Server: a\x01z\r\n", &r, head, sizeof(head));
  CO_EQ(r, -EPROTO);
  CO_CHECK(ws == NULL);
  weft_ws_free(ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, control_characters_and_odd_names_are_refused, .timeout = 30)
{
  rt_run(1, odd_bytes_main, NULL);
  rt_assert_clean();
}

/* The answer's status line, exactly: "HTTP/1.1 101" and a blank or the
 * end. A status code too long for an int is not 101 either - and reading
 * it must leave errno alone, as every weft call does. */
struct status_client {
  int fd, r, err;
  weft_ws *ws;
};

static void *status_client(void *arg)
{
  struct status_client *c = arg;
  errno = 4242;
  c->r = weft_ws_connect(&c->ws, c->fd, "server.example.com", "/chat", DEADLINE());
  c->err = errno;
  return NULL;
}

static void *status_line_main(void *arg)
{
  (void)arg;
  static const char *const lines[] = {"HTTP/1.1 99999999999999999999 Switching Protocols",
                                      "HTTP/1.1 101abc Switching Protocols",
                                      "HTTP/1.1  101 Switching Protocols",
                                      "HTTP/1.1 +101 Switching Protocols"};
  for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
    int sv[2];
    pair(sv);
    struct status_client c = {.fd = sv[0], .r = 1};
    weft_task *t;
    CO_EQ(io_spawn_on(&t, weft_shard_id(), status_client, &c), 0);
    char head[2048], answer[512];
    raw_head(sv[1], head, sizeof(head));
    const char *k = strstr(head, "\r\nSec-WebSocket-Key: ");
    CO_CHECK(k != NULL);
    char key[25] = "", acc[29];
    if (k)
      memcpy(key, k + 21, 24);
    weft__ws_accept_value(key, acc);
    snprintf(answer, sizeof(answer),
             "%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
             lines[i], acc);
    raw_send(sv[1], answer, strlen(answer));
    CO_EQ(weft_join(t, NULL), 0);
    if (c.r != -EPROTO || c.err != 4242)
      rt_fail(__FILE__, __LINE__, "'%s': %d, errno %d", lines[i], c.r, c.err);
    weft_ws_free(c.ws);
    io_close_pipe(sv);
  }
  return NULL;
}

Test(websocket, the_answer_status_line_exactly_and_errno_alone, .timeout = 30)
{
  rt_run(1, status_line_main, NULL);
  rt_assert_clean();
}

/* ---- a peer that goes away before a byte ----------------------------------------------------- */

/* A client that connects and closes at once (a health check) is -EPIPE, as
 * the socket's going away, and gets no 400; one that closes part-way
 * through its request still broke the protocol. A server that closes
 * without answering is -EPIPE to the client. */
static void *gone_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *ws = NULL;
  pair(sv);
  CO_EQ(shutdown(sv[1], SHUT_WR), 0);
  CO_EQ(weft_ws_accept(&ws, sv[0], DEADLINE()), -EPIPE);
  CO_CHECK(ws == NULL);
  nothing_sent(sv);
  io_close_pipe(sv);

  pair(sv);
  raw_send(sv[1], "GET / HTTP/1.1\r\nHost: x\r\n", 25);
  CO_EQ(shutdown(sv[1], SHUT_WR), 0);
  CO_EQ(weft_ws_accept(&ws, sv[0], DEADLINE()), -EPROTO);
  char head[256];
  raw_head(sv[1], head, sizeof(head));
  CO_CHECK(strncmp(head, "HTTP/1.1 400 ", 13) == 0);
  io_close_pipe(sv);

  pair(sv);
  CO_EQ(shutdown(sv[1], SHUT_WR), 0);
  CO_EQ(weft_ws_connect(&ws, sv[0], "example.com", "/", DEADLINE()), -EPIPE);
  CO_CHECK(ws == NULL);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_peer_that_closes_before_a_byte_is_epipe, .timeout = 30)
{
  rt_run(1, gone_main, NULL);
  rt_assert_clean();
}

/* A handshake the peer leaves half done ends at the deadline, or at a
 * cancel; a close whose peer goes away without a close frame is
 * -ECONNRESET. */
static void *half_accept(void *arg)
{
  CO_EQ(weft_cancel(weft_task_self()), 0);
  weft_ws *ws = NULL;
  return (void *)(intptr_t)weft_ws_accept(&ws, *(int *)arg, weft_now() + 5 * WEFT_SEC);
}

/* Reads the server's close frame (unmasked: 0x88, length 2, the code) and
 * closes the connection without answering. */
static void *take_close_and_hang_up(void *arg)
{
  int fd = *(int *)arg;
  unsigned char f[4];
  raw_recv(fd, f, sizeof(f));
  CO_EQ(f[0], 0x88);
  CO_EQ(f[1], 2);
  CO_EQ(f[2] << 8 | f[3], 1000);
  CO_EQ(close(fd), 0);
  return NULL;
}

static void *half_done_main(void *arg)
{
  (void)arg;
  int sv[2];
  weft_ws *ws = NULL;
  static const char half[] = "GET /chat HTTP/1.1\r\nHost: server.example.com\r\n";
  pair(sv);
  raw_send(sv[1], half, strlen(half));
  CO_EQ(weft_ws_accept(&ws, sv[0], weft_now() + 30 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(ws == NULL);
  weft_task *t;
  CO_EQ(weft_spawn(&t, NULL, half_accept, &sv[0]), 0);
  void *r = NULL;
  CO_EQ(weft_join(t, &r), -ECANCELED);
  CO_EQ((intptr_t)r, -ECANCELED);
  io_close_pipe(sv);

  /* A server that reads the request and never answers. */
  pair(sv);
  CO_EQ(weft_ws_connect(&ws, sv[0], "example.com", "/", weft_now() + 30 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(ws == NULL);
  io_close_pipe(sv);

  /* The peer goes away during the closing handshake. */
  pair(sv);
  struct connecting c = {.fd = sv[1]};
  CO_EQ(weft_spawn(&t, NULL, connect_task, &c), 0);
  CO_EQ(weft_ws_accept(&ws, sv[0], weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(c.r, 0);
  weft_ws_free(c.ws);
  CO_EQ(weft_spawn(&t, NULL, take_close_and_hang_up, &sv[1]), 0);
  /* (A peer gone before the close frame is written: its -EPIPE; this one
   * takes the frame, then hangs up.) */
  CO_EQ(weft_ws_close(ws, 1000, NULL, weft_now() + 5 * WEFT_SEC), -ECONNRESET);
  CO_EQ(weft_join(t, NULL), 0);
  weft_ws_free(ws);
  close(sv[0]);
  return NULL;
}

Test(websocket, a_half_done_handshake_times_out_and_a_vanished_peer_resets_the_close,
     .timeout = 30)
{
  rt_run(2, half_done_main, NULL);
  rt_assert_clean();
}

/* ---- the 8 KiB head limit, exactly ------------------------------------------------------ */

#define HEAD_MAX 8192

/* A valid request of exactly `total` bytes: REQUEST_HEAD, an X-Pad line
 * filled up to the size, the blank line. */
static void padded_request(char *req, size_t total)
{
  size_t n = (size_t)sprintf(req, "%sX-Pad: ", REQUEST_HEAD);
  memset(req + n, 'a', total - n - 4);
  memcpy(req + total - 4, "\r\n\r\n", 5);
}

/* A client's extra header "X-Pad: aaa..." of `len` bytes in buf. */
static const char *pad_header(char *buf, size_t len)
{
  memcpy(buf, "X-Pad: ", 7);
  memset(buf + 7, 'a', len - 7);
  buf[len] = '\0';
  return buf;
}

static void *head_limit_main(void *arg)
{
  (void)arg;
  int sv[2], r;
  static char req[HEAD_MAX + 2], head[HEAD_MAX + 2], pad[HEAD_MAX];
  /* A server takes a request head of 8 KiB and refuses one byte more. */
  for (size_t total = HEAD_MAX - 1; total <= HEAD_MAX + 1; total++) {
    padded_request(req, total);
    CO_EQ(strlen(req), total);
    pair(sv);
    weft_ws *ws = server_answers(sv, req, NULL, &r, head, sizeof(head));
    if (total <= HEAD_MAX) {
      if (r != 0)
        rt_fail(__FILE__, __LINE__, "a head of %zu bytes: %d", total, r);
      CO_CHECK(strncmp(head, "HTTP/1.1 101 ", 13) == 0);
      weft_ws_free(ws);
    } else {
      CO_EQ(r, -EPROTO);
      CO_CHECK(strncmp(head, "HTTP/1.1 400 ", 13) == 0);
    }
    io_close_pipe(sv);
  }

  /* A client writes a request head of 8 KiB and refuses one byte more,
   * before writing anything, subprotocols and extra lines counted. The
   * head with a short pad line first, to learn the size of the rest. */
  const char *list[] = {pad_header(pad, 8), NULL};
  weft_ws_opts o = {.protocols = chat_protocols, .headers = list};
  pair(sv);
  weft_ws *ws = client_gets(sv, &o, "", &r, head, sizeof(head));
  CO_EQ(r, 0);
  weft_ws_free(ws);
  io_close_pipe(sv);
  size_t rest = strlen(head) - 8;
  for (size_t total = HEAD_MAX - 1; total <= HEAD_MAX; total++) {
    list[0] = pad_header(pad, total - rest);
    pair(sv);
    ws = client_gets(sv, &o, "", &r, head, sizeof(head));
    if (r != 0)
      rt_fail(__FILE__, __LINE__, "a head of %zu bytes: %d", total, r);
    CO_EQ(strlen(head), total);
    weft_ws_free(ws);
    io_close_pipe(sv);
  }
  list[0] = pad_header(pad, HEAD_MAX + 1 - rest);
  pair(sv);
  CO_EQ(weft_ws_connect_opts(&ws, sv[0], "server.example.com", "/chat", &o, DEADLINE()), -EINVAL);
  nothing_sent(sv);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, a_request_head_of_8_kib_is_taken_and_one_byte_more_refused, .timeout = 30)
{
  rt_run(1, head_limit_main, NULL);
  rt_assert_clean();
}
