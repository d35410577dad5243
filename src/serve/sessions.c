/* SPDX-License-Identifier: MIT */
/* The session table of the server: sessions (a kernel kept across calls, one
 * tenant's only) held, claimed and released, and the reaper that closes those
 * past their idle timeout or lifetime. */
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

#include "sessions.h"

void sess_destroy(struct serve *s, struct serve_session *ss)
{
	nbrun_session_close(ss->ns);
	if (ss->dir_fd >= 0)
		close(ss->dir_fd);
	serve_rm_tree(s->sessions->dir_fd, ss->dir_name);
	free(ss->dir);
	free(ss);
}

/* The session id of tenant, held (refs + 1); NULL when there is none (another tenant's too). */
struct serve_session *sess_get(struct serve *s, const char *id, int tenant, const char *owner)
{
	struct serve_session *ss;

	pthread_mutex_lock(&s->sessions->mu);
	for (ss = s->sessions->list; ss; ss = ss->next)
		if (!strcmp(ss->id, id) && ss->tenant == tenant && (!owner || !strcmp(ss->owner, owner)))
			break;
	if (ss)
		ss->refs++;
	pthread_mutex_unlock(&s->sessions->mu);
	return ss;
}

void sess_put(struct serve *s, struct serve_session *ss)
{
	bool last;

	pthread_mutex_lock(&s->sessions->mu);
	last = --ss->refs == 0 && ss->closing;
	ss->last_ms = clock_mono_ms();
	pthread_cond_broadcast(&s->sessions->cond);
	pthread_mutex_unlock(&s->sessions->mu);
	if (last)
		sess_destroy(s, ss);
}

/* Take the session for one operation; false when another one runs. */
bool sess_claim(struct serve *s, struct serve_session *ss)
{
	bool ok;

	pthread_mutex_lock(&s->sessions->mu);
	ok = !ss->busy && !ss->closing;
	if (ok)
		ss->busy = true;
	pthread_mutex_unlock(&s->sessions->mu);
	return ok;
}

void sess_unclaim(struct serve *s, struct serve_session *ss)
{
	pthread_mutex_lock(&s->sessions->mu);
	ss->busy = false;
	ss->last_ms = clock_mono_ms();
	pthread_mutex_unlock(&s->sessions->mu);
}

/* Out of the table (it is closed when its last ref goes); false when already out. */
static bool sess_unlink(struct serve *s, struct serve_session *ss)
{
	struct serve_session **pp;
	bool found = false;

	for (pp = &s->sessions->list; *pp; pp = &(*pp)->next)
		if (*pp == ss) {
			*pp = ss->next;
			found = true;
			break;
		}
	if (found) {
		ss->closing = true;
		s->sessions->count--;
	}
	return found;
}

void sess_close(struct serve *s, struct serve_session *ss, const char *why)
{
	pthread_mutex_lock(&s->sessions->mu);
	if (sess_unlink(s, ss))
		serve_info("nbrun: serve: session %s closed (%s)", ss->id, why);
	pthread_mutex_unlock(&s->sessions->mu);
	if (ss->busy)
		nbrun_session_interrupt(ss->ns);
}

struct serve_session *serve_session_open(struct serve *s, struct serve_reply *err, int tenant,
					 const char *owner, const struct serve_request *req,
					 uint64_t idle_ms, const volatile sig_atomic_t *cancel)
{
	struct nbrun_run_options opts = s->opts;
	struct nbrun_session *ns = NULL;
	struct nbrun_ctx *ctx = NULL;
	struct serve_session *ss = NULL;
	bool full;
	int rc;

	pthread_mutex_lock(&s->sessions->mu);
	full = s->sessions->count >= s->max_sessions || *s->stopping;
	if (!full)
		s->sessions->count++; /* reserved */
	pthread_mutex_unlock(&s->sessions->mu);
	if (full) {
		serve_reply_error(err, SERVE_E_BUSY, "%u sessions are open, the most this server keeps",
				  s->max_sessions);
		err->retry_after = 30;
		return NULL;
	}
	opts.files = (const char *const *)req->files;
	opts.file_count = req->file_count;
	opts.env = (const char *const *)req->env;
	opts.env_count = req->env_count;
	opts.pool = s->pool;
	opts.cancel = cancel ? cancel : s->stopping;
	opts.on_event = NULL;
	opts.language = req->language;
	serve_request_net(&opts, req);
	if (nbrun_ctx_new(&ctx) < 0)
		rc = NBRUN_ENOMEM;
	else
		rc = nbrun_session_open(&ns, ctx, &opts);
	if (rc == 0 && !(ss = calloc(1, sizeof(*ss))))
		rc = NBRUN_ENOMEM;
	if (rc == 0) {
		snprintf(ss->dir_name, sizeof(ss->dir_name), "%s", nbrun_session_id(ns));
		/* NODE~ID names the node of a cluster; a server with no node name
		 * (nbrun mcp) hands out the library's id alone. */
		if (s->node[0])
			snprintf(ss->id, sizeof(ss->id), "%s~%s", s->node, ss->dir_name);
		else
			snprintf(ss->id, sizeof(ss->id), "%s", ss->dir_name);
		snprintf(ss->owner, sizeof(ss->owner), "%s", owner ? owner : "");
		ss->ns = ns;
		ns = NULL;
		ss->tenant = tenant;
		ss->idle_ms = idle_ms;
		ss->language = req->language ? req->language : "python";
		ss->created_ms = ss->last_ms = clock_mono_ms();
		ss->refs = 1;
		ss->dir_fd = -1;
		if (mkdirat(s->sessions->dir_fd, ss->dir_name, 0700) < 0 ||
		    (ss->dir_fd = openat(s->sessions->dir_fd, ss->dir_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
		    asprintf(&ss->dir, "%s/%s", s->sessions->dir, ss->dir_name) < 0) {
			ss->dir = NULL;
			rc = NBRUN_EIO;
		}
	}
	if (rc == 0) {
		pthread_mutex_lock(&s->lock);
		s->m.sessions_opened++;
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_lock(&s->sessions->mu);
	if (rc == 0) {
		ss->next = s->sessions->list;
		s->sessions->list = ss;
	} else {
		s->sessions->count--;
	}
	pthread_mutex_unlock(&s->sessions->mu);
	if (rc < 0) {
		serve_reply_lib_error(err, rc,
				      rc == NBRUN_ENOMEM ? "out of memory"
				      : rc == NBRUN_EIO ? "cannot make the session's directory"
							: nbrun_ctx_errmsg(ctx),
				      "the session call");
		if (ss) {
			ss->closing = true;
			sess_destroy(s, ss);
		}
		ss = NULL;
	}
	nbrun_session_close(ns);
	nbrun_ctx_free(ctx);
	return ss;
}

int serve_session_execute(struct nbrun_result **out, struct serve *s, struct serve_session *ss,
			  const char *code, const struct nbrun_exec_options *eo)
{
	int rc = nbrun_session_execute(out, ss->ns, code, eo);

	ss->execs++; /* claimed: this request's alone */
	pthread_mutex_lock(&s->lock);
	s->m.session_execs++;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void serve_sessions_close_owner(struct serve *s, const char *owner)
{
	struct serve_session *ss, *next, *gone = NULL;

	if (!s->sessions || !owner || !*owner)
		return;
	pthread_mutex_lock(&s->sessions->mu);
	for (ss = s->sessions->list; ss; ss = next) {
		next = ss->next;
		if (strcmp(ss->owner, owner))
			continue;
		sess_unlink(s, ss);
		serve_info("nbrun: serve: session %s closed (its MCP session ended)", ss->id);
		if (ss->busy)
			nbrun_session_interrupt(ss->ns);
		if (!ss->refs) {
			ss->next = gone;
			gone = ss;
		}
	}
	pthread_mutex_unlock(&s->sessions->mu);
	while (gone) {
		next = gone->next;
		sess_destroy(s, gone);
		gone = next;
	}
}

static void *sess_reaper(void *arg)
{
	struct serve *s = arg;
	struct serve_sessions *t = s->sessions;

	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		uint64_t now = clock_mono_ms();
		struct serve_session *ss, *next, *gone = NULL;

		for (ss = t->list; ss; ss = next) {
			next = ss->next;
			if (ss->busy || ss->refs)
				continue;
			if (now - ss->last_ms >= ss->idle_ms || now - ss->created_ms >= s->session_life_ms) {
				serve_info("nbrun: serve: session %s closed (%s)", ss->id,
					now - ss->last_ms >= ss->idle_ms ? "idle timeout" : "lifetime over");
				sess_unlink(s, ss);
				ss->next = gone;
				gone = ss;
			}
		}
		if (gone) {
			pthread_mutex_unlock(&t->mu);
			while (gone) {
				next = gone->next;
				sess_destroy(s, gone);
				gone = next;
			}
			pthread_mutex_lock(&t->mu);
			continue;
		}
		clock_cond_wait_ms(&t->cond, &t->mu, SESSION_REAP_MS);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

int serve_sessions_start(struct serve *s)
{
	struct serve_sessions *t = calloc(1, sizeof(*t));

	if (!t || asprintf(&t->dir, "%s/sessions", s->state_dir) < 0) {
		free(t);
		serve_err("out of memory");
		return -1;
	}
	/* What a killed server left: its sessions died with it (nbrun gc and
	 * the pool remove their containers). */
	{
		int sfd = open(s->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sfd >= 0) {
			serve_rm_tree(sfd, "sessions");
			close(sfd);
		}
	}
	if (mkdir(t->dir, 0700) < 0 && errno != EEXIST) {
		serve_err("cannot create %s: %s", t->dir, strerror(errno));
		goto fail;
	}
	t->dir_fd = open(t->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (t->dir_fd < 0) {
		serve_err("cannot open %s: %s", t->dir, strerror(errno));
		goto fail;
	}
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cond, NULL);
	s->sessions = t;
	if (pthread_create(&t->reaper, NULL, sess_reaper, s) != 0) {
		serve_err("cannot start the session reaper");
		s->sessions = NULL;
		close(t->dir_fd);
		goto fail;
	}
	t->have_reaper = true;
	return 0;
fail:
	free(t->dir);
	free(t);
	return -1;
}

void serve_sessions_interrupt_all(struct serve *s)
{
	struct serve_session *ss;

	if (!s->sessions)
		return;
	pthread_mutex_lock(&s->sessions->mu);
	for (ss = s->sessions->list; ss; ss = ss->next)
		nbrun_session_interrupt(ss->ns);
	pthread_mutex_unlock(&s->sessions->mu);
}

void serve_sessions_stop(struct serve *s)
{
	struct serve_sessions *t = s->sessions;
	struct serve_session *ss, *next;

	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->mu);
	if (t->have_reaper)
		pthread_join(t->reaper, NULL);
	/* Connections are closed by now: nothing holds a session any more. */
	for (ss = t->list; ss; ss = next) {
		next = ss->next;
		serve_info("nbrun: serve: session %s closed (server stopping)", ss->id);
		sess_destroy(s, ss);
	}
	close(t->dir_fd);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cond);
	free(t->dir);
	free(t);
	s->sessions = NULL;
}
