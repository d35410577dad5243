/* SPDX-License-Identifier: MIT */
/* Runs: a request parsed and validated, admitted, executed and kept as a run directory; a kept result read back. */
#include <b64/cencode.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


#include "buf.h"
#include "clock.h"
#include "fdio.h"
#include "jsonx.h"
#include "serve.h"
#include "units.h"
#include "text.h"

/* ---- languages ------------------------------------------------------------------- */

/* ---- requests -------------------------------------------------------------------- */

void serve_request_free(struct serve_request *req)
{
	if (req->tmp_dir) {
		char *slash = strrchr(req->tmp_dir, '/');
		int fd;
		*slash = '\0';
		fd = open(req->tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			serve_rm_tree(fd, slash + 1);
			close(fd);
		}
		free(req->tmp_dir);
	}
	for (size_t i = 0; i < req->allow_net_count; i++)
		free(req->allow_net[i]);
	free(req->allow_net);
	for (size_t i = 0; i < req->env_count; i++)
		free(req->env[i]);
	for (size_t i = 0; i < req->file_count; i++)
		free(req->files[i]);
	free(req->env);
	free(req->files);
	free(req->code);
	free(req->notebook);
	free(req->params);
	memset(req, 0, sizeof(*req));
}

static int serve_write_file(int dirfd, const char *name, const char *b64, size_t len,
			    struct serve_reply *err)
{
	size_t n, off = 0;
	char *data = wire_base64_decode(b64, len, &n);
	ssize_t w;
	int fd = -1, rc = -1;

	if (!data) {
		serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
		goto out;
	}
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		if (errno == EEXIST)
			serve_reply_error(err, SERVE_E_REQUEST, "files: '%s' is given twice", name);
		else
			serve_reply_error(err, SERVE_E_INTERNAL, "cannot write an input file: %s",
					  strerror(errno));
		goto out;
	}
	while (off < n) {
		w = write(fd, data + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			serve_reply_error(err, SERVE_E_INTERNAL, "cannot write an input file: %s",
					  strerror(errno));
			goto out;
		}
		off += (size_t)w;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(data);
	return rc;
}

static int serve_parse_files(struct serve_request *req, struct serve_reply *err, json_t *files,
			     const char *tmp_root)
{
	char tmpl[4096];
	size_t i;
	json_t *f;
	int dfd = -1, rc = -1;

	if (!json_is_array(files) || json_array_size(files) > SERVE_MAX_FILES) {
		serve_reply_error(err, SERVE_E_REQUEST, "files: want a list of at most %d objects",
				  SERVE_MAX_FILES);
		return -1;
	}
	if (!json_array_size(files))
		return 0;
	snprintf(tmpl, sizeof(tmpl), "%s/req-XXXXXX", tmp_root);
	req->files = calloc(json_array_size(files), sizeof(*req->files));
	if (!req->files || !mkdtemp(tmpl) || !(req->tmp_dir = strdup(tmpl))) {
		serve_reply_error(err, SERVE_E_INTERNAL, "cannot make a directory for the files");
		return -1;
	}
	dfd = open(req->tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		serve_reply_error(err, SERVE_E_INTERNAL, "cannot open %s", req->tmp_dir);
		goto out;
	}
	json_array_foreach(files, i, f) {
		const char *key, *path, *b64;
		json_t *v;

		if (!json_is_object(f)) {
			serve_reply_error(err, SERVE_E_REQUEST, "files[%zu]: not an object", i);
			goto out;
		}
		json_object_foreach(f, key, v)
			if (strcmp(key, "path") && strcmp(key, "content_base64")) {
				serve_reply_error(err, SERVE_E_REQUEST, "files[%zu]: unknown key '%.64s'", i, key);
				goto out;
			}
		path = json_string_value(json_object_get(f, "path"));
		b64 = json_string_value(json_object_get(f, "content_base64"));
		if (!path || !b64) {
			serve_reply_error(err, SERVE_E_REQUEST,
					  "files[%zu]: want {\"path\": NAME, \"content_base64\": DATA}", i);
			goto out;
		}
		if (!wire_name_safe(path, json_string_length(json_object_get(f, "path")))) {
			serve_reply_error(err, SERVE_E_REQUEST,
					  "files[%zu]: path must be one plain name (no '/', '..', control characters)", i);
			goto out;
		}
		if (!wire_base64_valid(b64, json_string_length(json_object_get(f, "content_base64")))) {
			serve_reply_error(err, SERVE_E_REQUEST, "files[%zu]: content_base64 is not valid base64", i);
			goto out;
		}
		if (serve_write_file(dfd, path, b64, json_string_length(json_object_get(f, "content_base64")),
				     err) < 0)
			goto out;
		if (asprintf(&req->files[i], "%s/%s", req->tmp_dir, path) < 0) {
			req->files[i] = NULL;
			serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
			goto out;
		}
		req->file_count = i + 1;
	}
	rc = 0;
out:
	if (dfd >= 0)
		close(dfd);
	return rc;
}

static bool serve_env_name_ok(const char *k)
{
	if (!*k || strlen(k) > 256 || isdigit((unsigned char)*k))
		return false;
	for (; *k; k++)
		if (!isalnum((unsigned char)*k) && *k != '_')
			return false;
	return true;
}

static int serve_parse_env(struct serve_request *req, struct serve_reply *err, json_t *env,
			   const struct serve *s)
{
	size_t total = json_object_size(env) + s->opts.env_count, n = 0;
	const char *key;
	json_t *v;

	if (!json_is_object(env) || json_object_size(env) > SERVE_MAX_ENV) {
		serve_reply_error(err, SERVE_E_REQUEST, "env: want an object of at most %d strings",
				  SERVE_MAX_ENV);
		return -1;
	}
	req->env = calloc(total + 1, sizeof(*req->env));
	if (!req->env) {
		serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
		return -1;
	}
	json_object_foreach(env, key, v) {
		if (!serve_env_name_ok(key) || !json_is_string(v)) {
			serve_reply_error(err, SERVE_E_REQUEST,
					  "env: '%.64s' must be a name ([A-Za-z_][A-Za-z0-9_]*) with a string value", key);
			return -1;
		}
		if (asprintf(&req->env[n], "%s=%s", key, json_string_value(v)) < 0) {
			req->env[n] = NULL;
			serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
			return -1;
		}
		req->env_count = ++n;
	}
	/* The server's own -e variables, unless the request sets the same name. */
	for (size_t i = 0; i < s->opts.env_count; i++) {
		const char *kv = s->opts.env[i];
		char name[257];
		size_t klen = strcspn(kv, "=");
		snprintf(name, sizeof(name), "%.*s", (int)(klen < 256 ? klen : 256), kv);
		if (json_object_get(env, name))
			continue;
		if (!(req->env[n] = strdup(kv))) {
			serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
			return -1;
		}
		req->env_count = ++n;
	}
	return 0;
}

/* "allow_net": each a host rule within the server's ceiling. */
static int serve_parse_allow_net(struct serve_request *req, struct serve_reply *err,
				 const struct serve *s, json_t *list)
{
	struct netrule r;
	char why[256], canon[300];
	size_t i;
	json_t *v;

	if (!json_is_array(list) || json_array_size(list) > NETRULE_MAX) {
		serve_reply_error(err, SERVE_E_REQUEST, "allow_net: want a list of at most %d hosts",
				  NETRULE_MAX);
		return -1;
	}
	if (json_array_size(list) && !s->n_net_ceiling) {
		serve_reply_error(err, SERVE_E_POLICY,
				  "allow_net: this server allows no network (its operator starts it with --allow-net)");
		return -1;
	}
	req->allow_net = calloc(json_array_size(list) + 1, sizeof(*req->allow_net));
	if (!req->allow_net) {
		serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
		return -1;
	}
	json_array_foreach(list, i, v) {
		if (!json_is_string(v) || netrule_parse(&r, json_string_value(v), why, sizeof(why)) < 0) {
			serve_reply_error(err, SERVE_E_REQUEST, "allow_net[%zu]: %s", i,
					  json_is_string(v) ? why : "want a string");
			return -1;
		}
		if (!netrule_within(&r, s->net_ceiling, s->n_net_ceiling)) {
			serve_reply_error(err, SERVE_E_POLICY,
					  "allow_net[%zu]: %s is beyond what this server allows (its --allow-net)",
					  i, netrule_format(&r, canon, sizeof(canon)));
			return -1;
		}
		if (!(req->allow_net[i] = strdup(netrule_format(&r, canon, sizeof(canon))))) {
			serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
			return -1;
		}
		req->allow_net_count = i + 1;
	}
	return 0;
}

int serve_request_init(struct serve_request *req, struct serve_reply *err, const struct serve *s,
		       const struct serve_run_args *a, const char *tmp_root)
{
	json_t *empty = json_object();
	int rc = -1;

	memset(req, 0, sizeof(*req));
	if (!a->code == !a->notebook) {
		serve_reply_error(err, SERVE_E_REQUEST, "give either \"code\" or \"notebook\"");
		goto out;
	}
	if (a->code) {
		req->code = strdup(a->code);
	} else {
		if (!json_is_object(a->notebook)) {
			serve_reply_error(err, SERVE_E_REQUEST, "notebook: want an nbformat 4 JSON object");
			goto out;
		}
		req->notebook = json_dumps(a->notebook, JSON_COMPACT);
		req->notebook_len = req->notebook ? strlen(req->notebook) : 0;
	}
	if (!req->code && !req->notebook) {
		serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
		goto out;
	}
	if (a->parameters) {
		if (!req->notebook || !json_is_object(a->parameters)) {
			serve_reply_error(err, SERVE_E_REQUEST, "parameters: want an object, with \"notebook\"");
			goto out;
		}
		if (!(req->params = json_dumps(a->parameters, JSON_COMPACT))) {
			serve_reply_error(err, SERVE_E_INTERNAL, "out of memory");
			goto out;
		}
	}
	if (a->timeout_ms > s->opts.timeout_ms) {
		serve_reply_error(err, SERVE_E_REQUEST, "timeout: above this server's limit of %llu ms",
				  (unsigned long long)s->opts.timeout_ms);
		goto out;
	}
	req->timeout_ms = a->timeout_ms;
	if (a->language) {
		char why[300];
		req->language = serve_language(s, a->language, why, sizeof(why));
		if (!req->language) {
			serve_reply_error(err, SERVE_E_LANGUAGE, "%s", why);
			goto out;
		}
	}
	if (!empty || serve_parse_env(req, err, a->env ? a->env : empty, s) < 0)
		goto out;
	if (a->allow_net && serve_parse_allow_net(req, err, s, a->allow_net) < 0)
		goto out;
	if (a->files && serve_parse_files(req, err, a->files, tmp_root) < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		serve_request_free(req);
	json_decref(empty);
	return rc;
}

int serve_request_parse(struct serve_request *req, struct serve_reply *err, const struct serve *s,
			const char *body, size_t len, const char *tmp_root)
{
	static const char *const keys[] = { "code", "notebook", "parameters", "files", "env",
					    "timeout", "language", "allow_net", NULL };
	struct serve_run_args a = { 0 };
	json_error_t jerr;
	json_t *doc, *v;
	const char *key;
	int rc = -1;

	memset(req, 0, sizeof(*req));
	doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		serve_reply_error(err, SERVE_E_REQUEST, "bad JSON: %s (line %d, column %d)", jerr.text,
				  jerr.line, jerr.column);
		goto out;
	}
	if (!json_is_object(doc)) {
		serve_reply_error(err, SERVE_E_REQUEST, "the body must be a JSON object");
		goto out;
	}
	json_object_foreach(doc, key, v) {
		size_t i;
		for (i = 0; keys[i] && strcmp(keys[i], key); i++)
			;
		if (!keys[i]) {
			serve_reply_error(err, SERVE_E_REQUEST,
					  "unknown key '%.64s' (code, notebook, parameters, files, env, timeout, language, allow_net)", key);
			goto out;
		}
	}
	v = json_object_get(doc, "code");
	if (v && !json_object_get(doc, "notebook") && !json_is_string(v)) {
		serve_reply_error(err, SERVE_E_REQUEST, "code: want a string");
		goto out;
	}
	a.code = json_string_value(v);
	a.notebook = json_object_get(doc, "notebook");
	if (!v && a.notebook && !json_is_object(a.notebook)) {
		serve_reply_error(err, SERVE_E_REQUEST, "notebook: want an nbformat 4 JSON object");
		goto out;
	}
	if (!!v != !a.notebook) {
		serve_reply_error(err, SERVE_E_REQUEST, "give either \"code\" or \"notebook\"");
		goto out;
	}
	a.parameters = json_object_get(doc, "parameters");
	v = json_object_get(doc, "timeout");
	if (v && (!json_is_string(v) || units_parse_duration(&a.timeout_ms, json_string_value(v)) < 0)) {
		serve_reply_error(err, SERVE_E_REQUEST, "timeout: want a positive duration such as \"60s\"");
		goto out;
	}
	v = json_object_get(doc, "language");
	if (v && !json_is_string(v)) {
		serve_reply_error(err, SERVE_E_REQUEST, "language: want a string such as \"python\"");
		goto out;
	}
	a.language = json_string_value(v);
	a.env = json_object_get(doc, "env");
	a.files = json_object_get(doc, "files");
	a.allow_net = json_object_get(doc, "allow_net");
	rc = serve_request_init(req, err, s, &a, tmp_root);
out:
	json_decref(doc);
	return rc;
}

/* ---- results ------------------------------------------------------------------------ */

/* ---- idempotency keys --------------------------------------------------------------- */

static bool serve_reserve(struct serve *s, struct serve_reply *reply)
{
	bool ok = false;

	pthread_mutex_lock(&s->lock);
	if (*s->stopping) {
		serve_reply_error(reply, SERVE_E_STOPPING, "the server is shutting down");
	} else if (s->runs_active >= s->max_runs) {
		serve_reply_error(reply, SERVE_E_BUSY, "%u runs are executing, the most this server runs at once",
				  s->runs_active);
		reply->retry_after = 5;
	} else {
		s->runs_active++;
		ok = true;
	}
	pthread_mutex_unlock(&s->lock);
	return ok;
}

static void serve_release(struct serve *s)
{
	pthread_mutex_lock(&s->lock);
	s->runs_active--;
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->lock);
}

void serve_run(struct serve_reply *reply, struct serve *s, struct serve_request *req)
{
	struct nbrun_run_options opts = s->opts;
	struct nbrun_ctx *ctx = NULL;
	struct nbrun_result *res = NULL;
	char *out_dir = NULL, *text = NULL, *nb = NULL;
	const char *run_id = NULL;
	json_t *doc = NULL;
	bool reserved = false, kept = false;
	ssize_t key_slot = -1;
	int wrc;
	int run_fd = -1, rc;

	/* A key seen before answers its run's result, running nothing. */
	if (req->idem_key[0] && serve_idem_claim(&key_slot, reply, s, req) == SERVE_IDEM_ANSWERED)
		return;
	if (!(reserved = serve_reserve(s, reply)))
		goto out;
	/* Until the library names the run, its outputs go to a dot directory no GET can reach. */
	if (asprintf(&out_dir, "%s/.run-XXXXXX", s->runs_dir) < 0)
		out_dir = NULL;
	if (!out_dir || !mkdtemp(out_dir)) {
		serve_reply_write_error(reply, out_dir ? errno : ENOMEM, "make the run's directory");
		goto out;
	}
	opts.out_dir = out_dir;
	opts.files = (const char *const *)req->files;
	opts.file_count = req->file_count;
	opts.env = (const char *const *)req->env;
	opts.env_count = req->env_count;
	opts.cancel = req->cancel ? req->cancel : s->stopping;
	opts.progress = req->progress;
	opts.payload = req->payload;
	opts.on_event = req->on_event;
	opts.event_payload = req->event_payload;
	opts.language = req->language;
	serve_request_net(&opts, req);
	if (req->timeout_ms) {
		opts.timeout_ms = req->timeout_ms;
		if (opts.cell_timeout_ms > opts.timeout_ms)
			opts.cell_timeout_ms = 0;
	}
	if (nbrun_ctx_new(&ctx) < 0) {
		serve_reply_error(reply, SERVE_E_INTERNAL, "out of memory");
		goto out;
	}
	rc = serve_execute(&res, ctx, s, req, &opts);
	serve_release(s);
	reserved = false;
	if (rc < 0) {
		serve_reply_lib_error(reply, rc, nbrun_ctx_errmsg(ctx), "the run");
		serve_rm_tree(s->runs_fd, strrchr(out_dir, '/') + 1);
		goto out;
	}
	run_id = nbrun_result_run_id(res);
	if (nbrun_result_to_json(&text, res, 0) < 0 || !(doc = json_loads(text, 0, NULL))) {
		serve_reply_error(reply, SERVE_E_INTERNAL, "out of memory");
		goto out;
	}
	if (!wire_run_id_valid(run_id) ||
	    renameat(s->runs_fd, strrchr(out_dir, '/') + 1, s->runs_fd, run_id) < 0) {
		serve_reply_error(reply, SERVE_E_INTERNAL, "cannot keep the run's outputs: %s",
				  strerror(errno));
		serve_rm_tree(s->runs_fd, strrchr(out_dir, '/') + 1);
		goto out;
	}
	free(out_dir);
	out_dir = NULL;
	run_fd = openat(s->runs_fd, run_id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run_fd < 0 || serve_write_owner(run_fd, req->owner) < 0) {
		serve_reply_error(reply, SERVE_E_INTERNAL, "cannot keep the run's outputs: %s",
				  strerror(errno));
		goto out;
	}
	if (asprintf(&out_dir, "%s/%s", s->runs_dir, run_id) < 0) {
		out_dir = NULL;
		serve_reply_error(reply, SERVE_E_INTERNAL, "out of memory");
		goto out;
	}
	json_object_set_new(doc, "out_dir", json_string(out_dir));
	if (!json_is_null(json_object_get(doc, "notebook")) &&
	    asprintf(&nb, "%s/notebook.ipynb", out_dir) >= 0)
		json_object_set_new(doc, "notebook", json_string(nb));
	wrc = jsonx_write_file(run_fd, "result.json", doc);
	if (wrc < 0) {
		serve_reply_write_error(reply, -wrc, "write the run's result.json");
		goto out;
	}
	kept = true;
	if (req->refs)
		serve_add_run_refs(doc, run_id, run_fd, true);
	reply->kind = SERVE_OK;
	reply->body = doc;
	doc = NULL;
out:
	if (reserved)
		serve_release(s);
	if (key_slot >= 0)
		serve_idem_settle(s, key_slot, kept && nbrun_result_status(res) != NBRUN_STATUS_FAILED
						       ? run_id : NULL);
	if (run_fd >= 0)
		close(run_fd);
	json_decref(doc);
	nbrun_result_free(res);
	nbrun_ctx_free(ctx);
	free(out_dir);
	free(text);
	free(nb);
}

void serve_api_get_result(struct serve_reply *reply, struct serve *s, const char *run_id,
			  const char *owner)
{
	json_t *doc = serve_load_result(s, run_id, owner, false);

	if (!doc) {
		serve_reply_error(reply, SERVE_E_NOT_FOUND, "no run %.64s", run_id);
		return;
	}
	reply->kind = SERVE_OK;
	reply->body = doc;
}
