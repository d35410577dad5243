# SPDX-License-Identifier: MIT
# nbrun_execute.py NBCONVERT-ARGUMENTS...
#
# Runs the nbconvert application (what `jupyter nbconvert` starts) on
# /app/notebook.ipynb, with one change of order: the kernel starts first,
# when the container starts, and boots (about a second) while nbconvert is
# imported and while nbrun is still uploading the notebook. nbconvert then
# executes the notebook in that kernel instead of starting its own.
#
# The kernel is started by jupyter_client exactly as nbclient would start it
# (same kernel spec, the same extra arguments, in the event loop nbclient
# uses afterwards), so interrupts at a cell timeout, dead-kernel detection and
# the shutdown work as before.
import atexit
import os
import sys
import time

READY = "/app/.ready"
READY_WAIT = 30.0


def start_kernel():
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    km = AsyncKernelManager(kernel_name="python3")
    # nbclient passes these two; the kernel itself changes to /mnt/data.
    run_sync(km.start_kernel)(extra_arguments=["--HistoryManager.hist_file=:memory:"],
                              cwd="/app")
    atexit.register(kill, km)
    return km


def kill(km):
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is not None and proc.poll() is None:
        proc.kill()


def wait_ready():
    end = time.monotonic() + READY_WAIT
    while not os.path.exists(READY):
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def use_kernel(km):
    from nbclient.client import NotebookClient

    original = NotebookClient.create_kernel_manager
    pending = [km]

    def create_kernel_manager(self):
        # The first notebook client gets the kernel started above.
        if self.km is None and pending and self.kernel_name == "python3":
            self.km = pending.pop()
            return self.km
        return original(self)

    NotebookClient.create_kernel_manager = create_kernel_manager


def main():
    km = start_kernel()
    use_kernel(km)
    from nbconvert.nbconvertapp import main as nbconvert_main

    if not wait_ready():
        print("nbrun: the notebook never arrived", file=sys.stderr)
        return 125
    sys.argv = ["jupyter-nbconvert"] + sys.argv[1:]
    try:
        nbconvert_main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
