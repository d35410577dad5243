# SPDX-License-Identifier: MIT
# Run silently in the python3 kernel before the first cell (kernel_code.py
# sends it as SETUP_CODE, with FLUSH_SOURCE, the text of flush.py, and the
# call to _nbrun_setup after it; both names are removed again): an audit
# hook that notes a file opened for writing, so that the flush before `done`
# scans the kernel's objects only after that, and _nbrun_speed's latency
# changes. The agent reads this file as text: the leading comment stays here.

def _nbrun_setup():
    import sys, types, weakref
    state = types.ModuleType("_nbrun")
    # the hook is in place before any of the user's code runs: a file they
    # open for writing sets this (the preload's own files are forgotten)
    state.dirty = False
    state.files = weakref.WeakSet()

    def hook(event, args):
        if event != "open" or state.dirty:
            return
        try:
            mode, flags = args[1], args[2]
            if (isinstance(flags, int) and flags & 3) or \
                    (isinstance(mode, str) and set(mode) & set("wax+")):
                state.dirty = True
        except Exception:
            pass
    sys.modules["_nbrun"] = state
    sys.addaudithook(hook)
    _nbrun_speed()
    ns = {}
    exec(FLUSH_SOURCE, ns)
    state.flush = ns["_nbrun_flush"]

def _nbrun_speed():
    # Latency, not behaviour. The kernel sleeps 0.5 ms after each execute
    # so that output goes out before the reply; here every message is
    # matched to its request and the idle status ends a cell, so the sleep
    # only delays the reply.
    try:
        get_ipython().kernel._execute_sleep = 0
    except Exception:
        pass
    # What another process wrote to fd 1 or 2 reaches the cell through a
    # pipe a thread of ipykernel reads; the flush at the end of an execute
    # does not wait for it, so output written just before the cell ended
    # could come with the next one. At the end of every cell, the pipes
    # are drained first (at most 0.2 s each; 0.3 ms when they are empty).
    try:
        import fcntl, struct, sys, termios, time

        def pending(fid):
            return struct.unpack("i", fcntl.ioctl(fid, termios.FIONREAD, b"    "))[0]

        def drain(*_args):
            watched = False
            for stream in (sys.stdout, sys.stderr):
                fid = getattr(stream, "_fid", None)
                if fid is None or not getattr(stream, "_should_watch", False):
                    continue
                watched = True
                end = time.monotonic() + 0.2
                while pending(fid) and time.monotonic() < end:
                    time.sleep(0.0005)
            if watched:
                time.sleep(0.0003)   # the reader writes the chunk it took
        get_ipython().events.register("post_run_cell", drain)
    except Exception:
        pass
    # Every display formatter call (a result, a display, the flush's user
    # expression: a dozen formatters each) went through the decorator
    # package's signature binding: 2 ms per object formatted. The same
    # wrapper as a plain call: the same outputs and error handling.
    try:
        import functools
        from IPython.core import formatters
        caller = formatters.catch_format_error.__wrapped__

        def plain(method):
            def __call__(self, *args, **kwargs):
                return caller(method, self, *args, **kwargs)
            return functools.update_wrapper(__call__, method)
        for cls in list(vars(formatters).values()):
            if isinstance(cls, type) and issubclass(cls, formatters.BaseFormatter) and                     hasattr(vars(cls).get("__call__"), "__wrapped__"):
                cls.__call__ = plain(cls.__call__.__wrapped__)
    except Exception:
        pass
