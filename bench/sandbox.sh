#!/usr/bin/env bash
# bench/sandbox.sh -- `sodactl run` side by side with the sandboxes a user would
# pick instead (Codex's `codex sandbox`, Anthropic's sandbox-runtime `srt`), and
# the cost of sodactl's egress relay. Run from anywhere, as root
# (`make bench-sandbox` runs it from the repo root):
#
#   [RUNS=21] [WARMUP=2] [REPS=3] [PUSH_BYTES=2GiB] [CONNECTS=500] \
#   [SECTIONS="startup box relay exec"] [EXECS=2000] bash bench/sandbox.sh
#
# What it measures, in one run:
#  startup  wall time of `CMD -- true` (fork to exit, stdio on /dev/null),
#           median/min/max of RUNS runs after WARMUP discarded ones, timed by
#           bench/sbxbench (the method of shared/bench/startup-overhead.sh,
#           without the cost of forking `date`), on this host: plain `true`,
#           `sodactl run -- true` (its limits enforced: by a transient scope
#           under systemd, else a cgroup v2 directory, else, as here, with no
#           systemd and a v1/v2 hybrid, cgroup v1 directories), `codex sandbox -- true` (the native
#           binary of @openai/codex) and `srt true` (@anthropic-ai/sandbox-runtime,
#           with Debian's bubblewrap, socat and ripgrep). Each command is run
#           once first and must exit 0, or its exact error is recorded.
#  box      the same timer inside a throw-away systemd box (test/box/sdbox up
#           --cgroup hybrid): plain `true` and the full stack
#           `sodactl run -- true` (transient scope with limits, nothing degraded).
#  relay    bench/sbxbench sink/echo servers on 127.0.0.1 ephemeral ports;
#           REPS x `sbxbench push` of PUSH_BYTES (256 KiB writes, half-close,
#           wait for the sink's count) directly vs from inside
#           `sodactl run --allow-private 127.0.0.1:PORT` through its relay and
#           CONNECT proxy (127.0.0.1:18080 in the sandbox); REPS x
#           `sbxbench connects` (CONNECTS sequential connect + CONNECT + 1-byte
#           echo) the same two ways.
#  exec     REPS x the Go benchmarks BenchmarkExecTrue (`true` as a second
#           command in a live sandbox, Exec request to exit status) and
#           BenchmarkPlainTrue (`true` forked, executed, waited for by the host),
#           EXECS iterations each; target: Exec at most 2x plain `true`.
# Targets (from the issue): sodactl's median start-up overhead over plain
# `true` <= 25 ms, and (issue 27) at most 1/3 of codex sandbox's; relayed
# throughput >= 70 % of direct loopback (issue 27; the relay section also
# measures a bare splice relay, sbxbench relay, the floor under any one-hop
# relay on this machine); per-connection setup overhead (relayed median -
# direct median) <= 1 ms.
#
# Results: bench/results/<timestamp>/sandbox.jsonl (one JSON object per
# measurement) and the markdown tables bench/results/latest-sandbox.md, which
# are also printed. Peers come from npm into bench/node_modules (versions pinned
# in bench/package-lock.json); bubblewrap, socat and ripgrep from apt when
# missing. Binaries go to a work dir /var/lib/soda-bench-XXXXXX (visible in the
# sandbox and bound into the box; /tmp is private there). Only loopback is
# used; every process started and the box are stopped on exit, whatever happens.
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
RUNS=${RUNS:-21}
WARMUP=${WARMUP:-2}
REPS=${REPS:-3}
PUSH_BYTES=${PUSH_BYTES:-2GiB}
CONNECTS=${CONNECTS:-500}
SECTIONS=${SECTIONS:-"startup box relay exec"}
STAMP=$(date +%Y%m%d-%H%M%S)
RUN=$BENCH/results/$STAMP
OUT=$RUN/sandbox.jsonl
NM=$BENCH/node_modules
SRT=$NM/.bin/srt
SDBOX=$ROOT/test/box/sdbox
PROXY=127.0.0.1:18080 # the relay's address inside the sandbox

log() { printf '[bench-sandbox] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- cleanup --
STARTED=()   # servers we started (setsid: each leads its own group)
LOADPID=     # the measurement running now
BOXDIR=      # set once the box is being booted
WORK=

# tree_pids PID -> PID and all its descendants (a sandbox's processes are
# children of sodactl, in their own process group).
tree_pids() {
  ps -eo pid=,ppid= | awk -v r="$1" '{p[$1]=$2} END{t[r]=1; do {c=0; for (k in p) if (!(k in t) && (p[k] in t)) {t[k]=1; c++}} while (c); for (k in t) print k}'
}
alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]; }

cleanup() {
  local pid p seen=() left=()
  trap - EXIT INT TERM
  # the measurement now running (timeout forwards SIGTERM to its child's
  # group; sodactl stops its sandbox on SIGTERM), then the servers
  if [ -n "$LOADPID" ]; then
    seen+=($(tree_pids "$LOADPID"))
    kill -TERM -- "$LOADPID" 2>/dev/null
    wait "$LOADPID" 2>/dev/null
  fi
  for pid in "${STARTED[@]}"; do
    seen+=($(tree_pids "$pid"))
    kill -TERM -- -"$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [ -n "$BOXDIR" ]; then
    "$SDBOX" down "$BOXDIR" >&2 || log "warning: sdbox down $BOXDIR failed"
  fi
  sleep 0.2
  for p in "${seen[@]}"; do alive "$p" && left+=("$p"); done
  if [ ${#left[@]} -gt 0 ]; then
    log "warning: still running after stop, killing: ${left[*]}"
    kill -KILL "${left[@]}" 2>/dev/null
  fi
  [ -n "$WORK" ] && rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

# --------------------------------------------------------------- helpers --
# jstr STRING -> STRING as a JSON string
jstr() { node -e 'process.stdout.write(JSON.stringify(process.argv[1]))' -- "$1"; }
emit() { printf '%s\n' "$1" >>"$OUT"; }

# run_bg OUT ERR TIMEOUT CMD...: run CMD in the background with a deadline and
# wait for it (so that an interrupt reaches the cleanup trap at once); sets RC.
run_bg() {
  local out=$1 err=$2 t=$3
  shift 3
  timeout -k 5 "$t" "$@" >"$out" 2>"$err" </dev/null &
  LOADPID=$!
  wait "$LOADPID"
  RC=$?
  LOADPID=
}

# errtext FILE -> what a command said about its failure, on one line: its first
# lines that name an error (else its last lines), without sodactl's warnings
# about --allow-degraded nor backtrace frames.
errtext() {
  local lines
  lines=$(grep -v -e 'level=WARN msg="sandbox layer NOT' -e '^ *[0-9][0-9]*: ' -e '^ *at ' -e '^Stack backtrace' -e '^ *$' "$1")
  if grep -qi 'error\|panic\|fail\|denied\|not found\|cannot' <<<"$lines"; then
    lines=$(grep -i 'error\|panic\|fail\|denied\|not found\|cannot' <<<"$lines" | head -n 2)
  else
    lines=$(tail -n 3 <<<"$lines")
  fi
  printf '%s' "$lines" | tr '\n' ' ' | sed 's/  */ /g; s/ $//' | cut -c1-600
}

# startup ENV NAME CMD...: verify CMD -- exits 0 once -- then time it.
# ENV is host or box (box: everything runs inside the box).
startup() {
  local env=$1 name=$2 pre=() res
  shift 2
  [ "$env" = box ] && pre=("$SDBOX" exec "$BOXDIR" --)
  local cmdtxt="$*"
  cmdtxt=${cmdtxt//$WORK/\$WORK}
  cmdtxt=${cmdtxt//$NM/node_modules}
  log "startup [$env] $name: $cmdtxt"
  run_bg "$WORK/out" "$WORK/err" 60 "${pre[@]}" "$@"
  cp "$WORK/err" "$RUN/startup-$env-$name.verify.err"
  if [ "$RC" != 0 ]; then
    local e; e="exit $RC: $(errtext "$WORK/err")"
    log "  $name does not run here: $e"
    emit "{\"section\":\"startup\",\"env\":\"$env\",\"name\":\"$name\",\"cmd\":$(jstr "$cmdtxt"),\"failed\":$(jstr "$e")}"
    return 1
  fi
  run_bg "$WORK/out" "$WORK/err" 300 "${pre[@]}" "$WORK/bin/sbxbench" startup --runs "$RUNS" --warmup "$WARMUP" -- "$@"
  res=$(head -n1 "$WORK/out")
  if [ "$RC" != 0 ] || [ "${res:0:1}" != "{" ]; then
    local e; e="timer exit $RC: $(errtext "$WORK/err")"
    log "  $name: $e"
    emit "{\"section\":\"startup\",\"env\":\"$env\",\"name\":\"$name\",\"cmd\":$(jstr "$cmdtxt"),\"failed\":$(jstr "$e")}"
    return 1
  fi
  emit "{\"section\":\"startup\",\"env\":\"$env\",\"name\":\"$name\",\"cmd\":$(jstr "$cmdtxt"),\"res\":$res}"
  log "  $res"
}

# relay TEST PATH REP CMD...: one relay measurement, its JSON line recorded.
relay() {
  local test=$1 path=$2 rep=$3 res
  shift 3
  run_bg "$WORK/out" "$WORK/err" 180 "$@"
  cat "$WORK/err" >>"$RUN/relay.err"
  res=$(head -n1 "$WORK/out")
  if [ "$RC" != 0 ] || [ "${res:0:1}" != "{" ]; then
    local e; e="exit $RC: $(errtext "$WORK/err")"
    log "relay $test $path rep $rep failed: $e"
    emit "{\"section\":\"relay\",\"test\":\"$test\",\"path\":\"$path\",\"rep\":$rep,\"failed\":$(jstr "$e")}"
    return 1
  fi
  emit "{\"section\":\"relay\",\"test\":\"$test\",\"path\":\"$path\",\"rep\":$rep,\"res\":$res}"
  log "relay $test $path rep $rep: $res"
}

# start_server KIND [ARGS] -> starts sbxbench KIND on 127.0.0.1:0 [ARGS]; sets PORT.
start_server() {
  local kind=$1 i
  setsid "$WORK/bin/sbxbench" "$kind" 127.0.0.1:0 "${@:2}" >"$WORK/$kind.port" 2>>"$RUN/servers.err" </dev/null &
  STARTED+=("$!")
  PORT=
  for i in $(seq 1 100); do
    PORT=$(head -n1 "$WORK/$kind.port" 2>/dev/null)
    [ -n "$PORT" ] && return 0
    sleep 0.05
  done
  die "sbxbench $kind did not start (see $RUN/servers.err)"
}

version_of() { node -p "require('$NM/$1/package.json').version" 2>/dev/null || echo '?'; }

# ----------------------------------------------------------------- setup --
[ "$(id -u)" = 0 ] || die "must run as root (sodactl run's host setup and the systemd box need it)"
command -v go >/dev/null || die "go not found"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"
mkdir -p "$RUN"
: >"$OUT"
WORK=$(mktemp -d /var/lib/soda-bench-XXXXXX) || die "cannot create the work dir"
chmod 0755 "$WORK"
mkdir -p "$WORK/bin" "$WORK/home" "$WORK/codex"
cd "$WORK" || die "cd $WORK" # a cwd that exists in the box too (sdbox exec keeps it)

# srt needs bwrap, socat and rg on PATH.
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v socat >/dev/null || missing+=(socat)
command -v rg >/dev/null || missing+=(ripgrep)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} (apt-get)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$RUN/apt.log" 2>&1 || { tail -n 5 "$RUN/apt.log" >&2; log "warning: apt-get install ${missing[*]} failed; srt will be recorded as not runnable"; }
fi

# The pinned peers (bench/package.json devDependencies) and run.sh's peers.
need_npm=0
for p in @openai/codex @anthropic-ai/sandbox-runtime; do
  want=$(node -p "require('$BENCH/package.json').devDependencies['$p']")
  [ "$(version_of "$p")" = "$want" ] || need_npm=1
done
for p in supergateway mcp-proxy; do [ -d "$NM/$p" ] || need_npm=1; done
if [ $need_npm = 1 ]; then
  log "installing the peers into bench/node_modules (npm ci)"
  (cd "$BENCH" && npm ci --no-audit --no-fund --loglevel=error) >&2 || die "npm ci failed"
fi
CODEX=$(ls "$NM"/@openai/codex-linux-*/vendor/*/bin/codex 2>/dev/null | head -n1)
[ -n "$CODEX" ] || CODEX=$NM/.bin/codex # the Node wrapper, if the platform package is missing

log "building sodactl, soda-sandbox-init and sbxbench into $WORK/bin"
(cd "$ROOT" && CGO_ENABLED=0 go build -tags soda_lean -trimpath -o "$WORK/bin/sodactl" ./cmd/sodactl && CGO_ENABLED=0 go build -trimpath -o "$WORK/bin/sodactl-full" ./cmd/sodactl && CGO_ENABLED=0 go build -trimpath -o "$WORK/bin/soda-sandbox-init" ./cmd/soda-sandbox-init && CGO_ENABLED=0 go build -o "$WORK/bin/sbxbench" ./bench/sbxbench) \
  || die "go build failed"

go_v=$(go env GOVERSION)
# Peers keep their state in the work dir (codex refuses a CODEX_HOME under /tmp).
export HOME=$WORK/home CODEX_HOME=$WORK/codex CODEX_MANAGED_BY_NPM=1 CODEX_MANAGED_PACKAGE_ROOT=$NM/@openai/codex
cat >"$WORK/srt-settings.json" <<'EOF'
{"network":{"allowedDomains":[],"deniedDomains":[]},"filesystem":{"denyRead":[],"allowWrite":[],"denyWrite":[]}}
EOF

bwrap_v=$(bwrap --version 2>/dev/null | awk '{print $2}')
codex_v=$("$CODEX" --version 2>/dev/null | awk '{print $NF}')
srt_v=$("$SRT" --version 2>/dev/null | tail -n1)
systemd_v=$(systemctl --version 2>/dev/null | awk 'NR==1{print $2}')
cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
# How the host mounts cgroup2: with favordynmods (now or once before, on
# recent kernels) a cgroup v1 migration does not wait for an RCU grace
# period, which changes sodactl's start-up on a hybrid host by 5-15 ms.
cg2_opts=$(awk '$9 == "cgroup2" {print $NF; exit}' /proc/self/mountinfo)
emit "$(printf '{"section":"meta","date":"%s","host_cores":%s,"cpu":%s,"kernel":"%s","go":"%s","node":"%s","codex":"%s","srt":"%s","bwrap":"%s","systemd":"%s","cgroup2":"%s","runs":%s,"warmup":%s,"reps":%s,"push_bytes":"%s","connects":%s}' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$(jstr "$cpu")" "$(uname -r)" "$go_v" "$(node --version)" \
  "${codex_v:-?}" "${srt_v:-?}" "${bwrap_v:-?}" "${systemd_v:-?}" "${cg2_opts:-none}" "$RUNS" "$WARMUP" "$REPS" "$PUSH_BYTES" "$CONNECTS")"

# -------------------------------------------------------- startup, host --
if [[ " $SECTIONS " == *" startup "* ]]; then
  startup host true true
  startup host sodactl "$WORK/bin/sodactl" run -- true
  startup host codex "$CODEX" sandbox -- true
  # Where the time goes (floors): each binary's own start-up, and
  # sodactl's sandbox without its cgroup placement (the test knob that
  # makes the layer unavailable, waived), i.e. the placement's share.
  startup host sodactl-version "$WORK/bin/sodactl" --version
  SODA_SANDBOX_TEST_UNAVAILABLE=cgroup startup host sodactl-nocgroup "$WORK/bin/sodactl" run --allow-degraded cgroup -- true
  startup host codex-version "$CODEX" --version
  startup host srt "$SRT" --settings "$WORK/srt-settings.json" true
fi

# --------------------------------------------------------- startup, box --
if [[ " $SECTIONS " == *" box "* ]]; then
  if ! "$SDBOX" check --cgroup hybrid >"$WORK/check" 2>&1; then
    e="sdbox check --cgroup hybrid: $(tr '\n' ' ' <"$WORK/check")"
    log "no systemd box: $e"
    for n in true sodactl; do emit "{\"section\":\"startup\",\"env\":\"box\",\"name\":\"$n\",\"failed\":$(jstr "$e")}"; done
  else
    BOXDIR=$WORK/box
    mkdir -p "$BOXDIR"
    log "booting a systemd box in $BOXDIR"
    run_bg "$WORK/out" "$RUN/box-up.err" 120 "$SDBOX" up --cgroup hybrid --bind "$WORK" "$BOXDIR"
    if [ "$RC" != 0 ]; then
      e="sdbox up exit $RC: $(errtext "$RUN/box-up.err")"
      log "$e"
      for n in true sodactl; do emit "{\"section\":\"startup\",\"env\":\"box\",\"name\":\"$n\",\"failed\":$(jstr "$e")}"; done
    else
      startup box true true
      startup box sodactl "$WORK/bin/sodactl" run -- true
    fi
    log "taking the box down"
    "$SDBOX" down "$BOXDIR" >&2 || log "warning: sdbox down failed"
    BOXDIR=
  fi
fi

# ---------------------------------------------------------------- relay --
if [[ " $SECTIONS " == *" relay "* ]]; then
  start_server sink; SINK=$PORT
  start_server echo; ECHO=$PORT
  start_server relay "127.0.0.1:$SINK"; FLOOR=$PORT
  log "sink on 127.0.0.1:$SINK, echo on 127.0.0.1:$ECHO, a bare splice relay to the sink on 127.0.0.1:$FLOOR"
  SBX=("$WORK/bin/sodactl" run --allow-degraded cgroup --ro "$WORK/bin")
  for r in $(seq 1 "$REPS"); do
    relay push direct "$r" "$WORK/bin/sbxbench" push "127.0.0.1:$SINK" "$PUSH_BYTES"
    relay push floor "$r" "$WORK/bin/sbxbench" push "127.0.0.1:$FLOOR" "$PUSH_BYTES"
    relay push relayed "$r" "${SBX[@]}" --allow-private "127.0.0.1:$SINK" -- \
      "$WORK/bin/sbxbench" push --proxy "$PROXY" "127.0.0.1:$SINK" "$PUSH_BYTES"
  done
  for r in $(seq 1 "$REPS"); do
    relay connects direct "$r" "$WORK/bin/sbxbench" connects "127.0.0.1:$ECHO" "$CONNECTS"
    relay connects relayed "$r" "${SBX[@]}" --allow-private "127.0.0.1:$ECHO" -- \
      "$WORK/bin/sbxbench" connects --proxy "$PROXY" "127.0.0.1:$ECHO" "$CONNECTS"
  done
fi

# ----------------------------------------------------------------- exec --
# A second command (`true`) in a live sandbox (Spec.Persistent, Exec) from
# request to status, against plain `true` forked and waited for by the host:
# the Go benchmarks of internal/sandbox, EXECS iterations each, REPS times.
if [[ " $SECTIONS " == *" exec "* ]]; then
  for r in $(seq 1 "$REPS"); do
    if (cd "$ROOT" && go test -count=1 -run '^$' -bench '^Benchmark(ExecTrue|PlainTrue)$' -benchtime "${EXECS:-2000}x" ./internal/sandbox/) >"$WORK/exec.out" 2>&1; then
      for n in ExecTrue PlainTrue; do
        ns=$(awk -v n="Benchmark$n" '$1 ~ "^"n"(-[0-9]+)?$" {print $3}' "$WORK/exec.out")
        emit "{\"section\":\"exec\",\"name\":\"$n\",\"rep\":$r,\"ns_op\":${ns:-null}}"
      done
    else
      emit "{\"section\":\"exec\",\"rep\":$r,\"failed\":$(jstr "$(errtext "$WORK/exec.out")")}"
    fi
  done
fi

# ---------------------------------------------------------------- report --
find "$RUN" -type f -empty -delete
node "$BENCH/summarize-sandbox.mjs" "$OUT" >"$RUN/sandbox.md" || die "summary failed"
cp "$RUN/sandbox.md" "$BENCH/results/latest-sandbox.md"
cat "$BENCH/results/latest-sandbox.md"
log "raw results in $RUN; tables in bench/results/latest-sandbox.md"
