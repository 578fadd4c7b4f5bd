#!/bin/bash
# SPDX-License-Identifier: MIT
# redis-benchmark -q -n 20000 -c 32 -t set,get,incr,ping against kv_server
# on 2 shards: every test must report its rate, and nothing may report an
# error.
#   redis_bench.sh KV_SERVER
. "$(dirname "$0")/common.sh"
need redis-benchmark
server=$1

start_server "$server" --shards 2
timeout 240 redis-benchmark -h 127.0.0.1 -p "$PORT" -q -n 20000 -c 32 -t set,get,incr,ping \
  >"$TMP/bench.raw" 2>&1 || {
  cat "$TMP/bench.raw"
  fail "redis-benchmark failed"
}
# -q rewrites a progress line with CRs; keep the final text of each line.
tr '\r' '\n' <"$TMP/bench.raw" | grep -v '^ *$' | grep 'requests per second\|rror\|ERR\|WARN' \
  >"$TMP/bench.out"
cat "$TMP/bench.out"
if grep -qi 'error\|ERR\|WARN' "$TMP/bench.out"; then
  fail "redis-benchmark reported errors"
fi
for t in PING_INLINE PING_MBULK SET GET INCR; do
  grep -q "^$t: .*requests per second" "$TMP/bench.out" || fail "no result for $t"
done
stop_server
echo "PASS"
