#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# The system calls mcd-serve.service allows, one a line: its SystemCallFilter= lines, in order
# (the first names the allow-list; "~" lines take groups out of it; this unit's order, allow then
# deny, is all this reads), each group expanded through
# `systemd-analyze syscall-filter`, systemd's own definition of it. For test/sandbox, which runs
# the server inside the same filter where no systemd runs.
#   scripts/systemd/unit-syscalls.sh [UNIT_FILE]   (default: the unit's template)
set -euo pipefail
unit="${1:-$(dirname "$0")/mcd-serve.service.in}"
command -v systemd-analyze >/dev/null ||
  { echo "unit-syscalls: systemd-analyze not found (apt-get install systemd)" >&2; exit 69; }
declare -A seen
expand() {  # the system calls of a name or group, groups expanded
  local item="$1"
  if [[ "$item" != @* ]]; then echo "$item"; return; fi
  [ -n "${seen[$item]:-}" ] && return
  seen[$item]=1
  local line members
  members="$(systemd-analyze syscall-filter "$item")" ||
    { echo "unit-syscalls: systemd-analyze does not know $item" >&2; exit 65; }
  while read -r line; do
    case "$line" in ''|'#'*|"$item") ;; *) expand "$line" ;; esac
  done <<<"$members"
}
allowed="" denied=""
while IFS= read -r value; do
  for item in $value; do
    seen=()
    if [[ "$item" == '~'* ]]; then
      list="$(expand "${item#\~}")"; denied+="$list"$'\n'
    else
      list="$(expand "$item")"; allowed+="$list"$'\n'
    fi
  done
done < <(sed -n 's/^SystemCallFilter=//p' "$unit")
[ -n "${allowed//$'\n'/}" ] || { echo "unit-syscalls: $unit has no allow-list" >&2; exit 65; }
comm -23 <(sort -u <<<"$allowed" | sed '/^$/d') <(sort -u <<<"$denied" | sed '/^$/d')
