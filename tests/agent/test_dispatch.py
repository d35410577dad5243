# SPDX-License-Identifier: MIT
"""The agent's requests (nbrun_agent.agent): dispatch's common checks and
each handler's answers and refusals, with a fake kernel and a temporary
/mnt/data; the end of input and a violation."""
import asyncio
import io
import json
import os
import signal
import tarfile
import unittest

from agenttest import AgentCase, Exited

from nbrun_agent.channel import Request


def tar_of(**members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DispatchTest(AgentCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        await self.ready()

    async def one(self, msg, blob=None, refused=None):
        msgs = await self.request(msg, blob, refused)
        self.assertEqual(len(msgs), 1, msgs)
        return msgs[0]

    async def refused(self, msg, blob=None, refused=None):
        m, _ = await self.one(msg, blob, refused)
        self.assertEqual((m["type"], m["fatal"]), ("error", False), m)
        return m

    async def test_common_checks(self):
        m = await self.refused({"type": "launch", "id": "a"})
        self.assertEqual((m["id"], m["message"]), ("a", "unknown message type 'launch'"))
        m = await self.refused({"type": "x" * 500})
        self.assertEqual(m["message"], "unknown message type %r" % ("x" * 100))
        self.assertNotIn("id", m)
        for bad in ({"type": "ping"}, {"type": "ping", "id": 5}, {"type": "ping", "id": "i" * 65}):
            m = await self.refused(bad)
            self.assertEqual(m["message"], "ping without a string id of at most 64 bytes")
            self.assertNotIn("id", m)
        m = await self.refused({"type": "put", "id": "p", "path": "/mnt/data"}, refused="too big")
        self.assertEqual((m["id"], m["message"]), ("p", "too big"))
        self.assertEqual(await self.one({"type": "ping", "id": "q"}), ({"type": "pong", "id": "q"}, None))

    async def test_shutdown_kills_the_kernel_and_exits_0(self):
        with self.assertRaises(Exited) as cm:
            await self.request({"type": "shutdown"})     # needs no id
        self.assertEqual(cm.exception.args, (0,))
        self.assertEqual(self.sig.sent, [signal.SIGKILL])
        self.assertFalse(self.kernel.alive)
        self.assertEqual(self.messages(), [])

    async def test_put_then_fetch(self):
        m, _ = await self.one({"type": "put", "id": "p", "path": "/mnt/data"},
                              tar_of(**{"in/a.csv": b"1,2\n", "b.txt": b"bee"}))
        self.assertEqual(m, {"type": "stored", "id": "p", "path": "/mnt/data", "files": 2})
        m, blob = await self.one({"type": "fetch", "id": "f", "path": "/mnt/data", "max_bytes": 1 << 20})
        self.assertEqual(m, {"type": "archive", "id": "f", "path": "/mnt/data", "truncated": False,
                             "blob": len(blob)})
        tf = tarfile.open(fileobj=io.BytesIO(blob), mode="r:")
        self.assertEqual(tf.getnames(), ["data", "data/b.txt", "data/in", "data/in/a.csv"])
        m, blob = await self.one({"type": "fetch", "id": "g", "path": "/mnt/data", "max_bytes": 1024 + 512,
                                  "max_entries": 1})
        self.assertTrue(m["truncated"])

    async def test_put_refusals(self):
        m = await self.refused({"type": "put", "id": "p", "path": "/tmp"}, b"")
        self.assertEqual(m["message"], "put: path must be /mnt/data")
        m = await self.refused({"type": "put", "id": "p", "path": "/mnt/data"})
        self.assertEqual(m["message"], "put without data")
        m = await self.refused({"type": "put", "id": "p", "path": "/mnt/data"}, tar_of(**{"../x": b"x"}))
        self.assertEqual(m["message"], "put: unsafe name '../x'")

    async def test_fetch_refusals(self):
        base = {"type": "fetch", "id": "f", "path": "/mnt/data", "max_bytes": 4096}
        for change, words in ((dict(path="/"), "fetch: path must be /mnt/data"),
                              (dict(max_bytes=1023), "max_bytes must be an integer of at least 1024"),
                              (dict(max_bytes="9999"), "max_bytes must be an integer"),
                              (dict(max_bytes=True), "max_bytes must be an integer"),
                              (dict(changed=1), "changed must be true or false"),
                              (dict(max_entries=0), "max_entries must be an integer of at least 1"),
                              (dict(max_entries=2.0), "max_entries must be an integer")):
            m = await self.refused(dict(base, **change))
            self.assertIn(words, m["message"])

    async def test_a_changed_fetch_after_a_marked_execute(self):
        await self.request({"type": "put", "id": "p", "path": "/mnt/data"}, tar_of(old=b"o"))
        await self.execute(["print x"], rid="e1", mark=True)
        with open(os.path.join(self.data, "new"), "wb") as f:
            f.write(b"n")
        m, blob = await self.one({"type": "fetch", "id": "f", "path": "/mnt/data", "max_bytes": 1 << 20,
                                  "changed": True})
        self.assertEqual(tarfile.open(fileobj=io.BytesIO(blob), mode="r:").getnames(), ["data", "data/new"])
        m, blob = await self.one({"type": "fetch", "id": "g", "path": "/mnt/data", "max_bytes": 1 << 20})
        self.assertEqual(tarfile.open(fileobj=io.BytesIO(blob), mode="r:").getnames(),
                         ["data", "data/new", "data/old"])

    async def test_list_and_read(self):
        await self.request({"type": "put", "id": "p", "path": "/mnt/data"}, tar_of(**{"d/f.txt": b"hello"}))
        m, blob = await self.one({"type": "list", "id": "l", "path": "/mnt/data"})
        self.assertEqual((m["type"], m["truncated"]), ("listing", False))
        self.assertEqual([e["path"] for e in json.loads(blob)], ["d", "d/f.txt"])
        m = await self.refused({"type": "list", "id": "l", "path": "/mnt"})
        self.assertEqual(m["message"], "list: path must be /mnt/data")
        # the files module reads below its DATA: here the test's directory
        path = self.data + "/d/f.txt"
        m, blob = await self.one({"type": "read", "id": "r", "path": path, "max_bytes": 5})
        self.assertEqual((m, blob), ({"type": "file", "id": "r", "path": path, "size": 5, "blob": 5}, b"hello"))
        m = await self.refused({"type": "read", "id": "r", "path": path, "max_bytes": 4})
        self.assertEqual((m["code"], m["message"]), ("too_large", "read: the file has 5 bytes, over 4"))
        m = await self.refused({"type": "read", "id": "r", "path": self.data + "/d", "max_bytes": 4})
        self.assertEqual(m["code"], "not_a_file")
        m = await self.refused({"type": "read", "id": "r", "path": "/etc/passwd", "max_bytes": 4})
        self.assertEqual(m["code"], "bad_path")
        for bad in ({"max_bytes": -1}, {"max_bytes": "5"}, {"path": None}):
            m = await self.refused(dict({"type": "read", "id": "r", "path": path, "max_bytes": 5}, **bad))
            self.assertEqual(m["message"], "read: needs a path and max_bytes")

    async def test_execute_refusals(self):
        nb = b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}'
        base = {"type": "execute", "id": "e"}
        for change, words in ((dict(cell_timeout=-1), "cell_timeout must be a number of seconds >= 0"),
                              (dict(cell_timeout=True), "cell_timeout"),
                              (dict(cell_timeout="5"), "cell_timeout"),
                              (dict(count_from=1.5), "count_from must be an integer >= 0"),
                              (dict(count_from=-1), "count_from"),
                              (dict(output_wait=0), "output_wait must be an integer >= 1"),
                              (dict(stream=1), "stream must be true or false"),
                              (dict(stop_on_error="no"), "stop_on_error must be true or false"),
                              (dict(mark=None), "mark must be true or false")):
            m = await self.refused(dict(base, **change), nb)
            self.assertIn("execute: " + words, m["message"])
        m = await self.refused(base)
        self.assertEqual(m["message"], "execute without a notebook")

    async def test_interrupt_refusals(self):
        for bad in ({"type": "interrupt", "id": "i"}, {"type": "interrupt", "target": "x"},
                    {"type": "interrupt", "id": "i", "target": 3}):
            await self.agent.on_interrupt(Request(bad))
            m = self.messages()[0][0]
            self.assertEqual(m["message"], "interrupt: needs a string id and the id of an execute as target")

    async def test_restart(self):
        await self.execute(["print x"])
        old = self.kernel
        msgs = await self.request({"type": "restart", "id": "r"})
        self.assertEqual([(m["type"], m.get("id")) for m, _ in msgs], [("ready", "r")])
        self.assertFalse(old.alive)
        self.assertTrue(self.managers[0].cleaned)
        self.assertIsNot(self.kernel, old)
        cells, done, _, _ = await self.execute(["print y"], rid="x2")
        self.assertEqual((cells[0][1]["execution_count"], done["status"]), (1, "ok"))
        # a dead kernel is restarted too
        await self.execute(["die"], rid="x3")
        msgs = await self.request({"type": "restart", "id": "r2"})
        self.assertEqual(msgs[0][0]["type"], "ready")
        _, done, _, _ = await self.execute(["print z"], rid="x4")
        self.assertEqual(done["status"], "ok")


class EndTest(AgentCase):
    async def test_end_of_input(self):
        await self.ready()
        with self.assertRaises(Exited) as cm:
            self.agent.end(None)
        self.assertEqual(cm.exception.args, (0,))
        self.assertEqual(self.sig.sent, [signal.SIGKILL])
        self.assertEqual(self.messages(), [])

    async def test_a_violation(self):
        await self.ready()
        with self.assertRaises(Exited) as cm:
            self.agent.end("bad magic b'XX'")
        self.assertEqual(cm.exception.args, (3,))
        self.assertEqual(self.messages(), [({"type": "error", "message": "protocol violation: bad magic b'XX'",
                                             "fatal": True}, None)])

    async def test_serve_reads_the_channel(self):
        """serve(): the reader thread delivers requests in order, the loop
        answers them while a kernel starts; end of input ends it."""
        from agenttest import input_fd, message
        await self.ready()
        ended = []
        self.agent.end = ended.append
        with input_fd(message({"type": "ping", "id": "a"}) + message({"type": "ping"})) as f:
            task = asyncio.ensure_future(self.agent.serve(f.fileno()))
            for _ in range(500):
                self.messages()
                if len(self.sent) >= 4 and ended:
                    break
                await asyncio.sleep(0.01)
        task.cancel()
        self.assertEqual(ended, [None])
        answers = [(m["type"], m.get("id")) for m, _ in self.sent[1:]]
        # the new kernel's ready may come at any point; the answers in order
        self.assertEqual(sorted(answers, key=str), sorted([("ready", None), ("pong", "a"), ("error", None)], key=str))
        self.assertLess(answers.index(("pong", "a")), answers.index(("error", None)))

if __name__ == "__main__":
    unittest.main()
