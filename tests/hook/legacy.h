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
/* poll(2): its result, or -errno. */
int legacy_poll(struct pollfd *fds, nfds_t n, int timeout_ms);
/* select(2): its result, or -errno. */
int legacy_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv);
/* nanosleep(2): 0 or -errno, the remaining time in *rem. */
int legacy_nanosleep(const struct timespec *req, struct timespec *rem);
/* usleep(3): 0 or -errno. */
int legacy_usleep(unsigned us);
/* sleep(3): its result. */
unsigned legacy_sleep(unsigned s);

#endif
