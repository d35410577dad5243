#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hostile HTTP clients against nbrun serve: slow and idle connections,
oversized headers and bodies, chunked-encoding abuse, invalid UTF-8 and
deep JSON, token guessing, another tenant's ids, path and symlink tricks in
the files endpoints, a streaming client that never reads. Each case starts
its own server (--pool 0: only the cases that need a sandbox start one),
sends its raw bytes and checks the answer, then that the server still
answers, stops with 0 on SIGTERM, leaves nothing labelled with its pid and
printed no sanitizer report.

Usage: serve_cases.py CASE   (python3 serve_cases.py list)
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

NBRUN = os.environ.get("NBRUN", "nbrun")
SOCK = "/var/run/docker.sock"
TOKEN_A = "a" * 40
TOKEN_B = "b" * 40
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures += 1


class _UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path_)


def labelled(label):
    f = urllib.parse.quote(json.dumps({"label": [label]}))
    out = []
    for path in ("/containers/json?all=1&filters=" + f, "/volumes?filters=" + f):
        c = _UnixConn(SOCK, 30)
        c.request("GET", path)
        body = json.loads(c.getresponse().read())
        c.close()
        out += body if isinstance(body, list) else (body.get("Volumes") or [])
    return out


class Server:
    """nbrun serve on 127.0.0.1 with tenants A and B (lines of --token-file)."""

    def __init__(self, *extra):
        self.state = tempfile.mkdtemp(prefix="nbrun-hostile-serve-")
        tf = os.path.join(self.state, "tokens")
        with open(tf, "w") as f:
            f.write(TOKEN_A + "\n" + TOKEN_B + "\n")
        self.err = open(os.path.join(self.state, "stderr"), "w+b")
        self.p = subprocess.Popen([NBRUN, "serve", "--listen", "127.0.0.1:0", "--pool", "0",
                                   "--state-dir", os.path.join(self.state, "st"),
                                   "--token-file", tf] + list(extra), stderr=self.err)
        self.port = None
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120 and self.p.poll() is None:
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", self.log())
            if m and b"state in" in self.log():
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        if not self.port:
            raise SystemExit("nbrun serve did not start: " + self.log().decode(errors="replace"))

    def log(self):
        with open(self.err.name, "rb") as f:
            return f.read()

    def sock(self, src=None, timeout=30):
        s = socket.socket()
        s.settimeout(timeout)
        if src:
            s.bind((src, 0))
        s.connect(("127.0.0.1", self.port))
        return s

    def raw(self, data, src=None, timeout=240):
        """Send bytes, read until the server closes; (status, headers text, body bytes)."""
        s = self.sock(src, timeout)
        try:
            s.sendall(data)
        except OSError:
            pass
        out = b""
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    break
                out += c
        except OSError:
            pass
        s.close()
        head, _, body = out.partition(b"\r\n\r\n")
        m = re.match(rb"HTTP/1\.1 (\d+)", head)
        return (int(m.group(1)) if m else None), head.decode(errors="replace"), body

    def req(self, method, path, body=None, token=TOKEN_A, headers=None, src=None):
        h = {"Connection": "close"}
        if token is not None:
            h["Authorization"] = "Bearer " + token
        h.update(headers or {})
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
        lines = ["%s %s HTTP/1.1" % (method, path), "Host: x"]
        lines += ["%s: %s" % kv for kv in h.items()]
        if body is not None:
            lines.append("Content-Length: %d" % len(body))
        st, head, data = self.raw(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""), src)
        return st, head, data

    def jreq(self, *a, **kw):
        st, head, data = self.req(*a, **kw)
        try:
            return st, head, json.loads(data)
        except ValueError:
            return st, head, data

    def healthy(self, src=None):
        st, _, _ = self.req("GET", "/v1/health", token=None, src=src)
        return st == 200

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        log = self.log().decode(errors="replace")
        check(rc == 0, "nbrun serve stops with 0 on SIGTERM (%s)" % rc)
        check("AddressSanitizer" not in log and "runtime error" not in log, "no sanitizer report")
        left = labelled("nbrun.pid=%d" % self.p.pid)
        check(not left, "nothing left labelled with the server's pid (%d)" % len(left))
        shutil.rmtree(self.state, ignore_errors=True)


def json_error(st, data, want):
    return st == want and isinstance(data, dict) and isinstance(data.get("error"), str) \
        and "\n" not in data["error"] and isinstance(data.get("kind"), str)


def closed_within(s, secs):
    """True when the server closes s (EOF or reset) within secs."""
    s.settimeout(secs)
    try:
        while True:
            c = s.recv(4096)
            if not c:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


# ---- cases ---------------------------------------------------------------------------


def case_slow_clients():
    """Slowloris, idle keep-alive, and the cap on connections from one address."""
    s = Server("--conn-timeout", "2s", "--max-connections-per-ip", "4")
    try:
        half = s.sock()
        half.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        check(closed_within(half, 60), "slowloris: half a request, then silence: the connection is closed")
        half.close()
        ka = s.sock()
        ka.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        got = ka.recv(4096)
        check(got.startswith(b"HTTP/1.1 200"), "keep-alive: the first request is answered")
        check(closed_within(ka, 60), "keep-alive: an idle connection is closed after its timeout")
        ka.close()
        # Four held connections from 127.0.0.1: the fifth is refused, another address is served.
        held = []
        for _ in range(4):
            h = s.sock()
            h.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
            held.append(h)
        fifth = s.sock()
        try:
            fifth.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = fifth.recv(4096)
        except OSError:
            answer = b""
        fifth.close()
        check(answer == b"", "per-address cap: a fifth connection from 127.0.0.1 is closed unanswered")
        check(s.healthy(src="127.0.0.2"), "per-address cap: 127.0.0.2 is still served")
        for h in held:
            h.close()
        time.sleep(0.5)
        check(s.healthy(), "per-address cap: 127.0.0.1 is served again once its connections close")
    finally:
        s.stop()


def case_oversized():
    """Headers, url and bodies over their caps: 431/413 with a JSON message, nothing buffered."""
    s = Server()
    try:
        st, _, body = s.jreq("GET", "/v1/health", token=None, headers={"X-Big": "a" * 40000})
        check(json_error(st, body, 431), "a 40 KiB header is 431 with a JSON message (%s)" % st)
        st, _, body = s.jreq("GET", "/v1/runs/" + "a" * 40000)
        check(json_error(st, body, 431), "a 40 KiB url is 431 with a JSON message (%s)" % st)
        st, _, body = s.jreq("GET", "/v1/health", token=None,
                             headers={"X-H%d" % i: "v" * 200 for i in range(200)})
        check(json_error(st, body, 431), "200 headers of 200 bytes are 431 with a JSON message (%s)" % st)
        # Beyond libmicrohttpd's 256 KiB per connection it answers by itself (431, its own text).
        st, _, _ = s.raw(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 400000 + b"\r\n\r\n")
        check(st == 431, "a 400 KiB header is 431 from libmicrohttpd, connection closed (%s)" % st)
        for path, method in (("/v1/runs", "POST"), ("/v1/sessions", "POST"),
                             ("/v1/sessions/0123456789ab/files/x", "PUT")):
            t = s.sock()
            t.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                       "Content-Length: %d\r\n\r\n" % (method, path, TOKEN_A, 65 << 20)).encode()
                      + b"{" * 1000)
            data = b""
            try:
                while b"}" not in data:
                    c = t.recv(4096)
                    if not c:
                        break
                    data += c
            except OSError:
                pass
            t.close()
            head, _, body = data.partition(b"\r\n\r\n")
            ok = head.startswith(b"HTTP/1.1 413")
            try:
                ok = ok and "64 MiB" in json.loads(body)["error"]
            except ValueError:
                ok = False
            check(ok, "%s %s with Content-Length 65 MiB: 413 with a JSON message before the body" % (method, path))
        check(s.healthy(), "the server still answers")
    finally:
        s.stop()


def case_request_target():
    """A %00 in the target, two Content-Length headers, a 200 KB query: 400, 400, 431, nothing run."""
    s = Server()
    try:
        runs_before = len(os.listdir(os.path.join(s.state, "st", "runs")))
        for path in ("/v1/runs/0123456789ab%00", "/v1/runs/0123456789ab/files/x.txt%00.png",
                     "/v1/sessions/n~0123456789ab/files/a%00b", "/v1/health%00"):
            st, _, body = s.jreq("GET", path)
            check(json_error(st, body, 400) and "%00" in body["error"], "GET %s: 400 (%s %r)" % (path, st, body))
        st, _, body = s.jreq("PUT", "/v1/sessions/n~0123456789ab/files/a%00b", body=b"x")
        check(json_error(st, body, 400), "PUT a%%00b: 400 (%s)" % st)
        # two different Content-Length headers: refused before anything runs
        st, head, data = s.raw(("POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                                "Content-Length: 20\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
                                '{"code": "print(1)"}' % TOKEN_A).encode())
        check(st == 400 and b"Content-Length" in data, "two Content-Length headers: 400 (%s %r)" % (st, data[:200]))
        # an uploaded name with a C1 control (U+0085, U+009B): the export's rule, refused
        for name in ("\u0085", "a\u009b31m"):
            st, _, body = s.jreq("POST", "/v1/runs", {"code": "1", "files": [{"path": name, "content_base64": ""}]})
            check(json_error(st, body, 400), "upload named %r: 400 (%s %r)" % (name, st, body))
        st, _, body = s.jreq("GET", "/v1/health?" + "q" * 200000, token=None)
        check(json_error(st, body, 431), "a 200 KB query string: 431 (%s)" % st)
        time.sleep(1)
        check(len(os.listdir(os.path.join(s.state, "st", "runs"))) == runs_before, "a run was kept")
        check(s.healthy(), "the server still answers")
    finally:
        s.stop()


def chunked(path, token=TOKEN_A):
    return ("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n"
            "Transfer-Encoding: chunked\r\n\r\n" % (path, token)).encode()


def case_chunked():
    """Bad chunk sizes, a chunk larger than anything, and chunks that never end."""
    s = Server()
    try:
        for bad, want in ((b"zz\r\nabc\r\n0\r\n\r\n", 400), (b"-5\r\nabc\r\n0\r\n\r\n", 400),
                          (b"ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n", 413),
                          (b"3\r\nabcdef\r\n0\r\n\r\n", 400), (b"3;" + b"x" * 300000 + b"\r\nabc\r\n", None)):
            st, _, _ = s.raw(chunked("/v1/runs") + bad)
            # A chunk line longer than its read buffer: libmicrohttpd answers 500 itself.
            check(st == want or (want is None and st in (400, 413, 431, 500, None)),
                  "chunk %r...: %s, connection closed" % (bad[:12], st))
        # Chunks beyond the 64 MiB cap: the body is not kept; past twice the cap the
        # connection is cut, whatever the client goes on sending.
        t = s.sock(timeout=120)
        t.sendall(chunked("/v1/runs"))
        piece = b"x" * (1 << 20)
        sent = 0
        try:
            while sent < (200 << 20):
                t.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                sent += len(piece)
        except OSError:
            pass
        t.close()
        check(sent < (200 << 20), "endless chunks: the server stops reading (after %d MiB)" % (sent >> 20))
        rss = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/%d/status" % s.p.pid).read()).group(1))
        check(rss < 600 * 1024, "endless chunks: peak RSS %d MiB (bodies over the cap are not kept)" % (rss >> 10))
        # Chunked but within the cap, the body is read: a bad one gets its JSON 400.
        st, _, body = s.raw(chunked("/v1/runs") + b"5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n")
        check(st == 400 and b"unknown key" in body, "a chunked body is read and checked (%s)" % st)
        check(s.healthy(), "the server still answers")
    finally:
        s.stop()


def case_bad_json():
    """Invalid UTF-8 and deeply nested JSON to every endpoint taking a body; bytes in urls."""
    s = Server()
    bodies = {
        "invalid UTF-8": b'{"code": "\xff\xfe"}',
        "an overlong encoding": b'{"code": "\xc0\xaf"}',
        "a lone surrogate escape": b'{"code": "\\udc00"}',
        "NUL in a key": b'{"co\\u0000de": "1"}',
        "100000 nested arrays": b"[" * 100000 + b"]" * 100000,
        "3000 nested objects": b'{"a":' * 3000 + b"1" + b"}" * 3000,
        "a duplicate key": b'{"code": "1", "code": "2"}',
        "a key cut inside a character": json.dumps({"\u20ac" * 40: 1}, ensure_ascii=False).encode(),
    }
    try:
        for path in ("/v1/runs", "/v1/sessions", "/v1/sessions/0123456789ab/execute"):
            for what, body in bodies.items():
                st, _, data = s.jreq("POST", path, body=body)
                want = 404 if "/execute" in path else 400
                check(json_error(st, data, want), "POST %s with %s: %d with a JSON message (%s)" % (path, what, want, st))
        st, _, data = s.jreq("POST", "/v1/runs", body={"code": "1", "parameters": {"a": 1}})
        check(json_error(st, data, 400), "POST /v1/runs with a wrong key is 400")
        for path in ("/v1/runs/%ff%fe", "/v1/runs/%e2%82", "/v1/sessions/%ff", "/v1/runs/a%0aforged: 1",
                     "/v1/sessions/" + "%e2%82%ac" * 20):
            st, _, data = s.jreq("GET", path.replace(" ", "%20"))
            check(json_error(st, data, 404), "GET %s: 404 with a valid JSON message (%s)" % (path, st))
        check(b"\nforged" not in s.log(), "a %0a in a url does not start a line of the log")
        check(s.healthy(), "the server still answers")
    finally:
        s.stop()


def case_tokens():
    """Wrong and missing tokens: 401, then 429 for that address only."""
    s = Server("--auth-failures", "5")
    try:
        tries = [None, "", "wrong", TOKEN_A[:-1], TOKEN_A + "x", "x" * 5000, TOKEN_A.upper()]
        codes = []
        for i, tok in enumerate(tries[:5]):
            hdr = {} if tok is None else {"Authorization": "Bearer " + tok}
            st, head, data = s.jreq("GET", "/v1/sessions", token=None, headers=hdr)
            codes.append(st)
            if i == 0:
                check(json_error(st, data, 401) and "WWW-Authenticate: Bearer" in head,
                      "no token: 401 with a JSON message and WWW-Authenticate")
        check(codes == [401] * 5, "five wrong or missing tokens: 401 each (%s)" % codes)
        st, head, data = s.jreq("GET", "/v1/sessions", token=TOKEN_A)
        m = re.search(r"Retry-After: (\d+)", head)
        check(json_error(st, data, 429) and m and 1 <= int(m.group(1)) <= 60,
              "then even the right token from that address gets 429 with Retry-After (%s, %s)"
              % (st, m and m.group(1)))
        st, _, data = s.jreq("POST", "/mcp", token="guess-guess-guess", body={"jsonrpc": "2.0"})
        check(st == 429, "/mcp is limited too (%s)" % st)
        st, _, data = s.jreq("GET", "/v1/sessions", token=TOKEN_A, src="127.0.0.2")
        check(st == 200 and data == {"sessions": []}, "the right token from 127.0.0.2 is not locked out (%s)" % st)
        st, _, _ = s.jreq("GET", "/v1/sessions", token=TOKEN_B, src="127.0.0.2")
        check(st == 200, "nor is the other tenant's (%s)" % st)
        check(s.healthy(), "health needs no token and stays open to the limited address")
        if os.geteuid() == 0:
            unix_tokens()
        src = open(os.path.join(os.environ.get("NBRUN_SRCDIR", "."), "src/serve/http/http.c")).read()
        check("CRYPTO_memcmp(got, h->token_hash" in src and "serve_hash(got, v, strlen(v))" in src,
              "tokens are compared as SHA-256 digests with CRYPTO_memcmp (constant time)")
    finally:
        s.stop()


def unix_get(path, token, uid=None):
    """GET /v1/sessions over the unix socket path, as uid (a child process) when given."""
    def once():
        c = _UnixConn(path, 30)
        c.request("GET", "/v1/sessions", headers={"Authorization": "Bearer " + token})
        r = c.getresponse()
        r.read()
        return r.status
    if uid is None:
        return once()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(wfd, str(once()).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    got = os.read(rfd, 16)
    os.close(rfd)
    os.waitpid(pid, 0)
    return int(got) if got else None


def unix_tokens():
    """On a unix socket the failures count per user id: root locked out, nobody not."""
    d = tempfile.mkdtemp(prefix="nbrun-hostile-sock-")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "s.sock")
    state = tempfile.mkdtemp(prefix="nbrun-hostile-serve-")
    with open(os.path.join(state, "tokens"), "w") as f:
        f.write(TOKEN_A + "\n")
    err = open(os.path.join(state, "stderr"), "w+b")
    p = subprocess.Popen([NBRUN, "serve", "--socket", sock, "--pool", "0", "--auth-failures", "3",
                          "--state-dir", os.path.join(state, "st"),
                          "--token-file", os.path.join(state, "tokens")], stderr=err)
    try:
        t0 = time.monotonic()
        while not os.path.exists(sock) and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        os.chmod(sock, 0o666)
        codes = [unix_get(sock, "wrong-wrong-wrong") for _ in range(3)]
        codes.append(unix_get(sock, TOKEN_A))
        check(codes == [401, 401, 401, 429], "unix socket: 3 wrong tokens as root, then 429 (%s)" % codes)
        check(unix_get(sock, TOKEN_A, uid=65534) == 200,
              "unix socket: another user id with the right token is not locked out")
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
        err.seek(0)
        log = err.read().decode(errors="replace")
        check(rc == 0 and "AddressSanitizer" not in log and "runtime error" not in log,
              "unix socket server: exits 0, no sanitizer report")
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def case_tenants():
    """Another token's run and session ids: the same 404 as ids that do not exist."""
    s = Server("--timeout", "240s")
    try:
        st, _, run = s.jreq("POST", "/v1/runs", body={
            "code": "open('/mnt/data/out.txt', 'w').write('secret of A')\nprint('A ran')"})
        check(st == 200 and run.get("status") == "ok", "tenant A runs code (%s)" % st)
        rid = run.get("run_id", "0" * 12) if isinstance(run, dict) else "0" * 12
        st, _, mine = s.jreq("GET", "/v1/runs/" + rid)
        check(st == 200 and mine.get("run_id") == rid, "A reads its run back")
        st, _, sess = s.jreq("POST", "/v1/sessions", body={})
        check(st == 201, "tenant A opens a session (%s)" % st)
        sid = sess.get("id", "0" * 12) if isinstance(sess, dict) else "0" * 12
        fake_r, fake_s = "0123456789ab", "0123456789ab"
        for a, b in (("/v1/runs/%s", "/v1/runs/%s"), ("/v1/runs/%s/notebook", None),
                     ("/v1/runs/%s/files/out.txt", None)):
            st1, _, d1 = s.req("GET", a % rid, token=TOKEN_B)
            st2, _, d2 = s.req("GET", a % fake_r, token=TOKEN_B)
            check(st1 == st2 == 404 and d1.replace(rid.encode(), b"ID") == d2.replace(fake_r.encode(), b"ID"),
                  "B: GET %s of A's run is the 404 of a run that does not exist" % (a % "ID"))
        st, _, d = s.req("GET", "/v1/runs/%s/files/out.txt" % rid, token=TOKEN_A)
        check(st == 200 and d == b"secret of A", "A still gets its file")
        for method, path, body in (("GET", "/v1/sessions/%s", None), ("DELETE", "/v1/sessions/%s", None),
                                   ("POST", "/v1/sessions/%s/execute", {"code": "1"}),
                                   ("GET", "/v1/sessions/%s/files", None),
                                   ("PUT", "/v1/sessions/%s/files/x", b"x"),
                                   ("POST", "/v1/sessions/%s/interrupt", b""),
                                   ("GET", "/v1/sessions/%s/notebook", None)):
            st1, _, d1 = s.req(method, path % sid, token=TOKEN_B, body=body)
            st2, _, d2 = s.req(method, path % fake_s, token=TOKEN_B, body=body)
            check(st1 == st2 == 404 and d1.replace(sid.encode(), b"ID") == d2.replace(fake_s.encode(), b"ID"),
                  "B: %s %s of A's session is the 404 of a session that does not exist" % (method, path % "ID"))
        st, _, lst = s.jreq("GET", "/v1/sessions", token=TOKEN_B)
        check(st == 200 and lst == {"sessions": []}, "B lists no session")
        st, _, info = s.jreq("GET", "/v1/sessions/" + sid)
        check(st == 200 and info.get("id") == sid, "A's session is untouched")
        st, _, _ = s.jreq("DELETE", "/v1/sessions/" + sid)
        check(st == 200, "A deletes its session")
    finally:
        s.stop()


def case_files_escape():
    """Path traversal and symlinks made by the code in the files endpoints."""
    s = Server("--timeout", "240s")
    try:
        st, _, sess = s.jreq("POST", "/v1/sessions", body={})
        check(st == 201, "a session opens (%s)" % st)
        sid = sess.get("id", "0" * 12) if isinstance(sess, dict) else "0" * 12
        base = "/v1/sessions/%s/" % sid
        st, _, r = s.jreq("POST", base + "execute", body={"code": (
            "import os\n"
            "os.symlink('/etc/passwd', '/mnt/data/pw')\n"
            "os.symlink('/', '/mnt/data/root')\n"
            "os.symlink('/mnt/data/pw', '/mnt/data/pw2')\n"
            "os.symlink('/nowhere', '/mnt/data/dangling')\n"
            "os.mkdir('/mnt/data/d')\n"
            "open('/mnt/data/d/ok.txt', 'w').write('in the sandbox')\n"
            "print('links made')")})
        check(st == 200 and r.get("status") == "ok", "the code makes symlinks in /mnt/data (%s)" % st)
        st, _, d = s.req("GET", base + "files/d/ok.txt")
        check(st == 200 and d == b"in the sandbox", "a plain file comes back")
        passwd = open("/etc/passwd", "rb").read()
        for p in ("pw", "pw2", "root/etc/passwd", "dangling", "d/../pw", "../../etc/passwd",
                  "%2e%2e/%2e%2e/etc/passwd", "d/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd",
                  "%2fetc%2fpasswd", "d/ok.txt%00/../../../etc/passwd", "d//ok.txt", "./d/ok.txt",
                  "d\\..\\..\\etc\\passwd"):
            st, _, d = s.req("GET", base + "files/" + p)
            # Refused, or (a NUL ends the path, an empty or "." component is skipped) the file inside.
            check((st in (400, 404) or (st == 200 and d == b"in the sandbox"))
                  and b"root:" not in d and passwd not in d,
                  "GET files/%s: %s, nothing outside /mnt/data" % (p, st))
        for p in ("pw", "pw2", "root/tmp/x", "dangling", "../x", "%2e%2e/x", "/tmp/x", "d/../../x"):
            st, _, d = s.req("PUT", base + "files/" + p, body=b"overwritten")
            check(st == 400, "PUT files/%s: 400, nothing written through it (%s)" % (p, st))
        st, _, r = s.jreq("POST", base + "execute", body={"code": (
            "import os\nprint(open('/etc/passwd').read().count('overwritten'), "
            "os.path.exists('/tmp/x'), os.path.exists('/mnt/x'), os.path.islink('/mnt/data/pw'))")})
        check(st == 200 and r.get("stdout") == "0 False False True\n",
              "inside: /etc/passwd, /tmp and /mnt unchanged, the link still a link (%r)" % r.get("stdout"))
        st, _, lst = s.jreq("GET", base + "files")
        names = {f["path"]: f.get("type") for f in lst.get("files", [])} if st == 200 else {}
        check("pw" in names and names.get("pw") != "file" and "sha256" not in
              [f for f in lst["files"] if f["path"] == "pw"][0], "the listing shows pw as a link, not its target")
        for p in ("1/../../../tokens", "%2e%2e/%2e%2e/tokens", "1/notebook.ipynb/../../x"):
            st, _, d = s.req("GET", base + "outputs/" + p)
            check(st in (400, 404) and TOKEN_A.encode() not in d, "GET outputs/%s: %s" % (p, st))
        for p in ("../../tokens", "%2e%2e/%2e%2e/tokens", "..%2f..%2ftokens"):
            st, _, d = s.req("GET", "/v1/runs/0123456789ab/files/" + p)
            check(st == 404 and TOKEN_A.encode() not in d, "GET /v1/runs/ID/files/%s: %s" % (p, st))
        check(s.healthy(), "the server still answers")
    finally:
        s.stop()


def case_stream_noread():
    """An NDJSON run that prints without end to a client that reads nothing."""
    s = Server("--conn-timeout", "3s", "--timeout", "600s")
    try:
        t = socket.socket()
        t.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        t.connect(("127.0.0.1", s.port))
        body = json.dumps({"code": "import sys\nwhile True:\n    sys.stdout.write('x' * 8192 + '\\n')\n"
                                   "    sys.stdout.flush()\n"}).encode()
        t.sendall(("POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Accept: application/x-ndjson\r\nContent-Length: %d\r\n\r\n"
                   % (TOKEN_A, len(body))).encode() + body)
        # The run starts, fills the socket and the pipe behind it, and stalls.
        t0 = time.monotonic()
        started = False
        while time.monotonic() - t0 < 120:
            if labelled("nbrun.pid=%d" % s.p.pid):
                started = True
                break
            time.sleep(0.5)
        check(started, "the run's sandbox started")
        rss0 = None
        ended = False
        other_ok = True
        # Generous: at load 40 a cold kernel took minutes to start printing.
        while time.monotonic() - t0 < 480:
            status = open("/proc/%d/status" % s.p.pid).read()
            rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
            rss0 = rss0 or rss
            other_ok = other_ok and s.healthy()
            if b"POST /v1/runs 200" in s.log() and not labelled("nbrun.pid=%d" % s.p.pid):
                ended = True
                break
            time.sleep(1)
        hwm = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/%d/status" % s.p.pid).read()).group(1))
        check(ended, "the stalled stream is given up and its sandbox removed (%.0f s)" % (time.monotonic() - t0))
        check(other_ok, "other clients were answered meanwhile")
        check(hwm < 600 * 1024, "the server's peak RSS stayed bounded (%d MiB)" % (hwm >> 10))
        st, _, m = s.req("GET", "/metrics")
        check(st == 200 and re.search(rb"nbrun_runs_active 0", m), "no run is left active")
        t.close()
    finally:
        s.stop()


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(__doc__ + "\ncases: " + " ".join(CASES))
        return 2
    t0 = time.monotonic()
    CASES[sys.argv[1]]()
    print("%d failed (%.1f s)" % (failures, time.monotonic() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
