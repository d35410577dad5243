#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hostile MCP clients: malformed JSON-RPC, unknown methods, wrong argument
types, batches a revision does not have, oversized and deeply nested
messages, path tricks in resource URIs; over stdio (nbrun mcp) and over
HTTP (/mcp on nbrun serve). Each must get its JSON-RPC error and the
server must go on answering. No case starts a sandbox.

Usage: mcp_cases.py stdio|http
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NBRUN = os.environ.get("NBRUN", "nbrun")
CAP = 32 << 20  # MCP_MESSAGE_MAX
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures += 1


def init_msg(version, id_=0):
    return {"jsonrpc": "2.0", "id": id_, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "hostile", "version": "1"}}}


def err_code(reply):
    return reply.get("error", {}).get("code") if isinstance(reply, dict) else None


# ---- stdio -------------------------------------------------------------------------


class Stdio:
    def __init__(self):
        self.p = subprocess.Popen([NBRUN, "mcp", "--pool", "0"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send_raw(self, data):
        self.p.stdin.write(data if data.endswith(b"\n") else data + b"\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        return json.loads(line) if line else None

    def notify(self, msg):
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")
        self.p.stdin.flush()

    def send(self, msg):
        return self.send_raw(json.dumps(msg).encode())

    def close(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=60)
        err = self.p.stderr.read().decode(errors="replace")
        return rc, err


def stdio_cases():
    s = Stdio()
    r = s.send(init_msg("2025-11-25", 1))
    check(r["result"]["protocolVersion"] == "2025-11-25", "stdio: initialize 2025-11-25")
    r = s.send_raw(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"')
    check(err_code(r) == -32700 and r["id"] is None, "stdio: malformed JSON is -32700 with a null id")
    r = s.send_raw(b'\xff\xfe{"jsonrpc":"2.0"}')
    check(err_code(r) == -32700, "stdio: invalid UTF-8 is -32700")
    r = s.send_raw(b"[" * 100000 + b"]" * 100000)
    check(err_code(r) in (-32700, -32600), "stdio: 100000 nested arrays are refused, no crash")
    r = s.send_raw(b"42")
    check(err_code(r) == -32600, "stdio: a message that is not an object is -32600")
    r = s.send({"id": 3, "method": "ping"})
    check(err_code(r) == -32600 and r["id"] == 3, "stdio: no jsonrpc member is -32600")
    r = s.send({"jsonrpc": "2.0", "id": None, "method": "ping"})
    check(err_code(r) == -32600, "stdio: a null id is -32600")
    r = s.send({"jsonrpc": "2.0", "id": 4, "method": "no/such/method"})
    check(err_code(r) == -32601 and r["id"] == 4, "stdio: an unknown method is -32601")
    r = s.send({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": [1, 2]})
    check(err_code(r) == -32602, "stdio: params that are not an object are -32602")
    r = s.send({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "rm_rf"}})
    check(err_code(r) == -32602, "stdio: an unknown tool is -32602")
    r = s.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": ["print(1)"]}}})
    check(r.get("result", {}).get("isError") is True and "'code' must be a string" in
          r["result"]["content"][0]["text"],
          "stdio: a wrong argument type is a tool error under 2025-11-25 (SEP-1303)")
    r = s.send({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": "1", "files": [
                    {"path": "../../etc/passwd", "content_base64": "AA=="}]}}})
    check(r.get("result", {}).get("isError") is True, "stdio: an input file path with '..' is refused")
    r = s.send([{"jsonrpc": "2.0", "id": 9, "method": "ping"}])
    check(err_code(r) == -32600, "stdio: a batch is -32600 under 2025-11-25 (batches were removed)")
    r = s.send({"jsonrpc": "2.0", "id": 10, "method": "resources/read",
                "params": {"uri": "nbrun://runs/abc/files/../../../etc/passwd"}})
    check(err_code(r) == -32002, "stdio: resources/read of a path with '..' is not found")
    r = s.send({"jsonrpc": "2.0", "id": 11, "method": "resources/read",
                "params": {"uri": "file:///etc/passwd"}})
    check(err_code(r) == -32002, "stdio: resources/read of a file: uri is not found")
    big = b'{"jsonrpc":"2.0","id":12,"method":"ping","params":{"pad":"' + b"x" * (CAP + 1024) + b'"}}'
    r = s.send_raw(big)
    check(err_code(r) == -32600 and "larger than" in r["error"]["message"],
          "stdio: a message over 32 MiB is -32600")
    s.notify({"jsonrpc": "2.0", "method": "notifications/whatever"})
    r = s.send({"jsonrpc": "2.0", "id": 13, "method": "ping"})
    check(r == {"jsonrpc": "2.0", "id": 13, "result": {}},
          "stdio: an unknown notification gets no answer, and the server still answers")
    rc, err = s.close()
    check(rc == 0, f"stdio: exits 0 at the end of its input ({rc})")
    check("AddressSanitizer" not in err and "runtime error" not in err, "stdio: no sanitizer report")

    # Older revisions: batches answered, wrong arguments are -32602.
    s = Stdio()
    r = s.send(init_msg("2025-03-26", 1))
    check(r["result"]["protocolVersion"] == "2025-03-26", "stdio: initialize 2025-03-26")
    r = s.send([{"jsonrpc": "2.0", "id": 2, "method": "ping"},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 3, "method": "nope"}, 7])
    ok = isinstance(r, list) and len(r) == 3 and r[0] == {"jsonrpc": "2.0", "id": 2, "result": {}} \
        and err_code(r[1]) == -32601 and err_code(r[2]) == -32600
    check(ok, "stdio: a batch under 2025-03-26 gets one answer per request")
    r = s.send([])
    check(err_code(r) == -32600, "stdio: an empty batch is -32600")
    r = s.send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": 1, "timeout_s": "x"}}})
    check(err_code(r) == -32602, "stdio: a wrong argument type is -32602 under 2025-03-26")
    r = s.send(init_msg("1999-01-01", 5))
    check(err_code(r) == -32600, "stdio: a second initialize is -32600 (the revision stays)")
    r = s.send([{"jsonrpc": "2.0", "id": 6, "method": "ping"}])
    check(isinstance(r, list), "stdio: ... and batches are still answered under 2025-03-26")
    s.close()
    s = Stdio()
    r = s.send(init_msg("1999-01-01", 5))
    check(r["result"]["protocolVersion"] == "2025-11-25", "stdio: an unknown revision gets ours")
    s.close()

    # Out of order: requests before initialize, a second initialize, responses and
    # cancellations nobody asked for, ids of odd types and sizes.
    s = Stdio()
    r = s.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    check(r == {"jsonrpc": "2.0", "id": 1, "result": {}}, "stdio: ping before initialize is answered")
    for i, method in enumerate(("tools/call", "tools/list", "resources/read", "resources/list")):
        r = s.send({"jsonrpc": "2.0", "id": 10 + i, "method": method,
                    "params": {"name": "run_python", "arguments": {"code": "1"}, "uri": "nbrun://x"}})
        check(err_code(r) == -32600 and r["id"] == 10 + i and "initialize" in r["error"]["message"],
              "stdio: %s before initialize is -32600, nothing runs" % method)
    r = s.send([{"jsonrpc": "2.0", "id": 20, "method": "ping"}])
    check(err_code(r) == -32600, "stdio: a batch before initialize is -32600")
    s.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.notify({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 404}})
    s.notify({"jsonrpc": "2.0", "id": 77, "result": {"unasked": True}})
    s.notify({"jsonrpc": "2.0", "id": 78, "error": {"code": 1, "message": "unasked"}})
    r = s.send(init_msg("2025-06-18", 2))
    check(r.get("result", {}).get("protocolVersion") == "2025-06-18",
          "stdio: initialize after stray notifications and responses (which get no answer)")
    r = s.send(init_msg("2025-11-25", 3))
    check(err_code(r) == -32600 and "already" in r["error"]["message"], "stdio: a second initialize is -32600")
    r = s.send([{"jsonrpc": "2.0", "id": 4, "method": "ping"}])
    check(err_code(r) == -32600, "stdio: ... the revision stays 2025-06-18 (no batches)")
    r = s.send({"jsonrpc": "2.0", "id": 5, "method": "\u20ac" * 100})
    check(err_code(r) == -32601 and r["id"] == 5,
          "stdio: an unknown method cut inside a character is still answered -32601")
    big_id = "i" * (1 << 20)
    r = s.send({"jsonrpc": "2.0", "id": big_id, "method": "ping"})
    check(r and r.get("id") == big_id, "stdio: a 1 MiB string id is echoed")
    for bad in (1.5, True, [1], {"a": 1}):
        r = s.send({"jsonrpc": "2.0", "id": bad, "method": "ping"})
        check(err_code(r) == -32600 and r["id"] is None, "stdio: an id %r is -32600 with a null id" % (bad,))
    r = s.send({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": "x" * (8 << 20), "timeout_s": -1}}})
    check(r and (err_code(r) == -32602 or r.get("result", {}).get("isError") is True),
          "stdio: a tools/call of 8 MiB with a negative timeout is refused")
    r = s.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
    check(r == {"jsonrpc": "2.0", "id": 7, "result": {}}, "stdio: the server still answers")
    rc, err = s.close()
    check(rc == 0 and "AddressSanitizer" not in err and "runtime error" not in err,
          "stdio: exits 0, no sanitizer report")


# ---- http -------------------------------------------------------------------------


def http_cases():
    state = tempfile.mkdtemp(prefix="nbrun-mcp-hostile-")
    with open(os.path.join(state, "tokens"), "w") as f:
        f.write("t" * 40 + "\n" + "u" * 40 + "\n")  # two tenants
    p = subprocess.Popen([NBRUN, "serve", "--listen", "127.0.0.1:0", "--pool", "0",
                          "--state-dir", state, "--token-file", os.path.join(state, "tokens"),
                          "--allow-origin", "https://app.example.org"],
                         stderr=subprocess.PIPE)
    port = None
    for line in p.stderr:
        m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if b"state in" in line:
            break
    token = "t" * 40

    def post(body, headers=None, raw=False):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        h = {"Authorization": "Bearer " + token, "Content-Type": "application/json",
             "Accept": "application/json, text/event-stream"}
        h.update(headers or {})
        c.request("POST", "/mcp", body=body if raw else json.dumps(body).encode(), headers=h)
        r = c.getresponse()
        data = r.read()
        sid = r.getheader("Mcp-Session-Id")
        c.close()
        try:
            return r.status, json.loads(data) if data else None, sid
        except ValueError:
            return r.status, data, sid

    try:
        st, r, sid = post(init_msg("2025-11-25"))
        check(st == 200 and sid and len(sid) == 32, "http: initialize gives an Mcp-Session-Id")
        S = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        st, r, _ = post(b"{nope", S, raw=True)
        check(st == 400 and err_code(r) == -32700, "http: malformed JSON is 400 with -32700")
        st, r, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        check(st == 400 and err_code(r) == -32600, "http: no Mcp-Session-Id is 400")
        st, r, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"Mcp-Session-Id": "0" * 32})
        check(st == 404, "http: an unknown session is 404")
        st, r, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"},
                        {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2099-99-99"})
        check(st == 400, "http: an unknown MCP-Protocol-Version is 400")
        st, r, _ = post({"jsonrpc": "2.0", "id": 2, "method": "bogus"}, S)
        check(st == 200 and err_code(r) == -32601, "http: an unknown method is -32601")
        st, r, _ = post([{"jsonrpc": "2.0", "id": 3, "method": "ping"}], S)
        check(err_code(r) == -32600, "http: a batch is -32600 under 2025-11-25")
        st, r, _ = post({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                         "params": {"name": "run_python", "arguments": {"code": {"x": 1}}}},
                        {"Mcp-Session-Id": sid, "Accept": "application/json"})
        check(st == 200 and r["result"]["isError"] is True, "http: a wrong argument type is a tool error")
        st, r, _ = post({"jsonrpc": "2.0", "method": "notifications/initialized"}, S)
        check(st == 202 and r is None, "http: a notification is 202 with no body")
        # Another tenant's token with this Mcp-Session-Id: the 404 of an unknown session.
        other = {"Authorization": "Bearer " + "u" * 40}
        st1, r1, _ = post({"jsonrpc": "2.0", "id": 30, "method": "ping"}, {**S, **other})
        st2, r2, _ = post({"jsonrpc": "2.0", "id": 30, "method": "ping"},
                          {**S, **other, "Mcp-Session-Id": "f" * 32})
        check(st1 == st2 == 404 and r1 == r2, "http: another tenant's Mcp-Session-Id is 404 as unknown")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("DELETE", "/mcp", headers={**S, **other})
        rr = c.getresponse()
        rr.read()
        c.close()
        check(rr.status == 404, "http: another tenant cannot DELETE the session (%d)" % rr.status)
        st, r, _ = post({"jsonrpc": "2.0", "id": 31, "method": "ping"}, S)
        check(st == 200 and r == {"jsonrpc": "2.0", "id": 31, "result": {}}, "http: the session still works")
        # resources/read of another tenant's run is the -32002 of a missing one: two kept
        # runs made on disk, one of the first token (no .owner), one of tenant u.
        import hashlib
        for rid, owner, name in (("a0a0a0a0a0a0", None, "a.txt"), ("b0b0b0b0b0b0", "u" * 40, "b.txt")):
            os.makedirs(os.path.join(state, "runs", rid, "files"))
            with open(os.path.join(state, "runs", rid, "files", name), "w") as f:
                f.write("secret " + rid)
            if owner:
                with open(os.path.join(state, "runs", rid, ".owner"), "w") as f:
                    f.write(hashlib.sha256(owner.encode()).hexdigest())
        st, r, sid_u = post(init_msg("2025-11-25"), other)
        U = {**other, "Mcp-Session-Id": sid_u, "MCP-Protocol-Version": "2025-11-25"}
        for hdrs, mine, theirs in ((S, "a0a0a0a0a0a0/files/a.txt", "b0b0b0b0b0b0/files/b.txt"),
                                   (U, "b0b0b0b0b0b0/files/b.txt", "a0a0a0a0a0a0/files/a.txt")):
            st, r, _ = post({"jsonrpc": "2.0", "id": 40, "method": "resources/read",
                             "params": {"uri": "nbrun://runs/" + mine}}, {**hdrs, "Accept": "application/json"})
            check(st == 200 and "secret" in json.dumps(r), "http: resources/read of its own run")
            st, r, _ = post({"jsonrpc": "2.0", "id": 41, "method": "resources/read",
                             "params": {"uri": "nbrun://runs/" + theirs}}, {**hdrs, "Accept": "application/json"})
            check(err_code(r) == -32002 and "secret" not in json.dumps(r),
                  "http: resources/read of another tenant's run is -32002")
        # A client that initializes in a loop ends nobody else's session.
        for i in range(300):
            post(init_msg("2025-11-25", i), other)
        st, r, _ = post({"jsonrpc": "2.0", "id": 32, "method": "ping"}, S)
        check(st == 200, "http: 300 initializes of another tenant leave this session open (%d)" % st)
        st, r, _ = post({"jsonrpc": "2.0", "id": 33, "method": "tools/list"}, S)
        check(st == 200 and r.get("result", {}).get("tools"), "http: tools/list after all that")
        # Over the cap: answered from its Content-Length, before the body is read.
        import socket
        sk = socket.create_connection(("127.0.0.1", port), timeout=60)
        sk.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
                   b"\r\nMcp-Session-Id: " + sid.encode() + b"\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(CAP + 10).encode() + b"\r\n\r\n" + b"x" * 65536)
        resp = b""
        while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
            chunk = sk.recv(65536)
            if not chunk:
                break
            resp += chunk
        sk.close()
        head, _, body = resp.partition(b"\r\n\r\n")
        check(head.startswith(b"HTTP/1.1 413") and err_code(json.loads(body)) == -32600,
              "http: a message over 32 MiB is 413 with -32600")
        # Chunked, with no length to refuse it early: read up to the cap, then refused.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.putrequest("POST", "/mcp")
        for k, v in {"Authorization": "Bearer " + token, "Mcp-Session-Id": sid,
                     "Content-Type": "application/json", "Transfer-Encoding": "chunked"}.items():
            c.putheader(k, v)
        c.endheaders()
        piece = b"x" * (1 << 20)
        try:
            for _ in range((CAP >> 20) + 2):
                c.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
            c.send(b"0\r\n\r\n")
            rr = c.getresponse()
            body = rr.read()
            check(rr.status == 413 and err_code(json.loads(body)) == -32600,
                  "http: a chunked message over 32 MiB is 413 with -32600")
        except (BrokenPipeError, ConnectionResetError):
            check(False, "http: a chunked message over 32 MiB got its 413")
        c.close()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/mcp", headers={"Authorization": "Bearer " + token, **S})
        rr = c.getresponse()
        rr.read()
        check(rr.status == 405, "http: GET /mcp is 405 (no server-initiated stream)")
        c.request("DELETE", "/mcp", headers={"Authorization": "Bearer " + token, **S})
        rr = c.getresponse()
        rr.read()
        check(rr.status == 200, "http: DELETE ends the session")
        c.close()
        st, r, _ = post({"jsonrpc": "2.0", "id": 6, "method": "ping"}, S)
        check(st == 404, "http: an ended session is 404")
        st, r, _ = post({"jsonrpc": "2.0", "id": 7, "method": "ping"},
                        {"Authorization": "Bearer wrong-token-wrong-token"})
        check(st == 401, "http: a wrong token is 401")
        # DNS rebinding: a page of another origin, even with the right token, is 403
        init = {"jsonrpc": "2.0", "id": 8, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "o", "version": "1"}}}
        for origin in ("http://evil.example.com", "null", "https://app.example.org.evil.example",
                       "http://app.example.org"):
            st, r, _ = post(init, {"Origin": origin})
            check(st == 403 and (r or {}).get("kind") == "origin", "http: Origin %s is 403 (%s %r)" % (origin, st, r))
        st, r, sid2 = post(init, {"Origin": "https://App.Example.org/"})
        check(st == 200 and sid2, "http: an --allow-origin Origin is served (%s)" % st)
        st, r, sid3 = post(init)
        check(st == 200 and sid3, "http: no Origin is served (%s)" % st)
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
        err = p.stderr.read().decode(errors="replace")
        check(rc == 0, f"http: nbrun serve stops with 0 on SIGTERM ({rc})")
        check("AddressSanitizer" not in err and "runtime error" not in err, "http: no sanitizer report")
        shutil.rmtree(state, ignore_errors=True)


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("stdio", "http"):
        print(__doc__)
        return 2
    t0 = time.monotonic()
    (stdio_cases if sys.argv[1] == "stdio" else http_cases)()
    print(f"{failures} failed ({time.monotonic() - t0:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
