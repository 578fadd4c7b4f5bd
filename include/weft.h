/* SPDX-License-Identifier: MIT */
/*
 * weft: stackful coroutines on per-shard io_uring schedulers.
 * The umbrella header; each part can also be included alone.
 */
#ifndef WEFT_H
#define WEFT_H

#include "weft/blocking.h"
#include "weft/boundary.h"
#include "weft/bufio.h"
#include "weft/chan.h"
#include "weft/common.h"
#include "weft/fs.h"
#include "weft/group.h"
#include "weft/io.h"
#include "weft/msg.h"
#include "weft/net.h"
#include "weft/process.h"
#include "weft/recv_stream.h"
#include "weft/runtime.h"
#include "weft/signal.h"
#include "weft/stats.h"
#include "weft/sync.h"
#include "weft/task.h"
#include "weft/time.h"
#include "weft/websocket.h"

#endif
