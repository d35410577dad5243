#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Sessions and NDJSON streams of `nbrun serve`, real engine, image and curl.

Usage: session_cases.py CASE   (one meson test per case; see meson.build)
Every case starts its own server (serve_cases.Server) and kills it in a
finally block; the last check of each is that no container is left.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_cases import NBRUN, check, fail, validate  # noqa: E402
from serve_cases import Server  # noqa: E402


def labelled(session_id):
    """Containers and volumes of a sandbox (named by the session id, after its NODE~)."""
    session_id = session_id.split("~")[-1]
    out = subprocess.run(["docker", "ps", "-aq", "--filter", "label=nbrun.run=" + session_id],
                         capture_output=True, text=True).stdout.split()
    vols = subprocess.run(["docker", "volume", "ls", "-q", "--filter", "label=nbrun.run=" + session_id],
                          capture_output=True, text=True).stdout.split()
    return out + vols


def gone(session_id, within=30):
    deadline = time.time() + within
    while time.time() < deadline:
        left = labelled(session_id)
        if not left:
            return
        time.sleep(0.3)
    fail("session %s left %r" % (session_id, left))


def server(**kw):
    extra = list(kw.pop("extra", ()))
    if os.environ.get("NBRUN_TEST_IMAGE"):
        extra += ["--image", os.environ["NBRUN_TEST_IMAGE"]]
    return Server(extra=extra, **kw)


def open_session(srv, body=None, token=True):
    st, doc = srv.json("/v1/sessions", body if body is not None else {}, token=token)
    check(st == 201 and isinstance(doc.get("id"), str), "open: %d %r\n%s" % (st, doc, srv.stderr()[-2000:]))
    return doc["id"]


def execute(srv, sid, code, token=True, timeout=None):
    body = {"code": code}
    if timeout:
        body["timeout"] = timeout
    return srv.json("/v1/sessions/%s/execute" % sid, body, token=token)


def ok(srv, sid, code):
    st, doc = execute(srv, sid, code)
    check(st == 200 and doc.get("status") == "ok", "execute %r: %d %r" % (code, st, doc))
    validate(doc)
    check(doc["session"]["id"] == sid, "session: %r" % doc.get("session"))
    return doc


class Stream:
    """curl -N on an NDJSON endpoint; lines with the time each arrived."""

    def __init__(self, srv, path, body):
        self.lines = []
        args = ["curl", "-sS", "-N", "--unix-socket", srv.sock, "-H", "Authorization: Bearer " + srv.token,
                "-H", "Accept: application/x-ndjson", "-H", "Content-Type: application/json",
                "--data-binary", json.dumps(body), "http://localhost" + path]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic() - self.t0, json.loads(raw)))

    def wait_lines(self, n, within=60):
        deadline = time.time() + within
        while len(self.lines) < n and time.time() < deadline:
            time.sleep(0.05)
        check(len(self.lines) >= n, "stream: %d lines, want %d: %r" % (len(self.lines), n, self.lines))

    def finish(self, within=120):
        self.proc.wait(within)
        self.thread.join(10)
        return self.lines


# ---- cases -----------------------------------------------------------------

def case_state_files():
    srv = server(pool=1)
    try:
        srv.wait_pool(1)
        import base64
        sid = open_session(srv, {"files": [{"path": "given.csv",
                                            "content_base64": base64.b64encode(b"g,h\n").decode()}]})
        t0 = time.monotonic()
        ok(srv, sid, "x = 40\nimport pandas as pd\nassert open('/mnt/data/given.csv').read() == 'g,h\\n'")
        ok(srv, sid, "x += 1")
        doc = ok(srv, sid, "x += 1\nprint(x)\nopen('/mnt/data/out.csv', 'w').write('a,b\\n1,2\\n')")
        secs = time.monotonic() - t0
        check(doc["stdout"] == "42\n", "state across 3 executes: %r" % doc["stdout"])
        check([f["path"] for f in doc["files"]] == ["files/out.csv"], "files of that execute: %r" % doc["files"])
        check(doc["session"]["id"] == sid and doc["session"]["execution"] == 3, "session field %r" % doc.get("session"))
        # the next execute reads it; its own files list is empty (nothing changed)
        doc = ok(srv, sid, "print(open('/mnt/data/out.csv').read().splitlines()[1])")
        check(doc["stdout"] == "1,2\n" and doc["files"] == [], "next execute: %r %r" % (doc["stdout"], doc["files"]))
        st, body, _ = srv.curl("/v1/sessions/%s/files/out.csv" % sid)
        check(st == 200 and body == b"a,b\n1,2\n", "download: %d %r" % (st, body))
        st, listing = srv.json("/v1/sessions/%s/files" % sid)
        import hashlib
        ent = {e["path"]: e for e in listing["files"]}
        check(ent["out.csv"]["sha256"] == hashlib.sha256(b"a,b\n1,2\n").hexdigest() and ent["out.csv"]["size"] == 8,
              "listing %r" % listing)
        # upload, then the code reads it
        st, up = srv.json("/v1/sessions/%s/files/in/data.txt" % sid, b"uploaded bytes", method="PUT")
        check(st == 201 and up["bytes"] == 14, "upload %d %r" % (st, up))
        doc = ok(srv, sid, "print(open('/mnt/data/in/data.txt').read())")
        check(doc["stdout"] == "uploaded bytes\n", "uploaded file read: %r" % doc["stdout"])
        # paths checked as strictly as exports
        ok(srv, sid, "import os; os.symlink('/etc/passwd', '/mnt/data/link')")
        for path, want in (("link", 404), ("nope.txt", 404), ("in", 404)):
            st, body, _ = srv.curl("/v1/sessions/%s/files/%s" % (sid, path))
            check(st == want and b"root:" not in body, "GET %s: %d %r" % (path, st, body[:100]))
        for path in ("../etc/passwd", "a/../../x", "%2e%2e/x"):
            st, body, _ = srv.curl("/v1/sessions/%s/files/%s" % (sid, path))
            check(st in (400, 404) and b"root:" not in body, "GET %s: %d %r" % (path, st, body[:100]))
            st, body, _ = srv.curl("/v1/sessions/%s/files/%s" % (sid, path), b"x", method="PUT")
            check(st in (400, 404), "PUT %s: %d %r" % (path, st, body[:100]))
        st, body, _ = srv.curl("/v1/sessions/%s/files/link" % sid, b"overwrite", method="PUT")
        check(st == 400, "PUT over a symlink: %d %r" % (st, body))
        # the history, as one notebook that nbrun run re-executes to the same outputs
        st, nb, _ = srv.curl("/v1/sessions/%s/notebook" % sid)
        check(st == 200, "notebook %d" % st)
        nbdoc = json.loads(nb)
        srcs = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nbdoc["cells"]]
        check(len(nbdoc["cells"]) == 6 and srcs[0].startswith("x = 40"), "history cells: %r" % srcs)
        counts = [c["execution_count"] for c in nbdoc["cells"]]
        check(counts == list(range(1, 7)), "execution counts go on: %r" % counts)
        tmp = tempfile.mkdtemp(prefix="nbrun-session-nb-")
        nb_path = os.path.join(tmp, "history.ipynb")
        with open(nb_path, "wb") as f:
            # cells that need the uploaded file or make a link are the session's own: drop them
            nbdoc["cells"] = [c for c in nbdoc["cells"] if "in/data.txt" not in str(c["source"])
                              and "symlink" not in str(c["source"])]
            f.write(json.dumps(nbdoc).encode())
        given = os.path.join(tmp, "given.csv")
        with open(given, "w") as f:
            f.write("g,h\n")
        p = subprocess.run([NBRUN, "run", "--json", "-f", given, "-o", os.path.join(tmp, "out"), nb_path]
                           + (["--image", os.environ["NBRUN_TEST_IMAGE"]] if os.environ.get("NBRUN_TEST_IMAGE") else []),
                           capture_output=True, text=True, timeout=300)
        rerun = json.loads(p.stdout)
        check(p.returncode == 0 and rerun["stdout"] == "42\n1,2\n", "re-executed history: %d %r %s" %
              (p.returncode, rerun.get("stdout"), p.stderr))
        st, doc = srv.json("/v1/sessions/%s" % sid, method="DELETE")
        check(st == 200 and doc["closed"] is True, "delete %d %r" % (st, doc))
        gone(sid)
        st, doc = execute(srv, sid, "x")
        check(st == 404, "execute after delete: %d %r" % (st, doc))
        return "state across 3 executes (%.2f s for all 3), files by execute, up/download, listing, path checks, history re-executed, container gone" % secs
    finally:
        srv.stop()


def case_interrupt_restart():
    srv = server(pool=1)
    try:
        srv.wait_pool(1)
        sid = open_session(srv)
        ok(srv, sid, "keep = 'me'")
        result = {}

        def busy():
            result["r"] = execute(srv, sid, "import time\nn = 0\nwhile True:\n    n += 1")
            result["t"] = time.monotonic()
        th = threading.Thread(target=busy)
        th.start()
        time.sleep(2)
        st, busy_doc = execute(srv, sid, "1")
        check(st == 409, "a second execute while one runs: %d %r" % (st, busy_doc))
        t0 = time.monotonic()
        st, doc = srv.json("/v1/sessions/%s/interrupt" % sid, {}, method="POST")
        check(st == 200 and doc["interrupted"] is True, "interrupt: %d %r" % (st, doc))
        th.join(30)
        check(not th.is_alive(), "the interrupted execute did not return")
        secs = result["t"] - t0
        st, doc = result["r"]
        check(st == 200 and doc["status"] == "error" and doc["error"]["name"] == "KeyboardInterrupt",
              "interrupted execute: %d %r" % (st, doc))
        # (how fast is for bench/: here only that it stopped, the thread's join above)
        doc = ok(srv, sid, "print(keep, n > 0)")
        check(doc["stdout"] == "me True\n", "state after interrupt: %r" % doc["stdout"])
        st, doc = srv.json("/v1/sessions/%s/restart" % sid, {}, method="POST")
        check(st == 200 and doc["restarted"] is True, "restart %d %r" % (st, doc))
        st, doc = execute(srv, sid, "print(keep)")
        check(st == 200 and doc["status"] == "error" and doc["error"]["name"] == "NameError",
              "variables after restart: %r" % doc)
        # a dead kernel says so, refuses executes, and comes back with a restart
        st, doc = execute(srv, sid, "import os; os._exit(9)")
        check(st == 200 and doc["status"] == "failed" and "died" in doc["message"], "dead: %r" % doc)
        st, info = srv.json("/v1/sessions/%s" % sid)
        check(info["kernel_dead"] is True, "info of a dead kernel: %r" % info)
        st, doc = execute(srv, sid, "1")
        check(st == 409 and doc["kind"] == "kernel_dead", "execute on a dead kernel: %d %r" % (st, doc))
        st, doc = srv.json("/v1/sessions/%s/restart" % sid, {}, method="POST")
        check(st == 200, "restart a dead kernel: %d %r" % (st, doc))
        doc = ok(srv, sid, "print(6 * 7)")
        check(doc["stdout"] == "42\n", "after restart %r" % doc)
        return "busy loop interrupted in %.2f s, state kept; 409 while busy; restart clears state and revives a dead kernel" % secs
    finally:
        log = srv.stderr()
        srv.stop()
        for line in log.splitlines():
            if "session" in line and "opened" in line:
                gone(line.split()[3])


def case_tenants_idle():
    tmp = tempfile.mkdtemp(prefix="nbrun-tenants-")
    tokens = ["tenant-a-" + "a" * 24, "tenant-b-" + "b" * 24]
    tf = os.path.join(tmp, "tokens")
    with open(tf, "w") as f:
        f.write("\n".join(tokens) + "\n")
    srv = server(pool=0, extra=["--token-file", tf])
    try:
        srv.token = tokens[0]
        sid = open_session(srv, {"timeout_idle": "4s"})
        ok(srv, sid, "secret = 1")
        other = tokens[1]
        for method, path, data in (("GET", "", None), ("POST", "/execute", {"code": "print(secret)"}),
                                   ("GET", "/files", None), ("GET", "/notebook", None),
                                   ("POST", "/interrupt", {}), ("POST", "/restart", {}),
                                   ("PUT", "/files/x", b"x"), ("GET", "/files/x", None),
                                   ("DELETE", "", None)):
            st, body, _ = srv.curl("/v1/sessions/%s%s" % (sid, path), data, token=other, method=method)
            check(st == 404 and b"secret" not in body, "%s %s by another tenant: %d %r" % (method, path, st, body))
        st, lst = srv.json("/v1/sessions", token=other)
        check(lst == {"sessions": []}, "another tenant's list: %r" % lst)
        st, lst = srv.json("/v1/sessions")
        check([s["id"] for s in lst["sessions"]] == [sid], "own list: %r" % lst)
        st, body, _ = srv.curl("/v1/sessions/%s" % sid, token="not-a-token-at-all-123456")
        check(st == 401, "a wrong token: %d" % st)
        # still alive after the other tenant's attempts, then gone after its idle timeout
        doc = ok(srv, sid, "print(secret)")
        check(doc["stdout"] == "1\n", "state kept: %r" % doc)
        time.sleep(6)
        st, doc = srv.json("/v1/sessions/%s" % sid)
        check(st == 404, "after the idle timeout: %d %r" % (st, doc))
        gone(sid)
        check("closed (idle timeout)" in srv.stderr(), "log: %s" % srv.stderr()[-1000:])
        return "another tenant gets 404 on all 9 endpoints and an empty list; idle timeout closed the session and removed its container"
    finally:
        srv.stop()


def case_stream():
    srv = server(pool=1)
    try:
        srv.wait_pool(1)
        code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(1)\n"
        s = Stream(srv, "/v1/runs", {"code": code})
        lines = s.finish()
        check(s.proc.returncode == 0, "curl exit %d" % s.proc.returncode)
        outs = [(t, e) for t, e in lines if e.get("event") == "output"]
        last_t, last = lines[-1]
        check(last.get("status") == "ok" and last.get("stdout") == "0\n1\n2\n",
              "last line is the result document: %r" % last)
        check([e["output"]["text"] for _, e in outs] == ["0\n", "1\n", "2\n"], "outputs %r" % outs)
        gap = last_t - outs[0][0]
        check(gap >= 1.5, "the first output came only %.2f s before the end" % gap)
        check(any(e.get("event") == "cell" and e["status"] == "ok" for _, e in lines), "cell event: %r" % lines)
        # a session's execute streams too
        sid = open_session(srv)
        s = Stream(srv, "/v1/sessions/%s/execute" % sid, {"code": code})
        lines = s.finish()
        outs = [(t, e) for t, e in lines if e.get("event") == "output"]
        check(lines[-1][1].get("stdout") == "0\n1\n2\n" and lines[-1][0] - outs[0][0] >= 1.5,
              "session stream: %r" % lines)
        # Once the result line is read, the session is free: a client that
        # goes on on the same connection never finds it busy.
        import http.client
        import socket

        class Unix(http.client.HTTPConnection):
            def connect(self):
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect(srv.sock)
        auth = {"Authorization": "Bearer " + srv.token, "Content-Type": "application/json"}
        for i in range(10):
            # the stream on one connection, the next execute on another, as
            # two clients of one agent would
            a, b = Unix("localhost", timeout=300), Unix("localhost", timeout=300)
            a.request("POST", "/v1/sessions/%s/execute" % sid, body=json.dumps({"code": "print(%d)" % i}),
                      headers=dict(auth, Accept="application/x-ndjson"))
            r = a.getresponse()
            while True:  # up to the result line, not to the end of the body
                line = r.readline()
                check(line, "stream %d ended without its result" % i)
                last = json.loads(line)
                if "event" not in last:
                    break
            check(r.status == 200 and last.get("stdout") == "%d\n" % i, "streamed %d: %r" % (i, last))
            b.request("POST", "/v1/sessions/%s/execute" % sid, body=json.dumps({"code": "%d" % i}), headers=auth)
            r = b.getresponse()
            doc = json.loads(r.read())
            check(r.status == 200 and doc.get("status") == "ok", "the execute after stream %d: %d %r" % (i, r.status, doc))
            a.close()
            b.close()
        return "first output %.2f s before the result line; session execute streams the same; the session free once its stream ended" % gap
    finally:
        srv.stop()


def case_stream_disconnect():
    srv = server(pool=1)
    try:
        srv.wait_pool(1)
        sid = open_session(srv)
        ok(srv, sid, "i = -1")
        code = "import time\nfor i in range(200):\n    print(i, flush=True)\n    time.sleep(0.1)\n"
        s = Stream(srv, "/v1/sessions/%s/execute" % sid, {"code": code})
        s.wait_lines(2)
        s.proc.kill()
        s.proc.wait()
        # the cell is interrupted: the session is usable again soon, state kept
        deadline = time.time() + 20
        while True:
            st, doc = execute(srv, sid, "print(i)")
            if st != 409 or time.time() > deadline:
                break
            time.sleep(0.2)
        check(st == 200 and doc["status"] == "ok" and 0 <= int(doc["stdout"]) < 150,
              "after a client went away mid-stream: %d %r" % (st, doc))
        # a streamed run whose client goes away is cancelled and removed
        s = Stream(srv, "/v1/runs", {"code": code})
        s.wait_lines(2)
        s.proc.kill()
        s.proc.wait()
        run_id = None
        deadline = time.time() + 30
        while time.time() < deadline:
            st, health = srv.json("/v1/health", token=None)
            if health["runs_active"] == 0:
                break
            time.sleep(0.2)
        check(health["runs_active"] == 0, "the run still counts: %r" % health)
        st, _ = srv.json("/v1/sessions/%s" % sid, method="DELETE")
        gone(sid)
        # what is left is the pool's one ready sandbox: the run's was removed
        deadline = time.time() + 30
        while time.time() < deadline:
            out = subprocess.run(["docker", "ps", "-a", "--filter", "label=nbrun.pid=%d" % srv.proc.pid,
                                  "--format", "{{.Names}}"], capture_output=True, text=True).stdout.split()
            if len(out) <= 1:
                break
            time.sleep(0.3)
        check(len(out) <= 1, "containers of the server after a cancelled streamed run: %r" % out)
        del run_id
        return "a client gone mid-stream interrupts the session's cell (i=%s, state kept) and cancels a streamed run" % doc["stdout"].strip()
    finally:
        srv.stop()


def case_cli_session():
    tmp = tempfile.mkdtemp(prefix="nbrun-cli-session-")
    script = ("x = 20\nx * 2\nfor i in range(2):\n    print('line', i)\n\n"
              "# %%%%\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n# %%%%\n"
              "open('/mnt/data/r.txt', 'w').write('from the session')\n"
              ":files\n:get r.txt %s/got.txt\n:save %s/history.ipynb\n1/0\nprint(x)\n" % (tmp, tmp))
    args = [NBRUN, "session", "-o", os.path.join(tmp, "out")]
    if os.environ.get("NBRUN_TEST_IMAGE"):
        args += ["--image", os.environ["NBRUN_TEST_IMAGE"]]
    p = subprocess.run(args, input=script, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr))
    out = p.stdout
    check("40\n" in out and "line 0\nline 1\n" in out and "[image] " in out and "r.txt" in out,
          "outputs: %r" % out)
    check(out.rstrip().endswith("20"), "state after an error: %r" % out[-200:])
    check("ZeroDivisionError" in p.stderr and "Traceback" in p.stderr, "error: %r" % p.stderr)
    with open(os.path.join(tmp, "got.txt")) as f:
        check(f.read() == "from the session", ":get")
    with open(os.path.join(tmp, "history.ipynb")) as f:
        cells = json.load(f)["cells"]
        check(len(cells) == 5, ":save: %r" % [c["source"] for c in cells])
    png = [l.split(" ", 1)[1] for l in out.splitlines() if l.startswith("[image] ")][0]
    with open(png, "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "the image is a PNG")
    sid = os.path.basename(os.path.dirname(os.path.dirname(png))).rsplit("-", 1)[0]
    gone(sid)
    return "a prompt over stdin: state kept, a block, an image saved, :files :get :save, an error then state still there; sandbox removed"


def case_control_chars():
    """What the code prints reaches a person's terminal without control sequences:
    no title, clipboard (OSC 52) or screen clearing, live or at the end."""
    tmp = tempfile.mkdtemp(prefix="nbrun-ctl-")
    evil = r'print("a\x1b]0;PWNED\x07b\x1b]52;c;aGk=\x07c\x1b[2Jd\x9b31me")'
    p = subprocess.run([NBRUN, "session", "-o", os.path.join(tmp, "out")], input=(evil + "\n1/0\n").encode(),
                       capture_output=True, timeout=300)
    for name, data in (("stdout", p.stdout), ("stderr", p.stderr)):
        check(b"\x1b" not in data and b"\x07" not in data and b"\xc2\x9b" not in data,
              "session %s holds a control sequence: %r" % (name, data[-300:]))
    check(b"PWNED" in p.stdout, "the text itself is kept: %r" % p.stdout[-300:])
    p = subprocess.run([NBRUN, "run", "--stream", "-o", os.path.join(tmp, "run"), "-c", evil],
                       capture_output=True, timeout=300)
    check(p.returncode == 0 and b"\x1b" not in p.stdout and b"\x07" not in p.stdout and b"PWNED" in p.stdout,
          "run --stream: %r" % p.stdout[-300:])
    return "nbrun session and run --stream print the code's escapes (title, OSC 52, clear, C1 CSI) as '?'"


def case_cli_session_server():
    """The same prompt, its session kept by a server: the output is the local prompt's."""
    s = server()
    try:
        tmp = tempfile.mkdtemp(prefix="nbrun-cli-session-server-")
        csv = os.path.join(tmp, "in.csv")
        with open(csv, "w") as f:
            f.write("a,b\n1,2\n3,4\n")
        with open(os.path.join(tmp, "up.txt"), "w") as f:
            f.write("sent up")
        script = ("import pandas as pd\ndf = pd.read_csv('/mnt/data/in.csv')\nint(df.a.sum())\n"
                  "for i in range(2):\n    print('line', i)\n\n"
                  "# %%%%\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n# %%%%\n"
                  "open('/mnt/data/r#1.txt', 'w').write('from the session')\n"
                  ":put %s/up.txt\nprint(open('/mnt/data/up.txt').read())\n"
                  ":files\n:get r#1.txt\n:save %s/history.ipynb\n:get nothing-here\n"
                  "1/0\nprint(int(df.b.sum()))\n" % (tmp, tmp))
        env = dict(os.environ, NBRUN_TOKEN=s.token)
        p = subprocess.run([NBRUN, "session", "--server", s.url, "-f", csv, "-o", os.path.join(tmp, "out")],
                           input=script, capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
        check(p.returncode == 0, "exit %d: %s\n%s" % (p.returncode, p.stderr, s.stderr()[-2000:]))
        out = p.stdout
        check("4\n" in out and "line 0\nline 1\n" in out and "[image] " in out and "sent up\n" in out,
              "outputs: %r" % out)
        check("r#1.txt" in out and "in.csv" in out and "up.txt" in out, ":files: %r" % out)
        check(out.rstrip().endswith("6"), "state after an error: %r" % out[-200:])
        check("ZeroDivisionError" in p.stderr and "Traceback" in p.stderr, "error: %r" % p.stderr)
        check("nothing-here" in p.stderr and "HTTP 404" in p.stderr, ":get of no file: %r" % p.stderr)
        check(not os.path.exists(os.path.join(tmp, "nothing-here")), ":get left a file for a refusal")
        with open(os.path.join(tmp, "r#1.txt")) as f:
            check(f.read() == "from the session", ":get")
        with open(os.path.join(tmp, "history.ipynb")) as f:
            cells = json.load(f)["cells"]
            check(len(cells) == 7, ":save: %r" % [c["source"] for c in cells])
        png = [l.split(" ", 1)[1] for l in out.splitlines() if l.startswith("[image] ")][0]
        with open(png, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", "the image is a PNG")
        with open(os.path.join(os.path.dirname(os.path.dirname(png)), "result.json")) as f:
            doc = json.load(f)
        check(doc["out_dir"] == os.path.dirname(os.path.dirname(png)) and "url" not in doc["images"][0],
              "result.json: %r" % doc)
        # The session was closed when the prompt ended.
        st, body, _ = s.curl("/v1/sessions")
        check(st == 200 and json.loads(body)["sessions"] == [], "sessions left: %d %r" % (st, body))
        # Limits are the server's; a bad token is a usage error.
        p = subprocess.run([NBRUN, "session", "--server", s.url, "--memory", "1g"], input="",
                           capture_output=True, text=True, timeout=60, env=env)
        check(p.returncode == 2 and "--memory" in p.stderr, "--memory: %d %r" % (p.returncode, p.stderr))
        p = subprocess.run([NBRUN, "session", "--server", s.url], input="1\n", capture_output=True,
                           text=True, timeout=60, env=dict(os.environ, NBRUN_TOKEN="wrong"))
        check(p.returncode == 2 and "401" in p.stderr, "bad token: %d %r" % (p.returncode, p.stderr))
    finally:
        s.stop()
    return "nbrun session --server: an input file, state kept, an image and result.json saved, :put :files :get :save, a refused :get, an error then state still there; session closed at the end"


def case_run_stream():
    code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(1)\n6 * 7\n"
    args = [NBRUN, "run", "--stream", "-o", tempfile.mkdtemp(prefix="nbrun-run-stream-") + "/out", "-c", code]
    if os.environ.get("NBRUN_TEST_IMAGE"):
        args += ["--image", os.environ["NBRUN_TEST_IMAGE"]]
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [(time.monotonic() - t0, l) for l in p.stdout]
    p.wait(120)
    check(p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr.read()))
    texts = [l for _, l in lines]
    check(texts[:3] == ["0\n", "1\n", "2\n"] and "42" in texts[-1] and len(texts) == 4,
          "output: %r" % texts)
    gap = lines[-1][0] - lines[0][0]
    check(gap >= 1.5, "the first line came only %.2f s before the last" % gap)
    return "nbrun run --stream printed the first line %.2f s before the value" % gap


def mcp_call(srv, msg, sid=None):
    """One JSON-RPC message to /mcp: (HTTP status, reply, Mcp-Session-Id header)."""
    extra = ["-H", "Accept: application/json, text/event-stream",
             "-H", "MCP-Protocol-Version: 2025-11-25"]
    if sid:
        extra += ["-H", "Mcp-Session-Id: " + sid]
    st, body, head = srv.curl("/mcp", msg, extra=extra)
    got = [l.split(":", 1)[1].strip() for l in head.splitlines() if l.lower().startswith("mcp-session-id:")]
    text = body.decode()
    if "text/event-stream" in head:  # the reply is the last data line of the stream
        text = [l[5:] for l in text.splitlines() if l.startswith("data:")][-1]
    return st, (json.loads(text) if text.strip() else None), (got[0] if got else None)


def mcp_tool(srv, sid, name, args, rid=[10]):
    rid[0] += 1
    st, doc, _ = mcp_call(srv, {"jsonrpc": "2.0", "id": rid[0], "method": "tools/call",
                                "params": {"name": name, "arguments": args}}, sid)
    check(st == 200 and "result" in doc, "%s: %d %r" % (name, st, doc))
    return doc["result"]


def case_one_table():
    """HTTP sessions and the MCP tools' sessions are one table with one limit."""
    srv = server(pool=0, extra=["--max-sessions", "2"])
    try:
        st, init, msid = mcp_call(srv, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "one-table", "version": "1"}}})
        check(st == 200 and msid, "initialize: %d %r" % (st, init))
        mcp_call(srv, {"jsonrpc": "2.0", "method": "notifications/initialized"}, msid)
        http_sid = open_session(srv)
        opened = mcp_tool(srv, msid, "session_open", {})
        check(opened.get("isError") is False, "MCP session_open: %r" % opened)
        mcp_sid = opened["structuredContent"]["session_id"]
        st, lst = srv.json("/v1/sessions")
        ids = sorted(x["id"] for x in lst["sessions"])
        check(st == 200 and ids == sorted([http_sid, mcp_sid]), "one list holds both: %r" % lst)
        # the limit counts both doors' sessions
        full = mcp_tool(srv, msid, "session_open", {})
        text = full["content"][0]["text"]
        check(full.get("isError") is True and "2 sessions are open" in text, "MCP at the limit: %r" % full)
        st, doc = srv.json("/v1/sessions", {})
        check(st == 503 and doc.get("kind") == "busy", "HTTP at the limit: %d %r" % (st, doc))
        # the MCP tools reach only the sessions their MCP session opened
        other = mcp_tool(srv, msid, "session_execute", {"session_id": http_sid, "code": "1"})
        check(other.get("isError") is True and "no open session" in other["content"][0]["text"],
              "an HTTP session through MCP: %r" % other)
        done = mcp_tool(srv, msid, "session_execute", {"session_id": mcp_sid, "code": "x = 41\nx + 1"})
        check(done.get("isError") is False and "42" in json.dumps(done), "MCP execute: %r" % done)
        ok(srv, http_sid, "1")
        m = srv.metrics()
        check(m.get("nbrun_sessions_open") == 2 and m.get("nbrun_sessions_opened_total") == 2 and
              m.get("nbrun_session_executions_total") == 2, "metrics count both doors: %r" % m)
        # the MCP session's end closes its sessions, and frees their place
        st, _, _ = srv.curl("/mcp", method="DELETE", extra=["-H", "Mcp-Session-Id: " + msid,
                                                           "-H", "MCP-Protocol-Version: 2025-11-25"])
        check(st in (200, 204), "DELETE /mcp: %d" % st)
        st, lst = srv.json("/v1/sessions")
        check([x["id"] for x in lst["sessions"]] == [http_sid], "after the MCP session: %r" % lst)
        gone(mcp_sid)
        again = open_session(srv)
        for sid in (http_sid, again):
            st, _ = srv.json("/v1/sessions/" + sid, method="DELETE")
            check(st == 200, "DELETE %s: %d" % (sid, st))
        gone(http_sid)
        gone(again)
        return "2 sessions in all across HTTP and MCP (503 busy, tool error); one list; MCP's own only; closed with its MCP session"
    finally:
        srv.stop()


def main():
    cases = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        print("usage: session_cases.py CASE\ncases: %s" % " ".join(sorted(cases)), file=sys.stderr)
        return 2
    print("held %s: %s" % (sys.argv[1], cases[sys.argv[1]]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
