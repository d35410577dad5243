// SPDX-License-Identifier: MIT
// The official MCP TypeScript SDK's client against `nbrun mcp` (stdio): the
// tools it lists are schemas/tools.mcp.json (what function-calling users get),
// run_code runs bash in its own kernel, an unknown language is a tool error
// naming the languages, and a bash session keeps its state. (bash rather than
// R or JavaScript: the sandbox's agent gives a kernel 60 s to start, which
// IRkernel and tslab can pass on a shared test host at load 30; the bash
// kernel starts as quickly as Python's. lang-* runs R and JavaScript.)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const nbrun = process.env.NBRUN;
const srcdir = process.env.NBRUN_SRCDIR;
const LANGS = ['python', 'r', 'javascript', 'typescript', 'bash'];
let failures = 0;

function check(cond, what) {
  console.log(`${cond ? 'ok' : 'FAIL'}: ${what}`);
  if (!cond) failures++;
}

async function connect(args) {
  const client = new Client({ name: 'nbrun-test-languages', version: '1.0.0' });
  const transport = new StdioClientTransport({ command: nbrun, args: ['mcp', ...args], stderr: 'pipe' });
  transport.stderr.on('data', (d) => process.stderr.write(d));
  await client.connect(transport);
  return client;
}

const CALL = { timeout: 900000 };

async function main() {
  // The server as configured by default: what scripts/schemas printed.
  const committed = JSON.parse(readFileSync(join(srcdir, 'schemas', 'tools.mcp.json'), 'utf8'));
  let client = await connect(['--pool', '0']);
  try {
    const { tools } = await client.listTools();
    const served = tools.map((t) => (t.outputSchema ? { ...t, outputSchema: { $ref: 'result.schema.json' } } : t));
    check(isDeepStrictEqual(served, committed.tools),
      `tools/list is schemas/tools.mcp.json (${tools.map((t) => t.name).join(', ')})`);
    const rc = tools.find((t) => t.name === 'run_code');
    check(rc && isDeepStrictEqual(rc.inputSchema.properties.language.enum, LANGS.slice(1)) &&
      rc.inputSchema.required.includes('language'),
    'run_code advertises the image\'s languages other than python, language required');
  } finally {
    await client.close().catch(() => {});
  }

  // Runs under a loaded machine: a generous deadline (nothing here is timed).
  client = await connect(['--pool', '0', '--timeout', '600s']);
  try {
    const run = await client.callTool({ name: 'run_code', arguments: {
      language: 'bash',
      code: 'n=0; for x in 5 6 7; do n=$((n + x * x)); done\necho $n > /mnt/data/n.txt\necho "squares $((n * 101))"' } },
    undefined, CALL);
    const rt = run.content.find((c) => c.type === 'text');
    check(run.isError === false && rt && rt.text.includes('squares 11110'),
      `run_code bash: the computed value in the text (${rt && rt.text.slice(0, 200)})`);
    check(run.structuredContent && run.structuredContent.language === 'bash' && run.structuredContent.status === 'ok',
      'run_code bash: structuredContent is the result document, language bash');
    const file = run.content.find((c) => c.type === 'resource' && c.resource.uri.endsWith('/n.txt'));
    check(file && file.resource.text === '110\n', 'run_code bash: the file it wrote comes back');

    const bad = await client.callTool({ name: 'run_code', arguments: { language: 'cobol', code: 'DISPLAY 1' } });
    const bt = bad.content[0] && bad.content[0].text;
    check(bad.isError === true && bt.includes('cobol') && LANGS.every((l) => bt.includes(l)),
      `run_code with an unknown language: a tool error naming the languages (${bt})`);
    const bad2 = await client.callTool({ name: 'session_open', arguments: { language: 'klingon' } });
    check(bad2.isError === true && bad2.content[0].text.includes('klingon'),
      'session_open with an unknown language: a tool error');

    const opened = await client.callTool({ name: 'session_open', arguments: { language: 'bash' } }, undefined, CALL);
    const sid = opened.structuredContent && opened.structuredContent.session_id;
    check(opened.isError === false && sid && opened.structuredContent.language === 'bash',
      `session_open {language: bash} gives a session (${opened.content[0].text.split('\n')[0]})`);
    const s1 = await client.callTool({ name: 'session_execute',
      arguments: { session_id: sid, code: 'total=0\nfor i in $(seq 1 10); do total=$((total + i)); done' } },
    undefined, CALL);
    const s2 = await client.callTool({ name: 'session_execute',
      arguments: { session_id: sid, code: 'echo "total $((total * 3))"' } }, undefined, CALL);
    const s2t = s2.content.find((c) => c.type === 'text');
    check(s1.isError === false && s2.isError === false && s2t && s2t.text.includes('total 165') &&
      s2.structuredContent.language === 'bash',
    'a bash session keeps its variable across two session_execute calls');
    const closed = await client.callTool({ name: 'session_close', arguments: { session_id: sid } });
    check(closed.isError === false, 'session_close');
  } finally {
    await client.close().catch(() => {});
  }
}

main().then(() => {
  console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
  process.exit(failures ? 1 : 0);
}, (e) => {
  console.log(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
