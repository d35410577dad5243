/* SPDX-License-Identifier: MIT */
/* The MCP server: JSON-RPC 2.0, protocol versions, sessions and the tools, over any transport. */
#ifndef NBRUN_MCP_H
#define NBRUN_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "serve.h"

/*
 * Limits (README, `nbrun mcp --help`): a message (a stdio line or a POST
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

/* JSON-RPC 2.0 error codes, and MCP's for a resource. */
#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)
#define MCP_RESOURCE_NOT_FOUND (-32002)

struct mcp_server;
struct mcp_session;

/* Sends one notification (a JSON text) to the client of a request, while it runs. */
typedef void (*mcp_notify_fn)(const char *json, void *payload);

/*
 * A server on top of the run executor of s (its limits, pool, run
 * directories). NULL when out of memory.
 */
struct mcp_server *mcp_server_new(struct serve *s);
/* Calls must have returned. NULL is fine. */
void mcp_server_free(struct mcp_server *m);
/* Raise the cancel flag of every tool call running (shutdown, a client gone). */
void mcp_server_cancel_all(struct mcp_server *m);

/* A new session, referenced once (mcp_session_unref). NULL when out of memory. */
struct mcp_session *mcp_session_new(struct mcp_server *m);
/* The session of an Mcp-Session-Id, referenced; NULL when unknown or closed. */
struct mcp_session *mcp_session_find(struct mcp_server *m, const char *id);
/*
 * The same for the tenant (index of the serve token) that sends the request:
 * a session is made for its tenant, and another tenant finds it unknown.
 * When the table is full, only a session of the same tenant is dropped.
 */
struct mcp_session *mcp_session_new_for(struct mcp_server *m, int tenant);
struct mcp_session *mcp_session_find_for(struct mcp_server *m, const char *id, int tenant);
void mcp_session_unref(struct mcp_server *m, struct mcp_session *sess);
/* End a session: forgotten by mcp_session_find, its running calls cancelled. */
void mcp_session_close(struct mcp_server *m, struct mcp_session *sess);
/* 32 hex characters, for the Mcp-Session-Id header. */
const char *mcp_session_id(const struct mcp_session *sess);
/* The negotiated protocol version; NULL before initialize. */
const char *mcp_session_version(struct mcp_server *m, const struct mcp_session *sess);
/* True when v is a protocol revision this server speaks. */
bool mcp_version_known(const char *v);

/*
 * Answer one message (a request, a notification, a response or a batch).
 * *out receives the reply text (malloc'd) or NULL when there is nothing to
 * answer (notifications, responses, a cancelled request). notify (may be
 * NULL) sends progress notifications while a tool runs; it is called on
 * the calling thread.
 */
void mcp_handle_text(char **out, struct mcp_server *m, struct mcp_session *sess, const char *text,
		     size_t len, mcp_notify_fn notify, void *payload);
/* The same for a message already parsed (a reference is taken as needed). */
void mcp_handle_json(char **out, struct mcp_server *m, struct mcp_session *sess, json_t *msg,
		     mcp_notify_fn notify, void *payload);
/* A JSON-RPC error response text with a null id (malformed or oversized input). malloc'd. */
char *mcp_error_text(int code, const char *message);
/* True for a request that may take long (tools/call, resources/read): run it off the reader. */
bool mcp_is_slow(const json_t *msg);

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
	struct mcp_boxes *boxes;             /* the server's sessions */
	const char *owner;                   /* the MCP session's id */
	int tenant;                          /* the serve token of the MCP session (0 on stdio) */
};
/* True when version v is at least the revision "YYYY-MM-DD" since. */
bool mcp_version_since(const char *v, const char *since);
/* The newest protocol revision this server speaks. */
#define MCP_LATEST_VERSION "2025-11-25"
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

/* What a tool result may still inline. */
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
const char *mcp_mime_of(const char *name);

/* mcp-sessions.c: the stateful tools on the library's nbrun_session_*. */
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
/* mcp.c: what notifications/cancelled does besides raising the flag (NULL: nothing more). */
void mcp_call_interrupts(struct mcp_call_ctx *cc, struct nbrun_session *ss);

/* mcp-http.c: the Streamable HTTP transport at /mcp of nbrun serve. */
struct MHD_Connection;
struct MHD_Response;
/*
 * POST /mcp with its whole body (too_large: the body passed
 * MCP_MESSAGE_MAX and was dropped). Returns the response to queue and its
 * status in *status; NULL when out of memory.
 */
struct MHD_Response *mcp_http_post(struct mcp_server *m, struct MHD_Connection *c, int tenant,
				   const char *body, size_t len, bool too_large,
				   unsigned int *status);
/* GET (405: no server-initiated stream) and DELETE (ends the session) on /mcp. */
struct MHD_Response *mcp_http_other(struct mcp_server *m, struct MHD_Connection *c, int tenant,
				    const char *method, unsigned int *status);

/* mcp-stdio.c: MCP over stdin and stdout, for nbrun mcp. */
struct mcp_stdio {
	struct mcp_server *m;
	struct mcp_session *sess;
	const volatile sig_atomic_t *stopping; /* set: read no further */
	pthread_mutex_t out_lock; /* one message a line, never interleaved */
	pthread_mutex_t lock;
	pthread_cond_t idle;
	unsigned int workers;
};
/* Read messages from stdin and answer on stdout until the end of input or *io->stopping. */
void mcp_stdio_loop(struct mcp_stdio *io);
/* Wait at most ms for the requests still being served to end. */
void mcp_wait_idle(struct mcp_stdio *io, uint64_t ms);

#endif
