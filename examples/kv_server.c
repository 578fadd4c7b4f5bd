/* SPDX-License-Identifier: MIT */
/*
 * kv_server: an in-memory key-value server speaking a subset of the Redis
 * protocol (RESP2), enough for redis-cli and redis-benchmark.
 *
 *   kv_server [--host H] [--port N] [--shards N]
 *
 * Commands: PING [msg], ECHO, SET key value, GET, DEL key..., EXISTS key...,
 * INCR, MGET key..., MSET key value..., CONFIG GET param, COMMAND [...]
 * (an empty array), QUIT. Both RESP arrays (what clients send) and inline
 * commands ("PING\r\n", words split on blanks, no quoting) are read.
 * Errors are "-ERR ..." replies; a protocol error (bad lengths, a bulk over
 * 512 MiB, more than 1M arguments, an inline line over 64 KiB) is answered
 * with "-ERR Protocol error: ..." and the connection closed.
 *
 * The data is sharded: a key belongs to shard hash(key) % shards, and each
 * shard's partition is a plain hash table that only coroutines running on
 * that shard ever touch - no locks anywhere. A connection coroutine that
 * needs keys of another shard spawns a task pinned to that shard which does
 * the work there, and joins it: the code reads like the blocking
 * thread-per-connection server it was ported from (see kv_execute). A
 * multi-key command (MGET, MSET, DEL, EXISTS) sends one task to each shard
 * involved, all at once, and does its own shard's keys meanwhile; such a
 * command is therefore not atomic across shards (MSET in Redis is).
 *
 * Placement: connections are spawned WEFT_PLACE_ROUND_ROBIN, and here that
 * matters for correctness, not only for speed: a connection coroutine works
 * on its own shard's partition directly, which is only safe because it
 * never moves to another shard thread (a stealable one could, at any call
 * that suspends); serve.c, which starts and stops all the example servers,
 * places them so.
 */
#include <weft.h>

#include "serve.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_ARGS (1024 * 1024)          /* elements of one command array */
#define MAX_BULK ((long long)512 << 20) /* one bulk string */
#define MAX_COMMAND ((size_t)1 << 30)   /* all the bulks of one command */
#define MAX_INLINE (64 * 1024)          /* one inline command line */
#define BULK_STEP ((size_t)1 << 20)     /* a bulk's buffer grows as its bytes arrive */

/* ---- the partitions ----------------------------------------------------------- */

struct kv_entry {
  struct kv_entry *next;
  uint64_t hash;
  char *val;             /* malloc'd, NUL-terminated */
  size_t vlen;
  size_t klen;
  char key[];
};

/* One shard's partition. Aligned so that two shards' headers never share a
 * cache line. */
struct kv_table {
  _Alignas(64) struct kv_entry **slot;
  size_t nslots;         /* a power of two; 0 until the first insert */
  size_t count;
};

static struct kv_table g_tables[WEFT_MAX_SHARDS];
static int g_shards;

/* A command argument: a malloc'd, NUL-terminated buffer of n bytes. */
struct kv_arg {
  char *p;
  size_t n;
};

static uint64_t kv_hash(const char *p, size_t n)
{
  uint64_t h = 1469598103934665603ull; /* FNV-1a, then a murmur3 finaliser */
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

static int kv_shard_of(uint64_t h)
{
  return (int)((h >> 32) % (uint64_t)g_shards); /* the low bits pick the slot */
}

/* The link that points at key's entry, or at the chain's end (*link NULL)
 * when it is absent; NULL for an empty table. */
static struct kv_entry **table_link(struct kv_table *t, uint64_t h, const char *k, size_t n)
{
  if (!t->nslots)
    return NULL;
  struct kv_entry **pp = &t->slot[h & (t->nslots - 1)];
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->hash == h && (*pp)->klen == n && memcmp((*pp)->key, k, n) == 0)
      break;
  return pp;
}

static void table_grow(struct kv_table *t)
{
  size_t n = t->nslots ? t->nslots * 2 : 64;
  struct kv_entry **s = calloc(n, sizeof(*s));
  if (!s)
    return; /* keep the old slots: longer chains, still correct */
  for (size_t i = 0; i < t->nslots; i++)
    for (struct kv_entry *e = t->slot[i], *next; e; e = next) {
      next = e->next;
      e->next = s[e->hash & (n - 1)];
      s[e->hash & (n - 1)] = e;
    }
  free(t->slot);
  t->slot = s;
  t->nslots = n;
}

/* Stores val under key, taking val's buffer (val->p becomes NULL).
 * 0 or -ENOMEM (val untouched). */
static int table_set(struct kv_table *t, uint64_t h, const struct kv_arg *key,
                     struct kv_arg *val)
{
  if (t->count >= t->nslots)
    table_grow(t);
  struct kv_entry **pp = table_link(t, h, key->p, key->n);
  if (!pp)
    return -ENOMEM;
  struct kv_entry *e = *pp;
  if (!e) {
    if (!(e = malloc(sizeof(*e) + key->n + 1)))
      return -ENOMEM;
    e->next = NULL;
    e->hash = h;
    e->klen = key->n;
    memcpy(e->key, key->p, key->n + 1);
    e->val = NULL;
    *pp = e;
    t->count++;
  }
  free(e->val);
  e->val = val->p;
  e->vlen = val->n;
  val->p = NULL;
  return 0;
}

static void table_free(struct kv_table *t)
{
  for (size_t i = 0; i < t->nslots; i++)
    for (struct kv_entry *e = t->slot[i], *next; e; e = next) {
      next = e->next;
      free(e->val);
      free(e);
    }
  free(t->slot);
  *t = (struct kv_table){0};
}

/* Redis's rule for integers: an optional '-', digits, no leading zero, no
 * blanks, within long long. */
static bool parse_ll(const char *s, size_t n, long long *out)
{
  const char *d = s + (n && s[0] == '-');
  size_t nd = n - (size_t)(d - s);
  if (nd == 0 || nd > 19 || (d[0] == '0' && (nd > 1 || d != s)))
    return false;
  unsigned long long v = 0;
  for (size_t i = 0; i < nd; i++) {
    if (d[i] < '0' || d[i] > '9')
      return false;
    v = v * 10 + (unsigned long long)(d[i] - '0');
  }
  if (d == s ? v > LLONG_MAX : v > (unsigned long long)LLONG_MAX + 1)
    return false;
  *out = d == s ? (long long)v : (long long)(0 - v);
  return true;
}

/* ---- keyed work, on the owning shard -------------------------------------------- */

enum kv_op { KV_GET, KV_SET, KV_DEL, KV_EXISTS, KV_INCR };

struct kv_res {
  uint64_t hash;
  char *val;             /* GET: a copy of the value, the connection frees it */
  size_t len;
  long long num;         /* INCR: the new value */
  int st;                /* 1 found / 0 not (GET, DEL, EXISTS); 0 or -errno (SET, INCR) */
};

struct kv_work;

/* The keys of one command that one shard owns. */
struct kv_part {
  struct kv_work *w;
  int shard;
  uint32_t first, count; /* w->order[first .. first + count) */
  weft_task *task;       /* the pinned task doing them, or NULL */
};

/* One keyed command: key i is argv[1 + i * stride]; for SET/MSET its value
 * is the argument after it. */
struct kv_work {
  int op;
  struct kv_arg *argv;
  size_t stride;
  uint32_t n;
  struct kv_res *res;    /* one per key */
  uint32_t *order;       /* key indices grouped by owning shard */
  struct kv_part *parts; /* one per shard */
};

static int kv_incr(struct kv_table *t, struct kv_res *res, const struct kv_arg *key,
                   struct kv_entry *e)
{
  long long v = 0;
  if (e && !parse_ll(e->val, e->vlen, &v))
    return -EINVAL;
  if (v == LLONG_MAX)
    return -ERANGE;
  char buf[24];
  int n = snprintf(buf, sizeof(buf), "%lld", ++v);
  struct kv_arg val = {malloc((size_t)n + 1), (size_t)n};
  if (!val.p)
    return -ENOMEM;
  memcpy(val.p, buf, (size_t)n + 1);
  int r = table_set(t, res->hash, key, &val);
  free(val.p); /* NULL unless table_set failed */
  res->num = v;
  return r;
}

/* Does one shard's keys of a command. Runs on that shard: a pinned task, or
 * the connection coroutine itself when it lives there. Never suspends, so
 * nothing else on the shard sees the partition half-changed. */
static void *kv_part_run(void *arg)
{
  struct kv_part *p = arg;
  struct kv_work *w = p->w;
  struct kv_table *t = &g_tables[p->shard];
  for (uint32_t i = p->first; i < p->first + p->count; i++) {
    uint32_t k = w->order[i];
    struct kv_arg *key = &w->argv[1 + (size_t)k * w->stride];
    struct kv_res *res = &w->res[k];
    struct kv_entry **pp = table_link(t, res->hash, key->p, key->n);
    struct kv_entry *e = pp ? *pp : NULL;
    switch (w->op) {
    case KV_GET:
      res->st = 0;
      if (e && !(res->val = malloc(e->vlen + 1))) {
        res->st = -ENOMEM;
      } else if (e) {
        memcpy(res->val, e->val, e->vlen);
        res->len = e->vlen;
        res->st = 1;
      }
      break;
    case KV_SET:
      res->st = table_set(t, res->hash, key, key + 1);
      break;
    case KV_DEL:
      res->st = e != NULL;
      if (e) {
        *pp = e->next;
        free(e->val);
        free(e);
        t->count--;
      }
      break;
    case KV_EXISTS:
      res->st = e != NULL;
      break;
    case KV_INCR:
      res->st = kv_incr(t, res, key, e);
      break;
    }
  }
  return NULL;
}

/* Runs a keyed command: groups its keys by shard, sends a pinned task to
 * every other shard involved, does this shard's keys itself meanwhile, and
 * joins the tasks. Returns 0, or -errno when a part could not run (that
 * part's keys are left untouched). Every task is over when this returns -
 * even when the runtime is stopping: a cancelled weft_join still waits for
 * its task - so w's memory is the caller's again. */
static int kv_execute(struct kv_work *w)
{
  uint32_t count[WEFT_MAX_SHARDS] = {0};
  for (uint32_t k = 0; k < w->n; k++) {
    const struct kv_arg *key = &w->argv[1 + (size_t)k * w->stride];
    w->res[k] = (struct kv_res){.hash = kv_hash(key->p, key->n)};
    count[kv_shard_of(w->res[k].hash)]++;
  }
  uint32_t first = 0;
  for (int s = 0; s < g_shards; s++) {
    w->parts[s] = (struct kv_part){.w = w, .shard = s, .first = first, .count = 0};
    first += count[s];
  }
  for (uint32_t k = 0; k < w->n; k++) {
    struct kv_part *p = &w->parts[kv_shard_of(w->res[k].hash)];
    w->order[p->first + p->count++] = k;
  }

  int self = weft_shard_id(), err = 0;
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_PINNED;
  for (int s = 0; s < g_shards; s++)
    if (s != self && w->parts[s].count) {
      o.shard = s;
      int r = weft_spawn(&w->parts[s].task, &o, kv_part_run, &w->parts[s]);
      if (r < 0) {
        w->parts[s].task = NULL;
        err = r;
      }
    }
  if (w->parts[self].count)
    kv_part_run(&w->parts[self]);
  for (int s = 0; s < g_shards; s++)
    if (w->parts[s].task) {
      int r = weft_join(w->parts[s].task, NULL);
      if (r < 0)
        err = r;
    }
  return err;
}

/* ---- connections ---------------------------------------------------------------- */

struct conn {
  int fd;
  weft_reader *r;
  weft_writer *w;
  struct kv_arg *argv;   /* the command being read or run */
  size_t argc, cap;
  struct kv_work work;   /* scratch for keyed commands (res, order, parts) */
  uint32_t work_cap;     /* keys res and order have room for */
  char *inl;             /* the inline line buffer, MAX_INLINE, on first use */
  char hdr[64];          /* one "*N" or "$N" line */
  char err[64];          /* a protocol error message built on the spot */
  bool quit;
};

static void free_args(struct conn *c)
{
  for (size_t i = 0; i < c->argc; i++)
    free(c->argv[i].p);
  c->argc = 0;
}

static int push_arg(struct conn *c, char *p, size_t n)
{
  if (c->argc == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 8;
    struct kv_arg *a = realloc(c->argv, cap * sizeof(*a));
    if (!a) {
      free(p);
      return -1;
    }
    c->argv = a;
    c->cap = cap;
  }
  c->argv[c->argc++] = (struct kv_arg){p, n};
  return 0;
}

/* A "<type><integer>\r\n" line (s points after the type byte). */
static bool parse_len_line(const char *s, size_t n, long long *out)
{
  return n >= 2 && s[n - 2] == '\r' && s[n - 1] == '\n' && parse_ll(s, n - 2, out);
}

/* Reads a bulk of len bytes and its CRLF. The buffer grows as the bytes
 * arrive, so a client announcing 512 MiB and sending nothing costs 1 MiB.
 * 0, -1 (end of file, error, no memory: close), 1 (bad terminator). */
static int read_bulk(struct conn *c, size_t len)
{
  size_t cap = len < BULK_STEP ? len : BULK_STEP, got = 0;
  char *p = malloc(cap + 1);
  while (p && got < len) {
    if (got == cap) {
      cap = cap * 2 < len ? cap * 2 : len;
      char *q = realloc(p, cap + 1);
      if (!q)
        break;
      p = q;
    }
    if (weft_reader_read_exact(c->r, p + got, cap - got) <= 0)
      break;
    got = cap;
  }
  char crlf[2];
  if (!p || got < len || weft_reader_read_exact(c->r, crlf, 2) != 2) {
    free(p);
    return -1;
  }
  p[len] = '\0';
  if (push_arg(c, p, len) < 0)
    return -1;
  return crlf[0] == '\r' && crlf[1] == '\n' ? 0 : 1;
}

/* "*N\r\n" then N times "$L\r\n<L bytes>\r\n". 0, -1 (close), or 1 with
 * *perr set (protocol error). */
static int read_multibulk(struct conn *c, const char **perr)
{
  long long count, len;
  ssize_t n = weft_reader_read_line(c->r, c->hdr, sizeof(c->hdr));
  if (n == -EMSGSIZE || (n > 0 && (!parse_len_line(c->hdr + 1, (size_t)n - 1, &count) ||
                                   count > MAX_ARGS))) {
    *perr = "invalid multibulk length";
    return 1;
  }
  if (n <= 0)
    return -1;
  size_t total = 0;
  for (long long i = 0; i < count; i++) {
    n = weft_reader_read_line(c->r, c->hdr, sizeof(c->hdr));
    if (n > 0 && c->hdr[0] != '$') {
      unsigned char ch = (unsigned char)c->hdr[0];
      snprintf(c->err, sizeof(c->err), "expected '$', got '%c'", ch >= 0x20 && ch < 0x7f ? ch : '?');
      *perr = c->err;
      return 1;
    }
    if (n == -EMSGSIZE || (n > 0 && (!parse_len_line(c->hdr + 1, (size_t)n - 1, &len) ||
                                     len < 0 || len > MAX_BULK))) {
      *perr = "invalid bulk length";
      return 1;
    }
    if (n <= 0)
      return -1;
    if ((total += (size_t)len) > MAX_COMMAND) {
      *perr = "command too large";
      return 1;
    }
    int r = read_bulk(c, (size_t)len);
    if (r)
      return r < 0 ? -1 : (*perr = "invalid bulk terminator", 1);
  }
  return 0; /* count <= 0: an empty command, which gets no reply */
}

/* An inline command: one line, split on blanks. Same results. */
static int read_inline(struct conn *c, const char **perr)
{
  if (!c->inl && !(c->inl = malloc(MAX_INLINE)))
    return -1;
  ssize_t n = weft_reader_read_line(c->r, c->inl, MAX_INLINE);
  if (n == -EMSGSIZE) {
    *perr = "too big inline request";
    return 1;
  }
  if (n <= 0 || c->inl[n - 1] != '\n')
    return -1; /* end of file, possibly part-way through the line */
  for (ssize_t i = 0; i < n;) {
    while (i < n && strchr(" \t\r\n", c->inl[i]) && c->inl[i])
      i++;
    ssize_t start = i;
    while (i < n && !(strchr(" \t\r\n", c->inl[i]) && c->inl[i]))
      i++;
    if (i > start) {
      char *p = malloc((size_t)(i - start) + 1);
      if (!p)
        return -1;
      memcpy(p, c->inl + start, (size_t)(i - start));
      p[i - start] = '\0';
      if (push_arg(c, p, (size_t)(i - start)) < 0)
        return -1;
    }
  }
  return 0;
}

static int read_command(struct conn *c, const char **perr)
{
  const void *p;
  ssize_t n = weft_reader_peek(c->r, 1, &p);
  if (n <= 0)
    return -1;
  return *(const char *)p == '*' ? read_multibulk(c, perr) : read_inline(c, perr);
}

/* ---- replies and commands -------------------------------------------------------- */

static void reply(struct conn *c, const char *s)
{
  weft_writer_write(c->w, s, strlen(s));
}

static void reply_bulk(struct conn *c, const char *p, size_t n)
{
  weft_writer_printf(c->w, "$%zu\r\n", n);
  weft_writer_write(c->w, p, n);
  weft_writer_write(c->w, "\r\n", 2);
}

/* "-ERR ..." with every byte that could break the protocol replaced. */
static void reply_err(struct conn *c, const char *fmt, ...)
{
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  for (char *s = buf; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
      *s = '?';
  weft_writer_printf(c->w, "-ERR %s\r\n", buf);
}

static void reply_arity(struct conn *c, const char *name)
{
  char low[32];
  size_t i = 0;
  for (; name[i] && i < sizeof(low) - 1; i++)
    low[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] + 32 : name[i]);
  low[i] = '\0';
  reply_err(c, "wrong number of arguments for '%s' command", low);
}

/* redis-benchmark asks for these two at start; anything else: none. */
static void config_get(struct conn *c, const char *param)
{
  static const char *const known[][2] = {{"save", ""}, {"appendonly", "no"}};
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
    if (strcasecmp(param, known[i][0]) == 0) {
      reply(c, "*2\r\n");
      reply_bulk(c, known[i][0], strlen(known[i][0]));
      reply_bulk(c, known[i][1], strlen(known[i][1]));
      return;
    }
  reply(c, "*0\r\n");
}

static int work_reserve(struct conn *c, uint32_t n)
{
  if (!c->work.parts && !(c->work.parts = calloc((size_t)g_shards, sizeof(*c->work.parts))))
    return -ENOMEM;
  if (n <= c->work_cap)
    return 0;
  struct kv_res *res = realloc(c->work.res, n * sizeof(*res));
  if (res)
    c->work.res = res;
  uint32_t *order = realloc(c->work.order, n * sizeof(*order));
  if (order)
    c->work.order = order;
  if (!res || !order)
    return -ENOMEM;
  c->work_cap = n;
  return 0;
}

/* GET, SET, DEL, EXISTS, INCR, MGET, MSET: argv[1..] are keys (stride 1) or
 * key/value pairs (stride 2). Returns 0, or -1 to close. */
static int cmd_keyed(struct conn *c, int op, size_t stride, bool multi)
{
  struct kv_work *w = &c->work;
  uint32_t n = (uint32_t)((c->argc - 1) / stride);
  int r = work_reserve(c, n);
  bool ran = r == 0;
  if (ran) {
    w->op = op;
    w->argv = c->argv;
    w->stride = stride;
    w->n = n;
    r = kv_execute(w);
  }
  if (r < 0) {
    reply_err(c, "%s", weft_strerror(r));
  } else if (op == KV_GET) {
    if (multi)
      weft_writer_printf(c->w, "*%u\r\n", n);
    for (uint32_t k = 0; k < n; k++)
      if (w->res[k].st == 1)
        reply_bulk(c, w->res[k].val, w->res[k].len);
      else if (w->res[k].st < 0 && !multi)
        reply_err(c, "%s", weft_strerror(w->res[k].st));
      else
        reply(c, "$-1\r\n");
  } else if (op == KV_DEL || op == KV_EXISTS) {
    long long sum = 0;
    for (uint32_t k = 0; k < n; k++)
      sum += w->res[k].st;
    weft_writer_printf(c->w, ":%lld\r\n", sum);
  } else if (op == KV_INCR && w->res[0].st == 0) {
    weft_writer_printf(c->w, ":%lld\r\n", w->res[0].num);
  } else {
    int bad = 0;
    for (uint32_t k = 0; k < n && !bad; k++)
      bad = w->res[k].st;
    if (bad == -EINVAL)
      reply_err(c, "value is not an integer or out of range");
    else if (bad == -ERANGE)
      reply_err(c, "increment or decrement would overflow");
    else if (bad)
      reply_err(c, "%s", weft_strerror(bad));
    else
      reply(c, "+OK\r\n");
  }
  if (ran && op == KV_GET)
    for (uint32_t k = 0; k < n; k++)
      free(w->res[k].val);
  return 0;
}

/* Runs the command in c->argv. 0, or -1 to close the connection. */
static int dispatch(struct conn *c)
{
  const struct kv_arg *a = c->argv;
  size_t n = c->argc;
  const char *name = a[0].p;
  if (strcasecmp(name, "GET") == 0)
    return n == 2 ? cmd_keyed(c, KV_GET, 1, false) : (reply_arity(c, name), 0);
  if (strcasecmp(name, "SET") == 0) {
    if (n == 3)
      return cmd_keyed(c, KV_SET, 2, false);
    n < 3 ? reply_arity(c, name) : reply_err(c, "syntax error"); /* no SET options */
  } else if (strcasecmp(name, "INCR") == 0) {
    return n == 2 ? cmd_keyed(c, KV_INCR, 1, false) : (reply_arity(c, name), 0);
  } else if (strcasecmp(name, "MGET") == 0) {
    return n >= 2 ? cmd_keyed(c, KV_GET, 1, true) : (reply_arity(c, name), 0);
  } else if (strcasecmp(name, "MSET") == 0) {
    return n >= 3 && n % 2 ? cmd_keyed(c, KV_SET, 2, true) : (reply_arity(c, name), 0);
  } else if (strcasecmp(name, "DEL") == 0) {
    return n >= 2 ? cmd_keyed(c, KV_DEL, 1, true) : (reply_arity(c, name), 0);
  } else if (strcasecmp(name, "EXISTS") == 0) {
    return n >= 2 ? cmd_keyed(c, KV_EXISTS, 1, true) : (reply_arity(c, name), 0);
  } else if (strcasecmp(name, "PING") == 0) {
    if (n == 1)
      reply(c, "+PONG\r\n");
    else
      n == 2 ? reply_bulk(c, a[1].p, a[1].n) : reply_arity(c, name);
  } else if (strcasecmp(name, "ECHO") == 0) {
    n == 2 ? reply_bulk(c, a[1].p, a[1].n) : reply_arity(c, name);
  } else if (strcasecmp(name, "COMMAND") == 0) {
    reply(c, "*0\r\n"); /* no command table: clients then use their own */
  } else if (strcasecmp(name, "CONFIG") == 0) {
    if (n >= 2 && strcasecmp(a[1].p, "GET") == 0)
      n == 3 ? config_get(c, a[2].p) : reply_arity(c, "config|get");
    else
      reply_err(c, "unsupported CONFIG subcommand");
  } else if (strcasecmp(name, "QUIT") == 0) {
    reply(c, "+OK\r\n");
    c->quit = true;
  } else {
    reply_err(c, "unknown command '%.48s'", name);
  }
  return 0;
}

/* As in http_server.c: after a protocol error, shut our side down and read
 * what is in flight before closing, so that the error reply is not lost to
 * the reset a close with unread data sends. */
static void linger_close(struct conn *c)
{
  weft_shutdown(c->fd, SHUT_WR);
  int64_t deadline = weft_now() + WEFT_SEC;
  char buf[4096];
  for (size_t total = 0; total < 256 * 1024;) {
    ssize_t n = weft_recv_dl(c->fd, buf, sizeof(buf), 0, deadline);
    if (n <= 0)
      break;
    total += (size_t)n;
  }
}

/* Is the next command wholly buffered? Then its reply can go out with the
 * ones before it; otherwise flush them now, before read_command waits for
 * the rest - a client may wait for a reply before it sends more. A
 * malformed start counts as whole: read_command answers it without
 * reading further. */
static bool command_buffered(struct conn *c)
{
  size_t n = weft_reader_buffered(c->r);
  const void *peeked = NULL;
  if (n == 0 || weft_reader_peek(c->r, n, &peeked) < (ssize_t)n || !peeked)
    return false;
  const char *p = peeked, *end = p + n, *nl;
  if (*p != '*')
    return memchr(p, '\n', n) != NULL;
  long long count, len;
  if (!(nl = memchr(p, '\n', n)))
    return false;
  if (!parse_len_line(p + 1, (size_t)(nl - p), &count))
    return true;
  p = nl + 1;
  for (long long i = 0; i < count; i++) {
    if (!(nl = memchr(p, '\n', (size_t)(end - p))))
      return false;
    if (*p != '$' || !parse_len_line(p + 1, (size_t)(nl - p), &len) || len < 0 || len > MAX_BULK)
      return true;
    p = nl + 1;
    if ((unsigned long long)(end - p) < (unsigned long long)len + 2)
      return false;
    p += len + 2;
  }
  return true;
}

static void serve(struct conn *c)
{
  for (;;) {
    const char *perr = NULL;
    int r = read_command(c, &perr);
    if (r < 0)
      break;
    if (r > 0) {
      reply_err(c, "Protocol error: %s", perr);
      if (weft_writer_flush(c->w) == 0)
        linger_close(c);
      return;
    }
    if (c->argc > 0 && dispatch(c) < 0)
      return;
    free_args(c);
    if (c->quit)
      break;
    /* Answers to pipelined commands go out together. */
    if (!command_buffered(c) && weft_writer_flush(c->w) < 0)
      return;
  }
  weft_writer_flush(c->w);
}

/* The connection's state is allocated here, not by the accept loop: see
 * serve.h. */
static void *kv_conn(void *arg)
{
  struct conn *c = calloc(1, sizeof(*c));
  if (!c) {
    weft_close((int)(intptr_t)arg);
    return NULL;
  }
  c->fd = (int)(intptr_t)arg;
  int one = 1;
  weft_setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (weft_reader_create(&c->r, c->fd, 0) == 0 && weft_writer_create(&c->w, c->fd, 0) == 0)
    serve(c);
  weft_writer_destroy(c->w);
  weft_reader_destroy(c->r);
  weft_close(c->fd);
  free(c->inl);
  free_args(c);
  free(c->argv);
  free(c->work.res);
  free(c->work.order);
  free(c->work.parts);
  free(c);
  return NULL;
}

/* ---- start and stop (serve.c) ------------------------------------------------------ */

/* On the main coroutine, before the first connection. */
static void started(void)
{
  g_shards = weft_shard_count();
}

int main(int argc, char **argv)
{
  /* Round-robin placement (serve.c's) is required here: see the top of the
   * file. */
  struct serve s = {.name = "kv_server",
                    .conn_name = "kv-conn",
                    .conn = kv_conn,
                    .started = started};
  int r = serve_parse(&s, argc, argv, NULL, NULL, NULL);
  if (r)
    return r;
  r = serve_run(&s);
  /* Every shard thread has been joined: the partitions are ours now. */
  for (int i = 0; i < WEFT_MAX_SHARDS; i++)
    table_free(&g_tables[i]);
  return r;
}
