#!/usr/bin/env bash
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
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
# libc6 and friends are the host's, not in this root's database: --force-depends for those; the
# root has no shell for the maintainer scripts (ldconfig): they run outside it.
dpkg --admindir="$root/var/lib/dpkg" --instdir="$root" --force-depends --force-not-root --force-script-chrootless \
  --log=/dev/null -i "$debs"/*.deb >/dev/null 2>"$root/dpkg.err" || { cat "$root/dpkg.err" >&2; exit 1; }
dpkg --admindir="$root/var/lib/dpkg" -l | awk '/^ii/ {print "installed:", $2, $3}'
# The unit as systemd reads it, against this root (its ExecStart there); only the root's own
# missing system units (sysinit.target) may be reported.
if command -v systemd-analyze >/dev/null; then
  unit_report="$(systemd-analyze --root="$root" --man=no verify /usr/lib/systemd/system/mcd-serve.service 2>&1 |
                 grep -v "Unit sysinit.target not found" || true)"
  [ -z "$unit_report" ] || { echo "mcd-serve.service: $unit_report" >&2; exit 1; }
  echo "unit: verified by systemd-analyze"
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
"$bin/mcd-ls" --servers -q | grep -qx deb-test
"$bin/mcd-create" weights --dtype f32 --shape 16,16 --device cpu --node deb-test
"$bin/mcd-get" weights --print 4 --node deb-test | grep -q "refcount:  2"
"$bin/mcd-ls" --node deb-test | grep -q weights
"$bin/mcd-rm" weights --node deb-test
"$bin/mcd-rm" weights --node deb-test | grep -q freed
"$bin/mcd-example-c" deb.c deb-test | grep -q "sum=1240"
[ -z "$("$bin/mcd-ls" -q)" ]
man -l "$root/usr/share/man/man7/memcuda.7" >/dev/null 2>&1 || [ -s "$root/usr/share/man/man7/memcuda.7" ]
dpkg --admindir="$root/var/lib/dpkg" --instdir="$root" --force-not-root --force-script-chrootless --log=/dev/null -r memcuda-tools libmemcuda-dev >/dev/null
[ ! -e "$bin/mcd-serve" ]
echo "deb: ok"
