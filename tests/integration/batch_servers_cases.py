#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""`nbrun batch --server URL,URL,...`: notebooks spread over several servers
(one per node of a Swarm published in host mode), a retry sent to another.

Usage: batch_servers_cases.py CASE
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_cases import NBRUN, check  # noqa: E402
from batch_cases import notebook, validate_report  # noqa: E402
from serve_cases import Server  # noqa: E402


def runs_of(server):
    d = os.path.join(server.state, "runs")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def case_servers():
    """Two live servers and a dead one: every notebook ok, runs on both, retries recorded."""
    tmp = tempfile.mkdtemp(prefix="nbrun-batch-servers-")
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write(os.urandom(16).hex() + "\n")
    nbs = [notebook(os.path.join(tmp, "nb%d.ipynb" % i), "print(%d * 7)" % i) for i in range(4)]
    dead = "unix:" + os.path.join(tmp, "gone.sock")  # nothing listens: refused at once
    servers = [Server(extra=["--token-file", token, "--timeout", "10m"]) for _ in range(2)]
    try:
        urls = ",".join([servers[0].url, dead, servers[1].url])
        p = subprocess.run([NBRUN, "batch", "--json", "--server", urls, "--token-file", token,
                            "--retries", "3", "-j", "2", "-o", os.path.join(tmp, "out")] + nbs,
                           capture_output=True, text=True, timeout=900)
        check(p.returncode == 0, "batch: exit %d: %s\n%s" % (p.returncode, p.stderr[-2000:], p.stdout[-2000:]))
        report = json.loads(p.stdout)
        validate_report(report)
        retried = 0
        for e in report["notebooks"]:
            i = int(e["name"][2:])
            check(e["status"] == "ok" and e["result"]["stdout"] == "%d\n" % (i * 7), e)
            for r in e.get("retries", []):
                check("gone.sock" in r["error"] or "connect" in r["error"].lower(), r)
                retried += 1
        # Three servers taken in turn: at least one first attempt met the dead one.
        check(retried >= 1, "no retry recorded: %r" % report["notebooks"])
        a, b = runs_of(servers[0]), runs_of(servers[1])
        check(a and b, "runs not spread: %d and %d" % (len(a), len(b)))
        check(len(a) + len(b) == 4, "%d runs for 4 notebooks: %r %r" % (len(a) + len(b), a, b))
        ids = sorted(e["result"]["run_id"] for e in report["notebooks"])
        check(ids == sorted(a + b), "run ids %r, servers kept %r" % (ids, a + b))
        # An empty URL in the list is a usage error.
        u = subprocess.run([NBRUN, "batch", "--server", servers[0].url + ",,", "--token-file", token,
                            "-o", os.path.join(tmp, "u"), nbs[0]], capture_output=True, text=True, timeout=60)
        check(u.returncode == 2 and "empty URL" in u.stderr, "%d %s" % (u.returncode, u.stderr))
    finally:
        for s in servers:
            s.stop()
    return "4 notebooks over 2 servers and a dead one: %d and %d runs, %d retr%s recorded" % (
        len(a), len(b), retried, "y" if retried == 1 else "ies")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: batch_servers_cases.py CASE\ncases: " + " ".join(sorted(CASES)))
        sys.exit(2)
    print(CASES[sys.argv[1]]() or "", file=sys.stderr)
    print("ok", sys.argv[1])
