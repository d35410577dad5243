#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""nbrun-agent over its channel: the container side of PROTOCOL.md.

Usage: agent_cases.py CASE   (one meson test per case; see meson.build)
       agent_cases.py timings (by hand: start, preload and round-trip figures)

Every case starts the image's agent with `docker run -i` hardened as nbrun
runs it (uid 0 with only SETUID/SETGID/SETPCAP, no-new-privileges, no
network, read-only root, tmpfs /tmp and /mnt/data), speaks frames over the
pipes and checks every message. The image is $NBRUN_AGENT_IMAGE (default
jupyter-runtime:agent-dev). The last line of a passing case is
"held <case>: <what held>"; a failing one prints "FAIL: ..." and exits 1.
Containers carry a label unique to the case and are removed at the end.
"""
import io
import json
import os
import queue
import struct
import subprocess
import sys
import tarfile
import threading
import time
import uuid

IMAGE = os.environ.get("NBRUN_AGENT_IMAGE", "jupyter-runtime:agent-dev")
LABEL = "nbrun.run=agenttest-%s" % uuid.uuid4().hex[:12]
HEADER = struct.Struct(">2sBcI")
MAX = 1 << 20


def fail(msg):
    print("FAIL:", msg)
    sys.stdout.flush()
    cleanup()
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def note(msg):
    print("  " + msg)
    sys.stdout.flush()


def cleanup():
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", "label=" + LABEL],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f"] + ids, capture_output=True)


# ---- frames --------------------------------------------------------------------

def frame(kind, payload=b""):
    return HEADER.pack(b"NB", 1, kind, len(payload)) + payload


def message(msg, blob=None):
    if blob is not None:
        msg = dict(msg, blob=len(blob))
    out = frame(b"J", json.dumps(msg).encode())
    if blob is not None:
        for off in range(0, len(blob), MAX):
            out += frame(b"D", blob[off:off + MAX])
        out += frame(b"E")
    return out


class Agent:
    """One agent container; the host side of the channel, checking every
    frame it reads as strictly as PROTOCOL.md asks of nbrun."""

    def __init__(self, env=None, extra=(), caps=("SETUID", "SETGID", "SETPCAP")):
        cmd = ["docker", "run", "-i", "--rm", "--init", "--user", "0:0", "--cap-drop", "ALL"]
        for cap in caps:
            cmd += ["--cap-add", cap]
        cmd += ["--security-opt", "no-new-privileges", "--network", "none", "--read-only",
               "--tmpfs", "/tmp:rw,nosuid,nodev,size=256m,mode=1777",
               "--tmpfs", "/mnt/data:rw,nosuid,nodev,size=64m,uid=1000,gid=1000,mode=0755",
               "--label", LABEL]
        for k, v in (env or {}).items():
            cmd += ["-e", "%s=%s" % (k, v)]
        if os.environ.get("NBRUN_AGENT_FILE"):
            # by hand: an agent being worked on, without rebuilding the image
            # (the launcher, and the package nbrun_agent beside it)
            launcher = os.path.abspath(os.environ["NBRUN_AGENT_FILE"])
            cmd += ["-v", "%s:/opt/nbrun/nbrun-agent:ro" % launcher]
            package = os.path.join(os.path.dirname(launcher), "nbrun_agent")
            if os.path.isdir(package):
                cmd += ["-v", "%s:/opt/nbrun/nbrun_agent:ro" % package]
        cmd += list(extra) + [IMAGE, "/opt/nbrun/nbrun-agent"]
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, bufsize=0)
        self.q = queue.Queue()
        self.errors = []          # frame-level problems seen by the reader
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.p.stdout.read(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def _read(self):
        try:
            while True:
                head = self._exact(8)
                if head is None:
                    break
                magic, ver, kind, size = HEADER.unpack(head)
                if magic != b"NB" or ver != 1 or kind != b"J" or size > MAX:
                    self.errors.append("bad frame %r" % head)
                    break
                msg = json.loads(self._exact(size))
                if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
                    self.errors.append("bad message %r" % msg)
                    break
                blob = None
                if "blob" in msg:
                    blob = b""
                    while True:
                        h = self._exact(8)
                        m2, v2, k2, n2 = HEADER.unpack(h)
                        if m2 != b"NB" or k2 not in (b"D", b"E") or n2 > MAX:
                            self.errors.append("bad data frame %r" % h)
                            return
                        if k2 == b"E":
                            break
                        blob += self._exact(n2)
                    if len(blob) != msg["blob"]:
                        self.errors.append("blob %d != %d" % (len(blob), msg["blob"]))
                        return
                self.q.put((time.monotonic(), msg, blob))
        finally:
            self.q.put((time.monotonic(), None, None))

    def _drain(self):
        for line in iter(lambda: self.p.stderr.read(4096), b""):
            self.stderr = (self.stderr + line)[-8192:]

    def send(self, msg, blob=None):
        self.p.stdin.write(message(msg, blob))
        self.p.stdin.flush()

    def raw(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def recv(self, timeout=60):
        """(time, msg, blob); msg None at end of stream."""
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            fail("no message in %d s; agent stderr: %s" % (timeout, self.stderr[-2000:]))

    def expect(self, type_, timeout=60):
        t, msg, blob = self.recv(timeout)
        check(msg is not None, "stream ended waiting for %s; stderr: %s" % (type_, self.stderr[-2000:]))
        check(msg["type"] == type_, "want %s, got %r" % (type_, msg))
        return t, msg, blob

    def ready(self, timeout=60):
        _, hello, _ = self.expect("hello")
        check(hello.get("protocol") == 1 and isinstance(hello.get("pid"), int)
              and hello.get("kernel") == "python3", "hello %r" % hello)
        t, msg, _ = self.expect("ready", timeout)
        return hello, msg, t - self.t0

    def execute(self, cells, rid="x1", timeout=120, **opts):
        """Runs code cells (strings) or cell dicts; returns (events, done,
        metadata): events are (time, msg, blob) of output/cell messages."""
        self.send(dict({"type": "execute", "id": rid}, **opts), notebook(cells))
        events = []
        while True:
            t, msg, blob = self.recv(timeout)
            check(msg is not None, "stream ended during execute; stderr %s" % self.stderr[-2000:])
            check(msg.get("id") == rid, "message for another id: %r" % msg)
            if msg["type"] == "done":
                check(isinstance(msg.get("oom_kills"), int), "oom_kills %r" % msg)
                return events, msg, json.loads(blob)
            check(msg["type"] in ("output", "cell"), "unexpected %r" % msg)
            events.append((t, msg, json.loads(blob) if blob is not None else None))

    def wait(self, timeout=30):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            fail("agent did not exit in %d s" % timeout)

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()


def notebook(cells):
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    for i, c in enumerate(cells):
        if isinstance(c, str):
            c = {"cell_type": "code", "source": c, "metadata": {}, "outputs": [],
                 "execution_count": None}
        c = dict(c, id="c%d" % i)
        nb["cells"].append(c)
    return json.dumps(nb).encode()


def cells_of(events):
    return [(m, b) for _, m, b in events if m["type"] == "cell"]


def text(cell, name="stdout"):
    return "".join(o.get("text", "") for o in cell["outputs"]
                   if o.get("output_type") == "stream" and o.get("name") == name)


def tar_of(entries):
    """entries: (name, bytes | None for a directory | ('link', target))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            elif isinstance(data, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, data[1]
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# ---- cases ---------------------------------------------------------------------

def case_hello_ready():
    a = Agent()
    hello, ready, secs = a.ready()
    check(ready.get("preloaded") == [] and isinstance(ready.get("kernel_ms"), int), "ready %r" % ready)
    a.send({"type": "ping", "id": "p1"})
    _, pong, _ = a.expect("pong")
    check(pong["id"] == "p1", "pong %r" % pong)
    a.close()
    check(a.p.returncode == 0, "exit %r at end of input" % a.p.returncode)
    return "hello (agent %s, pid %d) then ready in %.2f s (kernel %d ms); exit 0 at end of input" % (
        hello["agent"], hello["pid"], secs, ready["kernel_ms"])


def case_execute():
    a = Agent()
    # no waiting for ready: the execute waits for the kernel itself
    _, hello, _ = a.expect("hello")
    cells = ["print('hi')", "x = 40\nx + 2",
             {"cell_type": "markdown", "source": "# title", "metadata": {}},
             "raise ValueError('boom')", "", "print('after')"]
    a.send({"type": "execute", "id": "e1", "cell_timeout": 30, "stream": False},
           notebook(cells))
    t, msg, blob = a.recv(60)
    if msg["type"] == "ready":
        t, msg, blob = a.recv(60)
    events = []
    while msg["type"] != "done":
        check(msg["type"] == "cell", "only cell messages without stream: %r" % msg)
        events.append((t, msg, json.loads(blob)))
        t, msg, blob = a.recv(60)
    done, meta = msg, json.loads(blob)
    cs = cells_of(events)
    check([m["cell"] for m, _ in cs] == [0, 1, 3, 4, 5], "cell indexes %r" % [m["cell"] for m, _ in cs])
    check([m["status"] for m, _ in cs] == ["ok", "ok", "error", "ok", "ok"],
          "statuses %r" % [m["status"] for m, _ in cs])
    check(text(cs[0][1]) == "hi\n", "cell 0 %r" % cs[0][1])
    res = [o for o in cs[1][1]["outputs"] if o["output_type"] == "execute_result"]
    check(len(res) == 1 and res[0]["data"]["text/plain"] == "42" and cs[1][1]["execution_count"] == 2,
          "cell 1 %r" % cs[1][1])
    err = [o for o in cs[2][1]["outputs"] if o["output_type"] == "error"]
    check(len(err) == 1 and err[0]["ename"] == "ValueError" and err[0]["evalue"] == "boom"
          and err[0]["traceback"], "cell 3 %r" % cs[2][1])
    check(text(cs[4][1]) == "after\n", "errors do not stop: %r" % cs[4][1])
    check(done["status"] == "error" and "ValueError" in done["message"], "done %r" % done)
    check(meta.get("language_info", {}).get("name") == "python", "metadata %r" % meta)
    # stop_on_error: nothing after the raising cell
    events, done, _ = a.execute(["raise KeyError(1)", "print('never')"], rid="e2",
                                stop_on_error=True)
    cs = cells_of(events)
    check(len(cs) == 1 and cs[0][0]["status"] == "error" and done["status"] == "error",
          "stop_on_error %r %r" % ([m for m, _ in cs], done))
    # widgets of the ipywidgets the image has (an older protocol) do not end the run
    events, done, _ = a.execute(["import ipywidgets\nipywidgets.IntSlider(3)"], rid="w1")
    check(done["status"] == "ok" and cells_of(events)[0][0]["status"] == "ok", "widget %r" % done)
    # the kernel is still there: state kept between executes
    events, done, _ = a.execute(["print(x)"], rid="e3")
    check(done["status"] == "ok" and text(cells_of(events)[0][1]) == "40\n", "state %r" % done)
    # what another process writes to fd 1 at the very end of a cell comes with that cell
    for i in range(10):
        events, done, _ = a.execute(["import subprocess; subprocess.run(['echo', 'tail%d'])" % i,
                                     "print('x')"], rid="f%d" % i)
        got = [text(c) for _, c in cells_of(events)]
        check(got == ["tail%d\n" % i, "x\n"], "fd 1 output at a cell's end: %r" % got)
    a.close()
    return "print/result/raise: 5 cell messages, statuses and outputs right, done error; " \
           "stop_on_error stops; state kept across executes; a child's output at a cell's end kept"


def case_stream():
    a = Agent()
    a.ready()
    events, done, _ = a.execute(["import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')"],
                                stream=True)
    outs = [(t, m) for t, m, _ in events if m["type"] == "output"]
    cell_t = [t for t, m, _ in events if m["type"] == "cell"][0]
    check(len(outs) >= 2 and outs[0][1]["output"]["text"] == "a\n" and outs[0][1]["cell"] == 0,
          "outputs %r" % outs)
    lead = cell_t - outs[0][0]
    check(lead >= 0.8, "first output only %.3f s before the cell message" % lead)
    check(done["status"] == "ok", "done %r" % done)
    # without stream: no output messages
    events, _, _ = a.execute(["print(1)"], rid="x2")
    check(all(m["type"] == "cell" for _, m, _ in events), "stream off %r" % events)
    # an output over 1 MiB: omitted from its output message, whole in the cell
    events, done, _ = a.execute(["print('x' * 3_000_000)"], rid="x3", stream=True)
    outs = [m["output"] for _, m, _ in events if m["type"] == "output"]
    cs = cells_of(events)
    check(outs and outs[0].get("omitted", 0) > 3_000_000 and outs[0]["output_type"] == "stream",
          "omitted %r" % outs)
    check(len(text(cs[0][1])) == 3_000_001 and done["status"] == "ok", "the whole cell")
    a.close()
    return "first output %.2f s before its cell message; none without stream; a 3 MB output " \
           "omitted from its output message and whole in the cell" % lead


def case_put_fetch():
    a = Agent()
    a.ready()
    blob = tar_of([("in.txt", b"hello input\n"), ("sub", None), ("sub/deep.csv", b"a,b\n1,2\n")])
    a.send({"type": "put", "id": "p1", "path": "/mnt/data"}, blob)
    _, st, _ = a.expect("stored")
    check(st["id"] == "p1" and st["files"] == 2, "stored %r" % st)
    code = ("import os\nprint(open('/mnt/data/in.txt').read(), end='')\n"
            "print(os.stat('/mnt/data/sub/deep.csv').st_uid, os.getcwd())\n"
            "open('/mnt/data/out.csv', 'w').write('x,y\\n1,2\\n')\n"
            "os.symlink('/etc/passwd', '/mnt/data/link')\n"
            "open('/mnt/data/secret', 'w').write('no'); os.chmod('/mnt/data/secret', 0)\n"
            "f = open('/mnt/data/open.txt', 'w'); f.write('unflushed')\n")
    events, done, _ = a.execute([code])
    out = text(cells_of(events)[0][1])
    check(done["status"] == "ok" and out == "hello input\n1000 /mnt/data\n", "cell %r %r" % (done, out))
    a.send({"type": "fetch", "id": "f1", "path": "/mnt/data", "max_bytes": 1 << 20})
    _, ar, blob = a.expect("archive")
    check(ar["id"] == "f1" and ar["truncated"] is False, "archive %r" % ar)
    tf = tarfile.open(fileobj=io.BytesIO(blob))
    got = {m.name: m for m in tf.getmembers()}
    check(tf.extractfile("data/out.csv").read() == b"x,y\n1,2\n", "out.csv")
    check(tf.extractfile("data/open.txt").read() == b"unflushed", "a file left open is flushed")
    # written again without a new open: flushed again at the next done
    events, done, _ = a.execute(["f.write(' more')"], rid="x2")
    a.send({"type": "fetch", "id": "f0", "path": "/mnt/data", "max_bytes": 1 << 20})
    _, ar, blob = a.expect("archive")
    tf = tarfile.open(fileobj=io.BytesIO(blob))
    check(tf.extractfile("data/open.txt").read() == b"unflushed more", "flushed again")
    check(got["data/link"].issym() and got["data/link"].linkname == "/etc/passwd", "link %r" % got.get("data/link"))
    # the code locked its own file (chmod 0): given back to its owner and sent
    check(tf.extractfile("data/secret").read() == b"no" and got["data"].isdir() and
          tf.getmembers()[0].name == "data", "a file the code locked from itself is sent")
    check(got["data/sub"].isdir() and tf.extractfile("data/sub/deep.csv").read() == b"a,b\n1,2\n", "sub")
    names = [m.name for m in tf.getmembers()]
    check(names == sorted(names, key=lambda n: n.split("/")), "stable order %r" % names)
    # a small cap: truncated, and never over it
    a.send({"type": "fetch", "id": "f2", "path": "/mnt/data", "max_bytes": 3000})
    _, ar, blob = a.expect("archive")
    check(ar["truncated"] is True and len(blob) <= 3000, "truncated %r %d" % (ar, len(blob)))
    tarfile.open(fileobj=io.BytesIO(blob)).getmembers()
    # a count cap: the first entries in the same order, truncated
    a.send({"type": "fetch", "id": "f3", "path": "/mnt/data", "max_bytes": 1 << 20, "max_entries": 2})
    _, ar, blob = a.expect("archive")
    first = [m.name for m in tarfile.open(fileobj=io.BytesIO(blob)).getmembers()]
    check(ar["truncated"] is True and len(first) == 2 and first == names[:2],
          "max_entries 2: %r %r (all: %r)" % (ar, first, names[:4]))
    for bad in (0, "2", 1.5, True):
        a.send({"type": "fetch", "id": "f4", "path": "/mnt/data", "max_bytes": 1 << 20, "max_entries": bad})
        _, err, _ = a.expect("error")
        check(err["id"] == "f4" and "max_entries" in err["message"], "max_entries %r: %r" % (bad, err))
    # refused puts: nothing outside, the agent goes on
    for rid, entries in (("b1", [("../evil", b"x")]), ("b2", [("/abs", b"x")]),
                         ("b3", [("ln", ("link", "/etc"))]), ("b4", [("a/../../x", b"x")])):
        a.send({"type": "put", "id": rid, "path": "/mnt/data"}, tar_of(entries))
        _, err, _ = a.expect("error")
        check(err["id"] == rid and err["fatal"] is False, "refused put %r" % err)
    a.send({"type": "put", "id": "b5", "path": "/mnt/data"}, b"not a tar" * 100)
    _, err, _ = a.expect("error")
    check(err["id"] == "b5" and not err["fatal"], "garbage put %r" % err)
    # a put over an existing symlink does not follow it
    a.send({"type": "put", "id": "b6", "path": "/mnt/data"}, tar_of([("link", b"x")]))
    _, err, _ = a.expect("error")
    check(err["id"] == "b6", "put through a symlink %r" % err)
    a.send({"type": "ping", "id": "p2"})
    a.expect("pong")
    a.close()
    return "put 2 files (uid 1000), code read them and wrote out.csv; fetch: files, open file " \
           "flushed, symlink as link, a locked file of its own sent, truncated under max_bytes and max_entries; 6 bad puts refused"


def case_cell_timeout():
    a = Agent()
    a.ready()
    events, done, _ = a.execute(["import time\nprint('start', flush=True)\ntime.sleep(30)",
                                 "print('next')"], cell_timeout=2)
    cs = cells_of(events)
    check(len(cs) == 2 and cs[0][0]["status"] == "timeout", "cells %r" % [m for m, _ in cs])
    c0 = cs[0][1]
    check(c0["metadata"].get("nbrun", {}).get("timed_out") is True, "metadata %r" % c0["metadata"])
    check(any(o["output_type"] == "error" for o in c0["outputs"]) and text(c0) == "start\n",
          "outputs %r" % c0["outputs"])
    check(2 <= cs[0][0]["duration_ms"] / 1000 < 10, "duration %r" % cs[0][0])
    check(text(cs[1][1]) == "next\n", "the next cell runs %r" % cs[1][1])
    check(done["status"] == "timeout" and "timeout" in done["message"], "done %r" % done)
    first = cs[0][0]["duration_ms"] / 1000
    # a cell that ignores the interrupt: killed one more timeout later
    events, done, _ = a.execute(["import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                 "print('stubborn', flush=True)\ntime.sleep(30)", "print('never')"],
                                rid="x2", cell_timeout=2)
    cs = cells_of(events)
    check(len(cs) == 1 and cs[0][0]["status"] == "timeout" and text(cs[0][1]) == "stubborn\n"
          and 4 <= cs[0][0]["duration_ms"] / 1000 < 10, "stubborn cell %r" % [m for m, _ in cs])
    check(done["status"] == "timeout" and "killed" in done["message"], "done %r" % done)
    events, done, _ = a.execute(["print(1)"], rid="x3")
    check(done["status"] == "dead" and "killed" in done["message"] and not events, "after %r" % done)
    a.close()
    return "cell interrupted after %.1f s: status timeout, nbrun.timed_out, next cell ran; " \
           "SIGINT ignored: killed after %.1f s, later executes dead" % (first, cs[0][0]["duration_ms"] / 1000)


def case_outputs_late():
    # The kernel's iopub thread is held just before the cell's idle status
    # (the end of its outputs; scheduled the way that status is sent, so in
    # order), whose reply goes out on time: the idle comes late: past
    # output_wait the execute ends failed, saying so, rather than ok without
    # what came late. Within the wait, the late output is kept.
    hold = ("import time\nk = get_ipython().kernel\nplain = k._publish_status\n"
            "def late(status, *a, **kw):\n"
            "    if status == 'idle':\n"
            "        k._publish_status = plain\n"
            "        k.iopub_thread.schedule(lambda: time.sleep(%d))\n"
            "    return plain(status, *a, **kw)\n"
            "k._publish_status = late\nprint('early', flush=True)")
    a = Agent()
    a.ready()
    events, done, _ = a.execute([hold % 6, "print('not run')"], rid="l1", output_wait=2)
    cs = cells_of(events)
    check(len(cs) == 1 and cs[0][0]["status"] == "error", "cells %r" % [m for m, _ in cs])
    outs = cs[0][1]["outputs"]
    check(any(o.get("ename") == "OutputsMissing" for o in outs if o["output_type"] == "error"),
          "no error output says outputs are missing: %r" % outs)
    check(done["status"] == "failed" and "did not all arrive within 2 s" in done["message"] and
          "\n" not in done["message"], "done %r" % done)
    time.sleep(5)   # the held thread lets go; the kernel serves again
    events, done, _ = a.execute([hold % 2, "print('next')"], rid="l2", output_wait=10)
    cs = cells_of(events)
    check(done["status"] == "ok" and len(cs) == 2 and text(cs[0][1]) == "early\n" and
          text(cs[1][1]) == "next\n", "within the wait: %r %r" % (done, [c for _, c in cs]))
    for bad in (0, "5", 1.5, True):
        a.send({"type": "execute", "id": "b", "output_wait": bad}, notebook(["1"]))
        _, msg, _ = a.expect("error")
        check("output_wait" in msg["message"], "output_wait %r: %r" % (bad, msg))
    a.close()
    return "outputs past output_wait: failed with OutputsMissing, later cells not run; within it: ok; " \
           "bad output_wait refused"


def case_kernel_dead():
    a = Agent()
    a.ready()
    events, done, _ = a.execute(["print('one')",
                                 "import os, sys\nprint('before', flush=True)\n"
                                 # the kernel's real fd 2 (ipykernel redirects fd 2 into the cell)
                                 "fd = getattr(sys.stderr, '_original_stdstream_copy', None) or 2\n"
                                 "os.write(fd, b'last words\\n')\n"
                                 # zmq needs a moment to send the output on; os._exit does not wait
                                 "import time; time.sleep(0.3)\nos._exit(7)",
                                 "print('three')"])
    cs = cells_of(events)
    check([m["cell"] for m, _ in cs] == [0, 1], "cells %r" % [m for m, _ in cs])
    check(text(cs[0][1]) == "one\n" and text(cs[1][1]) == "before\n", "outputs kept %r" % cs[1][1])
    check(done["status"] == "dead" and "exit status 7" in done["message"]
          and "last words" in done["message"], "done %r" % done)
    events, done2, _ = a.execute(["print(1)"], rid="x2")
    check(done2["status"] == "dead" and not events, "after death %r" % done2)
    a.close()
    return "os._exit in cell 1: done dead (%s), cell 0 and the dying cell's output kept" % done["message"][:60]


def case_preload():
    a = Agent(env={"NBRUN_PRELOAD": "json, numpy,no_such_module,bad name;x,matplotlib.pyplot"})
    _, ready, secs = a.ready(timeout=120)
    check(ready["preloaded"] == ["json", "numpy", "matplotlib.pyplot"], "preloaded %r" % ready)
    events, done, _ = a.execute(["import sys\nprint('numpy' in sys.modules, 'numpy' in dir())",
                                 "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"])
    cs = cells_of(events)
    check(text(cs[0][1]) == "True False\n" and cs[0][1]["execution_count"] == 1, "cell %r" % cs[0][1])
    check(any("image/png" in o.get("data", {}) for o in cs[1][1]["outputs"]), "a chart %r" % cs[1][1])
    a.close()
    return "preloaded %s in %.2f s, nothing bound, execution_count 1, charts still drawn" % (
        ready["preloaded"], secs)


def _violation(data, what):
    a = Agent()
    a.ready()
    a.raw(data)
    _, msg, _ = a.expect("error", 30)
    check(msg["fatal"] is True and "violation" in msg["message"], "%s: %r" % (what, msg))
    rc = a.wait()
    check(rc == 3, "%s: exit %r" % (what, rc))
    return msg["message"]


def case_violations():
    seen = []
    for what, data in (
            ("bad magic", b"XX\x01J\x00\x00\x00\x02{}"),
            ("bad version", b"NB\x02J\x00\x00\x00\x02{}"),
            ("unknown kind", b"NB\x01Q\x00\x00\x00\x00"),
            ("oversize", b"NB\x01J" + struct.pack(">I", MAX + 1)),
            ("oversize data", frame(b"J", b'{"type":"put","id":"1","path":"/mnt/data","blob":5}')
             + b"NB\x01D" + struct.pack(">I", MAX + 1)),
            ("D without J", frame(b"D", b"abc")),
            ("E without J", frame(b"E")),
            ("not an object", frame(b"J", b"[1]")),
            ("no type", frame(b"J", b'{"id":"1"}')),
            ("bad json", frame(b"J", b'{"type":')),
            ("bad blob", frame(b"J", b'{"type":"put","blob":-1}')),
            ("short data", frame(b"J", b'{"type":"put","id":"1","path":"/mnt/data","blob":5}')
             + frame(b"D", b"ab") + frame(b"E")),
            ("long data", frame(b"J", b'{"type":"ping","id":"1","blob":1}') + frame(b"D", b"ab")),
            ("J inside data", frame(b"J", b'{"type":"ping","id":"1","blob":1}')
             + frame(b"J", b'{"type":"ping","id":"2"}'))):
        seen.append(what + ": " + _violation(data, what))
    for s in seen:
        note(s)
    return "%d violations: fatal error, exit 3" % len(seen)


def case_unknown_type():
    a = Agent()
    a.ready()
    a.send({"type": "frobnicate", "id": "u1", "x": 1})
    _, err, _ = a.expect("error")
    check(err["id"] == "u1" and err["fatal"] is False and "frobnicate" in err["message"], "%r" % err)
    a.send({"type": "frobnicate", "id": "u2"}, b"some data")
    _, err, _ = a.expect("error")
    check(err["id"] == "u2" and not err["fatal"], "%r" % err)
    a.send({"type": "ping"})
    _, err, _ = a.expect("error")
    check(not err["fatal"] and "id" not in err, "ping without id %r" % err)
    a.send({"type": "ping", "id": "p"})
    a.expect("pong")
    a.send({"type": "shutdown"})
    rc = a.wait()
    check(rc == 0, "shutdown exit %r" % rc)
    return "unknown types (with and without data) answered, not fatal; shutdown exits 0"


FORGE = r'''
import errno, json, os, signal, struct
FORGED = json.dumps({"type": "done", "id": "x1", "status": "ok", "oom_kills": 0,
                     "message": "FORGED", "blob": 2}).encode()
FRAME = b"NB\x01J" + struct.pack(">I", len(FORGED)) + FORGED + b"NB\x01D\x00\x00\x00\x02{}NB\x01E\x00\x00\x00\x00"
agent = None
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != 1:
        try:
            if b"nbrun-agent" in open("/proc/%s/cmdline" % pid, "rb").read():
                agent = int(pid)
        except OSError:
            pass
res = {"agent": agent}
def attempt(name, fn):
    try:
        fn()
        res[name] = "SUCCEEDED"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
def write(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, FRAME)
    finally:
        os.close(fd)
attempt("proc1_fd1", lambda: write("/proc/1/fd/1"))
attempt("agent_fd1", lambda: write("/proc/%d/fd/1" % agent))
for fd in range(0, 8):
    attempt("agent_fd%d_any" % fd, lambda: write("/proc/%d/fd/%d" % (agent, fd)))
attempt("agent_fd_list", lambda: os.listdir("/proc/%d/fd" % agent))
# the kernel's own standard output (ipykernel forwards it into the cell)
attempt("dev_stdout", lambda: write("/dev/stdout"))
attempt("kill_agent", lambda: os.kill(agent, signal.SIGKILL))
attempt("kill_init", lambda: os.kill(1, signal.SIGTERM))
attempt("environ1", lambda: open("/proc/1/environ", "rb").read())
attempt("agent_mem", lambda: open("/proc/%d/mem" % agent, "rb").read(1))
attempt("setuid0", lambda: os.setuid(0))
attempt("agent_environ", lambda: open("/proc/%d/environ" % agent, "rb").read())
# every thread of the agent, the signaller (effective uid 1000) included
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def tgkill(tid):
    if libc.syscall(234, agent, tid, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % agent))
res["threads"] = len(tids)
res["signaller"] = [t for t in tids if open("/proc/%d/task/%d/status" % (agent, t)).read()
                    .split("Uid:")[1].split()[:3] == ["0", "1000", "0"]]
for tid in tids:
    attempt("task%d_fd" % tid, lambda: write("/proc/%d/task/%d/fd/1" % (agent, tid)))
    attempt("task%d_kill" % tid, lambda: tgkill(tid))
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
res["status"] = {k: status[k].split() for k in ("Uid", "Gid", "Groups", "CapBnd", "CapEff", "CapPrm",
                                                 "NoNewPrivs")}
print(json.dumps(res))
'''


def case_forgery():
    a = Agent()
    hello, _, _ = a.ready()
    events, done, _ = a.execute([FORGE], rid="x1")
    cs = cells_of(events)
    check(len(cs) == 1 and cs[0][0]["status"] == "ok", "cell %r" % cs)
    out = text(cs[0][1])
    res = json.loads(out[out.index('{"agent"'):])
    check(res["agent"] == hello["pid"], "agent pid %r vs hello %r" % (res["agent"], hello["pid"]))
    for name, got in res.items():
        if name in ("agent", "status", "threads", "signaller"):
            continue
        if name == "dev_stdout":
            # /dev/stdout is the kernel's own: what it writes is cell output,
            # inside the cell's JSON, never a frame on the channel
            check(got == "SUCCEEDED" and '"message": "FORGED"' in out, "dev_stdout %s" % got)
            continue
        check(got in ("EACCES", "EPERM"), "%s: %s" % (name, got))
    st = res["status"]
    check(st["Uid"] == ["1000"] * 4 and st["Gid"] == ["1000"] * 4 and st["Groups"] == [],
          "ids %r" % st)
    check(st["CapBnd"] == ["0000000000000000"] and st["CapEff"] == ["0000000000000000"]
          and st["CapPrm"] == ["0000000000000000"] and st["NoNewPrivs"] == ["1"], "caps %r" % st)
    check(done["status"] == "ok" and "FORGED" not in done["message"], "done %r" % done)
    # nothing more arrives: the channel carried only genuine messages
    a.send({"type": "ping", "id": "p1"})
    _, msg, _ = a.recv(30)
    check(msg == {"type": "pong", "id": "p1"}, "after the attempts %r" % msg)
    check(not a.errors, "frame errors %r" % a.errors)
    a.close()
    check(res["threads"] >= 3 and len(res["signaller"]) == 1, "agent threads %r, signaller %r" % (
        res["threads"], res["signaller"]))
    tried = len(res) - 4
    return "%d attempts all EACCES/EPERM; kernel Uid 1000, CapBnd/CapEff 0, NoNewPrivs 1; only " \
           "genuine frames" % tried


def case_end_of_input():
    a = Agent()
    a.ready()
    # end of input during an execute: the agent exits at once
    a.send({"type": "execute", "id": "x1"}, notebook(["import time; time.sleep(60)"]))
    time.sleep(1)
    t0 = time.monotonic()
    a.p.stdin.close()
    rc = a.wait(20)
    took = time.monotonic() - t0
    check(rc == 0 and took < 10, "exit %r after %.1f s" % (rc, took))
    return "stdin closed mid-execute: exit 0 in %.2f s" % took


def case_setup_refused():
    """Without the means to keep the channel out of the code's reach, the
    agent runs nothing."""
    seen = []
    for what, extra, caps in (("uid 1000", ["--user", "1000:1000"], ("SETUID", "SETGID", "SETPCAP")),
                              ("no CAP_SETPCAP", [], ("SETUID", "SETGID"))):
        a = Agent(extra=extra, caps=caps)
        _, msg, _ = a.recv(30)
        check(msg is not None and msg["type"] == "error" and msg["fatal"] is True,
              "%s: %r" % (what, msg))
        rc = a.wait()
        check(rc == 1, "%s: exit %r" % (what, rc))
        seen.append("%s (%s)" % (what, msg["message"][13:100]))
    return "error fatal instead of hello, exit 1: " + "; ".join(seen)



def _tar_names(blob):
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as tf:
        return {m.name: (tf.extractfile(m).read() if m.isreg() else None) for m in tf.getmembers()}


def case_session():
    # A kernel kept across executes: state, execution counts going on,
    # only what an execute changed fetched, listing, reading one file.
    a = Agent()
    a.ready()
    _, done, _ = a.execute(["x = 41\nopen('/mnt/data/keep.txt', 'w').write('kept')"], rid="e1", mark=True)
    check(done["status"] == "ok", "first execute %r" % done)
    events, done, _ = a.execute(["x += 1\nprint(x)", "import os; os.makedirs('/mnt/data/sub', exist_ok=True)\n"
                                 "open('/mnt/data/sub/new.csv', 'w').write('a,b')"],
                                rid="e2", mark=True, count_from=1)
    cells = cells_of(events)
    check(done["status"] == "ok" and text(cells[0][1]) == "42\n", "state kept: %r %r" % (done, cells))
    check([c[1]["execution_count"] for c in cells] == [2, 3], "counts %r" % [c[1]["execution_count"] for c in cells])
    a.send({"type": "fetch", "id": "f1", "path": "/mnt/data", "max_bytes": 1 << 20, "changed": True})
    _, msg, blob = a.expect("archive")
    names = _tar_names(blob)
    check(names.get("data/sub/new.csv") == b"a,b" and "data/keep.txt" not in names and "data/sub" not in names,
          "changed-only archive holds %r" % sorted(names))
    a.send({"type": "fetch", "id": "f2", "path": "/mnt/data", "max_bytes": 1 << 20})
    _, msg, blob = a.expect("archive")
    check("data/keep.txt" in _tar_names(blob), "a full fetch still holds everything")
    a.send({"type": "list", "id": "l1", "path": "/mnt/data"})
    _, msg, blob = a.expect("listing")
    entries = {e["path"]: e for e in json.loads(blob)}
    import hashlib
    check(entries["keep.txt"]["sha256"] == hashlib.sha256(b"kept").hexdigest() and
          entries["keep.txt"]["size"] == 4 and entries["sub"]["type"] == "directory" and
          msg["truncated"] is False, "listing %r" % entries)
    a.send({"type": "read", "id": "r1", "path": "/mnt/data/sub/new.csv", "max_bytes": 100})
    _, msg, blob = a.expect("file")
    check(blob == b"a,b" and msg["size"] == 3, "read %r %r" % (msg, blob))
    a.execute(["import os; os.symlink('/etc/passwd', '/mnt/data/link')"], rid="e3")
    for path, code in (("/mnt/data/link", "not_found"), ("/mnt/data/nope", "not_found"),
                       ("/mnt/data/../etc/passwd", "bad_path"), ("/etc/passwd", "bad_path"),
                       ("/mnt/data/sub", "not_a_file"), ("/mnt/data/keep.txt", "too_large")):
        a.send({"type": "read", "id": "r2", "path": path, "max_bytes": 2})
        _, msg, _ = a.expect("error")
        check(msg.get("id") == "r2" and msg.get("code") == code and msg["fatal"] is False,
              "read %s: %r" % (path, msg))
    a.close()
    return "state and counts kept across executes; a changed-only fetch; listing with sha256; read refuses links, '..', directories, oversize"


def case_interrupt_restart():
    a = Agent()
    a.ready()
    a.execute(["y = 7"], rid="e1")
    a.send({"type": "execute", "id": "e2", "stream": True},
           notebook(["import time\nprint('start', flush=True)\nwhile True: pass", "print('not run')"]))
    t, msg, _ = a.recv(60)
    check(msg["type"] == "output", "first output %r" % msg)
    t0 = time.monotonic()
    a.send({"type": "interrupt", "id": "i1", "target": "e2"})
    got_ack = False
    while True:
        t, msg, blob = a.recv(30)
        check(msg is not None, "stream ended")
        if msg["type"] == "interrupted":
            check(msg["id"] == "i1" and msg["running"] is True, "ack %r" % msg)
            got_ack = True
        elif msg["type"] == "done":
            break
        else:
            check(msg["type"] in ("cell", "output"), "unexpected %r" % msg)
    secs = time.monotonic() - t0
    check(got_ack and done_like(msg, "error") and "interrupted" in msg["message"], "done %r" % msg)
    events, done, _ = a.execute(["print(y)"], rid="e3")
    check(done["status"] == "ok" and text(cells_of(events)[0][1]) == "7\n", "state after interrupt %r" % done)
    # an interrupt for an execute that has not started stops it before its first cell
    a.send({"type": "interrupt", "id": "i2", "target": "e4"})
    _, ack, _ = a.expect("interrupted")
    check(ack["running"] is False, "early ack %r" % ack)
    events, done, _ = a.execute(["print('should not run')"], rid="e4")
    check(done["status"] == "error" and not cells_of(events), "early interrupt %r %r" % (done, events))
    a.send({"type": "restart", "id": "k1"})
    _, ready, _ = a.expect("ready", 90)
    check(ready.get("id") == "k1", "restart answer %r" % ready)
    events, done, _ = a.execute(["print('y' in globals())"], rid="e5")
    check(text(cells_of(events)[0][1]) == "False\n", "restart cleared variables: %r" % events)
    # a dead kernel is restarted the same way
    _, done, _ = a.execute(["import os; os._exit(3)"], rid="e6")
    check(done["status"] == "dead", "dead %r" % done)
    _, done, _ = a.execute(["1"], rid="e7")
    check(done["status"] == "dead", "still dead %r" % done)
    a.send({"type": "restart", "id": "k2"})
    a.expect("ready", 90)
    events, done, _ = a.execute(["print(6 * 7)"], rid="e8")
    check(done["status"] == "ok" and text(cells_of(events)[0][1]) == "42\n", "after restart %r" % done)
    a.close()
    return "interrupt of a busy loop ended its execute in %.2f s, state kept; early interrupt; restart clears state and revives a dead kernel" % secs


def done_like(msg, status):
    return msg.get("type") == "done" and msg.get("status") == status


def timings():
    """Start and round-trip figures, printed (never fails on timing)."""
    def start(env, n):
        out = []
        for _ in range(n):
            a = Agent(env=env)
            _, ready, secs = a.ready(timeout=120)
            out.append(secs)
            a.close()
        return sorted(out)
    cold = start(None, 5)
    pre = start({"NBRUN_PRELOAD": "numpy,pandas,matplotlib.pyplot"}, 5)
    a = Agent()
    a.ready()
    rt = []
    for i in range(20):
        t0 = time.monotonic()
        _, done, _ = a.execute(["print(1)"], rid="r%d" % i)
        rt.append(time.monotonic() - t0)
    a.close()
    rt.sort()
    note("docker run -> ready: median %.2f s (min %.2f, max %.2f) over %d" % (
        cold[len(cold) // 2], cold[0], cold[-1], len(cold)))
    note("with NBRUN_PRELOAD=numpy,pandas,matplotlib.pyplot: median %.2f s (min %.2f, max %.2f)" % (
        pre[len(pre) // 2], pre[0], pre[-1]))
    note("execute print(1) round trip on a ready agent: p50 %.1f ms, max %.1f ms over 20" % (
        rt[10] * 1000, rt[-1] * 1000))
    return "timings printed"


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}
CASES["timings"] = timings


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: agent_cases.py CASE\ncases: %s" % " ".join(sorted(CASES)), file=sys.stderr)
        return 2
    try:
        what = CASES[sys.argv[1]]()
    finally:
        cleanup()
    print("held %s: %s" % (sys.argv[1], what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
