#!/bin/bash
# Runs the systemd integration tests of internal/cgroup (transient scope per
# child) and internal/child (a supervised child in a scope) against a real
# systemd: builds both packages' test binaries on the host, boots a
# throw-away systemd-box per cgroup mode, runs the binaries inside with
# SODA_SYSTEMD_TEST=1 and tears the box down again, whatever happens.
#
# usage: test/systemd/run-child-scope-test.sh [hybrid|v2]... [-- go-test-flags]
#   default modes: hybrid (limits enforced) and v2 (limits only accepted).
#   example: test/systemd/run-child-scope-test.sh hybrid -- -test.run 'MemoryMax'
# env: SYSTEMD_BOX  path of the systemd-box tool
#                   (default /work/shared/tools/systemd-box)
# Exit: 0 all passed (or skipped: not root / no systemd-box), 1 a test failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
box_tool=${SYSTEMD_BOX:-/work/shared/tools/systemd-box}

modes=()
while [ $# -gt 0 ]; do
	case $1 in
	hybrid | v2) modes+=("$1") ;;
	--) shift; break ;;
	*) echo "usage: $0 [hybrid|v2]... [-- go-test-flags]" >&2; exit 2 ;;
	esac
	shift
done
[ ${#modes[@]} -gt 0 ] || modes=(hybrid v2)
test_flags=("$@")

if [ "$(id -u)" != 0 ]; then
	echo "SKIP: the systemd scope tests need root (to boot systemd in a box)"
	exit 0
fi
if [ ! -x "$box_tool" ]; then
	echo "SKIP: systemd-box not found at $box_tool (set SYSTEMD_BOX)"
	exit 0
fi

tmp=$(mktemp -d /var/tmp/soda-child-scope.XXXXXX)
chmod 755 "$tmp" # one test runs the binary as nobody
box=""
cleanup() {
	local rc=$?
	if [ -n "$box" ]; then
		"$box_tool" down "$box" >/dev/null 2>&1 || echo "warning: systemd-box down $box failed" >&2
	fi
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pkgs=(cgroup child)
echo "== building the test binaries on the host"
for pkg in "${pkgs[@]}"; do
	(cd "$root" && go test -c -o "$tmp/$pkg.test" "./internal/$pkg")
done

failed=()
for mode in "${modes[@]}"; do
	box="$tmp/box-$mode"
	echo "== booting systemd-box (--cgroup $mode)"
	"$box_tool" up --cgroup "$mode" --bind "$root" --bind "$tmp" "$box" >/dev/null
	ok=1
	for pkg in "${pkgs[@]}"; do
		echo "== running internal/$pkg tests in the box (--cgroup $mode)"
		# shellcheck disable=SC2016 # $1/$@ expand in the inner shell
		"$box_tool" exec "$box" -- sh -c 'cd "$1" && shift && exec env SODA_SYSTEMD_TEST=1 "$@"' sh \
			"$root/internal/$pkg" "$tmp/$pkg.test" -test.count=1 -test.v "${test_flags[@]}" || ok=0
	done
	if [ "$ok" = 1 ]; then
		echo "== PASS (--cgroup $mode)"
	else
		echo "== FAIL (--cgroup $mode)"
		failed+=("$mode")
		"$box_tool" exec "$box" -- journalctl -b --no-pager -n 60 -u 'soda-*' -u init.scope 2>/dev/null | tail -60 || true
	fi
	"$box_tool" down "$box" >/dev/null
	box=""
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "RESULT: FAIL in mode(s): ${failed[*]}"
	exit 1
fi
echo "RESULT: PASS in mode(s): ${modes[*]}"
