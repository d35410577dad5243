# SPDX-License-Identifier: MIT
"""The Python the agent runs in the python3 kernel, as text: the files of
in_kernel/ (real Python, checked and byte-compiled like the rest, but never
imported by the agent), each without its leading comment block."""
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "in_kernel")


def read(name):
    """in_kernel/NAME as the kernel gets it: its leading `#` lines (the
    license and what the file is) left out."""
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        lines = f.read().splitlines(True)
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    return "".join(lines[i:])


FLUSH_FUNCTION = read("flush.py")
# The flush hook, installed before the first cell; FLUSH_SOURCE is the flush
# itself, made a function of the `_nbrun` module there.
SETUP_CODE = read("flush_hook.py") + (
    "FLUSH_SOURCE = %r\n_nbrun_setup()\ndel _nbrun_setup, _nbrun_speed, FLUSH_SOURCE\n"
    % FLUSH_FUNCTION)
# The flush as a statement of its own, and as the user expression that
# rides on the last cell's execute_request (evaluated right after the cell,
# when it did not raise: no round trip of its own).
FLUSH_CODE = FLUSH_FUNCTION + "_nbrun_flush()\ndel _nbrun_flush\n"
FLUSH_EXPR = "__import__('_nbrun').flush()"
RESET_CODE = read("reset.py")
# What the warm-up draws and shows, in the kernel (silent; names removed).
WARM_PLOT = read("warm_plot.py")
WARM_PANDAS = read("warm_pandas.py")
