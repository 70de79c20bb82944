// Shared harness for the soda-mcpd integration tests.
//
// Starts one soda-mcpd per test file in front of the real
// @modelcontextprotocol/server-everything (stdio mode) and hands out real
// @modelcontextprotocol/sdk clients wired to it. Every child server the
// bridge spawns carries a unique marker argument so the suite can count (and
// only ever touch) its own child processes.
//
// All traffic goes to 127.0.0.1 only.

import { spawn, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, existsSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** /work/main/test/node */
export const TEST_ROOT = path.resolve(here, '..');

export const EVERYTHING_ENTRY = path.join(
  TEST_ROOT,
  'node_modules/@modelcontextprotocol/server-everything/dist/index.js',
);

export const PROTOCOL_VERSION = LATEST_PROTOCOL_VERSION;

export function mcpdBinary() {
  return process.env.SODA_MCPD
    ? path.resolve(process.env.SODA_MCPD)
    : path.resolve(TEST_ROOT, '../../bin/soda-mcpd');
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Poll `fn` until it returns a truthy value or `timeoutMs` elapses.
 * Returns the truthy value; throws with `what` on timeout.
 */
export async function waitFor(fn, timeoutMs, what, intervalMs = 25) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await sleep(intervalMs);
  }
}

/** Reject if `p` does not settle within `ms`. */
export function within(p, ms, what) {
  let t;
  const timeout = new Promise((_, rej) => {
    t = setTimeout(() => rej(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(t));
}

/** PIDs of live processes whose command line contains `marker` (pgrep -f). */
export function pidsWithMarker(marker) {
  try {
    const out = execFileSync('pgrep', ['-f', '--', marker], { encoding: 'utf8' });
    return out
      .split('\n')
      .map((s) => s.trim())
      .filter(Boolean)
      .map(Number)
      .filter((pid) => pid !== process.pid);
  } catch (e) {
    if (e.status === 1) return []; // pgrep: nothing matched
    throw e;
  }
}

/** Command line of a pid (for diagnostics), or null if gone. */
export function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return null;
  }
}

/**
 * Start soda-mcpd in front of server-everything (stdio).
 * Resolves once the bridge logged {"msg":"serving","url":...}.
 */
export async function startBridge({ extraArgs = [], startTimeoutMs = 20000 } = {}) {
  const bin = mcpdBinary();
  if (!existsSync(bin)) {
    throw new Error(
      `soda-mcpd binary not found at ${bin}; build it with ` +
        '`cd /work/main && go build -o bin/soda-mcpd ./cmd/soda-mcpd` or set SODA_MCPD',
    );
  }
  const tmp = mkdtempSync(path.join(tmpdir(), 'soda-mcpd-node-test-'));
  const tokenFile = path.join(tmp, 'token');
  // Unique marker on every child's command line: server-everything only looks
  // at argv[2] ("stdio") and ignores the rest.
  const marker = `--soda-node-test-marker=${randomUUID()}`;
  const args = [
    '--listen', '127.0.0.1:0',
    '--token-file', tokenFile,
    '--log-format', 'json',
    '--max-sessions', '32',
    '--idle-timeout', '5m',
    '--call-timeout', '90s',
    ...extraArgs,
    '--',
    process.execPath, EVERYTHING_ENTRY, 'stdio', marker,
  ];
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: TEST_ROOT });
  const stderrLines = [];
  const stdoutChunks = [];
  let exited = null;
  const exitPromise = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
  });
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (d) => stdoutChunks.push(d));

  const url = await new Promise((resolve, reject) => {
    let buf = '';
    let done = false;
    const timer = setTimeout(() => {
      if (done) return;
      done = true;
      reject(new Error(`soda-mcpd did not log "serving" within ${startTimeoutMs} ms; stderr:\n${stderrLines.join('\n')}`));
    }, startTimeoutMs);
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => {
      buf += chunk;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        stderrLines.push(line);
        // Optional: keep the bridge's log for debugging (SODA_MCPD_LOG=/path/file).
        if (process.env.SODA_MCPD_LOG) {
          try {
            appendFileSync(process.env.SODA_MCPD_LOG, line + '\n');
          } catch {}
        }
        if (done) continue;
        let rec;
        try {
          rec = JSON.parse(line);
        } catch {
          continue;
        }
        if (rec && rec.msg === 'serving' && typeof rec.url === 'string') {
          done = true;
          clearTimeout(timer);
          resolve(rec.url);
        }
      }
    });
    proc.on('error', (err) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(err);
    });
    exitPromise.then(({ code, signal }) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      reject(new Error(`soda-mcpd exited (code=${code} signal=${signal}) before serving; stderr:\n${stderrLines.join('\n')}`));
    });
  });

  const mcpUrl = new URL(url);
  if (mcpUrl.hostname !== '127.0.0.1') {
    proc.kill('SIGKILL');
    throw new Error(`refusing non-loopback serving url ${url}`);
  }
  const base = `${mcpUrl.protocol}//${mcpUrl.host}`;
  const token = readFileSync(tokenFile, 'utf8').trim();

  const bridge = {
    bin,
    args,
    proc,
    pid: proc.pid,
    url,
    mcpUrl,
    base,
    token,
    tokenFile,
    tmp,
    marker,
    stderrLines,
    stdoutChunks,
    clients: new Set(),
    get exited() {
      return exited;
    },
    exitPromise,
    authHeaders() {
      return { Authorization: `Bearer ${token}` };
    },
    /** Marker processes other than soda-mcpd itself (whose argv has the marker too). */
    childPids() {
      return pidsWithMarker(marker).filter((pid) => pid !== proc.pid);
    },
  };
  return bridge;
}

/**
 * Close every tracked client (DELETE the session first), SIGTERM the bridge,
 * wait for it to exit, and return the marker processes that remain after a
 * short grace period (should be []).
 */
export async function shutdownBridge(bridge, { graceMs = 3000 } = {}) {
  for (const c of [...bridge.clients]) {
    await closeClient(bridge, c);
  }
  if (!bridge.exited) {
    bridge.proc.kill('SIGTERM');
  }
  const ex = await within(bridge.exitPromise, 15000, 'soda-mcpd exit after SIGTERM').catch((e) => {
    bridge.proc.kill('SIGKILL');
    throw e;
  });
  let left = bridge.childPids();
  const deadline = Date.now() + graceMs;
  while (left.length && Date.now() < deadline) {
    await sleep(50);
    left = bridge.childPids();
  }
  return { exit: ex, leftover: left.map((pid) => ({ pid, cmd: cmdline(pid) })) };
}

/** Last-resort cleanup for `after`: kill our bridge and our marked children by pid. */
export function forceCleanup(bridge) {
  if (!bridge) return;
  if (!bridge.exited) {
    try {
      bridge.proc.kill('SIGKILL');
    } catch {}
  }
  for (const pid of bridge.childPids()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
  try {
    rmSync(bridge.tmp, { recursive: true, force: true });
  } catch {}
}

/**
 * Connect a real SDK client over Streamable HTTP.
 * `setup(client)` runs before connect (register request handlers there).
 * Every notification the client does not otherwise handle is recorded in
 * `client.notes` (array of {at, message}).
 */
export async function connectStreamable(
  bridge,
  { capabilities = {}, setup, name = 'soda-node-test', transportOptions = {} } = {},
) {
  const client = new Client({ name, version: '0.0.0' }, { capabilities });
  recordNotifications(client);
  if (setup) await setup(client);
  const transport = new StreamableHTTPClientTransport(bridge.mcpUrl, {
    requestInit: { headers: bridge.authHeaders() },
    // No silent endless retries of the GET stream in a test.
    reconnectionOptions: {
      initialReconnectionDelay: 200,
      maxReconnectionDelay: 1000,
      reconnectionDelayGrowFactor: 1.5,
      maxRetries: 2,
    },
    ...transportOptions,
  });
  tapTransport(client, transport);
  await within(client.connect(transport), 15000, 'client.connect (streamable http)');
  client.sodaTransport = transport;
  bridge.clients.add(client);
  return client;
}

/** Connect a real SDK client over the legacy HTTP+SSE transport (/sse). */
export async function connectLegacySse(bridge, { capabilities = {}, setup, name = 'soda-node-test-sse' } = {}) {
  const client = new Client({ name, version: '0.0.0' }, { capabilities });
  recordNotifications(client);
  if (setup) await setup(client);
  const auth = bridge.authHeaders();
  const transport = new SSEClientTransport(new URL('/sse', bridge.base), {
    requestInit: { headers: auth },
    eventSourceInit: {
      fetch: (url, init) => {
        const headers = new Headers(init?.headers);
        headers.set('Authorization', auth.Authorization);
        return fetch(url, { ...init, headers });
      },
    },
  });
  tapTransport(client, transport);
  await within(client.connect(transport), 15000, 'client.connect (legacy sse)');
  client.sodaTransport = transport;
  client.sodaLegacy = true;
  bridge.clients.add(client);
  return client;
}

// Protocol.connect chains handlers that are already set on the transport, so
// these see every inbound message / transport error.
function tapTransport(client, transport) {
  client.inbound = [];
  client.transportErrors = [];
  transport.onmessage = (m) => client.inbound.push({ at: Date.now(), message: m });
  transport.onerror = (e) => client.transportErrors.push(e);
}

function recordNotifications(client) {
  client.notes = [];
  client.fallbackNotificationHandler = async (n) => {
    client.notes.push({ at: Date.now(), message: n });
  };
}

/** DELETE the session (streamable) and close the client; never throws. */
export async function closeClient(bridge, client) {
  bridge.clients.delete(client);
  const t = client.sodaTransport;
  if (t && !client.sodaLegacy && t.sessionId) {
    try {
      await within(t.terminateSession(), 5000, 'terminateSession');
    } catch {}
  }
  try {
    await within(client.close(), 5000, 'client.close');
  } catch {}
}

// ---------------------------------------------------------------------------
// Raw HTTP helpers (no SDK) for tests that must control exactly which
// streams are open.

export function rawHeaders(bridge, { sessionId, protocolVersion, accept = 'application/json, text/event-stream' } = {}) {
  const h = {
    ...bridge.authHeaders(),
    'Content-Type': 'application/json',
    Accept: accept,
  };
  if (sessionId) h['Mcp-Session-Id'] = sessionId;
  if (protocolVersion) h['MCP-Protocol-Version'] = protocolVersion;
  return h;
}

export async function rawPost(bridge, body, opts = {}) {
  const { signal, ...hopts } = opts;
  return fetch(bridge.mcpUrl, {
    method: 'POST',
    headers: rawHeaders(bridge, hopts),
    body: JSON.stringify(body),
    signal,
  });
}

/**
 * Incrementally parse a text/event-stream body. Calls onEvent({event, id,
 * data, at}) for each dispatched event. Resolves when the stream ends, or
 * when onEvent returns true (then the body is cancelled).
 */
export async function readSse(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let ev = { event: '', id: undefined, data: [] };
  const dispatch = () => {
    // Per the EventSource rules an empty data buffer is not dispatched
    // (covers priming events that only carry an id / retry).
    if (ev.data.length === 0 || ev.data.join('\n') === '') {
      ev = { event: '', id: ev.id, data: [] };
      return false;
    }
    const out = { event: ev.event || 'message', id: ev.id, data: ev.data.join('\n'), at: Date.now() };
    ev = { event: '', id: ev.id, data: [] };
    return onEvent(out) === true;
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        dispatch();
        return;
      }
      buf += value;
      let m;
      while ((m = /\r\n|\r|\n/.exec(buf))) {
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === '') {
          if (dispatch()) {
            await reader.cancel().catch(() => {});
            return;
          }
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let val = c < 0 ? '' : line.slice(c + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'data') ev.data.push(val);
        else if (field === 'event') ev.event = val;
        else if (field === 'id') ev.id = val;
      }
    }
  } finally {
    try {
      reader.releaseLock();
    } catch {}
  }
}

/**
 * Read the JSON-RPC messages carried by a POST response, whether the bridge
 * answered with application/json or text/event-stream. Stops (for SSE) once a
 * response with id `untilId` arrived. Returns [{at, message}].
 */
export async function readPostMessages(res, untilId) {
  const ct = (res.headers.get('content-type') || '').split(';')[0].trim().toLowerCase();
  const out = [];
  if (ct === 'application/json') {
    const data = await res.json();
    for (const m of Array.isArray(data) ? data : [data]) out.push({ at: Date.now(), message: m });
    return out;
  }
  if (ct === 'text/event-stream') {
    await readSse(res.body, (e) => {
      if (e.event !== 'message') return false;
      const m = JSON.parse(e.data);
      out.push({ at: e.at, message: m });
      return untilId !== undefined && m.id === untilId && ('result' in m || 'error' in m);
    });
    return out;
  }
  throw new Error(`unexpected content-type ${JSON.stringify(res.headers.get('content-type'))} (status ${res.status})`);
}

/**
 * Raw initialize + notifications/initialized handshake without ever opening
 * the GET stream. Returns { sessionId, protocolVersion, initResult }.
 */
export async function rawHandshake(bridge, { capabilities = {} } = {}) {
  const res = await rawPost(bridge, {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: {
      protocolVersion: PROTOCOL_VERSION,
      capabilities,
      clientInfo: { name: 'soda-raw-test', version: '0.0.0' },
    },
  });
  if (res.status !== 200) {
    throw new Error(`initialize: expected HTTP 200, got ${res.status}: ${await res.text()}`);
  }
  const sessionId = res.headers.get('mcp-session-id');
  const msgs = await readPostMessages(res, 1);
  const resp = msgs.map((m) => m.message).find((m) => m.id === 1);
  if (!resp || !resp.result) throw new Error(`initialize: no result in ${JSON.stringify(msgs)}`);
  if (!sessionId) throw new Error('initialize: no Mcp-Session-Id header');
  const protocolVersion = resp.result.protocolVersion;
  const r2 = await rawPost(
    bridge,
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    { sessionId, protocolVersion },
  );
  await r2.body?.cancel();
  if (r2.status !== 202) throw new Error(`notifications/initialized: expected HTTP 202, got ${r2.status}`);
  return { sessionId, protocolVersion, initResult: resp.result };
}

export async function rawDelete(bridge, sessionId) {
  const res = await fetch(bridge.mcpUrl, {
    method: 'DELETE',
    headers: { ...bridge.authHeaders(), 'Mcp-Session-Id': sessionId },
  });
  await res.body?.cancel();
  return res.status;
}

/** Text of all text content items of a tool result, joined by newlines. */
export function toolText(result) {
  return (result?.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}
