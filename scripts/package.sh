#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Builds the Debian packages (libmemcudaX.Y, libmemcuda-dev, memcuda-tools, and their -dbgsym
# packages of debug symbols, .ddeb) for prefix /usr into build-deb/, from a Release build with
# debug information and without the tests; the packages' binaries are stripped.
#   scripts/package.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's build flags where dpkg-buildflags is (debug information, fortified functions, a
# stack protector, read-only relocations bound at load); the Release build's own optimisation.
cflags="-g" cxxflags="-g" ldflags=""
if command -v dpkg-buildflags >/dev/null; then
  export DEB_BUILD_MAINT_OPTIONS=hardening=+all
  cflags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
  cxxflags="$(dpkg-buildflags --get CXXFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
  ldflags="$(dpkg-buildflags --get LDFLAGS)"
fi
cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr -DMCD_BUILD_TESTS=OFF \
  -DCMAKE_C_FLAGS="$cflags" -DCMAKE_CXX_FLAGS="$cxxflags" -DCMAKE_CUDA_FLAGS=-g \
  -DCMAKE_EXE_LINKER_FLAGS="$ldflags" -DCMAKE_SHARED_LINKER_FLAGS="$ldflags" "$@" >/dev/null
# The compiler's output to a log, shown when the build fails.
cmake --build build-deb -j "$(nproc)" >build-deb/build.log 2>&1 || { tail -n 40 build-deb/build.log >&2; exit 1; }
rm -f build-deb/*.deb build-deb/*.ddeb
(cd build-deb && cpack -G DEB >/dev/null)

# CPack (3.25) writes the -dbgsym packages' md5sums with the build folder's absolute paths and
# gives them neither copyright nor changelog: each is repacked as debhelper makes one, its
# md5sums of its own files, its doc folder a link to that of the package it has the symbols of
# (on which it depends).
for ddeb in build-deb/*.ddeb; do
  tree="$(mktemp -d)"
  dpkg-deb -R "$ddeb" "$tree"
  package="$(dpkg-deb -f "$ddeb" Package)"
  mkdir -p "$tree/usr/share/doc"
  ln -s "${package%-dbgsym}" "$tree/usr/share/doc/$package"
  chmod 0755 "$tree"
  find "$tree/usr" -type f -exec chmod 0644 {} +  # debug files are data, not programs
  (cd "$tree" && find usr -type f -exec md5sum {} + | sort -k 2) >"$tree/DEBIAN/md5sums"
  dpkg-deb --root-owner-group -b "$tree" "$ddeb" >/dev/null
  rm -rf "$tree"
done
ls build-deb/*.deb build-deb/*.ddeb
