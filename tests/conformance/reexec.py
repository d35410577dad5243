#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Re-execute nbclient's own test notebooks in the real runtime image.

All notebooks of $NBRUN_CONFORMANCE run through `nbrun batch` (each in its
own fresh container), then each executed notebook's outputs are compared with
the outputs stored in the original, after normalising what is volatile:
execution counts, output metadata, memory addresses, widget model ids,
traceback text (only the exception's name and value are compared).

Where the stored output cannot be reproduced in a sandbox, the documented
expected behaviour is asserted instead (EXPECTED below, with the reason).
Prints: N re-executed equal, N expected-different.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

NBRUN = os.environ["NBRUN"]
CONF = os.environ["NBRUN_CONFORMANCE"]

ADDR = re.compile(r"0x[0-9a-fA-F]{6,}")


def text(v):
    return "".join(v) if isinstance(v, list) else (v or "")


def norm_outputs(outputs):
    out = []
    for o in outputs:
        t = o.get("output_type")
        if t == "stream":
            if out and out[-1]["type"] == "stream" and out[-1]["name"] == o.get("name"):
                out[-1]["text"] += text(o.get("text"))
                continue
            out.append({"type": "stream", "name": o.get("name"), "text": text(o.get("text"))})
        elif t == "error":
            out.append({"type": "error", "ename": o.get("ename"),
                        "evalue": ADDR.sub("0xADDR", o.get("evalue", ""))})
        elif t in ("execute_result", "display_data"):
            data = {}
            for mime, v in (o.get("data") or {}).items():
                if isinstance(v, (dict, list)) and mime.endswith("json"):
                    v = dict(v) if isinstance(v, dict) else v
                    if isinstance(v, dict) and "model_id" in v:
                        v["model_id"] = "MODEL"
                    data[mime] = v
                elif mime == "image/svg+xml":
                    data[mime] = canonical_svg(text(v))
                elif mime.startswith("image/"):
                    data[mime] = re.sub(r"\s", "", text(v))
                else:
                    data[mime] = ADDR.sub("0xADDR", text(v))
            out.append({"type": t, "data": data})
        else:
            out.append({"type": t})
    return out


def code_cells(nb):
    return [c for c in nb["cells"] if c.get("cell_type") == "code"]


def error_names(nb):
    return [o.get("ename") for c in code_cells(nb) for o in c.get("outputs", [])
            if o.get("output_type") == "error"]


def sleep_check(nb):
    import datetime
    stamps = [text(o.get("text")) for c in code_cells(nb) for o in c.get("outputs", [])
              if o.get("output_type") == "stream"]
    if len(stamps) != 2:
        return "printed %r" % stamps
    t0, t1 = (datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ") for s in stamps)
    return None if (t1 - t0).total_seconds() >= 1.0 else "%r" % stamps


WIDGETS_6 = ("Debian 12 ships ipywidgets 6 (widget protocol 1): the widget view is displayed "
             "with a model id but without version fields, after a 'Widget Javascript not "
             "detected' notice on stderr")


def widget_check(nb):
    first = code_cells(nb)[0].get("outputs", [])
    views = [o for o in first if o.get("output_type") == "display_data"
             and "model_id" in o.get("data", {}).get("application/vnd.jupyter.widget-view+json", {})]
    return None if views else "no widget view in cell 0: %r" % first


def canonical_svg(s):
    """SVG text with attributes in one order (IPython re-serialises it)."""
    import xml.etree.ElementTree as ET
    try:
        return ET.canonicalize(s, strip_text=True)
    except ET.ParseError:
        return s


# name -> (reason, check(entry, executed notebook or None) -> None or failure text)
EXPECTED = {
    "Autokill": ("the notebook kills its own kernel: nbrun reports status failed, "
                 "with the run stopping early, and no notebook outputs",
                 lambda e, nb: None if e["status"] == "failed" and "early" in (e["first_error"] or "")
                 or e["status"] == "failed" and "Kernel died" in (e["first_error"] or "")
                 else "status %s, %r" % (e["status"], e["first_error"])),
    "Disable Stdin": ("input() has no frontend in a sandbox: the cell raises "
                      "StdinNotImplementedError (nbclient's own test expects that too)",
                      lambda e, nb: None if error_names(nb) == ["StdinNotImplementedError"]
                      else "errors %r" % error_names(nb)),
    "Parallel Execute A": ("needs a host directory shared by two notebooks "
                           "(NBEXECUTE_TEST_PARALLEL_TMPDIR); sandboxes share nothing by design, "
                           "so the variable is missing (KeyError, then NameError)",
                           lambda e, nb: None if error_names(nb)[:1] == ["KeyError"]
                           else "errors %r" % error_names(nb)),
    "Parallel Execute B": ("same as Parallel Execute A",
                           lambda e, nb: None if error_names(nb)[:1] == ["KeyError"]
                           else "errors %r" % error_names(nb)),
    "JupyterWidgets": (WIDGETS_6, lambda e, nb: widget_check(nb)),
    "Output": (WIDGETS_6 + "; the Output widget's captured outputs live in widget state, "
               "which protocol 1 does not carry", lambda e, nb: widget_check(nb)),
    "Sleep1s": ("stored without outputs (nbclient's test reads the printed times); "
                "re-executed, the two printed UTC times are at least 1 s apart",
                lambda e, nb: sleep_check(nb)),
    "Other Comms": ("the comm package needs ipykernel >= 6.18 to open comms; Debian 12 has "
                    "6.17, so comm.create_comm raises NotImplementedError",
                    lambda e, nb: None if error_names(nb)[:1] == ["NotImplementedError"]
                    else "errors %r" % error_names(nb)),
}


def main():
    notebooks = sorted(glob.glob(os.path.join(CONF, "*.ipynb")))
    if len(notebooks) < 20:
        print("FAIL: conformance notebooks not found in %s" % CONF)
        return 1
    out = tempfile.mkdtemp(prefix="nbrun-conf-")
    # The stored outputs were made with errors allowed: every cell runs.
    p = subprocess.run([NBRUN, "batch", "--json", "-q", "-j", "2", "--allow-errors", "--timeout", "120s",
                        "--cell-timeout", "10s", "-f", os.path.join(CONF, "python.png"),
                        "-o", out] + notebooks, capture_output=True, text=True, timeout=1800)
    report = json.loads(p.stdout)
    entries = {e["name"]: e for e in report["notebooks"]}
    equal, expected, failures = [], [], []
    for path in notebooks:
        name = os.path.basename(path)[:-6]
        e = entries.get(name)
        if e is None:
            failures.append("%s: not in the report" % name)
            continue
        executed = None
        nb_path = os.path.join(out, name, "notebook.ipynb")
        if os.path.exists(nb_path):
            with open(nb_path) as f:
                executed = json.load(f)
        if name in EXPECTED:
            reason, check = EXPECTED[name]
            why = check(e, executed)
            if why:
                failures.append("%s: expected behaviour not seen: %s" % (name, why))
            else:
                expected.append((name, reason))
            continue
        if executed is None:
            failures.append("%s: no executed notebook (%s)" % (name, e["first_error"]))
            continue
        with open(path) as f:
            stored = json.load(f)
        a = [norm_outputs(c.get("outputs", [])) for c in code_cells(stored)]
        b = [norm_outputs(c.get("outputs", [])) for c in code_cells(executed)]
        if a != b:
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    failures.append("%s: cell %d differs:\n  stored   %s\n  executed %s" % (
                        name, i, json.dumps(x)[:600], json.dumps(y)[:600]))
                    break
            else:
                failures.append("%s: cell count %d != %d" % (name, len(a), len(b)))
            continue
        equal.append(name)
    for name in equal:
        print("equal     %s" % name)
    for name, reason in expected:
        print("expected  %s: %s" % (name, reason))
    for f in failures:
        print("FAIL      %s" % f)
    print("\n%d re-executed equal, %d expected-different, %d failed (of %d)" % (
        len(equal), len(expected), len(failures), len(notebooks)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
