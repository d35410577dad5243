/* SPDX-License-Identifier: MIT */
/* The MCP Streamable HTTP transport at /mcp: sessions by Mcp-Session-Id, JSON or SSE replies. */
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
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

/*
 * A tools/call or resources/read answered as an SSE stream while it runs:
 * a thread runs it and appends its progress notifications and then its
 * response; libmicrohttpd's thread for the connection sends them as they
 * come. Shared by both until both let go. A client that goes away does
 * not cancel the call (it sends notifications/cancelled for that).
 */
struct mcp_stream {
	pthread_mutex_t lock;
	pthread_cond_t more;
	struct buf data;
	size_t sent;
	bool done;
	unsigned int refs;
	/* the call */
	struct mcp_server *m;
	struct mcp_session *sess;
	json_t *msg;
};

static void mcp_stream_put(struct mcp_stream *st)
{
	bool last;

	pthread_mutex_lock(&st->lock);
	last = --st->refs == 0;
	pthread_mutex_unlock(&st->lock);
	if (!last)
		return;
	buf_free(&st->data);
	pthread_cond_destroy(&st->more);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

static void mcp_stream_event(struct mcp_stream *st, const char *json)
{
	pthread_mutex_lock(&st->lock);
	/* What was sent is dropped first, so the buffer holds only what is waiting. */
	if (st->sent == st->data.len) {
		buf_reset(&st->data);
		st->sent = 0;
	}
	buf_printf(&st->data, "event: message\ndata: %s\n\n", json);
	pthread_cond_broadcast(&st->more);
	pthread_mutex_unlock(&st->lock);
}

static void mcp_stream_notify(const char *json, void *payload)
{
	mcp_stream_event(payload, json);
}

static void *mcp_stream_main(void *p)
{
	struct mcp_stream *st = p;
	char *out = NULL;

	mcp_handle_json(&out, st->m, st->sess, st->msg, mcp_stream_notify, st);
	if (out)
		mcp_stream_event(st, out);
	free(out);
	/* Everything of the server is let go before done: shutdown waits for done. */
	mcp_session_unref(st->m, st->sess);
	json_decref(st->msg);
	st->sess = NULL;
	st->msg = NULL;
	pthread_mutex_lock(&st->lock);
	st->done = true;
	pthread_cond_broadcast(&st->more);
	pthread_mutex_unlock(&st->lock);
	mcp_stream_put(st);
	return NULL;
}

/* libmicrohttpd's reader: blocks (a thread per connection) until there is more or the end. */
static ssize_t mcp_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct mcp_stream *st = cls;
	ssize_t n;

	pthread_mutex_lock(&st->lock);
	while (st->sent == st->data.len && !st->done)
		pthread_cond_wait(&st->more, &st->lock);
	if (st->sent < st->data.len) {
		size_t k = st->data.len - st->sent < max ? st->data.len - st->sent : max;
		memcpy(out, st->data.data + st->sent, k);
		st->sent += k;
		n = (ssize_t)k;
	} else {
		n = MHD_CONTENT_READER_END_OF_STREAM;
	}
	pthread_mutex_unlock(&st->lock);
	return n;
}

static void mcp_stream_free(void *cls)
{
	mcp_stream_put(cls);
}

/* Start the call on its own thread; the response streams what it sends. NULL: answer it inline. */
static struct MHD_Response *mcp_stream_start(struct mcp_server *m, struct mcp_session *sess,
					     json_t *msg)
{
	struct mcp_stream *st = calloc(1, sizeof(*st));
	struct MHD_Response *r;
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int rc;

	if (!st)
		return NULL;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->more, NULL);
	buf_init(&st->data, MCP_MESSAGE_MAX + (1u << 20));
	st->refs = 2; /* the thread's and the response's */
	st->m = m;
	st->sess = sess;
	st->msg = json_incref(msg);
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, mcp_stream_read, st,
					      mcp_stream_free);
	if (!r) {
		json_decref(msg);
		st->refs = 1;
		mcp_stream_put(st);
		return NULL;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	sess = mcp_session_find(m, mcp_session_id(sess)); /* the thread's reference */
	if (!sess) {
		st->sess = NULL;
		goto fail;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, mcp_stream_main, st);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		return r;
	mcp_session_unref(m, sess);
fail:
	json_decref(st->msg);
	st->msg = NULL;
	st->refs = 1;
	MHD_destroy_response(r); /* drops the last reference */
	return NULL;
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

struct MHD_Response *mcp_http_post(struct mcp_server *m, struct MHD_Connection *c, int tenant,
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
	msg = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
	if (!msg) {
		snprintf(why, sizeof(why), "parse error: %s (line %d, column %d)", jerr.text, jerr.line,
			 jerr.column);
		return mcp_http_error(400, MCP_PARSE_ERROR, why, status);
	}
	init = mcp_is_initialize(msg);
	if (init) {
		sess = mcp_session_new_for(m, tenant);
		if (!sess) {
			r = mcp_http_error(503, MCP_INTERNAL_ERROR, "too many sessions in use", status);
			goto out;
		}
	} else if (!sid) {
		r = mcp_http_error(400, MCP_INVALID_REQUEST,
				   "Mcp-Session-Id header required (initialize first)", status);
		goto out;
	} else if (!(sess = mcp_session_find_for(m, sid, tenant))) {
		r = mcp_http_error(404, MCP_INVALID_REQUEST,
				   "session not found or ended: initialize a new one", status);
		goto out;
	}
	/* A call that may take long streams its progress and then its answer. */
	if (!init && mcp_is_slow(msg) && mcp_accepts_sse(c) && (r = mcp_stream_start(m, sess, msg))) {
		*status = 200;
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

struct MHD_Response *mcp_http_other(struct mcp_server *m, struct MHD_Connection *c, int tenant,
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
	sess = mcp_session_find_for(m, sid, tenant);
	if (!sess)
		return mcp_http_error(404, MCP_INVALID_REQUEST, "session not found or ended", status);
	mcp_session_close(m, sess);
	mcp_session_unref(m, sess);
	*status = 200;
	return mcp_http_text("", NULL);
}
