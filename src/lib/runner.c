/* SPDX-License-Identifier: MIT */
/*
 * A one-shot run: a fresh sandbox, one job in it, and its removal whatever
 * happened. The options are checked and the output directory claimed before
 * anything starts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "nbrun-private.h"
#include "path.h"
#include "text.h"

struct run {
	struct nbrun_ctx *ctx;
	const struct nbrun_run_options *opts;
	struct nbrun__sandbox *sb;
	struct nbrun__job job;
	char id[16];            /* names the run, its sandbox and output directory */
	char *out_dir;          /* absolute */
	int out_fd;
	uint64_t t0_ms;
	bool warm;              /* the sandbox came ready from a pool */
	bool leased;            /* ... and has not been handed back yet */
	const struct nbrun__language *lang;
};

static void run_progress(struct run *r, enum nbrun_phase phase)
{
	if (r->opts->progress)
		r->opts->progress(phase, r->opts->payload);
}

static bool run_cancelled(const struct run *r)
{
	return r->opts->cancel && *r->opts->cancel;
}

static struct nbrun_pool *run_pool(const struct nbrun_run_options *o)
{
	return o->version >= 2 ? o->pool : NULL;
}

/* ---- the run ------------------------------------------------------------------ */

static void run_finish_result(struct run *r)
{
	char *nb_path = NULL;
	json_t *doc = r->job.result->doc;
	struct stat st;

	json_object_set_new(doc, "duration_ms", json_integer((json_int_t)(clock_mono_ms() - r->t0_ms)));
	json_object_set_new(doc, "out_dir", json_string(r->out_dir));
	if (r->warm)
		json_object_set_new(doc, "warm", json_true());
	/* Only a runtime asked for is named: it was checked when the sandbox started. */
	if (nbrun__run_runtime(r->opts))
		json_object_set_new(doc, "runtime", json_string(nbrun__run_runtime(r->opts)));
	if (fstatat(r->out_fd, "notebook.ipynb", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    asprintf(&nb_path, "%s/notebook.ipynb", r->out_dir) >= 0) {
		json_object_set_new(doc, "notebook", json_string(nb_path));
		free(nb_path);
	}
}

/* What the run's connections did, when it has an allow-list: the result's "network". */
static void run_net_report(struct run *r)
{
	const char *const *rules;
	size_t n = nbrun__run_allow_net(r->opts, &rules);
	json_t *net, *allow;

	if (!n || !r->job.result || !r->sb || !r->sb->ops->net_report)
		return;
	net = r->sb->ops->net_report(r->sb);
	allow = json_array();
	for (size_t i = 0; allow && i < n; i++)
		json_array_append_new(allow, json_string(rules[i]));
	if (!net || !allow || json_object_set(net, "allow", allow) < 0) {
		json_decref(net);
		json_decref(allow);
		return;
	}
	json_decref(allow);
	json_object_set_new(r->job.result->doc, "network", net);
}

static int run_execute(struct run *r, json_t *nb, const char *notebook, size_t len)
{
	struct nbrun__sandbox_spec spec;
	char *policy = NULL, *ca = NULL;
	int rc = 0;

	if (!r->sb->conn) {
		nbrun__run_sandbox_spec(&spec, r->opts);
		spec.kernel = r->lang->kernel;
		rc = nbrun__run_egress_spec(r->ctx, &spec, r->opts, &policy, &ca);
		if (rc < 0)
			return rc;
		r->sb->ops->gc(r->sb);
		run_progress(r, NBRUN_PHASE_CREATE);
		rc = r->sb->ops->create(r->sb, &spec);
		free(policy);
		free(ca);
		if (rc == 0)
			rc = r->sb->ops->start(r->sb);
	}
	if (rc == 0)
		rc = nbrun__job_run(&r->job, nb, notebook, len);
	return rc;
}
/*
 * nbconvert refuses a kernelspec without name or display_name (older Jupyter
 * wrote such notebooks): complete it (run_set_kernel() chose the kernel).
 */
static void run_fix_kernelspec(json_t *nb)
{
	json_t *meta = json_object_get(nb, "metadata");
	json_t *ks = json_object_get(meta, "kernelspec");

	if (!json_is_object(ks))
		return;
	if (!json_is_string(json_object_get(ks, "display_name")))
		json_object_set_new(ks, "display_name",
				    json_string(json_string_value(json_object_get(ks, "name"))));
}

/*
 * The language of a run: the options' (version 4), else the notebook's
 * kernelspec, else Python. The notebook is then given that language's
 * kernelspec, which the sandbox's agent starts.
 */
static int run_language(const struct nbrun__language **out, struct nbrun_ctx *ctx,
			const struct nbrun_run_options *opts, const json_t *nb)
{
	const char *name = opts && opts->version >= 4 ? opts->language : NULL;

	if (name) {
		*out = nbrun__language_find(name);
		if (!*out)
			return nbrun__err(ctx, NBRUN_EINVAL, "unknown language '%.64s'; languages: %s",
					  name, nbrun__language_names());
		return 0;
	}
	if (nb)
		return nbrun__language_of_notebook(out, ctx, nb);
	*out = nbrun__language_default();
	return 0;
}

static int run_set_kernel(json_t *nb, const struct nbrun__language *lang)
{
	const char *name = json_string_value(
		json_object_get(json_object_get(json_object_get(nb, "metadata"), "kernelspec"), "name"));

	if (name && !strcmp(name, lang->kernel)) {
		run_fix_kernelspec(nb);
		return 0;
	}
	return nbrun__language_set_kernelspec(nb, lang);
}

/*
 * As papermill does before it executes: no code cell keeps outputs or an
 * execution count of an earlier run (a cell that does not run this time must
 * not show old results), and error markers of an earlier papermill or nbrun
 * run go.
 */
static void run_reset_cells(json_t *nb)
{
	json_t *cells = json_object_get(nb, "cells"), *cell, *t;
	size_t i, k;

	for (i = json_array_size(cells); i-- > 0;) {
		cell = json_array_get(cells, i);
		json_array_foreach(json_object_get(json_object_get(cell, "metadata"), "tags"), k, t)
			if (!strcmp(json_string_value(t) ?: "", "papermill-error-cell-tag"))
				break;
		if (k < json_array_size(json_object_get(json_object_get(cell, "metadata"), "tags"))) {
			json_array_remove(cells, i);
			continue;
		}
		json_object_del(json_object_get(cell, "metadata"), "papermill");
		if (strcmp(json_string_value(json_object_get(cell, "cell_type")) ?: "", "code"))
			continue;
		json_object_set_new(cell, "outputs", json_array());
		json_object_set_new(cell, "execution_count", json_null());
	}
}

static int run_check_runtime(struct nbrun_ctx *ctx, const char *runtime)
{
	struct nbrun__sandbox *probe = NULL;
	int rc = nbrun__sandbox_new(&probe, ctx, NBRUN__SANDBOX_DEFAULT, NULL);

	if (rc == 0)
		rc = probe->ops->check_runtime(probe, runtime);
	nbrun__sandbox_free(probe);
	return rc;
}

static int run_notebook_json(struct nbrun_result **out, struct nbrun_ctx *ctx, json_t *nb,
			     const struct nbrun_run_options *opts, const struct nbrun__language *lang)
{
	struct run r;
	char *text = NULL;
	int rc;

	*out = NULL;
	memset(&r, 0, sizeof(r));
	r.ctx = ctx;
	r.opts = opts;
	r.lang = lang;
	r.out_fd = -1;
	r.t0_ms = clock_mono_ms();
	rc = nbrun__run_check_options(ctx, opts);
	if (rc < 0)
		return rc;
	r.job.ctx = ctx;
	r.job.opts = opts;
	r.job.out_fd = -1;
	if (opts->version >= 3) {
		r.job.on_event = opts->on_event;
		r.job.event_payload = opts->event_payload;
	}
	nbrun__limits_resolve(&r.job.lim, &opts->limits);
	r.job.deadline_ms = clock_mono_ms() + opts->timeout_ms;
	for (size_t i = 0; i < opts->file_count; i++)
		if (access(opts->files[i], R_OK) < 0)
			return nbrun__errno(ctx, errno == ENOENT ? NBRUN_ENOTFOUND : NBRUN_EIO, errno,
					    "input %s", opts->files[i]);
	if (run_set_kernel(nb, lang) < 0)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	run_reset_cells(nb);
	/* the executed notebook is nbformat 4.5, as papermill writes it */
	rc = nbrun__notebook_upgrade(nb, ctx);
	if (rc < 0)
		return rc;
	text = json_dumps(nb, JSON_INDENT(1));
	if (!text)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	if (strlen(text) > r.job.lim.max_notebook_bytes) {
		rc = nbrun__err(ctx, NBRUN_EINVAL, "the notebook is larger than %llu bytes",
				(unsigned long long)r.job.lim.max_notebook_bytes);
		goto out;
	}
	/* A warm sandbox names the run; a cold one is made for it below. */
	/* A language the pool keeps no sandboxes of starts cold. */
	if (run_pool(opts))
		r.sb = nbrun__pool_lease(run_pool(opts), ctx, opts, lang);
	r.warm = r.leased = r.sb != NULL;
	if (r.sb)
		snprintf(r.id, sizeof(r.id), "%s", r.sb->id);
	else
		rc = nbrun__random_id(ctx, r.id);
	/* A runtime the engine lacks is a usage error: found before the output
	 * directory is made (a pool checked its runtime when it was made). */
	if (rc == 0 && !r.sb && nbrun__run_runtime(opts))
		rc = run_check_runtime(ctx, nbrun__run_runtime(opts));
	if (rc < 0)
		goto out;
	rc = nbrun__out_dir_open(ctx, opts->out_dir, r.id, &r.out_dir, &r.out_fd);
	if (rc < 0)
		goto out;
	r.job.out_fd = r.out_fd;
	r.job.out_dir = r.out_dir;
	rc = nbrun__result_new(&r.job.result, r.id);
	if (rc < 0)
		goto out;
	json_object_set_new(r.job.result->doc, "language", json_string(lang->name));
	nbrun__result_set_node(r.job.result);
	if (!r.sb) {
		run_progress(&r, NBRUN_PHASE_CONNECT);
		rc = nbrun__sandbox_new(&r.sb, ctx, NBRUN__SANDBOX_DEFAULT, r.id);
		if (rc < 0)
			goto out;
		nbrun__sandbox_bind(r.sb, ctx, opts->cancel);
	}
	r.job.sb = r.sb;

	rc = run_execute(&r, nb, text, strlen(text));
	if (rc == 0 && run_cancelled(&r))
		rc = nbrun__err(ctx, NBRUN_ECANCELLED, "interrupted");
	run_progress(&r, NBRUN_PHASE_CLEANUP);
	run_net_report(&r);
	if (run_pool(opts)) {
		/* Removed by the pool's reaper, off the caller's path. */
		nbrun__pool_discard(run_pool(opts), r.sb, r.leased ? lang : NULL);
		r.sb = NULL;
		r.leased = false;
	} else {
		r.sb->ops->destroy(r.sb);
	}
	if (rc < 0)
		goto out;
	run_finish_result(&r);
	rc = nbrun__result_write(ctx, r.job.result, r.out_fd);
	if (rc < 0)
		goto out;
	*out = r.job.result;
	r.job.result = NULL;
out:
	if (rc < 0 && r.out_fd >= 0 && r.job.result) {
		/* Leave a record of what happened next to whatever came back. */
		nbrun__result_set_status(r.job.result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(ctx));
		run_finish_result(&r);
		nbrun__result_write(NULL, r.job.result, r.out_fd);
	}
	if (r.leased)
		nbrun__pool_discard(run_pool(opts), r.sb, lang);
	else
		nbrun__sandbox_free(r.sb);
	nbrun_result_free(r.job.result);
	nbrun__job_release(&r.job);
	free(r.out_dir);
	nbrun__out_dir_release(r.out_fd);
	if (r.out_fd >= 0)
		close(r.out_fd);
	free(text);
	return rc;
}

NBRUN_EXPORT int nbrun_run_code(struct nbrun_result **out, struct nbrun_ctx *ctx, const char *code,
				const struct nbrun_run_options *opts)
{
	const struct nbrun__language *lang;
	json_t *nb = NULL;
	int rc;

	*out = NULL;
	if (!code)
		return nbrun__err(ctx, NBRUN_EINVAL, "no code given");
	/* Before run_language() reads the options' fields by version. */
	rc = nbrun__options_version(ctx, "run", opts ? &opts->version : NULL, NBRUN_RUN_OPTIONS_VERSION);
	if (rc < 0)
		return rc;
	rc = run_language(&lang, ctx, opts, NULL);
	if (rc < 0)
		return rc;
	rc = nbrun__notebook_from_code_lang(&nb, ctx, code, lang);
	if (rc < 0)
		return rc;
	rc = run_notebook_json(out, ctx, nb, opts, lang);
	json_decref(nb);
	return rc;
}

NBRUN_EXPORT int nbrun_run_notebook(struct nbrun_result **out, struct nbrun_ctx *ctx,
				    const char *notebook, size_t len,
				    const struct nbrun_run_options *opts)
{
	const struct nbrun__language *lang;
	json_t *nb = NULL;
	int rc;

	*out = NULL;
	rc = nbrun__options_version(ctx, "run", opts ? &opts->version : NULL, NBRUN_RUN_OPTIONS_VERSION);
	if (rc < 0)
		return rc;
	rc = nbrun__notebook_loadb(&nb, ctx, notebook, len, NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES);
	if (rc < 0)
		return rc;
	rc = run_language(&lang, ctx, opts, nb);
	if (rc == 0)
		rc = run_notebook_json(out, ctx, nb, opts, lang);
	json_decref(nb);
	return rc;
}
