#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Fault check: the Docker engine restarted under a live `nbrun serve`.

Usage: bench/fault-engine-restart.py [--nbrun PATH] [--image NAME] [--dir DIR] [--keep-engine]

The shared engine is never touched. This starts a private dockerd of its own
(its own socket, data root, exec root and pidfile; no bridge, no iptables; it
starts its own containerd under those roots), loads the runtime image into it
once (`docker save | docker load`; the data root under DIR is kept between
runs, so later runs take seconds), and points a server at it with DOCKER_HOST.
Then, with a run and a session's execute in progress:

  1. the private dockerd is stopped (SIGTERM, which kills its containers) and
     started again on the same roots;
  2. the run in progress must end with a result whose status is `failed` and
     whose message is one line, or with a JSON error (502 engine); never a
     hang (client timeout 180 s) and never `ok`;
  3. the session's execute likewise; its next execute is refused at once
     with a one-line message, and the session closes;
  4. without restarting the server: the pool fills again, a new run is `ok`,
     a new session executes;
  5. after SIGTERM the server exits 0 and leaves no container or volume with
     its pid label on the private engine.

Prints one line per check and exits 0 when all held, 1 otherwise. About 2-5
minutes once the image is loaded (the first load copies 1.9 GB).
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True
RESULTS = []


def log(*a):
    print("fault:", *a, file=sys.stderr, flush=True)


def outcome(ok, what):
    RESULTS.append(ok)
    print("%s  %s" % ("held  " if ok else "FAILED", what), flush=True)


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def http(sock, method, path, body=None, token=None, timeout=60):
    c = UnixHTTPConnection(sock, timeout)
    try:
        h = {"Content-Type": "application/json"}
        if token:
            h["Authorization"] = "Bearer " + token
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data
    finally:
        c.close()


class Engine:
    """A private dockerd under DIR, stopped and started at will."""

    def __init__(self, top):
        self.top = top
        self.root = os.path.join(top, "data-root")
        # exec-root holds sockets: a short path under /run keeps them under the 108-byte limit.
        self.exec_root = "/run/nbrun-fault-engine"
        self.sock = os.path.join(top, "docker.sock")
        self.pidfile = os.path.join(top, "docker.pid")
        self.config = os.path.join(top, "daemon.json")
        self.logf = None
        self.proc = None
        os.makedirs(self.root, exist_ok=True)
        with open(self.config, "w") as f:
            f.write("{}\n")  # not the host's /etc/docker/daemon.json

    @property
    def host(self):
        return "unix://" + self.sock

    def start(self):
        if os.path.exists(self.pidfile):
            try:
                with open(self.pidfile) as f:
                    old = int(f.read().strip() or 0)
                if old and os.path.exists("/proc/%d" % old) and \
                        "dockerd" in open("/proc/%d/cmdline" % old).read():
                    raise SystemExit("fault: a dockerd (pid %d) already runs on %s; stop it first" %
                                     (old, self.top))
            except ValueError:
                pass
        self.logf = open(os.path.join(self.top, "dockerd.log"), "a")
        self.proc = subprocess.Popen(
            ["dockerd", "--host", self.host, "--data-root", self.root, "--exec-root", self.exec_root,
             "--pidfile", self.pidfile, "--config-file", self.config, "--bridge=none",
             "--iptables=false", "--ip6tables=false", "--ip-masq=false", "--cgroup-parent", "nbrun-fault",
             "--storage-driver", "overlay2"],
            stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("fault: the private dockerd exited %d; see %s/dockerd.log" %
                                 (self.proc.returncode, self.top))
            try:
                if http(self.sock, "GET", "/_ping", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise SystemExit("fault: the private dockerd did not answer in 120 s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.logf:
            self.logf.close()
            self.logf = None

    def get(self, path):
        st, doc = http(self.sock, "GET", path)
        if st != 200:
            raise RuntimeError("engine GET %s: %d %r" % (path, st, doc))
        return doc

    def labelled(self, label):
        f = urllib.parse.quote(json.dumps({"label": [label]}))
        cs = self.get("/containers/json?all=1&filters=" + f)
        vs = self.get("/volumes?filters=" + f).get("Volumes") or []
        return [c["Names"][0] for c in cs] + [v["Name"] for v in vs]

    def has_image(self, image):
        st, _ = http(self.sock, "GET", "/images/%s/json" % urllib.parse.quote(image, safe=""))
        return st == 200


def load_image(engine, image):
    if engine.has_image(image):
        return
    log("loading %s into the private engine (once; the data root is kept)" % image)
    t0 = time.time()
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "load", "-q"], stdin=save.stdout, capture_output=True, text=True,
                          env=dict(os.environ, DOCKER_HOST=engine.host))
    save.stdout.close()
    if save.wait() != 0 or load.returncode != 0:
        raise SystemExit("fault: docker save | load failed: %s" % load.stderr)
    log("loaded in %.0f s" % (time.time() - t0))


class Server:
    def __init__(self, nbrun, engine, image, tmp):
        self.sock = os.path.join(tmp, "s.sock")
        self.state = os.path.join(tmp, "state")
        self.logf = open(os.path.join(tmp, "serve.log"), "w+")
        args = [nbrun, "serve", "--socket", self.sock, "--state-dir", self.state, "--pool", "1",
                "--timeout", "300s"]
        if image:
            args += ["--image", image]
        self.proc = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, DOCKER_HOST=engine.host))
        deadline = time.time() + 60
        while "nbrun: serve: state in" not in self.stderr():
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("fault: serve did not start: %s" % self.stderr())
            time.sleep(0.1)
        with open(os.path.join(self.state, "token")) as f:
            self.token = f.read().strip()

    def stderr(self):
        self.logf.flush()
        with open(self.logf.name, errors="replace") as f:
            return f.read()

    def call(self, method, path, body=None, timeout=180):
        return http(self.sock, method, path, body, self.token, timeout)

    def health(self):
        return http(self.sock, "GET", "/v1/health")[1]

    def wait_pool(self, within):
        deadline = time.time() + within
        h = None
        while time.time() < deadline:
            h = self.health()
            if h and h["pool"]["ready"] >= 1:
                return True, h
            time.sleep(0.5)
        return False, h


def one_line(s):
    return isinstance(s, str) and s.strip() != "" and "\n" not in s.strip()


def ended_failed(status, doc):
    """A run or execute that the engine's restart ended: failed with a message, or a JSON error."""
    if status == 200 and isinstance(doc, dict):
        return doc.get("status") == "failed" and one_line(doc.get("message")), \
            "%s: %s" % (doc.get("status"), doc.get("message"))
    if isinstance(doc, dict) and one_line(doc.get("error")):
        return status in (500, 502, 503), "%d %s: %s" % (status, doc.get("kind"), doc.get("error"))
    return False, "%d %r" % (status, doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nbrun", default=os.environ.get("NBRUN") or
                    os.path.join(ROOT, "build-bench", "src", "cli", "nbrun"),
                    help="the binary under test (default $NBRUN, else build-bench's, bench/run's release build)")
    ap.add_argument("--image", default="jupyter-runtime:0.1.0")
    ap.add_argument("--dir", default="/var/tmp/nbrun-fault-engine",
                    help="the private engine's home (its data root is kept here between runs)")
    ap.add_argument("--keep-engine", action="store_true", help="leave the private dockerd running")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fault: a private dockerd needs root")
    os.makedirs(args.dir, exist_ok=True)
    engine = Engine(args.dir)
    tmp = tempfile.mkdtemp(prefix="nbrun-fault-")
    srv = None
    try:
        engine.start()
        load_image(engine, args.image)
        srv = Server(args.nbrun, engine, args.image, tmp)
        label = "nbrun.pid=%d" % srv.proc.pid
        ok, h = srv.wait_pool(300)
        outcome(ok, "the pool filled on the private engine (%r)" % (h or {}).get("pool"))
        st, doc = srv.call("POST", "/v1/runs", {"code": "print(1)"})
        outcome(st == 200 and doc.get("status") == "ok", "a run before the restart: %d %s" %
                (st, doc.get("status") if isinstance(doc, dict) else doc))
        st, sess = srv.call("POST", "/v1/sessions", {})
        sid = sess.get("id") if st == 201 else None
        outcome(sid is not None, "a session opened: %d" % st)
        answers = {}

        def bg(name, path, body):
            t0 = time.time()
            try:
                answers[name] = srv.call("POST", path, body, timeout=180) + (time.time() - t0,)
            except socket.timeout:
                answers[name] = (None, "hang: no answer in 180 s", time.time() - t0)
            except OSError as e:
                answers[name] = (None, "connection %s" % type(e).__name__, time.time() - t0)
        threads = [threading.Thread(target=bg, args=("run", "/v1/runs",
                                                     {"code": "import time\nprint('started', flush=True)\ntime.sleep(600)"}))]
        if sid:
            threads.append(threading.Thread(target=bg, args=("execute", "/v1/sessions/%s/execute" % sid,
                                                             {"code": "import time\ntime.sleep(600)"})))
        for t in threads:
            t.start()
        # Restarted once the run's container and the session's cell are running.
        deadline = time.time() + 180
        while time.time() < deadline:
            h = srv.health()
            if h.get("runs_active", 0) >= 1 and len(engine.get("/containers/json")) >= 2:
                break
            time.sleep(0.5)
        time.sleep(3)
        log("restarting the private dockerd under the server")
        t_restart = time.time()
        engine.stop()
        engine.start()
        log("the private dockerd is back after %.1f s" % (time.time() - t_restart))
        for t in threads:
            t.join(timeout=200)
        st, doc, took = answers.get("run", (None, "no answer", 0))
        good, what = ended_failed(st, doc) if st else (False, doc)
        outcome(good, "the run in progress ended failed with a message (%.0f s): %s" % (took, what))
        if sid:
            st, doc, took = answers.get("execute", (None, "no answer", 0))
            good, what = ended_failed(st, doc) if st else (False, doc)
            outcome(good, "the session's execute in progress ended failed with a message (%.0f s): %s" %
                    (took, what))
            # Its sandbox is gone: the next execute says so at once, and the session can be closed.
            st, doc = srv.call("POST", "/v1/sessions/%s/execute" % sid, {"code": "1"}, timeout=60)
            good, what = ended_failed(st, doc)
            outcome(good or st in (404, 409), "the session's next execute: %s" % what)
            st, _ = srv.call("DELETE", "/v1/sessions/" + sid)
            outcome(st in (200, 204, 404), "the session closes: %d" % st)
        ok, h = srv.wait_pool(300)
        outcome(ok, "the pool filled again without a server restart (%r)" % (h or {}).get("pool"))
        st, doc = srv.call("POST", "/v1/runs", {"code": "print(6*7)"})
        outcome(st == 200 and doc.get("status") == "ok" and doc.get("stdout") == "42\n",
                "a new run after the restart: %d %s" % (st, doc.get("status") if isinstance(doc, dict) else doc))
        st, s2 = srv.call("POST", "/v1/sessions", {})
        good = st == 201
        if good:
            st, doc = srv.call("POST", "/v1/sessions/%s/execute" % s2["id"], {"code": "x = 2\nprint(x + 1)"})
            good = st == 200 and doc.get("status") == "ok" and doc.get("stdout") == "3\n"
            srv.call("DELETE", "/v1/sessions/" + s2["id"])
        outcome(good, "a new session executes after the restart: %d" % st)
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=90)
        outcome(rc == 0, "serve exits 0 on SIGTERM: %d" % rc)
        left = engine.labelled(label)
        outcome(not left, "nothing left on the private engine: %r" % left)
    finally:
        if srv and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
        if srv:
            log("serve log:\n" + srv.stderr()[-4000:])
        if not args.keep_engine:
            engine.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d of %d checks held" % (sum(RESULTS), len(RESULTS)))
    sys.exit(0 if RESULTS and all(RESULTS) else 1)


if __name__ == "__main__":
    main()
