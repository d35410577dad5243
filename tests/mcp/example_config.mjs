// SPDX-License-Identifier: MIT
// examples/mcp-client.json as an MCP client reads it (Claude Desktop's
// mcpServers format): the stdio entry is started exactly as configured
// (command and args; the build's nbrun first on PATH) and the official SDK
// lists its tools; the http entry is reached as configured with a running
// nbrun serve's port and token put in for 8411 and TOKEN.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const nbrun = process.env.NBRUN;
const config = JSON.parse(readFileSync(join(process.env.NBRUN_SRCDIR, 'examples', 'mcp-client.json'), 'utf8'));
let failures = 0;

function check(cond, what) {
  console.log(`${cond ? 'ok' : 'FAIL'}: ${what}`);
  if (!cond) failures++;
}

function toolsOk(tools, where) {
  const names = tools.map((t) => t.name);
  check(['run_python', 'run_code', 'run_notebook', 'session_open', 'session_execute'].every((n) => names.includes(n)),
    `${where}: tools/list gives nbrun's tools (${names.join(', ')})`);
}

async function stdioEntry() {
  const entry = config.mcpServers.nbrun;
  check(entry && entry.command && Array.isArray(entry.args), 'the config has a stdio entry "nbrun"');
  const env = { ...getDefaultEnvironment(), PATH: `${dirname(nbrun)}:${process.env.PATH}` };
  const client = new Client({ name: 'nbrun-example-config', version: '1.0.0' });
  const transport = new StdioClientTransport({ command: entry.command, args: entry.args, env, stderr: 'pipe' });
  transport.stderr.on('data', (d) => process.stderr.write(d));
  try {
    await client.connect(transport);
    const { tools } = await client.listTools();
    toolsOk(tools, 'stdio entry');
    // The configured --timeout reached the server: it bounds timeout_s.
    const want = Number(entry.args[entry.args.indexOf('--timeout') + 1].replace('s', ''));
    const rp = tools.find((t) => t.name === 'run_python');
    check(rp && rp.inputSchema.properties.timeout_s.maximum === want,
      `stdio entry: the configured --timeout ${want}s is the tools' timeout_s maximum`);
  } finally {
    await client.close().catch(() => {});
  }
}

async function httpEntry() {
  const entry = config.mcpServers['nbrun-http'];
  check(entry && entry.type === 'http' && entry.url.endsWith('/mcp'), 'the config has an http entry "nbrun-http"');
  const state = mkdtempSync(join(tmpdir(), 'nbrun-example-config-'));
  let log = '';
  const server = spawn(nbrun, ['serve', '--listen', '127.0.0.1:0', '--pool', '0', '--state-dir', state],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  server.stderr.on('data', (d) => { log += d.toString(); process.stderr.write(d); });
  const client = new Client({ name: 'nbrun-example-config', version: '1.0.0' });
  try {
    const port = await new Promise((resolve, reject) => {
      const t = setInterval(() => {
        const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
        if (m && log.includes('languages:')) { clearInterval(t); resolve(m[1]); }
      }, 100);
      server.on('exit', (c) => { clearInterval(t); reject(new Error(`nbrun serve exited ${c}`)); });
    });
    const token = readFileSync(join(state, 'token'), 'utf8').trim();
    const url = new URL(entry.url.replace(':8411', `:${port}`));
    const headers = Object.fromEntries(Object.entries(entry.headers).map(([k, v]) => [k, v.replace('TOKEN', token)]));
    await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers } }));
    const { tools } = await client.listTools();
    toolsOk(tools, 'http entry');
  } finally {
    await client.close().catch(() => {});
    server.kill('SIGTERM');
    await new Promise((resolve) => server.on('exit', resolve));
    rmSync(state, { recursive: true, force: true });
  }
}

stdioEntry().then(httpEntry).then(() => {
  console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
  process.exit(failures ? 1 : 0);
}, (e) => {
  console.log(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
