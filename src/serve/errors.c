/* SPDX-License-Identifier: MIT */
/*
 * Errors of the service: the one map from error kinds to HTTP statuses, to
 * the "kind" of a JSON error body and to JSON-RPC codes, and from the
 * library's errors to kinds.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "text.h"

static const struct {
	unsigned int status;
	const char *name;
	int jsonrpc;
} kinds[SERVE_KIND_COUNT] = {
	[SERVE_OK] = { 200, "", 0 },
	[SERVE_E_REQUEST] = { 400, "request", MCP_INVALID_PARAMS },
	[SERVE_E_LANGUAGE] = { 400, "language", MCP_INVALID_PARAMS },
	[SERVE_E_POLICY] = { 400, "policy", MCP_INVALID_PARAMS },
	[SERVE_E_AUTH] = { 401, "auth", MCP_INVALID_REQUEST },
	[SERVE_E_NOT_FOUND] = { 404, "not_found", MCP_RESOURCE_NOT_FOUND },
	[SERVE_E_ORIGIN] = { 403, "origin", MCP_INVALID_REQUEST },
	[SERVE_E_METHOD] = { 405, "method", MCP_METHOD_NOT_FOUND },
	[SERVE_E_CONFLICT] = { 409, "busy", MCP_INTERNAL_ERROR },
	[SERVE_E_KERNEL_DEAD] = { 409, "kernel_dead", MCP_INTERNAL_ERROR },
	[SERVE_E_TOO_LARGE] = { 413, "too_large", MCP_INVALID_REQUEST },
	[SERVE_E_KEY_REUSED] = { 422, "request", MCP_INVALID_PARAMS },
	[SERVE_E_RATE_LIMITED] = { 429, "auth", MCP_INVALID_REQUEST },
	[SERVE_E_HEADERS_TOO_LARGE] = { 431, "too_large", MCP_INVALID_REQUEST },
	[SERVE_E_INTERNAL] = { 500, "internal", MCP_INTERNAL_ERROR },
	[SERVE_E_ENGINE] = { 502, "engine", MCP_INTERNAL_ERROR },
	[SERVE_E_FORWARD] = { 502, "forward", MCP_INTERNAL_ERROR },
	[SERVE_E_NODE_GONE] = { 502, "node_gone", MCP_INTERNAL_ERROR },
	[SERVE_E_BUSY] = { 503, "busy", MCP_INTERNAL_ERROR },
	[SERVE_E_STOPPING] = { 503, "stopping", MCP_INTERNAL_ERROR },
	[SERVE_E_STORAGE] = { 507, "storage", MCP_INTERNAL_ERROR },
};

static enum serve_kind kind_ok(enum serve_kind kind)
{
	return (unsigned int)kind < SERVE_KIND_COUNT ? kind : SERVE_E_INTERNAL;
}

unsigned int serve_kind_status(enum serve_kind kind)
{
	return kinds[kind_ok(kind)].status;
}

const char *serve_kind_name(enum serve_kind kind)
{
	return kinds[kind_ok(kind)].name;
}

int serve_kind_jsonrpc(enum serve_kind kind)
{
	return kinds[kind_ok(kind)].jsonrpc;
}

enum serve_kind serve_lib_kind(int rc)
{
	switch (rc) {
	case 0:
		return SERVE_OK;
	case NBRUN_EINVAL:
	case NBRUN_EPARSE:
		return SERVE_E_REQUEST;
	case NBRUN_ENOTFOUND:
		return SERVE_E_NOT_FOUND;
	case NBRUN_EENGINE:
	case NBRUN_ENOIMAGE:
		return SERVE_E_ENGINE;
	case NBRUN_ECANCELLED:
		return SERVE_E_STOPPING;
	case NBRUN_ENOSPC:
		return SERVE_E_STORAGE;
	default:
		return SERVE_E_INTERNAL;
	}
}

void serve_reply_error(struct serve_reply *r, enum serve_kind kind, const char *fmt, ...)
{
	char msg[512], *clean;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	msg[strcspn(msg, "\r\n")] = '\0'; /* one line */
	/* What a client sent (an id, a key cut at 64 bytes) may not be UTF-8:
	 * jansson would refuse the whole message. */
	clean = text_utf8_sanitize(msg, strlen(msg), NULL);
	json_decref(r->body);
	r->kind = kind_ok(kind) == SERVE_OK ? SERVE_E_INTERNAL : kind_ok(kind);
	r->body = clean ? json_pack("{s:s, s:s}", "error", clean, "kind", serve_kind_name(r->kind))
			: NULL;
	free(clean);
}

/* Writing into the state directory failed with err: storage when its disk is full, else internal. */
void serve_reply_write_error(struct serve_reply *reply, int err, const char *what)
{
	if (err == ENOSPC || err == EDQUOT)
		serve_reply_error(reply, SERVE_E_STORAGE, "the state directory is full: cannot %s", what);
	else
		serve_reply_error(reply, SERVE_E_INTERNAL, "cannot %s: %s", what, strerror(err));
}

void serve_reply_lib_error(struct serve_reply *reply, int rc, const char *msg, const char *what)
{
	enum serve_kind kind = serve_lib_kind(rc);

	if (!msg)
		msg = "";
	switch (kind) {
	case SERVE_E_STOPPING:
		serve_reply_error(reply, kind, "%s was cancelled: the server is shutting down", what);
		break;
	case SERVE_E_STORAGE:
		serve_reply_error(reply, kind, "the state directory is full: %s", msg);
		break;
	case SERVE_E_INTERNAL:
		if (*msg)
			serve_reply_error(reply, kind, "%s", msg);
		else
			serve_reply_error(reply, kind, "%s failed", what);
		break;
	default:
		serve_reply_error(reply, kind, "%s", msg);
	}
}
