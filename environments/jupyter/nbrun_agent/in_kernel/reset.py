# SPDX-License-Identifier: MIT
# Run silently in the kernel after the preload and warm-up (RESET_CODE):
# what they opened is not the user's, and the preload's objects go out of
# the collector's sight (the first cell no longer pays for a full collection
# of them). Sent as text; the leading comment stays here.
import sys as _s
_m = _s.modules.get('_nbrun')
if _m is not None: _m.dirty = False; _m.files.clear()
del _s, _m
import gc as _g
_g.collect(); _g.freeze()
del _g
