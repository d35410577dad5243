#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Hostile notebooks through `nbrun parse`, one case per run.

Usage: hostile.py CASE

Each case writes its notebook into a fresh temporary directory (big ones
are generated here, never committed), runs the CLI with the output
directory inside it, and checks that nbrun either failed with exit 5 and a
single `nbrun: error: ...` line, or produced a bounded, flagged result that
matches the schema; and that nothing was created besides the expected
files (no writes outside the output directory, no stray images).
"""
import base64
import json
import os
import resource
import subprocess
import sys
import tempfile

import jsonschema

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
SCHEMA = os.path.join(SRCDIR, "schemas", "result.schema.json")

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgAAIAAAUAAXpeqz8AAAAASUVORK5CYII=")
B64 = lambda b: base64.b64encode(b).decode()
MAX_OUTPUT = 20000
NOTE_SLACK = 64


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def notebook(cells, minor=5):
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": minor}


def code(outputs):
    return {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": outputs, "source": "x"}


def display(data, **extra):
    o = {"output_type": "display_data", "metadata": {}, "data": data}
    o.update(extra)
    return o


def stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


class Case:
    def __init__(self, tmp):
        self.tmp = tmp
        self.nb = os.path.join(tmp, "nb.ipynb")
        self.out = os.path.join(tmp, "out")

    def write(self, data):
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(self.nb, mode) as f:
            f.write(data)

    def write_json(self, doc):
        self.write(json.dumps(doc))

    def run(self, *extra, nb=None):
        p = subprocess.run([NBRUN, "parse", nb or self.nb, "--out", self.out, "--json", *extra],
                           capture_output=True, timeout=280, cwd=self.tmp)
        return p.returncode, p.stdout, p.stderr.decode(errors="replace")

    def listing(self):
        """Everything below tmp, relative, with a trailing / for directories."""
        out = set()
        for dirpath, dirnames, filenames in os.walk(self.tmp):
            for d in dirnames:
                out.add(os.path.relpath(os.path.join(dirpath, d), self.tmp) + "/")
            for f in filenames:
                out.add(os.path.relpath(os.path.join(dirpath, f), self.tmp))
        return out

    def expect_error(self, *extra, contains, nb=None, created=None):
        rc, out, err = self.run(*extra, nb=nb)
        lines = err.splitlines()
        check(rc == 5, "exit %d (want 5), stderr: %s" % (rc, err[:2000]))
        check(out == b"", "stdout not empty: %r" % out[:200])
        check(len(lines) == 1 and lines[0].startswith("nbrun: error: "), "stderr is not one error line: %r" % err[:2000])
        check(contains in lines[0], "error %r lacks %r" % (lines[0], contains))
        check(len(lines[0]) < 600, "error line too long")
        # A notebook that is refused creates nothing.
        want = created if created is not None else {"nb.ipynb"}
        check(self.listing() == want, "created: %s" % sorted(self.listing() - want))
        return lines[0]

    def expect_result(self, *extra, images=(), status=None, truncated=None):
        rc, out, err = self.run(*extra)
        check(rc in (0, 1), "exit %d, stderr: %s" % (rc, err[:2000]))
        check(err == "", "stderr: %s" % err[:2000])
        doc = json.loads(out)
        with open(os.path.join(self.out, "result.json")) as f:
            check(json.load(f) == doc, "result.json differs from --json")
        with open(SCHEMA) as f:
            errors = list(jsonschema.Draft202012Validator(json.load(f)).iter_errors(doc))
        check(not errors, "schema: %s" % "\n".join(str(e)[:400] for e in errors[:3]))
        check(rc == (1 if doc["status"] == "error" else 0), "exit %d for status %s" % (rc, doc["status"]))
        if status:
            check(doc["status"] == status, "status %s" % doc["status"])
        if truncated is not None:
            check(doc["truncated"] is truncated, "truncated is %s" % doc["truncated"])
        # Bounded for a model.
        for key in ("stdout", "stderr"):
            check(len(doc[key].encode()) <= MAX_OUTPUT + NOTE_SLACK, "%s is %d bytes" % (key, len(doc[key])))
            check("\x1b" not in doc[key], "escape left in " + key)
        for o in doc["outputs"]:
            for key in ("text", "traceback", "value", "name"):
                if isinstance(o.get(key), str):
                    check(len(o[key].encode()) <= MAX_OUTPUT + NOTE_SLACK, "output %s too long" % key)
        # Exactly the expected files.
        want = {"nb.ipynb", "out/", "out/result.json"}
        if images:
            want |= {"out/images/"} | {"out/" + i for i in images}
        check(self.listing() == want, "files: extra %s, missing %s" % (
            sorted(self.listing() - want), sorted(want - self.listing())))
        check(sorted(i["path"] for i in doc["images"]) == sorted(images), "images listed: %s" % doc["images"])
        for i in doc["images"]:
            check(os.path.getsize(os.path.join(self.out, i["path"])) == i["bytes"], "size of " + i["path"])
        return doc


def skipped_reasons(doc):
    return [s["reason"] for s in doc["skipped"]]


# ---- cases -------------------------------------------------------------------

def case_truncated_json(c):
    text = json.dumps(notebook([code([stream("hello\n")])]))
    c.write(text[: len(text) // 2])
    c.expect_error(contains="notebook is not valid JSON")


def case_not_json(c):
    c.write(bytes(range(256)) * 4)
    c.expect_error(contains="notebook is not valid JSON")


def case_huge_file(c):
    # A real file just over the cap given on the command line.
    c.write_json(notebook([code([stream("x" * (2 << 20))])]))
    c.expect_error("--max-notebook-bytes", "1M", contains="the limit is 1.0 MiB")


def case_sparse_file_over_cap(c):
    # "1 GB string": a sparse file claiming a huge string; refused from its size, nothing read.
    with open(c.nb, "wb") as f:
        f.write(b'{"nbformat": 4, "cells": [{"x": "')
        f.truncate(1 << 30)
    c.expect_error(contains="notebook is 1.0 GiB; the limit is 256.0 MiB")


def case_grows_past_cap(c):
    # /proc files say 0 bytes and then deliver more: the read itself is bounded.
    c.expect_error("--max-notebook-bytes", "100", nb="/proc/self/maps",
                   contains="notebook is more than 100 bytes", created=set())


def case_deep_nesting(c):
    c.write('{"nbformat": 4, "cells": ' + "[" * 10000 + "]" * 10000 + "}")
    c.expect_error(contains="maximum parsing depth")


def case_json_amplification(c):
    # 24 MB of tiny values would be a gigabyte as a tree: refused while reading, memory stays low.
    with open(c.nb, "w") as f:
        f.write('{"nbformat": 4, "nbformat_minor": 5, "metadata": {"x": [')
        f.write("0," * 12000000)
        f.write('0]}, "cells": []}')
    c.expect_error(contains="notebook holds more than 4194304 JSON values")
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
    check(rss_mb < 560, "nbrun peaked at %d MiB" % rss_mb)  # ~480 with ASan; 1.3 GB without the cap
    # Under the cap is fine: 1M values in strings and containers.
    with open(c.nb, "w") as f:
        f.write('{"nbformat": 4, "nbformat_minor": 5, "metadata": {"x": [')
        f.write('"a,[{",' * 500000)
        f.write('0]}, "cells": []}')
    c.expect_result()


def case_invalid_utf8(c):
    c.write(b'{"nbformat": 4, "cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", '
            b'"name": "stdout", "text": "bad \xff\xfe bytes"}]}]}')
    c.expect_error(contains="notebook is not valid JSON")


def case_lone_surrogate(c):
    c.write('{"nbformat": 4, "cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", '
            '"name": "stdout", "text": "\\ud800"}]}]}')
    c.expect_error(contains="notebook is not valid JSON")


def case_nul_escapes(c):
    c.write_json(notebook([code([stream("a\u0000b\n"), display({"text/plain": "c\u0000d"})])]))
    doc = c.expect_result(status="ok")
    check(doc["stdout"] == "ab\n", "stdout %r" % doc["stdout"])
    check(doc["outputs"][1]["data"]["text/plain"] == "cd", "text/plain with NUL")


def case_nbformat_3(c):
    c.write_json({"nbformat": 3, "nbformat_minor": 0, "worksheets": [{"cells": []}], "metadata": {}})
    c.expect_error(contains="notebook is nbformat 3; only nbformat 4 is supported")


def case_nbformat_missing(c):
    c.write_json({"cells": []})
    c.expect_error(contains='not a notebook: no "nbformat" field')


def case_wrong_types(c):
    c.write_json(notebook([
        5, None, "cell", [],
        {"cell_type": "code", "outputs": 7},
        {"cell_type": "code", "outputs": [1, None, "s", {"output_type": ["stream"]},
                                          {"output_type": "stream", "name": 5, "text": {"a": 1}},
                                          {"output_type": "error", "ename": 5, "traceback": "tb"},
                                          {"output_type": "execute_result", "data": [], "execution_count": 1.5},
                                          {"output_type": "display_data", "data": {"image/png": 5, "text/plain": None}}]},
        {"cell_type": 7, "outputs": [stream("never read")]},
    ]))
    doc = c.expect_result(status="error")
    check(doc["cells"] == 7, "cells %d" % doc["cells"])
    check(doc["stdout"] == "", "stdout %r" % doc["stdout"])
    check([o["type"] for o in doc["outputs"]] == ["stream", "error", "execute_result", "display_data"],
          "outputs %s" % doc["outputs"])
    check(doc["outputs"][2]["execution_count"] is None, "execution_count")
    check(doc["error"]["traceback"] == "tb", "traceback as a string")


def case_invalid_base64(c):
    c.write_json(notebook([code([display({"image/png": "iVBORw0KGgo$$$AAAA", "text/plain": "<Figure>"}),
                                 display({"image/png": "iVBO\u00e9RW0KGgo="}),
                                 display({"image/gif": "R0lGODlh=AAA"})])]))
    doc = c.expect_result()
    check(skipped_reasons(doc) == ["invalid base64 character"] * 2 + ["base64 data after '=' padding"],
          "reasons %s" % doc["skipped"])
    check(doc["outputs"][0]["data"]["image/png"]["skipped"] == "invalid base64 character", "data entry")


def case_png_as_jpeg(c):
    c.write_json(notebook([code([display({"image/jpeg": B64(PNG)}), display({"image/png": B64(PNG)})])]))
    doc = c.expect_result(images=["images/cell0-2.png"])  # k counts on within the cell
    check(skipped_reasons(doc) == ["image/jpeg data is not JPEG (looks like PNG)"], "reasons %s" % doc["skipped"])
    check(doc["skipped"][0]["path"] == "images/cell0-1.jpg", "skipped path")
    with open(os.path.join(c.out, "images/cell0-2.png"), "rb") as f:
        check(f.read() == PNG, "PNG bytes")


def case_many_outputs(c):
    c.write_json(notebook([code([stream("line %d\n" % i) for i in range(10000)])]))
    doc = c.expect_result(truncated=True)
    check(len(doc["outputs"]) == 1000, "outputs %d" % len(doc["outputs"]))
    check(doc["skipped"][-1]["path"] == "outputs" and doc["skipped"][-1]["count"] == 9000,
          "skipped %s" % doc["skipped"][-1:])
    check(doc["stdout"].startswith("line 0\nline 1\n") and doc["stdout"].endswith("line 9999\n"), "head and tail")
    check("bytes cut ...]" in doc["stdout"], "cut note")


def big_png_b64(decoded):
    """Base64 of `decoded` bytes starting with the PNG signature, built in one piece."""
    raw = PNG[:8] + b"\0" * (decoded - 8)
    return base64.b64encode(raw).decode()


def case_image_over_cap(c):
    # 60 MiB decoded against the default 50 MiB cap.
    c.write('{"nbformat": 4, "cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", '
            '"data": {"image/png": "' + big_png_b64(60 << 20) + '"}}]}]}')
    doc = c.expect_result(truncated=True)
    check(skipped_reasons(doc) == ["image is %d bytes, over the limit of %d" % (60 << 20, 50 << 20)],
          "reasons %s" % doc["skipped"])
    check(doc["outputs"][0]["data"]["image/png"]["bytes"] == 60 << 20, "size reported")


def case_image_200mb(c):
    # 200 MB after decoding: over the image cap even with a notebook cap that lets it be read.
    decoded = 200 * 1000 * 1000
    with open(c.nb, "w") as f:
        f.write('{"nbformat": 4, "cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", '
                '"data": {"image/png": "')
        f.write(B64(PNG[:6]))  # 8 chars, then 'A' for zero bytes
        f.write("A" * ((decoded - 6) // 3 * 4))
        f.write('"}}]}]}')
    doc = c.expect_result("--max-notebook-bytes", "300M", truncated=True)
    check(len(doc["skipped"]) == 1 and "over the limit of %d" % (50 << 20) in doc["skipped"][0]["reason"],
          "reasons %s" % doc["skipped"])
    check(doc["images"] == [], "no image")


def case_many_images(c):
    c.write_json(notebook([code([display({"image/png": B64(PNG)}) for _ in range(150)])]))
    doc = c.expect_result(images=["images/cell0-%d.png" % k for k in range(1, 101)], truncated=True)
    check(skipped_reasons(doc) == ["more than 100 images"] * 50, "reasons %s" % skipped_reasons(doc)[:3])


def case_metadata_filenames(c):
    # Names in a notebook are never used for files: only images/cell<N>-<k>.<ext> appear.
    evil = ["../../escape.png", "/tmp/abs.png", "a\nb.png", "x" * 4000, "../" * 200 + "deep.png"]
    outs = []
    for name in evil:
        outs.append(display({"image/png": B64(PNG), "text/plain": name},
                            metadata={"filename": name, "image/png": {"filename": name}},
                            transient={"display_id": name}))
    outs.append({"output_type": "stream", "name": "../../stream", "text": "t\n"})
    outs.append(display({"image/png/../../x": B64(PNG), "../image/png": B64(PNG), "image\n/png": "x"}))
    c.write_json(notebook([code(outs)]))
    doc = c.expect_result(images=["images/cell0-%d.png" % k for k in range(1, 6)])
    check(len([s for s in doc["skipped"] if s["reason"] == "invalid MIME type name"]) == 3, "bad MIME names skipped")
    # Overlong display ids are dropped, others kept as data (never used as names).
    check("display_id" not in doc["outputs"][3], "4000-byte display id dropped")
    check(doc["outputs"][0]["display_id"] == "../../escape.png", "display id kept as text")
    check(not os.path.exists(os.path.join(c.tmp, "escape.png")) and not os.path.exists("/tmp/abs.png"), "escape")


def case_ansi_flood(c):
    text = ("\x1b[31m" + "\x1b]0;" + "t" * 100 + "\x07" + "ok ") * 20000 + "\x1b]8;;" + "y" * 100000
    c.write_json(notebook([code([stream(text), stream(text, "stderr"),
                                 {"output_type": "error", "ename": "E\x1b[1m", "evalue": "v\x1b[0m",
                                  "traceback": [text[:10000]] * 3}])]))
    doc = c.expect_result(status="error", truncated=True)
    check(doc["stdout"].startswith("ok ok ok"), "stdout %r" % doc["stdout"][:50])
    check(doc["error"]["name"] == "E" and doc["error"]["value"] == "v", "error name/value stripped")
    check("\x1b" not in doc["error"]["traceback"], "traceback stripped")


def case_huge_text(c):
    c.write_json(notebook([code([stream(["%09d\n" % i for i in range(2000000)]),
                                 {"output_type": "execute_result", "execution_count": 1,
                                  "data": {"text/plain": "r" * (30 << 20), "text/html": ["<p>"] * 1000000}}])]))
    doc = c.expect_result(truncated=True)
    check(doc["stdout"].startswith("000000000\n") and doc["stdout"].endswith("001999999\n"), "head/tail")
    check(len(doc["results"][0]["text"]) <= MAX_OUTPUT + NOTE_SLACK, "result bounded")
    check(os.path.getsize(os.path.join(c.out, "result.json")) < 200000, "result.json bounded")


def case_huge_json_value(c):
    c.write_json(notebook([code([display({"application/json": list(range(200000)),
                                          "application/vnd.x+json": {"a": [1, {"b": None}]}})])]))
    doc = c.expect_result(truncated=True)
    data = doc["outputs"][0]["data"]
    check(isinstance(data["application/json"], str) and "bytes cut" in data["application/json"], "json bounded")
    check(data["application/vnd.x+json"] == {"a": [1, {"b": None}]}, "small json kept")


def case_many_mime_types(c):
    c.write_json(notebook([code([display({"text/x-%d" % i: "v" for i in range(1000)})])]))
    doc = c.expect_result(truncated=True)
    check(len(doc["outputs"][0]["data"]) == 64, "kept %d" % len(doc["outputs"][0]["data"]))
    check(skipped_reasons(doc) == ["936 more MIME types in one output"], "reasons %s" % doc["skipped"])


def case_out_dir_symlink_images(c):
    # A planted images -> elsewhere symlink in the output directory is not followed.
    elsewhere = os.path.join(c.tmp, "elsewhere")
    os.mkdir(elsewhere)
    os.mkdir(c.out)
    os.symlink(elsewhere, os.path.join(c.out, "images"))
    c.write_json(notebook([code([display({"image/png": B64(PNG)})])]))
    rc, out, err = c.run()
    check(rc == 0 and err == "", "exit %d, %s" % (rc, err))
    doc = json.loads(out)
    check(doc["images"] == [] and doc["skipped"][0]["reason"].startswith("cannot create images/"),
          "skipped %s" % doc["skipped"])
    check(os.listdir(elsewhere) == [], "wrote through the symlink")


def case_empty_notebook(c):
    c.write("")
    c.expect_error(contains="notebook is not valid JSON")


def case_not_a_file(c):
    os.mkdir(os.path.join(c.tmp, "dir.ipynb"))
    c.expect_error(nb=os.path.join(c.tmp, "dir.ipynb"), contains="not a regular file", created={"dir.ipynb/"})
    c.expect_error(nb=os.path.join(c.tmp, "missing.ipynb"), contains="No such file", created={"dir.ipynb/"})


def case_human_output_safe(c):
    # What reaches a terminal carries no control sequences: a C1 CSI (U+009B) is a
    # sequence like ESC [ and leaves with its parameters, other C1 controls are dropped,
    # and a lone CR becomes a line break.
    c.write_json(notebook([code([stream("a\u009b31mX\rover\n"), stream("e\u0085\n", "stderr"),
                                 {"output_type": "error", "ename": "E\u009b", "evalue": "v",
                                  "traceback": ["tb\u009b2J"]}])]))
    p = subprocess.run([NBRUN, "parse", c.nb, "--out", c.out], capture_output=True, timeout=60)
    check(p.returncode == 1, "exit %d" % p.returncode)
    for bad in (b"\x1b", b"\xc2\x9b", b"\xc2\x85", b"\r"):
        check(bad not in p.stdout, "%r reached the terminal: %r" % (bad, p.stdout))
    check(p.stdout.startswith(b"aX\nover\ne\ntb\nE: v\n"), "human output %r" % p.stdout)


def case_cli_usage(c):
    p = subprocess.run([NBRUN, "parse", "--help"], capture_output=True, timeout=60)
    check(p.returncode == 0 and p.stdout.startswith(b"Usage: nbrun parse") and p.stderr == b"", "--help")
    for args in ([], ["--bogus", c.nb], [c.nb, c.nb], ["--max-output", "0", c.nb], [c.nb, "--out"],
                 ["--max-image-bytes", "-5", c.nb]):
        p = subprocess.run([NBRUN, "parse", *args], capture_output=True, timeout=60)
        err = p.stderr.decode()
        check(p.returncode == 2, "%s: exit %d" % (args, p.returncode))
        check(err.startswith("nbrun: error: ") and err.endswith("Try 'nbrun parse --help'.\n"), "%s: %r" % (args, err))
        check(p.stdout == b"", "stdout on usage error")
    check(os.listdir(c.tmp) == [], "usage errors created files")


CASES = {name[5:].replace("_", "-"): fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(__doc__ + "\ncases: " + " ".join(sorted(CASES)))
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="nbrun-hostile-") as tmp:
        try:
            CASES[sys.argv[1]](Case(tmp))
        except Fail as e:
            print("FAIL %s: %s" % (sys.argv[1], e))
            sys.exit(1)
    print("ok " + sys.argv[1])


if __name__ == "__main__":
    main()
