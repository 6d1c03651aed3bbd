#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Instructions the server's main thread runs per create + delete round of a 4 KiB host tensor,
# counted by callgrind: a short and a long run of the same server build, and the difference
# divided by the extra rounds, so that start, stop and the clients' own cost fall out.
# Instruction counts do not drift with the host as clock times do, so two builds compare on any
# machine (a GPU is not needed: host memory goes through the same commands, commits and replies).
#
#   scripts/count-server-instructions.sh BIN_DIR [SHORT LONG]   # default 100 400 rounds
#
# Needs valgrind and redis-server; prints one line: instructions per round.
set -euo pipefail
shopt -s inherit_errexit
bin=$(cd "${1:?usage: $0 BIN_DIR [SHORT LONG]}" && pwd)
short=${2:-100}
long=${3:-400}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

redis-server --port 0 --unixsocket "$work/redis.sock" --save '' --appendonly no \
  --dir "$work" --daemonize no > "$work/redis.log" 2>&1 &
for _ in $(seq 100); do [ -S "$work/redis.sock" ] && break; sleep 0.1; done
export MCD_REDIS_URL="unix://$work/redis.sock" MCD_NODE=count MCD_SPIN_US=0

# One server run under callgrind doing `rounds` create + delete rounds; prints the main
# thread's instruction total.
count() {
  local rounds=$1 out="$work/cg.$1"
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out" \
    "$bin/mcd-serve" --devices cpu --no-node-copies -q > "$work/serve.$rounds.log" 2>&1 &
  local serve=$!
  # Up once its heartbeat is there (callgrind starts it slowly).
  for _ in $(seq 600); do
    [ "$(redis-cli -s "$work/redis.sock" EXISTS mcd:server:count)" = 1 ] && break
    kill -0 "$serve" || { cat "$work/serve.$rounds.log" >&2; exit 1; }
    sleep 0.1
  done
  for ((i = 0; i < rounds; i++)); do
    "$bin/mcd-create" "t$i" --dtype u8 --shape 4096 --device cpu -q --timeout-ms 60000
    "$bin/mcd-rm" "t$i" -q --timeout-ms 60000
  done
  kill -TERM "$serve"  # (a background job ignores SIGINT)
  wait "$serve" || true
  # The main thread's file ends in -01; its "summary:" or "totals:" line is its total.
  awk '/^(summary|totals):/ {print $2; exit}' "$out-01"
}

a=$(count "$short")
b=$(count "$long")
echo "$(( (b - a) / (long - short) )) instructions per create + delete round (main thread)"
