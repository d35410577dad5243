#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The language argument of nbrun serve, against the real engine and image.

Usage: serve_lang_cases.py CASE   (one meson test per case)
Cases:
  run_http      POST /v1/runs {"language": "bash"} runs in the bash kernel
                (the computed value comes back); an unknown language and a
                non-string are 400 naming the languages; nbrun run --server
                -l sh passes the language through, and a .sh file's
                extension does too.
  session_http  POST /v1/sessions {"language": "Bash"}: two executes keep a
                variable, the session and its results say bash; an unknown
                language is 400.
bash rather than R or JavaScript: the sandbox's agent gives a kernel 60 s to
start, which IRkernel and tslab can pass on a machine as loaded as a shared
test host (load 30 on two cores); the bash kernel starts as quickly as
Python's. The lang-* tests run R and JavaScript through nbrun run.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import jsonschema

NBRUN = os.environ["NBRUN"]
SRCDIR = os.environ["NBRUN_SRCDIR"]
with open(os.path.join(SRCDIR, "schemas", "result.schema.json")) as f:
    RESULT = jsonschema.Draft202012Validator(json.load(f))
ALL = ["python", "r", "javascript", "typescript", "bash"]


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok:", msg, flush=True)


class Server:
    def __init__(self):
        self.state = tempfile.mkdtemp(prefix="nbrun-serve-lang-")
        self.log = open(os.path.join(self.state, "stderr"), "w+")
        self.proc = subprocess.Popen([NBRUN, "serve", "--listen", "127.0.0.1:0", "--pool", "0", "--timeout", "600s",
                                      "--state-dir", self.state], stderr=self.log)
        deadline = time.time() + 60
        while time.time() < deadline:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.stderr())
            if m and "languages:" in self.stderr():
                self.url = m.group(1)
                break
            if self.proc.poll() is not None:
                fail("nbrun serve exited: " + self.stderr())
            time.sleep(0.1)
        else:
            fail("nbrun serve did not start: " + self.stderr())
        with open(os.path.join(self.state, "token")) as f:
            self.token = f.read().strip()

    def stderr(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def call(self, method, path, body=None, timeout=900):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + self.token})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(60)
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)
        check(rc == 0, "nbrun serve stops on SIGTERM with 0 (%s)" % rc)


def case_run_http():
    s = Server()
    try:
        check(re.search(r"languages: python r javascript typescript bash", s.stderr()),
              "the server found every language of the image")
        st, doc = s.call("POST", "/v1/runs", {"code": "xs=(1 2 3 4); t=0\nfor x in ${xs[@]}; do t=$((t + x)); done\n"
                                                     "echo \"sum $((t * 1000 + 7))\"",
                                             "language": "bash"})
        check(st == 200, "POST /v1/runs in bash: 200 (%s %s)" % (st, doc))
        RESULT.validate(doc)
        check(doc["status"] == "ok" and doc["language"] == "bash" and doc["stdout"] == "sum 10007\n",
              "the code ran in the bash kernel: %r %s" % (doc["stdout"], doc["message"]))
        st, doc = s.call("POST", "/v1/runs", {"code": "1", "language": "cobol"})
        check(st == 400 and doc["kind"] == "language" and "cobol" in doc["error"] and
              all(l in doc["error"] for l in ALL),
              "an unknown language is 400 naming the languages: %s" % doc)
        st, doc = s.call("POST", "/v1/runs", {"code": "1", "language": ["r"]})
        check(st == 400 and "language" in doc["error"], "a language that is not a string is 400: %s" % doc)
        env = dict(os.environ, NBRUN_TOKEN_FILE=os.path.join(s.state, "token"))
        tmp = os.path.join(s.state, "cli")
        os.mkdir(tmp)
        p = subprocess.run([NBRUN, "run", "--server", s.url, "--json", "-o", os.path.join(tmp, "a"), "-l", "sh",
                            "-c", "echo $(( (3 * 3 + 4 * 4) * 11 ))"],
                           capture_output=True, text=True, timeout=900, env=env)
        doc = json.loads(p.stdout) if p.stdout.strip() else {}
        check(p.returncode == 0 and doc.get("language") == "bash" and doc.get("stdout", "").strip() == "275",
              "nbrun run --server -l sh runs bash on the server (%s %r %s)" % (p.returncode, doc.get("stdout"), p.stderr))
        path = os.path.join(tmp, "t.sh")
        with open(path, "w") as f:
            f.write('echo "from $(basename "$BASH")"\n')
        p = subprocess.run([NBRUN, "run", "--server", s.url, "--json", "-o", os.path.join(tmp, "b"), path],
                           capture_output=True, text=True, timeout=900, env=env)
        doc = json.loads(p.stdout) if p.stdout.strip() else {}
        check(p.returncode == 0 and doc.get("language") == "bash" and doc.get("stdout", "").strip() == "from bash",
              "a .sh file sent with --server runs as bash (%s %r)" % (p.returncode, doc.get("stdout")))
    finally:
        s.stop()


def case_session_http():
    s = Server()
    try:
        st, doc = s.call("POST", "/v1/sessions", {"language": "fortran"})
        check(st == 400 and doc["kind"] == "language" and all(l in doc["error"] for l in ALL),
              "a session in an unknown language is 400 naming the languages: %s" % doc)
        st, doc = s.call("POST", "/v1/sessions", {"language": "Bash"})
        check(st == 201 and doc["language"] == "bash", "a bash session opens (any case): %s" % doc)
        sid = doc["id"]
        st, d1 = s.call("POST", "/v1/sessions/%s/execute" % sid, {"code": "kept=$((6 * 7))\ncd /tmp"})
        check(st == 200 and d1["status"] == "ok" and d1["language"] == "bash", "first execute: %s %s" % (st, d1))
        st, d2 = s.call("POST", "/v1/sessions/%s/execute" % sid, {"code": "echo \"kept is $((kept + 1000)) in $PWD\""})
        check(st == 200 and d2["status"] == "ok" and d2["stdout"] == "kept is 1042 in /tmp\n",
              "the second execute sees the first's variable and directory: %r" % d2.get("stdout"))
        st, info = s.call("GET", "/v1/sessions/%s" % sid)
        check(st == 200 and info["language"] == "bash" and info["executions"] == 2,
              "the session says bash, 2 executions: %s" % info)
        st, doc = s.call("DELETE", "/v1/sessions/%s" % sid)
        check(st == 200, "the session closes")
    finally:
        s.stop()


if __name__ == "__main__":
    globals()["case_" + sys.argv[1]]()
    print("held", sys.argv[1])
