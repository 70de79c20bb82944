#!/usr/bin/env node
// summarize.mjs RESULTS.jsonl -- markdown tables from bench/run.sh's raw results
// (medians over the repetitions). No dependencies but ./lib.mjs.
import { readResults, med } from './lib.mjs';

const { rows, meta } = readResults('summarize.mjs RESULTS.jsonl');
const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const sign = (x, d = 3) => (Number.isFinite(x) ? (x >= 0 ? '+' : '') + x.toFixed(d) : '-');
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}x` : '-');
const mb = (kb) => (Number.isFinite(kb) ? (kb / 1024).toFixed(1) : '-');

// runs(section, peer, S, N) -> result objects of the successful samples
const runs = (section, peer, S, N) =>
  rows.filter((r) => r.section === section && r.peer === peer && r.S === S && r.N === N && r.res).map((r) => r.res);
// stat(section, peer, S, N, key) -> median of key (accepts the Go and Node field names)
const alias = { calls_per_sec: 'calls_per_s', seconds: 'wall_s' };
const stat = (section, peer, S, N, key) =>
  med(runs(section, peer, S, N).map((r) => (key in r ? r[key] : r[alias[key]])));
const errs = (section, peer, S, N) => runs(section, peer, S, N).reduce((a, r) => a + (r.errors || 0), 0);
const samples = (section, peer, S, N) => runs(section, peer, S, N).length;
const failed = (section, peer) => rows.find((r) => r.section === section && r.peer === peer && r.failed);

const bridges = (meta.bridges || 'soda-mcpd supergateway mcp-proxy').split(/\s+/).filter(Boolean);
const out = [];
const p = (s = '') => out.push(s);

p('# soda-mcpd benchmark');
p();
p(`${meta.date || ''} · ${meta.host_cores ?? '?'} cores · Linux ${meta.kernel || '?'} · ${meta.go || ''} · node ${meta.node || ''} · ` +
  `supergateway ${meta.supergateway || '?'} · mcp-proxy ${meta['mcp-proxy'] || '?'} · ` +
  `server-everything ${meta['@modelcontextprotocol/server-everything'] || '?'} · sdk ${meta['@modelcontextprotocol/sdk'] || '?'}`);
p();
p(`Medians over ${meta.reps ?? '?'} repetitions, all on 127.0.0.1, every bridge measured in the same run. ` +
  'Ratios from the same run are what to compare; absolute numbers move between runs on a shared 2-core machine.');

const hasEcho = rows.some((r) => r.section === 'echo');
if (hasEcho) {
  const S = 1, N = 2000;
  const b50 = stat('echo', 'stdio', S, N, 'p50_ms');
  const b99 = stat('echo', 'stdio', S, N, 'p99_ms');
  p();
  p(`## (a) Added latency — Go client (mcpload), Go echo child (mcpecho), 1 session × ${N} calls`);
  p();
  p('| path | calls/s | p50 ms | p90 ms | p99 ms | added p50 ms | added p99 ms | errors |');
  p('|---|---|---|---|---|---|---|---|');
  for (const peer of ['stdio', 'http-floor', ...bridges]) {
    if (failed('echo', peer)) { p(`| ${peer} | failed: ${failed('echo', peer).failed} | | | | | | |`); continue; }
    if (!samples('echo', peer, S, N)) continue;
    const v50 = stat('echo', peer, S, N, 'p50_ms');
    const v99 = stat('echo', peer, S, N, 'p99_ms');
    const label = peer === 'stdio' ? 'stdio, no bridge (baseline)'
      : peer === 'http-floor' ? 'HTTP floor: mcpecho answering HTTP itself (no bridge, no child)' : peer;
    p(`| ${label} | ${fmt(stat('echo', peer, S, N, 'calls_per_sec'), 0)} | ${fmt(v50, 3)} | ${fmt(stat('echo', peer, S, N, 'p90_ms'), 3)} | ${fmt(v99, 3)} | ` +
      `${peer === 'stdio' ? '—' : sign(v50 - b50)} | ${peer === 'stdio' ? '—' : sign(v99 - b99)} | ${errs('echo', peer, S, N)} |`);
  }

  const S8 = 8, N8 = 500;
  const soda = stat('echo', 'soda-mcpd', S8, N8, 'calls_per_sec');
  p();
  p(`## (b) Throughput — Go client, mcpecho child, ${S8} sessions × ${N8} calls`);
  p();
  p('| path | calls/s | p50 ms | p99 ms | errors | soda-mcpd / this |');
  p('|---|---|---|---|---|---|');
  for (const peer of ['stdio', ...bridges]) {
    if (!samples('echo', peer, S8, N8)) continue;
    const v = stat('echo', peer, S8, N8, 'calls_per_sec');
    const label = peer === 'stdio' ? 'stdio, no bridge (upper bound)' : peer;
    p(`| ${label} | ${fmt(v, 0)} | ${fmt(stat('echo', peer, S8, N8, 'p50_ms'), 3)} | ${fmt(stat('echo', peer, S8, N8, 'p99_ms'), 3)} | ` +
      `${errs('echo', peer, S8, N8)} | ${peer === 'soda-mcpd' ? '1.00x' : ratio(soda, v)} |`);
  }
}

const cold = rows.filter((r) => r.section === 'cold');
if (cold.length) {
  const sodaCold = cold.find((r) => r.peer === 'soda-mcpd' && r.res)?.res?.init_ms_p50;
  p();
  p('## (c) Cold start — spawn of the bridge → first `initialize` answered (mcpecho child, polled every 2 ms)');
  p();
  p('| bridge | median ms | min–max ms | ok/runs | peer / soda-mcpd |');
  p('|---|---|---|---|---|');
  for (const r of cold) {
    const x = r.res;
    if (!x) { p(`| ${r.peer} | failed | | | |`); continue; }
    p(`| ${r.peer} | ${fmt(x.init_ms_p50, 1)} | ${fmt(x.init_ms_min, 1)}–${fmt(x.init_ms_max, 1)} | ${x.runs - x.errors}/${x.runs} | ` +
      `${r.peer === 'soda-mcpd' ? '1.00x' : ratio(x.init_ms_p50, sodaCold)} |`);
  }
}

const rss = rows.filter((r) => r.section === 'rss');
if (rss.length) {
  p();
  p('## (d) Memory — RSS of the bridge process alone (children excluded), and of its whole process tree (mcpecho children)');
  p();
  p('| bridge | bridge idle MB | bridge, 8 sessions MB | bridge per session KB | tree idle MB (procs) | tree, 8 sessions MB (procs) |');
  p('|---|---|---|---|---|---|');
  for (const r of rss) {
    p(`| ${r.peer} | ${mb(r.idle_kb)} | ${mb(r.rss8_kb)} | ${fmt((r.rss8_kb - r.idle_kb) / 8, 0)} | ` +
      `${mb(r.tree_idle_kb)} (${r.procs_idle}) | ${mb(r.tree8_kb)} (${r.procs8}) |`);
  }
}

const hasNode = rows.some((r) => r.section === 'node');
if (hasNode) {
  const peers = [...bridges, 'direct'];
  const s1 = stat('node', 'soda-mcpd', 1, 500, 'calls_per_sec');
  const s8 = stat('node', 'soda-mcpd', 8, 200, 'calls_per_sec');
  p();
  p('## (e) Node client (bench/mcp-load.mjs, TypeScript SDK, opens the GET stream) → bridge → server-everything (Node, stdio)');
  p();
  p('| bridge | S=1,N=500 calls/s | p50 / p99 ms | S=8,N=200 calls/s | p50 / p99 ms | errors | soda-mcpd / this (S=1, S=8) |');
  p('|---|---|---|---|---|---|---|');
  for (const peer of peers) {
    if (failed('node', peer)) { p(`| ${peer} | failed: ${failed('node', peer).failed} | | | | | |`); continue; }
    if (!samples('node', peer, 1, 500) && !samples('node', peer, 8, 200)) continue;
    const a = stat('node', peer, 1, 500, 'calls_per_sec');
    const b = stat('node', peer, 8, 200, 'calls_per_sec');
    const label = peer === 'direct' ? "server-everything's own HTTP mode (no bridge)" : peer;
    p(`| ${label} | ${fmt(a, 0)} | ${fmt(stat('node', peer, 1, 500, 'p50_ms'))} / ${fmt(stat('node', peer, 1, 500, 'p99_ms'))} | ` +
      `${fmt(b, 0)} | ${fmt(stat('node', peer, 8, 200, 'p50_ms'))} / ${fmt(stat('node', peer, 8, 200, 'p99_ms'))} | ` +
      `${errs('node', peer, 1, 500) + errs('node', peer, 8, 200)} | ${peer === 'soda-mcpd' ? '1.00x, 1.00x' : `${ratio(s1, a)}, ${ratio(s8, b)}`} |`);
  }
}

p();
p('Notes: soda-mcpd runs one child per session and checks a bearer token; supergateway (--stateful) runs one child per session; ' +
  'mcp-proxy (--server stream) shares one child between sessions. supergateway and server-everything have no --host option: ' +
  'bench/loopback-only.cjs (node -r) makes them listen on 127.0.0.1.');
console.log(out.join('\n'));
