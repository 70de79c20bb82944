// Server -> client requests (sampling, elicitation, roots) issued by the real
// server-everything child and routed back through soda-mcpd to the real SDK
// client, whose answers must travel back to the child.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

import {
  startBridge,
  connectStreamable,
  closeClient,
  forceCleanup,
  waitFor,
  toolText,
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

test('sampling: server-everything trigger-sampling-request gets our canned completion', { timeout: 30000 }, async () => {
  const canned = `SODA-CANNED-REPLY-${randomUUID()}`;
  const seen = [];
  await withClient(
    {
      capabilities: { sampling: {} },
      setup: (client) =>
        client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
          seen.push(req.params);
          return {
            model: 'soda-canned-model',
            role: 'assistant',
            content: { type: 'text', text: canned },
            stopReason: 'endTurn',
          };
        }),
    },
    async (client) => {
      const { tools } = await client.listTools();
      assert.ok(
        tools.some((t) => t.name === 'trigger-sampling-request'),
        `sampling tool is registered for a sampling-capable client; got ${tools.map((t) => t.name)}`,
      );
      const prompt = `what is soda ${randomUUID()}`;
      const res = await client.callTool({
        name: 'trigger-sampling-request',
        arguments: { prompt, maxTokens: 33 },
      });
      assert.ok(!res.isError, `tool error: ${toolText(res)}`);
      const text = toolText(res);
      assert.match(text, /^LLM sampling result: /);
      assert.ok(text.includes(canned), `tool result contains canned text; got ${text}`);
      assert.ok(text.includes('soda-canned-model'), 'tool result contains our model name');

      assert.equal(seen.length, 1, 'exactly one sampling/createMessage request reached the client');
      assert.equal(seen[0].maxTokens, 33);
      assert.equal(seen[0].messages[0].content.text, `Resource trigger-sampling-request context: ${prompt}`);
    },
  );
});

test('elicitation: accept with content matching the requested schema', { timeout: 30000 }, async () => {
  const seen = [];
  const content = {
    name: 'Soda Tester',
    check: true,
    email: 'tester@example.com',
    birthdate: '2001-02-03',
    integer: 7,
    number: 2.5,
    untitledSingleSelectEnum: 'Joey',
  };
  await withClient(
    {
      capabilities: { elicitation: { form: {} } },
      setup: (client) =>
        client.setRequestHandler(ElicitRequestSchema, async (req) => {
          seen.push(req.params);
          return { action: 'accept', content };
        }),
    },
    async (client) => {
      const res = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      assert.ok(!res.isError, `tool error: ${toolText(res)}`);
      const text = toolText(res);
      assert.ok(text.includes('User provided the requested information'), text);
      for (const line of [
        '- Name: Soda Tester',
        '- Agreed to terms: true',
        '- Email: tester@example.com',
        '- Birthdate: 2001-02-03',
        '- Favorite Integer: 7',
        '- Favorite Number: 2.5',
      ]) {
        assert.ok(text.includes(line), `result contains "${line}"; got ${text}`);
      }
      assert.match(text, /"action": "accept"/);

      assert.equal(seen.length, 1);
      const schema = seen[0].requestedSchema;
      assert.equal(schema.type, 'object');
      assert.deepEqual(schema.required, ['name']);
      for (const k of Object.keys(content)) assert.ok(k in schema.properties, `schema has ${k}`);
    },
  );
});

test('elicitation: decline is relayed too', { timeout: 30000 }, async () => {
  await withClient(
    {
      capabilities: { elicitation: {} },
      setup: (client) => client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'decline' })),
    },
    async (client) => {
      const res = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      assert.match(toolText(res), /User declined to provide the requested information/);
    },
  );
});

test('roots: server lists our roots after initialize and on roots/list_changed', { timeout: 30000 }, async () => {
  const tag = randomUUID();
  let roots = [{ uri: `file:///tmp/soda-root-${tag}`, name: `soda-root-${tag}` }];
  let calls = 0;
  await withClient(
    {
      capabilities: { roots: { listChanged: true } },
      setup: (client) =>
        client.setRequestHandler(ListRootsRequestSchema, async () => {
          calls++;
          return { roots };
        }),
    },
    async (client) => {
      // server-everything requests roots/list ~350 ms after notifications/initialized,
      // then logs "Roots updated: N root(s) received from client".
      await waitFor(() => calls >= 1, 10000, 'roots/list request from server after initialize');
      const rootsLog = (n) =>
        client.notes.find(
          (x) =>
            x.message.method === 'notifications/message' &&
            String(x.message.params?.data).includes(`Roots updated: ${n} root(s) received from client`),
        );
      await waitFor(() => rootsLog(1), 5000, '"Roots updated: 1 root(s)" log record');

      const res = await client.callTool({ name: 'get-roots-list', arguments: {} });
      const text = toolText(res);
      assert.match(text, /Current MCP Roots \(1 total\)/);
      assert.ok(text.includes(roots[0].uri), `get-roots-list shows our root uri; got ${text}`);
      assert.ok(text.includes(roots[0].name), `get-roots-list shows our root name; got ${text}`);

      // Change the roots and tell the server; it must ask again.
      roots = [...roots, { uri: `file:///tmp/soda-root-2-${tag}`, name: `soda-root-2-${tag}` }];
      const before = calls;
      await client.sendRootsListChanged();
      await waitFor(() => calls > before, 10000, 'roots/list request after roots/list_changed');
      await waitFor(() => rootsLog(2), 5000, '"Roots updated: 2 root(s)" log record');
      const res2 = await client.callTool({ name: 'get-roots-list', arguments: {} });
      const text2 = toolText(res2);
      assert.match(text2, /Current MCP Roots \(2 total\)/);
      assert.ok(text2.includes(`file:///tmp/soda-root-2-${tag}`), text2);
    },
  );
});

test('concurrent sessions get isolated server requests (sampling on two clients at once)', { timeout: 30000 }, async () => {
  const mk = (label) => ({
    capabilities: { sampling: {} },
    setup: (client) =>
      client.setRequestHandler(CreateMessageRequestSchema, async () => ({
        model: `model-${label}`,
        role: 'assistant',
        content: { type: 'text', text: `reply-from-${label}` },
      })),
  });
  const a = await connectStreamable(bridge, mk('A'));
  const b = await connectStreamable(bridge, mk('B'));
  try {
    assert.notEqual(a.sodaTransport.sessionId, b.sodaTransport.sessionId);
    const [ra, rb] = await Promise.all([
      a.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'a' } }),
      b.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'b' } }),
    ]);
    assert.ok(toolText(ra).includes('reply-from-A') && !toolText(ra).includes('reply-from-B'), toolText(ra));
    assert.ok(toolText(rb).includes('reply-from-B') && !toolText(rb).includes('reply-from-A'), toolText(rb));
  } finally {
    await closeClient(bridge, a);
    await closeClient(bridge, b);
  }
});

test('shutdown: SIGTERM stops soda-mcpd and leaves no server-everything children', async () => {
  await assertCleanShutdown(bridge);
});
