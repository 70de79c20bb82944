#!/usr/bin/env bash
# bench/run.sh -- soda-mcpd side by side with the stdio->Streamable HTTP bridges
# a user would pick instead (supergateway, mcp-proxy), all on 127.0.0.1.
# Run from anywhere (`make bench` runs it from the repo root):
#
#   [REPS=3] [COLD_RUNS=21] [COLD_RUNS_PEERS=7] [BASEPORT=18300] \
#   [BRIDGES="soda-mcpd supergateway mcp-proxy"] [SECTIONS="echo node cold"] bash bench/run.sh
#
# What it measures, in one run (medians over REPS repetitions):
#  echo  Go client (bin/mcpload) and the Go echo child (bin/mcpecho):
#        (a) added latency: stdio straight to mcpecho vs each bridge in front of
#            it, 1 session x 2000 calls: p50/p99 and their deltas;
#        (b) throughput: 8 sessions x 500 calls, ratio soda-mcpd/peer;
#        (d) RSS of the bridge process alone (children excluded) idle and with
#            8 open sessions, and of its whole process tree.
#  node  The TypeScript-SDK client bench/mcp-load.mjs (opens the GET stream like
#        real clients) against @modelcontextprotocol/server-everything behind
#        each bridge: S=1,N=500 and S=8,N=200 (plus server-everything's own
#        HTTP mode, no bridge, as a reference).
#  cold  (c) spawn -> first initialize answered, median of COLD_RUNS (soda-mcpd)
#        and COLD_RUNS_PEERS (peers), mcpecho child.
# Results: bench/results/<timestamp>/results.jsonl and the markdown table
# bench/results/latest.md, which is also printed.
#
# Peers come from npm into bench/node_modules (versions pinned in
# bench/package-lock.json). Every server started here listens on 127.0.0.1
# only, and every process started is stopped on exit, whatever happens.
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
BIN=$ROOT/bin
REPS=${REPS:-3}
COLD_RUNS=${COLD_RUNS:-21}
COLD_RUNS_PEERS=${COLD_RUNS_PEERS:-7}
BASEPORT=${BASEPORT:-18300}
WARM=${WARM:-100}
BRIDGES=${BRIDGES:-"soda-mcpd supergateway mcp-proxy"}
SECTIONS=${SECTIONS:-"echo node cold"}
STAMP=$(date +%Y%m%d-%H%M%S)
RUN=$BENCH/results/$STAMP
NM=$BENCH/node_modules
SG=$NM/supergateway/dist/index.js
MP=$NM/mcp-proxy/dist/bin/mcp-proxy.mjs
EV=$NM/@modelcontextprotocol/server-everything/dist/index.js
LOOPBACK="$BENCH/loopback-only.cjs"

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- cleanup --
STARTED=()   # process-group leaders we started (setsid)
SEEN=()      # every descendant pid seen when stopping them
LOADPID=     # the load generator running now (it stops its own children on SIGTERM)
WORK=$(mktemp -d /tmp/soda-bench.XXXXXX)

# tree_pids PID -> PID and all its descendants (children may leave the process
# group: supergateway starts its children detached, soda-mcpd moves them to
# their own groups or cgroups).
tree_pids() {
  ps -eo pid=,ppid= | awk -v r="$1" '{p[$1]=$2} END{t[r]=1; do {c=0; for (k in p) if (!(k in t) && (p[k] in t)) {t[k]=1; c++}} while (c); for (k in t) print k}'
}
alive() { kill -0 "$1" 2>/dev/null; }

# stop_group PID: SIGTERM the group (the bridge cleans up its children), then
# SIGKILL the group and every descendant seen before, and reap the leader.
stop_group() {
  local pid=$1 pids p i
  alive "$pid" || { wait "$pid" 2>/dev/null; return 0; }
  pids=$(tree_pids "$pid")
  SEEN+=($pids)
  kill -TERM -- -"$pid" 2>/dev/null
  for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
  kill -KILL -- -"$pid" 2>/dev/null
  for p in $pids; do kill -KILL "$p" 2>/dev/null; done
  wait "$pid" 2>/dev/null
  return 0
}

cleanup() {
  local pid p left=()
  trap - EXIT INT TERM
  if [ -n "$LOADPID" ]; then kill -TERM "$LOADPID" 2>/dev/null; wait "$LOADPID" 2>/dev/null; fi
  for pid in "${STARTED[@]}"; do stop_group "$pid"; done
  sleep 0.2
  for p in "${SEEN[@]}"; do
    if alive "$p" && [ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" != Z ]; then left+=("$p"); fi
  done
  if [ ${#left[@]} -gt 0 ]; then
    log "warning: still running after stop, killing: ${left[*]}"
    kill -KILL "${left[@]}" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

# --------------------------------------------------------------- helpers --
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_peer NAME PORT ARGV... : starts ARGV in its own session; sets PEER_PID.
start_peer() {
  local name=$1 port=$2
  shift 2
  port_busy "$port" && die "port $port is already in use (set BASEPORT)"
  setsid "$@" >"$RUN/$name.$port.log" 2>&1 </dev/null &
  PEER_PID=$!
  STARTED+=("$PEER_PID")
}

# wait_ready URL [TOKENARGS...]: poll initialize until it answers (30 s).
wait_ready() {
  local url=$1 i
  shift
  for i in $(seq 1 300); do
    "$BIN/mcpload" -q -url "$url" "$@" -sessions 1 -calls 0 -timeout 2s >/dev/null 2>&1 && return 0
    alive "$PEER_PID" || return 1
    sleep 0.1
  done
  return 1
}

vmrss_kb() { awk '/^VmRSS:/{print $2; f=1} END{if (!f) print 0}' "/proc/$1/status" 2>/dev/null || echo 0; }
tree_rss_kb() { local s=0 x; for x in $(tree_pids "$1"); do s=$((s + $(vmrss_kb "$x"))); done; echo "$s"; }
tree_n() { tree_pids "$1" | wc -l; }

# run_load CMD...: run a load generator in the background and wait for it (so
# that an interrupt reaches the cleanup trap at once); first stdout line -> LINE.
run_load() {
  "$@" >"$WORK/load.out" 2>>"$RUN/load.err" </dev/null &
  LOADPID=$!
  wait "$LOADPID"
  LOADPID=
  LINE=$(head -n1 "$WORK/load.out")
}

emit() { printf '%s\n' "$1" >>"$RUN/results.jsonl"; }

# child_argv KIND -> the stdio server's argv, one per line
child_argv() {
  case $1 in
    mcpecho) printf '%s\n' "$BIN/mcpecho" ;;
    everything) printf '%s\n' node "$EV" stdio ;;
  esac
}

# peer_argv BRIDGE PORT KIND -> the bridge's argv, one per line
peer_argv() {
  local bridge=$1 port=$2 kind=$3 child
  mapfile -t child < <(child_argv "$kind")
  case $bridge in
    soda-mcpd) printf '%s\n' "$BIN/soda-mcpd" --listen "127.0.0.1:$port" --token-file "$WORK/token" \
        --log-format json --max-sessions 64 -- "${child[@]}" ;;
    supergateway) printf '%s\n' node -r "$LOOPBACK" "$SG" --stdio "${child[*]}" \
        --outputTransport streamableHttp --stateful --port "$port" --logLevel none ;;
    mcp-proxy) printf '%s\n' node -r "$LOOPBACK" "$MP" --host 127.0.0.1 --port "$port" \
        --server stream -- "${child[@]}" ;;
    direct) printf '%s\n' env "PORT=$port" node -r "$LOOPBACK" "$EV" streamableHttp ;;
    *) die "unknown bridge $bridge" ;;
  esac
}

# token_args BRIDGE -> mcpload flags for auth, one per line
token_args() { [ "$1" = soda-mcpd ] && printf '%s\n' -token-file "$WORK/token"; return 0; }

# ----------------------------------------------------------------- setup --
command -v go >/dev/null || die "go not found"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"
mkdir -p "$RUN" "$BIN"

if [ ! -f "$SG" ] || [ ! -f "$MP" ] || [ ! -f "$EV" ] || [ ! -d "$NM/@modelcontextprotocol/sdk" ]; then
  log "installing peers into bench/node_modules (npm ci)"
  (cd "$BENCH" && npm ci --no-audit --no-fund --loglevel=error) >&2 || die "npm ci failed"
fi

log "building bin/mcpecho bin/mcpload$([[ " $BRIDGES " == *" soda-mcpd "* ]] && echo ' bin/soda-mcpd')"
(cd "$ROOT" && go build -o "$BIN/mcpecho" ./test/mcpecho && go build -o "$BIN/mcpload" ./test/mcpload) \
  || die "build of the bench tools failed"
case " $BRIDGES " in
  *" soda-mcpd "*) (cd "$ROOT" && go build -o "$BIN/soda-mcpd" ./cmd/soda-mcpd) || die "build of soda-mcpd failed" ;;
esac

{
  printf '{"section":"meta","date":"%s","host_cores":%s,"kernel":"%s","go":"%s","node":"%s","reps":%s,"warmup":%s,"bridges":"%s"' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$(uname -r)" "$(go env GOVERSION)" "$(node --version)" "$REPS" "$WARM" "$BRIDGES"
  for p in supergateway mcp-proxy @modelcontextprotocol/server-everything @modelcontextprotocol/sdk; do
    printf ',"%s":"%s"' "$p" "$(node -p "require('$NM/$p/package.json').version" 2>/dev/null)"
  done
  printf '}\n'
} >>"$RUN/results.jsonl"

port=$BASEPORT

# ------------------------------------------------- (a)(b)(d) Go echo child --
if [[ " $SECTIONS " == *" echo "* ]]; then
  log "== stdio baseline: mcpload -stdio -- mcpecho"
  for cfg in "1 2000" "8 500"; do
    set -- $cfg
    for r in $(seq 1 "$REPS"); do
      run_load "$BIN/mcpload" -q -stdio -sessions "$1" -calls "$2" -warmup "$WARM" -- "$BIN/mcpecho"
      emit "{\"section\":\"echo\",\"peer\":\"stdio\",\"S\":$1,\"N\":$2,\"rep\":$r,\"res\":${LINE:-null}}"
      log "stdio S=$1 N=$2 rep $r: $(printf '%s' "$LINE" | cut -c1-160)"
    done
  done

  # The HTTP floor: mcpecho answering HTTP itself, no bridge and no child.
  # Whatever any HTTP bridge adds beyond this is the bridge's own cost.
  port=$((port + 1))
  url="http://127.0.0.1:$port/mcp"
  log "== HTTP floor: mcpecho --http on $url"
  start_peer "http-floor" "$port" "$BIN/mcpecho" --http "127.0.0.1:$port"
  if wait_ready "$url" -token none; then
    for r in $(seq 1 "$REPS"); do
      run_load "$BIN/mcpload" -q -url "$url" -token none -sessions 1 -calls 2000 -warmup "$WARM"
      emit "{\"section\":\"echo\",\"peer\":\"http-floor\",\"S\":1,\"N\":2000,\"rep\":$r,\"res\":${LINE:-null}}"
      log "http-floor S=1 N=2000 rep $r: $(printf '%s' "$LINE" | cut -c1-160)"
    done
  fi
  stop_group "$PEER_PID"

  for bridge in $BRIDGES; do
    port=$((port + 1))
    url="http://127.0.0.1:$port/mcp"
    mapfile -t argv < <(peer_argv "$bridge" "$port" mcpecho)
    mapfile -t tok < <(token_args "$bridge")
    log "== $bridge + mcpecho on $url"
    start_peer "$bridge-mcpecho" "$port" "${argv[@]}"
    if ! wait_ready "$url" "${tok[@]}"; then
      log "$bridge did not come up; see $RUN/$bridge-mcpecho.$port.log"
      emit "{\"section\":\"echo\",\"peer\":\"$bridge\",\"failed\":\"did not come up\"}"
      stop_group "$PEER_PID"
      continue
    fi
    sleep 1 # let the readiness session's child go away
    idle=$(vmrss_kb "$PEER_PID"); tidle=$(tree_rss_kb "$PEER_PID"); nidle=$(tree_n "$PEER_PID")
    # 8 sessions held open while we sample
    hf=$WORK/hold.$bridge
    rm -f "$hf"
    "$BIN/mcpload" -q -url "$url" "${tok[@]}" -sessions 8 -calls 10 -hold-ms 2500 -hold-file "$hf" >/dev/null 2>>"$RUN/load.err" </dev/null &
    LOADPID=$!
    for _ in $(seq 1 200); do [ -f "$hf" ] && break; sleep 0.05; done
    sleep 0.5
    rss8=$(vmrss_kb "$PEER_PID"); trss8=$(tree_rss_kb "$PEER_PID"); n8=$(tree_n "$PEER_PID")
    wait "$LOADPID"
    LOADPID=
    emit "{\"section\":\"rss\",\"peer\":\"$bridge\",\"child\":\"mcpecho\",\"idle_kb\":$idle,\"rss8_kb\":$rss8,\"tree_idle_kb\":$tidle,\"tree8_kb\":$trss8,\"procs_idle\":$nidle,\"procs8\":$n8}"
    for cfg in "1 2000" "8 500"; do
      set -- $cfg
      for r in $(seq 1 "$REPS"); do
        run_load "$BIN/mcpload" -q -url "$url" "${tok[@]}" -sessions "$1" -calls "$2" -warmup "$WARM"
        emit "{\"section\":\"echo\",\"peer\":\"$bridge\",\"S\":$1,\"N\":$2,\"rep\":$r,\"res\":${LINE:-null}}"
        log "$bridge S=$1 N=$2 rep $r: $(printf '%s' "$LINE" | cut -c1-160)"
      done
    done
    stop_group "$PEER_PID"
  done
fi

# ------------------------------------ (e) Node client, server-everything --
if [[ " $SECTIONS " == *" node "* ]]; then
  export NODE_PATH="$NM${NODE_PATH:+:$NODE_PATH}"
  for bridge in $BRIDGES direct; do
    port=$((port + 1))
    url="http://127.0.0.1:$port/mcp"
    mapfile -t argv < <(peer_argv "$bridge" "$port" everything)
    mapfile -t tok < <(token_args "$bridge")
    log "== $bridge + server-everything on $url (node client)"
    start_peer "$bridge-everything" "$port" "${argv[@]}"
    if ! wait_ready "$url" "${tok[@]}"; then
      log "$bridge did not come up; see $RUN/$bridge-everything.$port.log"
      emit "{\"section\":\"node\",\"peer\":\"$bridge\",\"failed\":\"did not come up\"}"
      stop_group "$PEER_PID"
      continue
    fi
    sleep 1
    ntok=()
    [ "$bridge" = soda-mcpd ] && ntok=(--token "$(cat "$WORK/token")")
    run_load node "$BENCH/mcp-load.mjs" --url "$url" "${ntok[@]}" -s 2 -n 50 --json
    for cfg in "1 500" "8 200"; do
      set -- $cfg
      for r in $(seq 1 "$REPS"); do
        run_load node "$BENCH/mcp-load.mjs" --url "$url" "${ntok[@]}" -s "$1" -n "$2" --warmup 20 --json
        emit "{\"section\":\"node\",\"peer\":\"$bridge\",\"S\":$1,\"N\":$2,\"rep\":$r,\"res\":${LINE:-null}}"
        log "$bridge S=$1 N=$2 rep $r: $(printf '%s' "$LINE" | cut -c1-160)"
      done
    done
    stop_group "$PEER_PID"
  done
fi

# ------------------------------------------------------- (c) cold start --
if [[ " $SECTIONS " == *" cold "* ]]; then
  for bridge in $BRIDGES; do
    port=$((port + 1))
    url="http://127.0.0.1:$port/mcp"
    port_busy "$port" && die "port $port is already in use (set BASEPORT)"
    mapfile -t argv < <(peer_argv "$bridge" "$port" mcpecho)
    mapfile -t tok < <(token_args "$bridge")
    runs=$COLD_RUNS_PEERS
    [ "$bridge" = soda-mcpd ] && runs=$COLD_RUNS
    log "== cold start $bridge + mcpecho, $runs runs"
    # mcpload starts each run in its own process group and kills it after.
    run_load "$BIN/mcpload" -q -coldstart -runs "$runs" -url "$url" "${tok[@]}" -- "${argv[@]}"
    emit "{\"section\":\"cold\",\"peer\":\"$bridge\",\"child\":\"mcpecho\",\"res\":${LINE:-null}}"
    log "$bridge: $(printf '%s' "$LINE" | cut -c1-200)"
  done
fi

# ---------------------------------------------------------------- report --
node "$BENCH/summarize.mjs" "$RUN/results.jsonl" >"$RUN/summary.md" || die "summary failed"
cp "$RUN/summary.md" "$BENCH/results/latest.md"
cat "$BENCH/results/latest.md"
log "raw results in $RUN; table in bench/results/latest.md"
