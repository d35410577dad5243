#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Integration tests of `nbrun serve` and `nbrun run --server`, real engine and image.

Usage: serve_cases.py CASE   (one meson test per case; see meson.build)
Requests go through the real curl binary. Every case starts its own server
(a unix socket or a free loopback port, a private state directory) and kills
it in a finally block.
"""
import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_cases import NBRUN, check, engine, fail, leftovers, validate  # noqa: E402

CHART = ("import matplotlib.pyplot as plt\n"
         "fig = plt.figure(figsize=(4, 3), dpi=100)\n"
         "plt.plot([1, 2, 3], [1, 4, 9])\n"
         "plt.show()\n")


class Server:
    """nbrun serve on a unix socket (default) or a loopback TCP port."""

    def __init__(self, tcp=False, extra=(), pool=0, state=None):
        self.tmp = tempfile.mkdtemp(prefix="nbrun-serve-")
        self.state = state or os.path.join(self.tmp, "state")
        self.sock = None if tcp else os.path.join(self.tmp, "s.sock")
        self.port = free_port() if tcp else None
        where = ["--listen", "127.0.0.1:%d" % self.port] if tcp else ["--socket", self.sock]
        self.log = open(os.path.join(self.tmp, "serve.log"), "w+")
        self.proc = subprocess.Popen([NBRUN, "serve", "--state-dir", self.state, "--pool", str(pool)] +
                                     where + list(extra), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            if "nbrun: serve: state in" in self.stderr():
                break
            if self.proc.poll() is not None:
                fail("serve exited %d: %s" % (self.proc.returncode, self.stderr()))
            time.sleep(0.05)
        else:
            fail("serve did not start: %s" % self.stderr())
        self.token = None
        if os.path.exists(os.path.join(self.state, "token")):
            with open(os.path.join(self.state, "token")) as f:
                self.token = f.read().strip()

    @property
    def url(self):
        return "unix:" + self.sock if self.sock else "http://127.0.0.1:%d" % self.port

    def stderr(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def curl(self, path, data=None, token=True, method=None, extra=()):
        """(HTTP status, body bytes, headers text) through the curl binary."""
        body = os.path.join(self.tmp, "body")
        head = os.path.join(self.tmp, "head")
        args = ["curl", "-sS", "--path-as-is", "-o", body, "-D", head, "-w", "%{http_code}",
                "--max-time", "300"]
        if self.sock:
            args += ["--unix-socket", self.sock]
            base = "http://localhost"
        else:
            base = "http://127.0.0.1:%d" % self.port
        if token is True:
            args += ["-H", "Authorization: Bearer " + self.token]
        elif token:
            args += ["-H", "Authorization: Bearer " + token]
        if data is not None:
            dfile = os.path.join(self.tmp, "req")
            with open(dfile, "wb") as f:
                f.write(data if isinstance(data, bytes) else json.dumps(data).encode())
            args += ["--data-binary", "@" + dfile, "-H", "Content-Type: application/json"]
        if method:
            args += ["-X", method]
        p = subprocess.run(args + list(extra) + [base + path], capture_output=True, text=True,
                           timeout=320)
        check(p.returncode == 0, "curl %s: exit %d %s" % (path, p.returncode, p.stderr))
        with open(body, "rb") as f:
            b = f.read()
        with open(head) as f:
            h = f.read()
        return int(p.stdout), b, h

    def json(self, path, data=None, **kw):
        status, body, _ = self.curl(path, data, **kw)
        try:
            return status, json.loads(body)
        except ValueError:
            fail("%s: %d, not JSON: %r" % (path, status, body[:300]))

    def metrics(self):
        status, body, _ = self.curl("/metrics")
        check(status == 200, "metrics: %d" % status)
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def wait_pool(self, ready, within=120):
        """Wait until the pool has `ready` warm sandboxes; returns the health document."""
        deadline = time.time() + within
        while time.time() < deadline:
            st, health = self.json("/v1/health", token=None)
            if st == 200 and health["pool"]["ready"] >= ready:
                return health
            time.sleep(0.2)
        fail("the pool did not fill within %d s: %r\n%s" % (within, health, self.stderr()[-2000:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_local(args):
    return subprocess.run([NBRUN, "run"] + args, capture_output=True, text=True, timeout=300)


def png_ok(data):
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG: %r" % data[:16])


def no_run_left(run_id):
    left = leftovers(run_id)
    check(not left, "left behind: %r" % left)


# ---- cases -----------------------------------------------------------------

def case_socket_run_curl():
    s = Server()
    try:
        code = ("print('hello from serve')\n" + CHART +
                "open('/mnt/data/out.txt', 'w').write(open('/mnt/data/in.csv').read().upper())\n")
        req = {"code": code, "files": [{"path": "in.csv",
                                         "content_base64": base64.b64encode(b"a,b\n1,2\n").decode()}],
               "env": {"GREETING": "hi"}, "timeout": "60s"}
        status, doc = s.json("/v1/runs", req)
        check(status == 200, "POST: %d %r" % (status, doc))
        validate(doc)
        check(doc["status"] == "ok" and doc["stdout"] == "hello from serve\n", doc["stdout"])
        run_id = doc["run_id"]
        check(len(doc["images"]) == 1, doc["images"])
        img = doc["images"][0]
        data = base64.b64decode(img["content_base64"])
        png_ok(data)
        check(len(data) == img["bytes"], "image size")
        check(img["url"] == "/v1/runs/%s/images/%s" % (run_id, img["path"][7:]), img["url"])
        files = {f["path"]: f for f in doc["files"]}
        check(list(files) == ["files/out.txt"], "files: %r (the untouched input must not come back)" % list(files))
        f = files["files/out.txt"]
        check(base64.b64decode(f["content_base64"]) == b"A,B\n1,2\n", f)
        st, body, head = s.curl(f["url"])
        check(st == 200 and body == b"A,B\n1,2\n", "file by url: %d %r" % (st, body))
        st, body, head = s.curl(img["url"])
        check(st == 200 and body == data and "image/png" in head, "image by url: %d" % st)
        check("nosniff" in head, head)
        # The kept result: the same document, with urls but nothing inlined.
        st, kept = s.json("/v1/runs/" + run_id)
        check(st == 200, "GET result: %d" % st)
        validate(kept)
        check("content_base64" not in kept["images"][0] and kept["images"][0]["url"] == img["url"],
              kept["images"])
        for k in ("stdout", "outputs", "status", "run_id", "files"):
            if k != "files":
                check(kept[k] == doc[k], "kept %s differs" % k)
        check(kept["out_dir"] == os.path.join(s.state, "runs", run_id), kept["out_dir"])
        st, nb = s.json("/v1/runs/%s/notebook" % run_id)
        check(st == 200 and nb.get("nbformat") == 4, "notebook: %d" % st)
        m = s.metrics()
        check(m['nbrun_runs_total{status="ok"}'] == 1, m)
        check(m["nbrun_run_duration_seconds_count"] == 1 and m["nbrun_runs_active"] == 0, m)
        # Without a pool (--pool 0) no run is a hit or a miss.
        check(m["nbrun_pool_misses_total"] == 0 and m["nbrun_pool_hits_total"] == 0, m)
        no_run_left(run_id)
    finally:
        s.stop()


def case_notebook_params():
    s = Server()
    try:
        nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
              "cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "id": "p",
                         "source": "n = 1", "outputs": [], "execution_count": None},
                        {"cell_type": "code", "metadata": {}, "id": "q", "source": "print(n * 2)",
                         "outputs": [], "execution_count": None}]}
        status, doc = s.json("/v1/runs", {"notebook": nb, "parameters": {"n": 21}})
        check(status == 200 and doc["status"] == "ok", "%d %r" % (status, doc))
        check(doc["stdout"] == "42\n", repr(doc["stdout"]))
        status, doc = s.json("/v1/runs", {"code": "1", "parameters": {"n": 1}})
        check(status == 400 and "parameters" in doc["error"], doc)
    finally:
        s.stop()


def normalise(text, *dirs):
    for d in dirs:
        text = text.replace(d, "OUT")
    return text


def case_tcp_remote_same_as_local():
    s = Server(tcp=True)
    try:
        tmp = tempfile.mkdtemp()
        csv = os.path.join(tmp, "sales.csv")
        with open(csv, "w") as f:
            f.write("region,amount\nnorth,10\nsouth,5\n")
        env = dict(os.environ, NBRUN_TOKEN_FILE=os.path.join(s.state, "token"))
        env.pop("NBRUN_TOKEN", None)
        ok_code = ("import pandas as pd\nprint(pd.read_csv('/mnt/data/sales.csv').amount.sum())\n"
                   "pd.read_csv('/mnt/data/sales.csv').to_csv('/mnt/data/copy.csv')\n"
                   "# %%\n" + CHART + "# %%\n6*7\n")
        err_code = "print('before')\n# %%\nraise KeyError('nope')\n"
        for code, want in ((ok_code, 0), (err_code, 1)):
            outs = [os.path.join(tmp, "%s-%d" % (k, want)) for k in ("local", "remote")]
            local = run_local(["-f", csv, "-o", outs[0], "-c", code])
            remote = subprocess.run([NBRUN, "run", "--server", s.url, "-f", csv, "-o", outs[1],
                                     "-c", code], capture_output=True, text=True, env=env,
                                    timeout=300)
            check(local.returncode == want, "local exit %d: %s" % (local.returncode, local.stderr))
            check(remote.returncode == want, "remote exit %d: %s" % (remote.returncode, remote.stderr))
            a, b = normalise(local.stdout, outs[0]), normalise(remote.stdout, outs[1])
            check(a == b, "stdout differs:\n--- local\n%s\n--- remote\n%s" % (a, b))
            with open(os.path.join(outs[1], "result.json")) as f:
                doc = json.load(f)
            validate(doc)
            check(doc["out_dir"] == outs[1], doc["out_dir"])
            for e in doc["images"] + doc["files"]:
                p = os.path.join(outs[1], e["path"])
                check(os.path.getsize(p) == e["bytes"], "%s: size" % p)
            if want == 0:
                check(len(doc["images"]) == 1 and len(doc["files"]) == 1, doc)
                with open(os.path.join(outs[1], doc["images"][0]["path"]), "rb") as f:
                    png_ok(f.read())
            check(os.path.isfile(os.path.join(outs[1], "notebook.ipynb")), "no notebook.ipynb")
        # --json: the document, as a local run prints it, and result.json the same.
        out = os.path.join(tmp, "json")
        p = subprocess.run([NBRUN, "run", "--server", s.url, "--json", "-o", out, "-c", "6*7"],
                           capture_output=True, text=True, env=env, timeout=300)
        check(p.returncode == 0, "json run: %d %s" % (p.returncode, p.stderr))
        doc = json.loads(p.stdout)
        validate(doc)
        with open(os.path.join(out, "result.json")) as f:
            check(json.load(f) == doc, "result.json differs from --json output")
        check(doc["results"][0]["text"] == "42", doc["results"])
        # NBRUN_SERVER works as --server; limits that are the server's are refused.
        p = subprocess.run([NBRUN, "run", "-o", os.path.join(tmp, "env"), "-c", "print(5)"],
                           capture_output=True, text=True, env=dict(env, NBRUN_SERVER=s.url),
                           timeout=300)
        check(p.returncode == 0 and p.stdout == "5\n", "NBRUN_SERVER: %d %r %s" % (p.returncode, p.stdout, p.stderr))
        p = subprocess.run([NBRUN, "run", "--server", s.url, "--memory", "2G", "-c", "1"],
                           capture_output=True, text=True, env=env, timeout=60)
        check(p.returncode == 2 and "--memory" in p.stderr, "refused limit: %d %s" % (p.returncode, p.stderr))
        # A wrong token: exit 2 with the server's one-line message.
        p = subprocess.run([NBRUN, "run", "--server", s.url, "-c", "1"], capture_output=True,
                           text=True, env=dict(env, NBRUN_TOKEN="x" * 64), timeout=60)
        check(p.returncode == 2 and "token" in p.stderr, "wrong token: %d %s" % (p.returncode, p.stderr))
    finally:
        s.stop()


def case_auth():
    s = Server()
    try:
        body = {"code": "import time; time.sleep(30)"}
        for tok in (None, "0" * 64, s.token[:-1], s.token + "x"):
            st, doc = s.json("/v1/runs", body, token=tok)
            check(st == 401 and doc.get("kind") == "auth", "token %r: %d %r" % (tok, st, doc))
        for path in ("/metrics", "/v1/runs/abcdef012345", "/nothing"):
            st, _, head = s.curl(path, token=None)
            check(st == 401, "%s without token: %d" % (path, st))
        # Nothing started: a 30 s run would show as active, and its directory would exist.
        st, health = s.json("/v1/health", token=None)
        check(st == 200 and health["status"] == "ok" and health["runs_active"] == 0, health)
        check(set(health) == {"status", "version", "node", "pool", "runs_active"}, health)
        check(health["node"] == socket.gethostname(), health)
        check(health["pool"] == {"size": 0, "ready": 0, "starting": 0}, health)
        st, raw, _ = s.curl("/v1/health", token=None)
        check(s.token not in raw.decode() and s.state not in raw.decode(), "health leaks: %r" % raw)
        check(os.listdir(os.path.join(s.state, "runs")) == [], os.listdir(os.path.join(s.state, "runs")))
        m = s.metrics()
        check(sum(v for k, v in m.items() if k.startswith("nbrun_runs_total")) == 0, m)
        check(m["nbrun_runs_active"] == 0, m)
        mode = os.stat(os.path.join(s.state, "token")).st_mode & 0o777
        check(mode == 0o600, "token mode %o" % mode)
        check(len(s.token) == 64 and re.fullmatch("[0-9a-f]+", s.token), "token %r" % s.token)
        check(s.token not in s.stderr(), "the token was printed")
    finally:
        s.stop()


def case_bad_requests():
    s = Server()
    try:
        b64 = base64.b64encode(b"x").decode()
        bad = [
            (b"{not json", "bad JSON"),
            (b"[1, 2]", "object"),
            ({"code": "1", "extra": 1}, "unknown key"),
            ({"code": "1", "notebook": {}}, "either"),
            ({}, "either"),
            ({"code": 1}, "code"),
            ({"code": "1", "timeout": "soon"}, "timeout"),
            ({"code": "1", "timeout": "2h"}, "limit"),
            ({"code": "1", "env": {"A=B": "x"}}, "env"),
            ({"code": "1", "env": {"A": 1}}, "env"),
            ({"code": "1", "files": [{"path": "a", "content_base64": "!!!!"}]}, "base64"),
            ({"code": "1", "files": [{"path": "a", "content_base64": "YQ"}]}, "base64"),
            ({"code": "1", "files": [{"path": "../etc", "content_base64": b64}]}, "path"),
            ({"code": "1", "files": [{"path": "a/b", "content_base64": b64}]}, "path"),
            ({"code": "1", "files": [{"path": "..", "content_base64": b64}]}, "path"),
            ({"code": "1", "files": [{"path": "a\nb", "content_base64": b64}]}, "path"),
            ({"code": "1", "files": [{"path": "a", "content_base64": b64, "mode": 7}]}, "unknown key"),
            ({"code": "1", "files": [{"path": "a", "content_base64": b64},
                                     {"path": "a", "content_base64": b64}]}, "twice"),
            (b'{"code": "1", "code": "2"}', "bad JSON"),
        ]
        for body, word in bad:
            st, doc = s.json("/v1/runs", body)
            check(st == 400, "%r: %d %r" % (body, st, doc))
            check(word.lower() in doc["error"].lower() and "\n" not in doc["error"],
                  "%r: message %r" % (body, doc["error"]))
        check(os.listdir(os.path.join(s.state, "tmp")) == [], "uploaded files left in tmp")
        # Oversized: 413 with a JSON message, the body not read.
        big = b'{"code": "' + b"#" * (65 << 20) + b'"}'
        st, raw, _ = s.curl("/v1/runs", big)
        check(st == 413 and "64 MiB" in json.loads(raw)["error"], "big: %d %r" % (st, raw[:200]))
        # Unknown runs, bad ids and traversal: 404 JSON, nothing outside a run read.
        for path in ("/v1/runs/0123456789ab", "/v1/runs/0123456789ab/notebook",
                     "/v1/runs/..%2f..%2fetc", "/v1/runs/../../etc/passwd",
                     "/v1/runs/0123456789ab/files/../../token",
                     "/v1/runs/0123456789ab/images/..", "/v1/runs/ABCDEF/notebook",
                     "/v1/nothing", "/"):
            st, raw, _ = s.curl(path)
            check(st == 404 and json.loads(raw)["kind"] == "not_found", "%s: %d %r" % (path, st, raw))
        st, raw, head = s.curl("/v1/runs", method="GET")
        check(st == 405 and "POST" in head, "GET /v1/runs: %d" % st)
        st, raw, head = s.curl("/v1/health", method="DELETE", token=None)
        check(st == 405, "DELETE health: %d" % st)
        # A real run, then traversal from inside it.
        st, doc = s.json("/v1/runs", {"code": "open('/mnt/data/x.txt', 'w').write('x')"})
        check(st == 200, "run: %d %r" % (st, doc))
        rid = doc["run_id"]
        for path in ("/files/../result.json", "/files/%2e%2e/result.json", "/files/../../../token",
                     "/images/../notebook.ipynb", "/files/", "/files/./x.txt"):
            st, raw, _ = s.curl("/v1/runs/" + rid + path)
            check(st == 404, "%s: %d %r" % (path, st, raw[:100]))
        st, raw, _ = s.curl("/v1/runs/%s/files/x.txt" % rid)
        check(st == 200 and raw == b"x", "x.txt: %d" % st)
        m = s.metrics()
        check(sum(v for k, v in m.items() if k.startswith("nbrun_runs_total")) == 1, m)
    finally:
        s.stop()


def case_sigterm():
    s = Server()
    marker = "NBRUN_TEST_MARK=%d-%d" % (os.getpid(), time.time_ns())
    k, v = marker.split("=")
    curl = None
    try:
        args = ["curl", "-sS", "--unix-socket", s.sock, "-o", os.path.join(s.tmp, "slow"), "-w",
                "%{http_code}", "-H", "Authorization: Bearer " + s.token, "--data-binary",
                json.dumps({"code": "import time; time.sleep(30)", "env": {k: v}}),
                "http://localhost/v1/runs"]
        curl = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        run_label = None
        deadline = time.time() + 60
        while time.time() < deadline and not run_label:
            f = urllib.parse.quote(json.dumps({"label": ["nbrun.run"]}))
            for c in engine("/containers/json?filters=" + f):
                info = engine("/containers/%s/json" % c["Id"])
                if marker in (info["Config"].get("Env") or []):
                    run_label = info["Config"]["Labels"]["nbrun.run"]
            time.sleep(0.3)
        check(run_label, "the run's container never started")
        time.sleep(1)
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        try:
            rc = s.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("serve still running 20 s after SIGTERM")
        took = time.time() - t0
        check(rc == 0, "serve exit %d: %s" % (rc, s.stderr()))
        check(took < 15, "took %.1f s to stop" % took)
        out, _ = curl.communicate(timeout=30)
        check(out == "503", "the cancelled request got %r" % out)
        check(not os.path.exists(s.sock), "socket file left")
        no_run_left(run_label)
        check(os.listdir(os.path.join(s.state, "runs")) == [], "pending run directory left")
    finally:
        if curl and curl.poll() is None:
            curl.kill()
        s.stop()


# ---- the warm pool ------------------------------------------------------------

# What differs between two runs of the same code, whatever served them.
VOLATILE = ("run_id", "out_dir", "notebook", "duration_ms", "warm")


def comparable(doc):
    d = {k: v for k, v in doc.items() if k not in VOLATILE}
    d["images"] = [{k: v for k, v in i.items() if k not in ("url", "content_base64", "bytes")}
                   for i in d["images"]]
    d["files"] = [{k: v for k, v in f.items() if k != "url"} for f in d["files"]]
    # The kernel sends what a cell prints in chunks of its flush timer: where
    # one chunk ends is timing, not a difference between two sandboxes.
    outs = []
    for o in d["outputs"]:
        if (o.get("type") == "stream" and outs and outs[-1].get("type") == "stream" and
                outs[-1]["cell"] == o["cell"] and outs[-1]["name"] == o["name"]):
            outs[-1] = dict(outs[-1], text=outs[-1]["text"] + o["text"])
        else:
            outs.append(o)
    d["outputs"] = outs
    return d


HARDENING = r"""
import os, socket, errno
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("uid", st["Uid"].split()[0], "eff", st["CapEff"].strip(), "bnd", st["CapBnd"].strip(),
      "nnp", st["NoNewPrivs"].strip(), "seccomp", st["Seccomp"].strip())
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2); print("net yes")
except OSError:
    print("net no")
try:
    os.unshare(os.CLONE_NEWUSER); print("unshare yes")
except (OSError, AttributeError):
    print("unshare no")
try:
    open("/etc/probe", "w"); print("rootfs writable")
except OSError:
    print("rootfs read-only")
"""

# What makes a sandbox locked down, as the engine reports it.
def policy(run_id):
    f = urllib.parse.quote(json.dumps({"label": ["nbrun.run=%s" % run_id]}))
    cs = engine("/containers/json?all=1&filters=" + f)
    check(len(cs) == 1, "container of %s: %r" % (run_id, cs))
    info = engine("/containers/%s/json" % cs[0]["Id"])
    hc = info["HostConfig"]
    return {k: hc.get(k) for k in ("CapDrop", "CapAdd", "SecurityOpt", "ReadonlyRootfs", "NetworkMode",
                                   "Memory", "MemorySwap", "PidsLimit", "NanoCpus", "Init",
                                   "IpcMode", "Ulimits", "Tmpfs", "Privileged")} | {
        "User": info["Config"]["User"], "NetworkDisabled": info["Config"].get("NetworkDisabled")}


def case_pool_warm():
    s = Server(pool=2)
    try:
        health = s.wait_pool(2)
        check(health["pool"]["size"] == 2, health)
        code = ("print('warm or cold')\n" + CHART +
                "open('/mnt/data/out.csv', 'w').write('a,b\\n1,2\\n')\n" + "# %%\n" + HARDENING +
                "# %%\n1/0\n")
        # A run that fits the pool takes a warm sandbox; one with an env starts its own.
        st, warm = s.json("/v1/runs", {"code": code})
        check(st == 200 and warm.get("warm") is True, "not a pool hit: %d %r" % (st, warm.get("warm")))
        validate(warm)
        st, cold = s.json("/v1/runs", {"code": code, "env": {"UNUSED": "1"}})
        check(st == 200 and "warm" not in cold, "not a cold run: %d %r" % (st, cold.get("warm")))
        check(comparable(warm) == comparable(cold),
              "warm and cold results differ:\n%r\n%r" % (comparable(warm), comparable(cold)))
        out = warm["stdout"]
        check("uid 1000 eff 0000000000000000 bnd 0000000000000000 nnp 1 seccomp 2" in out and
              "net no" in out and "unshare no" in out and "rootfs read-only" in out,
              "the warm sandbox is not locked down: %r" % out)
        check(warm["status"] == "error" and warm["error"]["name"] == "ZeroDivisionError", warm["error"])
        check([f["path"] for f in warm["files"]] == ["files/out.csv"], warm["files"])
        m = s.metrics()
        check(m["nbrun_pool_hits_total"] == 1 and m["nbrun_pool_misses_total"] == 1, m)
        # The engine's view: the same policy for a pool sandbox and a cold one (both
        # already removed: look at a fresh pair, held by slow runs).
        slow = {"code": "import time; time.sleep(8)"}
        s.wait_pool(2)
        procs = []
        for extra in ({}, {"env": {"UNUSED": "1"}}):
            body = os.path.join(s.tmp, "slow%d" % len(procs))
            with open(body + ".req", "w") as f:
                json.dump(dict(slow, **extra), f)
            procs.append(subprocess.Popen(["curl", "-sS", "--unix-socket", s.sock, "-o", body, "-H",
                                           "Authorization: Bearer " + s.token, "--data-binary",
                                           "@" + body + ".req", "http://localhost/v1/runs"]))
        time.sleep(4)
        running = {}
        f = urllib.parse.quote(json.dumps({"label": ["nbrun.pid=%d" % s.proc.pid]}))
        for c in engine("/containers/json?filters=" + f):
            running[c["Labels"]["nbrun.run"]] = policy(c["Labels"]["nbrun.run"])
        for p in procs:
            p.wait(timeout=120)
        pols = list(running.values())
        check(len(pols) >= 3, "expected the two runs and the refilled pool: %r" % list(running))
        for pol in pols[1:]:
            check(pol == pols[0], "sandboxes differ in policy:\n%r\n%r" % (pols[0], pol))
        # Each sandbox served one run and is gone after it (removed in the background).
        for run in (warm, cold):
            deadline = time.time() + 20
            while leftovers(run["run_id"]) and time.time() < deadline:
                time.sleep(0.2)
            no_run_left(run["run_id"])
    finally:
        s.stop()


def case_pool_sigterm():
    s = Server(pool=2)
    try:
        s.wait_pool(2)
        label = "nbrun.pid=%d" % s.proc.pid
        check(len(leftovers(label=label)) >= 2, "the pool's sandboxes are not labelled: %r" %
              leftovers(label=label))
        st, doc = s.json("/v1/runs", {"code": "print(1)"})
        check(st == 200 and doc.get("warm") is True, doc)
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(timeout=60)
        check(rc == 0, "serve exit %d: %s" % (rc, s.stderr()))
        left = leftovers(label=label)
        check(not left, "a stopped server left: %r" % left)
    finally:
        s.stop()


def run_files(state, run_id):
    """{name: bytes} of a kept run's regular files, for comparing before and after."""
    top = os.path.join(state, "runs", run_id)
    out = {}
    for d, _, names in os.walk(top):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), top)] = f.read()
    return out


def case_pool_sigkill():
    # SIGKILL mid-load: a pool sandbox (ready or starting), three runs
    # executing, an open session, and a finished run on disk. The next server on the same
    # state directory reclaims every container and volume of the killed one
    # and still serves the finished run as it was.
    s = Server(pool=1, extra=["--timeout", "600s"])
    curls = []
    try:
        pid = s.proc.pid
        label = "nbrun.pid=%d" % pid
        st, done = s.json("/v1/runs", {"code": "print(6*7)\n" + CHART})
        check(st == 200 and done["status"] == "ok" and done["stdout"] == "42\n", done)
        kept = run_files(s.state, done["run_id"])
        check({"result.json", "notebook.ipynb"} <= set(kept) and any(k.startswith("images/") for k in kept),
              "the finished run's files: %r" % sorted(kept))
        st, sess = s.json("/v1/sessions", {})
        check(st == 201, "session: %d %r" % (st, sess))
        for _ in range(3):
            curls.append(subprocess.Popen(
                ["curl", "-sS", "--unix-socket", s.sock, "-o", "/dev/null", "-w", "%{http_code}",
                 "-H", "Authorization: Bearer " + s.token, "--data-binary",
                 json.dumps({"code": "import time; time.sleep(300)"}), "http://localhost/v1/runs"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        # Killed once the three runs' containers run beside the session's.
        deadline = time.time() + 120
        f = urllib.parse.quote(json.dumps({"label": [label], "status": ["running"]}))
        while time.time() < deadline and len(engine("/containers/json?filters=" + f)) < 4:
            time.sleep(0.3)
        st, health = s.json("/v1/health", token=None)
        check(health["runs_active"] == 3, "runs executing: %r" % health)
        check(len(engine("/containers/json?filters=" + f)) >= 4, "the runs never started: %r" % leftovers(label=label))
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(timeout=30)
        left = leftovers(label=label)
        check(len(left) >= 8, "a container and a volume each for 3 runs and a session: %r" % left)
        for c in curls:
            out, _ = c.communicate(timeout=30)
            check(out != "200", "a run answered 200 from a killed server")
    finally:
        for c in curls:
            if c.poll() is None:
                c.kill()
        s.stop()
    # The next server, on the same state directory and without a pool, has
    # reclaimed what the killed one left by the time it listens.
    s2 = Server(pool=0, state=s.state, extra=["--timeout", "300s"])
    try:
        check(not leftovers(label=label),
              "a restarted server left the killed one's sandboxes: %r" % leftovers(label=label))
        # (It says so, unless another nbrun of this host swept them first:
        # every cold run removes the dead's leftovers.)
        check(("removed" in s2.stderr() and "of killed runs" in s2.stderr()) or
              "removed" not in s2.stderr(), s2.stderr())
        check(run_files(s.state, done["run_id"]) == kept, "the finished run's files changed")
        st, again = s2.json("/v1/runs/" + done["run_id"])
        check(st == 200 and comparable(again) == comparable(done) and again["run_id"] == done["run_id"],
              "the finished run after a restart: %d %r" % (st, again))
        runs = os.listdir(os.path.join(s.state, "runs"))
        check(runs == [done["run_id"]], "the killed runs' directories are left: %r" % runs)
        st, doc = s2.json("/v1/runs", {"code": "print(7)"})
        check(st == 200 and doc["status"] == "ok", "a run after the restart: %d %r" % (st, doc))
    finally:
        s2.proc.send_signal(signal.SIGTERM)
        s2.proc.wait(timeout=60)
        s2.stop()
    check(not leftovers(label="nbrun.pid=%d" % s2.proc.pid), "the second server left sandboxes")


def case_engine_down():
    # No engine at start: one line naming the socket, exit 4, nothing made
    # (neither the listening socket nor a token), with and without a pool.
    tmp = tempfile.mkdtemp(prefix="nbrun-serve-")
    env = dict(os.environ, DOCKER_HOST="unix://" + os.path.join(tmp, "no-engine.sock"))
    for pool in ("0", "2"):
        sock = os.path.join(tmp, "s.sock")
        p = subprocess.run([NBRUN, "serve", "--socket", sock, "--state-dir", os.path.join(tmp, "st"),
                            "--pool", pool], env=env, capture_output=True, text=True, timeout=60)
        check(p.returncode == 4, "pool %s: exit %d (want 4): %s" % (pool, p.returncode, p.stderr))
        check(p.stderr.startswith("nbrun: error: ") and p.stderr.count("\n") == 1 and
              "no-engine.sock" in p.stderr and "not running" in p.stderr, "pool %s: %r" % (pool, p.stderr))
        check(not os.path.exists(sock) and not os.path.exists(os.path.join(tmp, "st", "token")),
              "pool %s: a refused start made its socket or token" % pool)


def case_disk_full():
    # The state directory on a 2 MiB tmpfs, then filled: a run that cannot
    # keep its outputs is answered 507 with a JSON message, never a
    # hang or a broken document; every result.json on disk still parses, the
    # run kept before is served as it was, and once there is room again the
    # same server runs again.
    mnt = tempfile.mkdtemp(prefix="nbrun-small-")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt], capture_output=True, text=True)
    check(p.returncode == 0, "cannot mount a small tmpfs (the suite runs as root): %s" % p.stderr)
    s = None
    try:
        s = Server(state=os.path.join(mnt, "state"), extra=["--timeout", "300s"])
        st, first = s.json("/v1/runs", {"code": "print(1)"})
        check(st == 200 and first["status"] == "ok", "before the disk filled: %d %r" % (st, first))
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        for code in ("print(2)", CHART + "print(3)"):
            st, doc = s.json("/v1/runs", {"code": code})
            check(st == 507 and doc.get("kind") == "storage", "a full state disk answered %d: %r" % (st, doc))
            check(isinstance(doc.get("error"), str) and doc["error"] and "\n" not in doc["error"] and
                  doc.get("kind"), "no one-line message: %r" % doc)
        runs = os.path.join(s.state, "runs")
        for d, _, names in os.walk(runs):
            for n in names:
                check(not n.endswith(".tmp"), "a temporary file left: %s" % os.path.join(d, n))
                if n == "result.json":
                    with open(os.path.join(d, n)) as f:
                        try:
                            json.load(f)
                        except ValueError:
                            fail("a corrupt result file: %s" % os.path.join(d, n))
        st, again = s.json("/v1/runs/" + first["run_id"])
        check(st == 200 and again["stdout"] == "1\n", "the kept run: %d %r" % (st, again))
        os.unlink(os.path.join(mnt, "filler"))
        st, doc = s.json("/v1/runs", {"code": "print(4)"})
        check(st == 200 and doc["status"] == "ok" and doc["stdout"] == "4\n",
              "with room again: %d %r" % (st, doc))
        s.proc.send_signal(signal.SIGTERM)
        check(s.proc.wait(timeout=60) == 0, "serve exit: %s" % s.stderr())
        check(not leftovers(label="nbrun.pid=%d" % s.proc.pid), "sandboxes left")
    finally:
        if s:
            s.stop()
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


class EngineCreates:
    """The containers the engine creates for server pid from now on, as its event
    stream says them (a stream: the engine keeps only its last 256 events for a
    query after the fact, and other tests make many)."""

    def __init__(self, pid):
        import http.client
        import threading
        self.ids = []
        f = urllib.parse.quote(json.dumps({"type": ["container"], "event": ["create"],
                                           "label": ["nbrun.pid=%d" % pid]}))
        self.conn = http.client.HTTPConnection("localhost")
        self.conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.sock.connect("/var/run/docker.sock")
        self.conn.request("GET", "/events?filters=" + f)
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200, "engine events: %d" % self.resp.status)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        try:
            for line in self.resp:
                if line.strip():
                    self.ids.append(json.loads(line)["id"])
        except (OSError, ValueError):
            pass

    def count(self):
        time.sleep(2)  # an event may trail the reply that the run made
        return len(set(self.ids))


def case_idempotency_key():
    """A key sent again answers its run's result: one run, one container; per tenant."""
    tmp = tempfile.mkdtemp(prefix="nbrun-idem-")
    tokens = ["idem-first-" + os.urandom(16).hex(), "idem-second-" + os.urandom(16).hex()]
    with open(os.path.join(tmp, "tokens"), "w") as f:
        f.write("\n".join(tokens) + "\n")
    # A loaded machine may take minutes for a run: a deadline no run here meets by accident.
    s = Server(extra=["--token-file", os.path.join(tmp, "tokens"), "--timeout", "10m"])
    s.token = tokens[0]
    made = EngineCreates(s.proc.pid)
    rand = {"code": "import random; print(random.random())"}
    key = ["-H", "Idempotency-Key: nb-1:" + os.urandom(8).hex()]
    try:
        st, a = s.json("/v1/runs", rand, extra=key)
        check(st == 200 and a["status"] == "ok", "first: %d %r" % (st, a))
        st, b = s.json("/v1/runs", rand, extra=key)
        check(st == 200 and b["run_id"] == a["run_id"] and b["stdout"] == a["stdout"],
              "again: %d %r, first %r" % (st, b, a))
        validate(b)
        # As a stream: the result document is the only line.
        st, raw, head = s.curl("/v1/runs", rand, extra=key + ["-H", "Accept: application/x-ndjson"])
        lines = raw.decode().splitlines()
        check(st == 200 and len(lines) == 1 and json.loads(lines[0])["run_id"] == a["run_id"],
              "stream again: %d %r" % (st, raw[:300]))
        m = s.metrics()
        check(m['nbrun_runs_total{status="ok"}'] == 1, "ran more than once: %r" % m)
        # Bad keys: 400, one line of JSON, nothing run.
        for bad in ("a b", "k" * 129, "k" * 200, "caf\u00e9", "a\tb", "x;y"):
            st, raw, _ = s.curl("/v1/runs", rand, extra=["-H", "Idempotency-Key: " + bad])
            doc = json.loads(raw)
            check(st == 400 and doc["kind"] == "request" and "Idempotency-Key" in doc["error"] and
                  "\n" not in doc["error"], "key %r: %d %r" % (bad, st, raw))
        st, doc = s.json("/v1/runs", rand, extra=["-H", "Idempotency-Key: " + "k" * 128])
        check(st == 200 and doc["status"] == "ok", "a 128-character key: %d %r" % (st, doc))
        # The same key with another body is refused, not answered with the other run.
        st, doc = s.json("/v1/runs", {"code": "print(2)"}, extra=key)
        check(st == 422 and doc["kind"] == "request", "another body: %d %r" % (st, doc))
        # Another tenant's same key is another key: it runs, and reads nothing of the first's.
        st, c = s.json("/v1/runs", rand, extra=key, token=tokens[1])
        check(st == 200 and c["run_id"] != a["run_id"] and c["stdout"] != a["stdout"],
              "second tenant: %d %r" % (st, c))
        st, _ = s.json("/v1/runs/" + a["run_id"], token=tokens[1])
        check(st == 404, "second tenant reads the first's run: %d" % st)
        # A second request while the first runs waits for it and gets its result.
        slow = {"code": "import random, time\ntime.sleep(3)\nprint(random.random())"}
        skey = ["-H", "Idempotency-Key: slow-" + os.urandom(8).hex()]
        first = subprocess.Popen(["curl", "-sS", "--unix-socket", s.sock, "-H", "Authorization: Bearer " + tokens[0],
                                  "-H", "Content-Type: application/json", "--max-time", "300",
                                  "--data-binary", json.dumps(slow)] + skey + ["http://localhost/v1/runs"],
                                 stdout=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while s.json("/v1/health", token=None)[1]["runs_active"] < 1:
            check(time.time() < deadline and first.poll() is None, "the slow run did not start")
            time.sleep(0.1)
        st, raw, _ = s.curl("/v1/runs", slow, extra=skey + ["-H", "Accept: application/x-ndjson"])
        out, _ = first.communicate(timeout=300)
        f, lines = json.loads(out), raw.decode().splitlines()
        w = json.loads(lines[-1])
        check(f["status"] == "ok" and len(lines) == 1 and w["run_id"] == f["run_id"] and
              w["stdout"] == f["stdout"], "waiter: %d %r, first %r" % (st, raw[:300], f))
        # A run that failed (the kernel died: nothing completed) is run again.
        die = {"code": "import os\nos._exit(3)"}
        dkey = ["-H", "Idempotency-Key: die-" + os.urandom(8).hex()]
        st, d1 = s.json("/v1/runs", die, extra=dkey)
        st2, d2 = s.json("/v1/runs", die, extra=dkey)
        check(st == st2 == 200 and d1["status"] == d2["status"] == "failed" and d1["run_id"] != d2["run_id"],
              "failed, again: %r %r" % (d1, d2))
        m = s.metrics()
        check(m['nbrun_runs_total{status="ok"}'] == 4 and m['nbrun_runs_total{status="failed"}'] == 2,
              "runs: %r" % m)
        # The engine agrees: one container per run, none for an answer from a key.
        n = made.count()
        check(n == 6, "containers created: %d, want 6" % n)
    finally:
        s.stop()
    return "a key's run answered 3 times from 1 container; 6 bad keys 400; the key from another tenant ran apart; a waiter got the running run's result"


def case_usage():
    tmp = tempfile.mkdtemp()
    port = free_port()
    for args, word in ((["--listen", "0.0.0.0:%d" % port], "loopback"),
                       (["--listen", "nonsense"], "HOST:PORT"),
                       (["-f", "/etc/hostname"], "-f"),
                       (["--socket", os.path.join(tmp, "s"), "--listen", "127.0.0.1:1"], "not both"),
                       (["--pool", "-1"], "--pool"),
                       (["--max-runs", "0"], "--max-runs"),
                       (["--retention", "0"], "--retention"),
                       (["--timeout", "0"], "--timeout"),
                       (["extra"], "unexpected")):
        p = subprocess.run([NBRUN, "serve", "--state-dir", os.path.join(tmp, "st")] + args,
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2, "%r: exit %d %s" % (args, p.returncode, p.stderr))
        check(p.stderr.startswith("nbrun: error: ") and word in p.stderr, "%r: %r" % (args, p.stderr))
    check(not os.path.exists(os.path.join(tmp, "st", "token")), "a refused start made a token")
    # A non-loopback address is fine with a token file (port 0: no real port taken for long).
    tok = os.path.join(tmp, "tok")
    with open(tok, "w") as f:
        f.write("a-long-enough-token-0123456789\n")
    s = Server(extra=["--token-file", tok])
    try:
        s.token = "a-long-enough-token-0123456789"
        check(not os.path.exists(os.path.join(s.state, "token")), "token written despite --token-file")
        st, _, _ = s.curl("/metrics")
        check(st == 200, "token file's token refused: %d" % st)
    finally:
        s.stop()
    p = subprocess.run([NBRUN, "serve", "--help"], capture_output=True, text=True)
    check(p.returncode == 0 and "--token-file" in p.stdout and "64 MiB" in p.stdout, "serve --help")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: serve_cases.py CASE\ncases: " + " ".join(sorted(CASES)))
        sys.exit(2)
    CASES[sys.argv[1]]()
    print("ok", sys.argv[1])
