#!/usr/bin/env bash
# Builds the Debian packages (libmemcudaX.Y, libmemcuda-dev, memcuda-tools) for prefix /usr into
# build-deb/, from a Release build without the tests.
#   scripts/package.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DMCD_BUILD_TESTS=OFF "$@" >/dev/null
cmake --build build-deb -j "$(nproc)" >/dev/null
(cd build-deb && cpack -G DEB >/dev/null)
ls build-deb/*.deb
