#!/usr/bin/env bash
# bench/metrics.sh -- the bridge's throughput with its Prometheus metrics on
# against the same build with them off, in one run (`make bench-metrics`,
# issue 16): internal/mcpbridge's BenchmarkRelayEchoPaired, tools/call to
# the mcpecho child through the front and the bridge, against four
# bridges at once (off, on, on, off), one call to each per iteration in
# rotating order, each call timed, so that the drift of a shared machine
# hits both modes alike. COUNT rounds (default 9) of 3000 iterations; the
# figure is the median of the rounds' on/off ratios of calls per second.
# Target: at most 3 % fewer calls per second (>= 0.97). Nothing is gated.
# Results: bench/results/<timestamp>/metrics.txt and bench/results/latest-metrics.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COUNT=${COUNT:-9}
RUN=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
cd "$ROOT"
go test -run '^$' -bench 'RelayEchoPaired' -benchtime 3000x -count "${COUNT:-9}" ./internal/mcpbridge/ | tee "$RUN/metrics.txt" >/dev/null
{
  echo "# Bridge throughput, metrics on against off ($(date -u +'%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $COUNT paired rounds of 3000 x 4 calls)"
  echo
  echo "| round | off: calls/s | on: calls/s | on / off |"
  echo "|---|---|---|---|"
  awk '/^BenchmarkRelayEchoPaired/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "off-calls/s") off = $i; if ($(i+1) == "on-calls/s") on = $i; if ($(i+1) == "on/off") r = $i }; n++; printf "| %d | %.0f | %.0f | %.3f |\n", n, off, on, r }' "$RUN/metrics.txt"
  echo
  awk '/^BenchmarkRelayEchoPaired/ { for (i = 1; i <= NF; i++) if ($(i+1) == "on/off") print $i }' "$RUN/metrics.txt" | sort -n |
    awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "Median on / off: %.3f (%.1f %% %s calls per second); target >= 0.970.\n", m, (m < 1 ? (1 - m) : (m - 1)) * 100, (m < 1 ? "fewer" : "more") }'
} | tee "$ROOT/bench/results/latest-metrics.md" >>"$RUN/metrics.txt"
cat "$ROOT/bench/results/latest-metrics.md"
