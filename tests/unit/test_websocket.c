/* SPDX-License-Identifier: MIT */
/*
 * Suite "websocket": RFC 6455 on a socketpair. The wire format is checked
 * against the RFC's own examples (the handshake's accept key, the framed
 * "Hello" masked, unmasked and fragmented), with the test playing the other
 * side byte by byte; then a weft client and a weft server exchange messages
 * of every length class, close cleanly, and refuse what a peer may not
 * send, each with the status the RFC names. Deadlines and cancels between
 * messages leave a connection usable; a frame cut short does not.
 */
#include "ws_test.h"

#include <signal.h>

#define RFC_REQUEST                                                                           \
  "GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n"                \
  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"                   \
  "Origin: http://example.com\r\nSec-WebSocket-Version: 13\r\n\r\n"

/* A weft server on sv[0], the test as the client on sv[1]. */
static weft_ws *raw_client_handshake(int sv[2])
{
  raw_send(sv[1], RFC_REQUEST, strlen(RFC_REQUEST));
  weft_ws *ws = NULL;
  CO_EQ(weft_ws_accept(&ws, sv[0], weft_now() + 5 * WEFT_SEC), 0);
  char head[1024];
  raw_head(sv[1], head, sizeof(head));
  CO_CHECK(strncmp(head, "HTTP/1.1 101 ", 13) == 0);
  /* The RFC's worked example (section 1.3). */
  CO_CHECK(strstr(head, "\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n") != NULL);
  CO_CHECK(ws && strcmp(weft_ws_path(ws), "/chat") == 0);
  return ws;
}

/* ---- the RFC's examples ------------------------------------------------------------------ */

static void *server_wire_main(void *arg)
{
  (void)arg;
  int sv[2];
  pair(sv);
  weft_ws *ws = raw_client_handshake(sv);
  char buf[70000];
  int type = 0;
  /* Section 5.7: a masked "Hello". */
  static const unsigned char hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                        0x7f, 0x9f, 0x4d, 0x51, 0x58};
  raw_send(sv[1], hello, sizeof(hello));
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), 5);
  CO_EQ(type, WEFT_WS_TEXT);
  CO_CHECK(memcmp(buf, "Hello", 5) == 0);
  /* The server's answer is unmasked, as 5.7's first example. */
  CO_EQ(weft_ws_send(ws, WEFT_WS_TEXT, "Hello", 5, WEFT_NO_DEADLINE), 0);
  unsigned char got[16];
  raw_recv(sv[1], got, 7);
  CO_CHECK(memcmp(got, "\x81\x05Hello", 7) == 0);
  /* 256 and 65536 bytes: the 16- and 64-bit length forms. */
  static unsigned char big[65536];
  for (size_t i = 0; i < sizeof(big); i++)
    big[i] = (unsigned char)(i * 7);
  CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, big, 256, WEFT_NO_DEADLINE), 0);
  raw_recv(sv[1], got, 4);
  CO_CHECK(memcmp(got, "\x82\x7e\x01\x00", 4) == 0);
  raw_recv(sv[1], buf, 256);
  CO_CHECK(memcmp(buf, big, 256) == 0);
  CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, big, sizeof(big), WEFT_NO_DEADLINE), 0);
  raw_recv(sv[1], got, 10);
  CO_CHECK(memcmp(got, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10) == 0);
  raw_recv(sv[1], buf, sizeof(big));
  CO_CHECK(memcmp(buf, big, sizeof(big)) == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, server_side_matches_the_rfc_examples, .timeout = 30)
{
  rt_run(1, server_wire_main, NULL);
  rt_assert_clean();
}

/* Plays the server's side of the handshake on fd: reads the request,
 * checks it, answers with `status_line` and the right key (or `bad_key`).
 * Returns the request's key. */
static void raw_server_answer(int fd, const char *status_line, bool bad_key)
{
  char head[2048];
  raw_head(fd, head, sizeof(head));
  CO_CHECK(strncmp(head, "GET /chat HTTP/1.1\r\n", 20) == 0);
  CO_CHECK(strstr(head, "\r\nHost: server.example.com\r\n") != NULL);
  CO_CHECK(strstr(head, "\r\nUpgrade: websocket\r\n") != NULL);
  CO_CHECK(strstr(head, "\r\nSec-WebSocket-Version: 13\r\n") != NULL);
  const char *k = strstr(head, "\r\nSec-WebSocket-Key: ");
  CO_CHECK(k != NULL);
  char key[25] = "";
  if (k)
    memcpy(key, k + 21, 24);
  char acc[29], answer[512];
  weft__ws_accept_value(key, acc);
  if (bad_key)
    acc[0] = acc[0] == 'A' ? 'B' : 'A';
  snprintf(answer, sizeof(answer),
           "%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
           status_line, acc);
  raw_send(fd, answer, strlen(answer));
}

/* Starts a weft client on sv[0] and answers it from sv[1]; the client's
 * result in *r. */
static weft_ws *client_handshake(int sv[2], const char *status_line, bool bad_key, int *r)
{
  struct connecting c = {.fd = sv[0], .r = 1};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, weft_shard_id(), connect_task, &c), 0);
  raw_server_answer(sv[1], status_line, bad_key);
  CO_EQ(weft_join(t, NULL), 0);
  *r = c.r;
  return c.ws;
}

/* Reads a masked frame header + payload from the raw side and unmasks it. */
static uint32_t last_mask_key; /* of the last frame raw_masked_frame read */

static size_t raw_masked_frame(int fd, unsigned char *first, unsigned char *payload)
{
  unsigned char h[2], key[4];
  raw_recv(fd, h, 2);
  *first = h[0];
  CO_CHECK(h[1] & 0x80); /* a client masks everything */
  size_t n = h[1] & 0x7f;
  CO_CHECK(n < 126);
  raw_recv(fd, key, 4);
  memcpy(&last_mask_key, key, 4);
  raw_recv(fd, payload, n);
  for (size_t i = 0; i < n; i++)
    payload[i] ^= key[i & 3];
  return n;
}

static void *client_wire_main(void *arg)
{
  (void)arg;
  int sv[2];
  pair(sv);
  int r;
  weft_ws *ws = client_handshake(sv, "HTTP/1.1 101 Switching Protocols", false, &r);
  CO_EQ(r, 0);
  CO_CHECK(ws && strcmp(weft_ws_path(ws), "") == 0);
  if (!ws)
    return NULL;
  /* Section 5.7: an unmasked "Hello", then "Hello" in two fragments with a
   * ping between them (control frames may come between fragments). */
  static const unsigned char frames[] = {0x81, 0x05, 'H', 'e', 'l', 'l', 'o',
                                         0x01, 0x03, 'H', 'e', 'l',
                                         0x89, 0x05, 'H', 'e', 'l', 'l', 'o',
                                         0x80, 0x02, 'l', 'o'};
  raw_send(sv[1], frames, sizeof(frames));
  char buf[64];
  int type = 0;
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), 5);
  CO_EQ(type, WEFT_WS_TEXT);
  CO_CHECK(memcmp(buf, "Hello", 5) == 0);
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), 5);
  CO_CHECK(memcmp(buf, "Hello", 5) == 0);
  /* The ping was answered: a masked pong with its data. */
  unsigned char first, payload[128];
  CO_EQ(raw_masked_frame(sv[1], &first, payload), 5);
  CO_EQ(first, 0x8a);
  CO_CHECK(memcmp(payload, "Hello", 5) == 0);
  uint32_t pong_key = last_mask_key;
  /* What the client sends is masked, with a key that changes. */
  CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, "Hi", 2, WEFT_NO_DEADLINE), 0);
  CO_EQ(raw_masked_frame(sv[1], &first, payload), 2);
  CO_EQ(first, 0x82);
  CO_CHECK(memcmp(payload, "Hi", 2) == 0);
  CO_CHECK(last_mask_key != pong_key);
  /* A server frame that is masked breaks the rules: close 1002. */
  static const unsigned char masked[] = {0x81, 0x81, 1, 2, 3, 4, 'x' ^ 1};
  raw_send(sv[1], masked, sizeof(masked));
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), -EPROTO);
  CO_EQ(raw_masked_frame(sv[1], &first, payload), 2);
  CO_EQ(first, 0x88);
  CO_EQ(payload[0] << 8 | payload[1], 1002);
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), -EPIPE);
  CO_EQ(weft_ws_send(ws, WEFT_WS_TEXT, "x", 1, WEFT_NO_DEADLINE), -EPIPE);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* Servers that do not switch, or answer with the wrong key. */
  pair(sv);
  CO_CHECK(client_handshake(sv, "HTTP/1.1 200 OK", false, &r) == NULL);
  CO_EQ(r, -EPROTO);
  io_close_pipe(sv);
  pair(sv);
  CO_CHECK(client_handshake(sv, "HTTP/1.1 101 Switching Protocols", true, &r) == NULL);
  CO_EQ(r, -EPROTO);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, client_side_matches_the_rfc_examples, .timeout = 30)
{
  rt_run(1, client_wire_main, NULL);
  rt_assert_clean();
}

/* ---- a weft client and a weft server ----------------------------------------------------- */

static const size_t sizes[] = {0, 1, 125, 126, 65535, 65536, 1 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

struct server {
  int fd;
  int echoed;
  int close_code;
};

/* Echoes every message until the peer closes. */
static void *echo_server(void *arg)
{
  struct server *s = arg;
  weft_ws *ws;
  CO_EQ(weft_ws_accept(&ws, s->fd, weft_now() + 5 * WEFT_SEC), 0);
  static unsigned char buf[(1 << 20) + 1];
  for (;;) {
    int type;
    ssize_t n = weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE);
    CO_CHECK(n >= 0);
    if (n < 0 || type == WEFT_WS_CLOSE)
      break;
    CO_EQ(weft_ws_send(ws, type, buf, (size_t)n, WEFT_NO_DEADLINE), 0);
    s->echoed++;
  }
  s->close_code = weft_ws_close_code(ws);
  /* The close was answered by the receive: nothing more may be sent. */
  CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, "x", 1, WEFT_NO_DEADLINE), -EPIPE);
  weft_ws_free(ws);
  return NULL;
}

static void *echo_main(void *arg)
{
  (void)arg;
  int sv[2];
  pair(sv);
  struct server s = {.fd = sv[1]};
  weft_task *st;
  CO_EQ(io_spawn_on(&st, 1, echo_server, &s), 0);
  weft_ws *ws;
  CO_EQ(weft_ws_connect(&ws, sv[0], "localhost", "/echo", weft_now() + 5 * WEFT_SEC), 0);
  static unsigned char out[1 << 20], in[(1 << 20) + 1];
  for (size_t i = 0; i < sizeof(out); i++)
    out[i] = (unsigned char)(i * 31 + 7);
  for (size_t k = 0; k < NSIZES; k++) {
    int type = 0;
    CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, out, sizes[k], WEFT_NO_DEADLINE), 0);
    CO_EQ(weft_ws_recv(ws, in, sizeof(in), &type, WEFT_NO_DEADLINE), (ssize_t)sizes[k]);
    CO_EQ(type, WEFT_WS_BINARY);
    CO_CHECK(memcmp(in, out, sizes[k]) == 0);
  }
  /* Text, multi-byte characters included; a ping's pong is consumed. */
  const char *text = "gr\xc3\xbc\xc3\x9f dich \xf0\x9f\x98\x80";
  CO_EQ(weft_ws_ping(ws, "p", 1, WEFT_NO_DEADLINE), 0);
  CO_EQ(weft_ws_send(ws, WEFT_WS_TEXT, text, strlen(text), WEFT_NO_DEADLINE), 0);
  int type = 0;
  CO_EQ(weft_ws_recv(ws, in, sizeof(in), &type, WEFT_NO_DEADLINE), (ssize_t)strlen(text));
  CO_EQ(type, WEFT_WS_TEXT);
  CO_CHECK(memcmp(in, text, strlen(text)) == 0);
  /* The closing handshake: ours, then the server's answer. */
  CO_EQ(weft_ws_close_code(ws), 0);
  CO_EQ(weft_ws_close(ws, 1000, "bye", weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_ws_close_code(ws), 1000);
  CO_EQ(weft_join(st, NULL), 0);
  CO_EQ(s.echoed, (int)NSIZES + 1);
  CO_EQ(s.close_code, 1000);
  CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, "x", 1, WEFT_NO_DEADLINE), -EPIPE);
  CO_EQ(weft_ws_recv(ws, in, sizeof(in), &type, WEFT_NO_DEADLINE), -EPIPE);
  CO_EQ(weft_ws_close(ws, 1000, NULL, WEFT_NO_DEADLINE), 0); /* again: done already */
  weft_ws_free(ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, client_and_server_echo_every_length_and_close, .timeout = 60)
{
  rt_run(2, echo_main, NULL);
  rt_assert_clean();
}

/* ---- what a peer may not send ----------------------------------------------------------- */

/* Sends raw `frame` to a fresh weft server and checks its verdict: the
 * receive's error and the status of the close frame it sent back. */
static void refused(const void *frame, size_t n, size_t cap, ssize_t err, int status)
{
  int sv[2];
  pair(sv);
  weft_ws *ws = raw_client_handshake(sv);
  raw_send(sv[1], frame, n);
  char buf[64];
  int type = 0;
  CO_EQ(weft_ws_recv(ws, buf, cap, &type, WEFT_NO_DEADLINE), err);
  unsigned char close[4];
  raw_recv(sv[1], close, 4);
  CO_EQ(close[0], 0x88);
  CO_EQ(close[1], 2);
  CO_EQ(close[2] << 8 | close[3], status);
  CO_EQ(weft_ws_recv(ws, buf, cap, &type, WEFT_NO_DEADLINE), -EPIPE);
  weft_ws_free(ws);
  io_close_pipe(sv);
}

#define M 0x80, 0, 0, 0, 0 /* "masked" with an all-zero key: payload as is */

static void *refusals_main(void *arg)
{
  (void)arg;
  static const unsigned char unmasked[] = {0x81, 0x01, 'x'};
  static const unsigned char rsv[] = {0xC1, 0x81, 0, 0, 0, 0, 'x'};
  static const unsigned char opcode3[] = {0x83, M};
  static const unsigned char cont_first[] = {0x80, 0x81, 0, 0, 0, 0, 'x'};
  static const unsigned char text_in_text[] = {0x01, 0x81, 0, 0, 0, 0, 'x', 0x81, M};
  static const unsigned char long_ping[] = {0x89, 0xFE, 0x00, 0x7E, 0, 0, 0, 0};
  static const unsigned char split_ping[] = {0x09, M};
  static const unsigned char close_1005[] = {0x88, 0x82, 0, 0, 0, 0, 0x03, 0xED};
  static const unsigned char close_1byte[] = {0x88, 0x81, 0, 0, 0, 0, 0x03};
  static const unsigned char bad_utf8[] = {0x81, 0x82, 0, 0, 0, 0, 0xC0, 0x80};
  static const unsigned char bad_reason[] = {0x88, 0x83, 0, 0, 0, 0, 0x03, 0xE8, 0xFF};
  static const unsigned char too_big[] = {0x82, 0x85, 0, 0, 0, 0, 1, 2, 3, 4, 5};
  refused(unmasked, sizeof(unmasked), 64, -EPROTO, 1002);
  refused(rsv, sizeof(rsv), 64, -EPROTO, 1002);
  refused(opcode3, sizeof(opcode3), 64, -EPROTO, 1002);
  refused(cont_first, sizeof(cont_first), 64, -EPROTO, 1002);
  refused(text_in_text, sizeof(text_in_text), 64, -EPROTO, 1002);
  refused(long_ping, sizeof(long_ping), 64, -EPROTO, 1002);
  refused(split_ping, sizeof(split_ping), 64, -EPROTO, 1002);
  refused(close_1005, sizeof(close_1005), 64, -EPROTO, 1002);
  refused(close_1byte, sizeof(close_1byte), 64, -EPROTO, 1002);
  refused(bad_utf8, sizeof(bad_utf8), 64, -EILSEQ, 1007);
  refused(bad_reason, sizeof(bad_reason), 64, -EILSEQ, 1007);
  refused(too_big, sizeof(too_big), 4, -EMSGSIZE, 1009);

  /* The peer closing with a status: answered with that status. */
  int sv[2];
  pair(sv);
  weft_ws *ws = raw_client_handshake(sv);
  static const unsigned char going[] = {0x88, 0x82, 0, 0, 0, 0, 0x03, 0xE9};
  raw_send(sv[1], going, sizeof(going));
  char buf[8];
  int type = 0;
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), 0);
  CO_EQ(type, WEFT_WS_CLOSE);
  CO_EQ(weft_ws_close_code(ws), 1001);
  unsigned char reply[4];
  raw_recv(sv[1], reply, 4);
  CO_CHECK(memcmp(reply, "\x88\x02\x03\xe9", 4) == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* A stream that ends: before a frame, and inside one. */
  pair(sv);
  ws = raw_client_handshake(sv);
  shutdown(sv[1], SHUT_WR);
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), -ECONNRESET);
  weft_ws_free(ws);
  io_close_pipe(sv);
  pair(sv);
  ws = raw_client_handshake(sv);
  static const unsigned char cut[] = {0x82, 0x85, 0, 0, 0, 0, 'a', 'b'};
  raw_send(sv[1], cut, sizeof(cut));
  shutdown(sv[1], SHUT_WR);
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), -ECONNRESET);
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), -EPIPE);
  weft_ws_free(ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, peer_violations_get_the_rfc_status, .timeout = 30)
{
  rt_run(1, refusals_main, NULL);
  rt_assert_clean();
}

/* ---- handshakes refused, arguments refused ----------------------------------------------- */

/* Sends a raw request to a fresh weft server: its result and answer line. */
static void bad_request(const char *req, const char *status)
{
  int sv[2];
  pair(sv);
  raw_send(sv[1], req, strlen(req));
  shutdown(sv[1], SHUT_WR);
  weft_ws *ws = NULL;
  CO_EQ(weft_ws_accept(&ws, sv[0], weft_now() + 5 * WEFT_SEC), -EPROTO);
  CO_CHECK(ws == NULL);
  char head[512];
  raw_head(sv[1], head, sizeof(head));
  CO_CHECK(strncmp(head, status, strlen(status)) == 0);
  io_close_pipe(sv);
}

static void *handshakes_main(void *arg)
{
  (void)arg;
  bad_request("POST /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
              "HTTP/1.1 400 ");
  bad_request("GET /chat HTTP/1.0\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
              "HTTP/1.1 400 ");
  bad_request("GET /chat HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
              "HTTP/1.1 400 ");
  bad_request("GET /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
              "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: short\r\n"
              "Sec-WebSocket-Version: 13\r\n\r\n",
              "HTTP/1.1 400 ");
  bad_request("GET /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
              "HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\n");
  bad_request("GET /chat HTTP/1.1\r\nUpgrade: websocket\r\n", "HTTP/1.1 400 "); /* cut */
  /* A head over 8 KiB. */
  static char huge[10000];
  strcpy(huge, "GET /chat HTTP/1.1\r\nX-Filler: ");
  size_t n = strlen(huge);
  memset(huge + n, 'a', sizeof(huge) - n - 5);
  strcpy(huge + sizeof(huge) - 5, "\r\n\r\n");
  bad_request(huge, "HTTP/1.1 400 ");

  /* Case and spacing of header names and tokens do not matter. */
  int sv[2];
  pair(sv);
  static const char mixed[] = "GET /x?y=1 HTTP/1.1\r\nhOST: h\r\nupgrade:  WebSocket \r\n"
                              "CONNECTION: keep-alive,upgrade\r\n"
                              "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                              "sec-websocket-version: 13\r\n\r\n";
  raw_send(sv[1], mixed, strlen(mixed));
  weft_ws *ws = NULL;
  CO_EQ(weft_ws_accept(&ws, sv[0], weft_now() + 5 * WEFT_SEC), 0);
  CO_CHECK(ws && strcmp(weft_ws_path(ws), "/x?y=1") == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* Arguments. */
  pair(sv);
  CO_EQ(weft_ws_accept(NULL, sv[0], WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_accept(&ws, -1, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_connect(&ws, sv[0], "h", "nopath", WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_connect(&ws, sv[0], "h\r\nX: y", "/", WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_connect(&ws, sv[0], "h", "/a\nb", WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_connect(&ws, sv[0], NULL, "/", WEFT_NO_DEADLINE), -EINVAL);
  int type;
  CO_EQ(weft_ws_recv(NULL, NULL, 0, &type, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_send(NULL, WEFT_WS_TEXT, "", 0, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_close(NULL, 1000, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_close_code(NULL), 0);
  CO_CHECK(strcmp(weft_ws_path(NULL), "") == 0);
  weft_ws_free(NULL);
  /* What this side may not send. */
  ws = raw_client_handshake(sv);
  CO_EQ(weft_ws_recv(ws, NULL, 0, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_recv(ws, NULL, 5, &type, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_send(ws, WEFT_WS_TEXT, "\xc0\x80", 2, WEFT_NO_DEADLINE), -EILSEQ);
  CO_EQ(weft_ws_send(ws, WEFT_WS_CLOSE, "", 0, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_send(ws, 3, "", 0, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, NULL, 1, WEFT_NO_DEADLINE), -EINVAL);
  static const char p126[126];
  CO_EQ(weft_ws_ping(ws, p126, sizeof(p126), WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_close(ws, 1005, NULL, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_close(ws, 2999, NULL, WEFT_NO_DEADLINE), -EINVAL);
  static char long_reason[125];
  memset(long_reason, 'r', 124);
  CO_EQ(weft_ws_close(ws, 1000, long_reason, WEFT_NO_DEADLINE), -EINVAL);
  CO_EQ(weft_ws_close(ws, 1000, "\xff", WEFT_NO_DEADLINE), -EINVAL);
  /* Nothing of that reached the wire: the next frame is the first. */
  CO_EQ(weft_ws_send(ws, WEFT_WS_TEXT, "", 0, WEFT_NO_DEADLINE), 0);
  unsigned char f[2];
  raw_recv(sv[1], f, 2);
  CO_CHECK(memcmp(f, "\x81\x00", 2) == 0);
  weft_ws_free(ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, handshakes_and_arguments_refused, .timeout = 30)
{
  rt_run(1, handshakes_main, NULL);
  rt_assert_clean();
}

/* ---- deadlines, cancel, broken streams --------------------------------------------------- */

struct receiver {
  weft_ws *ws;
  ssize_t r;
};

static void *receiver(void *arg)
{
  struct receiver *rc = arg;
  char buf[16];
  int type;
  rc->r = weft_ws_recv(rc->ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE);
  return (void *)(intptr_t)rc->r;
}

static void *deadlines_main(void *arg)
{
  (void)arg;
  int sv[2];
  pair(sv);
  weft_ws *ws = raw_client_handshake(sv);
  char buf[16];
  int type = 0;
  /* Waiting for a message: a timeout and a cancel consume nothing. */
  int64_t t0 = weft_now();
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  struct receiver rc = {.ws = ws};
  io_cancel_while_waiting(1, receiver, &rc);
  static const unsigned char hi[] = {0x82, 0x82, 0, 0, 0, 0, 'h', 'i'};
  raw_send(sv[1], hi, sizeof(hi));
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), 2);
  CO_CHECK(memcmp(buf, "hi", 2) == 0);
  /* Half a frame, then nothing: the timeout breaks the connection. */
  static const unsigned char half[] = {0x82, 0x85, 0, 0, 0, 0, 'a', 'b'};
  raw_send(sv[1], half, sizeof(half));
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_EQ(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), -EPIPE);
  CO_EQ(weft_ws_send(ws, WEFT_WS_BINARY, "x", 1, WEFT_NO_DEADLINE), -EPIPE);
  CO_EQ(weft_ws_close(ws, 1000, NULL, WEFT_NO_DEADLINE), -EPIPE);
  weft_ws_free(ws);
  io_close_pipe(sv);

  /* weft_ws_close waits for the peer's close: a deadline bounds that. */
  pair(sv);
  ws = raw_client_handshake(sv);
  CO_EQ(weft_ws_close(ws, 3000, "done", weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  unsigned char f[8];
  raw_recv(sv[1], f, 8);
  CO_CHECK(memcmp(f, "\x88\x06\x0b\xb8" "done", 8) == 0);
  /* It dropped messages meanwhile (of any size); the close then ends it. */
  static unsigned char big[70000] = {0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  raw_send(sv[1], big, 14 + 65536);
  static const unsigned char bye[] = {0x88, 0x82, 0, 0, 0, 0, 0x0b, 0xb8};
  raw_send(sv[1], bye, sizeof(bye));
  CO_EQ(weft_ws_close(ws, 3000, "done", weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_ws_close_code(ws), 3000);
  weft_ws_free(ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, deadlines_cancels_and_cut_frames, .timeout = 30)
{
  rt_run(2, deadlines_main, NULL);
  rt_assert_clean();
}

/* ---- several senders, one receiver -------------------------------------------------------- */

#define SENDERS 4
#define PER_SENDER 100

/* Lengths of both short forms and, every third message, one larger than a
 * socket buffer takes at once: such a frame goes out in several writes, and
 * without the send lock another sender's frame would land between them. */
static size_t fill_len(int i)
{
  return i % 3 == 0 ? 300000 + (size_t)i : (size_t)(i % 200);
}

struct sender {
  weft_ws *ws;
  int id;
};

static void *sender(void *arg)
{
  struct sender *s = arg;
  char *msg = malloc(400000);
  CO_CHECK(msg != NULL);
  for (int i = 0; msg && i < PER_SENDER; i++) {
    int n = snprintf(msg, 32, "%d:%d:", s->id, i);
    size_t len = (size_t)n + fill_len(i);
    memset(msg + n, 'a' + s->id, len - (size_t)n);
    CO_EQ(weft_ws_send(s->ws, WEFT_WS_TEXT, msg, len, WEFT_NO_DEADLINE), 0);
  }
  free(msg);
  return NULL;
}

static void *senders_main(void *arg)
{
  (void)arg;
  int sv[2];
  pair(sv);
  struct server srv = {.fd = sv[1]};
  weft_task *st, *t[SENDERS];
  CO_EQ(io_spawn_on(&st, 1, echo_server, &srv), 0);
  weft_ws *ws;
  CO_EQ(weft_ws_connect(&ws, sv[0], "localhost", "/", weft_now() + 5 * WEFT_SEC), 0);
  struct sender s[SENDERS];
  for (int i = 0; i < SENDERS; i++) {
    s[i] = (struct sender){.ws = ws, .id = i};
    CO_EQ(rt_spawn(&t[i], WEFT_PLACE_STEALABLE, -1, sender, &s[i]), 0);
  }
  /* Every echo comes back whole and in each sender's order. */
  int next[SENDERS] = {0};
  static char buf[400000];
  for (int k = 0; k < SENDERS * PER_SENDER; k++) {
    int type = 0, id = -1, i = -1;
    ssize_t n = weft_ws_recv(ws, buf, sizeof(buf) - 1, &type, WEFT_NO_DEADLINE);
    CO_CHECK(n > 0);
    if (n <= 0)
      break;
    buf[n] = '\0';
    CO_EQ(sscanf(buf, "%d:%d:", &id, &i), 2);
    CO_CHECK(id >= 0 && id < SENDERS);
    if (id < 0 || id >= SENDERS)
      break;
    CO_EQ(i, next[id]);
    next[id]++;
    const char *fill = strchr(strchr(buf, ':') + 1, ':') + 1;
    CO_EQ((size_t)(n - (fill - buf)), fill_len(i));
    for (const char *c = fill; c < buf + n; c++)
      if (*c != 'a' + id) {
        CO_EQ(*c, 'a' + id);
        break;
      }
  }
  for (int i = 0; i < SENDERS; i++)
    CO_EQ(weft_join(t[i], NULL), 0);
  CO_EQ(weft_ws_close(ws, 1000, NULL, weft_now() + 5 * WEFT_SEC), 0);
  CO_EQ(weft_join(st, NULL), 0);
  CO_EQ(srv.echoed, SENDERS * PER_SENDER);
  weft_ws_free(ws);
  io_close_pipe(sv);
  return NULL;
}

Test(websocket, concurrent_senders_never_interleave_frames, .timeout = 60)
{
  rt_run(2, senders_main, NULL);
  rt_assert_clean();
}

/* ---- plain threads, and UTF-8 ------------------------------------------------------------- */

static void *plain_server(void *arg)
{
  struct server *s = arg;
  return echo_server(s);
}

Test(websocket, plain_threads_talk_too, .timeout = 30)
{
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct server s = {.fd = sv[1]};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, plain_server, &s), 0);
  weft_ws *ws;
  cr_assert_eq(weft_ws_connect(&ws, sv[0], "localhost", "/", weft_now() + 5 * WEFT_SEC), 0);
  char buf[16];
  int type;
  cr_assert_eq(weft_ws_send(ws, WEFT_WS_TEXT, "plain", 5, WEFT_NO_DEADLINE), 0);
  cr_assert_eq(weft_ws_recv(ws, buf, sizeof(buf), &type, WEFT_NO_DEADLINE), 5);
  cr_assert(memcmp(buf, "plain", 5) == 0);
  cr_assert_eq(weft_ws_close(ws, 1001, NULL, weft_now() + 5 * WEFT_SEC), 0);
  pthread_join(th, NULL);
  rt_assert_clean();
  cr_assert_eq(s.close_code, 1001);
  weft_ws_free(ws);
  close(sv[0]);
  close(sv[1]);
}

/* A plain thread's frames to a peer that went away: -EPIPE, and no
 * SIGPIPE (blocked here, so one raised would stay pending) - a send, a
 * ping and a close, each on a connection of its own. */
Test(websocket, a_plain_threads_frame_to_a_gone_peer_is_epipe_without_sigpipe, .timeout = 30)
{
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  cr_assert_eq(pthread_sigmask(SIG_BLOCK, &pipe_only, &old), 0);
  for (int op = 0; op < 3; op++) {
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(send(sv[1], RFC_REQUEST, strlen(RFC_REQUEST), 0), (ssize_t)strlen(RFC_REQUEST));
    weft_ws *ws;
    cr_assert_eq(weft_ws_accept(&ws, sv[0], weft_now() + 5 * WEFT_SEC), 0);
    close(sv[1]);
    int r = op == 0   ? weft_ws_send(ws, WEFT_WS_TEXT, "gone", 4, WEFT_NO_DEADLINE)
            : op == 1 ? weft_ws_ping(ws, "p", 1, WEFT_NO_DEADLINE)
                      : weft_ws_close(ws, 1000, NULL, WEFT_NO_DEADLINE);
    cr_assert_eq(r, -EPIPE, "op %d: %d", op, r);
    cr_assert_eq(sigpending(&pending), 0);
    cr_assert(!sigismember(&pending, SIGPIPE), "op %d raised SIGPIPE", op);
    weft_ws_free(ws);
    close(sv[0]);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  rt_assert_clean();
}

Test(websocket, utf8_validation, .timeout = 10)
{
  struct {
    const char *s;
    bool ok;
  } cases[] = {
      {"", true},
      {"ascii", true},
      {"\xc3\xa9", true},             /* U+00E9 */
      {"\xe2\x82\xac", true},         /* U+20AC */
      {"\xf0\x9f\x98\x80", true},     /* U+1F600 */
      {"\xf4\x8f\xbf\xbf", true},     /* U+10FFFF */
      {"\xc0\x80", false},            /* overlong NUL */
      {"\xe0\x80\xaf", false},        /* overlong '/' */
      {"\xed\xa0\x80", false},        /* a surrogate */
      {"\xf4\x90\x80\x80", false},    /* above U+10FFFF */
      {"\xe2\x82", false},            /* cut short */
      {"\x80", false},                /* a lone continuation */
      {"\xf8\x88\x80\x80\x80", false}, /* five bytes */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    cr_assert_eq(weft__utf8_valid((const unsigned char *)cases[i].s, strlen(cases[i].s)),
                 cases[i].ok, "case %zu", i);
}
