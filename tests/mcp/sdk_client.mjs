// SPDX-License-Identifier: MIT
// The official MCP TypeScript SDK's client against nbrun, over stdio (`nbrun mcp`)
// or Streamable HTTP (`nbrun serve`, /mcp). Usage: node sdk_client.mjs stdio|http
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const nbrun = process.env.NBRUN;
const mode = process.argv[2];
let failures = 0;
let stderrText = '';

function check(cond, what) {
  if (cond) {
    console.log(`ok: ${what}`);
  } else {
    console.log(`FAIL: ${what}`);
    failures++;
  }
}

// A PNG: signature, an IHDR chunk first with a sane size, an IEND chunk last.
function isPng(buf) {
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (buf.length < 45 || !buf.subarray(0, 8).equals(sig)) return false;
  if (buf.toString('latin1', 12, 16) !== 'IHDR') return false;
  const w = buf.readUInt32BE(16), h = buf.readUInt32BE(20);
  let off = 8, last = '';
  while (off + 12 <= buf.length) {
    const len = buf.readUInt32BE(off);
    last = buf.toString('latin1', off + 4, off + 8);
    off += 12 + len;
  }
  return w > 0 && h > 0 && last === 'IEND' && off === buf.length;
}

// Resolves when the server's stderr shows text (the deadline only bounds a hang).
function stderrShows(text, ms) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const poll = () => {
      if (stderrText.includes(text)) return resolve(true);
      if (Date.now() - t0 > ms) return resolve(false);
      setTimeout(poll, 200);
    };
    poll();
  });
}

const CHART = `
import matplotlib
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [3, 1, 2])
plt.title("nbrun")
plt.show()
with open("/mnt/data/table.csv", "w") as f:
    f.write("x,y\\n1,3\\n2,1\\n3,2\\n")
with open("/mnt/data/big.bin", "wb") as f:
    f.write(bytes(range(256)) * 1200)
print("chart done")
`;

async function exercise(client, transportName) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  check(names.includes('run_python') && names.includes('run_notebook') &&
    ['session_open', 'session_execute', 'session_upload', 'session_download', 'session_close'].every((n) => names.includes(n)),
    `${transportName}: tools/list has run_python and run_notebook (${names.join(', ')})`);
  const rp = tools.find((t) => t.name === 'run_python');
  check(rp && rp.outputSchema && rp.outputSchema.type === 'object' && rp.inputSchema.required.includes('code'),
    `${transportName}: run_python advertises an inputSchema and an outputSchema`);

  // A chart, a small file and a large one. The SDK validates structuredContent against outputSchema.
  const progress = [];
  const res = await client.callTool({ name: 'run_python', arguments: { code: CHART } }, undefined,
    { onprogress: (p) => progress.push(p), timeout: 240000 });
  check(res.isError === false, `${transportName}: chart call is not an error`);
  const text = res.content.find((c) => c.type === 'text');
  check(text && text.text.includes('chart done'), `${transportName}: text summary has the stdout`);
  const images = res.content.filter((c) => c.type === 'image');
  check(images.length === 1 && images[0].mimeType === 'image/png' &&
    isPng(Buffer.from(images[0].data, 'base64')),
    `${transportName}: one image block that decodes to a valid PNG`);
  const csv = res.content.find((c) => c.type === 'resource' && c.resource.uri.endsWith('/table.csv'));
  check(csv && csv.resource.mimeType === 'text/csv' && csv.resource.text === 'x,y\n1,3\n2,1\n3,2\n',
    `${transportName}: the small file the code wrote is an embedded resource with its bytes`);
  const link = res.content.find((c) => c.type === 'resource_link' && c.name === 'big.bin');
  check(link && link.size === 256 * 1200, `${transportName}: the large file is a resource link`);
  if (link) {
    const rr = await client.readResource({ uri: link.uri });
    const blob = Buffer.from(rr.contents[0].blob || '', 'base64');
    check(blob.length === 256 * 1200 && blob[255] === 255 && blob[256] === 0,
      `${transportName}: resources/read gives the large file's bytes`);
  }
  const sc = res.structuredContent;
  check(sc && sc.status === 'ok' && sc.images.length === 1 && sc.files.length === 2,
    `${transportName}: structuredContent is the result document`);
  check(progress.length > 0 && progress.every((p, i) => i === 0 || p.progress > progress[i - 1].progress),
    `${transportName}: progress notifications arrived, increasing (${progress.map((p) => p.message).join(', ')})`);

  // Raising code: isError with the traceback.
  const err = await client.callTool({ name: 'run_python',
    arguments: { code: 'def f():\n    return {}["missing"]\nprint("before")\nf()' } },
  undefined, { timeout: 240000 });
  const et = err.content.find((c) => c.type === 'text');
  check(err.isError === true && et && et.text.includes('KeyError') && et.text.includes('before') &&
    et.text.includes('----> 4 f()'),
    `${transportName}: raising code gives isError with the error and its traceback`);

  // Wrong argument types: the model reads what is wrong (2025-11-25: a tool execution error).
  const bad = await client.callTool({ name: 'run_python', arguments: { code: 42 } });
  check(bad.isError === true && bad.content[0].text.includes("'code' must be a string"),
    `${transportName}: a wrong argument type is a tool error that says what is wrong`);

  // A 3-call session: state kept between calls, then closed.
  const opened = await client.callTool({ name: 'session_open', arguments: {} }, undefined, { timeout: 240000 });
  const sid = opened.structuredContent && opened.structuredContent.session_id;
  check(opened.isError === false && typeof sid === 'string', `${transportName}: session_open gives a session_id`);
  const s1 = await client.callTool({ name: 'session_execute',
    arguments: { session_id: sid, code: 'x = 40\nwith open("/mnt/data/kept.txt", "w") as f:\n    f.write("kept")' } },
  undefined, { timeout: 240000 });
  const s2 = await client.callTool({ name: 'session_execute',
    arguments: { session_id: sid, code: 'print(open("/mnt/data/kept.txt").read())\nx + 2' } },
  undefined, { timeout: 240000 });
  const s2t = s2.content.find((c) => c.type === 'text');
  check(s1.isError === false && s2.isError === false && s2t && s2t.text.includes('42') &&
    s2t.text.includes('kept') && s2.structuredContent.status === 'ok',
    `${transportName}: session_execute keeps variables and files between calls`);
  const closed = await client.callTool({ name: 'session_close', arguments: { session_id: sid } });
  const after = await client.callTool({ name: 'session_execute', arguments: { session_id: sid, code: '1' } });
  check(closed.isError === false && after.isError === true,
    `${transportName}: session_close ends it; the id no longer works`);

  // Cancel a long cell: the SDK sends notifications/cancelled; the run must stop.
  const ac = new AbortController();
  const started = [];
  const long = client.callTool({ name: 'run_python',
    arguments: { code: 'import time\nprint("sleeping", flush=True)\ntime.sleep(600)' } },
  undefined, { signal: ac.signal, timeout: 700000,
    onprogress: (p) => { started.push(p.message); if (p.message === 'executing') setTimeout(() => ac.abort('test cancels'), 2000); } });
  const outcome = await long.then(() => 'answered', (e) => `rejected: ${e}`);
  check(outcome.startsWith('rejected'), `${transportName}: the cancelled call is rejected on the client (${outcome})`);
  check(await stderrShows('run_python cancelled: its run stopped', 120000),
    `${transportName}: the server stopped the cancelled run (a 600 s sleep)`);
}

async function main() {
  if (!nbrun) throw new Error('NBRUN is not set');
  const client = new Client({ name: 'nbrun-test', version: '1.0.0' });
  let server = null;
  let state = null;
  try {
    if (mode === 'stdio') {
      const transport = new StdioClientTransport({ command: nbrun, args: ['mcp', '--pool', '1'], stderr: 'pipe' });
      transport.stderr.on('data', (d) => { stderrText += d.toString(); process.stderr.write(d); });
      await client.connect(transport);
    } else if (mode === 'http') {
      state = mkdtempSync(join(tmpdir(), 'nbrun-mcp-test-'));
      server = spawn(nbrun, ['serve', '--listen', '127.0.0.1:0', '--pool', '1', '--state-dir', state],
        { stdio: ['ignore', 'ignore', 'pipe'] });
      server.stderr.on('data', (d) => { stderrText += d.toString(); process.stderr.write(d); });
      const port = await new Promise((resolve, reject) => {
        const t = setInterval(() => {
          const m = stderrText.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
          if (m) { clearInterval(t); resolve(m[1]); }
        }, 100);
        server.on('exit', (c) => { clearInterval(t); reject(new Error(`nbrun serve exited ${c}`)); });
      });
      await stderrShows('pool of', 60000);
      const token = readFileSync(join(state, 'token'), 'utf8').trim();
      const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`),
        { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
      await client.connect(transport);
      check(typeof transport.sessionId === 'string' && transport.sessionId.length === 32,
        'http: the server gave an Mcp-Session-Id');
      // Without the token nothing is answered.
      const r = await fetch(`http://127.0.0.1:${port}/mcp`, { method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
        body: '{"jsonrpc":"2.0","id":1,"method":"ping"}' });
      check(r.status === 401, `http: /mcp without the bearer token is 401 (${r.status})`);
    } else {
      throw new Error('usage: sdk_client.mjs stdio|http');
    }
    check(client.getServerVersion().name === 'nbrun', `${mode}: connected to ${client.getServerVersion().name}`);
    await exercise(client, mode);
    if (mode === 'http') await client.transport.terminateSession();
  } finally {
    await client.close().catch(() => {});
    if (server) {
      server.kill('SIGTERM');
      const code = await new Promise((resolve) => server.on('exit', resolve));
      check(code === 0, `http: nbrun serve stopped cleanly on SIGTERM (${code})`);
    }
    if (state) rmSync(state, { recursive: true, force: true });
  }
}

main().then(() => {
  console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
  process.exit(failures ? 1 : 0);
}, (e) => {
  console.log(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
