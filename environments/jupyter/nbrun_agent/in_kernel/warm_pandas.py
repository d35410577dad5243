# SPDX-License-Identifier: MIT
# What the warm-up reads and shows with pandas, in the kernel (WARM_PANDAS:
# silent; names removed). Sent as text; the leading comment stays here.

def _nbrun_warm():
    import io, pandas
    d = pandas.read_csv(io.StringIO("a,b\n1,2.5\n"))
    d.groupby("a").sum()._repr_html_()
    repr(d.describe())
    d.to_csv(io.StringIO())
_nbrun_warm()
del _nbrun_warm
