// askchild: a stdio MCP server of revision 2025-11-25, without
// dependencies, whose tools ask the client things (elicitation, sampling,
// roots) the way older children do: with requests of their own while a
// tools/call runs. The bridge's tests of input-required translation use it.
//
// Tools: ask_one (one elicitation), ask_three (elicitation, sampling and
// roots at once), ask_many (arguments.n elicitations at once, default 20), ask_rounds (two elicitations one after the other),
// ask_slow (one elicitation, then arguments.ms, default 5000, of work), ask_cancel (an elicitation
// the server cancels itself after 200 ms).
// Everything the server learns goes to stderr as "askchild: ...".
import { createInterface } from "node:readline";

let next = 0;
const waiting = new Map(); // our request id -> resolve
const calls = new Map(); // client's call id -> {cancelled}

const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const log = (s) => process.stderr.write("askchild: " + s + "\n");

function ask(method, params) {
  const id = "ask-" + ++next;
  send({ jsonrpc: "2.0", id, method, params });
  return { id, reply: new Promise((resolve) => waiting.set(id, resolve)) };
}
const elicit = (message) =>
  ask("elicitation/create", {
    message,
    requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
  });
const text = (t) => ({ content: [{ type: "text", text: t }] });
const show = (r) => (r.error ? `error ${r.error.code}: ${r.error.message}` : JSON.stringify(r.result));

const tools = {
  async ask_one() {
    const r = await elicit("What is your name?").reply;
    log("ask_one got " + show(r));
    return text("ask_one: " + show(r));
  },
  async ask_three() {
    const rs = await Promise.all([
      elicit("Name?").reply,
      ask("sampling/createMessage", {
        messages: [{ role: "user", content: { type: "text", text: "Greet" } }],
        maxTokens: 10,
      }).reply,
      ask("roots/list", {}).reply,
    ]);
    log("ask_three got " + rs.map(show).join(" | "));
    return text("ask_three: " + rs.map(show).join(" | "));
  },
  async ask_many(args) {
    const rs = await Promise.all(Array.from({ length: args.n ?? 20 }, (_, i) => elicit("Q" + i).reply));
    const refused = rs.filter((r) => r.error).length;
    log(`ask_many answered ${rs.length - refused} refused ${refused}`);
    return text(`ask_many: answered ${rs.length - refused} refused ${refused}`);
  },
  async ask_rounds() {
    const a = await elicit("Step 1: name?").reply;
    log("ask_rounds step 1 " + show(a));
    const b = await elicit("Step 2: colour?").reply;
    log("ask_rounds step 2 " + show(b));
    return text("ask_rounds: " + show(a) + " then " + show(b));
  },
  async ask_slow(args) {
    const r = await elicit("Name, then wait").reply;
    log("ask_slow got " + show(r));
    await new Promise((r) => setTimeout(r, args.ms ?? 5000));
    return text("ask_slow: " + show(r));
  },
  async ask_cancel() {
    const { id } = elicit("Never mind");
    await new Promise((r) => setTimeout(r, 200));
    waiting.delete(id);
    send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason: "changed my mind" } });
    log("ask_cancel cancelled " + id);
    return text("ask_cancel: server cancelled its question");
  },
};

createInterface({ input: process.stdin }).on("line", async (line) => {
  let m;
  try {
    m = JSON.parse(line);
  } catch {
    return;
  }
  if (m.method === undefined && m.id !== undefined) {
    const resolve = waiting.get(m.id);
    waiting.delete(m.id);
    if (resolve) resolve(m);
    else log("answer to no request " + JSON.stringify(m.id));
    return;
  }
  if (m.method === "notifications/cancelled") {
    const c = calls.get(JSON.stringify(m.params.requestId));
    if (c) c.cancelled = true;
    log("call " + JSON.stringify(m.params.requestId) + " cancelled: " + m.params.reason);
    return;
  }
  if (m.id === undefined) return;
  switch (m.method) {
    case "initialize":
      log("initialize capabilities " + JSON.stringify(m.params.capabilities));
      return send({
        jsonrpc: "2.0",
        id: m.id,
        result: { protocolVersion: "2025-11-25", capabilities: { tools: {} }, serverInfo: { name: "askchild", version: "1" } },
      });
    case "ping":
      return send({ jsonrpc: "2.0", id: m.id, result: {} });
    case "tools/list":
      return send({
        jsonrpc: "2.0",
        id: m.id,
        result: { tools: Object.keys(tools).map((name) => ({ name, inputSchema: { type: "object" } })) },
      });
    case "tools/call": {
      const tool = tools[m.params.name];
      if (!tool) return send({ jsonrpc: "2.0", id: m.id, error: { code: -32602, message: "no such tool" } });
      const c = { cancelled: false };
      calls.set(JSON.stringify(m.id), c);
      const result = await tool(m.params.arguments ?? {});
      calls.delete(JSON.stringify(m.id));
      if (c.cancelled) return log("not answering cancelled call " + JSON.stringify(m.id));
      return send({ jsonrpc: "2.0", id: m.id, result });
    }
    default:
      return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "method not found" } });
  }
});
