#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Runs the whole test suite: builds with AddressSanitizer + UBSan into build-asan and runs every
# CTest test. GPU-labelled tests run on a machine with a CUDA device and are reported as skipped
# elsewhere. Then the fuzz targets run for a minute (MCD_FUZZ_SECONDS). Extra arguments go to
# ctest (e.g. -L cpu, -R Lifecycle), and then the fuzzing is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { echo "test: error: redis-server not found; run scripts/install-deps.sh" >&2; exit 69; }
scripts/build.sh build-asan -DMCD_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
# cudart probes for a driver at start; LeakSanitizer's reports from the driver stub are not ours.
export ASAN_OPTIONS="${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
(cd build-asan && ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@")
# Then a minute of fuzzing of every parser of outside input (a bounded run; see scripts/fuzz.sh).
if [ $# -eq 0 ]; then scripts/fuzz.sh "${MCD_FUZZ_SECONDS:-60}"; fi
