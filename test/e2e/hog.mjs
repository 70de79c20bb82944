#!/usr/bin/env node
// hog.mjs: a tiny stdio MCP server (newline-delimited JSON-RPC 2.0, no
// dependencies) for soda's end-to-end tests on a real systemd (test/e2e).
//
// Tools:
//   echo {message|text}  returns the text
//   hog  {mb}            touches mb MiB of memory (default 200) in 8 MiB
//                        chunks and keeps it, so that the child's MemoryMax=
//                        gets it killed by the kernel
//   env  {name}          returns the value of the environment variable name
//                        (default DEMO_SECRET), or "<unset>"
//
// It exits 0 when stdin reaches EOF.

import { createInterface } from 'node:readline';

const tools = [
  {
    name: 'echo',
    description: 'Echoes back the given text.',
    inputSchema: { type: 'object', properties: { message: { type: 'string' }, text: { type: 'string' } } },
  },
  {
    name: 'hog',
    description: 'Allocates and touches the given number of MiB of memory.',
    inputSchema: { type: 'object', properties: { mb: { type: 'number' } } },
  },
  {
    name: 'env',
    description: 'Returns the value of an environment variable.',
    inputSchema: { type: 'object', properties: { name: { type: 'string' } } },
  },
];

const send = (msg) => process.stdout.write(JSON.stringify(msg) + '\n');
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const held = [];

function callTool(name, args) {
  switch (name) {
    case 'echo':
      return text(String(args.message ?? args.text ?? ''));
    case 'hog': {
      const mb = Number(args.mb ?? 200);
      const chunk = 8 << 20;
      for (let done = 0; done < mb << 20; done += chunk) {
        held.push(Buffer.allocUnsafe(chunk).fill(1)); // fill: the pages must really be touched
      }
      return text(`holding ${mb} MiB`);
    }
    case 'env': {
      const v = process.env[String(args.name ?? 'DEMO_SECRET')];
      return text(v === undefined ? '<unset>' : v);
    }
  }
  return null;
}

function handle(msg) {
  if (msg.id === undefined || msg.id === null) return; // notification
  const reply = (result) => send({ jsonrpc: '2.0', id: msg.id, result });
  const fail = (code, message) => send({ jsonrpc: '2.0', id: msg.id, error: { code, message } });
  switch (msg.method) {
    case 'initialize':
      return reply({
        protocolVersion: msg.params?.protocolVersion ?? '2025-06-18',
        capabilities: { tools: {} },
        serverInfo: { name: 'soda-e2e-hog', version: '1.0.0' },
      });
    case 'ping':
      return reply({});
    case 'tools/list':
      return reply({ tools });
    case 'tools/call': {
      const r = callTool(msg.params?.name, msg.params?.arguments ?? {});
      return r ? reply(r) : fail(-32602, `unknown tool ${msg.params?.name}`);
    }
    default:
      return fail(-32601, `method not found: ${msg.method}`);
  }
}

const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (!line.trim()) return;
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } });
    return;
  }
  handle(msg);
});
rl.on('close', () => process.exit(0));
