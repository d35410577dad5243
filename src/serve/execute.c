/* SPDX-License-Identifier: MIT */
/* nbrun serve: the one place a run is executed, from the warm pool when there is one. */
#include <stdlib.h>

#include "clock.h"
#include "serve.h"

const struct serve_backend serve_library_backend = {
	.run_code = nbrun_run_code,
	.run_notebook = nbrun_run_notebook,
};

static const double serve_bucket_le[SERVE_BUCKETS] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5,
						       5,    10,  30,   60,  120, 300 };

static void serve_count(struct serve *s, int rc, const struct nbrun_result *res, uint64_t ms)
{
	enum serve_outcome o = SERVE_OUT_ABORTED;
	double secs = (double)ms / 1000.0;

	if (rc == 0 && res)
		o = (enum serve_outcome)nbrun_result_status(res);
	pthread_mutex_lock(&s->lock);
	s->m.runs[o]++;
	for (size_t i = 0; i < SERVE_BUCKETS; i++)
		if (secs <= serve_bucket_le[i]) {
			s->m.buckets[i]++;
			break;
		}
	s->m.duration_count++;
	s->m.duration_sum += secs;
	pthread_mutex_unlock(&s->lock);
}

const double *serve_buckets(void)
{
	return serve_bucket_le;
}

void serve_request_net(struct nbrun_run_options *opts, const struct serve_request *req)
{
	opts->allow_net = (const char *const *)req->allow_net;
	opts->allow_net_count = req->allow_net_count;
	if (!req->allow_net_count) {
		/* The server's CA bundle and byte cap are for requests that allow hosts. */
		opts->ca_certs = NULL;
		opts->net_bytes = 0;
	}
}

int serve_execute(struct nbrun_result **out, struct nbrun_ctx *ctx, struct serve *s,
		  const struct serve_request *req, const struct nbrun_run_options *opts)
{
	struct nbrun_run_options o = *opts;
	char *injected = NULL;
	size_t len = req->notebook_len;
	uint64_t t0 = clock_mono_ms();
	int rc;

	*out = NULL;
	o.pool = s->pool;
	opts = &o;
	if (req->notebook) {
		if (req->params) {
			rc = nbrun_notebook_inject_params(&injected, &len, ctx, req->notebook,
							  req->notebook_len, req->params);
			if (rc < 0)
				goto out;
		}
		rc = s->backend->run_notebook(out, ctx, injected ? injected : req->notebook, len, opts);
	} else {
		rc = s->backend->run_code(out, ctx, req->code, opts);
	}
	serve_count(s, rc, *out, clock_mono_ms() - t0);
out:
	free(injected);
	return rc;
}
