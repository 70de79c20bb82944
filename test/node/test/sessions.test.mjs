// The TypeScript SDK's client against `sodactl sandbox mcp --direct`:
// discovery, a whole seed → exec → diff → reset → close workflow on a real
// OS sandbox, schema failures as JSON-RPC errors, execution failures as
// isError results, and the text content alone carrying the output.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { existsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const sodactl = process.env.SODACTL ?? path.resolve(here, '../../../bin/sodactl');

// A sandbox needs root or unprivileged user namespaces: the control.
function sandboxSkip() {
  if (process.getuid() === 0) return false;
  try {
    execFileSync('unshare', ['--user', '--map-current-user', '--net', '--mount', '--pid', '--fork', 'true']);
    return false;
  } catch (e) {
    return `SKIP: no user namespaces for an unprivileged sandbox here (${e.message}); CI runs this as root`;
  }
}

async function connect() {
  assert.ok(existsSync(sodactl), `sodactl not found at ${sodactl}: make build (or set SODACTL)`);
  const transport = new StdioClientTransport({
    command: sodactl,
    args: ['sandbox', 'mcp', '--direct', '--allow-degraded', 'cgroup'],
    stderr: 'pipe',
  });
  const client = new Client({ name: 'soda-ts-test', version: '1' });
  await client.connect(transport);
  return client;
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

test('sandbox mcp: the TypeScript SDK client drives a whole session', { skip: sandboxSkip() }, async () => {
  const client = await connect();
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['sandbox_audit', 'sandbox_close', 'sandbox_create', 'sandbox_diff', 'sandbox_exec',
      'sandbox_read_files', 'sandbox_reset', 'sandbox_run_script', 'sandbox_seed', 'sandbox_write_files']);
    for (const t of tools) assert.ok(t.inputSchema && t.outputSchema, `${t.name} has both schemas`);

    // The SDK validates structuredContent against each output schema.
    const created = await client.callTool({ name: 'sandbox_create', arguments: { files: [{ path: 'a.txt', content: 'one\n' }] } });
    assert.ok(!created.isError, text(created));
    const id = created.structuredContent.sandbox_id;
    assert.match(id, /^sbx-/);

    const ex = await client.callTool({ name: 'sandbox_exec', arguments: { sandbox_id: id, command: 'echo two >> a.txt; cat a.txt; node -e "console.log(1+1)"' } });
    assert.ok(!ex.isError, text(ex));
    assert.equal(ex.structuredContent.exec.stdout, 'one\ntwo\n2\n');
    assert.match(text(ex), /one\ntwo\n2/); // a text-only client has the output too

    const fail = await client.callTool({ name: 'sandbox_exec', arguments: { sandbox_id: id, command: 'exit 4' } });
    assert.equal(fail.isError, true);
    assert.equal(fail.structuredContent.exec.exit_code, 4);

    const d = await client.callTool({ name: 'sandbox_diff', arguments: { sandbox_id: id, format: 'unified' } });
    assert.match(d.structuredContent.diff.unified, /\+two/);
    assert.match(text(d), /\+two/);

    await client.callTool({ name: 'sandbox_reset', arguments: { sandbox_id: id } });
    const rd = await client.callTool({ name: 'sandbox_read_files', arguments: { sandbox_id: id, paths: ['a.txt'] } });
    assert.equal(rd.structuredContent.files[0].content, 'one\n');

    // A hostile path is a JSON-RPC error, not a result.
    await assert.rejects(
      client.callTool({ name: 'sandbox_write_files', arguments: { sandbox_id: id, files: [{ path: '../../etc/passwd', content: 'x' }] } }),
      (e) => e.code === -32602 && /\.\./.test(e.message),
    );
    const closed = await client.callTool({ name: 'sandbox_close', arguments: { sandbox_id: id } });
    assert.ok(!closed.isError);
  } finally {
    await client.close();
  }
});
