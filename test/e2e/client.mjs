#!/usr/bin/env node
// client.mjs: the MCP client side of soda's end-to-end tests on a real
// systemd (test/e2e). Run inside the box (test/box/sdbox exec), it talks to
// a socket-activated soda-mcp@NAME on 127.0.0.1 only, with the real
// TypeScript SDK (test/node/node_modules/@modelcontextprotocol/sdk) or raw
// HTTP where the SDK would hide what is measured. The bearer token comes
// from $SODA_TOKEN. Every result is one JSON line on stdout.
//
//   client.mjs unauth PORT                 POST initialize without a token
//   client.mjs call PORT TOOL ARGS         SDK session, one tools/call, end
//                                          the session (DELETE)
//   client.mjs hold PORT TOOL ARGS         as call, then keep the session:
//                                          each stdin line {"tool","args"}
//                                          is called; EOF ends the session
//   client.mjs late PORT TOOL ARGS         as call, but retries initialize
//                                          after 503 + Retry-After (a
//                                          draining bridge), counting tries
//   client.mjs probe PORT MS EVERY         GET /ready on a new connection
//                                          every EVERY ms for MS ms: counts
//                                          by status, refused connections
//   client.mjs bench PORT RUNS UNIT        RUNS times: systemctl stop UNIT
//                                          (and reset-failed: the start rate
//                                          limit), then time a new
//                                          connection's initialize until
//                                          answered
//
// ARGS is a JSON object. Exit status 0 when the command ran (the JSON says
// whether the MCP call succeeded), 2 on a usage or connection failure.

import { execFileSync } from 'node:child_process';
import http from 'node:http';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';

const SDK = new URL('../node/node_modules/@modelcontextprotocol/sdk/dist/esm/', import.meta.url);
const { Client } = await import(new URL('client/index.js', SDK).href);
const { StreamableHTTPClientTransport } = await import(new URL('client/streamableHttp.js', SDK).href);

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const token = process.env.SODA_TOKEN ?? '';
const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'soda-e2e', version: '1.0.0' } },
};

// request sends one HTTP request on a connection of its own (agent: false)
// and resolves when the response is complete or, with until, as soon as
// the body contains until (an SSE stream may stay open).
function request(port, method, path, { body, headers = {}, auth = true, until, timeoutMs = 30000 } = {}) {
  return new Promise((resolve) => {
    const h = { Host: `127.0.0.1:${port}`, ...headers };
    if (auth && token) h.Authorization = `Bearer ${token}`;
    if (body !== undefined) {
      h['Content-Type'] = 'application/json';
      h.Accept = 'application/json, text/event-stream';
    }
    const req = http.request({ host: '127.0.0.1', port, method, path, headers: h, agent: false }, (res) => {
      let data = '';
      const done = () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode, headers: res.headers, body: data });
      };
      res.setEncoding('utf8');
      res.on('data', (c) => {
        data += c;
        if (until && data.includes(until)) {
          done();
          req.destroy();
        }
      });
      res.on('end', done);
      res.on('error', () => done());
    });
    const timer = setTimeout(() => {
      req.destroy();
      resolve({ error: 'ETIMEDOUT' });
    }, timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      resolve({ error: e.code || e.message });
    });
    if (body !== undefined) req.write(JSON.stringify(body));
    req.end();
  });
}

async function connect(port) {
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'soda-e2e', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

async function call(client, tool, args, timeout = 60000) {
  try {
    const r = await client.callTool({ name: tool, arguments: args }, undefined, { timeout });
    const text = (r.content ?? []).map((c) => c.text ?? '').join('');
    return { ok: !r.isError, text };
  } catch (e) {
    return { ok: false, code: e.code, message: String(e.message ?? e) };
  }
}

async function end({ client, transport }) {
  try {
    await transport.terminateSession();
  } catch {}
  await client.close().catch(() => {});
}

const [mode, portArg, ...rest] = process.argv.slice(2);
const port = Number(portArg);
if (!mode || !port) {
  console.error('usage: client.mjs unauth|call|hold|late|probe|bench PORT ...');
  process.exit(2);
}

switch (mode) {
  case 'unauth': {
    const r = await request(port, 'POST', '/mcp', { body: INIT, auth: false });
    out({ status: r.status, error: r.error, www_authenticate: r.headers?.['www-authenticate'] });
    break;
  }
  case 'call':
  case 'hold': {
    const [tool, argsJSON = '{}'] = rest;
    const t0 = performance.now();
    let s;
    try {
      s = await connect(port);
    } catch (e) {
      out({ ok: false, stage: 'connect', message: String(e.message ?? e) });
      process.exit(2);
    }
    const r = await call(s.client, tool, JSON.parse(argsJSON));
    out({ ...r, sessionId: s.transport.sessionId, ms: +(performance.now() - t0).toFixed(1), ready: mode === 'hold' });
    if (mode === 'hold') {
      const rl = createInterface({ input: process.stdin });
      for await (const line of rl) {
        if (!line.trim()) continue;
        const { tool: t, args = {} } = JSON.parse(line);
        out(await call(s.client, t, args));
      }
    }
    await end(s);
    break;
  }
  case 'late': {
    // A client connecting while the service restarts: a draining bridge
    // answers 503 with Retry-After; a well-behaved client waits and retries.
    const [tool, argsJSON = '{}'] = rest;
    const t0 = performance.now();
    const attempts = [];
    for (;;) {
      const r = await request(port, 'POST', '/mcp', { body: INIT, until: '"result"' });
      attempts.push({ at_ms: +(performance.now() - t0).toFixed(0), status: r.status, error: r.error });
      if (r.status === 200 || attempts.length >= 10) {
        const sid = r.headers?.['mcp-session-id'];
        if (sid) await request(port, 'DELETE', '/mcp', { headers: { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-06-18' } });
        break;
      }
      if (r.error && r.error !== 'ECONNRESET') break; // refused: the socket was not there
      await sleep(Math.min(Number(r.headers?.['retry-after'] ?? 1), 5) * 1000);
    }
    let s;
    try {
      s = await connect(port);
    } catch (e) {
      out({ ok: false, stage: 'connect', attempts, message: String(e.message ?? e) });
      process.exit(2);
    }
    const r = await call(s.client, tool, JSON.parse(argsJSON));
    await end(s);
    out({ ...r, attempts, ms: +(performance.now() - t0).toFixed(0) });
    break;
  }
  case 'probe': {
    const [durArg, everyArg] = rest;
    const dur = Number(durArg);
    const every = Number(everyArg);
    const t0 = performance.now();
    const pending = [];
    const results = [];
    while (performance.now() - t0 < dur) {
      const opened = performance.now() - t0;
      pending.push(
        request(port, 'GET', '/ready').then((r) => {
          results.push({ opened_ms: +opened.toFixed(0), waited_ms: +(performance.now() - t0 - opened).toFixed(0), status: r.status, error: r.error });
        }),
      );
      await sleep(every);
    }
    await Promise.all(pending);
    results.sort((a, b) => a.opened_ms - b.opened_ms);
    const count = {};
    for (const r of results) {
      const k = r.error ?? String(r.status);
      count[k] = (count[k] ?? 0) + 1;
    }
    out({ probes: results.length, count, max_wait_ms: Math.max(...results.map((r) => r.waited_ms)), results });
    break;
  }
  case 'bench': {
    const [runsArg, unit] = rest;
    const runs = Number(runsArg);
    const ms = [];
    for (let i = 0; i < runs; i++) {
      // Eleven starts within a second or two would hit the unit's default
      // start rate limit (5 in 10 s) and fail the socket: reset it.
      execFileSync('systemctl', ['stop', unit], { stdio: 'ignore' });
      execFileSync('systemctl', ['reset-failed', unit], { stdio: 'ignore' });
      const state = execFileSync('systemctl', ['show', '-p', 'ActiveState', '--value', unit], { encoding: 'utf8' }).trim();
      if (state !== 'inactive' && state !== 'failed') {
        out({ ok: false, message: `run ${i + 1}: ${unit} is ${state} after stop` });
        process.exit(2);
      }
      const t0 = performance.now();
      const r = await request(port, 'POST', '/mcp', { body: INIT, until: '"result"' });
      const d = performance.now() - t0;
      if (r.status !== 200 || !r.body.includes('"result"')) {
        out({ ok: false, message: `run ${i + 1}: status ${r.status} ${r.error ?? ''} ${r.body ?? ''}` });
        process.exit(2);
      }
      ms.push(+d.toFixed(2));
    }
    const sorted = [...ms].sort((a, b) => a - b);
    out({ ok: true, runs, ms_all: ms, median_ms: sorted[Math.floor(sorted.length / 2)], min_ms: sorted[0], max_ms: sorted[sorted.length - 1] });
    break;
  }
  default:
    console.error(`unknown mode ${mode}`);
    process.exit(2);
}
process.exit(0);
