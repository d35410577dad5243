/* SPDX-License-Identifier: MIT */
/* nbrun serve: the JSON API: request validation, running, result documents with urls. */
#include <b64/cdecode.h>
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

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "buf.h"
#include "cli.h"
#include "clock.h"
#include "fdio.h"
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

/* ---- languages ------------------------------------------------------------------- */

int serve_languages_init(struct serve *s, const char *prog)
{
	struct nbrun_ctx *ctx = NULL;

	if (nbrun_ctx_new(&ctx) < 0)
		return -1;
	if (nbrun_image_languages(&s->languages, ctx, s->opts.image) < 0) {
		fprintf(stderr, "nbrun: %s: cannot read the image's kernels (%s); only python is offered\n",
			prog, nbrun_ctx_errmsg(ctx));
		s->languages = strdup("python");
	}
	nbrun_ctx_free(ctx);
	return s->languages ? 0 : -1;
}

static bool serve_has_language(const struct serve *s, const char *canon)
{
	return text_has_word(s->languages ? s->languages : "python", canon);
}

const char *serve_languages_list(const struct serve *s, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (const char *p = s->languages ? s->languages : "python"; *p && n + 3 < len; p++) {
		if (*p == ' ') {
			buf[n++] = ',';
			buf[n++] = ' ';
		} else {
			buf[n++] = *p;
		}
	}
	buf[n] = '\0';
	return buf;
}

const char *serve_language(const struct serve *s, const char *name, char *why, size_t len)
{
	const char *canon = nbrun_language_name(name);
	char list[128];

	if (canon && serve_has_language(s, canon))
		return canon;
	snprintf(why, len, "language '%.64s' is not one this server runs; languages: %s", name,
		 serve_languages_list(s, list, sizeof(list)));
	return NULL;
}

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
	base64_decodestate st;
	char *data = malloc(len / 4 * 3 + 4);
	ssize_t w;
	size_t n, off = 0;
	int fd = -1, rc = -1;

	if (!data) {
		serve_reply_error(err, 500, "internal", "out of memory");
		goto out;
	}
	base64_init_decodestate(&st);
	n = (size_t)base64_decode_block(b64, (int)len, data, &st);
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		if (errno == EEXIST)
			serve_reply_error(err, 400, "request", "files: '%s' is given twice", name);
		else
			serve_reply_error(err, 500, "internal", "cannot write an input file: %s",
					  strerror(errno));
		goto out;
	}
	while (off < n) {
		w = write(fd, data + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			serve_reply_error(err, 500, "internal", "cannot write an input file: %s",
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
		serve_reply_error(err, 400, "request", "files: want a list of at most %d objects",
				  SERVE_MAX_FILES);
		return -1;
	}
	if (!json_array_size(files))
		return 0;
	snprintf(tmpl, sizeof(tmpl), "%s/req-XXXXXX", tmp_root);
	req->files = calloc(json_array_size(files), sizeof(*req->files));
	if (!req->files || !mkdtemp(tmpl) || !(req->tmp_dir = strdup(tmpl))) {
		serve_reply_error(err, 500, "internal", "cannot make a directory for the files");
		return -1;
	}
	dfd = open(req->tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		serve_reply_error(err, 500, "internal", "cannot open %s", req->tmp_dir);
		goto out;
	}
	json_array_foreach(files, i, f) {
		const char *key, *path, *b64;
		json_t *v;

		if (!json_is_object(f)) {
			serve_reply_error(err, 400, "request", "files[%zu]: not an object", i);
			goto out;
		}
		json_object_foreach(f, key, v)
			if (strcmp(key, "path") && strcmp(key, "content_base64")) {
				serve_reply_error(err, 400, "request", "files[%zu]: unknown key '%.64s'", i, key);
				goto out;
			}
		path = json_string_value(json_object_get(f, "path"));
		b64 = json_string_value(json_object_get(f, "content_base64"));
		if (!path || !b64) {
			serve_reply_error(err, 400, "request",
					  "files[%zu]: want {\"path\": NAME, \"content_base64\": DATA}", i);
			goto out;
		}
		if (!wire_name_safe(path, json_string_length(json_object_get(f, "path")))) {
			serve_reply_error(err, 400, "request",
					  "files[%zu]: path must be one plain name (no '/', '..', control characters)", i);
			goto out;
		}
		if (!wire_base64_valid(b64, json_string_length(json_object_get(f, "content_base64")))) {
			serve_reply_error(err, 400, "request", "files[%zu]: content_base64 is not valid base64", i);
			goto out;
		}
		if (serve_write_file(dfd, path, b64, json_string_length(json_object_get(f, "content_base64")),
				     err) < 0)
			goto out;
		if (asprintf(&req->files[i], "%s/%s", req->tmp_dir, path) < 0) {
			req->files[i] = NULL;
			serve_reply_error(err, 500, "internal", "out of memory");
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
		serve_reply_error(err, 400, "request", "env: want an object of at most %d strings",
				  SERVE_MAX_ENV);
		return -1;
	}
	req->env = calloc(total + 1, sizeof(*req->env));
	if (!req->env) {
		serve_reply_error(err, 500, "internal", "out of memory");
		return -1;
	}
	json_object_foreach(env, key, v) {
		if (!serve_env_name_ok(key) || !json_is_string(v)) {
			serve_reply_error(err, 400, "request",
					  "env: '%.64s' must be a name ([A-Za-z_][A-Za-z0-9_]*) with a string value", key);
			return -1;
		}
		if (asprintf(&req->env[n], "%s=%s", key, json_string_value(v)) < 0) {
			req->env[n] = NULL;
			serve_reply_error(err, 500, "internal", "out of memory");
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
			serve_reply_error(err, 500, "internal", "out of memory");
			return -1;
		}
		req->env_count = ++n;
	}
	return 0;
}

int serve_request_parse(struct serve_request *req, struct serve_reply *err, const struct serve *s,
			const char *body, size_t len, const char *tmp_root)
{
	static const char *const keys[] = { "code", "notebook", "parameters", "files", "env",
					    "timeout", "language", NULL };
	json_error_t jerr;
	json_t *doc, *v, *empty = json_object();
	const char *key;
	int rc = -1;

	memset(req, 0, sizeof(*req));
	doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		serve_reply_error(err, 400, "request", "bad JSON: %s (line %d, column %d)", jerr.text,
				  jerr.line, jerr.column);
		goto out;
	}
	if (!json_is_object(doc)) {
		serve_reply_error(err, 400, "request", "the body must be a JSON object");
		goto out;
	}
	json_object_foreach(doc, key, v) {
		size_t i;
		for (i = 0; keys[i] && strcmp(keys[i], key); i++)
			;
		if (!keys[i]) {
			serve_reply_error(err, 400, "request",
					  "unknown key '%.64s' (code, notebook, parameters, files, env, timeout, language)", key);
			goto out;
		}
	}
	v = json_object_get(doc, "code");
	if (!!v == !!json_object_get(doc, "notebook")) {
		serve_reply_error(err, 400, "request", "give either \"code\" or \"notebook\"");
		goto out;
	}
	if (v) {
		if (!json_is_string(v)) {
			serve_reply_error(err, 400, "request", "code: want a string");
			goto out;
		}
		req->code = strdup(json_string_value(v));
	} else {
		v = json_object_get(doc, "notebook");
		if (!json_is_object(v)) {
			serve_reply_error(err, 400, "request", "notebook: want an nbformat 4 JSON object");
			goto out;
		}
		req->notebook = json_dumps(v, JSON_COMPACT);
		req->notebook_len = req->notebook ? strlen(req->notebook) : 0;
	}
	if (!req->code && !req->notebook) {
		serve_reply_error(err, 500, "internal", "out of memory");
		goto out;
	}
	v = json_object_get(doc, "parameters");
	if (v) {
		if (!req->notebook || !json_is_object(v)) {
			serve_reply_error(err, 400, "request", "parameters: want an object, with \"notebook\"");
			goto out;
		}
		if (!(req->params = json_dumps(v, JSON_COMPACT))) {
			serve_reply_error(err, 500, "internal", "out of memory");
			goto out;
		}
	}
	v = json_object_get(doc, "timeout");
	if (v) {
		if (!json_is_string(v) || units_parse_duration(&req->timeout_ms, json_string_value(v)) < 0) {
			serve_reply_error(err, 400, "request", "timeout: want a positive duration such as \"60s\"");
			goto out;
		}
		if (req->timeout_ms > s->opts.timeout_ms) {
			serve_reply_error(err, 400, "request", "timeout: above this server's limit of %llu ms",
					  (unsigned long long)s->opts.timeout_ms);
			goto out;
		}
	}
	v = json_object_get(doc, "language");
	if (v) {
		char why[300];
		if (!json_is_string(v)) {
			serve_reply_error(err, 400, "request", "language: want a string such as \"python\"");
			goto out;
		}
		req->language = serve_language(s, json_string_value(v), why, sizeof(why));
		if (!req->language) {
			serve_reply_error(err, 400, "language", "%s", why);
			goto out;
		}
	}
	if (!empty || serve_parse_env(req, err, json_object_get(doc, "env") ?: empty, s) < 0)
		goto out;
	v = json_object_get(doc, "files");
	if (v && serve_parse_files(req, err, v, tmp_root) < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		serve_request_free(req);
	json_decref(doc);
	json_decref(empty);
	return rc;
}

/* ---- results ------------------------------------------------------------------------ */

int serve_open_below(int dirfd, const char *rel)
{
	const char *p = rel, *slash;
	int fd = dup(dirfd), next;
	struct stat st;
	char name[256];

	if (fd < 0)
		return -errno;
	for (;;) {
		size_t n;
		bool last;

		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		last = !slash;
		if (!wire_name_safe(p, n)) {
			close(fd);
			return -EINVAL;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		next = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY));
		close(fd);
		if (next < 0)
			return -errno;
		fd = next;
		if (last)
			break;
		p = slash + 1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

/* The bytes of a regular file below dirfd, at most max. NULL when missing or larger. */
static unsigned char *serve_read_below(int dirfd, const char *rel, size_t max, size_t *len)
{
	struct buf b = BUF_INIT(max);
	char chunk[65536];
	int fd = serve_open_below(dirfd, rel);
	ssize_t n;
	unsigned char *out = NULL;

	if (fd < 0)
		return NULL;
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || buf_append(&b, chunk, (size_t)n) < 0)
			goto out;
	}
	*len = b.len;
	out = (unsigned char *)buf_steal(&b);
out:
	close(fd);
	buf_free(&b);
	return out;
}

/*
 * Add url (always) and content_base64 (when inline is set and the bytes fit
 * the caps) to each image and file entry.
 */
void serve_add_refs(json_t *doc, const char *prefix, int run_fd, bool inline_data)
{
	static const char *const lists[] = { "images", "files" };
	size_t budget = SERVE_INLINE_ALL;

	for (size_t l = 0; l < 2; l++) {
		json_t *e;
		size_t i;

		json_array_foreach(json_object_get(doc, lists[l]), i, e) {
			const char *path = json_string_value(json_object_get(e, "path"));
			json_int_t bytes = json_integer_value(json_object_get(e, "bytes"));
			char *enc, *url = NULL;

			if (!path)
				continue;
			/* path is "images/NAME" or "files/PATH": the url mirrors it. */
			enc = wire_url_path(path);
			if (enc && asprintf(&url, "%s/%s", prefix, enc) >= 0)
				json_object_set_new(e, "url", json_string(url));
			free(enc);
			free(url);
			if (inline_data && bytes >= 0 && (uint64_t)bytes <= SERVE_INLINE_ONE &&
			    (size_t)bytes <= budget) {
				size_t len = 0;
				unsigned char *data = serve_read_below(run_fd, path, SERVE_INLINE_ONE, &len);
				char *b64 = data && len == (size_t)bytes ? wire_base64(data, len) : NULL;
				if (b64) {
					json_object_set_new(e, "content_base64", json_string(b64));
					budget -= len;
				}
				free(b64);
				free(data);
			}
		}
	}
}

/* The urls of a kept run's outputs: /v1/runs/{id}/... */
static void serve_add_run_refs(json_t *doc, const char *run_id, int run_fd, bool inline_data)
{
	char prefix[128];

	snprintf(prefix, sizeof(prefix), "/v1/runs/%s", run_id);
	serve_add_refs(doc, prefix, run_fd, inline_data);
}

/* result.json, atomically, in the run's directory: 0, or -1 with errno. */
static int serve_write_result(int run_fd, const json_t *doc)
{
	char *text = json_dumps(doc, JSON_INDENT(2));
	size_t len;
	int rc;

	if (!text) {
		errno = ENOMEM;
		return -1;
	}
	len = strlen(text);
	text[len] = '\n'; /* in place of the NUL: the file ends with a newline */
	rc = fd_write_file_atomic(run_fd, "result.json", text, len + 1, 0644);
	free(text);
	if (rc < 0) {
		errno = -rc;
		return -1;
	}
	return 0;
}

/* Writing into the state directory failed with err: 507 when its disk is full, else 500. */
static void serve_reply_write_error(struct serve_reply *reply, int err, const char *what)
{
	if (err == ENOSPC || err == EDQUOT)
		serve_reply_error(reply, 507, "storage", "the state directory is full: cannot %s", what);
	else
		serve_reply_error(reply, 500, "internal", "cannot %s: %s", what, strerror(err));
}

/*
 * A run of another token than the first is marked with the sender's digest
 * in .owner (no GET route reaches a name outside files/ and images/);
 * the first token's runs, and the MCP tools', have none.
 */
int serve_write_owner(int run_fd, const char *owner)
{
	int fd;
	ssize_t w;

	if (!*owner)
		return 0;
	fd = openat(run_fd, ".owner", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	w = write(fd, owner, strlen(owner));
	if (close(fd) < 0 || w != (ssize_t)strlen(owner))
		return -1;
	return 0;
}

void serve_owner_hex(char out[65], const struct serve *s, int tenant)
{
	unsigned char d[32];
	unsigned int len = 0;
	const char *t;

	out[0] = '\0';
	if (tenant <= 0 || (size_t)tenant > s->n_tenant_tokens)
		return;
	t = s->tenant_tokens[tenant - 1];
	if (EVP_Digest(t, strlen(t), d, &len, EVP_sha256(), NULL) != 1 || len != 32)
		return;
	for (size_t i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int serve_open_run(struct serve *s, const char *id, const char *owner)
{
	char got[65] = "", want[65];
	int run_fd, fd;
	ssize_t n = 0;

	if (!wire_run_id_valid(id))
		return -1;
	run_fd = openat(s->runs_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run_fd < 0)
		return -1;
	fd = openat(run_fd, ".owner", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, got, sizeof(got) - 1);
		close(fd);
		got[n > 0 ? n : 0] = '\0';
	} else if (errno != ENOENT) {
		close(run_fd);
		return -1;
	}
	/* Both padded to 64 bytes and compared whole, in constant time. */
	memset(want, 0, sizeof(want));
	snprintf(want, sizeof(want), "%s", owner);
	if (fd < 0 ? *owner != '\0' : (n != 64 || CRYPTO_memcmp(got, want, 64) != 0)) {
		close(run_fd);
		return -1;
	}
	return run_fd;
}

/* ---- idempotency keys --------------------------------------------------------------- */

/*
 * What a run's Idempotency-Key (with the tenant that sent it) is remembered
 * as. A key is RUNNING while its first request executes; DONE once that run
 * is kept, for as long as the run's directory is (retention, --keep). A run
 * that made no result, or ended "failed" (the sandbox or engine, not the
 * code), leaves no key: a retry runs it again, since nothing completed.
 */
enum serve_idem_state { SERVE_IDEM_FREE = 0, SERVE_IDEM_RUNNING, SERVE_IDEM_DONE };

struct serve_idem {
	enum serve_idem_state state;
	unsigned char key[32];  /* SHA-256 of owner, '\n', the key */
	unsigned char body[32]; /* SHA-256 of the request's body */
	uint64_t seq;           /* the oldest (smallest) is forgotten first */
	uint64_t deadline_ms;   /* RUNNING: when waiters give up (monotonic) */
	char run_id[65];        /* DONE */
};

static bool serve_idem_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
}

int serve_request_key(struct serve_request *req, struct serve_reply *err, const char *key,
		      const char *body, size_t len)
{
	unsigned int dlen = 0;
	size_t n;

	req->idem_key[0] = '\0';
	if (!key)
		return 0;
	n = strlen(key);
	for (size_t i = 0; i < n && n <= WIRE_IDEM_KEY_MAX; i++)
		if (!serve_idem_char((unsigned char)key[i]))
			n = 0;
	if (n == 0 || n > WIRE_IDEM_KEY_MAX) {
		serve_reply_error(err, 400, "request",
				  "Idempotency-Key: want 1 to %d characters of A-Z a-z 0-9 . _ : / -",
				  WIRE_IDEM_KEY_MAX);
		return -1;
	}
	if (EVP_Digest(body, len, req->idem_body, &dlen, EVP_sha256(), NULL) != 1 || dlen != 32) {
		serve_reply_error(err, 500, "internal", "cannot digest the request");
		return -1;
	}
	memcpy(req->idem_key, key, n + 1);
	return 0;
}

void serve_idem_free(struct serve *s)
{
	free(s->idem);
	s->idem = NULL;
	s->n_idem = 0;
	s->idem_alloc = 0;
}

/* The key's digest: the same key from another tenant is another key. */
static int serve_idem_digest(unsigned char out[32], const struct serve_request *req)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned int len = 0;
	int ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
		 EVP_DigestUpdate(md, req->owner, strlen(req->owner)) == 1 &&
		 EVP_DigestUpdate(md, "\n", 1) == 1 &&
		 EVP_DigestUpdate(md, req->idem_key, strlen(req->idem_key)) == 1 &&
		 EVP_DigestFinal_ex(md, out, &len) == 1 && len == 32;

	EVP_MD_CTX_free(md);
	return ok ? 0 : -1;
}

/* The slot of key, or -1. Under s->lock. */
static ssize_t serve_idem_find(const struct serve *s, const unsigned char key[32])
{
	for (size_t i = 0; i < s->n_idem; i++)
		if (s->idem[i].state != SERVE_IDEM_FREE && !memcmp(s->idem[i].key, key, 32))
			return (ssize_t)i;
	return -1;
}

/*
 * A slot for a new key: a free one, a new one while fewer than
 * SERVE_IDEM_MAX, else the oldest finished key's. -1 when none. Under s->lock.
 */
static ssize_t serve_idem_slot(struct serve *s)
{
	ssize_t oldest = -1;

	for (size_t i = 0; i < s->n_idem; i++) {
		if (s->idem[i].state == SERVE_IDEM_FREE)
			return (ssize_t)i;
		if (s->idem[i].state == SERVE_IDEM_DONE &&
		    (oldest < 0 || s->idem[i].seq < s->idem[oldest].seq))
			oldest = (ssize_t)i;
	}
	if (s->n_idem < SERVE_IDEM_MAX) {
		if (s->n_idem == s->idem_alloc) {
			size_t alloc = s->idem_alloc ? 2 * s->idem_alloc : 64;
			struct serve_idem *p;

			if (alloc > SERVE_IDEM_MAX)
				alloc = SERVE_IDEM_MAX;
			p = realloc(s->idem, alloc * sizeof(*p));
			if (!p)
				return oldest;
			s->idem = p;
			s->idem_alloc = alloc;
		}
		memset(&s->idem[s->n_idem], 0, sizeof(*s->idem));
		return (ssize_t)s->n_idem++;
	}
	return oldest;
}

enum serve_idem_claim { SERVE_IDEM_ANSWERED, SERVE_IDEM_CLAIMED };

/* Wait up to a second for a keyed run to end. Under s->lock. */
static void serve_idem_wait(struct serve *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1;
	pthread_cond_timedwait(&s->idle, &s->lock, &ts);
}

/*
 * The kept run's result document for owner, with urls (and, with
 * inline_data, the small outputs' bytes), or NULL when it is gone.
 */
static json_t *serve_load_result(struct serve *s, const char *run_id, const char *owner,
				 bool inline_data)
{
	int run_fd = serve_open_run(s, run_id, owner), fd = -1;
	json_t *doc = NULL;

	if (run_fd < 0)
		return NULL;
	fd = serve_open_below(run_fd, "result.json");
	if (fd >= 0)
		doc = json_loadfd(fd, 0, NULL);
	if (json_is_object(doc)) {
		serve_add_run_refs(doc, run_id, run_fd, inline_data);
	} else {
		json_decref(doc);
		doc = NULL;
	}
	if (fd >= 0)
		close(fd);
	close(run_fd);
	return doc;
}

/*
 * Before a keyed request runs: its key is new (CLAIMED, *slot is the key's,
 * RUNNING), or reply is filled (ANSWERED): the result of the run the key
 * started, once that run ends; 422 for the key with another body; 409 when
 * the run goes on past its deadline; 503 when the server stops.
 */
static enum serve_idem_claim serve_idem_claim(ssize_t *slot, struct serve_reply *reply,
					      struct serve *s, const struct serve_request *req)
{
	uint64_t timeout = req->timeout_ms ? req->timeout_ms : s->opts.timeout_ms;
	unsigned char key[32];
	char run_id[65];
	ssize_t i;

	if (serve_idem_digest(key, req) < 0) {
		serve_reply_error(reply, 500, "internal", "cannot digest the Idempotency-Key");
		return SERVE_IDEM_ANSWERED;
	}
	pthread_mutex_lock(&s->lock);
	for (;;) {
		json_t *doc;

		i = serve_idem_find(s, key);
		if (i < 0)
			break;
		if (memcmp(s->idem[i].body, req->idem_body, 32)) {
			serve_reply_error(reply, 422, "request",
					  "Idempotency-Key %s was sent before with another request",
					  req->idem_key);
			goto answered;
		}
		if (s->idem[i].state == SERVE_IDEM_RUNNING) {
			if (*s->stopping || (req->cancel && *req->cancel)) {
				serve_reply_error(reply, 503, "stopping", "the server is shutting down");
				goto answered;
			}
			if (clock_mono_ms() >= s->idem[i].deadline_ms) {
				serve_reply_error(reply, 409, "busy",
						  "the run of Idempotency-Key %s is still executing",
						  req->idem_key);
				reply->retry_after = 5;
				goto answered;
			}
			serve_idem_wait(s);
			continue;
		}
		memcpy(run_id, s->idem[i].run_id, sizeof(run_id));
		pthread_mutex_unlock(&s->lock);
		doc = serve_load_result(s, run_id, req->owner, true);
		if (doc) {
			reply->status = 200;
			reply->body = doc;
			return SERVE_IDEM_ANSWERED;
		}
		/* Its run is no longer kept: neither is the key. */
		pthread_mutex_lock(&s->lock);
		i = serve_idem_find(s, key);
		if (i >= 0 && s->idem[i].state == SERVE_IDEM_DONE && !strcmp(s->idem[i].run_id, run_id))
			s->idem[i].state = SERVE_IDEM_FREE;
	}
	i = serve_idem_slot(s);
	if (i < 0) {
		serve_reply_error(reply, 503, "busy", "%d Idempotency-Keys are in use", SERVE_IDEM_MAX);
		reply->retry_after = 5;
		goto answered;
	}
	s->idem[i].state = SERVE_IDEM_RUNNING;
	memcpy(s->idem[i].key, key, 32);
	memcpy(s->idem[i].body, req->idem_body, 32);
	s->idem[i].seq = ++s->idem_seq;
	s->idem[i].deadline_ms = clock_mono_ms() + timeout + SERVE_IDEM_GRACE_MS;
	s->idem[i].run_id[0] = '\0';
	pthread_mutex_unlock(&s->lock);
	*slot = i;
	return SERVE_IDEM_CLAIMED;
answered:
	pthread_mutex_unlock(&s->lock);
	return SERVE_IDEM_ANSWERED;
}

/* The keyed run of slot ended: kept as run_id, or NULL: nothing to answer a retry with. */
static void serve_idem_settle(struct serve *s, ssize_t slot, const char *run_id)
{
	pthread_mutex_lock(&s->lock);
	if (run_id) {
		snprintf(s->idem[slot].run_id, sizeof(s->idem[slot].run_id), "%s", run_id);
		s->idem[slot].state = SERVE_IDEM_DONE;
	} else {
		s->idem[slot].state = SERVE_IDEM_FREE;
	}
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->lock);
}

static bool serve_reserve(struct serve *s, struct serve_reply *reply)
{
	bool ok = false;

	pthread_mutex_lock(&s->lock);
	if (*s->stopping) {
		serve_reply_error(reply, 503, "stopping", "the server is shutting down");
	} else if (s->runs_active >= s->max_runs) {
		serve_reply_error(reply, 503, "busy", "%u runs are executing, the most this server runs at once",
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

static void serve_reply_lib_error(struct serve_reply *reply, int rc, const struct nbrun_ctx *ctx)
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

void serve_api_run(struct serve_reply *reply, struct serve *s, struct serve_request *req)
{
	struct nbrun_run_options opts = s->opts;
	struct nbrun_ctx *ctx = NULL;
	struct nbrun_result *res = NULL;
	char *out_dir = NULL, *text = NULL, *nb = NULL;
	const char *run_id = NULL;
	json_t *doc = NULL;
	bool reserved = false, kept = false;
	ssize_t key_slot = -1;
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
	if (req->timeout_ms) {
		opts.timeout_ms = req->timeout_ms;
		if (opts.cell_timeout_ms > opts.timeout_ms)
			opts.cell_timeout_ms = 0;
	}
	if (nbrun_ctx_new(&ctx) < 0) {
		serve_reply_error(reply, 500, "internal", "out of memory");
		goto out;
	}
	rc = serve_execute(&res, ctx, s, req, &opts);
	serve_release(s);
	reserved = false;
	if (rc < 0) {
		serve_reply_lib_error(reply, rc, ctx);
		serve_rm_tree(s->runs_fd, strrchr(out_dir, '/') + 1);
		goto out;
	}
	run_id = nbrun_result_run_id(res);
	if (nbrun_result_to_json(&text, res, 0) < 0 || !(doc = json_loads(text, 0, NULL))) {
		serve_reply_error(reply, 500, "internal", "out of memory");
		goto out;
	}
	if (!wire_run_id_valid(run_id) ||
	    renameat(s->runs_fd, strrchr(out_dir, '/') + 1, s->runs_fd, run_id) < 0) {
		serve_reply_error(reply, 500, "internal", "cannot keep the run's outputs: %s",
				  strerror(errno));
		serve_rm_tree(s->runs_fd, strrchr(out_dir, '/') + 1);
		goto out;
	}
	free(out_dir);
	out_dir = NULL;
	run_fd = openat(s->runs_fd, run_id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run_fd < 0 || serve_write_owner(run_fd, req->owner) < 0) {
		serve_reply_error(reply, 500, "internal", "cannot keep the run's outputs: %s",
				  strerror(errno));
		goto out;
	}
	if (asprintf(&out_dir, "%s/%s", s->runs_dir, run_id) < 0) {
		out_dir = NULL;
		serve_reply_error(reply, 500, "internal", "out of memory");
		goto out;
	}
	json_object_set_new(doc, "out_dir", json_string(out_dir));
	if (!json_is_null(json_object_get(doc, "notebook")) &&
	    asprintf(&nb, "%s/notebook.ipynb", out_dir) >= 0)
		json_object_set_new(doc, "notebook", json_string(nb));
	if (serve_write_result(run_fd, doc) < 0) {
		serve_reply_write_error(reply, errno, "write the run's result.json");
		goto out;
	}
	kept = true;
	serve_add_run_refs(doc, run_id, run_fd, true);
	reply->status = 200;
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
		serve_reply_error(reply, 404, "not_found", "no run %.64s", run_id);
		return;
	}
	reply->status = 200;
	reply->body = doc;
}

/* {"python": {"size", "ready", "starting", "hits"}, ...}: the pool's languages (NULL: no pool). */
static json_t *serve_pool_languages(struct serve *s)
{
	json_t *o = s->pool ? json_object() : NULL;
	char name[32];

	for (const char *p = s->languages ? s->languages : "python"; o && *p;) {
		size_t n = strcspn(p, " ");
		struct nbrun_pool_stats ps;

		snprintf(name, sizeof(name), "%.*s", (int)(n < 31 ? n : 31), p);
		p += n + (p[n] == ' ');
		if (nbrun_pool_language_stats(&ps, s->pool, name) < 0)
			continue;
		json_object_set_new(o, name, json_pack("{s:I, s:I, s:I, s:I}", "size", (json_int_t)ps.size,
						       "ready", (json_int_t)ps.ready, "starting",
						       (json_int_t)ps.starting, "hits", (json_int_t)ps.hits));
	}
	return o;
}

void serve_api_health(struct serve_reply *reply, struct serve *s)
{
	struct nbrun_pool_stats ps = { s->pool_size, 0, 0, 0, 0, 0 };
	char why[256] = "";
	unsigned int active;
	bool stopping = *s->stopping;

	pthread_mutex_lock(&s->lock);
	active = s->runs_active;
	pthread_mutex_unlock(&s->lock);
	if (s->pool) {
		nbrun_pool_stats(&ps, s->pool);
		nbrun_pool_last_error(why, sizeof(why), s->pool);
	}
	reply->status = 200;
	/* The pool's last start failure says what is wrong with the engine or
	 * image; it holds no secret. */
	/* "node": which node answered; --peers-dns learns the node names of addresses from it. */
	reply->body = json_pack("{s:s, s:s, s:s*, s:{s:I, s:I, s:I, s:s*, s:o*}, s:I}",
				"status", stopping ? "stopping" : "ok", "version", nbrun_version(),
				"node", s->node[0] ? s->node : NULL,
				"pool", "size", (json_int_t)ps.size, "ready", (json_int_t)ps.ready,
				"starting", (json_int_t)ps.starting, "last_error", why[0] ? why : NULL,
				"languages", serve_pool_languages(s), "runs_active", (json_int_t)active);
}

char *serve_api_metrics(struct serve *s)
{
	static const char *const names[SERVE_OUT_COUNT] = { "ok", "error", "timeout", "oom",
							    "failed", "aborted" };
	const double *le = serve_buckets();
	struct serve_metrics m;
	struct nbrun_pool_stats ps = { 0, 0, 0, 0, 0, 0 };
	struct buf b = BUF_INIT(64 * 1024);
	unsigned int active;
	uint64_t cum = 0;

	pthread_mutex_lock(&s->lock);
	m = s->m;
	active = s->runs_active;
	pthread_mutex_unlock(&s->lock);
	if (s->pool)
		nbrun_pool_stats(&ps, s->pool);

	buf_puts(&b, "# HELP nbrun_runs_total Runs finished, by status (aborted: no result, e.g. engine down or cancelled).\n"
		     "# TYPE nbrun_runs_total counter\n");
	for (size_t i = 0; i < SERVE_OUT_COUNT; i++)
		buf_printf(&b, "nbrun_runs_total{status=\"%s\"} %llu\n", names[i],
			   (unsigned long long)m.runs[i]);
	buf_printf(&b, "# HELP nbrun_pool_hits_total Runs that got a warm sandbox from the pool.\n"
		       "# TYPE nbrun_pool_hits_total counter\n"
		       "nbrun_pool_hits_total %llu\n"
		       "# HELP nbrun_pool_misses_total Runs that started a cold sandbox.\n"
		       "# TYPE nbrun_pool_misses_total counter\n"
		       "nbrun_pool_misses_total %llu\n"
		       "# HELP nbrun_pool_ready Warm sandboxes waiting for a run.\n"
		       "# TYPE nbrun_pool_ready gauge\n"
		       "nbrun_pool_ready %u\n"
		       "# HELP nbrun_pool_start_failures_total Sandboxes of the pool that failed to start.\n"
		       "# TYPE nbrun_pool_start_failures_total counter\n"
		       "nbrun_pool_start_failures_total %llu\n"
		       "# HELP nbrun_run_duration_seconds Time to execute a run, end to end in the server.\n"
		       "# TYPE nbrun_run_duration_seconds histogram\n",
		   (unsigned long long)ps.hits, (unsigned long long)ps.misses, ps.ready,
		   (unsigned long long)ps.failures);
	for (size_t i = 0; i < SERVE_BUCKETS; i++) {
		cum += m.buckets[i];
		buf_printf(&b, "nbrun_run_duration_seconds_bucket{le=\"%g\"} %llu\n", le[i],
			   (unsigned long long)cum);
	}
	buf_printf(&b, "nbrun_run_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
		       "nbrun_run_duration_seconds_sum %.3f\n"
		       "nbrun_run_duration_seconds_count %llu\n"
		       "# HELP nbrun_runs_active Runs executing now.\n"
		       "# TYPE nbrun_runs_active gauge\n"
		       "nbrun_runs_active %u\n",
		   (unsigned long long)m.duration_count, m.duration_sum,
		   (unsigned long long)m.duration_count, active);
	return buf_steal(&b);
}
