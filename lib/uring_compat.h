/* SPDX-License-Identifier: MIT */
/*
 * Kernel io_uring constants newer than the liburing headers weft may be built
 * against (Debian 12 ships liburing 2.3). The running kernel is probed before
 * any of them is relied on.
 */
#ifndef WEFT_LIB_URING_COMPAT_H
#define WEFT_LIB_URING_COMPAT_H

#include <liburing.h>

/* io_uring_register(-1, IORING_REGISTER_SEND_MSG_RING, sqe, 1): send a
 * msg_ring message without a ring of one's own (kernel 6.13). */
#ifndef IORING_REGISTER_SEND_MSG_RING
#define IORING_REGISTER_SEND_MSG_RING 31
#endif

/* msg_ring: pass sqe->file_index as the target CQE's flags (kernel 6.3). */
#ifndef IORING_MSG_RING_FLAGS_PASS
#define IORING_MSG_RING_FLAGS_PASS (1U << 1)
#endif

/* IORING_OP_FTRUNCATE (kernel 6.9). */
#ifndef IORING_OP_FTRUNCATE
#define IORING_OP_FTRUNCATE 55
#endif

/* Multishot ops and flags (include/weft/uring.h refuses them in
 * weft_uring_wait): a multishot timeout (kernel 6.4), a multishot read
 * (6.7), a zero-copy receive, multishot whatever its flags (6.15), a
 * multishot uring_cmd, of either SQE size (6.18, 6.19). */
#ifndef IORING_TIMEOUT_MULTISHOT
#define IORING_TIMEOUT_MULTISHOT (1U << 6)
#endif
#ifndef IORING_OP_READ_MULTISHOT
#define IORING_OP_READ_MULTISHOT 49
#endif
#ifndef IORING_OP_RECV_ZC
#define IORING_OP_RECV_ZC 58
#endif
#ifndef IORING_OP_URING_CMD128
#define IORING_OP_URING_CMD128 64
#endif
#ifndef IORING_URING_CMD_MULTISHOT
#define IORING_URING_CMD_MULTISHOT (1U << 1)
#endif

#endif
