/* SPDX-License-Identifier: MIT */
/* JSON replies of the HTTP door, and its map from library errors to statuses. */
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-private.h"
#include "text.h"

struct MHD_Response *sess_json(unsigned int *status, unsigned int code, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct MHD_Response *r;

	json_decref(body);
	if (!text) {
		static const char oom[] = "{\"error\": \"out of memory\", \"kind\": \"internal\"}";
		*status = 500;
		r = MHD_create_response_from_buffer(strlen(oom), (void *)oom, MHD_RESPMEM_PERSISTENT);
	} else {
		*status = code;
		r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
		if (!r)
			free(text);
	}
	if (r)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	return r;
}

struct MHD_Response *serve_error_response(unsigned int *status, unsigned int code, const char *kind,
					  const char *fmt, ...)
{
	struct serve_reply r = { 0, NULL, 0 };
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	serve_reply_error(&r, code, kind, "%s", msg);
	return sess_json(status, r.status, r.body);
}

struct MHD_Response *sess_lib_error(unsigned int *status, int rc, const char *msg)
{
	switch (rc) {
	case NBRUN_EINVAL:
	case NBRUN_EPARSE:
		return serve_error_response(status, 400, "request", "%s", msg);
	case NBRUN_ENOTFOUND:
		return serve_error_response(status, 404, "not_found", "%s", msg);
	case NBRUN_EENGINE:
	case NBRUN_ENOIMAGE:
		return serve_error_response(status, 502, "engine", "%s", msg);
	case NBRUN_ENOSPC:
		return serve_error_response(status, 507, "storage", "the state directory is full: %s", msg);
	default:
		return serve_error_response(status, 500, "internal", "%s", *msg ? msg : "the session call failed");
	}
}
