// Client -> server features of the real server-everything (stdio) reached
// through soda-mcpd's Streamable HTTP endpoint with the real SDK client.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

import { ResultSchema, ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

import {
  startBridge,
  connectStreamable,
  closeClient,
  forceCleanup,
  waitFor,
  within,
  toolText,
} from '../lib/harness.mjs';
import { assertCleanShutdown } from '../lib/shutdown.mjs';

let bridge;

before(async () => {
  bridge = await startBridge();
});

after(() => forceCleanup(bridge));

/** Run `fn(client)` with a fresh connected client, always closing it. */
async function withClient(opts, fn) {
  const client = await connectStreamable(bridge, opts);
  try {
    return await fn(client);
  } finally {
    await closeClient(bridge, client);
  }
}

const notesOf = (client, method) => client.notes.filter((n) => n.message.method === method);

test('token file is generated (64 lowercase hex) and serving url is loopback /mcp', () => {
  assert.match(bridge.token, /^[0-9a-f]{64}$/);
  assert.equal(bridge.mcpUrl.hostname, '127.0.0.1');
  assert.equal(bridge.mcpUrl.pathname, '/mcp');
});

test('connect + listTools + callTool echo', async () => {
  await withClient({}, async (client) => {
    const info = client.getServerVersion();
    assert.equal(info?.name, 'mcp-servers/everything');
    const caps = client.getServerCapabilities();
    assert.ok(caps?.tools, 'server advertises tools');
    assert.ok(caps?.resources?.subscribe, 'server advertises resource subscriptions');

    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ['echo', 'get-sum', 'trigger-long-running-operation', 'toggle-simulated-logging', 'toggle-subscriber-updates']) {
      assert.ok(names.includes(n), `tools/list contains ${n}; got ${names.join(', ')}`);
    }
    // Capability-dependent tools must be absent for a client without those capabilities.
    assert.ok(!names.includes('trigger-sampling-request'), 'no sampling tool without sampling capability');

    const msg = `hello soda ${randomUUID()} – ünïcødé ✓`;
    const res = await client.callTool({ name: 'echo', arguments: { message: msg } });
    assert.ok(!res.isError, `echo isError: ${JSON.stringify(res)}`);
    assert.equal(toolText(res), `Echo: ${msg}`);

    const sum = await client.callTool({ name: 'get-sum', arguments: { a: 40, b: 2 } });
    assert.match(toolText(sum), /\b42\b/);
  });
});

test('listResources + readResource + resource templates', async () => {
  await withClient({}, async (client) => {
    const { resources } = await client.listResources();
    const doc = resources.find((r) => r.uri === 'demo://resource/static/document/features.md');
    assert.ok(doc, `resources/list contains features.md; got ${resources.map((r) => r.uri).join(', ')}`);
    assert.equal(doc.mimeType, 'text/markdown');

    const read = await client.readResource({ uri: doc.uri });
    assert.equal(read.contents.length, 1);
    assert.equal(read.contents[0].uri, doc.uri);
    assert.equal(read.contents[0].mimeType, 'text/markdown');
    assert.ok(read.contents[0].text.length > 100, 'document text is non-trivial');

    const { resourceTemplates } = await client.listResourceTemplates();
    const tmplUris = resourceTemplates.map((t) => t.uriTemplate);
    assert.ok(tmplUris.includes('demo://resource/dynamic/text/{resourceId}'), `templates: ${tmplUris}`);
    assert.ok(tmplUris.includes('demo://resource/dynamic/blob/{resourceId}'), `templates: ${tmplUris}`);

    const txt = await client.readResource({ uri: 'demo://resource/dynamic/text/7' });
    assert.equal(txt.contents[0].uri, 'demo://resource/dynamic/text/7');
    assert.match(txt.contents[0].text, /^Resource 7: This is a plaintext resource created at /);

    const blob = await client.readResource({ uri: 'demo://resource/dynamic/blob/3' });
    const decoded = Buffer.from(blob.contents[0].blob, 'base64').toString('utf8');
    assert.match(decoded, /^Resource 3: This is a base64 blob created at /);

    // A server-side error must come back as a JSON-RPC error, not an HTTP failure.
    await assert.rejects(
      client.readResource({ uri: 'demo://resource/dynamic/text/0' }),
      (e) => e instanceof McpError && /Unknown resource/.test(e.message),
    );
  });
});

test('subscribeResource + notifications/resources/updated (periodic, every 5 s)', { timeout: 45000 }, async () => {
  await withClient({}, async (client) => {
    const uri = 'demo://resource/dynamic/text/42';
    const other = 'demo://resource/dynamic/text/43';
    await client.subscribeResource({ uri });
    // server-everything only emits updates once toggle-subscriber-updates is
    // on: one immediately, then one every 5 s, for each subscribed uri.
    const t0 = Date.now();
    const on = await client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
    assert.match(toolText(on), /Started simulated resource updated notifications/);
    const updates = () =>
      notesOf(client, 'notifications/resources/updated').filter((n) => n.message.params?.uri === uri);
    await waitFor(() => updates().length >= 1, 4000, 'first notifications/resources/updated');
    await waitFor(() => updates().length >= 2, 12000, 'second (periodic) notifications/resources/updated');
    const [u1, u2] = updates();
    assert.ok(u1.at - t0 < 4000, 'first update arrives right after toggling');
    assert.ok(u2.at - u1.at >= 3000, `periodic update spacing ~5 s (got ${u2.at - u1.at} ms)`);
    assert.equal(
      notesOf(client, 'notifications/resources/updated').filter((n) => n.message.params?.uri === other).length,
      0,
      'no updates for a resource we did not subscribe to',
    );

    await client.unsubscribeResource({ uri });
    const off = await client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
    assert.match(toolText(off), /Stopped simulated resource updates/);
  });
});

test('listPrompts + getPrompt with arguments', async () => {
  await withClient({}, async (client) => {
    const { prompts } = await client.listPrompts();
    const names = prompts.map((p) => p.name);
    for (const n of ['simple-prompt', 'args-prompt', 'completable-prompt', 'resource-prompt']) {
      assert.ok(names.includes(n), `prompts/list contains ${n}; got ${names}`);
    }
    const argsPrompt = prompts.find((p) => p.name === 'args-prompt');
    assert.deepEqual(
      argsPrompt.arguments.map((a) => [a.name, !!a.required]),
      [['city', true], ['state', false]],
    );

    const simple = await client.getPrompt({ name: 'simple-prompt' });
    assert.equal(simple.messages[0].content.text, 'This is a simple prompt without arguments.');

    const p = await client.getPrompt({ name: 'args-prompt', arguments: { city: 'Oslo', state: 'Viken' } });
    assert.equal(p.messages.length, 1);
    assert.equal(p.messages[0].role, 'user');
    assert.equal(p.messages[0].content.text, "What's weather in Oslo, Viken?");

    const r = await client.getPrompt({ name: 'resource-prompt', arguments: { resourceType: 'Text', resourceId: '5' } });
    assert.equal(r.messages.length, 2);
    assert.equal(r.messages[1].content.type, 'resource');
    assert.equal(r.messages[1].content.resource.uri, 'demo://resource/dynamic/text/5');
  });
});

test('completion/complete on prompt arguments and a resource template', async () => {
  await withClient({}, async (client) => {
    const dept = await client.complete({
      ref: { type: 'ref/prompt', name: 'completable-prompt' },
      argument: { name: 'department', value: 'S' },
    });
    assert.deepEqual(dept.completion.values, ['Sales', 'Support']);

    const member = await client.complete({
      ref: { type: 'ref/prompt', name: 'completable-prompt' },
      argument: { name: 'name', value: '' },
      context: { arguments: { department: 'Engineering' } },
    });
    assert.deepEqual(member.completion.values, ['Alice', 'Bob', 'Charlie']);

    const rid = await client.complete({
      ref: { type: 'ref/resource', uri: 'demo://resource/dynamic/text/{resourceId}' },
      argument: { name: 'resourceId', value: '12' },
    });
    assert.deepEqual(rid.completion.values, ['12']);
  });
});

test('setLoggingLevel filters and delivers notifications/message log records', { timeout: 30000 }, async () => {
  await withClient({}, async (client) => {
    const logs = () => notesOf(client, 'notifications/message');
    const subLog = (uri) =>
      logs().find((n) => typeof n.message.params?.data === 'string' && n.message.params.data.includes(`for URI: ${uri}`));

    // 1) level info: the info-level "Received Subscribe Resource request" record is delivered.
    await client.setLoggingLevel('info');
    const u1 = 'demo://resource/dynamic/text/101';
    await client.subscribeResource({ uri: u1 });
    const rec = await waitFor(() => subLog(u1), 5000, 'info log record for first subscribe');
    assert.equal(rec.message.params.level, 'info');

    // 2) level emergency: the same info record is filtered by the server...
    await client.setLoggingLevel('emergency');
    const u2 = 'demo://resource/dynamic/text/102';
    await client.subscribeResource({ uri: u2 });
    // 3) ...proven by ordering: after going back to info, the next record
    // arrives while the filtered one never does.
    await client.setLoggingLevel('info');
    const u3 = 'demo://resource/dynamic/text/103';
    await client.subscribeResource({ uri: u3 });
    await waitFor(() => subLog(u3), 5000, 'info log record for third subscribe');
    assert.equal(subLog(u2), undefined, 'record below the emergency level must not be sent');

    // 4) simulated logging at debug level: one record immediately.
    await client.setLoggingLevel('debug');
    const before = logs().length;
    const on = await client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
    assert.match(toolText(on), /Started simulated, random-leveled logging/);
    const sim = await waitFor(
      () => logs().slice(before).find((n) => /level[- ]message/i.test(String(n.message.params?.data))),
      5000,
      'simulated log record',
    );
    assert.ok(
      ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'].includes(sim.message.params.level),
    );
    const off = await client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
    assert.match(toolText(off), /Stopped simulated logging/);
  });
});

test('ping', async () => {
  await withClient({}, async (client) => {
    const r = await within(client.ping(), 5000, 'ping');
    assert.deepEqual(r, {});
  });
});

test('unknown method is relayed to the server and answered with JSON-RPC -32601', async () => {
  await withClient({}, async (client) => {
    let err;
    try {
      await client.request({ method: 'custom/whatever', params: { x: 1 } }, ResultSchema);
    } catch (e) {
      err = e;
    }
    assert.ok(err, 'custom/whatever must fail');
    assert.ok(
      err instanceof McpError,
      `expected a JSON-RPC error from the server, got ${err?.constructor?.name}: ${err?.message}`,
    );
    assert.equal(err.code, ErrorCode.MethodNotFound);
    assert.equal(err.code, -32601);
    // The session is still fine afterwards.
    const res = await client.callTool({ name: 'echo', arguments: { message: 'after -32601' } });
    assert.equal(toolText(res), 'Echo: after -32601');
  });
});

test('shutdown: SIGTERM stops soda-mcpd and leaves no server-everything children', async () => {
  await assertCleanShutdown(bridge);
});
