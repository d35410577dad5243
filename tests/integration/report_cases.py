#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""nbrun batch's report.html, --rerun, --manifest and live progress, against the
real engine and image; report.html opened in headless Chromium.

Usage: report_cases.py CASE
NBRUN_SCREENSHOT=FILE keeps the screenshot of report.html (docs/batch-report.png
was taken so).
"""
import hashlib
import html.parser
import http.server
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batch_cases import LAST_PID, batch, mine, notebook, validate_report  # noqa: E402
from chromium import Chromium  # noqa: E402
from run_cases import NBRUN, check  # noqa: E402

MARK = "NBRUN-PWNED"


class Beacon:
    """A loopback HTTP server: any request it gets means a notebook's script or
    markup reached the network from a page that must load nothing."""

    def __init__(self):
        hits = self.hits = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()


def payload(port):
    """What a notebook's script would do if it ran: mark the page (and its
    parent), say so on the console, call home."""
    return ("document.documentElement.setAttribute('data-pwned','1');console.log('%s');"
            "try{parent.document.documentElement.setAttribute('data-pwned','1')}catch(e){}"
            "fetch('http://127.0.0.1:%d/fetch')" % (MARK, port))


def hostile_notebook(path, port):
    js = payload(port)
    esc = js.replace("'", "&#39;")
    cells = [
        {"cell_type": "markdown", "id": "m0", "metadata": {},
         "source": "# hostile\n<script>%s</script>\n<img src=x onerror='%s'>" % (js, esc)},
        {"cell_type": "code", "id": "c0", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "from IPython.display import HTML, Javascript, SVG, display\n"
                   "js = %r\n"
                   "display(HTML('<script>' + js + '</script><img src=x onerror=\"' + js.replace('\"', '&quot;') + '\">'\n"
                   "             '<a href=\"javascript:' + js + '\">link</a><iframe src=\"http://127.0.0.1:%d/frame\"></iframe>'\n"
                   "             '<meta http-equiv=\"refresh\" content=\"0;url=http://127.0.0.1:%d/refresh\">'\n"
                   "             '<img src=\"http://127.0.0.1:%d/img\"><table><tr><td>kept</td></tr></table>'))\n"
                   "display(Javascript(js))\n"
                   "display({'image/svg+xml': '<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"' + js.replace('\"', '&quot;') + '\"><script>' + js + '</script></svg>'}, raw=True)\n"
                   "print('<script>' + js + '</script>')\n" % (js, port, port, port)},
    ]
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
    with open(path, "w") as f:
        json.dump(nb, f)
    return path


def six(d, port):
    """The batch of the report's tests: ok, error, timeout, chart, parameters,
    hostile output; the parameters from a manifest, hostile too."""
    notebook(os.path.join(d, "ok.ipynb"), "print('all good')")
    notebook(os.path.join(d, "error.ipynb"), "print('before')",
             "x = 1\ny = 2\nraise ValueError(%r)" % ('bad <b>value</b> <img src=x onerror="%s">' % payload(port)))
    notebook(os.path.join(d, "timeout.ipynb"), "import time\ntime.sleep(600)")
    notebook(os.path.join(d, "chart.ipynb"),
             "import matplotlib.pyplot as plt\nplt.plot([3, 1, 4, 1, 5, 9, 2, 6])\nplt.title('chart')\nplt.show()")
    notebook(os.path.join(d, "params.ipynb"), "n = 0\nlabel = 'x'", "print(n * 2, label)",
             tags=[["parameters"], None])
    hostile_notebook(os.path.join(d, "hostile.ipynb"), port)
    rows = [{"notebook": "ok.ipynb"}, {"notebook": "error.ipynb"}, {"notebook": "timeout.ipynb"},
            {"notebook": "chart.ipynb"},
            {"notebook": "params.ipynb", "parameters": {"n": 21, "label": "<script>%s</script>" % payload(port)}},
            {"notebook": "hostile.ipynb"}]
    with open(os.path.join(d, "six.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    out = os.path.join(d, "out")
    rc, report, err = batch(["-j", "3", "--timeout", "20s", "--html", "-o", out,
                             "--manifest", os.path.join(d, "six.jsonl")])
    check(rc == 3, "exit %d (a timeout must give 3): %s" % (rc, err[-800:]))
    validate_report(report)
    by = {e["name"]: e for e in report["notebooks"]}
    check(sorted(by) == ["chart", "error", "hostile", "ok", "params", "timeout"], sorted(by))
    want = {"ok": "ok", "error": "error", "timeout": "timeout", "chart": "ok", "params": "ok", "hostile": "ok"}
    check({k: e["status"] for k, e in by.items()} == want, {k: e["status"] for k, e in by.items()})
    for name in want:  # a run cut by its timeout left its notebook too
        check(by[name].get("html") == os.path.join(out, name, "notebook.html") and "html_error" not in by[name],
              "%s not rendered: %r" % (name, by[name].get("html_error")))
    return out, report


def by_name(report):
    return [e["name"] for e in report["notebooks"]]


class Links(html.parser.HTMLParser):
    """Every href and src of a page, every attribute name, every script element."""

    def __init__(self):
        super().__init__()
        self.urls, self.attrs, self.scripts = [], set(), []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            self.attrs.add(k)
            if k in ("href", "src") and v is not None:
                self.urls.append((tag, v))
        if tag == "script":
            self.scripts.append(dict(attrs))


def links_resolve(page):
    """Each link of a report page is a relative path to a regular file below its directory."""
    p = Links()
    with open(page) as f:
        p.feed(f.read())
    base = os.path.realpath(os.path.dirname(page))
    for tag, url in p.urls:
        u = urllib.parse.urlsplit(url)
        check(not u.scheme and not u.netloc and url.startswith("./"), "%s: not a relative link: %r" % (page, url))
        path = os.path.realpath(os.path.join(base, urllib.parse.unquote(u.path)))
        check(path.startswith(base + os.sep) and os.path.isfile(path), "%s: %r does not resolve" % (page, url))
    return p


def tree(d):
    """Every file below d with its sha256, to compare byte for byte."""
    out = {}
    for root, _, files in os.walk(d):
        for n in files:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = hashlib.sha256(f.read()).hexdigest()
    return out


def case_report_html():
    """The 6-notebook batch's report.html in headless Chromium: rows, thumbnails,
    links, and no script of a notebook running anywhere."""
    d = tempfile.mkdtemp(prefix="nbrun-report-")
    beacon = Beacon()
    try:
        out, report = six(d, beacon.port)
        page = os.path.join(out, "report.html")
        with open(page) as f:
            text = f.read()
        check("<script" not in text and "Content-Security-Policy" in text, "report.html: script or no CSP")
        static = links_resolve(page)
        check(not any(a.startswith("on") for a in static.attrs), "an event handler in report.html: %r" % static.attrs)
        # the rendered notebooks: sanitised, and behind a policy set before anything of theirs
        for name in by_name(report):
            nb = os.path.join(out, name, "notebook.html")
            with open(nb) as f:
                head = f.read(600)
            check(head.startswith("<!DOCTYPE html>\n<meta charset=\"utf-8\">\n<meta http-equiv=\"Content-Security-Policy\""),
                  "%s: no policy first: %r" % (nb, head[:200]))
            p = Links()
            with open(nb) as f:
                p.feed(f.read())
            check(not any(a.startswith("on") for a in p.attrs), "%s: event handler attributes %r" % (name, p.attrs))
            for s in p.scripts:  # only the template's, which the policy blocks: none of the notebook's
                check(s.get("src", "").startswith("file:///usr/share/javascript/") or
                      s.get("type") == "text/x-mathjax-config", "%s: a script %r" % (name, s))
        with open(os.path.join(out, "hostile", "notebook.html")) as f:
            hostile = f.read()
        check("<td>kept</td>" in hostile and "&lt;script&gt;" in hostile, "the hostile page lost its text")

        shot = os.environ.get("NBRUN_SCREENSHOT") or os.path.join(d, "report.png")
        with Chromium(1280, 760) as c:
            c.open("file://" + urllib.parse.quote(page))
            rows = c.evaluate("Array.from(document.querySelectorAll('tr.nb')).map(r => "
                              "[r.dataset.name, r.dataset.status, r.querySelector('.err').textContent, "
                              "r.querySelector('.params').textContent])")
            got = {r[0]: r for r in rows}
            check(sorted(got) == sorted(e["name"] for e in report["notebooks"]), "rows: %r" % rows)
            check(all(got[n][1] == e["status"] for n, e in ((e["name"], e) for e in report["notebooks"])),
                  "statuses: %r" % rows)
            check(got["error"][2].startswith("ValueError: bad <b>value</b> <img src=x onerror=") and
                  "In [2], line 3" in got["error"][2], "the error cell: %r" % got["error"][2])
            check("<script>" in got["params"][3] and "21" in got["params"][3], "the params cell: %r" % got["params"][3])
            # thumbnails: every image loaded, the chart's among them
            imgs = c.evaluate("Array.from(document.images).map(i => [i.closest('tr').dataset.name, "
                              "i.complete, i.naturalWidth])")
            check(imgs and all(i[1] and i[2] > 0 for i in imgs), "thumbnails: %r" % imgs)
            # the hostile one's is its SVG with a script: an <img> never runs it
            check([i[0] for i in imgs] == ["chart", "hostile"], "thumbnails of %r" % imgs)
            hrefs = c.evaluate("Array.from(document.querySelectorAll('a[href], iframe[src]')).map(a => a.href || a.src)")
            for h in hrefs:
                u = urllib.parse.urlsplit(h)
                check(u.scheme == "file" and os.path.isfile(urllib.parse.unquote(u.path)), "link %r" % h)
            check(len(hrefs) >= 6 * 4, "links: %r" % hrefs)
            c.screenshot(shot)
            # open every preview (through DevTools: the page has no script), let the frames load
            c.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            c.drain(4)
            frames = c.subframes()
            check(len(frames) == 6, "frames: %r" % list(frames))
            for url, sid in frames.items():
                seen = c.evaluate("[document.documentElement.getAttribute('data-pwned'), document.title, "
                                  "document.body.innerText.length]", sid)
                check(seen[0] is None and seen[2] > 0, "%s: %r" % (url, seen))
            check(c.evaluate("document.documentElement.getAttribute('data-pwned')") is None, "report.html marked")
            console = c.console()
            # each rendered notebook opened by itself, as a link does
            blocked = []
            for name in by_name(report):
                c.open("file://" + urllib.parse.quote(os.path.join(out, name, "notebook.html")))
                c.drain(1)
                seen = c.evaluate("[document.documentElement.getAttribute('data-pwned'), location.href, "
                                  "document.body.innerText]")
                check(seen[0] is None and seen[1].endswith("/notebook.html"), "%s: %r" % (name, seen[:2]))
                if name == "params":
                    check("<script>" in seen[2], "params page: the parameter's text is gone")
                console += c.console()
                blocked += c.log()
            check(not any(MARK in m for m in console), "a notebook's script ran: %r" % console)
            check(any("Content Security Policy" in m for m in blocked), "no refusal by the policy: %r" % blocked)
        time.sleep(0.5)
        check(not beacon.hits, "the pages reached the network: %r" % beacon.hits)
        check(os.path.getsize(shot) > 20000, "screenshot %s too small" % shot)
        check(not mine(), "left behind: %r" % mine())
    finally:
        beacon.close()
    return "6 rows, 2 thumbnails loaded, %d links resolved, 6 sandboxed frames, no script ran; %s" % (len(hrefs), shot)


def case_rerun():
    """--rerun reruns exactly the notebooks that did not end ok, keeps the
    others byte for byte and merges report.json and report.html."""
    d = tempfile.mkdtemp(prefix="nbrun-rerun-")
    beacon = Beacon()
    try:
        out, first = six(d, beacon.port)
    finally:
        beacon.close()
    with open(os.path.join(out, "report.json"), "rb") as f:
        first_text = f.read()
    keep = {e["name"]: (e, tree(os.path.join(out, e["name"]))) for e in first["notebooks"]
            if e["status"] == "ok"}
    failed = {e["name"]: tree(os.path.join(out, e["name"])) for e in first["notebooks"] if e["status"] != "ok"}
    check(sorted(failed) == ["error", "timeout"], sorted(failed))
    with open(os.path.join(out, "report.jsonl")) as f:
        lines = len(f.readlines())
    # the repair: the error is fixed, the timeout is not
    notebook(os.path.join(d, "error.ipynb"), "print('before')", "print('fixed')")
    rc, report, err = batch(["--rerun", out, "--timeout", "20s", "-j", "2"])
    check(rc == 3, "rerun: exit %d (the timeout remains: 3): %s" % (rc, err[-800:]))
    validate_report(report)
    check(report["reruns"] == 1 and report["summary"] == {"total": 6, "ok": 5, "error": 0, "timeout": 1, "oom": 0,
                                                           "failed": 0, "not_run": 0}, report["summary"])
    with open(os.path.join(out, "report.json")) as f:
        check(json.load(f) == report, "report.json differs from --json")
    check([e["name"] for e in report["notebooks"]] == [e["name"] for e in first["notebooks"]], "order changed")
    with open(os.path.join(out, "report.jsonl")) as f:
        added = [json.loads(l)["name"] for l in f.readlines()[lines:]]
    check(sorted(added) == ["error", "timeout"], "rerun ran %r" % added)
    by = {e["name"]: e for e in report["notebooks"]}
    for name, (entry, files) in keep.items():
        check(by[name] == entry, "%s: entry changed" % name)
        check(tree(os.path.join(out, name)) == files, "%s: files changed" % name)
    check(by["error"]["status"] == "ok" and by["error"]["result"]["stdout"] == "before\nfixed\n", by["error"])
    check(by["timeout"]["status"] == "timeout", by["timeout"]["status"])
    for name, files in failed.items():
        a = by[name]["attempts"]
        moved = os.path.join(out, "attempts", name, "1")
        check(len(a) == 1 and a[0]["attempt"] == 1 and a[0]["status"] == first_by(first, name)["status"] and
              a[0]["out_dir"] == moved, "%s attempts %r" % (name, a))
        check(tree(moved) == files, "%s: the first attempt was not kept whole" % name)
        check(by[name]["html"] == os.path.join(out, name, "notebook.html"), by[name].get("html_error"))
    page = links_resolve(os.path.join(out, "report.html"))
    check(any("/attempts/error/1/" in u for _, u in page.urls), "no link to the earlier attempt")
    # nothing left to rerun among the errors: nothing runs, nothing is written, the batch's state is the exit code
    with open(os.path.join(out, "report.json"), "rb") as f:
        second_text = f.read()
    p = subprocess.run([NBRUN, "batch", "--rerun", out, "--only", "error"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 3 and "nothing to rerun" in p.stderr, "%d %s" % (p.returncode, p.stderr))
    with open(os.path.join(out, "report.json"), "rb") as f:
        check(f.read() == second_text, "report.json rewritten by a rerun of nothing")
    # --dry-run names what --only timeout would run, with its parameters
    p = subprocess.run([NBRUN, "batch", "--rerun", out, "--only", "timeout", "--dry-run", "--json"],
                       capture_output=True, text=True, timeout=60)
    plan = json.loads(p.stdout)
    check(p.returncode == 0 and [x["name"] for x in plan] == ["timeout"], p.stdout)
    check(first_text != second_text, "report.json unchanged by the rerun")
    check(not mine(), "left behind: %r" % mine())
    return "reran error and timeout only; 4 notebooks kept byte for byte; attempts moved whole"


def first_by(report, name):
    return next(e for e in report["notebooks"] if e["name"] == name)


def case_manifest():
    """A 50-row manifest runs the batch the command line gives with --param-grid."""
    d = tempfile.mkdtemp(prefix="nbrun-manifest-")
    notebook(os.path.join(d, "a.ipynb"), "k = 0\ns = ''", "print('a', repr(k), repr(s))",
             tags=[["parameters"], None])
    notebook(os.path.join(d, "b.ipynb"), "k = 0\ns = ''", "print('b', type(k).__name__, s)",
             tags=[["parameters"], None])
    ks_csv = ["7", "2.5", "123456789012345678901234567890", "hello", "True", "-3", "1e3", "inf", "None"]
    ks_json = [7, 2.5, 123456789012345678901234567890, "hello", True, -3, 1000.0, float("inf"), None]
    grid, csv_rows, jsonl_rows = [], ["notebook,output,k,s"], []
    for i in range(25):
        k = i % len(ks_csv)
        s = "row %d, \"quoted\"" % i
        grid.append({"k": ks_json[k], "s": s})
    for nb in ("a", "b"):
        for i, g in enumerate(grid):
            k = i % len(ks_csv)
            s = g["s"].replace('"', '""')
            csv_rows.append('%s.ipynb,%s-p%d,%s,"%s"' % (nb, nb, i, ks_csv[k], s))
            jsonl_rows.append(json.dumps({"notebook": nb + ".ipynb", "output": "%s-p%d" % (nb, i),
                                          "parameters": {"k": ks_json[k], "s": g["s"]}}))
    with open(os.path.join(d, "grid.json"), "w") as f:
        json.dump(grid, f)
    with open(os.path.join(d, "m.csv"), "w") as f:
        f.write("\r\n".join(csv_rows) + "\r\n")
    with open(os.path.join(d, "m.jsonl"), "w") as f:
        f.write("\n".join(jsonl_rows) + "\n")

    def plan(args):
        p = subprocess.run([NBRUN, "batch", "--dry-run", "--json"] + args, capture_output=True, text=True,
                           timeout=60, cwd=d)
        check(p.returncode == 0, "%r: %d %s" % (args, p.returncode, p.stderr))
        return json.loads(p.stdout)
    cmdline = plan(["--param-grid", "grid.json", "a.ipynb", "b.ipynb"])
    check(len(cmdline) == 50, len(cmdline))
    check(plan(["--manifest", "m.csv"]) == cmdline, "the CSV manifest plans another batch")
    check(plan(["--manifest", "m.jsonl"]) == cmdline, "the JSON Lines manifest plans another batch")

    def real(args, out):
        old = os.getcwd()
        os.chdir(d)
        try:
            rc, report, err = batch(["-j", "3", "-o", out] + args)
        finally:
            os.chdir(old)
        check(rc == 0, "%r: exit %d %s" % (args, rc, err[-800:]))
        validate_report(report)
        return {e["name"]: (e["notebook"], e["params"], e["status"], e["result"]["stdout"]) for e in report["notebooks"]}
    t0 = time.time()
    by_manifest = real(["--manifest", "m.csv"], "m-out")
    by_cmdline = real(["--param-grid", "grid.json", "a.ipynb", "b.ipynb"], "c-out")
    check(len(by_manifest) == 50, "%d notebooks" % len(by_manifest))
    differ = [(k, v, by_cmdline.get(k)) for k, v in sorted(by_manifest.items()) if by_cmdline.get(k) != v]
    check(not differ and len(by_cmdline) == 50, "the batches differ: %r" % differ[:4])
    check(by_manifest["a-p2"][3] == "a 123456789012345678901234567890 'row 2, \"quoted\"'\n", by_manifest["a-p2"])
    check(by_manifest["b-p8"][3] == "b NoneType row 8, \"quoted\"\n", by_manifest["b-p8"])
    check(not mine(), "left behind: %r" % mine())
    return "50 rows (CSV) = --param-grid of 25 sets x 2 notebooks: names, params, statuses, stdout; " \
           "JSON Lines plans the same; 100 runs in %.0f s" % (time.time() - t0)


# (file name, content, what the error says after "nbrun: error: ")
BAD_MANIFESTS = [
    ("m.jsonl", '{"notebook": "nb.ipynb", "output": "../escaped"}\n', "m.jsonl:1: output '../escaped' cannot name"),
    ("m.jsonl", '{"notebook": "nb.ipynb", "output": "/tmp/escaped"}\n', "m.jsonl:1: output '/tmp/escaped'"),
    ("m.jsonl", '{"notebook": "nb.ipynb", "output": ".."}\n', "m.jsonl:1: output '..'"),
    ("m.jsonl", '{"notebook": "nb.ipynb", "output": "report.json"}\n', "m.jsonl:1: output 'report.json'"),
    ("m.jsonl", '{"notebook": "nb.ipynb", "output": "attempts"}\n', "m.jsonl:1: output 'attempts'"),
    ("m.jsonl", '{"notebook": "nb.ipynb"}\n\n{"notebook": "nb.ipynb", "output": "a\\u001b]0;title\\u0007"}\n',
     "m.jsonl:3: output 'a?]0;title?'"),
    ("m.jsonl", '{"notebook": "nb.ipynb", "output": "x"}\n{"notebook": "nb.ipynb", "output": "x"}\n',
     "m.jsonl:2: output 'x' is the output of line 1 too"),
    ("m.jsonl", '{"notebook": "nb.ipynb", "parameters": {"__import__(\'os\')": 1}}\n', "m.jsonl:1: parameter name"),
    ("m.jsonl", '{"notebook": "nb.ipynb", "parameters": {"x": 1}, "extra": 1}\n', "m.jsonl:1: unknown key 'extra'"),
    ("m.jsonl", '{"notebook": "nb.ipynb"}\n{"notebook": "nb.ipynb", "parameters": [1]}\n',
     "m.jsonl:2: \"parameters\" must be an object"),
    ("m.jsonl", '{"notebook": "nb.ipynb"}\n{"notebook": ' + "[" * 5000 + "\n", "m.jsonl:2: not JSON"),
    ("m.jsonl", '{"notebook": "missing.ipynb"}\n', "m.jsonl:1: notebook missing.ipynb: No such file"),
    ("m.jsonl", '{"notebook": "fifo.ipynb"}\n', "m.jsonl:1: notebook fifo.ipynb: not a regular file"),
    ("m.jsonl", '{"notebook": "."}\n', "m.jsonl:1: notebook .: a directory"),
    ("m.jsonl", '{"notebook": "nb.ipynb\\u0000x"}\n', "m.jsonl:1: "),
    ("m.csv", "notebook,output\nnb.ipynb,../../escaped\n", "m.csv:2: output '../../escaped'"),
    ("m.csv", "notebook,n\nnb.ipynb,1\nnb.ipynb,\"2\n", "m.csv:3: not CSV: a quoted field is not closed"),
    ("m.csv", "notebook,n\nnb.ipynb,1\nnb.ipynb\n", "m.csv:3: 1 fields, the header has 2"),
    ("m.csv", "notebook,n m\nnb.ipynb,1\n", "m.csv:1: column 'n m'"),
    ("m.csv", b"notebook,n\nnb.ipynb,\xff\xfe\n", "m.csv:2: column 'n': the value '??' is not UTF-8"),
    ("m.csv", "notebook,n\nnb.ipynb,\"a\x00b\"\n", "m.csv:2: column 'n': a NUL byte"),
    ("m.csv", "n\n1\n", "m.csv:1: the header has no column 'notebook'"),
    ("m.csv", "notebook,n\nnb.ipynb," + "9" * (1 << 20) + "\n", None),  # a 1 MiB integer: typed, fine
    ("m.csv", b"\x00\x01\x02garbage\xff" * 1000, "m.csv:"),
    ("m.txt", "", "m.txt:1: no header"),
]


def case_manifest_hostile():
    """Bad manifest rows: a one-line usage error naming the line, nothing made,
    nothing written anywhere (no engine is needed for any of them)."""
    d = tempfile.mkdtemp(prefix="nbrun-manifest-bad-")
    work = os.path.join(d, "work")
    os.makedirs(work)
    notebook(os.path.join(work, "nb.ipynb"), "print(1)")
    os.mkfifo(os.path.join(work, "fifo.ipynb"))
    before = sorted(os.listdir(d)), sorted(os.listdir(work)), sorted(os.listdir("/tmp"))
    n = 0
    for name, content, want in BAD_MANIFESTS:
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        try:
            p = subprocess.run([NBRUN, "batch", "--dry-run" if want is None else "-q", "-o",
                                os.path.join(work, "out"), "--manifest", name], cwd=work, capture_output=True,
                               timeout=30)
        except subprocess.TimeoutExpired:
            check(False, "%s %r: hangs" % (name, content[:80]))
        os.unlink(path)
        err = p.stderr.decode("utf-8", "replace")
        if want is None:
            check(p.returncode == 0 and p.stdout.count(b"\n") == 1, "%r: %d %s" % (content[:80], p.returncode, err))
            continue
        n += 1
        check(p.returncode == 2, "%s %r: exit %d %s" % (name, content[:80], p.returncode, err[-500:]))
        first = err.split("\n")[0]
        check(first.startswith("nbrun: error: " + want) and err.count("\n") == 2 and
              err.split("\n")[1] == "Try 'nbrun batch --help'.", "%r: %r (want %r)" % (content[:80], err, want))
        check(all(c >= " " or c == "\n" for c in err), "control characters reach the terminal: %r" % err)
        check(not os.path.exists(os.path.join(work, "out")), "%r: made the output directory" % content[:80])
    after = sorted(os.listdir(d)), sorted(os.listdir(work)), sorted(os.listdir("/tmp"))
    check(after[0] == before[0] and after[1] == before[1], "files appeared: %r -> %r" % (before[:2], after[:2]))
    check(not [x for x in set(after[2]) - set(before[2]) if "escaped" in x], "a write outside: %r" % after[2])
    # a manifest that is no file, and manifests with notebooks on the command line or a grid
    for args, what in ((["--manifest", "fifo.ipynb"], "not a regular file"), (["--manifest", "."], "not a regular file"),
                       (["--manifest", "nope"], "No such file"),
                       (["--manifest", "x.csv", "nb.ipynb"], "cannot go with it"),
                       (["--rerun", work, "--manifest", "x.csv"], "cannot go with it"),
                       (["--only", "error", "nb.ipynb"], "--only goes with --rerun"),
                       (["--rerun", work, "-p", "a", "1"], "cannot go with it"),
                       (["--rerun", work, "--only", "error,bogus"], "'bogus' is none of")):
        p = subprocess.run([NBRUN, "batch"] + args, cwd=work, capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and what in p.stderr and p.stderr.count("\n") == 2, "%r: %d %s" % (args, p.returncode, p.stderr))
    return "%d bad manifests: each exit 2 with one line naming its line; nothing written" % n


def case_rerun_hostile():
    """A report.json edited to point outside its directory is refused whole."""
    d = tempfile.mkdtemp(prefix="nbrun-rerun-bad-")
    out = os.path.join(d, "out")
    os.makedirs(out)
    notebook(os.path.join(d, "nb.ipynb"), "print(1)")
    entry = {"name": "nb", "notebook": os.path.join(d, "nb.ipynb"), "status": "error", "duration_ms": 1}
    bad = [
        ([dict(entry, name="../../escaped")], "notebook 1: it holds a /"),
        ([dict(entry, name="..")], "notebook 1: it is . or .."),
        ([dict(entry, name="report.json")], "notebook 1: the batch keeps it"),
        ([entry, dict(entry)], "notebook 2: its name is another entry's"),
        ([dict(entry, params=[1])], "params is not an object"),
        ([dict(entry, params_text="[1]")], "params_text: not an object"),
        ([dict(entry, notebook=os.path.join(d, "gone.ipynb"))], "No such file"),
        ([{"name": "nb"}], "no notebook"),
    ]
    for notebooks, want in bad:
        with open(os.path.join(out, "report.json"), "w") as f:
            json.dump({"out_dir": out, "summary": {"total": 1}, "notebooks": notebooks}, f)
        p = subprocess.run([NBRUN, "batch", "--rerun", out], capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and want in p.stderr and p.stderr.count("\n") == 2, "%r: %d %s" % (notebooks, p.returncode, p.stderr))
        check(sorted(os.listdir(out)) == ["report.json"], "%r: wrote %r" % (notebooks, os.listdir(out)))
        check(sorted(os.listdir(d)) == ["nb.ipynb", "out"], "%r: wrote %r" % (notebooks, os.listdir(d)))
    for text in ("not json", "[]", '{"notebooks": {}}'):
        with open(os.path.join(out, "report.json"), "w") as f:
            f.write(text)
        p = subprocess.run([NBRUN, "batch", "--rerun", out], capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and "is not a report of nbrun batch" in p.stderr, "%r: %d %s" % (text, p.returncode, p.stderr))
    os.unlink(os.path.join(out, "report.json"))
    os.mkfifo(os.path.join(out, "report.json"))
    p = subprocess.run([NBRUN, "batch", "--rerun", out], capture_output=True, text=True, timeout=30)
    check(p.returncode == 2 and "not a regular file" in p.stderr, "FIFO: %d %s" % (p.returncode, p.stderr))
    return "%d edited reports refused, nothing written" % (len(bad) + 4)


def case_progress():
    """On a terminal, the live view counts, gives the rate and the time left."""
    d = tempfile.mkdtemp(prefix="nbrun-progress-")
    nbs = [notebook(os.path.join(d, "n%d.ipynb" % i), "import time\ntime.sleep(1)\nprint(%d)" % i) for i in range(3)]
    master, slave = pty.openpty()
    p = subprocess.Popen([NBRUN, "batch", "-j", "1", "-o", os.path.join(d, "out")] + nbs, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave)
    LAST_PID[0] = p.pid
    os.close(slave)
    seen = b""
    deadline = time.time() + 300
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif p.poll() is not None:
            break
    out = p.communicate(timeout=60)[0].decode()
    os.close(master)
    text = seen.decode("utf-8", "replace")
    check(p.returncode == 0, "exit %d: %s" % (p.returncode, text[-500:]))
    check("done 1/3" in text and "done 3/3" in text, "no count: %r" % text[-800:])
    check("/min" in text and "left ~" in text, "no rate or time left: %r" % text[-800:])
    check("report.html" in out, out)
    return "count, rate and time left shown on a terminal"


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: report_cases.py CASE\ncases: " + " ".join(sorted(CASES)))
        sys.exit(2)
    said = CASES[sys.argv[1]]()
    print("ok", sys.argv[1] + (": " + said if said else ""))
