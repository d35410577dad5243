# SPDX-License-Identifier: MIT
"""The egress image's own parts on the host, without squid or an engine:
the policy helper (environments/egress/nbrun-egress-policy) as squid asks
it, and the relay (nbrun-egress-relay) against a canned proxy: bytes both
ways, what it logs, denials, the byte cap."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

EGRESS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "environments", "egress"))
POLICY = os.path.join(EGRESS, "nbrun-egress-policy")
RELAY = os.path.join(EGRESS, "nbrun-egress-relay")


def open_text(path):
    with open(path) as f:
        return f.read()


def load_policy(policy_dir):
    ns = {"__name__": "nbrun_egress_policy"}
    with open(POLICY) as f:
        exec(compile(f.read(), POLICY, "exec"), ns)
    ns["POLICY_DIR"] = policy_dir
    return ns


class PolicyTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="nbrun-policy-")
        with open(os.path.join(self.dir, "172.18.0.3"), "w") as f:
            f.write("*.debian.org 443\ndeb.debian.org 80\n10.1.2.3 8080\n2001:db8::1 443\n")
        self.p = load_policy(self.dir)

    def test_rules(self):
        a = self.p["allowed"]
        cases = [
            ("listed", "deb.debian.org", "443", True),
            ("listed", "DEB.Debian.ORG.", "443", True),      # case and a final dot
            ("listed", "debian.org", "443", False),          # *. is below the name only
            ("listed", "deb.debian.org", "80", True),
            ("listed", "security.debian.org", "80", False),  # the port is the rule's
            ("listed", "evildebian.org", "443", False),
            ("listed", "deb.debian.org.evil.example", "443", False),
            ("listed", "10.1.2.3", "8080", True),
            ("listed", "10.1.2.3", "80", False),
            ("listed", "[2001:db8::1]", "443", True),
            ("listed", "2001:db8:0::1", "443", True),        # the same address
            ("exact", "deb.debian.org", "80", False),        # a name is never exact
            ("exact", "10.1.2.3", "8080", True),
            ("exact", "10.1.2.4", "8080", False),
            ("listed", "deb.debian.org", "x", False),
        ]
        for mode, host, port, want in cases:
            self.assertEqual(a(mode, "172.18.0.3", host, port), want, (mode, host, port))

    def test_other_sources_and_bad_names_refused(self):
        a = self.p["allowed"]
        self.assertFalse(a("listed", "172.18.0.4", "deb.debian.org", "443"))
        self.assertFalse(a("listed", "../172.18.0.3", "deb.debian.org", "443"))
        self.assertFalse(a("listed", "", "deb.debian.org", "443"))

    def test_as_squid_runs_it(self):
        env = dict(os.environ)
        src = open_text(POLICY).replace('POLICY_DIR = "/run/nbrun-policy"', "POLICY_DIR = %r" % self.dir)
        script = os.path.join(self.dir, "helper")
        with open(script, "w") as f:
            f.write(src)
        p = subprocess.run([sys.executable, "-I", script, "listed"], env=env, capture_output=True, text=True,
                           input="172.18.0.3 deb.debian.org 443 -\n172.18.0.3 example.com 443 -\nbad\n",
                           timeout=30)
        self.assertEqual(p.stdout.split(), ["OK", "ERR", "ERR"])


class CannedProxy:
    """A TCP server answering like squid: 403 with X-Squid-Error for hosts named
    'denied...', else 200 (CONNECT) and then echo, or an HTTP reply."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            c, _ = self.sock.accept()
            threading.Thread(target=self.one, args=(c,), daemon=True).start()

    def one(self, c):
        data = b""
        while b"\r\n\r\n" not in data:
            more = c.recv(4096)
            if not more:
                c.close()
                return
            data += more
        line = data.split(b"\r\n", 1)[0]
        if b"denied" in line:
            c.sendall(b"HTTP/1.1 403 Forbidden\r\nX-Squid-Error: ERR_ACCESS_DENIED 0\r\nContent-Length: 0\r\n\r\n")
            c.close()
            return
        if line.startswith(b"CONNECT"):
            c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = data.split(b"\r\n\r\n", 1)[1]
            if rest:
                c.sendall(rest)
            try:
                while True:
                    more = c.recv(65536)
                    if not more:
                        break
                    c.sendall(more)
            except OSError:
                pass
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        c.close()


class RelayTest(unittest.TestCase):
    def start(self, cap):
        self.dir = tempfile.mkdtemp(prefix="nbrun-relay-")
        self.path = os.path.join(self.dir, "proxy.sock")
        self.proxy = CannedProxy()
        self.proc = subprocess.Popen([sys.executable, "-I", RELAY, self.path, "127.0.0.1:%d" % self.proxy.port,
                                      str(cap)], stdout=subprocess.PIPE, text=True)
        deadline = time.time() + 10
        while time.time() < deadline:  # bound before it listens: wait for both
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.02)
        self.assertTrue(os.path.exists(self.path))
        self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o666)

    def tearDown(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()

    def talk(self, payload, read_until_close=True):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(self.path)
        s.sendall(payload)
        got = b""
        try:
            while read_until_close:
                more = s.recv(65536)
                if not more:
                    break
                got += more
                if payload.startswith(b"CONNECT") and len(got) >= len(payload) - payload.index(b"\r\n\r\n") - 4 + 39 \
                        and b"denied" not in payload:
                    break
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()
        return got

    def logs(self, n):
        out = []
        while len(out) < n:
            line = self.proc.stdout.readline()
            if not line:
                break
            out.append(json.loads(line))
        return out

    def test_connect_counts_and_logs(self):
        self.start(1 << 20)
        body = b"x" * 1000
        got = self.talk(b"CONNECT deb.debian.org:443 HTTP/1.1\r\nHost: deb.debian.org\r\n\r\n" + body)
        self.assertTrue(got.startswith(b"HTTP/1.1 200"))
        [log] = self.logs(1)
        self.assertEqual((log["host"], log["port"], log["method"], log["status"], log["denied"], log["cut"]),
                         ("deb.debian.org", 443, "CONNECT", 200, False, False))
        self.assertGreaterEqual(log["sent"], 1000)
        self.assertGreaterEqual(log["received"], 1000)

    def test_denied_and_plain_http(self):
        self.start(1 << 20)
        got = self.talk(b"CONNECT denied.example:443 HTTP/1.1\r\n\r\n")
        self.assertIn(b"403", got)
        self.talk(b"GET http://[2001:db8::1]:8080/x HTTP/1.1\r\nHost: x\r\n\r\n")
        a, b = self.logs(2)
        self.assertEqual((a["host"], a["port"], a["status"], a["denied"], a["error"]),
                         ("denied.example", 443, 403, True, "ERR_ACCESS_DENIED"))
        self.assertEqual((b["host"], b["port"], b["method"], b["status"], b["denied"], b["error"]),
                         ("2001:db8::1", 8080, "GET", 200, False, None))

    def test_open_connections_on_usr1(self):
        self.start(1 << 20)
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(self.path)
        s.sendall(b"CONNECT long.example:443 HTTP/1.1\r\n\r\nabc")
        got = b""
        while b"abc" not in got:
            got += s.recv(100)
        self.proc.send_signal(signal.SIGUSR1)
        a, b = self.logs(2)
        self.assertEqual((a["host"], a["open"], a["status"]), ("long.example", True, 200))
        self.assertGreaterEqual(a["sent"], 3)
        self.assertEqual(b, {"end": True})
        s.close()

    def test_cap_cuts(self):
        self.start(5000)
        self.talk(b"CONNECT big.example:443 HTTP/1.1\r\n\r\n" + b"y" * 20000)
        logs = self.logs(2)
        self.assertIn({"cap": 5000}, logs)
        conn = [l for l in logs if "host" in l][0]
        self.assertTrue(conn["cut"])
        self.assertLessEqual(conn["sent"] + conn["received"], 5000 + 65536)
        # no more connections once capped
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(self.path)
        try:
            s.sendall(b"CONNECT again.example:443 HTTP/1.1\r\n\r\n")
            self.assertEqual(s.recv(100), b"")
        except (ConnectionResetError, BrokenPipeError):
            pass  # cut before or after the request: either way, nothing comes back
        s.close()


if __name__ == "__main__":
    unittest.main()
