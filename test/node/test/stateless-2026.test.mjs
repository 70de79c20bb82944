// A stateless 2026-07-28 client asks through soda-mcpd what an older child
// asks with server-to-client requests: the TypeScript SDK's v2 client
// (@modelcontextprotocol/client, pinned to 2026-07-28) against the real
// server-everything, a 2025-11-25 stdio child. The child's
// elicitation/create and sampling/createMessage must come back to the client
// as input_required rounds (SEP-2322), which the client fulfils with its
// ordinary request handlers and retries; docs/bridge.md, "Input requests of
// an older child for stateless clients". Every HTTP exchange is recorded so
// the tests can check the wire, not only what the client makes of it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { startBridge, forceCleanup, within, toolText } from '../lib/harness.mjs';
import { assertCleanShutdown } from '../lib/shutdown.mjs';

const REVISION = '2026-07-28';
const META_VERSION = 'io.modelcontextprotocol/protocolVersion';

let bridge;

before(async () => {
  bridge = await startBridge();
});

after(() => forceCleanup(bridge));

/**
 * fetch that records each exchange: {method, headers, body (parsed JSON),
 * status, resHeaders, json (parsed JSON answer; SSE answers are not read
 * here, the client reads them)}.
 */
function recordingFetch(wire) {
  return async (url, init = {}) => {
    const headers = Object.fromEntries(new Headers(init.headers));
    let body;
    try {
      body = typeof init.body === 'string' ? JSON.parse(init.body) : undefined;
    } catch {}
    const res = await fetch(url, init);
    const x = { method: init.method ?? 'GET', headers, body, status: res.status, resHeaders: Object.fromEntries(res.headers) };
    wire.push(x);
    const ct = res.headers.get('content-type') ?? '';
    if (ct.startsWith('application/json')) {
      try {
        x.json = await res.clone().json();
      } catch {}
    }
    return res;
  };
}

/**
 * Run fn(client, wire) with a v2 client pinned to 2026-07-28 over Streamable
 * HTTP. `handlers` maps a server-request method (elicitation/create,
 * sampling/createMessage) to the handler the client fulfils input requests
 * with.
 */
async function withModernClient({ capabilities = {}, handlers = {} } = {}, fn) {
  const wire = [];
  const client = new Client(
    { name: 'soda-node-test-2026', version: '0.0.0' },
    { capabilities, versionNegotiation: { mode: { pin: REVISION } } },
  );
  for (const [method, h] of Object.entries(handlers)) client.setRequestHandler(method, h);
  const transport = new StreamableHTTPClientTransport(bridge.mcpUrl, {
    requestInit: { headers: bridge.authHeaders() },
    fetch: recordingFetch(wire),
  });
  await within(client.connect(transport), 15000, `client.connect (${REVISION})`);
  try {
    return await fn(client, wire);
  } finally {
    await within(client.close(), 5000, 'client.close').catch(() => {});
  }
}

/** The recorded tools/call POSTs of one tool, in order. */
function callsOf(wire, tool) {
  return wire.filter((x) => x.body?.method === 'tools/call' && x.body.params?.name === tool);
}

/**
 * The wire of one call that asked once: the first POST answered with an
 * input_required round holding exactly one request of `method`, the retry
 * carrying its requestState and the client's answer under the same key, and
 * a complete result. Returns {params, answer}: what the child asked and what
 * the client answered.
 */
function assertOneRound(wire, tool, method) {
  const posts = callsOf(wire, tool);
  assert.equal(posts.length, 2, `two tools/call POSTs for ${tool} (call, retry); got ${posts.length}`);
  const [first, retry] = posts;
  assert.equal(first.status, 200);
  const round = first.json?.result;
  assert.ok(round, `first answer is a JSON result; got ${JSON.stringify(first.json)}`);
  assert.equal(round.resultType, 'input_required');
  assert.equal(typeof round.requestState, 'string');
  assert.ok(round.requestState.length > 0);
  const keys = Object.keys(round.inputRequests ?? {});
  assert.equal(keys.length, 1, `one input request; got ${JSON.stringify(round.inputRequests)}`);
  assert.equal(round.inputRequests[keys[0]].method, method);
  assert.equal(first.json.id, first.body.id, 'the round answers the POST it came on');

  assert.notEqual(retry.body.id, first.body.id, 'the retry is a new request');
  assert.equal(retry.body.params.requestState, round.requestState, 'requestState echoed byte for byte');
  assert.deepEqual(Object.keys(retry.body.params.inputResponses ?? {}), keys);
  assert.equal(retry.status, 200);
  assert.equal(retry.json?.result?.resultType, 'complete', `retry answered with the final result; got ${JSON.stringify(retry.json)}`);
  return { params: round.inputRequests[keys[0]].params, answer: retry.body.params.inputResponses[keys[0]] };
}

test('2026-07-28 for real: no initialize, no session, every request carries the revision', async () => {
  await withModernClient({}, async (client, wire) => {
    assert.equal(client.getNegotiatedProtocolVersion(), REVISION);
    assert.equal(client.getServerVersion()?.name, 'mcp-servers/everything');
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'echo'), `echo listed; got ${tools.map((t) => t.name)}`);

    const posts = wire.filter((x) => x.method === 'POST');
    assert.deepEqual(
      posts.map((x) => x.body?.method),
      ['server/discover', 'tools/list'],
      'the client discovers and lists; it never sends initialize',
    );
    for (const x of wire) {
      assert.equal(x.headers['mcp-protocol-version'], REVISION, `${x.body?.method}: MCP-Protocol-Version header`);
      assert.equal(x.headers['mcp-session-id'], undefined, `${x.body?.method}: no Mcp-Session-Id sent`);
      assert.equal(x.resHeaders['mcp-session-id'], undefined, `${x.body?.method}: no Mcp-Session-Id answered`);
      assert.equal(x.body?.params?._meta?.[META_VERSION], REVISION, `${x.body?.method}: _meta protocolVersion`);
      assert.equal(x.status, 200, `${x.body?.method}: HTTP status`);
    }
    const list = posts[1].json?.result;
    assert.equal(list?.resultType, 'complete', 'tools/list result carries resultType');
  });
});

test('2026-07-28: echo', async () => {
  await withModernClient({}, async (client, wire) => {
    const msg = `stateless ${randomUUID()}`;
    const res = await client.callTool({ name: 'echo', arguments: { message: msg } });
    assert.ok(!res.isError, toolText(res));
    assert.equal(toolText(res), `Echo: ${msg}`);
    const [call] = callsOf(wire, 'echo');
    assert.equal(call.headers['mcp-name'], 'echo', 'Mcp-Name header mirrors the tool');
    assert.equal(call.json?.result?.resultType, 'complete');
  });
});

test('2026-07-28 input_required: elicitation accepted, the child gets the content', { timeout: 30000 }, async () => {
  const seen = [];
  const content = {
    name: `Soda ${randomUUID().slice(0, 8)}`,
    check: true,
    email: 'tester@example.com',
    birthdate: '2001-02-03',
    integer: 7,
    number: 2.5,
    untitledSingleSelectEnum: 'Joey',
  };
  await withModernClient(
    {
      capabilities: { elicitation: { form: {} } },
      handlers: {
        'elicitation/create': async (req) => {
          seen.push(req.params);
          return { action: 'accept', content };
        },
      },
    },
    async (client, wire) => {
      const res = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      const text = toolText(res);
      assert.ok(!res.isError, `tool error: ${text}`);
      assert.ok(text.includes('User provided the requested information'), text);
      for (const line of [
        `- Name: ${content.name}`,
        '- Agreed to terms: true',
        '- Email: tester@example.com',
        '- Birthdate: 2001-02-03',
        '- Favorite Integer: 7',
        '- Favorite Number: 2.5',
      ]) {
        assert.ok(text.includes(line), `result contains "${line}"; got ${text}`);
      }

      assert.equal(seen.length, 1, 'the elicitation handler ran once');
      assert.deepEqual(seen[0].requestedSchema.required, ['name']);
      const { params, answer } = assertOneRound(wire, 'trigger-elicitation-request', 'elicitation/create');
      assert.deepEqual(params.requestedSchema, seen[0].requestedSchema, 'the child\'s request reached the handler as sent');
      assert.deepEqual(answer, { action: 'accept', content });
    },
  );
});

test('2026-07-28 input_required: elicitation declined', { timeout: 30000 }, async () => {
  let calls = 0;
  await withModernClient(
    {
      capabilities: { elicitation: { form: {} } },
      handlers: {
        'elicitation/create': async () => {
          calls++;
          return { action: 'decline' };
        },
      },
    },
    async (client, wire) => {
      const res = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      assert.match(toolText(res), /User declined to provide the requested information/);
      assert.equal(calls, 1);
      const { answer } = assertOneRound(wire, 'trigger-elicitation-request', 'elicitation/create');
      assert.equal(answer.action, 'decline');
    },
  );
});

test('2026-07-28 input_required: sampling gets the canned completion', { timeout: 30000 }, async () => {
  const canned = `SODA-CANNED-REPLY-${randomUUID()}`;
  const seen = [];
  await withModernClient(
    {
      capabilities: { sampling: {} },
      handlers: {
        'sampling/createMessage': async (req) => {
          seen.push(req.params);
          return {
            model: 'soda-canned-model',
            role: 'assistant',
            content: { type: 'text', text: canned },
            stopReason: 'endTurn',
          };
        },
      },
    },
    async (client, wire) => {
      const prompt = `what is soda ${randomUUID()}`;
      const res = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt, maxTokens: 33 } });
      const text = toolText(res);
      assert.ok(!res.isError, `tool error: ${text}`);
      assert.match(text, /^LLM sampling result: /);
      assert.ok(text.includes(canned), `result contains the canned text; got ${text}`);
      assert.ok(text.includes('soda-canned-model'), 'result contains our model name');

      assert.equal(seen.length, 1, 'the sampling handler ran once');
      assert.equal(seen[0].maxTokens, 33);
      assert.equal(seen[0].messages[0].content.text, `Resource trigger-sampling-request context: ${prompt}`);
      const { answer } = assertOneRound(wire, 'trigger-sampling-request', 'sampling/createMessage');
      assert.equal(answer.content.text, canned);
    },
  );
});

test('2026-07-28 subscriptions/listen through the client, with an input round while it is open', { timeout: 30000 }, async (t) => {
  await withModernClient(
    {
      capabilities: { elicitation: { form: {} } },
      handlers: { 'elicitation/create': async () => ({ action: 'decline' }) },
    },
    async (client, wire) => {
      const uri = 'demo://resource/dynamic/text/7';
      let sub;
      try {
        sub = await client.listen({ resourceSubscriptions: [uri] }, { timeout: 10000 });
      } catch (e) {
        if (e?.code === -32601) {
          // Not implemented by this soda-mcpd yet (the child answered for it).
          t.todo(`soda-mcpd answers subscriptions/listen with -32601: ${e.message}`);
          return;
        }
        throw e;
      }
      const [listen] = wire.filter((x) => x.body?.method === 'subscriptions/listen');
      assert.equal(listen.headers['mcp-protocol-version'], REVISION);
      assert.match(listen.resHeaders['content-type'] ?? '', /^text\/event-stream/);
      assert.deepEqual(sub.honoredFilter.resourceSubscriptions, [uri]);

      const res = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      assert.match(toolText(res), /User declined/);
      assertOneRound(wire, 'trigger-elicitation-request', 'elicitation/create');

      await sub.close();
      assert.equal(await within(sub.closed, 5000, 'subscription closed'), 'local');
    },
  );
});

test('shutdown: SIGTERM stops soda-mcpd and leaves no server-everything children', async () => {
  await assertCleanShutdown(bridge);
});
