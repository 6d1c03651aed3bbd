#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Checks that every source file of the project says its licence in its first lines, as an SPDX
# tag (SPDX-License-Identifier: Apache-2.0, with an SPDX-FileCopyrightText line), and that
# LICENSE is the Apache License 2.0. Lists the files that lack it; exit 1 if any.
#   scripts/check-licence.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -q "Apache License" LICENSE && grep -q "Version 2.0, January 2004" LICENSE ||
  { echo "check-licence: LICENSE is not the Apache License 2.0" >&2; exit 1; }
# The tracked sources when this is a git checkout, else those under the source folders.
patterns=('*.c' '*.cpp' '*.h' '*.cu' '*.cpp.in' '*.py' '*.sh' '*.lua' '*.cmake' '*.in'
          'CMakeLists.txt' '*/CMakeLists.txt' '*.bash' '*.default' '*.supp')
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- "${patterns[@]}" .ci/run)
else
  names=()
  for p in "${patterns[@]}"; do names+=(-o -name "$p"); done
  mapfile -t files < <(find lib tools test scripts python man CMakeLists.txt -type f \
                         \( "${names[@]:1}" \) | sort)
fi
missing=0
for f in "${files[@]}"; do
  # Formats with no comment: a Debian changelog (its licence is the package's copyright file).
  [ "$f" = scripts/debian/changelog.in ] && continue
  if ! head -n 4 "$f" | grep -q "SPDX-License-Identifier: Apache-2.0" ||
     ! head -n 4 "$f" | grep -q "SPDX-FileCopyrightText: "; then
    echo "$f: no SPDX licence header in its first lines"
    missing=1
  fi
done
if [ "$missing" = 1 ]; then exit 1; fi
echo "check-licence: ${#files[@]} files, each Apache-2.0"
