#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Checks that every C, C++ and CUDA source of the project is as .clang-format lays it out
# (clang-format 14, Debian 12's: other versions lay some constructs out differently).
#   scripts/check-format.sh         # lists the files that differ; exit 1 if any
#   scripts/check-format.sh --fix   # formats them in place
# Exit 77 (a skip for CTest) when clang-format 14 is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" >/dev/null &&
     "$candidate" --version | grep -q 'version 14\.'; then
    fmt=$candidate
    break
  fi
done
if [ -z "$fmt" ]; then
  echo "check-format: clang-format 14 not found (apt-get install clang-format); not checked" >&2
  exit 77
fi
# The tracked sources when this is a git checkout, else those under the source folders.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.c' '*.cpp' '*.h' '*.cu' '*.cpp.in')
else
  mapfile -t files < <(find lib tools test scripts -type f \
                         \( -name '*.c' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' \
                            -o -name '*.cpp.in' \) | sort)
fi
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i --style=file "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$fmt" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "check-format: $f is not formatted (scripts/check-format.sh --fix)"
    bad=1
  fi
done
exit $bad
