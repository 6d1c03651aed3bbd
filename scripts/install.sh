#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Installs a build (the quick start's step): `cmake --install` to PREFIX (default /usr/local,
# with sudo where it is not writable), then the dynamic linker's cache learns the new library,
# so that programs built against it without an rpath find it (the tools find it through their
# RUNPATH either way). A prefix the linker does not search needs its lib folder in
# /etc/ld.so.conf.d.
#   scripts/install.sh [BUILD_DIR] [PREFIX]
set -euo pipefail
build="${1:-build}"
prefix="${2:-/usr/local}"
sudo=""
if [ "$(id -u)" -ne 0 ] && [ ! -w "$prefix" ]; then sudo="sudo"; fi
$sudo cmake --install "$build" --prefix "$prefix" >/dev/null
if [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; then
  $sudo env PATH="$PATH:/sbin:/usr/sbin" ldconfig ||
    echo "install: note: ldconfig failed; programs built without an rpath may not find libmemcuda" >&2
else
  echo "install: note: $prefix/lib is not in the dynamic linker's cache (no root here):" \
       "programs built against libmemcuda need an rpath or LD_LIBRARY_PATH" >&2
fi
echo "install: the mcd-* tools, libmemcuda and man pages are under $prefix" >&2
