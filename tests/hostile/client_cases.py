#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The --server clients against servers that misbehave (no engine needed).

Usage: client_cases.py CASE
A fake server in this file accepts and then stays silent, trickles its reply
a byte at a time, or streams events without end. `nbrun run --server` and
`nbrun batch --server` with --timeout 5s must give up after the timeout plus
the stated margin (30 s), with one line and exit 4; the batch records it.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

NBRUN = os.environ["NBRUN"]
MARGIN = 30


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg)


class Fake:
    """A TCP server that reads a request and then does what mode says, for ever."""

    def __init__(self, mode):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            c, _ = self.sock.accept()
            threading.Thread(target=self.one, args=(c,), daemon=True).start()

    def one(self, c):
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                more = c.recv(65536)
                if not more:
                    return
                data += more
            if self.mode in REPLIES:
                body = json.dumps(REPLIES[self.mode]).encode() if not isinstance(REPLIES[self.mode], bytes) \
                    else REPLIES[self.mode]
                if data.startswith(b"GET"):
                    c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                else:
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n%s" % (len(body), body))
                return
            if self.mode == "silent":
                time.sleep(3600)
            elif self.mode == "trickle":
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
                while True:
                    time.sleep(2)
                    c.sendall(b" ")
            elif self.mode == "events":
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:
                    line = json.dumps({"event": "output", "output": {"output_type": "stream", "name": "stdout",
                                                                     "text": "tick\n"}}).encode() + b"\n"
                    c.sendall(b"%x\r\n%s\r\n" % (len(line), line))
                    time.sleep(0.5)
        except OSError:
            pass
        finally:
            c.close()


def result(**kw):
    doc = {"nbrun": "0.1.0", "run_id": "0123456789ab", "status": "ok", "message": None, "stdout": "1\n",
           "stderr": "", "outputs": [], "results": [], "error": None, "images": [], "files": [], "skipped": []}
    doc.update(kw)
    return doc


# What a hostile server answers a run with: each must end the client with exit 5 and its reason.
REPLIES = {
    "not_a_document": [1, 2, 3],
    "not_json": b"<html>hello</html>",
    "bad_run_id": result(run_id="../../etc"),
    "no_status": {"run_id": "0123456789ab"},
    "missing_file": result(files=[{"path": "files/out.csv", "bytes": 6, "url": "/v1/runs/0123456789ab/files/out.csv"}]),
    "size_mismatch": result(files=[{"path": "files/out.csv", "bytes": 6, "content_base64": "YWJj"}]),
    "escaping_name": result(files=[{"path": "files/../../escape.txt", "bytes": 3, "content_base64": "YWJj"}]),
}


def timed(argv):
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, NBRUN_TOKEN="t" * 32))
    return p, time.monotonic() - t0


def case_run_gives_up():
    results = {}

    def one(mode):
        fake = Fake(mode)
        argv = [NBRUN, "run", "--server", "http://127.0.0.1:%d" % fake.port, "--timeout", "5s",
                "-o", tempfile.mkdtemp() + "/o", "-c", "print(1)"]
        if mode == "events":
            argv.insert(2, "--stream")
        results[mode] = timed(argv)

    threads = [threading.Thread(target=one, args=(m,)) for m in ("silent", "trickle", "events")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for mode, (p, secs) in sorted(results.items()):
        errs = [l for l in p.stderr.splitlines() if l.startswith("nbrun: error:")]
        check(p.returncode == 4 and len(errs) == 1 and "given up" in errs[0],
              "%s: exit %d, one line: %r" % (mode, p.returncode, p.stderr[-300:]))
        check(5 + MARGIN - 2 <= secs <= 5 + MARGIN + 20, "%s: gave up after %.1f s (5 s + %d s)" % (mode, secs, MARGIN))
    return "silent, trickling and endless-event servers: run --server --timeout 5s gave up after about 35 s, exit 4"


def case_run_own_errors():
    """run --server exits 5 with its reason when the reply is no result, or a file cannot be kept."""
    for mode in sorted(REPLIES):
        fake = Fake(mode)
        tmp = tempfile.mkdtemp(prefix="nbrun-client-own-")
        out = os.path.join(tmp, "o")
        p, secs = timed([NBRUN, "run", "--server", "http://127.0.0.1:%d" % fake.port, "-o", out, "-c", "1"])
        errs = [l for l in p.stderr.splitlines() if l.startswith("nbrun: error:")]
        check(p.returncode == 5 and len(errs) >= 1, "%s: exit %d, %r" % (mode, p.returncode, p.stderr[-300:]))
        check(not os.path.exists(os.path.join(tmp, "escape.txt")) and not os.path.exists("/etc/escape.txt"),
              "%s: nothing written outside the output directory" % mode)
    return "%d hostile replies (no document, not JSON, a bad run_id, no status, a missing file, a size that does not match, an escaping name): exit 5 with the reason" % len(REPLIES)


def case_batch_goes_on():
    fake = Fake("silent")
    tmp = tempfile.mkdtemp(prefix="nbrun-client-batch-")
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "a", "metadata": {}, "execution_count": None, "outputs": [], "source": "1"}]}
    paths = []
    for name in ("one", "two"):
        paths.append(os.path.join(tmp, name + ".ipynb"))
        with open(paths[-1], "w") as f:
            json.dump(nb, f)
    p, secs = timed([NBRUN, "batch", "--server", "http://127.0.0.1:%d" % fake.port, "--timeout", "5s",
                     "-j", "2", "-o", os.path.join(tmp, "out")] + paths)
    check(p.returncode not in (0, None) and secs <= 5 + MARGIN + 30, "batch: exit %d after %.1f s" % (p.returncode, secs))
    with open(os.path.join(tmp, "out", "report.json")) as f:
        report = json.load(f)
    entries = report.get("notebooks") or report.get("runs") or report.get("entries") or []
    check(len(entries) == 2 and all(e.get("status") == "failed" for e in entries),
          "both recorded as failed: %r" % [(e.get("name"), e.get("status")) for e in entries])
    return "batch --server --timeout 5s against a silent server recorded both notebooks failed after %.0f s" % secs


def main():
    cases = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        print("usage: client_cases.py CASE\ncases: %s" % " ".join(sorted(cases)), file=sys.stderr)
        return 2
    print("held %s: %s" % (sys.argv[1], cases[sys.argv[1]]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
