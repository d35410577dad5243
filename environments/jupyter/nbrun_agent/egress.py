# SPDX-License-Identifier: MIT
"""The sandbox's one way out, for a run given an allow-list (docs/network.md).

Such a sandbox has no network interface but loopback. nbrun mounts a
volume at /run/nbrun-egress holding the unix socket of the sandbox's relay
(a container outside it, on the egress proxy's network) and sets
NBRUN_EGRESS=1; the agent then listens on 127.0.0.1:3128, where the
kernel's HTTP_PROXY and HTTPS_PROXY point, and carries each connection to
that socket unchanged. What is allowed, and the bytes, are decided outside:
by squid and the relay. The listener is the agent's (uid 0), so the user's
code can neither stop it nor take its port.
"""
import asyncio
import os

from .common import diag

SOCKET = "/run/nbrun-egress/proxy.sock"
HOST, PORT = "127.0.0.1", 3128
CHUNK = 65536


def wanted():
    return os.environ.get("NBRUN_EGRESS") == "1"


async def _pump(reader, writer):
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass


async def _handle(c_reader, c_writer, path=SOCKET):
    try:
        r_reader, r_writer = await asyncio.open_unix_connection(path)
    except OSError:
        c_writer.transport.abort()
        return
    try:
        await asyncio.gather(_pump(c_reader, r_writer), _pump(r_reader, c_writer))
    finally:
        for w in (c_writer, r_writer):
            w.transport.abort()


async def start(host=HOST, port=PORT, path=SOCKET):
    """Listen for the kernel's proxied connections; the server, or None when
    the port cannot be had (then the kernel's clients fail at once)."""
    try:
        return await asyncio.start_server(lambda r, w: _handle(r, w, path), host, port)
    except OSError as e:
        diag("egress: cannot listen on %s:%d: %s" % (host, port, e))
        return None
