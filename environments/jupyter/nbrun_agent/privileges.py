# SPDX-License-Identifier: MIT
"""The agent's privileges: uid 0 holding only CAP_SETUID, CAP_SETGID and
CAP_SETPCAP empties its capability bounding set and reaches files as uid
1000 (drop_privileges); the kernel is started as root (root_euid) and
signalled from a thread of effective uid 1000 (Signaller).

Kept small and apart from the rest: nothing here imports more than the
standard library, and nothing else changes the process's ids."""
import ctypes
import errno
import os
import platform
import re

from .common import SANDBOX_GID, SANDBOX_UID, diag

PR_CAPBSET_DROP = 24
# setresuid(2) as a raw system call changes the calling thread only (glibc's
# wrapper changes every thread): the signaller thread below uses it.
SYS_SETRESUID = {"x86_64": 117, "aarch64": 147}
SYS_SETRESGID = {"x86_64": 119, "aarch64": 149}
# gVisor (runsc) has no file-system ids (setfsuid is ENOSYS): there the main
# thread takes effective uid/gid 1000 instead, its real and saved ids staying
# 0 as the signaller's do, and goes back to effective uid 0 only to start the
# kernel (root_euid()). Read as privileges.THREAD_IDS (drop_privileges sets it).
THREAD_IDS = False

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    pass


def drop_privileges():
    """Runs in the main thread before any other thread exists: the
    file-system ids are per thread, and threads inherit them."""
    if os.getuid() != 0 or os.geteuid() != 0:
        raise SetupError("the agent must start as uid 0 (it runs the kernel as uid %d)" % SANDBOX_UID)
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except FileNotFoundError:
        # gVisor has no such file: drop every capability number a kernel
        # may know (those past its last are EINVAL, skipped below); the
        # CapBnd check at the end says whether the set is empty.
        last = 63
    for cap in range(last + 1):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0:
            e = ctypes.get_errno()
            if e != errno.EINVAL:
                raise SetupError("cannot empty the capability bounding set: %s (CAP_SETPCAP missing?)"
                                 % os.strerror(e))
    try:
        os.setgroups([])
    except OSError as e:
        raise SetupError("cannot clear the supplementary groups: %s (CAP_SETGID missing?)" % e.strerror)
    if SYS_SETRESUID.get(platform.machine()) is None:
        raise SetupError("unsupported machine %s" % platform.machine())
    if _libc.setfsgid(SANDBOX_GID) == -1 and ctypes.get_errno() == errno.ENOSYS:
        global THREAD_IDS
        THREAD_IDS = True
        # The group first: setresgid needs CAP_SETGID, effective while euid is 0.
        _thread_id(SYS_SETRESGID, SANDBOX_GID)
        _thread_id(SYS_SETRESUID, SANDBOX_UID)
        if os.getegid() != SANDBOX_GID or os.geteuid() != SANDBOX_UID or os.getuid() != 0:
            raise SetupError("cannot take effective uid/gid %d in the agent's thread" % SANDBOX_UID)
    else:
        _libc.setfsgid(SANDBOX_GID)
        _libc.setfsuid(SANDBOX_UID)
        # Both calls return the previous id: asking again tells whether they held.
        if _libc.setfsgid(SANDBOX_GID) != SANDBOX_GID or _libc.setfsuid(SANDBOX_UID) != SANDBOX_UID:
            raise SetupError("cannot set the file-system uid/gid to %d (CAP_SETUID/CAP_SETGID missing?)"
                             % SANDBOX_UID)
    with open("/proc/self/status") as f:
        status = f.read()
    if not re.search(r"^CapBnd:\s*0+$", status, re.M):
        raise SetupError("the capability bounding set is not empty")


def _thread_id(table, ident):
    """setresuid/setresgid(-1, ident, -1) for the calling thread only."""
    if _libc.syscall(ctypes.c_long(table[platform.machine()]), -1, ident, -1) != 0:
        raise SetupError("cannot set the thread's effective id to %d: %s"
                         % (ident, os.strerror(ctypes.get_errno())))


class root_euid:
    """Effective uid 0 (and with it the permitted capabilities) in the main
    thread while the kernel is started as uid 1000; nothing without
    THREAD_IDS, where the file-system ids do that job."""

    def __enter__(self):
        if THREAD_IDS:
            _thread_id(SYS_SETRESUID, 0)

    def __exit__(self, *exc):
        if THREAD_IDS:
            _thread_id(SYS_SETRESUID, SANDBOX_UID)
        return False


class Signaller:
    """Signals the kernel's process group.

    The agent's uid 0 holds no CAP_KILL, and the kernel runs as uid 1000, so
    the agent cannot signal it. One thread takes effective uid 1000 (real and
    saved uid stay 0, so uid 1000 still cannot signal, trace or open this
    process) and sends every signal the kernel gets."""

    def __init__(self):
        import concurrent.futures
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="signaller", initializer=self._become)
        self.pgid = None
        # started now, so a failure shows before any user code runs
        if self._pool.submit(os.geteuid).result() != SANDBOX_UID:
            raise SetupError("the signaller thread could not take effective uid %d" % SANDBOX_UID)

    @staticmethod
    def _become():
        nr = SYS_SETRESUID[platform.machine()]
        if _libc.syscall(ctypes.c_long(nr), -1, SANDBOX_UID, -1) != 0:
            diag("signaller: setresuid: %s" % os.strerror(ctypes.get_errno()))

    def _kill(self, sig):
        if self.pgid is None:
            return False
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:
            return False

    def send(self, sig, timeout=2.0):
        """Signal the kernel's group; False when there is no such group."""
        return self._pool.submit(self._kill, sig).result(timeout)

    async def send_async(self, sig):
        import asyncio
        return await asyncio.wrap_future(self._pool.submit(self._kill, sig))
