/* SPDX-License-Identifier: MIT */
/* The session_* tools and the kernels they keep ("boxes"). */
#ifndef NBRUN_MCP_SESSION_TOOLS_H
#define NBRUN_MCP_SESSION_TOOLS_H

#include "mcp-call.h"

/* The stateful tools (session_*) on the library's nbrun_session_*. */
#define MCP_BOXES_MAX 8
#define MCP_BOX_IDLE_MS (30u * 60u * 1000u)
struct mcp_boxes;
struct mcp_boxes *mcp_boxes_new(void);
/* Closes every session left (their sandboxes are removed). */
void mcp_boxes_free(struct mcp_boxes *b);
/* Close the sessions an MCP session opened. */
void mcp_boxes_close_owner(struct mcp_boxes *b, const char *owner);
json_t *mcp_session_tool(struct mcp_call_ctx *cc, const char *name, json_t *args, int *code,
			 char *msg, size_t msglen);

#endif
