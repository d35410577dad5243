# SPDX-License-Identifier: MIT
"""nbrun-agent, the sandbox side of nbrun's channel: /opt/nbrun/nbrun-agent
runs main() of __main__.py, which says what the agent does and its parts."""
