/* SPDX-License-Identifier: MIT */
/*
 * Suite "websocket", part 3: weft_ws_dial. A weft server on loopback, over
 * IPv4, IPv6 and a name, sees the Host header and request target the URL
 * gives; URLs that are not ws:// ones are refused before any connection;
 * a refused connection or handshake leaves no descriptor open.
 */
#include "net_test.h"
#include "ws_test.h"

#define DEADLINE() (weft_now() + 5 * WEFT_SEC)

/* What the server saw of one request. */
struct seen {
  char host[64], path[64];
  int status; /* what the check answers */
};

static int record(weft_ws *ws, void *arg)
{
  struct seen *s = arg;
  const char *host = weft_ws_header(ws, "Host");
  snprintf(s->host, sizeof(s->host), "%s", host ? host : "(none)");
  snprintf(s->path, sizeof(s->path), "%s", weft_ws_path(ws));
  return s->status;
}

struct server {
  int lfd;
  struct seen seen;
  int r;
};

/* Accepts one connection on lfd and runs its handshake with the check. */
static void *serve_one(void *arg)
{
  struct server *s = arg;
  int fd = weft_accept_dl(s->lfd, NULL, NULL, 0, DEADLINE());
  CO_CHECK(fd >= 0);
  if (fd < 0)
    return NULL;
  static const char *const protocols[] = {"p1", NULL};
  weft_ws_opts o = {.protocols = protocols, .check = record, .check_arg = &s->seen};
  weft_ws *ws = NULL;
  s->r = weft_ws_accept_opts(&ws, fd, &o, DEADLINE());
  if (s->r == 0) {
    char buf[8];
    int type;
    /* Until the client's close. */
    while (weft_ws_recv(ws, buf, sizeof(buf), &type, DEADLINE()) >= 0 && type != WEFT_WS_CLOSE)
      ;
    weft_ws_free(ws);
  }
  weft_close(fd);
  return NULL;
}

/* Dials `url` (with `port` put in at %d) against a server on lfd; checks
 * the Host header and target it saw. */
static void dial_ok(int lfd, const char *fmt, int port, const char *host, const char *path)
{
  char url[128], want_host[64];
  snprintf(url, sizeof(url), fmt, port);
  snprintf(want_host, sizeof(want_host), host, port);
  struct server s = {.lfd = lfd, .r = 1};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, weft_shard_id(), serve_one, &s), 0);
  static const char *const offer[] = {"p0", "p1", NULL};
  weft_ws_opts o = {.protocols = offer};
  weft_ws *ws = NULL;
  int fd = -1;
  int r = weft_ws_dial(&ws, &fd, url, &o, DEADLINE());
  if (r != 0)
    rt_fail(__FILE__, __LINE__, "dial %s: %d", url, r);
  if (r == 0) {
    CO_CHECK(fd >= 0);
    CO_CHECK(strcmp(weft_ws_protocol(ws), "p1") == 0);
    CO_EQ(weft_ws_close(ws, 1000, NULL, DEADLINE()), 0);
    weft_ws_free(ws);
    weft_close(fd);
  }
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(s.r, 0);
  if (strcmp(s.seen.host, want_host) != 0 || strcmp(s.seen.path, path) != 0)
    rt_fail(__FILE__, __LINE__, "%s: Host '%s', target '%s'", url, s.seen.host, s.seen.path);
}

static void *dial_main(void *arg)
{
  (void)arg;
  int fds = count_fds();
  int l4 = weft_tcp_listen("127.0.0.1", "0", 16);
  CO_CHECK(l4 >= 0);
  int p4 = port_of(l4);
  dial_ok(l4, "ws://127.0.0.1:%d/chat?room=1", p4, "127.0.0.1:%d", "/chat?room=1");
  dial_ok(l4, "WS://127.0.0.1:%d", p4, "127.0.0.1:%d", "/");
  dial_ok(l4, "ws://127.0.0.1:%d?x=1", p4, "127.0.0.1:%d", "/?x=1");
  dial_ok(l4, "ws://localhost:%d/by-name", p4, "localhost:%d", "/by-name");
  /* Port 80 (when this process may bind it): the default, so the Host
   * header carries no port. */
  int l80 = weft_tcp_listen("127.0.0.1", "80", 16);
  if (l80 >= 0) {
    dial_ok(l80, "ws://127.0.0.1/eighty", 0, "127.0.0.1", "/eighty");
    dial_ok(l80, "ws://127.0.0.1:80/", 0, "127.0.0.1", "/");
    weft_close(l80);
  }
  int l6 = weft_tcp_listen("::1", "0", 16);
  if (l6 >= 0) { /* a loopback with IPv6 */
    dial_ok(l6, "ws://[::1]:%d/six", port_of(l6), "[::1]:%d", "/six");
    weft_close(l6);
  }

  /* A check that refuses: -EPROTO for the client, and its socket closed. */
  struct server s = {.lfd = l4, .r = 1, .seen = {.status = 403}};
  weft_task *t;
  CO_EQ(io_spawn_on(&t, weft_shard_id(), serve_one, &s), 0);
  char url[64];
  snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", p4);
  weft_ws *ws = NULL;
  int fd = -1;
  CO_EQ(weft_ws_dial(&ws, &fd, url, NULL, DEADLINE()), -EPROTO);
  CO_EQ(weft_join(t, NULL), 0);
  CO_EQ(s.r, -ECONNREFUSED);
  CO_CHECK(ws == NULL && fd == -1);

  /* Nobody listening: the connection's error, nothing left open. */
  int port = port_of(l4);
  weft_close(l4);
  snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", port);
  CO_EQ(weft_ws_dial(&ws, &fd, url, NULL, DEADLINE()), -ECONNREFUSED);
  CO_EQ(count_fds(), fds);
  return NULL;
}

Test(websocket, dial_connects_with_the_urls_host_and_target, .timeout = 30)
{
  rt_run(2, dial_main, NULL);
  rt_assert_clean();
}

static void *bad_urls_main(void *arg)
{
  (void)arg;
  static const struct {
    const char *url;
    int err;
  } bad[] = {
      {"wss://example.com/", -EPROTONOSUPPORT},
      {"WSS://example.com/", -EPROTONOSUPPORT},
      {"http://example.com/", -EINVAL},
      {"ws:/example.com", -EINVAL},
      {"ws://", -EINVAL},
      {"ws:///path", -EINVAL},
      {"ws://:80/", -EINVAL},
      {"ws://user@example.com/", -EINVAL},
      {"ws://example.com/#frag", -EINVAL},
      {"ws://example.com:0/", -EINVAL},
      {"ws://example.com:65536/", -EINVAL},
      {"ws://example.com:8a/", -EINVAL},
      {"ws://example.com:/", -EINVAL},
      {"ws://example.com:123456/", -EINVAL},
      {"ws://[::1/", -EINVAL},
      {"ws://[::1]x/", -EINVAL},
      {"ws://[]:80/", -EINVAL},
      {"ws://exa mple.com/", -EINVAL},
      {"ws://example.com/a b", -EINVAL},
      {"ws://[127.0.0.1]:80/", -EINVAL},  /* brackets hold IPv6 only */
      {"ws://example.com/a\x01b", -EINVAL}, /* a control character */
      {"ws://example.com/a\x7f", -EINVAL},
  };
  int fds = count_fds();
  uint64_t jobs = pool_jobs();
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_ws *ws = NULL;
    int fd = -1;
    int r = weft_ws_dial(&ws, &fd, bad[i].url, NULL, DEADLINE());
    if (r != bad[i].err)
      rt_fail(__FILE__, __LINE__, "%s: %d, expected %d", bad[i].url, r, bad[i].err);
    CO_CHECK(ws == NULL && fd == -1);
  }
  weft_ws *ws = NULL;
  int fd = -1;
  CO_EQ(weft_ws_dial(NULL, &fd, "ws://h/", NULL, DEADLINE()), -EINVAL);
  CO_EQ(weft_ws_dial(&ws, NULL, "ws://h/", NULL, DEADLINE()), -EINVAL);
  CO_EQ(weft_ws_dial(&ws, &fd, NULL, NULL, DEADLINE()), -EINVAL);
  /* Refused before anything was resolved or opened. */
  CO_EQ(pool_jobs(), jobs);
  CO_EQ(count_fds(), fds);
  return NULL;
}

Test(websocket, dial_refuses_what_is_not_a_ws_url, .timeout = 30)
{
  rt_run(1, bad_urls_main, NULL);
  rt_assert_clean();
}
