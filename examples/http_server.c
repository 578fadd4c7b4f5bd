/* SPDX-License-Identifier: MIT */
/*
 * http_server: a small HTTP/1.1 server, one coroutine per connection.
 *
 *   http_server [--host H] [--port N] [--shards N] [--dir D] [--idle-ms N]
 *
 *   GET /             -> 200 "Hello, World!\n"
 *   GET /file/<name>  -> the regular file <name> of --dir (names with '/' or
 *                        ".." -> 400; missing -> 404), copied to the socket
 *                        with weft_copy (splice where the kernel can)
 *   HEAD              -> the same headers, no body
 *   other methods     -> 405
 *
 * HTTP/1.1 connections are kept alive unless the request says
 * "Connection: close"; HTTP/1.0 ones are closed unless it says
 * "Connection: keep-alive". Pipelined requests are answered in order, and the
 * answers to requests that arrived together go out in one write.
 * Malformed requests get 400 (bad request line, missing version, header
 * without a colon, more than 100 header lines), a header section over
 * 8 KiB gets 431, an unsupported version 505, a request body (bodies are
 * read and dropped) over 1 MiB 413, Transfer-Encoding 501; each of those
 * closes the connection. A connection idle for --idle-ms (default 10000)
 * between requests - or slower than that sending one, or reading 1 MiB of a
 * file - is closed.
 *
 * --port 0 (the default) = any free port, printed as "listening on PORT".
 * SIGINT/SIGTERM stop it cleanly (exit 0). Listening, accepting and stopping
 * are serve.c's, shared with the other servers (serve.h says how).
 *
 * What it shows: weft_reader for parsing (read_line, with its deadline as
 * the idle timeout), weft_writer for the answers (flushed once per batch of
 * pipelined requests), weft_openat/weft_copy for files.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <weft.h>

#include "args.h"
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_CAP 8192          /* one line of the head, terminator included */
#define HEAD_MAX 8192          /* the whole header section */
#define MAX_HEADERS 100
#define BODY_MAX (1 << 20)     /* request bodies are read and dropped up to this */
#define COPY_PIECE (1 << 20)   /* a file goes out in pieces of this, each within --idle-ms */

/* What every connection reads; set in main before the runtime starts. */
struct config {
  int dirfd;                   /* --dir, or -1: /file/ always 404 */
  int64_t idle;                /* ns */
};
static struct config g_cfg = {.dirfd = -1, .idle = 10 * WEFT_SEC};

struct request {
  const char *method;          /* NUL-terminated, inside conn.reqline */
  const char *path;            /* the target up to '?', NUL-terminated */
  int minor;                   /* HTTP/1.minor */
  bool keep_alive;
  int64_t content_length;      /* -1: none */
};

struct conn {
  int fd;
  weft_reader *r;
  weft_writer *w;
  char reqline[LINE_CAP];      /* the request line, cut up by parse_request_line */
  char line[LINE_CAP];         /* the current header line */
};

static const char *reason(int status)
{
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 413: return "Content Too Large";
  case 431: return "Request Header Fields Too Large";
  case 501: return "Not Implemented";
  case 505: return "HTTP Version Not Supported";
  default: return "Internal Server Error";
  }
}

/* RFC 9110 token characters (method and header names). */
static bool is_tchar(unsigned char ch)
{
  return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Strips the line terminator (CRLF or a bare LF) in place. Returns the
 * length left, -1 when the line has no terminator (the peer closed
 * part-way), -2 when it holds a NUL byte. */
static ssize_t chomp(char *s, size_t n)
{
  if (n == 0 || s[n - 1] != '\n')
    return -1;
  n--;
  if (n && s[n - 1] == '\r')
    n--;
  s[n] = '\0';
  return memchr(s, '\0', n) ? -2 : (ssize_t)n;
}

/* "METHOD SP target SP HTTP/1.x": 0, or the status to answer with. */
static int parse_request_line(char *s, size_t n, struct request *q)
{
  char *sp1 = memchr(s, ' ', n);
  if (!sp1 || sp1 == s)
    return 400;
  for (char *p = s; p < sp1; p++)
    if (!is_tchar((unsigned char)*p))
      return 400;
  char *target = sp1 + 1;
  char *sp2 = strchr(target, ' ');
  if (!sp2 || sp2 == target || target[0] != '/')
    return 400; /* no version (HTTP/0.9 style), or not an origin-form target */
  *sp1 = *sp2 = '\0';
  for (char *p = target; *p; p++)
    if ((unsigned char)*p < 0x21 || *p == 0x7f)
      return 400;
  const char *v = sp2 + 1;
  if (strncmp(v, "HTTP/", 5) != 0 || strlen(v) != 8 || v[5] < '0' || v[5] > '9' ||
      v[6] != '.' || v[7] < '0' || v[7] > '9')
    return 400;
  if (v[5] != '1')
    return 505;
  char *query = strchr(target, '?');
  if (query)
    *query = '\0';
  q->method = s;
  q->path = target;
  q->minor = v[7] - '0';
  q->keep_alive = q->minor >= 1;
  q->content_length = -1;
  return 0;
}

/* Does the comma-separated list hold `token` (case-insensitively)? */
static bool has_token(const char *list, const char *token)
{
  size_t tl = strlen(token);
  for (const char *p = list; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',')
      p++;
    size_t n = strcspn(p, ", \t");
    if (n == tl && strncasecmp(p, token, tl) == 0)
      return true;
    p += n;
  }
  return false;
}

/* "Name: value" (already chomped): 0, or the status to answer with. */
static int parse_header(char *s, struct request *q)
{
  char *colon = strchr(s, ':');
  if (!colon || colon == s)
    return 400; /* no name, or an obsolete folded continuation line */
  for (char *p = s; p < colon; p++)
    if (!is_tchar((unsigned char)*p))
      return 400;
  *colon = '\0';
  char *v = colon + 1;
  while (*v == ' ' || *v == '\t')
    v++;
  size_t vn = strlen(v);
  while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
    v[--vn] = '\0';
  for (char *p = v; *p; p++)
    if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
      return 400;

  if (strcasecmp(s, "Connection") == 0) {
    if (has_token(v, "close"))
      q->keep_alive = false;
    else if (has_token(v, "keep-alive"))
      q->keep_alive = true;
  } else if (strcasecmp(s, "Content-Length") == 0) {
    if (vn == 0 || vn > 18 || strspn(v, "0123456789") != vn)
      return 400;
    int64_t len = strtoll(v, NULL, 10);
    if (q->content_length >= 0 && q->content_length != len)
      return 400; /* two different lengths: request smuggling territory */
    q->content_length = len;
  } else if (strcasecmp(s, "Transfer-Encoding") == 0) {
    return 501; /* chunked request bodies are not implemented */
  }
  return 0;
}

/* Reads one request head. 0 with *q filled, the status of an error answer
 * (the connection is then closed), or -1: close without answering (the peer
 * closed, the idle deadline passed, a reset, cancellation). */
static int read_head(struct conn *c, struct request *q)
{
  ssize_t n;
  /* RFC 9112 2.2: ignore at least one empty line before a request. */
  for (int blank = 0;; blank++) {
    n = weft_reader_read_line(c->r, c->reqline, sizeof(c->reqline));
    if (n == -EMSGSIZE)
      return 400;
    if (n <= 0)
      return -1;
    if ((n = chomp(c->reqline, (size_t)n)) < 0)
      return n == -2 ? 400 : -1;
    if (n > 0)
      break;
    if (blank == 3)
      return 400;
  }
  int st = parse_request_line(c->reqline, (size_t)n, q);
  if (st)
    return st;

  size_t total = 0;
  for (int count = 0;; count++) {
    n = weft_reader_read_line(c->r, c->line, sizeof(c->line));
    if (n == -EMSGSIZE)
      return 431; /* one line alone is past the section's limit */
    if (n <= 0)
      return -1;
    total += (size_t)n;
    if (total > HEAD_MAX)
      return 431;
    if ((n = chomp(c->line, (size_t)n)) < 0)
      return n == -2 ? 400 : -1;
    if (n == 0)
      return 0;
    if (count == MAX_HEADERS)
      return 400;
    if ((st = parse_header(c->line, q)))
      return st;
  }
}

/* Reads and drops a request body of the given length. */
static int skip_body(struct conn *c, int64_t len)
{
  while (len > 0) {
    size_t want = len > (int64_t)sizeof(c->line) ? sizeof(c->line) : (size_t)len;
    ssize_t n = weft_reader_read(c->r, c->line, want);
    if (n <= 0)
      return -1;
    len -= n;
  }
  return 0;
}

static void put_head(struct conn *c, int status, const char *type, int64_t len,
                     const struct request *q, const char *extra)
{
  const char *conn_hdr = !q->keep_alive ? "Connection: close\r\n"
                         : q->minor == 0 ? "Connection: keep-alive\r\n"
                                         : "";
  weft_writer_printf(c->w,
                     "HTTP/1.1 %d %s\r\nServer: weft\r\nContent-Type: %s\r\n"
                     "Content-Length: %lld\r\n%s%s\r\n",
                     status, reason(status), type, (long long)len, conn_hdr, extra);
}

/* A short text answer (errors and "/"). */
static void put_text(struct conn *c, int status, const char *body, const struct request *q,
                     bool head_only, const char *extra)
{
  size_t n = strlen(body);
  put_head(c, status, "text/plain", (int64_t)n, q, extra);
  if (!head_only)
    weft_writer_write(c->w, body, n);
}

static int put_status(struct conn *c, int status, const struct request *q, bool head_only)
{
  char body[64];
  snprintf(body, sizeof(body), "%s\n", reason(status));
  put_text(c, status, body, q, head_only, "");
  return 0;
}

/* GET/HEAD /file/<name>. Returns 0, or -1 when the connection must close
 * (the body could not be sent whole). */
static int serve_file(struct conn *c, const struct request *q, const char *name, bool head_only)
{
  if (!*name || strchr(name, '/') || strstr(name, ".."))
    return put_status(c, *name ? 400 : 404, q, head_only);
  if (g_cfg.dirfd < 0 || strlen(name) > 255)
    return put_status(c, 404, q, head_only);
  /* O_NOFOLLOW: a symbolic link in the directory cannot lead out of it. */
  int fd = weft_openat(g_cfg.dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0)
    return put_status(c, fd == -EACCES ? 403 : fd == -ENOMEM || fd == -EMFILE ? 500 : 404, q,
                      head_only);
  struct stat st;
  int r = weft_fstat(fd, &st);
  if (r < 0 || !S_ISREG(st.st_mode)) {
    weft_close(fd);
    return put_status(c, r < 0 ? 500 : 404, q, head_only);
  }
  put_head(c, 200, "application/octet-stream", (int64_t)st.st_size, q, "");
  int rc = 0;
  if (!head_only && st.st_size > 0) {
    /* The head must be on the wire before the file's bytes. */
    int64_t off = 0;
    rc = weft_writer_flush(c->w) == 0 ? 0 : -1;
    /* In pieces, each with the idle time: the limit is on a client that
     * stops reading, not on the length of a download. A file that shrank
     * meanwhile leaves the answer short: only closing tells the client. */
    while (rc == 0 && off < st.st_size) {
      int64_t left = st.st_size - off;
      size_t piece = left < COPY_PIECE ? (size_t)left : COPY_PIECE;
      if (weft_copy_dl(fd, &off, c->fd, piece, NULL, weft_now() + g_cfg.idle) != (ssize_t)piece)
        rc = -1;
    }
  }
  weft_close(fd);
  return rc;
}

/* Answers one parsed request. 0, or -1 when the connection must close. */
static int respond(struct conn *c, struct request *q)
{
  bool get = strcmp(q->method, "GET") == 0, head = strcmp(q->method, "HEAD") == 0;
  if (!get && !head) {
    q->keep_alive = false; /* its body, if any, is not read */
    put_text(c, 405, "Method Not Allowed\n", q, false, "Allow: GET, HEAD\r\n");
    return 0;
  }
  if (q->content_length > BODY_MAX) {
    q->keep_alive = false;
    return put_status(c, 413, q, head);
  }
  if (q->content_length > 0 && skip_body(c, q->content_length) < 0)
    return -1;
  if (strcmp(q->path, "/") == 0) {
    put_text(c, 200, "Hello, World!\n", q, head, "");
    return 0;
  }
  if (strncmp(q->path, "/file/", 6) == 0)
    return serve_file(c, q, q->path + 6, head);
  return put_status(c, 404, q, head);
}

/* Is a whole request head already buffered? Then its answer can wait to
 * go out with this one; otherwise flush now, before the next read waits.
 * The blank lines a client may send before a request line (RFC 7230 3.5)
 * are not a head's end: read_head skips them and waits for what follows. */
static bool head_buffered(struct conn *c)
{
  size_t n = weft_reader_buffered(c->r);
  const void *p = NULL;
  if (n == 0 || weft_reader_peek(c->r, n, &p) < (ssize_t)n || !p)
    return false;
  const char *b = p;
  size_t i = 0;
  while (i < n && (b[i] == '\r' || b[i] == '\n'))
    i++;
  return memmem(b + i, n - i, "\n\r\n", 3) || memmem(b + i, n - i, "\n\n", 2);
}

/* Closing after an error answer while the client may still be sending: a
 * close with unread bytes queued sends a reset, which can destroy the answer
 * before the client reads it. So shut down our side and read what is in
 * flight (bounded in time and bytes) first. */
static void linger_close(struct conn *c)
{
  weft_shutdown(c->fd, SHUT_WR);
  int64_t deadline = weft_now() + WEFT_SEC;
  for (size_t total = 0; total < 256 * 1024;) {
    ssize_t n = weft_recv_dl(c->fd, c->line, sizeof(c->line), 0, deadline);
    if (n <= 0)
      break;
    total += (size_t)n;
  }
}

static void serve(struct conn *c)
{
  for (;;) {
    struct request q = {.method = "", .path = "", .minor = 1, .content_length = -1};
    weft_reader_set_deadline(c->r, weft_now() + g_cfg.idle);
    int st = read_head(c, &q);
    weft_writer_set_deadline(c->w, weft_now() + g_cfg.idle);
    if (st < 0) {
      weft_writer_flush(c->w); /* answers to earlier pipelined requests */
      return;
    }
    if (st > 0) {
      q.keep_alive = false;
      put_status(c, st, &q, false);
      if (weft_writer_flush(c->w) == 0)
        linger_close(c);
      return;
    }
    if (respond(c, &q) < 0)
      return;
    if (!q.keep_alive) {
      if (weft_writer_flush(c->w) == 0)
        linger_close(c);
      return;
    }
    if (!head_buffered(c) && weft_writer_flush(c->w) < 0)
      return;
  }
}

/* The connection's state is allocated here, not by the accept loop: see
 * serve.h. */
static void *http_conn(void *arg)
{
  struct conn *c = malloc(sizeof(*c));
  if (!c) {
    weft_close((int)(intptr_t)arg);
    return NULL;
  }
  c->fd = (int)(intptr_t)arg;
  c->r = NULL;
  c->w = NULL;
  int one = 1;
  weft_setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (weft_reader_create(&c->r, c->fd, 0) == 0 && weft_writer_create(&c->w, c->fd, 0) == 0)
    serve(c);
  weft_writer_destroy(c->w);
  weft_reader_destroy(c->r);
  weft_close(c->fd);
  free(c);
  return NULL;
}

static const char *g_dir;
static long long g_idle_ms = 10000;

static int on_option(int c, const char *arg)
{
  switch (c) {
  case 'd': g_dir = arg; return 0;
  case 'i': return arg_number(arg, 1, 86400000L, &g_idle_ms) ? 0 : -1;
  default: return -1;
  }
}

int main(int argc, char **argv)
{
  static const struct option options[] = {
    {"dir", required_argument, NULL, 'd'},
    {"idle-ms", required_argument, NULL, 'i'},
    {NULL, 0, NULL, 0},
  };
  struct serve s = {
    .name = "http_server", .conn_name = "http-conn", .conn = http_conn};
  int r = serve_parse(&s, argc, argv, options, on_option, "[--dir D] [--idle-ms N]");
  if (r)
    return r;
  g_cfg.idle = g_idle_ms * WEFT_MSEC;
  if (g_dir && (g_cfg.dirfd = open(g_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    perror(g_dir);
    return 1;
  }
  r = serve_run(&s);
  if (g_cfg.dirfd >= 0)
    close(g_cfg.dirfd);
  return r;
}
