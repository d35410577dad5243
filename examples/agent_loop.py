#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An agent loop: a chat model with nbrun's tools, through any OpenAI-compatible API.

The model gets the tool definitions of schemas/tools.openai.json; each tool call
it makes is sent, name and arguments unchanged, to `nbrun mcp` (started here,
spoken to over stdio), and what the tool returns goes back to the model: the
text summary, plus where each image and file the code produced was saved.

    OPENAI_API_KEY=... NBRUN_MODEL=gpt-4.1-mini python3 examples/agent_loop.py "Plot sin(x)"
    python3 examples/agent_loop.py --replay examples/agent-turn.json   # no network, no key

Environment: OPENAI_BASE_URL (default https://api.openai.com/v1; any server
that speaks chat completions), OPENAI_API_KEY, NBRUN_MODEL (default
gpt-4.1-mini), NBRUN (the nbrun binary, default `nbrun` on PATH),
NBRUN_MCP_ARGS (extra arguments of `nbrun mcp`, e.g. "--pool 0 --timeout 300s").
--replay FILE answers each model call with the next recorded chat-completions
response of FILE (a JSON list) instead of calling a model; the tool calls in
it still run for real.
"""
import argparse
import base64
import json
import os
import shlex
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "schemas", "tools.openai.json")
SYSTEM = ("You are a data analyst. Answer with the help of the nbrun tools: run code to compute, "
          "never guess a number you could compute. Charts and files the code writes under "
          "/mnt/data/ come back to the user.")


class Mcp:
    """A minimal MCP client over stdio: initialize, then tools/call."""

    def __init__(self, nbrun, extra):
        self.proc = subprocess.Popen([nbrun, "mcp"] + extra, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.next_id = 0
        init = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                           "clientInfo": {"name": "nbrun-agent-loop", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.server = init["serverInfo"]["name"]

    def send(self, msg):
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg.get("id") != self.next_id:
                continue  # a notification (progress)
            if "error" in msg:
                raise RuntimeError("%s: %s" % (method, msg["error"]["message"]))
            return msg["result"]
        raise RuntimeError("nbrun mcp ended")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(60)


def call_tool(mcp, name, arguments, out_dir, counter):
    """Run one tool call; returns the text the model reads."""
    result = mcp.request("tools/call", {"name": name, "arguments": arguments})
    parts = []
    for block in result.get("content", []):
        kind = block.get("type")
        if kind == "text":
            parts.append(block["text"])
        elif kind == "image":
            counter[0] += 1
            ext = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif"}.get(block["mimeType"], "bin")
            path = os.path.join(out_dir, "image-%d.%s" % (counter[0], ext))
            with open(path, "wb") as f:
                f.write(base64.b64decode(block["data"]))
            parts.append("[an image was shown to the user: %s]" % path)
        elif kind == "resource":
            res = block["resource"]
            name_ = res["uri"].rsplit("/", 1)[-1]
            path = os.path.join(out_dir, name_)
            data = res["text"].encode() if "text" in res else base64.b64decode(res["blob"])
            with open(path, "wb") as f:
                f.write(data)
            parts.append("[file %s saved for the user: %s]" % (name_, path))
        elif kind == "resource_link":
            parts.append("[file %s (%s bytes) kept by nbrun: %s]" % (block["name"], block.get("size"), block["uri"]))
    text = "\n".join(parts)
    return ("ERROR: " if result.get("isError") else "") + text


def chat(base_url, key, model, messages, tools):
    body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("prompt", nargs="?", default="How many rows has a 7 x 9 multiplication table whose "
                    "product is even? Show it as a chart.")
    ap.add_argument("--replay", metavar="FILE", help="recorded chat-completions responses instead of a model")
    ap.add_argument("--out", default="agent-out", help="where images and files are saved (default ./agent-out)")
    ap.add_argument("--max-turns", type=int, default=8)
    a = ap.parse_args()

    with open(TOOLS) as f:
        tools = json.load(f)
    recorded = None
    if a.replay:
        with open(a.replay) as f:
            recorded = json.load(f)
        print("replaying %d recorded model turn(s) from %s; no model is called" % (len(recorded), a.replay))
    else:
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            sys.exit("agent_loop: set OPENAI_API_KEY (or use --replay FILE)")
    base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
    model = os.environ.get("NBRUN_MODEL", "gpt-4.1-mini")
    os.makedirs(a.out, exist_ok=True)
    mcp = Mcp(os.environ.get("NBRUN", "nbrun"), shlex.split(os.environ.get("NBRUN_MCP_ARGS", "")))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": a.prompt}]
    counter = [0]
    try:
        for _ in range(a.max_turns):
            if recorded is not None:
                if not recorded:
                    print("(no more recorded turns)")
                    break
                response = recorded.pop(0)
            else:
                response = chat(base_url, os.environ["OPENAI_API_KEY"], model, messages, tools)
            msg = response["choices"][0]["message"]
            messages.append(msg)
            calls = msg.get("tool_calls") or []
            if msg.get("content"):
                print("model:", msg["content"])
            if not calls:
                break
            for call in calls:
                fn = call["function"]
                args = json.loads(fn["arguments"] or "{}")
                print("tool call: %s %s" % (fn["name"], json.dumps(args)[:300]))
                text = call_tool(mcp, fn["name"], args, a.out, counter)
                print("tool result:\n" + text)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    finally:
        mcp.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
