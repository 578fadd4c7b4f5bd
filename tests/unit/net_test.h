/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the "net" and "net_faults" suites: connected TCP pairs
 * over loopback (in a coroutine or on a plain thread: a TCP connect
 * completes without the accept), ports, patterns, descriptor counts.
 */
#ifndef WEFT_TESTS_NET_TEST_H
#define WEFT_TESTS_NET_TEST_H

#include "io_helpers.h"

#include "net_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A byte pattern that differs with the seed and the position. */
static inline void fill(void *p, size_t n, unsigned seed)
{
  unsigned char *b = p;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    b[i] = (unsigned char)(x >> 16);
  }
}

/* The local port of a socket (IPv4 or IPv6), or -1. */
static inline int port_of(int fd)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (weft_getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
    return -1;
  if (ss.ss_family == AF_INET)
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

static inline int set_int_opt(int fd, int level, int name, int v)
{
  return weft_setsockopt(fd, level, name, &v, sizeof(v));
}

/* A connected TCP pair over 127.0.0.1: *a the client end, *b the accepted
 * one. bufsize > 0: SO_SNDBUF and SO_RCVBUF that small on both ends (set
 * before the connection, so the window is small too). 0 or -errno. */
static inline int tcp_pair_bufs(int *a, int *b, int bufsize)
{
  int l = weft_socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0)
    return l;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  int c = -1, r;
  if (bufsize > 0 && ((r = set_int_opt(l, SOL_SOCKET, SO_RCVBUF, bufsize)) < 0 ||
                      (r = set_int_opt(l, SOL_SOCKET, SO_SNDBUF, bufsize)) < 0))
    goto out;
  if ((r = weft_bind(l, (struct sockaddr *)&sa, len)) < 0 || (r = weft_listen(l, 4)) < 0 ||
      (r = weft_getsockname(l, (struct sockaddr *)&sa, &len)) < 0)
    goto out;
  if ((c = r = weft_socket(AF_INET, SOCK_STREAM, 0)) < 0)
    goto out;
  if (bufsize > 0 && ((r = set_int_opt(c, SOL_SOCKET, SO_RCVBUF, bufsize)) < 0 ||
                      (r = set_int_opt(c, SOL_SOCKET, SO_SNDBUF, bufsize)) < 0))
    goto out;
  if ((r = weft_connect(c, (struct sockaddr *)&sa, len)) < 0)
    goto out;
  if ((r = weft_accept(l, NULL, NULL, 0)) < 0)
    goto out;
  *a = c;
  *b = r;
  c = -1;
  r = 0;
out:
  if (c >= 0)
    close(c);
  close(l);
  return r;
}

static inline int tcp_pair(int *a, int *b)
{
  return tcp_pair_bufs(a, b, 0);
}

/* Pool jobs run so far by the current runtime. */
static inline uint64_t pool_jobs(void)
{
  weft_stats s;
  return weft_stats_get(NULL, -1, &s) == 0 ? s.pool_jobs : UINT64_MAX;
}

/* Open descriptors of this process. */
static inline int count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - 1; /* the directory's own descriptor */
}

/* The lowest free descriptor number. */
static inline int lowest_free_fd(void)
{
  int fd = dup(0);
  if (fd >= 0)
    close(fd);
  return fd;
}

/* A loopback listener whose accept queue is full (backlog 0 takes one
 * connection): a further connect's SYN is dropped and the connect waits.
 * *filler is the connection that fills it. The listening fd, or -errno. */
static inline int full_listener(int *filler, struct sockaddr_in *addr)
{
  int l = weft_socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0)
    return l;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  int r;
  if ((r = weft_bind(l, (struct sockaddr *)&sa, len)) < 0 || (r = weft_listen(l, 0)) < 0 ||
      (r = weft_getsockname(l, (struct sockaddr *)&sa, &len)) < 0) {
    close(l);
    return r;
  }
  int c = weft_socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || (r = weft_connect(c, (struct sockaddr *)&sa, len)) < 0) {
    if (c >= 0)
      close(c);
    close(l);
    return c < 0 ? c : r;
  }
  *filler = c;
  *addr = sa;
  return l;
}

/* A scenario that must behave alike in a coroutine and on a plain thread:
 * two tests, `name` (in a coroutine of a 1-shard runtime, then checked for
 * leaked descriptors) and `name`_plain_thread. The rest are Test() options. */
struct net_scenario {
  void (*fn)(void);
};

static inline void *net_run_scenario(void *arg)
{
  ((const struct net_scenario *)arg)->fn();
  return NULL;
}

#define NET_BOTH_SIDES(suite, name, scenario, ...)                                            \
  Test(suite, name, __VA_ARGS__)                                                              \
  {                                                                                           \
    struct net_scenario s_ = {scenario};                                                      \
    rt_run(1, net_run_scenario, &s_);                                                         \
    rt_assert_clean();                                                                        \
    rt_assert_no_leaks();                                                                     \
  }                                                                                           \
  Test(suite, name##_plain_thread, __VA_ARGS__)                                               \
  {                                                                                           \
    scenario();                                                                               \
    rt_assert_clean();                                                                        \
  }

#endif
