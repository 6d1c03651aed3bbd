#!/usr/bin/env bash
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
cmake -S "$here" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer_c"
"$work/build/consumer_cpp"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion memcuda)" = "$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/memcuda.pc")" ]
# shellcheck disable=SC2046
cc $flags -o "$work/consumer_pc" "$here/consumer.c" $(pkg-config --cflags --libs memcuda) \
  -Wl,-rpath,"$(pkg-config --variable=libdir memcuda)"
"$work/consumer_pc"
echo "consumer: ok"
