# SPDX-License-Identifier: MIT
# What the warm-up draws, in the kernel (WARM_PLOT: silent; names removed),
# without pyplot so that figure numbers are untouched. Sent as text; the
# leading comment stays here.

def _nbrun_warm():
    import io
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    f = Figure(figsize=(4, 3))
    FigureCanvasAgg(f)
    f.add_subplot().plot([1, 2, 3], [1, 4, 9], label="x")
    f.legend()
    f.savefig(io.BytesIO(), format="png")
_nbrun_warm()
del _nbrun_warm
