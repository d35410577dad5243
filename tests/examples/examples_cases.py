#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The examples in examples/ run as a user runs them, against the real engine.

Usage: examples_cases.py CASE
  agent_loop    examples/agent_loop.py --replay examples/agent-turn.json: no
                model, no network (OPENAI_BASE_URL points at a closed port, no
                key), the recorded tool call runs in nbrun mcp; the value the
                kernel computed, the chart (a PNG) and the file it wrote come back.
  curl_session  examples/curl-session.sh against an nbrun serve: the state is
                kept between the two executes and the downloaded revenue.csv
                holds the sums, computed here from examples/sales.csv too.
"""
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
EXAMPLES = os.path.join(SRCDIR, "examples")


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        sys.exit(1)


def case_agent_loop():
    out = tempfile.mkdtemp(prefix="nbrun-example-agent-")
    env = dict(os.environ, NBRUN_MCP_ARGS="--pool 0 --timeout 600s", OPENAI_BASE_URL="http://127.0.0.1:9")
    env.pop("OPENAI_API_KEY", None)
    try:
        agent_loop(out, env)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def agent_loop(out, env):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "agent_loop.py"), "--replay",
                        os.path.join(EXAMPLES, "agent-turn.json"), "--out", out],
                       capture_output=True, text=True, timeout=900, env=env, cwd=out)
    print(p.stdout)
    sys.stderr.write(p.stderr[-3000:])
    check(p.returncode == 0, "agent_loop.py --replay exits 0 (%d)" % p.returncode)
    check("tool call: run_python" in p.stdout, "the recorded tool call was made")
    # 7 x 9 products, 4 odd rows x 5 odd columns are odd: 63 - 20 even. Not in the recording.
    check("even products: 43" in p.stdout, "the kernel's computed value is in the tool result")
    with open(os.path.join(out, "image-1.png"), "rb") as f:
        png = f.read()
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000, "the chart came back as a PNG (%d bytes)" % len(png))
    with open(os.path.join(out, "even.csv")) as f:
        rows = list(csv.reader(f))
    check(rows[0] == ["a", "b"] and len(rows) == 44 and all(int(a) * int(b) % 2 == 0 for a, b in rows[1:]),
          "the file the code wrote came back: %d pairs" % (len(rows) - 1))
    check("model: The count of even products" in p.stdout, "the recorded final answer ends the loop")


def case_curl_session():
    state = tempfile.mkdtemp(prefix="nbrun-example-curl-")
    log = open(os.path.join(state, "stderr"), "w+")
    proc = subprocess.Popen([NBRUN, "serve", "--listen", "127.0.0.1:0", "--pool", "0", "--timeout", "600s",
                             "--state-dir", state], stderr=log)
    try:
        url = None
        for _ in range(600):
            log.flush()
            with open(log.name) as f:
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", f.read())
            if m and os.path.exists(os.path.join(state, "token")):
                url = m.group(1)
                break
            time.sleep(0.1)
        check(url is not None, "nbrun serve listens")
        out = os.path.join(state, "out")
        env = dict(os.environ, NBRUN_URL=url, NBRUN_STATE_DIR=state)
        p = subprocess.run([os.path.join(EXAMPLES, "curl-session.sh"), out], capture_output=True, text=True,
                           timeout=900, env=env)
        print(p.stdout)
        sys.stderr.write(p.stderr[-3000:])
        check(p.returncode == 0, "curl-session.sh exits 0 (%d)" % p.returncode)
        check("ok: 12 rows loaded" in p.stdout, "the first execute loaded the CSV")
        sums = {}
        with open(os.path.join(EXAMPLES, "sales.csv")) as f:
            for r in csv.DictReader(f):
                sums[r["region"]] = sums.get(r["region"], 0) + int(r["units"]) * float(r["price"])
        with open(os.path.join(out, "revenue.csv")) as f:
            got = {r["region"]: float(r["revenue"]) for r in csv.DictReader(f)}
        check(got == sums, "revenue.csv, made from the first execute's DataFrame, holds the sums: %r" % got)
        check('"closed":true' in p.stdout, "the session was closed")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
    print("held", sys.argv[1])
