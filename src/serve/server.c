/* SPDX-License-Identifier: MIT */
/* The server as a whole: its languages, its warm pool, the engine check, and
 * waiting for its work to end. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "buf.h"
#include "path.h"
#include "units.h"
#include "serve.h"
#include "text.h"

void serve_wait_idle(struct serve *s, uint64_t ms)
{
	uint64_t until = clock_mono_ms() + ms;

	pthread_mutex_lock(&s->lock);
	while ((s->runs_active || s->posts_open) && clock_mono_ms() < until) {
		clock_cond_wait_ms(&s->idle, &s->lock, 200);
	}
	pthread_mutex_unlock(&s->lock);
}

void serve_pool_args_init(struct serve_pool_args *a, unsigned int python)
{
	memset(a, 0, sizeof(*a));
	a->langs[0].language = "python";
	a->langs[0].size = python;
	a->n = 1;
}

int serve_pool_arg(struct serve_pool_args *a, const char *arg, const char *prog)
{
	const char *eq = strchr(arg, '='), *num = eq ? eq + 1 : arg, *canon = "python";
	char name[32];
	int64_t n;
	size_t i;

	if (strcmp(num, "0") && (units_parse_count(&n, num) < 0 || n > 64))
		return serve_usage_err(prog, "--pool: '%s' is not N or LANG=N, N a whole number from 0 to 64",
				       arg), -1;
	if (!strcmp(num, "0"))
		n = 0;
	if (eq) {
		snprintf(name, sizeof(name), "%.*s", (int)(eq - arg < 31 ? eq - arg : 31), arg);
		canon = nbrun_language_name(name);
		if (!canon) {
			/* Said once the image's languages are known, as for a request. */
			if (!a->unknown)
				a->unknown = arg;
			return 0;
		}
	}
	for (i = 0; i < a->n && strcmp(a->langs[i].language, canon); i++)
		;
	if (i == SERVE_POOL_LANGUAGES)
		return serve_usage_err(prog, "--pool: too many languages"), -1;
	if (i == a->n)
		a->n++;
	a->langs[i].language = canon;
	a->langs[i].size = (unsigned int)n;
	return 0;
}

int serve_pool_check(struct serve_pool_args *a, struct serve *s, const char *prog)
{
	char why[256], name[32];
	unsigned int total = 0;
	size_t k = 0;

	if (a->unknown) {
		snprintf(name, sizeof(name), "%.*s", (int)(strchr(a->unknown, '=') - a->unknown), a->unknown);
		serve_language(s, name, why, sizeof(why));
		return serve_usage_err(prog, "--pool: %s", why), -1;
	}
	for (size_t i = 0; i < a->n; i++) {
		if (!a->langs[i].size)
			continue;
		if (!serve_language(s, a->langs[i].language, why, sizeof(why)))
			return serve_usage_err(prog, "--pool: %s", why), -1;
		total += a->langs[i].size;
		a->langs[k++] = a->langs[i]; /* only the languages with sandboxes */
	}
	a->n = k;
	if (total > 64)
		return serve_usage_err(prog, "--pool: %u warm sandboxes in all; at most 64", total), -1;
	s->pool_size = total;
	return 0;
}

void serve_pool_options(struct nbrun_pool_options *po, const struct serve_pool_args *a,
			const struct nbrun_run_options *ro)
{
	po->run = ro;
	po->languages = a->langs;
	po->language_count = a->n;
}

/*
 * What a pool sandbox is made with: the server's run limits, no environment
 * and no way out (a sandbox starts before its run; runs with hosts start
 * their own).
 */
static struct nbrun_run_options serve_pool_run_options(const struct serve *s)
{
	struct nbrun_run_options ro = s->opts;

	ro.env = NULL;
	ro.env_count = 0;
	ro.allow_net = NULL;
	ro.allow_net_count = 0;
	ro.ca_certs = NULL;
	ro.net_bytes = 0;
	return ro;
}

/* The warm pool of nbrun serve: a failure is the command's. */
int serve_start_pool(struct serve *s, const struct serve_pool_args *pa)
{
	struct nbrun_pool_options po = NBRUN_POOL_OPTIONS_INIT;
	struct nbrun_run_options ro = serve_pool_run_options(s);
	struct nbrun_ctx *ctx = NULL;
	int rc;

	if (nbrun_ctx_new(&ctx) < 0) {
		serve_err("out of memory");
		return -1;
	}
	serve_pool_options(&po, pa, &ro);
	rc = nbrun_pool_new(&s->pool, ctx, &po);
	if (rc < 0)
		serve_err("cannot start the warm pool: %s", nbrun_ctx_errmsg(ctx));
	nbrun_ctx_free(ctx);
	return rc < 0 ? -1 : 0;
}

/*
 * The engine before anything is made: a server that could run nothing says
 * why in one line and exits 4, as a run would. What killed runs and servers
 * of this host left (their pid is gone) is removed here, pool or not.
 */
int serve_check_engine(void)
{
	struct nbrun_ctx *ctx = NULL;
	unsigned int removed = 0, failed = 0;
	int rc;

	if (nbrun_ctx_new(&ctx) < 0) {
		serve_err("out of memory");
		return -1;
	}
	rc = nbrun_gc(&removed, &failed, ctx, 0);
	if (rc < 0 && !failed)
		serve_err("%s", nbrun_ctx_errmsg(ctx));
	else if (rc < 0)
		fprintf(stderr, "nbrun: serve: warning: %u leftovers of killed runs not removed: %s\n",
			failed, nbrun_ctx_errmsg(ctx));
	if (removed)
		fprintf(stderr, "nbrun: serve: removed %u containers and volumes of killed runs\n", removed);
	nbrun_ctx_free(ctx);
	return rc < 0 && !failed ? -1 : 0;
}

int mcp_open_state(struct serve *s, const char *dir)
{
	const char *tmpdir = getenv("TMPDIR");
	char *tmp = NULL;
	int rc = -1;

	s->state_temp = !dir;
	if (!dir) {
		if (asprintf(&s->state_dir, "%s/nbrun-mcp-XXXXXX", tmpdir && *tmpdir == '/' ? tmpdir : "/tmp") < 0 ||
		    !mkdtemp(s->state_dir)) {
			serve_err("cannot make a temporary directory: %s", strerror(errno));
			s->state_temp = false;
			goto out;
		}
	} else if (!(s->state_dir = realpath(dir, NULL)) && (path_mkdir_p(dir, 0700) < 0 ||
							     !(s->state_dir = realpath(dir, NULL)))) {
		serve_err("cannot use the state directory %s: %s", dir, strerror(errno));
		goto out;
	}
	if (asprintf(&s->runs_dir, "%s/runs", s->state_dir) < 0 ||
	    asprintf(&tmp, "%s/tmp", s->state_dir) < 0) {
		s->runs_dir = tmp = NULL;
		serve_err("out of memory");
		goto out;
	}
	if (path_mkdir_p(s->runs_dir, 0700) < 0 || path_mkdir_p(tmp, 0700) < 0 ||
	    (s->runs_fd = open(s->runs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		serve_err("cannot make %s: %s", s->runs_dir, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(tmp);
	return rc;
}

static void serve_remove_state(struct serve *s)
{
	char *slash = s->state_dir ? strrchr(s->state_dir, '/') : NULL;
	int fd;

	if (!slash)
		return;
	*slash = '\0';
	fd = open(*s->state_dir ? s->state_dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		serve_rm_tree(fd, slash + 1);
		close(fd);
	}
	*slash = '/';
}

struct serve *serve_new(volatile sig_atomic_t *stopping)
{
	static const struct nbrun_run_options run_defaults = NBRUN_RUN_OPTIONS_INIT;
	struct serve *s = calloc(1, sizeof(*s));
	long cores = sysconf(_SC_NPROCESSORS_ONLN);

	if (!s)
		return NULL;
	s->opts = run_defaults;
	s->backend = &serve_library_backend;
	s->runs_fd = -1;
	s->stopping = stopping;
	s->max_runs = (unsigned int)(cores > 0 ? cores * 2 : 2);
	s->keep_runs = SERVE_DEFAULT_KEEP;
	s->retention_ms = SERVE_DEFAULT_RETENTION_MS;
	s->max_sessions = SERVE_DEFAULT_MAX_SESSIONS;
	s->session_idle_ms = SERVE_DEFAULT_SESSION_IDLE_MS;
	s->session_life_ms = SERVE_DEFAULT_SESSION_LIFE_MS;
	s->conn_timeout_s = SERVE_CONN_TIMEOUT_S;
	s->max_conns = SERVE_CONN_LIMIT;
	s->max_conns_per_ip = SERVE_CONN_PER_IP;
	s->auth_failures = SERVE_AUTH_FAILURES;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->idle, NULL);
	return s;
}

int serve_allow_origin(struct serve *s, const char *origin, const char *prog)
{
	const char *rest = strstr(origin, "://");
	size_t n = strlen(origin);
	char **more;

	while (n && origin[n - 1] == '/')
		n--;
	if (!rest || rest == origin || !rest[3] || memchr(rest + 3, '/', n - (size_t)(rest + 3 - origin)) ||
	    n > 255 || strcspn(origin, " \t\r\n,") < n)
		return serve_usage_err(prog, "--allow-origin: '%.80s' is not an origin (scheme://host[:port])",
				       origin), -1;
	more = realloc(s->allow_origins, (s->n_allow_origins + 1) * sizeof(*more));
	if (!more || !(more[s->n_allow_origins] = strndup(origin, n))) {
		if (more)
			s->allow_origins = more;
		return serve_err("out of memory"), -1;
	}
	s->allow_origins = more;
	s->n_allow_origins++;
	return 0;
}

int serve_run_options(struct serve *s, const struct nbrun_run_options *o, const char *prog)
{
	const char *const *rules = o->allow_net;
	size_t n = o->allow_net_count;
	char why[256];

	s->opts = *o;
	s->opts.files = NULL;
	s->opts.file_count = 0;
	s->opts.allow_net = NULL;
	s->opts.allow_net_count = 0;
	free(s->net_ceiling);
	s->net_ceiling = NULL;
	s->n_net_ceiling = 0;
	if (!n)
		return 0;
	s->net_ceiling = calloc(n, sizeof(*s->net_ceiling));
	if (!s->net_ceiling)
		return serve_err("out of memory"), -1;
	for (size_t i = 0; i < n; i++)
		if (netrule_parse(&s->net_ceiling[i], rules[i], why, sizeof(why)) < 0)
			return serve_usage_err(prog, "--allow-net: %s", why), -1;
	s->n_net_ceiling = n;
	return 0;
}

void serve_free(struct serve *s)
{
	if (!s)
		return;
	free(s->net_ceiling);
	for (size_t i = 0; i < s->n_allow_origins; i++)
		free(s->allow_origins[i]);
	free(s->allow_origins);
	/* Every session's sandbox is removed before the server exits. */
	serve_sessions_stop(s);
	serve_idem_free(s);
	for (size_t i = 0; i < s->n_tenant_tokens; i++)
		free(s->tenant_tokens[i]);
	free(s->tenant_tokens);
	/* Every warm sandbox is removed before the server exits. */
	nbrun_pool_free(s->pool);
	/* The egress proxy goes with the last sandbox that needed it. */
	if (s->n_net_ceiling) {
		struct nbrun_ctx *ctx = NULL;
		if (nbrun_ctx_new(&ctx) == 0 && nbrun_egress_release(ctx) < 0)
			serve_err("%s", nbrun_ctx_errmsg(ctx));
		nbrun_ctx_free(ctx);
	}
	if (s->runs_fd >= 0)
		close(s->runs_fd);
	if (s->state_temp)
		serve_remove_state(s);
	free(s->state_dir);
	free(s->runs_dir);
	free(s->languages);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->idle);
	free(s);
}

void mcp_start_pool(struct serve *s, const struct serve_pool_args *pa)
{
	struct nbrun_pool_options po = NBRUN_POOL_OPTIONS_INIT;
	struct nbrun_run_options ro = serve_pool_run_options(s);
	struct nbrun_ctx *ctx = NULL;

	if (nbrun_ctx_new(&ctx) < 0)
		return;
	serve_pool_options(&po, pa, &ro);
	/* Without a pool every call starts cold, and says why it cannot when the engine is down. */
	if (nbrun_pool_new(&s->pool, ctx, &po) < 0)
		fprintf(stderr, "nbrun: mcp: no warm pool (%s); calls start their own sandbox\n",
			nbrun_ctx_errmsg(ctx));
	nbrun_ctx_free(ctx);
}

int serve_languages_init(struct serve *s, const char *prog)
{
	struct nbrun_ctx *ctx = NULL;

	if (nbrun_ctx_new(&ctx) < 0)
		return -1;
	if (nbrun_image_languages(&s->languages, ctx, s->opts.image) < 0) {
		serve_info("nbrun: %s: cannot read the image's kernels (%s); only python is offered",
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
