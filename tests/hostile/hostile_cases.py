#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Hostile code and faults: proof that the sandbox holds.

Usage: hostile_cases.py [--warm] CASE   (one meson test per case; see meson.build)

Every case runs `nbrun run --json` against the real engine and image with
small limits, then asserts the safe outcome: on the result document, on the
files written on the host (lstat walks, never following links), on nbrun's
own memory (max RSS of the child), on host processes (pgrep for a marker
unique to the case) and on the engine (nothing labelled with the run's id or
nbrun's pid is left). The last line of a passing case is
"held <case>: <what held>"; a failing one prints "FAIL: ..." and exits 1.

NBRUN_RUNTIME=NAME (e.g. runsc) runs every case under that OCI runtime
(`--runtime NAME` on each run, and on the servers under --warm): every result
document must then name it as its "runtime", and a warm pool sandbox must
show it as its HostConfig.Runtime, or the case fails.

--warm runs a sandbox case (WARM_CASES) through the warm path instead: one
`nbrun serve --pool 1` per distinct set of limits the case uses (started with
those limits), each run sent with `nbrun run --server` once the pool is ready.
Before each run the ready pool sandbox's policy is read from the engine
(capabilities, seccomp, no-new-privileges, read-only root, no network, the
case's memory/pids/cpus); the run must say "warm": true and must have leased
that sandbox, or the case fails (a warm case that ran cold proves nothing).
Checks on nbrun's own process apply to the server (its VmHWM, its nbrun.pid
label); the pool removes a used sandbox in the background, so "nothing left"
allows WARM_GONE_S seconds. Every server is stopped with SIGTERM at the end
and must leave nothing labelled with its pid.
"""
import concurrent.futures
import ctypes
import datetime
import errno
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
SOCK = "/var/run/docker.sock"

def _sanitized():
    try:
        with open(NBRUN, "rb") as f:
            return b"libasan.so" in f.read()
    except OSError:
        return False


# Bound on nbrun's own memory, whatever the code does: 600 MiB, times 1.5 in
# an ASan build (redzones and quarantine roughly double small allocations).
SANITIZED = _sanitized()
MAX_RSS_KB = 600 * 1024 * (3 if SANITIZED else 2) // 2
MARK = "hostile-%s" % uuid.uuid4().hex[:12]  # unique per case, for pgrep -f
KEEP = []                    # temp dirs removed when the case holds
WARM = None                  # the Warm harness under --warm (see the warm path below)
WARM_GONE_S = 10.0           # a used pool sandbox is removed in the background: allow this
RUNTIME = os.environ.get("NBRUN_RUNTIME") or None   # every run under this OCI runtime
# gVisor's ptrace platform starts a sandbox several times slower than runc, far
# more on a loaded machine: under a runtime a run without a --timeout of its own
# gets RUNTIME_TIMEOUT, and the harness waits RUNTIME_SCALE times longer for nbrun.
RUNTIME_TIMEOUT = "300s"
RUNTIME_SCALE = 4 if RUNTIME else 1
# The --timeout of a run also covers its sandbox's start. A case whose code
# must finish gives it room(s): s seconds, plus RUNTIME_START_S under a runtime
# (NBRUN_RUNTIME_START_S, default 240: gVisor's start at load 15-40). Cases
# that expect the timeout itself keep their own short deadline.
RUNTIME_START_S = int(os.environ.get("NBRUN_RUNTIME_START_S") or 240) if RUNTIME else 0


def room(secs):
    return "%ds" % (secs + RUNTIME_START_S)


def fail(msg):
    print("FAIL:", msg)
    sys.stdout.flush()
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def note(msg):
    print("  " + msg)
    sys.stdout.flush()


# ---- running nbrun -------------------------------------------------------------

class Run:
    """One finished nbrun process: exit code, document, output dir, stderr, max RSS."""

    def __init__(self, rc, stdout, stderr, out, rss_kb, elapsed, pid):
        self.rc, self.stderr, self.out, self.rss_kb = rc, stderr, out, rss_kb
        self.elapsed, self.pid = elapsed, pid
        self.server, self.server_hwm_kb = None, 0     # under --warm: the server that ran it
        self.doc = None
        if stdout.strip():
            try:
                self.doc = json.loads(stdout)
            except ValueError:
                fail("stdout is not JSON: %r (stderr %r)" % (stdout[:300], stderr[:300]))

    def __repr__(self):
        d = self.doc or {}
        return "exit %d, status %r, message %r, stderr %r" % (
            self.rc, d.get("status"), d.get("message"), self.stderr[-300:])


def tmpdir(prefix="nbrun-hostile-"):
    d = tempfile.mkdtemp(prefix=prefix)
    KEEP.append(d)
    return d


def start(args, env=None, out=None, json_out=True):
    """Start nbrun run; returns (Popen, out dir, stdout file, stderr file).

    Under --warm the run goes to the case's `nbrun serve --pool 1` for its
    limits, once a pool sandbox is ready (and its policy checked)."""
    out = out or os.path.join(tmpdir(), "o")
    so = tempfile.TemporaryFile()
    se = tempfile.TemporaryFile()
    server, ready = None, None
    if RUNTIME:
        args = ["--runtime", RUNTIME] + ([] if "--timeout" in args else ["--timeout", RUNTIME_TIMEOUT]) + args
    if WARM:
        server, args = WARM.server_for(args, env)
        ready = server.ready_sandbox()
        args = ["--server", server.url, "--token-file", server.token_file] + args
    cmd = [NBRUN, "run", "-q"] + (["--json"] if json_out else []) + ["-o", out] + args
    p = subprocess.Popen(cmd, stdout=so, stderr=se, env=env, stdin=subprocess.DEVNULL)
    p.hostile_t0 = time.monotonic()
    p.hostile_server, p.hostile_ready = server, ready
    return p, out, so, se


def owner_pid(p):
    """The pid whose nbrun.pid label the run's containers carry: nbrun's, or the server's."""
    return p.hostile_server.proc.pid if getattr(p, "hostile_server", None) else p.pid


def gone_within(cold_s):
    """How long "nothing left" may take: the pool removes a used sandbox in the background."""
    return max(cold_s, WARM_GONE_S) if WARM else cold_s


def finish_proc(p, out, so, se, timeout):
    """Wait for the process with wait4 (to get its own max RSS), killing it past timeout."""
    timeout *= RUNTIME_SCALE
    timer = threading.Timer(timeout, lambda: p.kill())
    timer.start()
    try:
        while True:
            try:
                _, status, ru = os.wait4(p.pid, 0)
                break
            except InterruptedError:
                continue
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - p.hostile_t0
    so.seek(0)
    se.seek(0)
    r = Run(p.returncode, so.read().decode("utf-8", "replace"), se.read().decode("utf-8", "replace"),
            out, ru.ru_maxrss, elapsed, p.pid)
    so.close()
    se.close()
    if p.returncode == -signal.SIGKILL and elapsed >= timeout:
        fail("nbrun hung: killed after %d s (%r)" % (timeout, r))
    r.server = p.hostile_server
    if RUNTIME and r.doc is not None:
        check(r.doc.get("runtime") == RUNTIME, "the run did not say it ran under %s (\"runtime\": %r): %r" %
              (RUNTIME, r.doc.get("runtime"), r))
    if r.server:
        r.server_hwm_kb = r.server.hwm_kb()
        check(r.doc is not None, "warm: no result document from the server: %r\n%s" % (r, r.server.log_tail()))
        check(r.doc.get("warm") is True, "warm: the run did not come from the pool (\"warm\": %r), so it "
              "proves nothing about a warm sandbox: %r\n%s" % (r.doc.get("warm"), r, r.server.log_tail()))
        check(r.doc["run_id"] == p.hostile_ready, "warm: the run leased %s, not the pool sandbox %s whose "
              "policy was checked" % (r.doc["run_id"], p.hostile_ready))
        r.server.used.append(r.doc["run_id"])
    return r


def nbrun(args, env=None, timeout=120, out=None):
    p, out, so, se = start(args, env=env, out=out)
    return finish_proc(p, out, so, se, timeout)


def code_run(code, *opts, env=None, timeout=120):
    return nbrun(list(opts) + ["-c", code], env=env, timeout=timeout)


def validate(doc):
    try:
        import jsonschema
    except ImportError:
        return
    path = os.path.join(SRCDIR, "schemas", "result.schema.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        jsonschema.Draft202012Validator(json.load(f)).validate(doc)


def check_result(r, rss=True):
    """What holds for every run that produced a document."""
    check(r.doc is not None, "no result document: %r" % (r,))
    validate(r.doc)
    check(r.doc["out_dir"] == r.out, "out_dir %r != %r" % (r.doc["out_dir"], r.out))
    if r.doc["status"] in ("timeout", "oom", "failed"):
        check(r.doc["message"], "status %s without a message" % r.doc["status"])
    if rss:
        check(r.rss_kb < MAX_RSS_KB, "nbrun used %d MiB of host memory (bound %d MiB)" %
              (r.rss_kb // 1024, MAX_RSS_KB // 1024))
        if r.server:
            check(r.server_hwm_kb < MAX_RSS_KB, "nbrun serve used %d MiB of host memory (bound %d MiB)" %
                  (r.server_hwm_kb // 1024, MAX_RSS_KB // 1024))
    check_out_dir_safe(r.out)
    check_gone(run_id=r.doc["run_id"], pid=r.pid)
    if r.server:
        r.server.check_only_pool()


# ---- the engine, straight over its socket ------------------------------------

class _UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path_)


def engine(path, method="GET", timeout=30):
    c = _UnixConn(SOCK, timeout)
    try:
        c.request(method, path)
        r = c.getresponse()
        body = r.read()
        return r.status, (json.loads(body) if body.strip() and body[:1] in b"[{" else body)
    finally:
        c.close()


def engine_up():
    try:
        return engine("/_ping", timeout=3)[0] == 200
    except OSError:
        return False


def labelled(label):
    """Containers (name, state) and volumes carrying label (k=v or k)."""
    f = urllib.parse.quote(json.dumps({"label": [label]}))
    _, cs = engine("/containers/json?all=1&filters=" + f)
    _, vs = engine("/volumes?filters=" + f)
    return ([(c["Names"][0], c["State"]) for c in cs],
            [v["Name"] for v in (vs.get("Volumes") or [])])


def leftovers(run_id=None, pid=None):
    found = []
    if run_id:
        cs, vs = labelled("nbrun.run=%s" % run_id)
        found += [c[0] for c in cs] + vs
    if pid:
        cs, vs = labelled("nbrun.pid=%d" % pid)
        found += [c[0] for c in cs if c[0] not in found] + [v for v in vs if v not in found]
    return found


def check_gone(run_id=None, pid=None, within=2.0):
    """Nothing the run created is left on the engine (allowing `within` seconds;
    at least WARM_GONE_S under --warm)."""
    within = gone_within(within)
    t0 = time.monotonic()
    deadline = t0 + within
    while True:
        left = leftovers(run_id, pid)
        if not left:
            if WARM and run_id:
                note("run %s: its sandbox was gone %.1f s after the run" % (run_id, time.monotonic() - t0))
            return
        if time.monotonic() > deadline:
            fail("left behind on the engine: %r" % left)
        time.sleep(0.2)


def created_since(t0, pid):
    """Engine events (container/volume create) for objects labelled with nbrun's pid since t0."""
    f = urllib.parse.quote(json.dumps({"label": ["nbrun.pid=%d" % pid]}))
    c = _UnixConn(SOCK, 10)
    try:
        c.request("GET", "/events?since=%d&until=%d&filters=%s" % (int(t0) - 1, int(time.time()) + 1, f))
        body = c.getresponse().read().decode()
    finally:
        c.close()
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def wait_container(pid, timeout=60, settle=0.0):
    """Wait until the run of nbrun process pid has a running container; returns its name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cs, _ = labelled("nbrun.pid=%d" % pid)
        running = [c for c in cs if c[1] == "running"]
        if running:
            time.sleep(settle)
            return running[0][0].lstrip("/")
        time.sleep(0.1)
    fail("no running container for nbrun pid %d within %d s" % (pid, timeout))


def pgrep(marker):
    p = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    own = {str(os.getpid())}
    return [x for x in p.stdout.split() if x not in own]


def check_no_process(marker, within=3.0):
    deadline = time.monotonic() + gone_within(within)
    while pgrep(marker):
        if time.monotonic() > deadline:
            ps = subprocess.run(["ps", "-o", "pid,user,cmd", "-p", ",".join(pgrep(marker))],
                                capture_output=True, text=True).stdout
            fail("processes with marker %s survive on the host:\n%s" % (marker, ps))
        time.sleep(0.2)


class Watch(threading.Thread):
    """Poll fn() every interval while a run goes on; keeps every value."""

    def __init__(self, fn, interval=0.2):
        super().__init__(daemon=True)
        self.fn, self.interval, self.values, self.stop = fn, interval, [], threading.Event()
        self.start()

    def run(self):
        while not self.stop.is_set():
            try:
                self.values.append(self.fn())
            except Exception as e:  # keep watching; the value records the failure
                self.values.append(e)
            self.stop.wait(self.interval)

    def done(self):
        self.stop.set()
        self.join()
        return self.values


# ---- the output directory ---------------------------------------------------------

def walk_lstat(top):
    """Every entry below top, by lstat, never following anything."""
    out = []
    stack = [top]
    while stack:
        d = stack.pop()
        for name in os.listdir(d):
            p = os.path.join(d, name)
            st = os.lstat(p)
            out.append((p, st))
            if stat.S_ISDIR(st.st_mode):
                stack.append(p)
    return out


def check_out_dir_safe(out):
    """Only regular files and directories, no setuid/setgid/sticky, no group/world write."""
    if not os.path.isdir(out):
        return
    top = os.path.realpath(out)
    for p, st in walk_lstat(out):
        m = st.st_mode
        check(stat.S_ISREG(m) or stat.S_ISDIR(m), "%s is not a regular file or directory (mode %o)" % (p, m))
        check(not m & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), "%s has mode %o" % (p, m))
        check(not m & (stat.S_IWGRP | stat.S_IWOTH), "%s is group/world writable (%o)" % (p, m))
        check(os.path.realpath(p).startswith(top + "/"), "%s resolves outside %s" % (p, top))
        if stat.S_ISREG(m):
            check(st.st_nlink == 1, "%s has %d links" % (p, st.st_nlink))


def du(path):
    return sum(st.st_size for _, st in walk_lstat(path) if stat.S_ISREG(st.st_mode)) if os.path.isdir(path) else 0


def inside(r):
    """The JSON line the code printed last (cases print their findings as JSON)."""
    lines = [l for l in r.doc["stdout"].splitlines() if l.startswith("{")]
    check(lines, "the code printed no findings: stdout %r, error %r" % (r.doc["stdout"][-500:], r.doc["error"]))
    return json.loads(lines[-1])


# ---- a fake engine, to see what nbrun sends -----------------------------------------

class FakeEngine:
    """A unix socket that plays an engine: 'ping' (answers /_ping, 404 to the rest),
    'hang' (accepts, never answers), 'garbage' (not HTTP), 'http500'."""

    def __init__(self, mode, mode_bits=None):
        self.dir = tmpdir("nbrun-fake-")
        os.chmod(self.dir, 0o755)
        self.path = os.path.join(self.dir, "docker.sock")
        self.mode = mode
        self.connections = 0
        self.requests = []
        self.held = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        if mode_bits is not None:
            os.chmod(self.path, mode_bits)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(c,), daemon=True).start()

    def _read_request(self, c, buf):
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return None, b""
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        m = re.search(rb"(?i)content-length:\s*(\d+)", head)
        need = int(m.group(1)) if m else 0
        while len(rest) < need:
            d = c.recv(65536)
            if not d:
                break
            rest += d
        return head.split(b"\r\n")[0].decode("latin-1"), rest[need:]

    def _handle(self, c):
        try:
            if self.mode == "hang":
                self.held.append(c)
                return
            if self.mode == "garbage":
                c.recv(65536)
                c.sendall(b"\x00\xff\xfe garbage, not HTTP\r\n\r\n\x1b[2J")
                c.close()
                return
            buf = b""
            while True:
                line, buf = self._read_request(c, buf)
                if line is None:
                    break
                self.requests.append(line)
                if self.mode == "http500":
                    body = b'{"message":"fake engine failure"}'
                    c.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                elif line.startswith("GET /_ping"):
                    c.sendall(b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Length: 2\r\n\r\nOK")
                else:
                    body = b'{"message":"fake engine: not here"}'
                    c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass
        finally:
            if self.mode != "hang":
                c.close()

    def writes(self):
        return [r for r in self.requests if not r.startswith(("GET ", "HEAD "))]

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def one_line_error(r, what):
    check(r.stderr.startswith("nbrun: error: ") and r.stderr.count("\n") == 1,
          "%s: stderr is not one 'nbrun: error:' line: %r" % (what, r.stderr))


# ---- the warm path: nbrun serve --pool 1 --------------------------------------------

# Options of `nbrun run` that are the server's to set (refused with --server):
# they go on `nbrun serve`. --timeout goes on both, so that the server's
# default cell timeout (the timeout less 4 s) is the cold run's too.
SERVER_OPTS = ("--memory", "--pids", "--cpus", "--disk", "--cell-timeout", "--network", "--image",
               "--max-output", "--runtime")
# The sandbox cases: their threat is the code inside the container. The others
# are about nbrun's own process (signals, engine faults, options, its parser of
# a tampered notebook, 50 at once, limits too small to start a pool sandbox).
WARM_CASES = ("fork_bomb", "memory_bomb", "busy_loop", "sigterm_ignored", "cpu_hog", "output_flood",
              "display_flood", "huge_image", "disk_fill", "many_files", "network", "host_secrets",
              "privileges", "ptrace", "persistence", "background_process", "kernel_killed",
              "export_entries", "mount_point", "channel_forgery", "log_line")


def size_bytes(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgKMG]?)[bB]?", text)
    check(m, "cannot read size %r" % text)
    return int(float(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()])


def _prctl_pdeathsig():
    # The server gets SIGTERM (and cleans up) if the harness dies without stopping it.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


class WarmServer:
    """nbrun serve --pool 1 on a unix socket, with one case's limits."""

    POOL = 1

    def __init__(self, limits, env):
        self.limits = dict(limits)
        self.dir = tmpdir("nbrun-hostile-serve-")
        self.state = os.path.join(self.dir, "state")
        self.sock = os.path.join(self.dir, "s.sock")
        self.url = "unix:" + self.sock
        self.token_file = os.path.join(self.state, "token")
        self.used = []                          # run ids this server's runs leased
        self.log = open(os.path.join(self.dir, "serve.log"), "w+")
        args = [NBRUN, "serve", "--socket", self.sock, "--state-dir", self.state, "--pool", str(self.POOL)]
        for k, v in limits:
            args += [k, v]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, preexec_fn=_prctl_pdeathsig)
        deadline = time.monotonic() + 30
        while "nbrun: serve: state in" not in self.log_tail():
            if self.proc.poll() is not None:
                fail("nbrun serve %s exited %d: %s" % (" ".join(args[2:]), self.proc.returncode, self.log_tail()))
            if time.monotonic() > deadline:
                fail("nbrun serve did not start within 30 s: %s" % self.log_tail())
            time.sleep(0.05)
        check(os.path.exists(self.token_file), "no token in %s" % self.state)
        self.waited = []                        # seconds spent waiting for a ready sandbox, per run
        note("serve pid %d, pool %d, limits %s" % (self.proc.pid, self.POOL,
                                                    " ".join("%s %s" % kv for kv in limits) or "defaults"))

    def log_tail(self, n=3000):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()[-n:]

    def health(self):
        c = _UnixConn(self.sock, 10)
        try:
            c.request("GET", "/v1/health")
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            c.close()

    def hwm_kb(self):
        """The server's peak resident memory so far (VmHWM)."""
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
        except (OSError, StopIteration):
            return 0

    def ready_sandbox(self, within=120):
        """Wait until the pool has a ready sandbox; check its policy; return its run id."""
        t0 = time.monotonic()
        health = None
        while time.monotonic() - t0 < within:
            check(self.proc.poll() is None, "nbrun serve exited %r: %s" % (self.proc.returncode, self.log_tail()))
            try:
                st, health = self.health()
            except (OSError, ValueError) as e:
                st, health = 0, repr(e)
            if st == 200 and health["pool"]["ready"] >= 1:
                break
            time.sleep(0.2)
        else:
            fail("the pool had no ready sandbox within %d s: %r\n%s" % (within, health, self.log_tail()))
        check(health["pool"]["size"] == self.POOL, "health: %r" % health)
        self.waited.append(time.monotonic() - t0)
        cs, _ = labelled("nbrun.pid=%d" % self.proc.pid)
        ready = [c[0].lstrip("/") for c in cs if c[1] == "running" and
                 c[0].lstrip("/").replace("nbrun-", "", 1) not in self.used]
        check(len(ready) == self.POOL, "want %d ready pool sandbox, the engine shows %r (used: %r)" %
              (self.POOL, cs, self.used))
        for name in ready:
            self.check_policy(name)
        _, info = engine("/containers/%s/json" % ready[0])
        return info["Config"]["Labels"]["nbrun.run"]

    def check_policy(self, name):
        """The engine's view of a pool sandbox: the hardening and the case's limits."""
        st, info = engine("/containers/%s/json" % name)
        check(st == 200, "inspect %s: %d" % (name, st))
        hc, cfg = info["HostConfig"], info["Config"]
        mem = size_bytes(self.limits.get("--memory", "1g"))
        pids = int(self.limits.get("--pids", "256"))
        # Under gVisor --pids is the sandbox's RLIMIT_NPROC and the host's limit a
        # backstop for gVisor's own threads (sandbox-docker.c, dsb_gvisor_pids).
        want = {"Memory": mem, "MemorySwap": mem, "PidsLimit": (pids + 64) * 8 if RUNTIME == "runsc" else pids,
                "NanoCpus": int(round(float(self.limits.get("--cpus", "1")) * 1e9)),
                "NetworkMode": self.limits.get("--network", "none"), "ReadonlyRootfs": True,
                "Privileged": False, "CapDrop": ["ALL"], "Init": True, "IpcMode": "private"}
        if RUNTIME:
            want["Runtime"] = RUNTIME
        got = {k: hc.get(k) for k in want}
        check(got == want, "pool sandbox %s: policy %r, want %r" % (name, got, want))
        check(set(hc.get("CapAdd") or []) <= {"SETUID", "SETGID", "SETPCAP"}, "CapAdd %r" % hc.get("CapAdd"))
        check(not hc.get("Devices") and not hc.get("Binds") and not hc.get("PidMode") and
              hc.get("UsernsMode") in ("", None), "pool sandbox %s shares host resources: %r" % (
                  name, {k: hc.get(k) for k in ("Devices", "Binds", "PidMode", "UsernsMode")}))
        opts = hc.get("SecurityOpt") or []
        seccomp = [o for o in opts if o.startswith("seccomp=")]
        check("no-new-privileges" in opts and seccomp and "unconfined" not in seccomp[0] and
              "ptrace" in seccomp[0] and "unshare" in seccomp[0], "pool sandbox %s: SecurityOpt %r" %
              (name, [o[:120] for o in opts]))
        if want["NetworkMode"] == "none":
            check(cfg.get("NetworkDisabled") is True, "pool sandbox %s: network enabled" % name)
        nofile = [u for u in hc.get("Ulimits") or [] if u["Name"] == "nofile"]
        check(nofile and nofile[0]["Hard"] <= 4096, "pool sandbox %s: ulimits %r" % (name, hc.get("Ulimits")))
        if RUNTIME == "runsc":
            nproc = [u for u in hc.get("Ulimits") or [] if u["Name"] == "nproc"]
            check(nproc and nproc[0]["Hard"] == nproc[0]["Soft"] == pids, "pool sandbox %s: no nproc limit of %d "
                  "under gVisor: %r" % (name, pids, hc.get("Ulimits")))
        check(not cfg.get("Env") or not any(e.startswith(("HOSTILE_CANARY=", "AWS_")) for e in cfg["Env"]),
              "pool sandbox %s: host variables in its Env: %r" % (name, cfg["Env"]))

    def check_only_pool(self, within=None):
        """After a run, the server keeps nothing on the engine but its pool (within a few seconds)."""
        within = within or WARM_GONE_S
        deadline = time.monotonic() + within
        while True:
            cs, _ = labelled("nbrun.pid=%d" % self.proc.pid)
            extra = [c for c in cs if c[0].lstrip("/").replace("nbrun-", "", 1) in self.used]
            if not extra and len(cs) <= self.POOL:
                return
            if time.monotonic() > deadline:
                fail("%.0f s after its run, nbrun serve (pool %d) has %r on the engine (used: %r)" %
                     (within, self.POOL, cs, self.used))
            time.sleep(0.2)

    def stop(self):
        """SIGTERM; returns what is wrong (an exit status, anything left with the server's label)."""
        problems = []
        self.peak_kb = self.hwm_kb()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                problems.append("nbrun serve still running 60 s after SIGTERM")
                self.proc.kill()
                self.proc.wait()
        if self.proc.returncode != 0:
            problems.append("nbrun serve exited %d: %s" % (self.proc.returncode, self.log_tail(1500)))
        left = leftovers(pid=self.proc.pid)
        if left:
            problems.append("a stopped nbrun serve left %r" % left)
        self.log.close()
        return problems


class Warm:
    """The case's servers, one per distinct set of limits (and environment)."""

    def __init__(self):
        self.servers = {}

    def server_for(self, args, env):
        """Split nbrun run arguments into the server's limits and the client's; returns (server, client args)."""
        limits, client, i = {}, [], 0
        while i < len(args):
            a = args[i]
            if a in SERVER_OPTS or a == "--timeout":
                check(i + 1 < len(args), "%s without a value" % a)
                limits[a] = args[i + 1]
                if a == "--timeout":
                    client += args[i:i + 2]
                i += 2
                continue
            check(a not in ("-e", "--env"), "warm: -e makes a run cold (a pool sandbox starts before its run)")
            client.append(a)
            i += 1
        key = (tuple(sorted(limits.items())), tuple(sorted(env.items())) if env else None)
        if key not in self.servers:
            self.servers[key] = WarmServer(key[0], env)
        return self.servers[key], client

    def stop_all(self):
        problems = []
        for srv in self.servers.values():
            waited = ", ".join("%.1f" % w for w in srv.waited)
            problems += srv.stop()
            note("serve pid %d: %d warm run(s), waited %s s for a ready sandbox; peak RSS %d MiB; stopped" % (
                srv.proc.pid, len(srv.used), waited or "-", srv.peak_kb // 1024))
        return problems


# =============================================================================
# cases
# =============================================================================

def case_fork_bomb():
    code = r'''
import errno, json, os, time
kids, err = [], None
for i in range(100000):
    try:
        pid = os.fork()
    except OSError as e:
        err = e
        break
    if pid == 0:
        try:
            os.execv("/bin/sh", ["sh", "-c", "sleep 4; : %s"])
        finally:
            os._exit(0)
    kids.append(pid)
# gVisor shows no pids cgroup: there --pids is its kernel's RLIMIT_NPROC for the code's uid.
import resource
pids_max = "nproc %%d" %% resource.getrlimit(resource.RLIMIT_NPROC)[0]
for path in ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"):
    if os.path.exists(path):
        pids_max = open(path).read().strip()
        break
for k in kids:
    os.waitpid(k, 0)
print(json.dumps({"forked": len(kids), "error": type(err).__name__, "errno": err and err.errno,
                  "eagain": errno.EAGAIN, "pids_max": pids_max}))
''' % MARK
    before = len([p for p in os.listdir("/proc") if p.isdigit()])
    host_forks = Watch(lambda: subprocess.run(["/bin/true"]).returncode, 0.1)
    r = code_run(code, "--pids", "64", "--timeout", room(40))
    forks = host_forks.done()
    after = len([p for p in os.listdir("/proc") if p.isdigit()])
    check(r.rc == 0 and r.doc["status"] == "ok", "run did not end normally: %r" % (r,))
    f = inside(r)
    check(f["error"] == "BlockingIOError" and f["errno"] == f["eagain"],
          "fork failed with %s/%s, want BlockingIOError/EAGAIN" % (f["error"], f["errno"]))
    check(f["pids_max"] == ("nproc 64" if RUNTIME == "runsc" else "64"), "pids.max is %r" % f["pids_max"])
    check(0 < f["forked"] < 64, "forked %d processes under a 64 limit" % f["forked"])
    check(forks and all(x == 0 for x in forks), "the host could not fork during the bomb: %r" % forks[:20])
    check_result(r)
    check_no_process(MARK)
    note("forked %d, then EAGAIN; host forked %d times meanwhile; host processes %d -> %d"
         % (f["forked"], len(forks), before, after))
    return "fork bomb stopped at --pids with EAGAIN inside; host kept forking"


def case_memory_bomb():
    # A pool sandbox imports numpy, pandas and matplotlib before its run: under
    # 128m that kernel is OOM-killed and the pool never has one ready, so warm
    # the bomb goes off under 256m (the same limit enforcement).
    mem = "256m" if WARM else "128m"
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))\n"
    r = code_run(code, "--memory", mem, "--timeout", room(40))
    check(r.rc == 3 and r.doc["status"] == "oom", "want exit 3/oom: %r" % (r,))
    check_result(r)
    # Memory held in the sandbox's tmpfs counts against the same limit.
    code = ("import os\nfd = os.open('/tmp/fill', os.O_CREAT | os.O_WRONLY)\n"
            "while True:\n    os.write(fd, b'x' * (1 << 20))\n")
    r2 = code_run(code, "--memory", mem, "--timeout", room(40))
    check(r2.rc in (1, 3, 5) and r2.doc["status"] in ("oom", "error", "failed"),
          "tmpfs memory bomb: %r" % (r2,))
    if r2.doc["status"] == "error":
        check(r2.doc["error"]["value"].startswith("[Errno 28]"), "tmpfs bomb error %r" % r2.doc["error"])
    check_result(r2)
    note("heap bomb: %s in %d ms; tmpfs bomb: %s (%s)" % (
        r.doc["status"], r.doc["duration_ms"], r2.doc["status"], r2.doc["message"] or r2.doc["error"]["value"]))
    return "memory bomb ends as status oom (exit 3); tmpfs writes are charged to the same limit"


def case_busy_loop():
    code = ("import subprocess\nsubprocess.Popen(['sh', '-c', 'while :; do :; done; : %s'])\n"
            "while True:\n    pass\n" % MARK)
    r = code_run(code, "--timeout", "10s", "--cell-timeout", "10s")
    check(r.rc == 3 and r.doc["status"] == "timeout", "want exit 3/timeout: %r" % (r,))
    check("deadline" in r.doc["message"], r.doc["message"])
    check(10000 <= r.doc["duration_ms"] <= 25000, "ended after %d ms for a 10 s deadline" % r.doc["duration_ms"])
    check(r.elapsed < 30, "nbrun took %.1f s" % r.elapsed)
    check_gone(run_id=r.doc["run_id"], pid=r.pid, within=0.5)
    check_result(r)
    check_no_process(MARK)
    return "while True: pass ends as status timeout at the deadline; container and processes gone at exit"


def case_sigterm_ignored():
    code = r'''
import signal, subprocess, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
subprocess.Popen(["sh", "-c", "trap '' TERM INT HUP; while :; do sleep 1; done; : %s"])
print("ignoring", flush=True)
while True:
    try:
        time.sleep(1)
    except KeyboardInterrupt:
        pass
''' % MARK
    r = code_run(code, "--timeout", "12s")
    check(r.rc == 3 and r.doc["status"] == "timeout", "want exit 3/timeout: %r" % (r,))
    check(r.doc["duration_ms"] <= 12000 + 15000, "ended after %d ms for a 12 s deadline" % r.doc["duration_ms"])
    check_gone(run_id=r.doc["run_id"], pid=r.pid, within=0.5)
    check_result(r)
    check_no_process(MARK)
    return "code ignoring SIGTERM/SIGINT/SIGHUP is still killed at the deadline"


def case_output_flood():
    # 1000 x 1 MB lines: ~1 GB through the kernel's stdout.
    code = "s = 'x' * 1000000\nfor i in range(1000):\n    print(s)\n"
    r = code_run(code, "--timeout", "40s", timeout=150)
    check(r.rc in (3, 5) and r.doc["status"] in ("oom", "timeout", "failed"),
          "a 1 GB flood should end flagged (oom/timeout/failed): %r" % (r,))
    check(len(r.doc["stdout"]) <= 2 * 20000 + 1000, "stdout kept %d bytes" % len(r.doc["stdout"]))
    check(du(r.out) < 300 << 20, "output directory holds %d bytes" % du(r.out))
    check_result(r)
    note("1 GB flood: %s (%s), nbrun max RSS %d MiB" % (r.doc["status"], r.doc["message"], r.rss_kb // 1024))
    return "1 GB of prints ends flagged (%s), nbrun stays under %d MiB" % (r.doc["status"], MAX_RSS_KB // 1024)


def case_display_flood():
    # 6 x 50 MiB display outputs: past the 256 MiB cap on the executed notebook.
    code = ("from IPython.display import display\ns = 'x' * (50 << 20)\n"
            "for i in range(6):\n    display({'text/plain': s}, raw=True)\n")
    r = code_run(code, "--timeout", "20s", "--memory", "3g", timeout=150)
    check(r.rc in (3, 5) and r.doc["status"] in ("oom", "timeout", "failed"),
          "300 MiB of outputs should end flagged: %r" % (r,))
    check(len(r.doc["stdout"]) <= 2 * 20000 + 1000, "stdout kept %d bytes" % len(r.doc["stdout"]))
    check(du(r.out) <= (256 << 20) + (1 << 20), "output directory holds %d bytes" % du(r.out))
    check_result(r)
    note("display flood: %s (%s), nbrun max RSS %d MiB" % (r.doc["status"], r.doc["message"], r.rss_kb // 1024))
    return "300 MiB of display outputs ends flagged (%s), bounded on disk and in memory" % r.doc["status"]


def case_huge_image():
    code = ("import base64, os\nfrom IPython.display import display\n"
            "raw = b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(200 << 20)\n"
            "display({'image/png': base64.b64encode(raw).decode()}, raw=True)\nprint('after')\n")
    r = code_run(code, "--timeout", "15s", "--memory", "3g", timeout=150)
    check(r.doc is not None, "no result: %r" % (r,))
    flagged = r.doc["status"] in ("oom", "timeout", "failed") or r.doc["truncated"]
    check(flagged, "a 200 MB image came back unflagged: %r" % (r,))
    imgs = os.path.join(r.out, "images")
    for p, st in walk_lstat(imgs) if os.path.isdir(imgs) else []:
        check(st.st_size <= 50 << 20, "image %s is %d bytes (cap 50 MiB)" % (p, st.st_size))
    check_result(r)
    # Just over the 50 MiB image cap, small enough to come back: skipped and flagged.
    code = ("import base64, os\nfrom IPython.display import display\n"
            "raw = b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(52 << 20)\n"
            "display({'image/png': base64.b64encode(raw).decode()}, raw=True)\nprint('after')\n")
    r2 = code_run(code, "--timeout", "40s", "--memory", "2g", timeout=150)
    check(r2.doc is not None and r2.doc["status"] in ("ok", "timeout", "oom", "failed"), "%r" % (r2,))
    if r2.doc["status"] == "ok":
        check(r2.doc["images"] == [] and r2.doc["truncated"], "a 52 MiB image was exported: %r" % r2.doc["images"])
        check(any("image" in s["reason"] or "cap" in s["reason"] or "large" in s["reason"]
                  for s in r2.doc["skipped"]) or r2.doc["truncated"], "not listed: %r" % r2.doc["skipped"])
    check_result(r2)
    note("200 MB image: %s (%s); 52 MiB image: %s, truncated %s, skipped %r" % (
        r.doc["status"], r.doc["message"], r2.doc["status"], r2.doc["truncated"], r2.doc["skipped"][:2]))
    return "a 200 MB image ends flagged (%s); one over the 50 MiB cap is skipped and flagged" % r.doc["status"]


def case_disk_fill():
    code = r'''
import json, os
def fill(path):
    n, err = 0, None
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        while True:
            n += os.write(fd, b"x" * (1 << 20))
    except OSError as e:
        err = e.errno
    os.close(fd)
    return n, err
data_n, data_err = fill("/mnt/data/fill")
os.unlink("/tmp/x") if os.path.exists("/tmp/x") else None
tmp_n, tmp_err = fill("/tmp/fill")
os.unlink("/tmp/fill")
ro = {}
for p in ("/fill", "/home/sandbox/fill", "/var/tmp/fill", "/opt/nbrun/fill", "/etc/fill", "/usr/fill"):
    try:
        open(p, "w").write("x")
        ro[p] = 0
    except OSError as e:
        ro[p] = e.errno
# A sparse file far larger than the export cap.
fd = os.open("/mnt/data/sparse", os.O_CREAT | os.O_WRONLY, 0o644)
os.truncate(fd, 8 << 30)
os.close(fd)
# The container log is on the host's disk: flood the kernel's raw stderr (fd 2).
# (The engine copies logs slowly: a bigger flood only delays this run to its deadline.)
for i in range(8):
    os.write(2, b"y" * (1 << 20) + b"\n")
mounts = {l.split()[4]: l.split(" - ")[1].split()[0] for l in open("/proc/self/mountinfo")}
print(json.dumps({"data": [data_n, data_err], "tmp": [tmp_n, tmp_err], "ro": ro, "enospc": 28,
                  "erofs": 30, "data_fs": mounts.get("/mnt/data"), "tmp_fs": mounts.get("/tmp")}))
'''
    logs = {}         # container -> (log driver, peak bytes of its log file on the host)

    def log_size():
        cs, _ = labelled("nbrun.pid=%d" % owner_pid(p))
        for name, _ in cs:
            st, info = engine("/containers/%s/json" % name.lstrip("/"))
            if st != 200:
                continue
            driver = info["HostConfig"]["LogConfig"]["Type"]
            path = info.get("LogPath")
            size = os.path.getsize(path) if path and os.path.exists(path) else 0
            logs[name] = (driver, max(size, logs.get(name, (driver, 0))[1]))
        return 0

    p, out, so, se = start(["--disk", "32m", "--timeout", room(40), "-c", code])
    w = Watch(log_size, 0.1)
    r = finish_proc(p, out, so, se, 150)
    w.done()
    check(r.doc is not None and r.doc["status"] == "ok", "%r" % (r,))
    f = inside(r)
    check(f["data"][1] == f["enospc"] and f["data"][0] <= 32 << 20,
          "/mnt/data took %d bytes, then errno %r (want ENOSPC at <= 32 MiB)" % tuple(f["data"]))
    check(f["tmp"][1] == f["enospc"] and f["tmp"][0] <= 256 << 20,
          "/tmp took %d bytes, then errno %r (want ENOSPC at <= 256 MiB)" % tuple(f["tmp"]))
    # Under gVisor the data volume (a tmpfs on the host) comes through its gofer
    # as 9p, and its kernel checks permissions before the read-only mount: a
    # directory uid 1000 may not write answers EACCES there, not EROFS.
    gvisor = RUNTIME == "runsc"
    check(f["data_fs"] == ("9p" if gvisor else "tmpfs") and f["tmp_fs"] == "tmpfs", "filesystems: %r" % f)
    check(all(e == f["erofs"] or (gvisor and e == errno.EACCES) for e in f["ro"].values()),
          "writable outside the volumes: %r" % f["ro"])
    # The engine keeps no log of the sandbox (driver none), or a bounded one.
    check(logs, "never saw the container")
    check(all(d == "none" or n <= 2 << 20 for d, n in logs.values()), "container logs on the host: %r" % logs)
    log_peak = max(n for _, n in logs.values())
    files = {x["path"]: x["bytes"] for x in r.doc["files"]}
    check(files.get("files/fill", 0) <= 32 << 20, "exported %r" % files)
    check(sum(files.values()) <= 256 << 20, "exported %d bytes" % sum(files.values()))
    check(du(r.out) <= (256 << 20) + (2 << 20), "output directory holds %d bytes" % du(r.out))
    check(r.doc["truncated"] and any(s["path"] in ("sparse", "/mnt/data") for s in r.doc["skipped"]),
          "the 8 GiB sparse file was not flagged: %r %r" % (r.doc["truncated"], r.doc["skipped"][:5]))
    check_result(r)
    note("/mnt/data ENOSPC after %d MiB, /tmp after %d MiB, log peak %d KiB, exported %r" % (
        f["data"][0] >> 20, f["tmp"][0] >> 20, log_peak >> 10, files))
    return "disk fill hits ENOSPC at --disk (tmpfs, in memory); root fs read-only; log and export bounded"


def case_many_files():
    code = ("import os\nfor i in range(100000):\n"
            "    with open('/mnt/data/f%06d' % i, 'w') as f: f.write('x')\n"
            "print(len(os.listdir('/mnt/data')))\n")
    r = code_run(code, "--timeout", room(60))
    check(r.rc == 0 and r.doc["stdout"] == "100000\n", "%r" % (r,))
    check(len(r.doc["files"]) == 1000, "%d files exported, cap 1000" % len(r.doc["files"]))
    on_disk = [p for p, st in walk_lstat(r.out) if stat.S_ISREG(st.st_mode) and "/files/" in p]
    check(len(on_disk) == 1000, "%d files on disk" % len(on_disk))
    check(r.doc["truncated"], "not flagged truncated")
    check(0 < len(r.doc["skipped"]) <= 1001, "skipped lists %d entries" % len(r.doc["skipped"]))
    check_result(r)
    return "100,000 files: 1000 exported, truncated flagged, skipped list bounded (%d)" % len(r.doc["skipped"])


def case_network():
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("0.0.0.0", 0))
    lst.listen(16)
    port = lst.getsockname()[1]
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + MARK)
    abstract.listen(4)
    accepted = []
    for s in (lst, abstract):
        threading.Thread(target=lambda s=s: accepted.append(s.accept()), daemon=True).start()
    host_ips = sorted(set(subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split())
                      | {"172.17.0.1", "127.0.0.1"})
    code = r'''
import json, os, socket
res = {}
for name in ("example.com", "deb.debian.org", "host.docker.internal", "localhost.localdomain"):
    try:
        res["dns " + name] = socket.gethostbyname(name)
    except OSError as e:
        res["dns " + name] = "fail"
for ip in %r:
    for port in (%d, 2375, 2376, 22, 80):
        s = socket.socket(); s.settimeout(2)
        try:
            s.connect((ip, port)); res["tcp %%s:%%d" %% (ip, port)] = "CONNECTED"
        except OSError as e:
            res["tcp %%s:%%d" %% (ip, port)] = "fail"
        s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
try:
    u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", ("172.17.0.1", 53))
    u.recvfrom(512); res["udp dns"] = "ANSWERED"
except OSError:
    res["udp dns"] = "fail"
for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock", "\0%s",
             "\0/containerd-shim/moby.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); res["unix " + path.replace("\0", "@")] = "CONNECTED"
    except OSError:
        res["unix " + path.replace("\0", "@")] = "fail"
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); res["raw"] = "OPENED"
except OSError:
    res["raw"] = "fail"
res["interfaces"] = sorted(os.listdir("/sys/class/net"))
print(json.dumps(res))
''' % (host_ips, port, MARK)
    r = code_run(code, "--timeout", room(60))
    lst.close()
    abstract.close()
    check(r.rc == 0, "%r" % (r,))
    f = inside(r)
    check(f.pop("interfaces") == ["lo"], "interfaces besides lo")
    bad = {k: v for k, v in f.items() if v != "fail"}
    check(not bad, "reached from the sandbox: %r" % bad)
    check(not accepted, "the host listener accepted %d connection(s)" % len(accepted))
    check_result(r)
    return "no DNS, no TCP/UDP to the host (%d addresses), no engine or abstract sockets, only lo" % len(host_ips)


def case_host_secrets():
    canary = "canary-" + uuid.uuid4().hex
    cfile = "/tmp/%s-file" % MARK
    with open(cfile, "w") as f:
        f.write(canary)
    KEEP.append(cfile)
    code = r'''
import json, os
canary = %r
res = {"env_hits": [], "proc_env_hits": [], "proc_root_hits": []}
res["env_hits"] = [k for k, v in os.environ.items() if canary in v or "HOSTILE_CANARY" in k]
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        if canary.encode() in open("/proc/%%s/environ" %% pid, "rb").read():
            res["proc_env_hits"].append(pid)
    except OSError:
        pass
    for path in ("/proc/%%s/root%%s" %% (pid, %r), "/proc/%%s/cwd/../../..%%s" %% (pid, %r)):
        try:
            if canary in open(path).read():
                res["proc_root_hits"].append(path)
        except OSError:
            pass
try:
    open(%r).read(); res["direct"] = "READ"
except OSError:
    res["direct"] = "fail"
res["sockets"] = [p for p in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
                              "/var/lib/docker", "/run/containerd", "/etc/docker", "/host", "/rootfs") if os.path.lexists(p)]
res["mounts"] = [l.split()[3:5] + [l.split()[5].split(",")[0], l.split(" - ")[1].split()[0]]
                 for l in open("/proc/self/mountinfo")]
res["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
res["procs"] = []
for p in res["pids"]:
    try:
        uid = int(open("/proc/%%d/status" %% p).read().split("Uid:")[1].split()[0])
        cmd = open("/proc/%%d/cmdline" %% p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
        res["procs"].append([p, uid, cmd[:100]])
    except (OSError, IndexError):
        pass
res["given"] = os.environ.get("GIVEN")
print(json.dumps(res))
''' % (canary, cfile, cfile, cfile)
    env = dict(os.environ, HOSTILE_CANARY=canary, AWS_SECRET_ACCESS_KEY=canary)
    # A warm sandbox starts before its run, so a run with -e is cold: warm, the
    # canary is in the server's environment (and the client's) and nothing is given.
    r = code_run(code, *([] if WARM else ["-e", "GIVEN=yes"]), env=env)
    check(r.rc == 0, "%r" % (r,))
    f = inside(r)
    check(f["given"] == (None if WARM else "yes"), "-e: GIVEN is %r in the sandbox" % f["given"])
    check(not f["env_hits"] and not f["proc_env_hits"], "host environment visible: %r" % f)
    check(not f["proc_root_hits"] and f["direct"] == "fail", "host file readable: %r" % f)
    check(not f["sockets"], "engine/host paths present: %r" % f["sockets"])
    # Only the sandbox's own processes: init and the agent as root (no capability
    # but SETUID/SETGID/SETPCAP: case channel_forgery), everything else uid 1000.
    root = [x for x in f["procs"] if x[1] != 1000]
    check(len(f["pids"]) < 30 and all(x[1] == 0 and "/opt/nbrun/nbrun-agent" in x[2] for x in root) and
          len(root) <= 2 and any(x[1] == 1000 for x in f["procs"]), "processes visible: %r" % f["procs"])
    allowed_rw = {"/app", "/mnt/data", "/tmp", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/proc",
                  "/sys/fs/cgroup", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
                  "/proc/timer_stats", "/proc/kcore"}
    cid_re = re.compile(r"^/var/lib/docker/containers/[0-9a-f]{64}/(hostname|hosts|resolv\.conf)$")
    # Under gVisor every file system from the host comes through its gofer as 9p,
    # and its mountinfo names "/" as the root of each: no host path to read. The
    # container's spec is the one runc gets (checked above by root), so there the
    # check is on what is mounted where: only the engine's own mounts (the image,
    # the run's data volume, the container's hostname/hosts/resolv.conf, its
    # init), each read-only but the data volume.
    gofer_points = {"/", "/mnt/data", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/usr/sbin/docker-init"}
    for root, point, opts, fstype in f["mounts"]:
        if RUNTIME == "runsc" and fstype == "9p":
            check(point in gofer_points, "host file system (gVisor gofer) mounted at %s" % point)
            check(opts == "ro" or point == "/mnt/data", "%s (9p from the host) is mounted read-write" % point)
            continue
        host_path = fstype not in ("proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "overlay")
        if host_path:
            check(cid_re.match(root) or root in ("/usr/bin/tini-static", "/usr/bin/docker-init")
                  or root.endswith("/docker-init"),
                  "host path %s mounted at %s" % (root, point))
        if opts != "ro":
            check(point in allowed_rw, "%s (%s from %s) is mounted read-write" % (point, fstype, root))
    check(any(m[1] == "/" and m[2] == "ro" for m in f["mounts"]), "root filesystem is not read-only")
    check_result(r)
    return "host env, engine socket, host files via /proc/*/root, host mounts: none visible"


def case_privileges():
    code = r'''
import ctypes, errno, json, os, stat
libc = ctypes.CDLL(None, use_errno=True)
res = {}
for l in open("/proc/self/status"):
    k, _, v = l.partition(":")
    if k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
        res[k] = v.strip()
# gVisor's /proc/self/status has neither line: ask its kernel (PR_GET_NO_NEW_PRIVS,
# PR_CAP_AMBIENT_IS_SET for every capability it knows; EINVAL past the last one).
if "NoNewPrivs" not in res:
    res["NoNewPrivs"] = str(libc.prctl(39, 0, 0, 0, 0))
if "CapAmb" not in res:
    amb = 0
    for cap in range(64):
        if libc.prctl(47, 1, cap, 0, 0) == 1:
            amb |= 1 << cap
    res["CapAmb"] = "%016x" % amb
res["ids"] = [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups())]
def call(name, *args):
    r = getattr(libc, name)(*args)
    return 0 if r == 0 else ctypes.get_errno()
res["mount"] = call("mount", b"none", b"/mnt/data", b"tmpfs", ctypes.c_ulong(0), None)
res["bind"] = call("mount", b"/", b"/mnt/data", None, ctypes.c_ulong(4096), None)
res["unshare_user"] = call("unshare", 0x10000000)
res["unshare_mnt"] = call("unshare", 0x00020000)
res["unshare_net"] = call("unshare", 0x40000000)
# pid 1 (init, as the agent) is not the code's: its namespaces may not even open; the code's own do.
# gVisor has no mount namespace file (only net, pid, user): then the first it has.
ns = None
for path in ["/proc/%s/ns/%s" % (p, n) for n in ("mnt", "net", "pid", "user") for p in ("1", "self")]:
    try:
        ns = os.open(path, os.O_RDONLY)
        res["setns_path"] = path
        break
    except OSError:
        pass
res["setns"] = call("setns", ns, 0) if ns is not None else "no namespace file"
res["setuid0"] = call("setuid", 0)
res["chroot"] = call("chroot", b"/tmp")
res["mknod"] = call("mknod", b"/tmp/sda", ctypes.c_uint(stat.S_IFBLK | 0o600), ctypes.c_ulong(os.makedev(8, 0)))
res["keyctl"] = call("syscall", 250, 0, 0)  # keyctl(KEYCTL_GET_KEYRING_ID, ...)
res["bpf"] = call("syscall", 321, 0, 0, 0)
res["init_module"] = call("syscall", 175, 0, 0, 0)
res["sethostname"] = call("sethostname", b"x", 1)
try:
    open("/proc/sys/kernel/hostname", "w").write("x"); res["procsys"] = 0
except OSError as e:
    res["procsys"] = e.errno
try:
    open("/sys/kernel/uevent_helper", "w").write("x"); res["sysfs"] = 0
except OSError as e:
    res["sysfs"] = e.errno
res["blockdevs"] = [n for n in os.listdir("/dev") if stat.S_ISBLK(os.lstat("/dev/" + n).st_mode)]
print(json.dumps(res))
'''
    r = code_run(code)
    check(r.rc == 0, "%r" % (r,))
    f = inside(r)
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        check(f[k] == "0000000000000000", "%s is %s" % (k, f[k]))
    check(f["NoNewPrivs"] == "1" and f["Seccomp"] == "2", "no_new_privs %s, seccomp %s" % (f["NoNewPrivs"], f["Seccomp"]))
    check(f["ids"][:4] == [1000] * 4 and 0 not in f["ids"][4], "ids %r" % f["ids"])
    denied = {k: f[k] for k in ("mount", "bind", "unshare_user", "unshare_mnt", "unshare_net", "setns",
                                "setuid0", "chroot", "mknod", "keyctl", "bpf", "init_module", "sethostname",
                                "procsys", "sysfs")}
    want = {k: {errno.EPERM} for k in denied}
    want.update(procsys={errno.EROFS, errno.EACCES}, sysfs={errno.EROFS, errno.EACCES, errno.ENOENT},
                chroot={errno.EPERM})
    wrong = {k: v for k, v in denied.items() if v not in want[k]}
    check(not wrong, "not denied as expected (errno; 0 = allowed): %r" % wrong)
    note("denied: " + ", ".join("%s=%s" % (k, errno.errorcode.get(v, v)) for k, v in denied.items()) +
         " (setns on %s)" % f["setns_path"])
    check(not f["blockdevs"], "block devices: %r" % f["blockdevs"])
    check_result(r)
    return "uid 1000, every capability 0, no_new_privs, seccomp; mount/unshare/setns/setuid/mknod/bpf denied"


def case_ptrace():
    code = r'''
import ctypes, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
res = {}
r = libc.ptrace(16, 1, None, None)          # PTRACE_ATTACH to pid 1
res["attach_pid1"] = 0 if r == 0 else ctypes.get_errno()
if r == 0:
    libc.ptrace(17, 1, None, None)          # PTRACE_DETACH
ppid = os.getppid()
r = libc.ptrace(16, ppid, None, None)       # the kernel's parent (nbconvert)
res["attach_parent"] = 0 if r == 0 else ctypes.get_errno()
if r == 0:
    time.sleep(0.1); libc.ptrace(17, ppid, None, None)
pid = os.fork()
if pid == 0:
    r = libc.ptrace(0, 0, None, None)       # PTRACE_TRACEME
    os._exit(0 if r == 0 else ctypes.get_errno())
res["traceme"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(res))
'''
    r = code_run(code)
    check(r.rc == 0, "%r" % (r,))
    f = inside(r)
    check_result(r)
    check(all(v != 0 for v in f.values()),
          "ptrace is allowed inside the sandbox (0 = allowed): %r; the engine's default seccomp profile "
          "permits ptrace on kernels >= 4.8 and there is no Yama LSM here" % f)
    return "ptrace (attach to pid 1, to nbconvert, TRACEME) denied"


def case_persistence():
    first = r'''
import os
for p in ("/tmp/persist", "/dev/shm/persist", os.path.expanduser("~/persist"), "/mnt/data/persist",
          "/app/persist", "/tmp/.ipython/persist", "/tmp/.matplotlib/persist"):
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, "w").write("%s")
        print("wrote", p)
    except OSError as e:
        print("cannot", p, e.errno)
''' % MARK
    r1 = code_run(first)
    check(r1.rc == 0 and "wrote /mnt/data/persist" in r1.doc["stdout"] and "wrote /tmp/persist" in r1.doc["stdout"],
          "%r %r" % (r1, r1.doc and r1.doc["stdout"]))
    check_result(r1)
    second = r'''
import json, os, subprocess
hits = subprocess.run(["grep", "-rlsx", "%s", "/tmp", "/dev/shm", "/mnt/data", "/app",
                       os.path.expanduser("~"), "/var/tmp", "/home"], capture_output=True, text=True).stdout.split()
print(json.dumps({"hits": hits, "data": sorted(os.listdir("/mnt/data")),
                  "app": sorted(os.listdir("/app")) if os.path.isdir("/app") else None}))
''' % MARK
    r2 = code_run(second)
    check(r2.rc == 0, "%r" % (r2,))
    f = inside(r2)
    check(not f["hits"], "files from the previous run are visible: %r" % f["hits"])
    check(f["data"] == [], "/mnt/data not empty: %r" % f["data"])
    check_result(r2)
    return "files in /tmp, /dev/shm, $HOME, /mnt/data, /app are gone in the next run"


def case_background_process():
    code = r'''
import os, subprocess, time
subprocess.Popen(["sh", "-c", "sleep 1000; : %(m)s-popen"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.system("nohup sh -c 'sleep 1000; : %(m)s-nohup' >/dev/null 2>&1 &")
if os.fork() == 0:                      # the classic daemon: fork, setsid, fork
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["sh", "-c", "trap '' HUP TERM INT; sleep 1000; : %(m)s-daemon"])
    os._exit(0)
time.sleep(2)
n = 0
for p in os.listdir("/proc"):
    try:
        n += p.isdigit() and int(p) != os.getpid() and b"%(m)s" in open("/proc/%%s/cmdline" %% p, "rb").read()
    except OSError:
        pass
print(n)
''' % {"m": MARK}
    seen = Watch(lambda: len(pgrep(MARK)), 0.2)
    r = code_run(code, "--timeout", room(30))
    values = [v for v in seen.done() if isinstance(v, int)]
    check(r.rc == 0, "%r" % (r,))
    if RUNTIME == "runsc":
        # gVisor's processes are tasks of its kernel, not the host's: the host
        # sees none (only nbrun, whose -c carries the mark). The code counts
        # them itself, and none outlives the sandbox (check_result: it is gone).
        check(r.doc["stdout"].strip() == "3", "the code did not see its 3 background processes: %r" %
              r.doc["stdout"][-300:])
    else:
        check(values and max(values) >= 3, "the host never saw the background processes (%r): the check is blind" %
              values[-5:])
    check_result(r)
    check_no_process(MARK, within=2.0)
    return "Popen(start_new_session), nohup &, double-fork daemon: none survives the run"


def case_kernel_killed():
    code = "print('cell one')\n# %%\nimport os\nos.kill(os.getpid(), 9)\n# %%\nprint('cell three')\n"
    r = code_run(code)
    check(r.rc == 5 and r.doc["status"] == "failed", "want exit 5/failed: %r" % (r,))
    check("stopped early" in r.doc["message"], "message: %r" % r.doc["message"])
    check("cell one" in r.doc["stdout"] and "cell three" not in r.doc["stdout"], "stdout %r" % r.doc["stdout"])
    check_result(r)
    return "kernel killed in cell 2: status failed ('%s...'), cell 1 output kept" % r.doc["message"][:40]


def case_export_entries():
    code = r'''
import json, os, socket, stat
D = "/mnt/data"
res = {}
os.symlink("/etc/passwd", D + "/link_passwd")
os.symlink("../../..", D + "/link_up")
os.symlink("/", D + "/link_root")
os.mkdir(D + "/sub"); os.symlink("../../../../etc/shadow", D + "/sub/link_deep")
with open(D + "/real.txt", "w") as f: f.write("real")
os.link(D + "/real.txt", D + "/hard.txt")
os.mkfifo(D + "/fifo")
with open(D + "/setuid", "w") as f: f.write("#!/bin/sh\n")
os.chmod(D + "/setuid", 0o6777)
with open(D + "/worldw", "w") as f: f.write("w")
os.chmod(D + "/worldw", 0o666)
with open(D + "/noperm", "w") as f: f.write("n")
os.chmod(D + "/noperm", 0)
os.mkdir(D + "/opendir"); os.chmod(D + "/opendir", 0o1777)
with open(D + "/opendir/in.txt", "w") as f: f.write("i")
p = D
for i in range(200):
    p += "/d"
os.makedirs(p)
with open(p + "/bottom.txt", "w") as f: f.write("deep")
with open(D + "/" + "n" * 250, "w") as f: f.write("250")
with open(D + "/" + "m" * 255, "w") as f: f.write("255")
try:
    open(D + "/" + "o" * 256, "w"); res["256"] = 0
except OSError as e:
    res["256"] = e.errno
lp = D + "/" + "/".join(["L" * 250] * 5)
os.makedirs(lp)
with open(lp + "/longpath.txt", "w") as f: f.write("long")
fd = os.open(b"/mnt/data/\xff\xfe", os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, b"x"); os.close(fd)
with open(D + "/ctrl\x1b[31m\nname", "w") as f: f.write("c")
try:
    os.mknod(D + "/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3)); res["mknod"] = 0
except OSError as e:
    res["mknod"] = e.errno
s = socket.socket(socket.AF_UNIX); s.bind(D + "/usock")
print(json.dumps(res))
'''
    parent = tmpdir()
    out = os.path.join(parent, "o")
    r = nbrun(["--timeout", room(40), "-c", code], out=out)
    check(r.doc is not None and r.doc["status"] == "ok", "%r" % (r,))
    f = inside(r)
    check(f["256"] == errno.ENAMETOOLONG and f["mknod"] == errno.EPERM, "inside: %r" % f)
    check(os.listdir(parent) == ["o"], "something was created beside the output dir: %r" % os.listdir(parent))
    check_out_dir_safe(out)
    entries = {os.path.relpath(p, out): st for p, st in walk_lstat(out)}
    exported = {os.path.relpath(p, os.path.join(out, "files")) for p, st in walk_lstat(os.path.join(out, "files"))
                if stat.S_ISREG(st.st_mode)} if os.path.isdir(os.path.join(out, "files")) else set()
    for name in ("link_passwd", "link_up", "link_root", "sub/link_deep", "fifo", "usock", "null"):
        check("files/" + name not in entries, "%s was exported" % name)
    for name in ("setuid", "worldw", "noperm", "opendir/in.txt", "n" * 250, "m" * 255):
        check(name in exported, "%s was not exported (exported: %r)" % (name, sorted(exported)[:20]))
    check(len(exported & {"real.txt", "hard.txt"}) == 1, "hard link pair exported as %r" % (exported & {"real.txt", "hard.txt"}))
    check(not any("bottom.txt" in e or "longpath" in e for e in exported), "deep/long path exported")
    check(not any(not e.isprintable() for e in entries), "a name with control characters was written")
    with open(os.path.join(out, "files", "setuid"), "rb") as fh:
        check(fh.read() == b"#!/bin/sh\n", "setuid content")
    skipped = {s["path"]: s["reason"] for s in r.doc["skipped"]}
    for name, want in (("link_passwd", "link"), ("link_up", "link"), ("link_root", "link"), ("sub/link_deep", "link"),
                       ("fifo", "regular"), ("(name not valid UTF-8)", "UTF-8")):
        check(want in skipped.get(name, ""), "%s not listed as skipped (%r); skipped: %r" %
              (name, skipped.get(name), sorted(skipped)[:12]))
    check(any("deep" in v for v in skipped.values()), "200-deep directory not listed")
    check(any("too long" in v for v in skipped.values()), "1250-byte path not listed")
    check(any("control" in v for v in skipped.values()), "control-character name not listed")
    check(any(v == "hard link" for v in skipped.values()), "hard link not listed")
    for p, st in walk_lstat(out):
        if stat.S_ISREG(st.st_mode):
            with open(p, "rb") as fh:
                check(b"root:x:0:0" not in fh.read(65536), "%s holds /etc/passwd" % p)
    check_result(r)
    return "symlinks, hard link, FIFO, socket, device, setuid, deep/long/non-UTF-8/control names: " \
           "never followed or special, modes 0644/0755, all listed in skipped"


def case_mount_point():
    code = r'''
import errno, json, os
res = {}
def attempt(name, fn, *a):
    try:
        fn(*a); res[name] = 0
    except OSError as e:
        res[name] = e.errno
attempt("rmdir", os.rmdir, "/mnt/data")
attempt("rename", os.rename, "/mnt/data", "/mnt/gone")
attempt("symlink_over", os.symlink, "/", "/mnt/data")
attempt("symlink_beside", os.symlink, "/", "/mnt/data2")
attempt("rename_app", os.rename, "/app", "/app2")
attempt("rmdir_app", os.rmdir, "/app")
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
res["umount"] = 0 if libc.umount2(b"/mnt/data", 2) == 0 else ctypes.get_errno()
with open("/mnt/data/proof.txt", "w") as f:
    f.write("from the volume")
os.chmod("/mnt/data", 0)      # the volume root is the code's: lock it
res["is_dir"] = os.path.isdir("/mnt/data") and not os.path.islink("/mnt/data")
print(json.dumps(res))
'''
    r = code_run(code)
    check(r.rc == 0 and r.doc["status"] == "ok", "%r" % (r,))
    f = inside(r)
    check(f.pop("is_dir"), "/mnt/data is no longer a directory")
    check(all(v != 0 for v in f.values()), "allowed: %r" % {k: v for k, v in f.items() if v == 0})
    check([x["path"] for x in r.doc["files"]] == ["files/proof.txt"], "exported %r" % r.doc["files"])
    with open(os.path.join(r.out, "files", "proof.txt")) as fh:
        check(fh.read() == "from the volume", "proof.txt content")
    check_result(r)
    return "/mnt/data and /app cannot be removed, renamed, replaced or unmounted; export comes from the volume"


# The code publishes outputs of its own making on the kernel's iopub socket,
# past IPython's display machinery: whatever nbclient, the agent and nbrun
# make of them must end in a clean result.
IOPUB = ("ip = get_ipython(); k = ip.kernel\n"
         "def pub(t, c):\n"
         "    k.session.send(k.iopub_socket, t, c, parent=k.get_parent('shell'))\n")


def tamper_run(variant):
    """The code sends hostile outputs through the kernel, then kills its kernel (cell 2 of 2)."""
    body = {
        "garbage": ("pub('display_data', {'data': {'image/png': '!!!not base64', 'text/plain': {'x': 1}},"
                    " 'metadata': 7})\npub('display_data', 'not a dict')"),
        "deep": ("d = []\nfor i in range(900): d = [d]\n"
                 "pub('display_data', {'data': {'application/json': d}, 'metadata': {}})"),
        "types": ("pub('stream', {'name': 5, 'text': {}})\n"
                  "pub('execute_result', {'data': [], 'execution_count': 'x', 'metadata': {}})"),
        "bad_outputs": ("pub('error', {'ename': None, 'evalue': 3, 'traceback': 'x'})\n"
                        "pub('display_data', {'data': {'image/svg+xml': ['<svg', 5], 'image/png': 7}, 'metadata': []})"),
        "unknown_msg": ("pub('nbrun_done', {'status': 'ok'})\npub('status', {'execution_state': 'idle'})\n"
                        "pub('execute_reply', {'status': 'ok'})"),
        "update_unknown": ("pub('update_display_data', {'data': {'text/plain': 'x'}, 'metadata': {},"
                           " 'transient': {'display_id': 'never-shown'}})\n"
                           "pub('update_display_data', {'data': {}, 'transient': 5})"),
        "clear_garbage": "pub('clear_output', {'wait': 'soon'})\npub('clear_output', {})",
        "huge": "pub('display_data', {'data': {'text/plain': 'a' * (270 << 20)}, 'metadata': {}})",
        "amplify_strings": "pub('display_data', {'data': {'application/json': ['a' * 58] * 4_000_000}, 'metadata': {}})",
        "amplify": "pub('display_data', {'data': {'application/json': [0] * 12_000_000}, 'metadata': {}})",
    }[variant]
    # The big ones need room in the sandbox to be made at all, and a cell
    # that ends normally so that all of it reaches nbrun (which must refuse it).
    big = variant in ("huge", "amplify_strings", "amplify")
    end = "\ntime.sleep(2)\n" if big else "\ntime.sleep(0.5)\nos.kill(os.getpid(), 9)\n"
    code = "print('cell one')\n# %%\nimport os, time\n" + IOPUB + body + end
    return code_run(code, "--timeout", room(60), *(["--memory", "3g"] if big else []), timeout=180)


def check_tampered(variants, within_caps=()):
    """Each variant fails cleanly; those in within_caps stay inside every cap
    and may succeed, with nbrun's memory bounded all the same."""
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        runs = dict(zip(variants, ex.map(tamper_run, variants)))
    for v, r in runs.items():
        check(r.doc is not None, "%s: no result: %r" % (v, r))
        if v in within_caps and r.rc == 0:
            check(r.doc["status"] == "ok" and "cell one" in r.doc["stdout"], "%s: %r" % (v, r))
            check_result(r)
            note("%-12s exit 0, ok within the caps (max RSS %d MiB)" % (v, r.rss_kb >> 10))
            continue
        check(r.rc == 5 and r.doc["status"] == "failed", "%s: want exit 5/failed: %r" % (v, r))
        check(r.doc["message"] and "\n" not in r.doc["message"], "%s: message %r" % (v, r.doc["message"]))
        nb = os.path.join(r.out, "notebook.ipynb")
        if os.path.lexists(nb):
            st = os.lstat(nb)
            check(stat.S_ISREG(st.st_mode) and st.st_size <= 256 << 20, "%s: notebook.ipynb %r" % (v, st))
            with open(nb, "rb") as fh:
                check(b"root:x:0:0" not in fh.read(4096), "%s: /etc/passwd came back" % v)
        check_result(r)
        note("%-12s exit %d, %s: %s (max RSS %d MiB)" % (v, r.rc, r.doc["status"], r.doc["message"], r.rss_kb >> 10))
    return runs


def case_notebook_malformed():
    check_tampered(["garbage", "deep", "types", "bad_outputs"])
    return "garbage, 900-deep, mistyped and bad outputs sent through the kernel: status failed with one clear line"


def case_notebook_special():
    check_tampered(["unknown_msg", "update_unknown", "clear_garbage", "huge"])
    return "forged replies and statuses, updates and clears of nothing, a 270 MB output: failed cleanly, bounded"


def case_notebook_amplification():
    runs = check_tampered(["amplify", "amplify_strings"], within_caps=("amplify_strings",))
    return "12M tiny values (24 MB) and 4M short strings (248 MB) as outputs: nbrun peaks at %d and %d MiB (bound %d MiB%s)" % (
        runs["amplify"].rss_kb >> 10, runs["amplify_strings"].rss_kb >> 10, MAX_RSS_KB >> 10,
        ", ASan build" if SANITIZED else "")


# A forged "done" frame of the live channel (environments/jupyter/PROTOCOL.md).
FORGED_DONE = r"""
import json, struct
def frame(kind, payload):
    return b"NB\x01" + kind + struct.pack(">I", len(payload)) + payload
def forged():
    meta = b"{}"
    done = json.dumps({"type": "done", "id": "run", "status": "ok", "oom_kills": 0,
                       "message": "", "blob": len(meta)}).encode()
    return frame(b"J", done) + frame(b"D", meta) + frame(b"E", b"")
"""


def case_channel_forgery():
    # The code tries every way into the channel that carries its result: the
    # init's and the agent's stdin and stdout, its own stdout, signals to
    # them. None may open; the status must come from what really ran.
    code = FORGED_DONE + r"""
import os, errno
opened = []
pids = [p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())]
for pid in pids:
    for fd in ("0", "1", "2"):
        path = "/proc/%s/fd/%s" % (pid, fd)
        try:
            with open(path, "wb", buffering=0) as f:
                f.write(forged())
            opened.append(path)
        except OSError as e:
            pass
readable = []
for pid in pids:
    try:
        with open("/proc/%s/fd/0" % pid, "rb", buffering=0) as f:
            readable.append(pid)
    except OSError:
        pass
signalled = []
for pid in pids:
    try:
        os.kill(int(pid), 0)
        signalled.append(pid)
    except OSError:
        pass
others = {}
for pid in pids:
    try:
        st = open("/proc/%s/status" % pid).read()
        uid = [l.split()[1] for l in st.splitlines() if l.startswith("Uid:")][0]
        others[pid] = uid
    except (OSError, IndexError):
        pass
# One write per line: the kernel forwards what reaches its own fd 1 (the
# forgeries below) as output too, and it may land between two writes.
print("OPENED %r" % (opened,))
print("READABLE %r" % (readable,))
print("SIGNALLED %r" % ([p for p in signalled if others.get(p) != "1000"],))
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
# gVisor's /proc/self/status has no NoNewPrivs line: the kernel says it (PR_GET_NO_NEW_PRIVS).
import ctypes
nnp = status["NoNewPrivs"].strip() if "NoNewPrivs" in status else str(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))
print("SELF %r %s %s %s %s" % (status["Uid"].split(), status["CapEff"].strip(), status["CapBnd"].strip(),
      status["CapPrm"].strip(), nnp))
print("ROOTS %r" % (sorted(set(others.values())),))
import sys
sys.stdout.flush()
for path in ("/dev/stdout", "/dev/stderr", "/proc/self/fd/1", "/proc/self/fd/2"):
    try:
        with open(path, "wb", buffering=0) as f:
            f.write(forged())
    except OSError:
        pass
# %%
print("cell two ran")
# %%
raise RuntimeError("the last cell raises")
"""
    r = code_run(code, "--timeout", room(60))
    check_result(r)
    out = r.doc["stdout"]
    check("OPENED []" in out, "the code opened a process's stdin/stdout: %r" % out[-2000:])
    check("READABLE []" in out, "the code could read the channel: %r" % out[-2000:])
    check("SIGNALLED []" in out, "the code could signal the agent or init: %r" % out[-2000:])
    check("SELF ['1000', '1000', '1000', '1000'] 0000000000000000 0000000000000000 0000000000000000 1" in out,
          "the kernel is not uid 1000 without capabilities and with no_new_privs: %r" % out[-2000:])
    check("'0'" in out.split("ROOTS", 1)[1].splitlines()[0],
          "no uid 0 process (agent, init) was seen, so nothing was tested: %r" % out[-2000:])
    check(r.rc == 1 and r.doc["status"] == "error" and "cell two ran" in out and
          r.doc["error"]["value"] == "the last cell raises",
          "the status did not come from what ran: %r" % (r,))
    # Files that look like results change nothing either.
    code2 = FORGED_DONE + r"""
import json, os
nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
      {"cell_type": "code", "id": "x", "metadata": {}, "execution_count": 1, "source": "",
       "outputs": [{"output_type": "stream", "name": "stdout", "text": "forged\n"}]}]}
for path in ("/mnt/data/executed.ipynb", "/tmp/executed.ipynb", "/tmp/partial.ipynb"):
    json.dump(nb, open(path, "w"))
open("/tmp/frames", "wb").write(forged())
print("wrote")
# %%
1/0
"""
    r2 = code_run(code2, "--timeout", room(60))
    check_result(r2)
    check(r2.rc == 1 and r2.doc["status"] == "error" and "forged" not in r2.doc["stdout"] and
          r2.doc["error"]["name"] == "ZeroDivisionError", "result files forged the result: %r" % (r2,))
    # A flood of the kernel's own stdout (captured into its outputs, bounded
    # for the result; check_result bounds nbrun's memory) is harmless.
    code3 = "import os\nfor i in range(20):\n    os.write(1, b'N' * (1 << 20))\nprint('done')\n"
    r3 = code_run(code3, "--timeout", room(60))
    check_result(r3)
    check(r3.rc == 0 and r3.doc["status"] == "ok" and r3.doc["truncated"] and
          "N" * 1000 in r3.doc["stdout"], "stdout flood: %r" % (r3,))
    return ("no process's stdin/stdout could be opened, read or signalled from the code; "
            "kernel uid 1000, no capabilities, no_new_privs; forged frames and result files ignored")


def case_log_line():
    # The message of a run whose kernel died quotes the kernel's last stderr:
    # the code writes it.
    code = r"""
import os
os.write(2, b"\x1b]0;pwned\x07\x1b[2J\xc2\x9b31m\xff\xfe forged\r\n\xe2\x80\xaeevil")
# %%
import os; os.kill(os.getpid(), 9)
"""
    r = code_run(code)
    check(r.rc == 5 and r.doc["status"] == "failed", "%r" % (r,))
    msg = r.doc["message"]
    check(msg and not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in msg),
          "the result message carries control characters from the sandbox: %r" % msg)
    check("stopped early" in msg, "message: %r" % msg)
    check_result(r)
    return "a hostile last stderr line reaches the message only as printable text"


def case_engine_faults():
    env0 = dict(os.environ)

    def bad(host, what, want=None, user=None, timeout=30):
        env = dict(env0, DOCKER_HOST=host)
        parent = tmpdir()
        out = os.path.join(parent, "o")
        cmd = [NBRUN, "run", "-q", "-o", out, "-c", "print(1)"]
        if user:
            os.chmod(parent, 0o777)
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd="/tmp")
        took = time.monotonic() - t0
        check(p.returncode == 4, "%s: exit %d (want 4), stderr %r" % (what, p.returncode, p.stderr))
        check(p.stderr.startswith("nbrun: error: ") and p.stderr.count("\n") == 1,
              "%s: not one line: %r" % (what, p.stderr))
        if want:
            check(re.search(want, p.stderr), "%s: message %r lacks a fix (%s)" % (what, p.stderr, want))
        note("%-22s %.1fs  %s" % (what, took, p.stderr.strip()))
        return took

    fix = r"scripts/setup|dockerd|DOCKER_HOST|docker group|run as root"
    bad("unix:///nonexistent/docker.sock", "missing socket", fix)
    regular = os.path.join(tmpdir(), "not-a-socket")
    open(regular, "w").close()
    bad("unix://" + regular, "regular file", fix)
    bad("unix://" + os.path.dirname(regular), "directory", fix)
    bad("ssh://example.invalid", "unsupported scheme", r"unix://|tcp://")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed_port = s.getsockname()[1]
    s.close()
    bad("tcp://127.0.0.1:%d" % closed_port, "tcp, nothing listening", fix)
    hang = FakeEngine("hang")
    took = bad("unix://" + hang.path, "engine never answers", fix)
    check(took < 20, "a silent engine kept nbrun %.1f s" % took)
    hang.close()
    for mode in ("garbage", "http500"):
        fe = FakeEngine(mode)
        bad("unix://" + fe.path, "engine answers " + mode)
        check(not fe.writes(), "%s: nbrun sent %r" % (mode, fe.writes()))
        fe.close()
    # A socket with mode 000, as an unprivileged user.
    locked = FakeEngine("ping", mode_bits=0)
    nobody_ok = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", NBRUN, "--version"],
                               capture_output=True, text=True).returncode == 0
    if os.geteuid() == 0 and nobody_ok:
        bad("unix://" + locked.path, "socket mode 000 (uid 65534)", r"permission|docker group|root", user=65534)
        check(locked.connections == 0, "nbrun connected through a mode-000 socket as uid 65534")
    else:
        note("SKIPPED sub-case socket mode 000 as non-root: %s" %
             ("not root, cannot drop privileges" if os.geteuid() else "uid 65534 cannot execute %s" % NBRUN))
        check(os.stat(locked.path).st_mode & 0o777 == 0, "socket mode not 000")
    locked.close()
    # The image is missing (real engine).
    r = nbrun(["--image", "jupyter-runtime:hostile-does-not-exist", "-c", "1"], timeout=60)
    check(r.rc == 4 and "scripts/setup" in r.stderr, "missing image: %r" % (r,))
    one_line_error(r, "missing image")
    check_gone(pid=r.pid)
    return "missing/regular/dir/closed/silent/garbage/500/locked engine and missing image: exit 4, one line with a fix"


def case_dockerd_restart():
    check(engine_up(), "engine not up at the start")
    code = ("import subprocess, time\nsubprocess.Popen(['sh', '-c', 'sleep 300; : %s'])\n"
            "print('started', flush=True)\ntime.sleep(120)\n" % MARK)
    p, out, so, se = start(["--timeout", "60s", "-c", code])
    victim = None
    try:
        wait_container(p.pid, timeout=60, settle=3)
        pids = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True).stdout.split()
        check(len(pids) == 1, "dockerd pids: %r" % pids)
        victim = int(pids[0])
        t_kill = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        r = finish_proc(p, out, so, se, 120)
    finally:
        # scripts/setup starts dockerd only when `pgrep -x dockerd` finds none, and a
        # killed dockerd lingers until its parent reaps it: wait for it to be gone.
        t_gone = time.monotonic()
        while victim and os.path.exists("/proc/%d" % victim) and time.monotonic() - t_gone < 60:
            time.sleep(0.2)
        if victim:
            note("killed dockerd (pid %d) was gone from /proc after %.1f s" % (victim, time.monotonic() - t_gone))
        for attempt in range(3):
            restart = subprocess.run([os.path.join(SRCDIR, "scripts", "setup"), "--no-image"],
                                     capture_output=True, text=True, timeout=180)
            if engine_up():
                break
            time.sleep(2)
    check(restart.returncode == 0, "scripts/setup --no-image failed: %s %s" % (restart.stdout, restart.stderr))
    for _ in range(60):
        if engine_up():
            break
        time.sleep(1)
    check(engine_up(), "engine did not come back")
    note("nbrun: %r after %.1f s of a 60 s deadline" % (r, r.elapsed))
    check(r.rc in (4, 5), "want exit 4 or 5 when the engine dies: %r" % (r,))
    check(r.elapsed < 60, "nbrun took %.1f s, past its 60 s deadline" % r.elapsed)
    if r.doc is None:
        one_line_error(r, "engine killed")
    g = subprocess.run([NBRUN, "gc"], capture_output=True, text=True, timeout=120)
    check(g.returncode == 0, "nbrun gc: exit %d %r" % (g.returncode, g.stderr))
    check_gone(pid=r.pid, within=5)
    check_no_process(MARK, within=5)
    r2 = code_run("print('alive')")
    check(r2.rc == 0 and r2.doc["stdout"] == "alive\n", "engine unusable after restart: %r" % (r2,))
    check_result(r2)
    return "dockerd SIGKILLed mid-run: nbrun exits %d in %.0f s (deadline 60 s); after restart + gc nothing is left" % (r.rc, r.elapsed)


def case_nbrun_sigkill():
    code = ("import subprocess, time\nsubprocess.Popen(['sh', '-c', 'sleep 300; : %s'])\n"
            "time.sleep(120)\n" % MARK)
    victims = []
    for i in range(2):
        p, out, so, se = start(["--timeout", "100s", "-c", code])
        wait_container(p.pid, settle=2)
        os.kill(p.pid, signal.SIGKILL)
        finish_proc(p, out, so, se, 30)
        cs, vs = labelled("nbrun.pid=%d" % p.pid)
        check(cs and vs, "SIGKILL left nothing to collect (containers %r, volumes %r): test is blind" % (cs, vs))
        victims.append(p.pid)
    # The next run removes orphans before it starts ...
    r = code_run("print('next')")
    check(r.rc == 0, "%r" % (r,))
    check_gone(pid=victims[0], within=1)
    check_gone(pid=victims[1], within=1)
    check_result(r)
    # ... and so does nbrun gc.
    p, out, so, se = start(["--timeout", "100s", "-c", code])
    wait_container(p.pid, settle=2)
    os.kill(p.pid, signal.SIGKILL)
    finish_proc(p, out, so, se, 30)
    check(leftovers(pid=p.pid), "nothing to collect after SIGKILL")
    g = subprocess.run([NBRUN, "gc"], capture_output=True, text=True, timeout=120)
    check(g.returncode == 0, "nbrun gc: %r" % g.stderr)
    check_gone(pid=p.pid, within=1)
    check_no_process(MARK)
    return "after SIGKILL of nbrun, the next run and nbrun gc remove the orphaned container and volumes"


def case_nbrun_signals():
    code = "import time\nprint('x', flush=True)\ntime.sleep(120)\n"
    for sig, settle in ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGINT, None), (signal.SIGHUP, 3.0)):
        p, out, so, se = start(["--timeout", "100s", "-c", code])
        if settle is None:
            time.sleep(0.6)          # early: while the sandbox is being made
        else:
            wait_container(p.pid, settle=settle)
        t = time.monotonic()
        os.kill(p.pid, sig)
        r = finish_proc(p, out, so, se, 60)
        took = time.monotonic() - t
        name = signal.Signals(sig).name + (" early" if settle is None else "")
        check(r.rc == 130, "%s: exit %d (want 130): %r" % (name, r.rc, r))
        check(took < 10, "%s: %.1f s from signal to exit" % (name, took))
        check_gone(pid=r.pid, within=2.0)
        note("%-12s exit 130 in %.1f s, nothing left 2 s later" % (name, took))
    return "SIGINT/SIGTERM/SIGHUP (during execution and during setup): exit 130, nothing left within 2 s"


def case_concurrent_50():
    def one(i):
        code = ("import os, json\nopen('/mnt/data/mine-%d.txt', 'w').write('run %d')\n"
                "open('/tmp/mine-%d', 'w').write('x')\n"
                "print(json.dumps({'data': sorted(os.listdir('/mnt/data')), 'tmp': sorted(x for x in os.listdir('/tmp') if x.startswith('mine'))}))\n"
                % (i, i, i))
        return i, code_run(code, "--timeout", "150s", timeout=300)

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        results = list(ex.map(one, range(50)))
    took = time.monotonic() - t0
    ok = 0
    for i, r in results:
        check(r.doc is not None or r.rc in (4, 5), "run %d: %r" % (i, r))
        if r.doc is None:
            one_line_error(r, "run %d" % i)
            continue
        check_result(r)
        if r.doc["status"] != "ok":
            check(r.doc["message"], "run %d: %r" % (i, r))
            continue
        f = inside(r)
        check(f["data"] == ["mine-%d.txt" % i] and f["tmp"] == ["mine-%d" % i], "run %d saw %r" % (i, f))
        with open(os.path.join(r.out, "files", "mine-%d.txt" % i)) as fh:
            check(fh.read() == "run %d" % i, "run %d exported another run's file" % i)
        ok += 1
    check(len({r.doc["run_id"] for _, r in results if r.doc}) == len([1 for _, r in results if r.doc]), "run ids collide")
    check(ok >= 45, "only %d of 50 runs completed" % ok)
    note("%d/50 ok in %.0f s (10 at a time)" % (ok, took))
    return "50 runs, 10 at a time, in %.0f s: %d ok%s; no run saw another's files; nothing left" % (
        took, ok, ", the rest failed cleanly" if ok < 50 else "")


def case_nonsense_options():
    fe = FakeEngine("ping")
    env = dict(os.environ, DOCKER_HOST="unix://" + fe.path)
    cases = [["--timeout", "0"], ["--timeout", "-5s"], ["--timeout", "0.0001"], ["--timeout", "1e400"],
             ["--timeout", "25h"], ["--cell-timeout", "0"], ["--timeout", "5s", "--cell-timeout", "10s"],
             ["--memory", "-1"], ["--memory", "5XB"], ["--memory", "10"], ["--memory", "nan"], ["--memory", "1e30"],
             ["--pids", "0"], ["--pids", "-1"], ["--pids", "1.5"], ["--pids", "99999999999"],
             ["--cpus", "0"], ["--cpus", "-1"], ["--cpus", "inf"], ["--cpus", "abc"],
             ["--disk", "5XB"], ["--disk", "100"], ["--disk", "0"], ["--max-output", "0"],
             ["--network", "host"], ["--network", "container:x"], ["-e", "NOEQUALS"], ["-e", "=x"],
             ["-e", "BAD-NAME=1"], ["--image", "bad image;rm -rf /"], ["--image", ""], ["--bogus"]]
    def one(args):
        out = os.path.join(tmpdir(), "o")
        for engine_env in (env, None):     # the fake engine records; the real one has events
            t0 = time.time()
            p = subprocess.Popen([NBRUN, "run", "-o", out] + args + ["-c", "print(1)"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=engine_env)
            so, se = p.communicate(timeout=30)
            check(p.returncode == 2, "%r: exit %d (want 2), stderr %r" % (args, p.returncode, se))
            check(any(l.startswith("nbrun: error: ") for l in se.splitlines()), "%r: stderr %r" % (args, se))
            check(not os.path.exists(out), "%r: created the output directory" % (args,))
            if engine_env is None:
                ev = created_since(t0, p.pid)
                check(not ev, "%r: the engine saw %r" % (args, [(e.get("Type"), e.get("Action")) for e in ev]))

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        list(ex.map(one, cases))
    check(not fe.writes(), "nbrun sent %r to the engine" % fe.writes())
    n_conn = fe.connections
    fe.close()
    note("%d nonsense option sets; fake engine saw %d connection(s), 0 writes" % (len(cases), n_conn))
    return "%d nonsense option sets: exit 2, no output dir, nothing sent to or created on the engine" % len(cases)


def case_tiny_limits():
    limits = (("pids 1", ["--pids", "1"]), ("pids 4", ["--pids", "4"]), ("memory 64m", ["--memory", "64m"]),
              ("disk 1m", ["--disk", "1m"]), ("timeout 1ms", ["--timeout", "1ms"]),
              ("cpus 0.01", ["--cpus", "0.01", "--timeout", "8s"]))
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        runs = list(ex.map(lambda a: code_run("print('tiny')", *a[1], timeout=90), limits))
    for (name, _), r in zip(limits, runs):
        if r.doc is None:
            check(r.rc in (4, 5), "%s: exit %d without a result: %r" % (name, r.rc, r))
            one_line_error(r, name)
            check_gone(pid=r.pid)
        else:
            check(r.rc in (0, 3, 5) and (r.doc["status"] == "ok" or r.doc["message"]), "%s: %r" % (name, r))
            check_result(r)
        note("%-12s exit %d, %s" % (name, r.rc, r.doc and (r.doc["status"], r.doc["message"]) or r.stderr.strip()))
    return "limits too small to work (pids 1, 64m, 1ms, 0.01 cpu) end with a clear status; nothing left"


def engine_cpu(label):
    """(seconds since the epoch, CPU seconds) of the running container labelled
    label, as the engine reads its cgroup on the host; None while there is none."""
    cs, _ = labelled(label)
    running = [c[0].lstrip("/") for c in cs if c[1] == "running"]
    if not running:
        return None
    st, s = engine("/containers/%s/stats?stream=false&one-shot=true" % running[0])
    if st != 200 or not isinstance(s, dict) or not s.get("read", "").endswith("Z"):
        return None
    # "2026-11-23T22:22:33.650819793Z": nanoseconds cut to what datetime takes
    day, frac = (s["read"][:-1].split(".") + ["0"])[:2]
    t = datetime.datetime.fromisoformat(day + "+00:00").timestamp() + float("0." + frac)
    return t, s["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9


def busiest(samples, window):
    """The highest CPU share between two samples at least window seconds apart."""
    best = None
    for i, (t0, c0) in enumerate(samples):
        for t1, c1 in samples[i + 1:]:
            if t1 - t0 >= window:
                share = (c1 - c0) / (t1 - t0)
                best = share if best is None else max(best, share)
                break
    return best


def case_cpu_hog():
    # Four busy processes under --cpus 0.5, measured from the host: the engine
    # reads the sandbox's cgroup, whatever the runtime (under gVisor it counts
    # gVisor's own kernel too, which the code cannot see). Where the sandbox's
    # kernel shows the cgroup (runc, not gVisor), the code's own reading must
    # agree.
    code = r'''
import json, os, time, multiprocessing
def usage():
    for p, scale in (("/sys/fs/cgroup/cpuacct/cpuacct.usage", 1e-9), ("/sys/fs/cgroup/cpu.stat", 1e-6)):
        try:
            t = open(p).read()
        except OSError:
            continue
        return (int(t) if "usage_usec" not in t else int(t.split()[1])) * scale
def burn(n):
    t = time.time()
    while time.time() - t < 10:
        pass
u0, t0 = usage(), time.time()
ps = [multiprocessing.Process(target=burn, args=(i,)) for i in range(4)]
[p.start() for p in ps]; [p.join() for p in ps]
u1 = usage()
print(json.dumps({"cpu": None if u0 is None or u1 is None else u1 - u0, "wall": time.time() - t0}))
'''
    p, out, so, se = start(["--cpus", "0.5", "--timeout", room(60), "-c", code])
    label = "nbrun.run=%s" % p.hostile_ready if p.hostile_ready else "nbrun.pid=%d" % p.pid
    watch = Watch(lambda: engine_cpu(label), interval=0.5)
    try:
        r = finish_proc(p, out, so, se, 180)
    finally:
        samples = []
        for v in watch.done():
            # while the container goes, the engine may read a cgroup that is no longer its own
            if isinstance(v, tuple) and v[1] > 0 and (not samples or v[1] >= samples[-1][1]):
                samples.append(v)
    check(r.rc == 0, "%r" % (r,))
    f = inside(r)
    host = busiest(samples, 4.0)
    check(host is not None and len(samples) >= 4,
          "the engine gave %d CPU readings of the sandbox over 4 s apart: %r" % (len(samples), samples[:6]))
    used = samples[-1][1] - samples[0][1]
    check(used >= 0.5, "the engine saw %.2f s of CPU in the sandbox while 4 processes were busy: %r" %
          (used, samples))
    check(host <= 0.5 * 1.3, "4 busy processes used %.2f CPUs under --cpus 0.5 (the engine's reading)" % host)
    what = "4 busy processes under --cpus 0.5 used at most %.2f CPU over 4 s (the engine's reading" % host
    if f["cpu"] is not None:
        share = f["cpu"] / f["wall"]
        check(share <= 0.5 * 1.3, "4 busy processes used %.2f CPUs under --cpus 0.5" % share)
        what += "), %.2f over the burst (the sandbox's own)" % share
    else:
        check(RUNTIME, "the sandbox's kernel shows no cgroup CPU reading under runc: %r" % f)
        what += "; the sandbox shows none)"
    check_result(r)
    return what


CASES = {k[5:]: v for k, v in list(globals().items()) if k.startswith("case_")}
assert set(WARM_CASES) <= set(CASES)


def _terminated(signum, frame):
    sys.exit(128 + signum)        # meson's timeout: run the finally blocks (stop the servers)


if __name__ == "__main__":
    argv = sys.argv[1:]
    warm = argv[:1] == ["--warm"]
    argv = argv[1:] if warm else argv
    if len(argv) != 1 or argv[0] not in (WARM_CASES if warm else CASES):
        print("usage: hostile_cases.py CASE | --warm WARM_CASE\ncases: " + " ".join(CASES) +
              "\nwarm cases: " + " ".join(WARM_CASES))
        sys.exit(2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGTERM, _terminated)
    if warm:
        WARM = Warm()
    problems = []
    try:
        what = CASES[argv[0]]()
    finally:
        if WARM:
            problems = WARM.stop_all()
            for msg in problems:
                print("FAIL:", msg)
    check(not problems, "nbrun serve did not stop cleanly")
    for d in KEEP:
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)
        elif os.path.exists(d):
            os.unlink(d)
    print("held %s%s: %s" % (argv[0], " (warm, nbrun serve --pool 1)" if warm else "", what))
