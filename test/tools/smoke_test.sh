#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# scripts/gpu-smoke.sh fails, with the exit code its header documents, on each failure it checks
# for: wrong bytes read back, a compute process that computed nothing or the wrong thing, a
# tensor or a host object left behind, a server that does not start, a tool that exits non-zero.
# Each is injected by a wrapper that stands in for one tool in a copy of BIN_DIR. And the CI
# recipe's smoke step in docs/ci.md fails when the smoke test does, though it pipes it into tee.
#   test/tools/smoke_test.sh BIN_DIR
set -euo pipefail
real="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0

# A BIN_DIR whose tools run the real ones.
bin_for() {  # CASE
  mkdir -p "$work/$1"
  for tool in mcd-serve mcd-create mcd-get mcd-ls mcd-rm mcd-example-c mcd-example-scale; do
    printf '#!/usr/bin/env bash\nexec "%s/%s" "$@"\n' "$real" "$tool" >"$work/$1/$tool"
    chmod +x "$work/$1/$tool"
  done
}
# TOOL of CASE runs the script on stdin instead, in which $real is the real tool.
stand_in() {  # CASE TOOL
  { printf '#!/usr/bin/env bash\nreal="%s/%s"\n' "$real" "$2"; cat; } >"$work/$1/$2"
}

# gpu-smoke.sh --cpu on the BIN_DIR of CASE exits CODE, and says TEXT.
expect() {  # CASE CODE TEXT
  local rc=0
  bash "$root/scripts/gpu-smoke.sh" --cpu "$work/$1" >"$work/$1.out" 2>&1 || rc=$?
  if [ "$rc" != "$2" ]; then
    echo "$1: exit $rc, expected $2:"
    tail -n 30 "$work/$1.out"
    fail=1
  elif ! grep -qF -- "$3" "$work/$1.out"; then
    echo "$1: exit $rc, but no \"$3\" in:"
    tail -n 30 "$work/$1.out"
    fail=1
  else
    echo "$1: exit $rc, \"$3\""
  fi
  # The logs of a failure past the usage checks are kept, and named: this test removes them.
  kept="$(sed -n 's/^gpu-smoke: the logs and files are kept in //p' "$work/$1.out")"
  if [ "$rc" != 0 ] && [ "$rc" != 64 ]; then
    if [ -z "$kept" ] || [ ! -d "$kept" ]; then echo "$1: its logs were not kept"; fail=1; fi
    [ -z "$kept" ] || rm -rf "$kept"
  fi
}

bin_for pass
expect pass 0 "gpu-smoke --cpu: PASS"

# Every byte of the middle 16 of the file written is inverted: wrong whatever it held.
bin_for wrong_bytes
stand_in wrong_bytes mcd-get <<'SH'
"$real" "$@" || exit
out=""; prev=""
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
[ -z "$out" ] || python3 -c '
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
m = len(b) // 2
b[m:m + 16] = bytes(x ^ 0xFF for x in b[m:m + 16])
open(p, "wb").write(b)' "$out"
SH
expect wrong_bytes 2 "FAIL: read-back: "

bin_for computed_nothing
stand_in computed_nothing mcd-example-scale <<<'echo "pretends to scale"'
expect computed_nothing 2 "FAIL: computed: "

bin_for c_example_wrong
stand_in c_example_wrong mcd-example-c <<<'echo "smoke.c refcount=2 sum=1239 listed=1"'
expect c_example_wrong 2 "FAIL: the C example printed"

bin_for tensor_left
stand_in tensor_left mcd-rm <<<'echo "pretends to remove"'
expect tensor_left 3 "FAIL: tensors left after mcd-rm: smoke.t"

# A host object named after the node (mcd-rm NAME --node NODE), left where the server's go.
bin_for object_left
stand_in object_left mcd-rm <<<'"$real" "$@" && : >"/dev/shm/smoke-test-$3"'
expect object_left 3 "FAIL: host objects left in /dev/shm: smoke-test-smoke-"
rm -f /dev/shm/smoke-test-smoke-*

bin_for server_fails
stand_in server_fails mcd-serve <<<'echo "mcd-serve: error: injected: cannot start" >&2; exit 69'
expect server_fails 69 "mcd-serve: error: injected: cannot start"
grep -qF "FAIL: mcd-serve did not start" "$work/server_fails.out" || { echo "server_fails: no FAIL line"; fail=1; }

bin_for list_fails
stand_in list_fails mcd-ls <<<'exit 70'
expect list_fails 1 "mcd-ls\" --node \"\$node\"\` exited 70"

bin_for create_fails
stand_in create_fails mcd-create <<<'echo "mcd-create: error: injected" >&2; exit 74'
expect create_fails 1 "exited 74"

# A BIN_DIR without the tools is refused, not replaced by the tools on PATH.
mkdir -p "$work/empty"
expect empty 64 "no mcd-serve in"

# The CI recipe: the smoke step of the workflow in docs/ci.md, run as GitHub runs a step of
# `shell: bash` (bash -eo pipefail) and as it runs one without (bash -e), with a smoke test that
# fails: the step fails too.
step="$(awk '/- name: Smoke test/ {on = 1; next} on && /- name:/ {exit} on' "$root/docs/ci.md")"
grep -q "shell: bash" <<<"$step" || { echo "ci.md: the smoke step does not say shell: bash"; fail=1; }
run="$(sed -n 's/^ *run: //p' <<<"$step")"
[ -n "$run" ] || { echo "ci.md: no run line in the smoke step"; fail=1; }
mkdir -p "$work/ci/scripts" "$work/ci/build"
printf '#!/usr/bin/env bash\necho "smoke: failing"; exit 2\n' >"$work/ci/scripts/gpu-smoke.sh"
for shell in "bash -eo pipefail" "bash -e"; do
  rc=0
  (cd "$work/ci" && $shell -c "$run" >/dev/null 2>&1) || rc=$?
  if [ "$rc" = 0 ]; then echo "ci.md: the smoke step passes under $shell when the smoke test fails"; fail=1; fi
done
grep -q "smoke: failing" "$work/ci/build/gpu-smoke.log" || { echo "ci.md: no log written"; fail=1; }

if [ "$fail" != 0 ]; then exit 1; fi
echo "smoke checks: ok"
