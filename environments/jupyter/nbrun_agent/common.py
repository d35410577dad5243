# SPDX-License-Identifier: MIT
"""What every part of the agent shares: the protocol's identity, the
sandbox's fixed places and limits, the exit statuses and diagnostics."""
import os

PROTOCOL = 1
AGENT = "nbrun-agent 0.1.0"
# The kernel is chosen when the sandbox is made (nbrun sets NBRUN_KERNEL on
# the container): python3, ir, jslab, tslab or bash in the runtime image.
# What the agent runs silently in the kernel (the flush hook, the preload,
# the warm-up) is Python and is done for python3 only.
KERNEL_NAME = os.environ.get("NBRUN_KERNEL") or "python3"
PYTHON_KERNEL = KERNEL_NAME == "python3"
SANDBOX_UID = SANDBOX_GID = 1000
DATA = "/mnt/data"

KERNEL_START_TIMEOUT = 60.0
FLUSH_TIMEOUT = 2.0
# How long a cell's outputs may take to arrive after its reply (nbclient's
# iopub_timeout, whose default of 4 s let a slow big output go unnoticed).
OUTPUT_WAIT = 60
STDERR_KEEP = 4096
SNAPSHOT_MAX = 100000             # files remembered to send only what an execute changed
LIST_MAX = 10000                  # entries in a listing
INTERRUPT_RETRIES = 5             # SIGINT again each second while the cell goes on

EXIT_OK, EXIT_BUG, EXIT_VIOLATION = 0, 1, 3


def diag(msg):
    try:
        os.write(2, ("nbrun-agent: %s\n" % msg).encode("utf-8", "replace"))
    except OSError:
        pass
