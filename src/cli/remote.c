/* SPDX-License-Identifier: MIT */
/* nbrun run --server: one run sent to an nbrun serve, its reply handled like a local run's. */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#include "jsonx.h"
#include "buf.h"
#include "path.h"
#include "cli.h"
#include "fdio.h"
#include "remote.h"
#include "wire.h"

/* The reply is a result document plus inlined outputs (at most 8 MiB of them). */
#define REMOTE_REPLY_MAX (512u << 20)
/* One output fetched by url: the server's export caps are 256 MiB in all. */
#define REMOTE_FETCH_MAX (256ull << 20)
#define REMOTE_INPUTS_MAX (48u << 20)
/* A peer that answers nothing is found after IDLE + INTERVAL x PROBES seconds. */
#define REMOTE_KEEPALIVE_IDLE_S 15
#define REMOTE_KEEPALIVE_INTERVAL_S 5
#define REMOTE_KEEPALIVE_PROBES 4

struct remote {
	const char *server;
	const char *token_file;
	const volatile sig_atomic_t *cancel;
	CURL *curl;
	struct curl_slist *headers;
	struct curl_slist *headers_ndjson; /* the same, asking for a stream of events */
	char *base;      /* URL prefix, no trailing '/' */
	char *sock;      /* unix socket path, or NULL */
	char errbuf[CURL_ERROR_SIZE];
	long run_deadline_ms; /* a run's or execute's request, all in; 0: none */
};

/* Complete lines of s->mem to s->on_line; the unfinished tail stays. */
static int remote_lines(struct remote_sink *s)
{
	size_t start = 0;
	char *nl;

	while ((nl = memchr(s->mem->data + start, '\n', s->mem->len - start))) {
		size_t n = (size_t)(nl - (s->mem->data + start));
		if (n)
			s->on_line(s->mem->data + start, n, s->payload);
		start += n + 1;
	}
	memmove(s->mem->data, s->mem->data + start, s->mem->len - start);
	s->mem->len -= start;
	return 0;
}

static size_t remote_write(char *p, size_t size, size_t n, void *payload)
{
	struct remote_sink *s = payload;
	size_t len = size * n, off = 0;

	if (s->written + len > s->max)
		return 0;
	if (s->mem && s->on_line) {
		/* a stream: only its unfinished line counts against the cap */
		if (buf_append(s->mem, p, len) < 0)
			return 0;
		remote_lines(s);
		return len;
	}
	if (s->mem)
		return buf_append(s->mem, p, len) < 0 ? 0 : len;
	while (off < len) {
		ssize_t w = write(s->fd, p + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return 0;
		off += (size_t)w;
	}
	s->written += len;
	return len;
}

static int remote_progress(void *payload, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	const struct remote *r = payload;
	return r->cancel && *r->cancel ? 1 : 0;
}

/*
 * A server that went away without a word (its machine or container killed,
 * a Swarm node gone: nothing answers, not even a reset) leaves a streamed
 * run waiting on a quiet connection for ever. TCP keepalives find it: 15 s
 * quiet, then a probe every 5 s, given up after 4 unanswered (about 35 s).
 * A live server answers the probes itself however long a cell computes.
 */
static int remote_sockopt(void *payload, curl_socket_t fd, curlsocktype purpose)
{
	int cnt = REMOTE_KEEPALIVE_PROBES;

	(void)payload;
	if (purpose == CURLSOCKTYPE_IPCXN)
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)); /* unix sockets refuse it */
	return CURL_SOCKOPT_OK;
}

/* The token: --token-file, NBRUN_TOKEN, NBRUN_TOKEN_FILE, then STATE/token of a local server. */
static int remote_token(char *out, size_t outlen, const char *token_file)
{
	const char *env = getenv("NBRUN_TOKEN");
	char *fallback = NULL, *state;
	FILE *f;
	size_t n;

	out[0] = '\0';
	if (!token_file && env && *env) {
		snprintf(out, outlen, "%s", env);
		return 0;
	}
	if (!token_file)
		token_file = getenv("NBRUN_TOKEN_FILE");
	if (!token_file || !*token_file) {
		state = wire_default_state_dir();
		if (state && asprintf(&fallback, "%s/token", state) < 0)
			fallback = NULL;
		free(state);
		if (!fallback || access(fallback, R_OK) < 0) {
			free(fallback);
			return 0; /* none: the server will say 401 */
		}
		token_file = fallback;
	}
	f = fopen(token_file, "re");
	if (!f) {
		cli_usage_error("run", "cannot read the token file %s: %s", token_file, strerror(errno));
		free(fallback);
		return -1;
	}
	n = fread(out, 1, outlen - 1, f);
	fclose(f);
	out[n] = '\0';
	out[strcspn(out, "\r\n")] = '\0';
	free(fallback);
	return 0;
}

static int remote_setup(struct remote *r)
{
	const char *url = r->server;
	char token[WIRE_TOKEN_MAX + 1], *auth = NULL;
	size_t n;
	int rc = -1;

	if (!strncmp(url, "unix:", 5)) {
		if (url[5] != '/')
			return cli_usage_error("run", "--server unix:PATH wants an absolute path");
		r->sock = strdup(url + 5);
		r->base = strdup("http://localhost");
	} else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
		r->base = strdup(url);
	} else {
		return cli_usage_error("run", "--server wants http://HOST:PORT or unix:/path/to/socket, "
					      "not '%s'", url);
	}
	if (!r->base || (!strncmp(url, "unix:", 5) && !r->sock))
		goto oom;
	n = strlen(r->base);
	while (n && r->base[n - 1] == '/')
		r->base[--n] = '\0';
	if (remote_token(token, sizeof(token), r->token_file) < 0)
		return CLI_EXIT_USAGE;
	r->curl = curl_easy_init();
	if (!r->curl)
		goto oom;
	if (token[0]) {
		if (asprintf(&auth, "Authorization: Bearer %s", token) < 0)
			goto oom;
		r->headers = curl_slist_append(r->headers, auth);
		r->headers_ndjson = curl_slist_append(r->headers_ndjson, auth);
	}
	r->headers = curl_slist_append(r->headers, "Expect:");
	r->headers_ndjson = curl_slist_append(r->headers_ndjson, "Expect:");
	r->headers_ndjson = curl_slist_append(r->headers_ndjson, "Accept: application/x-ndjson");
	if (!r->headers || !r->headers_ndjson)
		goto oom;
	curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, r->headers);
	curl_easy_setopt(r->curl, CURLOPT_ERRORBUFFER, r->errbuf);
	curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(r->curl, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(r->curl, CURLOPT_TCP_KEEPIDLE, (long)REMOTE_KEEPALIVE_IDLE_S);
	curl_easy_setopt(r->curl, CURLOPT_TCP_KEEPINTVL, (long)REMOTE_KEEPALIVE_INTERVAL_S);
	curl_easy_setopt(r->curl, CURLOPT_SOCKOPTFUNCTION, remote_sockopt);
	curl_easy_setopt(r->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(r->curl, CURLOPT_XFERINFOFUNCTION, remote_progress);
	curl_easy_setopt(r->curl, CURLOPT_XFERINFODATA, r);
	curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, remote_write);
	curl_easy_setopt(r->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	if (r->sock)
		curl_easy_setopt(r->curl, CURLOPT_UNIX_SOCKET_PATH, r->sock);
	rc = 0;
	goto out;
oom:
	cli_error("out of memory");
	rc = CLI_EXIT_FAILED;
out:
	explicit_bzero(token, sizeof(token));
	if (auth)
		explicit_bzero(auth, strlen(auth));
	free(auth);
	return rc;
}

/* Append line to *list; false when out of memory (*list stays whole). */
static bool remote_append(struct curl_slist **list, const char *line)
{
	struct curl_slist *l = curl_slist_append(*list, line);

	if (l)
		*list = l;
	return l != NULL;
}

/* One request, with an Idempotency-Key header when key is set. */
static CURLcode remote_perform(struct remote *r, const char *method, const char *path,
			       const char *body, size_t body_len, struct remote_sink *sink,
			       long timeout_ms, const char *key, long *status)
{
	struct curl_slist *headers = sink->on_line ? r->headers_ndjson : r->headers, *keyed = NULL;
	char *url = NULL, *h = NULL;
	CURLcode cc = CURLE_OUT_OF_MEMORY;

	*status = 0;
	r->errbuf[0] = '\0';
	if (key) {
		/* the connection's headers and the key, for this request only */
		if (asprintf(&h, "Idempotency-Key: %s", key) < 0) {
			h = NULL;
			goto out;
		}
		for (const struct curl_slist *l = headers; l; l = l->next)
			if (!remote_append(&keyed, l->data))
				goto out;
		if (!remote_append(&keyed, h))
			goto out;
		headers = keyed;
	}
	if (asprintf(&url, "%s%s", r->base, path) < 0) {
		url = NULL;
		goto out;
	}
	curl_easy_setopt(r->curl, CURLOPT_URL, url);
	if (body) {
		curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	} else {
		curl_easy_setopt(r->curl, CURLOPT_HTTPGET, 1L);
	}
	/* POST and GET are curl's own for a body or none; others are named */
	curl_easy_setopt(r->curl, CURLOPT_CUSTOMREQUEST,
			 strcmp(method, "GET") && strcmp(method, "POST") ? method : NULL);
	curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, headers);
	/* 0: a run's or an execute's request, which the run's timeout bounds */
	curl_easy_setopt(r->curl, CURLOPT_TIMEOUT_MS, timeout_ms ? timeout_ms : r->run_deadline_ms);
	curl_easy_setopt(r->curl, CURLOPT_WRITEDATA, sink);
	cc = curl_easy_perform(r->curl);
	if (cc == CURLE_OK)
		curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, status);
	/* the handle is used again: it must not keep a list freed below */
	curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, r->headers);
out:
	if (!r->errbuf[0])
		snprintf(r->errbuf, sizeof(r->errbuf), "%s", curl_easy_strerror(cc));
	curl_slist_free_all(keyed);
	free(h);
	free(url);
	return cc;
}

CURLcode remote_call(struct remote *r, const char *method, const char *path, const char *body,
		     size_t body_len, struct remote_sink *sink, long timeout_ms, long *status)
{
	return remote_perform(r, method, path, body, body_len, sink, timeout_ms, NULL, status);
}

/* One request; *status is 0 when no HTTP reply came (message in r->errbuf). */
static CURLcode remote_request(struct remote *r, const char *path, const char *body,
			       struct remote_sink *sink, long timeout_ms, long *status)
{
	return remote_call(r, body ? "POST" : "GET", path, body, body ? strlen(body) : 0, sink,
			   timeout_ms, status);
}

void remote_set_run_timeout(struct remote *r, uint64_t timeout_ms)
{
	r->run_deadline_ms = timeout_ms ? (long)(timeout_ms + REMOTE_RUN_MARGIN_MS) : 0;
}

const char *remote_errmsg(const struct remote *r)
{
	return r->errbuf;
}

int remote_open(struct remote **out, const char *server, const char *token_file,
		const volatile sig_atomic_t *cancel)
{
	struct remote *r = calloc(1, sizeof(*r));
	int rc;

	*out = NULL;
	if (!r) {
		cli_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	r->server = server;
	r->token_file = token_file;
	r->cancel = cancel;
	rc = remote_setup(r);
	if (rc) {
		remote_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

void remote_close(struct remote *r)
{
	if (!r)
		return;
	free(r->base);
	free(r->sock);
	curl_slist_free_all(r->headers);
	curl_slist_free_all(r->headers_ndjson);
	if (r->curl)
		curl_easy_cleanup(r->curl);
	free(r);
}

/* ---- the request ------------------------------------------------------------------- */

char *remote_body(const struct cli_remote *a, int *ret)
{
	json_t *doc = json_object(), *files = json_array(), *env = json_object(), *nb;
	json_error_t jerr;
	size_t total = 0;
	char *text = NULL, timeout[32];

	*ret = CLI_EXIT_FAILED;
	if (!doc || !files || !env)
		goto oom;
	if (a->code) {
		json_object_set_new(doc, "code", json_string(a->code));
	} else if (a->notebook) {
		nb = json_loadb(a->notebook, a->notebook_len, 0, &jerr);
		if (!json_is_object(nb)) {
			cli_error("the notebook is not a JSON object: %s", nb ? "" : jerr.text);
			json_decref(nb);
			goto out;
		}
		json_object_set_new(doc, "notebook", nb);
	}
	for (size_t i = 0; i < a->file_count; i++) {
		const char *base = strrchr(a->files[i], '/');
		char *data, *b64;
		size_t len = 0;
		int rc;

		base = base ? base + 1 : a->files[i];
		rc = fd_read_file(AT_FDCWD, a->files[i], 0, REMOTE_INPUTS_MAX, &data, &len);
		if (rc < 0 || (total += len) > REMOTE_INPUTS_MAX) {
			cli_error("cannot read %s: %s", a->files[i],
				  rc < 0 ? strerror(-rc) : "the inputs are larger than 48 MiB in all");
			free(data);
			goto out;
		}
		b64 = wire_base64((const unsigned char *)data, len);
		free(data);
		if (!b64 || json_array_append_new(files, json_pack("{s:s, s:s}", "path", base,
								    "content_base64", b64)) < 0) {
			free(b64);
			goto oom;
		}
		free(b64);
	}
	if (json_array_size(files))
		json_object_set(doc, "files", files);
	for (size_t i = 0; i < a->env_count; i++) {
		const char *eq = strchr(a->env[i], '=');
		char *k = strndup(a->env[i], (size_t)(eq - a->env[i]));
		if (!k || json_object_set_new(env, k, json_string(eq + 1)) < 0) {
			free(k);
			goto oom;
		}
		free(k);
	}
	if (json_object_size(env))
		json_object_set(doc, "env", env);
	if (a->timeout_ms) {
		snprintf(timeout, sizeof(timeout), "%llums", (unsigned long long)a->timeout_ms);
		json_object_set_new(doc, "timeout", json_string(timeout));
	}
	/* The server checks it against its image's languages (400 naming them). */
	if (a->language)
		json_object_set_new(doc, "language", json_string(a->language));
	if (a->allow_net_count) {
		json_t *allow = json_array();
		for (size_t i = 0; allow && i < a->allow_net_count; i++)
			json_array_append_new(allow, json_string(a->allow_net[i]));
		if (!allow || json_object_set_new(doc, "allow_net", allow) < 0)
			goto oom;
	}
	text = json_dumps(doc, JSON_COMPACT);
	if (!text)
		goto oom;
	*ret = 0;
	goto out;
oom:
	cli_error("out of memory");
out:
	json_decref(doc);
	json_decref(files);
	json_decref(env);
	return text;
}

/* ---- the outputs ------------------------------------------------------------------- */

/* Create rel (images/NAME or files/PATH, checked) below dirfd, parents included. */
static int remote_create(int dirfd, const char *rel)
{
	char name[256];
	const char *p = rel;
	int fd = dup(dirfd), next;

	if (fd < 0)
		return -1;
	if (strncmp(rel, "images/", 7) && strncmp(rel, "files/", 6)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (!wire_name_safe(p, n)) {
			close(fd);
			errno = EINVAL;
			return -1;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		if (!slash) {
			next = openat(fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
			close(fd);
			return next;
		}
		if (mkdirat(fd, name, 0755) < 0 && errno != EEXIST) {
			close(fd);
			return -1;
		}
		next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (next < 0)
			return -1;
		fd = next;
		p = slash + 1;
	}
}

int remote_save(struct remote *r, int out_fd, json_t *e)
{
	const char *rel = json_string_value(json_object_get(e, "path"));
	const char *b64 = json_string_value(json_object_get(e, "content_base64"));
	const char *url = json_string_value(json_object_get(e, "url"));
	json_int_t bytes = json_integer_value(json_object_get(e, "bytes"));
	struct remote_sink sink = { .fd = -1, .max = REMOTE_FETCH_MAX };
	char *data = NULL;
	long status = 0;
	int fd, rc = -1;

	if (!rel || (fd = remote_create(out_fd, rel)) < 0) {
		cli_error("cannot write %s: %s", rel ? rel : "an output", strerror(errno));
		return -1;
	}
	if (b64) {
		size_t len = json_string_length(json_object_get(e, "content_base64")), n;
		data = wire_base64_decode(b64, len, &n);
		if (data) {
			sink.written = n;
			rc = fd_write_all(fd, data, n);
		}
	} else if (url && (!strncmp(url, "/v1/runs/", 9) || !strncmp(url, "/v1/sessions/", 13))) {
		sink.fd = fd;
		if (remote_request(r, url, NULL, &sink, 300000, &status) == CURLE_OK && status == 200)
			rc = 0;
	}
	if (rc == 0 && sink.written != (uint64_t)bytes) {
		cli_error("%s: got %llu bytes, the result says %lld", rel,
			  (unsigned long long)sink.written, (long long)bytes);
		rc = -1;
	} else if (rc < 0) {
		cli_error("cannot fetch %s from the server: %s", rel, status ? "not found" : r->errbuf);
	}
	close(fd);
	free(data);
	json_object_del(e, "content_base64");
	json_object_del(e, "url");
	return rc;
}

int remote_open_out(char **abs, const char *dir, const char *run_id)
{
	char cwd[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int fd;

	*abs = NULL;
	if (!getcwd(cwd, sizeof(cwd)))
		return -1;
	if (dir && dir[0] == '/')
		*abs = strdup(dir);
	else if (dir && asprintf(abs, "%s/%s", cwd, dir) < 0)
		*abs = NULL;
	else if (!dir && asprintf(abs, "%s/nbrun-out/%s", cwd, run_id) < 0)
		*abs = NULL;
	if (!*abs || path_mkdir_p(*abs, 0755) < 0)
		return -1;
	fd = open(*abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(dup(fd))))
		return fd < 0 ? -1 : (close(fd), -1);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			closedir(d);
			close(fd);
			errno = ENOTEMPTY;
			return -1;
		}
	closedir(d);
	return fd;
}

int remote_exit_for_reply(long status, const json_t *err)
{
	const char *msg = json_string_value(json_object_get(err, "error"));
	const char *kind = json_string_value(json_object_get(err, "kind"));

	cli_error("server: %s", msg ? msg : "an unexpected reply");
	if (status == 401) {
		fprintf(stderr, "nbrun: the token comes from --token-file, NBRUN_TOKEN or NBRUN_TOKEN_FILE\n");
		return CLI_EXIT_USAGE;
	}
	if (status == 400 || status == 413)
		return CLI_EXIT_USAGE;
	if ((kind && !strcmp(kind, "engine")) || status == 502)
		return CLI_EXIT_ENGINE;
	return CLI_EXIT_FAILED;
}

/* The last line of a stream that is no event: the result, or an error reply. */
static void remote_last_line(const char *line, size_t len, void *payload)
{
	json_t **last = payload, *v = json_loadb(line, len, 0, NULL);

	if (json_is_object(v) && json_object_get(v, "event")) {
		json_decref(v);
		return;
	}
	json_decref(*last);
	*last = v;
}

CURLcode remote_post_run_streamed(struct remote *r, const char *body, const char *key, json_t **doc,
				  long *status)
{
	struct buf tail = BUF_INIT(REMOTE_REPLY_MAX);
	struct remote_sink sink = { .mem = &tail, .fd = -1, .max = UINT64_MAX,
				    .on_line = remote_last_line, .payload = doc };
	CURLcode cc;

	*doc = NULL;
	cc = remote_perform(r, "POST", "/v1/runs", body, strlen(body), &sink, 0, key, status);
	if (tail.len)
		remote_last_line(tail.data, tail.len, doc); /* an error reply has no final newline */
	buf_free(&tail);
	return cc;
}

int remote_keep_outputs(struct remote *r, json_t *doc, int out_fd, const char *out_dir)
{
	const char *run_id = json_string_value(json_object_get(doc, "run_id"));
	char *nb_path = NULL, *path = NULL;
	long status = 0;
	json_t *e;
	size_t i;
	int rc = -1, wrc;

	json_array_foreach(json_object_get(doc, "images"), i, e)
		if (remote_save(r, out_fd, e) < 0)
			goto out;
	json_array_foreach(json_object_get(doc, "files"), i, e)
		if (remote_save(r, out_fd, e) < 0)
			goto out;
	/* The executed notebook, when the run kept one. */
	if (!json_is_null(json_object_get(doc, "notebook"))) {
		struct remote_sink nb = { .fd = -1, .max = 1ull << 30 };
		struct fd_atomic nbf;
		int fd = fd_atomic_open(&nbf, out_fd, "notebook.ipynb", 0644);
		nb.fd = fd;
		if (fd < 0 || asprintf(&path, "/v1/runs/%s/notebook", run_id) < 0 ||
		    remote_request(r, path, NULL, &nb, 300000, &status) != CURLE_OK || status != 200 ||
		    asprintf(&nb_path, "%s/notebook.ipynb", out_dir) < 0) {
			cli_error("cannot fetch the executed notebook: %s", status ? "not found" : r->errbuf);
			nb_path = NULL;
			if (fd >= 0)
				fd_atomic_abort(&nbf);
			goto out;
		}
		fd = fd_atomic_commit(&nbf);
		if (fd < 0) {
			cli_error("cannot write %s: %s", nb_path, strerror(-fd));
			goto out;
		}
	}
	json_object_set_new(doc, "out_dir", json_string(out_dir));
	json_object_set_new(doc, "notebook", nb_path ? json_string(nb_path) : json_null());
	wrc = jsonx_write_file(out_fd, "result.json", doc);
	if (wrc < 0) {
		cli_error("cannot write %s/result.json: %s", out_dir, strerror(-wrc));
		goto out;
	}
	rc = 0;
out:
	free(nb_path);
	free(path);
	return rc;
}

int cli_remote_run(const struct cli_remote *a)
{
	struct remote *r = NULL;
	struct buf reply = BUF_INIT(REMOTE_REPLY_MAX);
	struct remote_sink sink = { .mem = &reply, .fd = -1, .max = REMOTE_REPLY_MAX };
	char *body = NULL, *out_dir = NULL;
	const char *run_id, *status_name;
	json_t *doc = NULL;
	enum nbrun_status st;
	long status;
	int ret = CLI_EXIT_FAILED, out_fd = -1;
	CURLcode cc;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	ret = remote_open(&r, a->server, a->token_file, a->cancel);
	if (ret)
		goto out;
	ret = CLI_EXIT_FAILED;
	if (a->out_dir) {
		/* Refuse a non-empty -o DIR before anything runs, as a local run does. */
		out_fd = remote_open_out(&out_dir, a->out_dir, NULL);
		if (out_fd < 0) {
			ret = errno == ENOTEMPTY ? CLI_EXIT_USAGE : CLI_EXIT_FAILED;
			cli_error("output directory %s %s", out_dir ? out_dir : a->out_dir,
				  errno == ENOTEMPTY ? "is not empty" : strerror(errno));
			goto out;
		}
	}
	body = remote_body(a, &ret);
	if (!body)
		goto out;
	/* remote_body() said 0: every failure from here on is the run's (exit 5) */
	ret = CLI_EXIT_FAILED;
	remote_set_run_timeout(r, a->timeout_ms);
	cc = remote_perform(r, "POST", "/v1/runs", body, strlen(body), &sink, 0, NULL, &status);
	if (cc != CURLE_OK) {
		if (a->cancel && *a->cancel) {
			cli_error("interrupted (the server finishes the run on its own)");
			ret = CLI_EXIT_INTERRUPTED;
		} else if (cc == CURLE_OPERATION_TIMEDOUT && a->timeout_ms) {
			cli_error("the server at %s gave no whole result within the run's timeout and %d s "
				  "more: given up", a->server, REMOTE_RUN_MARGIN_MS / 1000);
			ret = CLI_EXIT_ENGINE;
		} else {
			cli_error("cannot reach the nbrun server at %s: %s", a->server, r->errbuf);
			ret = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
				      cc == CURLE_OPERATION_TIMEDOUT
				      ? CLI_EXIT_ENGINE
				      : CLI_EXIT_FAILED;
		}
		goto out;
	}
	doc = json_loadb(reply.data ? reply.data : "", reply.len, 0, NULL);
	if (status != 200) {
		ret = remote_exit_for_reply(status, doc);
		goto out;
	}
	run_id = json_string_value(json_object_get(doc, "run_id"));
	status_name = json_string_value(json_object_get(doc, "status"));
	if (!json_is_object(doc) || !run_id || !wire_run_id_valid(run_id) || !status_name) {
		cli_error("the server's reply is not a result document");
		goto out;
	}
	if (out_fd < 0 && (out_fd = remote_open_out(&out_dir, NULL, run_id)) < 0) {
		cli_error("cannot use the output directory %s: %s", out_dir ? out_dir : "nbrun-out",
			  errno == ENOTEMPTY ? "not empty" : strerror(errno));
		goto out;
	}
	if (remote_keep_outputs(r, doc, out_fd, out_dir) < 0)
		goto out;
	if (a->json) {
		char *text = json_dumps(doc, JSON_INDENT(2));
		if (!text || printf("%s\n", text) < 0 || fflush(stdout) != 0) {
			free(text);
			cli_error("cannot write the result to stdout");
			goto out;
		}
		free(text);
	} else {
		cli_print_doc(stdout, doc, isatty(STDOUT_FILENO));
	}
	st = NBRUN_STATUS_FAILED;
	for (enum nbrun_status k = NBRUN_STATUS_OK; k <= NBRUN_STATUS_FAILED; k++)
		if (!strcmp(status_name, nbrun_status_name(k)))
			st = k;
	ret = cli_exit_for_status(st);
out:
	if (out_fd >= 0)
		close(out_fd);
	json_decref(doc);
	buf_free(&reply);
	free(body);
	free(out_dir);
	remote_close(r);
	curl_global_cleanup();
	return ret;
}
