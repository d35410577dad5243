# SPDX-License-Identifier: MIT
# nbconvert configuration for nbrun:
# - save the notebook after every cell to /app/partial.ipynb, so that a run
#   killed at its wall-clock deadline still returns the finished cells;
# - mark a cell interrupted at its cell timeout (metadata nbrun.timed_out) and
#   make sure it shows an error, so nbrun can report status "timeout";
# - stop the kernel at once after the last cell (a graceful shutdown costs
#   0.2 s and, in about one run in fifteen, hangs until it is killed), after
#   flushing the files the code left open.
import asyncio
import os
import signal
import time

import nbformat

_PARTIAL = "/app/partial.ipynb"
_state = {}


def _notebook_start(notebook=None, **_kw):
    _state["nb"] = notebook


_TIMEOUT = float(os.environ.get("NBRUN_CELL_TIMEOUT", "0") or 0)


def _cell_start(cell=None, **_kw):
    _state["t0"] = time.monotonic()


def _mark_timeout(cell):
    if not _TIMEOUT or cell is None or cell.get("cell_type") != "code":
        return
    if time.monotonic() - _state.get("t0", time.monotonic()) < _TIMEOUT - 0.05:
        return
    cell.setdefault("metadata", {})["nbrun"] = {"timed_out": True}
    if not any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
        cell.setdefault("outputs", []).append(nbformat.v4.new_output(
            "error", ename="CellTimeoutError",
            evalue="the cell passed its %g s timeout and was interrupted" % _TIMEOUT,
            traceback=[]))


def _cell_executed(cell=None, **kw):
    _mark_timeout(cell)
    _save()


def _save(**_kw):
    nb = _state.get("nb")
    if nb is None:
        return
    tmp = _PARTIAL + ".tmp"
    try:
        nbformat.write(nb, tmp)
        os.replace(tmp, _PARTIAL)
    except Exception:  # a full disk must not fail the run itself
        pass


c = get_config()  # noqa: F821 (provided by traitlets)
c.ExecutePreprocessor.on_notebook_start = _notebook_start
c.ExecutePreprocessor.on_cell_start = _cell_start
c.ExecutePreprocessor.on_cell_executed = _cell_executed
c.ExecutePreprocessor.shutdown_kernel = "immediate"

# Run in the kernel, silently, before it is killed: what a normal interpreter
# exit would flush (a file opened and written but never closed).
_FLUSH = '''
def _nbrun_flush():
    import gc, io
    for o in gc.get_objects():
        try:
            if isinstance(o, io.IOBase) and not o.closed and o.writable():
                o.flush()
        except Exception:
            pass
_nbrun_flush()
del _nbrun_flush
'''
_FLUSH_TIMEOUT = 2.0


def _patch_cleanup():
    try:
        from nbclient.client import NotebookClient
        from nbclient.util import ensure_async, run_sync
    except ImportError:
        return
    original = NotebookClient._async_cleanup_kernel

    async def flush(kc):
        msg_id = kc.execute(_FLUSH, silent=True, store_history=False)
        while True:
            msg = await kc.get_shell_msg()
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return

    async def _async_cleanup_kernel(self):
        kc = getattr(self, "kc", None)
        try:
            if kc is not None and self.km is not None and await ensure_async(self.km.is_alive()):
                await asyncio.wait_for(flush(kc), _FLUSH_TIMEOUT)
        except Exception:  # a kernel that is gone or stuck is killed anyway
            pass
        _kill(self.km)
        await original(self)

    # nbconvert's ExecutePreprocessor uses the synchronous wrapper.
    NotebookClient._async_cleanup_kernel = _async_cleanup_kernel
    NotebookClient._cleanup_kernel = run_sync(_async_cleanup_kernel)


def _kill(km):
    # jupyter_client's own kill polls for the end in 0.1 s steps: kill the
    # kernel's process group here and reap it, then let it clean up.
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    try:
        proc.wait(timeout=2)
    except Exception:
        pass


_patch_cleanup()


# Debian 12 pairs ipywidgets 6 with nbclient 0.7, whose widget handler
# expects the newer protocol's "state" in comm_open and crashes the whole
# run without it. Keep the run alive: such a widget simply is not tracked.
def _patch_widget_handler():
    try:
        from nbclient.client import NotebookClient
    except ImportError:
        return
    original = NotebookClient.on_comm_open_jupyter_widget

    def on_comm_open_jupyter_widget(self, msg):
        if "state" not in msg.get("content", {}).get("data", {}):
            return None
        return original(self, msg)

    NotebookClient.on_comm_open_jupyter_widget = on_comm_open_jupyter_widget


_patch_widget_handler()
