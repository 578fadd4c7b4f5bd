/* SPDX-License-Identifier: MIT */
/*
 * Sockets: TCP, UDP and Unix, blocking-looking.
 *
 * Inside a coroutine every call that can wait is one io_uring operation; the
 * coroutine is suspended until it completes, on every path (deadline and
 * cancellation included), so buffers and address structures only need to
 * live until the call returns. Results are the system call's as -errno.
 * (A send may also be done at once by a MSG_DONTWAIT system call when the
 * shard has nothing else to run; the result is the same.)
 *
 * Waiting: every call waits until it can make progress, whether or not the
 * socket is O_NONBLOCK (io_uring polls for readiness either way), so
 * -EAGAIN never reaches the caller - except when the caller passes
 * MSG_DONTWAIT, which makes one attempt (-EAGAIN if it would wait). The
 * plain-thread path follows the same rule. Sockets weft makes are
 * close-on-exec and not O_NONBLOCK.
 *
 * _dl variants take an absolute deadline: once it passes the operation is
 * cancelled and -ETIMEDOUT returned - unless it completed first, in which case
 * its result is returned, so no accepted connection or received byte is lost.
 * A deadline that has already passed fails the call at once, before the
 * kernel is asked (to try without waiting, pass MSG_DONTWAIT, or call
 * recv(2)/send(2) themselves on a non-blocking socket). A cancelled task gets
 * -ECANCELED by the same rule. -EBUSY, rarely, as in weft/io.h: the shard's
 * submission queue stayed full; nothing was done. -ENOMEM, rarely, also as
 * there: no room in the shard's timer heap for a deadline's timer.
 *
 * Sending never raises SIGPIPE: weft_send, weft_sendto, weft_sendmsg and
 * weft_send_all add MSG_NOSIGNAL, and a peer that went away gives -EPIPE or
 * -ECONNRESET.
 *
 * On a plain thread the calls run the ordinary system call, with poll(2) for
 * the deadline: transfers then use MSG_DONTWAIT and wait in poll(2), connect
 * makes the socket O_NONBLOCK for the call (a Unix-domain one is bounded by
 * SO_SNDTIMEO instead, see weft_connect). accept with a deadline, which
 * poll(2) cannot keep on a blocking listener (another thread may take the
 * connection between the poll and the accept), is an io_uring op on a small
 * ring of the thread's own - one descriptor per such thread, made on its
 * first such call and closed when it exits - cancelled at the deadline.
 * Only where the thread cannot have a ring (io_uring refused) does it poll
 * and then call accept4(2), and can then wait past its deadline.
 */
#ifndef WEFT_NET_H
#define WEFT_NET_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the system calls ------------------------------------------------------ */

/* socket(2), always with SOCK_CLOEXEC added. It never waits, so it works in
 * a cancelled task and past a deadline scope's end as well. */
WEFT_API int weft_socket(int domain, int type, int protocol);
WEFT_API int weft_bind(int fd, const struct sockaddr *addr, socklen_t len);
WEFT_API int weft_listen(int fd, int backlog);

/* accept4(2): the new descriptor (SOCK_CLOEXEC always added to flags).
 * addr without len (-EFAULT) and a *len above INT_MAX (-EINVAL) are refused
 * before a connection is taken: accept4(2) would take it, fail to store its
 * address and close it. */
WEFT_API int weft_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags);
WEFT_API int weft_accept_dl(int fd, struct sockaddr *addr, socklen_t *len, int flags,
                            int64_t deadline);

/* connect(2): 0 once connected (-ECONNREFUSED, -ETIMEDOUT, ...). After a
 * failure (deadline included) the socket must be closed, as with connect(2).
 * A Unix-domain connect whose listener's backlog is full waits for room
 * (bounded by the deadline: on a plain thread through SO_SNDTIMEO, set for
 * the call); one exception to "never -EAGAIN" remains: an O_NONBLOCK
 * Unix-domain socket gets -EAGAIN then - the kernel offers nothing to poll
 * for room in a backlog. */
WEFT_API int weft_connect(int fd, const struct sockaddr *addr, socklen_t len);
WEFT_API int weft_connect_dl(int fd, const struct sockaddr *addr, socklen_t len, int64_t deadline);

/* recv(2) / send(2): up to n bytes (send may move fewer). 0 from recv = the
 * peer closed its side. At most about 2 GiB per call (io_uring's 32-bit
 * length): larger n are clamped. */
WEFT_API ssize_t weft_recv(int fd, void *buf, size_t n, int flags);
WEFT_API ssize_t weft_recv_dl(int fd, void *buf, size_t n, int flags, int64_t deadline);
WEFT_API ssize_t weft_send(int fd, const void *buf, size_t n, int flags);
WEFT_API ssize_t weft_send_dl(int fd, const void *buf, size_t n, int flags, int64_t deadline);

/* Exactly n bytes, across short transfers. Returns n; recv_exact returns 0
 * if the peer closed before the first byte and -EPIPE if it closed part-way.
 * On failure the bytes moved so far are stored in *done (if not NULL; it is
 * set on success too) - exactly, deadline and cancellation included. The
 * deadline covers the whole call. -EINVAL if n > SSIZE_MAX. */
WEFT_API ssize_t weft_recv_exact(int fd, void *buf, size_t n, size_t *done);
WEFT_API ssize_t weft_recv_exact_dl(int fd, void *buf, size_t n, size_t *done, int64_t deadline);
WEFT_API ssize_t weft_send_all(int fd, const void *buf, size_t n, size_t *done);
WEFT_API ssize_t weft_send_all_dl(int fd, const void *buf, size_t n, size_t *done,
                                  int64_t deadline);

/* recvmsg(2) / sendmsg(2); msg NULL is -EFAULT. Descriptors received with
 * SCM_RIGHTS are close-on-exec (MSG_CMSG_CLOEXEC is added). */
WEFT_API ssize_t weft_recvmsg(int fd, struct msghdr *msg, int flags);
WEFT_API ssize_t weft_recvmsg_dl(int fd, struct msghdr *msg, int flags, int64_t deadline);
WEFT_API ssize_t weft_sendmsg(int fd, const struct msghdr *msg, int flags);
WEFT_API ssize_t weft_sendmsg_dl(int fd, const struct msghdr *msg, int flags, int64_t deadline);

/* recvfrom(2) / sendto(2) (recvmsg/sendmsg underneath). addr without len
 * is -EFAULT before anything is received; *len becomes the sender's address
 * length, as with recvfrom(2). */
WEFT_API ssize_t weft_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
                               socklen_t *len);
WEFT_API ssize_t weft_recvfrom_dl(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
                                  socklen_t *len, int64_t deadline);
WEFT_API ssize_t weft_sendto(int fd, const void *buf, size_t n, int flags,
                             const struct sockaddr *addr, socklen_t len);
WEFT_API ssize_t weft_sendto_dl(int fd, const void *buf, size_t n, int flags,
                                const struct sockaddr *addr, socklen_t len, int64_t deadline);

/* shutdown(2) is an io_uring op; the rest never wait and are the system
 * calls themselves. */
WEFT_API int weft_shutdown(int fd, int how);
WEFT_API int weft_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
WEFT_API int weft_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
WEFT_API int weft_getpeername(int fd, struct sockaddr *addr, socklen_t *len);
WEFT_API int weft_getsockname(int fd, struct sockaddr *addr, socklen_t *len);

/* ---- convenience -------------------------------------------------------------- */

/* Flags for weft_tcp_listen_opts(). */
#define WEFT_TCP_REUSEPORT 0x1u /* SO_REUSEPORT: several listeners on one port */
#define WEFT_TCP_V6ONLY 0x2u    /* IPV6_V6ONLY on an IPv6 wildcard listener */

/* A listening TCP socket on host:port (SO_REUSEADDR). host NULL or "" = every
 * address (IPv6 wildcard taking IPv4 too where the system has IPv6, else
 * 0.0.0.0; with WEFT_TCP_V6ONLY only the IPv6 wildcard); port "0" = any free
 * port (see weft_getsockname), NULL and "" = "0". The host's next address is tried
 * only when one cannot be had on this system (-EAFNOSUPPORT,
 * -EADDRNOTAVAIL); another failure (-EADDRINUSE, -EACCES) is the result.
 * Names are resolved on the blocking pool (numeric hosts and ports are
 * parsed directly), so in a cancelled task or a passed deadline scope a
 * name gives -ECANCELED / -ETIMEDOUT while a numeric host and port, which
 * need no wait, still work. Returns the descriptor, or -errno; name resolution
 * failures map to -ENOENT (no such host or address family), -EAGAIN (the
 * name server did not answer: try again later), -ENOMEM, the system
 * error for EAI_SYSTEM, and -EINVAL for the rest (an unknown service name,
 * say). A numeric port above 65535 and unknown flags: -EINVAL. */
WEFT_API int weft_tcp_listen(const char *host, const char *port, int backlog);
WEFT_API int weft_tcp_listen_opts(const char *host, const char *port, int backlog, unsigned flags);

/* A connected TCP socket: resolves host (on the blocking pool; NULL or ""
 * is the loopback address, getaddrinfo's rule) and tries every address in
 * turn until one connects, within the deadline (which covers the
 * resolution and every attempt). Port NULL is "0". Returns the descriptor
 * or the last address's error (-ECONNREFUSED, -ETIMEDOUT, ...); a cancel
 * or the deadline (the call's or its scope's) ends the tries at once,
 * with -ECANCELED / -ETIMEDOUT, and no socket is made for an address
 * that cannot be tried. No socket
 * options are set (TCP_NODELAY is the caller's choice). */
WEFT_API int weft_tcp_connect(const char *host, const char *port);
WEFT_API int weft_tcp_connect_dl(const char *host, const char *port, int64_t deadline);

/* Unix sockets. type is SOCK_STREAM, SOCK_SEQPACKET or SOCK_DGRAM. A path
 * starting with '@' names the abstract namespace. weft_unix_listen replaces a
 * stale socket file at path - a socket file nobody is bound to any more
 * (connecting to it is refused) - and never removes anything else: a live
 * socket or any other kind of file gives -EADDRINUSE. "Refused" is the
 * test, so a stream socket bound there and not listening yet (another
 * server between its bind and its listen) looks stale too: two servers
 * starting at the same path at once need a lock of their own. SOCK_DGRAM sockets are
 * bound but not listening (backlog ignored). Errors: -EINVAL (type),
 * -EFAULT (NULL path), -ENOENT (empty path), -ENAMETOOLONG. */
WEFT_API int weft_unix_listen(const char *path, int type, int backlog);
WEFT_API int weft_unix_connect(const char *path, int type);
WEFT_API int weft_unix_connect_dl(const char *path, int type, int64_t deadline);

/* A UDP socket bound to host:port (host NULL = every address), with the
 * address and port rules of weft_tcp_listen. */
WEFT_API int weft_udp_bind(const char *host, const char *port);

/* ---- multishot accept -------------------------------------------------------- */

/* A listener that keeps one multishot accept armed on the shard of the task
 * that opened it (that task stays on its shard until the listener is
 * closed), so a busy listener gets connections without one submission per
 * accept. Where the kernel lacks multishot accept it accepts one at a time,
 * with the same results. Accepted from by one task at a time, on that shard;
 * closed from anywhere.
 *
 * Connections are accepted as they come and queued in the listener (up to
 * 1024; then it stops accepting until the queue is drained, leaving the rest
 * in the kernel's backlog). The stop is made as accepted connections are
 * seen, so what the kernel accepted in one burst before it - many
 * connections arriving at once, up to the shard's completion queue - is
 * queued as well. Close it when done; a listener still open when
 * every task has returned (at weft_run's end or in weft_runtime_stop) has
 * its accept cancelled, the connections it queued closed, and is freed. */
typedef struct weft_listener weft_listener;

/* Opens a listener on a listening socket fd (not taken over: the caller
 * still closes it, after weft_listener_close). flags as for accept4
 * (SOCK_NONBLOCK, SOCK_CLOEXEC; SOCK_CLOEXEC is always added).
 * Returns 0, -EINVAL (NULL l, unknown flags, fd not listening), -EBADF,
 * -ENOTSOCK, -ENOMEM, -EPERM (not in a coroutine), -ECANCELED (the task is
 * cancelled), -ETIMEDOUT (its deadline scope has passed), -EBUSY (the
 * shard's submission queue stayed full). On failure *l is not written and
 * fd is left as it was. */
WEFT_API int weft_listener_open(weft_listener **l, int fd, int flags);

/* The next connection: its descriptor, or -errno (an accept error such as
 * -EMFILE is returned once, and the listener keeps going: the next call
 * accepts again). -ETIMEDOUT / -ECANCELED end the wait, not the listener;
 * a connection already queued is handed out even when the deadline has
 * passed or the task is cancelled (unlike weft_accept_dl, whose connection
 * would still be in the kernel's backlog), so that it is not left behind.
 * -EINVAL for NULL or when called on another shard, or when the socket was
 * shut down for reading (SHUT_RD; a Unix-domain one as well, which still
 * listens but accepts no more), -EPERM on a plain thread, -ENOMEM if a
 * connection had to be dropped for want of memory, -EBUSY at once if another task is in weft_listener_accept on l (waiting,
 * or woken and not returned yet): one caller at a time, the other's wait
 * goes on unharmed.
 * -EBADF: weft_listener_close(l) has begun - from any task or thread,
 * while this call waited or before it began; l is gone (or about to go)
 * and must not be used again. Connections still queued then are closed by
 * the close, never handed out. (A call after the close returned is a use
 * of freed memory, like a use of a closed FILE *.)
 * While it waits here a task stays on the listener's shard, stealable or
 * not, so it returns on the shard it called from.
 * (The kernel reads RLIMIT_NOFILE when the accept is armed; a raised limit
 * is picked up by re-arming, which a -EMFILE triggers.) */
WEFT_API int weft_listener_accept(weft_listener *l, int64_t deadline);

/* Cancels the multishot accept, waits for its last completion (even in a
 * cancelled task), closes the connections accepted but not handed out, and
 * frees l; the listening socket may be closed once it returns. From any
 * coroutine or plain thread: off the listener's shard a task pinned there
 * does the work while the caller waits (its cancellation does not end that
 * wait). A task waiting in weft_listener_accept on l meanwhile is woken
 * with -EBADF, and close returns only after that call has returned (it
 * touches l no more); so does an accept begun while close waits. Not
 * after the runtime ended (l was freed with it). If no task can be started
 * for it - no memory, or the runtime is stopping - l stays open until the
 * runtime's end closes it, as a listener nobody closed (a wait in its
 * accept goes on until then, or until the stop cancels it). NULL is a
 * no-op. */
WEFT_API void weft_listener_close(weft_listener *l);

#ifdef __cplusplus
}
#endif

#endif
