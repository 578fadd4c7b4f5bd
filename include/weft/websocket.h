/* SPDX-License-Identifier: MIT */
/*
 * WebSocket (RFC 6455) over a connected stream socket, or dialled from a
 * ws:// URL: the opening handshake for either side, whole messages in and
 * out, ping/pong and the closing handshake, with subprotocol negotiation,
 * extra request headers, and a server-side check that may refuse a request
 * (weft_ws_opts). No extensions: permessage-deflate is neither offered nor
 * accepted.
 *
 *     int fd = weft_listener_accept(l, deadline);        server
 *     weft_ws *ws;
 *     if (weft_ws_accept(&ws, fd, deadline) == 0) {
 *       char msg[65536];
 *       int type;
 *       ssize_t n;
 *       while ((n = weft_ws_recv(ws, msg, sizeof msg, &type, WEFT_NO_DEADLINE)) >= 0 &&
 *              type != WEFT_WS_CLOSE)
 *         weft_ws_send(ws, type, msg, (size_t)n, WEFT_NO_DEADLINE);
 *       weft_ws_free(ws);
 *     }
 *     weft_close(fd);
 *
 * The calls are weft's blocking calls (coroutines suspend, plain threads
 * block) with a deadline each, WEFT_NO_DEADLINE for none. A weft_ws never
 * closes its descriptor: weft_ws_free, then close it.
 *
 * Tasks: one task receives at a time (weft_ws_recv, and weft_ws_close,
 * which reads until the peer's close); sends (weft_ws_send, weft_ws_ping)
 * may come from other tasks meanwhile, and from each other:
 * each frame is written whole under a lock, and the pongs and the close reply
 * that weft_ws_recv writes take the same lock.
 *
 * Failures: a peer that breaks the protocol gets a close frame with the
 * RFC's status (1002 protocol error, 1007 text that is not UTF-8, 1009 a
 * message larger than the buffer) and the call returns -EPROTO, -EILSEQ or
 * -EMSGSIZE. A timeout or cancel while nothing of a message has been read
 * (weft_ws_recv waiting for the next one), or before the first byte of a
 * frame went out (a send waiting for the send lock or for room in the
 * socket), leaves the connection as it was; one in the middle of a frame,
 * in either direction, or between the fragments of a message (the part
 * read so far would be lost) breaks it, like any transport error: every
 * later call then returns -EPIPE.
 */
#ifndef WEFT_WEBSOCKET_H
#define WEFT_WEBSOCKET_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_ws weft_ws;

/* Message types (the frame opcodes). */
enum {
  WEFT_WS_TEXT = 1,   /* UTF-8, checked both ways */
  WEFT_WS_BINARY = 2,
  WEFT_WS_CLOSE = 8,  /* weft_ws_recv: the peer closed (see weft_ws_close_code) */
};

/* Server side: reads the client's HTTP upgrade request from fd and answers
 * it. On success *out is the connection and weft_ws_path() the request's
 * path. A request that is not a valid WebSocket upgrade is answered 400 -
 * or 426 with the version weft speaks, for a Sec-WebSocket-Version other
 * than 13 - and the call returns -EPROTO: not GET, not HTTP/1.1, a request
 * line not "GET <target> HTTP/1.1" exactly, a target of 2048 bytes or more
 * or with a byte outside visible ASCII, a control character other than a
 * tab in the head, a header name that is not a token, missing
 * Upgrade/Connection/Sec-WebSocket-Key (repeated lines of those two count
 * together), a Sec-WebSocket-Key or Sec-WebSocket-Version line repeated,
 * no Host line or more than one, or headers over 8 KiB.
 * Also -EINVAL (out NULL, fd < 0), -ENOMEM, -ETIMEDOUT, -ECANCELED, the
 * socket's errors (-ECONNRESET, -EPIPE when the peer went away first:
 * closed before sending a byte of its request, which is not answered). */
WEFT_API int weft_ws_accept(weft_ws **out, int fd, int64_t deadline);

/* Client side: sends the upgrade request for `path` (starting with '/') on
 * host `host` (the Host header: "example.com" or "example.com:8080") and
 * checks the answer, Sec-WebSocket-Accept included. -EINVAL (NULL
 * arguments, fd < 0, a path without its '/', an empty host, a blank or a
 * control character in host or path),
 * -EPROTO (the server did not switch protocols, or answered wrongly:
 * Sec-WebSocket-Accept missing, wrong or repeated, a control character or
 * a header name that is not a token),
 * -EPIPE (the server closed the connection without answering), -ENOMEM,
 * -ETIMEDOUT, -ECANCELED, the socket's errors. */
WEFT_API int weft_ws_connect(weft_ws **out, int fd, const char *host, const char *path,
                             int64_t deadline);

/* Options of the opening handshake (weft_ws_accept_opts,
 * weft_ws_connect_opts). NULL, or all fields zero, is the plain handshake of
 * weft_ws_accept and weft_ws_connect. */
typedef struct weft_ws_opts {
  /* Subprotocols (Sec-WebSocket-Protocol): a NULL-terminated list of
   * tokens of at most 255 bytes, matched case-sensitively. A client offers them in its order of
   * preference; a server takes the first of the client's offers that is on
   * its list, or none when nothing matches (it then answers without one,
   * and a client accepts that: weft_ws_protocol says ""). */
  const char *const *protocols;
  /* Client only: more request header lines, each "Name: value", such as
   * "Origin: https://example.com" or "Authorization: Bearer ...";
   * NULL-terminated. Not one of the handshake's own (Host, Upgrade,
   * Connection, Sec-WebSocket-*), nor Content-Length or Transfer-Encoding
   * (an upgrade request has no body). */
  const char *const *headers;
  /* Server only: called once a valid upgrade request has been read and its
   * subprotocol chosen, before anything is answered, with the connection -
   * weft_ws_path, weft_ws_header and weft_ws_protocol work on it. Return 0
   * to accept; an HTTP status from 400 to 599 refuses the request with that
   * status (other values refuse it with 500), and weft_ws_accept_opts then
   * returns -ECONNREFUSED. It runs in the accepting task and may wait. */
  int (*check)(weft_ws *ws, void *arg);
  void *check_arg;
} weft_ws_opts;

/* weft_ws_accept with options. -EINVAL also for a subprotocol that is not a
 * token of at most 255 bytes, or a client-only option (headers). */
WEFT_API int weft_ws_accept_opts(weft_ws **out, int fd, const weft_ws_opts *o, int64_t deadline);

/* weft_ws_connect with options. -EINVAL also for a subprotocol that is not a
 * token of at most 255 bytes, a header line that is not "Name: value" or holds CR, LF or another
 * control character, a header the field's comment excludes, a request head
 * over 8 KiB, or a server-only option (check). -EPROTO also when the server
 * chose a subprotocol that was not offered, or answered with an extension
 * (none is ever offered). */
WEFT_API int weft_ws_connect_opts(weft_ws **out, int fd, const char *host, const char *path,
                                  const weft_ws_opts *o, int64_t deadline);

/* Client side from a URL, "ws://host[:port][/path][?query]": host is a
 * name, an IPv4 address or an IPv6 one in brackets; the port is 80 unless
 * given. Resolves and connects (weft_tcp_connect_dl), then runs
 * weft_ws_connect_opts with the Host header as the URL writes the host
 * (its port too, unless it is 80) and the path and query ("/" for none).
 * *fd_out gets the socket: close it after weft_ws_free. -EINVAL (NULL
 * arguments; a URL that is not ws://, or has user info, a fragment, blanks,
 * an empty host or a port outside 1-65535), -EPROTONOSUPPORT for wss:// (no
 * TLS in weft), and the errors of weft_tcp_connect_dl and
 * weft_ws_connect_opts; on failure nothing is left open. */
WEFT_API int weft_ws_dial(weft_ws **out, int *fd_out, const char *url, const weft_ws_opts *o,
                          int64_t deadline);

/* The subprotocol both sides agreed on, "" for none. */
WEFT_API const char *weft_ws_protocol(const weft_ws *ws);

/* The value of header `name` (any case) in the peer's half of the opening
 * handshake - the request on the server side, the answer on the client
 * side - without surrounding blanks; the first one if it came more than
 * once; NULL if it did not come. Valid until weft_ws_free. */
WEFT_API const char *weft_ws_header(const weft_ws *ws, const char *name);

/* Receives the next message into buf[0, cap), its fragments joined; answers
 * pings on the way (pongs are consumed; a pong that could not be written by
 * the deadline - a large send holding the connection - goes first thing in
 * the next receive, and the timeout leaves the connection whole if the ping
 * came between messages; between the fragments of one it breaks it, as any
 * timeout there). Returns the message's length with
 * *type WEFT_WS_TEXT or WEFT_WS_BINARY; or 0 with *type WEFT_WS_CLOSE when
 * the peer closed (its close is answered if weft_ws_close has not sent one);
 * or -EMSGSIZE (longer than cap), -EPROTO, -EILSEQ, -ECONNRESET (the
 * connection ended without a close), -ETIMEDOUT, -ECANCELED, -EPIPE (closed
 * or broken before), -EINVAL (NULL ws or type, buf NULL with cap > 0). */
WEFT_API ssize_t weft_ws_recv(weft_ws *ws, void *buf, size_t cap, int *type, int64_t deadline);

/* Sends one message (a single frame). 0, or -EINVAL (bad type, NULL buf
 * with n > 0), -EILSEQ (WEFT_WS_TEXT that is not UTF-8: nothing is sent),
 * -EPIPE (closed: weft_ws_close was called, or the connection broke; a
 * peer gone away is -EPIPE too, never a SIGPIPE, on a plain thread as well),
 * -ETIMEDOUT, -ECANCELED, the socket's errors. */
WEFT_API int weft_ws_send(weft_ws *ws, int type, const void *buf, size_t n, int64_t deadline);

/* Sends a ping with up to 125 bytes of data (-EINVAL beyond); its pong is
 * consumed by weft_ws_recv. Errors as weft_ws_send. */
WEFT_API int weft_ws_ping(weft_ws *ws, const void *data, size_t n, int64_t deadline);

/* The closing handshake: sends a close frame with `code` (1000 normal, 1001
 * going away, 1002-1003 and 1007-1014 as RFC 6455 7.4.1 and IANA define
 * them, 3000-4999 for applications; else -EINVAL) and `reason` (NULL or
 * UTF-8 of at most 123 bytes), unless one was sent already, then reads and
 * drops messages until the peer's close comes. 0 once it has; -ETIMEDOUT at the
 * deadline, -ECONNRESET if the connection ends first, the socket's error if
 * the close frame cannot be written (-EPIPE: the peer had gone already),
 * -EPIPE at once, writing nothing, on a connection already broken (a call
 * before failed part-way or met a protocol error) unless the peer's close
 * came before (0), -ECANCELED, and the errors of weft_ws_recv for a peer that breaks the
 * protocol meanwhile. Either way no more messages can be sent. */
WEFT_API int weft_ws_close(weft_ws *ws, int code, const char *reason, int64_t deadline);

/* The status code of the peer's close frame (1005 if it had none), or 0
 * while the peer has not closed. */
WEFT_API int weft_ws_close_code(const weft_ws *ws);

/* The path of the request weft_ws_accept answered ("" on the client side). */
WEFT_API const char *weft_ws_path(const weft_ws *ws);

/* Frees ws; does not close its descriptor. NULL is allowed. */
WEFT_API void weft_ws_free(weft_ws *ws);

#ifdef __cplusplus
}
#endif

#endif
