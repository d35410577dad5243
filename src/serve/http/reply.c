/* SPDX-License-Identifier: MIT */
/* JSON replies of the HTTP door. */
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

struct MHD_Response *serve_error_response(unsigned int *status, enum serve_kind kind,
					  const char *fmt, ...)
{
	struct serve_reply r = SERVE_REPLY_INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	serve_reply_error(&r, kind, "%s", msg);
	return sess_json(status, serve_kind_status(r.kind), r.body);
}

struct MHD_Response *serve_reply_response(unsigned int *status, struct serve_reply *reply)
{
	json_t *body = reply->body;
	struct MHD_Response *r;
	char retry[16];

	reply->body = NULL;
	r = sess_json(status, serve_kind_status(reply->kind), body);
	if (r && reply->retry_after) {
		snprintf(retry, sizeof(retry), "%u", reply->retry_after);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, retry);
	}
	return r;
}

struct MHD_Response *sess_lib_error(unsigned int *status, int rc, const char *msg)
{
	struct serve_reply r = SERVE_REPLY_INIT;

	serve_reply_lib_error(&r, rc, msg, "the session call");
	return serve_reply_response(status, &r);
}
