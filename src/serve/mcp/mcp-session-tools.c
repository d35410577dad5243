/* SPDX-License-Identifier: MIT */
/* The MCP server's stateful tools: session_open/execute/upload/download/close on nbrun_session_*. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "mcp-session-tools.h"
#include "mime.h"

/*
 * The caller's session by id (one its MCP session opened), held and claimed;
 * NULL with a reason.
 */
static struct serve_session *mcp_box_take(struct mcp_call_ctx *cc, const char *id, char *why,
					  size_t len)
{
	struct serve_session *ss = id ? sess_get(cc->s, id, cc->tenant, cc->owner) : NULL;

	if (!ss) {
		snprintf(why, len, "no open session '%.40s' (open one with session_open)", id ? id : "");
		return NULL;
	}
	if (!sess_claim(cc->s, ss)) {
		snprintf(why, len, "session %s is running another call; wait for it", ss->id);
		sess_put(cc->s, ss);
		return NULL;
	}
	return ss;
}

static void mcp_box_give(struct mcp_call_ctx *cc, struct serve_session *ss)
{
	sess_unclaim(cc->s, ss);
	sess_put(cc->s, ss);
}

static json_t *mcp_text_result(const char *text, bool error)
{
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError",
			 error);
}

/* ---- the tools ---------------------------------------------------------------------- */

/* A fresh directory name below runs/ for one call's outputs (16 hex digits, a valid run id). */
static int mcp_dir_id(char out[17])
{
	return wire_random_hex(out, 8);
}

static json_t *mcp_session_open(struct mcp_call_ctx *cc, json_t *args, int *code, char *msg,
				size_t msglen)
{
	struct serve_reply reply = SERVE_REPLY_INIT;
	struct serve_run_args a = { 0 };
	struct serve_request req;
	struct serve_session *ss;
	json_t *out = NULL;
	char tmp_root[4096], why[600];
	uint64_t idle = MCP_BOX_IDLE_MS < cc->s->session_life_ms ? MCP_BOX_IDLE_MS
								 : cc->s->session_life_ms;

	/* Checked as a run's: one of the server's languages, else the list of them. */
	a.code = "";
	a.files = json_object_get(args, "files");
	a.allow_net = json_object_get(args, "allow_net");
	a.language = json_string_value(json_object_get(args, "language"));
	if (json_object_get(args, "language") && !a.language)
		return mcp_tool_arg_error(cc, code, msg, msglen,
					  "session_open: language: want a string such as \"python\"");
	snprintf(tmp_root, sizeof(tmp_root), "%s/tmp", cc->s->state_dir);
	if (serve_request_init(&req, &reply, cc->s, &a, tmp_root) < 0) {
		snprintf(why, sizeof(why), "session_open: %s",
			 json_string_value(json_object_get(reply.body, "error")) ?: "out of memory");
		json_decref(reply.body);
		return mcp_tool_arg_error(cc, code, msg, msglen, why);
	}
	/* The server's table, its limit shared with the HTTP API's sessions. */
	ss = serve_session_open(cc->s, &reply, cc->tenant, cc->owner, &req, idle, cc->cancel);
	serve_request_free(&req);
	if (*cc->cancel) {
		*code = 0;
	} else if (ss) {
		snprintf(why, sizeof(why), "session_id: %s\nA %s kernel is ready; run code in it "
			 "with session_execute.", ss->id, ss->language);
		out = mcp_text_result(why, false);
		json_object_set_new(out, "structuredContent",
				    json_pack("{s:s, s:s}", "session_id", ss->id, "language",
					      ss->language));
	} else if (reply.kind == SERVE_E_BUSY) {
		snprintf(why, sizeof(why), "%u sessions are open, the most this server keeps: close one "
			 "with session_close", cc->s->max_sessions);
		out = mcp_text_result(why, true);
	} else {
		snprintf(why, sizeof(why), "nbrun could not open a session: %s",
			 json_string_value(json_object_get(reply.body, "error")) ?: "out of memory");
		out = mcp_text_result(why, true);
	}
	if (ss)
		sess_put(cc->s, ss);
	json_decref(reply.body);
	return out;
}

static json_t *mcp_session_execute(struct mcp_call_ctx *cc, struct serve_session *x, json_t *args,
				   int *code, char *msg, size_t msglen)
{
	struct nbrun_exec_options eo = NBRUN_EXEC_OPTIONS_INIT;
	const char *src = json_string_value(json_object_get(args, "code"));
	json_t *t = json_object_get(args, "timeout_s"), *doc = NULL, *out = NULL;
	struct nbrun_result *res = NULL;
	char dir_id[17], *out_dir = NULL, *text = NULL, why[600];
	int rc;

	if (!src || (t && (!json_is_number(t) || !(json_number_value(t) > 0))))
		return mcp_tool_arg_error(cc, code, msg, msglen,
					  "session_execute: want 'code' (a string) and maybe 'timeout_s' "
					  "(a positive number)");
	eo.timeout_ms = cc->s->opts.timeout_ms;
	if (t && json_number_value(t) * 1000 < (double)eo.timeout_ms)
		eo.timeout_ms = (uint64_t)(json_number_value(t) * 1000) + 1;
	eo.limits = cc->s->opts.limits;
	eo.max_file_bytes = cc->s->opts.max_file_bytes;
	eo.max_files = cc->s->opts.max_files;
	if (mcp_dir_id(dir_id) < 0 || asprintf(&out_dir, "%s/%s", cc->s->runs_dir, dir_id) < 0) {
		out_dir = NULL;
		snprintf(msg, msglen, "out of memory");
		*code = MCP_INTERNAL_ERROR;
		return NULL;
	}
	eo.out_dir = out_dir;
	cc->interrupts(cc, x->ns);
	rc = serve_session_execute(&res, cc->s, x, src, &eo);
	cc->interrupts(cc, NULL);
	if (*cc->cancel) {
		serve_info("nbrun: mcp: session_execute cancelled: its cell was interrupted");
		*code = 0;
	} else if (rc < 0) {
		snprintf(why, sizeof(why), "the session could not run it: %s%s",
			 nbrun_session_errmsg(x->ns),
			 rc == NBRUN_EENGINE ? " (its sandbox is gone: close it and open a new one)" : "");
		out = mcp_text_result(why, true);
	} else if (nbrun_result_to_json(&text, res, 0) == 0 && (doc = json_loads(text, 0, NULL))) {
		out = mcp_result_of(cc, doc, dir_id);
	}
	if (!out && *code) {
		*code = MCP_INTERNAL_ERROR;
		snprintf(msg, msglen, "out of memory");
	}
	json_decref(doc);
	nbrun_result_free(res);
	free(text);
	free(out_dir);
	return out;
}

static json_t *mcp_session_upload(struct mcp_call_ctx *cc, struct serve_session *x, json_t *args,
				  int *code, char *msg, size_t msglen)
{
	json_t *files = json_object_get(args, "files"), *f;
	char why[600];
	size_t i;

	if (!json_is_array(files))
		return mcp_tool_arg_error(cc, code, msg, msglen,
					  "session_upload: 'files' must be a list of {path, content_base64}");
	json_array_foreach(files, i, f) {
		const char *path = json_string_value(json_object_get(f, "path"));
		const char *b64 = json_string_value(json_object_get(f, "content_base64"));
		size_t len = b64 ? json_string_length(json_object_get(f, "content_base64")) : 0;
		char *data;
		size_t n;
		int rc;

		if (!path || !b64 || len > MCP_MESSAGE_MAX)
			return mcp_tool_arg_error(cc, code, msg, msglen,
						  "session_upload: each file wants 'path' and 'content_base64' strings");
		data = wire_base64_decode(b64, len, &n);
		if (!data) {
			*code = MCP_INTERNAL_ERROR;
			snprintf(msg, msglen, "out of memory");
			return NULL;
		}
		rc = nbrun_session_put_file(x->ns, path, data, n);
		free(data);
		if (rc < 0) {
			snprintf(why, sizeof(why), "session_upload: %.200s: %s", path,
				 nbrun_session_errmsg(x->ns));
			return mcp_text_result(why, true);
		}
	}
	snprintf(why, sizeof(why), "%zu file(s) written under /mnt/data/", json_array_size(files));
	return mcp_text_result(why, false);
}

static json_t *mcp_session_download(struct mcp_call_ctx *cc, struct serve_session *x, json_t *args,
				    int *code, char *msg, size_t msglen)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	const char *base;
	struct mcp_budget b = { MCP_IMAGE_ALL, MCP_EMBED_ALL };
	char dir_id[17], rel[300], why[600], owner[65];
	json_t *content = NULL, *out = NULL;
	int dfd = -1, fd = -1, rc;
	struct stat st;

	if (!path || !*path)
		return mcp_tool_arg_error(cc, code, msg, msglen, "session_download: 'path' must be a string");
	base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (!wire_name_safe(base, strlen(base)) || mcp_dir_id(dir_id) < 0 ||
	    mkdirat(cc->s->runs_fd, dir_id, 0700) < 0 ||
	    (dfd = openat(cc->s->runs_fd, dir_id, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    (serve_owner_hex(owner, cc->s, cc->tenant), serve_write_owner(dfd, owner) < 0) ||
	    mkdirat(dfd, "files", 0700) < 0) {
		snprintf(why, sizeof(why), "session_download: cannot take '%.200s'", path);
		out = mcp_text_result(why, true);
		goto out;
	}
	snprintf(rel, sizeof(rel), "files/%s", base);
	fd = openat(dfd, rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	rc = fd < 0 ? NBRUN_EIO : nbrun_session_get_file(x->ns, path, fd, MCP_RESOURCE_MAX);
	if (rc < 0 || fstat(fd, &st) < 0) {
		snprintf(why, sizeof(why), "session_download: %.200s: %s", path,
			 rc == NBRUN_ENOTFOUND ? "no such file in /mnt/data" : nbrun_session_errmsg(x->ns));
		out = mcp_text_result(why, true);
		goto out;
	}
	content = json_array();
	mcp_add_resource(content, cc, dfd, dir_id, rel, base, mime_of_name(base), (json_int_t)st.st_size, &b);
	out = json_pack("{s:O, s:b}", "content", content, "isError", 0);
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	json_decref(content);
	return out;
}

json_t *mcp_session_tool(struct mcp_call_ctx *cc, const char *name, json_t *args, int *code,
			 char *msg, size_t msglen)
{
	const char *id;
	struct serve_session *x;
	char why[300] = "";
	json_t *out;

	if (args && !json_is_object(args)) {
		*code = MCP_INVALID_PARAMS;
		snprintf(msg, msglen, "params.arguments must be an object");
		return NULL;
	}
	if (!strcmp(name, "session_open"))
		return mcp_session_open(cc, args, code, msg, msglen);
	if (strcmp(name, "session_execute") && strcmp(name, "session_upload") &&
	    strcmp(name, "session_download") && strcmp(name, "session_close")) {
		*code = MCP_INVALID_PARAMS;
		snprintf(msg, msglen, "unknown tool: %.128s", name);
		return NULL;
	}
	id = json_string_value(json_object_get(args, "session_id"));
	if (!id)
		return mcp_tool_arg_error(cc, code, msg, msglen, "'session_id' must be a string");
	x = mcp_box_take(cc, id, why, sizeof(why));
	if (!x)
		return mcp_text_result(why, true);
	if (!strcmp(name, "session_close")) {
		sess_unclaim(cc->s, x);
		sess_close(cc->s, x, "session_close");
		sess_put(cc->s, x);
		return mcp_text_result("closed: the sandbox and its files are gone", false);
	}
	if (!strcmp(name, "session_execute"))
		out = mcp_session_execute(cc, x, args, code, msg, msglen);
	else if (!strcmp(name, "session_upload"))
		out = mcp_session_upload(cc, x, args, code, msg, msglen);
	else
		out = mcp_session_download(cc, x, args, code, msg, msglen);
	mcp_box_give(cc, x);
	return out;
}
