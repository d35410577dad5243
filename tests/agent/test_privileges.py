# SPDX-License-Identifier: MIT
"""The agent's privileges (nbrun_agent.privileges), each in a child
process of its own, as the agent does it at start: an empty capability
bounding set, file-system uid/gid 1000, a signaller thread of effective
uid 1000. Needs root (with CAP_SETUID, CAP_SETGID, CAP_SETPCAP), as the
agent does; skipped elsewhere."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from agenttest import SRC

PRELUDE = "import json, os, signal, sys, time\nsys.path.insert(0, %r)\n" % SRC


def run(script, **kw):
    p = subprocess.run([sys.executable, "-I", "-B", "-c", PRELUDE + textwrap.dedent(script)],
                       capture_output=True, text=True, timeout=60, **kw)
    return p.returncode, p.stdout, p.stderr


@unittest.skipUnless(os.geteuid() == 0, "needs root, as the agent")
class PrivilegesTest(unittest.TestCase):
    def test_refused_unless_uid_0(self):
        rc, out, err = run("""
            from nbrun_agent import privileges
            os.setresuid(65534, 65534, 65534)
            try:
                privileges.drop_privileges()
            except privileges.SetupError as e:
                print(e)
        """)
        self.assertEqual((rc, out.strip()), (0, "the agent must start as uid 0 (it runs the kernel as uid 1000)"), err)

    def test_drop_privileges_and_signal_as_1000(self):
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o1777)
            rc, out, err = run("""
                from nbrun_agent import privileges
                try:
                    privileges.drop_privileges()
                except privileges.SetupError as e:
                    print(json.dumps({"setup_error": str(e)}))
                    sys.exit(0)
                res = {"thread_ids": privileges.THREAD_IDS}
                with open("/proc/self/status") as f:
                    res["status"] = {k: v.strip() for k, _, v in (l.partition(":") for l in f)
                                     if k in ("CapBnd", "Uid", "Gid", "Groups")}
                path = os.path.join(%r, "made")
                with open(path, "w"):
                    pass
                st = os.stat(path)
                res["owner"] = [st.st_uid, st.st_gid]
                try:
                    open("/root/.nbrun-agent-test", "w")
                    res["root_dir"] = "written"
                except PermissionError:
                    res["root_dir"] = "refused"
                # a process of uid 1000 in a group of its own, signalled by the signaller thread
                child = __import__("subprocess").Popen(["sleep", "30"], user=1000, group=1000,
                                                       extra_groups=[], process_group=0)
                sig = privileges.Signaller()
                sig.pgid = child.pid
                res["signalled"] = sig.send(signal.SIGKILL)
                res["child"] = child.wait(10)
                res["again"] = sig.send(signal.SIGKILL)
                with privileges.root_euid():
                    pass
                print(json.dumps(res))
            """ % d)
        self.assertEqual(rc, 0, err)
        res = json.loads(out)
        if "setup_error" in res:
            self.skipTest("this machine gives root no such capabilities: " + res["setup_error"])
        self.assertEqual(res["status"]["CapBnd"], "0000000000000000")
        self.assertEqual(res["status"]["Groups"], "")
        if not res["thread_ids"]:
            # real, effective, saved and file-system ids: only the last is 1000
            self.assertEqual(res["status"]["Uid"].split(), ["0", "0", "0", "1000"])
            self.assertEqual(res["status"]["Gid"].split(), ["0", "0", "0", "1000"])
        self.assertEqual(res["owner"], [1000, 1000])
        self.assertEqual(res["root_dir"], "refused")
        self.assertEqual((res["signalled"], res["child"], res["again"]), (True, -9, False))


if __name__ == "__main__":
    unittest.main()
