#!/usr/bin/env bash
# The smoke test a GPU CI runner runs: private Redis + mcd-serve on GPU 0, a tensor created from a
# .npy, read back by another process and compared byte for byte, the example compute process run
# on it, everything removed, and the GPU's memory back where it started. With --cpu, the same
# lifecycle on host memory (the C example as the compute process), for any machine. Without a
# GPU and without --cpu it exits 77 (skipped, as CTest and automake read it).
#   scripts/gpu-smoke.sh [--cpu] [BIN_DIR]     (default: build/bin, else the tools on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
cpu=0
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
bin="${1:-build/bin}"
[ -x "$bin/mcd-serve" ] || bin="$(dirname "$(command -v mcd-serve)")"
redis_server="${REDIS_SERVER:-redis-server}"
work="$(mktemp -d)"
node="smoke-$$"
serve_pid="" redis_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null || true
  # Redis still writes its log and removes its socket while stopping: wait before removing.
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
step() { printf '== %s\n' "$*"; }
# Device-wide used memory in MiB (cudaMemGetInfo through Python when it has CuPy or PyTorch,
# else nvidia-smi, which reads 0 on some virtual machines).
gpu_used() {
  python3 -c 'import cupy as c; f, t = c.cuda.runtime.memGetInfo(); print((t - f) >> 20)' 2>/dev/null ||
  python3 -c 'import torch; f, t = torch.cuda.mem_get_info(0); print((t - f) >> 20)' 2>/dev/null ||
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0
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
for _ in $(seq 100); do [ -S "$work/redis.sock" ] && break; sleep 0.05; done

"$bin/mcd-serve" --devices "$device" --node "$node" 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 200); do grep -q "serving node" "$work/serve.log" && break; sleep 0.05; done
grep "serving node" "$work/serve.log"

# 1 Mi float32 values 0, 0.5, 1.0, ... as a NumPy file, written with the standard library only.
python3 - "$work/in.npy" <<'PY'
import struct, sys
n = 1 << 20
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % n, *[i * 0.5 for i in range(n)]))
PY
step "create from .npy"
"$bin/mcd-create" smoke.t --from "$work/in.npy" --device "$device" --node "$node"
[ "$cpu" = 1 ] || step "GPU 0 memory used while mcd-serve holds the tensor: $(gpu_used) MiB"
step "list"
"$bin/mcd-ls" --node "$node"
step "read back in another process and compare"
"$bin/mcd-get" smoke.t --no-ref -o "$work/out.npy" --node "$node" -q
cmp "$work/in.npy" "$work/out.npy" && echo "byte-for-byte identical ($(stat -c %s "$work/out.npy") bytes)"
if [ "$cpu" = 1 ]; then
  step "example compute process (C ABI): its own tensor, written through one mapping, read through another"
  out="$("$bin/mcd-example-c" smoke.c "$node")"
  echo "$out"
  case "$out" in *"sum=1240 listed=1"*) ;; *) echo "unexpected: $out"; exit 1 ;; esac
else
  step "example compute process: x = x * 2 + 1 in place on the GPU"
  "$bin/mcd-example-scale" smoke.t 2 --node "$node"
  "$bin/mcd-get" smoke.t --no-ref --print 4 --node "$node" | grep values
  values="$("$bin/mcd-get" smoke.t --no-ref --print 4 --json --node "$node")"
  echo "$values" | grep -q '"values":\[1,2,3,4\]' || { echo "unexpected values: $values"; exit 1; }
fi
step "remove"
"$bin/mcd-rm" smoke.t --node "$node"
[ -z "$("$bin/mcd-ls" -q --node "$node")" ] && echo "no tensor left"
kill -TERM "$serve_pid"
wait "$serve_pid"
serve_pid=""
tail -n 3 "$work/serve.log"
if [ "$cpu" = 1 ]; then
  [ -z "$(ls /dev/shm | grep -F "$node" || true)" ] || { echo "host objects left"; exit 1; }
  step "gpu-smoke --cpu: PASS"
else
  used_after="$(gpu_used)"
  step "GPU 0 memory used after: ${used_after} MiB (before: ${used_before} MiB)"
  [ "$used_after" -le "$used_before" ] || { echo "GPU memory not returned"; exit 1; }
  step "gpu-smoke: PASS"
fi
