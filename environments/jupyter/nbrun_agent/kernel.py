# SPDX-License-Identifier: MIT
"""The kernel, as the agent runs it: started as uid 1000 with its standard
error drained (StderrTail), asked until it answers (_wait_ready), then the
flush hook, the preload and the warm-up, silently (_preload, _warm_up),
before `ready`; killed, and why it died.

KernelHost holds that state for the agent (agent.Agent is one): km and kc
(jupyter_client's manager and client), kernel_error, kernel_dead,
killed_why and language_info, with chan (channel.Channel) and sig
(privileges.Signaller). jupyter_client is imported when the kernel starts."""
import os
import re
import signal
import threading
import time

from . import privileges
from .channel import dumps
from .common import (DATA, KERNEL_NAME, KERNEL_START_TIMEOUT, PYTHON_KERNEL, SANDBOX_GID,
                     SANDBOX_UID, STDERR_KEEP, diag)
from .execution import Execution, import_executor, make_client
from .files import archive_chunks, archive_plan
from .kernel_code import RESET_CODE, SETUP_CODE, WARM_PANDAS, WARM_PLOT

MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class KernelHost:
    """The agent's side of its kernel."""

    def __init__(self, chan, signaller):
        self.chan = chan
        self.sig = signaller
        self.km = self.kc = None
        self.stderr = None
        self.kernel_error = None        # why the kernel is not usable
        self.kernel_dead = False
        self.killed_why = None          # the agent killed the kernel: why
        self.language_info = {}

    def kill_kernel(self):
        try:
            self.sig.send(signal.SIGKILL)
        except Exception as e:   # noqa: BLE001 (best effort on the way out)
            diag("killing the kernel: %s" % e)

    async def start_kernel(self, req_id=None):
        t0 = time.monotonic()
        try:
            await self._start_kernel()
            preloaded = await self._preload()
            if preloaded:
                await self._warm_up(preloaded)
                # what the preload and warm-up opened is not the user's
                await self._silent(RESET_CODE, KERNEL_START_TIMEOUT)
                # as in the kernel: what the agent set up is never garbage
                import gc
                gc.collect()
                gc.freeze()
        except Exception as e:   # noqa: BLE001
            tail = self.stderr.text() if self.stderr else ""
            self.kernel_error = "the kernel did not start: %s%s" % (
                e, ("; its last standard error: " + tail[-1000:]) if tail else "")
            diag(self.kernel_error)
            msg = {"type": "error", "message": self.kernel_error, "fatal": False}
            if req_id is not None:
                msg["id"] = req_id
            self.chan.send(msg)
            self.kill_kernel()
            return
        msg = {"type": "ready", "kernel_ms": int((time.monotonic() - t0) * 1000),
               "preloaded": preloaded}
        if req_id is not None:
            msg["id"] = req_id
        self.chan.send(msg)

    async def _start_kernel(self):
        import subprocess
        from jupyter_client.manager import AsyncKernelManager

        sig = self.sig

        class KernelManager(AsyncKernelManager):
            # Interrupts at a cell timeout go through the signaller thread.
            async def signal_kernel(self, signum):
                await sig.send_async(signum)

            # Only the process start (the provisioner's Popen) as root: the
            # connection file is written and read as uid 1000 would.
            async def _launch_kernel(self, kernel_cmd, **kw):
                if not privileges.THREAD_IDS:
                    return await super()._launch_kernel(kernel_cmd, **kw)
                prov = self.provisioner
                launch = prov.launch_kernel

                async def launch_as_root(cmd, **kwargs):
                    with privileges.root_euid():
                        return await launch(cmd, **kwargs)
                prov.launch_kernel = launch_as_root
                try:
                    return await super()._launch_kernel(kernel_cmd, **kw)
                finally:
                    del prov.launch_kernel

        prepare_dirs()
        self.km = KernelManager(kernel_name=KERNEL_NAME)
        r, w = os.pipe()
        try:
            await self.km.start_kernel(
                extra_arguments=["--HistoryManager.hist_file=:memory:"] if PYTHON_KERNEL else [],
                cwd=DATA,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=w,
                user=SANDBOX_UID, group=SANDBOX_GID, extra_groups=[])
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        self.stderr = StderrTail(r)
        self.sig.pgid = self.km.provisioner.pgid or self.km.provisioner.pid
        # What an execute needs, imported while the kernel boots (here, not
        # in a thread: two threads importing jupyter_client at once fail).
        import_executor()
        self.kc = self.km.client()
        self.kc.start_channels()
        # as nbclient's own client (after start_channels, which sets it):
        # input() raises StdinNotImplementedError instead of waiting
        self.kc.allow_stdin = False
        await self._wait_ready()

    async def _wait_ready(self):
        """kernel_info until it answers on shell and iopub: nbclient's
        wait_for_ready also waits for a 0.2 s silence on iopub, not needed
        here since every message is matched to its request."""
        from queue import Empty
        end = time.monotonic() + KERNEL_START_TIMEOUT
        while True:
            if not await self.km.is_alive():
                raise RuntimeError("the kernel exited (status %s)" % self.km.provisioner.process.poll()
                                   if self.km.provisioner.process else "the kernel exited")
            if time.monotonic() > end:
                raise RuntimeError("no answer in %d s" % KERNEL_START_TIMEOUT)
            msg_id = self.kc.kernel_info()
            try:
                reply = await self._reply(msg_id, 0.5)
            except Empty:
                continue
            try:
                while True:
                    msg = await self.kc.iopub_channel.get_msg(timeout=0.2)
                    if msg["parent_header"].get("msg_id") == msg_id:
                        break
            except Empty:
                continue          # iopub not subscribed yet: ask again
            self.language_info = reply["content"].get("language_info", {})
            return

    async def _reply(self, msg_id, timeout):
        """The shell reply to msg_id; Empty after `timeout` seconds."""
        from queue import Empty
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise Empty
            msg = await self.kc.shell_channel.get_msg(timeout=left)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    async def _silent(self, code, timeout):
        """Runs code silently (no history, no execution count); the reply
        status, or None when there was none in time."""
        from queue import Empty
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        try:
            reply = await self._reply(msg_id, timeout)
        except Empty:
            return None
        return reply["content"].get("status")

    async def _preload(self):
        if not PYTHON_KERNEL:
            return []
        if await self._silent(SETUP_CODE, KERNEL_START_TIMEOUT) != "ok":
            diag("the flush hook did not install; every flush scans the kernel")
        done = []
        for name in os.environ.get("NBRUN_PRELOAD", "").split(","):
            name = name.strip()
            if not name:
                continue
            if not MODULE_NAME.match(name):
                diag("preload: %r is not a module name" % name)
                continue
            if await self._silent("__import__(%r)" % name, KERNEL_START_TIMEOUT) == "ok":
                done.append(name)
            else:
                diag("preload: %s did not import" % name)
        return done

    async def _warm_up(self, preloaded):
        """A pool's sandbox serves one request, its first: pay the costs of a
        first request here, before `ready`. Nothing of it is visible to the
        code: silent executions and one not stored in the history (execution
        counts and tracebacks stay as in a cold sandbox); the figure is drawn
        without pyplot, so figure numbers are untouched."""
        import asyncio
        import nbformat
        # the first fetch imports tarfile and walks the (empty) /mnt/data,
        # in the thread that fetches do it in (its start is 1-2 ms)
        plan = await asyncio.to_thread(archive_plan, 1 << 20)
        for _chunk in archive_chunks(plan[0]):
            pass
        if "matplotlib.pyplot" in preloaded:
            await self._silent(WARM_PLOT, KERNEL_START_TIMEOUT)
        if "pandas" in preloaded:
            await self._silent(WARM_PANDAS, KERNEL_START_TIMEOUT)
        # nbclient's first cell: client, message handling, output validation
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            "import sys; sys.stdout.write(' '); sys.stdout.flush()")])
        client = make_client(Execution(self, None, 30, False, False), nb)
        client.flush_with = 0       # and the flush's user expression, formatted
        await client.async_execute_cell(nb.cells[0], 0, execution_count=1, store_history=False)
        dumps(nb)

    async def kernel_usable(self, task):
        await task
        if self.kernel_error:
            return "failed", self.kernel_error
        if self.kernel_dead or not await self.km.is_alive():
            self.kernel_dead = True
            return "dead", self.dead_message()
        return None, None

    def dead_message(self):
        proc = getattr(self.km.provisioner, "process", None) if self.km and self.km.provisioner else None
        code = proc.poll() if proc is not None else None
        if self.stderr:
            self.stderr.closed.wait(0.3)
        tail = self.stderr.text() if self.stderr else ""
        if self.killed_why:
            return self.killed_why
        msg = "the kernel died"
        if code is not None:
            msg += " (%s)" % ("signal %d" % -code if code < 0 else "exit status %d" % code)
        if tail:
            msg += "; its last standard error: " + tail[-1500:]
        return msg


class StderrTail:
    """Drains the kernel's standard error, keeping the last 4 KiB."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._run, name="kernel-stderr", daemon=True).start()

    def _run(self):
        try:
            while True:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    break
                with self.lock:
                    self.buf += chunk
                    del self.buf[:-STDERR_KEEP]
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.closed.set()

    def text(self):
        with self.lock:
            data = bytes(self.buf)
        return data.decode("utf-8", "replace").strip()


def prepare_dirs():
    # What nbrun-exec did: the matplotlib cache built into the image, and the
    # runtime directory for the connection file (both on the /tmp tmpfs,
    # created with fsuid 1000 so the kernel owns them).
    mpl = os.environ.get("MPLCONFIGDIR")
    runtime = os.environ.get("JUPYTER_RUNTIME_DIR")
    for d in (mpl, runtime):
        if d:
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as e:
                diag("mkdir %s: %s" % (d, e))
    if mpl:
        src = "/opt/nbrun/matplotlib"
        try:
            names = os.listdir(src)
        except OSError:
            names = []
        for name in names:
            try:
                with open(os.path.join(src, name), "rb") as f, \
                        open(os.path.join(mpl, name), "wb") as g:
                    g.write(f.read())
            except OSError:
                pass
