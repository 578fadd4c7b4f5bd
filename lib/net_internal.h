/* SPDX-License-Identifier: MIT */
/*
 * Shared by net.c (the system calls), net_addr.c (names and addresses) and
 * listener.c (multishot accept), plus the test hooks of the socket layer.
 */
#ifndef WEFT_LIB_NET_INTERNAL_H
#define WEFT_LIB_NET_INTERNAL_H

#include "op.h"

#include "weft/net.h"

#include <netdb.h>
#include <stdatomic.h>

/* Test hook: io_uring features to treat as missing from the kernel, so the
 * fallbacks run on a kernel that has everything. */
#define WEFT__NET_NO_SOCKET_OP 0x1u /* IORING_OP_SOCKET (5.19): socket(2) */
#define WEFT__NET_NO_MULTISHOT 0x2u /* multishot accept (5.19): one at a time */
extern atomic_uint weft__net_refused;

/* Test hook: sends try a MSG_DONTWAIT system call first when the shard is
 * otherwise idle (default on; off = always the io_uring op). */
extern atomic_bool weft__net_nowait;

/* Test hook: the accepts listener l has made one at a time with
 * weft_accept_dl - its fallback where the kernel has no multishot accept -
 * so far. On l's shard, before it is closed. */
uint64_t weft__listener_oneshot_accepts(const weft_listener *l);

/* Test hook: what listener l is doing now (WEFT__LST_* bits), so that a
 * test on l's shard can tell with a poll, not a sleep, that a task waits in
 * weft_listener_accept or that a close has begun. On l's shard, before
 * weft_listener_close has returned. */
#define WEFT__LST_ACCEPT_WAITS 0x1u /* a task is suspended in weft_listener_accept */
#define WEFT__LST_CLOSING 0x2u      /* weft_listener_close has begun */
#define WEFT__LST_ARMED 0x4u        /* the accept op is in flight */
unsigned weft__listener_state(const weft_listener *l);

/* Tries the addresses of `ai` in order (weft_tcp_connect_dl after name
 * resolution): the first connected socket, or the last address's error.
 * Exposed so that the tests can give it several addresses. */
int weft__net_connect_list(const struct addrinfo *ai, int64_t deadline);

#endif
