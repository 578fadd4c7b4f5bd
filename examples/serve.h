/* SPDX-License-Identifier: MIT */
/*
 * The start-and-stop scaffolding the example servers share (echo_server,
 * http_server, kv_server): --host/--port/--shards, a multishot listener
 * whose accept loop spawns one coroutine per connection, and a clean stop
 * on SIGINT/SIGTERM.
 *
 * Stopping: SIGINT and SIGTERM are blocked before weft_run starts any
 * thread (the shard threads inherit the mask) and read from a signalfd by a
 * coroutine, which cancels the main coroutine. The accept loop ends with
 * -ECANCELED, main returns, and weft_run() stops the runtime, which cancels
 * every connection coroutine: their blocked calls return -ECANCELED, they
 * close their socket and return. (One not started yet never runs: see conn
 * below.)
 *
 * Placement: connections are spawned WEFT_PLACE_ROUND_ROBIN. Connections are
 * alike and long-lived, so dealing them out in turn spreads the load at once,
 * and a coroutine that never moves keeps its socket's completions on one ring
 * and its buffers in one CPU's cache (kv_server also relies on it for
 * correctness: see there).
 */
#ifndef WEFT_EXAMPLES_SERVE_H
#define WEFT_EXAMPLES_SERVE_H

#include <getopt.h>

struct serve {
  /* Set by the server. */
  const char *name;              /* "echo_server": for messages */
  const char *conn_name;         /* the connection coroutines' name */
  /* Serves one connection, closes its fd. Its argument is the fd itself, as
   * an intptr_t, and nothing else: a connection accepted just before the
   * stop may be cancelled before its coroutine ever ran (weft_spawn's
   * header), so anything allocated for it ahead of the coroutine would
   * leak. conn allocates its own state; the fd is closed at exit. */
  void *(*conn)(void *arg);
  void (*started)(void);         /* on the main coroutine, before listening */
  /* Filled by serve_parse. */
  const char *host;              /* NULL = every address */
  const char *port;              /* "0" = any free one, printed */
  int shards;                    /* 0 = one per CPU */
};

/* Parses argv: --host, --port, --shards, and the server's own long options
 * `extra` (may be NULL), each handed to on_extra(getopt's value, optarg),
 * which returns < 0 to reject it. Returns 0, or 2 after printing a usage
 * line that ends with extra_usage. */
int serve_parse(struct serve *s, int argc, char **argv, const struct option *extra,
                int (*on_extra)(int c, const char *arg), const char *extra_usage);

/* Runs the server until SIGINT/SIGTERM; returns the process exit code: 0,
 * 1 (a failure, reported on stderr) or 77 (no io_uring here). */
int serve_run(struct serve *s);

#endif
