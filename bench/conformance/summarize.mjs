// bench/conformance/summarize.mjs: the per-scenario table of a
// bench/conformance.sh run: node summarize.mjs RUNDIR AUTHMODE VERSION
import fs from 'node:fs';
import path from 'node:path';

const [out, auth, version] = process.argv.slice(2);

function summary(txtFile) {
  const txt = fs.readFileSync(txtFile, 'utf8');
  const rows = new Map();
  const cat = new Map();
  let total = '';
  const s = txt.indexOf('=== SUMMARY ===');
  for (const line of txt.slice(s).split('\n')) {
    let m = line.match(/^([✓✗]) (\S+): (\d+) passed, (\d+) failed/);
    if (m) rows.set(m[2], { ok: m[1] === '✓', p: +m[3], f: +m[4] });
    m = line.match(/^\s+[✓✗] (\S+) \((\w+)\)/);
    if (m) cat.set(m[1], m[2]);
    if (line.startsWith('Total:')) total = line;
  }
  return { rows, cat, total };
}

function checks(dir) {
  const byScenario = new Map();
  if (!fs.existsSync(dir)) return byScenario;
  for (const d of fs.readdirSync(dir)) {
    const name = d.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
    const f = path.join(dir, d, 'checks.json');
    if (!fs.existsSync(f)) continue;
    byScenario.set(name, JSON.parse(fs.readFileSync(f, 'utf8')));
  }
  return byScenario;
}

const cell = (r) => (r ? `${r.ok ? 'PASS' : '**FAIL**'} ${r.p}/${r.p + r.f}` : 'n/a');
let md = `# MCP conformance: the reference everything-server directly and behind soda-mcpd\n\n`;
md += `Generated ${new Date().toISOString()} by bench/conformance.sh, soda ${version} (AUTH=${auth}; ` +
  (auth === 'token' ? 'soda-mcpd with --token-file, runner through authproxy.mjs' : 'soda-mcpd --no-auth: the runner has no option to send a bearer token') +
  `).\nRunner @modelcontextprotocol/conformance 0.2.0-alpha.12 on Node ${process.version}. ` +
  `Cells: PASS/FAIL and passed checks / all checks (WARNING/INFO/SKIPPED checks do not fail a scenario).\n\n`;

for (const [suite, title] of [['2026', '--requirements 2026-07-28'], ['active', 'default (active) suite']]) {
  const ref = summary(path.join(out, `ref-${suite}.txt`));
  const soda = summary(path.join(out, `soda-${suite}.txt`));
  const sodaChecks = checks(path.join(out, `soda-${suite}`));
  const refChecks = checks(path.join(out, `ref-${suite}`));
  const names = [...new Set([...ref.rows.keys(), ...soda.rows.keys()])];
  const count = (s, pred) => names.filter((n) => pred(n) && s.rows.get(n)?.ok).length;
  const scored = (n) => !(ref.cat.get(n) || soda.cat.get(n));
  md += `## ${title}\n\n`;
  md += `| | reference direct | through soda-mcpd |\n|---|---|---|\n`;
  md += `| scenarios passed, all ${names.length} | ${count(ref, () => true)} | ${count(soda, () => true)} |\n`;
  const nsc = names.filter(scored).length;
  md += `| scenarios passed, ${nsc} scored | ${count(ref, scored)} | ${count(soda, scored)} |\n`;
  md += `| checks | ${ref.total.replace('Total: ', '')} | ${soda.total.replace('Total: ', '')} |\n\n`;
  md += `| scenario | class | reference | soda-mcpd |\n|---|---|---|---|\n`;
  for (const n of names) {
    md += `| ${n} | ${ref.cat.get(n) || soda.cat.get(n) || 'required'} | ${cell(ref.rows.get(n))} | ${cell(soda.rows.get(n))} |\n`;
  }
  md += `\n### ${title}: soda-mcpd failing checks\n\n`;
  for (const n of names) {
    const fails = (sodaChecks.get(n) || []).filter((c) => c.status === 'FAILURE' || c.status === 'WARNING');
    if (!fails.length) continue;
    const refFail = new Set((refChecks.get(n) || []).filter((c) => c.status !== 'SUCCESS').map((c) => c.id + c.status));
    md += `- **${n}**${soda.rows.get(n)?.ok ? ' (passes; warnings only)' : ''}\n`;
    for (const c of fails) {
      const same = refFail.has(c.id + c.status) ? ' _(reference: same)_' : '';
      md += `  - ${c.status} \`${c.id}\`: ${(c.errorMessage || c.description || '').replace(/\s+/g, ' ').slice(0, 400)}${same}\n`;
    }
  }
  md += '\n';
}
const sdk = JSON.parse(fs.readFileSync(new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url))).version;
md += `## Notes\n\n` +
`- The reference is CONFORMANCE_SERVER as given; its stdio build serves the same createMcpServer() on stdio (bench/conformance.sh). @modelcontextprotocol/sdk ${sdk}.\n` +
`- What the reference defines only in its HTTP layer (its stateless handling, the test_input_required_result_* tools and prompt, test_missing_capability) cannot be reached through its stdio build: scenarios that call them fail through soda with "not found".\n` +
`- "(reference: same)" matches by check id and status, so for check ids that repeat within a scenario it can be loose.\n`;
process.stdout.write(md);
