/* SPDX-License-Identifier: MIT */
/*
 * Raw messages between shards: (tag, value) pairs addressed to a shard.
 *
 * A message is a 16-bit tag and a 32-bit value; the receiver also learns who
 * sent it (the sending shard's id, or WEFT_MSG_EXTERNAL for a plain thread or
 * a shard of another runtime). Messages are addressed to a *shard*, and taken
 * by coroutines running on that shard (pin receivers with WEFT_PLACE_PINNED:
 * a stealable coroutine receives the messages of whichever shard it runs on).
 *
 * Four ways to send:
 *
 *   direct    weft_msg_send(): one IORING_OP_MSG_RING per message; the value
 *             travels inside the target's completion, no shared memory.
 *   batched   weft_msg_send_many(): messages are appended to a bounded
 *             single-producer lane from the sending shard to the target, and
 *             one "doorbell" msg_ring is sent when the lane had no doorbell
 *             outstanding (coalesced: a burst of batches costs one). A full
 *             lane refuses what does not fit (-EAGAIN); nothing is dropped.
 *   ticketed  weft_msg_send_wait(): a direct message whose call returns once
 *             the kernel has posted it to the target's ring.
 *   counters  weft_counter_add(): adds to a per-(shard, tag) 64-bit sum; only
 *             the add that makes it non-zero rings the target. The target's
 *             weft_counter_take() returns the sum and zeroes it.
 *
 * Order: messages from one sender to one target arrive in the order sent
 * within each way of sending - direct (ticketed included) in send order, a
 * lane in append order - but there is no order between the two ways. One
 * exception: a direct message from a coroutine that the kernel refuses to
 * post (it has no memory for it; counted in weft_stats.msg_failed) is sent
 * again when the refusal is reaped, so it arrives after the messages sent
 * meanwhile. It is never lost: with no SQE and no memory to queue it again,
 * it is posted at once, and were the kernel to refuse that too, the process
 * aborts with a message rather than lose it.
 *
 * Receiving: each shard has two receive queues, the normal one
 * (weft_msg_recv) and the hot one (weft_msg_recv_hot) for the tags marked
 * with weft_msg_hot_tag(), so that urgent traffic is not stuck behind bulk.
 * Batched messages are taken into a receive queue only while it holds fewer
 * than weft_config.msg_queue_limit; the rest wait in their lanes, which fill
 * up and refuse their senders (-EAGAIN) until receivers make room - a slow
 * receiver pushes back on its senders instead of costing memory without
 * bound (counted in weft_stats.msg_queue_full). A queue that cannot grow for
 * want of memory pushes back the same way, below the limit. Direct senders
 * are refused (-EAGAIN) from the moment the queue their tag goes to reaches
 * the limit until its receivers have taken it down to half. A direct message
 * already on its way when that happens - queued in a sending shard's ring,
 * or posted and not yet collected - is a completion the kernel has posted:
 * it is still queued, so the limit can be passed by that much, and if memory
 * runs out while one has to be stored, the process aborts with a message
 * rather than lose it.
 *
 * When sends happen: a coroutine's direct messages are queued as SQEs on
 * its shard's ring and submitted together when it next suspends or yields
 * (or its SQ fills up, or it calls weft_msg_flush): a coroutine that sends
 * and then spins without ever suspending delays them. One that finds the SQ
 * full even after a submit (the kernel taking nothing more for the moment)
 * waits in the shard's backlog, with the later ones to the same target,
 * and is sent from there as room comes; a flush waits for them too, and so
 * does a ticketed send to that target (it goes behind them).
 * Doorbells (a lane's or
 * a counter's) are submitted at once, so the target drains a lane while the
 * sender is still filling it. Plain threads send at once (a ring-less
 * msg_ring on kernels >= 6.13, else a small ring of the thread's own, made
 * on first use).
 *
 * A target shard that sleeps in the kernel is woken by the message itself.
 *
 * Errors common to the calls below: -EINVAL for a shard id out of range or
 * a NULL argument, and for calls without a runtime argument made outside one
 * (on a plain thread); -EPERM for the calls that need a coroutine of a shard
 * (receiving, counter takes, flushing); -EOPNOTSUPP when the kernel lacks
 * IORING_OP_MSG_RING (5.18), probed when the runtime starts; -ENOMEM from a
 * coroutine's wait with a deadline (receiving, counter takes, flushing)
 * when its shard's timer heap cannot grow for it (the wait did not begin).
 */
#ifndef WEFT_MSG_H
#define WEFT_MSG_H

#include "common.h"
#include "runtime.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The sender id of messages from plain threads and other runtimes. */
#define WEFT_MSG_EXTERNAL 0xffffu

/* Flag of weft_msg_try_recv() / weft_msg_recv_many(): use the hot queue. */
#define WEFT_MSG_HOT 0x1u

typedef struct weft_msg {
  uint16_t sender; /* sending shard, or WEFT_MSG_EXTERNAL (ignored when sending) */
  uint16_t tag;
  uint32_t val;
} weft_msg;

/* ---- sending ------------------------------------------------------------------ */

/* Sends (tag, val) directly to `shard` of the calling coroutine's runtime.
 * Returns 0 once the message is queued for submission (a coroutine) or
 * posted (a plain thread cannot use this call: -EINVAL; see _rt); -EAGAIN,
 * sending nothing, while the target's receive queue for `tag` is full (see
 * "Receiving" above): try again once its receivers have made room; -ENOMEM,
 * sending nothing, when the shard's SQ is full and its backlog (see "When
 * sends happen" below) has no memory to grow. */
WEFT_API int weft_msg_send(int shard, uint16_t tag, uint32_t val);

/* The same for `shard` of `rt` (NULL = the calling coroutine's runtime),
 * from any thread. From a plain thread or another runtime's shard the
 * message is posted before the call returns (sender WEFT_MSG_EXTERNAL); the
 * kernel's error (-ENOMEM, ...) is returned if it could not be, -EAGAIN as
 * above. */
WEFT_API int weft_msg_send_rt(weft_runtime *rt, int shard, uint16_t tag, uint32_t val);

/* Appends msgs[0..n) (their `sender` fields are ignored) to the lane from
 * this shard to `shard`, as many as fit, in order. Returns how many were
 * queued (n when all fit; fewer when the lane filled up - the rest were not
 * queued and may be sent again later), or -EAGAIN if the lane was full and
 * none was queued, 0 for n == 0, -ENOMEM if the lane could not be made (its
 * first use), -EINVAL as above. Counted: a lane holds at most
 * weft_config.msg_lane_capacity messages not yet taken by the target. */
WEFT_API int weft_msg_send_many(int shard, const weft_msg *msgs, size_t n);

/* The same from any thread; plain threads (and other runtimes) share one
 * lane per target (under a lock), so their messages are ordered per thread. */
WEFT_API int weft_msg_send_many_rt(weft_runtime *rt, int shard, const weft_msg *msgs,
                                   size_t n);

/* Sends (tag, val) to `shard` directly and returns once the kernel has
 * posted it to the target's ring: from then on it is found by a receive on
 * the target (weft_msg_try_recv included). Returns 0, or the kernel's error
 * (the message was not delivered), -ECANCELED if the calling coroutine (of
 * any runtime: _rt from another one too) is cancelled before the message is
 * queued in its shard's ring (once queued it is sent, and the call returns
 * 0 if the kernel posts it, a cancel meanwhile or not), -ETIMEDOUT if its
 * deadline scope passes first, -EAGAIN as
 * weft_msg_send. On a plain thread use _rt (posted synchronously, as
 * weft_msg_send_rt). */
WEFT_API int weft_msg_send_wait(int shard, uint16_t tag, uint32_t val);
WEFT_API int weft_msg_send_wait_rt(weft_runtime *rt, int shard, uint16_t tag, uint32_t val);

/* A barrier for everything the calling coroutine's *shard* has sent so far
 * (all its coroutines, to every target of its runtime): returns once
 *   - every direct message was posted to its target's ring (a ticketed
 *     marker per target with direct traffic since the last flush: msg_ring
 *     SQEs of one ring are issued in order), and
 *   - every batched message was taken out of its lane by the target shard
 *     and is in that shard's receive queues (the target acknowledges). A
 *     target whose queue is at msg_queue_limit takes them only as its
 *     receivers make room: until then the flush waits.
 * Counter adds need no flush: they are visible as soon as the add returns.
 * Returns 0, -ECANCELED (the coroutine was cancelled while waiting), the
 * kernel's error for a marker, -EPERM on a plain thread. */
WEFT_API int weft_msg_flush(void);

/* The flush for `rt` (NULL = the calling coroutine's runtime) from any
 * thread, with a deadline (CLOCK_MONOTONIC ns as weft_now(), -1 none).
 *   - From a coroutine of rt: weft_msg_flush() with a deadline.
 *   - From a plain thread (or a coroutine of another runtime): returns once
 *     every message in the shared lanes of plain threads into rt's shards
 *     when the call began - this thread's batched sends and the other plain
 *     threads' before them - was taken by its target and is in that
 *     shard's receive queues. Direct sends from outside need no flush: they
 *     are posted before weft_msg_send_rt returns. A plain thread blocks on a
 *     futex, a coroutine suspends.
 * Returns 0, -ETIMEDOUT (the deadline passed first; the messages are still
 * delivered), -ECANCELED (the coroutine was cancelled), the kernel's error
 * when a doorbell could not be sent, -EINVAL (rt NULL on a plain thread),
 * -EPERM (a shard thread of rt outside a coroutine). It is a call on rt:
 * weft_runtime_stop() must not run while it waits. */
WEFT_API int weft_msg_flush_rt(weft_runtime *rt, int64_t deadline);

/* ---- receiving (a coroutine; the shard it runs on) --------------------------------- */

/* Takes the next message of the normal queue of the calling coroutine's
 * shard, waiting until one arrives or the absolute `deadline`
 * (WEFT_NO_DEADLINE: none). Returns 0 with *m filled, -ETIMEDOUT,
 * -ECANCELED, -EPERM (plain thread), -EINVAL (m NULL). A message is never
 * lost on a timeout or cancel: it stays queued for the next receive. A
 * message already queued is returned even when the deadline has passed or
 * the task is cancelled (so a cancelled task can drain its queue): the
 * deadline and the cancel end only a wait. The same holds for the other
 * receives and for weft_counter_take. */
WEFT_API int weft_msg_recv(weft_msg *m, int64_t deadline);

/* The same on the hot queue (tags marked with weft_msg_hot_tag). */
WEFT_API int weft_msg_recv_hot(weft_msg *m, int64_t deadline);

/* Takes up to `max` messages at once (WEFT_MSG_HOT in flags: the hot
 * queue), waiting as weft_msg_recv for the first. Returns how many (>= 1),
 * or the errors of weft_msg_recv. */
WEFT_API int weft_msg_recv_many(weft_msg *m, size_t max, unsigned flags, int64_t deadline);

/* Takes a message if there is one, without waiting: it first collects what
 * the kernel has posted to this shard, so a message whose
 * weft_msg_send_wait() has returned is always found. Returns 0, -EAGAIN
 * (none), -EPERM, -EINVAL. */
WEFT_API int weft_msg_try_recv(weft_msg *m, unsigned flags);

/* Marks `tag` hot (or not) in `rt` (NULL = current): messages with a hot tag
 * that arrive from now on go to the hot queue. Returns 0 or -EINVAL: it
 * only sets a flag, so it works without msg_ring too (never -EOPNOTSUPP). */
WEFT_API int weft_msg_hot_tag(weft_runtime *rt, uint16_t tag, bool hot);

/* ---- coalesced counters ------------------------------------------------------------ */

/* Adds n to counter `tag` of `shard` (tags below
 * weft_config.msg_counters). Only an add that makes the counter non-zero
 * sends a doorbell to the shard; the others are plain atomic adds. Returns
 * 0, -EINVAL (tag or shard out of range, not in a runtime). The sum is
 * exact under any number of concurrent adders. */
WEFT_API int weft_counter_add(int shard, uint16_t tag, uint32_t n);

/* The same from any thread. If the kernel refuses a plain thread's
 * doorbell, the shard is woken through an eventfd of its own instead and
 * does what the doorbell would have. Only if that fails too is the
 * kernel's error returned: the add still counts (the next take returns it),
 * but a taker already waiting may sleep until the next add, which rings
 * in its place. */
WEFT_API int weft_counter_add_rt(weft_runtime *rt, int shard, uint16_t tag, uint32_t n);

/* Takes counter `tag` of the calling coroutine's shard: returns its sum
 * (> 0) and zeroes it, waiting while it is zero until `deadline`.
 * Returns the sum, or -ETIMEDOUT, -ECANCELED, -EPERM, -EINVAL. A sum above
 * INT64_MAX is returned in parts. */
WEFT_API int64_t weft_counter_take(uint16_t tag, int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif
