#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Configures and builds memcuda.  Usage: scripts/build.sh [BUILD_DIR] [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$cuda_home/bin:$PATH"
cmake -S . -B "$build_dir" -DCMAKE_CUDA_COMPILER="$cuda_home/bin/nvcc" "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
