#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nbrun serve as a Swarm service, on a Swarm of several nodes on this machine.

The host engine becomes the manager (drained: the shared engine runs no
task); each worker is an engine in a container (nbrun-dind), joined with the
worker token. The stack deploy/swarm/stack.yml runs one server per worker,
published through the routing mesh. Then:

  1. a batch of N notebooks through the mesh: every one ok, on >= 2 nodes;
     meanwhile one sandbox on a worker is inspected on its inner engine: the
     hardening of one machine (CapDrop ALL, no-new-privileges, the seccomp
     profile, network none, 1 GiB memory, 256 pids);
  2. the same batch again, a worker killed (SIGKILL) once some have finished:
     every notebook still has an ok result, and the retries are counted;
  3. the stack removed: no nbrun-labelled container or volume on a surviving
     node.

Figures go to stdout; exit 1 on any failed check. Everything it made (the
stack, the secret, the workers and their volumes, the swarm) is removed at the
end, after a failure or Ctrl-C too; the images it built are kept.

  bench/swarm.py [--nbrun BUILD_DIR] [--workers 3] [--notebooks 30] [-j 6]

It needs scripts/setup (engine, runtime image) and a meson build of nbrun
(build-rel/, else build/, else --nbrun DIR): its binary goes into the serve
image and runs the batches.
"""
import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SWARM = os.path.join(ROOT, "scripts", "swarm")
STACK = "nbrun-bench"
PREFIX = "nbrun-swarm-"


def log(msg):
    print(f"swarm.py: {msg}", file=sys.stderr, flush=True)


def sh(*args, check=True, capture=True, timeout=None, stdin=None):
    r = subprocess.run(list(args), stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None, text=True,
                       timeout=timeout, stdin=stdin)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])}... failed ({r.returncode}): "
                           f"{(r.stderr or '').strip()[-400:]}")
    return (r.stdout or "").strip()


def version():
    with open(os.path.join(ROOT, "meson.build")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("version"):
                return line.split("'")[1]
    return "0.1.0"


def kernel_has(module, config):
    """This kernel's module loaded, loadable (modprobe -n knows built-ins too)
    or configured in (/proc/config.gz); the workers share this kernel."""
    if os.path.isdir(f"/sys/module/{module}"):
        return True
    for mp in ("modprobe", "/sbin/modprobe", "/usr/sbin/modprobe"):
        if shutil.which(mp):
            if subprocess.run([mp, "-n", "-q", module], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                return True
            break
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            return any(line.strip() in (f"{config}=y", f"{config}=m") for line in f)
    except OSError:
        return False


def bridge_gateway():
    """The default bridge's gateway (docker0): the manager's address the workers reach."""
    out = sh("docker", "network", "inspect", "bridge", "-f",
             "{{range .IPAM.Config}}{{.Gateway}} {{end}}", check=False)
    for g in out.split():
        if "." in g:
            return g
    return None


def find_build(given):
    for d in [given, os.path.join(ROOT, "build-rel"), os.path.join(ROOT, "build")]:
        if d and os.access(os.path.join(d, "src", "cli", "nbrun"), os.X_OK):
            return os.path.abspath(d)
    sys.exit("swarm.py: error: no nbrun binary in build-rel/ or build/; give --nbrun BUILD_DIR")


class Failed(Exception):
    pass


class Bench:
    def __init__(self, args):
        self.a = args
        self.build = find_build(args.nbrun)
        self.nbrun = os.path.join(self.build, "src", "cli", "nbrun")
        self.ver = version()
        self.runtime = f"jupyter-runtime:{self.ver}"
        self.serve = f"nbrun-serve:{self.ver}"
        self.workers = [f"{PREFIX}{i + 1}" for i in range(args.workers)]
        self.started = []          # worker containers made
        self.made_swarm = False
        self.made_gwbridge = False
        self.stack_up = False
        self.sandbox_seen = False  # a sandbox's hardening inspected
        self.next_look = 0.0
        self.tmp = tempfile.mkdtemp(prefix="nbrun-swarm.", dir="/var/tmp")
        self.failures = []
        self.figures = {}

    # ---- checks ------------------------------------------------------------------
    def check(self, ok, what):
        log(("ok: " if ok else "FAILED: ") + what)
        if not ok:
            self.failures.append(what)
        return ok

    def preflight(self):
        state = sh("docker", "info", "-f", "{{.Swarm.LocalNodeState}}")
        if state != "inactive":
            raise Failed(f"the host engine is already in a swarm (state {state}) that this "
                         "script did not make: refusing to touch it (docker swarm leave, if "
                         "it is yours)")
        left = [c for c in sh("docker", "ps", "-aq", "--filter", "label=nbrun.swarm=node").split() if c]
        if left:
            raise Failed(f"worker containers of an earlier run are still here ({len(left)}): "
                         f"docker rm -f $(docker ps -aq --filter label=nbrun.swarm=node)")
        # A worker's engine data of an earlier run: its old swarm state and
        # images would come back with a worker of the same name.
        vols = [v for v in sh("docker", "volume", "ls", "-q", "--filter", f"name={PREFIX}").split()
                if v.startswith(PREFIX) and v.endswith("-docker")]
        if vols:
            raise Failed(f"worker volumes of an earlier run are still here ({', '.join(vols)}): "
                         f"docker volume rm {' '.join(vols)}")
        st = os.statvfs("/var/lib/docker" if os.path.isdir("/var/lib/docker") else "/")
        free_gb = st.f_bavail * st.f_frsize / 2**30
        need = 4 * len(self.workers) + 4
        if free_gb < need:
            raise Failed(f"{free_gb:.0f} GiB free, {need} GiB wanted (each worker holds the runtime image)")
        if sh("ss", "-Hltn", f"sport = :{self.a.port}", check=False):
            raise Failed(f"port {self.a.port} is in use: give --port")
        self.made_gwbridge = not sh("docker", "network", "ls", "-q", "--filter", "name=^docker_gwbridge$")
        log(f"binary {self.nbrun}; {free_gb:.0f} GiB free; {len(self.workers)} workers")

    # ---- the swarm -----------------------------------------------------------------
    def make(self):
        t0 = time.monotonic()
        sh(SWARM, "image", "--nbrun", self.build, capture=False)
        sh(SWARM, "node-image", capture=False)
        self.figures["images_s"] = round(time.monotonic() - t0)

        t0 = time.monotonic()
        sh("docker", "swarm", "init", "--advertise-addr", self.a.advertise)
        self.made_swarm = True
        # The host's engine is shared: it manages, its sandboxes stay its users'.
        sh("docker", "node", "update", "--availability", "drain", sh("docker", "info", "-f", "{{.Swarm.NodeID}}"))
        token = sh("docker", "swarm", "join-token", "-q", "worker")
        for w in self.workers:
            self.started.append(w)
            sh(SWARM, "node", w, capture=False)
            sh("docker", "exec", w, "docker", "swarm", "join", "--token", token, f"{self.a.advertise}:2377")
        self.figures["swarm_s"] = round(time.monotonic() - t0)

        # Each image saved once, then loaded onto the workers side by side.
        t0 = time.monotonic()
        for img in (self.runtime, self.serve):
            path = os.path.join(self.tmp, "image.tar")
            log(f"saving {img}")
            sh("docker", "save", "-o", path, img)
            log(f"loading {img} onto {len(self.workers)} workers")
            procs = []
            for w in self.workers:
                f = open(path, "rb")
                procs.append((w, f, subprocess.Popen(["docker", "exec", "-i", w, "docker", "load", "-q"],
                                                     stdin=f, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.PIPE, text=True)))
            for w, f, p in procs:
                _, err = p.communicate()
                f.close()
                if p.returncode:
                    raise Failed(f"loading {img} onto {w} failed: {err.strip()[-300:]}")
            os.unlink(path)
        self.figures["load_s"] = round(time.monotonic() - t0)

    def deploy(self):
        t0 = time.monotonic()
        self.token_file = os.path.join(self.tmp, "token")
        with open(self.token_file, "w") as f:
            f.write(os.urandom(32).hex())
        os.chmod(self.token_file, 0o600)
        self.stack_up = True
        publish = self.a.publish
        if publish == "auto":
            # The routing mesh is IPVS in the nodes' kernels (the workers share this one).
            ipvs = os.path.isdir("/proc/sys/net/ipv4/vs") or kernel_has("ip_vs", "CONFIG_IP_VS")
            publish = "ingress" if ipvs else "host"
            if publish == "host":
                log("this kernel has no IPVS (no ip_vs module; dockerd logs 'error reading "
                    "the kernel parameter net.ipv4.vs.*' and programs no ingress rules, so the mesh's "
                    "port refuses connections on every node): publishing mode host on each node, "
                    "the batch given the nodes")
        self.figures["publish"] = publish
        # The stack's overlay is encrypted (IPsec ESP); the batches here make
        # no session calls, so nothing is forwarded over it: a kernel without
        # ESP gets a plain one rather than no test.
        overlay = "encrypted" if kernel_has("esp4", "CONFIG_INET_ESP") else "plain"
        if overlay == "plain":
            log("this kernel has no ESP (esp4): the stack's overlay is not encrypted (no session "
                "calls are made, nothing is forwarded)")
        self.figures["overlay"] = overlay
        sh(SWARM, "deploy", "--name", STACK, "--port", str(self.a.port), "--token-file",
           self.token_file, "--pool", str(self.a.pool), "--publish", publish,
           "--timeout", self.a.run_timeout, "--overlay", overlay, capture=False)
        # Every worker's task running, then the mesh answering health.
        deadline = time.monotonic() + 300
        while True:
            out = sh("docker", "service", "ps", f"{STACK}_serve", "--filter", "desired-state=running",
                     "--format", "{{.Node}} {{.CurrentState}}", check=False)
            running = {l.split()[0] for l in out.splitlines() if " Running " in f" {l} "}
            if running >= set(self.workers):
                break
            if time.monotonic() > deadline:
                raise Failed(f"the service did not run on every worker within 300 s: {out}")
            time.sleep(2)
        if publish == "ingress":
            urls = [f"http://{self.a.advertise}:{self.a.port}"]
        else:
            urls = [f"http://{sh('docker', 'inspect', '-f', '{{.NetworkSettings.IPAddress}}', w)}:{self.a.port}"
                    for w in self.workers]
        self.url = ",".join(urls)
        for url in urls:
            seen = 0
            while seen < (2 * len(self.workers) if publish == "ingress" else 1):
                r = subprocess.run(["curl", "-sf", "--max-time", "5", f"{url}/v1/health"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                seen = seen + 1 if r.returncode == 0 else 0
                if time.monotonic() > deadline:
                    raise Failed(f"the service does not answer on {url}")
                time.sleep(0.5)
        self.figures["deploy_s"] = round(time.monotonic() - t0)

    # ---- batches -------------------------------------------------------------------
    def notebooks(self):
        d = os.path.join(self.tmp, "nb")
        os.makedirs(d, exist_ok=True)
        paths = []
        for i in range(self.a.notebooks):
            code = (f"import socket, time\ntime.sleep({self.a.sleep})\n"
                    f"print('nb{i:02d}', {i} * 7)")
            nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {
                "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None,
                           "outputs": [], "source": code}]}
            p = os.path.join(d, f"nb{i:02d}.ipynb")
            with open(p, "w") as f:
                json.dump(nb, f)
            paths.append(p)
        return paths

    def batch(self, name, paths, on_progress=None):
        out = os.path.join(self.tmp, name)
        cmd = [self.nbrun, "batch", "--server", self.url, "--token-file", self.token_file,
               "-j", str(self.a.jobs), "--retries", str(self.a.retries), "-q", "-o", out] + paths
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = []
        t = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
        t.start()
        try:
            while p.poll() is None:
                if on_progress:
                    done = sum(os.path.exists(os.path.join(out, os.path.basename(x)[:-6], "result.json"))
                               for x in paths)
                    on_progress(done)
                time.sleep(0.5)
        except BaseException:
            # Ctrl-C, SIGTERM or a failed step: the batch goes too, before cleanup.
            p.kill()
            p.wait()
            raise
        t.join(5)
        wall = time.monotonic() - t0
        try:
            with open(os.path.join(out, "report.json")) as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            raise Failed(f"{name}: no report ({e}); batch said: {''.join(err)[-500:]}")
        return report, wall, p.returncode

    def judge(self, name, paths, report, wall, rc):
        entries = report.get("notebooks", [])
        per_node, bad, retried, attempts, why = {}, [], 0, 0, {}
        for e in entries:
            res = e.get("result") or {}
            want = f"{e['name']} {int(e['name'][2:]) * 7}\n"
            if e.get("status") != "ok" or res.get("stdout") != want:
                bad.append(f"{e['name']}: {e.get('status')} {e.get('first_error')}")
            node = res.get("node") or "?"
            per_node[node] = per_node.get(node, 0) + 1
            if e.get("retries"):
                retried += 1
                attempts += len(e["retries"])
                for r in e["retries"]:
                    # curl's message less the address: what went wrong, counted
                    k = r.get("error", "").split(": ")[-1][:60]
                    why[k] = why.get(k, 0) + 1
        fig = {"wall_s": round(wall, 1), "per_node": dict(sorted(per_node.items())),
               "notebooks_retried": retried, "retries": attempts, "retry_errors": why, "exit": rc}
        self.figures[name] = fig
        log(f"{name}: {json.dumps(fig)}")
        self.check(len(entries) == len(paths), f"{name}: {len(entries)} of {len(paths)} notebooks in the report")
        self.check(not bad, f"{name}: every notebook ok with its own output" +
                   (f" (not: {'; '.join(bad[:5])})" if bad else ""))
        self.check(rc == 0, f"{name}: nbrun batch exit {rc}")
        ran_on = [n for n in per_node if n.startswith(PREFIX)]
        self.check(len(ran_on) >= 2, f"{name}: ran on {len(ran_on)} nodes (>= 2 wanted)")
        return per_node

    def inspect_sandbox(self, _done):
        """One sandbox on a worker's inner engine, inspected there: the hardening
        of one machine. Tried every 2 s while the first batch runs."""
        if self.sandbox_seen or time.monotonic() < self.next_look:
            return
        self.next_look = time.monotonic() + 2
        for w in self.workers:
            ids = sh("docker", "exec", w, "docker", "ps", "-q", "--filter", "label=nbrun.run",
                     check=False).split()
            if not ids:
                continue
            # It may be gone between ps and inspect: then the next try.
            out = sh("docker", "exec", w, "docker", "inspect", ids[0], check=False)
            try:
                c = json.loads(out)[0]
            except (ValueError, IndexError):
                continue
            self.sandbox_seen = True
            hc = c.get("HostConfig") or {}
            opts = hc.get("SecurityOpt") or []
            seccomp = [o for o in opts if o.startswith("seccomp=")]
            fig = {"node": w, "container": ids[0][:12], "CapDrop": hc.get("CapDrop"),
                   "no_new_privileges": any(o.split(":")[0] == "no-new-privileges" and
                                            not o.endswith(":false") for o in opts),
                   "seccomp": "profile" if seccomp and seccomp[0] != "seccomp=unconfined"
                   else (seccomp[0] if seccomp else "default"),
                   "NetworkMode": hc.get("NetworkMode"), "Memory": hc.get("Memory"),
                   "PidsLimit": hc.get("PidsLimit")}
            self.figures["sandbox"] = fig
            log(f"sandbox on {w}: {json.dumps(fig)}")
            self.check("ALL" in (fig["CapDrop"] or []), f"sandbox on {w}: CapDrop ALL")
            self.check(fig["no_new_privileges"], f"sandbox on {w}: no-new-privileges")
            self.check(fig["seccomp"] == "profile", f"sandbox on {w}: nbrun's seccomp profile")
            self.check(fig["NetworkMode"] == "none", f"sandbox on {w}: network none")
            self.check(fig["Memory"] == 2**30, f"sandbox on {w}: 1 GiB memory")
            self.check(fig["PidsLimit"] == 256, f"sandbox on {w}: 256 pids")
            return

    def run(self):
        paths = self.notebooks()
        report, wall, rc = self.batch("batch", paths, self.inspect_sandbox)
        self.check(self.sandbox_seen, "batch: a sandbox on a worker inspected")
        self.judge("batch", paths, report, wall, rc)

        victim = self.workers[0]
        killed = {}

        def progress(done):
            if not killed and done >= self.a.kill_after:
                busy = sh("docker", "exec", victim, "docker", "ps", "-q", "--filter", "label=nbrun.run",
                          check=False).split()
                sh("docker", "kill", victim, check=False)
                killed.update(at=done, sandboxes=len(busy))
                log(f"killed {victim} after {done} results ({len(busy)} sandboxes on it)")

        report, wall, rc = self.batch("kill", paths, progress)
        self.check(bool(killed), f"kill: {victim} killed mid-batch")
        self.figures["killed"] = dict(node=victim, **killed)
        self.judge("kill", paths, report, wall, rc)

        # The stack removed: each server removes its sandboxes on SIGTERM.
        self.remove_stack()
        left = {}
        for w in self.workers[1:]:
            c = sh("docker", "exec", w, "docker", "ps", "-aq", "--filter", "label=nbrun.run").split()
            v = sh("docker", "exec", w, "docker", "volume", "ls", "-q", "--filter", "label=nbrun.run").split()
            left[w] = {"containers": len(c), "volumes": len(v)}
        self.figures["leftovers"] = left
        self.check(all(x["containers"] == 0 and x["volumes"] == 0 for x in left.values()),
                   f"nothing left on the surviving nodes: {json.dumps(left)}")

    def remove_stack(self):
        if not self.stack_up:
            return
        sh(SWARM, "remove", "--name", STACK, check=False, capture=False)
        deadline = time.monotonic() + 120
        alive = [w for w in self.workers if w in self.started and
                 sh("docker", "inspect", "-f", "{{.State.Running}}", w, check=False) == "true"]
        while time.monotonic() < deadline:
            busy = [w for w in alive if sh("docker", "exec", w, "docker", "ps", "-q", "--filter",
                                           f"label=com.docker.stack.namespace={STACK}", check=False)]
            if not busy:
                break
            time.sleep(2)
        self.stack_up = False

    # ---- cleanup -------------------------------------------------------------------
    def cleanup(self):
        log("cleaning up")
        try:
            self.remove_stack()
        except Exception as e:  # noqa: BLE001 - cleanup goes on
            log(f"stack removal: {e}")
        for w in self.started:
            sh("docker", "rm", "-f", "-v", w, check=False)
            sh("docker", "volume", "rm", f"{w}-docker", check=False)
            # The inner engine's cgroups (empty once its processes are gone):
            # /sys/fs/cgroup/<worker> on cgroup v2 (one tree: cgroup.controllers
            # at the top), /sys/fs/cgroup/<controller>/<worker> on v1.
            if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                tops = [os.path.join("/sys/fs/cgroup", w)]
            else:
                tops = [os.path.join("/sys/fs/cgroup", ctl, w) for ctl in os.listdir("/sys/fs/cgroup")
                        if not os.path.islink(os.path.join("/sys/fs/cgroup", ctl))]
            for top in tops:
                if not os.path.isdir(top):
                    continue
                for dirpath, _, _ in sorted(os.walk(top), key=lambda x: -len(x[0])):
                    try:
                        os.rmdir(dirpath)
                    except OSError:
                        pass
        if self.made_swarm:
            sh("docker", "swarm", "leave", "--force", check=False)
            if self.made_gwbridge:
                sh("docker", "network", "rm", "docker_gwbridge", check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        state = sh("docker", "info", "-f", "{{.Swarm.LocalNodeState}}", check=False)
        left = sh("docker", "ps", "-aq", "--filter", "label=nbrun.swarm=node", check=False)
        log(f"host swarm state {state}; worker containers left: {len(left.split())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nbrun", help="meson build directory (default build-rel, else build)")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--notebooks", type=int, default=30)
    ap.add_argument("-j", "--jobs", type=int, default=6)
    ap.add_argument("--retries", type=int, default=6, help="nbrun batch --retries")
    ap.add_argument("--pool", type=int, default=1, help="warm sandboxes per server")
    ap.add_argument("--run-timeout", default="10m",
                    help="the servers' --timeout: cold kernels start slowly on a loaded machine")
    ap.add_argument("--sleep", type=float, default=3, help="seconds each notebook sleeps")
    ap.add_argument("--kill-after", type=int, default=8, help="results before a worker is killed")
    ap.add_argument("--port", type=int, default=28411, help="published port")
    ap.add_argument("--publish", choices=["auto", "ingress", "host"], default="auto",
                    help="the routing mesh, or each node's port (auto: the mesh when the kernel has IPVS)")
    ap.add_argument("--advertise", help="manager address the workers reach "
                    "(default: the bridge network's gateway, docker0)")
    a = ap.parse_args()
    if a.workers < 3:
        ap.error("--workers: at least 3 (one is killed, two must remain)")
    if not a.advertise:
        a.advertise = bridge_gateway()
        if not a.advertise:
            ap.error("--advertise: the engine's bridge network has no IPv4 gateway; give the address")
    b = Bench(a)

    def stop(sig, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    t0 = time.monotonic()
    try:
        b.preflight()
        b.make()
        b.deploy()
        b.run()
    except KeyboardInterrupt:
        b.failures.append("interrupted")
    except (Failed, RuntimeError, subprocess.TimeoutExpired) as e:
        b.failures.append(str(e))
        log(f"error: {e}")
    finally:
        # Cleanup runs to its end: a second Ctrl-C or a SIGTERM would leave
        # workers, volumes or the swarm behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        b.cleanup()
    b.figures["total_s"] = round(time.monotonic() - t0)
    b.figures["failures"] = b.failures
    print(json.dumps(b.figures, indent=1))
    sys.exit(1 if b.failures else 0)


if __name__ == "__main__":
    main()
