/* SPDX-License-Identifier: MIT */
/*
 * Plain blocking sockets for the protocol checks and the fuzzer: they talk to
 * the example servers the way an independent client would, without weft.
 */
#ifndef WEFT_TESTS_WIRE_H
#define WEFT_TESTS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A TCP connection to 127.0.0.1:port with send and receive timeouts of
 * timeout_ms; -1 (with a message) on failure. */
int wire_connect(const char *port, int timeout_ms);

/* Sends all n bytes (MSG_NOSIGNAL): 0, or -1 on an error (peer gone). */
int wire_send(int fd, const void *p, size_t n);

/* Reads until end of file or until cap bytes are held. Returns the bytes
 * read; *timed_out is set when the receive timeout ended it instead (the
 * server neither answered nor closed). A reset counts as end of file. */
size_t wire_read_all(int fd, char *buf, size_t cap, bool *timed_out);

/* Connects, sends req, shuts down the sending side (so that the server sees
 * end of file after the request) unless keep_open, and reads everything
 * until the server closes. Returns the bytes read, or -1 on a connect
 * failure or a timeout (with a message). */
ssize_t wire_exchange(const char *port, const void *req, size_t n, char *buf, size_t cap,
                      bool keep_open);

#endif
