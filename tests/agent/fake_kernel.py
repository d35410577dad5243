# SPDX-License-Identifier: MIT
"""A kernel in the test's own event loop, for the agent's unit tests: it
answers kernel_info and execute_request on a shell queue and publishes
status, execute_input and outputs on an iopub queue, in ipykernel's order,
as the messages jupyter_client hands nbclient and the agent. Behind the
kernel-manager and kernel-client interfaces the agent uses (FakeManager
stands in for jupyter_client's AsyncKernelManager, which the agent
subclasses), and signalled through FakeSignaller as the agent's Signaller
signals the real one.

A cell's source is a small script, one command a line:

    print TEXT          a stdout stream output
    stderr TEXT         a stderr stream output
    result TEXT         an execute_result (text/plain)
    display ID TEXT     a display_data with display_id ID
    update ID TEXT      an update_display_data of ID
    raise NAME: VALUE   an error output, and the reply says error
    fail NAME: VALUE    the reply says error without an error output
    sleep SECONDS       runs that long; SIGINT ends it with KeyboardInterrupt
    hang                runs until killed, SIGINT or not
    die                 the kernel exits (status 1) without a reply
    idle_after SECONDS  the idle status comes that long after the reply

Any other line does nothing (so real code is "run" too). Silent code is
recorded; `__import__('NAME')` fails unless NAME is importable."""
import asyncio
import datetime
import os
import re
import signal
import uuid
from queue import Empty

IMPORT = re.compile(r"__import__\('([^']*)'\)\Z")


class FakeKernel:
    def __init__(self, importable=("json",), language="python", start_fails=False, lost_iopub=0):
        self.importable = set(importable)
        self.lost_iopub = lost_iopub  # kernel_info requests whose iopub messages are lost
        self.language_info = {"name": language, "version": "3.11", "mimetype": "text/x-python"}
        self.start_fails = start_fails
        self.shell = asyncio.Queue()
        self.iopub = asyncio.Queue()
        self.requests = asyncio.Queue()
        self.alive = False
        self.exit_code = None
        self.exited = asyncio.Event()
        self.interrupt = asyncio.Event()
        self.running = False          # a cell is running (SIGINT reaches it)
        self.count = 0
        self.executed = []            # (code, silent, store_history, user_expressions)
        self.signals = []
        self.stderr_fd = None
        self.task = None

    # -- the process ----------------------------------------------------------

    def start(self, stderr_fd):
        self.stderr_fd = os.dup(stderr_fd)    # as a child inherits it
        if self.start_fails:
            self.write_stderr("fake-kernel: cannot start\n")
            self.exit(2)
            return
        self.alive = True
        self.task = asyncio.ensure_future(self._serve())

    def write_stderr(self, text):
        if self.stderr_fd is not None:
            os.write(self.stderr_fd, text.encode())

    def exit(self, code):
        self.alive = False
        self.exit_code = code
        if self.stderr_fd is not None:
            os.close(self.stderr_fd)
            self.stderr_fd = None
        self.exited.set()

    def signal(self, sig):
        """What a signal to the kernel's process group does; False when
        there is no such group any more."""
        if not self.alive:
            return False
        self.signals.append(sig)
        if sig == signal.SIGKILL:
            self.exit(-signal.SIGKILL)
        elif sig == signal.SIGINT and self.running:
            self.interrupt.set()      # ipykernel ignores SIGINT between cells
        return True

    def submit(self, kind, **kw):
        msg_id = uuid.uuid4().hex
        self.requests.put_nowait((kind, msg_id, kw))
        return msg_id

    # -- messages -------------------------------------------------------------

    def _msg(self, msg_type, content, parent):
        return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type,
                           "date": datetime.datetime.now(datetime.timezone.utc)},
                "msg_id": None, "msg_type": msg_type, "parent_header": {"msg_id": parent},
                "metadata": {}, "content": content, "buffers": []}

    def pub(self, msg_type, content, parent):
        self.iopub.put_nowait(self._msg(msg_type, content, parent))

    async def _serve(self):
        while self.alive:
            kind, msg_id, kw = await self.requests.get()
            if not self.alive:
                break
            if kind == "kernel_info":
                # a client's iopub subscription takes a while: what the
                # kernel publishes before is lost
                lost = self.lost_iopub > 0
                self.lost_iopub -= 1
                if not lost:
                    self.pub("status", {"execution_state": "busy"}, msg_id)
                self.shell.put_nowait(self._msg("kernel_info_reply", {
                    "status": "ok", "protocol_version": "5.3",
                    "language_info": self.language_info}, msg_id))
                if not lost:
                    self.pub("status", {"execution_state": "idle"}, msg_id)
                continue
            self.pub("status", {"execution_state": "busy"}, msg_id)
            await self._execute(msg_id, **kw)

    async def _execute(self, msg_id, code, silent=False, store_history=True,
                       user_expressions=None, **_kw):
        self.executed.append((code, silent, store_history, dict(user_expressions or {})))
        if not silent:
            if store_history:
                self.count += 1
            self.pub("execute_input", {"code": code, "execution_count": self.count}, msg_id)
        self.running = True
        self.interrupt.clear()
        try:
            reply, idle_after = await self._run(code, msg_id, silent)
        finally:
            self.running = False
        if reply is None:
            return                    # died: no reply, no idle
        reply["execution_count"] = self.count
        if reply["status"] == "ok":
            reply["user_expressions"] = {
                k: {"status": "ok", "data": {"text/plain": "None"}, "metadata": {}}
                for k in (user_expressions or {})}
        else:
            reply["user_expressions"] = {}
        self.shell.put_nowait(self._msg("execute_reply", reply, msg_id))
        if idle_after:
            await asyncio.sleep(idle_after)
        self.pub("status", {"execution_state": "idle"}, msg_id)

    async def _run(self, code, parent, silent):
        if silent:
            m = IMPORT.match(code.strip())
            if m and m.group(1) not in self.importable:
                return self._error("ModuleNotFoundError", "No module named %r" % m.group(1),
                                   parent, output=False), 0
            return {"status": "ok"}, 0
        idle_after = 0
        for line in code.splitlines():
            word, _, rest = line.strip().partition(" ")
            if word == "print":
                self.pub("stream", {"name": "stdout", "text": rest + "\n"}, parent)
            elif word == "stderr":
                self.pub("stream", {"name": "stderr", "text": rest + "\n"}, parent)
            elif word == "result":
                self.pub("execute_result", {"data": {"text/plain": rest}, "metadata": {},
                                            "execution_count": self.count}, parent)
            elif word in ("display", "update"):
                did, _, text = rest.partition(" ")
                self.pub("display_data" if word == "display" else "update_display_data",
                         {"data": {"text/plain": text}, "metadata": {},
                          "transient": {"display_id": did}}, parent)
            elif word in ("raise", "fail"):
                name, _, value = rest.partition(":")
                return self._error(name.strip(), value.strip(), parent,
                                   output=word == "raise"), idle_after
            elif word == "sleep":
                try:
                    await asyncio.wait_for(self.interrupt.wait(), float(rest))
                except asyncio.TimeoutError:
                    continue
                return self._error("KeyboardInterrupt", "", parent), idle_after
            elif word == "hang":
                await self.exited.wait()
                return None, 0
            elif word == "die":
                self.write_stderr("fake-kernel: fatal error in cell\n")
                self.exit(1)
                return None, 0
            elif word == "idle_after":
                idle_after = float(rest)
            if not self.alive:
                return None, 0
        return {"status": "ok"}, idle_after

    def _error(self, name, value, parent, output=True):
        tb = ["Traceback (fake)", "%s: %s" % (name, value)]
        if output:
            self.pub("error", {"ename": name, "evalue": value, "traceback": tb}, parent)
        return {"status": "error", "ename": name, "evalue": value, "traceback": tb}


class FakeChannel:
    def __init__(self, queue):
        self.queue = queue

    async def get_msg(self, timeout=None):
        if not self.queue.empty():
            return self.queue.get_nowait()
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty


class FakeClient:
    """jupyter_client's AsyncKernelClient, as much as nbclient and the agent use."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.shell_channel = FakeChannel(kernel.shell)
        self.iopub_channel = FakeChannel(kernel.iopub)
        self.allow_stdin = True
        self.channels = False

    def start_channels(self):
        self.channels = True

    def stop_channels(self):
        self.channels = False

    async def is_alive(self):
        return self.kernel.alive

    def kernel_info(self):
        return self.kernel.submit("kernel_info")

    def execute(self, code, silent=False, store_history=True, user_expressions=None,
                allow_stdin=None, stop_on_error=True):
        return self.kernel.submit("execute", code=code, silent=silent, store_history=store_history,
                                  user_expressions=user_expressions, allow_stdin=allow_stdin,
                                  stop_on_error=stop_on_error)


class FakeProcess:
    def __init__(self, kernel):
        self.kernel = kernel

    def poll(self):
        return self.kernel.exit_code


class FakeProvisioner:
    def __init__(self, kernel):
        self.kernel = kernel
        self.pid = self.pgid = 4242
        self.process = FakeProcess(kernel)

    async def wait(self):
        await self.kernel.exited.wait()
        return self.kernel.exit_code


class FakeManager:
    """Stands in for jupyter_client.manager.AsyncKernelManager: the agent's
    KernelManager subclasses it (signal_kernel, _launch_kernel). make_kernel
    makes the kernel a start launches; every manager made is in `made`."""

    make_kernel = FakeKernel
    made = []

    def __init__(self, kernel_name=None, **_kw):
        self.kernel_name = kernel_name
        self.kernel = None
        self.provisioner = None
        self.start_kw = None
        self.cleaned = False
        type(self).made.append(self)

    async def _launch_kernel(self, kernel_cmd, **kw):
        self.kernel = self.make_kernel()
        self.kernel.start(kw["stderr"])
        self.provisioner = FakeProvisioner(self.kernel)

    async def start_kernel(self, **kw):
        self.start_kw = kw
        await self._launch_kernel(["fake-kernel", "-f", "connection.json"], **kw)

    async def is_alive(self):
        return self.kernel is not None and self.kernel.alive

    async def signal_kernel(self, signum):
        raise AssertionError("the agent signals the kernel through its Signaller only")

    async def interrupt_kernel(self):
        # as AsyncKernelManager does for a kernel whose interrupt_mode is signal
        await self.signal_kernel(signal.SIGINT)

    def client(self):
        return FakeClient(self.kernel)

    async def cleanup_resources(self, restart=False):
        self.cleaned = True


class FakeSignaller:
    """The agent's Signaller, reaching the kernel of the manager made last
    (of `made`, a FakeManager class's list)."""

    def __init__(self, made=None):
        self.made = FakeManager.made if made is None else made
        self.pgid = None
        self.sent = []

    def _kill(self, sig):
        self.sent.append(sig)
        if self.pgid is None or not self.made or self.made[-1].kernel is None:
            return False
        return self.made[-1].kernel.signal(sig)

    def send(self, sig, timeout=2.0):
        return self._kill(sig)

    async def send_async(self, sig):
        return self._kill(sig)
