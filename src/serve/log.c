/* SPDX-License-Identifier: MIT */
/*
 * What the service has to say that is no reply to a client: access lines,
 * sessions opened and closed, errors while starting. One hook, set by the
 * program that runs the service (as kmod_set_log_fn), stderr by default.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "serve.h"

static serve_log_fn *log_fn;
static void *log_payload;

void serve_set_log_fn(serve_log_fn *fn, void *payload)
{
	log_fn = fn;
	log_payload = payload;
}

static void log_stderr(enum serve_log_level level, const char *cmd, const char *line)
{
	switch (level) {
	case SERVE_LOG_INFO:
		fprintf(stderr, "%s\n", line);
		break;
	case SERVE_LOG_ERR:
		fprintf(stderr, "nbrun: error: %s\n", line);
		break;
	case SERVE_LOG_USAGE:
		fprintf(stderr, "nbrun: error: %s\nTry 'nbrun %s%s--help'.\n", line, cmd ? cmd : "",
			cmd ? " " : "");
		break;
	}
}

void serve_log(enum serve_log_level level, const char *cmd, const char *fmt, ...)
{
	char *line = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (n < 0)
		line = NULL;
	if (log_fn)
		log_fn(level, cmd, line ? line : "out of memory", log_payload);
	else
		log_stderr(level, cmd, line ? line : "out of memory");
	free(line);
}
