#!/usr/bin/env bash
# bench/compare.sh -- this checkout ("after", with its uncommitted changes)
# against an older revision ("before") on the same host in one run, on soda's
# own figures of three benches (`make bench-compare BEFORE=REV` runs it):
#
#   BEFORE=REV [ROUNDS=2] [BENCHES="bridge sandbox sessions"] \
#   [REPS=..] [RUNS=..] [COLD_RUNS=..] [EXECS=..] [WARM=..] [WARMUP=..] [BASEPORT=..] \
#   bash bench/compare.sh
#
#  bridge    bench/run.sh with BRIDGES=soda-mcpd SECTIONS="echo cold": p50 and
#            p99 of 1 session x 2000 calls, throughput of 8 sessions x 500
#            calls, cold start (median of COLD_RUNS), RSS idle.
#  sandbox   bench/sandbox.sh with SECTIONS="startup exec" (root): median of
#            `sodactl run -- true` and of plain `true`, the overhead, and
#            BenchmarkExecTrue against BenchmarkPlainTrue (the peers codex and
#            srt are timed too, as sandbox.sh always does; they are not reported).
#  sessions  bench/sessions.sh (test/session TestBenchSessions; no count knobs):
#            warm exec p50, create with 100 seeds, diff over 1000 files, the
#            cold run, idle RSS per session.
# BEFORE is checked out in a detached worktree under a temp dir and built
# (make build); bench/node_modules is shared with it when bench/package.json
# and bench/package-lock.json are identical, else installed there (npm ci).
# Each tree runs its own copy of the bench scripts, so each measures its own
# code. ROUNDS rounds; in each, every bench runs for both trees, before then
# after in odd rounds and after then before in even ones, so drift hits both.
# The other knobs are passed through to the benches (REPS to both run.sh and
# sandbox.sh). Results: per round and tree, the benches' raw files and logs in
# bench/results/compare-<timestamp>/, and the table (median over rounds of
# each figure for each tree, ratio after/before) in
# bench/results/latest-compare.md, which is also printed. The worktree is
# removed on exit, whatever happens.
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
BEFORE=${BEFORE:-}
ROUNDS=${ROUNDS:-2}
BENCHES=${BENCHES:-"bridge sandbox sessions"}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$BENCH/results/compare-$STAMP

log() { printf '[bench-compare] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- cleanup --
TMP=
WT=      # the before tree, once added
CHILD=   # the bench now running
# tree_pids PID -> PID and all its descendants
tree_pids() {
  ps -eo pid=,ppid= | awk -v r="$1" '{p[$1]=$2} END{t[r]=1; do {c=0; for (k in p) if (!(k in t) && (p[k] in t)) {t[k]=1; c++}} while (c); for (k in t) print k}'
}
cleanup() {
  local seen p i
  trap - EXIT INT TERM
  if [ -n "$CHILD" ]; then
    # run.sh and sandbox.sh stop what they started on SIGTERM; sessions.sh
    # does not stop its go test: whatever of the tree outlives the script is
    # sent SIGTERM, then SIGKILL.
    seen=$(tree_pids "$CHILD")
    kill -TERM "$CHILD" 2>/dev/null
    wait "$CHILD" 2>/dev/null
    for p in $seen; do kill -TERM "$p" 2>/dev/null; done
    for i in $(seq 1 50); do
      for p in $seen; do kill -0 "$p" 2>/dev/null && break; done
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    for p in $seen; do kill -KILL "$p" 2>/dev/null; done
  fi
  if [ -n "$WT" ]; then
    [ -L "$WT/bench/node_modules" ] && rm -f "$WT/bench/node_modules" # the after tree's, shared
    git -C "$ROOT" worktree remove --force "$WT" >/dev/null 2>&1 || log "warning: git worktree remove $WT failed"
  fi
  [ -n "$TMP" ] && rm -rf "$TMP"
  git -C "$ROOT" worktree prune 2>/dev/null
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

# ----------------------------------------------------------------- checks --
[ -n "$BEFORE" ] || die "set BEFORE to a git revision (make bench-compare BEFORE=REV)"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
for b in $BENCHES; do
  case $b in bridge | sandbox | sessions) ;; *) die "unknown bench '$b' in BENCHES (bridge sandbox sessions)" ;; esac
done
[ -n "${BENCHES// /}" ] || die "BENCHES is empty"
command -v git >/dev/null || die "git not found"
command -v node >/dev/null || die "node not found"
[[ " $BENCHES " == *" sandbox "* ]] && [ "$(id -u)" != 0 ] && die "the sandbox bench needs root (or leave it out of BENCHES)"
REV=$(git -C "$ROOT" rev-parse --verify --quiet "$BEFORE^{commit}") || die "BEFORE=$BEFORE is not a commit here"
BEFORE_DESC="$(git -C "$ROOT" log -1 --format='%h %s' "$REV")"
AFTER_DESC="$(git -C "$ROOT" log -1 --format='%h %s' HEAD)"
[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ] && AFTER_DESC="$AFTER_DESC (+ uncommitted changes)"

mkdir -p "$OUT" || die "cannot create $OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/soda-compare.XXXXXX") || die "cannot create a temp dir"
# 0755, not mktemp's 0700: a root soda-mcpd runs its children as soda-mcp or
# nobody, who must reach the before tree's bin/mcpecho.
chmod 0755 "$TMP"
WT=$TMP/before
log "before: $BEFORE_DESC"
log "after:  $AFTER_DESC ($ROOT)"
git -C "$ROOT" worktree add --detach "$WT" "$REV" >"$OUT/worktree.log" 2>&1 || { WT=; cat "$OUT/worktree.log" >&2; die "git worktree add failed"; }

# ------------------------------------------------------------------ build --
for side in after before; do
  tree=$ROOT; [ $side = before ] && tree=$WT
  log "make build ($side)"
  make -C "$tree" --no-print-directory build >"$OUT/build.$side.log" 2>&1 \
    || { tail -n 30 "$OUT/build.$side.log" >&2; die "make build failed in the $side tree ($tree); see $OUT/build.$side.log"; }
done

# run.sh and sandbox.sh take their peers from bench/node_modules (and would
# npm ci them on their first run, inside a round): install them up front.
if [[ " $BENCHES " == *" bridge "* || " $BENCHES " == *" sandbox "* ]]; then
  if [ ! -d "$ROOT/bench/node_modules/supergateway" ] || [ ! -d "$ROOT/bench/node_modules/@anthropic-ai/sandbox-runtime" ]; then
    log "installing bench/node_modules (npm ci, after)"
    (cd "$ROOT/bench" && npm ci --no-audit --no-fund --loglevel=error) >&2 || die "npm ci failed in $ROOT/bench"
  fi
  if cmp -s "$ROOT/bench/package.json" "$WT/bench/package.json" && cmp -s "$ROOT/bench/package-lock.json" "$WT/bench/package-lock.json"; then
    ln -s "$ROOT/bench/node_modules" "$WT/bench/node_modules" || die "cannot link bench/node_modules into $WT"
  else
    log "bench/package*.json differ between the trees: npm ci in the before tree"
    (cd "$WT/bench" && npm ci --no-audit --no-fund --loglevel=error) >&2 || die "npm ci failed in $WT/bench"
  fi
fi

# ------------------------------------------------------------------- runs --
# run_one BENCH SIDE ROUND: one bench in one tree; its raw results are copied
# to $OUT/BENCH.SIDE.rROUND.{jsonl,txt}, its output to .log.
FAILS=()
run_one() {
  local bench=$1 side=$2 r=$3 tree=$ROOT rc dir t0=$SECONDS
  [ "$side" = before ] && tree=$WT
  local tag=$bench.$side.r$r
  local lg=$OUT/$tag.log
  sleep 1 # a new second: the benches name their results directory by it
  case $bench in
    bridge) BRIDGES=soda-mcpd SECTIONS="echo cold" bash "$tree/bench/run.sh" >"$lg" 2>&1 </dev/null & ;;
    sandbox) SECTIONS="startup exec" bash "$tree/bench/sandbox.sh" >"$lg" 2>&1 </dev/null & ;;
    sessions) bash "$tree/bench/sessions.sh" >"$OUT/$tag.txt" 2>"$lg" </dev/null & ;;
  esac
  CHILD=$!
  wait "$CHILD"
  rc=$?
  CHILD=
  case $bench in
    bridge | sandbox)
      # both log "raw results in DIR; table(s) in ..." last
      dir=$(sed -n 's/.*raw results in \(.*\); tables\{0,1\} in .*/\1/p' "$lg" | tail -n 1)
      local f=results.jsonl; [ "$bench" = sandbox ] && f=sandbox.jsonl
      if [ -n "$dir" ] && [ -s "$dir/$f" ]; then
        cp "$dir/$f" "$OUT/$tag.jsonl"
        cp -r "$dir" "$OUT/$tag" # its logs too (the before tree goes away)
      else
        [ $rc = 0 ] && rc=1
      fi
      ;;
    sessions) [ -s "$OUT/$tag.txt" ] || { [ $rc = 0 ] && rc=1; } ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$bench" "$side" "$r" "$rc" "$((SECONDS - t0))" >>"$OUT/runs.tsv"
  if [ $rc != 0 ]; then
    FAILS+=("$tag")
    log "  $bench $side round $r FAILED (exit $rc) after $((SECONDS - t0)) s; last lines of $lg:"
    tail -n 15 "$lg" | sed 's/^/    /' >&2
  else
    log "  $bench $side round $r: $((SECONDS - t0)) s"
  fi
}

printf 'bench\tside\tround\trc\tseconds\n' >"$OUT/runs.tsv"
T0=$SECONDS
for r in $(seq 1 "$ROUNDS"); do
  order="before after"; [ $((r % 2)) = 0 ] && order="after before"
  log "round $r/$ROUNDS ($order)"
  for bench in $BENCHES; do
    for side in $order; do run_one "$bench" "$side" "$r"; done
  done
done
TOTAL=$((SECONDS - T0))

# ----------------------------------------------------------------- report --
OUT=$OUT ROUNDS=$ROUNDS BENCHES=$BENCHES BEFORE_DESC=$BEFORE_DESC AFTER_DESC=$AFTER_DESC TOTAL=$TOTAL \
KNOBS="$(for k in REPS RUNS WARMUP COLD_RUNS WARM EXECS BASEPORT; do [ -n "${!k:-}" ] && printf '%s=%s ' "$k" "${!k}"; done)" \
  node --input-type=module - >"$OUT/compare.md" <<'EOF' || die "summary failed"
import { readFileSync, existsSync } from 'node:fs';
const env = process.env;
const OUT = env.OUT, ROUNDS = +env.ROUNDS, benches = env.BENCHES.split(/\s+/).filter(Boolean);
const med = (xs) => {
  const v = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};
const jsonl = (f) => (existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : null);
// Go durations as printed (4.025ms, 1.2s, 950µs, 1m2.5s) -> ms
const dur = (s) => {
  let ms = 0, ok = false;
  for (const [, n, u] of s.matchAll(/([\d.]+)(ns|µs|us|ms|s|m|h)/g)) {
    ok = true;
    ms += +n * { ns: 1e-6, 'µs': 1e-3, us: 1e-3, ms: 1, s: 1e3, m: 6e4, h: 3.6e6 }[u];
  }
  return ok ? ms : NaN;
};

// figures: bench -> [{ key, label, unit, digits, from(raw) -> number }]
const rows = (raw, pred) => raw.filter(pred);
const echo = (raw, S, N, k) => med(rows(raw, (r) => r.section === 'echo' && r.peer === 'soda-mcpd' && r.S === S && r.N === N && r.res).map((r) => r.res[k]));
const start = (raw, name) => raw.find((r) => r.section === 'startup' && r.env === 'host' && r.name === name && r.res)?.res.median_ms ?? NaN;
const ns = (raw, name) => med(rows(raw, (r) => r.section === 'exec' && r.name === name).map((r) => r.ns_op));
const line = (txt, re, f = (m) => dur(m[1])) => { const m = txt.match(re); return m ? f(m) : NaN; };
const FIG = {
  bridge: [
    ['latency p50, 1 session x 2000 calls via soda-mcpd', 'ms', 3, (raw) => echo(raw, 1, 2000, 'p50_ms')],
    ['latency p99, 1 session x 2000 calls via soda-mcpd', 'ms', 3, (raw) => echo(raw, 1, 2000, 'p99_ms')],
    ['throughput, 8 sessions x 500 calls (higher is better)', 'calls/s', 0, (raw) => echo(raw, 8, 500, 'calls_per_sec')],
    ['cold start, spawn to first initialize answered, median', 'ms', 2, (raw) => {
      const res = raw.find((r) => r.section === 'cold' && r.peer === 'soda-mcpd' && r.res)?.res;
      return res && res.ok_calls > 0 ? res.init_ms_p50 : NaN; // coldstart: ok_calls = runs answered
    }],
    ['RSS of soda-mcpd idle', 'MiB', 1, (raw) => (raw.find((r) => r.section === 'rss' && r.peer === 'soda-mcpd')?.idle_kb ?? NaN) / 1024],
  ],
  sandbox: [
    ['`sodactl run -- true`, median', 'ms', 2, (raw) => start(raw, 'sodactl')],
    ['plain `true`, median', 'ms', 2, (raw) => start(raw, 'true')],
    ['overhead of `sodactl run` over plain `true`', 'ms', 2, (raw) => start(raw, 'sodactl') - start(raw, 'true')],
    ['`true` by Exec in a live sandbox (BenchmarkExecTrue)', 'ms', 3, (raw) => ns(raw, 'ExecTrue') / 1e6],
    ['plain `true` from the host (BenchmarkPlainTrue)', 'ms', 3, (raw) => ns(raw, 'PlainTrue') / 1e6],
    ['Exec `true` ÷ plain `true`', 'x', 2, (raw) => ns(raw, 'ExecTrue') / ns(raw, 'PlainTrue')],
  ],
  sessions: [
    ['warm `sandbox_exec` of `true`, p50', 'ms', 3, (t) => line(t, /p50 of \d+: (\S+?): ratio/)],
    ['`sandbox_create` with 100 seed files, median', 'ms', 2, (t) => line(t, /`sandbox_create`.*?median of \d+: (\S+?): ratio/)],
    ['`sandbox_diff` over 1,000 files, median', 'ms', 2, (t) => line(t, /`sandbox_diff`.*?median of \d+: (\S+?): ratio/)],
    ['cold `sodactl run --direct -- true` (mean of its 2 medians)', 'ms', 2,
      (t) => line(t, /median of \d+ before and \d+ after: (\S+) and (\S+)/, (m) => (dur(m[1]) + dur(m[2])) / 2)],
    ['idle session RSS: server, each', 'KiB', 0, (t) => line(t, /server \+?(-?[\d.]+) KiB RSS each/, (m) => +m[1])],
    ['idle session RSS: sandbox (init and children), each', 'KiB', 0, (t) => line(t, /sandbox \(init and its children\) (-?[\d.]+) KiB RSS each/, (m) => +m[1])],
  ],
};
const NAME = { bridge: 'bridge (bench/run.sh, soda-mcpd, echo + cold)', sandbox: 'sandbox (bench/sandbox.sh, startup + exec)', sessions: 'sessions (bench/sessions.sh)' };
const load = (bench, side, r) => {
  const base = `${OUT}/${bench}.${side}.r${r}`;
  if (bench === 'sessions') return existsSync(`${base}.txt`) ? readFileSync(`${base}.txt`, 'utf8') : null;
  return jsonl(`${base}.jsonl`);
};
// problems(bench, raw) -> what went wrong in soda's rows of one run
const problems = (bench, raw) => {
  if (!raw) return ['no results'];
  if (bench === 'sessions') return FIG.sessions.some(([, , , f]) => !Number.isFinite(f(raw))) ? ['a figure is missing from its output'] : [];
  const out = [];
  for (const r of raw) {
    if (bench === 'bridge' && r.peer === 'soda-mcpd') {
      if (r.failed) out.push(`${r.section}: ${r.failed}`);
      if (r.res && (r.res.errors || r.res.init_errors)) out.push(`${r.section}${r.S ? ` S=${r.S} N=${r.N}` : ''}: ${r.res.errors} errors, ${r.res.init_errors} init errors${r.res.first_error ? ` (${r.res.first_error})` : ''}`);
    }
    if (bench === 'sandbox' && r.failed && (r.section === 'exec' || (r.env === 'host' && ['sodactl', 'true'].includes(r.name))))
      out.push(`${r.section} ${r.name || ''}: ${r.failed}`);
    if (bench === 'sandbox' && r.section === 'startup' && r.res?.fails && ['sodactl', 'true'].includes(r.name)) out.push(`startup ${r.name}: ${r.res.fails} failed runs`);
  }
  return out;
};
const fmt = (x, d) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const runs = readFileSync(`${OUT}/runs.tsv`, 'utf8').split('\n').slice(1).filter(Boolean).map((l) => l.split('\t'));
const secs = (bench) => med(runs.filter((x) => x[0] === bench).map((x) => +x[4]));
const out = [];
const p = (s = '') => out.push(s);
p('# before/after benchmark comparison');
p();
p(`${new Date().toISOString().replace(/\.\d+Z$/, 'Z')} · before: ${env.BEFORE_DESC} · after: ${env.AFTER_DESC}`);
p();
p(`${ROUNDS} round(s), before then after in odd rounds, after then before in even ones; ` +
  `knobs: ${env.KNOBS.trim() || 'the benches\' defaults'}. Each value is the median over the rounds of that tree's ` +
  'figure (itself the bench\'s own median over its repetitions); ratio = after ÷ before (below 1 is better except for throughput). ' +
  'Per-round values in the last two columns. Same host, same run: the ratio is the figure; a shared machine moves absolute numbers.');
for (const bench of benches) {
  p();
  p(`## ${NAME[bench]}`);
  p();
  p('| figure | unit | before | after | after ÷ before | before per round | after per round |');
  p('|---|---|---|---|---|---|---|');
  for (const [label, unit, d, f] of FIG[bench]) {
    const vals = (side) => Array.from({ length: ROUNDS }, (_, i) => { const raw = load(bench, side, i + 1); return raw ? f(raw) : NaN; });
    const b = vals('before'), a = vals('after');
    const mb = med(b), ma = med(a);
    const ratio = Number.isFinite(ma) && Number.isFinite(mb) && mb !== 0 ? (ma / mb).toFixed(2) : '-';
    p(`| ${label} | ${unit} | ${fmt(mb, d)} | ${fmt(ma, d)} | ${ratio} | ${b.map((x) => fmt(x, d)).join(', ')} | ${a.map((x) => fmt(x, d)).join(', ')} |`);
  }
}
const failed = runs.filter((x) => x[3] !== '0');
const probs = [];
for (const bench of benches) for (const side of ['before', 'after']) for (let r = 1; r <= ROUNDS; r++)
  for (const e of problems(bench, load(bench, side, r))) probs.push(`${bench} ${side} round ${r}: ${e}`);
p();
p(`Wall time: ${env.TOTAL} s for the rounds (builds not included); median per run: ` +
  benches.map((b) => `${b} ${fmt(secs(b), 0)} s`).join(', ') + '.');
if (failed.length) {
  p();
  p('Failed runs (their figures are missing above; see their .log): ' +
    failed.map((x) => `${x[0]} ${x[1]} round ${x[2]} (exit ${x[3]})`).join('; ') + '.');
}
if (probs.length) {
  p();
  p('Problems (figures of these runs are missing or suspect; see their .log and directory):');
  p();
  for (const x of probs) p(`- ${x}`);
}
p();
p(`Raw results and logs: ${OUT}`);
console.log(out.join('\n'));
EOF
cp "$OUT/compare.md" "$BENCH/results/latest-compare.md"
cat "$BENCH/results/latest-compare.md"
log "raw results and logs in $OUT; table in bench/results/latest-compare.md"
[ ${#FAILS[@]} = 0 ] || { log "failed runs: ${FAILS[*]}"; exit 1; }
grep -q '^Problems' "$OUT/compare.md" && { log "some runs had problems: see the end of the table"; exit 1; }
exit 0
