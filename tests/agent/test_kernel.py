# SPDX-License-Identifier: MIT
"""The kernel's start (nbrun_agent.kernel) against a fake kernel: how it is
launched, waited for, preloaded and warmed up before `ready`, and a start
that fails; and the Python the agent runs in the kernel (kernel_code),
run here in a plain interpreter."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from agenttest import AgentCase

from nbrun_agent import kernel_code
from nbrun_agent.kernel_code import FLUSH_CODE, FLUSH_EXPR, RESET_CODE, SETUP_CODE, WARM_PANDAS, WARM_PLOT


def silent(k):
    return [code for code, is_silent, _, _ in k.executed if is_silent]


class StartTest(AgentCase):
    kernel_options = {"lost_iopub": 2}

    async def test_launch_wait_and_ready(self):
        ready = await self.ready()
        self.assertEqual(ready["preloaded"], [])
        self.assertGreaterEqual(ready["kernel_ms"], 0)
        self.assertNotIn("id", ready)
        m = self.managers[0]
        self.assertEqual(m.kernel_name, "python3")
        kw = m.start_kw
        self.assertEqual((kw["extra_arguments"], kw["cwd"], kw["user"], kw["group"], kw["extra_groups"]),
                         (["--HistoryManager.hist_file=:memory:"], "/mnt/data", 1000, 1000, []))
        self.assertEqual((kw["stdin"], kw["stdout"]), (subprocess.DEVNULL, subprocess.DEVNULL))
        self.assertEqual(self.sig.pgid, 4242)
        self.assertFalse(self.agent.kc.allow_stdin)
        # kernel_info asked again until its iopub messages came too
        self.assertEqual(self.kernel.lost_iopub, -1)
        self.assertEqual(self.agent.language_info["name"], "python")
        # nothing preloaded: the flush hook alone, silently
        self.assertEqual(silent(self.kernel), [SETUP_CODE])


class PreloadTest(AgentCase):
    preload = " json, not a name,os.path,,missing.mod , 1abc"
    kernel_options = {"importable": ("json", "os.path")}

    async def test_preload_then_warm_up(self):
        ready = await self.ready()
        self.assertEqual(ready["preloaded"], ["json", "os.path"])
        # names that are not module names are never sent; one that fails to import is left out
        self.assertEqual(silent(self.kernel), [SETUP_CODE, "__import__('json')", "__import__('os.path')",
                                               "__import__('missing.mod')", RESET_CODE])
        # the warm-up's cell: not in the history, and with the flush's expression
        self.assertEqual(self.diagnostics().splitlines(), [
            "nbrun-agent: preload: 'not a name' is not a module name",
            "nbrun-agent: preload: missing.mod did not import",
            "nbrun-agent: preload: '1abc' is not a module name"])
        [cell] = [e for e in self.kernel.executed if not e[1]]
        self.assertEqual(cell[2:], (False, {"_nbrun_flush": FLUSH_EXPR}))
        self.assertEqual(self.kernel.count, 0)
        cells, _, _, _ = await self.execute(["print x"])
        self.assertEqual(cells[0][1]["execution_count"], 1)


class WarmTest(AgentCase):
    preload = "matplotlib.pyplot,pandas"
    kernel_options = {"importable": ("matplotlib.pyplot", "pandas")}

    async def test_charts_and_pandas_warmed(self):
        await self.ready()
        codes = silent(self.kernel)
        self.assertEqual(codes[:3], [SETUP_CODE, "__import__('matplotlib.pyplot')", "__import__('pandas')"])
        self.assertEqual(codes[3:], [WARM_PLOT, WARM_PANDAS, RESET_CODE])


class FailedStartTest(AgentCase):
    kernel_options = {"start_fails": True}

    async def test_an_error_instead_of_ready(self):
        await self.agent.kernel_task
        [(m, _)] = self.messages()
        self.assertEqual((m["type"], m["fatal"]), ("error", False))
        self.assertNotIn("id", m)
        self.assertTrue(m["message"].startswith("the kernel did not start: the kernel exited (status 2)"),
                        m["message"])
        self.assertEqual(self.diagnostics(), "nbrun-agent: %s\n" % m["message"])
        _, done, _, _ = await self.execute(["print x"])
        self.assertEqual((done["status"], done["message"]), ("failed", m["message"]))


class KernelCodeTest(unittest.TestCase):
    """The texts sent to the kernel, run in a plain interpreter (no IPython:
    _nbrun_speed's parts fail silently there, as they may in a kernel)."""

    def run_python(self, script):
        with tempfile.TemporaryDirectory() as d:
            env = {"NBRUN_TEST_DIR": d, "PATH": os.environ.get("PATH", "")}
            p = subprocess.run([sys.executable, "-I", "-B", "-c", script], capture_output=True, text=True,
                               env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.split()

    def test_every_text_compiles(self):
        for name in ("SETUP_CODE", "FLUSH_CODE", "FLUSH_EXPR", "RESET_CODE", "WARM_PLOT", "WARM_PANDAS"):
            compile(getattr(kernel_code, name), name, "eval" if name == "FLUSH_EXPR" else "exec")
        # the files' leading comments stay on the host
        for text in (SETUP_CODE, FLUSH_CODE, RESET_CODE, WARM_PLOT, WARM_PANDAS):
            self.assertNotIn("SPDX", text)

    def test_the_flush_hook(self):
        out = self.run_python(textwrap.dedent("""
            import os, sys
            ns = {}
            exec(%r, ns)
            state = sys.modules["_nbrun"]
            path = os.path.join(os.environ["NBRUN_TEST_DIR"], "f")
            print(sorted(k for k in ns if not k.startswith("__")) == [], state.dirty)
            open("/dev/null").close()              # a read: not noted
            print(state.dirty)
            f = open(path, "w")                    # left open, never closed
            f.write("written")
            print(state.dirty, os.path.getsize(path))
            eval(%r)                                # the flush at the end of an execute
            print(state.dirty, os.path.getsize(path))
            f.write("more")
            exec(%r, {})                           # the flush as a statement of its own
            print(os.path.getsize(path))
            exec(%r, {})
            import gc
            print(len(state.files), gc.get_freeze_count() > 0)
        """) % (SETUP_CODE, FLUSH_EXPR, FLUSH_CODE, RESET_CODE))
        self.assertEqual(out, ["True", "False", "False", "True", "0", "False", "7", "11", "0", "True"])

    def test_the_flush_without_its_hook(self):
        out = self.run_python(textwrap.dedent("""
            import os
            path = os.path.join(os.environ["NBRUN_TEST_DIR"], "f")
            f = open(path, "w")
            f.write("abc")
            ns = {}
            exec(%r, ns)
            print(os.path.getsize(path), "_nbrun_flush" in ns)
        """) % FLUSH_CODE)
        self.assertEqual(out, ["3", "False"])


if __name__ == "__main__":
    unittest.main()
