#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Integration tests of `nbrun batch` against the real engine and image.

Usage: batch_cases.py CASE
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_cases import NBRUN, SRCDIR, check, leftovers, png_size  # noqa: E402


def notebook(path, *sources, tags=None):
    cells = []
    for i, src in enumerate(sources):
        meta = {"tags": tags[i]} if tags and tags[i] else {}
        cells.append({"cell_type": "code", "id": "c%d" % i, "metadata": meta,
                      "execution_count": None, "outputs": [], "source": src})
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}}}
    with open(path, "w") as f:
        json.dump(nb, f)
    return path


def validate_report(report):
    import jsonschema
    with open(os.path.join(SRCDIR, "schemas", "report.schema.json")) as f:
        jsonschema.Draft202012Validator(json.load(f)).validate(report)
    with open(os.path.join(SRCDIR, "schemas", "result.schema.json")) as f:
        rv = jsonschema.Draft202012Validator(json.load(f))
    for e in report["notebooks"]:
        if e.get("result") is not None:
            rv.validate(e["result"])


LAST_PID = [None]


def mine():
    """What the last batch process left on the engine (other tests run beside us)."""
    return leftovers(label="nbrun.pid=%d" % LAST_PID[0])


def batch(args, timeout=600):
    p = subprocess.Popen([NBRUN, "batch", "--json"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    LAST_PID[0] = p.pid
    out, err = p.communicate(timeout=timeout)
    return p.returncode, json.loads(out) if out.strip() else None, err


def case_twelve():
    d = tempfile.mkdtemp(prefix="nbrun-batch-")
    nbs = []
    for i in range(7):
        nbs.append(notebook(os.path.join(d, "ok%d.ipynb" % i), "x = 1", "print('ok', %d)" % i,
                            tags=[["parameters"], None]))
    nbs.append(notebook(os.path.join(d, "fail.ipynb"), "print('before')", "1/0"))
    nbs.append(notebook(os.path.join(d, "slow.ipynb"), "import time\ntime.sleep(300)"))
    nbs.append(notebook(os.path.join(d, "chart.ipynb"),
                        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"))
    nbs.append(notebook(os.path.join(d, "param.ipynb"),
                        "n = 0\nlabel = 'x'\nflag = None", "print(n * 2, label, flag)",
                        tags=[["parameters"], None]))
    nbs.append(notebook(os.path.join(d, "files.ipynb"),
                        "open('/mnt/data/out.txt', 'w').write('written')"))
    out = os.path.join(d, "out")
    rc, report, err = batch(["-j", "3", "--timeout", "45s", "-o", out, "-p", "n", "21",
                             "-p", "label", "hello world", "-p", "flag", "True"] + nbs)
    check(rc == 3, "exit %d (a timeout must give 3): %s" % (rc, err[-500:]))
    validate_report(report)
    by = {e["name"]: e for e in report["notebooks"]}
    check(len(by) == 12, sorted(by))
    check(report["summary"] == {"total": 12, "ok": 10, "error": 1, "timeout": 1, "oom": 0,
                                "failed": 0, "not_run": 0}, report["summary"])
    check(by["fail"]["status"] == "error" and by["fail"]["first_error"].startswith("ZeroDivisionError"),
          by["fail"])
    check("before" in by["fail"]["result"]["stdout"], "outputs before the error kept")
    check(by["slow"]["status"] == "timeout", by["slow"]["status"])
    img = by["chart"]["result"]["images"]
    check(len(img) == 1 and png_size(os.path.join(out, "chart", img[0]["path"]))[0] > 0, img)
    check(by["param"]["result"]["stdout"] == "42 hello world True\n", by["param"]["result"]["stdout"])
    with open(os.path.join(out, "param", "notebook.ipynb")) as f:
        cells = json.load(f)["cells"]
    check(cells[1]["metadata"]["tags"] == ["injected-parameters"], cells[1]["metadata"])
    check("n = 21" in "".join(cells[1]["source"]), cells[1]["source"])
    with open(os.path.join(out, "files", "files", "out.txt")) as f:
        check(f.read() == "written", "exported file")
    # report.jsonl: one line per notebook, the same entries.
    with open(os.path.join(out, "report.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    check(sorted(l["name"] for l in lines) == sorted(by), "report.jsonl names")
    check(not mine(), "left behind: %r" % mine())


def case_name_collisions_and_grid():
    d = tempfile.mkdtemp(prefix="nbrun-batch-")
    os.makedirs(os.path.join(d, "a"))
    os.makedirs(os.path.join(d, "b"))
    n1 = notebook(os.path.join(d, "a", "same.ipynb"), "k = 0", "print('k', k)",
                  tags=[["parameters"], None])
    n2 = notebook(os.path.join(d, "b", "same.ipynb"), "print('second')")
    grid = os.path.join(d, "grid.json")
    with open(grid, "w") as f:
        json.dump([{"k": 1}, {"k": 2.5}, {"k": "three"}], f)
    out = os.path.join(d, "out")
    rc, report, err = batch(["-j", "2", "-o", out, "--param-grid", grid, n1])
    check(rc == 0, "exit %d %s" % (rc, err[-300:]))
    validate_report(report)
    got = sorted((e["name"], e["result"]["stdout"]) for e in report["notebooks"])
    check(got == [("same-p0", "k 1\n"), ("same-p1", "k 2.5\n"), ("same-p2", "k three\n")], got)
    out2 = os.path.join(d, "out2")
    rc, report, err = batch(["-j", "2", "-o", out2, n1, n2])
    check(rc == 0, "exit %d" % rc)
    names = sorted(e["name"] for e in report["notebooks"])
    check(names == ["same", "same-2"], names)
    check(os.path.isdir(os.path.join(out2, "same")) and os.path.isdir(os.path.join(out2, "same-2")),
          "distinct directories")


def case_fail_fast():
    d = tempfile.mkdtemp(prefix="nbrun-batch-")
    nbs = [notebook(os.path.join(d, "bad.ipynb"), "raise RuntimeError('stop')")]
    nbs += [notebook(os.path.join(d, "n%d.ipynb" % i), "print(%d)" % i) for i in range(5)]
    rc, report, err = batch(["-j", "1", "--fail-fast", "-o", os.path.join(d, "out")] + nbs)
    check(rc == 1, "exit %d" % rc)
    check(report["summary"]["not_run"] == 5 and report["summary"]["error"] == 1, report["summary"])
    check(not mine(), "left behind: %r" % mine())


def case_interrupt():
    d = tempfile.mkdtemp(prefix="nbrun-batch-")
    nbs = [notebook(os.path.join(d, "q%d.ipynb" % i), "print('quick')") for i in range(2)]
    nbs += [notebook(os.path.join(d, "s%d.ipynb" % i), "import time\ntime.sleep(120)")
            for i in range(4)]
    out = os.path.join(d, "out")
    p = subprocess.Popen([NBRUN, "batch", "-j", "2", "-o", out] + nbs, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    LAST_PID[0] = p.pid
    # Wait until the quick ones finished and slow ones run, then interrupt.
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with open(os.path.join(out, "report.jsonl")) as f:
                if len(f.readlines()) >= 2:
                    break
        except OSError:
            pass
        time.sleep(0.5)
    time.sleep(3)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    check(p.returncode == 130, "exit %d: %s" % (p.returncode, stderr[-300:]))
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    validate_report(report)
    check(report["interrupted"] is True, "interrupted flag")
    check(report["summary"]["ok"] == 2, report["summary"])
    check(report["summary"]["not_run"] >= 1, report["summary"])
    check(not mine(), "left behind after SIGINT: %r" % mine())


def case_params_papermill():
    # papermill's CLI types -p with Python's int() then float() (inf and nan
    # included), else keeps the text; -r is raw; -y, then -p, then -r win.
    # Nothing may be dropped or changed on the way to the kernel.
    d = tempfile.mkdtemp(prefix="nbrun-batch-")
    names = ["big", "hx", "t", "i", "n", "f", "e", "u", "r", "y"]
    nb = notebook(os.path.join(d, "p.ipynb"), "\n".join("%s = 'default'" % n for n in names),
                  "import json, math\n"
                  "print(json.dumps({k: [type(v).__name__, repr(v)] for k, v in [%s]}))"
                  % ", ".join("(%r, %s)" % (n, n) for n in names),
                  tags=[["parameters"], None])
    out = os.path.join(d, "out")
    rc, report, err = batch(["-o", out, "-r", "r", "raw wins", "-p", "big", "123456789012345678901234567890",
                             "-p", "hx", "0x1f", "-p", "t", "true", "-p", "i", "inf", "-p", "n", "nan",
                             "-p", "f", "1e5", "-p", "e", "", "-p", "u", "1_000",
                             "-y", '{"r": "from -y", "y": 7, "big": 1}', "-p", "r", "typed", nb])
    # -y is YAML as papermill reads it (JSON is YAML), -b the same in base64;
    # -b, then -y, then -p, then -r win
    import base64
    rc2, report2, err2 = batch(["-o", out + "2", "-y", "flag: yes\nhx: 0x1f\nlst: [1, .inf]\ndate: 2001-12-14",
                               "-b", base64.b64encode(b"flag: no\nonly_b: 1").decode(), nb])
    check(rc2 == 0, "exit %d %s" % (rc2, err2[-500:]))
    check(report2["notebooks"][0]["params"] == {"flag": True, "only_b": 1, "hx": 31, "lst": [1, "inf"],
                                                "date": "2001-12-14"}, report2["notebooks"][0]["params"])
    check(rc == 0, "exit %d %s" % (rc, err[-500:]))
    validate_report(report)
    entry = report["notebooks"][0]
    seen = json.loads(entry["result"]["stdout"])
    want = {"big": ["int", "123456789012345678901234567890"], "hx": ["str", "'0x1f'"],
            "t": ["str", "'true'"], "i": ["float", "inf"], "n": ["float", "nan"],
            "f": ["float", "100000.0"], "e": ["str", "''"], "u": ["int", "1000"],
            "r": ["str", "'raw wins'"], "y": ["int", "7"]}
    check(seen == want, "the kernel saw %r" % seen)
    # JSON has no big integers or infinities: the report names them as text
    check(entry["params"] == {"r": "raw wins", "y": 7, "big": "123456789012345678901234567890",
                              "hx": "0x1f", "t": "true", "i": "inf", "n": "nan", "f": 100000.0,
                              "e": "", "u": 1000}, entry["params"])
    # a value that cannot be represented, a name that cannot be assigned: usage errors
    for args in (["-p", "x", b"\xff".decode("utf-8", "surrogateescape")], ["-p", "not-a-name", "1"],
                 ["-r", "class", "1"], ["-y", '{"a b": 1}'], ["-y", "[1, 2]"], ["-b", "!!!"],
                 ["-y", "a: !!python/object:os.system x"]):
        p = subprocess.run([NBRUN, "batch", "-o", os.path.join(d, "no")] + args + [nb],
                           capture_output=True, timeout=30)
        check(p.returncode == 2, "%r: exit %d" % (args, p.returncode))
        check(b"nbrun: error: " in p.stderr and p.stderr.count(b"\n") <= 2, p.stderr)
        check(not os.path.exists(os.path.join(d, "no")), "%r started something" % args)


def case_inputs_regular_only():
    # A FIFO without a writer would hang a batch before its signals are
    # handled (and nbrun run for good); a device or a directory is no
    # notebook: each is a usage error at once, saying what it is.
    d = tempfile.mkdtemp(prefix="nbrun-batch-")
    fifo = os.path.join(d, "f.ipynb")
    os.mkfifo(fifo)
    for cmd, path, what in (("batch", fifo, "a FIFO"), ("run", fifo, "a FIFO"),
                            ("batch", "/dev/zero", "a device"), ("batch", d, "a directory"),
                            ("run", d, "a directory")):
        try:
            p = subprocess.run([NBRUN, cmd, "-o", os.path.join(d, "o"), path], capture_output=True,
                               text=True, timeout=20)
        except subprocess.TimeoutExpired:
            check(False, "nbrun %s %s hangs" % (cmd, path))
        check(p.returncode == 2, "nbrun %s %s: exit %d %r" % (cmd, path, p.returncode, p.stderr))
        check(p.stderr.startswith("nbrun: error: ") and what in p.stderr, p.stderr)
        check(not os.path.exists(os.path.join(d, "o")), "nbrun %s %s started something" % (cmd, path))


def case_papermill_output():
    # The executed notebook reads as papermill's: nbformat 4.5 (ids for an
    # nbformat 4.4 notebook), metadata.papermill with the parameters, times
    # and exception flag, and each cell's papermill status.
    d = tempfile.mkdtemp(prefix="nbrun-batch-")
    nb = {"nbformat": 4, "nbformat_minor": 4, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None, "outputs": [], "source": "n = 1"},
                    {"cell_type": "markdown", "metadata": {}, "source": "# title"},
                    {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "print(n * 2)"},
                    {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "1 / 0"},
                    {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "print('never')"}]}
    path = os.path.join(d, "pm.ipynb")
    with open(path, "w") as f:
        json.dump(nb, f)
    out = os.path.join(d, "out")
    rc, report, err = batch(["-o", out, "-p", "n", "21", path])
    check(rc == 1, "exit %d %s" % (rc, err[-300:]))
    with open(os.path.join(out, "pm", "notebook.ipynb")) as f:
        ex = json.load(f)
    check(ex["nbformat"] == 4 and ex["nbformat_minor"] == 5, (ex["nbformat"], ex["nbformat_minor"]))
    ids = [c.get("id") for c in ex["cells"]]
    check(all(ids) and len(set(ids)) == len(ids), ids)
    pm = ex["metadata"]["papermill"]
    check(pm["parameters"] == {"n": 21}, pm)
    check(pm["exception"] is True and isinstance(pm["duration"], float), pm)
    import datetime
    start = datetime.datetime.fromisoformat(pm["start_time"])
    end = datetime.datetime.fromisoformat(pm["end_time"])
    check(start <= end and pm["output_path"] == os.path.join(out, "pm", "notebook.ipynb"), pm)
    # cells: marker, parameters, injected, markdown, print, anchor marker, 1/0, never
    status = [(c["metadata"].get("papermill") or {}).get("status") for c in ex["cells"]]
    check(status == [None, "completed", "completed", "completed", "completed", None, "failed", "pending"],
          status)
    check(ex["cells"][2]["metadata"]["tags"] == ["injected-parameters"], ex["cells"][2])
    check(report["notebooks"][0]["result"]["stdout"] == "42\n", report["notebooks"][0]["result"]["stdout"])


# What papermill does with each notebook (papermill/execute.py, cli.py and its
# documentation), and the exit code nbrun gives it (docs/papermill.md).
PARITY = [
    # name, cells, extra args, papermill: (exit, executed cells), nbrun exit, status
    ("ok", ["x = 1", "print(x + 1)"], [], (0, 2), 0, "ok"),
    ("raises", ["print('a')", "raise ValueError('v')", "print('never')"], [], (1, 2), 1, "error"),
    ("exit_clean", ["print('a')", "import sys; sys.exit()", "print('never')"], [], (0, 2), 0, "ok"),
    ("exit_zero", ["import sys; sys.exit(0)", "print('never')"], [], (0, 1), 0, "ok"),
    ("raise_systemexit", ["raise SystemExit", "print('never')"], [], (0, 1), 0, "ok"),
    ("exit_code", ["import sys; sys.exit(3)", "print('never')"], [], (1, 1), 1, "error"),
    ("magic_error", ["%undefined_magic_xyz", "print('never')"], [], (1, 1), 1, "error"),
    ("cell_timeout", ["import time; time.sleep(60)", "print('never')"], ["--cell-timeout", "3s"], (1, 1), 3, "timeout"),
    ("kernel_dies", ["import os; os._exit(1)", "print('never')"], [], (1, 1), 5, "failed"),
]


def case_papermill_parity():
    d = tempfile.mkdtemp(prefix="nbrun-parity-")
    for name, cells, extra, (pm_exit, pm_ran), want_exit, want_status in PARITY:
        path = notebook(os.path.join(d, name + ".ipynb"), *cells)
        out = os.path.join(d, name)
        p = subprocess.run([NBRUN, "run", "--json", "-o", out] + extra + [path], capture_output=True,
                           text=True, timeout=300)
        doc = json.loads(p.stdout)
        check(p.returncode == want_exit and doc["status"] == want_status,
              "%s: exit %d %s (papermill exits %d; nbrun must %d %s)" % (name, p.returncode, doc["status"],
                                                                        pm_exit, want_exit, want_status))
        check((p.returncode == 0) == (pm_exit == 0), "%s: success differs from papermill's" % name)
        with open(os.path.join(out, "notebook.ipynb")) as f:
            ex = json.load(f)
        code = [c for c in ex["cells"] if c["cell_type"] == "code"]
        ran = [c for c in code if c["metadata"]["papermill"]["status"] != "pending"]
        check(len(ran) == pm_ran, "%s: %d cells executed, papermill executes %d" % (name, len(ran), pm_ran))
        check("never" not in doc["stdout"], "%s: a cell after the stop ran" % name)
        markers = [c for c in ex["cells"] if "papermill-error-cell-tag" in c["metadata"].get("tags", [])]
        check(len(markers) == (2 if want_status == "error" else 0),
              "%s: %d error markers (papermill writes two for a raising cell)" % (name, len(markers)))
        check(ex["nbformat_minor"] == 5 and "papermill" in ex["metadata"], "%s: papermill metadata" % name)


def case_server():
    """batch --server: the same report as a local batch, the outputs saved here."""
    from serve_cases import Server
    tmp = tempfile.mkdtemp(prefix="nbrun-batch-server-")
    nbs = [notebook(os.path.join(tmp, "params.ipynb"), "x = 1", "print(x * 2)", tags=[["parameters"], None]),
           notebook(os.path.join(tmp, "raises.ipynb"), "print('before')", "1/0"),
           notebook(os.path.join(tmp, "chart.ipynb"),
                    "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
                    "open('/mnt/data/out.csv', 'w').write('a\\n1\\n')")]
    rc_l, local, err_l = batch(["-o", os.path.join(tmp, "local"), "-p", "x", "21", "-j", "2",
                                "--timeout", "600s"] + nbs)
    check(rc_l == 1 and local, "local batch: %d %s" % (rc_l, err_l))
    s = Server(extra=["--timeout", "10m"])
    try:
        os.environ["NBRUN_TOKEN"] = s.token
        rc, remote, err = batch(["--server", s.url, "-o", os.path.join(tmp, "remote"), "-p", "x", "21",
                                 "-j", "2"] + nbs)
        check(rc == rc_l and remote, "batch --server: exit %d (local %d): %s\n%s" % (rc, rc_l, err, s.stderr()[-1500:]))
        validate_report(remote)
        by = {e["name"]: e for e in local["notebooks"]}
        for e in remote["notebooks"]:
            l = by[e["name"]]
            check(e["status"] == l["status"] and e["params"] == l["params"] and
                  e["first_error"] == l["first_error"], "%s: %r vs %r" % (e["name"], e, l))
            r, lr = e["result"], l["result"]
            check(r["stdout"] == lr["stdout"] and len(r["images"]) == len(lr["images"]) and
                  [f["path"] for f in r["files"]] == [f["path"] for f in lr["files"]],
                  "%s: results differ:\n%r\n%r" % (e["name"], r, lr))
            check(r["out_dir"] == os.path.join(tmp, "remote", e["name"]) and "retries" not in e, e)
            for name in ["result.json", "notebook.ipynb"] + [i["path"] for i in r["images"]] + \
                    [f["path"] for f in r["files"]]:
                check(os.path.isfile(os.path.join(r["out_dir"], name)), "%s: no %s" % (e["name"], name))
        check(remote["notebooks"][0]["result"]["stdout"] == "42\n", remote["notebooks"][0])
        # The limits are the server's; --retries and --token-file go with --server.
        for args, what in ((["--server", s.url, "--memory", "1g"], "--memory"),
                           (["--retries", "1"], "--retries"), (["--server", s.url, "--retries", "x"], "--retries")):
            rc, _, err = batch(args + ["-o", os.path.join(tmp, "u"), nbs[0]])
            check(rc == 2 and what in err, "%r: %d %s" % (args, rc, err))
    finally:
        os.environ.pop("NBRUN_TOKEN", None)
        s.stop()
    return "3 notebooks through a server: statuses, params, errors, stdout, images and files as a local batch's"


def case_server_retry():
    """The server killed under a notebook: the batch sends it again once a server answers."""
    tmp = tempfile.mkdtemp(prefix="nbrun-batch-retry-")
    sock, state = os.path.join(tmp, "s.sock"), os.path.join(tmp, "state")
    log = open(os.path.join(tmp, "serve.log"), "w+")
    token = "batch-retry-" + os.urandom(16).hex()
    with open(os.path.join(tmp, "token"), "w") as f:
        f.write(token + "\n")

    def serve():
        before = os.path.getsize(log.name)
        p = subprocess.Popen([NBRUN, "serve", "--state-dir", state, "--socket", sock, "--pool", "0",
                              "--token-file", os.path.join(tmp, "token"), "--timeout", "10m"],
                             stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while "nbrun: serve: state in" not in open(log.name).read()[before:]:
            check(p.poll() is None and time.time() < deadline, "serve did not start")
            time.sleep(0.05)
        return p

    first = serve()
    second = None
    try:
        nb = notebook(os.path.join(tmp, "slow.ipynb"), "import time\ntime.sleep(4)\nprint('done')")
        b = subprocess.Popen([NBRUN, "batch", "--json", "--server", "unix:" + sock, "--retries", "3",
                              "-o", os.path.join(tmp, "out"), nb], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, NBRUN_TOKEN=token))
        time.sleep(2.5)  # the cell sleeps 4 s: the run is not over yet
        first.kill()
        first.wait()
        second = serve()
        out, err = b.communicate(timeout=300)
        check(b.returncode == 0, "batch: exit %d: %s\n%s" % (b.returncode, err, out[-3000:]))
        report = json.loads(out)
        validate_report(report)
        e = report["notebooks"][0]
        check(e["status"] == "ok" and e["result"]["stdout"] == "done\n", e)
        check(len(e.get("retries", [])) >= 1 and all(r["error"] for r in e["retries"]),
              "no retry recorded: %r" % e)
        # The restarted server reclaims what the killed one left.
        deadline = time.time() + 60
        while leftovers(label="nbrun.pid=%d" % first.pid) and time.time() < deadline:
            time.sleep(0.5)
        check(not leftovers(label="nbrun.pid=%d" % first.pid),
              "left by the killed server: %r" % leftovers(label="nbrun.pid=%d" % first.pid))
    finally:
        for p in (first, second):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        log.close()
    return "server SIGKILLed mid-notebook: %d retr%s recorded, the notebook ran to ok on the restarted server, nothing left behind" % (
        len(e["retries"]), "y" if len(e["retries"]) == 1 else "ies")


class CutProxy:
    """Loopback TCP to the server's unix socket; the first POST /v1/runs gets its
    reply read whole from the server (the run is over), then only the reply's
    head, and the connection closed: a reply cut after the server finished."""

    def __init__(self, sock):
        import socket
        import threading
        self.upstream, self.first, self.posts = sock, None, 0
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        import threading
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        import socket
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            n = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
            while len(body) < n:
                chunk = c.recv(65536)
                if not chunk:
                    return
                body += chunk
            # The server closes after its reply: the relay knows where a reply ends.
            lines = [l for l in head.split(b"\r\n") if not l.lower().startswith(b"connection:")]
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            u.connect(self.upstream)
            u.sendall(b"\r\n".join(lines + [b"Connection: close"]) + b"\r\n\r\n" + body)
            post = head.startswith(b"POST /v1/runs ")
            if post:
                self.posts += 1
            reply = b""
            while True:
                chunk = u.recv(65536)
                if not chunk:
                    break
                if post and self.posts > 1:
                    c.sendall(chunk)
                reply += chunk
            u.close()
            if post and self.posts == 1:
                self.first = reply
                c.sendall(reply.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n")
            elif not post:
                c.sendall(reply)
        finally:
            c.close()


def case_server_retry_key():
    """A reply cut after the server finished: the retry gets that run's result, nothing runs twice."""
    import re
    from serve_cases import EngineCreates, Server
    tmp = tempfile.mkdtemp(prefix="nbrun-batch-key-")
    srv = Server(extra=["--timeout", "10m"])
    try:
        made = EngineCreates(srv.proc.pid)
        proxy = CutProxy(srv.sock)
        nb = notebook(os.path.join(tmp, "rand.ipynb"), "import random\nprint(random.random())")
        b = subprocess.run([NBRUN, "batch", "--json", "--server", "http://127.0.0.1:%d" % proxy.port,
                            "--retries", "2", "-o", os.path.join(tmp, "out"), nb], capture_output=True,
                           text=True, timeout=600, env=dict(os.environ, NBRUN_TOKEN=srv.token))
        check(b.returncode == 0, "batch: exit %d: %s\n%s" % (b.returncode, b.stderr, b.stdout[-3000:]))
        report = json.loads(b.stdout)
        validate_report(report)
        e = report["notebooks"][0]
        first = re.search(rb'"run_id":"([0-9a-f]+)"', proxy.first or b"")
        check(first, "the first reply had no result: %r" % (proxy.first or b"")[-500:])
        check(proxy.posts == 2 and len(e.get("retries", [])) == 1, "posts %d, retries %r" % (proxy.posts, e.get("retries")))
        check(e["status"] == "ok" and e["result"]["run_id"] == first.group(1).decode(),
              "the retry ran again: %r, the first was %s" % (e["result"], first.group(1)))
        with open(os.path.join(e["out_dir"], "result.json")) as f:
            check(json.load(f)["stdout"] == e["result"]["stdout"], "saved result differs")
        # The server and the engine agree: one run, one container.
        m = srv.metrics()
        check(m.get('nbrun_runs_total{status="ok"}') == 1, "runs: %r" % m)
        n = made.count()
        check(n == 1, "containers created: %d, want 1" % n)
    finally:
        srv.stop()
    return "first reply cut after the run ended: 1 retry recorded, its answer the first run (%s), 1 container" % first.group(1).decode()


def case_server_busy():
    """A server with all its runs in use answers busy as a stream's last line: the batch asks again."""
    from serve_cases import Server
    tmp = tempfile.mkdtemp(prefix="nbrun-batch-busy-")
    srv = Server(extra=["--timeout", "10m", "--max-runs", "1"])
    try:
        nbs = [notebook(os.path.join(tmp, "slow%d.ipynb" % i), "import time\ntime.sleep(3)\nprint(%d)" % i)
               for i in range(2)]
        b = subprocess.run([NBRUN, "batch", "--json", "--server", srv.url, "--retries", "10", "-j", "2",
                            "-o", os.path.join(tmp, "out")] + nbs, capture_output=True, text=True,
                           timeout=900, env=dict(os.environ, NBRUN_TOKEN=srv.token))
        check(b.returncode == 0, "batch: exit %d: %s\n%s" % (b.returncode, b.stderr, b.stdout[-3000:]))
        report = json.loads(b.stdout)
        validate_report(report)
        retries = []
        for e in report["notebooks"]:
            i = int(e["name"][4:])
            check(e["status"] == "ok" and e["result"]["stdout"] == "%d\n" % i, e)
            retries += e.get("retries", [])
        # One run at a time on the server: the notebook second to it was told busy at least once.
        check(retries and all("runs are executing" in r["error"] for r in retries),
              "no busy retry recorded: %r" % report["notebooks"])
        runs = os.listdir(os.path.join(srv.state, "runs"))
        check(len(runs) == 2, "%d runs kept for 2 notebooks: %r" % (len(runs), runs))
    finally:
        srv.stop()
    return "2 notebooks on a server of 1 run at a time: both ok, %d busy answer%s retried" % (
        len(retries), "" if len(retries) == 1 else "s")


def case_usage():
    for args in (["-j", "0", "x.ipynb"], [], ["-p", "onlyname"], ["-y", "[1]", "x.ipynb"],
                 ["--timeout", "0", "x.ipynb"]):
        p = subprocess.run([NBRUN, "batch"] + args, capture_output=True, text=True, timeout=30)
        check(p.returncode == 2, "%r: exit %d" % (args, p.returncode))
        check("nbrun: error: " in p.stderr, p.stderr)
    # The same server twice: refused at once, nothing made (a retry once drew it for ever).
    tmp = tempfile.mkdtemp(prefix="nbrun-batch-usage-")
    nb = notebook(os.path.join(tmp, "nb.ipynb"), "print(1)")
    url = "unix:" + os.path.join(tmp, "gone.sock")
    for servers in ([url, url], [url, "unix:/elsewhere.sock", url]):
        p = subprocess.run([NBRUN, "batch", "--server", ",".join(servers), "--retries", "1",
                            "-o", os.path.join(tmp, "out"), nb], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, NBRUN_TOKEN="x"))
        check(p.returncode == 2 and p.stderr.startswith("nbrun: error: ") and "twice" in p.stderr and
              p.stderr.count("\n") <= 2, "%r: exit %d %s" % (servers, p.returncode, p.stderr))
        check(not os.path.exists(os.path.join(tmp, "out")), "a refused batch made its output directory")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: batch_cases.py CASE\ncases: " + " ".join(sorted(CASES)))
        sys.exit(2)
    CASES[sys.argv[1]]()
    print("ok", sys.argv[1])
