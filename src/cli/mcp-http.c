/* SPDX-License-Identifier: MIT */
/* The MCP Streamable HTTP transport at /mcp: sessions by Mcp-Session-Id, JSON or SSE replies. */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "mcp.h"

/* Progress notifications of a POST, sent as SSE events before its response. */
struct mcp_http_events {
	struct buf sse;
	unsigned int count;
};

static void mcp_http_notify(const char *json, void *payload)
{
	struct mcp_http_events *ev = payload;

	if (buf_printf(&ev->sse, "event: message\ndata: %s\n\n", json) == 0)
		ev->count++;
}

static struct MHD_Response *mcp_http_text(const char *text, const char *type)
{
	struct MHD_Response *r;
	char *copy = strdup(text ? text : "");

	if (!copy)
		return NULL;
	r = MHD_create_response_from_buffer(strlen(copy), copy, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(copy);
		return NULL;
	}
	if (type)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	return r;
}

/* An HTTP error carrying a JSON-RPC error with a null id. */
static struct MHD_Response *mcp_http_error(unsigned int http, int code, const char *message,
					   unsigned int *status)
{
	char *text = mcp_error_text(code, message);
	struct MHD_Response *r = mcp_http_text(text, "application/json");

	free(text);
	*status = http;
	return r;
}

/* A request (not only notifications and responses) anywhere in the message. */
static bool mcp_has_request(json_t *msg)
{
	json_t *e;
	size_t i;

	if (!json_is_array(msg))
		return !json_is_object(msg) || json_object_get(msg, "id") ||
		       !json_object_get(msg, "method");
	json_array_foreach(msg, i, e)
		if (mcp_has_request(e))
			return true;
	return json_array_size(msg) == 0;
}

static bool mcp_is_initialize(json_t *msg)
{
	const char *method = json_string_value(json_object_get(msg, "method"));

	return json_is_object(msg) && method && !strcmp(method, "initialize");
}

static bool mcp_accepts_sse(struct MHD_Connection *c)
{
	const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);

	return accept && strstr(accept, "text/event-stream");
}

struct MHD_Response *mcp_http_post(struct mcp_server *m, struct MHD_Connection *c,
				   const char *body, size_t len, bool too_large,
				   unsigned int *status)
{
	const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
	const char *pv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
	struct mcp_http_events ev = { BUF_INIT(1u << 20), 0 };
	struct mcp_session *sess = NULL;
	struct MHD_Response *r = NULL;
	json_error_t jerr;
	json_t *msg = NULL;
	char why[256], *out = NULL;
	bool init;

	if (too_large) {
		snprintf(why, sizeof(why), "message larger than %u MiB", MCP_MESSAGE_MAX >> 20);
		return mcp_http_error(413, MCP_INVALID_REQUEST, why, status);
	}
	if (pv && !mcp_version_known(pv)) {
		snprintf(why, sizeof(why), "unsupported MCP-Protocol-Version: %.64s", pv);
		return mcp_http_error(400, MCP_INVALID_REQUEST, why, status);
	}
	msg = json_loadb(body, len, 0, &jerr);
	if (!msg) {
		snprintf(why, sizeof(why), "parse error: %s (line %d, column %d)", jerr.text, jerr.line,
			 jerr.column);
		return mcp_http_error(400, MCP_PARSE_ERROR, why, status);
	}
	init = mcp_is_initialize(msg);
	if (init) {
		sess = mcp_session_new(m);
		if (!sess) {
			r = mcp_http_error(503, MCP_INTERNAL_ERROR, "too many sessions in use", status);
			goto out;
		}
	} else if (!sid) {
		r = mcp_http_error(400, MCP_INVALID_REQUEST,
				   "Mcp-Session-Id header required (initialize first)", status);
		goto out;
	} else if (!(sess = mcp_session_find(m, sid))) {
		r = mcp_http_error(404, MCP_INVALID_REQUEST,
				   "session not found or ended: initialize a new one", status);
		goto out;
	}
	mcp_handle_json(&out, m, sess, msg, mcp_http_notify, &ev);
	if (init && (!out || !strstr(out, "\"result\""))) {
		mcp_session_close(m, sess); /* a failed initialize makes no session */
		init = false;
	}
	if (!out || !mcp_has_request(msg)) {
		/* Only notifications or responses, or a request cancelled meanwhile. */
		r = mcp_http_text("", NULL);
		*status = 202;
	} else if (ev.count && mcp_accepts_sse(c) &&
		   buf_printf(&ev.sse, "event: message\ndata: %s\n\n", out) == 0) {
		r = mcp_http_text(ev.sse.data, "text/event-stream");
		*status = 200;
	} else {
		r = mcp_http_text(out, "application/json");
		*status = 200;
	}
	if (r && init)
		MHD_add_response_header(r, "Mcp-Session-Id", mcp_session_id(sess));
out:
	if (sess)
		mcp_session_unref(m, sess);
	json_decref(msg);
	buf_free(&ev.sse);
	free(out);
	return r;
}

struct MHD_Response *mcp_http_other(struct mcp_server *m, struct MHD_Connection *c,
				    const char *method, unsigned int *status)
{
	const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
	struct mcp_session *sess;
	struct MHD_Response *r;

	if (strcmp(method, "DELETE")) {
		/* No stream for messages the server starts: it sends none. */
		r = mcp_http_error(405, MCP_INVALID_REQUEST, "use POST (or DELETE to end a session)",
				   status);
		if (r)
			MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "POST, DELETE");
		return r;
	}
	if (!sid)
		return mcp_http_error(400, MCP_INVALID_REQUEST, "Mcp-Session-Id header required", status);
	sess = mcp_session_find(m, sid);
	if (!sess)
		return mcp_http_error(404, MCP_INVALID_REQUEST, "session not found or ended", status);
	mcp_session_close(m, sess);
	mcp_session_unref(m, sess);
	*status = 200;
	return mcp_http_text("", NULL);
}
