#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Fuzzes every parser that takes outside input (test/fuzz: commands, replies, hash fields,
# shapes, .npy files, Redis URLs) with libFuzzer under AddressSanitizer + UBSan, for SECONDS in
# all (default 60), shared among the targets. Each starts from its seed corpus in
# test/fuzz/corpus/<target>; what it finds goes to build-fuzz/corpus/<target>, and --merge
# folds that back into the seed corpus (then commit it). An input that crashes a target, or
# breaks a property it checks, is left as build-fuzz/<target>-crash-* and fails the run.
#   scripts/fuzz.sh [SECONDS] [--merge]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
merge=0
for arg in "$@"; do
  case "$arg" in
    --merge) merge=1 ;;
    ''|*[!0-9]*) echo "fuzz: usage: scripts/fuzz.sh [SECONDS] [--merge]" >&2; exit 64 ;;
    *) seconds="$arg" ;;
  esac
done
cxx="$(command -v clang++-14 || command -v clang++ || true)"
[ -n "$cxx" ] || { echo "fuzz: error: clang++ not found; run scripts/install-deps.sh" >&2; exit 69; }

cmake -S test/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" >/dev/null
export UBSAN_OPTIONS="suppressions=$PWD/test/fuzz/ubsan.supp:halt_on_error=1:print_stacktrace=1"
targets=(fuzz_command fuzz_reply fuzz_hash fuzz_npy fuzz_url fuzz_safetensors)
each=$(( seconds / ${#targets[@]} ))
[ "$each" -ge 1 ] || each=1
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  if ! "build-fuzz/$t" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 \
       -artifact_prefix="build-fuzz/$t-" "build-fuzz/corpus/$t" "test/fuzz/corpus/$t" \
       >"build-fuzz/$t.log" 2>&1; then
    tail -n 40 "build-fuzz/$t.log" >&2
    echo "fuzz: $t FAILED; the input is build-fuzz/$t-crash-* (or -leak-, -timeout-, -oom-)" >&2
    exit 1
  fi
  echo "fuzz: $t ok, $(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "build-fuzz/$t.log") inputs in ${each} s," \
       "corpus $(ls "build-fuzz/corpus/$t" | wc -l) new + $(ls "test/fuzz/corpus/$t" | wc -l) seeds" >&2
  if [ "$merge" = 1 ]; then
    "build-fuzz/$t" -merge=1 "test/fuzz/corpus/$t" "build-fuzz/corpus/$t" >/dev/null 2>&1
  fi
done
