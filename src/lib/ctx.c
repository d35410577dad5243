/* SPDX-License-Identifier: MIT */
/* Library context and its one-line error message. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbrun-private.h"

NBRUN_EXPORT const char *nbrun_version(void)
{
	return NBRUN_VERSION;
}

NBRUN_EXPORT const char *nbrun_status_name(enum nbrun_status status)
{
	switch (status) {
	case NBRUN_STATUS_OK: return "ok";
	case NBRUN_STATUS_ERROR: return "error";
	case NBRUN_STATUS_TIMEOUT: return "timeout";
	case NBRUN_STATUS_OOM: return "oom";
	case NBRUN_STATUS_FAILED: return "failed";
	}
	return "failed";
}

NBRUN_EXPORT int nbrun_ctx_new(struct nbrun_ctx **out)
{
	struct nbrun_ctx *ctx;

	*out = NULL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return NBRUN_ENOMEM;
	*out = ctx;
	return 0;
}

NBRUN_EXPORT void nbrun_ctx_free(struct nbrun_ctx *ctx)
{
	free(ctx);
}

NBRUN_EXPORT const char *nbrun_ctx_errmsg(const struct nbrun_ctx *ctx)
{
	return ctx ? ctx->errmsg : "";
}

/* Messages come partly from the engine and the container: keep them to one printable line. */
static void ctx_fold(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = ' ';
}

static int ctx_verr(struct nbrun_ctx *ctx, int code, const char *suffix, const char *fmt,
		    va_list ap)
{
	size_t n;

	if (!ctx)
		return code;
	vsnprintf(ctx->errmsg, sizeof(ctx->errmsg), fmt, ap);
	if (suffix) {
		n = strlen(ctx->errmsg);
		snprintf(ctx->errmsg + n, sizeof(ctx->errmsg) - n, ": %s", suffix);
	}
	ctx_fold(ctx->errmsg);
	return code;
}

int nbrun__err(struct nbrun_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctx_verr(ctx, code, NULL, fmt, ap);
	va_end(ap);
	return code;
}

int nbrun__errno(struct nbrun_ctx *ctx, int code, int errnum, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctx_verr(ctx, code, strerror(errnum < 0 ? -errnum : errnum), fmt, ap);
	va_end(ap);
	return code;
}

int nbrun__write_error(int errnum)
{
	if (errnum < 0)
		errnum = -errnum;
	return errnum == ENOSPC || errnum == EDQUOT ? NBRUN_ENOSPC : NBRUN_EIO;
}
