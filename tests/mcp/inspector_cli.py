#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The MCP Inspector's CLI mode (a client nobody here wrote) lists nbrun mcp's
tools over stdio and calls run_python."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
cli = os.path.join(here, "node_modules", "@modelcontextprotocol", "inspector", "cli", "build", "cli.js")
nbrun = os.environ["NBRUN"]
if not os.path.exists(cli):
    print(f"FAIL: {cli} is missing: run scripts/setup (it installs tests/mcp/node_modules)")
    sys.exit(1)

failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    failures += 0 if cond else 1


def inspector(*args):
    p = subprocess.run(["node", cli, "--cli", nbrun, "mcp", "--pool", "0", *args],
                       capture_output=True, text=True, timeout=120, cwd=here)
    sys.stderr.write(p.stderr)
    return p.returncode, p.stdout


rc, out = inspector("--method", "tools/list")
tools = json.loads(out).get("tools", []) if rc == 0 else []
names = sorted(t["name"] for t in tools)
check(rc == 0 and "run_python" in names and "run_notebook" in names,
      f"inspector --cli tools/list lists the tools ({names})")
check(all(t.get("description") and t.get("inputSchema", {}).get("type") == "object" for t in tools),
      "every tool has a description and an object inputSchema")
rc, out = inspector("--method", "tools/call", "--tool-name", "run_python", "--tool-arg",
                    "code=print(6 * 7)")
res = json.loads(out) if rc == 0 and out.strip().startswith("{") else {}
check(res.get("isError") is False and "42" in res["content"][0]["text"] and
      res.get("structuredContent", {}).get("status") == "ok",
      f"inspector --cli tools/call run_python prints 42 ({rc})")
print(f"{failures} failed")
sys.exit(1 if failures else 0)
