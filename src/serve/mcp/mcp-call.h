/* SPDX-License-Identifier: MIT */
/* What the MCP server hands a tool: one call's context, the limits, the error
 * codes, the protocol revisions, and turning results into content. */
#ifndef NBRUN_MCP_CALL_H
#define NBRUN_MCP_CALL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "serve.h"

struct mcp_server;

/*
 * Limits (docs/mcp.md, `nbrun mcp --help`): a message (a stdio line or a POST
 * body) above MCP_MESSAGE_MAX is answered with -32600 and dropped; images
 * are inlined as image blocks when each is at most MCP_IMAGE_ONE bytes and
 * all at most MCP_IMAGE_ALL; files written under /mnt/data are embedded
 * when each is at most MCP_EMBED_ONE and all at most MCP_EMBED_ALL, and
 * are otherwise resource links that resources/read serves up to
 * MCP_RESOURCE_MAX bytes.
 */
#define MCP_MESSAGE_MAX (32u << 20)
#define MCP_IMAGE_ONE (4u << 20)
#define MCP_IMAGE_ALL (16u << 20)
#define MCP_EMBED_ONE (256u << 10)
#define MCP_EMBED_ALL (2u << 20)
#define MCP_RESOURCE_MAX (32u << 20)
#define MCP_SESSIONS_MAX 256

/* Sends one notification (a JSON text) to the client of a request, while it runs. */
typedef void (*mcp_notify_fn)(const char *json, void *payload);

/* Between mcp.c and mcp-tools.c: one tools/call or resources/read. */
struct mcp_call_ctx {
	struct serve *s;
	const char *version;                 /* negotiated (never NULL: the latest before initialize) */
	const volatile sig_atomic_t *cancel; /* raised by notifications/cancelled */
	json_t *progress_token;              /* params._meta.progressToken or NULL */
	mcp_notify_fn notify;
	void *payload;
	unsigned int progress;               /* notifications sent */
	struct mcp_server *m;
	void *call;                          /* the running request (mcp.c) */
	const char *owner;                   /* the MCP session's id */
	int tenant;                          /* the serve token of the MCP session (0 on stdio) */
	/* What notifications/cancelled does besides raising the flag: interrupt
	 * ss's cell (NULL: nothing more). Set by mcp.c. */
	void (*interrupts)(struct mcp_call_ctx *cc, struct nbrun_session *ss);
};
/* mcp-version.c */
/* True when v is a protocol revision this server speaks. */
bool mcp_version_known(const char *v);
/* True when version v is at least the revision "YYYY-MM-DD" since. */
bool mcp_version_since(const char *v, const char *since);
/* The newest protocol revision this server speaks. */
#define MCP_LATEST_VERSION "2025-11-25"
/* The revision for a client that asks for asked: that one when known, else the
 * newest (asked NULL: the newest). A static string. */
const char *mcp_version_negotiate(const char *asked);
/* True when revision v has JSON-RPC batches (before 2025-06-18). */
bool mcp_version_batches(const char *v);

/* mcp-content.c: a result as MCP content. What a tool result may still inline. */
struct mcp_budget {
	size_t images; /* bytes of image blocks left */
	size_t embed;  /* bytes of embedded resources left */
};
/* Wrong arguments: a tool error (2025-11-25) or -32602 (before). */
json_t *mcp_tool_arg_error(struct mcp_call_ctx *cc, int *code, char *msg, size_t msglen,
			   const char *text);
/* A CallToolResult from a result document whose outputs are in runs/DIR_ID (NULL: its run_id). */
json_t *mcp_result_of(const struct mcp_call_ctx *cc, json_t *doc, const char *dir_id);
/* A file below run_fd as an embedded resource (small) or a resource link. */
void mcp_add_resource(json_t *content, const struct mcp_call_ctx *cc, int run_fd,
		      const char *run_id, const char *rel, const char *name, const char *mime,
		      json_int_t bytes, struct mcp_budget *b);
/* {uri, mimeType, text|blob}: text when the type is textual and the bytes are UTF-8. */
json_t *mcp_resource_contents(const char *uri, const char *mime, const char *data, size_t len);

#endif
