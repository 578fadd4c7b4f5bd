#!/bin/bash
# SPDX-License-Identifier: MIT
# The protocol checks (http_check, resp_check: plain sockets, no client
# program needed) and the fuzzer (fuzz_client, 2000 cases per server), each
# against a fresh server on 2 shards, which must then still answer and stop
# cleanly on SIGTERM.
#   protocol.sh http|resp|fuzz-http|fuzz-resp SERVER CHECKER
. "$(dirname "$0")/common.sh"
mode=$1
server=$2
checker=$3

mkdir "$TMP/www"
printf 'hello file\n' >"$TMP/www/hello.txt"
case $mode in
  http) # Numbers must be whole: not atoi's reading of a prefix.
        for bad in "--shards 3x" "--idle-ms 5abc" "--shards -1"; do
          "$server" $bad >/dev/null 2>&1
          [ $? -eq 2 ] || fail "$server accepted $bad"
        done
        truncate -s 32M "$TMP/www/big.bin"
        start_server "$server" --shards 2 --dir "$TMP/www" --idle-ms 1000
        timeout 200 "$checker" "$PORT" || fail "http_check failed"
        stop_server
        start_server "$server" --shards 2 --dir "$TMP/www" --idle-ms 20000
        timeout 200 "$checker" "$PORT" patient || fail "http_check patient failed" ;;
  resp) start_server "$server" --shards 2
        timeout 200 "$checker" "$PORT" || fail "resp_check failed" ;;
  fuzz-http) start_server "$server" --shards 2 --dir "$TMP/www" --idle-ms 2000
             timeout 200 "$checker" http "$PORT" 2000 "${FUZZ_SEED:-1}" || fail "fuzz_client http failed" ;;
  fuzz-resp) start_server "$server" --shards 2
             timeout 200 "$checker" resp "$PORT" 2000 "${FUZZ_SEED:-1}" || fail "fuzz_client resp failed" ;;
  *) fail "unknown mode $mode" ;;
esac
stop_server
echo "PASS"
