/* SPDX-License-Identifier: MIT */
/*
 * The warm pool: sandboxes created, started and with their kernel ready
 * before a run needs them. A filler thread keeps `size` of them ready (a
 * leased one counts until its run ends, so that its replacement does not
 * start while it runs); a reaper thread removes used ones, off the runs'
 * critical path. A sandbox serves one run and is never handed to another.
 * The pool keeps a queue per language (Python only, unless asked): one
 * filler serves them in turn, so the threads stay two however many.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "nbrun-private.h"
#include "text.h"

#define POOL_MAX_SIZE 64
/* A sandbox whose kernel is not ready by then (or by the runs' timeout, when
 * longer: a gVisor sandbox starts several times slower) is given up. */
#define POOL_READY_TIMEOUT_MS 60000
/* A queue's back-off after a failed start, doubling up to the maximum. */
#define POOL_BACKOFF_MIN_MS 500
#define POOL_BACKOFF_MAX_MS 30000

struct pool_item {
	struct nbrun__sandbox *sb;
	struct pool_item *next;
};

/* One language's sandboxes: its kernel (and, for Python, the preload). */
struct pool_queue {
	const struct nbrun__language *lang;
	unsigned int size;
	struct nbrun__sandbox_spec spec;
	struct pool_item *ready;      /* LIFO: the newest is the warmest */
	unsigned int n_ready, n_starting;
	unsigned int n_leased;        /* taken by runs that have not ended yet */
	uint64_t hits, misses, failures;
	/* After a failed start the queue waits backoff_ms (doubling) before
	 * its next try, alone: another language's successes do not shorten it. */
	unsigned int backoff_ms;
	uint64_t retry_at_ms;         /* monotonic; 0: may start now */
};

struct nbrun_pool {
	pthread_mutex_t mu;
	pthread_cond_t cond;          /* filler: room or stop; reaper: work or stop */
	bool stop;
	/* raised with stop: a sandbox being made gives up at once (a gVisor
	 * one may otherwise take its whole ready wait) */
	volatile sig_atomic_t cancel;
	struct nbrun_run_options run; /* the sandboxes' limits (strings copied below) */
	char *image, *network, *preload, *runtime;
	struct pool_queue *q;
	size_t n_q;
	size_t turn;                  /* the queue the filler looks at first */
	struct pool_item *dead;       /* to remove */
	bool reaper_busy;
	char last_error[256];
	const struct pool_queue *error_q; /* the queue last_error is about */
	pthread_t filler, reaper;
	bool have_filler, have_reaper;
};

/* Make one ready sandbox; NULL with the reason in ctx. */
static struct nbrun__sandbox *pool_make(struct nbrun_pool *p, const struct pool_queue *q,
					struct nbrun_ctx *ctx)
{
	struct nbrun__sandbox *sb = NULL;
	int rc;

	rc = nbrun__sandbox_new(&sb, ctx, NBRUN__SANDBOX_DEFAULT, NULL);
	if (rc == 0) {
		nbrun__sandbox_bind(sb, ctx, &p->cancel);
		rc = sb->ops->create(sb, &q->spec);
	}
	if (rc == 0)
		rc = sb->ops->start(sb);
	if (rc == 0)
		rc = nbrun__sandbox_wait_ready(sb, clock_mono_ms() + (p->run.timeout_ms > POOL_READY_TIMEOUT_MS
									       ? p->run.timeout_ms
									       : POOL_READY_TIMEOUT_MS));
	if (rc < 0) {
		nbrun__sandbox_free(sb);
		return NULL;
	}
	return sb;
}

static void pool_sleep_ms(struct nbrun_pool *p, unsigned int ms)
{
	clock_cond_wait_ms(&p->cond, &p->mu, ms);
}

/* The next queue short of its size and not backing off, taken in turn so
 * that one language's refills do not starve another's; NULL when there is
 * none, with *wait_ms the time until a backing-off one may try again (0:
 * none backs off, wait for room). */
static struct pool_queue *pool_next_short(struct nbrun_pool *p, unsigned int *wait_ms)
{
	uint64_t now = clock_mono_ms();

	*wait_ms = 0;
	for (size_t i = 0; i < p->n_q; i++) {
		size_t k = (p->turn + i) % p->n_q;
		struct pool_queue *q = &p->q[k];

		/* A leased sandbox keeps its place until its run ends: starting its
		 * replacement at once would compete with that run for the CPU. */
		if (q->n_ready + q->n_starting + q->n_leased >= q->size)
			continue;
		if (q->retry_at_ms > now) {
			uint64_t w = q->retry_at_ms - now;

			if (!*wait_ms || w < *wait_ms)
				*wait_ms = (unsigned int)w;
			continue;
		}
		p->turn = (k + 1) % p->n_q;
		return q;
	}
	return NULL;
}

/* A start of q failed: say why in health, and pause q (only) for longer. */
static void pool_failed(struct nbrun_pool *p, struct pool_queue *q, struct nbrun_ctx *ctx)
{
	bool python = q->lang == nbrun__language_default();

	q->failures++;
	/* Python's as always; another language's names it. */
	snprintf(p->last_error, sizeof(p->last_error), "%s%s%s", python ? "" : q->lang->name,
		 python ? "" : ": ", nbrun_ctx_errmsg(ctx));
	p->error_q = q;
	q->backoff_ms = q->backoff_ms ? q->backoff_ms * 2 : POOL_BACKOFF_MIN_MS;
	if (q->backoff_ms > POOL_BACKOFF_MAX_MS)
		q->backoff_ms = POOL_BACKOFF_MAX_MS;
	q->retry_at_ms = clock_mono_ms() + q->backoff_ms;
}

/* A start of q worked: its pause ends, and its error (not another's) clears. */
static void pool_succeeded(struct nbrun_pool *p, struct pool_queue *q)
{
	q->backoff_ms = 0;
	q->retry_at_ms = 0;
	if (p->error_q == q) {
		p->last_error[0] = '\0';
		p->error_q = NULL;
	}
}

static void *pool_filler(void *arg)
{
	struct nbrun_pool *p = arg;
	struct nbrun_ctx *ctx = NULL;

	if (nbrun_ctx_new(&ctx) < 0)
		return NULL;
	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		unsigned int wait_ms;
		struct pool_queue *q = pool_next_short(p, &wait_ms);
		struct nbrun__sandbox *sb;

		if (!q) {
			if (wait_ms)
				pool_sleep_ms(p, wait_ms);
			else
				pthread_cond_wait(&p->cond, &p->mu);
			continue;
		}
		q->n_starting++;
		pthread_mutex_unlock(&p->mu);
		sb = pool_make(p, q, ctx);
		pthread_mutex_lock(&p->mu);
		q->n_starting--;
		if (!sb) {
			pool_failed(p, q, ctx);
			continue;
		}
		pool_succeeded(p, q);
		{
			struct pool_item *it = malloc(sizeof(*it));
			if (!it || p->stop) {
				free(it);
				pthread_mutex_unlock(&p->mu);
				nbrun__sandbox_free(sb);
				pthread_mutex_lock(&p->mu);
				continue;
			}
			it->sb = sb;
			it->next = q->ready;
			q->ready = it;
			q->n_ready++;
		}
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->mu);
	nbrun_ctx_free(ctx);
	return NULL;
}

static void *pool_reaper(void *arg)
{
	struct nbrun_pool *p = arg;
	struct nbrun_ctx *ctx = NULL;

	if (nbrun_ctx_new(&ctx) < 0)
		return NULL;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		struct pool_item *it = p->dead;

		if (!it) {
			if (p->stop)
				break;
			pthread_cond_wait(&p->cond, &p->mu);
			continue;
		}
		p->dead = it->next;
		p->reaper_busy = true;
		pthread_mutex_unlock(&p->mu);
		nbrun__sandbox_bind(it->sb, ctx, NULL);
		nbrun__sandbox_free(it->sb);
		free(it);
		pthread_mutex_lock(&p->mu);
		p->reaper_busy = false;
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->mu);
	nbrun_ctx_free(ctx);
	return NULL;
}

static bool pool_str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

/* A run that the pool's sandboxes fit: the same image, limits and network, no environment. */
static bool pool_fits(const struct nbrun_pool *p, const struct nbrun_run_options *o)
{
	const char *const *rules; /* a run with an allow-list starts its own sandbox */

	/* p->run.image is NULL when the pool took the default image, as such runs do. */
	return pool_str_eq(p->run.image, o->image) && p->run.memory_bytes == o->memory_bytes &&
	       p->run.nano_cpus == o->nano_cpus && p->run.pids == o->pids &&
	       p->run.disk_bytes == o->disk_bytes && pool_str_eq(p->network, o->network) &&
	       pool_str_eq(p->runtime, nbrun__run_runtime(o)) && o->env_count == 0 &&
	       nbrun__run_allow_net(o, &rules) == 0;
}

static struct pool_queue *pool_queue_of(struct nbrun_pool *p, const struct nbrun__language *lang)
{
	for (size_t i = 0; i < p->n_q; i++)
		if (p->q[i].lang == lang)
			return &p->q[i];
	return NULL;
}

struct nbrun__sandbox *nbrun__pool_lease(struct nbrun_pool *p, struct nbrun_ctx *ctx,
					 const struct nbrun_run_options *o,
					 const struct nbrun__language *lang)
{
	struct nbrun__sandbox *sb = NULL;
	struct pool_queue *q = pool_queue_of(p, lang);

	/* A language the pool keeps none of starts cold, as without a pool. */
	if (!q)
		return NULL;
	pthread_mutex_lock(&p->mu);
	if (pool_fits(p, o)) {
		while (q->ready && !sb) {
			struct pool_item *it = q->ready;
			q->ready = it->next;
			q->n_ready--;
			/* A ready agent says nothing unasked: anything else (an
			 * engine restart, a dead agent) sends it to the reaper. */
			if (nbrun__sandbox_idle(it->sb)) {
				sb = it->sb;
				free(it);
			} else {
				it->next = p->dead;
				p->dead = it;
			}
		}
	}
	if (sb) {
		q->hits++;
		q->n_leased++;
	} else {
		q->misses++;
	}
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
	if (sb)
		nbrun__sandbox_bind(sb, ctx, o->cancel);
	return sb;
}

void nbrun__pool_discard(struct nbrun_pool *p, struct nbrun__sandbox *sb,
			 const struct nbrun__language *leased)
{
	struct pool_item *it;
	struct pool_queue *q = leased ? pool_queue_of(p, leased) : NULL;

	if (q) {
		/* Its run is over: the filler may start its replacement now. */
		pthread_mutex_lock(&p->mu);
		q->n_leased--;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->mu);
	}
	if (!sb)
		return;
	it = malloc(sizeof(*it));
	if (!it) {
		nbrun__sandbox_free(sb); /* no memory for the queue: remove it here */
		return;
	}
	/* The reaper's thread uses it from now on. */
	nbrun__sandbox_bind(sb, NULL, NULL);
	it->sb = sb;
	pthread_mutex_lock(&p->mu);
	it->next = p->dead;
	p->dead = it;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
}

/* The languages of version 2 options; 0: Python only, of o->size. */
static size_t pool_language_count(const struct nbrun_pool_options *o)
{
	return o->version >= 2 && o->languages ? o->language_count : 0;
}

static int pool_check_languages(struct nbrun_ctx *ctx, const struct nbrun_pool_options *o,
				unsigned int *total)
{
	size_t n = pool_language_count(o);

	/* An empty list is a mistake, not a request for Python's default. */
	if (o->version >= 2 && o->languages && !o->language_count)
		return nbrun__err(ctx, NBRUN_EINVAL, "the pool's languages are given but none is named");
	*total = n ? 0 : o->size;
	for (size_t i = 0; i < n; i++) {
		const struct nbrun_pool_language *pl = &o->languages[i];
		const struct nbrun__language *l = pl->language ? nbrun__language_find(pl->language) : NULL;

		if (!l)
			return nbrun__err(ctx, NBRUN_EINVAL, "unknown language '%.64s' for the pool; languages: %s",
					  pl->language ? pl->language : "(null)", nbrun__language_names());
		for (size_t j = 0; j < i; j++)
			if (nbrun__language_find(o->languages[j].language) == l)
				return nbrun__err(ctx, NBRUN_EINVAL, "the pool names %s twice", l->name);
		if (pl->size < 1 || pl->size > POOL_MAX_SIZE)
			return nbrun__err(ctx, NBRUN_EINVAL, "the pool's %s size must be between 1 and %d",
					  l->name, POOL_MAX_SIZE);
		*total += pl->size;
	}
	return 0;
}

static int pool_check(struct nbrun_ctx *ctx, const struct nbrun_pool_options *o)
{
	unsigned int total;
	int rc;

	rc = nbrun__options_version(ctx, "pool", o ? &o->version : NULL, NBRUN_POOL_OPTIONS_VERSION);
	if (rc < 0)
		return rc;
	rc = pool_check_languages(ctx, o, &total);
	if (rc < 0)
		return rc;
	if (total < 1 || total > POOL_MAX_SIZE)
		return nbrun__err(ctx, NBRUN_EINVAL, "pool size must be between 1 and %d%s", POOL_MAX_SIZE,
				  pool_language_count(o) ? " over all languages" : "");
	if (o->preload && strspn(o->preload, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,") !=
			      strlen(o->preload))
		return nbrun__err(ctx, NBRUN_EINVAL, "preload must be a comma-separated list of module names");
	if (o->run && o->run->env_count)
		return nbrun__err(ctx, NBRUN_EINVAL, "a pool's sandboxes take no environment");
	return o->run ? nbrun__run_check_options(ctx, o->run) : 0;
}

/* One queue per language asked for (checked), Python's alone when none. */
static int pool_queues_new(struct nbrun_pool *p, struct nbrun_ctx *ctx, const struct nbrun_pool_options *o)
{
	size_t n = pool_language_count(o);

	p->q = calloc(n ? n : 1, sizeof(*p->q));
	if (!p->q)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	p->n_q = n ? n : 1;
	if (!n) {
		p->q[0].lang = nbrun__language_default();
		p->q[0].size = o->size;
	}
	for (size_t i = 0; i < n; i++) {
		p->q[i].lang = nbrun__language_find(o->languages[i].language);
		p->q[i].size = o->languages[i].size;
	}
	return 0;
}

/* Every language of the pool has its kernel in the (resolved) image. */
static int pool_check_kernels(struct nbrun_pool *p, struct nbrun_ctx *ctx)
{
	char *have = NULL;
	int rc = 0;

	if (p->n_q == 1 && p->q[0].lang == nbrun__language_default())
		return 0;
	rc = nbrun_image_languages(&have, ctx, p->image);
	for (size_t i = 0; rc == 0 && i < p->n_q; i++)
		if (!text_has_word(have, p->q[i].lang->name))
			rc = nbrun__err(ctx, NBRUN_EINVAL, "the image %s has no %s kernel; its languages: %s",
					p->image, p->q[i].lang->name, have);
	free(have);
	return rc;
}

/* Each queue's sandbox: the runs' own, its language's kernel, the preload for Python only. */
static void pool_queues_spec(struct nbrun_pool *p)
{
	for (size_t i = 0; i < p->n_q; i++) {
		struct pool_queue *q = &p->q[i];

		nbrun__run_sandbox_spec(&q->spec, &p->run);
		q->spec.image = p->image;
		/* Python's sandboxes are made as they always were: the agent's default kernel. */
		q->spec.kernel = q->lang == nbrun__language_default() ? NULL : q->lang->kernel;
		q->spec.preload = q->lang == nbrun__language_default() ? p->preload : NULL;
	}
}

NBRUN_EXPORT int nbrun_pool_new(struct nbrun_pool **out, struct nbrun_ctx *ctx,
				const struct nbrun_pool_options *opts)
{
	static const struct nbrun_run_options defaults = NBRUN_RUN_OPTIONS_INIT;
	struct nbrun_pool *p;
	struct nbrun__sandbox *probe = NULL;
	int rc;

	*out = NULL;
	rc = pool_check(ctx, opts);
	if (rc < 0)
		return rc;
	p = calloc(1, sizeof(*p));
	if (!p)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->run = opts->run ? *opts->run : defaults;
	p->image = p->run.image ? strdup(p->run.image) : NULL;
	p->network = strdup(p->run.network);
	p->preload = opts->preload && *opts->preload ? strdup(opts->preload) : NULL;
	p->runtime = nbrun__run_runtime(&p->run) ? strdup(nbrun__run_runtime(&p->run)) : NULL;
	if ((p->run.image && !p->image) || !p->network ||
	    (opts->preload && *opts->preload && !p->preload) ||
	    (nbrun__run_runtime(&p->run) && !p->runtime)) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		goto fail;
	}
	rc = pool_queues_new(p, ctx, opts);
	if (rc < 0)
		goto fail;
	p->run.image = p->image;
	p->run.network = p->network;
	if (p->run.version >= 6)
		p->run.runtime = p->runtime;
	/* Fail now, clearly, when there is no engine or no image; and remove
	 * what killed processes of this host left behind. */
	rc = nbrun__sandbox_new(&probe, ctx, NBRUN__SANDBOX_DEFAULT, NULL);
	if (rc == 0) {
		probe->ops->gc(probe);
		rc = probe->ops->resolve_image(probe, p->image);
	}
	/* An engine without the runtime: said now, not by every sandbox. */
	if (rc == 0 && p->runtime)
		rc = probe->ops->check_runtime ? probe->ops->check_runtime(probe, p->runtime)
					       : nbrun__err(ctx, NBRUN_EINVAL, "the sandbox backend takes no runtime");
	if (rc == 0 && !p->image) {
		/* The default resolved to a tag: every sandbox uses that one. */
		p->image = probe->image;
		probe->image = NULL;
		p->run.image = NULL; /* runs asking for the default still fit */
	}
	nbrun__sandbox_free(probe);
	if (rc == 0)
		rc = pool_check_kernels(p, ctx);
	if (rc < 0)
		goto fail;
	/* The runs' own sandbox, plus the preload (a pool takes no env). */
	pool_queues_spec(p);
	if (pthread_create(&p->reaper, NULL, pool_reaper, p) != 0) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "cannot start the pool's threads");
		goto fail;
	}
	p->have_reaper = true;
	if (pthread_create(&p->filler, NULL, pool_filler, p) != 0) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "cannot start the pool's threads");
		goto fail;
	}
	p->have_filler = true;
	*out = p;
	return 0;
fail:
	nbrun_pool_free(p);
	return rc;
}

NBRUN_EXPORT void nbrun_pool_free(struct nbrun_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	p->cancel = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
	if (p->have_filler)
		pthread_join(p->filler, NULL);
	/* The filler is gone: hand what is ready to the reaper, then wait. */
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < p->n_q; i++) {
		struct pool_queue *q = &p->q[i];

		while (q->ready) {
			struct pool_item *it = q->ready;
			q->ready = it->next;
			it->next = p->dead;
			p->dead = it;
		}
		q->n_ready = 0;
	}
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
	if (p->have_reaper)
		pthread_join(p->reaper, NULL);
	/* The reaper may have stopped before the last ones were queued. */
	if (p->dead) {
		struct nbrun_ctx *ctx = NULL;
		nbrun_ctx_new(&ctx);
		while (p->dead) {
			struct pool_item *it = p->dead;
			p->dead = it->next;
			nbrun__sandbox_bind(it->sb, ctx, NULL);
			nbrun__sandbox_free(it->sb);
			free(it);
		}
		nbrun_ctx_free(ctx);
	}
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->mu);
	free(p->q);
	free(p->image);
	free(p->network);
	free(p->preload);
	free(p->runtime);
	free(p);
}

static void pool_queue_add_stats(struct nbrun_pool_stats *out, const struct pool_queue *q)
{
	out->size += q->size;
	out->ready += q->n_ready;
	out->starting += q->n_starting;
	out->hits += q->hits;
	out->misses += q->misses;
	out->failures += q->failures;
}

NBRUN_EXPORT int nbrun_pool_stats(struct nbrun_pool_stats *out, struct nbrun_pool *p)
{
	if (!out || !p)
		return NBRUN_EINVAL;
	*out = (struct nbrun_pool_stats){ 0, 0, 0, 0, 0, 0 };
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < p->n_q; i++)
		pool_queue_add_stats(out, &p->q[i]);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

NBRUN_EXPORT int nbrun_pool_language_stats(struct nbrun_pool_stats *out, struct nbrun_pool *p,
					   const char *language)
{
	const struct nbrun__language *l = language ? nbrun__language_find(language) : NULL;
	struct pool_queue *q;

	if (!out || !p || !l)
		return NBRUN_EINVAL;
	q = pool_queue_of(p, l);
	if (!q)
		return NBRUN_ENOTFOUND;
	*out = (struct nbrun_pool_stats){ 0, 0, 0, 0, 0, 0 };
	pthread_mutex_lock(&p->mu);
	pool_queue_add_stats(out, q);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

NBRUN_EXPORT int nbrun_pool_last_error(char *buf, size_t len, struct nbrun_pool *p)
{
	if (!buf || !len || !p)
		return NBRUN_EINVAL;
	pthread_mutex_lock(&p->mu);
	snprintf(buf, len, "%s", p->last_error);
	pthread_mutex_unlock(&p->mu);
	return 0;
}
