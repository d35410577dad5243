/* SPDX-License-Identifier: MIT */
/*
 * The /v1/sessions routes of the HTTP door: open, list, execute (streamed or
 * not), interrupt, restart, files, close. A session is used by one request
 * at a time (409 otherwise), except its interrupt (the table: sessions.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "http-private.h"
#include "units.h"

/* The largest file a GET of a session file sends (the sandbox disk bounds it anyway). */
#define SESSION_GET_MAX (1ULL << 30)

/* ---- streams ------------------------------------------------------------------------- */

/* -- a run ---------------------------------------------------------------------------- */

/* ---- session endpoints ------------------------------------------------------------ */

/* POST /v1/sessions {"timeout_idle", "env", "files", "language"} */
static struct MHD_Response *sess_open(struct serve *s, int tenant, const char *body, size_t len,
				      unsigned int *status)
{
	struct serve_reply err = SERVE_REPLY_INIT;
	struct serve_run_args a = { 0 };
	struct serve_request req;
	struct serve_session *ss;
	json_t *doc, *v;
	const char *key;
	char tmp_root[4096];
	uint64_t idle = s->session_idle_ms;
	struct MHD_Response *r = NULL;

	memset(&req, 0, sizeof(req));
	doc = json_loadb(len ? body : "{}", len ? len : 2, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(doc)) {
		json_decref(doc);
		return serve_error_response(status, SERVE_E_REQUEST, "the body must be a JSON object");
	}
	json_object_foreach(doc, key, v) {
		if (strcmp(key, "timeout_idle") && strcmp(key, "env") && strcmp(key, "files") &&
		    strcmp(key, "language") && strcmp(key, "allow_net")) {
			r = serve_error_response(status, SERVE_E_REQUEST,
				       "unknown key '%.64s' (timeout_idle, env, files, language, allow_net)", key);
			goto out;
		}
	}
	v = json_object_get(doc, "timeout_idle");
	if (v && (!json_is_string(v) || units_parse_duration(&idle, json_string_value(v)) < 0 ||
		  idle == 0 || idle > s->session_life_ms)) {
		r = serve_error_response(status, SERVE_E_REQUEST,
			       "timeout_idle: want a duration such as \"10m\", at most the session lifetime of %llu s",
			       (unsigned long long)(s->session_life_ms / 1000));
		goto out;
	}
	/* env, files and language are checked as a run's are. */
	v = json_object_get(doc, "language");
	if (v && !json_is_string(v)) {
		r = serve_error_response(status, SERVE_E_REQUEST, "language: want a string such as \"python\"");
		goto out;
	}
	a.code = "";
	a.language = json_string_value(v);
	a.env = json_object_get(doc, "env");
	a.files = json_object_get(doc, "files");
	a.allow_net = json_object_get(doc, "allow_net");
	snprintf(tmp_root, sizeof(tmp_root), "%s/tmp", s->state_dir);
	if (serve_request_init(&req, &err, s, &a, tmp_root) < 0 ||
	    !(ss = serve_session_open(s, &err, tenant, NULL, &req, idle, NULL))) {
		r = serve_reply_response(status, &err);
		goto out;
	}
	serve_info("nbrun: serve: session %s opened (%s, idle timeout %llu s)", ss->id,
		ss->language, (unsigned long long)(idle / 1000));
	r = sess_json(status, 201, json_pack("{s:s, s:s, s:I, s:I}", "id", ss->id, "language",
					     ss->language, "timeout_idle_s", (json_int_t)(idle / 1000),
					     "lifetime_s", (json_int_t)(s->session_life_ms / 1000)));
	sess_put(s, ss);
out:
	serve_request_free(&req);
	json_decref(doc);
	return r;
}

static json_t *sess_info(struct serve *s, const struct serve_session *ss)
{
	uint64_t now = clock_mono_ms();

	return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:b}", "id", ss->id, "node", s->node,
			 "language", ss->language, "executions",
			 (json_int_t)ss->execs, "age_s", (json_int_t)((now - ss->created_ms) / 1000),
			 "idle_s", (json_int_t)((now - ss->last_ms) / 1000), "busy", ss->busy,
			 "kernel_dead", nbrun_session_kernel_dead(ss->ns) != 0);
}

/*
 * This node's sessions of tenant and, when the server has peers and the
 * request is not forwarded, every peer's: a peer that does not answer is
 * named in "unreachable".
 */
static struct MHD_Response *sess_list(struct serve *s, struct MHD_Connection *c, int tenant,
				      unsigned int *status)
{
	json_t *arr = json_array(), *doc;
	struct serve_session *ss;

	pthread_mutex_lock(&s->sessions->mu);
	for (ss = s->sessions->list; ss && arr; ss = ss->next)
		if (ss->tenant == tenant)
			json_array_append_new(arr, sess_info(s, ss));
	pthread_mutex_unlock(&s->sessions->mu);
	doc = arr ? json_pack("{s:o}", "sessions", arr) : NULL;
	if (doc && s->peers && !serve_forwarded(c)) {
		json_t *gone = serve_forward_list(s, c, arr);
		if (!gone) {
			json_decref(doc);
			doc = NULL;
		} else {
			json_object_set_new(doc, "unreachable", gone);
		}
	}
	return sess_json(status, 200, doc);
}

/* Parse {"code": "...", "timeout": "60s"}. */
static int sess_parse_execute(struct serve *s, const char *body, size_t len, char **code,
			      uint64_t *timeout_ms, struct MHD_Response **r, unsigned int *status)
{
	json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL), *v;
	const char *key;
	int rc = -1;

	*code = NULL;
	*timeout_ms = s->opts.timeout_ms;
	if (!json_is_object(doc)) {
		*r = serve_error_response(status, SERVE_E_REQUEST, "the body must be a JSON object with \"code\"");
		goto out;
	}
	json_object_foreach(doc, key, v) {
		if (strcmp(key, "code") && strcmp(key, "timeout")) {
			*r = serve_error_response(status, SERVE_E_REQUEST, "unknown key '%.64s' (code, timeout)", key);
			goto out;
		}
	}
	v = json_object_get(doc, "code");
	if (!json_is_string(v)) {
		*r = serve_error_response(status, SERVE_E_REQUEST, "code: want a string");
		goto out;
	}
	v = json_object_get(doc, "timeout");
	if (v && (!json_is_string(v) || units_parse_duration(timeout_ms, json_string_value(v)) < 0 ||
		  *timeout_ms > s->opts.timeout_ms)) {
		*r = serve_error_response(status, SERVE_E_REQUEST,
				"timeout: want a positive duration such as \"60s\", at most %llu ms",
				(unsigned long long)s->opts.timeout_ms);
		goto out;
	}
	*code = strdup(json_string_value(json_object_get(doc, "code")));
	if (!*code) {
		*r = serve_error_response(status, SERVE_E_INTERNAL, "out of memory");
		goto out;
	}
	rc = 0;
out:
	json_decref(doc);
	return rc;
}

/*
 * One execution: its result document with urls (and small outputs inline),
 * or an error reply in *doc with *code set. The session is claimed.
 */
static json_t *sess_execute(struct serve *s, struct serve_session *ss, const char *code,
			    uint64_t timeout_ms, nbrun_event_cb on_event, void *payload,
			    unsigned int *http)
{
	struct nbrun_exec_options eo = NBRUN_EXEC_OPTIONS_INIT;
	struct nbrun_result *res = NULL;
	char sub[16], *dir = NULL, *text = NULL, prefix[192];
	json_t *doc = NULL;
	int dfd = -1, rc;

	snprintf(sub, sizeof(sub), "%u", ss->execs + 1);
	if (asprintf(&dir, "%s/%s", ss->dir, sub) < 0)
		return NULL;
	eo.timeout_ms = timeout_ms;
	eo.out_dir = dir;
	eo.limits = s->opts.limits;
	eo.max_file_bytes = s->opts.max_file_bytes;
	eo.max_files = s->opts.max_files;
	eo.on_event = on_event;
	eo.event_payload = payload;
	rc = serve_session_execute(&res, s, ss, code, &eo);
	if (rc < 0) {
		char msg[600];
		snprintf(msg, sizeof(msg), "%s", nbrun_session_errmsg(ss->ns));
		*http = rc == NBRUN_EINVAL ? 400 : rc == NBRUN_EENGINE ? 502 : 500;
		if (rc == NBRUN_EENGINE) {
			sess_close(s, ss, "its sandbox is gone");
			strncat(msg, "; the session was closed", sizeof(msg) - strlen(msg) - 1);
		}
		free(dir);
		return json_pack("{s:s, s:s}", "error", msg, "kind", *http == 400 ? "request" : "engine");
	}
	*http = 200;
	if (nbrun_result_to_json(&text, res, 0) == 0)
		doc = json_loads(text, 0, NULL);
	dfd = openat(ss->dir_fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	/* The session as the client names it, on whichever node it asks. */
	if (json_is_object(json_object_get(doc, "session")))
		json_object_set_new(json_object_get(doc, "session"), "id", json_string(ss->id));
	if (doc && dfd >= 0) {
		snprintf(prefix, sizeof(prefix), "/v1/sessions/%s/outputs/%s", ss->id, sub);
		serve_add_refs(doc, prefix, dfd, true);
		json_object_set_new(doc, "notebook_url", json_sprintf("%s/notebook.ipynb", prefix));
	}
	if (dfd >= 0)
		close(dfd);
	nbrun_result_free(res);
	free(text);
	free(dir);
	return doc;
}

static void stream_exec_work(struct serve_stream *st)
{
	unsigned int http = 500;
	json_t *doc = sess_execute(st->s, st->ss, st->code, st->timeout_ms, stream_event, st, &http);

	/*
	 * The session is free before the client reads the last line, as after
	 * an execute that is not streamed: its next request must not find it
	 * busy while the stream's connection is still being closed. Finished
	 * first, so that a client leaving now interrupts nothing of the next.
	 */
	pthread_mutex_lock(&st->s->sessions->mu);
	st->finished = 1;
	st->unclaimed = true;
	pthread_mutex_unlock(&st->s->sessions->mu);
	sess_unclaim(st->s, st->ss);
	stream_last(st, doc);
}

static void stream_exec_abort(struct serve_stream *st)
{
	/*
	 * The cell stops; the kernel and its state stay. Under the lock the
	 * claim is given back with: once it is, the session may already run
	 * the next request's cell, which is not this client's to stop.
	 */
	pthread_mutex_lock(&st->s->sessions->mu);
	if (!st->unclaimed)
		nbrun_session_interrupt(st->ss->ns);
	pthread_mutex_unlock(&st->s->sessions->mu);
}

static void stream_exec_release(struct serve_stream *st)
{
	if (!st->unclaimed)
		sess_unclaim(st->s, st->ss);
	sess_put(st->s, st->ss);
	free(st->code);
}

static struct MHD_Response *sess_post_execute(struct serve *s, struct MHD_Connection *c,
					      struct serve_session *ss, const char *body, size_t len,
					      unsigned int *status, bool *handed)
{
	struct MHD_Response *r = NULL;
	struct serve_stream *st;
	unsigned int http = 500;
	uint64_t timeout_ms;
	char *code;
	json_t *doc;

	if (sess_parse_execute(s, body, len, &code, &timeout_ms, &r, status) < 0)
		return r;
	if (nbrun_session_kernel_dead(ss->ns)) {
		free(code);
		return serve_error_response(status, SERVE_E_KERNEL_DEAD,
				  "the session's kernel died; POST /v1/sessions/%s/restart to go on", ss->id);
	}
	if (!sess_claim(s, ss)) {
		free(code);
		return serve_error_response(status, SERVE_E_CONFLICT, "the session is running another request");
	}
	if (serve_wants_ndjson(c)) {
		st = calloc(1, sizeof(*st));
		if (!st) {
			sess_unclaim(s, ss);
			free(code);
			return serve_error_response(status, SERVE_E_INTERNAL, "out of memory");
		}
		st->s = s;
		st->ss = ss;
		st->code = code;
		st->timeout_ms = timeout_ms;
		st->work = stream_exec_work;
		st->abort = stream_exec_abort;
		st->release = stream_exec_release;
		*handed = true; /* the stream unclaims and puts the session */
		return stream_start(st, c, status);
	}
	doc = sess_execute(s, ss, code, timeout_ms, NULL, NULL, &http);
	sess_unclaim(s, ss);
	free(code);
	return doc ? sess_json(status, http, doc) : serve_error_response(status, SERVE_E_INTERNAL, "out of memory");
}

/* A session file into a spool file, sent from there (bounded memory). */
static struct MHD_Response *sess_get_file(struct serve *s, struct serve_session *ss,
					  const char *path, unsigned int *status)
{
	struct MHD_Response *r;
	struct stat st;
	int fd, rc;

	(void)s;
	fd = openat(ss->dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return serve_error_response(status, SERVE_E_INTERNAL, "cannot make a spool file: %s", strerror(errno));
	rc = nbrun_session_get_file(ss->ns, path, fd, SESSION_GET_MAX);
	if (rc < 0) {
		close(fd);
		if (rc == NBRUN_EENGINE)
			sess_close(s, ss, "its sandbox is gone");
		return sess_lib_error(status, rc, nbrun_session_errmsg(ss->ns));
	}
	if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return serve_error_response(status, SERVE_E_INTERNAL, "cannot read the spool file");
	}
	r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	if (!r) {
		close(fd);
		return NULL;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	*status = 200;
	return r;
}

static struct MHD_Response *sess_output(struct serve_session *ss, const char *rest,
					unsigned int *status)
{
	struct MHD_Response *r;
	struct stat st;
	int fd = serve_open_below(ss->dir_fd, rest);

	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return serve_error_response(status, SERVE_E_NOT_FOUND, "no such output");
	}
	r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	if (!r) {
		close(fd);
		return NULL;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				strlen(rest) > 6 && !strcmp(rest + strlen(rest) - 6, ".ipynb")
					? "application/x-ipynb+json"
					: "application/octet-stream");
	*status = 200;
	return r;
}

bool serve_sessions_route(const char *url)
{
	return !strcmp(url, "/v1/sessions") || !strncmp(url, "/v1/sessions/", 13);
}

bool serve_sessions_wants_body(const char *method)
{
	return !strcmp(method, "POST") || !strcmp(method, "PUT");
}

/* The operations on one session that take it for their time. */
static struct MHD_Response *sess_claimed(struct serve *s, struct serve_session *ss,
					 const char *method, const char *rest, const char *body,
					 size_t len, unsigned int *status)
{
	struct MHD_Response *r;
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	char *text = NULL;
	int rc = 0, truncated = 0;

	if (!sess_claim(s, ss))
		return serve_error_response(status, SERVE_E_CONFLICT, "the session is running another request");
	if (!strcmp(rest, "restart") && !strcmp(method, "POST")) {
		rc = nbrun_session_restart(ss->ns);
		r = rc < 0 ? sess_lib_error(status, rc, nbrun_session_errmsg(ss->ns))
			   : sess_json(status, 200, json_pack("{s:b}", "restarted", 1));
	} else if (!strcmp(rest, "files") && get) {
		rc = nbrun_session_list_files(&text, &truncated, ss->ns);
		r = rc < 0 ? sess_lib_error(status, rc, nbrun_session_errmsg(ss->ns))
			   : sess_json(status, 200,
				       json_pack("{s:o, s:b}", "files", json_loads(text, 0, NULL),
						 "truncated", truncated));
	} else if (!strncmp(rest, "files/", 6) && rest[6] && get) {
		r = sess_get_file(s, ss, rest + 6, status);
	} else if (!strncmp(rest, "files/", 6) && rest[6] && !strcmp(method, "PUT")) {
		rc = nbrun_session_put_file(ss->ns, rest + 6, body, len);
		r = rc < 0 ? sess_lib_error(status, rc, nbrun_session_errmsg(ss->ns))
			   : sess_json(status, 201,
				       json_pack("{s:s, s:I}", "path", rest + 6, "bytes", (json_int_t)len));
	} else if (!strcmp(rest, "notebook") && get) {
		rc = nbrun_session_notebook(&text, ss->ns);
		if (rc < 0) {
			r = sess_lib_error(status, rc, nbrun_session_errmsg(ss->ns));
		} else {
			r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
			if (r) {
				text = NULL;
				MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
							"application/x-ipynb+json");
				*status = 200;
			}
		}
	} else {
		r = serve_error_response(status, SERVE_E_NOT_FOUND, "no such endpoint");
	}
	if (rc == NBRUN_EENGINE)
		sess_close(s, ss, "its sandbox is gone");
	free(text);
	sess_unclaim(s, ss);
	return r;
}

struct MHD_Response *serve_sessions_handle(struct serve *s, struct MHD_Connection *c, int tenant,
					   const char *method, const char *url, const char *body,
					   size_t len, unsigned int *status)
{
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	struct MHD_Response *r;
	struct serve_session *ss;
	char id[WIRE_NODE_MAX + 1 + 32];
	const char *p, *rest, *tilde;
	size_t n;
	bool handed = false;

	if (!s->sessions)
		return serve_error_response(status, SERVE_E_NOT_FOUND, "this server keeps no sessions");
	if (!strcmp(url, "/v1/sessions")) {
		if (!strcmp(method, "POST"))
			return sess_open(s, tenant, body, len, status);
		if (get)
			return sess_list(s, c, tenant, status);
		return serve_error_response(status, SERVE_E_METHOD, "use POST or GET");
	}
	p = url + 13;
	n = strcspn(p, "/");
	if (n == 0 || n >= sizeof(id))
		return serve_error_response(status, SERVE_E_NOT_FOUND, "no such session");
	memcpy(id, p, n);
	id[n] = '\0';
	rest = p[n] ? p + n + 1 : "";
	/* Another node's: forwarded to it when it is a peer, else no such session. */
	tilde = strchr(id, '~');
	if (tilde && ((size_t)(tilde - id) != strlen(s->node) || strncmp(id, s->node, tilde - id)) &&
	    serve_forward(&r, s, c, id, method, url, body, len, status) == 0)
		return r;
	ss = sess_get(s, id, tenant, NULL);
	if (!ss)
		return serve_error_response(status, SERVE_E_NOT_FOUND, "no session %.96s", id);
	if (!*rest && get) {
		json_t *info;
		pthread_mutex_lock(&s->sessions->mu);
		info = sess_info(s, ss);
		pthread_mutex_unlock(&s->sessions->mu);
		r = sess_json(status, 200, info);
	} else if (!*rest && !strcmp(method, "DELETE")) {
		sess_close(s, ss, "deleted");
		r = sess_json(status, 200, json_pack("{s:s, s:b}", "id", ss->id, "closed", 1));
	} else if (!strcmp(rest, "execute") && !strcmp(method, "POST")) {
		r = sess_post_execute(s, c, ss, body, len, status, &handed);
	} else if (!strcmp(rest, "interrupt") && !strcmp(method, "POST")) {
		r = sess_json(status, 200,
			      json_pack("{s:b}", "interrupted", nbrun_session_interrupt(ss->ns) == 1));
	} else if (!strncmp(rest, "outputs/", 8) && get) {
		r = sess_output(ss, rest + 8, status);
	} else if (!strcmp(rest, "restart") || !strcmp(rest, "files") || !strcmp(rest, "notebook") ||
		   !strncmp(rest, "files/", 6)) {
		r = sess_claimed(s, ss, method, rest, body, len, status);
	} else {
		r = serve_error_response(status, SERVE_E_NOT_FOUND, "no such endpoint");
	}
	if (!handed)
		sess_put(s, ss);
	return r;
}
