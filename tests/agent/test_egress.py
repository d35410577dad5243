# SPDX-License-Identifier: MIT
"""The agent's way out (nbrun_agent.egress): 127.0.0.1:PORT carried to the
relay's unix socket byte for byte both ways; no socket, no connection."""
import asyncio
import os
import socket
import tempfile
import unittest

import agenttest  # noqa: F401 (puts the agent's package on the path)

from nbrun_agent import egress


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EgressTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="nbrun-egress-")
        self.path = os.path.join(self.dir, "proxy.sock")
        self.port = free_port()

    async def relay_echo(self, seen):
        async def echo(r, w):
            data = await r.read(1 << 20)
            seen.append(data)
            w.write(b"relay:" + data)
            await w.drain()
            w.close()
        return await asyncio.start_unix_server(echo, self.path)

    async def client(self, payload):
        r, w = await asyncio.open_connection("127.0.0.1", self.port)
        w.write(payload)
        await w.drain()
        w.write_eof()
        got = await asyncio.wait_for(r.read(), 10)
        w.close()
        return got

    def test_carries_bytes_both_ways(self):
        async def go():
            seen = []
            relay = await self.relay_echo(seen)
            server = await egress.start("127.0.0.1", self.port, self.path)
            self.assertIsNotNone(server)
            payload = b"CONNECT deb.example:443 HTTP/1.1\r\n\r\n" + bytes(range(256)) * 100
            got = await self.client(payload)
            server.close()
            relay.close()
            return seen, got, payload
        seen, got, payload = asyncio.run(go())
        self.assertEqual(seen, [payload])
        self.assertEqual(got, b"relay:" + payload)

    def test_no_relay_closes_at_once(self):
        async def go():
            server = await egress.start("127.0.0.1", self.port, self.path)
            try:
                got = await self.client(b"GET http://x/ HTTP/1.1\r\n\r\n")
            except ConnectionResetError:
                got = b""  # cut: a reset rather than an end
            server.close()
            return got
        self.assertEqual(asyncio.run(go()), b"")

    def test_port_taken_is_no_listener(self):
        async def go():
            with socket.socket() as s:
                s.bind(("127.0.0.1", self.port))
                s.listen(1)
                return await egress.start("127.0.0.1", self.port, self.path)
        self.assertIsNone(asyncio.run(go()))

    def test_wanted_only_when_asked(self):
        old = os.environ.pop("NBRUN_EGRESS", None)
        try:
            self.assertFalse(egress.wanted())
            os.environ["NBRUN_EGRESS"] = "1"
            self.assertTrue(egress.wanted())
        finally:
            os.environ.pop("NBRUN_EGRESS", None)
            if old is not None:
                os.environ["NBRUN_EGRESS"] = old


if __name__ == "__main__":
    unittest.main()
