#!/bin/bash
# SPDX-License-Identifier: MIT
# The "http" benchmark (DESIGN.md section 5): http_server on 2 shards under
# wrk -t1 -c64 --latency, 5 s (2 s with --quick). Prints wrk's report on
# stderr and one JSON line on stdout:
#   {"bench":"http","metric":"req_per_s","value":...,"p50_us":...,"p99_us":...,
#    "socket_errors":0,"non2xx":0}
# Exits 1 when wrk saw errors, 77 when wrk is not installed.
#   http_bench.sh HTTP_SERVER [--quick]
. "$(dirname "$0")/common.sh"
need wrk
server=$1
duration=5s
[ "${2:-}" = "--quick" ] && duration=2s

start_server "$server" --shards 2
timeout 60 wrk -t1 -c64 -d"$duration" --latency --timeout 10s "http://127.0.0.1:$PORT/" >"$TMP/wrk.out" 2>&1 || {
  cat "$TMP/wrk.out" >&2
  fail "wrk failed"
}
cat "$TMP/wrk.out" >&2
stop_server

# A latency of wrk's ("812.00us", "1.23ms", "2.01s") in microseconds.
to_us() {
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000;
    else if (v ~ /s$/) print n * 1000000; else print -1 }'
}
rps=$(awk '/^Requests\/sec:/ { print $2 }' "$TMP/wrk.out")
p50=$(to_us "$(awk '$1 == "50%" { print $2 }' "$TMP/wrk.out")")
p99=$(to_us "$(awk '$1 == "99%" { print $2 }' "$TMP/wrk.out")")
# "Socket errors: connect 0, read 1, write 0, timeout 0": the sum.
errors=$(awk -F'[ ,]+' '/Socket errors:/ { print $4 + $6 + $8 + $10 }' "$TMP/wrk.out")
non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$TMP/wrk.out")
errors=${errors:-0}
non2xx=${non2xx:-0}
[ -n "$rps" ] || fail "no Requests/sec in wrk's output"
printf '{"bench":"http","metric":"req_per_s","value":%s,"p50_us":%s,"p99_us":%s,"socket_errors":%s,"non2xx":%s}\n' \
  "$rps" "$p50" "$p99" "$errors" "$non2xx"
[ "$errors" -eq 0 ] && [ "$non2xx" -eq 0 ] || exit 1
