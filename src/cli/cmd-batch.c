/* SPDX-License-Identifier: MIT */
/*
 * nbrun batch: many notebooks, each in its own fresh container, -j at a time;
 * papermill-style parameters, from the command line or a manifest; a live
 * view on a terminal; report.json, report.jsonl (one line per notebook as it
 * finishes) and report.html; --rerun of the notebooks that failed, merged
 * into the same reports.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "buf.h"
#include "clock.h"
#include "fdio.h"
#include "jsonx.h"
#include "path.h"
#include "cli.h"
#include "params.h"
#include "remote.h"
#include "wire.h"
#include "text.h"

/* Attempts of one notebook on a server whose node went away, at most. */
#define BATCH_RETRIES_MAX 10

#define BATCH_NOTEBOOK_MAX (256u << 20)
#define BATCH_MAX_JOBS 100000

enum job_state { JOB_WAITING, JOB_RUNNING, JOB_DONE };

struct job {
	char *path;
	char *name;     /* directory name under the batch's out dir, unique */
	json_t *params; /* object or NULL */
	const json_t *prev; /* --rerun: the entry of its last attempt */
	size_t slot;    /* --rerun: where that entry is in the report */
	enum job_state state;
	uint64_t start_ms, end_ms;
	json_t *entry;  /* the report entry once done */
};

struct batch {
	struct job *jobs;
	size_t n, next, running, done;
	size_t counts[NBRUN_STATUS_FAILED + 1];
	char **servers; /* --server URL[,URL...]: attempts go round them */
	size_t nservers, next_server;
	bool engine_failed, fail_fast, tty, stop, html;
	json_t *base;   /* --rerun: the report read back, merged into */
	struct nbrun_run_options opts;
	struct cli_remote remote; /* with remote.server: each notebook sent there */
	unsigned int retries;
	char id[33]; /* with a server: random, the start of each notebook's Idempotency-Key */
	char *out_dir;
	FILE *jsonl;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	uint64_t t0;
};

static volatile sig_atomic_t batch_interrupted;

static void batch_on_signal(int sig)
{
	batch_interrupted = 1;
}

static void batch_help(void)
{
	printf("Usage: nbrun batch [OPTIONS] NOTEBOOK.ipynb...\n"
	       "       nbrun batch [OPTIONS] --manifest FILE\n"
	       "       nbrun batch [OPTIONS] --rerun DIR [--only STATUS,...]\n"
	       "\n"
	       "Run many notebooks, each in its own fresh locked-down container, in parallel.\n"
	       "Results go to DIR/<notebook-name>/ (executed notebook, result.json, images/,\n"
	       "files/), with DIR/report.json, DIR/report.jsonl and DIR/report.html (a page\n"
	       "without script, to open in a browser) for the whole batch.\n"
	       "\n"
	       "Batch:\n"
	       "  -j, --jobs N          containers at once (default: number of cores)\n"
	       "  -o, --out DIR         output directory (default ./nbrun-out/batch-<time>)\n"
	       "  --manifest FILE       the notebooks from FILE, one row each: JSON Lines\n"
	       "                        ({\"notebook\": PATH, \"parameters\": {...}, \"output\": NAME})\n"
	       "                        or CSV (a header: notebook, output, then one column per\n"
	       "                        parameter, typed as -p types it); paths are relative to\n"
	       "                        FILE's directory, parameters from -p, -r, -y, -b are\n"
	       "                        defaults the row's own override\n"
	       "  --rerun DIR           run again, into DIR, the notebooks of DIR/report.json\n"
	       "                        whose last attempt did not end ok, with the same\n"
	       "                        parameters; the earlier attempt moves to\n"
	       "                        DIR/attempts/<name>/<n>/ and the reports are merged\n"
	       "  --only STATUS,...     with --rerun: only those whose last attempt ended so\n"
	       "                        (error, timeout, oom, failed, ok; default all but ok)\n"
	       "  --html                render each executed notebook as HTML (nbconvert, in a\n"
	       "                        sandbox of its own, its HTML sanitised): notebook.html,\n"
	       "                        linked and shown in a sandboxed frame in report.html\n"
	       "  --dry-run             print the notebooks, names and parameters it would run,\n"
	       "                        and run nothing\n"
	       "  --fail-fast           stop everything at the first notebook that does not end ok\n"
	       "  --json                print report.json instead of the summary table\n"
	       "  -q, --quiet           no live progress on a terminal\n"
	       "  --server URL          send each notebook to an nbrun serve (http://HOST:PORT or\n"
	       "                        unix:/path, or NBRUN_SERVER); the limits are the server's;\n"
	       "                        URL,URL,... several servers (one per node, say): the\n"
	       "                        notebooks go round them, a retry to another one\n"
	       "  --token-file FILE     bearer token (else NBRUN_TOKEN, NBRUN_TOKEN_FILE, then\n"
	       "                        the token file of a server on this machine)\n"
	       "  --retries N           with --server: send a notebook again, at most N times\n"
	       "                        (default 2), when its server went away before answering\n"
	       "                        (no reply, a reset, 502-504) or was busy; each retry is\n"
	       "                        in the report; the same Idempotency-Key on each: a run\n"
	       "                        that completed is answered again, not run twice\n"
	       "Parameters (papermill style: a cell tagged injected-parameters after the cell\n"
	       "tagged parameters, or first; -y, then -p, then -r win, as in papermill):\n"
	       "  -p, --param NAME VALUE  typed as papermill types it: True, False, None, what\n"
	       "                          Python's int() reads (any size), what float() reads\n"
	       "                          (inf and nan too), else the text as a string\n"
	       "  -r, --param-raw NAME VALUE  the text as a string\n"
	       "  -y, --params YAML       a YAML mapping of parameters, read as papermill reads it\n"
	       "                          (YAML 1.1: yes/no booleans, 0x and octal integers, .inf;\n"
	       "                          JSON is YAML)\n"
	       "  -b, --params-base64 B64 the same, base64-encoded\n"
	       "  --param-grid FILE.json  a JSON list of objects: every notebook runs once per set\n"
	       "%s"
	       "\n"
	       "Exit codes: 0 all ok, 1 a cell raised somewhere, 2 usage, 3 a timeout or out of\n"
	       "memory, 4 engine or image problem, 5 other failure, 130 interrupted.\n",
	       cli_run_options_help);
}

static char *batch_base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	size_t len;
	char *name;

	b = b ? b + 1 : path;
	len = strlen(b);
	if (len > 6 && !strcmp(b + len - 6, ".ipynb"))
		len -= 6;
	name = strndup(b, len);
	/* The name becomes a directory: keep it to safe characters. */
	for (char *p = name; p && *p; p++)
		if (*p == '/' || (unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '_';
	if (name && (!*name || !strcmp(name, ".") || !strcmp(name, ".."))) {
		free(name);
		name = strdup("notebook");
	}
	/* report.json.ipynb must not become the directory report.json */
	if (name && batch_name_reserved(name)) {
		char *prefixed = NULL;
		if (asprintf(&prefixed, "_%s", name) < 0)
			prefixed = NULL;
		free(name);
		name = prefixed;
	}
	return name;
}

/* Among the names given so far (a manifest's outputs come first). */
static bool batch_name_taken(const struct batch *b, size_t upto, const char *name)
{
	for (size_t i = 0; i < upto; i++)
		if (b->jobs[i].name && !strcmp(b->jobs[i].name, name))
			return true;
	return false;
}

/* ---- one notebook ---------------------------------------------------------- */

static char *batch_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
	char *out = NULL;
	int rc = fd_read_file(AT_FDCWD, path, FD_READ_REGULAR, BATCH_NOTEBOOK_MAX, &out, len);

	if (rc < 0)
		snprintf(err, errlen, "cannot read %s: %s", path,
			 rc == -EINVAL ? "not a regular file" :
			 rc == -EFBIG ? "larger than 256 MiB" : strerror(-rc));
	return out;
}

static const char *batch_first_error_line(const json_t *result)
{
	const json_t *e = json_object_get(result, "error");
	static __thread char line[300];

	if (json_is_object(e)) {
		snprintf(line, sizeof(line), "%s: %s", json_string_value(json_object_get(e, "name")) ?: "",
			 json_string_value(json_object_get(e, "value")) ?: "");
		line[strcspn(line, "\n")] = '\0';
		return line;
	}
	return json_string_value(json_object_get(result, "message"));
}

/* An error reply or a stream's error line of kind busy: the server ran nothing, it may later. */
static bool batch_busy(const json_t *doc)
{
	const char *kind = json_string_value(json_object_get(doc, "kind"));

	return json_object_get(doc, "error") && kind && !strcmp(kind, "busy");
}

/* Whether an attempt may go again: the server went away or said so, not the notebook. */
static bool batch_retryable(CURLcode cc, long status, const json_t *doc)
{
	if (batch_interrupted)
		return false;
	/* a server that held the run past its timeout would hold the retry too */
	if (cc != CURLE_OK)
		return cc != CURLE_ABORTED_BY_CALLBACK && cc != CURLE_OPERATION_TIMEDOUT;
	if (status == 502 || status == 503 || status == 504)
		return true;
	/* a stream answers busy (409 or 503 otherwise) as its last line, under 200 */
	if (batch_busy(doc))
		return true;
	/* a stream cut before its last line: the node went away mid-run */
	return status == 200 && !json_object_get(doc, "status") && !json_object_get(doc, "error");
}

/*
 * The server of an attempt: the next one round the list, not the one that
 * just failed when there are others. At most one draw per server, so that
 * threads drawing at once cannot keep one here.
 */
static const char *batch_server(struct batch *b, const char *failed)
{
	const char *s = NULL;

	for (size_t i = 0; i < b->nservers; i++) {
		s = b->servers[__atomic_fetch_add(&b->next_server, 1, __ATOMIC_RELAXED) % b->nservers];
		if (!failed || strcmp(s, failed))
			break;
	}
	return s;
}

/* --server URL,URL,...: no empty one (-EINVAL), none twice (-EEXIST). */
static int batch_split_servers(struct batch *b, const char *list)
{
	const char *p = list, *comma;

	for (;;) {
		char **grown = realloc(b->servers, (b->nservers + 1) * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		b->servers = grown;
		comma = strchr(p, ',');
		b->servers[b->nservers] = comma ? strndup(p, (size_t)(comma - p)) : strdup(p);
		if (!b->servers[b->nservers])
			return -ENOMEM;
		if (!*b->servers[b->nservers++])
			return -EINVAL;
		for (size_t i = 0; i + 1 < b->nservers; i++)
			if (!strcmp(b->servers[i], b->servers[b->nservers - 1]))
				return -EEXIST;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/* What the report says of an attempt that goes again. */
static const char *batch_attempt_error(CURLcode cc, long status, const json_t *doc,
				       const struct remote *r)
{
	if (cc != CURLE_OK)
		return remote_errmsg(r);
	if (batch_busy(doc))
		return json_string_value(json_object_get(doc, "error"));
	return status != 200 ? "the server answered 5xx" : "the stream ended before its result";
}

/* Seconds to wait before attempt n (1, 2, 4 ... at most 30). */
static void batch_backoff(unsigned int n)
{
	unsigned int s = n >= 5 ? 30 : 1u << (n - 1);

	for (unsigned int i = 0; i < s * 10 && !batch_interrupted; i++)
		usleep(100000);
}

/*
 * One notebook sent to the server, again at most b->retries times when its
 * node went away. The run is streamed, so that a connection lost also
 * cancels it where it ran: no attempt but the last goes on to its end.
 * The result document (outputs saved below dir), or NULL with err set.
 */
static json_t *batch_run_remote(struct batch *b, const char *text, size_t len, const char *key,
				const char *dir, json_t *attempts, char *err, size_t errlen, int *lib_err)
{
	struct cli_remote a = b->remote;
	struct remote *r = NULL;
	json_t *doc = NULL;
	char *body, *abs = NULL;
	long status = 0;
	int ret, out_fd;
	CURLcode cc;

	a.notebook = text;
	a.notebook_len = len;
	body = remote_body(&a, &ret);
	if (!body) {
		snprintf(err, errlen, "the notebook cannot be sent (not a JSON object, or an input unreadable)");
		return NULL;
	}
	for (unsigned int n = 0;; n++) {
		remote_close(r);
		json_decref(doc);
		doc = NULL;
		a.server = batch_server(b, n ? a.server : NULL);
		if (remote_open(&r, a.server, a.token_file, &batch_interrupted)) {
			snprintf(err, errlen, "cannot use the server %s", a.server);
			break;
		}
		remote_set_run_timeout(r, a.timeout_ms);
		cc = remote_post_run_streamed(r, body, key, &doc, &status);
		if (cc == CURLE_OK && status == 200 && json_object_get(doc, "status"))
			break;
		if (!batch_retryable(cc, status, doc) || n >= b->retries) {
			const char *msg = json_string_value(json_object_get(doc, "error"));
			if (cc != CURLE_OK)
				snprintf(err, errlen, "%s: %s", batch_interrupted ? "interrupted" : "no reply from the server",
					 remote_errmsg(r));
			else
				snprintf(err, errlen, "server: %s (HTTP %ld)", msg ? msg : "no result", status);
			*lib_err = cc != CURLE_OK || status >= 500 ? NBRUN_EENGINE : 0;
			json_decref(doc);
			doc = NULL;
			break;
		}
		json_array_append_new(attempts, json_pack("{s:I, s:s}", "attempt", (json_int_t)n + 1, "error",
							  batch_attempt_error(cc, status, doc, r)));
		batch_backoff(n + 1);
	}
	free(body);
	if (doc) {
		out_fd = remote_open_out(&abs, dir, NULL);
		if (out_fd < 0 || remote_keep_outputs(r, doc, out_fd, abs) < 0) {
			snprintf(err, errlen, "cannot save the outputs in %s: %s", dir,
				 out_fd < 0 && errno == ENOTEMPTY ? "not empty" : "see above");
			json_decref(doc);
			doc = NULL;
		}
		if (out_fd >= 0)
			close(out_fd);
	}
	free(abs);
	remote_close(r);
	return doc;
}

/* Whether v holds a value only jsonx can write (an integer of any size, inf, nan). */
static bool batch_has_marker(const json_t *v)
{
	const json_t *x;
	const char *key;
	size_t i;

	if (jsonx_kind_of(v, NULL) != JSONX_PLAIN)
		return true;
	json_object_foreach((json_t *)v, key, x)
		if (batch_has_marker(x))
			return true;
	json_array_foreach(v, i, x)
		if (batch_has_marker(x))
			return true;
	return false;
}

/* A message for the report: whole UTF-8 whatever snprintf cut. */
static json_t *batch_json_text(const char *s)
{
	char *clean = text_utf8_sanitize(s, strlen(s), NULL);
	json_t *v = clean ? json_string(clean) : NULL;

	free(clean);
	return v;
}

/*
 * --rerun: the directory of the last attempt moves to
 * attempts/<name>/<n>/ (the first n free, as a rerun cut short may have
 * left one), and the list of attempts the new entry carries gets a line
 * for it. The list, or NULL with err set.
 */
static json_t *batch_keep_attempt(const struct batch *b, const struct job *job, char *err, size_t errlen)
{
	const json_t *prev = job->prev, *earlier = json_object_get(prev, "attempts");
	json_t *list = json_is_array(earlier) ? json_deep_copy(earlier) : json_array(), *line;
	char from[PATH_MAX], to[PATH_MAX];
	size_t n = json_array_size(list) + 1;
	bool moved = false;
	int rc;

	if (!list) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	snprintf(from, sizeof(from), "%s/%s", b->out_dir, job->name);
	snprintf(to, sizeof(to), "%s/%s/%s", b->out_dir, BATCH_ATTEMPTS_DIR, job->name);
	rc = path_mkdir_p(to, 0755);
	for (; rc == 0; n++) {
		if (snprintf(to, sizeof(to), "%s/%s/%s/%zu", b->out_dir, BATCH_ATTEMPTS_DIR, job->name, n) >=
		    (int)sizeof(to)) {
			rc = -ENAMETOOLONG;
			break;
		}
		if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) {
			moved = true;
			break;
		}
		if (errno == ENOENT) /* the attempt made no directory */
			break;
		if (errno != EEXIST || n > 100000)
			rc = -errno;
	}
	if (rc < 0) {
		snprintf(err, errlen, "cannot keep the last attempt in %s: %s", to, strerror(-rc));
		json_decref(list);
		return NULL;
	}
	line = json_pack("{s:I, s:O?, s:O?, s:O?, s:s?}", "attempt", (json_int_t)n, "status",
			 json_object_get(prev, "status"), "duration_ms", json_object_get(prev, "duration_ms"),
			 "first_error", json_object_get(prev, "first_error"), "out_dir", moved ? to : NULL);
	if (line && json_object_get(prev, "retries"))
		json_object_set(line, "retries", json_object_get(prev, "retries"));
	if (!line || json_array_append_new(list, line) < 0) {
		snprintf(err, errlen, "out of memory");
		json_decref(list);
		return NULL;
	}
	return list;
}

static json_t *batch_run_one(struct batch *b, struct job *job, int *lib_err)
{
	struct nbrun_ctx *ctx = NULL;
	struct nbrun_result *res = NULL;
	struct nbrun_run_options opts = b->opts;
	char *text = NULL, *injected = NULL, *params = NULL, *dir = NULL, *doc = NULL;
	char err[512] = "";
	size_t len = 0;
	json_t *result = NULL, *entry, *attempts = b->remote.server ? json_array() : NULL, *earlier = NULL;
	int rc = 0;

	*lib_err = 0;
	if (asprintf(&dir, "%s/%s", b->out_dir, job->name) < 0)
		dir = NULL;
	opts.out_dir = dir;
	if (job->prev && dir && !(earlier = batch_keep_attempt(b, job, err, sizeof(err))))
		goto done;
	text = batch_read_file(job->path, &len, err, sizeof(err));
	if (!text || !dir || nbrun_ctx_new(&ctx) < 0)
		goto done;
	if (job->params) {
		params = jsonx_dumps(job->params);
		rc = params ? nbrun_notebook_inject_params(&injected, &len, ctx, text, len, params)
			    : NBRUN_ENOMEM;
		if (rc < 0) {
			snprintf(err, sizeof(err), "%s", nbrun_ctx_errmsg(ctx));
			goto done;
		}
	}
	if (b->remote.server) {
		/* The same key on every attempt: the server runs the notebook once. The
		 * batch's id is random and the index unique in it: nothing else is needed. */
		char key[WIRE_IDEM_KEY_MAX + 1];

		snprintf(key, sizeof(key), "batch:%s:%zu", b->id, (size_t)(job - b->jobs));
		result = batch_run_remote(b, injected ? injected : text, len, key, dir, attempts, err,
					  sizeof(err), lib_err);
		goto done;
	}
	rc = nbrun_run_notebook(&res, ctx, injected ? injected : text, len, &opts);
	if (rc < 0) {
		*lib_err = rc;
		snprintf(err, sizeof(err), "%s", nbrun_ctx_errmsg(ctx));
		goto done;
	}
	if (nbrun_result_to_json(&doc, res, 0) == 0)
		result = json_loads(doc, 0, NULL);
done:
	/* JSON has no big integers or infinities: the report names them as text. */
	entry = json_pack("{s:s, s:s, s:o?, s:s?, s:s, s:I, s:s?, s:o?}", "name", job->name,
			  "notebook",
			  /* a rerun's notebook as the report named it (its path joined to "cwd" was read) */
			  job->prev ? json_string_value(json_object_get(job->prev, "notebook")) : job->path, "params", job->params ? jsonx_plain(job->params) : NULL,
			  "out_dir", dir, "status",
			  result ? json_string_value(json_object_get(result, "status")) : "failed",
			  "duration_ms", (json_int_t)(clock_mono_ms() - job->start_ms), "first_error",
			  result ? batch_first_error_line(result) : (err[0] ? err : "failed"), "result",
			  result);
	if (entry && json_array_size(attempts))
		json_object_set(entry, "retries", attempts);
	json_decref(attempts);
	/* report.json is strict JSON: the exact values, for a rerun, as JSON text */
	if (entry && job->params && batch_has_marker(job->params)) {
		char *exact = jsonx_dumps(job->params);
		if (exact)
			json_object_set_new(entry, "params_text", json_string(exact));
		free(exact);
	}
	if (entry && b->html && result && !batch_interrupted) {
		char herr[400];
		if (batch_render_html(dir, &b->opts, herr, sizeof(herr)) == 0)
			json_object_set_new(entry, "html", json_sprintf("%s/notebook.html", dir));
		else
			json_object_set_new(entry, "html_error", batch_json_text(herr));
	}
	if (entry && earlier)
		json_object_set(entry, "attempts", earlier);
	json_decref(earlier);
	nbrun_result_free(res);
	nbrun_ctx_free(ctx);
	free(text);
	free(injected);
	free(params);
	free(dir);
	free(doc);
	return entry;
}

static enum nbrun_status batch_status_of(const json_t *entry)
{
	const char *s = json_string_value(json_object_get(entry, "status"));

	for (enum nbrun_status st = NBRUN_STATUS_OK; s && st <= NBRUN_STATUS_FAILED; st++)
		if (!strcmp(s, nbrun_status_name(st)))
			return st;
	return NBRUN_STATUS_FAILED;
}

static void *batch_worker(void *p)
{
	struct batch *b = p;

	pthread_mutex_lock(&b->lock);
	while (!b->stop && !batch_interrupted && b->next < b->n) {
		struct job *job = &b->jobs[b->next++];
		enum nbrun_status st;
		json_t *entry;
		int lib_err;

		job->state = JOB_RUNNING;
		job->start_ms = clock_mono_ms();
		b->running++;
		pthread_cond_broadcast(&b->changed);
		pthread_mutex_unlock(&b->lock);

		entry = batch_run_one(b, job, &lib_err);

		pthread_mutex_lock(&b->lock);
		job->end_ms = clock_mono_ms();
		job->state = JOB_DONE;
		job->entry = entry;
		b->running--;
		b->done++;
		st = batch_status_of(entry);
		b->counts[st]++;
		if (lib_err == NBRUN_EENGINE || lib_err == NBRUN_ENOIMAGE)
			b->engine_failed = true;
		if (b->fail_fast && st != NBRUN_STATUS_OK) {
			b->stop = true;
			batch_interrupted = 1; /* cancels the runs still going */
		}
		if (b->jsonl && entry) {
			char *line = json_dumps(entry, JSON_COMPACT);
			if (line) {
				fprintf(b->jsonl, "%s\n", line);
				fflush(b->jsonl);
				free(line);
			}
		}
		if (!b->tty)
			fprintf(stderr, "[%zu/%zu] %s: %s (%.1f s)\n", b->done, b->n, job->name,
				json_string_value(json_object_get(entry, "status")) ?: "failed",
				(double)(job->end_ms - job->start_ms) / 1000.0);
		cli_warn_disk_full(json_object_get(entry, "result"),
				   json_string_value(json_object_get(entry, "out_dir")) ?: b->out_dir);
		pthread_cond_broadcast(&b->changed);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* ---- the live view ----------------------------------------------------------- */

/* 42s, 3m05s, 1h02m */
static const char *batch_span(char out[32], double s)
{
	long t = s < 0 ? 0 : (long)(s + 0.5);

	if (t < 60)
		snprintf(out, 32, "%lds", t);
	else if (t < 3600)
		snprintf(out, 32, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(out, 32, "%ldh%02ldm", t / 3600, t / 60 % 60);
	return out;
}

static void batch_draw(struct batch *b, size_t *lines_drawn)
{
	char span[2][32];
	uint64_t now = clock_mono_ms();
	double elapsed = (double)(now - b->t0) / 1000.0;
	size_t failed = b->done - b->counts[NBRUN_STATUS_OK], lines = 0;

	for (size_t i = 0; i < *lines_drawn; i++)
		fputs("\033[1A\033[2K", stderr);
	for (size_t i = 0; i < b->n; i++) {
		if (b->jobs[i].state != JOB_RUNNING)
			continue;
		fprintf(stderr, "  %-40.40s running %5.1fs\n", b->jobs[i].name,
			(double)(now - b->jobs[i].start_ms) / 1000.0);
		lines++;
	}
	fprintf(stderr, "done %zu/%zu  failed %zu  running %zu  elapsed %s", b->done, b->n, failed,
		b->running, batch_span(span[0], elapsed));
	/* The rate so far, all jobs together: what is left at that rate is the estimate. */
	if (b->done && elapsed > 0)
		fprintf(stderr, "  %.1f/min  left ~%s", (double)b->done * 60.0 / elapsed,
			batch_span(span[1], elapsed / (double)b->done * (double)(b->n - b->done)));
	fputc('\n', stderr);
	*lines_drawn = lines + 1;
	fflush(stderr);
}

/* ---- report ----------------------------------------------------------------- */

static void batch_count(const json_t *list, size_t counts[NBRUN_STATUS_FAILED + 1])
{
	const json_t *e;
	size_t i;

	memset(counts, 0, sizeof(size_t) * (NBRUN_STATUS_FAILED + 1));
	json_array_foreach(list, i, e)
		counts[batch_status_of(e)]++;
}

/* From the last attempt of every notebook in the report (with --rerun, those not run again too). */
static int batch_exit_code(const struct batch *b, const size_t *counts)
{
	if (batch_interrupted && !b->fail_fast)
		return CLI_EXIT_INTERRUPTED;
	if (b->engine_failed)
		return CLI_EXIT_ENGINE;
	if (counts[NBRUN_STATUS_TIMEOUT] || counts[NBRUN_STATUS_OOM])
		return CLI_EXIT_LIMIT;
	if (counts[NBRUN_STATUS_FAILED])
		return CLI_EXIT_FAILED;
	if (counts[NBRUN_STATUS_ERROR])
		return CLI_EXIT_RAISED;
	return CLI_EXIT_OK;
}

/* report.json whole or not at all (the one of an earlier batch stays until then): 0 or -1, errno. */
static int batch_write_report(const json_t *report, const char *path)
{
	char *text = json_dumps(report, JSON_INDENT(2));
	int rc;

	if (!text) {
		errno = ENOMEM;
		return -1;
	}
	rc = fd_write_file_atomic(AT_FDCWD, path, text, strlen(text), 0644);
	free(text);
	errno = -rc;
	return rc < 0 ? -1 : 0;
}

/*
 * This batch's report; with --rerun, the report read back with the entries
 * of the notebooks run again in their places, the others as they were.
 * counts gets how many of its entries ended each way.
 */
static json_t *batch_report(const struct batch *b, unsigned int jobs, size_t counts[NBRUN_STATUS_FAILED + 1])
{
	const json_t *base_list = json_object_get(b->base, "notebooks");
	json_t *list = json_array(), *report, *cwd = NULL;
	json_int_t total = (json_int_t)b->n, reruns = 0;
	char here[PATH_MAX];

	if (b->base) {
		for (size_t i = 0; list && i < json_array_size(base_list); i++)
			json_array_append(list, json_array_get(base_list, i));
		for (size_t i = 0; list && i < b->n; i++)
			if (b->jobs[i].entry)
				json_array_set(list, b->jobs[i].slot, b->jobs[i].entry);
		total = json_integer_value(json_object_get(json_object_get(b->base, "summary"), "total"));
		if (total < (json_int_t)json_array_size(list))
			total = (json_int_t)json_array_size(list);
		reruns = json_integer_value(json_object_get(b->base, "reruns")) + 1;
		cwd = json_deep_copy(json_object_get(b->base, "cwd"));
	} else {
		for (size_t i = 0; list && i < b->n; i++)
			if (b->jobs[i].entry)
				json_array_append(list, b->jobs[i].entry);
		/* where relative notebook paths are read from, for a rerun from elsewhere */
		if (getcwd(here, sizeof(here)))
			cwd = batch_json_text(here);
	}
	batch_count(list, counts);
	report = json_pack("{s:s, s:s, s:o*, s:i, s:I, s:b, s:b, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}, s:o}",
			   "nbrun", nbrun_version(), "out_dir",
			   json_string_value(json_object_get(b->base, "out_dir")) ?: b->out_dir, "cwd", cwd,
			   "jobs", (int)jobs, "duration_ms", (json_int_t)(clock_mono_ms() - b->t0), "interrupted",
			   batch_interrupted && !b->fail_fast, "html", b->html, "summary", "total", total, "ok",
			   (json_int_t)counts[NBRUN_STATUS_OK], "error", (json_int_t)counts[NBRUN_STATUS_ERROR],
			   "timeout", (json_int_t)counts[NBRUN_STATUS_TIMEOUT], "oom",
			   (json_int_t)counts[NBRUN_STATUS_OOM], "failed", (json_int_t)counts[NBRUN_STATUS_FAILED],
			   "not_run", total - (json_int_t)json_array_size(list), "notebooks", list);
	if (report && reruns)
		json_object_set_new(report, "reruns", json_integer(reruns));
	return report;
}

static void batch_print_row(const char *name, const json_t *e)
{
	const char *first = e ? json_string_value(json_object_get(e, "first_error")) : NULL;
	char cut[101];
	size_t n = first ? strlen(first) : 0;

	/* the first error came from the sandbox: at most 100 bytes, whole characters, made safe */
	if (n > 100)
		for (n = 100; n && ((unsigned char)first[n] & 0xc0) == 0x80; n--)
			;
	snprintf(cut, sizeof(cut), "%.*s", (int)n, first ? first : "");
	printf("%-32.32s %-8s %8.1fs  ", name, e ? json_string_value(json_object_get(e, "status")) : "not run",
	       e ? (double)json_integer_value(json_object_get(e, "duration_ms")) / 1000.0 : 0.0);
	cli_put_safe(stdout, cut, false);
	putchar('\n');
}

static void batch_print_table(const struct batch *b, const json_t *report)
{
	const json_t *summary = json_object_get(report, "summary"), *e;
	size_t i;

	printf("%-32s %-8s %9s  %s\n", "NOTEBOOK", "STATUS", "DURATION", "FIRST ERROR");
	if (b->base) /* every notebook of the batch, those not run again too */
		json_array_foreach(json_object_get(report, "notebooks"), i, e)
			batch_print_row(json_string_value(json_object_get(e, "name")) ?: "", e);
	else
		for (i = 0; i < b->n; i++)
			batch_print_row(b->jobs[i].name, b->jobs[i].entry);
	printf("\n%lld notebooks: %lld ok, %lld error, %lld timeout, %lld oom, %lld failed, %lld not run; ",
	       (long long)json_integer_value(json_object_get(summary, "total")),
	       (long long)json_integer_value(json_object_get(summary, "ok")),
	       (long long)json_integer_value(json_object_get(summary, "error")),
	       (long long)json_integer_value(json_object_get(summary, "timeout")),
	       (long long)json_integer_value(json_object_get(summary, "oom")),
	       (long long)json_integer_value(json_object_get(summary, "failed")),
	       (long long)json_integer_value(json_object_get(summary, "not_run")));
	if (b->base)
		printf("%zu run again; ", b->done);
	printf("%s/report.html\n", b->out_dir);
}

/* ---- command ------------------------------------------------------------------ */

/* Each job without a name (a manifest's output) gets its notebook's, unique in the batch. */
static int batch_name_job(struct batch *b, struct job *job, const char *suffix)
{
	char *base = batch_base_name(job->path), *name = NULL;

	if (!base)
		return -1;
	if (asprintf(&name, "%s%s", base, suffix) < 0)
		name = NULL;
	for (int n = 2; name && batch_name_taken(b, b->n, name); n++) {
		free(name);
		if (asprintf(&name, "%s-%d", base, n) < 0)
			name = NULL;
	}
	free(base);
	job->name = name;
	return name ? 0 : -1;
}

static int batch_add_jobs(struct batch *b, char **paths, size_t npaths, json_t *grid, json_t *fixed)
{
	size_t sets = grid ? json_array_size(grid) : 1;

	if (npaths * sets > BATCH_MAX_JOBS)
		return -1;
	b->jobs = calloc(npaths * sets, sizeof(*b->jobs));
	if (!b->jobs)
		return -1;
	for (size_t i = 0; i < npaths; i++) {
		for (size_t k = 0; k < sets; k++) {
			struct job *job = &b->jobs[b->n];
			char suffix[32] = "";

			job->path = strdup(paths[i]);
			if (!job->path)
				return -1;
			b->n++;
			if (grid || json_object_size(fixed)) {
				job->params = json_deep_copy(fixed);
				if (grid)
					json_object_update(job->params, json_array_get(grid, k));
			}
			if (grid)
				snprintf(suffix, sizeof(suffix), "-p%zu", k);
			if (batch_name_job(b, job, suffix) < 0)
				return -1;
		}
	}
	return 0;
}

/*
 * The rows of a manifest (taken over: m is left empty): the outputs named
 * first, so that a name made from a file's name steers clear of them; a
 * row's parameters over those of the command line.
 */
static int batch_add_manifest(struct batch *b, struct manifest *m, const json_t *fixed)
{
	b->jobs = calloc(m->n, sizeof(*b->jobs));
	if (!b->jobs)
		return -1;
	b->n = m->n;
	for (size_t i = 0; i < m->n; i++) {
		struct job *job = &b->jobs[i];
		struct manifest_row *r = &m->rows[i];

		job->path = r->notebook;
		job->name = r->output;
		r->notebook = r->output = NULL;
		if (json_object_size(fixed) || json_object_size(r->params)) {
			job->params = json_deep_copy(fixed);
			if (!job->params || json_object_update(job->params, r->params) < 0)
				return -1;
		}
	}
	for (size_t i = 0; i < b->n; i++)
		if (!b->jobs[i].name && batch_name_job(b, &b->jobs[i], "") < 0)
			return -1;
	return 0;
}

/* Why path is no notebook to read, or NULL (a FIFO would hold the batch, a device never ends). */
static const char *batch_input_problem(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	const char *why = NULL;

	if (fd < 0)
		return strerror(errno);
	if (fstat(fd, &st) < 0)
		why = strerror(errno);
	else if (!S_ISREG(st.st_mode))
		why = S_ISDIR(st.st_mode) ? "a directory" : "not a regular file";
	close(fd);
	return why;
}

/* --manifest FILE: its rows, each notebook readable; 0 or CLI_EXIT_USAGE (said why). */
static int batch_load_manifest(struct manifest *m, const char *path)
{
	char err[512], *text, *dir = NULL, *slash;
	size_t len = 0;
	int rc;

	text = batch_read_file(path, &len, err, sizeof(err));
	if (!text)
		return cli_usage_error("batch", "--manifest %s", err);
	slash = strrchr(path, '/');
	if (slash)
		dir = strndup(path, slash == path ? 1 : (size_t)(slash - path));
	rc = manifest_parse(m, text, len, manifest_format_of(path, text, len), path, slash ? dir : NULL,
			    BATCH_MAX_JOBS, err, sizeof(err));
	free(text);
	free(dir);
	if (rc < 0)
		return cli_usage_error("batch", "%s", err);
	for (size_t i = 0; i < m->n; i++) {
		const char *why = batch_input_problem(m->rows[i].notebook);
		if (why) {
			cli_usage_error("batch", "%s:%lu: notebook %s: %s", path, m->rows[i].line,
					m->rows[i].notebook, why);
			manifest_free(m);
			return CLI_EXIT_USAGE;
		}
	}
	return 0;
}

/*
 * --rerun DIR: DIR/report.json read back and checked as any input (it may
 * have been edited): each entry's name must be a directory of DIR's own,
 * once. The report, or NULL after a usage error.
 */
static json_t *batch_load_base(const char *dir)
{
	char path[PATH_MAX], err[512];
	char *text;
	size_t len = 0;
	json_t *report = NULL, *list, *e;
	json_error_t jerr;
	size_t i;

	snprintf(path, sizeof(path), "%s/report.json", dir);
	text = batch_read_file(path, &len, err, sizeof(err));
	if (!text) {
		cli_usage_error("batch", "--rerun %s: %s", dir, err);
		return NULL;
	}
	report = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	list = json_object_get(report, "notebooks");
	if (!json_is_array(list)) {
		cli_usage_error("batch", "--rerun: %s is not a report of nbrun batch%s%s", path, report ? "" : ": ",
				report ? "" : jerr.text);
		json_decref(report);
		return NULL;
	}
	json_array_foreach(list, i, e) {
		const char *name = json_string_value(json_object_get(e, "name")), *why;
		const json_t *params = json_object_get(e, "params"), *exact = json_object_get(e, "params_text");

		why = !json_is_object(e) ? "not an object"
		      : !name ? "no name"
		      : batch_name_problem(name) ? batch_name_problem(name)
		      : !json_is_string(json_object_get(e, "notebook")) ? "no notebook"
		      : !json_is_string(json_object_get(e, "status")) ? "no status"
		      : params && !json_is_object(params) && !json_is_null(params) ? "params is not an object"
		      : exact && !json_is_string(exact) ? "params_text is not text" : NULL;
		for (size_t k = 0; !why && k < i; k++)
			if (!strcmp(name, json_string_value(json_object_get(json_array_get(list, k), "name"))))
				why = "its name is another entry's";
		if (why) {
			cli_usage_error("batch", "--rerun: %s: notebook %zu: %s", path, i + 1, why);
			json_decref(report);
			return NULL;
		}
	}
	return report;
}

/* The entries of b->base whose status is one of only[], as jobs with their parameters. 0 or an exit code. */
static int batch_add_rerun(struct batch *b, const bool only[NBRUN_STATUS_FAILED + 1])
{
	const json_t *list = json_object_get(b->base, "notebooks"), *e;
	const char *cwd = json_string_value(json_object_get(b->base, "cwd"));
	size_t i;

	b->jobs = calloc(json_array_size(list) + 1, sizeof(*b->jobs));
	if (!b->jobs)
		return CLI_EXIT_FAILED;
	json_array_foreach(list, i, e) {
		const char *nb = json_string_value(json_object_get(e, "notebook")), *why;
		const json_t *params = json_object_get(e, "params");
		const char *exact = json_string_value(json_object_get(e, "params_text"));
		struct job *job = &b->jobs[b->n];
		char jerr[200];

		if (!only[batch_status_of(e)])
			continue;
		if (nb[0] != '/' && cwd) {
			if (asprintf(&job->path, "%s/%s", cwd, nb) < 0)
				job->path = NULL;
		} else {
			job->path = strdup(nb);
		}
		job->name = strdup(json_string_value(json_object_get(e, "name")));
		job->prev = e;
		job->slot = i;
		b->n++;
		if (!job->path || !job->name)
			return CLI_EXIT_FAILED;
		why = batch_input_problem(job->path);
		if (why)
			return cli_usage_error("batch", "--rerun: notebook %s (%s): %s", job->path, job->name, why);
		/* the exact values when report.json could not hold them */
		if (exact) {
			job->params = jsonx_loadb(exact, strlen(exact), jerr, sizeof(jerr));
			if (!json_is_object(job->params))
				return cli_usage_error("batch", "--rerun: %s: params_text: %s", job->name,
						       job->params ? "not an object" : jerr);
		} else if (json_is_object(params)) {
			job->params = json_deep_copy(params);
			if (!job->params)
				return CLI_EXIT_FAILED;
		}
	}
	return 0;
}

/* --only error,timeout,...: 0, or -1 after a usage error. */
static int batch_parse_only(bool only[NBRUN_STATUS_FAILED + 1], const char *list)
{
	const char *p = list;

	memset(only, 0, sizeof(bool) * (NBRUN_STATUS_FAILED + 1));
	for (;;) {
		size_t n = strcspn(p, ",");
		enum nbrun_status st;

		for (st = NBRUN_STATUS_OK; st <= NBRUN_STATUS_FAILED; st++)
			if (strlen(nbrun_status_name(st)) == n && !strncmp(p, nbrun_status_name(st), n))
				break;
		if (st > NBRUN_STATUS_FAILED) {
			cli_usage_error("batch", "--only: '%.*s' is none of ok, error, timeout, oom, failed", (int)n, p);
			return -1;
		}
		only[st] = true;
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

/* --dry-run: what would run, and nothing else. */
static int batch_print_plan(const struct batch *b, bool json)
{
	json_t *list = json_array();

	for (size_t i = 0; list && i < b->n; i++) {
		const struct job *job = &b->jobs[i];
		char *params = job->params ? jsonx_dumps(job->params) : NULL;

		if (json) {
			json_array_append_new(list, json_pack("{s:s, s:s, s:o?}", "name", job->name, "notebook",
							      job->path, "params",
							      job->params ? jsonx_plain(job->params) : NULL));
		} else {
			printf("%-32s ", job->name);
			cli_put_safe(stdout, job->path, false);
			putchar(' ');
			cli_put_safe(stdout, params ? params : "", false);
			putchar('\n');
		}
		free(params);
	}
	if (json) {
		char *text = list ? json_dumps(list, JSON_INDENT(2)) : NULL;
		if (text)
			puts(text);
		free(text);
	}
	json_decref(list);
	return CLI_EXIT_OK;
}

/* -b: base64 (padding and line breaks as base64 has them) of a YAML text, NUL-terminated; NULL when not base64. */
static char *batch_base64(const char *s)
{
	size_t n = strlen(s), k = 0;
	char *in = malloc(n + 1), *out = NULL;

	if (!in)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (s[i] != '\n' && s[i] != '\r' && s[i] != ' ' && s[i] != '\t')
			in[k++] = s[i];
	if (!wire_base64_valid(in, k))
		goto out;
	out = wire_base64_decode(in, k, &n);
	if (out && strlen(out) != n) { /* a NUL byte is no YAML text */
		free(out);
		out = NULL;
	}
out:
	free(in);
	return out;
}

/* A --param-grid file: JSON (big integers and Infinity/NaN kept, as in -y). */
static json_t *batch_load_grid(const char *path, char *err, size_t errlen)
{
	size_t len = 0;
	char *text = batch_read_file(path, &len, err, errlen);
	json_t *grid;

	if (!text)
		return NULL;
	grid = jsonx_loadb(text, len, err, errlen);
	free(text);
	return grid;
}

/* Every name the notebooks would get must be assignable, checked before anything runs. */
static int batch_check_names(const json_t *fixed, const json_t *grid)
{
	const char *name;
	const json_t *v, *set;
	size_t i;

	json_object_foreach((json_t *)fixed, name, v)
		if (!params_name_ok(name)) {
			cli_usage_error("batch", "parameter name '%s' is not a Python identifier", name);
			return -1;
		}
	json_array_foreach(grid, i, set)
		json_object_foreach((json_t *)set, name, v)
			if (!params_name_ok(name)) {
				cli_usage_error("batch", "--param-grid entry %zu: parameter name '%s' is not a Python identifier",
						i, name);
				return -1;
			}
	return 0;
}

int cmd_batch(int argc, char **argv)
{
	enum {
		OPT_FAIL_FAST = CLI_OPT_FIRST_LOCAL, OPT_GRID, OPT_SERVER, OPT_TOKEN_FILE, OPT_RETRIES,
		OPT_MANIFEST, OPT_RERUN, OPT_ONLY, OPT_HTML, OPT_DRY_RUN,
	};
	static const struct option longopts[] = {
		{ "jobs", required_argument, NULL, 'j' },
		{ "param", required_argument, NULL, 'p' },
		{ "param-raw", required_argument, NULL, 'r' },
		{ "params", required_argument, NULL, 'y' },
		{ "params-base64", required_argument, NULL, 'b' },
		{ "param-grid", required_argument, NULL, OPT_GRID },
		{ "fail-fast", no_argument, NULL, OPT_FAIL_FAST },
		{ "server", required_argument, NULL, OPT_SERVER },
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		{ "retries", required_argument, NULL, OPT_RETRIES },
		{ "manifest", required_argument, NULL, OPT_MANIFEST },
		{ "rerun", required_argument, NULL, OPT_RERUN },
		{ "only", required_argument, NULL, OPT_ONLY },
		{ "html", no_argument, NULL, OPT_HTML },
		{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
		CLI_OUTPUT_LONGOPTS,
		CLI_RUN_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_run_args args;
	struct batch b;
	struct params params;
	json_t *fixed = NULL, *grid = NULL, *report = NULL, *y, *v;
	char jerr[200];
	pthread_t *threads = NULL;
	int64_t jobs = 0, retries = 2;
	const char *server = getenv("NBRUN_SERVER"), *token_file = NULL, *local_only = NULL;
	bool retries_set = false, timeout_set = false;
	bool json = false, quiet = false, dry_run = false;
	bool only[NBRUN_STATUS_FAILED + 1] = { false, true, true, true, true }; /* all but ok */
	const char *manifest_path = NULL, *rerun = NULL, *only_arg = NULL;
	struct manifest manifest = { NULL, 0 };
	size_t counts[NBRUN_STATUS_FAILED + 1];
	char path[PATH_MAX], *default_dir = NULL;
	struct sigaction sa;
	int c, rc, ret = CLI_EXIT_USAGE;
	size_t started = 0, lines = 0;

	memset(&b, 0, sizeof(b));
	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.changed, NULL);
	if (cli_run_args_init(&args, argc) < 0 || params_init(&params) < 0) {
		cli_error("out of memory");
		ret = CLI_EXIT_FAILED;
		goto out;
	}
	optind = 1;
	opterr = 0; /* one diagnostic, in house format, below */
	while ((c = getopt_long(argc, argv, "j:o:p:r:y:b:f:e:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			if (units_parse_count(&jobs, optarg) < 0 || jobs > 256) {
				cli_usage_error("batch", "--jobs: '%s' is not a whole number from 1 to 256", optarg);
				goto out;
			}
			break;
		case 'o': b.out_dir = strdup(optarg); break;
		case 'p':
		case 'r':
			if (optind >= argc) {
				cli_usage_error("batch", "-%c wants NAME VALUE", c);
				goto out;
			}
			if (!params_name_ok(optarg)) {
				cli_usage_error("batch", "-%c: parameter name '%s' is not a Python identifier", c,
						optarg);
				goto out;
			}
			v = c == 'p' ? params_resolve_type(argv[optind]) : NULL;
			if (c == 'r' && text_utf8_valid(argv[optind], strlen(argv[optind])))
				v = json_string(argv[optind]);
			if (!v) {
				cli_usage_error("batch", "-%c %s: the value is not UTF-8 text, which a notebook cannot hold",
						c, optarg);
				goto out;
			}
			optind++;
			if (json_object_set_new(c == 'p' ? params.typed : params.raw, optarg, v) < 0) {
				cli_error("out of memory");
				ret = CLI_EXIT_FAILED;
				goto out;
			}
			break;
		case 'y':
		case 'b': {
			char *text = c == 'b' ? batch_base64(optarg) : strdup(optarg);
			y = text ? params_yaml_load(text, strlen(text), jerr, sizeof(jerr)) : NULL;
			free(text);
			if (!y) {
				cli_usage_error("batch", "-%c wants a YAML mapping of parameters%s: %s", c,
						c == 'b' ? " in base64" : "", text ? jerr : "not base64");
				goto out;
			}
			json_object_update(c == 'b' ? params.base64 : params.yaml, y);
			json_decref(y);
			break;
		}
		case OPT_GRID:
			json_decref(grid);
			grid = batch_load_grid(optarg, jerr, sizeof(jerr));
			if (!json_is_array(grid) || json_array_size(grid) == 0) {
				cli_usage_error("batch", "--param-grid %s: want a non-empty JSON list of objects%s%s",
						optarg, grid ? "" : ": ", grid ? "" : jerr);
				goto out;
			}
			for (size_t i = 0; i < json_array_size(grid); i++)
				if (!json_is_object(json_array_get(grid, i))) {
					cli_usage_error("batch", "--param-grid %s: entry %zu is not an object", optarg, i);
					goto out;
				}
			break;
		case OPT_FAIL_FAST: b.fail_fast = true; break;
		case OPT_MANIFEST: manifest_path = optarg; break;
		case OPT_RERUN: rerun = optarg; break;
		case OPT_ONLY:
			if (batch_parse_only(only, optarg) < 0)
				goto out;
			only_arg = optarg;
			break;
		case OPT_HTML: b.html = true; break;
		case OPT_DRY_RUN: dry_run = true; break;
		case OPT_SERVER: server = optarg; break;
		case OPT_TOKEN_FILE: token_file = optarg; break;
		case OPT_RETRIES:
			if ((units_parse_count(&retries, optarg) < 0 && strcmp(optarg, "0")) ||
			    retries > BATCH_RETRIES_MAX) {
				cli_usage_error("batch", "--retries: '%s' is not a whole number from 0 to %d", optarg,
						BATCH_RETRIES_MAX);
				goto out;
			}
			if (!strcmp(optarg, "0"))
				retries = 0;
			retries_set = true;
			break;
		case CLI_OPT_JSON: json = true; break;
		case 'q': quiet = true; break;
		case 'h':
			batch_help();
			ret = CLI_EXIT_OK;
			goto out;
		default:
			if (c != '?' && cli_server_sets(c) && !local_only)
				local_only = cli_server_sets(c);
			timeout_set |= c == CLI_OPT_TIMEOUT;
			rc = c == '?' ? 1 : cli_run_option(&args, c, optarg, "batch");
			if (rc == 1)
				cli_bad_option("batch", argv);
			if (rc)
				goto out;
		}
	}
	if (rerun && (optind < argc || manifest_path || grid || b.out_dir)) {
		cli_usage_error("batch", "--rerun DIR runs again the notebooks of DIR/report.json, into DIR: %s "
			       "cannot go with it", optind < argc ? "a notebook" : manifest_path ? "--manifest"
					     : grid ? "--param-grid" : "-o");
		goto out;
	}
	if (only_arg && !rerun) {
		cli_usage_error("batch", "--only goes with --rerun");
		goto out;
	}
	if (manifest_path && (optind < argc || grid)) {
		cli_usage_error("batch", "--manifest gives the notebooks: %s cannot go with it",
				optind < argc ? "a notebook on the command line" : "--param-grid");
		goto out;
	}
	if (optind >= argc && !manifest_path && !rerun) {
		cli_usage_error("batch", "no notebooks given");
		goto out;
	}
	if (cli_run_args_finish(&args, "batch"))
		goto out;
	if (server && !*server)
		server = NULL;
	if (server && local_only) {
		ret = cli_usage_error("batch", "%s is the server's to set; it cannot be used with --server",
				      local_only);
		goto out;
	}
	if ((token_file || retries_set) && !server) {
		ret = cli_usage_error("batch", "%s goes with --server", token_file ? "--token-file" : "--retries");
		goto out;
	}
	if (server) {
		rc = batch_split_servers(&b, server);
		if (rc == -EINVAL || rc == -EEXIST) {
			ret = cli_usage_error("batch", "--server: %s in '%s'",
					      rc == -EINVAL ? "an empty URL" : "a URL given twice", server);
			goto out;
		} else if (rc < 0) {
			cli_error("out of memory");
			ret = CLI_EXIT_FAILED;
			goto out;
		}
	}
	if (b.html && server) {
		cli_usage_error("batch", "--html renders with this machine's engine: it cannot go with --server");
		goto out;
	}
	fixed = params_final(&params);
	if (!fixed || batch_check_names(fixed, grid) < 0)
		goto out;
	if (rerun && json_object_size(fixed)) {
		cli_usage_error("batch", "--rerun runs each notebook with the parameters of its last attempt: "
			       "-p, -r, -y and -b cannot go with it");
		goto out;
	}
	/* Regular files only, opened without blocking: a FIFO without a writer
	 * would hold the batch before its signals are handled. */
	for (int i = optind; i < argc; i++) {
		int fd = cli_open_input(argv[i], "batch");
		if (fd < 0)
			goto out;
		close(fd);
	}
	if (manifest_path && batch_load_manifest(&manifest, manifest_path))
		goto out;
	if (rerun) {
		b.base = batch_load_base(rerun);
		if (!b.base)
			goto out;
		/* a batch rendered keeps being rendered (here: not through a server) */
		b.html |= !server && json_is_true(json_object_get(b.base, "html"));
		b.out_dir = strdup(rerun);
		ret = batch_add_rerun(&b, only);
		if (ret == CLI_EXIT_FAILED)
			cli_error("out of memory");
		if (ret)
			goto out;
	}
	ret = CLI_EXIT_FAILED;
	if (!rerun && (manifest_path ? batch_add_manifest(&b, &manifest, fixed)
				     : batch_add_jobs(&b, argv + optind, (size_t)(argc - optind), grid, fixed)) < 0) {
		cli_error("too many notebooks or out of memory");
		goto out;
	}
	if (dry_run) {
		ret = batch_print_plan(&b, json);
		goto out;
	}
	if (rerun && !b.n) {
		batch_count(json_object_get(b.base, "notebooks"), counts);
		fprintf(stderr, "nbrun: nothing to rerun in %s: no notebook's last attempt ended %s\n", rerun,
			only_arg ? only_arg : "error, timeout, oom or failed");
		ret = batch_exit_code(&b, counts);
		goto out;
	}
	if (!jobs)
		jobs = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
	if (!b.out_dir) {
		time_t now = time(NULL);
		struct tm tm;
		char stamp[32];
		localtime_r(&now, &tm);
		strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
		if (asprintf(&default_dir, "nbrun-out/batch-%s-%d", stamp, (int)getpid()) < 0)
			default_dir = NULL;
		b.out_dir = default_dir;
		default_dir = NULL;
	}
	if (!b.out_dir || path_mkdir_p(b.out_dir, 0755) < 0) {
		cli_error("cannot create %s: %s", b.out_dir ? b.out_dir : "output directory", strerror(errno));
		goto out;
	}
	snprintf(path, sizeof(path), "%s/report.jsonl", b.out_dir);
	b.jsonl = fopen(path, rerun ? "ae" : "we"); /* a rerun adds its lines */
	if (!b.jsonl) {
		cli_error("cannot write %s: %s", path, strerror(errno));
		goto out;
	}
	b.opts = args.opts;
	b.opts.cancel = &batch_interrupted;
	if (server) {
		rc = wire_random_hex(b.id, 16);
		if (rc < 0) {
			cli_error("cannot make the batch's id: %s", strerror(-rc));
			goto out;
		}
		b.remote.server = server;
		b.remote.token_file = token_file;
		b.remote.files = args.files;
		b.remote.file_count = args.nfiles;
		b.remote.env = args.env;
		b.remote.env_count = args.nenv;
		b.remote.allow_net = args.allow_net;
		b.remote.allow_net_count = args.nallow_net;
		b.remote.cancel = &batch_interrupted;
		b.remote.timeout_ms = timeout_set ? args.opts.timeout_ms : 0;
		b.retries = (unsigned int)retries;
		curl_global_init(CURL_GLOBAL_DEFAULT);
	}
	b.tty = !quiet && isatty(STDERR_FILENO);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = batch_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	b.t0 = clock_mono_ms();
	threads = calloc((size_t)jobs, sizeof(*threads));
	if (!threads)
		goto out;
	for (int64_t i = 0; i < jobs && (size_t)i < b.n; i++)
		if (pthread_create(&threads[started], NULL, batch_worker, &b) == 0)
			started++;
	if (!started) {
		cli_error("cannot start worker threads");
		goto out;
	}
	pthread_mutex_lock(&b.lock);
	while (b.running || (b.next < b.n && !b.stop && !batch_interrupted)) {
		if (b.tty)
			batch_draw(&b, &lines);
		clock_cond_wait_ms(&b.changed, &b.lock, 250);
	}
	if (b.tty)
		batch_draw(&b, &lines);
	pthread_mutex_unlock(&b.lock);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);

	report = batch_report(&b, (unsigned int)jobs, counts);
	snprintf(path, sizeof(path), "%s/report.json", b.out_dir);
	if (!report || batch_write_report(report, path) < 0) {
		cli_error("cannot write %s: %s", path, report ? strerror(errno) : "out of memory");
		goto out;
	}
	rc = batch_html_write(report, b.out_dir);
	if (rc < 0) {
		cli_error("cannot write %s/report.html: %s", b.out_dir, strerror(-rc));
		goto out;
	}
	if (json) {
		char *text = json_dumps(report, JSON_INDENT(2));
		if (text)
			puts(text);
		free(text);
	} else {
		batch_print_table(&b, report);
	}
	ret = batch_exit_code(&b, counts);
out:
	if (b.jsonl)
		fclose(b.jsonl);
	for (size_t i = 0; i < b.n; i++) {
		free(b.jobs[i].path);
		free(b.jobs[i].name);
		json_decref(b.jobs[i].params);
		json_decref(b.jobs[i].entry);
	}
	free(b.jobs);
	free(b.out_dir);
	free(threads);
	json_decref(report);
	json_decref(b.base);
	manifest_free(&manifest);
	json_decref(fixed);
	json_decref(grid);
	params_free(&params);
	/* The egress proxy, when the batch's runs needed it and no other run does now. */
	if (args.nallow_net && !b.remote.server) {
		struct nbrun_ctx *ectx = NULL;
		if (nbrun_ctx_new(&ectx) == 0)
			nbrun_egress_release(ectx);
		nbrun_ctx_free(ectx);
	}
	cli_run_args_free(&args);
	pthread_mutex_destroy(&b.lock);
	pthread_cond_destroy(&b.changed);
	for (size_t i = 0; i < b.nservers; i++)
		free(b.servers[i]);
	free(b.servers);
	if (b.remote.server)
		curl_global_cleanup();
	return ret;
}
