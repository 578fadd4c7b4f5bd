/* SPDX-License-Identifier: MIT */
/* See legacy.h: blocking code that knows nothing of weft. */
#include "legacy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int legacy_read_byte(int fd)
{
  unsigned char c;
  ssize_t n = read(fd, &c, 1);
  if (n < 0)
    return -errno;
  return n == 0 ? 256 : c;
}

int legacy_write_byte(int fd, char c)
{
  return write(fd, &c, 1) < 0 ? -errno : 1;
}

ssize_t legacy_readv(int fd, char *buf, size_t n)
{
  struct iovec iov[2] = {{buf, n / 2}, {buf + n / 2, n - n / 2}};
  ssize_t r = readv(fd, iov, 2);
  return r < 0 ? -errno : r;
}

ssize_t legacy_echo(int fd)
{
  char buf[512];
  ssize_t total = 0, n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) {
    struct iovec iov = {buf, (size_t)n};
    if (writev(fd, &iov, 1) != n)
      return -errno;
    total += n;
  }
  return n < 0 ? -errno : total;
}

ssize_t legacy_echo_socket(int fd)
{
  char buf[512];
  ssize_t total = 0, n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    if (send(fd, buf, (size_t)n, 0) != n)
      return -errno;
    total += n;
  }
  return n < 0 ? -errno : total;
}

int legacy_accept(int lfd, int flags)
{
  struct sockaddr_in peer;
  socklen_t len = sizeof(peer);
  int fd = flags == -1 ? accept(lfd, (struct sockaddr *)&peer, &len)
                       : accept4(lfd, (struct sockaddr *)&peer, &len, flags);
  if (fd < 0)
    return -errno;
  if (len != sizeof(peer) || peer.sin_family != AF_INET) {
    close(fd);
    return -EPROTO;
  }
  return fd;
}

ssize_t legacy_client(uint16_t port, const char *msg, char *reply, size_t cap)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -errno;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ssize_t r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
  size_t len = strlen(msg), got = 0;
  if (r == 0 && (r = sendto(fd, msg, len, 0, NULL, 0)) == (ssize_t)len && shutdown(fd, SHUT_WR) == 0) {
    while (got < cap && (r = recvfrom(fd, reply + got, cap - got, 0, NULL, NULL)) > 0)
      got += (size_t)r;
  }
  int e = errno;
  close(fd);
  return r < 0 ? -e : (ssize_t)got;
}

int legacy_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
  int r = poll(fds, n, timeout_ms);
  return r < 0 ? -errno : r;
}

int legacy_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
  int r = select(nfds, rd, wr, ex, tv);
  return r < 0 ? -errno : r;
}

int legacy_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts)
{
  int r = ppoll(fds, n, ts, NULL);
  return r < 0 ? -errno : r;
}

int legacy_pselect(int nfds, fd_set *rd, const struct timespec *ts)
{
  int r = pselect(nfds, rd, NULL, NULL, ts, NULL);
  return r < 0 ? -errno : r;
}

int legacy_epoll_wait(int ep, int timeout_ms, int pwait, uint64_t *data)
{
  struct epoll_event ev[4];
  int r = pwait ? epoll_pwait(ep, ev, 4, timeout_ms, NULL) : epoll_wait(ep, ev, 4, timeout_ms);
  if (r < 0)
    return -errno;
  if (r > 0)
    *data = ev[0].data.u64;
  return r;
}

int legacy_resolve(const char *host, const char *port, int flags, char *buf, size_t cap,
                   int *err)
{
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  int r = getaddrinfo(host, port, &hints, &res);
  if (r == EAI_SYSTEM)
    *err = -errno;
  if (r != 0)
    return r;
  inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr, buf, (socklen_t)cap);
  freeaddrinfo(res);
  return 0;
}

int legacy_name_of(uint16_t port, int flags, char *host, size_t hcap, char *serv, size_t scap)
{
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return getnameinfo((struct sockaddr *)&sa, sizeof(sa), host, (socklen_t)hcap, serv,
                     (socklen_t)scap, flags);
}

int legacy_nanosleep(const struct timespec *req, struct timespec *rem)
{
  return nanosleep(req, rem) < 0 ? -errno : 0;
}

int legacy_usleep(unsigned us)
{
  return usleep(us) < 0 ? -errno : 0;
}

unsigned legacy_sleep(unsigned s)
{
  return sleep(s);
}

ssize_t legacy_write(int fd, const char *buf, size_t n)
{
  ssize_t r = write(fd, buf, n);
  return r < 0 ? -errno : r;
}

ssize_t legacy_send(int fd, const char *buf, size_t n)
{
  ssize_t r = send(fd, buf, n, 0);
  return r < 0 ? -errno : r;
}

ssize_t legacy_writev(int fd, const char *buf, size_t n)
{
  struct iovec iov[2] = {{(void *)buf, n / 2}, {(void *)(buf + n / 2), n - n / 2}};
  ssize_t r = writev(fd, iov, 2);
  return r < 0 ? -errno : r;
}

ssize_t legacy_sendto(int fd, const char *buf, size_t n)
{
  ssize_t r = sendto(fd, buf, n, 0, NULL, 0);
  return r < 0 ? -errno : r;
}

ssize_t legacy_sendto_fastopen(int fd, const char *buf, size_t n, const struct sockaddr *addr,
                               socklen_t len)
{
  ssize_t r = sendto(fd, buf, n, MSG_FASTOPEN, addr, len);
  return r < 0 ? -errno : r;
}

ssize_t legacy_sendmsg_fd(int fd, const char *buf, size_t n, int pass_fd)
{
  struct iovec iov[2] = {{(void *)buf, n / 2}, {(void *)(buf + n / 2), n - n / 2}};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2, .msg_control = ctl.buf,
                       .msg_controllen = sizeof(ctl.buf)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  ssize_t r = sendmsg(fd, &msg, 0);
  return r < 0 ? -errno : r;
}

int legacy_recv_fd(int sock, int flags)
{
  char byte;
  struct iovec iov = {&byte, 1};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                     .msg_controllen = sizeof(u.buf)};
  if (recvmsg(sock, &m, flags) < 0)
    return -errno;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
    return -ENOMSG;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(fd));
  return fd;
}

