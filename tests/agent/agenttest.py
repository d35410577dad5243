# SPDX-License-Identifier: MIT
"""What the agent's unit tests share (no engine, no image): the package
environments/jupyter/nbrun_agent on sys.path, the host's side of the frames
(encoding what the host sends, decoding what the agent wrote), a Channel
into a temporary file, and a temporary /mnt/data.

The tests import the package from the source tree: no byte code is written
there (the image compiles its own)."""
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest
from unittest import mock

sys.dont_write_bytecode = True
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "environments", "jupyter"))
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from nbrun_agent import channel, files  # noqa: E402

HEADER = struct.Struct(">2sBcI")


def frame(kind, payload=b"", magic=b"NB", version=1):
    return HEADER.pack(magic, version, kind, len(payload)) + payload


def message(msg, blob=None, chunk=1 << 20):
    """What the host writes for one request (PROTOCOL.md, "Frames")."""
    if blob is not None:
        msg = dict(msg, blob=len(blob))
    out = frame(b"J", json.dumps(msg).encode())
    if blob is not None:
        for off in range(0, len(blob), chunk):
            out += frame(b"D", blob[off:off + chunk])
        out += frame(b"E")
    return out


def decode(data):
    """The agent's frames, read as strictly as PROTOCOL.md asks of the host:
    [(message, blob or None)]."""
    out, pos = [], 0
    while pos < len(data):
        magic, version, kind, size = HEADER.unpack_from(data, pos)
        pos += HEADER.size
        assert magic == b"NB" and version == 1, (magic, version)
        assert kind == b"J" and size <= 1 << 20, (kind, size)
        msg = json.loads(data[pos:pos + size].decode("utf-8"))
        pos += size
        blob = None
        if "blob" in msg:
            parts = []
            while True:
                magic, version, kind, size = HEADER.unpack_from(data, pos)
                pos += HEADER.size
                assert magic == b"NB" and version == 1 and kind in (b"D", b"E"), kind
                if kind == b"E":
                    assert size == 0
                    break
                assert size <= 1 << 20
                parts.append(data[pos:pos + size])
                pos += size
            blob = b"".join(parts)
            assert len(blob) == msg["blob"], (len(blob), msg["blob"])
        out.append((msg, blob))
    return out


class Capture:
    """A real Channel whose frames go to a temporary file; messages() decodes
    what was written since the last call."""

    def __init__(self):
        self.file = tempfile.TemporaryFile()
        self.chan = channel.Channel(self.file.fileno())
        self.pos = 0

    def messages(self):
        self.file.seek(self.pos)
        data = self.file.read()
        self.pos += len(data)
        return decode(data)

    def close(self):
        self.file.close()


def input_fd(data):
    """A descriptor the Reader reads `data` from, then end of input."""
    f = tempfile.TemporaryFile()
    f.write(data)
    f.seek(0)
    return f


class DataDir(unittest.TestCase):
    """A test with its own /mnt/data: self.data, a temporary directory the
    files module (and blob_cap) use instead."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="nbrun-agent-test-")
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.data)
        for patch in (mock.patch.object(files, "DATA", self.data),
                      mock.patch.object(channel, "DATA", self.data)):
            patch.start()
            self.addCleanup(patch.stop)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
        super().tearDown()

    def write(self, rel, data=b"", mtime=None):
        path = os.path.join(self.data, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return path


class Exited(Exception):
    """os._exit(code), called by the agent at shutdown or end of input."""


class AgentCase(unittest.IsolatedAsyncioTestCase):
    """An Agent (agent.Agent, unchanged) with its own /mnt/data, its channel
    into a Capture, and its kernel a fake_kernel.FakeKernel: jupyter_client's
    AsyncKernelManager is replaced by fake_kernel.FakeManager while the test
    runs, so the agent's own kernel start, preload and executions run.
    asyncSetUp starts the kernel as serve() does; self.ready() waits for it."""

    kernel_options = {}         # for fake_kernel.FakeKernel
    kernel_name = "python3"     # NBRUN_KERNEL
    preload = ""                # NBRUN_PRELOAD

    def setUp(self):
        super().setUp()
        import fake_kernel
        from nbrun_agent import execution, kernel
        from nbrun_agent.agent import Agent
        self.tmp = tempfile.mkdtemp(prefix="nbrun-agent-test-")
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.data)
        options = dict(self.kernel_options)
        manager = type("Manager", (fake_kernel.FakeManager,),
                       {"made": [], "make_kernel": lambda _self: fake_kernel.FakeKernel(**options)})
        self.managers = manager.made
        env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "JUPYTER_RUNTIME_DIR")}
        env["NBRUN_PRELOAD"] = self.preload
        patches = [mock.patch.object(files, "DATA", self.data),
                   mock.patch.object(channel, "DATA", self.data),
                   mock.patch("jupyter_client.manager.AsyncKernelManager", manager),
                   mock.patch.dict(os.environ, env, clear=True),
                   mock.patch.object(os, "_exit", side_effect=self._exit)]
        for module in (execution, kernel):
            patches += [mock.patch.object(module, "KERNEL_NAME", self.kernel_name),
                        mock.patch.object(module, "PYTHON_KERNEL", self.kernel_name == "python3")]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)
        self.capture = Capture()
        self.addCleanup(self.capture.close)
        # the agent's diagnostics (fd 2), kept for diagnostics()
        self.stderr = tempfile.TemporaryFile()
        saved = os.dup(2)
        os.dup2(self.stderr.fileno(), 2)
        self.addCleanup(self.stderr.close)
        self.addCleanup(os.close, saved)
        self.addCleanup(os.dup2, saved, 2)
        self.sig = fake_kernel.FakeSignaller(self.managers)
        self.agent = Agent(self.capture.chan, self.sig)
        self.sent = []          # every message decoded so far, in order

    def diagnostics(self):
        """What the agent wrote to its standard error so far."""
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")

    def _exit(self, code):
        raise Exited(code)

    def tearDown(self):
        for m in self.managers:
            if m.kernel is not None and m.kernel.alive:
                m.kernel.exit(-9)
        shutil.rmtree(self.tmp, ignore_errors=True)
        super().tearDown()

    async def asyncSetUp(self):
        import asyncio
        self.agent.loop = asyncio.get_running_loop()
        self.agent.loop.set_debug(False)     # as the agent runs (no slow-callback notes)
        self.agent.queue = asyncio.Queue()
        self.agent.kernel_task = asyncio.ensure_future(self.agent.start_kernel())

    @property
    def kernel(self):
        return self.managers[-1].kernel

    def messages(self):
        new = self.capture.messages()
        self.sent += new
        return new

    async def ready(self):
        await self.agent.kernel_task
        msgs = self.messages()
        self.assertEqual([m["type"] for m, _ in msgs], ["ready"], msgs)
        return msgs[0][0]

    async def request(self, msg, blob=None, refused=None):
        """One request through the agent's dispatch; the messages it sent."""
        from nbrun_agent.channel import Request
        if blob is not None:
            msg = dict(msg, blob=len(blob))
        await self.agent.dispatch(Request(msg, blob, refused))
        return self.messages()

    async def execute(self, cells, rid="x1", **opts):
        """An execute of code cells (sources), answered in full: (cell
        messages, done message, done's metadata)."""
        import nbformat
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) if isinstance(c, str) else c
                                             for c in cells])
        msgs = await self.request(dict({"type": "execute", "id": rid}, **opts),
                                  nbformat.writes(nb).encode())
        self.assertEqual(msgs[-1][0]["type"], "done", msgs)
        cells = [(m, json.loads(b)) for m, b in msgs if m["type"] == "cell"]
        return cells, msgs[-1][0], json.loads(msgs[-1][1]), msgs
