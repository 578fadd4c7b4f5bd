/* SPDX-License-Identifier: MIT */
/*
 * weft_ws_dial: a WebSocket client from a ws:// URL (RFC 6455 section 3) -
 * parse, resolve and connect, then the opening handshake.
 */
#include "ws_internal.h"

#include "../coro/fault.h"
#include "weft/fs.h"
#include "weft/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HOST_MAX 256 /* a DNS name is at most 253 characters */

struct ws_url {
  char host[HOST_MAX];           /* for the resolver: no brackets around IPv6 */
  char port[6];                  /* "80" by default */
  char host_header[HOST_MAX + 8]; /* as the Host header writes it */
  const char *path;              /* path and query, "/" if none (points into the URL) */
};

static bool all_digits(const char *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] < '0' || p[i] > '9')
      return false;
  return n > 0;
}

/* Splits "ws://host[:port][/path][?query]". -EPROTONOSUPPORT for wss://,
 * -EINVAL for anything else that is not such a URL. */
static int parse_url(const char *url, struct ws_url *u)
{
  if (strncasecmp(url, "wss://", 6) == 0)
    return -EPROTONOSUPPORT;
  if (strncasecmp(url, "ws://", 5) != 0)
    return -EINVAL;
  const char *auth = url + 5;
  size_t alen = strcspn(auth, "/?#");
  const char *rest = auth + alen;
  /* No user info (RFC 6455 3 has none) and no fragment (3: MUST NOT). */
  if (memchr(auth, '@', alen) || strchr(rest, '#'))
    return -EINVAL;
  for (const char *c = url; *c; c++) /* blanks and control characters */
    if ((unsigned char)*c <= ' ' || (unsigned char)*c == 0x7f)
      return -EINVAL;
  const char *host = auth, *port = NULL;
  size_t hlen;
  if (alen && auth[0] == '[') { /* an IPv6 literal */
    const char *close = memchr(auth, ']', alen);
    if (!close)
      return -EINVAL;
    host = auth + 1;
    hlen = (size_t)(close - host);
    /* Brackets hold an IPv6 address (RFC 3986 3.2.2): it has a colon. */
    if (!memchr(host, ':', hlen))
      return -EINVAL;
    if (close + 1 < rest) {
      if (close[1] != ':')
        return -EINVAL;
      port = close + 2;
    }
  } else {
    const char *colon = memchr(auth, ':', alen);
    hlen = colon ? (size_t)(colon - auth) : alen;
    port = colon ? colon + 1 : NULL;
  }
  if (hlen == 0 || hlen >= HOST_MAX)
    return -EINVAL;
  memcpy(u->host, host, hlen);
  u->host[hlen] = '\0';
  if (port) {
    size_t plen = (size_t)(rest - port);
    if (!all_digits(port, plen) || plen > 5)
      return -EINVAL;
    memcpy(u->port, port, plen);
    u->port[plen] = '\0';
    long p = strtol(u->port, NULL, 10);
    if (p < 1 || p > 65535)
      return -EINVAL;
  } else {
    memcpy(u->port, "80", 3);
  }
  /* The Host header: the authority as written, without a default port. */
  bool v6 = auth[0] == '[', port80 = strcmp(u->port, "80") == 0;
  snprintf(u->host_header, sizeof(u->host_header), "%s%s%s%s%s", v6 ? "[" : "", u->host,
           v6 ? "]" : "", port80 ? "" : ":", port80 ? "" : u->port);
  u->path = *rest ? rest : "/";
  return 0;
}

int weft_ws_dial(weft_ws **out, int *fd_out, const char *url, const weft_ws_opts *o,
                 int64_t deadline)
{
  if (!out || !fd_out || !url)
    return -EINVAL;
  struct ws_url u;
  int r = parse_url(url, &u);
  if (r < 0)
    return r;
  /* A query alone ("ws://h?x") still asks for the root: "/?x". */
  char *rooted = NULL;
  if (u.path[0] == '?') {
    size_t n = strlen(u.path);
    if (!(rooted = weft__malloc(n + 2)))
      return -ENOMEM;
    rooted[0] = '/';
    memcpy(rooted + 1, u.path, n + 1);
  }
  int fd = weft_tcp_connect_dl(u.host, u.port, deadline);
  r = fd < 0 ? fd : weft_ws_connect_opts(out, fd, u.host_header, rooted ? rooted : u.path, o,
                                         deadline);
  free(rooted);
  if (r < 0) {
    if (fd >= 0)
      weft_close(fd);
    return r;
  }
  *fd_out = fd;
  return 0;
}
