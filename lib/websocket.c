/* SPDX-License-Identifier: MIT */
/*
 * WebSocket frames (RFC 6455 section 5): reading whole messages, writing
 * single-frame messages and control frames, and the closing handshake. The
 * opening handshake is in ws_handshake.c.
 */
#include "ws_internal.h"

#include "bufio_internal.h"
#include "op.h"

#include "weft/fs.h"
#include "weft/io.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>

enum { OP_CONT = 0, OP_TEXT = 1, OP_BINARY = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };

/* Close statuses weft sends when the peer breaks the rules. */
enum { ST_NORMAL = 1000, ST_PROTOCOL = 1002, ST_BAD_DATA = 1007, ST_TOO_BIG = 1009 };


/* ---- UTF-8 and close statuses -------------------------------------------------------- */

bool weft__ws_close_code_valid(int code)
{
  /* RFC 6455 7.4 and IANA's registry (1012-1014 came later); 1004-1006 and
   * 1015 are reserved, never sent. */
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
         (code >= 3000 && code <= 4999);
}

bool weft__utf8_valid(const unsigned char *s, size_t n)
{
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (n - i < len)
      return false;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80)
        return false;
      cp = cp << 6 | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

/* dst[i] = src[i] ^ key[(at + i) % 4]: the masking of RFC 6455 5.3, for
 * bytes that start `at` bytes into a payload (dst may be src). */
static void apply_mask(unsigned char *dst, const unsigned char *src, size_t n,
                       const unsigned char key[4], size_t at)
{
  for (size_t i = 0; i < n; i++)
    dst[i] = src[i] ^ key[(at + i) & 3];
}

/* ---- writing frames ------------------------------------------------------------------ */

/* Four random bytes for a client frame's masking key (RFC 6455 5.3: from a
 * strong source, so that a script cannot choose what the wire carries). */
static int next_mask(weft_ws *ws, unsigned char key[4])
{
  if (ws->masks_used + 4 > sizeof(ws->masks)) {
    int saved = errno;
    bool ok = getrandom(ws->masks, sizeof(ws->masks), 0) == (ssize_t)sizeof(ws->masks);
    errno = saved;
    if (!ok)
      return -EIO;
    ws->masks_used = 0;
  }
  memcpy(key, ws->masks + ws->masks_used, 4);
  ws->masks_used += 4;
  return 0;
}

/* One frame with FIN set, under the send lock. A failure after the first
 * byte went out leaves a frame cut short on the wire: the connection is
 * broken then - and by any transport error. A timeout or cancel before the
 * first byte (waiting for room in the socket) cut nothing short: the
 * connection stays whole, as for a send that could not start. */
static int write_frame_locked(weft_ws *ws, int op, const void *data, size_t n, int64_t deadline)
{
  unsigned char hdr[14], key[4];
  size_t h = 0;
  hdr[h++] = (unsigned char)(0x80 | op);
  unsigned char mask_bit = ws->client ? 0x80 : 0;
  if (n < 126) {
    hdr[h++] = (unsigned char)(mask_bit | n);
  } else if (n <= 0xFFFF) {
    hdr[h++] = mask_bit | 126;
    hdr[h++] = (unsigned char)(n >> 8);
    hdr[h++] = (unsigned char)n;
  } else {
    hdr[h++] = mask_bit | 127;
    for (int i = 7; i >= 0; i--)
      hdr[h++] = (unsigned char)((uint64_t)n >> (8 * i));
  }
  if (ws->client) {
    int r = next_mask(ws, key);
    if (r < 0)
      return r;
    memcpy(hdr + h, key, 4);
    h += 4;
  }
  struct iovec iov[2] = {{hdr, h}, {(void *)data, n}};
  int r = 0;
  size_t went = 0; /* bytes of the frame written */
  if (!ws->client) {
    r = weft__bufio_sendv_all(ws->fd, iov, n ? 2 : 1, &went, deadline);
  } else {
    /* The payload goes out masked, from a copy, a chunk at a time (the
     * copy is the connection's: frames are written under the send lock). */
    unsigned char *chunk = ws->mask_buf;
    const unsigned char *p = data;
    size_t done = 0;
    int cnt = 1;
    do {
      size_t k = n - done < WS_MASK_CHUNK ? n - done : WS_MASK_CHUNK;
      apply_mask(chunk, p + done, k, key, done);
      iov[cnt] = (struct iovec){chunk, k};
      r = weft__bufio_sendv_all(ws->fd, iov, cnt + 1, &went, deadline);
      done += k;
      cnt = 0; /* the header went with the first chunk */
    } while (r == 0 && done < n);
  }
  if (r < 0 && (went > 0 || (r != -ETIMEDOUT && r != -ECANCELED)))
    atomic_store_explicit(&ws->broken, true, memory_order_relaxed);
  return r;
}

/* -ETIMEDOUT for a deadline (or deadline scope) already passed, -ECANCELED
 * for a cancelled task, else 0: checked before anything is written, so
 * that such a call leaves the connection whole - once part of a frame is
 * out, a failure breaks it (write_frame_locked). */
static int cannot_start(int64_t deadline)
{
  weft_task *t = weft__task_self();
  if (t && atomic_load_explicit(&t->cancelled, memory_order_relaxed))
    return -ECANCELED;
  int64_t dl = t ? weft__deadline_for(t, deadline) : deadline;
  return dl >= 0 && dl <= weft__now() ? -ETIMEDOUT : 0;
}

static int write_frame(weft_ws *ws, int op, const void *data, size_t n, int64_t deadline)
{
  bool after_close = op == OP_TEXT || op == OP_BINARY || op == OP_PING;
  if (after_close && atomic_load_explicit(&ws->closing, memory_order_relaxed))
    return -EPIPE; /* at once: no need to wait for the lock to learn it */
  int r = cannot_start(deadline);
  if (r < 0)
    return r;
  r = weft_mutex_lock_dl(&ws->send_lock, deadline);
  if (r < 0)
    return r;
  if (atomic_load_explicit(&ws->broken, memory_order_relaxed) ||
      atomic_load_explicit(&ws->close_sent, memory_order_relaxed) ||
      (after_close && atomic_load_explicit(&ws->closing, memory_order_relaxed)))
    r = -EPIPE;
  else
    r = write_frame_locked(ws, op, data, n, deadline);
  if (r == 0 && op == OP_CLOSE)
    atomic_store_explicit(&ws->close_sent, true, memory_order_relaxed);
  weft_mutex_unlock(&ws->send_lock);
  return r;
}

/* A close frame with status `code` and a reason. */
static int write_close(weft_ws *ws, int code, const char *reason, size_t rlen, int64_t deadline)
{
  unsigned char body[125];
  body[0] = (unsigned char)(code >> 8);
  body[1] = (unsigned char)code;
  memcpy(body + 2, reason, rlen);
  return write_frame(ws, OP_CLOSE, body, 2 + rlen, deadline);
}

/* The peer broke the rules: tell it why (best effort), and stop. */
static int fail(weft_ws *ws, int status, int err, int64_t deadline)
{
  write_close(ws, status, "", 0, deadline);
  atomic_store_explicit(&ws->broken, true, memory_order_relaxed);
  return err;
}

int weft_ws_send(weft_ws *ws, int type, const void *buf, size_t n, int64_t deadline)
{
  if (!ws || (type != WEFT_WS_TEXT && type != WEFT_WS_BINARY) || (!buf && n))
    return -EINVAL;
  if (type == WEFT_WS_TEXT && !weft__utf8_valid(buf, n))
    return -EILSEQ;
  return write_frame(ws, type, buf, n, deadline);
}

int weft_ws_ping(weft_ws *ws, const void *data, size_t n, int64_t deadline)
{
  if (!ws || n > 125 || (!data && n))
    return -EINVAL;
  return write_frame(ws, OP_PING, data, n, deadline);
}

/* ---- reading frames -------------------------------------------------------------------- */

struct frame {
  bool fin;
  int op;
  bool masked;
  unsigned char key[4];
  uint64_t len;
};

/* Reads a frame's header. `waiting`: nothing of the current message has been
 * read, so a timeout or cancel here leaves the connection usable. */
static int read_header(weft_ws *ws, struct frame *f)
{
  const unsigned char *p;
  ssize_t got = weft_reader_peek(ws->rd, 2, (const void **)&p);
  if (got < 0)
    return (int)got;
  if (got < 2)
    return -ECONNRESET; /* ended without a close */
  size_t need = 2 + ((p[1] & 0x7F) == 126 ? 2 : (p[1] & 0x7F) == 127 ? 8 : 0) +
                (p[1] & 0x80 ? 4 : 0);
  got = weft_reader_peek(ws->rd, need, (const void **)&p);
  if (got < 0)
    return (int)got;
  if ((size_t)got < need)
    return -ECONNRESET;
  f->fin = p[0] & 0x80;
  f->op = p[0] & 0x0F;
  f->masked = p[1] & 0x80;
  uint64_t len = p[1] & 0x7F;
  size_t at = 2;
  if (len == 126) {
    len = (uint64_t)p[2] << 8 | p[3];
    at = 4;
  } else if (len == 127) {
    len = 0;
    for (int i = 0; i < 8; i++)
      len = len << 8 | p[2 + i];
    at = 10;
  }
  if (f->masked)
    memcpy(f->key, p + at, 4);
  f->len = len;
  bool bad = (p[0] & 0x70) || len >> 63; /* no extension gave meaning to RSV bits */
  weft_reader_consume(ws->rd, need);
  return bad ? -EPROTO : 0;
}

/* A payload read that came short or failed: the error, or -ECONNRESET
 * when the connection ended (end of file, -EPIPE) without a close. */
static int cut_short(ssize_t got)
{
  return got < 0 && got != -EPIPE ? (int)got : -ECONNRESET;
}

/* Reads a frame's payload of n bytes into dst and unmasks it. */
static int read_payload(weft_ws *ws, const struct frame *f, unsigned char *dst, size_t n)
{
  if (n == 0)
    return 0;
  ssize_t got = weft_reader_read_exact(ws->rd, dst, n);
  if (got < 0 || (size_t)got < n)
    return cut_short(got);
  if (f->masked)
    apply_mask(dst, dst, n, f->key, 0);
  return 0;
}

/* Drops a payload of n bytes as it is buffered, without copying it. */
static int skip_payload(weft_ws *ws, uint64_t n)
{
  while (n > 0) {
    const void *p;
    ssize_t got = weft_reader_peek(ws->rd, 1, &p);
    if (got < 1)
      return cut_short(got);
    size_t k = (uint64_t)got < n ? (size_t)got : (size_t)n;
    weft_reader_consume(ws->rd, k);
    n -= k;
  }
  return 0;
}


/* Sends the pong owed for the last ping read (0 if none is owed). It stays
 * owed when its write could not start - the send lock not had by the
 * deadline, a cancel - and goes first thing in the next receive. */
static int pay_owed_pong(weft_ws *ws, int64_t deadline)
{
  if (!ws->pong_owed)
    return 0;
  int r = write_frame(ws, OP_PONG, ws->owed, ws->owed_len, deadline);
  if (r == -EPIPE && atomic_load_explicit(&ws->close_sent, memory_order_relaxed) &&
      !atomic_load_explicit(&ws->broken, memory_order_relaxed))
    r = 0; /* our close went first: no pong after it */
  bool could_not_start = (r == -ETIMEDOUT || r == -ECANCELED) &&
                         !atomic_load_explicit(&ws->broken, memory_order_relaxed);
  if (!could_not_start)
    ws->pong_owed = false;
  return r;
}

/* A control frame (payload already checked to be <= 125 bytes). 1 if it
 * was the peer's close, 0 to go on reading, or an error. */
static int control(weft_ws *ws, const struct frame *f, int64_t deadline)
{
  unsigned char body[125];
  int r = read_payload(ws, f, body, (size_t)f->len);
  if (r < 0) {
    /* Its header is consumed: the stream is out of step, even between
     * messages and with an older pong still owed (weft_ws_close's reading
     * does not pay it first), which the caller would take for a pong that
     * could not start. */
    atomic_store_explicit(&ws->broken, true, memory_order_relaxed);
    return r;
  }
  if (f->op == OP_PING) {
    memcpy(ws->owed, body, (size_t)f->len);
    ws->owed_len = (size_t)f->len;
    ws->pong_owed = true;
    return pay_owed_pong(ws, deadline);
  }
  if (f->op == OP_PONG)
    return 0;
  /* Close: a status (2 bytes) and a UTF-8 reason, or nothing. */
  int code = 1005;
  if (f->len == 1)
    return fail(ws, ST_PROTOCOL, -EPROTO, deadline);
  if (f->len >= 2) {
    code = body[0] << 8 | body[1];
    if (!weft__ws_close_code_valid(code))
      return fail(ws, ST_PROTOCOL, -EPROTO, deadline);
    if (!weft__utf8_valid(body + 2, (size_t)f->len - 2))
      return fail(ws, ST_BAD_DATA, -EILSEQ, deadline);
  }
  ws->peer_code = code;
  atomic_store_explicit(&ws->close_seen, true, memory_order_release);
  /* Answer with its status, as the RFC suggests (-EPIPE: ours went first). */
  write_close(ws, code == 1005 ? ST_NORMAL : code, "", 0, deadline);
  return 1;
}

/* The next message into buf[0, cap); with `drop`, whatever its size, into
 * nothing (weft_ws_close waiting for the peer's close). */
static ssize_t recv_message(weft_ws *ws, unsigned char *out, size_t cap, int *type, bool drop,
                            int64_t deadline)
{
  size_t len = 0;
  int msg_op = -1; /* the message under way, -1 none yet */
  for (;;) {
    struct frame f = {0};
    int r = read_header(ws, &f);
    if (r == -EPROTO)
      return fail(ws, ST_PROTOCOL, r, deadline);
    if (r < 0) {
      /* Between messages a timeout or cancel consumed nothing. */
      if (msg_op >= 0 || (r != -ETIMEDOUT && r != -ECANCELED))
        atomic_store_explicit(&ws->broken, true, memory_order_relaxed);
      return r;
    }
    /* A client's frames are masked, a server's are not. */
    if (f.masked == ws->client)
      return fail(ws, ST_PROTOCOL, -EPROTO, deadline);
    if (f.op >= OP_CLOSE) {
      if (f.op > OP_PONG || !f.fin || f.len > 125)
        return fail(ws, ST_PROTOCOL, -EPROTO, deadline);
      r = control(ws, &f, deadline);
      if (r < 0) {
        /* A pong owed between messages leaves the connection whole;
         * within one, the message read so far would be lost. */
        if (!(ws->pong_owed && msg_op < 0))
          atomic_store_explicit(&ws->broken, true, memory_order_relaxed);
        return r;
      }
      if (r == 1) {
        *type = WEFT_WS_CLOSE;
        return 0;
      }
      continue;
    }
    if (f.op > OP_BINARY || (f.op == OP_CONT) != (msg_op >= 0))
      return fail(ws, ST_PROTOCOL, -EPROTO, deadline);
    if (msg_op < 0)
      msg_op = f.op;
    if (drop) {
      r = skip_payload(ws, f.len);
    } else if (f.len > cap - len) {
      return fail(ws, ST_TOO_BIG, -EMSGSIZE, deadline);
    } else {
      r = read_payload(ws, &f, out + len, (size_t)f.len);
      len += (size_t)f.len;
    }
    if (r < 0) {
      atomic_store_explicit(&ws->broken, true, memory_order_relaxed);
      return r;
    }
    if (!f.fin)
      continue;
    if (!drop && msg_op == OP_TEXT && !weft__utf8_valid(out, len))
      return fail(ws, ST_BAD_DATA, -EILSEQ, deadline);
    *type = msg_op;
    return (ssize_t)len;
  }
}

static bool usable(const weft_ws *ws)
{
  return !atomic_load_explicit(&ws->broken, memory_order_relaxed) &&
         !atomic_load_explicit(&ws->close_seen, memory_order_relaxed);
}

ssize_t weft_ws_recv(weft_ws *ws, void *buf, size_t cap, int *type, int64_t deadline)
{
  if (!ws || !type || (!buf && cap))
    return -EINVAL;
  if (!usable(ws))
    return -EPIPE;
  int r = pay_owed_pong(ws, deadline);
  if (r < 0)
    return r;
  weft_reader_set_deadline(ws->rd, deadline);
  return recv_message(ws, buf, cap, type, false, deadline);
}

/* ---- closing ----------------------------------------------------------------------------- */

int weft_ws_close(weft_ws *ws, int code, const char *reason, int64_t deadline)
{
  size_t rlen = reason ? strlen(reason) : 0;
  if (!ws || !weft__ws_close_code_valid(code) || rlen > 123 ||
      (reason && !weft__utf8_valid((const unsigned char *)reason, rlen)))
    return -EINVAL;
  /* From now on, whatever comes of the close frame's write (a timeout
   * waiting for the send lock, say): no more messages. */
  atomic_store_explicit(&ws->closing, true, memory_order_relaxed);
  int r = write_close(ws, code, reason ? reason : "", rlen, deadline);
  if (r < 0 && r != -EPIPE) /* -EPIPE: sent before, or broken (below) */
    return r;
  if (atomic_load_explicit(&ws->close_seen, memory_order_acquire))
    return 0;
  if (atomic_load_explicit(&ws->broken, memory_order_relaxed))
    return -EPIPE;
  /* Drop what comes until the peer's close (its answer to ours). */
  weft_reader_set_deadline(ws->rd, deadline);
  for (;;) {
    int type;
    ssize_t n = recv_message(ws, NULL, 0, &type, true, deadline);
    if (n < 0)
      return (int)n;
    if (type == WEFT_WS_CLOSE)
      return 0;
  }
}
