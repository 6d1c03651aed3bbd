#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# The quick start's install (scripts/install.sh) to /usr/local, then a C program built against
# it with no rpath runs: the dynamic linker's cache names the new library. In a mount namespace
# of its own (root), where /usr/local is an empty tmpfs and /etc an overlay, so that the machine's
# own /usr/local and linker cache are never touched. Exit 77 (a skip) without root or mount
# namespaces.
#   test/consumer/ldconfig_test.sh BUILD_DIR [EXTRA_FLAGS]   (EXTRA_FLAGS: a sanitized build's)
set -euo pipefail
build="$(cd "$1" && pwd)"
flags="${2:-}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
[ "$(id -u)" = 0 ] || { echo "ldconfig: needs root (a mount namespace of its own)"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/upper" "$work/overlay-work"
unshare -m --propagation private true 2>/dev/null || { echo "ldconfig: no mount namespaces here"; exit 77; }
grep -rqs '^/usr/local/lib$' /etc/ld.so.conf /etc/ld.so.conf.d ||
  { echo "ldconfig: this system's linker does not search /usr/local/lib"; exit 77; }
# cmake and cc as found now: /usr/local is hidden inside.
tools="$work/tools"
mkdir -p "$tools"
ln -s "$(command -v cmake)" "$tools/cmake" && ln -s "$(command -v cc)" "$tools/cc"
set +e
unshare -m --propagation private env PATH="$tools:$PATH" bash -s "$build" "$flags" "$root" "$here" "$work" <<'INNER'
set -euo pipefail
build="$1" flags="$2" root="$3" here="$4" work="$5"
mkdir -p "$work/aux-cache"
mount -t tmpfs tmpfs /usr/local || exit 77
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$work/upper,workdir=$work/overlay-work" /etc || exit 77
mount --bind "$work/aux-cache" /var/cache/ldconfig 2>/dev/null || true  # ldconfig's own cache
# A cache that names nothing of /usr/local yet (an earlier quick start may have put it there).
rm -f /etc/ld.so.cache
bash "$root/scripts/install.sh" "$build" /usr/local 2>"$work/install.log" || { cat "$work/install.log" >&2; exit 1; }
# shellcheck disable=SC2086
cc $flags -o "$work/consumer" "$here/consumer.c" -I/usr/local/include -L/usr/local/lib -lmemcuda
! readelf -d "$work/consumer" | grep -q 'RPATH\|RUNPATH' || { echo "ldconfig: the program has an rpath" >&2; exit 1; }
env -u LD_LIBRARY_PATH "$work/consumer" || { rc=$?; echo "ldconfig: the program without an rpath exited $rc" >&2; exit 1; }
INNER
rc=$?
set -e
[ "$rc" = 77 ] && { echo "ldconfig: this machine cannot mount a tmpfs or an overlay here"; exit 77; }
[ "$rc" = 0 ] || exit "$rc"
echo "ldconfig: a program built against /usr/local without an rpath finds libmemcuda"
