#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Load against `nbrun serve`: a run rate and a session churn, with the server watched.

Usage:
  bench/load.py [--nbrun PATH] [--runs 2000] [--concurrency 16] [--sessions 200]
                [--only runs,churn] [--max-seconds S] [--rss-bound-mib 16] ...

One server per section (`nbrun serve --socket` in a private state directory;
traffic only on that unix socket), started from the binary given (default
$NBRUN, else build-bench/, the release build bench/run configures).

  runs   N `POST /v1/runs` of small code (each checked: status ok, the sum it
         prints) from C client threads, each on its own kept-alive connection.
         A 503 must carry Retry-After: the client waits that long and sends
         the request again (counted as "503 busy", never as an error).
  churn  M sessions opened, used (two executes, a file up and one down,
         the listing), closed; every 5th is abandoned after its first
         execute with a 3 s idle timeout, and must be gone by itself.

Watched: the server's VmRSS (/proc/PID/status, sampled every 0.2 s) at start
(pool full), after warm-up (the first 10% of the work), its peak and at the
end (pool full again, nothing running); its open fds (/proc/PID/fd) at start
and at the end; after SIGTERM, the containers and volumes labelled with its
pid (must be none). Every request has a client timeout: a request that gets
no answer in it counts as a hang.

Exit status: 0 when every bound held; 1 when a request failed, hung or got a
503 without Retry-After, RSS grew more than --rss-bound-mib from after
warm-up to the end, the fds at the end exceed those at the start, or the
server left a container or volume; 2 on usage.
Prints a markdown table (one row per section) for docs/performance.md.
"""
import argparse
import base64
import collections
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True


def log(*a):
    print("load:", *a, file=sys.stderr, flush=True)


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket, kept open between requests."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def engine_socket():
    h = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not h.startswith("unix://"):
        sys.exit("load: DOCKER_HOST must be a unix socket for the leftover count")
    return h[len("unix://"):]


def engine_get(path):
    c = UnixHTTPConnection(engine_socket(), 60)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("engine GET %s: %d %r" % (path, r.status, body[:200]))
    return json.loads(body)


def labelled(label):
    """Containers and volumes carrying one label (key=value)."""
    f = urllib.parse.quote(json.dumps({"label": [label]}))
    cs = engine_get("/containers/json?all=1&filters=" + f)
    vs = engine_get("/volumes?filters=" + f).get("Volumes") or []
    return [c["Names"][0] for c in cs] + [v["Name"] for v in vs]


def pct(values, p):
    """Percentile with linear interpolation between ranks (as bench.py)."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Server:
    """nbrun serve on a unix socket in a private state directory, watched."""

    def __init__(self, nbrun, args, extra):
        self.tmp = tempfile.mkdtemp(prefix="nbrun-load-")
        self.state = os.path.join(self.tmp, "state")
        self.sock = os.path.join(self.tmp, "s.sock")
        self.logf = open(os.path.join(self.tmp, "serve.log"), "w+")
        cmd = [nbrun, "serve", "--socket", self.sock, "--state-dir", self.state,
               "--pool", str(args.pool), "--timeout", args.run_timeout] + list(extra)
        if args.max_runs:
            cmd += ["--max-runs", str(args.max_runs)]
        if args.image:
            cmd += ["--image", args.image]
        log("starting", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        deadline = time.time() + 60
        while "nbrun: serve: state in" not in self.stderr():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("serve did not start: %s" % self.stderr())
            time.sleep(0.05)
        with open(os.path.join(self.state, "token")) as f:
            self.token = f.read().strip()
        self._stopped = None
        self.unsettled = None
        self.samples = []  # (time, rss KiB)
        self.marks = {}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def stderr(self):
        if not self.logf.closed:
            self.logf.flush()
        with open(self.logf.name, errors="replace") as f:
            return f.read()

    def rss_kib(self):
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def _sample(self):
        while not self._stop.is_set():
            r = self.rss_kib()
            if r is not None:
                self.samples.append((time.time(), r))
            self._stop.wait(0.2)

    def mark(self, name):
        self.marks[name] = self.rss_kib()

    def peak_kib(self):
        return max((r for _, r in self.samples), default=0)

    def conn(self, timeout):
        return UnixHTTPConnection(self.sock, timeout)

    def request(self, method, path, body=None, timeout=60, headers=None):
        """One request on a fresh connection: (status, headers dict, body bytes)."""
        c = self.conn(timeout)
        try:
            h = {"Authorization": "Bearer " + self.token}
            h.update(headers or {})
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def health(self):
        st, _, b = self.request("GET", "/v1/health")
        return json.loads(b) if st == 200 else {}

    def wait_quiet(self, within=300):
        """Pool full and nothing running: the state to compare RSS and fds in."""
        deadline = time.time() + within
        h = {}
        while time.time() < deadline:
            h = self.health()
            pool = h.get("pool", {})
            if pool.get("ready", -1) >= pool.get("size", 0) and pool.get("starting", 1) == 0 \
                    and h.get("runs_active", 1) == 0:
                return h
            time.sleep(0.5)
        self.unsettled = "did not settle within %d s: %r" % (within, h)
        log(self.unsettled)
        return None

    def settle_fds(self, bound, within=30):
        """The fd count, waiting up to `within` s for it to fall to `bound` (closing connections)."""
        deadline = time.time() + within
        n = self.fds()
        while n > bound and time.time() < deadline:
            time.sleep(0.5)
            n = self.fds()
        return n

    def stop(self):
        """SIGTERM, then what is left with its pid label (once; later calls repeat the answer)."""
        if self._stopped is not None:
            return self._stopped
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        label = "nbrun.pid=%d" % self.pid
        left = labelled(label)
        # Removal is synchronous before exit 0; a second look rules out a slow listing.
        if left:
            time.sleep(2)
            left = labelled(label)
        self._stopped = (self.proc.returncode, left)
        return self._stopped


class Tally:
    """Thread-safe counters and latencies."""

    def __init__(self):
        self.lock = threading.Lock()
        self.kinds = collections.Counter()
        self.lat = []
        self.busy_lat = []
        self.done = 0

    def add(self, kind, n=1):
        with self.lock:
            self.kinds[kind] += n

    def ok(self, seconds):
        with self.lock:
            self.lat.append(seconds)
            self.done += 1


# ---- runs ------------------------------------------------------------------------


def retry_after(status, headers, tally, what):
    """For a 503: the seconds to wait, or None when the header is missing (an error)."""
    ra = headers.get("Retry-After")
    try:
        return max(0.0, float(ra))
    except (TypeError, ValueError):
        tally.add("%s 503 without Retry-After" % what)
        return None


def run_client(srv, args, todo, tally, warm_evt, warm_at, deadline):
    conn = None
    while True:
        with tally.lock:
            if todo[0] <= 0 or time.time() > deadline:
                break
            todo[0] -= 1
            n = todo[0]
        body = json.dumps({"code": "x = %d\nprint(sum(range(x)))" % n}).encode()
        expect = "%d\n" % sum(range(n))
        attempt = 0
        while True:
            attempt += 1
            if conn is None:
                conn = srv.conn(args.request_timeout)
            t0 = time.monotonic()
            try:
                conn.request("POST", "/v1/runs", body=body,
                             headers={"Authorization": "Bearer " + srv.token,
                                      "Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                status, headers = r.status, dict(r.getheaders())
            except socket.timeout:
                tally.add("hang (no answer in %d s)" % args.request_timeout)
                conn.close()
                conn = None
                break
            except (OSError, http.client.HTTPException) as e:
                # A kept-alive connection the server closed (idle timeout) is retried once.
                conn.close()
                conn = None
                if attempt == 1 and isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError,
                                                   ConnectionResetError)):
                    tally.add("reconnect (%s)" % type(e).__name__)
                    continue
                tally.add("exception %s" % type(e).__name__)
                break
            dt = time.monotonic() - t0
            if status == 503:
                with tally.lock:
                    tally.busy_lat.append(dt)
                tally.add("503 busy (retried)")
                wait = retry_after(status, headers, tally, "run")
                if wait is not None and time.time() + wait > deadline:
                    # Out of time: wait it out rather than ask again at once.
                    time.sleep(max(0.0, deadline - time.time()))
                    tally.add("not sent again: past the time bound")
                if wait is None or time.time() + wait > deadline:
                    break
                time.sleep(wait)
                continue
            if status != 200:
                try:
                    kind = json.loads(data).get("kind")
                except ValueError:
                    kind = None
                tally.add("HTTP %d %s" % (status, kind or ""))
                break
            doc = json.loads(data)
            if doc.get("status") != "ok" or doc.get("stdout") != expect:
                tally.add("result %s: %s" % (doc.get("status"), (doc.get("message") or "wrong stdout")[:80]))
                break
            tally.ok(dt)
            if doc.get("warm"):
                tally.add("pool hit")
            with tally.lock:
                if tally.done >= warm_at and not warm_evt.is_set():
                    warm_evt.set()
            break
        if conn is not None and getattr(conn, "sock", None) is None:
            conn = None
    if conn is not None:
        conn.close()


def section_runs(args):
    srv = Server(args.nbrun, args, [])
    try:
        return drive(srv, args, "runs", args.runs, args.concurrency,
                     lambda tally, todo, warm_evt, warm_at, deadline:
                     [threading.Thread(target=run_client,
                                       args=(srv, args, todo, tally, warm_evt, warm_at, deadline))
                      for _ in range(args.concurrency)])
    finally:
        srv.stop()


def drive(srv, args, name, total, conc, make_threads):
    """Common frame of a section: settle, measure, load, settle, measure, stop."""
    log("%s: waiting for the pool to fill" % name)
    if not srv.wait_quiet():
        srv.unsettled = "before the load: " + srv.unsettled
    srv.mark("start")
    fd_start = srv.fds()
    tally = Tally()
    todo = [total]
    warm_at = max(1, total // 10)
    warm_evt = threading.Event()
    deadline = time.time() + args.max_seconds
    threads = make_threads(tally, todo, warm_evt, warm_at, deadline)
    t0 = time.monotonic()
    for t in threads:
        t.start()

    def warm_mark():
        warm_evt.wait()
        srv.mark("warm")
    wt = threading.Thread(target=warm_mark, daemon=True)
    wt.start()
    last = 0
    while any(t.is_alive() for t in threads):
        time.sleep(1)
        if time.monotonic() - last >= 30:
            last = time.monotonic()
            log("%s: %d done, %s, rss %s KiB" % (name, tally.done, dict(tally.kinds), srv.rss_kib()))
    wall = time.monotonic() - t0
    if not warm_evt.is_set():
        srv.mark("warm")  # too little work for a warm-up: the bound is then vacuous
    log("%s: settling (pool full, nothing running)" % name)
    extra = {}
    if hasattr(args, "_after_load"):
        extra = args._after_load(srv, tally) or {}
    srv.wait_quiet()
    fd_end = srv.settle_fds(fd_start)
    time.sleep(1)
    srv.mark("end")
    rc, left = srv.stop()
    kib = srv.marks
    grown = (kib["end"] - kib["warm"]) / 1024.0
    res = {
        "section": name, "requested": total, "done": tally.done, "concurrency": conc,
        "wall_s": round(wall, 1),
        "per_min": round(tally.done / wall * 60, 1) if wall else 0,
        "p50_ms": round(pct(tally.lat, 50) * 1000), "p99_ms": round(pct(tally.lat, 99) * 1000),
        "busy_p99_ms": round(pct(tally.busy_lat, 99) * 1000) if tally.busy_lat else None,
        "kinds": dict(tally.kinds),
        "rss_kib": {"start": kib["start"], "warm": kib["warm"], "peak": srv.peak_kib(), "end": kib["end"]},
        "rss_growth_mib": round(grown, 1),
        "fds": {"start": fd_start, "end": fd_end},
        "exit": rc, "left": left,
    }
    res.update(extra)
    errors = {k: v for k, v in tally.kinds.items()
              if not (k.startswith("503 busy") or k == "pool hit" or k.startswith("reconnect")
                      or k.startswith("abandoned") or k.startswith("not sent again"))}
    res["errors"] = errors
    fails = []
    if errors:
        fails.append("errors: %r" % errors)
    if tally.done + sum(errors.values()) < total and time.time() > deadline:
        res["stopped_by_time"] = True
    if grown > args.rss_bound_mib:
        fails.append("RSS grew %.1f MiB after warm-up (bound %d MiB)" % (grown, args.rss_bound_mib))
    if fd_end > fd_start:
        fails.append("fds %d at the end, %d at the start" % (fd_end, fd_start))
    if left:
        fails.append("left behind: %r" % left)
    if rc != 0:
        fails.append("serve exited %r on SIGTERM" % rc)
    if srv.unsettled:
        # The pool not full at one end: RSS and fds were compared in different states.
        fails.append("the server " + srv.unsettled)
        res["unsettled"] = srv.unsettled
    res["fails"] = fails
    log("%s: %s" % (name, json.dumps(res)))
    if fails:
        log("serve log tail:\n" + srv.stderr()[-3000:])
    shutil.rmtree(srv.tmp, ignore_errors=True)
    return res


# ---- churn -----------------------------------------------------------------------


def session_client(srv, args, todo, tally, warm_evt, warm_at, deadline, abandoned):
    auth = {"Authorization": "Bearer " + srv.token}

    def call(method, path, body=None, headers=None, ok=(200,)):
        h = dict(auth)
        h.update(headers or {})
        while True:
            c = srv.conn(args.request_timeout)
            try:
                c.request(method, path, body=body, headers=h)
                r = c.getresponse()
                data = r.read()
                status, hd = r.status, dict(r.getheaders())
            except socket.timeout:
                raise Failure("hang (no answer in %d s) %s" % (args.request_timeout, method))
            except (OSError, http.client.HTTPException) as e:
                raise Failure("exception %s" % type(e).__name__)
            finally:
                c.close()
            if status == 503:
                tally.add("503 busy (retried)")
                wait = retry_after(status, hd, tally, "session")
                if wait is None:
                    raise Failure("503 without Retry-After")
                if time.time() + wait > deadline:
                    time.sleep(max(0.0, deadline - time.time()))
                    raise OutOfTime()
                time.sleep(wait)
                continue
            if status not in ok:
                try:
                    kind = json.loads(data).get("kind")
                except ValueError:
                    kind = ""
                raise Failure("HTTP %d %s %s" % (status, method, kind))
            return data

    while True:
        with tally.lock:
            if todo[0] <= 0 or time.time() > deadline:
                break
            todo[0] -= 1
            n = todo[0]
        abandon = n % 5 == 0
        t0 = time.monotonic()
        try:
            body = {"timeout_idle": "3s"} if abandon else {}
            sid = json.loads(call("POST", "/v1/sessions", json.dumps(body).encode(), ok=(201,)))["id"]
            base = "/v1/sessions/" + sid
            doc = json.loads(call("POST", base + "/execute", json.dumps({"code": "x = %d" % n}).encode()))
            if doc.get("status") != "ok":
                raise Failure("execute %s" % doc.get("status"))
            if abandon:
                with tally.lock:
                    abandoned.append(sid)
                tally.add("abandoned to the idle timeout")
                tally.ok(time.monotonic() - t0)
                continue
            payload = ("line %d\n" % n).encode() * 50
            call("PUT", base + "/files/in.txt", payload, ok=(200, 201))
            code = ("data = open('/mnt/data/in.txt').read()\n"
                    "open('/mnt/data/out.txt', 'w').write(data.upper())\n"
                    "print(x, len(data))")
            doc = json.loads(call("POST", base + "/execute", json.dumps({"code": code}).encode()))
            if doc.get("status") != "ok" or doc.get("stdout") != "%d %d\n" % (n, len(payload)):
                raise Failure("execute 2 %s %r" % (doc.get("status"), (doc.get("stdout") or "")[:40]))
            got = call("GET", base + "/files/out.txt")
            if got != payload.upper():
                raise Failure("download differs")
            listing = json.loads(call("GET", base + "/files"))
            want = hashlib.sha256(payload).hexdigest()
            if not any(f.get("path") == "in.txt" and f.get("sha256") == want for f in listing.get("files", [])):
                raise Failure("listing lacks in.txt")
            call("DELETE", base, ok=(200, 204))
            tally.ok(time.monotonic() - t0)
        except Failure as e:
            tally.add(str(e))
        except OutOfTime:
            tally.add("not sent again: past the time bound")
            break
        with tally.lock:
            if tally.done >= warm_at and not warm_evt.is_set():
                warm_evt.set()


class Failure(Exception):
    pass


class OutOfTime(Exception):
    pass


def section_churn(args):
    srv = Server(args.nbrun, args, [])
    abandoned = []

    def after_load(srv, tally):
        # Abandoned sessions must close by themselves: 3 s idle plus the sweep.
        deadline = time.time() + 120
        while time.time() < deadline:
            st, _, b = srv.request("GET", "/v1/sessions")
            left = json.loads(b).get("sessions", []) if st == 200 else None
            if left == []:
                break
            time.sleep(1)
        else:
            tally.add("sessions still open 120 s after the load: %d" % len(left or []))
        gone = 0
        for sid in abandoned:
            st, _, _ = srv.request("GET", "/v1/sessions/" + sid)
            gone += st == 404
        if gone != len(abandoned):
            tally.add("abandoned sessions still answering: %d" % (len(abandoned) - gone))
        return {"abandoned": len(abandoned), "abandoned_gone": gone}

    args._after_load = after_load
    try:
        return drive(srv, args, "churn", args.sessions, args.session_concurrency,
                     lambda tally, todo, warm_evt, warm_at, deadline:
                     [threading.Thread(target=session_client,
                                       args=(srv, args, todo, tally, warm_evt, warm_at, deadline, abandoned))
                      for _ in range(args.session_concurrency)])
    finally:
        del args._after_load
        srv.stop()


# ---- report ----------------------------------------------------------------------


def mib(kib):
    return "%.1f" % (kib / 1024.0) if kib is not None else "?"


def table(results):
    lines = ["| load | requests | concurrency | throughput | p50 / p99 | 503 (retried) | errors | "
             "RSS start / warm / peak / end (MiB) | fds start / end | left |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        what = "`POST /v1/runs`" if r["section"] == "runs" else "sessions (open, 2 executes, file up/down, close; 1 in 5 abandoned)"
        done = "%d of %d%s" % (r["done"], r["requested"], " (time bound)" if r.get("stopped_by_time") else "")
        unit = "runs/min" if r["section"] == "runs" else "sessions/min"
        errs = sum(r["errors"].values())
        k = r["rss_kib"]
        lines.append("| %s | %s | %d | %.1f %s | %d / %d ms | %d | %d%s | %s / %s / %s / %s (%+.1f after warm-up) | %d / %d | %d |" % (
            what, done, r["concurrency"], r["per_min"], unit, r["p50_ms"], r["p99_ms"],
            r["kinds"].get("503 busy (retried)", 0), errs,
            (" " + ", ".join("%s: %d" % kv for kv in r["errors"].items())) if errs else "",
            mib(k["start"]), mib(k["warm"]), mib(k["peak"]), mib(k["end"]), r["rss_growth_mib"],
            r["fds"]["start"], r["fds"]["end"], len(r["left"])))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nbrun", default=os.environ.get("NBRUN") or
                    os.path.join(ROOT, "build-bench", "src", "cli", "nbrun"),
                    help="the binary under test (default $NBRUN, else build-bench's, bench/run's release build)")
    ap.add_argument("--only", default="runs,churn", help="sections: runs, churn")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--session-concurrency", type=int, default=8)
    ap.add_argument("--pool", type=int, default=2)
    ap.add_argument("--max-runs", type=int, default=0, help="server's --max-runs (default: its own)")
    ap.add_argument("--image", default=None)
    ap.add_argument("--run-timeout", default="300s",
                    help="the server's --timeout: a run's limit (the load measures the server, and a "
                    "cold start on a busy 2-core machine can pass the default 60 s)")
    ap.add_argument("--max-seconds", type=int, default=3600, help="time bound of each section's load")
    ap.add_argument("--request-timeout", type=int, default=300,
                    help="a request with no answer in this many seconds is a hang")
    ap.add_argument("--rss-bound-mib", type=int, default=16,
                    help="allowed RSS growth from after warm-up to the end")
    ap.add_argument("--json", metavar="FILE", help="also write the results here")
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s]
    if not only or any(s not in ("runs", "churn") for s in only) or args.runs < 1 or \
            args.concurrency < 1 or args.sessions < 1 or args.session_concurrency < 1:
        ap.print_usage(sys.stderr)
        sys.exit(2)
    if not os.access(args.nbrun, os.X_OK):
        sys.exit("load: no nbrun at %s (bench/run builds build-bench; or give --nbrun)" % args.nbrun)
    results = []
    if "runs" in only:
        results.append(section_runs(args))
    if "churn" in only:
        results.append(section_churn(args))
    print(table(results))
    fails = [(r["section"], f) for r in results for f in r["fails"]]
    for sec, f in fails:
        print("FAIL %s: %s" % (sec, f))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nbrun": args.nbrun, "date": time.strftime("%Y-%m-%d %H:%M"),
                       "load_avg": os.getloadavg(),
                       "options": {k: v for k, v in vars(args).items() if not k.startswith("_")},
                       "results": results}, f, indent=1)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
