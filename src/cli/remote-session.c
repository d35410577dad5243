/* SPDX-License-Identifier: MIT */
/*
 * nbrun session --server: the prompt's session kept by an nbrun serve,
 * through its /v1/sessions endpoints. Outputs stream as NDJSON events; each
 * execution's images, files and result.json land in the same local
 * directory a local session would write.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonx.h"
#include "cli.h"
#include "fdio.h"
#include "remote.h"
#include "wire.h"

#define RSESS_REPLY_MAX (512u << 20)
#define RSESS_LINE_MAX (64u << 20)

struct rsess {
	struct remote *r;   /* the prompt's requests */
	struct remote *ri;  /* interrupts, from the Ctrl-C thread */
	char id[WIRE_NODE_MAX + 1 + 16];
	char errmsg[512];
	long status; /* of the last request: 0 when none came */
	bool dead;
};

static void rsess_fail(struct rsess *s, long status, const json_t *reply)
{
	const char *msg = json_string_value(json_object_get(reply, "error"));
	const char *kind = json_string_value(json_object_get(reply, "kind"));

	s->status = status;
	if (!status)
		snprintf(s->errmsg, sizeof(s->errmsg), "cannot reach the server: %s", remote_errmsg(s->r));
	else
		snprintf(s->errmsg, sizeof(s->errmsg), "server: %s (HTTP %ld)",
			 msg ? msg : "an unexpected reply", status);
	if (kind && !strcmp(kind, "kernel_dead"))
		s->dead = true;
}

/*
 * One request whose reply is JSON (or, with raw, any text): the parsed
 * reply when the status is one of 200 or 201, else NULL with the message set.
 */
static json_t *rsess_ask(struct rsess *s, const char *method, const char *path, const char *body,
			 size_t len, char **raw)
{
	struct buf reply = BUF_INIT(RSESS_REPLY_MAX);
	struct remote_sink sink = { .mem = &reply, .fd = -1, .max = RSESS_REPLY_MAX };
	json_t *doc = NULL;
	long status = 0;

	if (remote_call(s->r, method, path, body, len, &sink, 300000, &status) == CURLE_OK &&
	    (status == 200 || status == 201) && raw) {
		*raw = buf_steal(&reply);
		if (!*raw)
			*raw = strdup("");
		buf_free(&reply);
		return *raw ? json_true() : NULL;
	}
	doc = json_loadb(reply.data ? reply.data : "", reply.len, 0, NULL);
	buf_free(&reply);
	if (status == 200 || status == 201) {
		if (doc)
			return doc;
		snprintf(s->errmsg, sizeof(s->errmsg), "the server's reply is not JSON");
		return NULL;
	}
	rsess_fail(s, status, doc);
	json_decref(doc);
	return NULL;
}

/* "/v1/sessions/ID/REST" with each byte of name that is not plain percent-encoded. */
static char *rsess_path(const struct rsess *s, const char *rest, const char *name)
{
	static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/";
	struct buf b = BUF_INIT(1u << 20);
	char esc[4];
	char *out;

	if (buf_printf(&b, "/v1/sessions/%s/%s", s->id, rest) < 0)
		goto fail;
	for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
		if (strchr(plain, *p)) {
			if (buf_append(&b, p, 1) < 0)
				goto fail;
			continue;
		}
		snprintf(esc, sizeof(esc), "%%%02X", *p);
		if (buf_append(&b, esc, 3) < 0)
			goto fail;
	}
	if (buf_append(&b, "", 1) < 0)
		goto fail;
	out = buf_steal(&b);
	buf_free(&b);
	return out;
fail:
	buf_free(&b);
	return NULL;
}

static const char *rsess_id(void *p)
{
	return ((struct rsess *)p)->id;
}

static const char *rsess_errmsg(void *p)
{
	return ((struct rsess *)p)->errmsg;
}

static bool rsess_kernel_dead(void *p)
{
	return ((struct rsess *)p)->dead;
}

/* ---- an execution, streamed --------------------------------------------------------- */

struct rsess_stream {
	json_t *last; /* the last line that is no event: the result (or an error) */
};

static void rsess_line(const char *line, size_t len, void *payload)
{
	struct rsess_stream *st = payload;
	json_t *v = json_loadb(line, len, 0, NULL);

	if (json_is_object(v) && json_object_get(v, "event")) {
		cli_stream_event(line, len, NULL);
		json_decref(v);
		return;
	}
	json_decref(st->last);
	st->last = v;
}

static json_t *rsess_execute(void *p, const char *code, const char *dir)
{
	struct rsess *s = p;
	struct buf tail = BUF_INIT(RSESS_LINE_MAX);
	struct rsess_stream st = { NULL };
	struct remote_sink sink = { .mem = &tail, .fd = -1, .max = UINT64_MAX,
				    .on_line = rsess_line, .payload = &st };
	json_t *req = json_pack("{s:s}", "code", code), *doc = NULL, *e;
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL, *path = NULL, *abs = NULL;
	long status = 0;
	size_t i;
	int out_fd = -1;

	json_decref(req);
	if (!body || !(path = rsess_path(s, "execute", NULL))) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		goto out;
	}
	remote_call(s->r, "POST", path, body, strlen(body), &sink, 0, &status);
	if (tail.len)
		rsess_line(tail.data, tail.len, &st); /* a reply with no final newline */
	if (status != 200 || !json_is_object(st.last) || !json_object_get(st.last, "status")) {
		rsess_fail(s, status, st.last);
		goto out;
	}
	doc = st.last;
	st.last = NULL;
	out_fd = remote_open_out(&abs, dir, NULL);
	if (out_fd < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "cannot use the output directory %s: %s", dir,
			 errno == ENOTEMPTY ? "not empty" : strerror(errno));
		goto fail;
	}
	json_array_foreach(json_object_get(doc, "images"), i, e)
		if (remote_save(s->r, out_fd, e) < 0)
			goto saved;
	json_array_foreach(json_object_get(doc, "files"), i, e)
		if (remote_save(s->r, out_fd, e) < 0)
			goto saved;
	json_object_del(doc, "notebook_url");
	json_object_set_new(doc, "out_dir", json_string(abs));
	if (jsonx_write_file(out_fd, "result.json", doc) == 0)
		goto out;
saved:
	snprintf(s->errmsg, sizeof(s->errmsg), "cannot save the outputs in %s", abs);
fail:
	json_decref(doc);
	doc = NULL;
out:
	if (out_fd >= 0)
		close(out_fd);
	json_decref(st.last);
	buf_free(&tail);
	free(body);
	free(path);
	free(abs);
	return doc;
}

/* ---- the other operations ----------------------------------------------------------- */

static bool rsess_interrupt(void *p)
{
	struct rsess *s = p;
	struct buf reply = BUF_INIT(1u << 20);
	struct remote_sink sink = { .mem = &reply, .fd = -1, .max = 1u << 20 };
	char *path = rsess_path(s, "interrupt", NULL);
	long status = 0;

	if (path)
		remote_call(s->ri, "POST", path, "{}", 2, &sink, 30000, &status);
	free(path);
	buf_free(&reply);
	return status == 200;
}

static int rsess_simple(struct rsess *s, const char *method, const char *rest, const char *name,
			const char *body, size_t len, json_t **reply, char **raw)
{
	char *path = rsess_path(s, rest, name);
	json_t *doc;

	if (!path) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return -1;
	}
	doc = rsess_ask(s, method, path, body, len, raw);
	free(path);
	if (!doc)
		return -1;
	if (reply)
		*reply = doc;
	else
		json_decref(doc);
	return 0;
}

static int rsess_restart(void *p)
{
	struct rsess *s = p;
	int rc = rsess_simple(s, "POST", "restart", NULL, "{}", 2, NULL, NULL);

	if (rc == 0)
		s->dead = false;
	return rc;
}

static json_t *rsess_files(void *p, int *truncated)
{
	json_t *reply = NULL, *files;

	if (rsess_simple(p, "GET", "files", NULL, NULL, 0, &reply, NULL) < 0)
		return NULL;
	files = json_incref(json_object_get(reply, "files"));
	*truncated = json_is_true(json_object_get(reply, "truncated"));
	json_decref(reply);
	if (!json_is_array(files)) {
		snprintf(((struct rsess *)p)->errmsg, sizeof(((struct rsess *)p)->errmsg),
			 "the server's listing is not a list");
		json_decref(files);
		return NULL;
	}
	return files;
}

static int rsess_get(void *p, const char *name, int fd)
{
	struct rsess *s = p;
	struct remote_sink sink = { .fd = fd, .max = 1ull << 30 };
	char *path = rsess_path(s, "files/", name), *err = NULL;
	size_t err_len = 0;
	json_t *doc;
	long status = 0;

	if (!path) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return -1;
	}
	remote_call(s->r, "GET", path, NULL, 0, &sink, 300000, &status);
	free(path);
	if (status == 200)
		return 0;
	/* the error reply went to the file: read it back from there */
	if (status && lseek(fd, 0, SEEK_SET) == 0)
		fd_read_all(fd, 1u << 20, &err, &err_len);
	doc = json_loadb(err ? err : "", err_len, 0, NULL);
	rsess_fail(s, status, doc);
	json_decref(doc);
	free(err);
	return -1;
}

static int rsess_put(void *p, const char *name, const char *data, size_t len)
{
	return rsess_simple(p, "PUT", "files/", name, data, len, NULL, NULL);
}

static char *rsess_notebook(void *p)
{
	char *text = NULL;

	if (rsess_simple(p, "GET", "notebook", NULL, NULL, 0, NULL, &text) < 0)
		return NULL;
	return text;
}

static void rsess_close(void *p)
{
	struct rsess *s = p;
	char *path;

	if (!s)
		return;
	if (s->id[0] && (path = rsess_path(s, "", NULL))) {
		path[strlen(path) - 1] = '\0'; /* no trailing '/' */
		json_t *reply = rsess_ask(s, "DELETE", path, NULL, 0, NULL);
		if (!reply)
			cli_error("closing the session: %s", s->errmsg);
		json_decref(reply);
		free(path);
	}
	remote_close(s->r);
	remote_close(s->ri);
	free(s);
	curl_global_cleanup();
}

const struct cli_session_ops cli_remote_session_ops = {
	.id = rsess_id,
	.execute = rsess_execute,
	.interrupt = rsess_interrupt,
	.restart = rsess_restart,
	.files = rsess_files,
	.get = rsess_get,
	.put = rsess_put,
	.notebook = rsess_notebook,
	.errmsg = rsess_errmsg,
	.kernel_dead = rsess_kernel_dead,
	.close = rsess_close,
};

int cli_remote_session_open(void **out, const struct cli_remote *a)
{
	struct rsess *s = calloc(1, sizeof(*s));
	const char *id;
	char *body = NULL;
	json_t *doc;
	int ret;

	*out = NULL;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (!s) {
		cli_error("out of memory");
		curl_global_cleanup();
		return CLI_EXIT_FAILED;
	}
	ret = remote_open(&s->r, a->server, a->token_file, NULL);
	if (!ret)
		ret = remote_open(&s->ri, a->server, a->token_file, NULL);
	if (!ret)
		remote_set_run_timeout(s->r, a->timeout_ms);
	if (!ret)
		body = remote_body(a, &ret);
	if (ret)
		goto fail;
	doc = rsess_ask(s, "POST", "/v1/sessions", body, strlen(body), NULL);
	free(body);
	id = json_string_value(json_object_get(doc, "id"));
	/* NODE~ID, or the plain ID of a server from before nodes */
	if (!doc || !id || !(wire_session_id_valid(id) || wire_run_id_valid(id))) {
		cli_error("cannot open a session on %s: %s", a->server,
			  doc ? "the reply has no session id" : s->errmsg);
		if (s->status == 401)
			fprintf(stderr, "nbrun: the token comes from --token-file, NBRUN_TOKEN or NBRUN_TOKEN_FILE\n");
		json_decref(doc);
		ret = !doc && !s->status ? CLI_EXIT_ENGINE
		      : !doc && (s->status == 400 || s->status == 401 || s->status == 413) ? CLI_EXIT_USAGE
											    : CLI_EXIT_FAILED;
		s->id[0] = '\0';
		goto fail;
	}
	snprintf(s->id, sizeof(s->id), "%s", id);
	json_decref(doc);
	*out = s;
	return 0;
fail:
	rsess_close(s);
	return ret;
}
