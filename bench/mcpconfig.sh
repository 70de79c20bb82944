#!/usr/bin/env bash
# bench/mcpconfig.sh -- start-up of a run with three per-run MCP servers
# (`sodactl run --mcp-config`, until all three answer initialize from
# inside the sandbox) against the agent's own stdio start of the same
# three servers (bench/mcp-init.mjs spawning them), and the same stdio
# start inside a sandbox (`--mcp-inside` of all three), in one run
# (`make bench-mcpconfig`, issue 15). The servers: server-everything and
# server-filesystem from npm (test/node, test/sandbox/agents) and soda's
# Go mcpecho. RUNS alternating runs of each (default 11), medians; the
# ratios are the figures, nothing is gated. Without systemd (no scope for
# the sandbox) the cgroup layer is waived, as the results say.
# Results: bench/results/<timestamp>/mcpconfig.txt and bench/results/latest-mcpconfig.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-11}
RUN=$ROOT/bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
cd "$ROOT"
(cd test/node && [ -d node_modules/@modelcontextprotocol/server-everything ] || npm ci --no-audit --no-fund >/dev/null)
(cd test/sandbox/agents && [ -d node_modules/@modelcontextprotocol/server-filesystem ] || npm install --no-audit --no-fund >/dev/null)
WORK=$(mktemp -d /var/lib/soda-bench-XXXXXX)
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
go build -o "$WORK/" ./cmd/soda-sandbox-init ./test/mcpecho
go build -tags soda_lean -o "$WORK/sodactl" ./cmd/sodactl  # the lean sodactl, as installed
go build -o "$WORK/sodactl-full" ./cmd/sodactl
cp bench/mcp-init.mjs "$WORK/"
mkdir "$WORK/proj"
cat >"$WORK/proj/.mcp.json" <<JSON
{"mcpServers": {
  "everything": {"command": "node", "args": ["$ROOT/test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"], "env": {"API_KEY": "bench"}},
  "files": {"command": "node", "args": ["$ROOT/test/sandbox/agents/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "$WORK/proj"]},
  "echo": {"command": "$WORK/mcpecho"}
}}
JSON
DEGRADED=()
[ -d /run/systemd/system ] || DEGRADED=(--allow-degraded cgroup)
RO=(--ro "$ROOT/test/node/node_modules" --ro "$ROOT/test/sandbox/agents/node_modules")
cd "$WORK/proj"
ms() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null 2>>"$RUN/mcpconfig.txt" || { echo "bench-mcpconfig: failed: $*" >&2; tail -5 "$RUN/mcpconfig.txt" >&2; exit 1; }; t1=$(date +%s%N); echo $(( (t1 - t0) / 1000 )); }
declare -a own perrun before inside
for i in $(seq "$RUNS"); do
  own+=("$(ms node "$WORK/mcp-init.mjs" .mcp.json)")
  perrun+=("$(ms "$WORK/sodactl" run --direct "${DEGRADED[@]}" --mcp-config .mcp.json --rw . "${RO[@]}" -- sh -c 'exec node '"$WORK"'/mcp-init.mjs "$SODA_MCP_CONFIG"')")
  before+=("$(ms "$WORK/sodactl" run --direct "${DEGRADED[@]}" --mcp-check before --mcp-config .mcp.json --rw . "${RO[@]}" -- sh -c 'exec node '"$WORK"'/mcp-init.mjs "$SODA_MCP_CONFIG"')")
  inside+=("$(ms "$WORK/sodactl" run --direct "${DEGRADED[@]}" --mcp-config .mcp.json --mcp-inside everything,files,echo --rw . "${RO[@]}" -- sh -c 'exec node '"$WORK"'/mcp-init.mjs "$SODA_MCP_CONFIG"')")
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
O=$(med "${own[@]}"); P=$(med "${perrun[@]}"); B=$(med "${before[@]}"); I=$(med "${inside[@]}")
{
  echo "# --mcp-config start-up ($(date -u +'%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, medians of $RUNS)"
  echo
  echo "Until all three servers (server-everything, server-filesystem, mcpecho) answer initialize."
  echo "${DEGRADED[*]:+The sandbox ran with ${DEGRADED[*]} (no systemd here).}"
  echo
  echo "| start-up | median | ratio to the agent's own |"
  echo "|---|---|---|"
  awk -v o="$O" -v p="$P" -v b="$B" -v i="$I" 'BEGIN {
    printf "| the agent starts them itself (stdio, no sandbox) | %.1f ms | 1.00 |\n", o/1000
    printf "| sodactl run --mcp-config: on the host, over HTTP from the sandbox, checked by first use (the default) | %.1f ms | %.2f |\n", p/1000, p/o
    printf "| the same with --mcp-check before (a probe, then the session: each server starts twice) | %.1f ms | %.2f |\n", b/1000, b/o
    printf "| sodactl run --mcp-inside (all three): the agent starts them in the sandbox | %.1f ms | %.2f |\n", i/1000, i/o
  }'
  echo
  echo "raw µs: own ${own[*]}; per-run ${perrun[*]}; before ${before[*]}; inside ${inside[*]}"
} | tee "$ROOT/bench/results/latest-mcpconfig.md" >>"$RUN/mcpconfig.txt"
cat "$ROOT/bench/results/latest-mcpconfig.md"
