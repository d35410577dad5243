# SPDX-License-Identifier: MIT
# nbconvert configuration for nbrun: save the notebook after every cell to
# /app/partial.ipynb, so that a run killed at its wall-clock deadline still
# returns the outputs of the cells that finished.
import os

import nbformat

_PARTIAL = "/app/partial.ipynb"
_state = {}


def _notebook_start(notebook=None, **_kw):
    _state["nb"] = notebook


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
c.ExecutePreprocessor.on_cell_executed = _save
