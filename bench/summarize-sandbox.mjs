#!/usr/bin/env node
// summarize-sandbox.mjs SANDBOX.jsonl -- markdown tables from bench/sandbox.sh's
// raw results: start-up overhead side by side, and the egress relay's cost.
// No dependencies but ./lib.mjs.
import { readResults, med } from './lib.mjs';

const { rows, meta } = readResults('summarize-sandbox.mjs SANDBOX.jsonl');
const ok = (x) => typeof x === 'number' && Number.isFinite(x);
const fmt = (x, d = 1) => (ok(x) ? x.toFixed(d) : '-');
const sign = (x, d = 1) => (ok(x) ? (x >= 0 ? '+' : '') + x.toFixed(d) : '-');
const ratio = (a, b) => (ok(a) && ok(b) && b > 0 ? `${(a / b).toFixed(1)}x` : '-');
const verdict = (pass) => (pass === undefined ? '-' : pass ? '**met**' : '**missed**');
const cell = (s) => String(s).replace(/\|/g, '\\|').replace(/\n/g, ' ');

const out = [];
const p = (s = '') => out.push(s);
const failures = [];

p('# sodactl sandbox benchmark');
p();
p(`${meta.date || ''} · ${meta.host_cores ?? '?'} cores (${meta.cpu || '?'}) · Linux ${meta.kernel || '?'} · ${meta.go || ''} · ` +
  `node ${meta.node || ''} · codex ${meta.codex || '?'} · srt ${meta.srt || '?'} · bwrap ${meta.bwrap || '?'} · ` +
  `systemd ${meta.systemd || '?'} (box) · cgroup2 mounted ${meta.cgroup2 || '?'}`);
p();
p('Ratios from the same run are what to compare; absolute numbers move between runs on a shared 2-core machine.');

// ------------------------------------------------------------- start-up --
const st = (env, name) => rows.find((r) => r.section === 'startup' && r.env === env && r.name === name);
const startupRows = rows.filter((r) => r.section === 'startup');
const TARGET_MS = 25;
if (startupRows.length) {
  p();
  p(`## Start-up: \`CMD -- true\`, wall ms, median of ${meta.runs ?? '?'} runs (${meta.warmup ?? '?'} warm-up runs discarded)`);
  p();
  p('Overhead = median − median of plain `true` in the same environment. ' +
    'Ratios: this row ÷ sodactl on the host (median wall time; overhead).');
  p();
  p('| where | command | median ms | min ms | max ms | overhead ms | ÷ sodactl (wall) | ÷ sodactl (overhead) | failed runs |');
  p('|---|---|---|---|---|---|---|---|---|');
  const label = {
    'host/true': 'plain `true`',
    'host/sodactl': '`sodactl run -- true` (limits enforced: cgroup v1 directories on a hybrid host without systemd)',
    'host/codex': '`codex sandbox -- true`',
    'host/srt': '`srt --settings FILE true`',
    'host/sodactl-version': '`sodactl --version` (the binary\'s own start-up: a floor)',
    'host/sodactl-nocgroup': '`sodactl run --allow-degraded cgroup -- true`, the cgroup layer made unavailable (everything but the placement)',
    'host/codex-version': '`codex --version` (the binary\'s own start-up: a floor)',
    'box/true': 'plain `true`',
    'box/sodactl': '`sodactl run -- true` (full stack: transient scope, limits)',
  };
  const where = { host: 'host', box: 'systemd box' };
  const sodaHost = st('host', 'sodactl')?.res;
  const baseHost = st('host', 'true')?.res;
  const sodaOverHost = sodaHost && baseHost ? sodaHost.median_ms - baseHost.median_ms : NaN;
  // host rows first, then the box's, each in the order measured
  const ordered = [...startupRows.filter((r) => r.env !== 'box'), ...startupRows.filter((r) => r.env === 'box')];
  for (const r of ordered) {
    const { env, name } = r;
    const lab = label[`${env}/${name}`] || `\`${cell(r.cmd || name)}\``;
    if (r.failed) {
      failures.push(`start-up, ${where[env] || env}, ${name} (\`${r.cmd || name}\`): ${r.failed}`);
      p(`| ${where[env] || env} | ${lab} | not run: see below | | | | | | |`);
      continue;
    }
    const base = st(env, 'true')?.res;
    const over = name === 'true' ? NaN : r.res.median_ms - (base ? base.median_ms : NaN);
    const peer = name === 'codex' || name === 'srt';
    p(`| ${where[env] || env} | ${lab} | ${fmt(r.res.median_ms, 2)} | ${fmt(r.res.min_ms, 2)} | ${fmt(r.res.max_ms, 2)} | ` +
      `${name === 'true' ? '—' : sign(over, 2)} | ${peer ? ratio(r.res.median_ms, sodaHost?.median_ms) : '—'} | ` +
      `${peer ? ratio(over, sodaOverHost) : '—'} | ${r.res.fails ? `${r.res.fails} (exit ${r.res.last_fail_code})` : 0} |`);
  }
  p();
  const targets = [];
  for (const env of ['host', 'box']) {
    const r = st(env, 'sodactl'), b = st(env, 'true');
    if (r?.res && b?.res) {
      const over = r.res.median_ms - b.res.median_ms;
      targets.push(`${where[env]}${env === 'box' ? ' (full stack)' : ' (limits enforced)'} ${sign(over, 2)} ms: ${verdict(over <= TARGET_MS)}`);
    }
  }
  if (targets.length) p(`Target: sodactl's median start-up overhead ≤ ${TARGET_MS} ms — ${targets.join('; ')}.`);
  const hs = st('host', 'sodactl')?.res, hc = st('host', 'codex')?.res, ht = st('host', 'true')?.res;
  if (hs && hc && ht) {
    const so = hs.median_ms - ht.median_ms, co = hc.median_ms - ht.median_ms;
    p(`Target: on the host, sodactl's overhead ≤ ⅓ of \`codex sandbox\`'s — ${sign(so, 2)} ms against ${sign(co, 2)} ms ` +
      `(${fmt(so / co, 2)}): ${verdict(so <= co / 3)}.`);
    const sv = st('host', 'sodactl-version')?.res, sn = st('host', 'sodactl-nocgroup')?.res, cv = st('host', 'codex-version')?.res;
    if (sv && sn && cv) {
      const sStart = sv.median_ms - ht.median_ms, place = hs.median_ms - sn.median_ms, layers = sn.median_ms - sv.median_ms;
      const cStart = cv.median_ms - ht.median_ms, cSandbox = hc.median_ms - cv.median_ms;
      p();
      p(`Where the time goes (differences of the medians above): sodactl's own start-up ${sign(sStart, 2)} ms, ` +
        `the sandbox's layers but the cgroup ${sign(layers, 2)} ms, the cgroup placement ${sign(place, 2)} ms; ` +
        `codex's own start-up ${sign(cStart, 2)} ms, its sandbox ${sign(cSandbox, 2)} ms. ` +
        `Without the placement, which on this hybrid host waits for RCU grace periods in the kernel (cgroup v1 migrations; see ` +
        `docs/benchmarks.md), sodactl's overhead is ${sign(sn.median_ms - ht.median_ms, 2)} ms, ` +
        `${fmt((sn.median_ms - ht.median_ms) / co, 2)} of codex's.`);
    }
    const bs = st('box', 'sodactl')?.res, bt = st('box', 'true')?.res;
    if (bs && bt) {
      const bo = bs.median_ms - bt.median_ms;
      p(`Target: the full stack in the systemd box, overhead ≤ ½ of \`codex sandbox\`'s on the host — ${sign(bo, 2)} ms against ` +
        `${sign(co, 2)} ms (${fmt(bo / co, 2)}): ${verdict(bo <= co / 2)}.`);
    }
  }
}

// ---------------------------------------------------------------- relay --
const rel = (test, path) => rows.filter((r) => r.section === 'relay' && r.test === test && r.path === path);
const relOK = (test, path) => rel(test, path).filter((r) => r.res).map((r) => r.res);
const relayRows = rows.filter((r) => r.section === 'relay');
for (const r of relayRows) if (r.failed) failures.push(`relay ${r.test} ${r.path} rep ${r.rep}: ${r.failed}`);
if (relayRows.length) {
  p();
  p(`## Relayed TCP — medians of ${meta.reps ?? '?'} repetitions, 127.0.0.1 sink/echo on the host`);
  p();
  p('direct = sbxbench on the host straight to the server; relayed = sbxbench inside ' +
    '`sodactl run --allow-degraded cgroup --allow-private 127.0.0.1:PORT`, through the CONNECT proxy ' +
    'on 127.0.0.1:18080 in the sandbox (the relay hands each connection\u2019s socket to the host over a Unix socket) and the host-side proxy, which splices it to the sink.');
  p();
  p('| measurement | direct | relayed | relayed vs direct | target |');
  p('|---|---|---|---|---|');
  const pd = relOK('push', 'direct'), pr = relOK('push', 'relayed');
  const md = med(pd.map((x) => x.mbps)), mr = med(pr.map((x) => x.mbps));
  const share = mr / md;
  p(`| push ${meta.push_bytes || ''} (256 KiB writes), Mbit/s | ${fmt(md, 0)} (${pd.length} ok) | ${fmt(mr, 0)} (${pr.length} ok) | ` +
    `${ok(share) ? (share * 100).toFixed(0) + ' %' : '-'} | ≥ 70 %: ${verdict(ok(share) ? share >= 0.7 : undefined)} |`);
  p(`| push, seconds | ${fmt(med(pd.map((x) => x.seconds)), 3)} | ${fmt(med(pr.map((x) => x.seconds)), 3)} | ${ratio(med(pr.map((x) => x.seconds)), med(pd.map((x) => x.seconds)))} | |`);
  const pf = relOK('push', 'floor');
  if (pf.length) {
    const mf = med(pf.map((x) => x.mbps));
    p(`| push through a bare splice relay on the host (one hop, nothing else: the floor of any relay), Mbit/s | ${fmt(md, 0)} | ${fmt(mf, 0)} (${pf.length} ok) | ` +
      `${ok(mf / md) ? ((mf / md) * 100).toFixed(0) + ' %' : '-'}; soda's relay ${ok(mr / mf) ? ((mr / mf) * 100).toFixed(0) + ' %' : '-'} of it | |`);
  }
  const cd = relOK('connects', 'direct'), cr = relOK('connects', 'relayed');
  const sd = med(cd.map((x) => x.median_us)), sr = med(cr.map((x) => x.median_us));
  const add = sr - sd;
  p(`| connection setup + 1-byte echo, median µs (N=${meta.connects ?? '?'}) | ${fmt(sd)} (${cd.length} ok) | ${fmt(sr)} (${cr.length} ok) | ` +
    `${sign(add)} µs | ≤ 1000 µs added: ${verdict(ok(add) ? add <= 1000 : undefined)} |`);
  const pdd = med(cd.map((x) => x.p90_us)), prr = med(cr.map((x) => x.p90_us));
  p(`| connection setup + 1-byte echo, p90 µs | ${fmt(pdd)} | ${fmt(prr)} | ${sign(prr - pdd)} µs | |`);
  p(`| connections/s (sequential) | ${fmt(med(cd.map((x) => x.per_s)), 0)} | ${fmt(med(cr.map((x) => x.per_s)), 0)} | ${ratio(med(cr.map((x) => x.per_s)), med(cd.map((x) => x.per_s)))} | |`);
}

// ----------------------------------------------------------------- exec --
const execRows = rows.filter((r) => r.section === 'exec');
if (execRows.length) {
  for (const r of execRows.filter((x) => x.failed)) failures.push(`exec rep ${r.rep}: ${r.failed}`);
  const ns = (name) => med(execRows.filter((r) => r.name === name && ok(r.ns_op)).map((r) => r.ns_op));
  const ex = ns('ExecTrue'), pl = ns('PlainTrue');
  p();
  p('## A second command in a live sandbox');
  p();
  p('| measurement | median ms | vs plain `true` | target |');
  p('|---|---|---|---|');
  p(`| plain \`true\` (fork, exec, wait from the host) | ${fmt(pl / 1e6, 3)} | | |`);
  p(`| \`true\` by Exec in a live sandbox (request to status) | ${fmt(ex / 1e6, 3)} | ${ratio(ex, pl)} | ≤ 2x: ${verdict(ok(ex) && ok(pl) ? ex <= 2 * pl : undefined)} |`);
}

// ------------------------------------------------------------ failures --
if (failures.length) {
  p();
  p('## Not measured');
  p();
  for (const f of failures) p(`- ${cell(f)}`);
}
p();
p('Notes: every command is run once before timing and must exit 0. The timer (bench/sbxbench startup) forks ' +
  'the command with stdin/stdout/stderr on /dev/null and measures fork to exit, like shared/bench/startup-overhead.sh ' +
  '(whose figures also hold the forks of `date` around each run: about +0.5 ms on plain `true` here). In the box the timer runs inside the ' +
  'box, so `sdbox exec` is not counted. codex is its native binary (the npm wrapper `node_modules/.bin/codex` adds a ' +
  'Node start-up); srt runs with an explicit settings file that allows no network and no writes.');
process.stdout.write(out.join('\n') + '\n');
