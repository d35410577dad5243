# SPDX-License-Identifier: MIT
"""Headless Chromium (Debian's chromium) driven over the DevTools protocol on a
pipe (--remote-debugging-pipe: fd 3 in, fd 4 out, messages ended by NUL), so
that a test needs nothing but the standard library: open a page, wait for it
to load, read its DOM in every frame, take a screenshot, and collect what the
page printed to its console and what the browser refused (CSP, sandbox)."""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


def find():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    def __init__(self, width=1280, height=900):
        exe = find()
        if not exe:
            raise RuntimeError("no chromium: apt-get install chromium")
        self.profile = tempfile.mkdtemp(prefix="nbrun-chromium-")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # Out of the way of 3 and 4, where the child wants them.
        hi_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
        hi_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
        os.close(to_child_r)
        os.close(from_child_w)

        def child():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--metrics-recording-only",
             "--disable-dev-shm-usage", "--remote-debugging-pipe", "--user-data-dir=" + self.profile,
             "--window-size=%d,%d" % (width, height), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child, close_fds=False)
        os.close(hi_r)
        os.close(hi_w)
        self.wr, self.rd = to_child_w, from_child_r
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None
        self.width, self.height = width, height

    def close(self):
        try:
            self.send("Browser.close", session=False, wait=False)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.wr, self.rd):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the protocol ----------------------------------------------------
    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("chromium did not answer")
            r, _, _ = select.select([self.rd], [], [], left)
            if r:
                chunk = os.read(self.rd, 1 << 20)
                if not chunk:
                    raise EOFError("chromium went away")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=True, wait=True, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if isinstance(session, str):
            msg["sessionId"] = session
        elif session and self.session:
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self.wr, data):]
        if not wait:
            return None
        deadline = time.time() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        for i, m in enumerate(self.events):
            if m["method"] == method:
                return self.events.pop(i)
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method:
                return m
            if "method" in m:
                self.events.append(m)

    def drain(self, seconds):
        """Collect the events of the next few seconds (late loads, console)."""
        deadline = time.time() + seconds
        try:
            while True:
                m = self._read_message(deadline)
                if "method" in m:
                    self.events.append(m)
        except TimeoutError:
            pass

    # ---- pages -------------------------------------------------------------
    def open(self, url, timeout=60):
        """A new tab at url, loaded: its frames' DOM readable with evaluate()."""
        if self.session:
            self.send("Target.closeTarget", {"targetId": self.target}, session=False)
            self.session = None
        self.target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": self.target, "flatten": True},
                                 session=False)["sessionId"]
        self.events = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(domain + ".enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", timeout)
        self.drain(1.0)

    def evaluate(self, expression, session=True):
        """The value of expression in the page (or in a frame's session:
        subframes()); DevTools evaluation is not subject to the page's CSP."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        r = self.send("Runtime.evaluate", params, session=session)
        if "exceptionDetails" in r:
            raise RuntimeError("evaluate %r: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def subframes(self):
        """The page's frames that run in their own process (a sandboxed iframe
        does): {url: session} to evaluate() in."""
        out = {}
        for t in self.send("Target.getTargets", session=False)["targetInfos"]:
            if t["type"] == "iframe" and t.get("parentId") == self.target:
                out[t["url"]] = self.send("Target.attachToTarget",
                                          {"targetId": t["targetId"], "flatten": True},
                                          session=False)["sessionId"]
        return out

    def screenshot(self, path):
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": min(size["width"], 1600),
                     "height": min(size["height"], 4000), "scale": 1}})
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def console(self):
        """What any frame printed with console.*."""
        return [" ".join(str(a.get("value", a.get("description", ""))) for a in e["params"]["args"])
                for e in self.events if e["method"] == "Runtime.consoleAPICalled"]

    def log(self):
        """The browser's own messages: CSP refusals, sandbox blocks, failed loads."""
        return [e["params"]["entry"]["text"] for e in self.events if e["method"] == "Log.entryAdded"]

    def requests(self):
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]
