#!/bin/bash
# SPDX-License-Identifier: MIT
# SIGTERM in the middle of a burst of connections, several rounds on 2
# shards: the server must exit 0 each time. The connections accepted just
# before the stop began may be cancelled before their coroutine ever ran;
# what they own must not leak then (the ASan build's leak check turns a
# leak into a non-zero exit status).
#   stop.sh SERVER
. "$(dirname "$0")/common.sh"
server=$1

PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "SKIP: python3 is not installed"; exit 77; }

for round in $(seq 1 10); do
  start_server "$server" --shards 2
  # Connects up to 300 times, sends SIGTERM half-way (while the server is
  # still taking connections in), goes on until the server refuses, then
  # waits until every connection is closed by the server's exit (end of
  # file or a reset).
  timeout 60 "$PY" - "$PORT" "$SERVER_PID" <<'PYEOF' || fail "round $round: the client failed"
import os, signal, socket, sys
port, pid = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(300):
    if i == 150:
        os.kill(pid, signal.SIGTERM)
    try:
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=20))
    except OSError as e:
        # Before the SIGTERM the server must take every connection: a
        # refusal then is a failure, not the end of the burst.
        if i < 150:
            sys.exit("connection %d failed before the stop: %s" % (i, e))
        break
for s in socks:
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
PYEOF
  await_exit
done
echo "PASS"
