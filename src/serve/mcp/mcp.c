/* SPDX-License-Identifier: MIT */
/* The MCP server's core: JSON-RPC 2.0 messages and batches, version negotiation, sessions, cancellation. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "mcp.h"
#include "mcp-session-tools.h"
#include "mcp-tools.h"
#include "text.h"

struct mcp_session {
	char id[33];
	const char *version; /* mcp_version_negotiate()'s, NULL before initialize */
	bool initialized;    /* notifications/initialized seen */
	bool closed;
	unsigned int refs;   /* the table holds one while the session is open */
	int tenant;          /* the serve token that opened it over HTTP; 0 on stdio */
	uint64_t used;
	struct mcp_session *next;
};

/* A request running on some thread, for notifications/cancelled to find. */
struct mcp_call {
	struct mcp_session *sess;
	json_t *id;
	volatile sig_atomic_t cancel;
	struct nbrun_session *interrupt; /* a session execution to interrupt on cancel */
	struct mcp_call *next;
};

struct mcp_server {
	struct serve *s;
	pthread_mutex_t lock; /* guards sessions and calls */
	struct mcp_session *sessions;
	unsigned int nsessions;
	struct mcp_call *calls;
};

struct mcp_server *mcp_server_new(struct serve *s)
{
	struct mcp_server *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->s = s;
	pthread_mutex_init(&m->lock, NULL);
	return m;
}

void mcp_server_free(struct mcp_server *m)
{
	struct mcp_session *sess, *next;

	if (!m)
		return;
	for (sess = m->sessions; sess; sess = next) {
		next = sess->next;
		/* The sessions its tools opened go with it. */
		serve_sessions_close_owner(m->s, sess->id);
		free(sess);
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
}

void mcp_server_cancel_all(struct mcp_server *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	for (struct mcp_call *c = m->calls; c; c = c->next) {
		c->cancel = 1;
		if (c->interrupt)
			nbrun_session_interrupt(c->interrupt);
	}
	pthread_mutex_unlock(&m->lock);
}

static void mcp_call_interrupts(struct mcp_call_ctx *cc, struct nbrun_session *ss)
{
	struct mcp_call *call = cc->call;

	pthread_mutex_lock(&cc->m->lock);
	call->interrupt = ss;
	if (ss && call->cancel)
		nbrun_session_interrupt(ss);
	pthread_mutex_unlock(&cc->m->lock);
}

/* ---- sessions ------------------------------------------------------------------------ */

/* Unlink a session from the table (lock held); its table reference is dropped by the caller. */
static void mcp_session_unlink(struct mcp_server *m, struct mcp_session *sess)
{
	for (struct mcp_session **pp = &m->sessions; *pp; pp = &(*pp)->next)
		if (*pp == sess) {
			*pp = sess->next;
			m->nsessions--;
			break;
		}
	sess->closed = true;
	for (struct mcp_call *c = m->calls; c; c = c->next)
		if (c->sess == sess)
			c->cancel = 1;
}

static void mcp_session_put(struct mcp_session *sess)
{
	if (--sess->refs == 0)
		free(sess);
}

struct mcp_session *mcp_session_new_for(struct mcp_server *m, int tenant)
{
	struct mcp_session *sess = calloc(1, sizeof(*sess)), *old = NULL;

	if (!sess || wire_random_hex(sess->id, 16) < 0) {
		free(sess);
		return NULL;
	}
	sess->refs = 2; /* the table's and the caller's */
	sess->tenant = tenant;
	sess->used = clock_mono_ms();
	pthread_mutex_lock(&m->lock);
	if (m->nsessions >= MCP_SESSIONS_MAX) {
		/*
		 * Full: the session of the same tenant idle the longest goes; one
		 * in use is never taken, nor is another tenant's (a client that
		 * initializes in a loop must not end everybody else's sessions).
		 */
		for (struct mcp_session *p = m->sessions; p; p = p->next)
			if (p->refs == 1 && p->tenant == tenant && (!old || p->used < old->used))
				old = p;
		if (!old) {
			pthread_mutex_unlock(&m->lock);
			free(sess);
			return NULL;
		}
		mcp_session_unlink(m, old);
		mcp_session_put(old);
	}
	sess->next = m->sessions;
	m->sessions = sess;
	m->nsessions++;
	pthread_mutex_unlock(&m->lock);
	return sess;
}

struct mcp_session *mcp_session_new(struct mcp_server *m)
{
	return mcp_session_new_for(m, 0);
}

struct mcp_session *mcp_session_find_for(struct mcp_server *m, const char *id, int tenant)
{
	struct mcp_session *sess;

	pthread_mutex_lock(&m->lock);
	for (sess = m->sessions; sess; sess = sess->next)
		if (!strcmp(sess->id, id) && sess->tenant == tenant) {
			sess->refs++;
			sess->used = clock_mono_ms();
			break;
		}
	pthread_mutex_unlock(&m->lock);
	return sess;
}

struct mcp_session *mcp_session_find(struct mcp_server *m, const char *id)
{
	struct mcp_session *sess;

	pthread_mutex_lock(&m->lock);
	for (sess = m->sessions; sess; sess = sess->next)
		if (!strcmp(sess->id, id)) {
			sess->refs++;
			sess->used = clock_mono_ms();
			break;
		}
	pthread_mutex_unlock(&m->lock);
	return sess;
}

void mcp_session_unref(struct mcp_server *m, struct mcp_session *sess)
{
	if (!sess)
		return;
	pthread_mutex_lock(&m->lock);
	mcp_session_put(sess);
	pthread_mutex_unlock(&m->lock);
}

void mcp_session_close(struct mcp_server *m, struct mcp_session *sess)
{
	pthread_mutex_lock(&m->lock);
	if (!sess->closed) {
		mcp_session_unlink(m, sess);
		mcp_session_put(sess);
	}
	pthread_mutex_unlock(&m->lock);
	serve_sessions_close_owner(m->s, sess->id);
}

const char *mcp_session_id(const struct mcp_session *sess)
{
	return sess->id;
}

const char *mcp_session_version(struct mcp_server *m, const struct mcp_session *sess)
{
	const char *v;

	pthread_mutex_lock(&m->lock);
	v = sess->version;
	pthread_mutex_unlock(&m->lock);
	return v;
}

/* ---- messages -------------------------------------------------------------------------- */

static json_t *mcp_error(json_t *id, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* An error response; id is borrowed (NULL: null). */
static json_t *mcp_error(json_t *id, int code, const char *fmt, ...)
{
	char msg[512], *clean;
	json_t *e;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	msg[strcspn(msg, "\r\n")] = '\0';
	/* A method name cut at 128 bytes may end inside a character: jansson
	 * would refuse the message and the client would wait for ever. */
	clean = text_utf8_sanitize(msg, strlen(msg), NULL);
	e = clean ? json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
			      id ? id : json_null(), "error", "code", code, "message", clean)
		  : NULL;
	free(clean);
	return e;
}

static json_t *mcp_ok(json_t *id, json_t *result)
{
	if (!result)
		return mcp_error(id, MCP_INTERNAL_ERROR, "out of memory");
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

char *mcp_error_text(int code, const char *message)
{
	json_t *e = mcp_error(NULL, code, "%s", message);
	char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;

	json_decref(e);
	return text;
}

static json_t *mcp_initialize(struct mcp_server *m, struct mcp_session *sess, json_t *id,
			      json_t *params)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	const char *v;

	if (!asked)
		return mcp_error(id, MCP_INVALID_PARAMS, "initialize: params.protocolVersion must be a string");
	v = mcp_version_negotiate(asked);
	pthread_mutex_lock(&m->lock);
	sess->version = v;
	pthread_mutex_unlock(&m->lock);
	return mcp_ok(id, json_pack(
		"{s:s, s:{s:{s:b}, s:{}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v,
		"capabilities", "tools", "listChanged", 0, "resources", "serverInfo", "name", "nbrun",
		"title", "nbrun: Python in a locked-down Jupyter sandbox", "version", nbrun_version(),
		"instructions",
		"Use run_python to execute Python code (numpy, pandas, matplotlib installed; no network). "
		"Each call runs in a fresh sandbox: nothing persists between calls. Charts come back as "
		"images; save files to /mnt/data/ to get them back. Large files come as resource links: "
		"read them with resources/read."));
}

/* notifications/cancelled: raise the flag of the session's request with that id. */
static void mcp_cancel(struct mcp_server *m, struct mcp_session *sess, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");

	if (!rid)
		return;
	pthread_mutex_lock(&m->lock);
	for (struct mcp_call *c = m->calls; c; c = c->next)
		if (c->sess == sess && json_equal(c->id, rid)) {
			c->cancel = 1;
			if (c->interrupt)
				nbrun_session_interrupt(c->interrupt);
		}
	pthread_mutex_unlock(&m->lock);
}

static json_t *mcp_slow(struct mcp_server *m, struct mcp_session *sess, json_t *id,
			const char *method, json_t *params, mcp_notify_fn notify, void *payload)
{
	struct mcp_call call = { sess, id, 0, NULL, NULL };
	struct mcp_call_ctx cc;
	json_t *meta = json_object_get(params, "_meta"), *result, *reply;
	char msg[512] = "";
	int code = MCP_INTERNAL_ERROR;

	memset(&cc, 0, sizeof(cc));
	cc.s = m->s;
	cc.version = mcp_session_version(m, sess);
	if (!cc.version)
		cc.version = mcp_version_negotiate(NULL);
	cc.cancel = &call.cancel;
	cc.progress_token = json_object_get(meta, "progressToken");
	if (cc.progress_token && !json_is_string(cc.progress_token) && !json_is_integer(cc.progress_token))
		cc.progress_token = NULL;
	cc.notify = notify;
	cc.payload = payload;
	cc.m = m;
	cc.call = &call;
	cc.interrupts = mcp_call_interrupts;
	cc.owner = sess->id;
	cc.tenant = sess->tenant;
	pthread_mutex_lock(&m->lock);
	call.next = m->calls;
	m->calls = &call;
	pthread_mutex_unlock(&m->lock);
	if (!strcmp(method, "tools/call"))
		result = mcp_tools_call(&cc, params, &code, msg, sizeof(msg));
	else
		result = mcp_resources_read(&cc, params, &code, msg, sizeof(msg));
	pthread_mutex_lock(&m->lock);
	for (struct mcp_call **pp = &m->calls; *pp; pp = &(*pp)->next)
		if (*pp == &call) {
			*pp = call.next;
			break;
		}
	pthread_mutex_unlock(&m->lock);
	if (result)
		reply = mcp_ok(id, result);
	else if (code == 0 || call.cancel)
		reply = NULL; /* cancelled: the client expects no answer */
	else
		reply = mcp_error(id, code, "%s", msg);
	return reply;
}

bool mcp_is_slow(const json_t *msg)
{
	const char *method = json_string_value(json_object_get(msg, "method"));

	return json_is_object(msg) && json_object_get(msg, "id") && method &&
	       (!strcmp(method, "tools/call") || !strcmp(method, "resources/read"));
}

/* One message of a batch or alone. NULL: nothing to answer. */
static json_t *mcp_one(struct mcp_server *m, struct mcp_session *sess, json_t *msg, bool in_batch,
		       mcp_notify_fn notify, void *payload)
{
	json_t *id, *params, *jm;
	const char *method;

	if (!json_is_object(msg))
		return mcp_error(NULL, MCP_INVALID_REQUEST, "a JSON-RPC message must be an object");
	id = json_object_get(msg, "id");
	if (id && !json_is_string(id) && !json_is_integer(id))
		return mcp_error(NULL, MCP_INVALID_REQUEST, "id must be a string or an integer");
	if (!json_is_string(json_object_get(msg, "jsonrpc")) ||
	    strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0"))
		return mcp_error(id, MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
	jm = json_object_get(msg, "method");
	if (!jm) {
		/* A response: this server sends no requests, so there is nothing to match. */
		if (id && (json_object_get(msg, "result") || json_object_get(msg, "error")))
			return NULL;
		return mcp_error(id, MCP_INVALID_REQUEST, "no method");
	}
	method = json_string_value(jm);
	if (!method)
		return mcp_error(id, MCP_INVALID_REQUEST, "method must be a string");
	params = json_object_get(msg, "params");
	if (params && !json_is_object(params))
		return id ? mcp_error(id, MCP_INVALID_PARAMS, "params must be an object") : NULL;
	if (!id) {
		if (!strcmp(method, "notifications/initialized")) {
			pthread_mutex_lock(&m->lock);
			sess->initialized = true;
			pthread_mutex_unlock(&m->lock);
		} else if (!strcmp(method, "notifications/cancelled")) {
			mcp_cancel(m, sess, params);
		}
		return NULL; /* unknown notifications are ignored */
	}
	if (!strcmp(method, "initialize")) {
		if (in_batch)
			return mcp_error(id, MCP_INVALID_REQUEST, "initialize cannot be part of a batch");
		/* The revision is fixed for the session: a second initialize would
		 * change what batches and tool errors mean halfway. */
		if (mcp_session_version(m, sess))
			return mcp_error(id, MCP_INVALID_REQUEST, "the session is already initialized");
		return mcp_initialize(m, sess, id, params);
	}
	if (!strcmp(method, "ping"))
		return mcp_ok(id, json_object());
	if (!mcp_session_version(m, sess))
		return mcp_error(id, MCP_INVALID_REQUEST, "send initialize first");
	if (!strcmp(method, "tools/list"))
		return mcp_ok(id, mcp_tools_list(m->s, mcp_session_version(m, sess)));
	if (!strcmp(method, "tools/call") || !strcmp(method, "resources/read"))
		return mcp_slow(m, sess, id, method, params, notify, payload);
	if (!strcmp(method, "resources/list"))
		return mcp_ok(id, json_pack("{s:[]}", "resources"));
	if (!strcmp(method, "resources/templates/list"))
		return mcp_ok(id, json_pack("{s:[]}", "resourceTemplates"));
	return mcp_error(id, MCP_METHOD_NOT_FOUND, "method not found: %.128s", method);
}

static char *mcp_dump(json_t *reply)
{
	char *text = reply ? json_dumps(reply, JSON_COMPACT) : NULL;

	json_decref(reply);
	return text;
}

void mcp_handle_json(char **out, struct mcp_server *m, struct mcp_session *sess, json_t *msg,
		     mcp_notify_fn notify, void *payload)
{
	const char *v = mcp_session_version(m, sess);
	json_t *replies, *r, *e;
	size_t i;

	*out = NULL;
	if (!json_is_array(msg)) {
		*out = mcp_dump(mcp_one(m, sess, msg, false, notify, payload));
		return;
	}
	if (!mcp_version_batches(v)) {
		*out = mcp_dump(mcp_error(NULL, MCP_INVALID_REQUEST,
					  "JSON-RPC batches are not part of MCP %s: send one message at a time",
					  v ? v : mcp_version_negotiate(NULL)));
		return;
	}
	if (json_array_size(msg) == 0) {
		*out = mcp_dump(mcp_error(NULL, MCP_INVALID_REQUEST, "empty batch"));
		return;
	}
	replies = json_array();
	if (!replies)
		return;
	json_array_foreach(msg, i, e) {
		r = mcp_one(m, sess, e, true, notify, payload);
		if (r)
			json_array_append_new(replies, r);
	}
	if (json_array_size(replies))
		*out = json_dumps(replies, JSON_COMPACT);
	json_decref(replies);
}

void mcp_handle_text(char **out, struct mcp_server *m, struct mcp_session *sess, const char *text,
		     size_t len, mcp_notify_fn notify, void *payload)
{
	json_error_t jerr;
	json_t *msg;
	char why[256];

	*out = NULL;
	if (len > MCP_MESSAGE_MAX) {
		snprintf(why, sizeof(why), "message larger than %u MiB", MCP_MESSAGE_MAX >> 20);
		*out = mcp_error_text(MCP_INVALID_REQUEST, why);
		return;
	}
	msg = json_loadb(text, len, JSON_DECODE_ANY, &jerr);
	if (!msg) {
		snprintf(why, sizeof(why), "parse error: %s (line %d, column %d)", jerr.text, jerr.line,
			 jerr.column);
		*out = mcp_error_text(MCP_PARSE_ERROR, why);
		return;
	}
	mcp_handle_json(out, m, sess, msg, notify, payload);
	json_decref(msg);
}
