#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Golden test: `nbrun parse NB --out DIR --json` on one of nbclient's notebooks.

Usage: conformance.py NAME          (NAME.ipynb in $NBRUN_CONFORMANCE)
       conformance.py --check-complete NAME...   (the names meson registers)

The --json document and DIR/result.json must be the same document, valid
against schemas/result.schema.json, and (with volatile fields normalised)
equal to tests/fixtures/conformance/NAME.json. The golden also holds the
sha256 of every file written below DIR and the human output, so image bytes
and the printer are checked too. NBRUN_UPDATE_GOLDEN=1 rewrites the golden
(check the diff by eye before committing it).
"""
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
CONFORMANCE = os.environ["NBRUN_CONFORMANCE"]
GOLDEN_DIR = os.path.join(SRCDIR, "tests", "fixtures", "conformance")
SCHEMA = os.path.join(SRCDIR, "schemas", "result.schema.json")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def validate(doc, what):
    with open(SCHEMA) as f:
        schema = json.load(f)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=str)
    if errors:
        fail("%s does not match the schema:\n%s" % (what, "\n".join(str(e)[:500] for e in errors[:5])))


def tree(root):
    """Every file below root except result.json, with its sha256; directories must be real."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                fail("symlink created: " + d)
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if rel == "result.json":
                continue
            with open(path, "rb") as f:
                out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def run_one(name):
    nb = os.path.join(CONFORMANCE, name + ".ipynb")
    if not os.path.isfile(nb):
        fail("missing notebook %s (NBRUN_CONFORMANCE=%s)" % (nb, CONFORMANCE))
    with tempfile.TemporaryDirectory(prefix="nbrun-conformance-") as tmp:
        out = os.path.join(tmp, "out")
        p = subprocess.run([NBRUN, "parse", nb, "--out", out, "--json"],
                           capture_output=True, timeout=60)
        if p.returncode not in (0, 1):
            fail("exit %d, stderr: %s" % (p.returncode, p.stderr.decode(errors="replace")))
        if p.stderr:
            fail("unexpected stderr: " + p.stderr.decode(errors="replace"))
        doc = json.loads(p.stdout)
        with open(os.path.join(out, "result.json")) as f:
            written = json.load(f)
        if doc != written:
            fail("--json output and result.json differ")
        validate(doc, "result")
        want_rc = {"ok": 0, "error": 1}[doc["status"]]
        if p.returncode != want_rc:
            fail("exit %d for status %s" % (p.returncode, doc["status"]))

        # Volatile fields: check their shape, then normalise.
        if not re.match(r"^parse-", doc["run_id"]):
            fail("run_id " + doc["run_id"])
        if doc["out_dir"] != os.path.realpath(out):
            fail("out_dir %s, expected %s" % (doc["out_dir"], os.path.realpath(out)))
        if doc["notebook"] != nb:
            fail("notebook %s, expected %s" % (doc["notebook"], nb))
        if not isinstance(doc["duration_ms"], int) or doc["duration_ms"] < 0:
            fail("duration_ms")
        doc["run_id"] = "<run_id>"
        doc["out_dir"] = "<out_dir>"
        doc["notebook"] = "<notebook>"
        doc["duration_ms"] = 0
        doc["nbrun"] = "<version>"

        # Listed images exist with the listed sizes, and nothing else was written.
        files = tree(out)
        for img in doc["images"]:
            st = os.stat(os.path.join(out, img["path"]))
            if st.st_size != img["bytes"]:
                fail("%s is %d bytes, listed as %d" % (img["path"], st.st_size, img["bytes"]))
        if sorted(files) != sorted(i["path"] for i in doc["images"]):
            fail("files written %s differ from images listed" % sorted(files))

        # The human output of the same notebook (second parse into another directory).
        out2 = os.path.join(tmp, "human")
        h = subprocess.run([NBRUN, "parse", nb, "--out", out2], capture_output=True, timeout=60)
        if h.returncode != p.returncode or h.stderr:
            fail("human output: exit %d, stderr %r" % (h.returncode, h.stderr))
        human = h.stdout.decode().replace(os.path.realpath(out2), "<out_dir>")

    got = {"result": doc, "files": files, "human": human.splitlines()}
    golden = os.path.join(GOLDEN_DIR, name + ".json")
    text = json.dumps(got, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
    if os.environ.get("NBRUN_UPDATE_GOLDEN") == "1":
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        with open(golden, "w") as f:
            f.write(text)
        print("updated " + golden)
        return
    if not os.path.exists(golden):
        fail("no golden %s (NBRUN_UPDATE_GOLDEN=1 writes it)" % golden)
    with open(golden) as f:
        want_text = f.read()
    if json.loads(want_text) != got:
        diff = difflib.unified_diff(want_text.splitlines(), text.splitlines(), "golden", "got", lineterm="")
        fail("result differs from %s:\n%s" % (golden, "\n".join(list(diff)[:200])))
    print("ok %s: status %s, %d outputs, %d images" % (name, doc["status"], len(doc["outputs"]),
                                                      len(doc["images"])))


def check_complete(registered):
    notebooks = sorted(f[:-6] for f in os.listdir(CONFORMANCE) if f.endswith(".ipynb"))
    goldens = sorted(f[:-5] for f in os.listdir(GOLDEN_DIR) if f.endswith(".json"))
    if not notebooks:
        fail("no notebooks in " + CONFORMANCE)
    if sorted(registered) != notebooks:
        fail("tests/parse/meson.build registers %s; the directory has %s" % (
            sorted(set(registered) ^ set(notebooks)), "those differences"))
    if notebooks != goldens:
        fail("notebooks without golden: %s; goldens without notebook: %s" % (
            sorted(set(notebooks) - set(goldens)), sorted(set(goldens) - set(notebooks))))
    print("ok: %d notebooks, %d goldens" % (len(notebooks), len(goldens)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "--check-complete":
        check_complete(sys.argv[2:])
    else:
        run_one(sys.argv[1])
