/* SPDX-License-Identifier: MIT */
/* The WebSocket connection shared by ws_handshake.c and websocket.c. */
#ifndef WEFT_LIB_WS_INTERNAL_H
#define WEFT_LIB_WS_INTERNAL_H

#include "weft/bufio.h"
#include "weft/sync.h"
#include "weft/websocket.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WS_PATH_MAX 2048
#define WS_PROTOCOL_MAX 256 /* a subprotocol token, its NUL included */
#define WS_MASK_CHUNK 16384 /* a client masks a copy of its payload this much at a time */

struct weft_ws {
  int fd;
  bool client;        /* we mask what we send; the peer must not */
  /* Shared between the receiving task and the sending ones. */
  atomic_bool close_sent;  /* no data may follow it (set under send_lock) */
  atomic_bool close_seen;  /* the peer's close has been read (release) */
  atomic_bool broken;      /* a frame was cut short: the stream is unusable */
  atomic_bool closing;     /* weft_ws_close was called: no more messages or pings */
  int peer_code;           /* the peer's close status (1005: none given) */
  /* A ping whose pong could not be written (the send lock not had by the
   * receive's deadline): answered first thing in the next receive. Only
   * the receiving task touches these. */
  bool pong_owed;
  unsigned char owed[125];
  size_t owed_len;
  weft_reader *rd;    /* everything read, handshake included */
  weft_mutex send_lock;
  unsigned char masks[256]; /* random bytes for masking keys */
  size_t masks_used;
  unsigned char *mask_buf;  /* a client's masked copy (WS_MASK_CHUNK bytes) */
  char path[WS_PATH_MAX];
  char protocol[WS_PROTOCOL_MAX]; /* the agreed subprotocol, "" for none */
  char *headers;      /* the peer's handshake headers: "name\0value\0" pairs */
  size_t headers_len, headers_cap;
};

/* A connection on fd with its reader; NULL for lack of memory. */
weft_ws *weft__ws_new(int fd, bool client);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key + GUID)),
 * 28 characters and a NUL. */
void weft__ws_accept_value(const char *key, char out[29]);

/* A status a close frame may carry (on the wire, either way). */
bool weft__ws_close_code_valid(int code);

/* True if s[0, n) is well-formed UTF-8 (no overlongs, surrogates, or code
 * points above U+10FFFF). */
bool weft__utf8_valid(const unsigned char *s, size_t n);

#endif
