# SPDX-License-Identifier: MIT
"""One `execute` (PROTOCOL.md): the notebook's code cells in order in the
running kernel with nbclient (AgentClient, a NotebookClient subclass that
reports each output as it arrives and marks a cell interrupted at its
timeout), a `cell` message after each and `done` at the end.

The agent's side of the kernel (km, kc, kill_kernel, dead_message, _silent,
kernel_usable, language_info, chan) is reached through `agent`, a
kernel.KernelHost. nbclient and nbformat are imported when first needed
(import_executor does it while the kernel boots)."""
import datetime
import re
import time

from .channel import MAX_JSON, dumps
from .common import FLUSH_TIMEOUT, KERNEL_NAME, OUTPUT_WAIT, PYTHON_KERNEL
from .kernel_code import FLUSH_CODE, FLUSH_EXPR


class Execution:
    """One `execute`: the cells in order, a `cell` message after each, `done`."""

    def __init__(self, agent, req, timeout, stream, stop_on_error):
        self.agent, self.req = agent, req
        self.timeout, self.stream, self.stop_on_error = timeout, stream, stop_on_error
        self.finished = False
        self.interrupted = False     # the host asked to interrupt this execute
        self.cell = None             # the index of the cell running now
        self.count_from = 0          # execution counts go on from here (a session)
        self.output_wait = OUTPUT_WAIT

    def done(self, status, message, metadata=None):
        self.finished = True
        self.agent.chan.send({"type": "done", "id": self.req.id, "status": status,
                              "oom_kills": read_oom_kills(), "message": message},
                             dumps(metadata if metadata is not None else {}))

    def send_cell(self, index, cell, status, t0, reply=None):
        blob = dumps(cell)
        msg = {"type": "cell", "id": self.req.id, "cell": index, "status": status,
               "duration_ms": int((time.monotonic() - t0) * 1000)}
        if status == "error" and reply is not None:
            # a reply can say error with no error output (IPython's UsageError)
            content = reply.get("content", {})
            msg["ename"] = str(content.get("ename", ""))[:200]
            msg["evalue"] = str(content.get("evalue", ""))[:1000]
        self.agent.chan.send(msg, blob)

    def send_output(self, index, out):
        msg = {"type": "output", "id": self.req.id, "cell": index, "output": out}
        payload = dumps(msg)
        if len(payload) > MAX_JSON:
            msg["output"] = {"output_type": out.get("output_type"), "omitted": len(payload)}
        self.agent.chan.send(msg)

    async def run(self, kernel):
        import nbformat
        try:
            nb = nbformat.reads(self.req.blob.decode("utf-8"), as_version=4)
            cells = nb.cells
            if not isinstance(cells, list):
                raise ValueError("cells is not a list")
        except Exception as e:   # noqa: BLE001 (any malformed input)
            self.done("failed", "malformed notebook: %s" % str(e)[:500])
            return
        for index, cell in enumerate(cells):
            if isinstance(cell, dict) and cell.get("cell_type") == "code":
                if not isinstance(cell.get("source"), str):
                    self.done("failed", "malformed notebook: cell %d has no source text" % index)
                    return
                if not isinstance(cell.setdefault("metadata", {}), dict) or \
                        not isinstance(cell.setdefault("outputs", []), list):
                    self.done("failed", "malformed notebook: cell %d metadata/outputs" % index)
                    return
        status, message = await self.agent.kernel_usable(kernel)
        if status:
            self.done(status, message)
            return
        nb.metadata["language_info"] = self.agent.language_info
        client = make_client(self, nb)
        code_cells = [i for i, c in enumerate(cells)
                      if isinstance(c, dict) and c.get("cell_type") == "code"]
        client.flush_with = code_cells[-1] if code_cells and PYTHON_KERNEL else None
        flushed = False
        status, message = "ok", ""
        sent = {}        # cell index -> status, for cells sent again after a display update
        for index, cell in enumerate(cells):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            if self.interrupted:
                if status == "ok":
                    status, message = "error", "interrupted before cell %d" % index
                break
            self.cell = index
            t0 = time.monotonic()
            client.timed_out = False
            client.reply = None
            client.outputs_done = None   # stays None for a cell nbclient skips (no source)
            stop = False
            try:
                await client.async_execute_cell(
                    cell, index, execution_count=self.count_from + client.code_cells_executed + 1)
            except client.DeadKernelError:
                await client.drain(cell, index)
                self.agent.kernel_dead = True
                self.send_cell(index, cell, "error", t0)
                status, message = "dead", self.agent.dead_message()
                break
            except client.CellTimeoutError:
                # the kernel did not answer its interrupt within another
                # cell timeout: it is killed, the execution ends here
                client.mark_timeout(cell)
                self.agent.kill_kernel()
                self.agent.kernel_dead = True
                self.agent.killed_why = ("the kernel was killed: cell %d of execute %s did not stop "
                                         "when interrupted at its timeout" % (index, self.req.id))
                self.send_cell(index, cell, "timeout", t0)
                status = "timeout"
                message = ("cell %d passed its %g s timeout and did not stop when interrupted; "
                           "the kernel was killed" % (index, self.timeout))
                break
            except client.CellExecutionError:
                stop = True       # stop_on_error: the cell raised
            if client.outputs_done is False and not client.timed_out and not stop:
                # nbclient stopped waiting for the rest of the cell's
                # outputs: a result without them must not pass for whole
                client.mark_outputs_cut(cell)
                self.send_cell(index, cell, "error", t0, client.reply)
                status = "failed"
                message = ("cell %d's outputs did not all arrive within %d s after it ended; "
                           "the execution stopped there" % (index, self.output_wait))
                break
            cstat = client.cell_status()
            if cstat == "error" and not PYTHON_KERNEL:
                error_from_stderr(cell)
            flushed = index == client.flush_with and client.flushed()
            self.send_cell(index, cell, cstat, t0, client.reply)
            sent[index] = cstat
            for earlier in sorted(i for i in client.touched if i in sent and i != index):
                self.send_cell(earlier, cells[earlier], sent[earlier], time.monotonic())
            client.touched.clear()
            if cstat == "timeout" and status != "timeout":
                status = "timeout"
                message = "cell %d passed its %g s timeout and was interrupted" % (index, self.timeout)
            elif cstat == "error" and status == "ok":
                status, message = "error", "cell %d raised %s" % (index, client.error_name())
            if self.interrupted:
                if status in ("ok", "error"):
                    status, message = "error", "cell %d was interrupted" % index
                break
            if stop:
                break
        if status != "dead" and not self.agent.kernel_dead and not flushed and PYTHON_KERNEL:
            # a file left open is flushed as an interpreter exit would
            await self.agent._silent(FLUSH_CODE, FLUSH_TIMEOUT)
        client.set_widgets_metadata()
        self.done(status, message, nb.metadata)


_client_class = None


def make_client(execution, nb):
    global _client_class
    if _client_class is None:
        _client_class = _define_client()
    kw = dict(km=execution.agent.km, kernel_name=KERNEL_NAME, allow_errors=not execution.stop_on_error,
              interrupt_on_timeout=True, iopub_timeout=execution.output_wait)
    if execution.timeout:
        # nbclient's `timeout` is an integer; the function takes any number
        kw["timeout_func"] = lambda cell, t=execution.timeout: t
    client = _client_class(nb, **kw)
    client.kc = execution.agent.kc
    client.execution = execution
    return client


def _define_client():
    import asyncio
    from queue import Empty

    import nbformat
    from nbclient.client import NotebookClient
    from nbclient.exceptions import (CellExecutionComplete, CellExecutionError,
                                     CellTimeoutError, DeadKernelError)

    class AgentClient(NotebookClient):
        """nbclient's executor, reporting each output as it arrives and
        marking a cell interrupted at its timeout."""

        def __init__(self, nb, **kw):
            super().__init__(nb, **kw)
            self.on_cell_executed = self._on_cell_executed
            self.timed_out = False
            self.reply = None
            self.parent_id = None
            self.interrupts = 0
            self.touched = set()
            self.flush_with = None   # the cell whose request carries the flush
            self.outputs_done = None   # False: the cell's outputs were cut short

        async def async_execute_cell(self, cell, cell_index, **kw):
            if cell_index != self.flush_with:
                return await super().async_execute_cell(cell, cell_index, **kw)
            # the last cell carries the flush of files left open
            kc = self.kc
            plain = kc.execute

            def execute(code, **kwargs):
                kwargs.setdefault("user_expressions", {"_nbrun_flush": FLUSH_EXPR})
                return plain(code, **kwargs)
            kc.execute = execute
            try:
                return await super().async_execute_cell(cell, cell_index, **kw)
            finally:
                del kc.execute

        def flushed(self):
            content = (self.reply or {}).get("content", {})
            expr = (content.get("user_expressions") or {}).get("_nbrun_flush") or {}
            return content.get("status") == "ok" and expr.get("status") == "ok"

        def _update_display_id(self, display_id, msg):
            # an update may change outputs of cells already sent: they are
            # sent again after the cell that updated them
            super()._update_display_id(display_id, msg)
            self.touched.update(self._display_id_map.get(display_id, {}).keys())

        def output(self, outs, msg, display_id, cell_index):
            out = super().output(outs, msg, display_id, cell_index)
            if out is not None and self.execution.stream:
                self.execution.send_output(cell_index, out)
            return out

        async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
            self.parent_id = parent_msg_id
            self.outputs_done = False
            ret = await super()._async_poll_output_msg(parent_msg_id, cell, cell_index)
            self.outputs_done = True   # not reached when nbclient gave up waiting
            return ret

        def mark_outputs_cut(self, cell):
            cell.setdefault("outputs", []).append(nbformat.v4.new_output(
                "error", ename="OutputsMissing",
                evalue="the outputs of this cell did not all arrive within %d s after it ended"
                % self.iopub_timeout, traceback=[]))

        async def _async_handle_timeout(self, timeout, cell=None):
            self.timed_out = True
            self.interrupts += 1
            if self.interrupts > 1:
                raise CellTimeoutError.error_from_timeout_and_cell(
                    "Cell did not stop when interrupted", timeout, cell)
            return await super()._async_handle_timeout(timeout, cell)

        def _on_cell_executed(self, cell=None, cell_index=None, execute_reply=None, **_kw):
            self.reply = execute_reply
            if self.timed_out:
                self.mark_timeout(cell)

        def mark_timeout(self, cell):
            # as nbrun_config.py did for nbconvert: metadata and an error output
            cell.setdefault("metadata", {})["nbrun"] = {"timed_out": True}
            if not any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                cell.setdefault("outputs", []).append(nbformat.v4.new_output(
                    "error", ename="CellTimeoutError",
                    evalue="the cell passed its %g s timeout and was interrupted"
                    % self.execution.timeout, traceback=[]))

        def cell_status(self):
            if self.timed_out:
                return "timeout"
            if self.reply is not None and self.reply.get("content", {}).get("status") == "error":
                return "error"
            return "ok"

        def error_name(self):
            content = (self.reply or {}).get("content", {})
            return str(content.get("ename", "an error"))[:200]

        async def drain(self, cell, index):
            """Outputs the kernel sent just before it died, still queued."""
            end = time.monotonic() + 0.3
            while self.parent_id is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return
                try:
                    msg = await self.kc.iopub_channel.get_msg(timeout=left)
                except (Empty, asyncio.TimeoutError):
                    return
                if msg["parent_header"].get("msg_id") != self.parent_id:
                    continue
                try:
                    self.process_message(msg, cell, index)
                except CellExecutionComplete:
                    return

        # Debian 12 pairs ipywidgets 6 with nbclient 0.7, whose widget handler
        # expects the newer protocol's "state" in comm_open and crashes the
        # run without it: such a widget is simply not tracked.
        def on_comm_open_jupyter_widget(self, msg):
            if "state" not in msg.get("content", {}).get("data", {}):
                return None
            return super().on_comm_open_jupyter_widget(msg)

    AgentClient.DeadKernelError = DeadKernelError
    AgentClient.CellTimeoutError = CellTimeoutError
    AgentClient.CellExecutionError = CellExecutionError
    return AgentClient


ERROR_LINE = re.compile(r"^(?:Uncaught )?([A-Za-z_$][\w$.]*(?:Error|Exception))(?::\s*(.*))?$")
TS_DIAGNOSTIC = re.compile(r"^\d+:\d+ - (.*)$")


def error_from_stderr(cell):
    """A kernel that says a cell failed without an error output (tslab
    writes the exception to standard error): the error output it would have
    sent, named as the language names it (TypeError; TSError for a
    TypeScript diagnostic), its traceback the user's lines of that text."""
    import nbformat
    outputs = cell.get("outputs", [])
    if any(o.get("output_type") == "error" for o in outputs):
        return
    text = "".join(o.get("text", "") for o in outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stderr")
    lines = [ln for ln in text.splitlines()
             if "/opt/nbrun/node/node_modules/" not in ln and "(node:" not in ln]
    ename, evalue = "Error", ""
    for ln in lines:
        m = ERROR_LINE.match(ln.strip())
        if m:
            ename, evalue = m.group(1), m.group(2) or ""
            break
        m = TS_DIAGNOSTIC.match(ln.strip())
        if m:
            # tslab checks a cell before it runs; in JavaScript that finds syntax errors
            ename, evalue = "SyntaxError" if KERNEL_NAME == "jslab" else "TSError", m.group(1)
            break
    if not evalue and lines:
        evalue = lines[-1].strip()
    outputs.append(nbformat.v4.new_output("error", ename=ename[:200], evalue=evalue[:1000],
                                          traceback=lines[-50:]))


def _fast_dates(obj):
    """jupyter_client's extract_dates for a message header: its dateutil
    parse of every header's date took a third of an execute's time here;
    the standard library parses the kernel's ISO 8601 dates itself."""
    if isinstance(obj, dict):
        date = obj.get("date")
        if isinstance(date, str):
            try:
                obj["date"] = datetime.datetime.fromisoformat(date.replace("Z", "+00:00"))
            except ValueError:
                pass
    return obj


def import_executor():
    """What an execute needs, imported while the kernel boots."""
    import jupyter_client.session
    import nbclient.client  # noqa: F401
    import nbformat
    # deserialize() calls it on the header and the parent header only
    jupyter_client.session.extract_dates = _fast_dates
    import tarfile  # noqa: F401 (the first fetch, otherwise 20 ms)
    # The first read loads the notebook schema and its validator (0.1 s).
    nbformat.reads('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}',
                   as_version=4)


def read_oom_kills():
    """The container's OOM kills so far (cgroup v2, else v1), for `done`."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0
