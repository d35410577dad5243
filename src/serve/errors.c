/* SPDX-License-Identifier: MIT */
/* Error replies of the service, and the one map from the library's errors to them. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "text.h"

void serve_reply_error(struct serve_reply *r, unsigned int status, const char *kind,
		       const char *fmt, ...)
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
	r->status = status;
	r->body = clean ? json_pack("{s:s, s:s}", "error", clean, "kind", kind) : NULL;
	free(clean);
}

/* Writing into the state directory failed with err: 507 when its disk is full, else 500. */
void serve_reply_write_error(struct serve_reply *reply, int err, const char *what)
{
	if (err == ENOSPC || err == EDQUOT)
		serve_reply_error(reply, 507, "storage", "the state directory is full: cannot %s", what);
	else
		serve_reply_error(reply, 500, "internal", "cannot %s: %s", what, strerror(err));
}

void serve_reply_lib_error(struct serve_reply *reply, int rc, const struct nbrun_ctx *ctx)
{
	const char *msg = nbrun_ctx_errmsg(ctx);

	switch (rc) {
	case NBRUN_EINVAL:
	case NBRUN_ENOTFOUND:
	case NBRUN_EPARSE:
		serve_reply_error(reply, 400, "request", "%s", msg);
		break;
	case NBRUN_EENGINE:
	case NBRUN_ENOIMAGE:
		serve_reply_error(reply, 502, "engine", "%s", msg);
		break;
	case NBRUN_ECANCELLED:
		serve_reply_error(reply, 503, "stopping", "the run was cancelled: the server is shutting down");
		break;
	case NBRUN_ENOSPC:
		serve_reply_error(reply, 507, "storage", "the state directory is full: %s", msg);
		break;
	default:
		serve_reply_error(reply, 500, "internal", "%s", *msg ? msg : "the run failed");
	}
}
