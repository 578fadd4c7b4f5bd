#!/bin/bash
# SPDX-License-Identifier: MIT
# wrk -t1 -c64 -d3s against http_server on 2 shards: it must finish with no
# socket errors and only 2xx answers. --timeout 10s (wrk's default is 2 s)
# keeps a starved, noisy machine from turning slow answers into "errors".
#   wrk_http.sh HTTP_SERVER
. "$(dirname "$0")/common.sh"
need wrk
server=$1

start_server "$server" --shards 2
timeout 60 wrk -t1 -c64 -d3s --timeout 10s "http://127.0.0.1:$PORT/" >"$TMP/wrk.out" 2>&1 || {
  cat "$TMP/wrk.out"
  fail "wrk failed"
}
cat "$TMP/wrk.out"
# wrk prints these two lines only when there is something to report.
if grep -q 'Socket errors:' "$TMP/wrk.out"; then
  fail "socket errors: $(grep 'Socket errors:' "$TMP/wrk.out")"
fi
if grep -q 'Non-2xx or 3xx responses:' "$TMP/wrk.out"; then
  fail "$(grep 'Non-2xx' "$TMP/wrk.out")"
fi
requests=$(sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$TMP/wrk.out")
[ -n "$requests" ] && [ "$requests" -gt 0 ] || fail "no requests completed"
stop_server
echo "PASS: $requests requests"
