#!/usr/bin/env bash
# bench/llm.sh -- the model gateway (internal/llmgateway) against the
# direct path, in one run (`make bench-llm`, issue 25): a Go client doing
# keep-alive requests to a loopback TLS upstream playing a provider,
# directly over TLS, and through the gateway (plain HTTP to it, TLS from
# it), request by request in alternating order (TestBenchLLM):
#   - a small JSON message: added latency, p50 (target: <= +1 ms);
#   - an event stream: added time to its first byte, p50 (target: <= +1 ms);
#   - a 64 MiB body: throughput through the gateway's terminated TLS over
#     the direct stream's (target: >= 0.50).
# Then, unless GOBENCH=0, the per-path Go benchmarks (BenchmarkDirectJSON,
# BenchmarkGatewayJSON, ...), BENCHTIME each (default 2s). SODA_BENCH_N
# scales the paired run's request counts (default 1: 3000, 1000, 10).
# Machines differ: the ratios are the figures, and nothing is gated.
# Results: bench/results/<timestamp>/llm.txt and bench/results/latest-llm.md.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
OUT=$ROOT/bench/results/latest-llm.md
mkdir -p "$RUN"
cd "$ROOT" || exit 1
go test -c -o "$RUN/llmgateway.test" ./internal/llmgateway/ || exit 1
before=$(uptime)
if ! (cd internal/llmgateway && SODA_BENCH=1 SODA_BENCH_OUT=$OUT "$RUN/llmgateway.test" -test.count=1 -test.run '^TestBenchLLM$' -test.v) >"$RUN/llm.txt" 2>&1; then
  tail -n 40 "$RUN/llm.txt" >&2
  echo "bench-llm: TestBenchLLM failed; see $RUN/llm.txt" >&2
  exit 1
fi
grep -q -- '--- SKIP' "$RUN/llm.txt" && { grep -A2 -- '--- SKIP' "$RUN/llm.txt" >&2; exit 1; }
if [ "${GOBENCH:-1}" != 0 ]; then
  (cd internal/llmgateway && "$RUN/llmgateway.test" -test.run '^$' -test.bench . -test.benchtime "${BENCHTIME:-2s}") >>"$RUN/llm.txt" 2>&1
fi
after=$(uptime)
{
  echo
  echo "uptime before: \`${before# }\`  "
  echo "uptime after:  \`${after# }\`"
  if [ "${GOBENCH:-1}" != 0 ]; then
    echo
    echo "Per-path Go benchmarks (each path alone, ${BENCHTIME:-2s} each):"
    echo
    echo '```'
    grep -E '^Benchmark' "$RUN/llm.txt"
    echo '```'
  fi
} >>"$OUT"
rm -f "$RUN/llmgateway.test"
cat "$OUT"
