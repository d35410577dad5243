#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""nbrun benchmarks: honest numbers, side by side with the seed approach.

Run through bench/run, which builds nbrun (release, no sanitizers) first.
Every figure is a distribution over N runs and, where it makes sense, a
ratio against baseline A measured in the same session:

  baseline A  `docker run --rm -v DIR:/app IMAGE jupyter nbconvert --execute`
              through the docker CLI, then json.load of the executed notebook
  cold        `nbrun run --json` of print(1), a matplotlib chart, a pandas
              CSV -> file; runs alternate with baseline A so load drifts hit both
  host cost   nbrun's own CPU time and peak RSS (wait4 rusage of the nbrun
              process, not the container)
  batch       20 small notebooks: `nbrun batch -j 1` and `-j 2` (or, while
              batch does not exist, `nbrun run` processes started N at a time
              by this harness, labelled so) against baseline A in sequence
  parse       `nbrun parse` of a ~100 MB executed notebook: peak RSS / size
  phases      cold runs through bench/engine_proxy.py: Engine API calls timed
              and attributed to create, start, the channel (kernel start,
              cells), cleanup; the rest of the wall time is local work
  warm        `nbrun serve --pool N` on a unix socket: spaced pool-hit runs of
              the same workloads over a kept-alive HTTP connection (request to
              the whole response), back-to-back rate at concurrency 1 and 2,
              the server's RSS and its containers' memory; then a print(1)
              per language as pool hits of a server with a pool of each
  runsc       (only with --only runsc) what gVisor costs: cold `nbrun run` of
              print(1) and warm pool hits of `nbrun serve --pool 1`, under the
              engine's default runtime (runc) and under `--runtime runsc`,
              interleaved in one session

Benchmarks are not tests: nothing here fails on timing. Results go to
bench/results/<date>.json for bench/compare.
"""
import argparse
import base64
import concurrent.futures
import datetime
import http.client
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the tree
from engine_proxy import EngineProxy  # noqa: E402

DOCKER = "/usr/bin/docker"
SANDBOX_UID = 1000
SCHEMA = "nbrun-bench/1"

# ---- workloads ---------------------------------------------------------------

CHART_CODE = """\
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6, 4))
xs = list(range(50))
ax.plot(xs, [x * x for x in xs], label="x^2")
ax.plot(xs, [40 * x for x in xs], label="40x")
ax.set_title("bench chart")
ax.legend()
plt.show()
"""

CSV_CODE = """\
import pandas as pd
df = pd.read_csv("/mnt/data/input.csv")
summary = df.groupby("region").agg(units=("units", "sum"), revenue=("revenue", "sum"))
summary.to_csv("/mnt/data/out.csv")
print(len(df), "rows")
summary
"""

WORKLOADS = [
    {"key": "print", "label": "print(1)", "code": "print(1)", "csv": False},
    {"key": "chart", "label": "matplotlib chart", "code": CHART_CODE, "csv": False},
    {"key": "csv", "label": "pandas CSV -> file", "code": CSV_CODE, "csv": True},
]


def make_csv(path, rows=5000):
    rnd = random.Random(7)
    regions = ["north", "south", "east", "west"]
    with open(path, "w") as f:
        f.write("month,region,units,revenue\n")
        for i in range(rows):
            u = rnd.randint(1, 500)
            f.write("2024-%02d,%s,%d,%.2f\n" % (i % 12 + 1, rnd.choice(regions), u, u * 8.75))


def notebook(sources):
    cells = [{"cell_type": "code", "id": "c%d" % i, "metadata": {}, "execution_count": None,
              "outputs": [], "source": src} for i, src in enumerate(sources)]
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"},
                         "language_info": {"name": "python"}}}


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


# ---- statistics ----------------------------------------------------------------

def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(xs)
    if not s:
        return None
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def dist(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0, "min": None, "p50": None, "p90": None, "p99": None, "max": None,
                "samples": []}
    return {"n": len(xs), "min": min(xs), "p50": percentile(xs, 50), "p90": percentile(xs, 90),
            "p99": percentile(xs, 99), "max": max(xs), "samples": [round(x, 3) for x in xs]}


def ratio(a, b):
    return a / b if a is not None and b else None


# ---- processes -----------------------------------------------------------------

class Proc:
    """One measured process: rc, wall_ms, cpu_ms, maxrss_kb, start, end, stdout."""


def run_measured(argv, env=None, cwd=None, timeout=900):
    """Run argv; wall time, exit code, and the process's own rusage (wait4)."""
    p = Proc()
    with tempfile.TemporaryFile() as out, open(os.devnull, "wb") as err:
        p.start = time.monotonic()
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 env=env, cwd=cwd)
        killer = threading.Timer(timeout, lambda: _kill(child.pid))
        killer.start()
        try:
            _, status, ru = os.wait4(child.pid, 0)
        finally:
            killer.cancel()
        p.end = time.monotonic()
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        p.stdout = out.read()
    p.rc = child.returncode
    p.wall_ms = (p.end - p.start) * 1000
    p.cpu_ms = (ru.ru_utime + ru.ru_stime) * 1000
    p.maxrss_kb = ru.ru_maxrss
    return p


def _kill(pid):
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def sh(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def give_to_sandbox(path):
    """The image runs as uid 1000: let it write the bind-mounted directory."""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            try:
                os.chown(name, SANDBOX_UID, SANDBOX_UID)
            except PermissionError:
                os.chmod(name, 0o777 if os.path.isdir(name) else 0o666)


# ---- machine and load ------------------------------------------------------------

def machine_info():
    info = {"nproc": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0))}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    info["cpu_model"] = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for ln in f:
                if ln.startswith("MemTotal:"):
                    info["mem_total_mib"] = int(ln.split()[1]) // 1024
    except OSError:
        pass
    info["kernel"] = os.uname().release
    try:
        with open("/etc/os-release") as f:
            for ln in f:
                if ln.startswith("PRETTY_NAME="):
                    info["os"] = ln.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    v = sh([DOCKER, "version", "--format", "{{json .}}"])
    try:
        j = json.loads(v)
        info["docker_server"] = j.get("Server", {}).get("Version")
        info["docker_api"] = j.get("Server", {}).get("ApiVersion")
        info["docker_client"] = j.get("Client", {}).get("Version")
        info["docker_cgroup"] = sh([DOCKER, "info", "--format", "{{.CgroupVersion}} {{.CgroupDriver}} {{.Driver}}"])
    except ValueError:
        info["docker_server"] = None
    info["python"] = sys.version.split()[0]
    return info


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def busy_processes(interval=1.0, min_pct=10.0):
    """Processes using CPU right now (two /proc samples), to explain noisy numbers."""
    def snap():
        out = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    s = f.read()
            except OSError:
                continue
            comm = s[s.index("(") + 1:s.rindex(")")]
            fields = s[s.rindex(")") + 2:].split()
            out[pid] = (comm, int(fields[11]) + int(fields[12]), int(fields[16]))
        return out
    tick = os.sysconf("SC_CLK_TCK")
    a = snap()
    time.sleep(interval)
    b = snap()
    rows = []
    for pid, (comm, t, nice) in b.items():
        if pid in a:
            pct = (t - a[pid][1]) / tick / interval * 100
            if pct >= min_pct:
                rows.append({"pid": int(pid), "comm": comm, "cpu_pct": round(pct), "nice": nice})
    return sorted(rows, key=lambda r: -r["cpu_pct"])[:8]


class LoadSampler:
    def __init__(self, period=5.0):
        self.samples = []
        self._stop = threading.Event()
        self._period = period

    def __enter__(self):
        threading.Thread(target=self._loop, daemon=True).start()
        return self

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append(loadavg()[0])
            self._stop.wait(self._period)

    def __exit__(self, *exc):
        self._stop.set()


def engine_ok(image):
    """The engine answers and the image is there (scripts/setup may be rebuilding it)."""
    return subprocess.run([DOCKER, "image", "inspect", image], capture_output=True,
                          timeout=30).returncode == 0


def running_containers():
    out = sh([DOCKER, "ps", "-q"])
    return len(out.split()) if out else 0


# ---- progress --------------------------------------------------------------------

TTY = sys.stderr.isatty()


def say(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def tick(msg):
    if TTY:
        sys.stderr.write("\r\033[Kbench:   " + msg)
        sys.stderr.flush()


def tick_done():
    if TTY:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


# ---- one run of each kind ----------------------------------------------------------

class Bench:
    def __init__(self, args, work):
        self.args = args
        self.nbrun = args.nbrun
        self.image = args.image
        self.work = work
        self.seq = 0
        self.failures = []
        self.outages = []
        self.env = dict(os.environ)
        if args.ignore_docker_host:
            self.env.pop("DOCKER_HOST", None)
        self.csv_path = os.path.join(work, "input.csv")
        make_csv(self.csv_path)

    def _dir(self, prefix):
        self.seq += 1
        return os.path.join(self.work, "%s-%04d" % (prefix, self.seq))

    def engine_down(self, what):
        """After an engine-level failure: wait for the engine (up to 10 min).
        Returns True when it was down, so the caller retries the run."""
        t0 = time.monotonic()
        try:
            if engine_ok(self.image):
                return False
        except subprocess.SubprocessError:
            pass
        say("engine or image unavailable after %s: waiting (someone may be restarting it)" % what)
        while time.monotonic() - t0 < 600:
            time.sleep(5)
            try:
                if engine_ok(self.image):
                    break
            except subprocess.SubprocessError:
                pass
        waited = time.monotonic() - t0
        self.outages.append({"after": what, "waited_s": round(waited, 1)})
        say("engine back after %.0f s; retrying" % waited)
        return True

    def fail(self, what, detail):
        self.failures.append({"what": what, "detail": str(detail)[:300]})
        say("warning: %s: %s" % (what, str(detail)[:200]))

    # nbrun run --json, checked for what the workload must produce.
    def nbrun_run(self, wl, docker_host=None, extra=()):
        for _ in range(3):
            p = self._nbrun_run(wl, docker_host, extra)
            if p.ok or p.rc != 4 or not self.engine_down("nbrun run (%s)" % wl["key"]):
                break
        if not p.ok:
            self.fail("nbrun run (%s)" % wl["key"],
                      "exit %d, status %s: %s" % (p.rc, p.doc.get("status"), p.doc.get("message")))
        return p

    def _nbrun_run(self, wl, docker_host, extra=()):
        out = self._dir("nbrun-" + wl["key"])
        argv = [self.nbrun, "run", "--json", "-q", "-o", out, "-c", wl["code"]] + list(extra)
        if wl["csv"]:
            argv += ["-f", self.csv_path]
        if wl.get("language"):
            argv += ["--language", wl["language"]]
        env = dict(self.env)
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        p = run_measured(argv, env=env)
        p_ok = p.rc == 0
        doc = {}
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            p_ok = False
        if p_ok and wl["key"] == "print" and doc.get("stdout") != "1\n":
            p_ok = False
        if p_ok and wl["key"] == "chart" and not doc.get("images"):
            p_ok = False
        if p_ok and wl["key"] == "csv" and not any(
                f.get("path", "").endswith("out.csv") for f in doc.get("files", [])):
            p_ok = False
        p.ok = p_ok
        p.out_dir = out
        p.doc = doc
        return p

    # Baseline A: the docker CLI, then json.load of the executed notebook.
    def baseline_run(self, wl=None, nb_path=None, name="nb"):
        what = "baseline A (%s)" % (wl["key"] if wl else name)
        for _ in range(3):
            p = self._baseline_run(wl, nb_path)
            # 125: the docker CLI could not create or start the container.
            if p.ok or p.rc != 125 or not self.engine_down(what):
                break
        if not p.ok:
            self.fail(what, "exit %d%s" % (p.rc, "" if p.rc else ", outputs missing"))
        return p

    def _baseline_run(self, wl, nb_path):
        d = self._dir("baseline-" + (wl["key"] if wl else "batch"))
        os.makedirs(d)
        if nb_path:
            shutil.copy(nb_path, os.path.join(d, "nb.ipynb"))
        else:
            write_json(os.path.join(d, "nb.ipynb"), notebook([wl["code"]]))
        mounts = ["-v", "%s:/app" % d]
        if wl and wl["csv"]:
            os.makedirs(os.path.join(d, "data"))
            shutil.copy(self.csv_path, os.path.join(d, "data", "input.csv"))
            mounts += ["-v", "%s/data:/mnt/data" % d]
        give_to_sandbox(d)
        argv = [DOCKER, "run", "--rm"] + mounts + [
            self.image, "jupyter", "nbconvert", "--to", "notebook", "--execute",
            "/app/nb.ipynb", "--output-dir", "/app", "--output", "executed.ipynb"]
        p = run_measured(argv)
        t0 = time.monotonic()
        ok = p.rc == 0
        try:
            with open(os.path.join(d, "executed.ipynb")) as f:
                nb = json.load(f)
            outs = [o for c in nb.get("cells", []) for o in c.get("outputs", [])]
        except (OSError, ValueError):
            ok, outs = False, []
        read_ms = (time.monotonic() - t0) * 1000
        if ok and wl:
            if wl["key"] == "print":
                ok = any("".join(o.get("text", "")) == "1\n" for o in outs)
            elif wl["key"] == "chart":
                ok = any("image/png" in o.get("data", {}) for o in outs)
            elif wl["key"] == "csv":
                ok = os.path.exists(os.path.join(d, "data", "out.csv"))
        p.ok = ok
        p.read_ms = read_ms
        p.wall_ms += read_ms
        return p


# ---- sections ------------------------------------------------------------------------

def section_cold(b, n):
    """Interleaved cold runs: baseline A and nbrun, per workload."""
    res = {}
    for wl in WORKLOADS:
        res[wl["key"]] = {"nbrun": [], "baseline": []}
    say("warm-up: one discarded run of each (page cache, image layers)")
    b.baseline_run(WORKLOADS[0])
    b.nbrun_run(WORKLOADS[0])
    say("cold runs: %d x %d workloads, nbrun and baseline A alternating" % (n, len(WORKLOADS)))
    for i in range(n):
        for wl in WORKLOADS:
            first_baseline = (i % 2 == 0)
            order = ["baseline", "nbrun"] if first_baseline else ["nbrun", "baseline"]
            for who in order:
                tick("%s %s %d/%d" % (who, wl["key"], i + 1, n))
                p = b.baseline_run(wl) if who == "baseline" else b.nbrun_run(wl)
                if p.ok:
                    res[wl["key"]][who].append(p)
    tick_done()
    return res


# print(1) in each language the image runs (section langs).
LANG_WORKLOADS = [
    {"key": "lang-" + lang, "label": lang, "language": lang, "code": code, "csv": False}
    for lang, code in (("python", "print(1)"), ("r", "cat(1)"), ("javascript", "console.log(1)"),
                       ("typescript", "console.log(1)"), ("bash", "echo 1"))]


def section_langs(b, n):
    """Cold print(1)-equivalents per language, the languages alternating,
    and the image's size."""
    res = {"runs": {wl["label"]: [] for wl in LANG_WORKLOADS}}
    for i in range(n):
        for wl in LANG_WORKLOADS:
            tick("%s %d/%d" % (wl["label"], i + 1, n))
            p = b.nbrun_run(wl)
            if p.ok:
                res["runs"][wl["label"]].append(p)
    tick_done()
    size = sh([DOCKER, "image", "inspect", "-f", "{{.Size}}", b.args.image])
    res["image_bytes"] = int(size) if size and size.strip().isdigit() else None
    return res


def exec_cells_ms(nb_path):
    """Time the kernel spent on cells: iopub busy -> idle, summed."""
    try:
        with open(nb_path) as f:
            nb = json.load(f)
    except (OSError, ValueError):
        return None
    total = 0.0
    for c in nb.get("cells", []):
        ex = c.get("metadata", {}).get("execution", {})
        a, z = ex.get("iopub.status.busy"), ex.get("iopub.status.idle")
        if a and z:
            ta = datetime.datetime.fromisoformat(a.replace("Z", "+00:00"))
            tz = datetime.datetime.fromisoformat(z.replace("Z", "+00:00"))
            total += (tz - ta).total_seconds() * 1000
    return total


PHASES = [
    ("preflight", "preflight: ping, orphan scan, image check"),
    ("create", "create: 2 volumes + container"),
    ("start", "start container"),
    ("upload", "upload (PUT archive)"),
    ("kernel", "kernel start + channel (notebook in, results and /mnt/data out)"),
    ("exec", "execution (cells, busy->idle)"),
    ("inspect", "inspect container"),
    ("download", "download (GET archive)"),
    ("parse", "parse + export (local, between downloads)"),
    ("cleanup", "cleanup (DELETE container, volumes)"),
    ("local", "local rest: process start, tar, result"),
]


def attribute(records, p):
    """Split one proxied run's wall time into phases (ms)."""
    ph = {k: 0.0 for k, _ in PHASES}
    created = False
    engine_ms = 0.0
    logs_ms = 0.0
    gaps_parse = 0.0
    prev_download = False
    prev_end = None
    starts = [r for r in records if r["method"] == "POST" and r["path"].split("?")[0].endswith("/start")]
    start_end = starts[0]["end"] if starts else None
    for r in records:
        target = r["path"]
        path, _, query = target.partition("?")
        if path.startswith("/v1.") and "/" in path[1:]:
            path = path[path.index("/", 1):]
        m = r["method"]
        ms = (r["end"] - r["start"]) * 1000
        if m == "POST" and path.endswith("/attach"):
            # The live channel: opened before start, held to the end of the
            # run; its wait counts from the end of start (no double count).
            ms = (r["end"] - max(r["start"], start_end or r["start"])) * 1000
        engine_ms += ms
        if prev_download and prev_end is not None:
            gaps_parse += max(0.0, (r["start"] - prev_end) * 1000)
        prev_download = False
        if m == "POST" and path in ("/volumes/create", "/containers/create"):
            created = True
            key = "create"
        elif not created:
            key = "preflight"
        elif m == "POST" and path.endswith("/start"):
            key = "start"
        elif m == "POST" and path.endswith("/attach"):
            key = "logs"
            logs_ms += ms
        elif m == "PUT" and path.endswith("/archive"):
            key = "upload"
        elif m == "GET" and path.endswith("/logs") and "follow=1" in query:
            key = "logs"
            logs_ms += ms
        elif m == "GET" and path.endswith("/archive"):
            key = "download"
            prev_download = True
        elif m == "DELETE":
            key = "cleanup"
        else:
            key = "inspect"
        if key != "logs":
            ph[key] += ms
        prev_end = r["end"]
    cells = exec_cells_ms(os.path.join(p.out_dir, "notebook.ipynb"))
    if cells is None:
        cells = 0.0
    ph["exec"] = min(cells, logs_ms)
    ph["kernel"] = max(0.0, logs_ms - ph["exec"])
    ph["parse"] = gaps_parse
    ph["local"] = max(0.0, p.wall_ms - engine_ms - gaps_parse)
    ph["wall"] = p.wall_ms
    ph["requests"] = len(records)
    return ph


def section_phases(b, n):
    sock = os.path.join(b.work, "engine.sock")
    upstream = "/var/run/docker.sock"
    dh = os.environ.get("DOCKER_HOST", "")
    if dh.startswith("unix://") and not b.args.ignore_docker_host:
        upstream = dh[7:]
    proxy = EngineProxy(sock, upstream).start()
    res = {}
    say("phases: %d run(s) per workload through bench/engine_proxy.py" % n)
    try:
        for wl in WORKLOADS:
            rows = []
            for i in range(n):
                tick("phases %s %d/%d" % (wl["key"], i + 1, n))
                proxy.take()
                p = b.nbrun_run(wl, docker_host="unix://" + sock)
                proxy.wait_idle(5)
                recs = proxy.take()
                if p.ok and recs:
                    rows.append(attribute(recs, p))
            res[wl["key"]] = rows
    finally:
        tick_done()
        proxy.stop()
    return res


def make_batch_notebooks(d, n):
    os.makedirs(d, exist_ok=True)
    paths = []
    for i in range(n):
        src = ["import math\nn = %d" % (1000 * (i + 1)),
               "total = sum(math.isqrt(k) for k in range(n))\nprint('nb%02d', total)" % i]
        path = os.path.join(d, "nb%02d.ipynb" % i)
        write_json(path, notebook(src))
        paths.append(path)
    return paths


def have_batch(nbrun):
    try:
        return subprocess.run([nbrun, "batch", "--help"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def batch_nbrun(b, paths, jobs, use_batch):
    """Throughput of nbrun on paths with `jobs` at a time; rerun once after an outage."""
    r = _batch_nbrun(b, paths, jobs, use_batch)
    if r["ok"] < len(paths) and b.engine_down("nbrun -j %d" % jobs):
        r = _batch_nbrun(b, paths, jobs, use_batch)
    if r["ok"] < len(paths):
        b.fail("nbrun -j %d" % jobs, "%d of %d notebooks ok" % (r["ok"], len(paths)))
    return r


def _batch_nbrun(b, paths, jobs, use_batch):
    if use_batch:
        out = b._dir("batch-j%d" % jobs)
        p = run_measured([b.nbrun, "batch", "--json", "-q", "-j", str(jobs), "-o", out] + paths,
                         env=b.env)
        ok_count, per = 0, []
        try:
            rep = json.loads(p.stdout)
            for e in rep.get("notebooks", []):
                if e.get("status") == "ok":
                    ok_count += 1
                per.append(e.get("duration_ms"))
        except ValueError:
            pass
        return {"wall_ms": p.wall_ms, "ok": ok_count, "per_notebook_ms": per,
                "cpu_ms": p.cpu_ms, "maxrss_kb": p.maxrss_kb}
    # Fallback: `nbrun run` processes, `jobs` at a time, started by this harness.
    done = []

    def one(path):
        out = b._dir("runj%d" % jobs)
        p = run_measured([b.nbrun, "run", "--json", "-q", "-o", out, path], env=b.env)
        try:
            ok = p.rc == 0 and json.loads(p.stdout).get("status") == "ok"
        except ValueError:
            ok = False
        return p, ok

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        for p, ok in ex.map(one, paths):
            done.append((p, ok))
    wall = (time.monotonic() - t0) * 1000
    return {"wall_ms": wall, "ok": sum(1 for _, ok in done if ok),
            "per_notebook_ms": [p.wall_ms for p, _ in done],
            "cpu_ms": sum(p.cpu_ms for p, _ in done),
            "maxrss_kb": max(p.maxrss_kb for p, _ in done)}


def batch_baseline(b, paths):
    t0 = time.monotonic()
    per, ok = [], 0
    for path in paths:
        p = b.baseline_run(nb_path=path, name=os.path.basename(path))
        per.append(p.wall_ms)
        ok += 1 if p.ok else 0
    return {"wall_ms": (time.monotonic() - t0) * 1000, "ok": ok, "per_notebook_ms": per}


def section_batch(b, size, reps):
    paths = make_batch_notebooks(os.path.join(b.work, "batch-notebooks"), size)
    use_batch = have_batch(b.nbrun)
    mode = "nbrun batch" if use_batch else "fallback: harness runs `nbrun run` N at a time"
    say("batch: %d notebooks x %d rep(s): baseline A sequential, nbrun -j 1, -j 2 (%s)"
        % (size, reps, mode))
    res = {"mode": mode, "uses_nbrun_batch": use_batch, "size": size,
           "baseline": [], "j1": [], "j2": []}
    for r in range(reps):
        tick("batch rep %d/%d: baseline A sequential" % (r + 1, reps))
        res["baseline"].append(batch_baseline(b, paths))
        tick("batch rep %d/%d: -j 1" % (r + 1, reps))
        res["j1"].append(batch_nbrun(b, paths, 1, use_batch))
        tick("batch rep %d/%d: -j 2" % (r + 1, reps))
        res["j2"].append(batch_nbrun(b, paths, 2, use_batch))
    tick_done()
    return res


def png_bytes(w=160, h=160, seed=3):
    """A real PNG (RGB noise, so it does not compress away): ~77 KB, a large chart."""
    rnd = random.Random(seed)
    raw = b"".join(b"\x00" + bytes(rnd.getrandbits(8) for _ in range(w * 3)) for _ in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def make_big_notebook(path, target_bytes):
    """An executed nbformat 4.5 notebook of many display_data PNG outputs."""
    b64 = base64.b64encode(png_bytes()).decode()
    out = {"output_type": "display_data", "metadata": {},
           "data": {"image/png": b64, "text/plain": ["<Figure size 640x480 with 1 Axes>"]}}
    per_cell = 10
    head = ('{\n "nbformat": 4,\n "nbformat_minor": 5,\n "metadata": {"kernelspec": '
            '{"name": "python3", "display_name": "Python 3", "language": "python"}, '
            '"language_info": {"name": "python"}},\n "cells": [\n')
    written = len(head)
    with open(path, "w") as f:
        f.write(head)
        i = 0
        while True:
            cell = {"cell_type": "code", "id": "c%d" % i, "metadata": {}, "execution_count": i + 1,
                    "source": "for k in range(%d):\n    show_chart(k)" % per_cell,
                    "outputs": [{"output_type": "stream", "name": "stdout",
                                 "text": "cell %d\n" % i}] + [out] * per_cell}
            text = json.dumps(cell, indent=1)
            last = written + len(text) + 4 >= target_bytes
            f.write(("  " if i == 0 else ",\n  ") + text)
            written += len(text) + 4
            i += 1
            if last:
                break
        f.write("\n ]\n}\n")
    return os.path.getsize(path), i * per_cell


def section_long(b, cells, reps):
    """A notebook of many trivial cells, nbrun run against plain nbconvert --execute
    (baseline A): quadratic once, when a partial notebook was rewritten after every cell."""
    path = os.path.join(b.work, "long.ipynb")
    write_json(path, notebook(["x = %d" % i for i in range(cells)]))
    say("long: %d trivial cells x %d: baseline A, nbrun run" % (cells, reps))
    res = {"cells": cells, "baseline": [], "nbrun": []}
    for r in range(reps):
        tick("long rep %d/%d: baseline A" % (r + 1, reps))
        p = b.baseline_run(nb_path=path, name="long")
        res["baseline"].append(p.wall_ms if p.ok else None)
        tick("long rep %d/%d: nbrun run" % (r + 1, reps))
        out = b._dir("long-nbrun")
        p = run_measured([b.nbrun, "run", "--json", "-q", "--timeout", "30m", "-o", out, path], env=b.env)
        try:
            ok = p.rc == 0 and json.loads(p.stdout).get("cells") == cells
        except ValueError:
            ok = False
        if not ok:
            b.fail("nbrun run (%d cells)" % cells, "exit %d" % p.rc)
        res["nbrun"].append(p.wall_ms if ok else None)
    tick_done()
    return res


def section_parse(b, mb, n):
    path = os.path.join(b.work, "big.ipynb")
    size, images = make_big_notebook(path, mb * 1000 * 1000)
    say("parse: %.1f MB notebook, %d PNG outputs, %d run(s) of nbrun parse"
        % (size / 1e6, images, n))
    rows, pyload = [], []
    for i in range(n):
        tick("parse %d/%d" % (i + 1, n))
        out = b._dir("parse")
        p = run_measured([b.nbrun, "parse", "--json", "-o", out, path], env=b.env)
        ok = p.rc == 0
        try:
            ok = ok and json.loads(p.stdout).get("status") == "ok"
        except ValueError:
            ok = False
        if not ok:
            b.fail("nbrun parse", "exit %d" % p.rc)
            continue
        rows.append(p)
    # Side by side: the seed approach's json.load of the same file.
    tick("parse: python json.load")
    q = run_measured(["/usr/bin/python3", "-c", "import json, sys; json.load(open(sys.argv[1]))",
                      path])
    if q.rc == 0:
        pyload.append(q)
    tick_done()
    return {"file_bytes": size, "images": images, "runs": rows, "json_load": pyload}


# ---- warm: nbrun serve with a pool ----------------------------------------------------

class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket, kept open between requests."""

    def __init__(self, path, timeout=900):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class HTTPClient:
    """One persistent connection; reconnects only for idempotent requests."""

    def __init__(self, path, token=None):
        self.path = path
        self.token = token
        self.conn = UnixHTTPConnection(path)

    def request(self, method, target, body=None, retry=True):
        headers = {}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, target, body=body, headers=headers)
            r = self.conn.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            if not retry:
                raise
            self.conn = UnixHTTPConnection(self.path)
            self.conn.request(method, target, body=body, headers=headers)
            r = self.conn.getresponse()
            return r.status, r.read()

    def json(self, method, target, body=None):
        status, data = self.request(method, target, body)
        return status, json.loads(data) if data else None

    def close(self):
        self.conn.close()


def engine_socket(b):
    dh = os.environ.get("DOCKER_HOST", "")
    if dh.startswith("unix://") and not b.args.ignore_docker_host:
        return dh[7:]
    return "/var/run/docker.sock"


def proc_status(pid):
    """VmRSS and VmHWM of a process, in KiB."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                if ln.startswith(("VmRSS:", "VmHWM:")):
                    out[ln.split(":")[0]] = int(ln.split()[1])
    except OSError:
        pass
    return out


class Server:
    """`nbrun serve --socket --state-dir --pool N` from the binary under test."""

    def __init__(self, b, pool, extra=(), name="serve", pool_args=None):
        self.b = b
        self.pool = pool  # every language's together, for wait_full
        self.pool_args = pool_args or ["--pool", str(pool)]
        self.extra = list(extra)
        # sun_path holds 107 bytes: a long TMPDIR gets a short directory of its own.
        self.dir = os.path.join(b.work, name)
        if len(os.path.join(self.dir, "s.sock")) > 100:
            self.dir = tempfile.mkdtemp(prefix="nbrun-bench-", dir="/tmp")
        os.makedirs(self.dir, exist_ok=True)
        self.sock = os.path.join(self.dir, "s.sock")
        self.state = os.path.join(self.dir, "state")
        self.log_path = os.path.join(self.dir, "serve.log")
        self.proc = None
        self.engine = HTTPClient(engine_socket(b))
        self.leftovers = None

    def start(self, timeout=300):
        """Start; True once health answers (the pool may still be filling)."""
        self.log = open(self.log_path, "wb")
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(
            [self.b.nbrun, "serve", "--socket", self.sock, "--state-dir", self.state]
            + self.pool_args + self.extra,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=self.b.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if os.path.exists(self.sock) and os.path.exists(os.path.join(self.state, "token")):
                break
            time.sleep(0.05)
        with open(os.path.join(self.state, "token")) as f:
            token = f.readline().strip()
        self.client = HTTPClient(self.sock, token)
        return self.health() is not None

    def health(self):
        try:
            status, doc = self.client.json("GET", "/v1/health")
            return doc if status == 200 else None
        except (OSError, ValueError, http.client.HTTPException):
            return None

    def containers(self):
        """Ids of the containers this server has on the engine (labelled with its pid)."""
        flt = urllib.parse.quote(json.dumps({"label": ["nbrun.pid=%d" % self.proc.pid]}))
        try:
            status, doc = self.engine.json("GET", "/containers/json?all=1&filters=" + flt)
        except (OSError, ValueError, http.client.HTTPException):
            return None
        return [c["Id"] for c in doc] if status == 200 else None

    def wait_full(self, timeout=300):
        """Untimed spacing: the pool is full, nothing runs, the last run's container is gone.
        Returns the seconds waited, or None on timeout."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            h = self.health()
            if self.proc.poll() is not None:
                return None
            if h and h["pool"]["ready"] == self.pool and not h.get("runs_active"):
                ids = self.containers()
                if ids is not None and len(ids) == self.pool:
                    return time.monotonic() - t0
            time.sleep(0.05)
        return None

    def memory(self):
        """The server's RSS, and the memory of the containers it holds (engine stats)."""
        st = proc_status(self.proc.pid)
        ids = self.containers() or []
        usage, cli = [], []
        for cid in ids:
            try:
                status, s = self.engine.json(
                    "GET", "/containers/%s/stats?stream=false&one-shot=true" % cid)
            except (OSError, ValueError, http.client.HTTPException):
                continue
            ms = (s or {}).get("memory_stats") or {}
            if status != 200 or "usage" not in ms:
                continue
            usage.append(ms["usage"])
            # What `docker stats` shows: usage less the inactive page cache.
            inactive = ms.get("stats", {}).get("inactive_file",
                                               ms.get("stats", {}).get("total_inactive_file", 0))
            cli.append(ms["usage"] - inactive)
        return {"server_rss_mib": st.get("VmRSS", 0) / 1024, "server_hwm_mib": st.get("VmHWM", 0) / 1024,
                "containers": len(ids), "containers_usage_mib": sum(usage) / 2**20,
                "containers_usage_less_cache_mib": sum(cli) / 2**20,
                "per_container_usage_mib": [round(u / 2**20, 1) for u in usage]}

    def metrics(self):
        try:
            status, data = self.client.request("GET", "/metrics")
        except (OSError, http.client.HTTPException):
            return {}
        out = {}
        for ln in data.decode(errors="replace").splitlines():
            if ln.startswith("nbrun_pool_"):
                k, _, v = ln.partition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def stop(self):
        if not self.proc:
            return
        pid = self.proc.pid
        if self.proc.poll() is None:
            self.proc.send_signal(15)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        time.sleep(0.5)
        flt = urllib.parse.quote(json.dumps({"label": ["nbrun.pid=%d" % pid]}))
        try:
            status, doc = self.engine.json("GET", "/containers/json?all=1&filters=" + flt)
            self.leftovers = len(doc) if status == 200 else None
        except (OSError, ValueError, http.client.HTTPException):
            self.leftovers = None
        self.engine.close()
        self.client.close()

    def finish(self, what):
        """stop(), a failure named `what` for any container left, the state
        directory removed (unless it is under the bench's work directory);
        the leftovers' count (None when the engine could not say)."""
        self.stop()
        if self.leftovers:
            self.b.fail(what, "%d container(s) left after SIGTERM" % self.leftovers)
        if not self.dir.startswith(self.b.work):
            shutil.rmtree(self.dir, ignore_errors=True)
        return self.leftovers


def warm_request(wl, csv_b64):
    req = {"code": wl["code"]}
    if wl["csv"]:
        req["files"] = [{"path": "input.csv", "content_base64": csv_b64}]
    return json.dumps(req).encode()


def warm_check(wl, doc):
    """What the workload must produce, inlined in the response."""
    if doc.get("status") != "ok":
        return "status %s: %s" % (doc.get("status"), doc.get("message"))
    if wl["key"] == "print" and doc.get("stdout") != "1\n":
        return "stdout %r" % doc.get("stdout")
    if wl["key"] == "chart" and not any(i.get("content_base64") for i in doc.get("images", [])):
        return "no inlined image"
    if wl["key"] == "csv":
        f = [x for x in doc.get("files", []) if x.get("path", "").endswith("out.csv")]
        if not f or not f[0].get("content_base64"):
            return "no inlined out.csv"
        if not base64.b64decode(f[0]["content_base64"]).startswith(b"region,"):
            return "out.csv is not the summary"
    return None


def warm_post(client, body):
    """One timed run: request sent -> whole response read and parsed."""
    t0 = time.monotonic()
    status, data = client.request("POST", "/v1/runs", body, retry=False)
    t1 = time.monotonic()
    try:
        doc = json.loads(data)
    except ValueError:
        doc = {}
    t2 = time.monotonic()
    return {"status": status, "doc": doc, "http_ms": (t1 - t0) * 1000, "wall_ms": (t2 - t0) * 1000,
            "bytes": len(data), "server_ms": doc.get("duration_ms"), "warm": doc.get("warm") is True}


def section_warm(b, runs, pool, sustained):
    """nbrun serve with a warm pool: spaced pool hits, back-to-back rate, memory."""
    with open(b.csv_path, "rb") as f:
        csv_b64 = base64.b64encode(f.read()).decode()
    srv = Server(b, pool)
    res = {"pool": pool, "runs": runs, "latency": {wl["key"]: [] for wl in WORKLOADS},
           "misses": {wl["key"]: 0 for wl in WORKLOADS}, "refill_s": [], "sustained": {},
           "memory": {}, "fill_s": None, "errors": []}
    say("warm: nbrun serve --pool %d; %d spaced run(s) per workload, then %d back to back "
        "at concurrency 1 and 2" % (pool, runs, sustained))
    try:
        if not srv.start():
            b.fail("nbrun serve", "did not start (log: %s)" % _tail(srv.log_path))
            return None
        tick("warm: waiting for the pool to fill")
        fill = srv.wait_full(timeout=600)
        if fill is None:
            b.fail("nbrun serve", "the pool of %d did not fill in 10 min: %s"
                   % (pool, (srv.health() or {}).get("pool")))
            return None
        res["fill_s"] = time.monotonic() - srv.t_start
        res["memory"]["filled"] = srv.memory()

        # Spaced pool hits, workloads interleaved so drifts hit all three.
        bodies = {wl["key"]: warm_request(wl, csv_b64) for wl in WORKLOADS}
        warmup = True
        for i in range(runs + 1):
            for wl in WORKLOADS:
                k = wl["key"]
                waited = srv.wait_full()
                if waited is None:
                    b.fail("warm %s" % k, "pool not refilled: %s" % (srv.health() or {}).get("pool"))
                    continue
                if not warmup:
                    res["refill_s"].append(waited)
                tick("warm %s %d/%d" % (k, i, runs) if not warmup else "warm: warm-up run")
                try:
                    r = warm_post(srv.client, bodies[k])
                except (OSError, http.client.HTTPException) as e:
                    b.fail("warm %s" % k, "request failed: %s" % e)
                    continue
                bad = "HTTP %d" % r["status"] if r["status"] != 200 else warm_check(wl, r["doc"])
                if warmup:
                    break  # one discarded print(1): first request, page cache
                if bad:
                    b.fail("warm %s" % k, bad)
                elif not r["warm"]:
                    res["misses"][k] += 1
                else:
                    del r["doc"]
                    res["latency"][k].append(r)
            warmup = False
        tick("warm: waiting for the pool to refill")
        srv.wait_full()
        res["memory"]["after_runs"] = srv.memory()

        # Back to back: the pool drains, and refills race the requests.
        body = bodies["print"]
        for conc in (1, 2):
            srv.wait_full()
            tick("warm: %d back to back at concurrency %d" % (sustained, conc))
            res["sustained"][conc] = warm_sustained(b, srv, body, sustained, conc)
        srv.wait_full()
        res["memory"]["after_sustained"] = srv.memory()
        res["session"] = warm_session(b, srv, runs)
        res["server_metrics"] = srv.metrics()
    finally:
        tick_done()
        res["leftover_containers"] = srv.finish("nbrun serve")
    res["langs"] = warm_langs(b, max(1, min(runs, 5)))
    return res


def warm_langs(b, runs):
    """print(1)-equivalents as pool hits of a server keeping one sandbox of each
    language (--pool 1 --pool r=1 ...), spaced and interleaved as above, one
    discarded per language first."""
    langs = [wl for wl in LANG_WORKLOADS]
    pool_args = [a for wl in langs for a in ("--pool", "%s=1" % wl["language"])]
    srv = Server(b, len(langs), name="serve-langs", pool_args=pool_args)
    res = {"runs": runs, "latency": {wl["label"]: [] for wl in langs},
           "misses": {wl["label"]: 0 for wl in langs}, "fill_s": None, "leftovers": None}
    say("warm: a pool of each language (%s); %d spaced hit(s) each"
        % (" ".join(pool_args), runs))
    try:
        if not srv.start():
            b.fail("nbrun serve (languages)", "did not start (log: %s)" % _tail(srv.log_path))
            return res
        tick("warm: waiting for every language's pool")
        if srv.wait_full(timeout=900) is None:
            b.fail("nbrun serve (languages)", "the pools did not fill: %s" % (srv.health() or {}).get("pool"))
            return res
        res["fill_s"] = time.monotonic() - srv.t_start
        for i in range(runs + 1):
            for wl in langs:
                if srv.wait_full(timeout=900) is None:
                    b.fail("warm %s" % wl["label"], "pool not refilled: %s" % (srv.health() or {}).get("pool"))
                    continue
                tick("warm %s %d/%d" % (wl["label"], i, runs) if i else "warm: warm-up %s" % wl["label"])
                body = json.dumps({"code": wl["code"], "language": wl["language"]}).encode()
                try:
                    r = warm_post(srv.client, body)
                except (OSError, http.client.HTTPException) as e:
                    b.fail("warm %s" % wl["label"], "request failed: %s" % e)
                    continue
                doc = r["doc"]
                bad = ("HTTP %d" % r["status"] if r["status"] != 200 else
                       None if doc.get("status") == "ok" and doc.get("stdout", "").strip() == "1"
                       and doc.get("language") == wl["language"] else
                       "status %s, language %s, stdout %r" % (doc.get("status"), doc.get("language"),
                                                               doc.get("stdout")))
                if bad:
                    b.fail("warm %s" % wl["label"], bad)
                elif not r["warm"]:
                    res["misses"][wl["label"]] += 1
                elif i:
                    del r["doc"]
                    res["latency"][wl["label"]].append(r)
    finally:
        tick_done()
        res["leftovers"] = srv.finish("nbrun serve (languages)")
    return res


RUNTIMES = ("runc", "runsc")
RUNSC_TIMEOUT = "600s"   # a gVisor sandbox starts slowly under ptrace on a loaded machine


def section_runsc(b, n):
    """print(1) under the engine's default runtime (runc) and under runsc, side by side:
    n cold runs of each, interleaved, then n warm pool hits of each from two servers
    (one discarded first), each hit with its pool full and idle."""
    wl = WORKLOADS[0]
    res = {"cold": {rt: [] for rt in RUNTIMES}, "warm": {rt: [] for rt in RUNTIMES},
           "warm_server_ms": {rt: [] for rt in RUNTIMES}, "fill_s": {}, "leftovers": {}}
    extra = {"runc": ["--timeout", RUNSC_TIMEOUT],
             "runsc": ["--runtime", "runsc", "--timeout", RUNSC_TIMEOUT]}
    say("runsc: %d cold run(s) and %d warm hit(s) of print(1) per runtime" % (n, n))
    for i in range(n):
        for rt in RUNTIMES:
            tick("runsc: cold %s %d/%d" % (rt, i + 1, n))
            p = b.nbrun_run(wl, extra=extra[rt])
            if p.ok and rt == "runsc" and p.doc.get("runtime") != "runsc":
                b.fail("runsc cold", "the result does not say runsc: %r" % p.doc.get("runtime"))
            elif p.ok:
                res["cold"][rt].append(p.wall_ms)
    servers = {rt: Server(b, 1, extra=extra[rt], name="serve-" + rt)
               for rt in RUNTIMES}
    body = warm_request(wl, "")
    try:
        for rt, srv in servers.items():
            if not srv.start():
                b.fail("runsc: nbrun serve (%s)" % rt, "did not start (log: %s)" % _tail(srv.log_path))
                return res
        for rt, srv in servers.items():
            tick("runsc: waiting for the %s pool" % rt)
            if srv.wait_full(timeout=900) is None:
                b.fail("runsc: nbrun serve (%s)" % rt, "the pool did not fill: %s" % (srv.health() or {}).get("pool"))
                return res
            res["fill_s"][rt] = time.monotonic() - srv.t_start
        for i in range(n + 1):
            for rt, srv in servers.items():
                if srv.wait_full(timeout=900) is None:
                    b.fail("runsc warm %s" % rt, "pool not refilled: %s" % (srv.health() or {}).get("pool"))
                    continue
                tick("runsc: warm %s %d/%d" % (rt, i, n) if i else "runsc: warm-up hit (%s)" % rt)
                try:
                    r = warm_post(srv.client, body)
                except (OSError, http.client.HTTPException) as e:
                    b.fail("runsc warm %s" % rt, "request failed: %s" % e)
                    continue
                bad = "HTTP %d" % r["status"] if r["status"] != 200 else warm_check(wl, r["doc"])
                if not bad and not r["warm"]:
                    bad = "not a pool hit"
                if not bad and rt == "runsc" and r["doc"].get("runtime") != "runsc":
                    bad = "the result does not say runsc"
                if bad:
                    b.fail("runsc warm %s" % rt, bad)
                elif i:
                    res["warm"][rt].append(r["wall_ms"])
                    res["warm_server_ms"][rt].append(r["server_ms"])
    finally:
        tick_done()
        for rt, srv in servers.items():
            res["leftovers"][rt] = srv.finish("runsc: nbrun serve (%s)" % rt)
    return res


# ---- net: the allow-list path ------------------------------------------------------

NET_FETCHES = 10
NET_FETCH_CODE = r"""
import json, time, urllib.request
url = %r
urllib.request.urlopen(url, timeout=60).read()
ms = []
for _ in range(%d):
    t0 = time.perf_counter()
    urllib.request.urlopen(url, timeout=60).read()
    ms.append((time.perf_counter() - t0) * 1000)
print(json.dumps(ms))
"""


def npm_registry():
    """(host, https base) of this machine's npm registry, or None."""
    out = sh(["npm", "config", "get", "registry"]) or ""
    u = urllib.parse.urlsplit(out.strip())
    return (u.hostname, "https://%s%s" % (u.netloc, u.path.rstrip("/"))) if u.scheme == "https" and u.hostname else None


def ca_bundle():
    for path in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if path and os.path.isfile(path):
            return path
    return None


def section_net(b, n):
    """--allow-net beside --network none: n cold print(1) runs of each,
    interleaved; through nbrun serve, a request with hosts (its own sandbox)
    beside one without (a pool hit); and one HTTPS fetch of the npm registry
    in the sandbox through the proxy beside the same fetch from the host."""
    reg, ca = npm_registry(), ca_bundle()
    res = {"cold": {"none": [], "allow": []}, "serve": {"none": [], "allow": []},
           "fetch": {"sandbox": [], "host": []}, "host": reg[0] if reg else None}
    if not reg:
        b.fail("net", "no https npm registry in this machine's npm configuration")
        return res
    host, base = reg
    url = base + "/is-number"
    allow = ["--allow-net", host + ":443"] + (["--ca-certs", ca] if ca else [])
    wl = WORKLOADS[0]
    say("net: %d cold print(1) runs with --allow-net %s:443 and with --network none, alternating" % (n, host))
    for i in range(n):
        for who in (("none", "allow") if i % 2 == 0 else ("allow", "none")):
            tick("net: cold %s %d/%d" % (who, i + 1, n))
            p = b.nbrun_run(wl, extra=allow if who == "allow" else ())
            if p.ok:
                res["cold"][who].append(p.wall_ms)
    srv = Server(b, 1, extra=allow, name="serve-net")
    try:
        if not srv.start():
            b.fail("net: nbrun serve", "did not start (log: %s)" % _tail(srv.log_path))
            return res
        for i in range(n + 1):
            for who in ("none", "allow"):
                if srv.wait_full(timeout=600) is None:
                    b.fail("net: nbrun serve", "the pool did not fill")
                    return res
                tick("net: serve %s %d/%d" % (who, i, n))
                body = json.dumps({"code": "print(1)", **({"allow_net": [host + ":443"]} if who == "allow" else {})})
                r = warm_post(srv.client, body)
                if r["status"] != 200 or r["doc"].get("stdout") != "1\n":
                    b.fail("net: serve %s" % who, "HTTP %d %r" % (r["status"], r["doc"].get("error")))
                elif i:
                    res["serve"][who].append(r["wall_ms"])
    finally:
        tick_done()
        res["leftovers"] = srv.finish("net: nbrun serve")
    tick("net: %d HTTPS fetches in the sandbox" % NET_FETCHES)
    p = b.nbrun_run({"key": "net-fetch", "label": "fetch", "code": NET_FETCH_CODE % (url, NET_FETCHES),
                     "csv": False}, extra=allow)
    try:
        res["fetch"]["sandbox"] = json.loads(p.doc.get("stdout", "").strip())
    except ValueError:
        b.fail("net: fetch in the sandbox", "%r" % p.doc.get("stdout"))
    tick("net: %d HTTPS fetches from the host" % NET_FETCHES)
    hp = subprocess.run([sys.executable, "-c", NET_FETCH_CODE % (url, NET_FETCHES)], capture_output=True,
                        text=True, timeout=600)
    try:
        res["fetch"]["host"] = json.loads(hp.stdout.strip())
    except ValueError:
        b.fail("net: fetch from the host", hp.stderr[-300:])
    tick_done()
    return res


def report_net(r, metric, targets, out):
    out.append("== --allow-net beside --network none (ms); the host: %s" % r.get("host"))
    rows, p50 = [], {}
    for kind, who, label in (("cold", "none", "cold print(1), --network none"),
                             ("cold", "allow", "cold print(1), --allow-net (proxy, relay)"),
                             ("serve", "none", "nbrun serve request, no hosts (pool hit)"),
                             ("serve", "allow", "nbrun serve request with hosts (own sandbox)"),
                             ("fetch", "host", "one HTTPS fetch from the host"),
                             ("fetch", "sandbox", "one HTTPS fetch in the sandbox, via the proxy")):
        d = dist(r[kind][who])
        p50[kind, who] = d["p50"]
        metric("net.%s.%s.ms" % (kind, who), d, "ms", "lower")
        rows.append(dist_row(label, d))
    out.append(table(["", "n", "min", "p50", "p90", "p99", "max"], rows))
    out.append("")
    for kind, a, b_, what in (("cold", "allow", "none", "cold run with hosts vs none"),
                              ("serve", "allow", "none", "serve request with hosts vs a pool hit"),
                              ("fetch", "sandbox", "host", "HTTPS fetch via the proxy vs from the host")):
        rr = ratio(p50[kind, a], p50[kind, b_])
        if rr:
            metric("net.%s.ratio" % kind, rr, "x", "lower", note=what)
        targets.append(("%s, p50 (info)" % what, "%.2fx (%.0f vs %.0f ms)" % (rr, p50[kind, a], p50[kind, b_])
                        if rr else "-", "-", None))


def report_runsc(r, metric, targets, out):
    out.append("== gVisor: print(1) under runc (the engine's default) and --runtime runsc, "
               "interleaved in one session (ms)")
    rows, p50 = [], {}
    for kind, label in (("cold", "cold nbrun run"), ("warm", "warm pool hit, request to response")):
        for rt in RUNTIMES:
            d = dist(r[kind][rt])
            p50[kind, rt] = d["p50"]
            metric("runsc.%s.%s.wall_ms" % (kind, rt), d, "ms", "lower")
            rows.append(dist_row("%s, %s" % (label, rt), d))
    out.append(table(["", "n", "min", "p50", "p90", "p99", "max"], rows))
    if r["fill_s"]:
        out.append("first pool sandbox ready after: %s" % ", ".join(
            "%s %.1f s" % (rt, s) for rt, s in sorted(r["fill_s"].items())))
    out.append("")
    for kind in ("cold", "warm"):
        a, g = p50[kind, "runc"], p50[kind, "runsc"]
        rr = ratio(g, a)
        if rr:
            metric("runsc.%s.ratio" % kind, rr, "x", "lower", note="runsc p50 / runc p50")
        targets.append(("%s print(1) under runsc vs runc, p50 (info)" % kind,
                        "%.2fx (+%.0f ms: %.0f vs %.0f ms)" % (rr, g - a, g, a) if rr else "-", "-", None))


def first_line_ms(srv, path, body):
    """An NDJSON request on a fresh connection: ms to the first byte of
    the body and to its end (the result line)."""
    c = UnixHTTPConnection(srv.sock)
    try:
        t0 = time.monotonic()
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Authorization": "Bearer " + srv.client.token,
                           "Accept": "application/x-ndjson", "Content-Type": "application/json"})
        r = c.getresponse()
        first = r.read1(1) if hasattr(r, "read1") else r.read(1)
        t1 = time.monotonic()
        rest = first + r.read()
        t2 = time.monotonic()
        last = json.loads(rest.decode().strip().splitlines()[-1])
        return (t1 - t0) * 1000, (t2 - t0) * 1000, last
    finally:
        c.close()


def warm_session(b, srv, runs):
    """A session through the HTTP API: `x += 1` executes (the state kept
    between them), and the time to the first streamed byte of an execute
    and of a run (a pool hit) whose cell prints, then sleeps 1 s."""
    X_INC = json.dumps({"code": "x += 1\nx"}).encode()
    res = {"execute_ms": [], "server_ms": [], "stream_first_ms": [], "stream_total_ms": [],
           "run_first_ms": [], "run_total_ms": []}
    st, doc = srv.client.json("POST", "/v1/sessions", b"{}")
    if st != 201:
        b.fail("warm session", "open: HTTP %d %r" % (st, doc))
        return res
    sid = doc["id"]
    try:
        st, doc = srv.client.json("POST", "/v1/sessions/%s/execute" % sid, json.dumps({"code": "x = 0"}).encode())
        n = max(runs * 5, 20)
        for i in range(n):
            tick("warm: session execute %d/%d" % (i + 1, n))
            t0 = time.monotonic()
            st, doc = srv.client.json("POST", "/v1/sessions/%s/execute" % sid, X_INC)
            ms = (time.monotonic() - t0) * 1000
            want = str(i + 1)
            if st != 200 or doc.get("status") != "ok" or want not in json.dumps(doc.get("values", doc)):
                b.fail("warm session", "execute %d: HTTP %d %r" % (i, st, str(doc)[:300]))
                return res
            res["execute_ms"].append(ms)
            res["server_ms"].append(doc.get("duration_ms"))
        code = "print('first', flush=True)\nimport time\ntime.sleep(1)\nprint('last')"
        for i in range(max(runs, 3)):
            tick("warm: streamed execute %d" % (i + 1))
            f, t, last = first_line_ms(srv, "/v1/sessions/%s/execute" % sid, {"code": code})
            if last.get("status") != "ok":
                b.fail("warm session", "streamed execute: %r" % str(last)[:300])
                return res
            res["stream_first_ms"].append(f)
            res["stream_total_ms"].append(t)
    finally:
        srv.client.request("DELETE", "/v1/sessions/%s" % sid)
    # the session's container is gone before the pool counts as full again
    for i in range(max(runs, 3)):
        srv.wait_full()
        tick("warm: streamed run %d" % (i + 1))
        f, t, last = first_line_ms(srv, "/v1/runs", {"code": code})
        if last.get("status") != "ok":
            b.fail("warm session", "streamed run: %r" % str(last)[:300])
            return res
        res["run_first_ms"].append(f)
        res["run_total_ms"].append(t)
    return res


def warm_sustained(b, srv, body, k, conc):
    lock = threading.Lock()
    left = [k]
    rows = []

    def worker():
        c = HTTPClient(srv.sock, srv.client.token)
        try:
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                try:
                    r = warm_post(c, body)
                except (OSError, http.client.HTTPException) as e:
                    r = {"status": 0, "doc": {}, "error": str(e), "warm": False, "wall_ms": None}
                r["ok"] = r["status"] == 200 and warm_check(WORKLOADS[0], r["doc"]) is None
                r.pop("doc", None)
                with lock:
                    rows.append(r)
        finally:
            c.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in rows if r["ok"]]
    if len(ok) < k:
        b.fail("warm back to back c=%d" % conc, "%d of %d runs ok" % (len(ok), k))
    return {"wall_s": wall, "n": k, "ok": len(ok), "warm": sum(1 for r in ok if r["warm"]),
            "runs_per_min": len(ok) / wall * 60 if wall else None,
            "latency_ms": [r["wall_ms"] for r in ok],
            "warm_ms": [r["wall_ms"] for r in ok if r["warm"]],
            "cold_ms": [r["wall_ms"] for r in ok if not r["warm"]]}


def _tail(path, n=300):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace").replace("\n", " | ")
    except OSError:
        return "?"


# ---- report ----------------------------------------------------------------------------

def fmt_ms(x):
    if x is None:
        return "-"
    return "%.0f" % x if x >= 100 else "%.1f" % x


def table(headers, rows, right=None):
    right = right or set(range(1, len(headers)))
    cols = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cols) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cols):
        cells = [(r[i].rjust(w[i]) if i in right else r[i].ljust(w[i])) for i in range(len(r))]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    return "\n".join(lines)


def dist_row(label, d, unit_fmt=fmt_ms, extra=()):
    return [label, d["n"]] + [unit_fmt(d[k]) for k in ("min", "p50", "p90", "p99", "max")] + list(extra)


def report_warm(w, metric, targets, notes, out):
    """The warm section's tables and metrics."""
    pool = w["pool"]
    out.append("== warm runs through nbrun serve --pool %d (unix socket, one kept-alive connection): "
               "ms from the request to the whole response parsed, images and files inlined; "
               "each run waits (untimed) for the pool to be full again" % pool)
    rows = []
    for wl in WORKLOADS:
        k = wl["key"]
        lat = w["latency"][k]
        dc = dist([r["wall_ms"] for r in lat])
        ds = dist([r["server_ms"] for r in lat])
        dh = dist([r["wall_ms"] - r["server_ms"] for r in lat if r["server_ms"] is not None])
        metric("warm.%s.client_ms" % k, dc, "ms", "lower", misses=w["misses"][k])
        metric("warm.%s.server_duration_ms" % k, ds, "ms", "lower")
        metric("warm.%s.outside_run_ms" % k, dh, "ms", "lower",
               note="client time less the result's duration_ms")
        metric("warm.%s.response_kb" % k,
               dist([r["bytes"] / 1024 for r in lat])["p50"], "KiB", "none")
        miss = "%d" % w["misses"][k]
        rows.append(dist_row("%s  client" % wl["label"], dc, extra=[miss]))
        rows.append(dist_row("%s  server duration_ms" % wl["label"], ds, extra=[""]))
        rows.append(dist_row("%s  client less duration_ms" % wl["label"], dh, extra=[""]))
    out.append(table(["workload", "n", "min", "p50", "p90", "p99", "max", "misses"], rows))
    refill = dist(w["refill_s"])
    metric("warm.pool_fill_s", w["fill_s"], "s", "lower", note="server start to a full pool of %d" % pool)
    metric("warm.refill_wait_s", refill, "s", "lower")
    out.append("pool of %d full %.1f s after the server started; spacing waited p50 %.1f s (max %.1f) "
               "for the refill and the used container's removal"
               % (pool, w["fill_s"] or 0, refill["p50"] or 0, refill["max"] or 0))
    if any(w["misses"].values()):
        notes.append("warm: %d spaced run(s) missed the pool and are not in the warm timings"
                     % sum(w["misses"].values()))
    out.append("")
    wl = w.get("langs")
    if wl and any(wl["latency"].values()):
        out.append("== warm print(1) per language: nbrun serve with a pool of one sandbox of each "
                   "language (Python's preloads its stack, the others only have their kernel up); "
                   "ms from the request to the whole response")
        rows = []
        for lang, lat in wl["latency"].items():
            dc = dist([r["wall_ms"] for r in lat])
            ds = dist([r["server_ms"] for r in lat])
            metric("warm.lang.%s.client_ms" % lang, dc, "ms", "lower", misses=wl["misses"][lang])
            metric("warm.lang.%s.server_duration_ms" % lang, ds, "ms", "lower")
            rows.append(dist_row("%s  client" % lang, dc, extra=["%d" % wl["misses"][lang]]))
            rows.append(dist_row("%s  server duration_ms" % lang, ds, extra=[""]))
        out.append(table(["language", "n", "min", "p50", "p90", "p99", "max", "misses"], rows))
        out.append("every language's pool full %.1f s after the server started" % (wl["fill_s"] or 0))
        out.append("")

    if w["sustained"]:
        out.append("== back to back: print(1) with no spacing (the pool drains; refills race the requests)")
        rows = []
        for conc, s in sorted(w["sustained"].items()):
            lat, wm, cm = dist(s["latency_ms"]), dist(s["warm_ms"]), dist(s["cold_ms"])
            frac = s["warm"] / s["ok"] if s["ok"] else None
            metric("warm.sustained_c%d.runs_per_min" % conc, s["runs_per_min"], "runs/min", "higher")
            metric("warm.sustained_c%d.warm_fraction" % conc, frac, "x", "higher")
            metric("warm.sustained_c%d.client_ms" % conc, lat, "ms", "lower")
            rows.append([conc, "%d/%d" % (s["ok"], s["n"]), "%.1f" % s["wall_s"],
                         "%.1f" % s["runs_per_min"] if s["runs_per_min"] else "-",
                         "%d%%" % round(frac * 100) if frac is not None else "-",
                         fmt_ms(lat["p50"]), fmt_ms(lat["max"]), fmt_ms(wm["p50"]), fmt_ms(cm["p50"])])
        out.append(table(["concurrency", "ok", "wall s", "runs/min", "warm", "p50 ms", "max ms",
                          "warm p50", "miss p50"], rows))
        out.append("")

    sess = w.get("session")
    if sess and sess["execute_ms"]:
        out.append("== a session through the HTTP API (one kept-alive connection): `x += 1` executes "
                   "with the state kept; NDJSON streams of a cell that prints, then sleeps 1 s")
        rows = []
        for key, label, target in (("execute_ms", "session execute x += 1, client", 10),
                                   ("server_ms", "  server duration_ms", None),
                                   ("stream_first_ms", "streamed execute, first byte", None),
                                   ("stream_total_ms", "streamed execute, result line", None),
                                   ("run_first_ms", "streamed run (pool hit), first byte", None),
                                   ("run_total_ms", "streamed run, result line", None)):
            vals = [v for v in sess[key] if v is not None]
            if not vals:
                continue
            d = dist(vals)
            metric("warm.session.%s" % key, d, "ms", "lower")
            rows.append(dist_row(label, d))
            if target:
                targets.append(("session execute x += 1 p50 (HTTP end to end)", d["p50"], "<= %d ms" % target,
                                d["p50"] is not None and d["p50"] <= target))
        out.append(table(["what", "n", "min", "p50", "p90", "p99", "max"], rows))
        out.append("")

    if w["memory"]:
        out.append("== host memory held by the server with a pool of %d" % pool)
        rows = []
        labels = {"filled": "pool filled, before any run", "after_runs": "after the spaced warm runs",
                  "after_sustained": "after the back-to-back runs"}
        for key in ("filled", "after_runs", "after_sustained"):
            m = w["memory"].get(key)
            if not m:
                continue
            metric("warm.memory.%s.server_rss_mib" % key, m["server_rss_mib"], "MiB", "lower")
            metric("warm.memory.%s.containers_usage_mib" % key, m["containers_usage_mib"], "MiB", "lower",
                   containers=m["containers"], per_container=m["per_container_usage_mib"])
            metric("warm.memory.%s.containers_less_cache_mib" % key,
                   m["containers_usage_less_cache_mib"], "MiB", "lower")
            rows.append([labels[key], "%.1f" % m["server_rss_mib"], "%.1f" % m["server_hwm_mib"],
                         m["containers"], "%.0f" % m["containers_usage_mib"],
                         "%.0f" % m["containers_usage_less_cache_mib"]])
        out.append(table(["when", "server RSS MiB", "peak RSS", "containers", "cgroup usage MiB",
                          "less page cache"], rows))
        out.append("(server: VmRSS / VmHWM from /proc; containers: engine stats memory_stats.usage "
                   "summed, and usage less inactive_file as `docker stats` shows it)")
        out.append("")


def warm_targets(w, metrics, targets):
    """Warm targets first in the summary."""
    rows = []
    if w is None:
        rows.append(("warm print(1) p50 (pool hit, HTTP end to end)", "not measured", "<= 20 ms", None))
    else:
        def g(name, k="p50"):
            m = metrics.get(name)
            return None if m is None else m.get(k)
        p50, p99 = g("warm.print.client_ms"), g("warm.print.client_ms", "p99")
        s50 = g("warm.print.server_duration_ms")
        c50 = g("warm.chart.client_ms")
        v50 = g("warm.csv.client_ms")
        rows.append(("warm print(1) p50 (pool hit, HTTP end to end)",
                     "%s ms (server duration_ms %s)" % (fmt_ms(p50), fmt_ms(s50)) if p50 is not None else "-",
                     "<= 20 ms", None if p50 is None else p50 <= 20))
        rows.append(("warm print(1) p99", "%s ms (n=%d)" % (fmt_ms(p99), metrics["warm.print.client_ms"]["n"])
                     if p99 is not None else "-", "<= 60 ms", None if p99 is None else p99 <= 60))
        rows.append(("warm matplotlib chart p50", "%s ms" % fmt_ms(c50) if c50 is not None else "-",
                     "<= 250 ms", None if c50 is None else c50 <= 250))
        rows.append(("warm pandas CSV -> file p50 (info)", "%s ms" % fmt_ms(v50) if v50 is not None else "-",
                     "-", None))
        for conc in (1, 2):
            r = metrics.get("warm.sustained_c%d.runs_per_min" % conc)
            f = metrics.get("warm.sustained_c%d.warm_fraction" % conc)
            if r and r["value"] is not None:
                rows.append(("back-to-back print(1), concurrency %d (info)" % conc,
                             "%.1f runs/min, %d%% warm" % (r["value"], round((f["value"] or 0) * 100)),
                             "-", None))
        m = metrics.get("warm.memory.after_runs.server_rss_mib") or metrics.get(
            "warm.memory.filled.server_rss_mib")
        c = metrics.get("warm.memory.filled.containers_usage_mib")
        if m:
            rows.append(("server RSS with a pool of %d (info)" % w["pool"],
                         "%.1f MiB; pool containers %s MiB" % (m["value"], "%.0f" % c["value"] if c else "?"),
                         "-", None))
    targets[0:0] = rows


def main():
    ap = argparse.ArgumentParser(description="nbrun benchmarks (see bench/README.md)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 runs, tiny batch and pool (~3 min)")
    ap.add_argument("--nbrun", default=os.path.join(ROOT, "build-bench", "src", "cli", "nbrun"))
    ap.add_argument("--image", help="runtime image (default jupyter-runtime:<nbrun version>)")
    ap.add_argument("-n", "--runs", type=int, help="cold runs per workload (10; quick 2)")
    ap.add_argument("--phase-runs", type=int, help="proxied runs per workload (5; quick 1)")
    ap.add_argument("--batch-size", type=int, help="notebooks per batch (20; quick 4)")
    ap.add_argument("--batch-reps", type=int, help="repetitions of each batch (1)")
    ap.add_argument("--parse-mb", type=int, help="size of the parse notebook in MB (100; quick 100)")
    ap.add_argument("--parse-runs", type=int, help="runs of nbrun parse (3; quick 1)")
    ap.add_argument("--warm-runs", type=int,
                    help="spaced pool-hit runs per workload through nbrun serve (20; quick 1)")
    ap.add_argument("--warm-pool", type=int, help="pool size of the warm server (4; quick 1)")
    ap.add_argument("--warm-sustained", type=int,
                    help="back-to-back print(1) requests at concurrency 1 and 2 (20; quick 2)")
    ap.add_argument("--long-cells", type=int, help="cells of the long notebook (1000; quick 100)")
    ap.add_argument("--long-runs", type=int, help="runs of the long notebook, each side (3; quick 1)")
    ap.add_argument("--only", help="comma list of sections: cold,phases,warm,batch,parse,langs,long,net "
                    "(those by default), runsc (gVisor against runc; scripts/setup registers runsc)")
    ap.add_argument("--runsc-runs", type=int, help="cold runs and warm hits per runtime in runsc (3; quick 1)")
    ap.add_argument("--net-runs", type=int, help="runs of each side in section net (5; quick 1)")
    ap.add_argument("--wait-idle", type=float, default=0,
                    help="wait up to this many minutes for the 1-min load to fall below nproc/2")
    ap.add_argument("--results", help="where to write the JSON (default bench/results/<date>[-quick].json)")
    ap.add_argument("--no-save", action="store_true", help="do not write results")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--ignore-docker-host", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stale-binary", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    q = args.quick
    args.runs = args.runs or (2 if q else 10)
    args.phase_runs = args.phase_runs or (1 if q else 5)
    args.batch_size = args.batch_size or (4 if q else 20)
    args.batch_reps = args.batch_reps or 1
    args.parse_mb = args.parse_mb or 100
    args.parse_runs = args.parse_runs or (1 if q else 3)
    args.warm_runs = args.warm_runs or (1 if q else 20)
    args.warm_pool = args.warm_pool or (1 if q else 4)
    args.warm_sustained = args.warm_sustained or (2 if q else 20)
    args.long_cells = args.long_cells or (100 if q else 1000)
    args.long_runs = args.long_runs or (1 if q else 3)
    args.runsc_runs = args.runsc_runs or (1 if q else 3)
    args.net_runs = args.net_runs or (1 if q else 5)
    sections = set((args.only or "cold,phases,warm,batch,parse,langs,long,net").split(","))
    unknown = sections - {"cold", "phases", "warm", "batch", "parse", "langs", "long", "runsc", "net"}
    if unknown:
        print("bench: error: --only: unknown section(s) %s" % ",".join(sorted(unknown)), file=sys.stderr)
        return 2

    if not os.access(args.nbrun, os.X_OK):
        print("bench: error: no nbrun at %s (bench/run builds it)" % args.nbrun, file=sys.stderr)
        return 2
    version = sh([args.nbrun, "--version"]).split()[-1] if sh([args.nbrun, "--version"]) else "?"
    args.image = args.image or "jupyter-runtime:%s" % version
    if not os.access(DOCKER, os.X_OK):
        print("bench: error: baseline A needs the docker CLI at %s" % DOCKER, file=sys.stderr)
        return 2
    if subprocess.run([DOCKER, "image", "inspect", args.image], capture_output=True).returncode:
        print("bench: error: image %s missing: run scripts/setup" % args.image, file=sys.stderr)
        return 2

    nproc = os.cpu_count() or 1
    if args.wait_idle > 0:
        deadline = time.monotonic() + args.wait_idle * 60
        while loadavg()[0] > nproc / 2 and time.monotonic() < deadline:
            say("load %.2f on %d cores: waiting for it to settle" % (loadavg()[0], nproc))
            time.sleep(30)

    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = loadavg()
    hogs = busy_processes()
    others = running_containers()
    machine = machine_info()
    commit = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = bool(sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]))
    say("%s mode; load %s; nbrun %s (%s%s); image %s"
        % ("quick" if q else "full", " ".join("%.2f" % x for x in load_before), version, commit,
           "+dirty" if dirty else "", args.image))

    work = tempfile.mkdtemp(prefix="nbrun-bench-")
    b = Bench(args, work)
    cold = phases = warm = batch = parse = langs = long_ = runsc = net = None
    t_all = time.monotonic()
    try:
        with LoadSampler() as sampler:
            if "cold" in sections:
                cold = section_cold(b, args.runs)
            if "phases" in sections:
                phases = section_phases(b, args.phase_runs)
            if "warm" in sections:
                warm = section_warm(b, args.warm_runs, args.warm_pool, args.warm_sustained)
            if "batch" in sections:
                batch = section_batch(b, args.batch_size, args.batch_reps)
            if "parse" in sections:
                parse = section_parse(b, args.parse_mb, args.parse_runs)
            if "langs" in sections:
                langs = section_langs(b, 1 if q else 5)
            if "long" in sections:
                long_ = section_long(b, args.long_cells, args.long_runs)
            if "runsc" in sections:
                runsc = section_runsc(b, args.runsc_runs)
            if "net" in sections:
                net = section_net(b, args.net_runs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say("scratch kept in %s" % work)
    elapsed = time.monotonic() - t_all
    load_after = loadavg()
    during = sampler.samples or [load_before[0]]

    metrics, targets, notes = {}, [], []
    out = []

    def metric(name, d_or_value, unit, better, **extra):
        if isinstance(d_or_value, dict):
            m = dict(d_or_value)
            m["value"] = m["p50"]
        else:
            m = {"value": d_or_value}
        m.update(unit=unit, better=better, **extra)
        metrics[name] = m
        return m

    # ---- header
    out.append("nbrun benchmarks, %s mode, %s" % ("quick" if q else "full",
                                                   started.strftime("%Y-%m-%d %H:%M UTC")))
    out.append("machine: %d cores (%s), %s MiB, kernel %s, docker %s (API %s), %s"
               % (machine["nproc"], machine.get("cpu_model", "?"), machine.get("mem_total_mib", "?"),
                  machine["kernel"], machine.get("docker_server"), machine.get("docker_api"),
                  machine.get("os", "")))
    out.append("nbrun %s at %s%s, release build; image %s"
               % (version, commit, " (+uncommitted changes)" if dirty else "", args.image))
    load_line = ("load: 1-min %.2f before, %.2f-%.2f during (mean %.2f), %.2f after; "
                 "%d other container(s) running at start"
                 % (load_before[0], min(during), max(during), sum(during) / len(during),
                    load_after[0], others))
    out.append(load_line)
    if hogs:
        out.append("busy at start: " + ", ".join("%s %d%%%s" % (h["comm"], h["cpu_pct"],
                                                                " (nice %d)" % h["nice"] if h["nice"] else "")
                                                 for h in hogs))
    # The benchmark itself keeps about one core busy (two during -j 2).
    if sum(during) / len(during) > nproc:
        notes.append("the machine was busy during the run (mean 1-min load %.2f on %d cores): "
                     "absolute times are inflated; ratios are fairer because runs alternate"
                     % (sum(during) / len(during), nproc))
    if args.stale_binary:
        notes.append("the build failed; an older nbrun binary was measured")
    out.append("percentiles interpolate between ranks: with n=%d, p99 is close to max" % args.runs)
    out.append("")

    # ---- languages
    if langs:
        out.append("== languages: cold print(1)-equivalent, wall ms per run (nbrun run --language)")
        rows = []
        for wl in LANG_WORKLOADS:
            d = dist([p.wall_ms for p in langs["runs"][wl["label"]]])
            metric("langs.%s.cold.wall_ms" % wl["label"], d, "ms", "lower")
            rows.append(dist_row(wl["label"], d))
        out.append(table(["language", "n", "min", "p50", "p90", "p99", "max"], rows))
        if langs["image_bytes"]:
            metric("langs.image_bytes", langs["image_bytes"], "bytes", "lower")
            out.append("image %s: %.2f GB" % (args.image, langs["image_bytes"] / 1e9))
        out.append("")

    # ---- cold
    if cold:
        out.append("== cold runs: wall ms per run (baseline A = docker run + nbconvert + json.load)")
        rows = []
        for wl in WORKLOADS:
            c = cold[wl["key"]]
            db = dist([p.wall_ms for p in c["baseline"]])
            dn = dist([p.wall_ms for p in c["nbrun"]])
            r = ratio(dn["p50"], db["p50"])
            metric("cold.%s.baseline_a.wall_ms" % wl["key"], db, "ms", "lower")
            metric("cold.%s.nbrun.wall_ms" % wl["key"], dn, "ms", "lower")
            metric("cold.%s.ratio" % wl["key"], r, "x", "lower",
                   note="nbrun p50 / baseline A p50")
            rows.append(dist_row("%s  baseline A" % wl["label"], db, extra=[""]))
            rows.append(dist_row("%s  nbrun" % wl["label"], dn,
                                 extra=["%.2fx" % r if r else "-"]))
            targets.append(("cold %s p50 vs baseline A" % wl["label"],
                            "%.2fx (%s vs %s ms)" % (r, fmt_ms(dn["p50"]), fmt_ms(db["p50"])) if r else "-",
                            "<= 0.85x", None if r is None else r <= 0.85))
        out.append(table(["workload", "n", "min", "p50", "p90", "p99", "max", "ratio"], rows))
        out.append("")

        out.append("== host cost per run: the nbrun process itself (wait4 rusage), not the container")
        rows = []
        for wl in WORKLOADS:
            c = cold[wl["key"]]
            cpu = dist([p.cpu_ms for p in c["nbrun"]])
            rss = dist([p.maxrss_kb / 1024 for p in c["nbrun"]])
            dcpu = dist([p.cpu_ms for p in c["baseline"]])
            drss = dist([p.maxrss_kb / 1024 for p in c["baseline"]])
            metric("host.%s.nbrun.cpu_ms" % wl["key"], cpu, "ms", "lower")
            metric("host.%s.nbrun.maxrss_mib" % wl["key"], rss, "MiB", "lower")
            metric("host.%s.docker_cli.cpu_ms" % wl["key"], dcpu, "ms", "lower")
            metric("host.%s.docker_cli.maxrss_mib" % wl["key"], drss, "MiB", "lower")
            f1 = lambda x: "-" if x is None else "%.1f" % x  # noqa: E731
            rows.append(dist_row("%s  nbrun CPU ms" % wl["label"], cpu, f1))
            rows.append(dist_row("%s  nbrun peak RSS MiB" % wl["label"], rss, f1))
            rows.append(dist_row("%s  (docker CLI CPU ms)" % wl["label"], dcpu, f1))
            rows.append(dist_row("%s  (docker CLI peak RSS MiB)" % wl["label"], drss, f1))
        out.append(table(["workload / measure", "n", "min", "p50", "p90", "p99", "max"], rows))
        out.append("(baseline A's host side also runs json.load in the harness; not included)")
        out.append("")

    # ---- phases
    if phases:
        keys = [wl["key"] for wl in WORKLOADS if phases.get(wl["key"])]
        out.append("== where a cold run spends its time: p50 ms per phase, runs through "
                   "bench/engine_proxy.py (n=%d per workload)" % args.phase_runs)
        rows = []
        for k, label in PHASES + [("wall", "total wall (through the proxy)")]:
            row = [label]
            for wk in keys:
                d = dist([r[k] for r in phases[wk]])
                metric("phases.%s.%s_ms" % (wk, k), d, "ms", "lower")
                row.append(fmt_ms(d["p50"]))
            rows.append(row)
        if cold:
            row = ["total wall (direct, from cold runs)"]
            for wk in keys:
                row.append(fmt_ms(dist([p.wall_ms for p in cold[wk]["nbrun"]])["p50"]))
            rows.append(row)
        out.append(table(["phase"] + [next(w["label"] for w in WORKLOADS if w["key"] == wk)
                                      for wk in keys], rows))
        out.append("kernel start + channel = the attach stream's wait after start less the cells' "
                   "busy->idle time: agent and kernel start, notebook in, outputs and /mnt/data out")
        out.append("")

    # ---- warm
    if warm:
        report_warm(warm, metric, targets, notes, out)

    # ---- batch
    if batch:
        n = batch["size"]
        out.append("== batch throughput: %d small notebooks; nbrun side: %s" % (n, batch["mode"]))

        def npm(rows):
            # Only notebooks that came back ok count towards throughput.
            return dist([r["ok"] / (r["wall_ms"] / 60000.0) for r in rows if r["wall_ms"] and r["ok"]])
        base = npm(batch["baseline"])
        j1, j2 = npm(batch["j1"]), npm(batch["j2"])
        r1, r2 = ratio(j1["p50"], base["p50"]), ratio(j2["p50"], base["p50"])
        metric("batch.baseline_a_seq.nb_per_min", base, "nb/min", "higher")
        metric("batch.nbrun_j1.nb_per_min", j1, "nb/min", "higher", mode=batch["mode"])
        metric("batch.nbrun_j2.nb_per_min", j2, "nb/min", "higher", mode=batch["mode"])
        metric("batch.j1.ratio", r1, "x", "higher")
        metric("batch.j2.ratio", r2, "x", "higher")
        label = "nbrun batch" if batch["uses_nbrun_batch"] else "nbrun run x N (harness)"
        rows = []
        for name, runs, d, r in (("baseline A, sequential", batch["baseline"], base, None),
                                 ("%s -j 1" % label, batch["j1"], j1, r1),
                                 ("%s -j 2" % label, batch["j2"], j2, r2)):
            per = dist([x for rr in runs for x in rr["per_notebook_ms"] if x is not None])
            rows.append([name, "%.1f" % d["p50"] if d["p50"] else "-",
                         "%.1f" % (sum(rr["wall_ms"] for rr in runs) / len(runs) / 1000),
                         "%d/%d" % (sum(rr["ok"] for rr in runs), n * len(runs)),
                         fmt_ms(per["p50"]), fmt_ms(per["p90"]), fmt_ms(per["max"]),
                         "%.2fx" % r if r else ""])
        out.append(table(["", "nb/min", "wall s", "ok", "per-nb p50 ms", "p90", "max", "vs baseline"],
                         rows))
        out.append("")
        if any(r["ok"] < n for k in ("baseline", "j1", "j2") for r in batch[k]):
            notes.append("some batch notebooks failed: throughput counts only those that came back ok")
        targets.append(("batch -j 2 throughput vs baseline A sequential",
                        "%.2fx (%.1f vs %.1f nb/min)%s" % (r2, j2["p50"], base["p50"],
                                                           "" if batch["uses_nbrun_batch"] else " [fallback]")
                        if r2 else "-", ">= 1.8x", None if r2 is None else r2 >= 1.8))
        targets.append(("batch -j 1 throughput vs baseline A sequential (info)",
                        "%.2fx" % r1 if r1 else "-", "-", None))

    # ---- long notebooks
    if long_:
        base = dist(long_["baseline"])
        nbr = dist(long_["nbrun"])
        r = ratio(nbr["p50"], base["p50"])
        metric("long.cells", long_["cells"], "cells", "none")
        metric("long.baseline.wall_ms", base, "ms", "lower")
        metric("long.nbrun.wall_ms", nbr, "ms", "lower")
        metric("long.ratio", r, "x", "lower", note="nbrun run p50 / plain nbconvert p50")
        out.append("== a notebook of %d trivial cells: nbrun run vs baseline A (plain nbconvert --execute)"
                   % long_["cells"])
        out.append(table(["", "n", "min", "p50", "p90", "p99", "max"],
                         [dist_row("baseline A wall ms", base), dist_row("nbrun run wall ms", nbr)]))
        out.append("")
        targets.append(("%d trivial cells: nbrun run vs plain nbconvert (p50)" % long_["cells"],
                        "%.2fx (%.1f vs %.1f s)" % (r, nbr["p50"] / 1000, base["p50"] / 1000) if r else "-",
                        "<= 1.5x", None if r is None else r <= 1.5))

    # ---- parse
    if parse and parse["runs"]:
        size = parse["file_bytes"]
        wall = dist([p.wall_ms for p in parse["runs"]])
        rss = dist([p.maxrss_kb * 1024 / 1e6 for p in parse["runs"]])
        cpu = dist([p.cpu_ms for p in parse["runs"]])
        r = ratio(rss["max"] * 1e6, size)
        metric("parse.file_mb", size / 1e6, "MB", "none")
        metric("parse.wall_ms", wall, "ms", "lower")
        metric("parse.cpu_ms", cpu, "ms", "lower")
        metric("parse.maxrss_mb", rss, "MB", "lower")
        metric("parse.rss_ratio", r, "x", "lower", note="max peak RSS / file size")
        out.append("== nbrun parse of a %.1f MB executed notebook (%d base64 PNG outputs)"
                   % (size / 1e6, parse["images"]))
        rows = [dist_row("nbrun parse wall ms", wall), dist_row("nbrun parse CPU ms", cpu),
                dist_row("nbrun parse peak RSS MB", rss, lambda x: "%.1f" % x)]
        if parse["json_load"]:
            jl = parse["json_load"][0]
            metric("parse.python_json_load.maxrss_mb", jl.maxrss_kb * 1024 / 1e6, "MB", "lower")
            metric("parse.python_json_load.wall_ms", jl.wall_ms, "ms", "lower")
            rows.append(dist_row("(python json.load wall ms)", dist([jl.wall_ms])))
            rows.append(dist_row("(python json.load peak RSS MB)", dist([jl.maxrss_kb * 1024 / 1e6]),
                                 lambda x: "%.1f" % x))
        out.append(table(["", "n", "min", "p50", "p90", "p99", "max"], rows))
        out.append("")
        targets.append(("nbrun parse peak RSS / notebook size",
                        "%.2fx (%.0f MB for %.0f MB)" % (r, rss["max"], size / 1e6) if r else "-",
                        "<= 3x", None if r is None else r <= 3.0))

    # ---- gVisor
    if runsc:
        report_runsc(runsc, metric, targets, out)
    if net:
        report_net(net, metric, targets, out)

    # ---- targets
    if "warm" in sections:
        warm_targets(warm, metrics, targets)
    if cold:
        cpu = metrics["host.print.nbrun.cpu_ms"]["value"]
        rss = metrics["host.print.nbrun.maxrss_mib"]["value"]
        targets.append(("nbrun host CPU per print(1) run, p50 (info)", "%.1f ms" % cpu, "-", None))
        targets.append(("nbrun peak RSS per print(1) run, p50 (info)", "%.1f MiB" % rss, "-", None))
    if b.outages:
        notes.append("the engine or image was unavailable %d time(s) (waited %s s); the runs caught "
                     "by it were retried and are not in the timings"
                     % (len(b.outages), ", ".join("%.0f" % o["waited_s"] for o in b.outages)))
    if b.failures:
        notes.append("%d run(s) failed or produced wrong output and are not in the timings: %s"
                     % (len(b.failures), "; ".join("%s (%s)" % (f["what"], f["detail"])
                                                    for f in b.failures[:5])))
    out.append("== summary (benchmarks never fail on timing)")

    def met(v):
        return {True: "yes", False: "NO", None: "-"}.get(v, v)
    out.append(table(["metric", "value", "target", "met"],
                     [[t[0], t[1], t[2], met(t[3])] for t in targets], right={3}))
    for n_ in notes:
        out.append("note: " + n_)
    out.append("elapsed %.1f min" % (elapsed / 60))

    doc = {
        "schema": SCHEMA, "date": started.isoformat(timespec="seconds"),
        "mode": "quick" if q else "full", "elapsed_s": round(elapsed, 1),
        "machine": machine,
        "software": {"nbrun": version, "commit": commit, "dirty": dirty, "image": args.image,
                     "image_id": sh([DOCKER, "image", "inspect", "-f", "{{.Id}}", args.image]),
                     "batch_mode": batch["mode"] if batch else None,
                     "stale_binary": args.stale_binary},
        "config": {"runs": args.runs, "phase_runs": args.phase_runs, "batch_size": args.batch_size,
                   "batch_reps": args.batch_reps, "parse_mb": args.parse_mb,
                   "parse_runs": args.parse_runs, "warm_runs": args.warm_runs,
                   "long_cells": args.long_cells, "long_runs": args.long_runs,
                   "warm_pool": args.warm_pool, "warm_sustained": args.warm_sustained,
                   "runsc_runs": args.runsc_runs, "net_runs": args.net_runs,
                   "sections": sorted(sections)},
        "load": {"before": load_before, "after": load_after, "during_1min": during,
                 "busy_processes_at_start": hogs, "other_containers_at_start": others},
        "metrics": metrics,
        "targets": [{"metric": t[0], "value": t[1], "target": t[2], "met": t[3]} for t in targets],
        "failures": b.failures, "outages": b.outages, "notes": notes,
    }
    if not args.no_save:
        path = args.results
        if not path:
            os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
            stem = os.path.join(HERE, "results", started.strftime("%Y-%m-%d") + ("-quick" if q else ""))
            path, k = stem + ".json", 2
            while os.path.exists(path):
                path, k = "%s-%d.json" % (stem, k), k + 1
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
        out.append("results: %s" % (os.path.relpath(path, ROOT) if path.startswith(ROOT) else path))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
