#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# The Debian packages installed with dpkg -i into a clean root (--instdir, a dpkg database of its own, the
# host's C library underneath), then the README's tour run from there on host memory: the tools
# find their library through their RUNPATH, with no LD_LIBRARY_PATH.
#   test/package/deb_test.sh DEB_DIR
set -euo pipefail
debs="$1"
root="$(mktemp -d)"
redis_pid="" serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null || true
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
touch "$root/var/lib/dpkg/status"
# libc6 and friends are the host's, not in this root's database: --force-depends for those; the
# root has no shell for the maintainer scripts (ldconfig): they run outside it.
dpkg --admindir="$root/var/lib/dpkg" --instdir="$root" --force-depends --force-not-root --force-script-chrootless \
  --log=/dev/null -i "$debs"/*.deb >/dev/null 2>"$root/dpkg.err" || { cat "$root/dpkg.err" >&2; exit 1; }
dpkg --admindir="$root/var/lib/dpkg" -l | awk '/^ii/ {print "installed:", $2, $3}'
# What a distribution checks: lintian finds no error and no warning in any package, the debug
# symbols' included (the warnings it would give are fixed, or explained in an override).
if command -v lintian >/dev/null; then
  lintian --fail-on error,warning "$debs"/*.deb "$debs"/*.ddeb 2>&1 | grep -v "root privileges" || true
  lintian --fail-on error,warning "$debs"/*.deb "$debs"/*.ddeb >/dev/null 2>&1 ||
    { echo "lintian: errors or warnings above" >&2; exit 1; }
  echo "lintian: no errors, no warnings"
else
  echo "lintian: not checked (no lintian on this machine)"
fi
# The system user and group the service runs as, made by the postinst (systemd-sysusers, into
# this root).
if command -v systemd-sysusers >/dev/null; then
  grep -q '^memcuda:x:[0-9]*:[0-9]*:.*:/nonexistent:' "$root/etc/passwd" ||
    { echo "no system user memcuda in the root's /etc/passwd" >&2; exit 1; }
  grep -q '^memcuda:x:' "$root/etc/group" || { echo "no group memcuda" >&2; exit 1; }
  echo "user: memcuda made by the postinst"
fi
# The unit as systemd reads it, against this root (its ExecStart there); only the root's own
# missing system units (sysinit.target) may be reported.
if command -v systemd-analyze >/dev/null; then
  unit_report="$(systemd-analyze --root="$root" --man=no verify /usr/lib/systemd/system/mcd-serve.service 2>&1 |
                 grep -v "Unit sysinit.target not found" || true)"
  [ -z "$unit_report" ] || { echo "mcd-serve.service: $unit_report" >&2; exit 1; }
  echo "unit: verified by systemd-analyze"
  # Its sandbox: exposure 2.0 of 10 where Debian's redis-server unit has 1.2 (what it cannot
  # take is said in the unit).
  systemd-analyze security --offline=true --threshold=20 \
    "$root/usr/lib/systemd/system/mcd-serve.service" >"$root/security.txt" 2>&1 ||
    { cat "$root/security.txt" >&2; echo "mcd-serve.service: exposure above 2.0" >&2; exit 1; }
  echo "unit: $(tail -n 1 "$root/security.txt" | sed 's/^→ //')"
else
  echo "unit: not verified (no systemd-analyze on this machine)"
fi
bin="$root/usr/bin"
unset LD_LIBRARY_PATH
"$bin/mcd-serve" --version
export MCD_REDIS_URL="unix://$root/redis.sock"
redis-server --port 0 --unixsocket "$root/redis.sock" --save "" --appendonly no >/dev/null &
redis_pid=$!
for _ in $(seq 100); do [ -S "$root/redis.sock" ] && break; sleep 0.05; done
"$bin/mcd-serve" --devices cpu --node deb-test 2>"$root/serve.log" &
serve_pid=$!
for _ in $(seq 200); do grep -q "serving node" "$root/serve.log" && break; sleep 0.05; done
"$bin/mcd-ls" --servers -q | grep -cx deb-test >/dev/null
"$bin/mcd-create" weights --dtype f32 --shape 16,16 --device cpu --node deb-test
"$bin/mcd-get" weights --print 4 --node deb-test | grep -c "refcount:  2" >/dev/null
"$bin/mcd-ls" --node deb-test | grep -c weights >/dev/null
"$bin/mcd-rm" weights --node deb-test
"$bin/mcd-rm" weights --node deb-test | grep -c freed >/dev/null
"$bin/mcd-example-c" deb.c deb-test | grep -c "sum=1240" >/dev/null
[ -z "$("$bin/mcd-ls" -q)" ]
for page in man7/memcuda.7 man1/mcd-serve.1 man1/mcd-example-c.1; do
  gzip -t "$root/usr/share/man/$page.gz"
done
zcat "$root/usr/share/man/man7/memcuda.7.gz" | grep -c '^\.TH MEMCUDA 7' >/dev/null
[ -s "$root/usr/share/doc/memcuda-tools/copyright" ] && [ -s "$root/usr/share/doc/libmemcuda-dev/changelog.gz" ]
dpkg --admindir="$root/var/lib/dpkg" --instdir="$root" --force-not-root --force-script-chrootless --log=/dev/null -r memcuda-tools libmemcuda-dev >/dev/null
[ ! -e "$bin/mcd-serve" ]
echo "deb: ok"
