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
  # file or a reset) - or, for a connection the server never had, until
  # the server is gone.
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
def server_gone():
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
for s in socks:
    s.settimeout(1)
    while True:
        try:
            if not s.recv(4096):
                break
        except ConnectionResetError:
            break
        except socket.timeout:  # TimeoutError since Python 3.10
            # The exit closes every connection the server had. One still
            # open after it is a handshake the listener's close cut short
            # (only the client saw it complete), and the kernel never tells
            # the client: stop waiting for it. Until then, keep waiting.
            if server_gone():
                break
PYEOF
  await_exit
done
echo "PASS"
