// Transport-level behaviour of soda-mcpd: progress routing on the POST
// stream (with and without a GET stream), cancellation, legacy HTTP+SSE,
// session termination, auth.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

import {
  startBridge,
  connectStreamable,
  connectLegacySse,
  closeClient,
  forceCleanup,
  waitFor,
  within,
  sleep,
  toolText,
  rawHandshake,
  rawPost,
  rawDelete,
  readSse,
} from '../lib/harness.mjs';
import { assertCleanShutdown } from '../lib/shutdown.mjs';

let bridge;

before(async () => {
  bridge = await startBridge();
});

after(() => forceCleanup(bridge));

async function withClient(opts, fn) {
  const client = await connectStreamable(bridge, opts);
  try {
    return await fn(client);
  } finally {
    await closeClient(bridge, client);
  }
}

test('auth: /mcp without or with a wrong bearer token is rejected with 401', async () => {
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '0' } },
  });
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
  const none = await fetch(bridge.mcpUrl, { method: 'POST', headers, body });
  await none.body?.cancel();
  assert.equal(none.status, 401, 'no Authorization header');
  const wrong = await fetch(bridge.mcpUrl, {
    method: 'POST',
    headers: { ...headers, Authorization: `Bearer ${'0'.repeat(64)}` },
    body,
  });
  await wrong.body?.cancel();
  assert.equal(wrong.status, 401, 'wrong token');
  const sse = await fetch(new URL('/sse', bridge.base), { headers: { Accept: 'text/event-stream' } });
  await sse.body?.cancel();
  assert.equal(sse.status, 401, 'legacy /sse without token');
});

test('/ready answers 200 to an authorized request', async () => {
  const res = await fetch(new URL('/ready', bridge.base), { headers: bridge.authHeaders() });
  await res.body?.cancel();
  assert.equal(res.status, 200);
});

test('progress WITHOUT a GET stream: notifications/progress arrive on the tools/call POST SSE stream before the result', { timeout: 30000 }, async () => {
  const { sessionId, protocolVersion } = await rawHandshake(bridge);
  try {
    const token = `soda-progress-${randomUUID()}`;
    const id = 7;
    const t0 = Date.now();
    const res = await rawPost(
      bridge,
      {
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: {
          name: 'trigger-long-running-operation',
          arguments: { duration: 2, steps: 4 },
          _meta: { progressToken: token },
        },
      },
      { sessionId, protocolVersion },
    );
    assert.equal(res.status, 200);
    assert.equal(
      (res.headers.get('content-type') || '').split(';')[0].trim(),
      'text/event-stream',
      'a request that produces progress must be answered with an SSE stream',
    );
    const events = [];
    await within(
      readSse(res.body, (e) => {
        const m = JSON.parse(e.data);
        events.push({ at: e.at, message: m });
        return m.id === id && ('result' in m || 'error' in m);
      }),
      15000,
      'SSE response of tools/call',
    );
    const respIdx = events.findIndex((e) => e.message.id === id);
    assert.ok(respIdx >= 0, `response with id ${id} on the POST stream; events: ${JSON.stringify(events)}`);
    const resp = events[respIdx];
    assert.ok(resp.message.result, `result, not error: ${JSON.stringify(resp.message)}`);
    assert.match(toolText(resp.message.result), /Long running operation completed\. Duration: 2 seconds, Steps: 4\./);

    const progress = events
      .slice(0, respIdx)
      .filter((e) => e.message.method === 'notifications/progress' && e.message.params?.progressToken === token);
    assert.ok(progress.length >= 2, `>=2 progress events before the result, got ${progress.length}: ${JSON.stringify(events)}`);
    const values = progress.map((p) => p.message.params.progress);
    assert.deepEqual(values, [...values].sort((a, b) => a - b), 'progress values increase');
    assert.ok(progress.every((p) => p.message.params.total === 4));
    // Streamed, not buffered until the end: the first progress event came
    // well before the final response (steps are 500 ms apart).
    assert.ok(
      resp.at - progress[0].at >= 700,
      `first progress ${progress[0].at - t0} ms, result ${resp.at - t0} ms after the POST: progress was not streamed`,
    );
    // No progress for our token may appear after the response.
    assert.equal(
      events.slice(respIdx + 1).filter((e) => e.message.method === 'notifications/progress').length,
      0,
    );
  } finally {
    await rawDelete(bridge, sessionId);
  }
});

test('server->client request WITHOUT a GET stream rides the in-flight tools/call POST stream (sampling, raw HTTP)', { timeout: 30000 }, async () => {
  const { sessionId, protocolVersion } = await rawHandshake(bridge, { capabilities: { sampling: {} } });
  try {
    const canned = `RAW-CANNED-${randomUUID()}`;
    const id = 11;
    const res = await rawPost(
      bridge,
      {
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'trigger-sampling-request', arguments: { prompt: 'raw sampling' } },
      },
      { sessionId, protocolVersion },
    );
    assert.equal(res.status, 200);
    assert.equal((res.headers.get('content-type') || '').split(';')[0].trim(), 'text/event-stream');
    const events = [];
    const replies = [];
    await within(
      readSse(res.body, (e) => {
        const m = JSON.parse(e.data);
        events.push(m);
        if (m.method === 'sampling/createMessage' && m.id !== undefined) {
          // Answer the child's request with a separate POST, as a client must.
          replies.push(
            rawPost(
              bridge,
              {
                jsonrpc: '2.0',
                id: m.id,
                result: { model: 'raw-model', role: 'assistant', content: { type: 'text', text: canned } },
              },
              { sessionId, protocolVersion },
            ).then(async (r) => {
              await r.body?.cancel();
              return r.status;
            }),
          );
        }
        return m.id === id && ('result' in m || 'error' in m);
      }),
      15000,
      'tools/call SSE response',
    );
    const reqs = events.filter((m) => m.method === 'sampling/createMessage');
    assert.equal(reqs.length, 1, `one sampling request on the POST stream; events: ${JSON.stringify(events)}`);
    assert.deepEqual(await Promise.all(replies), [202], 'POSTed JSON-RPC response is accepted with 202');
    const resp = events.find((m) => m.id === id && !m.method);
    assert.ok(resp?.result, `tool result: ${JSON.stringify(resp)}`);
    assert.ok(toolText(resp.result).includes(canned), toolText(resp.result));
  } finally {
    await rawDelete(bridge, sessionId);
  }
});

test('notifications emitted while no stream is open are queued and delivered on the next GET stream', { timeout: 30000 }, async () => {
  // server-everything registers capability-dependent tools when it sees
  // notifications/initialized, which emits notifications/tools/list_changed
  // at a moment when this raw client has neither a GET nor a POST stream open.
  const { sessionId, protocolVersion } = await rawHandshake(bridge);
  const ac = new AbortController();
  try {
    await sleep(500);
    const res = await fetch(bridge.mcpUrl, {
      method: 'GET',
      headers: {
        ...bridge.authHeaders(),
        Accept: 'text/event-stream',
        'Mcp-Session-Id': sessionId,
        'MCP-Protocol-Version': protocolVersion,
      },
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    assert.equal((res.headers.get('content-type') || '').split(';')[0].trim(), 'text/event-stream');
    const got = [];
    await within(
      readSse(res.body, (e) => {
        const m = JSON.parse(e.data);
        got.push(m);
        return m.method === 'notifications/tools/list_changed';
      }),
      5000,
      'queued notifications/tools/list_changed on the GET stream',
    );
    assert.ok(got.some((m) => m.method === 'notifications/tools/list_changed'), JSON.stringify(got));
  } finally {
    ac.abort();
    await rawDelete(bridge, sessionId);
  }
});

test('concurrent requests on one session each get their own response', { timeout: 30000 }, async () => {
  await withClient({}, async (client) => {
    const slow = client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 1.5, steps: 1 } });
    const fast = client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 0.3, steps: 1 } });
    const echoes = Array.from({ length: 12 }, (_, i) =>
      client.callTool({ name: 'echo', arguments: { message: `m${i}` } }),
    );
    const sums = Array.from({ length: 6 }, (_, i) => client.callTool({ name: 'get-sum', arguments: { a: i, b: 100 } }));
    const [s, f, ...rest] = await within(Promise.all([slow, fast, ...echoes, ...sums]), 15000, 'concurrent calls');
    assert.match(toolText(s), /Duration: 1\.5 seconds/);
    assert.match(toolText(f), /Duration: 0\.3 seconds/);
    rest.slice(0, 12).forEach((r, i) => assert.equal(toolText(r), `Echo: m${i}`));
    rest.slice(12).forEach((r, i) => assert.match(toolText(r), new RegExp(`\\b${100 + i}\\b`)));
  });
});

test('progress with the SDK client (onprogress)', { timeout: 30000 }, async () => {
  await withClient({}, async (client) => {
    const seen = [];
    const res = await client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 1.2, steps: 3 } },
      undefined,
      { onprogress: (p) => seen.push({ at: Date.now(), ...p }) },
    );
    assert.match(toolText(res), /Long running operation completed\. Duration: 1\.2 seconds, Steps: 3\./);
    // The SDK client drops a progress notification that it processes after the
    // response (its notification handlers run a microtask later), so only the
    // first steps are guaranteed to be observed.
    assert.ok(seen.length >= 2, `>=2 onprogress callbacks, got ${JSON.stringify(seen)}`);
    assert.deepEqual(
      seen.slice(0, 2).map((p) => [p.progress, p.total]),
      [[1, 3], [2, 3]],
    );
    assert.ok(seen[1].at - seen[0].at >= 200, 'progress callbacks were streamed, not delivered in one burst');
  });
});

test('cancellation: aborting a long tool call rejects promptly and the session stays usable', { timeout: 30000 }, async () => {
  await withClient({}, async (client) => {
    const ac = new AbortController();
    const started = Date.now();
    const call = client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 20, steps: 20 } },
      undefined,
      { signal: ac.signal },
    );
    // Make sure the rejection is observed even before we await it.
    const settled = call.then(
      (v) => ({ ok: true, v, at: Date.now() }),
      (e) => ({ ok: false, e, at: Date.now() }),
    );
    await sleep(300);
    const abortedAt = Date.now();
    ac.abort('soda test abort');
    const r = await within(settled, 3000, 'aborted callTool');
    assert.equal(r.ok, false, 'aborted call must reject');
    assert.ok(r.at - abortedAt < 1000, `rejected ${r.at - abortedAt} ms after abort`);
    assert.ok(r.at - started < 5000);

    // The same session keeps working, while the cancelled call's child-side
    // handler may still be running.
    const echo = await within(
      client.callTool({ name: 'echo', arguments: { message: 'still alive' } }),
      5000,
      'echo after cancellation',
    );
    assert.equal(toolText(echo), 'Echo: still alive');
    const sum = await within(client.callTool({ name: 'get-sum', arguments: { a: 1, b: 2 } }), 5000, 'get-sum');
    assert.match(toolText(sum), /\b3\b/);
    assert.deepEqual(await within(client.ping(), 5000, 'ping after cancellation'), {});
  });
});

test('legacy HTTP+SSE transport (/sse + /message): listTools + callTool echo', { timeout: 30000 }, async () => {
  const client = await connectLegacySse(bridge);
  try {
    assert.equal(client.getServerVersion()?.name, 'mcp-servers/everything');
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'echo'), `tools: ${tools.map((t) => t.name)}`);
    const msg = `legacy ${randomUUID()}`;
    const res = await client.callTool({ name: 'echo', arguments: { message: msg } });
    assert.equal(toolText(res), `Echo: ${msg}`);
    const seen = [];
    const res2 = await client.callTool(
      { name: 'trigger-long-running-operation', arguments: { duration: 0.9, steps: 3 } },
      undefined,
      { onprogress: (p) => seen.push(p.progress) },
    );
    assert.match(toolText(res2), /Long running operation completed/);
    // The last step's progress can race the response inside the SDK client.
    assert.deepEqual(seen.slice(0, 2), [1, 2], `progress over the legacy SSE stream: ${seen}`);
  } finally {
    await closeClient(bridge, client);
  }
});

test('session end: DELETE via terminateSession, then the old session id gets 404 and its child exits', { timeout: 30000 }, async () => {
  const pidsBefore = new Set(bridge.childPids());
  const client = await connectStreamable(bridge, {});
  let newPids;
  try {
    const res = await client.callTool({ name: 'echo', arguments: { message: 'before delete' } });
    assert.equal(toolText(res), 'Echo: before delete');
    newPids = await waitFor(
      () => {
        const p = bridge.childPids().filter((x) => !pidsBefore.has(x));
        return p.length ? p : null;
      },
      5000,
      'a new server-everything child for the new session',
    );
    const sessionId = client.sodaTransport.sessionId;
    assert.ok(sessionId, 'session id assigned');

    await within(client.sodaTransport.terminateSession(), 5000, 'terminateSession (DELETE)');
    assert.equal(client.sodaTransport.sessionId, undefined, 'SDK cleared the session id after a successful DELETE');

    const r = await rawPost(
      bridge,
      { jsonrpc: '2.0', id: 99, method: 'tools/list', params: {} },
      { sessionId, protocolVersion: client.sodaTransport.protocolVersion },
    );
    const body = await r.text();
    assert.equal(r.status, 404, `POST with terminated session id: expected 404, got ${r.status} ${body}`);

    const g = await fetch(bridge.mcpUrl, {
      method: 'GET',
      headers: { ...bridge.authHeaders(), Accept: 'text/event-stream', 'Mcp-Session-Id': sessionId },
    });
    await g.body?.cancel();
    assert.equal(g.status, 404, 'GET with terminated session id');

    // The stdio child that served the session must be gone.
    await waitFor(
      () => newPids.every((p) => !bridge.childPids().includes(p)),
      5000,
      `child process(es) ${newPids} of the deleted session to exit`,
    );
  } finally {
    await closeClient(bridge, client);
  }
});

test('unknown session id gets 404 and a non-initialize POST without session id gets 400', async () => {
  const r = await rawPost(
    bridge,
    { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
    { sessionId: `no-such-session-${randomUUID()}`, protocolVersion: '2025-06-18' },
  );
  await r.body?.cancel();
  assert.equal(r.status, 404);
  const r2 = await rawPost(bridge, { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
  await r2.body?.cancel();
  assert.equal(r2.status, 400);
});

test('shutdown: SIGTERM stops soda-mcpd and leaves no server-everything children', async () => {
  // Leave one idle session open so shutdown has a live child to reap.
  const c = await connectStreamable(bridge, {});
  assert.equal(toolText(await c.callTool({ name: 'echo', arguments: { message: 'x' } })), 'Echo: x');
  const children = bridge.childPids();
  assert.ok(children.length >= 1, 'marker finds our live child (sanity check of the leftover check)');
  // Drop the client without DELETE: the bridge itself must reap that child.
  bridge.clients.delete(c);
  await c.close().catch(() => {});
  await assertCleanShutdown(bridge);
});
