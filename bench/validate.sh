#!/usr/bin/env bash
# bench/validate.sh -- a 1 KiB shell script validated through
# soda-validated over Streamable HTTP against the same shellcheck run
# directly, and a cold `sodactl run --direct -- true`, in one run
# (`make bench-validate`; installs Debian's shellcheck if it is missing). Target (issue 14): the time
# added at most 1.5 times the cold run's overhead. Nothing is gated.
# Results: bench/results/<timestamp>/validate.txt and bench/results/latest-validate.md.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
cd "$ROOT" || exit 1
# The validator measured is Debian's shellcheck, at the path the kind names.
if [ ! -x /usr/bin/shellcheck ]; then
  echo "[bench-validate] installing shellcheck (apt-get)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck; } >"$RUN/apt.log" 2>&1 ||
    { tail -n 5 "$RUN/apt.log" >&2; echo "bench-validate: could not install shellcheck; install it (apt-get install shellcheck) and run again" >&2; exit 1; }
fi
if ! SODA_BENCH=1 SODA_BENCH_OUT=$ROOT/bench/results/latest-validate.md go test -count=1 -run '^TestBenchValidate$' -v ./test/validate/ >"$RUN/validate.txt" 2>&1; then
  tail -n 40 "$RUN/validate.txt" >&2
  echo "bench-validate: TestBenchValidate failed; see $RUN/validate.txt" >&2
  exit 1
fi
grep -q -- '--- SKIP' "$RUN/validate.txt" && { grep -A2 -- '--- SKIP' "$RUN/validate.txt" >&2; exit 1; }
cat "$ROOT/bench/results/latest-validate.md"
