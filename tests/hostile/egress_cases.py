#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Hostile code against the egress proxy of --allow-net (docs/network.md).

Usage: egress_cases.py CASE
The code speaks raw HTTP to the agent's listener (127.0.0.1:3128, where
the kernel's HTTP_PROXY points), bypassing every client library: CONNECT
and absolute-form requests to loopback, private and metadata addresses in
every spelling, header tricks and request smuggling, aimed at a server on
the host that counts what reaches it; and a second sandbox that tries to
use the first's allow-list. The allowed host is the machine's npm registry
(from `npm config get registry`, read at run time).
"""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from run_cases import check, engine, fail, leftovers  # noqa: E402
from net_cases import HostServer, bridge_gateway, ca_bundle, npm_registry, relays  # noqa: E402
from run_cases import run  # noqa: E402
from serve_cases import Server  # noqa: E402

RAW = r'''
import json, socket
def ask(raw, timeout=20):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=timeout)
    s.sendall(raw)
    got = b""
    try:
        while len(got) < 65536:
            more = s.recv(65536)
            if not more:
                break
            got += more
            if b"\r\n\r\n" in got and not got.startswith(b"HTTP/1.1 200"):
                break
    except OSError:
        pass
    s.close()
    return got.split(b"\r\n", 1)[0].decode("latin-1")
out = {}
'''


class CountingServer(HostServer):
    """The host's server, counting every request that reaches it."""

    def __init__(self):
        import http.server
        hits = self.hits = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"host secret")
            do_POST = do_GET

            def log_message(self, *a):
                pass
        self.srv = http.server.ThreadingHTTPServer(("0.0.0.0", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()


def case_pivot():
    npm_host, npm = npm_registry()
    host = CountingServer()
    try:
        gw, p = bridge_gateway(), host.port
        asks = {
            "connect_loopback": "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (p, p),
            "connect_gateway": "CONNECT %s:%d HTTP/1.1\r\n\r\n" % (gw, p),
            "connect_v6_loopback": "CONNECT [::1]:%d HTTP/1.1\r\n\r\n" % p,
            "connect_mapped": "CONNECT [::ffff:127.0.0.1]:%d HTTP/1.1\r\n\r\n" % p,
            "connect_proxy_itself": "CONNECT nbrun-egress-proxy:3128 HTTP/1.1\r\n\r\n",
            "connect_allowed_name_other_port": "CONNECT %s:%d HTTP/1.1\r\n\r\n" % (npm_host, p),
            "get_gateway": "GET http://%s:%d/x HTTP/1.1\r\nHost: %s\r\n\r\n" % (gw, p, gw),
            "get_short_ip": "GET http://127.1:%d/x HTTP/1.1\r\nHost: 127.1\r\n\r\n" % p,
            "get_decimal_ip": "GET http://2130706433:%d/x HTTP/1.1\r\nHost: x\r\n\r\n" % p,
            "get_hex_ip": "GET http://0x7f.0.0.1:%d/x HTTP/1.1\r\nHost: x\r\n\r\n" % p,
            "get_metadata": "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n",
            "get_userinfo": "GET http://%s@127.0.0.1:%d/x HTTP/1.1\r\nHost: x\r\n\r\n" % (npm_host, p),
            "host_header_trick": "GET http://%s/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (npm_host, p),
            "origin_form": "GET /x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % p,
            "smuggle_cl_te": ("POST http://%s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: 60\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://127.0.0.1:%d/smuggled HTTP/1.1\r\n"
                              "Host: x\r\n\r\n") % (npm_host, npm_host, p),
            "smuggle_pipelined": ("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n"
                                  "GET http://127.0.0.1:%d/pipelined HTTP/1.1\r\nHost: x\r\n\r\n") % (npm_host, npm_host, p),
            "gopher_scheme": "GET gopher://127.0.0.1:%d/x HTTP/1.1\r\nHost: x\r\n\r\n" % p,
            "trace_method": "TRACE http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (npm_host, npm_host),
        }
        code = RAW + "".join("out[%r] = ask(%r.encode())\n" % (k, v) for k, v in asks.items())
        code += "print(json.dumps(out))\n"
        # the rules allow the registry and even localhost by name: neither opens the host
        rc, doc, out, err = run(["--allow-net", npm_host, "--allow-net", "localhost:%d" % p,
                                 "--ca-certs", ca_bundle(), "-c", code], timeout=300)
        check(rc in (0, 1) and doc is not None, "exit %d: %s" % (rc, err[-500:]))
        got = json.loads(doc["stdout"].strip().splitlines()[-1])
        for name, line in got.items():
            if name in ("host_header_trick", "smuggle_pipelined", "smuggle_cl_te"):
                # reached the allowed registry (or was refused): never the host
                continue
            check(not line.startswith("HTTP/1.1 200") and not line.startswith("HTTP/1.0 200"),
                  "%s got through: %r" % (name, line))
        time.sleep(1)
        check(not host.hits, "requests reached the host's server: %r (answers %r)" % (host.hits, got))
        check(not relays(), "relays left: %r" % relays())
        return "%d pivots (CONNECT and absolute forms to loopback, gateway, mapped and odd IP spellings, metadata, the proxy itself, smuggling, header tricks) refused; nothing reached the host" % len(asks)
    finally:
        host.srv.shutdown()


def case_other_sandbox():
    """B, allowed nothing of A's, runs while A's session is open: A's list never opens a host for B."""
    npm_host, npm = npm_registry()
    srv = Server(extra=["--allow-net", npm_host + ":443", "--allow-net", "example.com",
                        "--ca-certs", ca_bundle()])
    try:
        st, doc = srv.json("/v1/sessions", {"allow_net": [npm_host + ":443"]})
        check(st == 201, "A: %d %r" % (st, doc))
        sid = doc["id"]
        code = RAW + ('out["a"] = ask(b"CONNECT %s:443 HTTP/1.1\\r\\n\\r\\n")\n'
                      'import os\nout["socks"] = os.listdir("/run/nbrun-egress")\n'
                      'print(json.dumps(out))\n') % npm_host
        st, a = srv.json("/v1/sessions/%s/execute" % sid, {"code": code})
        check(st == 200 and json.loads(a["stdout"])["a"].startswith("HTTP/1.1 200"), "A allowed: %r" % a)
        # B, at the same time, with another list: A's host is refused to it
        st, b = srv.json("/v1/runs", {"code": code, "allow_net": ["example.com"]})
        got = json.loads(b["stdout"])
        check(st == 200 and "403" in got["a"], "B reached A's host: %r" % got)
        check(set(got["socks"]) == {"proxy.sock", "ca.pem"}, "B sees only its own relay and CA bundle: %r" % got)
        # C, with no list, has no proxy at all
        st, c = srv.json("/v1/runs", {"code": code})
        check(c["status"] == "error" and "network" not in c, "C: %r" % c)
        srv.json("/v1/sessions/" + sid, method="DELETE")
        srv.proc.send_signal(signal.SIGTERM)
        check(srv.proc.wait(60) == 0 and not relays(), "after SIGTERM: relays %r" % relays())
        return "while A's session was open with its host, B (another list) was refused that host and saw only its own relay; C had no proxy"
    finally:
        srv.stop()


def main():
    cases = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        print("usage: egress_cases.py CASE\ncases: %s" % " ".join(sorted(cases)), file=sys.stderr)
        return 2
    print("held %s: %s" % (sys.argv[1], cases[sys.argv[1]]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
