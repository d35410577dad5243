/* SPDX-License-Identifier: MIT */
/* The session_* tools, on the server's session table (sessions.h). */
#ifndef NBRUN_MCP_SESSION_TOOLS_H
#define NBRUN_MCP_SESSION_TOOLS_H

#include "mcp-call.h"
#include "sessions.h"

/* How long a session the tools opened may stay idle (at most the server's session lifetime). */
#define MCP_BOX_IDLE_MS (30u * 60u * 1000u)
json_t *mcp_session_tool(struct mcp_call_ctx *cc, const char *name, json_t *args, int *code,
			 char *msg, size_t msglen);

#endif
