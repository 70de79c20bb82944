#!/usr/bin/env node
// mcp-load.mjs -- tiny load generator for an MCP Streamable HTTP endpoint.
// (Copy of the shared peer-benchmark kit, kept in the repo for bench/run.sh; the one
// change: an initialize failure also prints its cause, e.g. ECONNREFUSED.)
//
// Opens S concurrent sessions (initialize each, concurrently), then runs N
// sequential tools/call per session, all sessions in parallel, and prints:
// sessions, total calls, errors, wall seconds, calls/s, p50/p99 latency and
// time-to-first-initialize. Only dependency: @modelcontextprotocol/sdk (1.x).
//
//   node mcp-load.mjs --url http://127.0.0.1:8000/mcp [-s 8] [-n 200]
//        [--token TOKEN | env MCP_TOKEN] [--tool echo] [--args '{"message":"hi"}']
//        [--warmup 0] [--timeout 30000] [--ready-wait 0] [--json]
//        [--hold-ms MS [--hold-file PATH]]   keep sessions open MS after the calls
//                                            (touching PATH first), e.g. to sample RSS
//
// SDK lookup (ESM ignores NODE_PATH, so this script resolves it by hand):
// $MCP_SDK_DIR, then every entry of $NODE_PATH (a node_modules dir), then
// node_modules folders from the current directory upwards, then from this
// script's directory upwards.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';

const TSTART = performance.now();
let T0 = TSTART; // reset right before the sessions are opened

function usage(msg) {
  if (msg) console.error(`mcp-load: ${msg}`);
  console.error(
    'usage: mcp-load.mjs --url URL [-s SESSIONS] [-n CALLS_PER_SESSION] [--token T]\n' +
      '                    [--tool NAME] [--args JSON] [--warmup K] [--timeout MS]\n' +
      '                    [--ready-wait MS] [--hold-ms MS] [--hold-file PATH] [--json]',
  );
  process.exit(2);
}

function parseArgs(argv) {
  const o = {
    url: undefined,
    token: process.env.MCP_TOKEN || undefined,
    sessions: 1,
    calls: 100,
    tool: 'echo',
    args: { message: 'hi' },
    warmup: 0,
    timeout: 30000,
    readyWait: 0,
    holdMs: 0,
    holdFile: undefined,
    json: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--url': case '-u': o.url = next(); break;
      case '--token': case '-t': o.token = next(); break;
      case '--sessions': case '-s': o.sessions = parseInt(next(), 10); break;
      case '--calls': case '-n': o.calls = parseInt(next(), 10); break;
      case '--tool': o.tool = next(); break;
      case '--args': o.args = JSON.parse(next()); break;
      case '--warmup': o.warmup = parseInt(next(), 10); break;
      case '--timeout': o.timeout = parseInt(next(), 10); break;
      case '--ready-wait': o.readyWait = parseInt(next(), 10); break;
      case '--hold-ms': o.holdMs = parseInt(next(), 10); break;
      case '--hold-file': o.holdFile = next(); break;
      case '--json': o.json = true; break;
      case '-h': case '--help': usage(); break;
      default:
        if (!o.url && /^https?:\/\//.test(a)) o.url = a;
        else usage(`unknown argument ${a}`);
    }
  }
  if (!o.url) usage('--url is required');
  if (!(o.sessions >= 1) || !(o.calls >= 0)) usage('bad -s/-n');
  return o;
}

function findSdk() {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const cands = [];
  if (process.env.MCP_SDK_DIR) cands.push(process.env.MCP_SDK_DIR);
  for (const p of (process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean))
    cands.push(path.join(p, '@modelcontextprotocol', 'sdk'));
  for (let start of [process.cwd(), here]) {
    for (let d = path.resolve(start); ; d = path.dirname(d)) {
      cands.push(path.join(d, 'node_modules', '@modelcontextprotocol', 'sdk'));
      if (path.dirname(d) === d) break;
    }
  }
  for (const c of cands)
    if (existsSync(path.join(c, 'dist', 'esm', 'client', 'streamableHttp.js'))) return c;
  console.error('mcp-load: cannot find @modelcontextprotocol/sdk; set NODE_PATH or MCP_SDK_DIR');
  process.exit(2);
}

const opt = parseArgs(process.argv.slice(2));
const sdkDir = findSdk();
const imp = (rel) => import(pathToFileURL(path.join(sdkDir, 'dist', 'esm', rel)).href);
const [{ Client }, { StreamableHTTPClientTransport }] = await Promise.all([
  imp('client/index.js'),
  imp('client/streamableHttp.js'),
]);

const requestInit = opt.token ? { headers: { Authorization: `Bearer ${opt.token}` } } : undefined;

let firstInitMs = null; // from the start of the init phase to the first initialize completed
const initMs = [];

async function openSession(i) {
  const started = performance.now();
  const deadline = started + opt.readyWait;
  for (;;) {
    const client = new Client({ name: 'mcp-load', version: '1.0.0' }, { capabilities: {} });
    const transport = new StreamableHTTPClientTransport(new URL(opt.url), { requestInit });
    try {
      await client.connect(transport, { timeout: opt.timeout });
      const now = performance.now();
      initMs.push(now - started);
      if (firstInitMs === null) firstInitMs = now - T0;
      return { client, transport };
    } catch (e) {
      try { await client.close(); } catch {}
      if (performance.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
        continue;
      }
      throw new Error(`session ${i}: initialize failed: ${e?.message || e}${e?.cause ? ` (cause: ${e.cause?.code || ''} ${e.cause?.message || e.cause})` : ''}`);
    }
  }
}

function pct(sorted, p) {
  if (!sorted.length) return NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx];
}

const lat = [];
let errors = 0;
let firstError = null;

async function runSession(s) {
  const callOnce = async (record) => {
    const t = performance.now();
    try {
      const r = await s.client.callTool({ name: opt.tool, arguments: opt.args }, undefined, {
        timeout: opt.timeout,
      });
      if (r?.isError) throw new Error(`tool returned isError: ${JSON.stringify(r.content).slice(0, 200)}`);
      if (record) lat.push(performance.now() - t);
    } catch (e) {
      if (record) {
        errors++;
        firstError ??= e?.message || String(e);
      }
    }
  };
  for (let i = 0; i < opt.warmup; i++) await callOnce(false);
  for (let i = 0; i < opt.calls; i++) await callOnce(true);
}

const sdkLoadMs = performance.now() - TSTART;
const tInit0 = performance.now();
T0 = tInit0;
const settled = await Promise.allSettled(
  Array.from({ length: opt.sessions }, (_, i) => openSession(i)),
);
const initWall = performance.now() - tInit0;
const sessions = settled.filter((r) => r.status === 'fulfilled').map((r) => r.value);
const initFailures = settled.filter((r) => r.status === 'rejected');
for (const f of initFailures) {
  errors += opt.calls;
  firstError ??= f.reason?.message || String(f.reason);
}

const tCalls0 = performance.now();
await Promise.all(sessions.map(runSession));
const callWall = (performance.now() - tCalls0) / 1000;

if (opt.holdMs > 0) {
  if (opt.holdFile) (await import('node:fs')).writeFileSync(opt.holdFile, String(process.pid));
  await new Promise((r) => setTimeout(r, opt.holdMs));
}

await Promise.allSettled(
  sessions.map(async (s) => {
    try { await s.transport.terminateSession(); } catch {}
    try { await s.client.close(); } catch {}
  }),
);

lat.sort((a, b) => a - b);
initMs.sort((a, b) => a - b);
const ok = lat.length;
const res = {
  url: opt.url,
  sessions: opt.sessions,
  sessions_ok: sessions.length,
  calls_per_session: opt.calls,
  total_calls: opt.sessions * opt.calls,
  ok_calls: ok,
  errors,
  wall_s: +callWall.toFixed(3),
  calls_per_s: +(ok / callWall || 0).toFixed(1),
  p50_ms: +pct(lat, 50).toFixed(3),
  p99_ms: +pct(lat, 99).toFixed(3),
  max_ms: +(lat.length ? lat[lat.length - 1] : NaN).toFixed(3),
  first_init_ms: firstInitMs === null ? null : +firstInitMs.toFixed(1),
  init_wall_ms: +initWall.toFixed(1),
  init_p50_ms: +pct(initMs, 50).toFixed(1),
  sdk_load_ms: +sdkLoadMs.toFixed(1),
  first_error: firstError,
};

if (opt.json) {
  console.log(JSON.stringify(res));
} else {
  console.log(
    `url=${res.url}\n` +
      `sessions=${res.sessions} (ok ${res.sessions_ok}) calls/session=${res.calls_per_session} total_calls=${res.total_calls} errors=${res.errors}\n` +
      `wall_s=${res.wall_s} calls_per_s=${res.calls_per_s} p50_ms=${res.p50_ms} p99_ms=${res.p99_ms} max_ms=${res.max_ms}\n` +
      `first_init_ms=${res.first_init_ms} init_wall_ms=${res.init_wall_ms} init_p50_ms=${res.init_p50_ms} (sdk_load_ms=${res.sdk_load_ms}, not included)` +
      (firstError ? `\nfirst_error=${firstError}` : ''),
  );
}
process.exit(errors ? 1 : 0);
