#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# The smoke test a GPU CI runner runs: private Redis + mcd-serve on GPU 0, a tensor created from a
# .npy of random values, read back by another process and compared byte for byte, the example
# compute process run on it and its result compared with the values expected, everything
# removed, and the GPU's memory back where it started. With --cpu, the same lifecycle on host
# memory (and the C example as a second compute process), for any machine.
#   scripts/gpu-smoke.sh [--cpu] [BIN_DIR]     (default: build/bin, else the tools on PATH)
#
# Exit codes; every check fails with its own, after saying what failed and showing the server's
# log, and the work folder (logs, the files compared) is kept and named:
#   0   PASS
#   1   a tool or another command exited non-zero (it is named, with its code)
#   2   wrong data: the read-back differs from what was written, or a compute process's result
#       from what was expected
#   3   something left behind: a tensor, a shared-memory object, GPU memory
#   64  usage: an unknown argument, or no tools found
#   69  Redis or mcd-serve did not start
#   77  skipped: no GPU here and no --cpu (as CTest and automake read it)
set -Eeuo pipefail
# A BIN_DIR named on the command line is the caller's, relative to where it ran.
given_bin=""
for arg in "$@"; do
  case "$arg" in -*) ;; *) given_bin="$(cd "$arg" 2>/dev/null && pwd || echo "$arg")" ;; esac
done
cd "$(dirname "$0")/.."
work="" serve_pid="" redis_pid=""

show_logs() {
  [ -n "$work" ] || return 0
  for log in serve.log redis.log; do
    [ -s "$work/$log" ] || continue
    echo "--- last lines of $work/$log" >&2
    tail -n 20 "$work/$log" >&2
  done
}
fail() {  # CODE MESSAGE: says what failed, shows the logs, exits CODE
  local code=$1
  shift
  echo "gpu-smoke: FAIL: $*" >&2
  show_logs
  exit "$code"
}
# A command that fails outside a check fails the script with 1, naming it. In a command
# substitution only its code goes out: the command around it is named.
on_error() {
  local rc=$1
  [ "$BASH_SUBSHELL" -eq 0 ] || exit "$rc"
  fail 1 "\`$2\` exited $rc (line $3)"
}
trap 'on_error $? "$BASH_COMMAND" $LINENO' ERR
cleanup() {
  local rc=$?
  trap - ERR
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null || true
  # Redis still writes its log and removes its socket while stopping: wait before removing.
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
  if [ -n "$work" ]; then
    if [ "$rc" = 0 ] || [ "$rc" = 77 ]; then
      rm -rf "$work"
    else
      echo "gpu-smoke: the logs and files are kept in $work" >&2
    fi
  fi
}
trap cleanup EXIT

cpu=0
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
if [ $# -gt 1 ] || [[ "${1:-}" == -* ]]; then fail 64 "usage: scripts/gpu-smoke.sh [--cpu] [BIN_DIR]"; fi
bin="${given_bin:-build/bin}"
# The tools named are the ones tested: never others found on PATH instead.
[ -z "$given_bin" ] || [ -x "$bin/mcd-serve" ] || fail 64 "no mcd-serve in $bin"
if [ ! -x "$bin/mcd-serve" ]; then
  found="$(command -v mcd-serve || true)"
  [ -n "$found" ] || fail 64 "no mcd-serve in $bin nor on PATH"
  bin="$(dirname "$found")"
fi
redis_server="${REDIS_SERVER:-redis-server}"
work="$(mktemp -d)"
node="smoke-$$"
step() { printf '== %s\n' "$*"; }
# Device-wide used memory in MiB (cudaMemGetInfo through Python when it has CuPy or PyTorch,
# else nvidia-smi, which reads 0 on some virtual machines).
gpu_used() {
  python3 -c 'import cupy as c; f, t = c.cuda.runtime.memGetInfo(); print((t - f) >> 20)' 2>/dev/null ||
  python3 -c 'import torch; f, t = torch.cuda.mem_get_info(0); print((t - f) >> 20)' 2>/dev/null ||
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0
}
# Fails with 2 unless FILE holds exactly the bytes of EXPECTED.
same_bytes() {  # WHAT EXPECTED FILE
  local differs
  if ! differs="$(cmp "$2" "$3" 2>&1)"; then fail 2 "$1: $differs"; fi
  echo "$1: byte-for-byte as expected ($(stat -c %s "$3") bytes)"
}

device=0
if [ "$cpu" = 1 ]; then
  device=cpu
  step "host memory (--cpu)"
else
  gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null || true)"
  if [ -z "$gpu" ]; then
    echo "gpu-smoke: no GPU here (nvidia-smi finds none): skipped; --cpu runs the same lifecycle on host memory"
    exit 77
  fi
  step "GPU: $gpu"
  used_before="$(gpu_used)"
  step "GPU 0 memory used before: ${used_before} MiB"
fi

"$redis_server" --port 0 --unixsocket "$work/redis.sock" --save "" --appendonly no \
  --logfile "$work/redis.log" &
redis_pid=$!
export MCD_REDIS_URL="unix://$work/redis.sock"
for _ in $(seq 200); do
  [ -S "$work/redis.sock" ] && break
  kill -0 "$redis_pid" 2>/dev/null || break
  sleep 0.05
done
[ -S "$work/redis.sock" ] || fail 69 "redis-server ($redis_server) did not start"

"$bin/mcd-serve" --devices "$device" --node "$node" 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 400); do
  grep -q "serving node" "$work/serve.log" && break
  kill -0 "$serve_pid" 2>/dev/null || break
  sleep 0.05
done
grep "serving node" "$work/serve.log" || fail 69 "mcd-serve did not start"

# 1 Mi random float32 values as a NumPy file, written with the standard library only, and what
# the compute example (x = x * 2 + 1) must make of them. Multiples of 1/1024 under 1000 in
# magnitude, so that x * 2 + 1 is exact and every device gives the same bytes.
python3 - "$work/in.npy" "$work/expected.npy" <<'PY'
import random, struct, sys
n = 1 << 20
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
values = [random.randint(-1024000, 1024000) / 1024 for _ in range(n)]
for path, data in ((sys.argv[1], values), (sys.argv[2], [v * 2 + 1 for v in values])):
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % n, *data))
PY
step "create from .npy"
"$bin/mcd-create" smoke.t --from "$work/in.npy" --device "$device" --node "$node"
[ "$cpu" = 1 ] || step "GPU 0 memory used while mcd-serve holds the tensor: $(gpu_used) MiB"
step "list"
"$bin/mcd-ls" --node "$node"
step "read back in another process and compare"
"$bin/mcd-get" smoke.t --no-ref -o "$work/out.npy" --node "$node" -q
same_bytes "read-back" "$work/in.npy" "$work/out.npy"
step "example compute process: x = x * 2 + 1 in place ($([ "$cpu" = 1 ] && echo "host memory" || echo "on the GPU"))"
"$bin/mcd-example-scale" smoke.t 2 --node "$node"
"$bin/mcd-get" smoke.t --no-ref --print 4 --node "$node" | grep values
"$bin/mcd-get" smoke.t --no-ref -o "$work/scaled.npy" --node "$node" -q
same_bytes "computed" "$work/expected.npy" "$work/scaled.npy"
if [ "$cpu" = 1 ]; then
  step "example compute process (C ABI): its own tensor, written through one mapping, read through another"
  out="$("$bin/mcd-example-c" smoke.c "$node")"
  echo "$out"
  case "$out" in *"sum=1240 listed=1"*) ;; *) fail 2 "the C example printed: $out" ;; esac
fi
step "remove"
"$bin/mcd-rm" smoke.t --node "$node"
left="$("$bin/mcd-ls" -q --node "$node")"
[ -z "$left" ] || fail 3 "tensors left after mcd-rm: $left"
echo "no tensor left"
kill -TERM "$serve_pid"
wait "$serve_pid"
serve_pid=""
tail -n 3 "$work/serve.log"
if [ "$cpu" = 1 ]; then
  objects="$(ls /dev/shm | grep -F "$node" || true)"
  [ -z "$objects" ] || fail 3 "host objects left in /dev/shm: $objects"
  step "gpu-smoke --cpu: PASS"
else
  used_after="$(gpu_used)"
  step "GPU 0 memory used after: ${used_after} MiB (before: ${used_before} MiB)"
  [ "$used_after" -le "$used_before" ] || fail 3 "GPU memory not returned: ${used_after} MiB used, ${used_before} before"
  step "gpu-smoke: PASS"
fi
