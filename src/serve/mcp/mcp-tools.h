/* SPDX-License-Identifier: MIT */
/* The tools: their table (tools/list, the exported schemas), tools/call and resources/read. */
#ifndef NBRUN_MCP_TOOLS_H
#define NBRUN_MCP_TOOLS_H

#include "mcp-call.h"

/* {"tools": [...]} for a client of that version. NULL when out of memory. */
json_t *mcp_tools_list(const struct serve *s, const char *version);
/*
 * The same tools for function calling, from the same table: format "mcp"
 * ({"tools": [...]} of the newest revision), "openai" ([{"type": "function",
 * "function": {name, description, parameters}}]), "anthropic" ([{name,
 * description, input_schema}]) or "arguments" ({tool: the JSON Schema of
 * its arguments}). NULL when out of memory.
 */
json_t *mcp_tools_export(const struct serve *s, const char *format);
/*
 * tools/call. Returns the CallToolResult, or NULL with *code set (a
 * JSON-RPC error with message msg) or *code 0 (the call was cancelled: no
 * answer).
 */
json_t *mcp_tools_call(struct mcp_call_ctx *cc, json_t *params, int *code, char *msg, size_t msglen);
/* resources/read of a nbrun://runs/ID/PATH uri; as mcp_tools_call. */
json_t *mcp_resources_read(struct mcp_call_ctx *cc, json_t *params, int *code, char *msg,
			   size_t msglen);

#endif
