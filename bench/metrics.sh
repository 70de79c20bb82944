#!/usr/bin/env bash
# bench/metrics.sh -- the bridge's throughput with its Prometheus metrics on
# against the same build with them off, in one run (`make bench-metrics`,
# issue 16): internal/mcpbridge's BenchmarkRelayEcho (one session, calls
# back to back) and BenchmarkRelayEchoParallel (8 sessions, 4 goroutines
# per CPU), tools/call to the mcpecho child through the front and the
# bridge. The sub-benchmarks alternate (COUNT rounds, default 10); the
# figure is the ratio of median calls per second, on over off. Target:
# at most 3 % fewer calls per second. Nothing is gated on it.
# Results: bench/results/<timestamp>/metrics.txt and bench/results/latest-metrics.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COUNT=${COUNT:-10}
RUN=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
cd "$ROOT"
go test -run '^$' -bench 'RelayEcho' -benchtime 3000x -count "$COUNT" ./internal/mcpbridge/ | tee "$RUN/metrics.txt" >/dev/null
{
  echo "# Bridge throughput, metrics on against off ($(date -u +'%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, medians of $COUNT alternating rounds)"
  echo
  echo "| benchmark | off: calls/s | on: calls/s | on / off |"
  echo "|---|---|---|---|"
  awk '
    /^BenchmarkRelayEcho/ {
      split($1, p, "/"); name = p[1]; sub(/-[0-9]+$/, "", p[2]); on = (p[2] ~ /true/)
      v = 1e9 / $3; n[name, on]++; x[name, on, n[name, on]] = v; names[name] = 1
    }
    function median(name, on,   i, j, t, k) {
      k = n[name, on]
      for (i = 1; i <= k; i++) a[i] = x[name, on, i]
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    END {
      for (name in names) {
        off = median(name, 0); on = median(name, 1)
        printf "| %s | %.0f | %.0f | %.3f |\n", name, off, on, on / off
      }
    }' "$RUN/metrics.txt" | sort
  echo
  echo "Target: on / off >= 0.97."
} | tee "$ROOT/bench/results/latest-metrics.md" >>"$RUN/metrics.txt"
cat "$ROOT/bench/results/latest-metrics.md"
