/* SPDX-License-Identifier: MIT */
/* What the server tells about itself: GET /v1/health and the Prometheus metrics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "sessions.h"

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
	reply->kind = SERVE_OK;
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
	unsigned int active, sessions = 0;
	uint64_t cum = 0;

	pthread_mutex_lock(&s->lock);
	m = s->m;
	active = s->runs_active;
	pthread_mutex_unlock(&s->lock);
	if (s->sessions) {
		pthread_mutex_lock(&s->sessions->mu);
		sessions = s->sessions->count;
		pthread_mutex_unlock(&s->sessions->mu);
	}
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
		       "nbrun_runs_active %u\n"
		       "# HELP nbrun_sessions_open Sessions open now, the HTTP API's and the MCP tools'.\n"
		       "# TYPE nbrun_sessions_open gauge\n"
		       "nbrun_sessions_open %u\n"
		       "# HELP nbrun_sessions_opened_total Sessions opened.\n"
		       "# TYPE nbrun_sessions_opened_total counter\n"
		       "nbrun_sessions_opened_total %llu\n"
		       "# HELP nbrun_session_executions_total Executions in sessions.\n"
		       "# TYPE nbrun_session_executions_total counter\n"
		       "nbrun_session_executions_total %llu\n",
		   (unsigned long long)m.duration_count, m.duration_sum,
		   (unsigned long long)m.duration_count, active, sessions,
		   (unsigned long long)m.sessions_opened, (unsigned long long)m.session_execs);
	return buf_steal(&b);
}
