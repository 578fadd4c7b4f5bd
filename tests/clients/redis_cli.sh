#!/bin/bash
# SPDX-License-Identifier: MIT
# redis-cli against kv_server on 2 shards: SET/GET/INCR/DEL/MGET/MSET/EXISTS
# round trips, errors, 300 keys (both shards) through one piped session, and
# a 1.3 MB value through -x.
#   redis_cli.sh KV_SERVER
. "$(dirname "$0")/common.sh"
need redis-cli
server=$1

start_server "$server" --shards 2
rc() { timeout 60 redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }
# check WANT ARGS...: the output of redis-cli ARGS must be WANT. (Its exit
# status is not looked at: versions differ on error replies.)
check() {
  local want=$1
  shift
  got=$(rc "$@" 2>&1)
  [ "$got" = "$want" ] || fail "redis-cli $*: got '$got', want '$want'"
}

check PONG PING
check OK SET foo bar
check bar GET foo
check 1 INCR counter
check 2 INCR counter
check 3 INCR counter
check 3 GET counter
check 1 DEL foo
check "" GET foo
check OK MSET a 1 b 2 c 3
check "$(printf '1\n2\n\n3')" MGET a b missing c
check 3 EXISTS a b c missing
check 2 DEL a b missing
check OK SET s abc
check "ERR value is not an integer or out of range" INCR s
check "ERR wrong number of arguments for 'get' command" GET
check "ERR unknown command 'FLUSHEVERYTHING'" FLUSHEVERYTHING

# One session, 300 SETs then 300 GETs, keys on both shards.
for i in $(seq 1 300); do echo "SET key:$i value:$i"; done | rc >"$TMP/set.out" ||
  fail "piped SETs failed"
[ "$(grep -c '^OK$' "$TMP/set.out")" = 300 ] || fail "piped SETs: $(sort "$TMP/set.out" | uniq -c)"
for i in $(seq 1 300); do echo "GET key:$i"; done | rc >"$TMP/get.out" || fail "piped GETs failed"
seq 1 300 | sed 's/^/value:/' >"$TMP/get.want"
cmp -s "$TMP/get.out" "$TMP/get.want" || fail "piped GETs returned other values"

# A large value from stdin (-x), read back with --raw.
head -c 1000000 /dev/urandom | base64 -w0 >"$TMP/big"
check OK -x SET big <"$TMP/big"
rc --raw GET big >"$TMP/big.got" || fail "GET big failed"
printf '%s\n' "$(cat "$TMP/big")" | cmp -s - "$TMP/big.got" || fail "the large value came back different"

hold_connection $'*2\r\n$3\r\nGET\r\n'
stop_server
echo "PASS"
