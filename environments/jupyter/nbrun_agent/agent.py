# SPDX-License-Identifier: MIT
"""The agent: serves the host's requests in order (PROTOCOL.md, "Messages"),
each by its handler, while the Reader thread reads them off the channel; an
`interrupt` acts at once. The kernel's side is kernel.KernelHost, an
execute's is execution.Execution, the files' are in files."""
import os
import signal
import threading

from .channel import MAX_ID, Reader, dumps
from .common import (DATA, EXIT_OK, EXIT_VIOLATION, INTERRUPT_RETRIES, LIST_MAX, OUTPUT_WAIT,
                     diag)
from .execution import Execution
from .files import (archive_chunks, archive_plan, file_chunks, list_data, open_data_file,
                    snapshot_data, unpack)
from . import egress
from .kernel import KernelHost


class Agent(KernelHost):
    def __init__(self, chan, signaller):
        super().__init__(chan, signaller)
        self.queue = None
        self.loop = None
        self.kernel_task = None
        self.running = None             # the Execution under way
        self.interrupt_early = []       # execute ids interrupted before they started
        self.snapshot = None            # /mnt/data when the last `mark` execute began
        self.handlers = {"put": self.on_put, "execute": self.on_execute, "fetch": self.on_fetch,
                         "ping": self.on_ping, "shutdown": self.on_shutdown,
                         "restart": self.on_restart, "list": self.on_list,
                         "read": self.on_read}

    # -- ending ------------------------------------------------------------------

    def end(self, violation):
        """Called by the reader thread: end of input or a violation."""
        self.kill_kernel()
        if violation is None:
            os._exit(EXIT_OK)
        diag("protocol violation: %s" % violation)
        # A frame being written by the loop must not be cut: wait for it, a bit.
        if self.chan.lock.acquire(timeout=2.0):
            self.chan.lock.release()
            try:
                self.chan.send({"type": "error", "message": "protocol violation: " + violation,
                                "fatal": True})
            except OSError:
                pass
        os._exit(EXIT_VIOLATION)

    def deliver(self, req):
        # An interrupt acts at once; every other request waits its turn.
        if req.type == "interrupt":
            self.loop.call_soon_threadsafe(self._interrupt_now, req)
        else:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, req)

    def _interrupt_now(self, req):
        import asyncio
        asyncio.ensure_future(self.on_interrupt(req))

    # -- requests ----------------------------------------------------------------

    def error(self, req, message, fatal=False):
        msg = {"type": "error", "message": message, "fatal": fatal}
        if req is not None and req.id is not None:
            msg["id"] = req.id
        self.chan.send(msg)

    async def serve(self, fd=0):
        """Reads requests from fd (the channel: standard input) and serves
        them in order while the kernel starts; returns never."""
        import asyncio
        self.loop = asyncio.get_running_loop()
        self.queue = asyncio.Queue()
        reader = Reader(fd, self.deliver, self.end)
        threading.Thread(target=reader.run, name="channel-reader", daemon=True).start()
        # The way out of a run with an allow-list, listening before any code runs.
        if egress.wanted():
            self.egress = await egress.start()
        self.kernel_task = asyncio.ensure_future(self.start_kernel())
        while True:
            await self.dispatch(await self.queue.get())

    async def dispatch(self, req):
        """One request, by its handler, after the checks every type shares."""
        handler = self.handlers.get(req.type)
        if handler is None:
            self.error(req, "unknown message type %r" % req.type[:100])
            return
        if req.type != "shutdown" and req.id is None:
            self.error(req, "%s without a string id of at most %d bytes" % (req.type, MAX_ID))
            return
        if req.refused:
            self.error(req, req.refused)
            return
        await handler(req, self.kernel_task)

    async def on_interrupt(self, req):
        import asyncio
        target = req.msg.get("target")
        if req.id is None or not isinstance(target, str):
            self.error(req, "interrupt: needs a string id and the id of an execute as target")
            return
        run = self.running
        running = run is not None and run.req.id == target and not run.finished
        if not running:
            # not started yet (it waits behind another request), or over
            self.interrupt_early = (self.interrupt_early + [target])[-16:]
        self.chan.send({"type": "interrupted", "id": req.id, "target": target, "running": running})
        if not running:
            return
        run.interrupted = True
        # ipykernel ignores SIGINT between cells: send it again while the
        # same cell goes on (it may have been between two cells)
        cell = run.cell
        for _ in range(INTERRUPT_RETRIES):
            if run.finished or run.cell != cell or self.kernel_dead:
                return
            try:
                await self.sig.send_async(signal.SIGINT)
            except Exception as e:   # noqa: BLE001
                diag("interrupt: %s" % e)
                return
            await asyncio.sleep(1.0)

    async def on_restart(self, req, kernel):
        import asyncio
        try:
            await kernel
        except Exception:   # noqa: BLE001 (start_kernel reports its own failure)
            pass
        self.kill_kernel()
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            if self.km is not None and self.km.provisioner is not None:
                await asyncio.wait_for(self.km.provisioner.wait(), 10)
                await self.km.cleanup_resources()
        except Exception as e:   # noqa: BLE001 (what is left of a dead kernel)
            diag("restart: cleaning up the old kernel: %r" % e)
        self.km = self.kc = None
        self.kernel_error, self.kernel_dead, self.killed_why = None, False, None
        self.kernel_task = asyncio.ensure_future(self.start_kernel(req.id))
        await self.kernel_task

    async def on_list(self, req, kernel):
        import asyncio
        if req.msg.get("path") != DATA:
            self.error(req, "list: path must be %s" % DATA)
            return
        try:
            entries, truncated = await asyncio.to_thread(list_data, LIST_MAX)
        except OSError as e:
            self.error(req, "list: %s: %s" % (DATA, e.strerror))
            return
        self.chan.send({"type": "listing", "id": req.id, "path": DATA, "truncated": truncated},
                       dumps(entries))

    async def on_read(self, req, kernel):
        import asyncio
        path, max_bytes = req.msg.get("path"), req.msg.get("max_bytes")
        if not isinstance(path, str) or type(max_bytes) is not int or max_bytes < 0:
            self.error(req, "read: needs a path and max_bytes")
            return
        try:
            fd, size = await asyncio.to_thread(open_data_file, path)
        except LookupError as e:
            msg = {"type": "error", "id": req.id, "code": e.args[0], "message": "read: " + e.args[1],
                   "fatal": False}
            self.chan.send(msg)
            return
        if size > max_bytes:
            os.close(fd)
            self.chan.send({"type": "error", "id": req.id, "code": "too_large", "fatal": False,
                            "message": "read: the file has %d bytes, over %d" % (size, max_bytes)})
            return
        self.chan.send_stream({"type": "file", "id": req.id, "path": path, "size": size},
                              size, file_chunks(fd, size))

    async def on_ping(self, req, kernel):
        self.chan.send({"type": "pong", "id": req.id})

    async def on_shutdown(self, req, kernel):
        self.kill_kernel()
        os._exit(EXIT_OK)

    async def on_put(self, req, kernel):
        import asyncio
        if req.msg.get("path") != DATA:
            self.error(req, "put: path must be %s" % DATA)
            return
        if req.blob is None:
            self.error(req, "put without data")
            return
        try:
            files = await asyncio.to_thread(unpack, req.blob)
        except ValueError as e:
            self.error(req, "put: %s" % e)
            return
        self.chan.send({"type": "stored", "id": req.id, "path": DATA, "files": files})

    async def on_fetch(self, req, kernel):
        import asyncio
        max_bytes = req.msg.get("max_bytes")
        if req.msg.get("path") != DATA:
            self.error(req, "fetch: path must be %s" % DATA)
            return
        if type(max_bytes) is not int or max_bytes < 1024:
            self.error(req, "fetch: max_bytes must be an integer of at least 1024")
            return
        changed = req.msg.get("changed", False)
        if not isinstance(changed, bool):
            self.error(req, "fetch: changed must be true or false")
            return
        max_entries = req.msg.get("max_entries")
        if max_entries is not None and (type(max_entries) is not int or max_entries < 1):
            self.error(req, "fetch: max_entries must be an integer of at least 1")
            return
        try:
            entries, total, truncated = await asyncio.to_thread(
                archive_plan, max_bytes, self.snapshot if changed else None, max_entries)
        except OSError as e:
            self.error(req, "fetch: %s: %s" % (DATA, e.strerror))
            return
        self.chan.send_stream({"type": "archive", "id": req.id, "path": DATA,
                               "truncated": truncated}, total, archive_chunks(entries))

    async def on_execute(self, req, kernel):
        msg = req.msg
        timeout = msg.get("cell_timeout", 0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            self.error(req, "execute: cell_timeout must be a number of seconds >= 0")
            return
        count_from = msg.get("count_from", 0)
        if type(count_from) is not int or count_from < 0:
            self.error(req, "execute: count_from must be an integer >= 0")
            return
        output_wait = msg.get("output_wait", OUTPUT_WAIT)
        if type(output_wait) is not int or output_wait < 1:
            self.error(req, "execute: output_wait must be an integer >= 1")
            return
        for key in ("stream", "stop_on_error", "mark"):
            if not isinstance(msg.get(key, False), bool):
                self.error(req, "execute: %s must be true or false" % key)
                return
        if req.blob is None:
            self.error(req, "execute without a notebook")
            return
        run = Execution(self, req, timeout, msg.get("stream", False), msg.get("stop_on_error", False))
        run.count_from = count_from
        run.output_wait = output_wait
        if req.id in self.interrupt_early:
            self.interrupt_early.remove(req.id)
            run.interrupted = True
        if msg.get("mark", False):
            import asyncio
            try:
                self.snapshot = await asyncio.to_thread(snapshot_data)
            except OSError as e:
                diag("snapshot of %s: %s" % (DATA, e))
                self.snapshot = None
        self.running = run
        try:
            await run.run(kernel)
        except Exception as e:   # noqa: BLE001 (a bug must not end the sandbox)
            diag("execute %s: %r" % (req.id, e))
            if not run.finished:
                run.done("failed", "the agent could not execute the notebook: %s" % str(e)[:500])
        finally:
            self.running = None
