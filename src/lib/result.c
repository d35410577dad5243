/* SPDX-License-Identifier: MIT */
/* The result document and its accessors. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonx.h"
#include "nbrun-private.h"
#include "text.h"

int nbrun__result_new(struct nbrun_result **out, const char *run_id)
{
	struct nbrun_result *r;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NBRUN_ENOMEM;
	r->doc = json_pack("{s:s, s:s, s:s, s:n, s:s, s:s, s:[], s:[], s:n, s:[], s:[], s:[], s:n, s:n, s:I, s:b, s:i}",
			   "nbrun", NBRUN_VERSION, "run_id", run_id ? run_id : "", "status", "ok",
			   "message", "stdout", "", "stderr", "", "outputs", "results", "error",
			   "images", "files", "skipped", "notebook", "out_dir", "duration_ms",
			   (json_int_t)0, "truncated", 0, "cells", 0);
	if (!r->doc) {
		free(r);
		return NBRUN_ENOMEM;
	}
	*out = r;
	return 0;
}

void nbrun__result_set_node(struct nbrun_result *r)
{
	char host[256] = "";

	if (gethostname(host, sizeof(host) - 1) == 0 && host[0] && text_utf8_valid(host, strlen(host)))
		json_object_set_new(r->doc, "node", json_string(host));
}

NBRUN_EXPORT void nbrun_result_free(struct nbrun_result *r)
{
	if (!r)
		return;
	json_decref(r->doc);
	free(r);
}

void nbrun__result_set_status(struct nbrun_result *r, enum nbrun_status st, const char *message)
{
	/* A run that did not end ok or error always says why. */
	if (st != NBRUN_STATUS_OK && st != NBRUN_STATUS_ERROR && (!message || !*message))
		message = "the run failed and no reason was recorded";
	json_object_set_new(r->doc, "status", json_string(nbrun_status_name(st)));
	json_object_set_new(r->doc, "message", message ? json_string(message) : json_null());
}

int nbrun__result_skip(struct nbrun_result *r, const char *path, const char *reason)
{
	json_t *arr = json_object_get(r->doc, "skipped");
	size_t cap = r->max_skipped ? r->max_skipped : NBRUN_DEFAULT_MAX_FILES;
	json_t *e;

	if (!json_is_array(arr))
		return NBRUN_EINVAL;
	/* The list itself is bounded: past the cap, one summary entry counts the rest. */
	if (json_array_size(arr) >= cap) {
		json_t *last = json_array_get(arr, json_array_size(arr) - 1);
		json_t *count = json_object_get(last, "count");

		if (json_array_size(arr) > cap && json_is_integer(count))
			return json_integer_set(count, json_integer_value(count) + 1) < 0 ? NBRUN_EINVAL : 0;
		e = json_pack("{s:s, s:s, s:I}", "path", "...", "reason", "more entries skipped", "count",
			      (json_int_t)1);
		if (!e || json_array_append_new(arr, e) < 0)
			return NBRUN_ENOMEM;
		return 0;
	}
	/* The reason is nbrun's own words; one that is not UTF-8 is a caller's mistake. */
	if (!text_utf8_valid(reason, strlen(reason)))
		return NBRUN_EINVAL;
	/* Paths from the container may be arbitrary bytes: keep only valid UTF-8. */
	if (!text_utf8_valid(path, strlen(path)))
		path = "(name not valid UTF-8)";
	e = json_pack("{s:s, s:s}", "path", path, "reason", reason);
	if (!e || json_array_append_new(arr, e) < 0)
		return NBRUN_ENOMEM;
	return 0;
}

void nbrun__result_flag_truncated(struct nbrun_result *r)
{
	json_object_set_new(r->doc, "truncated", json_true());
}

int nbrun__result_write(struct nbrun_ctx *ctx, const struct nbrun_result *r, int dirfd)
{
	int rc = jsonx_write_file(dirfd, "result.json", r->doc);

	if (rc == -ENOMEM)
		return nbrun__err(ctx, NBRUN_ENOMEM, "cannot serialise the result");
	if (rc < 0)
		return nbrun__errno(ctx, nbrun__write_error(-rc), -rc, "cannot write result.json");
	return 0;
}

static const char *result_str(const struct nbrun_result *r, const char *key)
{
	return json_string_value(json_object_get(r->doc, key));
}

NBRUN_EXPORT enum nbrun_status nbrun_result_status(const struct nbrun_result *r)
{
	const char *s = result_str(r, "status");
	enum nbrun_status st;

	for (st = NBRUN_STATUS_OK; s && st <= NBRUN_STATUS_FAILED; st++)
		if (!strcmp(s, nbrun_status_name(st)))
			return st;
	return NBRUN_STATUS_FAILED;
}

NBRUN_EXPORT const char *nbrun_result_run_id(const struct nbrun_result *r)
{
	return result_str(r, "run_id");
}

NBRUN_EXPORT const char *nbrun_result_message(const struct nbrun_result *r)
{
	return result_str(r, "message");
}

NBRUN_EXPORT const char *nbrun_result_stdout(const struct nbrun_result *r)
{
	const char *s = result_str(r, "stdout");
	return s ? s : "";
}

NBRUN_EXPORT const char *nbrun_result_stderr(const struct nbrun_result *r)
{
	const char *s = result_str(r, "stderr");
	return s ? s : "";
}

NBRUN_EXPORT size_t nbrun_result_value_count(const struct nbrun_result *r)
{
	return json_array_size(json_object_get(r->doc, "results"));
}

NBRUN_EXPORT const char *nbrun_result_value(const struct nbrun_result *r, size_t i)
{
	json_t *v = json_array_get(json_object_get(r->doc, "results"), i);
	return json_string_value(json_object_get(v, "text"));
}

NBRUN_EXPORT int nbrun_result_error(const struct nbrun_result *r, const char **name,
				    const char **value, const char **traceback)
{
	json_t *e = json_object_get(r->doc, "error");

	if (!json_is_object(e))
		return 0;
	if (name)
		*name = json_string_value(json_object_get(e, "name"));
	if (value)
		*value = json_string_value(json_object_get(e, "value"));
	if (traceback)
		*traceback = json_string_value(json_object_get(e, "traceback"));
	return 1;
}

NBRUN_EXPORT size_t nbrun_result_file_count(const struct nbrun_result *r)
{
	return json_array_size(json_object_get(r->doc, "files"));
}

NBRUN_EXPORT const char *nbrun_result_file_path(const struct nbrun_result *r, size_t i)
{
	const json_t *f = json_array_get(json_object_get(r->doc, "files"), i);

	return json_string_value(json_object_get(f, "path"));
}

NBRUN_EXPORT size_t nbrun_result_skipped_count(const struct nbrun_result *r)
{
	return json_array_size(json_object_get(r->doc, "skipped"));
}

NBRUN_EXPORT const char *nbrun_result_out_dir(const struct nbrun_result *r)
{
	return result_str(r, "out_dir");
}

NBRUN_EXPORT int nbrun_result_to_json(char **out, const struct nbrun_result *r, int pretty)
{
	*out = json_dumps(r->doc, pretty ? JSON_INDENT(2) : JSON_COMPACT);
	return *out ? 0 : NBRUN_ENOMEM;
}
