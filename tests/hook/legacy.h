/* SPDX-License-Identifier: MIT */
/*
 * "Legacy" blocking code for the hook suite: written against POSIX only, as
 * code ported to weft is, and compiled without weft's headers. Each function
 * returns -errno on failure, read right after the failing call.
 */
#ifndef WEFT_TESTS_LEGACY_H
#define WEFT_TESTS_LEGACY_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* read(2) of one byte: the byte, 256 at EOF, or -errno. */
int legacy_read_byte(int fd);
/* write(2) of one byte: 1 or -errno. */
int legacy_write_byte(int fd, char c);
/* readv(2) into two halves of buf: bytes or -errno. */
ssize_t legacy_readv(int fd, char *buf, size_t n);
/* Echoes with read/write until EOF; bytes echoed or -errno. */
ssize_t legacy_echo(int fd);
/* Echoes with recv/send until EOF; bytes echoed or -errno. */
ssize_t legacy_echo_socket(int fd);
/* accept(2) or, if flags is not -1, accept4(2): the new fd or -errno. */
int legacy_accept(int lfd, int flags);
/* A TCP client to 127.0.0.1:port: connect, sendto the message, shutdown the
 * writing side, recvfrom the reply until EOF into reply[cap]; its length or
 * -errno. */
ssize_t legacy_client(uint16_t port, const char *msg, char *reply, size_t cap);
/* write(2), send(2) (flags 0), writev(2) (two halves), sendto(2) (no
 * address) and sendmsg(2) (two halves, and descriptor pass_fd with
 * SCM_RIGHTS) of buf[n]: the result of the one call, or -errno. */
ssize_t legacy_write(int fd, const char *buf, size_t n);
ssize_t legacy_send(int fd, const char *buf, size_t n);
ssize_t legacy_writev(int fd, const char *buf, size_t n);
ssize_t legacy_sendto(int fd, const char *buf, size_t n);
/* sendto(2) with MSG_FASTOPEN of buf[n] to addr (the socket unconnected). */
ssize_t legacy_sendto_fastopen(int fd, const char *buf, size_t n, const struct sockaddr *addr,
                               socklen_t len);
ssize_t legacy_sendmsg_fd(int fd, const char *buf, size_t n, int pass_fd);
/* recvmsg(2) of one byte and one descriptor (SCM_RIGHTS) with flags: the
 * descriptor, or -errno (-ENOMSG if none came). */
int legacy_recv_fd(int sock, int flags);
/* poll(2): its result, or -errno. */
int legacy_poll(struct pollfd *fds, nfds_t n, int timeout_ms);
/* select(2): its result, or -errno. */
int legacy_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv);
/* ppoll(2) and pselect(2) without a signal mask: the result, or -errno. */
int legacy_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts);
int legacy_pselect(int nfds, fd_set *rd, const struct timespec *ts);
/* epoll_wait(2), or epoll_pwait(2) with no mask when `pwait`: the number of
 * events (the first one's data in *data), or -errno. */
int legacy_epoll_wait(int ep, int timeout_ms, int pwait, uint64_t *data);
/* getaddrinfo(3) of host:port for IPv4 TCP: 0 with the first address's
 * dotted form in buf, the EAI_ code, or with EAI_SYSTEM -errno in *err. */
int legacy_resolve(const char *host, const char *port, int flags, char *buf, size_t cap,
                   int *err);
/* getnameinfo(3) of 127.0.0.1:port with flags: 0 or the EAI_ code. */
int legacy_name_of(uint16_t port, int flags, char *host, size_t hcap, char *serv, size_t scap);
/* nanosleep(2): 0 or -errno, the remaining time in *rem. */
int legacy_nanosleep(const struct timespec *req, struct timespec *rem);
/* usleep(3): 0 or -errno. */
int legacy_usleep(unsigned us);
/* sleep(3): its result. */
unsigned legacy_sleep(unsigned s);

#endif
