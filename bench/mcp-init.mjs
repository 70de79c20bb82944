// bench/mcp-init.mjs -- an agent's MCP start-up: connect to every server
// of a Claude-format configuration and wait until each has answered
// initialize, all of them in parallel, then exit 0 (1 on any failure).
//   node mcp-init.mjs FILE   stdio entries are started as the agent would
//                            (spawn, initialize on stdin), then killed;
//                            http entries get initialize over Streamable HTTP.
// Used by bench/mcpconfig.sh (make bench-mcpconfig).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

const init = { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } };

function stdio(name, s) {
  return new Promise((resolve, reject) => {
    const child = spawn(s.command, s.args ?? [], { env: { ...process.env, ...(s.env ?? {}) }, stdio: ['pipe', 'pipe', 'ignore'] });
    let buf = '';
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`${name} exited (${code}) before answering`)));
    child.stdout.on('data', (d) => {
      buf += d;
      for (const line of buf.split('\n').slice(0, -1)) {
        try {
          const m = JSON.parse(line);
          if (m.id === 1 && m.result?.serverInfo) {
            child.removeAllListeners('exit');
            child.kill('SIGKILL');
            return resolve();
          }
        } catch {}
      }
    });
    child.stdin.write(JSON.stringify(init) + '\n');
  });
}

async function http(name, s) {
  const r = await fetch(s.url, { method: 'POST', body: JSON.stringify(init),
    headers: { ...(s.headers ?? {}), 'content-type': 'application/json', accept: 'application/json, text/event-stream' } });
  const body = await r.text();
  if (r.status !== 200 || !body.includes('serverInfo')) throw new Error(`${name}: ${r.status} ${body.slice(0, 200)}`);
}

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
try {
  await Promise.all(Object.entries(cfg.mcpServers).map(([n, s]) => (s.command ? stdio(n, s) : http(n, s))));
  process.exit(0);
} catch (e) {
  console.error(String(e));
  process.exit(1);
}
