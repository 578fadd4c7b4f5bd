# SPDX-License-Identifier: MIT
# Sourced by the real-client tests: starting an example server on a free
# port, stopping it with SIGTERM and checking that it exits 0, skipping when
# a client program is missing (exit 77), cleaning up on every path.
set -u

TMP=$(mktemp -d "${TMPDIR:-/tmp}/weft-clients.XXXXXX")
SERVER_PID=
PORT=

cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  if [ -s "$TMP/server.err" ]; then
    echo "--- server stderr:"
    tail -n 50 "$TMP/server.err"
  fi
  exit 1
}

# need PROGRAM: skip the test (77) unless PROGRAM is installed.
need() {
  command -v "$1" >/dev/null 2>&1 || { echo "SKIP: $1 is not installed"; exit 77; }
}

# Alive and not a zombie (a child that exited stays in /proc until waited).
alive() {
  [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"
}

# start_server PROGRAM ARGS...: starts it with --port 0, waits (30 s at most)
# for "listening on PORT" and sets SERVER_PID and PORT. A server that exits
# 77 (no io_uring here) skips the test.
start_server() {
  # Emptied here, before the fork: the child's own redirection may run only
  # after the first look below, which would then read the previous server's
  # port (a round of stop.sh would connect to a closed port and never send
  # its SIGTERM).
  : >"$TMP/server.out"
  : >"$TMP/server.err"
  "$@" --port 0 >"$TMP/server.out" 2>"$TMP/server.err" &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    PORT=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$TMP/server.out")
    [ -n "$PORT" ] && return 0
    if ! alive "$SERVER_PID"; then
      wait "$SERVER_PID"
      rc=$?
      SERVER_PID=
      [ "$rc" -eq 77 ] && { echo "SKIP: io_uring is not available"; exit 77; }
      fail "the server exited with $rc before listening"
    fi
    sleep 0.1
  done
  fail "the server did not print 'listening on PORT' within 30 s"
}

# stop_server: SIGTERM; the server must exit with status 0 within 20 s.
stop_server() {
  alive "$SERVER_PID" || fail "the server died during the test"
  kill -TERM "$SERVER_PID"
  await_exit
}

# await_exit: the server, sent SIGTERM already, must exit with status 0
# within 20 s.
await_exit() {
  for _ in $(seq 1 200); do
    alive "$SERVER_PID" || break
    sleep 0.1
  done
  if alive "$SERVER_PID"; then
    fail "the server did not exit within 20 s of SIGTERM"
  fi
  wait "$SERVER_PID"
  rc=$?
  SERVER_PID=
  [ "$rc" -eq 0 ] || fail "the server exited with status $rc after SIGTERM"
}

# hold_connection: opens a connection (fd 9) with half a request on it, so
# that stop_server also covers a connection blocked in a read.
hold_connection() {
  exec 9<>"/dev/tcp/127.0.0.1/$PORT" || fail "cannot connect to port $PORT"
  printf '%s' "$1" >&9
}
