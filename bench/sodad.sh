#!/usr/bin/env bash
# bench/sodad.sh -- a sandbox created through sodad against a direct
# `sodactl run`, in one run, in a throw-away systemd box (real systemd,
# D-Bus and polkit). Run as root from the repository (`make bench-sodad`).
#
# It runs test/e2e's TestSodad, which installs sodad as the package does and
# measures, median of 25, each over a plain `true` by the same path:
#   - `sodactl run --profile dev -- true` as an unprivileged user, through
#     sodad (D-Bus round trips and the polkit check included);
#   - `sodactl run --direct -- true` as root, in-process;
#   - connect + CreateSandbox until the command runs (test/sodadcall);
#   - sodad's polkit checks (SODA_TOOK in its journal).
# Target (issue 27): through sodad at most 1.3x the direct overhead; alice's
# runs (setpriv --init-groups) are measured over her own plain `true`.
# Results: bench/results/<timestamp>/sodad.txt and bench/results/latest-sodad.md.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "bench-sodad: must run as root (the systemd box needs it)" >&2; exit 1; }
RUN=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
cd "$ROOT" || exit 1
if ! SODA_E2E=1 go test -count=1 -run '^TestSodad$' -v ./test/e2e/ >"$RUN/sodad.txt" 2>&1; then
  tail -n 40 "$RUN/sodad.txt" >&2
  echo "bench-sodad: TestSodad failed; see $RUN/sodad.txt" >&2
  exit 1
fi
{
  echo "# sodad benchmark"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) · $(nproc) cores · Linux $(uname -r) · systemd box (test/box/sdbox)"
  echo
  grep -o 'figures: .*' "$RUN/sodad.txt" | sed 's/^figures: /- /'
} >"$RUN/sodad.md"
cp "$RUN/sodad.md" "$ROOT/bench/results/latest-sodad.md"
cat "$ROOT/bench/results/latest-sodad.md"
