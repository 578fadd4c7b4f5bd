/* SPDX-License-Identifier: MIT */
/* The example servers' shared start and stop: see serve.h. */
#include "serve.h"

#include "args.h"

#include <weft.h>

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct running {
  struct serve *s;
  int sigfd;            /* signalfd for SIGINT and SIGTERM */
  weft_task *main_task; /* what the signal watcher cancels */
};

/* Waits for SIGINT/SIGTERM, then cancels the main coroutine's accept loop.
 * A failed read also ends the server rather than leave it unstoppable;
 * -ECANCELED means the runtime is stopping already (main has returned, and
 * its handle must not be touched). */
static void *signal_watch(void *arg)
{
  struct running *run = arg;
  int r = weft_signal_wait(run->sigfd, NULL);
  if (r == -ECANCELED)
    return NULL;
  if (r < 0)
    fprintf(stderr, "%s: waiting for a signal: %s\n", run->s->name, weft_strerror(r));
  weft_cancel(run->main_task);
  return NULL;
}

/* The port a listening socket got (for --port 0). */
static int bound_port(int fd)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  int r = weft_getsockname(fd, (struct sockaddr *)&ss, &len);
  if (r < 0)
    return r;
  if (ss.ss_family == AF_INET6)
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void accept_loop(struct serve *s, weft_listener *l)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  o.name = s->conn_name;
  for (;;) {
    int fd = weft_listener_accept(l, WEFT_NO_DEADLINE);
    if (fd == -ECANCELED)
      return;
    if (fd < 0) {
      /* Out of descriptors or memory: back off a little and keep serving
       * the connections we have. */
      fprintf(stderr, "%s: accept: %s\n", s->name, weft_strerror(fd));
      if (weft_sleep(10 * WEFT_MSEC) == -ECANCELED)
        return;
      continue;
    }
    int r = weft_spawn(NULL, &o, s->conn, (void *)(intptr_t)fd);
    if (r < 0) {
      weft_close(fd);
      if (r == -ECANCELED)
        return;
    }
  }
}

static void *server_main(void *arg)
{
  struct running *run = arg;
  struct serve *s = run->s;
  run->main_task = weft_task_self();
  if (s->started)
    s->started();
  int lfd = weft_tcp_listen(s->host, s->port, 1024);
  if (lfd < 0) {
    fprintf(stderr, "%s: listen on port %s: %s\n", s->name, s->port, weft_strerror(lfd));
    return (void *)1;
  }
  weft_listener *l = NULL;
  int port = bound_port(lfd);
  int r = port < 0 ? port : weft_listener_open(&l, lfd, 0);
  if (r >= 0)
    r = weft_spawn(NULL, NULL, signal_watch, run);
  if (r < 0) {
    fprintf(stderr, "%s: start: %s\n", s->name, weft_strerror(r));
    if (l)
      weft_listener_close(l);
    weft_close(lfd);
    return (void *)1;
  }
  printf("listening on %d\n", port);
  fflush(stdout);

  accept_loop(s, l);

  weft_listener_close(l);
  weft_close(lfd);
  return NULL; /* weft_run stops the runtime: the connections are cancelled */
}

int serve_parse(struct serve *s, int argc, char **argv, const struct option *extra,
                int (*on_extra)(int c, const char *arg), const char *extra_usage)
{
  static const struct option common[] = {
    {"host", required_argument, NULL, 'h'},
    {"port", required_argument, NULL, 'p'},
    {"shards", required_argument, NULL, 's'},
  };
  enum { NCOMMON = sizeof(common) / sizeof(common[0]), MAX_EXTRA = 8 };
  struct option all[NCOMMON + MAX_EXTRA + 1];
  int n = 0;
  for (; n < NCOMMON; n++)
    all[n] = common[n];
  for (int i = 0; extra && extra[i].name && i < MAX_EXTRA; i++)
    all[n++] = extra[i];
  all[n] = (struct option){NULL, 0, NULL, 0};

  s->host = NULL;
  s->port = "0";
  s->shards = 0;
  bool ok = true;
  long long v = 0;
  int c;
  while (ok && (c = getopt_long(argc, argv, "", all, NULL)) != -1) {
    switch (c) {
    case 'h': s->host = optarg; break;
    case 'p': s->port = optarg; break;
    case 's':
      ok = arg_number(optarg, 0, WEFT_MAX_SHARDS, &v);
      s->shards = (int)v;
      break;
    default: ok = c != '?' && on_extra && on_extra(c, optarg) >= 0; break;
    }
  }
  if (ok && optind == argc && s->shards >= 0 && s->shards <= WEFT_MAX_SHARDS)
    return 0;
  fprintf(stderr, "usage: %s [--host H] [--port N] [--shards N]%s%s\n", argv[0],
          extra_usage && *extra_usage ? " " : "", extra_usage ? extra_usage : "");
  return 2;
}

int serve_run(struct serve *s)
{
  struct running run = {.s = s, .sigfd = -1};
  /* Block the stop signals before any thread exists, so that every shard
   * thread inherits the mask and the signals wait in the signalfd. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  weft_signal_block(&set);
  signal(SIGPIPE, SIG_IGN);
  run.sigfd = weft_signal_open(&set);
  if (run.sigfd < 0) {
    fprintf(stderr, "%s: weft_signal_open: %s\n", s->name, weft_strerror(run.sigfd));
    return 1;
  }

  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = s->shards;
  void *ret = NULL;
  int r = weft_run(&cfg, server_main, &run, &ret);
  close(run.sigfd);
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "%s: io_uring is not available here (%s)\n", s->name, weft_strerror(r));
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "%s: weft_run: %s\n", s->name, weft_strerror(r));
    return 1;
  }
  return ret == NULL ? 0 : 1;
}
