#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# The bash completion offers each tool's options as its --help lists them: nothing a tool
# refuses (mcd-ls --timeout-ms once was), nothing it has left out.
#   test/tools/completion_test.sh BIN_DIR
set -euo pipefail
export PATH="$1:$PATH"
# shellcheck source=/dev/null
source "$(dirname "$0")/../../scripts/completion/memcuda.bash"
complete_for() {  # the words offered for "TOOL WORD"
  COMP_WORDS=("$1" "$2"); COMP_CWORD=1; COMPREPLY=()
  _mcd_complete
  printf '%s\n' "${COMPREPLY[@]}" | sort
}
fail=0
for tool in mcd-create mcd-get mcd-rm mcd-ls mcd-serve mcd-bench mcd-d3d-probe; do
  offered="$(complete_for "$tool" -)"
  [ -n "$offered" ] || { echo "$tool: nothing offered"; fail=1; continue; }
  # Read whole once: `grep -q` on a pipe stops reading at its match, and the tool's write then
  # fails (SIGPIPE, which pipefail reports).
  help="$("$tool" --help)"
  # Every option offered is accepted: with --help after it the tool prints its help and exits
  # 0, where an unknown option would be a usage error (64).
  while read -r option; do
    if ! "$tool" "$option" --help >/dev/null 2>&1 && ! grep -qE "(^|[ ,])$option([ ,=]|$)" <<< "$help"; then
      echo "$tool: offers $option, which it refuses"; fail=1
    fi
  done <<< "$offered"
done
expect() {  # TOOL WORD yes|no
  if grep -qx -- "$2" <<< "$(complete_for "$1" -)"; then got=yes; else got=no; fi
  [ "$got" = "$3" ] || { echo "$1: $2 offered: $got, expected $3"; fail=1; }
}
expect mcd-ls --servers yes
expect mcd-ls --prometheus yes
expect mcd-ls --timeout-ms no
expect mcd-get --detached yes
expect mcd-get --owner-pid yes
expect mcd-create --lifetime yes
expect mcd-serve --command-socket yes
[ "$(complete_for mcd-create --life)" = "--lifetime" ] || { echo "prefix completion"; fail=1; }
COMP_WORDS=(mcd-create --dtype b); COMP_CWORD=2; _mcd_complete
[ "${COMPREPLY[*]}" = "bf16 bool" ] || { echo "dtype values: ${COMPREPLY[*]}"; fail=1; }
# --device cpu only where the tool takes it: mcd-create; mcd-bench and mcd-d3d-probe measure GPUs.
for tool_want in mcd-create:cpu mcd-bench: mcd-d3d-probe:; do
  COMP_WORDS=("${tool_want%%:*}" --device c); COMP_CWORD=2; _mcd_complete || true  # none: status 1
  [ "${COMPREPLY[*]}" = "${tool_want#*:}" ] ||
    { echo "${tool_want%%:*} --device offers '${COMPREPLY[*]}'"; fail=1; }
done
COMP_WORDS=(mcd-ls --sort b); COMP_CWORD=2; _mcd_complete
[ "${COMPREPLY[*]}" = "bytes" ] || { echo "sort keys: ${COMPREPLY[*]}"; fail=1; }
[ "$fail" = 0 ] || exit 1
echo "completion: ok"
