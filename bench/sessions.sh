#!/usr/bin/env bash
# bench/sessions.sh -- persistent sandbox sessions (sodactl sandbox mcp
# --direct) against a cold `sodactl run --direct -- true`, in one run
# (`make bench-sessions`). It runs test/session's TestBenchSessions with
# the go-sdk client over the real stdio subprocess:
#   - warm sandbox_exec of `true`, p50 of 100 (target: <= 1/4 of cold);
#   - sandbox_create with 100 seed files, median of 6 (target: <= cold);
#   - sandbox_diff over 1,000 files, median of 10 (target: <= cold);
#   - the resident memory of an idle session (server and sandbox).
# Machines differ several-fold in process start-up: the ratios are the
# figures, and nothing is gated on a time.
# Results: bench/results/<timestamp>/sessions.txt and bench/results/latest-sessions.md.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
cd "$ROOT" || exit 1
if ! SODA_BENCH=1 SODA_BENCH_OUT=$ROOT/bench/results/latest-sessions.md go test -count=1 -run '^TestBenchSessions$' -v ./test/session/ >"$RUN/sessions.txt" 2>&1; then
  tail -n 40 "$RUN/sessions.txt" >&2
  echo "bench-sessions: TestBenchSessions failed; see $RUN/sessions.txt" >&2
  exit 1
fi
grep -q -- '--- SKIP' "$RUN/sessions.txt" && { grep -A2 -- '--- SKIP' "$RUN/sessions.txt" >&2; exit 1; }
cat "$ROOT/bench/results/latest-sessions.md"
