# SPDX-License-Identifier: MIT
"""nbrun-agent: the sandbox side of nbrun's live channel (PROTOCOL.md).

The container starts this program (/opt/nbrun/nbrun-agent, which runs main
here under `python3 -I`) as uid 0 holding only CAP_SETUID, CAP_SETGID and
CAP_SETPCAP. It empties its capability bounding set, takes file-system
uid/gid 1000 (so every file it touches is reached as uid 1000 would), says
`hello`, starts the python3 kernel as uid 1000 at once and then serves the
host's requests in order: `put` (inputs into /mnt/data), `execute` (a
notebook, cell by cell, with nbclient), `fetch` (a tar of /mnt/data),
`ping` and `shutdown`.

Frames go to the container's standard output, written by this process only
and built from its own memory; the kernel's standard input and output are
/dev/null and its standard error a pipe read here. A uid 1000 process can
neither open this process's descriptors in /proc nor signal or trace it, so
the user's code cannot speak on the channel.

The parts: privileges (ids and capabilities, the signaller), channel
(frames), files (/mnt/data in and out), kernel (start, preload, warm-up),
execution (one `execute` with nbclient), agent (the requests), and the
Python the agent runs in the kernel (kernel_code, in_kernel/).
"""
import os
import sys

from .channel import Channel
from .common import AGENT, EXIT_BUG, EXIT_OK, KERNEL_NAME, PROTOCOL, diag
from .privileges import SetupError, Signaller, drop_privileges


def main():
    # The channel's writing end moves to a private descriptor and fd 1 becomes
    # diagnostics, so nothing else in this process writes a frame by accident.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    # Isolated mode (-I, the launcher's) ignores PYTHONPATH and friends, which the host
    # passes through to the kernel; and nothing relative resolves in the
    # user's /mnt/data either.
    os.chdir("/")
    chan = Channel(out_fd)
    try:
        drop_privileges()
        signaller = Signaller()
    except (SetupError, OSError) as e:
        diag(str(e))
        try:
            chan.send({"type": "error", "message": "agent setup: %s" % e, "fatal": True})
        except OSError:
            pass
        return EXIT_BUG
    chan.send({"type": "hello", "protocol": PROTOCOL, "agent": AGENT, "kernel": KERNEL_NAME,
               "pid": os.getpid()})

    import asyncio
    import logging
    from .agent import Agent
    logging.basicConfig(level=logging.WARNING, format="nbrun-agent: %(name)s: %(message)s")
    agent = Agent(chan, signaller)
    try:
        asyncio.run(agent.serve())
    except BrokenPipeError:
        agent.kill_kernel()
        os._exit(EXIT_OK)
    except BaseException as e:   # noqa: BLE001
        diag("internal error: %r" % e)
        agent.kill_kernel()
        try:
            chan.send({"type": "error", "message": "agent internal error: %s" % e, "fatal": True})
        except OSError:
            pass
        os._exit(EXIT_BUG)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
