#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Networks by allow-list (--allow-net, docs/network.md), real engine, image,
egress proxy (squid) and real hosts.

Usage: net_cases.py CASE   (one meson test per case; see meson.build)
The hosts are read from this machine's own configuration when the test
runs, never written here: the npm registry from `npm config get registry`
(HTTPS) and the Debian mirror from apt's sources (HTTP). The CA bundle the
sandbox trusts is the host's own (SSL_CERT_FILE, else Debian's bundle), so
a machine whose egress inspects TLS works as one whose does not.
"""
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import http.server
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_cases import NBRUN, check, engine, fail, leftovers, run, validate  # noqa: E402
from serve_cases import Server  # noqa: E402


def npm_registry():
    """(host, base URL) of the machine's npm registry, over HTTPS."""
    out = subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    u = urllib.parse.urlsplit(out)
    check(u.scheme == "https" and u.hostname, "npm registry %r is not an https URL" % out)
    return u.hostname, "https://%s%s" % (u.netloc, u.path.rstrip("/"))


def apt_mirror():
    """(host, base URL) of the machine's Debian mirror, over HTTP."""
    lines = []
    for path in ["/etc/apt/sources.list"] + glob.glob("/etc/apt/sources.list.d/*"):
        try:
            with open(path) as f:
                lines += f.read().splitlines()
        except OSError:
            pass
    for line in lines:
        m = re.match(r"^(?:deb\s+(?:\[[^]]*\]\s+)?|URIs:\s*)(http://\S+)", line.strip())
        if m and "security" not in m.group(1):
            u = urllib.parse.urlsplit(m.group(1))
            return u.hostname, m.group(1).rstrip("/")
    fail("no http:// Debian mirror in apt's sources")


def ca_bundle():
    for path in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if path and os.path.isfile(path):
            return path
    fail("no CA bundle on the host")


def relays():
    return leftovers(label="nbrun.egress=relay")


def proxy_running():
    cs = engine("/containers/json?filters=" + urllib.parse.quote(json.dumps({"name": ["nbrun-egress-proxy"]})))
    return any(c["Names"][0] == "/nbrun-egress-proxy" for c in cs)


FETCH = r'''
import json, os, socket, urllib.request
out = {}
def get(name, url):
    try:
        r = urllib.request.urlopen(url, timeout=30)
        out[name] = [r.status, len(r.read())]
    except Exception as e:
        out[name] = [0, str(e)[:200]]
'''


def fetch_code(urls, through_proxy=False):
    """Code fetching each url; through_proxy: loopback too goes to the proxy (NO_PROXY dropped)."""
    code = FETCH
    if through_proxy:
        code += 'os.environ.pop("NO_PROXY", None)\nos.environ.pop("no_proxy", None)\n'

    for name, url in urls.items():
        code += "get(%r, %r)\n" % (name, url)
    code += ('try:\n    socket.getaddrinfo(%r, 443)\n    out["resolver"] = True\n'
             'except OSError:\n    out["resolver"] = False\n' % npm_registry()[0])
    code += "print(json.dumps(out))\n"
    return code


def fetched(doc):
    check(doc is not None and doc.get("stdout"), "no output: %r" % doc)
    return json.loads(doc["stdout"].strip().splitlines()[-1])


class HostServer:
    """An HTTP server on every address of the host: what a sandbox must not reach."""

    def __init__(self):
        self.srv = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()


def bridge_gateway():
    nets = engine("/networks/bridge")
    return nets["IPAM"]["Config"][0]["Gateway"]


# ---- cases -----------------------------------------------------------------

def case_allow_fetch():
    npm_host, npm = npm_registry()
    apt_host, apt = apt_mirror()
    code = fetch_code({"https": npm + "/is-number", "http": apt + "/dists/bookworm/Release",
                       "other": "https://example.com/", "other_port": "https://%s:8443/" % npm_host})
    rc, doc, out, err = run(["--allow-net", npm_host + ":443", "--allow-net", apt_host + ":80",
                             "--ca-certs", ca_bundle(), "-c", code], timeout=300)
    check(rc == 0, "exit %d: %r %s" % (rc, doc and doc.get("error"), err[-500:]))
    validate(doc)
    got = fetched(doc)
    check(got["https"][0] == 200 and got["https"][1] > 100, "HTTPS through the proxy: %r" % got)
    check(got["http"][0] == 200 and got["http"][1] > 100, "HTTP through the proxy: %r" % got)
    check(got["other"][0] == 0 and "403" in got["other"][1], "another host refused: %r" % got)
    check(got["other_port"][0] == 0 and "403" in got["other_port"][1], "another port refused: %r" % got)
    check(got["resolver"] is False, "the sandbox resolved a name: %r" % got)
    net = doc["network"]
    check(net["allow"] == [npm_host + ":443", apt_host + ":80"], "policy: %r" % net["allow"])
    hosts = {(r["host"], r["port"], r["allowed"]) for r in net["requests"]}
    check((npm_host, 443, True) in hosts and (apt_host, 80, True) in hosts, "allowed: %r" % hosts)
    check(("example.com", 443, False) in hosts and (npm_host, 8443, False) in hosts, "refused: %r" % hosts)
    check(net["denied"] == ["example.com", npm_host] or set(net["denied"]) == {"example.com", npm_host},
          "denied: %r" % net["denied"])
    check(net["bytes_received"] > 1000 and not net["capped"], "bytes: %r" % net)
    check(not leftovers(doc["run_id"]) and not relays(), "left: %r %r" % (leftovers(doc["run_id"]), relays()))
    check(not proxy_running(), "the proxy outlived the run")
    # R's download.file reads the proxy variables too
    rc, doc, out, err = run(["-l", "r", "--allow-net", npm_host + ":443", "--ca-certs", ca_bundle(), "-c",
                             'f <- tempfile(); download.file("%s/is-number", f, quiet=TRUE); cat(file.size(f))'
                             % npm], timeout=300)
    check(rc == 0 and int(doc["stdout"].strip()) > 100, "R download.file: %d %r" % (rc, doc and doc.get("stdout")))
    # the human output names the refused hosts
    p = subprocess.run([NBRUN, "run", "-o", out + "-h", "--allow-net", npm_host + ":443", "--ca-certs",
                        ca_bundle(), "-c", fetch_code({"other": "https://example.com/"})],
                       capture_output=True, text=True, timeout=300)
    check("refused" in p.stdout and "example.com" in p.stdout, "human output: %r" % p.stdout[-800:])
    return "HTTPS to %s and HTTP to %s fetched; another host and port refused in the cell and listed; no resolver; nothing left" % (npm_host, apt_host)


def case_refused():
    npm_host, npm = npm_registry()
    host = HostServer()
    try:
        gw = bridge_gateway()
        urls = {
            "ip_literal": "http://1.1.1.1/",
            "loopback": "http://127.0.0.1:%d/" % host.port,
            "gateway": "http://%s:%d/" % (gw, host.port),
            "metadata": "http://169.254.169.254/latest/meta-data/",
            "localhost": "http://localhost:%d/" % host.port,
            "private_listed_name": "http://private.nbrun-test.invalid:%d/" % host.port,
        }
        # names allowed, even localhost: what they resolve to is refused all the same
        rc, doc, out, err = run(["--allow-net", "localhost:%d" % host.port, "--allow-net", npm_host + ":443",
                                 "--ca-certs", ca_bundle(), "-c", fetch_code(urls, True)], timeout=300)
        check(rc == 0, "exit %d: %s" % (rc, err[-500:]))
        got = fetched(doc)
        for name in urls:
            check(got[name][0] == 0, "%s reached: %r" % (name, got[name]))
        check(all("403" in got[n][1] or "Forbidden" in got[n][1] for n in urls), "refused by the proxy: %r" % got)
        denied = set(doc["network"]["denied"])
        check({"1.1.1.1", "127.0.0.1", gw, "169.254.169.254", "localhost"} <= denied, "denied: %r" % denied)
        # the sandbox has no route of its own to any of them, with or without the proxy
        code = ("import socket, json\nres = {}\n"
                "for a in [('127.0.0.1', %d), (%r, %d), ('169.254.169.254', 80), ('1.1.1.1', 80)]:\n"
                "    s = socket.socket(); s.settimeout(3)\n"
                "    try:\n        s.connect(a); res[a[0]] = 'open'\n"
                "    except OSError as e:\n        res[a[0]] = e.errno\n"
                "print(json.dumps(res))\n") % (host.port, gw, host.port)
        rc, doc, out, err = run(["--allow-net", npm_host + ":443", "-c", code])
        direct = json.loads(doc["stdout"].strip())
        check("open" not in direct.values(), "a direct connection got through: %r" % direct)
        # without --allow-net nothing changes: no proxy, no network
        rc, doc, out, err = run(["-c", "import os, urllib.request\nprint(os.environ.get('HTTPS_PROXY'))\n"
                                 "urllib.request.urlopen('https://%s/', timeout=5)" % npm_host])
        check(doc["status"] == "error" and doc["stdout"].strip() == "None" and "network" not in doc,
              "without --allow-net: %r" % doc)
        check(not relays(), "relays left: %r" % relays())
        return "IP literal, loopback, localhost, the bridge gateway %s and 169.254.169.254 refused after resolution; no direct route; without --allow-net no proxy" % gw
    finally:
        host.close()


def case_byte_cap():
    npm_host, npm = npm_registry()
    code = fetch_code({"big": npm + "/typescript"})
    rc, doc, out, err = run(["--allow-net", npm_host + ":443", "--net-bytes", "200K", "--ca-certs", ca_bundle(),
                             "-c", code], timeout=300)
    check(rc == 0, "exit %d: %s" % (rc, err[-500:]))
    got = fetched(doc)
    net = doc["network"]
    check(got["big"][0] == 0, "the download was not cut: %r" % got)
    check(net["capped"] and net["bytes_cap"] == 200 * 1024, "capped: %r" % net)
    check(any(r["cut"] for r in net["requests"]), "no connection marked cut: %r" % net["requests"])
    check(net["bytes_sent"] + net["bytes_received"] < 200 * 1024 + 256 * 1024, "bytes past the cap: %r" % net)
    return "a download past --net-bytes 200K was cut and the result says so"


def case_usage():
    for args, words in ((["--allow-net", "exa*mple.org"], "not a host to allow"),
                        (["--allow-net", "example.org:0"], "port"),
                        (["--allow-net", "example.org", "--network", "bridge"], "--network none"),
                        (["--ca-certs", "/etc/hostname"], "give the hosts too"),
                        (["--allow-net", "example.org", "--ca-certs", "/etc/hostname"], "no PEM certificate"),
                        (["--allow-net", "example.org", "--runtime", "runsc"], "runsc")):
        p = subprocess.run([NBRUN, "run", "-c", "1"] + args, capture_output=True, text=True, timeout=120)
        check(p.returncode == 2 and words in p.stderr.splitlines()[0] and "Traceback" not in p.stderr,
              "%r: exit %d %r" % (args, p.returncode, p.stderr))
    check(not relays(), "relays left: %r" % relays())
    return "bad hosts, --network bridge, --ca-certs alone or not PEM, runsc: exit 2 with one line, nothing started"


def case_serve_ceiling():
    npm_host, npm = npm_registry()
    srv = Server(pool=1, extra=["--allow-net", "*.%s:443" % npm_host.split(".", 1)[1] if npm_host.count(".") >= 2
                                else npm_host + ":443", "--ca-certs", ca_bundle()])
    try:
        srv.wait_pool(1)
        st, doc = srv.json("/v1/runs", {"code": fetch_code({"https": npm + "/is-number"}),
                                        "allow_net": [npm_host + ":443"]})
        check(st == 200 and fetched(doc)["https"][0] == 200, "within the ceiling: %d %r" % (st, doc))
        check(doc["network"]["allow"] == [npm_host + ":443"], "policy: %r" % doc["network"])
        # a warm sandbox has no way out: a run with hosts starts its own, one without takes the pool's
        check(not doc.get("warm"), "a run with hosts took a pool sandbox: %r" % doc.get("warm"))
        st, doc = srv.json("/v1/runs", {"code": "1", "allow_net": ["example.com"]})
        check(st == 400 and doc.get("kind") == "policy" and "beyond" in doc["error"], "beyond: %d %r" % (st, doc))
        st, doc = srv.json("/v1/runs", {"code": "1", "allow_net": ["bad host"]})
        check(st == 400 and doc.get("kind") == "request", "bad host: %d %r" % (st, doc))
        # a request that asks nothing has no network, ceiling or not
        st, doc = srv.json("/v1/runs", {"code": "import os\nprint(os.environ.get('HTTPS_PROXY'))"})
        check(st == 200 and doc["stdout"].strip() == "None" and "network" not in doc, "no allow_net: %r" % doc)
        check(doc.get("warm") is True, "a run without hosts went cold: %r" % doc.get("warm"))
        # sessions take it too, and keep it across executions
        st, doc = srv.json("/v1/sessions", {"allow_net": [npm_host + ":443"]})
        check(st == 201, "session: %d %r" % (st, doc))
        sid = doc["id"]
        for k in range(2):
            st, res = srv.json("/v1/sessions/%s/execute" % sid, {"code": fetch_code({"https": npm + "/is-number"})})
            check(st == 200 and fetched(res)["https"][0] == 200, "session fetch: %d %r" % (st, res))
            # every connection since the session opened, each counted once
            net = res.get("network") or {}
            ok_conns = [r for r in net.get("requests", []) if r["host"] == npm_host and r["allowed"]]
            check(net.get("allow") == [npm_host + ":443"] and len(ok_conns) == k + 1,
                  "session network after %d executes: %r" % (k + 1, net))
        st, doc = srv.json("/v1/sessions", {"allow_net": ["example.com"]})
        check(st == 400 and doc.get("kind") == "policy", "session beyond: %d %r" % (st, doc))
        srv.json("/v1/sessions/" + sid, method="DELETE")
        # the CLI's --server sends --allow-net as allow_net
        p = subprocess.run([NBRUN, "run", "--server", srv.url, "--json", "-o", srv.tmp + "/cli",
                            "--allow-net", "example.com", "-c", "1"],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, NBRUN_TOKEN=srv.token))
        check(p.returncode == 2 and "beyond" in p.stderr, "run --server beyond: %d %r" % (p.returncode, p.stderr))
        # SIGTERM: the server stops in order and takes the proxy with it
        srv.proc.send_signal(signal.SIGTERM)
        check(srv.proc.wait(60) == 0, "serve exited %s" % srv.proc.returncode)
        check(not relays() and not proxy_running(),
              "after SIGTERM: relays %r, proxy %s" % (relays(), proxy_running()))
    finally:
        srv.stop()
    # SIGKILL leaves the relay of a running session and the proxy: nbrun gc removes them
    srv = Server(extra=["--allow-net", npm_host + ":443"])
    try:
        st, doc = srv.json("/v1/sessions", {"allow_net": [npm_host + ":443"]})
        check(st == 201 and relays() and proxy_running(), "session: %d %r" % (st, doc))
    finally:
        srv.stop()
    p = subprocess.run([NBRUN, "gc"], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and not relays() and not proxy_running(),
          "nbrun gc: %d %r; relays %r, proxy %s" % (p.returncode, p.stderr, relays(), proxy_running()))
    return ("within the ceiling fetched (run and session); beyond is 400 policy; --server forwards it; "
            "SIGTERM leaves nothing; after SIGKILL nbrun gc removes relay and proxy")


def case_batch_session():
    """nbrun batch and nbrun session take --allow-net as run does."""
    import tempfile
    npm_host, npm = npm_registry()
    tmp = tempfile.mkdtemp(prefix="nbrun-net-batch-")
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                                           "display_name": "Python 3"}},
          "cells": [{"cell_type": "code", "id": "a", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": fetch_code({"https": npm + "/is-number", "other": "https://example.com/"})}]}
    for name in ("one", "two"):
        with open(os.path.join(tmp, name + ".ipynb"), "w") as f:
            json.dump(nb, f)
    p = subprocess.run([NBRUN, "batch", "-j", "2", "-o", os.path.join(tmp, "out"), "--allow-net", npm_host + ":443",
                        "--ca-certs", ca_bundle(), os.path.join(tmp, "one.ipynb"), os.path.join(tmp, "two.ipynb")],
                       capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, "batch: exit %d %s" % (p.returncode, p.stderr[-500:]))
    for name in ("one", "two"):
        with open(os.path.join(tmp, "out", name, "result.json")) as f:
            doc = json.load(f)
        got = fetched(doc)
        check(got["https"][0] == 200 and got["other"][0] == 0 and doc["network"]["denied"] == ["example.com"],
              "batch %s: %r %r" % (name, got, doc.get("network")))
    check(not relays() and not proxy_running(), "the batch left relays %r or the proxy" % relays())
    script = fetch_code({"https": npm + "/is-number"}).replace("\n\n", "\n") + "\n"
    p = subprocess.run([NBRUN, "session", "-o", os.path.join(tmp, "sess"), "--allow-net", npm_host + ":443",
                        "--ca-certs", ca_bundle()], input=script, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and '"https": [200' in p.stdout, "session: %d %r %r" % (p.returncode, p.stdout[-500:],
                                                                                    p.stderr[-500:]))
    check(not relays() and not proxy_running(), "the session left relays %r or the proxy" % relays())
    return "batch (2 notebooks in parallel) and session fetched the allowed host, refused another, and left nothing"


def case_proxy_dies():
    """The proxy killed under a run: its later fetch fails and the result says why;
    the next run makes the proxy anew."""
    npm_host, npm = npm_registry()
    code = fetch_code({"before": npm + "/is-number"}).replace("print(json.dumps(out))", "")
    code += "import time\ntime.sleep(10)\nget('after', %r)\nprint(json.dumps(out))\n" % (npm + "/is-number")

    def killer():
        deadline = time.time() + 120
        while not proxy_running() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(6)
        engine("/containers/nbrun-egress-proxy/kill", "POST")

    t = threading.Thread(target=killer)
    t.start()
    p = subprocess.run([NBRUN, "run", "--json", "-o", "/tmp/nbrun-net-dies-%d" % os.getpid(), "--allow-net",
                        npm_host + ":443", "--ca-certs", ca_bundle(), "-c", code],
                       capture_output=True, text=True, timeout=300)
    t.join()
    doc = json.loads(p.stdout)
    got = fetched(doc)
    check(got["before"][0] == 200 and got["after"][0] == 0, "before and after the kill: %r" % got)
    check(doc["network"]["proxy_unreachable"] >= 1 and not doc["network"]["denied"],
          "the result says the proxy was down, not that the host was refused: %r" % doc["network"])
    rc, doc, out, err = run(["--allow-net", npm_host + ":443", "--ca-certs", ca_bundle(), "-c",
                             fetch_code({"https": npm + "/is-number"})], timeout=300)
    check(rc == 0 and fetched(doc)["https"][0] == 200 and doc["network"]["proxy_unreachable"] == 0,
          "the next run: %r" % (doc and doc.get("network")))
    check(not relays() and not proxy_running(), "left: %r" % relays())
    return "a proxy killed mid-run: the later fetch failed and the result counted the proxy down; the next run made it anew"


def case_mcp():
    """MCP at /mcp: allow_net offered only under a ceiling, checked against it."""
    from session_cases import mcp_call, mcp_tool
    npm_host, npm = npm_registry()
    for extra, offered in (([], False), (["--allow-net", npm_host + ":443", "--ca-certs", ca_bundle()], True)):
        srv = Server(extra=extra)
        try:
            st, init, msid = mcp_call(srv, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "net", "version": "1"}}})
            check(st == 200 and msid, "initialize: %d %r" % (st, init))
            st, tools, _ = mcp_call(srv, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, msid)
            props = {t["name"]: t["inputSchema"]["properties"] for t in tools["result"]["tools"]}
            for name in ("run_python", "run_notebook", "session_open"):
                check(("allow_net" in props[name]) == offered, "%s offers allow_net: %r" % (name, props[name]))
            if not offered:
                res = mcp_tool(srv, msid, "run_python", {"code": "1", "allow_net": [npm_host]})
                check(res.get("isError") and "unknown argument" in json.dumps(res), "no ceiling: %r" % res)
                continue
            check(npm_host in props["run_python"]["allow_net"]["description"], "the ceiling named: %r"
                  % props["run_python"]["allow_net"])
            res = mcp_tool(srv, msid, "run_python", {"code": fetch_code({"https": npm + "/is-number"}),
                                                     "allow_net": [npm_host + ":443"]})
            check(res.get("isError") is False and fetched(res["structuredContent"])["https"][0] == 200,
                  "within: %r" % res)
            check(res["structuredContent"]["network"]["allow"] == [npm_host + ":443"], "network: %r" % res)
            res = mcp_tool(srv, msid, "run_python", {"code": "1", "allow_net": ["example.com"]})
            check(res.get("isError") and "beyond" in json.dumps(res), "beyond: %r" % res)
            res = mcp_tool(srv, msid, "session_open", {"allow_net": [npm_host + ":443"]})
            sid = res["structuredContent"]["session_id"]
            res = mcp_tool(srv, msid, "session_execute", {"session_id": sid,
                                                          "code": fetch_code({"https": npm + "/is-number"})})
            check(fetched(res["structuredContent"])["https"][0] == 200, "session: %r" % res)
            mcp_tool(srv, msid, "session_close", {"session_id": sid})
            srv.proc.send_signal(signal.SIGTERM)
            check(srv.proc.wait(60) == 0 and not relays() and not proxy_running(), "left after SIGTERM")
        finally:
            srv.stop()
    return "allow_net offered only under a ceiling that its description names; within it fetched (run and session), beyond it a tool error"


def main():
    cases = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}
    if len(sys.argv) != 2 or sys.argv[1] not in cases:
        print("usage: net_cases.py CASE\ncases: %s" % " ".join(sorted(cases)), file=sys.stderr)
        return 2
    print("held %s: %s" % (sys.argv[1], cases[sys.argv[1]]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
