#!/bin/bash
# SPDX-License-Identifier: MIT
# echo_client against echo_server on 2 shards: small messages on 16
# connections, then 1 MB messages (each crossing many reads and writes).
#   echo.sh ECHO_SERVER ECHO_CLIENT
. "$(dirname "$0")/common.sh"
server=$1
client=$2

start_server "$server" --shards 2
timeout 120 "$client" --host 127.0.0.1 --port "$PORT" --shards 2 --conns 16 --msgs 2000 --size 256 ||
  fail "echo_client (256 B) failed"
timeout 120 "$client" --host 127.0.0.1 --port "$PORT" --shards 2 --conns 4 --msgs 20 --size 1000000 ||
  fail "echo_client (1 MB) failed"
hold_connection "half a message"
stop_server
echo "PASS"
