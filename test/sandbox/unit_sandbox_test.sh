#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# mcd-serve inside its unit's system-call filter (scripts/systemd/unit-syscalls.sh, applied by
# syscall_sandbox as systemd would: NoNewPrivileges, EPERM for the rest) and, as root, as the
# unit's user would run (nobody here, in the group users alone, which is also its --pool-group,
# as the unit's Group= is): it serves a lifecycle whose bytes come back whole, says nothing was
# refused, and stops cleanly. DEVICES (default cpu) names what it serves; with a GPU (DEVICES=0)
# the tensor lives there.
# SERVE_ARGS: more flags for the server (--allocator pool).
#   [DEVICES=0] [ALLOWED=FILE] [SERVE_ARGS=...] test/sandbox/unit_sandbox_test.sh BIN_DIR SYSCALL_SANDBOX
set -euo pipefail
bin="$(cd "$1" && pwd)"
sandbox="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
devices="${DEVICES:-cpu}"
device="${devices%%,*}"  # the first served: cpu, or a GPU
work="$(mktemp -d)"
chmod 0777 "$work"  # the unit's user makes its sockets here
redis_pid="" serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null || true
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# The list from the unit (ALLOWED: one made before, where this machine has no systemd-analyze).
if [ -n "${ALLOWED:-}" ]; then cp "$ALLOWED" "$work/allowed.txt"; else
  bash "$root/scripts/systemd/unit-syscalls.sh" >"$work/allowed.txt"; fi
py=""  # a Python with NumPy, for the test's random bytes and their comparison
for candidate in /usr/bin/python3 python3; do
  "$candidate" -c 'import numpy' 2>/dev/null && { py="$candidate"; break; }
done
[ -n "$py" ] || { echo "unit-sandbox: no python3 with NumPy (apt-get install python3-numpy)" >&2; exit 1; }
port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 &
redis_pid=$!
export MCD_REDIS_URL="redis://127.0.0.1:$port"
node="sandbox-$$"
# A kernel without seccomp filters: nothing to run the server inside (a skip, not a pass).
grep -q '^Seccomp:' /proc/self/status || { echo "unit-sandbox: no seccomp on this kernel"; exit 77; }
as=() group="$(id -gn)" user="$(id -un)"
# As root: as the unit's user would, where nobody may run this build (not under a private home).
if [ "$(id -u)" = 0 ] && runuser -u nobody -- test -x "$bin/mcd-serve" 2>/dev/null; then
  as=(--user nobody --group users); group=users user=nobody
elif [ "$(id -u)" = 0 ]; then
  echo "unit-sandbox: nobody cannot run $bin/mcd-serve; as root instead"
fi
# MemoryDenyWriteExecute= as the unit has it (or MDWE=1, to try it).
if [ "${MDWE:-}" = 1 ] || grep -q '^MemoryDenyWriteExecute=yes' "$root/scripts/systemd/mcd-serve.service.in"; then
  as+=(--deny-write-execute)
fi
export MCD_TRUSTED_USERS="$user"  # the tools trust the server's user, as the unit's clients do
# The filter refuses what the unit's does: a chown, with EPERM.
if "$sandbox" "$work/allowed.txt" -- chown "$(id -u)" "$work/allowed.txt" 2>"$work/chown.err" ||
   ! grep -q "Operation not permitted" "$work/chown.err"; then
  cat "$work/chown.err" >&2; echo "unit-sandbox: the filter let a chown through" >&2; exit 1
fi
# LeakSanitizer (a sanitized build) stops the world through ptrace, which the filter refuses, as
# it should: leaks are looked for everywhere else.
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
"$sandbox" "$work/allowed.txt" "${as[@]}" -- "$bin/mcd-serve" --devices "$devices" --node "$node" \
  --pool-group "$group" --command-socket "$work/cmd.sock" --pool-socket "$work/pool.sock" \
  --wait-for-redis 10 ${SERVE_ARGS:-} 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 300); do grep -q "serving node" "$work/serve.log" && break; sleep 0.05; done
if ! grep -q "serving node" "$work/serve.log"; then
  cat "$work/serve.log" >&2; echo "unit-sandbox: the server did not start" >&2; exit 1
fi
# It really runs filtered, and without new privileges.
grep -q '^Seccomp:[[:space:]]*2' "/proc/$serve_pid/status" && grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$serve_pid/status" ||
  { grep -E '^(Seccomp|NoNewPrivs)' "/proc/$serve_pid/status" >&2; exit 1; }
# A lifecycle through it, every byte compared (the tools run outside the filter).
"$py" -c 'import numpy, os, sys; numpy.save(sys.argv[1], numpy.frombuffer(os.urandom(1 << 20), numpy.uint8))' "$work/in.npy"
"$bin/mcd-create" t --from "$work/in.npy" --device "$device" --node "$node" -q
"$bin/mcd-get" t --no-ref -o "$work/out.npy" --node "$node" -q
"$py" -c 'import numpy, sys; a, b = numpy.load(sys.argv[1]), numpy.load(sys.argv[2]); sys.exit(0 if numpy.array_equal(a, b) else 1)' "$work/in.npy" "$work/out.npy" ||
  { echo "unit-sandbox: other bytes came back" >&2; exit 1; }
"$bin/mcd-rm" t --node "$node" -q
if grep -qi "not permitted\|permission denied" "$work/serve.log"; then
  cat "$work/serve.log" >&2; echo "unit-sandbox: the filter refused the server something" >&2; exit 1
fi
kill -TERM "$serve_pid"
wait "$serve_pid" || { cat "$work/serve.log" >&2; echo "unit-sandbox: the server's stop failed" >&2; exit 1; }
serve_pid=""
echo "unit-sandbox: served on $devices as $user:$group inside the unit's $(wc -l <"$work/allowed.txt") allowed system calls"
