/* SPDX-License-Identifier: MIT */
/*
 * echo_server: a TCP echo server written like a thread-per-connection
 * server - accept, spawn, and a plain read/write loop per connection - where
 * every "thread" is a weft coroutine and every blocking call one io_uring
 * operation.
 *
 *   echo_server [--host H] [--port N] [--shards N]
 *
 * --port 0 (the default) takes any free port; the port is printed as
 * "listening on PORT". --shards 0 (the default) = one shard per CPU.
 * SIGINT or SIGTERM stops it cleanly (exit 0). Try it with echo_client.
 *
 * What it shows:
 *  - weft_run() with a main coroutine that owns the accept loop, on a
 *    multishot weft_listener;
 *  - stopping: SIGINT/SIGTERM are blocked in every thread (the shard threads
 *    inherit the mask of the thread that calls weft_run) and read from a
 *    signalfd by a coroutine, which cancels the main coroutine. The accept
 *    loop ends with -ECANCELED, main returns, and weft_run() stops the
 *    runtime, which cancels every connection coroutine: their blocked
 *    weft_recv() returns -ECANCELED, they close their socket and return.
 *  - placement: connections are spawned WEFT_PLACE_ROUND_ROBIN. Echo
 *    connections are alike and long-lived, so dealing them out in turn
 *    spreads the load at once, and a coroutine that never moves keeps its
 *    socket's completions on one ring and its buffers in one CPU's cache.
 *    Stealable placement would start them all on shard 0 (where the accept
 *    loop runs) and rely on the idle shard stealing runnable ones later.
 */
#include <weft.h>

#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

struct server {
  const char *host;     /* NULL = every address */
  const char *port;
  int shards;
  int sigfd;            /* signalfd for SIGINT and SIGTERM */
  weft_task *main_task; /* what the signal watcher cancels */
};

/* One connection: echo until the peer closes, an error, or cancellation. */
static void *echo_conn(void *arg)
{
  int fd = (int)(intptr_t)arg;
  char buf[16384];
  int one = 1;
  weft_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  for (;;) {
    ssize_t n = weft_recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      break;
    if (weft_send_all(fd, buf, (size_t)n, NULL) < 0)
      break;
  }
  weft_close(fd);
  return NULL;
}

/* Waits for SIGINT/SIGTERM, then cancels the main coroutine's accept loop.
 * A failed read also ends the server rather than leave it unstoppable;
 * -ECANCELED means the runtime is stopping already (main has returned, and
 * its handle must not be touched). */
static void *signal_watch(void *arg)
{
  struct server *s = arg;
  struct signalfd_siginfo si;
  ssize_t n = weft_read(s->sigfd, &si, sizeof(si));
  if (n == -ECANCELED)
    return NULL;
  if (n < 0)
    fprintf(stderr, "echo_server: reading the signalfd: %s\n", weft_strerror((int)n));
  weft_cancel(s->main_task);
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

static void accept_loop(weft_listener *l)
{
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  o.name = "echo-conn";
  for (;;) {
    int fd = weft_listener_accept(l, WEFT_NO_DEADLINE);
    if (fd == -ECANCELED)
      return;
    if (fd < 0) {
      /* Out of descriptors or memory: back off a little and keep serving
       * the connections we have. */
      fprintf(stderr, "echo_server: accept: %s\n", weft_strerror(fd));
      if (weft_sleep(10 * WEFT_MSEC) == -ECANCELED)
        return;
      continue;
    }
    int r = weft_spawn(NULL, &o, echo_conn, (void *)(intptr_t)fd);
    if (r < 0) {
      weft_close(fd);
      if (r == -ECANCELED)
        return;
    }
  }
}

static void *server_main(void *arg)
{
  struct server *s = arg;
  s->main_task = weft_task_self();
  int lfd = weft_tcp_listen(s->host, s->port, 1024);
  if (lfd < 0) {
    fprintf(stderr, "echo_server: listen on port %s: %s\n", s->port, weft_strerror(lfd));
    return (void *)1;
  }
  weft_listener *l = NULL;
  int port = bound_port(lfd);
  int r = port < 0 ? port : weft_listener_open(&l, lfd, 0);
  if (r >= 0)
    r = weft_spawn(NULL, NULL, signal_watch, s);
  if (r < 0) {
    fprintf(stderr, "echo_server: start: %s\n", weft_strerror(r));
    if (l)
      weft_listener_close(l);
    weft_close(lfd);
    return (void *)1;
  }
  printf("listening on %d\n", port);
  fflush(stdout);

  accept_loop(l);

  weft_listener_close(l);
  weft_close(lfd);
  return NULL; /* weft_run stops the runtime: the connections are cancelled */
}

static int usage(const char *argv0)
{
  fprintf(stderr, "usage: %s [--host H] [--port N] [--shards N]\n", argv0);
  return 2;
}

int main(int argc, char **argv)
{
  struct server s = {.port = "0", .sigfd = -1};
  static const struct option longopts[] = {
    {"host", required_argument, NULL, 'h'},
    {"port", required_argument, NULL, 'p'},
    {"shards", required_argument, NULL, 's'},
    {NULL, 0, NULL, 0},
  };
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'h': s.host = optarg; break;
    case 'p': s.port = optarg; break;
    case 's': s.shards = atoi(optarg); break;
    default: return usage(argv[0]);
    }
  }
  if (optind != argc || s.shards < 0 || s.shards > WEFT_MAX_SHARDS)
    return usage(argv[0]);

  /* Block the stop signals before any thread exists, so that every shard
   * thread inherits the mask and the signals wait in the signalfd. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  s.sigfd = signalfd(-1, &set, SFD_CLOEXEC);
  if (s.sigfd < 0) {
    perror("echo_server: signalfd");
    return 1;
  }

  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = s.shards;
  void *ret = NULL;
  int r = weft_run(&cfg, server_main, &s, &ret);
  close(s.sigfd);
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "echo_server: io_uring is not available here (%s)\n", weft_strerror(r));
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "echo_server: weft_run: %s\n", weft_strerror(r));
    return 1;
  }
  return ret == NULL ? 0 : 1;
}
