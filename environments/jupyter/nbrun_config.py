# SPDX-License-Identifier: MIT
# nbconvert configuration for nbrun:
# - save the notebook after every cell to /app/partial.ipynb, so that a run
#   killed at its wall-clock deadline still returns the finished cells;
# - mark a cell interrupted at its cell timeout (metadata nbrun.timed_out) and
#   make sure it shows an error, so nbrun can report status "timeout".
import os
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
