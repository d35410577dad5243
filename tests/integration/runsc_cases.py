#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Integration tests of --runtime runsc (gVisor) against the real engine and image.

Usage: runsc_cases.py CASE   (one meson test per case; see meson.build)

scripts/setup registers runsc with the engine. Each case asserts that the
run really went through gVisor: the result document says "runtime": "runsc",
the engine reports HostConfig.Runtime runsc for the sandbox, and the code
itself sees gVisor's kernel (its fixed /proc/version), not the host's.
A cold sandbox under gVisor's ptrace platform starts slowly on a loaded
machine: the runs get a generous --timeout, and no timing is asserted.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
SCHEMA = os.path.join(SRCDIR, "schemas", "result.schema.json")
# gVisor's kernel says this in /proc/version (pkg/sentry/kernel/version.go).
GVISOR_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"
RUN_TIMEOUT = "300s"

# What the code reports about the kernel it runs on, and a chart and a file.
PROBE = r"""
import os
print("release", os.uname().release)
print("version", open("/proc/version").read().strip())
print(1)
# %%
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9])
plt.show()
# %%
open("/mnt/data/out.csv", "w").write("a,b\n1,2\n")
"""


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def validate(doc):
    import jsonschema
    with open(SCHEMA) as f:
        jsonschema.Draft202012Validator(json.load(f)).validate(doc)


class _UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def request(sock, path, method="GET", body=None, token=None, timeout=30):
    c = _UnixConn(sock, timeout)
    headers = {"Authorization": "Bearer " + token} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def engine(path):
    return request("/var/run/docker.sock", path)


def host_version():
    with open("/proc/version") as f:
        return f.read().strip()


def leftovers(label):
    f = urllib.parse.quote(json.dumps({"label": [label]}))
    _, cs = engine("/containers/json?all=1&filters=" + f)
    _, vs = engine("/volumes?filters=" + f)
    return [c["Names"] for c in cs] + [v["Name"] for v in (vs or {}).get("Volumes") or []]


def check_gvisor_output(doc):
    """The code saw gVisor's kernel, not the host's."""
    lines = dict(l.split(" ", 1) for l in doc["stdout"].splitlines() if " " in l)
    check(lines.get("release") == "4.4.0", "not gVisor's release: %r" % doc["stdout"])
    check(GVISOR_VERSION in lines.get("version", "") and lines["version"] != host_version(),
          "the code saw another kernel: %r (host %r)" % (lines.get("version"), host_version()))


def check_probe_result(doc, out):
    validate(doc)
    check(doc["status"] == "ok", "status %r: %r" % (doc["status"], doc["message"]))
    check(doc.get("runtime") == "runsc", "the document does not say runsc: %r" % doc.get("runtime"))
    check_gvisor_output(doc)
    check("\n1\n" in doc["stdout"], "no print(1): %r" % doc["stdout"])
    check(len(doc["images"]) == 1 and doc["images"][0]["mime"] == "image/png", doc["images"])
    png = os.path.join(out, doc["images"][0]["path"])
    with open(png, "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "the chart is not a PNG")
    check([f["path"] for f in doc["files"]] == ["files/out.csv"], doc["files"])
    with open(os.path.join(out, "files", "out.csv")) as f:
        check(f.read() == "a,b\n1,2\n", "out.csv differs")


# ---- cases ------------------------------------------------------------------------

def case_run():
    """print(1), a chart and a file under runsc; the engine ran it with runsc."""
    tmp = tempfile.mkdtemp(prefix="nbrun-runsc-")
    out = os.path.join(tmp, "o")
    # A second process watches the engine for the run's container while it runs.
    p = subprocess.Popen([NBRUN, "run", "--json", "--runtime", "runsc", "--timeout", RUN_TIMEOUT,
                          "-o", out, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, pids = set(), set()
    while p.poll() is None:
        f = urllib.parse.quote(json.dumps({"label": ["nbrun.pid=%d" % p.pid]}))
        _, cs = engine("/containers/json?filters=" + f)
        for c in cs or []:
            st, info = engine("/containers/%s/json" % c["Id"])
            if st == 200:
                hc = info["HostConfig"]
                seen.add(hc.get("Runtime"))
                nproc = [(u["Soft"], u["Hard"]) for u in hc.get("Ulimits") or [] if u["Name"] == "nproc"]
                pids.add((hc.get("PidsLimit"), tuple(nproc)))
        time.sleep(0.5)
    so, se = p.communicate()
    check(p.returncode == 0, "exit %d: %s %s" % (p.returncode, so[-500:], se[-500:]))
    doc = json.loads(so)
    check_probe_result(doc, out)
    check(seen == {"runsc"}, "the engine showed runtimes %r for the run's container" % seen)
    # --pids (256 by default) is gVisor's RLIMIT_NPROC; the engine's limit counts
    # gVisor's own host threads too and is only a backstop: (256 + 64) * 8.
    check(pids == {(2560, ((256, 256),))}, "pids limit and nproc of the run's container: %r" % pids)
    check(not leftovers("nbrun.run=" + doc["run_id"]), "left on the engine: %r" %
          leftovers("nbrun.run=" + doc["run_id"]))
    return "print, chart and file under gVisor (kernel %s), the engine said runsc" % GVISOR_VERSION


def case_usage():
    """An unknown runtime and runsc with a network: exit 2, one line, nothing made."""
    tmp = tempfile.mkdtemp(prefix="nbrun-runsc-")
    out = os.path.join(tmp, "o")
    p = subprocess.run([NBRUN, "run", "--runtime", "nosuch", "-o", out, "-c", "print(1)"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 2, "unknown runtime: exit %d %r" % (p.returncode, p.stderr))
    check(p.stderr.count("\n") == 1 and p.stderr.startswith("nbrun: error: runtime 'nosuch' is not registered") and
          "runc" in p.stderr and "runsc" in p.stderr,
          "not one line naming the engine's runtimes: %r" % p.stderr)
    check(not os.path.exists(out), "an output directory was made for a usage error")
    p = subprocess.run([NBRUN, "run", "--runtime", "runsc", "--network", "bridge", "-c", "print(1)"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 2 and "--network none only" in p.stderr, "runsc with a bridge: exit %d %r" %
          (p.returncode, p.stderr))
    for bad in ("", "run sc", "a/b", "x" * 65):
        p = subprocess.run([NBRUN, "run", "--runtime", bad, "-c", "print(1)"], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 2 and "not a runtime name" in p.stderr, "--runtime %r: exit %d %r" %
              (bad, p.returncode, p.stderr))
    # A server's runtime is the server's to set.
    p = subprocess.run([NBRUN, "run", "--server", "unix:/nonexistent.sock", "--runtime", "runsc", "-c", "1"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--runtime" in p.stderr, "--server --runtime: exit %d %r" %
          (p.returncode, p.stderr))
    # nbrun serve refuses to start a pool under a runtime the engine lacks.
    state = os.path.join(tmp, "state")
    p = subprocess.run([NBRUN, "serve", "--pool", "1", "--runtime", "nosuch", "--socket",
                        os.path.join(tmp, "s.sock"), "--state-dir", state], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode != 0 and "runtime 'nosuch' is not registered" in p.stderr,
          "serve with an unknown runtime: exit %d %r" % (p.returncode, p.stderr))
    return "unknown runtime and runsc with a bridge refused with exit 2, serve refused to start"


def case_serve_warm():
    """nbrun serve --runtime runsc: a run leases a warm pool sandbox that runs under gVisor."""
    tmp = tempfile.mkdtemp(prefix="nbrun-runsc-")
    sock, state = os.path.join(tmp, "s.sock"), os.path.join(tmp, "state")
    log = open(os.path.join(tmp, "serve.log"), "w+")
    proc = subprocess.Popen([NBRUN, "serve", "--pool", "1", "--runtime", "runsc", "--timeout", RUN_TIMEOUT,
                             "--socket", sock, "--state-dir", state], stdout=log, stderr=subprocess.STDOUT)

    def serve_log():
        log.flush()
        with open(log.name) as f:
            return f.read()[-2000:]
    try:
        deadline = time.time() + 600
        health = None
        while time.time() < deadline:
            check(proc.poll() is None, "serve exited %r: %s" % (proc.returncode, serve_log()))
            if os.path.exists(sock):
                try:
                    _, health = request(sock, "/v1/health")
                except OSError:
                    health = None
                if health and health["pool"]["ready"] >= 1:
                    break
            time.sleep(1)
        else:
            fail("the pool never got a ready sandbox: %r\n%s" % (health, serve_log()))
        f = urllib.parse.quote(json.dumps({"label": ["nbrun.pid=%d" % proc.pid]}))
        _, cs = engine("/containers/json?filters=" + f)
        check(len(cs) == 1, "expected one pool sandbox: %r" % cs)
        ready = cs[0]["Labels"]["nbrun.run"]
        _, info = engine("/containers/%s/json" % cs[0]["Id"])
        check(info["HostConfig"].get("Runtime") == "runsc", "pool sandbox runtime %r" %
              info["HostConfig"].get("Runtime"))
        with open(os.path.join(state, "token")) as f:
            token = f.read().strip()
        st, doc = request(sock, "/v1/runs", "POST", {"code": PROBE}, token=token, timeout=400)
        check(st == 200, "POST /v1/runs: %d %r" % (st, doc))
        validate(doc)
        check(doc.get("warm") is True and doc["run_id"] == ready,
              "not the warm pool sandbox: warm %r, run %s, pool %s" % (doc.get("warm"), doc["run_id"], ready))
        check(doc["status"] == "ok" and doc.get("runtime") == "runsc", "status %r runtime %r: %r" %
              (doc["status"], doc.get("runtime"), doc["message"]))
        check_gvisor_output(doc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    check(proc.returncode == 0, "serve did not stop cleanly: %r %s" % (proc.returncode, serve_log()))
    deadline = time.time() + 30
    while leftovers("nbrun.pid=%d" % proc.pid) and time.time() < deadline:
        time.sleep(0.5)
    check(not leftovers("nbrun.pid=%d" % proc.pid), "left on the engine: %r" % leftovers("nbrun.pid=%d" % proc.pid))
    return "a warm run from the pool of nbrun serve --runtime runsc ran under gVisor"


CASES = {"run": case_run, "usage": case_usage, "serve_warm": case_serve_warm}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: runsc_cases.py CASE\ncases: " + " ".join(CASES))
        sys.exit(2)
    print("held %s: %s" % (sys.argv[1], CASES[sys.argv[1]]()))
