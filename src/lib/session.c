/* SPDX-License-Identifier: MIT */
/*
 * A session: one sandbox whose kernel serves many executions, each a job
 * over the same live channel (environments/jupyter/PROTOCOL.md). Between
 * executions the session talks to the agent itself: files in and out,
 * listings, restarts. Each execution's outputs go to their own directory;
 * the history is read back from those directories, so a long session keeps
 * little in memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "nbrun-private.h"
#include "text.h"

#define SESSION_UID 1000
#define SESSION_GID 1000
/* Replies to requests other than execute; a restart boots a kernel. */
#define SESSION_REPLY_MS 120000
#define SESSION_RESTART_MS 120000
/* A listing is at most 10,000 entries of a few hundred bytes. */
#define SESSION_MAX_LISTING (16u << 20)
/* Beyond the execution's timeout: the agent interrupts its cell at the
 * timeout and kills the kernel one more timeout later; this is the wait. */
#define SESSION_MARGIN_MS 15000

struct nbrun_session {
	struct nbrun_ctx ctx;       /* this session's last failure */
	struct nbrun_run_options run; /* sandbox limits (strings not kept) */
	struct nbrun__sandbox *sb;
	struct nbrun_pool *pool;    /* the sandbox goes to its reaper at the end */
	const struct nbrun__language *lang; /* its kernel's (static) */
	char id[16];
	unsigned int execs;         /* executions so far */
	unsigned int count;         /* the kernel's execution count so far */
	char **dirs;                /* each execution's output directory */
	size_t n_dirs;
	bool dead;                  /* the kernel died */
	bool broken;                /* the channel is unusable: only close is left */
	unsigned int req;           /* request ids */
	pthread_mutex_t mu;         /* guards running and interrupt */
	bool running;
	volatile sig_atomic_t interrupt;
	json_t *allow;              /* its hosts to allow, as given (NULL: none) */
};

NBRUN_EXPORT const char *nbrun_session_id(const struct nbrun_session *s)
{
	return s ? s->id : "";
}

NBRUN_EXPORT int nbrun_session_kernel_dead(const struct nbrun_session *s)
{
	return s && s->dead;
}

NBRUN_EXPORT const char *nbrun_session_errmsg(const struct nbrun_session *s)
{
	return s ? s->ctx.errmsg : "";
}

static uint64_t session_after(uint64_t ms)
{
	return clock_mono_ms() + ms;
}

static int session_usable(struct nbrun_session *s)
{
	if (s->broken)
		return nbrun__err(&s->ctx, NBRUN_EENGINE,
				  "the session's sandbox is gone; close the session and open another");
	return 0;
}

/* A channel that failed mid-message cannot be read again. */
static int session_fail(struct nbrun_session *s, int rc)
{
	if (rc == NBRUN_EENGINE || rc == NBRUN_EPARSE || s->sb->ch.broken) {
		s->broken = true;
		if (rc == NBRUN_EPARSE)
			rc = NBRUN_EENGINE;
	}
	return rc;
}

static int session_send(struct nbrun_session *s, json_t *msg, const void *blob, size_t len)
{
	int rc;

	if (!msg)
		return nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
	rc = nbrun__chan_send(&s->sb->ch, msg, blob, len, session_after(SESSION_REPLY_MS));
	json_decref(msg);
	return rc < 0 ? session_fail(s, rc) : 0;
}

/*
 * The reply to request id: a message of type want (its blob still to be
 * read by the caller), or an `error` with that id (*out set, returns 1).
 * Other messages (a late interrupt's answer) are skipped. 0 with *out set.
 */
static int session_await(struct nbrun_session *s, const char *id, const char *want, json_t **out,
			 uint64_t ms)
{
	uint64_t deadline = session_after(ms);

	*out = NULL;
	for (;;) {
		json_t *msg = NULL;
		const char *type, *rid;
		int rc = nbrun__chan_recv(&s->sb->ch, &msg, deadline);

		if (rc == 2) {
			s->broken = true;
			return nbrun__err(&s->ctx, NBRUN_EENGINE, "the sandbox did not answer in time");
		}
		if (rc == 0) {
			s->broken = true;
			return nbrun__err(&s->ctx, NBRUN_EENGINE, "the sandbox ended");
		}
		if (rc < 0)
			return session_fail(s, rc);
		type = json_string_value(json_object_get(msg, "type"));
		rid = json_string_value(json_object_get(msg, "id"));
		if (rid && !strcmp(rid, id) && (!strcmp(type, want) || !strcmp(type, "error"))) {
			*out = msg;
			return !strcmp(type, "error");
		}
		if (!strcmp(type, "error") && json_is_true(json_object_get(msg, "fatal"))) {
			json_decref(msg);
			s->broken = true;
			return nbrun__err(&s->ctx, NBRUN_EENGINE, "the sandbox's agent failed");
		}
		rc = nbrun__chan_recv_blob(&s->sb->ch, NULL, -1, UINT32_MAX, deadline);
		json_decref(msg);
		if (rc != 0)
			return session_fail(s, rc == 2 ? NBRUN_EENGINE : rc);
	}
}

static void session_next_id(struct nbrun_session *s, char *buf, size_t len, const char *what)
{
	snprintf(buf, len, "%s%u", what, ++s->req);
}

/*
 * One request (msg, its "id" added here; blob when not NULL) and its answer
 * of type want: 0 with *reply (its blob still to take), 1 with the agent's
 * refusal in *reply, < 0.
 */
static int session_ask(struct nbrun_session *s, json_t *msg, const void *blob, size_t len,
		       const char *want, uint64_t ms, json_t **reply)
{
	char id[24];
	int rc;

	*reply = NULL;
	rc = session_usable(s);
	if (rc < 0) {
		json_decref(msg);
		return rc;
	}
	session_next_id(s, id, sizeof(id), json_string_value(json_object_get(msg, "type")) ?: "req");
	if (msg && json_object_set_new(msg, "id", json_string(id)) < 0) {
		json_decref(msg);
		msg = NULL;
	}
	rc = session_send(s, msg, blob, len);
	return rc < 0 ? rc : session_await(s, id, want, reply, ms);
}

/* The data of the answer just taken: into buf or fd, at most cap bytes. */
static int session_take_blob(struct nbrun_session *s, struct buf *buf, int fd, uint64_t cap)
{
	int rc = nbrun__chan_recv_blob(&s->sb->ch, buf, fd, cap, session_after(SESSION_REPLY_MS));

	if (rc == 0 || rc == NBRUN_EIO)
		return rc; /* EIO: the caller's fd (the channel is broken now too) */
	return session_fail(s, rc == 2 ? NBRUN_EENGINE : rc);
}

/* The agent's refusal, as one line on the session. */
static int session_refused(struct nbrun_session *s, json_t *msg, int code)
{
	char line[300];
	const char *m = json_string_value(json_object_get(msg, "message"));
	size_t n = 0;

	for (const char *p = m ? m : ""; *p && n + 1 < sizeof(line); p++)
		line[n++] = (unsigned char)*p < 0x20 ? ' ' : *p;
	line[n] = '\0';
	if (!text_utf8_valid(line, n))
		snprintf(line, sizeof(line), "the sandbox refused");
	json_decref(msg);
	return nbrun__err(&s->ctx, code, "%s", line);
}

/* ---- files ----------------------------------------------------------------- */

static int session_put_tar(struct nbrun_session *s, const void *tar, size_t len)
{
	json_t *msg = NULL;
	int rc;

	rc = session_ask(s, json_pack("{s:s, s:s}", "type", "put", "path", "/mnt/data"), tar, len,
			 "stored", SESSION_REPLY_MS, &msg);
	if (rc == 1)
		return session_refused(s, msg, NBRUN_EINVAL);
	json_decref(msg);
	return rc;
}

static int session_check_path(struct nbrun_ctx *ctx, const char *path)
{
	const char *why = path ? nbrun__path_reject_reason(path) : "no path";

	if (why)
		return nbrun__err(ctx, NBRUN_EINVAL, "bad path '%s': %s", path ? path : "", why);
	return 0;
}

NBRUN_EXPORT int nbrun_session_put_file(struct nbrun_session *s, const char *path,
					const void *data, size_t len)
{
	struct nbrun__tar *t = NULL;
	const void *tar;
	size_t tar_len;
	int rc;

	if (!s)
		return NBRUN_EINVAL;
	rc = session_usable(s);
	if (rc == 0)
		rc = session_check_path(&s->ctx, path);
	if (rc < 0)
		return rc;
	rc = nbrun__tar_new(&t, SESSION_UID, SESSION_GID, len + (1u << 20));
	if (rc == 0)
		rc = nbrun__tar_add_data(t, path, data ? data : "", len);
	if (rc == 0)
		rc = nbrun__tar_finish(t, &tar, &tar_len);
	if (rc < 0)
		rc = nbrun__err(&s->ctx, rc == NBRUN_ENOMEM ? NBRUN_ENOMEM : NBRUN_EINVAL,
				"cannot pack %s for the sandbox", path);
	else
		rc = session_put_tar(s, tar, tar_len);
	nbrun__tar_free(t);
	return rc;
}

NBRUN_EXPORT int nbrun_session_get_file(struct nbrun_session *s, const char *path, int fd,
					uint64_t max)
{
	char *full = NULL;
	json_t *msg = NULL;
	const char *code;
	int rc;

	if (!s)
		return NBRUN_EINVAL;
	rc = session_check_path(&s->ctx, path);
	if (rc < 0)
		return rc;
	if (asprintf(&full, "/mnt/data/%s", path) < 0)
		return nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
	rc = session_ask(s, json_pack("{s:s, s:s, s:I}", "type", "read", "path", full, "max_bytes",
				      (json_int_t)max),
			 NULL, 0, "file", SESSION_REPLY_MS, &msg);
	free(full);
	if (rc == 1) {
		code = json_string_value(json_object_get(msg, "code")) ?: "";
		return session_refused(s, msg,
				       !strcmp(code, "not_found") || !strcmp(code, "not_a_file")
					       ? NBRUN_ENOTFOUND
				       : !strcmp(code, "io") ? NBRUN_EIO
							     : NBRUN_EINVAL);
	}
	if (rc < 0)
		return rc;
	json_decref(msg);
	return session_take_blob(s, NULL, fd, max);
}

/* Keep only what the listing documents, with the types it documents. */
static json_t *session_clean_listing(const json_t *in)
{
	json_t *out = json_array(), *e;
	size_t i;

	if (!out)
		return NULL;
	json_array_foreach(in, i, e) {
		const char *path = json_string_value(json_object_get(e, "path"));
		const char *type = json_string_value(json_object_get(e, "type"));
		json_t *sha = json_object_get(e, "sha256");
		json_t *o;

		if (!path || !type || nbrun__path_reject_reason(path) ||
		    !json_is_integer(json_object_get(e, "size")))
			continue;
		o = json_pack("{s:s, s:s, s:O, s:O}", "path", path, "type", type, "size",
			      json_object_get(e, "size"), "mtime",
			      json_is_integer(json_object_get(e, "mtime")) ? json_object_get(e, "mtime")
									   : json_null());
		if (o && !strcmp(type, "file"))
			json_object_set_new(o, "sha256",
					    json_is_string(sha) && strlen(json_string_value(sha)) == 64
						    ? json_copy(sha)
						    : json_null());
		if (!o || json_array_append_new(out, o) < 0) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

NBRUN_EXPORT int nbrun_session_list_files(char **out, int *truncated, struct nbrun_session *s)
{
	struct buf blob = BUF_INIT(SESSION_MAX_LISTING);
	json_t *msg = NULL, *list, *clean;
	int rc;

	*out = NULL;
	if (!s)
		return NBRUN_EINVAL;
	rc = session_ask(s, json_pack("{s:s, s:s}", "type", "list", "path", "/mnt/data"), NULL, 0,
			 "listing", SESSION_REPLY_MS, &msg);
	if (rc == 1)
		return session_refused(s, msg, NBRUN_EIO);
	if (rc < 0)
		return rc;
	if (truncated)
		*truncated = json_is_true(json_object_get(msg, "truncated"));
	json_decref(msg);
	rc = session_take_blob(s, &blob, -1, SESSION_MAX_LISTING);
	if (rc != 0) {
		buf_free(&blob);
		return rc;
	}
	list = json_loadb(blob.data ? blob.data : "", blob.len, JSON_REJECT_DUPLICATES, NULL);
	buf_free(&blob);
	if (!json_is_array(list)) {
		json_decref(list);
		s->broken = true;
		return nbrun__err(&s->ctx, NBRUN_EENGINE, "sandbox protocol violation: a listing that is not a JSON array");
	}
	clean = session_clean_listing(list);
	json_decref(list);
	*out = clean ? json_dumps(clean, JSON_COMPACT) : NULL;
	json_decref(clean);
	return *out ? 0 : nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
}

/* ---- kernel ------------------------------------------------------------------ */

NBRUN_EXPORT int nbrun_session_interrupt(struct nbrun_session *s)
{
	bool running;

	if (!s)
		return 0;
	pthread_mutex_lock(&s->mu);
	running = s->running;
	if (running)
		__atomic_store_n(&s->interrupt, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&s->mu);
	return running ? 1 : 0;
}

NBRUN_EXPORT int nbrun_session_restart(struct nbrun_session *s)
{
	json_t *msg = NULL;
	int rc;

	if (!s)
		return NBRUN_EINVAL;
	rc = session_ask(s, json_pack("{s:s}", "type", "restart"), NULL, 0, "ready", SESSION_RESTART_MS,
			 &msg);
	if (rc == 1) {
		s->dead = true;
		return session_refused(s, msg, NBRUN_EENGINE);
	}
	if (rc < 0)
		return rc;
	json_decref(msg);
	rc = session_take_blob(s, NULL, -1, 0);
	if (rc != 0)
		return rc;
	s->dead = false;
	s->count = 0;
	return 0;
}

/* ---- executions ---------------------------------------------------------------- */

/* The highest execution count of the executed cells (the kernel's count after them). */
static unsigned int session_last_count(const json_t *nb, unsigned int have)
{
	const json_t *cell;
	size_t i;

	json_array_foreach(json_object_get(nb, "cells"), i, cell) {
		json_int_t c = json_integer_value(json_object_get(cell, "execution_count"));
		if (c > (json_int_t)have && c < (json_int_t)UINT32_MAX)
			have = (unsigned int)c;
	}
	return have;
}

static void session_finish_result(struct nbrun_session *s, struct nbrun_result *res,
				  const char *dir, int dfd, uint64_t t0)
{
	json_t *doc = res->doc;
	char *nb_path = NULL;
	struct stat st;

	json_object_set_new(doc, "duration_ms", json_integer((json_int_t)(clock_mono_ms() - t0)));
	json_object_set_new(doc, "out_dir", json_string(dir));
	json_object_set_new(doc, "language", json_string(s->lang->name));
	nbrun__result_set_node(res);
	json_object_set_new(doc, "session", json_pack("{s:s, s:I}", "id", s->id, "execution",
						      (json_int_t)s->execs));
	/* With hosts to allow: every connection since the session opened. */
	if (s->allow && s->sb && s->sb->ops->net_report) {
		json_t *net = s->sb->ops->net_report(s->sb);
		if (net && json_object_set(net, "allow", s->allow) == 0)
			json_object_set_new(doc, "network", net);
		else
			json_decref(net);
	}
	if (fstatat(dfd, "notebook.ipynb", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    asprintf(&nb_path, "%s/notebook.ipynb", dir) >= 0) {
		json_object_set_new(doc, "notebook", json_string(nb_path));
		free(nb_path);
	}
}

static int session_remember_dir(struct nbrun_session *s, char *dir)
{
	char **d = realloc(s->dirs, (s->n_dirs + 1) * sizeof(*d));

	if (!d)
		return nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
	s->dirs = d;
	s->dirs[s->n_dirs++] = dir;
	return 0;
}

NBRUN_EXPORT int nbrun_session_execute(struct nbrun_result **out, struct nbrun_session *s,
				       const char *code, const struct nbrun_exec_options *eo)
{
	struct nbrun_run_options ro = s ? s->run : (struct nbrun_run_options)NBRUN_RUN_OPTIONS_INIT;
	struct nbrun__job j;
	struct nbrun_result *res = NULL;
	json_t *nb = NULL;
	char *text = NULL, *dir = NULL;
	char rid[24], eid[24];
	uint64_t t0 = clock_mono_ms();
	int dfd = -1, rc;

	*out = NULL;
	if (!s)
		return NBRUN_EINVAL;
	rc = nbrun__options_version(&s->ctx, "execute", eo ? &eo->version : NULL,
				    NBRUN_EXEC_OPTIONS_VERSION);
	if (rc < 0)
		return rc;
	if (eo->timeout_ms == 0 || eo->timeout_ms > 24ULL * 3600 * 1000)
		return nbrun__err(&s->ctx, NBRUN_EINVAL, "timeout must be between 1 ms and 24 h");
	if (!code)
		return nbrun__err(&s->ctx, NBRUN_EINVAL, "no code given");
	rc = session_usable(s);
	if (rc < 0)
		return rc;
	rc = nbrun__notebook_from_code_lang(&nb, &s->ctx, code, s->lang);
	if (rc < 0)
		return rc;
	text = json_dumps(nb, JSON_COMPACT);
	if (!text) {
		rc = nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(rid, sizeof(rid), "%s-%u", s->id, s->execs + 1);
	rc = nbrun__out_dir_open(&s->ctx, eo->out_dir, rid, &dir, &dfd);
	if (rc < 0)
		goto out;
	rc = nbrun__result_new(&res, rid);
	if (rc < 0)
		goto out;
	s->execs++;

	ro.timeout_ms = eo->timeout_ms;
	ro.cell_timeout_ms = eo->timeout_ms;
	ro.limits = eo->limits;
	ro.max_file_bytes = eo->max_file_bytes;
	ro.max_files = eo->max_files;
	ro.files = NULL;
	ro.file_count = 0;
	ro.progress = NULL;
	ro.cancel = NULL;
	memset(&j, 0, sizeof(j));
	j.ctx = &s->ctx;
	j.sb = s->sb;
	j.opts = &ro;
	nbrun__limits_resolve(&j.lim, &ro.limits);
	j.result = res;
	j.out_fd = dfd;
	j.out_dir = dir;
	j.deadline_ms = clock_mono_ms() + 2 * eo->timeout_ms + SESSION_MARGIN_MS;
	j.session = true;
	j.count_from = s->count;
	session_next_id(s, eid, sizeof(eid), "x");
	j.exec_id = eid;
	j.on_event = eo->on_event;
	j.event_payload = eo->event_payload;
	j.interrupt = &s->interrupt;

	pthread_mutex_lock(&s->mu);
	s->running = true;
	s->interrupt = 0;
	pthread_mutex_unlock(&s->mu);
	rc = nbrun__job_run(&j, nb, text, strlen(text));
	pthread_mutex_lock(&s->mu);
	s->running = false;
	s->interrupt = 0;
	pthread_mutex_unlock(&s->mu);
	nbrun__job_release(&j);

	s->count = session_last_count(nb, s->count);
	if (!strcmp(j.end_status, "dead")) {
		s->dead = true;
		nbrun__result_set_status(res, NBRUN_STATUS_FAILED,
					 "the kernel died; restart the session's kernel to go on");
	} else if (rc < 0 || !j.end_status[0] || s->sb->ch.broken) {
		/* No done, or the channel broke: nothing more can be said to this sandbox. */
		s->broken = true;
	}
	if (rc < 0)
		goto out;
	session_finish_result(s, res, dir, dfd, t0);
	rc = nbrun__result_write(&s->ctx, res, dfd);
	if (rc < 0)
		goto out;
	rc = session_remember_dir(s, dir);
	if (rc < 0)
		goto out;
	dir = NULL;
	*out = res;
	res = NULL;
out:
	if (res && dfd >= 0) {
		nbrun__result_set_status(res, NBRUN_STATUS_FAILED, s->ctx.errmsg);
		nbrun__result_write(NULL, res, dfd);
	}
	nbrun_result_free(res);
	nbrun__out_dir_release(dfd);
	if (dfd >= 0)
		close(dfd);
	free(dir);
	free(text);
	json_decref(nb);
	return rc;
}

/* ---- history ------------------------------------------------------------------- */

NBRUN_EXPORT int nbrun_session_notebook(char **out, struct nbrun_session *s)
{
	json_t *nb, *cells;
	uint64_t total = 0;
	int rc = 0;

	*out = NULL;
	if (!s)
		return NBRUN_EINVAL;
	nb = json_pack("{s:i, s:i, s:{s:{s:s, s:s, s:s}}, s:[]}", "nbformat", 4, "nbformat_minor", 5,
		       "metadata", "kernelspec", "name", s->lang->kernel, "display_name",
		       s->lang->display_name, "language", s->lang->kernel_language, "cells");
	cells = json_object_get(nb, "cells");
	if (!nb)
		return nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
	for (size_t i = 0; i < s->n_dirs && rc == 0; i++) {
		char *path = NULL, *data = NULL;
		json_t *part = NULL, *cell;
		size_t k, len = 0;

		if (asprintf(&path, "%s/notebook.ipynb", s->dirs[i]) < 0) {
			rc = nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
			break;
		}
		/* One removed by its owner (or over what is left of the cap) is left out. */
		if (fd_read_file(AT_FDCWD, path, FD_READ_REGULAR | FD_READ_NOFOLLOW,
				 (size_t)(NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES - total), &data, &len) == 0) {
			total += len;
			if (nbrun__notebook_loadb(&part, &s->ctx, data, len, NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES) < 0)
				part = NULL;
		}
		free(path);
		free(data);
		json_array_foreach(json_object_get(part, "cells"), k, cell) {
			char cid[48];
			snprintf(cid, sizeof(cid), "e%zu-c%zu", i + 1, k);
			json_object_set_new(cell, "id", json_string(cid));
			if (json_array_append(cells, cell) < 0)
				rc = nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
		}
		if (json_is_object(json_object_get(json_object_get(part, "metadata"), "language_info")))
			json_object_set(json_object_get(nb, "metadata"), "language_info",
					json_object_get(json_object_get(part, "metadata"), "language_info"));
		json_decref(part);
	}
	if (rc == 0) {
		*out = json_dumps(nb, JSON_INDENT(1));
		if (!*out)
			rc = nbrun__err(&s->ctx, NBRUN_ENOMEM, "out of memory");
	}
	json_decref(nb);
	return rc;
}

/* ---- open and close ------------------------------------------------------------ */

static int session_start(struct nbrun_session *s, struct nbrun_ctx *ctx,
			 const struct nbrun_run_options *o, struct nbrun_pool *pool)
{
	struct nbrun__sandbox_spec spec;
	uint64_t deadline = clock_mono_ms() + o->timeout_ms;
	char *policy = NULL, *ca = NULL;
	int rc;

	/* A language the pool keeps no sandboxes of starts its own. */
	if (pool) {
		s->sb = nbrun__pool_lease(pool, ctx, o, s->lang);
		if (s->sb) {
			/* It leaves the pool for good: its slot is free for a replacement. */
			nbrun__pool_discard(pool, NULL, s->lang);
			s->pool = pool;
			snprintf(s->id, sizeof(s->id), "%s", s->sb->id);
			return 0;
		}
	}
	rc = nbrun__sandbox_new(&s->sb, ctx, NBRUN__SANDBOX_DEFAULT, NULL);
	if (rc < 0)
		return rc;
	nbrun__sandbox_bind(s->sb, ctx, o->cancel);
	snprintf(s->id, sizeof(s->id), "%s", s->sb->id);
	nbrun__run_sandbox_spec(&spec, o);
	spec.kernel = s->lang->kernel;
	rc = nbrun__run_egress_spec(ctx, &spec, o, &policy, &ca);
	if (rc < 0)
		return rc;
	s->sb->ops->gc(s->sb);
	rc = s->sb->ops->create(s->sb, &spec);
	free(policy);
	free(ca);
	if (rc == 0)
		rc = s->sb->ops->start(s->sb);
	if (rc == 0)
		rc = nbrun__sandbox_wait_ready(s->sb, deadline);
	if (rc == 0 && pool)
		s->pool = pool; /* its reaper removes it, off the caller's path */
	return rc;
}

/* The input files, as one archive (as a run sends them). */
static int session_put_inputs(struct nbrun_session *s, struct nbrun_ctx *ctx,
			      const struct nbrun_run_options *o)
{
	struct nbrun__tar *t = NULL;
	struct nbrun__export_input *inputs = NULL;
	size_t n_inputs = 0;
	const void *data;
	size_t len;
	int rc;

	if (!o->file_count)
		return 0;
	rc = nbrun__inputs_tar(&t, ctx, o, &data, &len, &inputs, &n_inputs);
	for (size_t i = 0; i < n_inputs; i++)
		free(inputs[i].name);
	free(inputs);
	if (rc == 0) {
		rc = session_put_tar(s, data, len);
		if (rc < 0)
			nbrun__err(ctx, rc, "%s", s->ctx.errmsg);
	}
	nbrun__tar_free(t);
	return rc;
}

NBRUN_EXPORT int nbrun_session_open(struct nbrun_session **out, struct nbrun_ctx *ctx,
				    const struct nbrun_run_options *opts)
{
	const struct nbrun__language *lang = nbrun__language_default();
	struct nbrun_session *s;
	int rc;

	*out = NULL;
	rc = nbrun__run_check_options(ctx, opts);
	if (rc < 0)
		return rc;
	if (opts->version >= 4 && opts->language && !(lang = nbrun__language_find(opts->language)))
		return nbrun__err(ctx, NBRUN_EINVAL, "unknown language '%.64s'; languages: %s",
				  opts->language, nbrun__language_names());
	for (size_t i = 0; i < opts->file_count; i++)
		if (access(opts->files[i], R_OK) < 0)
			return nbrun__errno(ctx, errno == ENOENT ? NBRUN_ENOTFOUND : NBRUN_EIO, errno,
					    "input %s", opts->files[i]);
	s = calloc(1, sizeof(*s));
	if (!s)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	pthread_mutex_init(&s->mu, NULL);
	s->lang = lang;
	/* Only limits are kept: nothing the caller's pointers name outlives this call. */
	s->run = *opts;
	s->run.files = NULL;
	s->run.file_count = 0;
	s->run.progress = NULL;
	s->run.cancel = NULL;
	s->run.on_event = NULL;
	s->run.image = NULL;
	s->run.network = NULL;
	s->run.env = NULL;
	s->run.env_count = 0;
	s->run.out_dir = NULL;
	s->run.pool = NULL;
	s->run.language = NULL;
	s->run.allow_net = NULL;
	s->run.allow_net_count = 0;
	s->run.ca_certs = NULL;
	{
		const char *const *rules;
		size_t n = nbrun__run_allow_net(opts, &rules);
		if (n && !(s->allow = json_array()))
			rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		for (size_t i = 0; rc == 0 && i < n; i++)
			if (json_array_append_new(s->allow, json_string(rules[i])) < 0)
				rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		if (rc < 0) {
			nbrun_session_close(s);
			return rc;
		}
	}
	rc = session_start(s, ctx, opts, opts->version >= 2 ? opts->pool : NULL);
	if (rc == 0) {
		/* From now on the session's own context, in whichever thread calls. */
		nbrun__sandbox_bind(s->sb, &s->ctx, NULL);
		rc = session_put_inputs(s, ctx, opts);
	}
	if (rc < 0) {
		nbrun_session_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

NBRUN_EXPORT void nbrun_session_close(struct nbrun_session *s)
{
	if (!s)
		return;
	if (s->sb) {
		if (s->pool) {
			nbrun__pool_discard(s->pool, s->sb, NULL);
		} else {
			nbrun__sandbox_bind(s->sb, &s->ctx, NULL);
			nbrun__sandbox_free(s->sb);
		}
	}
	for (size_t i = 0; i < s->n_dirs; i++)
		free(s->dirs[i]);
	free(s->dirs);
	json_decref(s->allow);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
