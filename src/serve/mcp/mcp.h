/* SPDX-License-Identifier: MIT */
/* The MCP server: JSON-RPC 2.0, protocol versions, sessions and the tools, over any transport. */
#ifndef NBRUN_MCP_H
#define NBRUN_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "mcp-call.h"

struct mcp_server;
struct mcp_session;

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
/*
 * nbrun mcp from here on: the warm pool of pa, the session table, one MCP
 * session answered on stdio until the end of input or *s->stopping, then
 * every call cancelled and waited for. 0, -1 when it could not start
 * (logged), or SERVE_STUCK.
 */
int mcp_stdio_main(struct serve *s, const struct serve_pool_args *pa);

#endif
