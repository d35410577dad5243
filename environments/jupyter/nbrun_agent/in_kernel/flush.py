# SPDX-License-Identifier: MIT
# Run in the kernel, silently, before `done`: what a normal interpreter exit
# would flush (a file opened and written but never closed). Scanning every
# object takes 15-20 ms in a kernel, longer than a small cell: the audit
# hook of flush_hook.py notes when a file was opened for writing, so the
# scan runs only after that and otherwise just the files it found open
# before are flushed. Sent as text (kernel_code.py: FLUSH_CODE, and the
# FLUSH_SOURCE of SETUP_CODE); the leading comment stays here.

def _nbrun_flush():
    import gc, sys, _io
    state = sys.modules.get("_nbrun")
    found = []
    if state is None or state.dirty:
        if state is not None:
            state.dirty = False
        # the C base class of every io object: isinstance against the
        # io.IOBase ABC takes three times as long
        for o in gc.get_objects():
            try:
                if isinstance(o, _io._IOBase) and not o.closed and o.writable():
                    found.append(o)
            except Exception:
                pass
        if state is not None:
            for o in found:
                try:
                    state.files.add(o)
                except TypeError:
                    pass
    if state is not None:
        found = list(state.files)
    for o in found:
        try:
            if o.closed:
                state.files.discard(o)
            else:
                o.flush()
        except Exception:
            pass
