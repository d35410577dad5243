#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Integration tests of the results a model can read without eyes: the
chart (application/vnd.nbrun.chart+json) and table
(application/vnd.nbrun.table+json) descriptions the runtime's python3 kernel
adds beside a matplotlib figure and a pandas DataFrame, the lines the MCP
text summary makes of them, and an R cell's last value as its result.

Usage: describe_cases.py CASE   (one meson test per case; see meson.build)
Cases: chart_line, chart_bar, table, chart_huge, mcp_summary, r_value.
Every case runs real code in the real image, validates the result document
(and each description against its own schema) and compares the description
with the data the code plotted; the last line of a passing case is
"held CASE".
"""
import json
import math
import os
import subprocess
import sys
import tempfile

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
SCHEMAS = os.path.join(SRCDIR, "schemas")
CHART = "application/vnd.nbrun.chart+json"
TABLE = "application/vnd.nbrun.table+json"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def validate(doc, name):
    import jsonschema
    with open(os.path.join(SCHEMAS, name)) as f:
        jsonschema.Draft202012Validator(json.load(f)).validate(doc)


def run(code, *args):
    out = os.path.join(tempfile.mkdtemp(prefix="nbrun-describe-"), "o")
    # a generous deadline: the machine may be loaded, and no case is about time
    p = subprocess.run([NBRUN, "run", "--json", "--timeout", "300s", "-o", out] + list(args) + ["-c", code],
                       capture_output=True, text=True, timeout=400)
    check(p.stdout.strip(), "no document (exit %d, stderr %r)" % (p.returncode, p.stderr[-800:]))
    doc = json.loads(p.stdout)
    validate(doc, "result.schema.json")
    check(p.returncode == 0 and doc["status"] == "ok",
          "exit %d, status %r (%s), error %r, stderr %r" % (p.returncode, doc["status"], doc["message"], doc.get("error"),
                                                       p.stderr[-800:]))
    return doc


def described(doc, mime):
    """(output, description) for each output carrying mime, each validated by its schema."""
    found = []
    for o in doc["outputs"]:
        d = o.get("data", {}).get(mime)
        if d is None:
            continue
        check(isinstance(d, dict), "%s kept as %r, not as a JSON object" % (mime, type(d).__name__))
        validate(d, "chart.schema.json" if mime == CHART else "table.schema.json")
        found.append((o, d))
    return found


def only_axes(chart):
    check(chart["n_axes"] == 1 and len(chart["axes"]) == 1, "axes: %r" % chart["axes"])
    return chart["axes"][0]


def printed(doc):
    """The JSON line the code printed last (the data it plotted, as the code computed it)."""
    lines = [l for l in doc["stdout"].splitlines() if l.startswith("{")]
    check(lines, "the code printed no data: %r" % doc["stdout"])
    return json.loads(lines[-1])


def case_chart_line():
    doc = run('import json, matplotlib.pyplot as plt\n'
              'xs = [0, 1, 2, 3, 4.5]\n'
              'sq = [x * x for x in xs]\n'
              'half = [x / 2 - 1.25 for x in xs]\n'
              'plt.plot(xs, sq, label="squares")\n'
              'plt.plot(xs, half, label="half")\n'
              'plt.title("Growth"); plt.xlabel("time (s)"); plt.ylabel("value")\n'
              'plt.legend(); plt.show()\n'
              'print(json.dumps({"xs": xs, "sq": sq, "half": half}))\n'
              '# %%\n'
              'fig, ax = plt.subplots()\n'
              'ax.plot([1, 2, 3], [3, 2, 1], "o", label="dots")\n'
              'fig\n')
    data = printed(doc)
    charts = described(doc, CHART)
    check(charts, "no chart description in %r" % [o.get("data", {}).keys() for o in doc["outputs"]])
    out, chart = charts[0]
    check(out["cell"] == 0 and out["type"] == "display_data", "first chart in %r" % out)
    # the description rides beside the image, which is exported as before
    check("image/png" in out["data"] and out["data"]["image/png"].get("path", "").startswith("images/"),
          "no exported PNG beside the chart: %r" % out["data"].get("image/png"))
    check(chart["kind"] == "line" and chart["title"] == "Growth", "kind/title %r/%r" % (chart["kind"], chart["title"]))
    ax = only_axes(chart)
    check((ax["x_label"], ax["y_label"]) == ("time (s)", "value"), "labels %r %r" % (ax["x_label"], ax["y_label"]))
    check([s["label"] for s in ax["series"]] == ["squares", "half"], "series %r" % ax["series"])
    for s, key in zip(ax["series"], ("sq", "half")):
        check(s["kind"] == "line" and not s["truncated"] and s["n_points"] == len(data["xs"]), "series %r" % s)
        check(s["x"] == data["xs"] and s["y"] == data[key],
              "%s: x %r y %r, plotted %r %r" % (s["label"], s["x"], s["y"], data["xs"], data[key]))
    # a figure left as the cell's value: the execute_result carries it too
    last = [d for o, d in charts if o["cell"] == 1 and o["type"] == "execute_result"]
    check(last, "no chart in cell 1's execute_result: %r" % [(o["cell"], o["type"]) for o, _ in charts])
    s = only_axes(last[0])["series"]
    check(len(s) == 1 and s[0]["kind"] == "scatter" and s[0]["label"] == "dots" and
          s[0]["x"] == [1, 2, 3] and s[0]["y"] == [3, 2, 1], "markers-only line: %r" % s)
    print("  line: %s" % json.dumps(ax["series"][0]))


def case_chart_bar():
    doc = run('import json, numpy as np, matplotlib.pyplot as plt\n'
              'names = ["north", "south", "east"]\n'
              'units = [930, 745, 512]\n'
              'fig, ax = plt.subplots()\n'
              'ax.bar(names, units, label="units")\n'
              'ax.set_title("Units by region"); ax.set_ylabel("units")\n'
              'plt.show()\n'
              'rng = np.random.default_rng(7)\n'
              'v = rng.normal(size=400)\n'
              'counts, edges = np.histogram(v, bins=8)\n'
              'plt.hist(v, bins=8); plt.show()\n'
              'plt.barh(["a", "b"], [2.5, 4]); plt.show()\n'
              'print(json.dumps({"names": names, "units": units, "counts": counts.tolist(),'
              ' "edges": edges.tolist()}))\n')
    data = printed(doc)
    charts = [d for _, d in described(doc, CHART)]
    check(len(charts) == 3, "%d charts, want 3" % len(charts))
    bar, hist, barh = (only_axes(c) for c in charts)
    check(charts[0]["kind"] == "bar" and charts[0]["title"] == "Units by region", "bar chart %r" % charts[0])
    check(bar["y_label"] == "units" and len(bar["series"]) == 1, "bar axes %r" % bar)
    s = bar["series"][0]
    check(s["label"] == "units" and s["x"] == data["names"] and s["y"] == data["units"],
          "bars %r, plotted %r %r" % (s, data["names"], data["units"]))
    check(hist["kind"] == "histogram", "hist kind %r" % hist["kind"])
    h = hist["series"][0]
    check(h["y"] == data["counts"], "histogram counts %r, numpy's %r" % (h["y"], data["counts"]))
    check(len(h["bin_edges"]) == len(data["edges"]) and
          all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) for a, b in zip(h["bin_edges"], data["edges"])),
          "bin edges %r, numpy's %r" % (h["bin_edges"], data["edges"]))
    hb = barh["series"][0]
    check(hb.get("orientation") == "horizontal" and hb["x"] == [2.5, 4] and hb["y"] == ["a", "b"],
          "horizontal bars %r" % hb)
    print("  bar: %s" % json.dumps(s))


def case_table():
    doc = run('import pandas as pd, numpy as np\n'
              'df = pd.DataFrame({"a": range(100), "b": np.arange(100) * 0.25,'
              ' "c": ["r%d" % i for i in range(100)]})\n'
              'df.loc[2, "b"] = np.nan\n'
              'df\n')
    tables = described(doc, TABLE)
    check(len(tables) == 1, "%d tables" % len(tables))
    out, t = tables[0]
    check(out["type"] == "execute_result" and "text/html" in out["data"], "table output %r" % out["type"])
    check(t["shape"] == [100, 3], "shape %r" % t["shape"])
    check(t["columns"] == ["a", "b", "c"], "columns %r" % t["columns"])
    check(t["dtypes"] == ["int64", "float64", "object"], "dtypes %r" % t["dtypes"])
    check(t["truncated"] is True and 0 < len(t["rows"]) <= 20, "rows %d, truncated %r" % (len(t["rows"]), t["truncated"]))
    want = [[i, None if i == 2 else i * 0.25, "r%d" % i] for i in range(len(t["rows"]))]
    check(t["rows"] == want, "rows %r, want %r" % (t["rows"][:4], want[:4]))
    check(t["index"] == list(range(len(t["rows"]))), "index %r" % t["index"])
    # the summary text gets a line of it (the run's document has no summary: the MCP case reads it)
    print("  table: shape %r, %d rows listed" % (t["shape"], len(t["rows"])))


def case_chart_huge():
    code = ('import numpy as np, matplotlib.pyplot as plt\n'
            'x = np.linspace(0, 10, 1_000_000)\n'
            'plt.plot(x, np.sin(x), label="sin"); plt.plot(x, np.cos(x), label="cos")\n'
            'plt.title("A million points"); plt.show()\n')
    doc = run(code)
    charts = described(doc, CHART)
    check(len(charts) == 1, "%d charts" % len(charts))
    chart = charts[0][1]
    size = len(json.dumps(chart, separators=(",", ":"), ensure_ascii=False).encode())
    check(size <= 16000, "description of %d bytes" % size)
    check(chart["truncated"] is True, "not marked truncated")
    for s, f in zip(only_axes(chart)["series"], (math.sin, math.cos)):
        check(s["n_points"] == 1_000_000 and s["truncated"] and 2 <= len(s["x"]) <= 500, "series %r" %
              {k: s[k] for k in ("n_points", "truncated")})
        check(s["x"][0] == 0 and s["x"][-1] == 10, "first/last x %r %r" % (s["x"][0], s["x"][-1]))
        check(s["x"] == sorted(s["x"]), "sample out of order")
        # each sampled point is a point of the data (7 significant digits)
        check(all(abs(f(x) - y) < 1e-5 for x, y in zip(s["x"], s["y"])), "%s: points off the curve" % s["label"])
    # below --max-output the C side keeps the description as bounded text, the image as before
    doc = run(code, "--max-output", "2000")
    out = [o for o in doc["outputs"] if CHART in o.get("data", {})]
    check(out and isinstance(out[0]["data"][CHART], str) and len(out[0]["data"][CHART]) <= 2200,
          "with --max-output 2000: %r" % (out and type(out[0]["data"][CHART])))
    check(doc["truncated"] is True and doc["images"], "truncated %r, images %r" % (doc["truncated"], doc["images"]))
    print("  %d bytes, %d points listed of 1000000" % (size, len(only_axes(chart)["series"][0]["x"])))


def case_mcp_summary():
    code = ('import pandas as pd, matplotlib.pyplot as plt\n'
            'plt.plot([1, 2], [3, 4], label="squares"); plt.plot([1, 2], [1, 1], label="flat")\n'
            'plt.title("Growth\\nnow"); plt.xlabel("x"); plt.ylabel("y"); plt.show()\n'
            'pd.DataFrame({"a": range(100), "b": 1.5, "c": "z"})\n')
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "describe_cases", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "run_python", "arguments": {"code": code, "timeout_s": 300}}}]
    p = subprocess.Popen([NBRUN, "mcp", "--pool", "0", "--timeout", "300s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        for m in msgs:
            p.stdin.write(json.dumps(m) + "\n")
        p.stdin.flush()
        reply = None
        for line in p.stdout:
            m = json.loads(line)
            if m.get("id") == 2:
                reply = m
                break
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    check(reply and "result" in reply, "reply %r (stderr %r)" % (reply, p.stderr.read()[-800:]))
    text = reply["result"]["content"][0]["text"]
    want = ["chart (cell 0): line 'Growth now' x='x', y='y', 2 series (squares, flat)\n",
            "table (cell 0): 100×3, columns a, b, c\n"]
    for w in want:
        check(w in text, "summary lacks %r:\n%s" % (w, text))
    print("  " + text.replace("\n", "\n  "))


def case_r_value():
    # the value of the last expression is the cell's result, as in Python;
    # earlier visible values stay display_data among the outputs
    doc = run("1+1", "--language", "r")
    check([r["text"] for r in doc["results"]] == ["[1] 2"], "results %r" % doc["results"])
    check([o["type"] for o in doc["outputs"]] == ["execute_result"], "outputs %r" % doc["outputs"])
    doc = run('x <- 20\n41\ncat("between\\n")\nx * 2 + 2\n# %%\n7; plot(1:3)\n# %%\nplot(1:3); "last"\n'
              '# %%\ny <- 1\n', "--language", "r")
    check([(r["cell"], r["text"]) for r in doc["results"]] == [(0, "[1] 42"), (2, '[1] "last"')],
          "results %r" % doc["results"])
    kinds = [(o["cell"], o["type"]) for o in doc["outputs"]]
    check(kinds == [(0, "display_data"), (0, "stream"), (0, "execute_result"),
                    (1, "display_data"), (1, "display_data"), (2, "execute_result"), (2, "display_data")],
          "outputs %r" % kinds)
    check(len(doc["images"]) == 2 and all(i["mime"] == "image/png" for i in doc["images"]),
          "images %r" % doc["images"])
    print("  results %r" % doc["results"])


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        print("usage: describe_cases.py CASE (%s)" % ", ".join(sorted(CASES)), file=sys.stderr)
        sys.exit(2)
    CASES[sys.argv[1]]()
    print("held %s" % sys.argv[1])
