# SPDX-License-Identifier: MIT
# The sandbox has no debugger (no network to attach one, no ptrace): this
# stands in for Debian's debugpy so that the kernel and nbconvert skip it
# instead of importing it in every run (about 0.15 s of CPU each).
raise ImportError("debugpy is not available in the nbrun sandbox")
