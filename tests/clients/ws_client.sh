#!/bin/bash
# SPDX-License-Identifier: MIT
# ws_client (weft's WebSocket client, dialling a ws:// URL) against two
# servers: ws_echo, and an independent implementation - Python's websockets
# library (Debian's python3-websockets) - that answers only a request with
# the header ws_client was told to add and agrees on echo.v1. Text and
# binary messages up to 1 MB on several connections, and the closing
# handshake.
#   ws_client.sh WS_ECHO WS_CLIENT
. "$(dirname "$0")/common.sh"
server=$1
client=$2

expect_ok() {
  out=$(timeout 120 "$client" "$@") || fail "ws_client $* failed: $out"
  case "$out" in
  *'subprotocol "echo.v1": ok'*) ;;
  *) fail "ws_client $*: '$out'" ;;
  esac
}

start_server "$server" --shards 2
expect_ok "ws://127.0.0.1:$PORT/echo" --conns 8 --msgs 200 --size 300 --protocol chat \
  --protocol echo.v1
expect_ok "ws://localhost:$PORT" --conns 2 --msgs 10 --size 1000000 --protocol echo.v1
stop_server

PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
if [ -z "$PY" ] || ! "$PY" -c 'import websockets' 2>/dev/null; then
  echo "PASS (ws_echo only: python3 with the websockets module is not installed)"
  exit 0
fi
cat >"$TMP/server.py" <<'PYEOF'
import asyncio, http, signal, sys
import websockets

async def echo(ws, path=None):
    async for message in ws:
        await ws.send(message)

async def check(path, headers):
    if headers.get("X-Weft-Test") != "1":
        return (http.HTTPStatus.FORBIDDEN, [], b"")
    return None

async def main():
    stop = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set_result, None)
    async with websockets.serve(echo, "127.0.0.1", 0, subprotocols=["echo.v1"],
                                process_request=check, max_size=None,
                                compression=None) as server:
        print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
        await stop

asyncio.run(main())
PYEOF
start_server "$PY" "$TMP/server.py"
expect_ok "ws://127.0.0.1:$PORT/" --conns 8 --msgs 200 --size 300 --protocol echo.v1 \
  --header "X-Weft-Test: 1"
expect_ok "ws://127.0.0.1:$PORT/" --conns 2 --msgs 10 --size 1000000 --protocol chat \
  --protocol echo.v1 --header "X-Weft-Test: 1"
# Without the header the server refuses the handshake: the client says so.
if timeout 60 "$client" "ws://127.0.0.1:$PORT/" --conns 1 --msgs 1 --protocol echo.v1 \
  >"$TMP/refused.out" 2>&1; then
  fail "ws_client succeeded against a server that refuses it"
fi
grep -q "Protocol error" "$TMP/refused.out" || fail "refused: $(cat "$TMP/refused.out")"
stop_server
echo "PASS"
