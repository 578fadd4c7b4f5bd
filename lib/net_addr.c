/* SPDX-License-Identifier: MIT */
/*
 * Names and addresses: TCP listen/connect by host and port, Unix sockets by
 * path, UDP bind (weft/net.h).
 *
 * getaddrinfo(3) can block for seconds (DNS), so it runs on the blocking
 * pool. Numeric hosts and ports - the common case for servers and tests -
 * are parsed here without a pool round trip; they mean the same thing.
 */
#include "net_internal.h"
#include "op.h"
#include "rawsys.h"

#include "weft/blocking.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static void close_quiet(int fd)
{
  int saved = errno;
  close(fd);
  errno = saved;
}

/* ---- resolving ----------------------------------------------------------------- */

/* A resolved list: getaddrinfo's, or up to two numeric entries kept here. */
struct lookup {
  struct addrinfo *list; /* what to try, in order */
  struct addrinfo *gai;  /* getaddrinfo's list to free, or NULL */
  struct addrinfo num[2];
  struct sockaddr_in6 num6;
  struct sockaddr_in num4;
};

static void lookup_free(struct lookup *lk)
{
  if (lk->gai)
    freeaddrinfo(lk->gai);
  lk->gai = lk->list = NULL;
}

/* EAI_* to -errno. EAI_AGAIN (the name server did not answer) is -EAGAIN:
 * unlike the other failures, trying again later may work. */
static int gai_to_errno(int e, int sys_errno)
{
  switch (e) {
  case 0:
    return 0;
  case EAI_NONAME:
  case EAI_NODATA:
#ifdef EAI_ADDRFAMILY
  case EAI_ADDRFAMILY:
#endif
    return -ENOENT;
  case EAI_AGAIN:
    return -EAGAIN;
  case EAI_MEMORY:
    return -ENOMEM;
  case EAI_SYSTEM:
    return sys_errno ? -sys_errno : -EIO;
  default:
    return -EINVAL;
  }
}

struct gai_job {
  const char *host, *port;
  struct addrinfo hints;
  struct addrinfo *res;
  int err;
};

/* On a pool thread (or inline on a plain thread: errno is the caller's). */
static void *gai_run(void *arg)
{
  struct gai_job *j = arg;
  int saved = errno;
  errno = 0;
  int e = getaddrinfo(j->host, j->port, &j->hints, &j->res);
  j->err = gai_to_errno(e, errno);
  if (e)
    j->res = NULL;
  errno = saved;
  return NULL;
}

#define PORT_NAME (-1)      /* not a number: a service name for getaddrinfo */
#define PORT_TOO_LARGE (-2) /* a number above 65535 */

/* A decimal port 0..65535, PORT_NAME or PORT_TOO_LARGE. getaddrinfo would
 * take "99999" as port 34463 (it keeps the low 16 bits): refused here. It
 * reads numbers as strtoul does - leading blanks and a sign allowed - so
 * " 8080" and "+8080" are port 8080 here too, " 99999" is too large, and a
 * minus sign (which strtoul wraps round) is refused; "" is its port 0. */
static int numeric_port(const char *port)
{
  if (!*port)
    return 0; /* getaddrinfo's too: strtoul stops at the end at once */
  const char *p = port;
  while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
    p++;
  bool minus = *p == '-';
  if (*p == '+' || *p == '-')
    p++;
  if (*p < '0' || *p > '9')
    return PORT_NAME;
  if (minus)
    return PORT_TOO_LARGE;
  long v = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9')
      return PORT_NAME;
    if (v <= 65535)
      v = v * 10 + (*p - '0');
  }
  return v <= 65535 ? (int)v : PORT_TOO_LARGE;
}

static void add_num(struct lookup *lk, int i, struct sockaddr *sa, socklen_t len, int socktype)
{
  struct addrinfo *ai = &lk->num[i];
  memset(ai, 0, sizeof(*ai));
  ai->ai_family = sa->sa_family;
  ai->ai_socktype = socktype;
  ai->ai_addr = sa;
  ai->ai_addrlen = len;
  if (i > 0)
    lk->num[i - 1].ai_next = ai;
  else
    lk->list = ai;
}

/* IPv4 as getaddrinfo reads a numeric host: inet_aton's forms ("127.1",
 * "0x7f.0.0.1"), the whole string - inet_aton stops at a blank and takes
 * the rest for a comment, getaddrinfo does not. */
static bool numeric_v4(const char *host, struct in_addr *a)
{
  for (const char *p = host; *p; p++)
    if (*p == ' ' || (*p >= '\t' && *p <= '\r'))
      return false;
  return inet_aton(host, a) != 0;
}

/* A scope id as glibc's getaddrinfo reads one: an interface name, for an
 * address that needs a scope (link-local), else a decimal number. */
static bool numeric_scope(const struct in6_addr *a, const char *scope, uint32_t *id)
{
  if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_MC_NODELOCAL(a) || IN6_IS_ADDR_MC_LINKLOCAL(a)) {
    int saved = errno;
    unsigned i = if_nametoindex(scope); /* an ioctl: never waits */
    errno = saved;
    if (i) {
      *id = i;
      return true;
    }
  }
  if (*scope < '0' || *scope > '9')
    return false;
  uint64_t v = 0;
  for (const char *p = scope; *p; p++) {
    if (*p < '0' || *p > '9')
      return false;
    if (v <= UINT32_MAX)
      v = v * 10 + (uint64_t)(*p - '0');
  }
  if (v > UINT32_MAX)
    return false;
  *id = (uint32_t)v;
  return true;
}

/* IPv6, with a scope id ("fe80::1%eth0") or without. */
static bool numeric_v6(const char *host, struct sockaddr_in6 *sa)
{
  const char *pct = strchr(host, '%');
  size_t n = pct ? (size_t)(pct - host) : strlen(host);
  char addr[INET6_ADDRSTRLEN];
  if (n >= sizeof(addr))
    return false;
  memcpy(addr, host, n);
  addr[n] = '\0';
  if (inet_pton(AF_INET6, addr, &sa->sin6_addr) != 1)
    return false;
  return !pct || numeric_scope(&sa->sin6_addr, pct + 1, &sa->sin6_scope_id);
}

/* Numeric host (or the wildcard, for passive use) and numeric port. A host
 * is numeric when getaddrinfo would take it with AI_NUMERICHOST, so that
 * parsing it here changes nothing but the pool round trip (and lets it
 * work in a cancelled task, as net.h promises). */
static bool resolve_numeric(struct lookup *lk, const char *host, int port, int socktype,
                            bool passive)
{
  bool wild = !host || !*host;
  memset(&lk->num6, 0, sizeof(lk->num6));
  memset(&lk->num4, 0, sizeof(lk->num4));
  lk->num6.sin6_family = AF_INET6;
  lk->num6.sin6_port = htons((uint16_t)port);
  lk->num4.sin_family = AF_INET;
  lk->num4.sin_port = htons((uint16_t)port);
  int n = 0;
  if (wild) {
    if (!passive)
      return false; /* "no host" to connect to is getaddrinfo's loopback rule */
    lk->num6.sin6_addr = in6addr_any;
    lk->num4.sin_addr.s_addr = htonl(INADDR_ANY);
    add_num(lk, n++, (struct sockaddr *)&lk->num6, sizeof(lk->num6), socktype);
    add_num(lk, n++, (struct sockaddr *)&lk->num4, sizeof(lk->num4), socktype);
  } else if (numeric_v4(host, &lk->num4.sin_addr)) {
    add_num(lk, n++, (struct sockaddr *)&lk->num4, sizeof(lk->num4), socktype);
  } else if (numeric_v6(host, &lk->num6)) {
    add_num(lk, n++, (struct sockaddr *)&lk->num6, sizeof(lk->num6), socktype);
  }
  return n > 0;
}

/* IPv6 entries first, keeping the order otherwise: the wildcard :: takes
 * IPv4 too, so it is the one to try first. */
static struct addrinfo *v6_first(struct addrinfo *list)
{
  struct addrinfo *six = NULL, **six_tail = &six, *rest = NULL, **rest_tail = &rest;
  for (struct addrinfo *ai = list, *next; ai; ai = next) {
    next = ai->ai_next;
    ai->ai_next = NULL;
    if (ai->ai_family == AF_INET6) {
      *six_tail = ai;
      six_tail = &ai->ai_next;
    } else {
      *rest_tail = ai;
      rest_tail = &ai->ai_next;
    }
  }
  *six_tail = rest;
  return six;
}

/* host:port to a list of addresses (empty list: -ENOENT). The port NULL is
 * port 0. */
static int resolve(struct lookup *lk, const char *host, const char *port, int socktype,
                   bool passive, int64_t deadline)
{
  lk->list = lk->gai = NULL;
  if (!port)
    port = "0";
  int pnum = numeric_port(port);
  if (pnum == PORT_TOO_LARGE)
    return -EINVAL;
  if (pnum >= 0 && resolve_numeric(lk, host, pnum, socktype, passive))
    return 0;
  bool wild = !host || !*host;
  struct gai_job j = {.host = wild ? NULL : host, .port = port, .res = NULL, .err = 0};
  memset(&j.hints, 0, sizeof(j.hints));
  j.hints.ai_family = AF_UNSPEC;
  j.hints.ai_socktype = socktype;
  j.hints.ai_flags = passive ? AI_PASSIVE : 0;
  int r = weft_blocking_dl(gai_run, &j, NULL, deadline);
  if (r < 0) {
    /* A job that ran past the deadline still produced its list. */
    if (j.res)
      freeaddrinfo(j.res);
    return r;
  }
  if (j.err < 0)
    return j.err;
  if (!j.res)
    return -ENOENT;
  lk->gai = wild ? v6_first(j.res) : j.res;
  lk->list = lk->gai;
  return 0;
}

/* ---- TCP ------------------------------------------------------------------------- */

static int set_int(int fd, int level, int name, int v)
{
  return weft_setsockopt(fd, level, name, &v, sizeof(v));
}

static int setup_listener(int fd, const struct addrinfo *ai, int backlog, unsigned flags)
{
  int r = set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
  if (r == 0 && (flags & WEFT_TCP_REUSEPORT))
    r = set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1);
  /* Explicit either way: the system default (net.ipv6.bindv6only) varies. */
  if (r == 0 && ai->ai_family == AF_INET6)
    r = set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, (flags & WEFT_TCP_V6ONLY) ? 1 : 0);
  if (r == 0)
    r = weft_bind(fd, ai->ai_addr, ai->ai_addrlen);
  if (r == 0)
    r = weft_listen(fd, backlog);
  return r;
}

/* Whether a listener or bound socket may go on to the host's next address
 * after this error: only when this address cannot be had on this system at
 * all (:: without IPv6). Any other error - an address in use, a port
 * reserved - is the answer, or a wildcard listener would quietly end up on
 * 0.0.0.0 beside another program's [::]. */
static bool next_address_after(int err)
{
  return err == -EAFNOSUPPORT || err == -EADDRNOTAVAIL || err == -EPROTONOSUPPORT;
}

int weft_tcp_listen_opts(const char *host, const char *port, int backlog, unsigned flags)
{
  if (flags & ~(WEFT_TCP_REUSEPORT | WEFT_TCP_V6ONLY))
    return -EINVAL;
  struct lookup lk;
  int r = resolve(&lk, host, port, SOCK_STREAM, true, WEFT_NO_DEADLINE);
  if (r < 0)
    return r;
  bool wild = !host || !*host;
  r = -ENOENT;
  for (const struct addrinfo *ai = lk.list; ai; ai = ai->ai_next) {
    if (wild && (flags & WEFT_TCP_V6ONLY) && ai->ai_family != AF_INET6)
      break; /* asked for IPv6 only: 0.0.0.0 is no answer */
    int fd = weft_socket(ai->ai_family, SOCK_STREAM, 0);
    r = fd < 0 ? fd : setup_listener(fd, ai, backlog, flags);
    if (r == 0) {
      r = fd;
      break;
    }
    if (fd >= 0)
      close_quiet(fd);
    if (!next_address_after(r))
      break;
  }
  lookup_free(&lk);
  return r;
}

int weft_tcp_listen(const char *host, const char *port, int backlog)
{
  return weft_tcp_listen_opts(host, port, backlog, 0);
}

int weft__net_connect_list(const struct addrinfo *ai, int64_t deadline)
{
  weft_task *t = weft__task_self();
  int r = -ENOENT;
  for (; ai; ai = ai->ai_next) {
    /* No socket for an address whose connect could not start: a cancelled
     * task, or the deadline (the call's or its scope's) passed - which also
     * ends the tries after a connect that failed for either. (A kernel
     * -ETIMEDOUT within our deadline - SYNs unanswered - is one address's
     * failure: the next one is tried.) */
    int stop = weft__may_wait(t, weft__deadline_for(t, deadline));
    if (stop < 0)
      return stop;
    int fd = weft_socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
      r = fd;
    } else {
      r = weft_connect_dl(fd, ai->ai_addr, ai->ai_addrlen, deadline);
      if (r == 0)
        return fd;
      close_quiet(fd);
    }
  }
  return r;
}

int weft_tcp_connect_dl(const char *host, const char *port, int64_t deadline)
{
  struct lookup lk;
  int r = resolve(&lk, host, port, SOCK_STREAM, false, deadline);
  if (r < 0)
    return r;
  r = weft__net_connect_list(lk.list, deadline);
  lookup_free(&lk);
  return r;
}

int weft_tcp_connect(const char *host, const char *port)
{
  return weft_tcp_connect_dl(host, port, WEFT_NO_DEADLINE);
}

/* ---- UDP ------------------------------------------------------------------------- */

int weft_udp_bind(const char *host, const char *port)
{
  struct lookup lk;
  int r = resolve(&lk, host, port, SOCK_DGRAM, true, WEFT_NO_DEADLINE);
  if (r < 0)
    return r;
  r = -ENOENT;
  for (const struct addrinfo *ai = lk.list; ai; ai = ai->ai_next) {
    int fd = weft_socket(ai->ai_family, SOCK_DGRAM, 0);
    r = fd < 0 ? fd : 0;
    /* :: takes IPv4 too, named or the wildcard: explicit, as for a TCP
     * listener, since the system default (net.ipv6.bindv6only) varies. */
    if (r == 0 && ai->ai_family == AF_INET6)
      r = set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0);
    if (r == 0)
      r = weft_bind(fd, ai->ai_addr, ai->ai_addrlen);
    if (r == 0) {
      r = fd;
      break;
    }
    if (fd >= 0)
      close_quiet(fd);
    if (!next_address_after(r))
      break;
  }
  lookup_free(&lk);
  return r;
}

/* ---- Unix ------------------------------------------------------------------------ */

/* SOCK_STREAM, SOCK_SEQPACKET or SOCK_DGRAM, with SOCK_NONBLOCK/CLOEXEC
 * allowed on top; the base type, or -1. */
static int unix_type(int type)
{
  int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  return base == SOCK_STREAM || base == SOCK_SEQPACKET || base == SOCK_DGRAM ? base : -1;
}

/* A path, or '@' and an abstract name (no file; the name may hold any
 * byte but NUL here). */
static int unix_addr(const char *path, struct sockaddr_un *sa, socklen_t *len)
{
  if (!path)
    return -EFAULT;
  size_t n = strlen(path);
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  if (path[0] == '@') {
    /* sun_path[0] = 0, then the name; the length counts no terminator. */
    if (n > sizeof(sa->sun_path))
      return -ENAMETOOLONG;
    memcpy(sa->sun_path + 1, path + 1, n - 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    return 0;
  }
  if (n == 0)
    return -ENOENT;
  if (n >= sizeof(sa->sun_path))
    return -ENAMETOOLONG;
  memcpy(sa->sun_path, path, n + 1);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
  return 0;
}

/* True if path is a socket file nobody is bound to any more: connecting to
 * it is refused. A live socket (of any type) and every other kind of file
 * are left alone. */
static bool stale_socket(const char *path, const struct sockaddr_un *sa, socklen_t len,
                         int type)
{
  int saved = errno;
  bool stale = false;
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
    int fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      stale = weft__sys_connect(fd, (const struct sockaddr *)sa, len) < 0 && errno == ECONNREFUSED;
      close(fd);
    }
  }
  errno = saved;
  return stale;
}

int weft_unix_listen(const char *path, int type, int backlog)
{
  int base = unix_type(type);
  if (base < 0)
    return -EINVAL;
  struct sockaddr_un sa;
  socklen_t len;
  int r = unix_addr(path, &sa, &len);
  if (r < 0)
    return r;
  int fd = weft_socket(AF_UNIX, type, 0);
  if (fd < 0)
    return fd;
  r = weft_bind(fd, (struct sockaddr *)&sa, len);
  if (r == -EADDRINUSE && path[0] != '@' && stale_socket(path, &sa, len, base)) {
    int saved = errno;
    unlink(path);
    errno = saved;
    r = weft_bind(fd, (struct sockaddr *)&sa, len);
  }
  if (r == 0 && base != SOCK_DGRAM)
    r = weft_listen(fd, backlog);
  if (r < 0) {
    close_quiet(fd);
    return r;
  }
  return fd;
}

int weft_unix_connect_dl(const char *path, int type, int64_t deadline)
{
  if (unix_type(type) < 0)
    return -EINVAL;
  struct sockaddr_un sa;
  socklen_t len;
  int r = unix_addr(path, &sa, &len);
  if (r < 0)
    return r;
  int fd = weft_socket(AF_UNIX, type, 0);
  if (fd < 0)
    return fd;
  r = weft_connect_dl(fd, (struct sockaddr *)&sa, len, deadline);
  if (r < 0) {
    close_quiet(fd);
    return r;
  }
  return fd;
}

int weft_unix_connect(const char *path, int type)
{
  return weft_unix_connect_dl(path, type, WEFT_NO_DEADLINE);
}
