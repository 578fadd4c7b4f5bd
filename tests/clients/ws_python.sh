#!/bin/bash
# SPDX-License-Identifier: MIT
# ws_echo against an independent WebSocket implementation, Python's
# websockets library (Debian's python3-websockets): text and binary messages
# of every length class up to 1 MiB, a ping, a fragmented message, many
# messages on several connections at once, and the closing handshake with
# its status; the subprotocol echo.v1 agreed when offered, none otherwise;
# then a request that is not an upgrade gets 400.
#   ws_python.sh WS_ECHO
. "$(dirname "$0")/common.sh"
server=$1

PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
[ -n "$PY" ] && "$PY" -c 'import websockets' 2>/dev/null ||
  { echo "SKIP: python3 with the websockets module is not installed"; exit 77; }

start_server "$server" --shards 2
timeout 120 "$PY" - "$PORT" <<'PYEOF' || fail "the websockets client failed"
import asyncio, os, sys
import websockets

port = int(sys.argv[1])
uri = f"ws://127.0.0.1:{port}/echo"

async def one_connection(tag):
    async with websockets.connect(uri, max_size=None, compression=None) as ws:
        for n in (0, 1, 125, 126, 65535, 65536, 1 << 20):
            data = os.urandom(n)
            await ws.send(data)
            assert await ws.recv() == data, f"binary {n}"
            text = ("weft \u00fc\U0001F600 " * (n // 12 + 1))[:n]
            await ws.send(text)
            assert await ws.recv() == text, f"text {n}"
        pong = await ws.ping(b"are you there")
        await asyncio.wait_for(pong, 10)
        await ws.send(["frag", "mented ", "message"])  # fragments of one message
        assert await ws.recv() == "fragmented message"
        for i in range(200):
            await ws.send(f"{tag}:{i}")
        for i in range(200):
            assert await ws.recv() == f"{tag}:{i}"
        await ws.close(code=1000, reason="done")
        assert ws.close_code == 1000, ws.close_code

async def subprotocols():
    async with websockets.connect(uri, subprotocols=["chat", "echo.v1"]) as ws:
        assert ws.subprotocol == "echo.v1", ws.subprotocol
        await ws.send("with echo.v1")
        assert await ws.recv() == "with echo.v1"
    async with websockets.connect(uri, subprotocols=["chat"]) as ws:
        assert ws.subprotocol is None, ws.subprotocol
    async with websockets.connect(uri) as ws:
        assert ws.subprotocol is None, ws.subprotocol

async def main():
    await asyncio.gather(*(one_connection(t) for t in range(8)))
    await subprotocols()

asyncio.run(main())
print("websockets client: OK")
PYEOF

# Not an upgrade: 400, and the server keeps serving.
reply=$(timeout 10 "$PY" - "$PORT" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
print(s.recv(100).decode().split("\r\n")[0])
PYEOF
) || fail "the plain HTTP request failed"
[ "$reply" = "HTTP/1.1 400 Bad Request" ] || fail "a plain GET got '$reply', not 400"
stop_server
echo "PASS"
