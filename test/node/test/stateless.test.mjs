// The stateless revision 2026-07-28 through soda-mcpd: the TypeScript SDK's
// v2 client (@modelcontextprotocol/client, pinned to 2026-07-28; the v1
// @modelcontextprotocol/sdk 1.32.2 has no 2026-07-28 mode) against the real
// server-everything, a 2025-11-25 stdio child, and raw HTTP for what the
// client hides (resultType, caching hints, the listen stream's framing).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { startBridge, forceCleanup, waitFor, within, readSse } from '../lib/harness.mjs';

let bridge;

before(async () => {
  bridge = await startBridge();
});

after(() => forceCleanup(bridge));

const META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};

/** POST one stateless request with the headers a 2026-07-28 client sends. */
function statelessPost(method, params = {}, { id = 1, name, signal } = {}) {
  const headers = {
    ...bridge.authHeaders(),
    'Content-Type': 'application/json',
    Accept: 'application/json, text/event-stream',
    'MCP-Protocol-Version': '2026-07-28',
    'Mcp-Method': method,
  };
  if (name) headers['Mcp-Name'] = name;
  return fetch(bridge.mcpUrl, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: META } }),
    signal,
  });
}

async function withModernClient(fn) {
  const client = new Client({ name: 'soda-node-test-v2', version: '0.0.0' }, {
    versionNegotiation: { mode: { pin: '2026-07-28' } },
  });
  const transport = new StreamableHTTPClientTransport(bridge.mcpUrl, {
    requestInit: { headers: bridge.authHeaders() },
  });
  await within(client.connect(transport), 15000, 'client.connect (2026-07-28)');
  try {
    return await fn(client);
  } finally {
    await within(client.close(), 5000, 'client.close').catch(() => {});
  }
}

test('TypeScript v2 client on 2026-07-28: discover, lists, calls, reads through an older child', async () => {
  await withModernClient(async (client) => {
    assert.equal(client.getServerVersion()?.name, 'mcp-servers/everything');
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'echo'));
    const res = await client.callTool({ name: 'echo', arguments: { message: 'stateless' } });
    assert.equal(res.content[0].text, 'Echo: stateless');
    const { resources } = await client.listResources();
    const read = await client.readResource({ uri: resources[0].uri });
    assert.equal(read.contents.length, 1);
    const { prompts } = await client.listPrompts();
    assert.ok(prompts.length > 0);
    // ping was removed in 2026-07-28; the client itself refuses to send it.
    await assert.rejects(client.ping());
  });
});

test('TypeScript v2 client listen(): resources/updated of the child, tagged with the subscription id', { timeout: 30000 }, async () => {
  await withModernClient(async (client) => {
    const uri = 'demo://resource/dynamic/text/42';
    const notes = [];
    client.setNotificationHandler('notifications/resources/updated', (n) => {
      notes.push(n);
    });
    const sub = await client.listen({ resourceSubscriptions: [uri], toolsListChanged: true });
    // server-everything has resources.subscribe; tools.listChanged is not
    // declared by it, so the bridge does not agree to it.
    assert.deepEqual(sub.honoredFilter.resourceSubscriptions, [uri]);
    const on = await client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
    assert.match(on.content[0].text, /Started simulated resource updated notifications/);
    await waitFor(() => notes.length > 0, 8000, 'notifications/resources/updated on the listen stream');
    assert.equal(notes[0].params.uri, uri);
    assert.ok(notes[0].params._meta?.['io.modelcontextprotocol/subscriptionId'], 'subscription id on the notification');
    await client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
    await sub.close();
    assert.equal(await within(sub.closed, 5000, 'subscription closed'), 'local');
  });
});

test('raw 2026-07-28 wire: resultType and caching hints added, rules enforced', async () => {
  let r = await statelessPost('tools/list');
  let body = await r.json();
  assert.equal(r.status, 200);
  assert.equal(body.result.resultType, 'complete');
  assert.equal(body.result.ttlMs, 0);
  assert.equal(body.result.cacheScope, 'private');

  r = await statelessPost('tools/call', { name: 'echo', arguments: { message: 'x' } }, { id: 2, name: 'echo' });
  const text = await r.text();
  assert.match(text, /"resultType":"complete"/);

  r = await statelessPost('ping', {}, { id: 3 });
  body = await r.json();
  assert.equal(r.status, 404);
  assert.deepEqual([body.id, body.error.code], [3, -32601]);

  r = await statelessPost('tools/call', { name: 'echo', arguments: {} }, { id: 4, name: 'not-echo' });
  body = await r.json();
  assert.equal(r.status, 400);
  assert.deepEqual([body.id, body.error.code], [4, -32020]);
});

test('raw subscriptions/listen: the acknowledgement comes first', async () => {
  const ac = new AbortController();
  const r = await statelessPost('subscriptions/listen', { notifications: { promptsListChanged: true } }, { id: 'L1', signal: ac.signal });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  let first;
  await within(readSse(r.body, (ev) => {
    first = JSON.parse(ev.data);
    return true;
  }), 5000, 'first event of the listen stream');
  ac.abort();
  assert.equal(first.method, 'notifications/subscriptions/acknowledged');
  assert.equal(first.params._meta['io.modelcontextprotocol/subscriptionId'], 'L1');
});
