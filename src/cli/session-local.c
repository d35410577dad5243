/* SPDX-License-Identifier: MIT */
/* The local session of nbrun session: one sandbox on this host's engine,
 * through the library (the remote one is remote-session.c). */
#include <stdlib.h>

#include <jansson.h>

#include "cli.h"

static const char *local_id(void *s)
{
	return nbrun_session_id(s);
}

static json_t *local_execute(void *s, const char *code, const char *dir)
{
	struct nbrun_exec_options eo = NBRUN_EXEC_OPTIONS_INIT;
	struct nbrun_result *res = NULL;
	char *text = NULL;
	json_t *doc = NULL;

	eo.out_dir = dir;
	eo.timeout_ms = 3600 * 1000;
	eo.on_event = cli_stream_event;
	if (nbrun_session_execute(&res, s, code, &eo) < 0)
		return NULL;
	if (nbrun_result_to_json(&text, res, 0) == 0)
		doc = json_loads(text, JSON_ALLOW_NUL, NULL);
	free(text);
	nbrun_result_free(res);
	return doc;
}

static bool local_interrupt(void *s)
{
	return nbrun_session_interrupt(s) == 1;
}

static int local_restart(void *s)
{
	return nbrun_session_restart(s);
}

static json_t *local_files(void *s, int *truncated)
{
	char *text = NULL;
	json_t *list;

	if (nbrun_session_list_files(&text, truncated, s) < 0)
		return NULL;
	list = json_loads(text, 0, NULL);
	free(text);
	return list;
}

static int local_get(void *s, const char *name, int fd)
{
	return nbrun_session_get_file(s, name, fd, 1ULL << 30);
}

static int local_put(void *s, const char *name, const char *data, size_t len)
{
	return nbrun_session_put_file(s, name, data, len);
}

static char *local_notebook(void *s)
{
	char *text = NULL;

	return nbrun_session_notebook(&text, s) < 0 ? NULL : text;
}

static const char *local_errmsg(void *s)
{
	return nbrun_session_errmsg(s);
}

static bool local_kernel_dead(void *s)
{
	return nbrun_session_kernel_dead(s);
}

static void local_close(void *s)
{
	struct nbrun_ctx *ctx = NULL;

	nbrun_session_close(s);
	/* The egress proxy, when this session needed it and no other run does now. */
	if (nbrun_ctx_new(&ctx) == 0)
		nbrun_egress_release(ctx);
	nbrun_ctx_free(ctx);
}

const struct cli_session_ops cli_local_session_ops = {
	.id = local_id,
	.execute = local_execute,
	.interrupt = local_interrupt,
	.restart = local_restart,
	.files = local_files,
	.get = local_get,
	.put = local_put,
	.notebook = local_notebook,
	.errmsg = local_errmsg,
	.kernel_dead = local_kernel_dead,
	.close = local_close,
};
