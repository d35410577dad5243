#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Integration tests of `nbrun run` against the real engine and image.

Usage: run_cases.py CASE   (one meson test per case; see meson.build)
Every case asserts on the result document, the files on disk and the engine
state (nothing labelled with the run's id may be left behind).
"""
import concurrent.futures
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import urllib.parse

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
SCHEMA = os.path.join(SRCDIR, "schemas", "result.schema.json")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(args, stdin=None, timeout=300):
    out = tempfile.mkdtemp(prefix="nbrun-it-")
    outdir = os.path.join(out, "o")
    p = subprocess.run([NBRUN, "run", "--json", "-o", outdir] + args, input=stdin,
                       capture_output=True, timeout=timeout, text=True)
    try:
        doc = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        fail("stdout is not JSON: %r (stderr %r)" % (p.stdout[:500], p.stderr[:500]))
    return p.returncode, doc, outdir, p.stderr


def run_ok(args, **kw):
    """run() for a case that must succeed: exit 0 and a result document."""
    rc, doc, out, err = run(args, **kw)
    check(rc == 0 and doc is not None,
          "exit %d: %r (stderr %r)" % (rc, doc and doc.get("error"), err[-300:]))
    return doc, out


def validate(doc):
    try:
        import jsonschema
    except ImportError:
        fail("python3-jsonschema is missing (scripts/setup installs it)")
    with open(SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator(schema).validate(doc)


def engine(path, method="GET"):
    """A request to the engine over its unix socket (no docker CLI needed): its JSON reply, or None."""
    import http.client
    import socket

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect("/var/run/docker.sock")

    c = Conn("localhost")
    c.request(method, path)
    r = c.getresponse()
    data = r.read()
    return json.loads(data) if data.strip() else None


def leftovers(run_id=None, label=None):
    """Containers and volumes nbrun labelled: of one run, of one label, or all."""
    if not label:
        label = "nbrun.run=%s" % run_id if run_id else "nbrun.run"
    f = urllib.parse.quote(json.dumps({"label": [label]}))
    cs = engine("/containers/json?all=1&filters=" + f)
    vs = engine("/volumes?filters=" + f).get("Volumes") or []
    return [c["Names"][0] for c in cs] + [v["Name"] for v in vs]


def finish(doc, outdir):
    validate(doc)
    check(doc["out_dir"] == outdir, "out_dir %r != %r" % (doc["out_dir"], outdir))
    with open(os.path.join(outdir, "result.json")) as f:
        check(json.load(f) == doc, "result.json differs from --json output")
    left = leftovers(doc["run_id"])
    check(not left, "left behind: %r" % left)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    check(head[:8] == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % path)
    return struct.unpack(">II", head[16:24])


# ---- cases -----------------------------------------------------------------

def case_print_and_result():
    doc, out = run_ok(["-c", "print('hello', 6*7)\n# %%\n6*7"])
    check(doc["status"] == "ok", doc["status"])
    check(doc["stdout"] == "hello 42\n", repr(doc["stdout"]))
    check([r["text"] for r in doc["results"]] == ["42"], doc["results"])
    check(doc["results"][0]["cell"] == 1, doc["results"])
    check(doc["cells"] == 2, doc["cells"])
    check(doc.get("node") == socket.gethostname(), "node %r, this host is %r" % (doc.get("node"), socket.gethostname()))
    check(os.path.isfile(os.path.join(out, "notebook.ipynb")), "no notebook.ipynb")
    finish(doc, out)


def case_error_keeps_earlier_cells():
    code = "print('cell one')\n# %%\nraise ValueError('bad value')\n# %%\nprint('cell three')\n"
    rc, doc, out, err = run(["-c", code])
    check(rc == 1, "exit %d (want 1)" % rc)
    check(doc["status"] == "error", doc["status"])
    check("cell one" in doc["stdout"], "cell 1 output lost: %r" % doc["stdout"])
    e = doc["error"]
    check(e and e["name"] == "ValueError" and e["value"] == "bad value", e)
    check(e["cell"] == 1, e)
    check("\x1b[" not in e["traceback"], "ANSI escapes left in traceback")
    check("raise ValueError" in e["traceback"], e["traceback"])
    finish(doc, out)


def case_reply_error():
    # IPython answers an unknown magic with an execute_reply of status error
    # and no error output: still a failed cell (exit 1, the error named).
    rc, doc, out, err = run(["-c", "%undefined_magic_xyz"])
    check(rc == 1, "exit %d (want 1)" % rc)
    check(doc["status"] == "error", doc["status"])
    e = doc["error"]
    check(e and e["cell"] == 0 and e["name"] == "UsageError", e)
    check("undefined_magic_xyz" in e["value"], e)
    finish(doc, out)


def case_kernel_death_keeps_cell():
    # The kernel dies in the middle of a cell (os._exit, a segfault, the OOM
    # killer): what that cell printed before is kept, as papermill keeps it,
    # and the cells after it do not run.
    deaths = {"exit": ("import os\nos._exit(3)", "failed", "exit status 3"),
              "segfault": ("import ctypes\nctypes.string_at(0)", "failed", "signal 11"),
              "oom": ("x = []\nwhile True:\n    x.append(bytearray(32 << 20))", "oom", "memory")}
    for name, (death, status, why) in deaths.items():
        code = ("print('first cell')\n# %%\n"
                "import sys, time\nprint('said before', flush=True)\n"
                "print('warned', file=sys.stderr, flush=True)\n"
                # ipykernel sends outputs from a thread of its own: give it the moment
                "time.sleep(0.5)\n" + death + "\n# %%\nprint('never')\n")
        rc, doc, out, err = run(["--memory", "256m", "-c", code])
        check(doc["status"] == status and rc in (3, 5), "%s: exit %d, %s: %s" % (name, rc, doc["status"], doc["message"]))
        check(why in doc["message"], "%s: message %r" % (name, doc["message"]))
        check(doc["stdout"] == "first cell\nsaid before\n", "%s: stdout %r" % (name, doc["stdout"]))
        check(doc["stderr"] == "warned\n", "%s: stderr %r" % (name, doc["stderr"]))
        with open(os.path.join(out, "notebook.ipynb")) as f:
            cells = json.load(f)["cells"]
        texts = [[o.get("text") for o in c["outputs"]] for c in cells]
        check(texts == [["first cell\n"], ["said before\n", "warned\n"], []], "%s: %r" % (name, texts))
        finish(doc, out)


def case_control_names():
    # A C1 control (U+009B is a CSI to many terminals) is refused in an
    # exported name like C0 and DEL; a bidi override (U+202E) may be in a
    # name, kept true in the JSON and escaped in what a terminal shows.
    code = ("for n in ['\\u009b31mX', 'a\\u0085b', '\\u202eevil.txt', 'ok.txt']:\n"
            "    open('/mnt/data/' + n, 'w').write('x')\n"
            "print('shown \\u202egnp.exe \\u2066x\\u2069 \\u009b31m')\n")
    doc, out = run_ok(["-c", code])
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    check(skipped.get("\u009b31mX") == "control character in name", skipped)
    check(skipped.get("a\u0085b") == "control character in name", skipped)
    files = sorted(f["path"] for f in doc["files"])
    check(files == ["files/ok.txt", "files/\u202eevil.txt"], files)
    check(not os.path.exists(os.path.join(out, "files", "\u009b31mX")), "C1 name exported")
    check(doc["stdout"] == "shown \u202egnp.exe \u2066x\u2069 \n", "stdout: %r" % doc["stdout"])
    finish(doc, out)
    p = subprocess.run([NBRUN, "run", "-o", tempfile.mkdtemp() + "/o", "-c", code],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "human run: exit %d %s" % (p.returncode, p.stderr[-300:]))
    for raw in ("\u202e", "\u2066", "\u2069", "\u009b"):
        check(raw not in p.stdout, "raw %r reached the terminal: %r" % (raw, p.stdout))
    # a C1 CSI is a sequence like ESC [: taken out of the text with its parameters
    shown = [l for l in p.stdout.splitlines() if l.startswith("shown")]
    check(shown == ["shown \\u202egnp.exe \\u2066x\\u2069 "], p.stdout)
    check("files/\\u202eevil.txt" in p.stdout, p.stdout)


def case_same_out_dir():
    # Two runs started together with the same new -o DIR: one gets it, the
    # other a clear usage error; the winner's result.json is its own.
    for attempt in range(3):
        out = os.path.join(tempfile.mkdtemp(), "shared")
        procs = [subprocess.Popen([NBRUN, "run", "--json", "-o", out, "-c", "print(%d)" % i],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
        res = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
        codes = sorted(rc for rc, _, _ in res)
        check(codes == [0, 2], "attempt %d: exits %r: %r" % (attempt, codes, [e for _, _, e in res]))
        won = [i for i, (rc, _, _) in enumerate(res) if rc == 0][0]
        lost = res[1 - won]
        check("is in use by another run" in lost[2] and lost[2].startswith("nbrun: error: "), lost[2])
        check(not lost[1].strip(), "the loser printed a result: %r" % lost[1][:200])
        doc = json.loads(res[won][1])
        check(doc["status"] == "ok" and doc["stdout"] == "%d\n" % won, doc)
        check(sorted(os.listdir(out)) == ["notebook.ipynb", "result.json"], os.listdir(out))
        finish(doc, out)


def case_host_disk_full():
    # The output directory on a small filesystem: a file that does not fit is
    # skipped as "host disk full", truncated is set and stderr warns; the
    # run itself ran fine. 2 MiB: the archive of /mnt/data does not fit;
    # 8 MiB: the archive fits, the exported file does not.
    code = "open('/mnt/data/big.bin', 'wb').write(b'x' * (5 << 20))\nopen('/mnt/data/s.txt', 'w').write('s')\n"
    for size in ("2m", "8m"):
        mnt = tempfile.mkdtemp(prefix="nbrun-small-")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", mnt],
                           capture_output=True, text=True)
        check(p.returncode == 0, "cannot mount a small tmpfs (the suite runs as root): %s" % p.stderr)
        try:
            out = os.path.join(mnt, "o")
            p = subprocess.run([NBRUN, "run", "--json", "-o", out, "-c", code], capture_output=True,
                               text=True, timeout=300)
            doc = json.loads(p.stdout)
            check(p.returncode == 0 and doc["status"] == "ok", "%s: exit %d %r" % (size, p.returncode, doc["message"]))
            reasons = {s["path"]: s["reason"] for s in doc["skipped"]}
            check("host disk full" in reasons.values(), "%s: skipped %r" % (size, doc["skipped"]))
            check(reasons.get("big.bin", reasons.get("/mnt/data")) == "host disk full", reasons)
            check(not any("malformed" in r for r in reasons.values()), "%s: %r" % (size, reasons))
            check(doc["truncated"] is True, "%s: truncated %r" % (size, doc["truncated"]))
            check("nbrun: warning: the host disk is full" in p.stderr, "%s: stderr %r" % (size, p.stderr))
            check(not any(f["path"] == "files/big.bin" for f in doc["files"]), doc["files"])
            check(not os.path.exists(os.path.join(out, "files", "big.bin")), "a partial big.bin was left")
            validate(doc)
        finally:
            subprocess.run(["umount", mnt])
            os.rmdir(mnt)


def case_results_disk_full():
    # The output directory's disk is full when the run writes its results:
    # nbrun run fails with a one-line message and exit 5, and leaves no
    # half-written notebook.ipynb or result.json and no temporary file; once
    # there is room again the next run in the same place writes both whole.
    mnt = tempfile.mkdtemp(prefix="nbrun-small-")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True, text=True)
    check(p.returncode == 0, "cannot mount a small tmpfs (the suite runs as root): %s" % p.stderr)
    try:
        out = os.path.join(mnt, "o")
        os.mkdir(out)
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        p = subprocess.run([NBRUN, "run", "--timeout", "5m", "-o", out, "-c", "print('x' * 1000)"],
                           capture_output=True, text=True, timeout=400)
        err = p.stderr.strip()
        check(p.returncode == 5, "exit %d: %r" % (p.returncode, err))
        check(err.startswith("nbrun: error: ") and "\n" not in err and "No space left on device" in err,
              "message: %r" % err)
        left = [os.path.relpath(os.path.join(d, n), out) for d, _, names in os.walk(out) for n in names]
        check(not [n for n in left if n.endswith(".tmp") or n in ("notebook.ipynb", "result.json")],
              "a partial result was left: %r" % left)
        os.unlink(os.path.join(mnt, "filler"))
        out2 = os.path.join(mnt, "o2")
        p = subprocess.run([NBRUN, "run", "--timeout", "5m", "--json", "-o", out2, "-c", "print('x' * 1000)"],
                           capture_output=True, text=True, timeout=400)
        check(p.returncode == 0, "with room again: exit %d %r" % (p.returncode, p.stderr[-300:]))
        with open(os.path.join(out2, "result.json")) as f:
            check(json.load(f)["stdout"] == "x" * 1000 + "\n", "result.json on disk")
        with open(os.path.join(out2, "notebook.ipynb")) as f:
            check(json.load(f)["cells"], "notebook.ipynb on disk")
        check(sorted(os.listdir(out2)) == ["notebook.ipynb", "result.json"], os.listdir(out2))
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


def case_stop_at_first_error():
    # As papermill and Jupyter's Run All: execution stops at the first cell
    # that raises; the later cells stay unexecuted (old outputs cleared) and
    # papermill's error markers frame the failing cell. --allow-errors goes on.
    tmp = tempfile.mkdtemp()
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "cells": [{"cell_type": "code", "id": "a", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": "open('/mnt/data/one', 'w').write('1')\nprint('cell one')"},
                    {"cell_type": "code", "id": "b", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": "raise ValueError('stop here')"},
                    {"cell_type": "code", "id": "c", "metadata": {}, "execution_count": 9,
                     "outputs": [{"output_type": "stream", "name": "stdout", "text": "stale\n"}],
                     "source": "open('/mnt/data/three', 'w').write('3')\nprint('cell three')"}]}
    path = os.path.join(tmp, "nb.ipynb")
    with open(path, "w") as f:
        json.dump(nb, f)
    for args in ([path], ["-c", "print('cell one')\n# %%\nraise ValueError('stop here')\n# %%\nprint('cell three')"]):
        rc, doc, out, err = run(args)
        check(rc == 1 and doc["status"] == "error", "exit %d %s" % (rc, doc["status"]))
        check(doc["stdout"] == "cell one\n", "later cells ran or stale outputs kept: %r" % doc["stdout"])
        check(doc["error"]["cell"] == 1 and doc["error"]["name"] == "ValueError", doc["error"])
        with open(os.path.join(out, "notebook.ipynb")) as f:
            cells = json.load(f)["cells"]
        tags = [c["metadata"].get("tags") for c in cells]
        check(tags[0] == ["papermill-error-cell-tag"] and tags[2] == ["papermill-error-cell-tag"], tags)
        check("In [2]" in cells[0]["source"] and 'id="papermill-error-cell"' in cells[2]["source"], cells[0])
        check(cells[4]["execution_count"] is None and cells[4]["outputs"] == [], cells[4])
        if args == [path]:
            check([f["path"] for f in doc["files"]] == ["files/one"], doc["files"])
        finish(doc, out)
    rc, doc, out, err = run(["--allow-errors", path])
    check(rc == 1 and doc["stdout"] == "cell one\ncell three\n", "allow-errors: %r" % doc["stdout"])
    with open(os.path.join(out, "notebook.ipynb")) as f:
        check(len(json.load(f)["cells"]) == 3, "markers with --allow-errors")
    finish(doc, out)


def case_system_exit():
    # sys.exit(), sys.exit(0) and raise SystemExit end the notebook as a
    # success, as in papermill: exit 0, no error, the later cells not run.
    # Another code or a message is an error.
    for stmt, ok in (("import sys; sys.exit()", True), ("import sys; sys.exit(0)", True),
                     ("raise SystemExit", True), ("import sys; sys.exit(1)", False),
                     ("import sys; sys.exit('bye')", False)):
        rc, doc, out, err = run(["-c", "print('a')\n# %%\n" + stmt + "\n# %%\nprint('after')\n"])
        check(rc == (0 if ok else 1) and doc["status"] == ("ok" if ok else "error"),
              "%s: exit %d, %s" % (stmt, rc, doc["status"]))
        check((doc["error"] is None) == ok, "%s: error %r" % (stmt, doc["error"]))
        check(doc["stdout"] == "a\n", "%s: stdout %r" % (stmt, doc["stdout"]))
        finish(doc, out)


def case_chart_png():
    code = ("import matplotlib.pyplot as plt\n"
            "%config InlineBackend.print_figure_kwargs = {'bbox_inches': None}\n"
            "fig = plt.figure(figsize=(4, 3), dpi=100)\n"
            "plt.plot([1, 2, 3], [1, 4, 9])\n"
            "plt.show()\n")
    doc, out = run_ok(["-c", code])
    check(len(doc["images"]) == 1, doc["images"])
    img = doc["images"][0]
    check(img["mime"] == "image/png", img)
    path = os.path.join(out, img["path"])
    check(os.path.getsize(path) == img["bytes"], "size mismatch")
    check(png_size(path) == (400, 300), "PNG is %r, want 400x300" % (png_size(path),))
    finish(doc, out)


def case_pandas_csv_file():
    tmp = tempfile.mkdtemp()
    csv = os.path.join(tmp, "sales.csv")
    with open(csv, "w") as f:
        f.write("region,amount\nnorth,10\nsouth,5\nnorth,7\n")
    code = ("import pandas as pd\n"
            "df = pd.read_csv('/mnt/data/sales.csv')\n"
            "s = df.groupby('region')['amount'].sum()\n"
            "s.to_csv('/mnt/data/summary.csv')\n"
            "print(s.to_dict())\n")
    doc, out = run_ok(["-f", csv, "-c", code])
    check("{'north': 17, 'south': 5}" in doc["stdout"], doc["stdout"])
    paths = [f["path"] for f in doc["files"]]
    check(paths == ["files/summary.csv"], "exported %r (the untouched input must not be)" % paths)
    with open(os.path.join(out, "files", "summary.csv")) as f:
        check(f.read() == "region,amount\nnorth,17\nsouth,5\n", "summary.csv content")
    import hashlib
    with open(os.path.join(out, "files", "summary.csv"), "rb") as f:
        check(hashlib.sha256(f.read()).hexdigest() == doc["files"][0]["sha256"], "sha256")
    finish(doc, out)


def case_file_left_open():
    # The kernel is stopped at once after the last cell: what the code wrote
    # to a file it never closed must still be flushed and exported.
    code = ("f = open('/mnt/data/left_open.txt', 'w')\n"
            "f.write('line\\n' * 5000)\n"
            "b = open('/mnt/data/left_open.bin', 'wb')\n"
            "b.write(bytes(range(256)) * 10)\n"
            "print('written')\n")
    doc, out = run_ok(["-c", code])
    sizes = {f["path"]: f["bytes"] for f in doc["files"]}
    check(sizes == {"files/left_open.txt": 25000, "files/left_open.bin": 2560}, sizes)
    with open(os.path.join(out, "files", "left_open.txt")) as f:
        check(f.read() == "line\n" * 5000, "left_open.txt content")
    finish(doc, out)


def case_unicode():
    doc, out = run_ok(["-c", "print('héllo wörld ✓ 日本語 🎉')\n'ünï'"])
    check(doc["stdout"] == "héllo wörld ✓ 日本語 🎉\n", repr(doc["stdout"]))
    check(doc["results"][0]["text"] == "'ünï'", doc["results"])
    finish(doc, out)


def case_timeout():
    code = "print('before', flush=True)\n# %%\nimport time\ntime.sleep(600)\n"
    rc, doc, out, err = run(["--timeout", "10s", "--cell-timeout", "10s", "-c", code])
    check(rc == 3, "exit %d (want 3)" % rc)
    check(doc["status"] == "timeout", doc["status"])
    check("before" in doc["stdout"], "outputs so far lost: %r" % doc["stdout"])
    check(doc["duration_ms"] < 30000, "took %d ms" % doc["duration_ms"])
    finish(doc, out)


def case_cell_timeout():
    code = ("print('before')\n# %%\nimport time\nprint('slow', flush=True)\n"
            "while True: time.sleep(0.1)\n# %%\nprint('after')\n")
    rc, doc, out, err = run(["--timeout", "60s", "--cell-timeout", "3s", "--allow-errors", "-c", code])
    check(rc == 3, "exit %d (want 3)" % rc)
    check(doc["status"] == "timeout", doc["status"])
    check("cell 1" in doc["message"], doc["message"])
    check(doc["stdout"] == "before\nslow\nafter\n", "outputs: %r" % doc["stdout"])
    check(doc["error"] and doc["error"]["cell"] == 1, doc["error"])
    check(doc["duration_ms"] < 30000, "took %d ms" % doc["duration_ms"])
    finish(doc, out)


def case_oom():
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 1024 * 1024))\n"
    rc, doc, out, err = run(["--memory", "128m", "-c", code])
    check(rc == 3, "exit %d (want 3), %r" % (rc, doc and doc.get("message")))
    check(doc["status"] == "oom", doc["status"])
    finish(doc, out)


def case_network_off():
    code = ("import socket\n"
            "for host, port in [('10.255.255.1', 53), ('1.1.1.1', 80)]:\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=3)\n"
            "        print('CONNECTED', host)\n"
            "    except OSError as e:\n"
            "        print('refused', type(e).__name__)\n"
            "try:\n"
            "    socket.gethostbyname('deb.debian.org')\n"
            "    print('RESOLVED')\n"
            "except OSError:\n"
            "    print('no dns')\n"
            "import os\n"
            "print(sorted(os.listdir('/sys/class/net')))\n")
    doc, out = run_ok(["-c", code])
    check("CONNECTED" not in doc["stdout"] and "RESOLVED" not in doc["stdout"], doc["stdout"])
    check(doc["stdout"].count("refused") == 2 and "no dns" in doc["stdout"], doc["stdout"])
    check("['lo']" in doc["stdout"], "interfaces: %r" % doc["stdout"])
    finish(doc, out)


def case_concurrent():
    def one(i):
        code = ("import os, time\n"
                "open('/mnt/data/mine.txt', 'w').write('run %d')\n"
                "time.sleep(1)\n"
                "print(sorted(os.listdir('/mnt/data')), open('/mnt/data/mine.txt').read())\n" % i)
        return i, run(["-c", code])

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        results = list(ex.map(one, range(4)))
    dirs = set()
    for i, (rc, doc, out, err) in results:
        check(rc == 0, "run %d exit %d %r" % (i, rc, err))
        check(doc["stdout"] == "['mine.txt'] run %d\n" % i, "run %d saw %r" % (i, doc["stdout"]))
        with open(os.path.join(out, "files", "mine.txt")) as f:
            check(f.read() == "run %d" % i, "run %d exported another run's file" % i)
        dirs.add(out)
        finish(doc, out)
    check(len({d["run_id"] for _, (_, d, _, _) in results}) == 4, "run ids collide")


def case_hardening():
    code = ("import os\n"
            "print('uid', os.getuid())\n"
            "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])\n"
            "try:\n"
            "    open('/etc/x', 'w')\n"
            "    print('ROOT WRITABLE')\n"
            "except OSError as e:\n"
            "    print('ro', e.errno)\n"
            "print('HOSTVAR' in os.environ, os.environ.get('GIVEN'))\n")
    env = dict(os.environ, HOSTVAR="secret")
    p = subprocess.run([NBRUN, "run", "--json", "-e", "GIVEN=yes", "-c", code, "-o",
                        tempfile.mkdtemp() + "/o"], capture_output=True, text=True, env=env,
                       timeout=300)
    doc = json.loads(p.stdout)
    check(p.returncode == 0, "exit %d" % p.returncode)
    lines = doc["stdout"].splitlines()
    check(lines[0] == "uid 1000", lines)
    check(lines[1] == "0000000000000000", "CapEff %r" % lines[1])
    check(lines[2] == "ro 30", "root fs: %r" % lines[2])
    check(lines[3] == "False yes", "env: %r" % lines[3])
    finish(doc, doc["out_dir"])


def case_core_dumps():
    """No core dump in any sandbox: RLIMIT_CORE is a hard 0, and a crash writes nothing to /mnt/data."""
    code = ("import resource, subprocess, os\n"
            "try:\n"
            "    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
            "    print('raised')\n"
            "except (ValueError, OSError):\n"
            "    print('refused')\n"
            "print(resource.getrlimit(resource.RLIMIT_CORE))\n"
            "p = subprocess.run(['python3', '-c', 'import ctypes; ctypes.string_at(0)'], cwd='/mnt/data')\n"
            "print(p.returncode, sorted(os.listdir('/mnt/data')))\n")
    doc, out = run_ok(["-c", code])
    lines = doc["stdout"].splitlines()
    check(lines[0] == "refused" and lines[1] == "(0, 0)", "RLIMIT_CORE: %r" % lines)
    check(lines[2] == "-11 []", "the crash left: %r" % lines[2])
    check(not doc["files"], "exported: %r" % doc["files"])
    finish(doc, out)


def case_no_leftovers():
    left = leftovers()
    check(not left, "containers/volumes left behind: %r" % left)


def case_usage_errors():
    for args in (["--timeout", "0"], ["--memory", "-1"], ["--pids", "0"], ["--disk", "5XB"],
                 ["--cpus", "abc"], ["--network", "host"], ["-e", "NOEQUALS"]):
        p = subprocess.run([NBRUN, "run"] + args + ["-c", "print(1)"], capture_output=True,
                           text=True, timeout=30)
        check(p.returncode == 2, "%r: exit %d" % (args, p.returncode))
        check(p.stderr.startswith("nbrun: error: "), "%r: stderr %r" % (args, p.stderr))
    p = subprocess.run([NBRUN, "run", "--help"], capture_output=True, text=True)
    check(p.returncode == 0 and "--timeout" in p.stdout, "run --help")
    # Two -f inputs with one base name: the second would replace the first.
    tmp = tempfile.mkdtemp()
    for sub in ("a", "b"):
        os.mkdir(os.path.join(tmp, sub))
        with open(os.path.join(tmp, sub, "data.csv"), "w") as f:
            f.write(sub)
    for cmd in ("run", "batch"):
        p = subprocess.run([NBRUN, cmd, "-f", os.path.join(tmp, "a", "data.csv"), "-f",
                            os.path.join(tmp, "b", "data.csv"), "-o", os.path.join(tmp, "o"),
                            "-c" if cmd == "run" else "--json", "print(1)" if cmd == "run" else "x.ipynb"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and "would both be /mnt/data/data.csv" in p.stderr,
              "%s: same -f name: exit %d %r" % (cmd, p.returncode, p.stderr))
        check(not os.path.exists(os.path.join(tmp, "o")), "a run started")
    # Code after a NUL byte would be dropped: refused whole, saying where.
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "n.py"), "wb") as f:
        f.write(b"print('a')\nprint('b')\0print('c')\n")
    for args, stdin in (([os.path.join(tmp, "n.py")], None), (["-"], "print('a')\0print('b')\n")):
        p = subprocess.run([NBRUN, "run", "-o", os.path.join(tmp, "o")] + args, input=stdin,
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2, "NUL byte %r: exit %d %r" % (args, p.returncode, p.stdout[:200]))
        check("NUL byte at line" in p.stderr and p.stderr.startswith("nbrun: error: "), p.stderr)
        check(not os.path.exists(os.path.join(tmp, "o")), "a run started")
    # A symlink inside an input directory: refused, not followed, nothing started.
    tmp = tempfile.mkdtemp()
    os.mkdir(os.path.join(tmp, "in"))
    os.symlink("/etc/passwd", os.path.join(tmp, "in", "pw"))
    p = subprocess.run([NBRUN, "run", "--json", "-f", os.path.join(tmp, "in"), "-c",
                        "print(open('/mnt/data/in/pw').read())"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2, "symlink input: exit %d" % p.returncode)
    check("symbolic link" in p.stderr and p.stderr.count("\n") == 1, p.stderr)
    check("root:" not in p.stdout, "a host file reached the sandbox")


def case_missing_image():
    rc, doc, out, err = run(["--image", "jupyter-runtime:does-not-exist", "-c", "1"])
    check(rc == 4, "exit %d (want 4)" % rc)
    check("scripts/setup" in err and err.count("\n") == 1, "message %r" % err)


def case_engine_down():
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    p = subprocess.run([NBRUN, "run", "-c", "1"], capture_output=True, text=True, env=env,
                       timeout=30)
    check(p.returncode == 4, "exit %d (want 4)" % p.returncode)
    check("not running" in p.stderr and p.stderr.count("\n") == 1, p.stderr)


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: run_cases.py CASE\ncases: " + " ".join(sorted(CASES)))
        sys.exit(2)
    CASES[sys.argv[1]]()
    print("ok", sys.argv[1])
