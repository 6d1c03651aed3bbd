#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# The quick start: install the dependencies, build, install (to /usr/local unless PREFIX is set),
# then run the main job: mcd-serve, with a private Redis unless one is configured
# (MCD_REDIS_URL or REDIS_URL). Stop it with Ctrl-C: it frees every tensor it owns.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
prefix="${PREFIX:-/usr/local}"
scripts/install.sh build "$prefix"

args=()
if [ -z "${MCD_REDIS_URL:-}${REDIS_URL:-}" ]; then args+=(--spawn-redis); fi
cat >&2 <<MSG
quickstart: starting mcd-serve ${args[*]:-} (Ctrl-C to stop). In another terminal:
    mcd-create demo --dtype f32 --shape 2,3 --device cpu     # or --device 0 on a GPU
    mcd-ls
    mcd-get demo --no-ref --print 6   # look without taking a reference
    mcd-rm demo
MSG
exec "$prefix/bin/mcd-serve" "${args[@]}"
