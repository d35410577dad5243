#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Integration tests of the languages nbrun runs (python, r, javascript,
typescript, bash) against the real engine and image.

Usage: lang_cases.py CASE [IMAGE]   (one meson test per case; see meson.build;
IMAGE: the build's default image, which kernel_missing derives one from)
Cases: hello_LANG, error_LANG, plot_LANG (python, r, javascript), file_LANG,
params_r, params_javascript, batteries, unknown_language, kernel_missing.
Every case asserts on the result document (validated by the schema) and on
what was written; the last line of a passing case is "held CASE".
"""
import json
import os
import subprocess
import sys
import tempfile
import uuid

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
SCHEMA = os.path.join(SRCDIR, "schemas", "result.schema.json")
REPORT_SCHEMA = os.path.join(SRCDIR, "schemas", "report.schema.json")

# Per language: hello world, a raising cell and the error name it must give,
# a file written to /mnt/data.
LANGS = {
    "python": dict(ext=".py", hello='print("hello from python")',
                   error='x = 1\n# %%\n1 / 0\n', ename="ZeroDivisionError",
                   file='open("/mnt/data/out.txt", "w").write("written by python\\n")'),
    "r": dict(ext=".R", hello='cat("hello from r\\n")',
              error='x <- 1\n# %%\nstop("boom in r")\n', ename="ERROR",
              file='writeLines("written by r", "/mnt/data/out.txt")'),
    "javascript": dict(ext=".js", hello='console.log("hello from javascript")',
                       error='const x = 1;\n// %%\nconst o = JSON.parse("null");\no.f();\n', ename="TypeError",
                       file='require("fs").writeFileSync("/mnt/data/out.txt", "written by javascript\\n")'),
    "typescript": dict(ext=".ts", hello='const who: string = "typescript";\nconsole.log("hello from " + who)',
                       error='const x: number = 1;\n// %%\nthrow new RangeError("boom in ts");\n',
                       ename="RangeError",
                       file='import * as fs from "fs";\nfs.writeFileSync("/mnt/data/out.txt", "written by typescript\\n");'),
    "bash": dict(ext=".sh", hello='echo "hello from bash"',
                 error='x=1\n# %%\necho before\nno_such_command_zz\n', ename="ExitStatus",
                 file='echo "written by bash" > /mnt/data/out.txt'),
}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def validate(doc, schema=SCHEMA):
    import jsonschema
    with open(schema) as f:
        jsonschema.Draft202012Validator(json.load(f)).validate(doc)


def nbrun(args, timeout=240):
    return subprocess.run([NBRUN] + args, capture_output=True, text=True, timeout=timeout)


def run(args, source=None, name=None):
    """nbrun run --json on -c or on a file named name holding source."""
    tmp = tempfile.mkdtemp(prefix="nbrun-lang-")
    out = os.path.join(tmp, "o")
    if name is not None:
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(source)
        args = args + [path]
    p = nbrun(["run", "--json", "-o", out] + args)
    doc = json.loads(p.stdout) if p.stdout.strip() else None
    if doc is not None:
        validate(doc)
    return p.returncode, doc, out, p.stderr


def case_hello(lang):
    spec = LANGS[lang]
    # the language comes from the file's extension
    rc, doc, _, err = run([], spec["hello"] + "\n", "hello" + spec["ext"])
    check(rc == 0 and doc, "exit %d (stderr %r)" % (rc, err[-500:]))
    check(doc["status"] == "ok", "status %r" % doc["status"])
    check(doc["language"] == lang, "language %r" % doc.get("language"))
    check("hello from %s" % lang in doc["stdout"], "stdout %r" % doc["stdout"])
    with open(os.path.join(doc["out_dir"], "notebook.ipynb")) as f:
        nb = json.load(f)
    check(nb["metadata"]["kernelspec"]["language"].lower() in (lang, "r"),
          "kernelspec %r" % nb["metadata"]["kernelspec"])
    print("  %s: %r" % (lang, doc["stdout"].strip()))


def case_error(lang):
    spec = LANGS[lang]
    rc, doc, _, err = run(["--language", lang, "-c", spec["error"]])
    check(rc == 1 and doc, "exit %d, want 1 (stderr %r)" % (rc, err[-500:]))
    check(doc["status"] == "error", "status %r" % doc["status"])
    e = doc.get("error") or {}
    check(e.get("name") == spec["ename"], "error name %r, want %r (%r)" % (e.get("name"), spec["ename"], e))
    check(e.get("cell") == 1, "error in cell %r, want 1" % e.get("cell"))
    check(e.get("traceback"), "no traceback: %r" % e)
    print("  %s: %s: %s" % (lang, e["name"], e.get("value", "")[:80]))


PLOTS = {
    "python": ('import seaborn as sns, pandas as pd, matplotlib.pyplot as plt\n'
               'df = pd.DataFrame({"x": [1, 2, 3, 4], "y": [3, 1, 4, 1]})\n'
               'sns.barplot(data=df, x="x", y="y")\nplt.show()\n', "image/png"),
    "r": ('library(ggplot2)\n'
          'ggplot(data.frame(x = 1:4, y = c(3, 1, 4, 1)), aes(x, y)) + geom_col()\n', "image/png"),
    # tslab shows an SVG the code made (the image ships no plotting library for Node)
    "javascript": ('const tslab = require("tslab");\n'
                   'const ys = [3, 1, 4, 1];\n'
                   'const bars = ys.map((y, i) => `<rect x="${10 + i * 30}" y="${100 - y * 20}" width="20" height="${y * 20}"/>`);\n'
                   'tslab.display.svg(`<svg xmlns="http://www.w3.org/2000/svg" width="140" height="100">${bars.join("")}</svg>`);\n',
                   "image/svg+xml"),
}
MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/svg+xml": b"<svg"}


def case_plot(lang):
    code, mime = PLOTS[lang]
    rc, doc, out, err = run(["--language", lang, "-c", code])
    check(rc == 0 and doc, "exit %d (stderr %r, error %r)" % (rc, err[-500:], doc and doc.get("error")))
    imgs = [i for i in doc["images"] if i["mime"] == mime]
    check(imgs, "no %s image: %r" % (mime, doc["images"]))
    with open(os.path.join(out, imgs[0]["path"]), "rb") as f:
        data = f.read()
    check(data.startswith(MAGIC[mime]), "%s does not start as %s: %r" % (imgs[0]["path"], mime, data[:16]))
    check(len(data) > 200, "image of %d bytes" % len(data))
    print("  %s: %s %d bytes" % (lang, imgs[0]["path"], len(data)))


def case_file(lang):
    spec = LANGS[lang]
    rc, doc, out, err = run(["--language", lang, "-c", spec["file"]])
    check(rc == 0 and doc, "exit %d (stderr %r, error %r)" % (rc, err[-500:], doc and doc.get("error")))
    files = [f for f in doc["files"] if f["path"].endswith("out.txt")]
    check(len(files) == 1, "files %r" % doc["files"])
    with open(os.path.join(out, files[0]["path"])) as f:
        text = f.read()
    check(text == "written by %s\n" % lang, "out.txt holds %r" % text)
    print("  %s: %s" % (lang, files[0]["path"]))


def notebook(lang, cells):
    kernels = {"r": ("ir", "R", "R"), "javascript": ("jslab", "JavaScript", "javascript")}
    name, display, language = kernels[lang]
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": name, "display_name": display, "language": language}},
            "cells": [{"cell_type": "code", "id": "c%d" % i, "metadata": {"tags": tags},
                       "execution_count": None, "outputs": [], "source": src}
                      for i, (src, tags) in enumerate(cells)]}


def case_params(lang):
    if lang == "r":
        cells = [('n <- 1\nwho <- "nobody"\nflags <- NULL\n', ["parameters"]),
                 ('cat(sprintf("n=%d who=%s flag=%s items=%d\\n", as.integer(n * 2), who, flags$on, length(items)))', [])]
        want = "n=42 who=it's \"quoted\" flag=TRUE items=3"
    else:
        cells = [('let n0 = 1;\n', ["parameters"]),
                 ('console.log(`n=${n * 2} who=${who} flag=${flags.on} items=${items.length}`)', [])]
        want = "n=42 who=it's \"quoted\" flag=true items=3"
    tmp = tempfile.mkdtemp(prefix="nbrun-lang-")
    path = os.path.join(tmp, "p-%s.ipynb" % lang)
    with open(path, "w") as f:
        json.dump(notebook(lang, cells), f)
    out = os.path.join(tmp, "o")
    p = nbrun(["batch", "-q", "-o", out, "-p", "n", "21", "-p", "who", "it's \"quoted\"",
               "-y", '{"flags": {"on": true}, "items": [1, "two", null]}', path])
    check(p.returncode == 0, "batch exit %d: %s %s" % (p.returncode, p.stdout[-500:], p.stderr[-500:]))
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    validate(report, REPORT_SCHEMA)
    nb_dir = os.path.join(out, "p-%s" % lang)
    with open(os.path.join(nb_dir, "result.json")) as f:
        doc = json.load(f)
    validate(doc)
    check(doc["status"] == "ok", "status %r: %r" % (doc["status"], doc.get("error")))
    check(doc["language"] == lang, "language %r" % doc.get("language"))
    check(want in doc["stdout"], "stdout %r, want %r" % (doc["stdout"], want))
    with open(os.path.join(nb_dir, "notebook.ipynb")) as f:
        nb = json.load(f)
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    check(len(injected) == 1, "injected cells: %d" % len(injected))
    src = "".join(injected[0]["source"])
    print("  injected:\n    " + src.strip().replace("\n", "\n    "))
    print("  stdout: %r" % doc["stdout"].strip())


BATTERIES = '''
import seaborn, sklearn, statsmodels.api, openpyxl, xlsxwriter, docx, reportlab, sympy
import networkx, plotly, bs4, yaml, tabulate, numpy as np, pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from sklearn.linear_model import LinearRegression
from matplotlib.backends.backend_pdf import PdfPages
df = pd.DataFrame({"x": [1, 2, 3, 4], "y": [2.0, 4.1, 5.9, 8.2]})
fit = LinearRegression().fit(df[["x"]], df["y"])
ols = statsmodels.api.OLS(df["y"], statsmodels.api.add_constant(df["x"])).fit()
print("slope", round(float(fit.coef_[0]), 2), round(float(ols.params["x"]), 2))
print(sympy.diff(sympy.Symbol("t") ** 3), networkx.path_graph(4).number_of_edges())
print(tabulate.tabulate(df.head(2), headers="keys"), yaml.safe_dump({"k": 1}).strip())
print(bs4.BeautifulSoup("<p>soup</p>", "html.parser").p.text)
df.to_excel("/mnt/data/report.xlsx", index=False)
d = docx.Document()
d.add_heading("Report", 0)
d.add_paragraph("slope %.2f" % fit.coef_[0])
d.save("/mnt/data/report.docx")
with PdfPages("/mnt/data/report.pdf") as pdf:
    fig, ax = plt.subplots()
    ax.plot(df["x"], df["y"])
    pdf.savefig(fig)
from reportlab.pdfgen import canvas
c = canvas.Canvas("/mnt/data/letter.pdf")
c.drawString(72, 720, "reportlab")
c.save()
import plotly.express as px
px.bar(df, x="x", y="y")
'''


def case_batteries():
    rc, doc, out, err = run(["-c", BATTERIES])
    check(rc == 0 and doc, "exit %d (stderr %r, error %r)" % (rc, err[-500:], doc and doc.get("error")))
    check("slope 2.04 2.04" in doc["stdout"], "stdout %r" % doc["stdout"])
    check("3*t**2" in doc["stdout"] and "soup" in doc["stdout"], "stdout %r" % doc["stdout"])
    magic = {"report.xlsx": b"PK\x03\x04", "report.docx": b"PK\x03\x04",
             "report.pdf": b"%PDF-", "letter.pdf": b"%PDF-"}
    got = {os.path.basename(f["path"]): f for f in doc["files"]}
    for name, head in magic.items():
        check(name in got, "%s not exported: %r" % (name, sorted(got)))
        with open(os.path.join(out, got[name]["path"]), "rb") as f:
            data = f.read()
        check(data.startswith(head), "%s starts %r" % (name, data[:8]))
    import zipfile
    with zipfile.ZipFile(os.path.join(out, got["report.xlsx"]["path"])) as z:
        check("xl/workbook.xml" in z.namelist(), "xlsx without a workbook")
    with zipfile.ZipFile(os.path.join(out, got["report.docx"]["path"])) as z:
        check("word/document.xml" in z.namelist(), "docx without a document")
    # plotly's figure comes back as its JSON and HTML outputs
    mimes = {m for o in doc["outputs"] for m in (o.get("data") or {})}
    check("application/vnd.plotly.v1+json" in mimes or "text/html" in mimes,
          "no plotly output: %r" % sorted(mimes))
    print("  files:", ", ".join(sorted(got)))


def case_unknown_language():
    p = nbrun(["run", "--language", "cobol", "-c", "1"])
    check(p.returncode == 2, "exit %d, want 2" % p.returncode)
    line = p.stderr.splitlines()[0] if p.stderr else ""
    check("cobol" in line and "python, r, javascript, typescript, bash" in line, "stderr %r" % p.stderr)
    # a notebook whose kernel nbrun does not run
    tmp = tempfile.mkdtemp(prefix="nbrun-lang-")
    path = os.path.join(tmp, "j.ipynb")
    with open(path, "w") as f:
        json.dump({"nbformat": 4, "nbformat_minor": 5, "cells": [],
                   "metadata": {"kernelspec": {"name": "julia-1.9", "display_name": "Julia",
                                               "language": "julia"}}}, f)
    p = nbrun(["run", path])
    check(p.returncode == 2, "julia notebook: exit %d, want 2 (%r)" % (p.returncode, p.stderr))
    check("julia" in p.stderr and "python, r, javascript" in p.stderr, "stderr %r" % p.stderr)
    print("  " + line)


def case_kernel_missing():
    """An image that lists only python3: a JavaScript run is refused, exit 2."""
    src = sys.argv[2] if len(sys.argv) > 2 else "jupyter-runtime:latest"
    tag = "nbrun-test-pyonly:%s" % uuid.uuid4().hex[:8]
    tmp = tempfile.mkdtemp(prefix="nbrun-lang-")
    with open(os.path.join(tmp, "Dockerfile"), "w") as f:
        f.write("FROM %s\nLABEL nbrun.kernels=\"python3\"\n" % src)
    b = subprocess.run(["docker", "build", "-q", "-t", tag, tmp], capture_output=True, text=True,
                       env=dict(os.environ, DOCKER_BUILDKIT="0"))
    check(b.returncode == 0, "docker build: %s" % b.stderr[-300:])
    try:
        p = nbrun(["run", "--image", tag, "--language", "javascript", "-c", "1"])
        check(p.returncode == 2, "exit %d, want 2 (%r)" % (p.returncode, p.stderr))
        line = p.stderr.splitlines()[0]
        check("jslab" in line and "python, r, javascript" in line, "stderr %r" % p.stderr)
        left = subprocess.run(["docker", "ps", "-aq", "--filter", "ancestor=" + tag],
                              capture_output=True, text=True).stdout.split()
        check(not left, "containers made: %r" % left)
        print("  " + line)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def main():
    case = sys.argv[1]
    kind, _, lang = case.partition("_")
    if kind in ("hello", "error", "plot", "file", "params") and lang in LANGS:
        globals()["case_" + kind](lang)
    elif "case_" + case in globals():
        globals()["case_" + case]()
    else:
        fail("unknown case %s" % case)
    print("held", case)


if __name__ == "__main__":
    main()
