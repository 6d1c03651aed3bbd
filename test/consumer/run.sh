#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Installs a build into a temporary prefix and uses it as a downstream project would: the tools
# run without LD_LIBRARY_PATH (their RUNPATH), and a consumer builds through find_package in C
# and C++ (every public header compiling on its own) and through pkg-config, then runs.
#   test/consumer/run.sh BUILD_DIR [EXTRA_FLAGS]   (EXTRA_FLAGS: the sanitizers of a sanitized build)
set -euo pipefail
build="$1"
flags="${2:-}"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
# Every installed program says what it is, with no LD_LIBRARY_PATH (its RUNPATH finds the library).
for program in "$prefix"/bin/*; do
  line="$(env -u LD_LIBRARY_PATH "$program" --version)"
  if ! [[ "$line" =~ ^memcuda\ [0-9]+\.[0-9]+\.[0-9]+\ \(git\ ([0-9a-f]{7}|unknown)\;\ built\ with\ CUDA\ runtime\ [0-9]+\.[0-9]+\;\ driver:\ .+\)$ ]]; then
    echo "consumer: $(basename "$program") --version said: $line" >&2
    exit 1
  fi
done
echo "consumer: $(ls "$prefix/bin" | wc -l) programs, e.g. $line"
# A project of C++14 and one of C++17: the target raises the first to the C++17 it needs.
for standard in 14 17; do
  cmake -S "$here" -B "$work/build$standard" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_STANDARD="$standard" -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" >/dev/null
  cmake --build "$work/build$standard" >/dev/null ||
    { echo "consumer: the C++$standard project does not build" >&2; exit 1; }
  "$work/build$standard/consumer_c"
  "$work/build$standard/consumer_cpp"
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion memcuda)" = "$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/memcuda.pc")" ]
# shellcheck disable=SC2046
cc $flags -o "$work/consumer_pc" "$here/consumer.c" $(pkg-config --cflags --libs memcuda) \
  -Wl,-rpath,"$(pkg-config --variable=libdir memcuda)"
"$work/consumer_pc"
echo "consumer: ok"
