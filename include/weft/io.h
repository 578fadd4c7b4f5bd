/* SPDX-License-Identifier: MIT */
/*
 * Reading and writing any file descriptor (pipes, files, sockets, ...).
 *
 * Inside a coroutine each call is one io_uring operation: the coroutine is
 * suspended until it completes and the shard runs other coroutines. The
 * buffers must stay valid until the call returns (they do: the call does not
 * return before the kernel is done with them, on every path - deadline and
 * cancellation included).
 *
 * Results are those of read(2)/write(2) as -errno: e.g. -EBADF. These calls
 * wait for readiness whether or not the descriptor is O_NONBLOCK (io_uring
 * polls for it, and so does the plain-thread path), so a pipe or socket never
 * gives -EAGAIN; to try without waiting, call read(2)/write(2) themselves on
 * a non-blocking descriptor. _dl variants take an absolute deadline
 * (-ETIMEDOUT when it passes; the operation is then cancelled and nothing
 * was transferred, unless it completed first, in which case its result is
 * returned). A deadline that has already passed fails the call at once,
 * before the kernel is asked, even if data is waiting. A cancelled task gets
 * -ECANCELED, with the same rule. -EBUSY, rarely: the shard's submission
 * queue stayed full because the kernel took nothing more (its completion
 * queue overflowing); nothing was done, and a later call goes through.
 * -ENOMEM, rarely, in a coroutine with a deadline (a _dl variant's, or a
 * deadline scope's): the shard's timer heap could not grow to hold the
 * timer that keeps it; nothing was done.
 *
 * On a regular file, reads and writes at the file position that are in
 * flight at once - coroutines sharing a descriptor - do not take the
 * position in turn as read(2) and write(2) do: io_uring takes it when the
 * operation is issued, so a second read issued while the first waits for
 * the disk starts at the same offset. Give each coroutine its own offsets
 * (weft_pread, weft_pwrite) or its own descriptor.
 *
 * On a plain thread these calls run the ordinary blocking system call. With
 * a deadline they wait in poll(2) and transfer with RWF_NOWAIT, so the
 * deadline holds on a pipe or socket even when another thread takes the
 * data (or the room) first; on a regular file the transfer itself may still
 * wait for the disk.
 *
 * A write to a pipe or socket whose reading end is gone is -EPIPE. In a
 * coroutine that is all (shard threads block SIGPIPE); on a plain thread
 * the system call also raises SIGPIPE on that thread, as write(2) does -
 * block or ignore it there, or send with weft_send, which never raises it
 * (net.h).
 */
#ifndef WEFT_IO_H
#define WEFT_IO_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* read(2): up to n bytes (at most 2 GiB at once) at the file position. */
WEFT_API ssize_t weft_read(int fd, void *buf, size_t n);
WEFT_API ssize_t weft_read_dl(int fd, void *buf, size_t n, int64_t deadline);

/* write(2): up to n bytes (at most 2 GiB at once); may write fewer. */
WEFT_API ssize_t weft_write(int fd, const void *buf, size_t n);
WEFT_API ssize_t weft_write_dl(int fd, const void *buf, size_t n, int64_t deadline);

/* Waits until fd is ready for `events` (POLLIN, POLLOUT, ... from <poll.h>;
 * 0 waits for an error or hang-up only). Returns the ready events (> 0; as
 * poll(2), POLLERR and POLLHUP are reported whether asked for or not, and
 * nothing else unasked - POLLRDHUP only when asked), or -EBADF (not an open
 * descriptor), -ETIMEDOUT, -ECANCELED, -EINVAL (events outside 16 bits are
 * refused rather than cut). A socket whose peer shut down its side, waited
 * for in a coroutine for what it is not ready for, is waited for in an
 * epoll instance (io_uring's poll would report the shutdown at once): then
 * also epoll_create1(2)'s -EMFILE, -ENFILE or -ENOMEM, and epoll_ctl(2)'s
 * -ENOMEM or -ENOSPC (the user's fs.epoll.max_user_watches). A file without a
 * poll method (a regular file, /dev/null) is always ready for reading and
 * writing and never for anything else: asked only for other events (or
 * none), the call waits for its deadline, as poll(2) for its timeout (in a
 * coroutine as weft_sleep waits, with its -ENOMEM too). Readiness is level: a
 * descriptor already ready returns at once - but a passed deadline or a
 * cancel fails the call first, as for every call here. Inside a coroutine it
 * is an IORING_OP_POLL_ADD (then the epoll wait or the sleep above, if
 * need be); on a plain thread, poll(2). For porting code
 * that waits for an fd it does not read through weft (a signalfd, a pidfd, a
 * library's socket). */
WEFT_API int weft_poll(int fd, unsigned events);
WEFT_API int weft_poll_dl(int fd, unsigned events, int64_t deadline);

/* An IORING_OP_NOP round trip through the ring (0), for tests and benchmarks. */
WEFT_API int weft_nop(void);

#ifdef __cplusplus
}
#endif

#endif
