#!/usr/bin/env node
// sandbox-agent.mjs: an agent-shaped MCP client for soda's sandbox tests.
// Run inside `sodactl run --mcp NAME …`, it finds its servers the way an
// agent does, in the --mcp-config file sodactl wrote ($SODA_MCP_CONFIG,
// Claude Code's format, tokens included), connects to each with the real
// TypeScript SDK (Streamable HTTP, through the sandbox's relay), lists the
// tools and calls TOOL with ARGS on each. One JSON line on stdout:
//
//   {"servers":[{"name","url","tools":N,"result":…}], "ok":true}
//
// Usage: sandbox-agent.mjs [TOOL [ARGS-JSON]]   (default: echo {"message":"hi"})
// Exit 0 when every server answered, 1 otherwise (the JSON says why).
import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const tool = process.argv[2] ?? 'echo';
const args = JSON.parse(process.argv[3] ?? '{"message":"hi from the sandbox"}');
const out = { servers: [], ok: true };
try {
  const path = process.env.SODA_MCP_CONFIG;
  if (!path) throw new Error('SODA_MCP_CONFIG is not set: not run by sodactl run --mcp');
  const cfg = JSON.parse(readFileSync(path, 'utf8'));
  for (const [name, srv] of Object.entries(cfg.mcpServers ?? {})) {
    const entry = { name, url: srv.url };
    out.servers.push(entry);
    const transport = new StreamableHTTPClientTransport(new URL(srv.url), {
      requestInit: { headers: srv.headers ?? {} },
    });
    const client = new Client({ name: 'soda-sandbox-agent', version: '1.0.0' });
    try {
      await client.connect(transport);
      const { tools } = await client.listTools();
      entry.tools = tools.length;
      entry.result = await client.callTool({ name: tool, arguments: args });
      await transport.terminateSession().catch(() => {});
      await client.close();
    } catch (err) {
      entry.error = String(err?.message ?? err);
      out.ok = false;
    }
  }
  if (out.servers.length === 0) {
    out.ok = false;
    out.error = 'no MCP servers in ' + path;
  }
} catch (err) {
  out.ok = false;
  out.error = String(err?.message ?? err);
}
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(out.ok ? 0 : 1);
