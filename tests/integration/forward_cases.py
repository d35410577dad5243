#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Sessions on a cluster: two `nbrun serve` nodes on loopback, real engine and image.

Usage: forward_cases.py CASE   (one meson test per case; see meson.build)
Node a and node b name each other with --peer and share a token file; a
session opened on a is used through b, whose calls are forwarded to a.
"""
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_cases import NBRUN, check, fail, validate  # noqa: E402
from serve_cases import free_port  # noqa: E402
from session_cases import gone, labelled  # noqa: E402

TOKEN = "first-tenant-token-0123456789abcdef"
OTHER = "second-tenant-token-0123456789abcdef"


class Node:
    """nbrun serve --node NAME on 127.0.0.1:port, peers given as {name: port}."""

    def __init__(self, name, port, peers, tmp, state=None, host="127.0.0.1", extra=()):
        self.name, self.port, self.tmp, self.host = name, port, tmp, host
        self.state = state or os.path.join(tmp, "state-" + name)
        args = [NBRUN, "serve", "--node", name, "--listen", "%s:%d" % (host, port), "--pool", "0",
                "--state-dir", self.state, "--token-file", os.path.join(tmp, "tokens")] + list(extra)
        for peer, pport in peers.items():
            args += ["--peer", "%s=http://127.0.0.1:%d" % (peer, pport)]
        if os.environ.get("NBRUN_TEST_IMAGE"):
            args += ["--image", os.environ["NBRUN_TEST_IMAGE"]]
        self.log = tempfile.NamedTemporaryFile("w+", dir=tmp, prefix="serve-%s-" % name, suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while "nbrun: serve: state in" not in self.stderr():
            if self.proc.poll() is not None:
                fail("node %s exited %d: %s" % (name, self.proc.returncode, self.stderr()))
            if time.time() > deadline:
                fail("node %s did not start: %s" % (name, self.stderr()))
            time.sleep(0.1)

    def stderr(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def call(self, method, path, body=None, token=TOKEN, headers=None, timeout=300):
        """(status, body bytes, headers) of one request."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read(), r.headers
        finally:
            c.close()

    def json(self, method, path, body=None, **kw):
        st, data, _ = self.call(method, path, body, **kw)
        try:
            return st, json.loads(data)
        except ValueError:
            fail("%s %s on %s: %d, not JSON: %r" % (method, path, self.name, st, data[:300]))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Stream:
    """An NDJSON execute through a node; lines with the time each arrived."""

    def __init__(self, node, sid, code):
        self.lines = []
        self.conn = http.client.HTTPConnection(node.host, node.port, timeout=300)
        self.conn.connect()
        self.sock = self.conn.sock
        self.conn.request("POST", "/v1/sessions/%s/execute" % sid, body=json.dumps({"code": code}).encode(),
                          headers={"Authorization": "Bearer " + TOKEN, "Accept": "application/x-ndjson",
                                   "Content-Type": "application/json"})
        self.t0 = time.monotonic()
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200 and self.resp.headers["Content-Type"] == "application/x-ndjson",
              "stream: %d %s" % (self.resp.status, self.resp.headers))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for raw in self.resp:
                self.lines.append((time.monotonic() - self.t0, json.loads(raw)))
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            pass  # the test hung up (close): the reads end

    def wait_lines(self, n, within=120):
        deadline = time.time() + within
        while len(self.lines) < n and time.time() < deadline:
            time.sleep(0.05)
        check(len(self.lines) >= n, "stream: %d lines, want %d: %r" % (len(self.lines), n, self.lines))

    def close(self):
        """Hang up as a client that goes away would."""
        self.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


def write_tokens(tmp):
    with open(os.path.join(tmp, "tokens"), "w") as f:
        f.write(TOKEN + "\n" + OTHER + "\n")
    os.chmod(os.path.join(tmp, "tokens"), 0o600)


def two_nodes(tmp):
    write_tokens(tmp)
    pa, pb = free_port(), free_port()
    # The same peer list on every node, itself included, as a stack file gives it.
    peers = {"a": pa, "b": pb}
    return Node("a", pa, peers, tmp), Node("b", pb, peers, tmp), peers


def hex_part(sid):
    return sid.split("~", 1)[1]


# ---- cases -----------------------------------------------------------------

def case_forward():
    tmp = tempfile.mkdtemp(prefix="nbrun-forward-")
    a, b, peers = two_nodes(tmp)
    a2 = None
    sids = []
    try:
        for n in (a, b):
            st, h = n.json("GET", "/v1/health", token=None)
            check(st == 200 and h["node"] == n.name, "health of %s: %r" % (n.name, h))
        st, doc = a.json("POST", "/v1/sessions", {})
        check(st == 201 and doc["id"].startswith("a~"), "open on a: %d %r\n%s" % (st, doc, a.stderr()[-2000:]))
        sid = doc["id"]
        sids.append(sid)
        check(labelled(sid), "the session's sandbox runs: %r" % labelled(sid))

        # State kept across nodes; the result names the session as the client does.
        st, d1 = a.json("POST", "/v1/sessions/%s/execute" % sid, {"code": "x = 41"})
        check(st == 200 and d1["status"] == "ok", "x = 41 via a: %d %r" % (st, d1))
        st, d2 = b.json("POST", "/v1/sessions/%s/execute" % sid, {"code": "x += 1; print(x)"})
        check(st == 200 and d2["status"] == "ok" and d2["stdout"] == "42\n", "x += 1 via b: %d %r" % (st, d2))
        validate(d2)
        check(d1["session"]["id"] == d2["session"]["id"] == sid and d2["session"]["execution"] == 2,
              "session fields: %r %r" % (d1["session"], d2["session"]))
        st, nb, hdr = b.call("GET", d2["notebook_url"])
        check(st == 200 and json.loads(nb)["cells"] and hdr["Content-Type"] == "application/x-ipynb+json",
              "the execute's notebook via b: %d %s" % (st, hdr))

        # A stream through b comes line by line as the cell prints.
        s = Stream(b, sid, "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(1)\n")
        s.wait_lines(1)
        s.thread.join(120)
        lines = s.lines
        outs = [t for t, ev in lines if ev.get("event") == "output"]
        last_t, last = lines[-1]
        check(last.get("status") == "ok" and last["stdout"] == "0\n1\n2\n" and last["session"]["id"] == sid,
              "stream's result: %r" % (last,))
        check(len(outs) == 3 and last_t - outs[0] >= 1.0,
              "the first line came %.2f s before the last: %r" % (last_t - outs[0], lines))
        print("stream via b: first output %.2f s, last line %.2f s" % (outs[0], last_t))

        # Files both ways, bytes equal; one larger than what a forward holds at once.
        blob = os.urandom(3 << 20)
        st, up = b.json("PUT", "/v1/sessions/%s/files/in/blob.bin" % sid, blob)
        check(st == 201 and up["bytes"] == len(blob), "PUT via b: %d %r" % (st, up))
        st, got, _ = a.call("GET", "/v1/sessions/%s/files/in/blob.bin" % sid)
        check(st == 200 and got == blob, "GET via a: %d, %d bytes" % (st, len(got)))
        st, got, hdr = b.call("GET", "/v1/sessions/%s/files/in/blob.bin" % sid)
        check(st == 200 and hashlib.sha256(got).digest() == hashlib.sha256(blob).digest() and
              hdr["Content-Length"] == str(len(blob)), "GET via b: %d, %d bytes %s" % (st, len(got), hdr))

        # Another tenant, an unknown node, ids that try things: 404, no crash.
        st, doc = b.json("GET", "/v1/sessions/" + sid, token=OTHER)
        check(st == 404 and doc["kind"] == "not_found", "another tenant via b: %d %r" % (st, doc))
        st, doc = b.json("POST", "/v1/sessions/%s/execute" % sid, {"code": "print(x)"}, token=OTHER)
        check(st == 404, "another tenant's execute via b: %d %r" % (st, doc))
        st, lst = b.json("GET", "/v1/sessions", token=OTHER)
        check(st == 200 and lst["sessions"] == [] and lst["unreachable"] == [], "another tenant's list: %r" % lst)
        st, doc = b.json("GET", "/v1/sessions/", token="wrong")
        check(st == 401, "a wrong token is refused by b itself: %d" % st)
        for bad in ("zz~" + hex_part(sid), "b~" + hex_part(sid), "~" + hex_part(sid), hex_part(sid),
                    "a" * 64 + "~" + hex_part(sid), "x" * 5000 + "~1", "a%0a~" + hex_part(sid),
                    "a%00~1", "%ff%fe~1", "a~", "~", "a.b..c~" + hex_part(sid), "127.0.0.1:%d~1" % a.port):
            st, body, _ = b.call("GET", "/v1/sessions/%s/files" % bad)
            check(st in (400, 404, 414, 431), "id %r via b: %d %r" % (bad[:80], st, body[:200]))
        st, doc = b.json("GET", "/v1/sessions/" + sid, headers={"Nbrun-Forwarded": "c"})
        check(st == 404, "a forwarded request is not forwarded again: %d %r" % (st, doc))
        check(b.proc.poll() is None and a.proc.poll() is None, "a node died")

        # The list through b holds a's session.
        st, lst = b.json("GET", "/v1/sessions")
        check(st == 200 and [(x["id"], x["node"]) for x in lst["sessions"]] == [(sid, "a")] and
              lst["unreachable"] == [], "list via b: %r" % lst)

        # A client leaving b's stream interrupts the cell on a; the kernel stays.
        s = Stream(b, sid, "import time\nprint('started', flush=True)\ntime.sleep(120)\nx = 0")
        s.wait_lines(1)
        s.close()
        deadline = time.time() + 60
        while time.time() < deadline:
            st, info = a.json("GET", "/v1/sessions/" + sid)
            if st == 200 and not info["busy"]:
                break
            time.sleep(0.3)
        check(not info["busy"], "the cell still runs after b's client left: %r" % info)
        st, d = b.json("POST", "/v1/sessions/%s/execute" % sid, {"code": "print(x)"})
        check(st == 200 and d["stdout"] == "42\n", "state after the interrupted cell: %d %r" % (st, d))

        # DELETE through b closes it on a.
        st, doc = b.json("DELETE", "/v1/sessions/" + sid)
        check(st == 200 and doc["closed"] is True, "DELETE via b: %d %r" % (st, doc))
        gone(sid)
        st, doc = a.json("GET", "/v1/sessions/" + sid)
        check(st == 404, "closed on a: %d %r" % (st, doc))

        # A node that dies: its session's calls get 502 node_gone from b, without a hang.
        st, doc = a.json("POST", "/v1/sessions", {})
        check(st == 201, "second open on a: %d %r" % (st, doc))
        sid2 = doc["id"]
        sids.append(sid2)
        st, d = b.json("POST", "/v1/sessions/%s/execute" % sid2, {"code": "y = 1"})
        check(st == 200 and d["status"] == "ok", "execute via b: %d %r" % (st, d))
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(30)
        t0 = time.monotonic()
        st, doc = b.json("POST", "/v1/sessions/%s/execute" % sid2, {"code": "print(y)"}, timeout=120)
        secs = time.monotonic() - t0
        check(st == 502 and doc["kind"] == "node_gone" and sid2 in doc["error"] and "node a" in doc["error"],
              "a call for a dead node's session: %d %r" % (st, doc))
        check("\n" not in doc["error"], "one line: %r" % doc["error"])
        check(secs < 60, "the dead node's answer took %.1f s" % secs)
        print("dead node: 502 node_gone in %.2f s" % secs)
        st, lst = b.json("GET", "/v1/sessions")
        check(st == 200 and lst["unreachable"] == ["a"] and lst["sessions"] == [], "list with a gone: %r" % lst)
        check(labelled(sid2), "the killed node's sandbox is left until it is reclaimed")

        # a again, on its state directory: it reclaims what the killed a left; the session ended.
        a.log.close()
        a2 = Node("a", a.port, peers, tmp, state=a.state)
        # It removes them before it listens, unless another nbrun of this host
        # swept them first (every cold run sweeps the dead's leftovers): either
        # way none is left once it listens.
        check(not labelled(sid2), "a restarted a reclaims: %r left\n%s" % (labelled(sid2), a2.stderr()[-1000:]))
        gone(sid2, within=60)
        st, doc = b.json("POST", "/v1/sessions/%s/execute" % sid2, {"code": "print(y)"})
        check(st == 404, "the dead node's session after its restart: %d %r" % (st, doc))
    finally:
        for n in (a2, b, a):
            if n:
                n.stop()
    for x in sids:
        check(not labelled(x), "left: %r" % labelled(x))
    for n in (a, b) + ((a2,) if a2 else ()):
        left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=nbrun.pid=%d" % n.proc.pid],
                              capture_output=True, text=True).stdout.split()
        check(not left, "node %s left containers %r" % (n.name, left))


def case_dns():
    # --peers-dns: each node learns the other's name from the address it
    # resolves to (one port for every node, as in Swarm's tasks.SERVICE).
    tmp = tempfile.mkdtemp(prefix="nbrun-forward-")
    write_tokens(tmp)
    port = free_port()
    a = b = None
    try:
        a = Node("a", port, {}, tmp, host="127.0.0.1", extra=["--peers-dns", "127.0.0.2:%d" % port])
        b = Node("b", port, {}, tmp, host="127.0.0.2", extra=["--peers-dns", "127.0.0.1:%d" % port])
        st, doc = b.json("POST", "/v1/sessions", {})
        check(st == 201 and doc["id"].startswith("b~"), "open on b: %d %r" % (st, doc))
        sid = doc["id"]
        st, d = a.json("POST", "/v1/sessions/%s/execute" % sid, {"code": "x = 6 * 7"})
        check(st == 200 and d["status"] == "ok", "execute via a: %d %r\n%s" % (st, d, a.stderr()[-1500:]))
        st, d = b.json("POST", "/v1/sessions/%s/execute" % sid, {"code": "print(x)"})
        check(st == 200 and d["stdout"] == "42\n", "state on b: %d %r" % (st, d))
        st, lst = a.json("GET", "/v1/sessions")
        check(st == 200 and [(x["id"], x["node"]) for x in lst["sessions"]] == [(sid, "b")] and
              lst["unreachable"] == [], "list via a: %r" % lst)
        st, doc = a.json("GET", "/v1/sessions/zz~" + hex_part(sid))
        check(st == 404 and doc["kind"] == "not_found", "an unknown node via a: %d %r" % (st, doc))
        st, doc = a.json("DELETE", "/v1/sessions/" + sid)
        check(st == 200 and doc["closed"] is True, "DELETE via a: %d %r" % (st, doc))
        gone(sid)
    finally:
        for n in (a, b):
            if n:
                n.stop()


def case_broken_peer():
    # Peers that fail in the two ways a forwarded call can: y refuses the
    # connection (nothing was sent: node_gone), z takes the request and
    # hangs up before any reply (the call may have run there: forward).
    # z is a socket of the test's own, since a real node answers.
    tmp = tempfile.mkdtemp(prefix="nbrun-forward-")
    write_tokens(tmp)
    closed = free_port()
    taker = socket.socket()
    taker.bind(("127.0.0.1", 0))
    taker.listen(8)
    took = []

    def take():
        while True:
            try:
                c, _ = taker.accept()
            except OSError:
                return
            c.settimeout(10)
            try:
                took.append(c.recv(65536))
            except OSError:
                pass
            c.close()

    threading.Thread(target=take, daemon=True).start()
    a = None
    try:
        a = Node("a", free_port(), {"y": closed, "z": taker.getsockname()[1]}, tmp)
        st, doc = a.json("GET", "/v1/health", token=None)
        check(st == 200 and doc["node"] == "a", "health names the node: %d %r" % (st, doc))
        for node, kind, words in (("y", "node_gone", "does not answer"), ("z", "forward", "broke off")):
            sid = node + "~0123456789abcdef"
            st, doc = a.json("POST", "/v1/sessions/%s/execute" % sid, {"code": "1"})
            check(st == 502 and doc["kind"] == kind and words in doc["error"] and sid in doc["error"] and
                  "\n" not in doc["error"], "%s: %d %r" % (node, st, doc))
        check(any(b"POST /v1/sessions/z~0123456789abcdef/execute" in r and b"Nbrun-Forwarded: a" in r
                  for r in took), "z got the forwarded request: %r" % took[:1])
        st, lst = a.json("GET", "/v1/sessions")
        check(st == 200 and lst["sessions"] == [] and sorted(lst["unreachable"]) == ["y", "z"],
              "list: %d %r" % (st, lst))
    finally:
        taker.close()
        if a:
            a.stop()


def case_usage():
    tmp = tempfile.mkdtemp(prefix="nbrun-forward-")
    for args, what in ((["--node", "bad name"], "--node"), (["--node", "x" * 64], "--node"),
                       (["--node", "a~b"], "--node"), (["--node", ""], "--node"),
                       (["--peer", "b"], "--peer"), (["--peer", "b=ftp://h:1"], "--peer"),
                       (["--peer", "b=http://h"], "--peer"), (["--peer", "b~=http://h:1"], "--peer"),
                       (["--peer", "b=http://h:1/path"], "--peer"), (["--peer", "b=http://h:99999"], "--peer"),
                       (["--peer", "b=http://h:1", "--peer", "b=http://i:1"], "--peer"),
                       (["--peers-dns", "tasks.x"], "--peers-dns"), (["--peers-dns", "h:0"], "--peers-dns")):
        p = subprocess.run([NBRUN, "serve", "--state-dir", os.path.join(tmp, "s"), "--listen", "127.0.0.1:0"] + args,
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and what in p.stderr and p.stderr.count("\n") <= 2,
              "%r: exit %d %r" % (args, p.returncode, p.stderr))
    p = subprocess.run([NBRUN, "serve", "--help"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "--peers-dns" in p.stdout and "--node" in p.stdout, "help: %r" % p.stdout[-500:])
    # A host name that is no node name (in a UTS namespace of its own): alone,
    # the server uses its first label with '-' for the rest; with peers it
    # must be given --node.
    write_tokens(tmp)
    port = free_port()
    odd = "bad~name.example.org"
    serve = [NBRUN, "serve", "--listen", "127.0.0.1:%d" % port, "--pool", "0",
             "--state-dir", os.path.join(tmp, "odd"), "--token-file", os.path.join(tmp, "tokens")]
    named = ["unshare", "--uts", sys.executable, "-c",
             "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])", odd]
    p = subprocess.run(named + serve +
                       ["--peer", "b=http://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--node" in p.stderr and odd in p.stderr, "with peers: %d %r" % (p.returncode, p.stderr))
    proc = subprocess.Popen(named + serve,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        node = Node.__new__(Node)
        node.host, node.port, node.name = "127.0.0.1", port, "odd"
        deadline = time.time() + 60
        while True:
            try:
                st, doc = node.json("GET", "/v1/health", token=None, timeout=10)
                break
            except OSError:
                check(proc.poll() is None and time.time() < deadline, "serve did not start: %r" %
                      (proc.stderr.read() if proc.poll() is not None else "still starting"))
                time.sleep(0.2)
        check(st == 200 and doc["node"] == "bad-name", "alone: node %r" % doc.get("node"))
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
    print("held", sys.argv[1])
