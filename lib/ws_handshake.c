/* SPDX-License-Identifier: MIT */
/*
 * The WebSocket opening handshake (RFC 6455 section 4): the HTTP/1.1 upgrade
 * request and its 101 answer, with Sec-WebSocket-Accept =
 * base64(SHA-1(key + the RFC's GUID)). SHA-1 is here only for that (RFC 3174;
 * not for anything that needs it to be secure).
 */
#include "ws_internal.h"

#include "../coro/fault.h"
#include "weft/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define HEADER_MAX 8192 /* the whole request or answer head */

/* ---- SHA-1 and base64 ------------------------------------------------------------ */

static uint32_t rol(uint32_t x, int n)
{
  return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
  uint32_t w[80];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           p[4 * i + 3];
  for (int i = 16; i < 80; i++)
    w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int i = 0; i < 80; i++) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDC;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6;
    }
    uint32_t t = rol(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rol(b, 30);
    b = a;
    a = t;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

/* SHA-1 of m[0, n) (n < 2^61) into out[20]. */
static void sha1(const void *m, size_t n, unsigned char out[20])
{
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  const unsigned char *p = m;
  size_t left = n;
  for (; left >= 64; left -= 64, p += 64)
    sha1_block(h, p);
  unsigned char tail[128] = {0};
  memcpy(tail, p, left);
  tail[left] = 0x80;
  size_t tn = left + 9 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t)n * 8;
  for (int i = 0; i < 8; i++)
    tail[tn - 1 - i] = (unsigned char)(bits >> (8 * i));
  sha1_block(h, tail);
  if (tn == 128)
    sha1_block(h, tail + 64);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 4; j++)
      out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

static const char base64_digits[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64 of in[0, n) into out (4 * ceil(n / 3) + 1 bytes, NUL-terminated). */
static void base64(const unsigned char *in, size_t n, char *out)
{
  const char *digits = base64_digits;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)in[i + 1] << 8;
    if (i + 2 < n)
      v |= in[i + 2];
    out[o++] = digits[v >> 18 & 63];
    out[o++] = digits[v >> 12 & 63];
    out[o++] = i + 1 < n ? digits[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? digits[v & 63] : '=';
  }
  out[o] = '\0';
}

void weft__ws_accept_value(const char *key, char out[29])
{
  char buf[128];
  int n = snprintf(buf, sizeof(buf), "%s" WS_GUID, key);
  unsigned char digest[20];
  sha1(buf, (size_t)n, digest);
  base64(digest, sizeof(digest), out);
}

/* ---- the connection object --------------------------------------------------------- */

weft_ws *weft__ws_new(int fd, bool client)
{
  weft_ws *ws = weft__calloc(1, sizeof(*ws));
  if (!ws)
    return NULL;
  /* Buffers on the heap, not the stack: a coroutine's may be 16 KiB. */
  if (weft_reader_create(&ws->rd, fd, HEADER_MAX) < 0 ||
      (client && !(ws->mask_buf = weft__malloc(WS_MASK_CHUNK)))) {
    weft_reader_destroy(ws->rd);
    free(ws);
    return NULL;
  }
  ws->fd = fd;
  ws->client = client;
  atomic_init(&ws->close_sent, false);
  atomic_init(&ws->close_seen, false);
  atomic_init(&ws->broken, false);
  weft_mutex_init(&ws->send_lock);
  ws->masks_used = sizeof(ws->masks); /* filled on first use */
  return ws;
}

void weft_ws_free(weft_ws *ws)
{
  if (!ws)
    return;
  weft_reader_destroy(ws->rd);
  free(ws->mask_buf);
  free(ws->headers);
  free(ws);
}

const char *weft_ws_path(const weft_ws *ws)
{
  return ws ? ws->path : "";
}

const char *weft_ws_protocol(const weft_ws *ws)
{
  return ws ? ws->protocol : "";
}

/* Calls each(name, value, arg) for the peer's headers in the order they
 * came, until it returns true; returns whether one did. */
static bool each_header(const weft_ws *ws, bool (*each)(const char *, const char *, void *),
                        void *arg)
{
  for (size_t i = 0; i < ws->headers_len;) {
    const char *name = ws->headers + i;
    const char *value = name + strlen(name) + 1;
    i = (size_t)(value - ws->headers) + strlen(value) + 1;
    if (each(name, value, arg))
      return true;
  }
  return false;
}

struct lookup {
  const char *name;
  const char *value;
};

static bool lookup_one(const char *name, const char *value, void *arg)
{
  struct lookup *l = arg;
  if (strcasecmp(name, l->name) != 0)
    return false;
  l->value = value;
  return true;
}

const char *weft_ws_header(const weft_ws *ws, const char *name)
{
  if (!ws || !name)
    return NULL;
  struct lookup l = {.name = name, .value = NULL};
  each_header(ws, lookup_one, &l);
  return l.value;
}

/* Keeps a header of the peer's head (bounded by the head's own size). */
static int store_header(weft_ws *ws, const char *name, const char *value)
{
  size_t nl = strlen(name) + 1, vl = strlen(value) + 1;
  if (ws->headers_len + nl + vl > ws->headers_cap) {
    size_t cap = ws->headers_cap ? ws->headers_cap * 2 : 512;
    while (cap < ws->headers_len + nl + vl)
      cap *= 2;
    char *p = weft__malloc(cap);
    if (!p)
      return -ENOMEM;
    if (ws->headers_len)
      memcpy(p, ws->headers, ws->headers_len);
    free(ws->headers);
    ws->headers = p;
    ws->headers_cap = cap;
  }
  memcpy(ws->headers + ws->headers_len, name, nl);
  memcpy(ws->headers + ws->headers_len + nl, value, vl);
  ws->headers_len += nl + vl;
  return 0;
}

int weft_ws_close_code(const weft_ws *ws)
{
  return ws && atomic_load_explicit(&ws->close_seen, memory_order_acquire) ? ws->peer_code : 0;
}

/* ---- reading the HTTP head ------------------------------------------------------------ */

struct head {
  char first[HEADER_MAX]; /* request or status line */
  char line[HEADER_MAX];  /* the header being read */
  bool upgrade, connection;
  char key[64];           /* Sec-WebSocket-Key or -Accept, "" if absent */
  char version[16];
  int keys, versions;     /* lines of each seen: more than one is invalid */
  int hosts;              /* Host lines of a request: exactly one is valid */
};

/* An HTTP token (RFC 9110 5.6.2): what a subprotocol and a header name are. */
static bool is_token(const char *p, size_t n)
{
  if (n == 0)
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c <= 0x20 || c >= 0x7F || strchr("()<>@,;:\\\"/[]?={}", c))
      return false;
  }
  return true;
}

/* The next item of a comma-separated header value at *p, blanks around it
 * trimmed: its start (NULL at the end) and length in *n; *p moves past it. */
static const char *next_item(const char **p, size_t *n)
{
  const char *s = *p;
  while (*s == ' ' || *s == '\t' || *s == ',')
    s++;
  if (!*s)
    return NULL;
  const char *end = s;
  while (*end && *end != ',')
    end++;
  *p = end;
  while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
    end--;
  *n = (size_t)(end - s);
  return s;
}

/* True if the comma-separated header value holds `token` (any case). */
static bool has_token(const char *value, const char *token)
{
  size_t tl = strlen(token), n;
  for (const char *p = value, *item; (item = next_item(&p, &n));)
    if (n == tl && strncasecmp(item, token, tl) == 0)
      return true;
  return false;
}

/* One line without its CRLF (or LF) into buf; -EPROTO if it does not fit in
 * what is left of the head's budget, or the stream ends within the head.
 * A stream that ends before the head's first byte is the peer going away
 * (a health check's connect and close, a server closing on a client it
 * refuses): -EPIPE, as the headers say, and nothing to answer. */
static ssize_t head_line(weft_ws *ws, char *buf, size_t cap, size_t *budget)
{
  if (*budget < 2)
    return -EPROTO;
  bool first = *budget == HEADER_MAX;
  ssize_t n = weft_reader_read_line(ws->rd, buf, cap < *budget + 1 ? cap : *budget + 1);
  if (n == 0 && first)
    return -EPIPE;
  if (n == -EMSGSIZE || n == 0)
    return -EPROTO;
  if (n < 0)
    return n;
  *budget -= (size_t)n;
  if (buf[n - 1] != '\n')
    return -EPROTO;
  buf[--n] = '\0';
  if (n > 0 && buf[n - 1] == '\r')
    buf[--n] = '\0';
  /* No control character but a tab (RFC 7230 3.1, 3.2): a NUL or a bare
   * CR would end the line early for what reads it as a string here, and
   * hide the rest from weft_ws_header, where a proxy may read it otherwise. */
  for (ssize_t i = 0; i < n; i++)
    if (((unsigned char)buf[i] < 0x20 && buf[i] != '\t') || buf[i] == 0x7f)
      return -EPROTO;
  return n;
}

/* Reads a request or response head: its first line and the headers the
 * handshake needs (the rest are skipped). */
static int read_head(weft_ws *ws, struct head *h, bool request)
{
  size_t budget = HEADER_MAX;
  ssize_t n = head_line(ws, h->first, sizeof(h->first), &budget);
  if (n < 0)
    return (int)n;
  char *line = h->line;
  for (;;) {
    n = head_line(ws, line, sizeof(h->line), &budget);
    if (n < 0)
      return (int)n;
    if (n == 0)
      return 0;
    char *colon = strchr(line, ':');
    /* A name that is not a token - none, a folded line (obs-fold), blanks
     * before the colon: RFC 7230 3.2 and 3.2.4 have a server refuse it
     * (400), a client too. */
    if (!colon || !is_token(line, (size_t)(colon - line)))
      return -EPROTO;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
      v++;
    for (char *e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\t');)
      *--e = '\0';
    int r = store_header(ws, line, v);
    if (r < 0)
      return r;
    const char *keyname = request ? "Sec-WebSocket-Key" : "Sec-WebSocket-Accept";
    /* Lines of a list header repeated mean the same as one line with
     * their values joined by commas (RFC 7230 3.2.2): a proxy's added
     * "Connection: keep-alive" must not hide the "Upgrade" before it.
     * The key, accept value and version may come once (RFC 6455 11.3.1,
     * 11.3.3, 11.3.5): joined, they are no valid value, and taking one of
     * the lines would answer for a value weft_ws_header may not return.
     * They are counted here and refused by the caller. */
    if (strcasecmp(line, "Upgrade") == 0) {
      h->upgrade |= has_token(v, "websocket");
    } else if (strcasecmp(line, "Connection") == 0) {
      h->connection |= has_token(v, "upgrade");
    } else if (strcasecmp(line, keyname) == 0) {
      if (h->keys++ == 0 && strlen(v) < sizeof(h->key))
        snprintf(h->key, sizeof(h->key), "%s", v);
    } else if (request && strcasecmp(line, "Sec-WebSocket-Version") == 0) {
      if (h->versions++ == 0 && strlen(v) < sizeof(h->version))
        snprintf(h->version, sizeof(h->version), "%s", v);
    } else if (request && strcasecmp(line, "Host") == 0) {
      h->hosts++; /* RFC 6455 4.2.1; RFC 7230 5.4: 400 unless exactly one */
    }
  }
}

static int send_text(weft_ws *ws, const char *s, int64_t deadline)
{
  ssize_t r = weft_send_all_dl(ws->fd, s, strlen(s), NULL, deadline);
  return r < 0 ? (int)r : 0;
}

/* A Sec-WebSocket-Key: base64 of 16 bytes. */
static bool key_valid(const char *k)
{
  if (strlen(k) != 24 || strcmp(k + 22, "==") != 0)
    return false;
  for (int i = 0; i < 22; i++)
    if (!strchr(base64_digits, k[i]))
      return false;
  return true;
}

/* ---- options --------------------------------------------------------------------------- */

static bool protocols_valid(const char *const *list)
{
  for (; list && *list; list++) {
    size_t n = strlen(*list);
    if (n >= WS_PROTOCOL_MAX || !is_token(*list, n))
      return false;
  }
  return true;
}

static bool protocol_listed(const char *const *list, const char *p, size_t n)
{
  for (; list && *list; list++)
    if (strlen(*list) == n && memcmp(*list, p, n) == 0)
      return true;
  return false;
}

/* A client's extra header line: "Name: value", a token for a name, no
 * control characters but tabs in the value, and not a header the handshake
 * writes itself or one that would give the request a body. */
static bool extra_header_valid(const char *h)
{
  const char *colon = strchr(h, ':');
  if (!colon || !is_token(h, (size_t)(colon - h)))
    return false;
  for (const unsigned char *v = (const unsigned char *)colon + 1; *v; v++)
    if ((*v < 0x20 && *v != '\t') || *v == 0x7F)
      return false;
  static const char *const own[] = {"Host", "Upgrade", "Connection", "Content-Length",
                                    "Transfer-Encoding"};
  size_t n = (size_t)(colon - h);
  for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
    if (strlen(own[i]) == n && strncasecmp(h, own[i], n) == 0)
      return false;
  return !(n >= 14 && strncasecmp(h, "Sec-WebSocket-", 14) == 0);
}

/* ---- server ------------------------------------------------------------------------------ */

struct choice {
  const char *const *ours;
  char *out; /* WS_PROTOCOL_MAX bytes */
};

/* Sec-WebSocket-Protocol lines of the request, in order: the first offer
 * that is on our list wins (the client lists them by preference). */
static bool choose_in(const char *name, const char *value, void *arg)
{
  struct choice *c = arg;
  if (strcasecmp(name, "Sec-WebSocket-Protocol") != 0)
    return false;
  size_t n;
  for (const char *p = value, *item; (item = next_item(&p, &n));) {
    if (n < WS_PROTOCOL_MAX && protocol_listed(c->ours, item, n)) {
      memcpy(c->out, item, n);
      c->out[n] = '\0';
      return true;
    }
  }
  return false;
}

static const char *reason_phrase(int status)
{
  switch (status) {
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 429: return "Too Many Requests";
  case 500: return "Internal Server Error";
  case 503: return "Service Unavailable";
  default: return "Refused";
  }
}

/* The request was a valid upgrade: choose a subprotocol, let the check
 * have its say, and answer. */
static int answer_upgrade(weft_ws *ws, const char *key, const weft_ws_opts *o, int64_t deadline)
{
  if (o && o->protocols) {
    struct choice c = {.ours = o->protocols, .out = ws->protocol};
    each_header(ws, choose_in, &c);
  }
  int status = o && o->check ? o->check(ws, o->check_arg) : 0;
  char resp[512];
  if (status != 0) {
    if (status < 400 || status > 599)
      status = 500;
    snprintf(resp, sizeof(resp),
             "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status,
             reason_phrase(status));
    send_text(ws, resp, deadline);
    return -ECONNREFUSED;
  }
  char acc[29];
  weft__ws_accept_value(key, acc);
  snprintf(resp, sizeof(resp),
           "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s%s%s\r\n",
           acc, ws->protocol[0] ? "Sec-WebSocket-Protocol: " : "", ws->protocol,
           ws->protocol[0] ? "\r\n" : "");
  return send_text(ws, resp, deadline);
}

/* "GET <target> HTTP/1.1", single spaces, nothing after (RFC 7230 3.1.1):
 * true with the target (starting with '/') in target[WS_PATH_MAX]. A
 * target that does not fit is refused, not cut short. */
static bool request_line(const char *line, char target[WS_PATH_MAX])
{
  static const char get[] = "GET ", version[] = " HTTP/1.1";
  size_t n = strlen(line), vlen = sizeof(version) - 1;
  if (strncmp(line, get, sizeof(get) - 1) != 0 || n < sizeof(get) - 1 + vlen ||
      strcmp(line + n - vlen, version) != 0)
    return false;
  const char *t = line + sizeof(get) - 1;
  size_t tlen = n - (sizeof(get) - 1) - vlen;
  if (tlen == 0 || tlen >= WS_PATH_MAX || t[0] != '/')
    return false;
  for (size_t i = 0; i < tlen; i++) /* visible ASCII (RFC 3986 2): no blank, no byte >= 0x7f */
    if ((unsigned char)t[i] <= ' ' || (unsigned char)t[i] >= 0x7f)
      return false;
  memcpy(target, t, tlen);
  target[tlen] = '\0';
  return true;
}

static int accept_request(weft_ws *ws, const weft_ws_opts *o, int64_t deadline)
{
  struct head *h = weft__calloc(1, sizeof(*h));
  if (!h)
    return -ENOMEM;
  int r = read_head(ws, h, true);
  char target[WS_PATH_MAX];
  if (r == 0 && (!request_line(h->first, target) || !h->upgrade || !h->connection ||
                 !key_valid(h->key) || h->keys > 1 || h->versions > 1 || h->hosts != 1))
    r = -EPROTO;
  if (r == 0 && strcmp(h->version, "13") != 0) {
    send_text(ws, "HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\n"
                  "Content-Length: 0\r\nConnection: close\r\n\r\n", deadline);
    r = -EPROTO;
  } else if (r == -EPROTO) {
    send_text(ws, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
              deadline);
  } else if (r == 0) {
    snprintf(ws->path, sizeof(ws->path), "%s", target);
    r = answer_upgrade(ws, h->key, o, deadline);
  }
  free(h);
  return r;
}

int weft_ws_accept_opts(weft_ws **out, int fd, const weft_ws_opts *o, int64_t deadline)
{
  if (!out || fd < 0 || (o && (o->headers || !protocols_valid(o->protocols))))
    return -EINVAL;
  weft_ws *ws = weft__ws_new(fd, false);
  if (!ws)
    return -ENOMEM;
  weft_reader_set_deadline(ws->rd, deadline);
  int r = accept_request(ws, o, deadline);
  if (r < 0) {
    weft_ws_free(ws);
    return r;
  }
  *out = ws;
  return 0;
}

int weft_ws_accept(weft_ws **out, int fd, int64_t deadline)
{
  return weft_ws_accept_opts(out, fd, NULL, deadline);
}

/* ---- client ------------------------------------------------------------------------------ */

/* A request target or Host value: visible ASCII only - a blank or a
 * control character would break the request line or the header. */
static bool token_safe(const char *s)
{
  for (; *s; s++)
    if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f)
      return false;
  return true;
}

/* The request head's fixed part: the request line, the handshake's own
 * headers around the target (%s), host (%s) and key (%s). */
#define REQUEST_LINES                                                                         \
  "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"             \
  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
#define KEY_LEN 24 /* base64 of 16 bytes */

/* The request head's length in bytes, to the byte (what write_request
 * writes, its blank line included), or 0 when an option is not valid. */
static size_t request_size(const char *host, const char *path, const weft_ws_opts *o)
{
  size_t n = sizeof(REQUEST_LINES) - 1 - 3 * 2 + strlen(path) + strlen(host) + KEY_LEN + 2;
  if (!o)
    return n;
  if (o->check || !protocols_valid(o->protocols))
    return 0;
  if (o->protocols && o->protocols[0]) {
    /* "Sec-WebSocket-Protocol: a, b\r\n" */
    n += sizeof("Sec-WebSocket-Protocol: ") - 1;
    for (const char *const *p = o->protocols; *p; p++)
      n += strlen(*p) + 2; /* ", " after each, "\r\n" after the last */
  }
  for (const char *const *h = o->headers; h && *h; h++) {
    if (!extra_header_valid(*h))
      return 0;
    n += strlen(*h) + 2;
  }
  return n;
}

/* Writes the request head of `size` bytes (request_size). */
static int write_request(weft_ws *ws, const char *host, const char *path, const char *key,
                         const weft_ws_opts *o, size_t size, int64_t deadline)
{
  char *req = weft__malloc(size + 1);
  if (!req)
    return -ENOMEM;
  size_t cap = size + 1, n = (size_t)snprintf(req, cap, REQUEST_LINES, path, host, key);
  if (o && o->protocols && o->protocols[0]) {
    n += (size_t)snprintf(req + n, cap - n, "Sec-WebSocket-Protocol: ");
    for (const char *const *p = o->protocols; *p; p++)
      n += (size_t)snprintf(req + n, cap - n, "%s%s", *p, p[1] ? ", " : "\r\n");
  }
  for (const char *const *h = o ? o->headers : NULL; h && *h; h++)
    n += (size_t)snprintf(req + n, cap - n, "%s\r\n", *h);
  snprintf(req + n, cap - n, "\r\n");
  int r = send_text(ws, req, deadline);
  free(req);
  return r;
}

struct answer {
  const char *const *offered;
  char *protocol; /* WS_PROTOCOL_MAX bytes */
  int protocols;  /* Sec-WebSocket-Protocol lines seen */
  bool bad;
};

/* The answer's subprotocol must be one we offered, given once; it must not
 * name an extension (we offer none). */
static bool check_answer(const char *name, const char *value, void *arg)
{
  struct answer *a = arg;
  if (strcasecmp(name, "Sec-WebSocket-Extensions") == 0 && value[0]) {
    a->bad = true;
  } else if (strcasecmp(name, "Sec-WebSocket-Protocol") == 0) {
    size_t n = strlen(value);
    if (a->protocols++ || !protocol_listed(a->offered, value, n))
      a->bad = true;
    else
      memcpy(a->protocol, value, n + 1);
  }
  return a->bad;
}

static int connect_request(weft_ws *ws, const char *host, const char *path,
                           const weft_ws_opts *o, size_t size, int64_t deadline)
{
  unsigned char nonce[16];
  int saved = errno;
  bool got = getrandom(nonce, sizeof(nonce), 0) == (ssize_t)sizeof(nonce);
  errno = saved;
  if (!got)
    return -EIO;
  char key[KEY_LEN + 1], want[29];
  base64(nonce, sizeof(nonce), key);
  weft__ws_accept_value(key, want);
  int r = write_request(ws, host, path, key, o, size, deadline);
  if (r < 0)
    return r;
  struct head *h = weft__calloc(1, sizeof(*h));
  if (!h)
    return -ENOMEM;
  r = read_head(ws, h, false);
  /* "HTTP/1.1 101", then the reason after a blank (RFC 7230 3.1.2: three
   * digits). Compared, not scanned: sscanf would take "+101", "101abc" or
   * more blanks, and set errno to ERANGE for a number too long for it. */
  static const char switching[] = "HTTP/1.1 101";
  const char *after = h->first + sizeof(switching) - 1;
  if (r == 0 && (strncmp(h->first, switching, sizeof(switching) - 1) != 0 ||
                 (*after != ' ' && *after != '\0') || !h->upgrade || !h->connection ||
                 h->keys > 1 || strcmp(h->key, want) != 0))
    r = -EPROTO;
  free(h);
  if (r == 0) {
    struct answer a = {.offered = o ? o->protocols : NULL, .protocol = ws->protocol};
    each_header(ws, check_answer, &a);
    if (a.bad)
      r = -EPROTO;
  }
  return r;
}

int weft_ws_connect_opts(weft_ws **out, int fd, const char *host, const char *path,
                         const weft_ws_opts *o, int64_t deadline)
{
  if (!out || fd < 0 || !host || !path || path[0] != '/' || !*host || !token_safe(host) ||
      !token_safe(path) || strlen(path) >= WS_PATH_MAX)
    return -EINVAL;
  size_t size = request_size(host, path, o);
  if (size == 0 || size > HEADER_MAX)
    return -EINVAL;
  weft_ws *ws = weft__ws_new(fd, true);
  if (!ws)
    return -ENOMEM;
  weft_reader_set_deadline(ws->rd, deadline);
  int r = connect_request(ws, host, path, o, size, deadline);
  if (r < 0) {
    weft_ws_free(ws);
    return r;
  }
  *out = ws;
  return 0;
}

int weft_ws_connect(weft_ws **out, int fd, const char *host, const char *path, int64_t deadline)
{
  return weft_ws_connect_opts(out, fd, host, path, NULL, deadline);
}
