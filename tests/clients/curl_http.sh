#!/bin/bash
# SPDX-License-Identifier: MIT
# curl against http_server: "/", files (small, 3 MB, empty) byte for byte,
# 404/400/405, HEAD, HTTP/1.0, and two requests on one kept-alive connection.
#   curl_http.sh HTTP_SERVER
. "$(dirname "$0")/common.sh"
need curl
server=$1

www=$TMP/www
mkdir "$www"
printf 'hello file\n' >"$www/hello.txt"
head -c 3000000 /dev/urandom >"$www/big.bin"
: >"$www/empty"
printf 'Hello, World!\n' >"$TMP/hello.want"

start_server "$server" --shards 2 --dir "$www"
url=http://127.0.0.1:$PORT
CURL=(curl -sS --max-time 30)

# fetch PATH WANT_STATUS [curl options]: the body goes to $TMP/body.
fetch() {
  local path=$1 want=$2
  shift 2
  code=$("${CURL[@]}" "$@" -o "$TMP/body" -w '%{http_code}' "$url$path") ||
    fail "curl $path failed"
  [ "$code" = "$want" ] || fail "$path: status $code, want $want"
}

fetch / 200
cmp -s "$TMP/body" "$TMP/hello.want" || fail "body of / differs"
fetch /file/hello.txt 200
cmp -s "$TMP/body" "$www/hello.txt" || fail "body of hello.txt differs"
fetch /file/big.bin 200
cmp -s "$TMP/body" "$www/big.bin" || fail "body of big.bin differs"
fetch /file/empty 200
[ ! -s "$TMP/body" ] || fail "body of empty is not empty"
fetch /file/missing 404
fetch /nope 404
fetch /file/../hello.txt 400 --path-as-is
fetch /file/x..y 400
fetch / 405 -X POST -d data
fetch / 200 --http1.0
cmp -s "$TMP/body" "$TMP/hello.want" || fail "HTTP/1.0 body of / differs"

# HEAD: the headers of GET, no body.
"${CURL[@]}" -I "$url/file/hello.txt" >"$TMP/head" || fail "curl -I failed"
grep -qi '^content-length: 11' "$TMP/head" || fail "HEAD: no Content-Length: 11"

# Two transfers in one curl run share one connection (keep-alive).
conns=$("${CURL[@]}" -o /dev/null -o /dev/null -w '%{num_connects} ' "$url/" "$url/file/big.bin") ||
  fail "curl keep-alive run failed"
[ "$conns" = "1 0 " ] || fail "keep-alive: new connections per transfer '$conns', want '1 0 '"

hold_connection $'GET / HTTP/1.1\r\nHost:'
stop_server
echo "PASS"
