# SPDX-License-Identifier: MIT
"""One `execute` (nbrun_agent.execution with nbclient) against a fake
kernel (fake_kernel.py): cell and done messages, streaming, timeouts and
their interrupt or kill, a dying kernel, outputs that come too late, the
flush of open files, display updates, the host's interrupt, malformed
notebooks and a kernel that is not Python."""
import asyncio
import json
import signal
import unittest

import nbformat
from agenttest import AgentCase

from nbrun_agent.channel import Request
from nbrun_agent.kernel_code import FLUSH_CODE, FLUSH_EXPR


def outputs(cell):
    return [(o["output_type"], o.get("text") or o.get("ename") or o.get("data", {}).get("text/plain"))
            for o in cell["outputs"]]


class ExecuteTest(AgentCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.ready()

    async def test_cells_in_order_and_done(self):
        nb_cells = ["print hello\nresult 42", nbformat.v4.new_markdown_cell("# title"), "",
                    "stderr careful\nprint more"]
        cells, done, meta, msgs = await self.execute(nb_cells, count_from=4)
        self.assertEqual([m["type"] for m, _ in msgs], ["cell", "cell", "cell", "done"])
        self.assertEqual([(m["cell"], m["status"]) for m, _ in cells], [(0, "ok"), (2, "ok"), (3, "ok")])
        self.assertEqual(outputs(cells[0][1]), [("stream", "hello\n"), ("execute_result", "42")])
        self.assertEqual(outputs(cells[2][1]), [("stream", "careful\n"), ("stream", "more\n")])
        # counts go on from count_from; a cell with no source is not run
        self.assertEqual([c["execution_count"] for _, c in cells], [5, None, 6])
        self.assertEqual((done["status"], done["message"], done["oom_kills"]), ("ok", "", 0))
        self.assertEqual(meta["language_info"]["name"], "python")
        self.assertTrue(all(m["duration_ms"] >= 0 for m, _ in cells))

    async def test_an_error_goes_on_unless_stop_on_error(self):
        cells, done, _, _ = await self.execute(["print a", "raise ValueError: bad", "print c"])
        self.assertEqual([m["status"] for m, _ in cells], ["ok", "error", "ok"])
        self.assertEqual((cells[1][0]["ename"], cells[1][0]["evalue"]), ("ValueError", "bad"))
        self.assertEqual((done["status"], done["message"]), ("error", "cell 1 raised ValueError"))
        cells, done, _, _ = await self.execute(["print a", "raise ValueError: bad", "print c"],
                                               rid="x2", stop_on_error=True)
        self.assertEqual([m["status"] for m, _ in cells], ["ok", "error"])
        self.assertEqual(done["status"], "error")

    async def test_an_error_reply_without_an_error_output(self):
        cells, done, _, _ = await self.execute(["fail UsageError: no such magic"])
        self.assertEqual((cells[0][0]["status"], cells[0][0]["ename"]), ("error", "UsageError"))
        self.assertEqual(outputs(cells[0][1]), [])      # a python3 kernel's outputs are kept as sent
        self.assertEqual(done["message"], "cell 0 raised UsageError")

    async def test_open_files_are_flushed_with_the_last_cell(self):
        await self.execute(["print a", "print b"])
        runs = [e for e in self.kernel.executed if not e[1]]
        self.assertEqual([e[3] for e in runs], [{}, {"_nbrun_flush": FLUSH_EXPR}])
        self.assertNotIn(FLUSH_CODE, [e[0] for e in self.kernel.executed])
        # when the last cell raised, its expression was not evaluated: a flush of its own
        await self.execute(["print a", "raise OSError: x"], rid="x2")
        self.assertEqual(self.kernel.executed[-1][:2], (FLUSH_CODE, True))

    async def test_stream_sends_each_output_as_it_comes(self):
        big = "y" * (1 << 20)
        cells, _, _, msgs = await self.execute(["print one\nprint two", "print " + big], stream=True)
        kinds = [(m["type"], m.get("cell")) for m, _ in msgs]
        self.assertEqual(kinds, [("output", 0), ("output", 0), ("cell", 0), ("output", 1), ("cell", 1),
                                 ("done", None)])
        self.assertEqual(msgs[0][0]["output"], {"output_type": "stream", "name": "stdout", "text": "one\n"})
        # an output message over 1 MiB says only its size; the cell has it whole
        self.assertEqual(msgs[3][0]["output"]["output_type"], "stream")
        self.assertGreater(msgs[3][0]["output"]["omitted"], 1 << 20)
        self.assertEqual(cells[1][1]["outputs"][0]["text"], big + "\n")
        _, _, _, msgs = await self.execute(["print one"], rid="x2")
        self.assertEqual([m["type"] for m, _ in msgs], ["cell", "done"])

    async def test_a_display_update_sends_the_earlier_cell_again(self):
        cells, _, _, msgs = await self.execute(["display d1 first", "print x\nupdate d1 second"])
        self.assertEqual([(m["type"], m.get("cell")) for m, _ in msgs],
                         [("cell", 0), ("cell", 1), ("cell", 0), ("done", None)])
        self.assertEqual(outputs(json.loads(msgs[0][1])), [("display_data", "first")])
        self.assertEqual(outputs(json.loads(msgs[2][1])), [("display_data", "second")])

    async def test_a_cell_past_its_timeout_is_interrupted(self):
        cells, done, _, _ = await self.execute(["print start\nsleep 30", "print next"], cell_timeout=0.3)
        self.assertEqual([m["status"] for m, _ in cells], ["timeout", "ok"])
        self.assertEqual(cells[0][1]["metadata"]["nbrun"], {"timed_out": True})
        self.assertEqual(outputs(cells[0][1]), [("stream", "start\n"), ("error", "KeyboardInterrupt")])
        self.assertEqual(done["status"], "timeout")
        self.assertEqual(done["message"], "cell 0 passed its 0.3 s timeout and was interrupted")
        self.assertEqual(self.sig.sent, [signal.SIGINT])
        self.assertFalse(self.agent.kernel_dead)

    async def test_a_cell_that_ignores_its_interrupt_is_killed(self):
        cells, done, _, _ = await self.execute(["hang", "print never"], cell_timeout=0.3)
        self.assertEqual([(m["cell"], m["status"]) for m, _ in cells], [(0, "timeout")])
        self.assertEqual(outputs(cells[0][1]), [("error", "CellTimeoutError")])
        self.assertEqual(done["status"], "timeout")
        self.assertIn("did not stop when interrupted; the kernel was killed", done["message"])
        self.assertEqual(self.sig.sent, [signal.SIGINT, signal.SIGKILL])
        self.assertTrue(self.agent.kernel_dead)
        # later executes say why
        _, done, _, _ = await self.execute(["print x"], rid="x2")
        self.assertEqual(done["status"], "dead")
        self.assertEqual(done["message"], "the kernel was killed: cell 0 of execute x1 did not stop "
                                          "when interrupted at its timeout")

    async def test_a_dying_kernel(self):
        cells, done, _, _ = await self.execute(["print kept", "print last words\ndie", "print never"])
        self.assertEqual([(m["cell"], m["status"]) for m, _ in cells], [(0, "ok"), (1, "error")])
        self.assertEqual(outputs(cells[1][1]), [("stream", "last words\n")])
        self.assertEqual(done["status"], "dead")
        self.assertEqual(done["message"], "the kernel died (exit status 1); its last standard error: "
                                          "fake-kernel: fatal error in cell")
        _, done, _, _ = await self.execute(["print x"], rid="x2")
        self.assertEqual((done["status"], done["message"][:15]), ("dead", "the kernel died"))

    async def test_outputs_that_come_too_late(self):
        cells, done, _, _ = await self.execute(["print x\nidle_after 3", "print never"], output_wait=1)
        self.assertEqual([(m["cell"], m["status"]) for m, _ in cells], [(0, "error")])
        self.assertEqual(outputs(cells[0][1]), [("stream", "x\n"), ("error", "OutputsMissing")])
        self.assertEqual(done["status"], "failed")
        self.assertEqual(done["message"], "cell 0's outputs did not all arrive within 1 s after it "
                                          "ended; the execution stopped there")

    async def test_malformed_notebooks(self):
        async def done_of(blob, rid):
            msgs = await self.request({"type": "execute", "id": rid}, blob)
            self.assertEqual([m["type"] for m, _ in msgs], ["done"])
            return msgs[0][0]
        nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
        done = await done_of(b"{not json", "m1")
        self.assertEqual(done["status"], "failed")
        self.assertTrue(done["message"].startswith("malformed notebook: "))
        bad = dict(nb, cells=[{"id": "c0", "cell_type": "code", "source": 5, "metadata": {}, "outputs": []}])
        done = await done_of(json.dumps(bad).encode(), "m2")
        self.assertEqual(done["message"], "malformed notebook: cell 0 has no source text")
        bad = dict(nb, cells=[{"id": "c0", "cell_type": "code", "source": "", "metadata": {}, "outputs": {}}])
        done = await done_of(json.dumps(bad).encode(), "m3")
        self.assertEqual(done["message"], "malformed notebook: cell 0 metadata/outputs")
        done = await done_of(json.dumps(nb).encode(), "m4")
        self.assertEqual(done["status"], "ok")

    async def test_the_hosts_interrupt(self):
        run = asyncio.ensure_future(self.execute(["print a", "sleep 30", "print never"]))
        while not self.kernel.running or len(self.kernel.executed) < 3:
            await asyncio.sleep(0.01)
        self.agent.deliver(Request({"type": "interrupt", "id": "i1", "target": "x1"}))
        cells, done, _, msgs = await asyncio.wait_for(run, 10)
        self.assertIn({"type": "interrupted", "id": "i1", "target": "x1", "running": True}, [m for m, _ in msgs])
        self.assertEqual([(m["cell"], m["status"]) for m, _ in cells], [(0, "ok"), (1, "error")])
        self.assertEqual((done["status"], done["message"]), ("error", "cell 1 was interrupted"))
        self.assertEqual(self.sig.sent, [signal.SIGINT])
        # an interrupt for an execute not started yet stops it before its first cell
        self.agent.deliver(Request({"type": "interrupt", "id": "i2", "target": "x2"}))
        await asyncio.sleep(0.05)
        self.assertEqual(self.messages()[0][0]["running"], False)
        cells, done, _, _ = await self.execute(["print a"], rid="x2")
        self.assertEqual((cells, done["status"], done["message"]), ([], "error", "interrupted before cell 0"))
        await asyncio.sleep(1.1)   # the first interrupt's retry loop ends


class OtherKernelTest(AgentCase):
    """A kernel that is not python3 (tslab here): nothing silent is run in it,
    and an error it writes to standard error becomes an error output."""

    kernel_name = "tslab"
    kernel_options = {"language": "typescript"}

    async def test_no_python_and_errors_from_stderr(self):
        ready = await self.ready()
        self.assertEqual(ready["preloaded"], [])
        cells, done, meta, _ = await self.execute(["print 1", "stderr TypeError: x is not a function\n"
                                                   "fail : "])
        self.assertEqual([m["status"] for m, _ in cells], ["ok", "error"])
        self.assertEqual(outputs(cells[1][1])[-1], ("error", "TypeError"))
        self.assertEqual(cells[1][1]["outputs"][-1]["evalue"], "x is not a function")
        self.assertEqual(done["message"], "cell 1 raised ")
        self.assertEqual(meta["language_info"]["name"], "typescript")
        self.assertEqual([e[1] for e in self.kernel.executed], [False, False])   # nothing silent
        self.assertEqual([e[3] for e in self.kernel.executed], [{}, {}])         # no flush
        self.assertEqual(self.managers[-1].start_kw["extra_arguments"], [])


if __name__ == "__main__":
    unittest.main()
