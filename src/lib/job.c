/* SPDX-License-Identifier: MIT */
/*
 * One notebook executed in a started sandbox, over its live channel
 * (environments/jupyter/PROTOCOL.md): inputs and notebook sent, executed
 * cells received as they finish, /mnt/data fetched, everything parsed and
 * exported into the output directory, and the status decided. Nothing of it
 * comes from a file or stream the user's code can write.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "nbrun-private.h"
#include "text.h"

#define JOB_UID 1000
#define JOB_GID 1000

static void job_progress(struct nbrun__job *j, enum nbrun_phase phase)
{
	if (j->opts->progress)
		j->opts->progress(phase, j->opts->payload);
}

/* ---- upload ------------------------------------------------------------------ */

/* Cell timeout: the whole run's deadline less a margin for the kernel start. */
#define JOB_MARGIN_MS 4000
/* Replies to requests other than execute (stored, archive headers). */
#define JOB_REPLY_TIMEOUT_MS 120000

static uint64_t job_after(uint64_t ms)
{
	return clock_mono_ms() + ms;
}

static const char *job_base_name(const char *path)
{
	size_t len = strlen(path);
	const char *b;

	while (len > 1 && path[len - 1] == '/')
		len--;
	b = memrchr(path, '/', len);
	return b ? b + 1 : path;
}

static int job_send(struct nbrun__job *j, json_t *msg, const void *blob, size_t len)
{
	int rc;

	if (!msg)
		return nbrun__err(j->ctx, NBRUN_ENOMEM, "out of memory");
	rc = nbrun__chan_send(&j->sb->ch, msg, blob, len, job_after(JOB_REPLY_TIMEOUT_MS));
	json_decref(msg);
	return rc;
}

/* The input files, as one archive unpacked in /mnt/data by the agent. */
int nbrun__inputs_tar(struct nbrun__tar **out, struct nbrun_ctx *ctx,
		      const struct nbrun_run_options *o, const void **data, size_t *len,
		      struct nbrun__export_input **inputs, size_t *n_inputs)
{
	struct nbrun__tar *t = NULL;
	int rc;

	*out = NULL;
	rc = nbrun__tar_new(&t, JOB_UID, JOB_GID, (size_t)o->disk_bytes + (1u << 20));
	if (rc < 0)
		return nbrun__err(ctx, rc, "out of memory");
	for (size_t i = 0; i < o->file_count && rc == 0; i++) {
		const char *name = job_base_name(o->files[i]);
		char clean[NBRUN_MAX_NAME_BYTES + 1];
		snprintf(clean, sizeof(clean), "%.*s", (int)strcspn(name, "/"), name);
		rc = nbrun__tar_add_path(ctx, t, o->files[i], clean);
	}
	nbrun__tar_take_files(t, inputs, n_inputs);
	if (rc == 0) {
		rc = nbrun__tar_finish(t, data, len);
		if (rc == NBRUN_EINVAL)
			rc = nbrun__err(ctx, rc, "input files are larger than the sandbox disk");
		else if (rc < 0)
			rc = nbrun__err(ctx, rc, "cannot build the upload archive");
	}
	if (rc < 0)
		nbrun__tar_free(t);
	else
		*out = t;
	return rc;
}

static int job_put_inputs(struct nbrun__job *j)
{
	struct nbrun__tar *t = NULL;
	const void *data;
	size_t len;
	int rc;

	if (!j->opts->file_count)
		return 0;
	rc = nbrun__inputs_tar(&t, j->ctx, j->opts, &data, &len, &j->inputs, &j->n_inputs);
	if (rc == 0)
		rc = job_send(j, json_pack("{s:s, s:s, s:s}", "type", "put", "id", "inputs", "path",
					   "/mnt/data"),
			      data, len);
	nbrun__tar_free(t);
	return rc;
}

static const char *job_exec_id(const struct nbrun__job *j)
{
	return j->exec_id ? j->exec_id : "run";
}

/* A run stops at the first cell that raises (papermill, Jupyter's Run All)
 * unless its options (version 5) allow errors; older callers go on. */
static bool job_stops_on_error(const struct nbrun__job *j)
{
	return j->session || (j->opts->version >= 5 && !j->opts->allow_errors);
}

static int job_send_execute(struct nbrun__job *j, const char *notebook, size_t len)
{
	const struct nbrun_run_options *o = j->opts;
	uint64_t cell_ms = o->cell_timeout_ms;
	json_t *msg;

	if (!cell_ms)
		cell_ms = o->timeout_ms > 2 * JOB_MARGIN_MS ? o->timeout_ms - JOB_MARGIN_MS
							    : o->timeout_ms / 2;
	msg = json_pack("{s:s, s:s, s:I, s:b}", "type", "execute", "id", job_exec_id(j),
			"cell_timeout", (json_int_t)(cell_ms < 1000 ? 1 : cell_ms / 1000), "stream",
			j->on_event != NULL);
	/* A session marks /mnt/data to fetch only what this execution changed. */
	if (msg && j->session &&
	    (json_object_set_new(msg, "mark", json_true()) < 0 ||
	     json_object_set_new(msg, "stop_on_error", json_true()) < 0 ||
	     json_object_set_new(msg, "count_from", json_integer(j->count_from)) < 0)) {
		json_decref(msg);
		msg = NULL;
	}
	if (msg && !j->session && job_stops_on_error(j) &&
	    json_object_set_new(msg, "stop_on_error", json_true()) < 0) {
		json_decref(msg);
		msg = NULL;
	}
	return job_send(j, msg, notebook, len);
}

/* ---- live events ------------------------------------------------------------- */

static void job_line(char *dst, size_t dstsz, const char *src);

static void job_event(struct nbrun__job *j, json_t *ev)
{
	char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;

	if (text)
		j->on_event(text, strlen(text), j->event_payload);
	free(text);
	json_decref(ev);
}

/* An output as the agent streamed it: only its shape is checked (the cell message is the authority). */
static void job_event_output(struct nbrun__job *j, const json_t *msg)
{
	json_t *out = json_object_get(msg, "output");
	json_t *cell = json_object_get(msg, "cell");

	if (!j->on_event || !json_is_object(out) || !json_is_integer(cell) ||
	    !json_is_string(json_object_get(out, "output_type")))
		return;
	job_event(j, json_pack("{s:s, s:O, s:O}", "event", "output", "cell", cell, "output", out));
}

static void job_event_cell(struct nbrun__job *j, const json_t *nb, const json_t *msg)
{
	json_t *cell = json_object_get(msg, "cell");
	const json_t *c = json_array_get(json_object_get(nb, "cells"), (size_t)json_integer_value(cell));
	const json_t *count = json_object_get(c, "execution_count");
	char status[16];

	if (!j->on_event)
		return;
	job_line(status, sizeof(status), json_string_value(json_object_get(msg, "status")));
	job_event(j, json_pack("{s:s, s:O, s:s, s:I, s:O}", "event", "cell", "cell", cell, "status",
			       status, "duration_ms",
			       json_integer_value(json_object_get(msg, "duration_ms")),
			       "execution_count", json_is_integer(count) ? count : json_null()));
}

/* Ask the agent to interrupt this execution (another thread raised the flag). */
static int job_send_interrupt(struct nbrun__job *j)
{
	__atomic_store_n(j->interrupt, 0, __ATOMIC_SEQ_CST);
	return job_send(j, json_pack("{s:s, s:s, s:s}", "type", "interrupt", "id", "interrupt",
				     "target", job_exec_id(j)),
			NULL, 0);
}

/* ---- execution ---------------------------------------------------------------- */

/* Cells the agent marked as interrupted at their cell timeout. */
static int job_timed_out_cell(const json_t *nb)
{
	const json_t *cell;
	size_t i;

	json_array_foreach(json_object_get(nb, "cells"), i, cell) {
		const json_t *m = json_object_get(json_object_get(cell, "metadata"), "nbrun");
		if (json_is_true(json_object_get(m, "timed_out")))
			return (int)i;
	}
	return -1;
}

/* What the agent said about the execution. */
struct job_end {
	bool done;            /* a done message came */
	bool timed_out;       /* the run's deadline passed first */
	bool ended;           /* the stream ended first */
	bool violation;
	int oom_kills;
	char status[16];      /* done.status */
	char message[300];    /* done.message, or what broke */
	uint64_t values;      /* JSON values received in cells */
	uint64_t bytes;       /* bytes of executed cells received */
	/* The first cell whose execute_reply said error (-1: none), and what the
	 * reply named: a cell may fail without an error output (IPython's
	 * UsageError for an unknown magic writes only to stderr). */
	int err_cell;
	char err_name[128];
	char err_value[300];
	uint64_t start_us, end_us; /* wall clock of the execution, for papermill's metadata */
};

/* A printable one-line copy of an untrusted text: controls (C0, DEL, C1) become spaces. */
static void job_line(char *dst, size_t dstsz, const char *src)
{
	const unsigned char *p = (const unsigned char *)(src ? src : "");
	size_t n = 0;

	for (; *p && n + 1 < dstsz; p++) {
		if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			dst[n++] = ' ';
			p++;
		} else {
			dst[n++] = *p < 0x20 || *p == 0x7f ? ' ' : (char)*p;
		}
	}
	dst[n] = '\0';
	/* Invalid UTF-8 (a cut sequence, or bytes that never were text) is dropped. */
	if (!text_utf8_valid(dst, n)) {
		size_t k = 0;
		for (size_t i = 0; i < n;) {
			size_t len = 1;
			while (len <= 4 && i + len <= n && !text_utf8_valid(dst + i, len))
				len++;
			if (len <= 4 && i + len <= n) {
				memmove(dst + k, dst + i, len);
				k += len;
				i += len;
			} else {
				i++;
			}
		}
		dst[k] = '\0';
	}
}

/* Data the agent sent that does not parse is its violation, not a notebook's. */
static int job_violation(struct nbrun__job *j, const char *what)
{
	char why[sizeof(j->ctx->errmsg)];

	snprintf(why, sizeof(why), "%s", nbrun_ctx_errmsg(j->ctx));
	return nbrun__err(j->ctx, NBRUN_EPARSE, "sandbox protocol violation: %s: %s", what, why);
}

/* Cells larger than this are spooled to a file and parsed from it. */
#define JOB_CELL_IN_MEMORY (1u << 20)

static int job_spool_fd(struct nbrun__job *j);

/*
 * An executed cell's data: small ones parsed in memory, larger ones spooled
 * to an unnamed file first, so that the raw text and the tree are never
 * both in memory (a cell may be hundreds of MB).
 */
static int job_cell_data(struct nbrun__job *j, json_t **cell, uint64_t left, struct job_end *e)
{
	struct buf blob = BUF_INIT(JOB_CELL_IN_MEMORY);
	int64_t len = j->sb->ch.blob_left;
	int fd, rc;

	if (len >= 0 && (uint64_t)len <= JOB_CELL_IN_MEMORY) {
		rc = nbrun__chan_recv_blob(&j->sb->ch, &blob, -1, left, j->deadline_ms);
		if (rc == 0) {
			e->bytes += blob.len;
			rc = nbrun__notebook_piece_loadb(cell, j->ctx, blob.data ? blob.data : "",
							 blob.len, &e->values);
		}
		buf_free(&blob);
		return rc;
	}
	fd = job_spool_fd(j);
	if (fd < 0)
		return fd;
	rc = nbrun__chan_recv_blob(&j->sb->ch, NULL, fd, left, j->deadline_ms);
	if (rc == 0) {
		e->bytes += (uint64_t)len;
		rc = nbrun__notebook_piece_loadfd(cell, j->ctx, fd, left, &e->values);
	}
	close(fd);
	return rc;
}

/* ---- papermill's metadata ---------------------------------------------------------- */

static uint64_t job_wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* As papermill writes times: ISO 8601 in UTC, no zone suffix (datetime.utcnow().isoformat()). */
static json_t *job_iso(uint64_t us)
{
	time_t s = (time_t)(us / 1000000u);
	struct tm tm;
	char t[48];
	size_t n;

	gmtime_r(&s, &tm);
	n = strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(t + n, sizeof(t) - n, ".%06u", (unsigned int)(us % 1000000u));
	return json_string(t);
}

static json_t *job_cell_meta(uint64_t start_us, uint64_t end_us, const char *status)
{
	bool failed = !strcmp(status, "failed");

	return json_pack("{s:o, s:o, s:f, s:b, s:s}", "start_time", job_iso(start_us), "end_time",
			 job_iso(end_us), "duration", (double)(end_us - start_us) / 1e6, "exception",
			 failed, "status", status);
}

/*
 * metadata.papermill of an executed code cell (papermill's
 * NotebookExecutionManager): its times from the agent's duration, failed
 * when it raised or passed its timeout. A cell sent again after a display
 * update keeps what its first copy got.
 */
static void job_cell_times(struct nbrun__job *j, json_t *cells, size_t i, json_t *cell, const json_t *msg)
{
	json_t *old = json_object_get(json_object_get(json_array_get(cells, i), "metadata"), "papermill");
	json_t *meta = json_object_get(cell, "metadata");
	const char *st = json_string_value(json_object_get(msg, "status")) ?: "";
	json_int_t ms = json_integer_value(json_object_get(msg, "duration_ms"));
	uint64_t end = job_wall_us();

	json_incref(old);
	json_array_set_new(cells, i, cell);
	if (j->session) {
		json_decref(old);
		return;
	}
	if (!json_is_object(meta)) {
		meta = json_object();
		json_object_set_new(cell, "metadata", meta);
	}
	if (ms < 0 || (uint64_t)ms * 1000u > end)
		ms = 0;
	if (old)
		json_object_set_new(meta, "papermill", old);
	else
		json_object_set_new(meta, "papermill",
				    job_cell_meta(end - (uint64_t)ms * 1000u, end,
						  strcmp(st, "error") && strcmp(st, "timeout") ? "completed" : "failed"));
}

/*
 * metadata.papermill of the notebook and of the cells without one, so that
 * tools that read papermill's output (scrapbook, dashboards) read nbrun's:
 * parameters, start and end time, duration, whether a cell raised; cells
 * up to the last one executed count as completed, those after it pending.
 */
static int job_papermill_metadata(struct nbrun__job *j, json_t *nb, const struct job_end *e)
{
	json_t *meta = json_object_get(nb, "metadata"), *pm, *cells = json_object_get(nb, "cells"), *cell;
	uint64_t at = e->start_us, end = e->end_us ? e->end_us : job_wall_us();
	size_t i, last = 0;
	bool exception = false, any = false;
	char path[4200];

	if (j->session)
		return 0;
	json_array_foreach(cells, i, cell) {
		const json_t *p = json_object_get(json_object_get(cell, "metadata"), "papermill");
		if (json_is_object(p)) {
			last = i;
			any = true;
			exception |= json_is_true(json_object_get(p, "exception"));
		}
	}
	json_array_foreach(cells, i, cell) {
		json_t *cm = json_object_get(cell, "metadata");
		const json_t *p = json_object_get(cm, "papermill");
		if (!json_is_object(cm)) {
			cm = json_object();
			json_object_set_new(cell, "metadata", cm);
		}
		if (json_is_object(p))
			continue;
		if (any && i < last)
			json_object_set_new(cm, "papermill", job_cell_meta(at, at, "completed"));
		else
			json_object_set_new(cm, "papermill",
					    json_pack("{s:n, s:n, s:n, s:n, s:s}", "start_time", "end_time",
						      "duration", "exception", "status", "pending"));
	}
	if (!json_is_object(meta)) {
		meta = json_object();
		json_object_set_new(nb, "metadata", meta);
	}
	pm = json_object_get(meta, "papermill");
	if (!json_is_object(pm)) {
		pm = json_object();
		json_object_set_new(meta, "papermill", pm);
	}
	if (!json_is_object(json_object_get(pm, "parameters")))
		json_object_set_new(pm, "parameters", json_object());
	if (!json_object_get(pm, "environment_variables"))
		json_object_set_new(pm, "environment_variables", json_object());
	if (!json_object_get(pm, "input_path"))
		json_object_set_new(pm, "input_path", json_null());
	snprintf(path, sizeof(path), "%s/notebook.ipynb", j->out_dir ? j->out_dir : ".");
	json_object_set_new(pm, "output_path", json_string(path));
	json_object_set_new(pm, "start_time", job_iso(e->start_us));
	json_object_set_new(pm, "end_time", job_iso(end));
	json_object_set_new(pm, "duration", json_real((double)(end - e->start_us) / 1e6));
	json_object_set_new(pm, "exception", json_boolean(exception));
	return 0;
}

/* An executed cell: it replaces the code cell at its index. */
static int job_take_cell(struct nbrun__job *j, json_t *nb, const json_t *msg, struct job_end *e)
{
	json_t *cells = json_object_get(nb, "cells"), *cell = NULL;
	json_int_t i = json_integer_value(json_object_get(msg, "cell"));
	uint64_t left = j->lim.max_notebook_bytes > e->bytes ? j->lim.max_notebook_bytes - e->bytes : 0;
	int rc;

	if (!json_is_integer(json_object_get(msg, "cell")) || i < 0 ||
	    (size_t)i >= json_array_size(cells) ||
	    strcmp(json_string_value(json_object_get(json_array_get(cells, (size_t)i), "cell_type")) ?: "",
		   "code"))
		return nbrun__err(j->ctx, NBRUN_EPARSE, "sandbox protocol violation: a cell that is not one of the notebook's code cells");
	rc = job_cell_data(j, &cell, left, e);
	if (rc == NBRUN_EPARSE && strncmp(nbrun_ctx_errmsg(j->ctx), "sandbox protocol violation", 26))
		rc = job_violation(j, "an executed cell");
	if (rc != 0)
		return rc;
	if (!json_is_object(cell) ||
	    strcmp(json_string_value(json_object_get(cell, "cell_type")) ?: "", "code")) {
		json_decref(cell);
		return nbrun__err(j->ctx, NBRUN_EPARSE, "sandbox protocol violation: an executed cell that is not a code cell");
	}
	job_cell_times(j, cells, (size_t)i, cell, msg);
	if (!strcmp(json_string_value(json_object_get(msg, "status")) ?: "", "error") &&
	    (e->err_cell < 0 || i < e->err_cell)) {
		e->err_cell = (int)i;
		job_line(e->err_name, sizeof(e->err_name), json_string_value(json_object_get(msg, "ename")));
		job_line(e->err_value, sizeof(e->err_value),
			 json_string_value(json_object_get(msg, "evalue")));
	}
	return 0;
}

/*
 * A cell is an error when its execute_reply said so, whatever outputs it
 * has: the result's error is then that cell's (the first one), named as the
 * reply named it. An agent that does not send the name still says "cell N
 * raised NAME" in done.
 */
static int job_reply_errors(struct nbrun__job *j, const json_t *nb, const struct job_end *e)
{
	json_t *doc = j->result->doc, *have = json_object_get(doc, "error"), *err;
	json_int_t cell = e->err_cell;
	char name[128], value[300];
	int n = 0;

	snprintf(name, sizeof(name), "%s", e->err_name);
	snprintf(value, sizeof(value), "%s", e->err_value);
	/* Only an execution that ended `error`: a dead kernel's cell says error
	 * too, but the run failed, and says why. */
	if (!e->done || strcmp(e->status, "error"))
		return 0;
	if (!name[0] || cell < 0) {
		int c = -1;
		if (sscanf(e->message, "cell %d raised %n", &c, &n) == 1 && n > 0) {
			if (!name[0])
				snprintf(name, sizeof(name), "%.*s", (int)strcspn(e->message + n, " "),
					 e->message + n);
			if (cell < 0)
				cell = c;
		}
	}
	if (json_is_object(have) && (cell < 0 || json_integer_value(json_object_get(have, "cell")) <= cell))
		return 0; /* an error output of this cell, or of an earlier one, says it already */
	if (!strcmp(name, "SystemExit")) {
		/* a clean exit is a success: the reply's value, or the cell's error output, says */
		const json_t *o;
		size_t k;
		if (e->err_cell >= 0 && e->err_name[0] && nbrun__is_clean_exit(name, value))
			return 0;
		json_array_foreach(json_object_get(json_array_get(json_object_get(nb, "cells"), (size_t)cell),
						   "outputs"), k, o)
			if (nbrun__is_clean_exit(json_string_value(json_object_get(o, "ename")),
						 json_string_value(json_object_get(o, "evalue"))))
				return 0;
	}
	if (!value[0])
		snprintf(value, sizeof(value), "the kernel reported an error without an error output");
	err = json_pack("{s:I, s:s, s:s, s:s}", "cell", cell < 0 ? (json_int_t)0 : cell, "name",
			name[0] ? name : "Error", "value", value, "traceback", "");
	if (!err || json_object_set_new(doc, "error", err) < 0)
		return nbrun__err(j->ctx, NBRUN_ENOMEM, "out of memory");
	nbrun__result_set_status(j->result, NBRUN_STATUS_ERROR, NULL);
	return 0;
}

static int job_take_done(struct nbrun__job *j, json_t *nb, const json_t *msg, struct job_end *e)
{
	struct buf blob = BUF_INIT(NBRUN__CHAN_MAX_JSON * 4);
	json_t *meta = NULL;
	int rc;

	e->done = true;
	e->end_us = job_wall_us();
	e->oom_kills = (int)json_integer_value(json_object_get(msg, "oom_kills"));
	job_line(e->status, sizeof(e->status), json_string_value(json_object_get(msg, "status")));
	job_line(e->message, sizeof(e->message), json_string_value(json_object_get(msg, "message")));
	rc = nbrun__chan_recv_blob(&j->sb->ch, &blob, -1, blob.max - 1, j->deadline_ms);
	if (rc == 0 && blob.len)
		rc = nbrun__notebook_piece_loadb(&meta, j->ctx, blob.data, blob.len, &e->values);
	buf_free(&blob);
	if (rc == NBRUN_EPARSE && strncmp(nbrun_ctx_errmsg(j->ctx), "sandbox protocol violation", 26))
		rc = job_violation(j, "the notebook's metadata");
	if (rc != 0)
		return rc;
	/* The kernel's language_info and widget state, as nbconvert keeps them. */
	if (json_is_object(meta))
		json_object_set(nb, "metadata", meta);
	json_decref(meta);
	return 0;
}

/*
 * A receive that delivered nothing: the deadline passed (2), the stream
 * ended (0) or broke, or the agent broke the protocol. 0 with e saying how
 * the run ended, or NBRUN_ECANCELLED.
 */
static int job_stopped(struct nbrun__job *j, struct job_end *e, int rc)
{
	if (rc == NBRUN_ECANCELLED)
		return rc;
	if (rc == 2) {
		e->timed_out = true;
	} else if (rc == NBRUN_EPARSE) {
		e->violation = true;
		job_line(e->message, sizeof(e->message), nbrun_ctx_errmsg(j->ctx));
	} else {
		e->ended = true;
	}
	return 0;
}

/*
 * Read the agent's messages until the execution is done, the deadline
 * passes or the stream ends; executed cells go into nb as they come.
 * 0 (e says how it ended), < 0 on cancel or a broken engine.
 */
static int job_follow(struct nbrun__job *j, json_t *nb, struct job_end *e)
{
	j->sb->ch.poke = j->interrupt;
	for (;;) {
		json_t *msg = NULL;
		const char *type;
		int rc = nbrun__chan_recv(&j->sb->ch, &msg, j->deadline_ms);

		if (rc == 3) {
			rc = job_send_interrupt(j);
			if (rc < 0)
				return job_stopped(j, e, rc);
			continue;
		}
		if (rc != 1)
			return job_stopped(j, e, rc);
		type = json_string_value(json_object_get(msg, "type"));
		rc = 0;
		if (!strcmp(type, "hello") &&
		    json_integer_value(json_object_get(msg, "protocol")) != NBRUN__CHAN_PROTOCOL) {
			snprintf(e->message, sizeof(e->message),
				 "the image speaks sandbox protocol %" JSON_INTEGER_FORMAT
				 ", this nbrun %d: use an image of the same release (scripts/setup)",
				 json_integer_value(json_object_get(msg, "protocol")), NBRUN__CHAN_PROTOCOL);
			e->violation = true;
		} else if (!strcmp(type, "cell")) {
			rc = job_take_cell(j, nb, msg, e);
			if (rc == 0)
				job_event_cell(j, nb, msg);
		} else if (!strcmp(type, "output")) {
			job_event_output(j, msg);
		} else if (!strcmp(type, "done")) {
			rc = job_take_done(j, nb, msg, e);
		} else if (!strcmp(type, "error")) {
			char line[200];
			job_line(line, sizeof(line), json_string_value(json_object_get(msg, "message")));
			snprintf(e->message, sizeof(e->message), "the sandbox refused the run: %s", line);
			e->violation = json_is_true(json_object_get(msg, "fatal")) ||
				       !strcmp(json_string_value(json_object_get(msg, "id")) ?: "", job_exec_id(j)) ||
				       !strcmp(json_string_value(json_object_get(msg, "id")) ?: "", "inputs");
		}
		/* Data of messages not looked at (newer types, streamed outputs) is skipped. */
		if (rc == 0)
			rc = nbrun__chan_recv_blob(&j->sb->ch, NULL, -1, j->lim.max_notebook_bytes, j->deadline_ms);
		json_decref(msg);
		if (rc != 0)
			return job_stopped(j, e, rc);
		if (e->done || e->violation)
			return 0;
	}
}

/* ---- download and export ------------------------------------------------------ */

/* An unnamed spool file next to the output: bounded memory for large archives. */
static int job_spool_fd(struct nbrun__job *j)
{
	int fd = openat(j->out_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0) {
		char tmpl[PATH_MAX];
		snprintf(tmpl, sizeof(tmpl), "%s/.spool-XXXXXX", j->out_dir);
		fd = mkostemp(tmpl, O_CLOEXEC);
		if (fd >= 0)
			unlink(tmpl);
	}
	if (fd < 0)
		return nbrun__errno(j->ctx, NBRUN_EIO, errno, "cannot make a spool file");
	return fd;
}

static uint64_t job_max_file_bytes(const struct nbrun__job *j)
{
	return j->opts->max_file_bytes ? j->opts->max_file_bytes : NBRUN_DEFAULT_MAX_FILE_BYTES;
}

static size_t job_max_files(const struct nbrun__job *j)
{
	return j->opts->max_files ? j->opts->max_files : NBRUN_DEFAULT_MAX_FILES;
}

/*
 * The archive of /mnt/data is bounded too: in entries (files, the
 * directories above them, links and others the export skips, with room)
 * and in bytes (the data plus those entries' tar headers).
 */
static size_t job_max_entries(const struct nbrun__job *j)
{
	return job_max_files(j) * 4 + 64;
}

static uint64_t job_max_archive(const struct nbrun__job *j)
{
	return job_max_file_bytes(j) + (uint64_t)job_max_entries(j) * 1536 + (1u << 20);
}

/*
 * Ask for /mnt/data right behind the notebook: the agent answers requests
 * in order, so the archive follows `done` without a round trip of its own.
 */
static int job_send_fetch(struct nbrun__job *j)
{
	return job_send(j, json_pack("{s:s, s:s, s:s, s:I, s:I, s:b}", "type", "fetch", "id", "data", "path",
				     "/mnt/data", "max_bytes", (json_int_t)job_max_archive(j), "max_entries",
				     (json_int_t)job_max_entries(j), "changed", j->session),
			NULL, 0);
}

/*
 * /mnt/data as a tar in fd: the agent's answer to the fetch sent with the
 * notebook while the channel works, else (deadline, a dead agent) through
 * the engine's archive API.
 */
static int job_fetch_data(struct nbrun__job *j, int fd, uint64_t max, bool use_channel, bool *cut)
{
	json_t *msg = NULL;
	uint64_t deadline = job_after(JOB_REPLY_TIMEOUT_MS);
	int rc = 0;

	*cut = false;
	if (!use_channel)
		return j->sb->ops->get_archive(j->sb, "/mnt/data", fd, max, cut);
	while (rc == 0) {
		const char *type;

		rc = nbrun__chan_recv(&j->sb->ch, &msg, deadline);
		if (rc != 1)
			break;
		type = json_string_value(json_object_get(msg, "type"));
		if (!strcmp(type, "archive")) {
			*cut = json_is_true(json_object_get(msg, "truncated"));
			rc = nbrun__chan_recv_blob(&j->sb->ch, NULL, fd, max, deadline);
			json_decref(msg);
			return rc == 2 ? nbrun__err(j->ctx, NBRUN_EENGINE, "the sandbox did not send /mnt/data in time")
				       : rc;
		}
		if (!strcmp(type, "error")) {
			char line[200];
			job_line(line, sizeof(line), json_string_value(json_object_get(msg, "message")));
			json_decref(msg);
			return nbrun__err(j->ctx, NBRUN_EIO, "the sandbox could not archive /mnt/data: %s", line);
		}
		rc = nbrun__chan_recv_blob(&j->sb->ch, NULL, -1, j->lim.max_notebook_bytes, deadline);
		json_decref(msg);
		msg = NULL;
	}
	if (rc == 2 || rc == 0)
		return nbrun__err(j->ctx, NBRUN_EENGINE, "the sandbox did not send /mnt/data%s",
				  rc == 2 ? " in time" : "");
	return rc;
}

static int job_export_files(struct nbrun__job *j, bool use_channel)
{
	struct nbrun__files_export x = {
		.result = j->result,
		.out_fd = j->out_fd,
		.inputs = j->inputs,
		.n_inputs = j->n_inputs,
		.max_bytes = job_max_file_bytes(j),
		.max_files = job_max_files(j),
	};
	bool cut;
	int fd, rc;

	fd = job_spool_fd(j);
	if (fd < 0)
		return fd;
	rc = job_fetch_data(j, fd, job_max_archive(j), use_channel, &cut);
	if (rc < 0 && (j->sb->ch.spool_errno == ENOSPC || j->sb->ch.spool_errno == EDQUOT)) {
		/* The host's disk filled while /mnt/data came in: what fitted is
		 * exported as far as it goes, and the rest is said to be missing. */
		lseek(fd, 0, SEEK_SET);
		x.partial = true;
		nbrun__export_files(j->ctx, &x, fd, false);
		close(fd);
		nbrun__result_flag_truncated(j->result);
		return nbrun__result_skip(j->result, "/mnt/data", "host disk full");
	}
	if (rc == 0) {
		lseek(fd, 0, SEEK_SET);
		rc = nbrun__export_files(j->ctx, &x, fd, cut);
	}
	close(fd);
	return rc;
}

/* papermill's error markers (papermill/execute.py), so that a notebook that
 * stopped at an error reads as papermill's would. */
#define JOB_ERROR_TAG "papermill-error-cell-tag"
#define JOB_ERROR_STYLE \
	"style=\"color:red; font-family:Helvetica Neue, Helvetica, Arial, sans-serif; font-size:2em;\""

static json_t *job_marker_cell(struct nbrun__job *j, const char *source)
{
	char id[16];

	if (nbrun__random_id(j->ctx, id) < 0)
		return NULL;
	return json_pack("{s:s, s:s, s:{s:[s]}, s:s}", "cell_type", "markdown", "id", id, "metadata",
			 "tags", JOB_ERROR_TAG, "source", source);
}

/*
 * Execution stopped at a cell that raised: a marker cell at the top of the
 * notebook links to an anchor cell just before that cell. Only in the
 * written notebook: the result's cell numbers are those of the notebook run.
 */
static int job_error_markers(struct nbrun__job *j, json_t *nb)
{
	const json_t *err = json_object_get(j->result->doc, "error");
	json_t *cells = json_object_get(nb, "cells"), *top, *anchor;
	json_int_t at = json_integer_value(json_object_get(err, "cell"));
	const json_t *count;
	char msg[512], n[32];

	/* a cell timeout ends papermill with its own exception, before any marker */
	if (j->session || !job_stops_on_error(j) || nbrun_result_status(j->result) != NBRUN_STATUS_ERROR ||
	    !json_is_object(err) || at < 0 || (size_t)at >= json_array_size(cells) ||
	    job_timed_out_cell(nb) >= 0)
		return 0;
	count = json_object_get(json_array_get(cells, (size_t)at), "execution_count");
	if (json_is_integer(count))
		snprintf(n, sizeof(n), "%" JSON_INTEGER_FORMAT, json_integer_value(count));
	else
		snprintf(n, sizeof(n), "None");
	snprintf(msg, sizeof(msg),
		 "<span " JOB_ERROR_STYLE ">An Exception was encountered at '<a href=\"#papermill-error-cell\">In [%s]</a>'.</span>",
		 n);
	anchor = job_marker_cell(j, "<span id=\"papermill-error-cell\" " JOB_ERROR_STYLE
				    ">Execution using papermill encountered an exception here and stopped:</span>");
	if (!anchor || json_array_insert_new(cells, (size_t)at, anchor) < 0)
		return nbrun__err(j->ctx, NBRUN_ENOMEM, "out of memory");
	top = job_marker_cell(j, msg);
	if (!top || json_array_insert_new(cells, 0, top) < 0)
		return nbrun__err(j->ctx, NBRUN_ENOMEM, "out of memory");
	return 0;
}

/* json_dump_callback() into a file, keeping why a write failed (ENOSPC...). */
struct job_dump {
	int fd;
	int err;
};

static int job_dump_cb(const char *buf, size_t size, void *data)
{
	struct job_dump *d = data;

	d->err = fd_write_all(d->fd, buf, size);
	return d->err < 0 ? -1 : 0;
}

/* The executed notebook, as the agent's cells made it, kept in the output
 * directory: written whole or not at all, as result.json. */
static int job_write_notebook(struct nbrun__job *j, const json_t *nb)
{
	struct fd_atomic a;
	struct job_dump d = { -1, 0 };
	int rc = fd_atomic_open(&a, j->out_fd, "notebook.ipynb", 0644);

	if (rc < 0)
		return nbrun__errno(j->ctx, nbrun__write_error(rc), -rc, "cannot write notebook.ipynb");
	d.fd = a.fd;
	if (json_dump_callback(nb, job_dump_cb, &d, JSON_INDENT(1)) < 0)
		rc = d.err < 0 ? d.err : -ENOMEM;
	else
		rc = fd_write_all(a.fd, "\n", 1);
	if (rc == 0)
		rc = fd_atomic_commit(&a);
	else
		fd_atomic_abort(&a);
	if (rc == -ENOMEM)
		return nbrun__err(j->ctx, NBRUN_ENOMEM, "out of memory writing notebook.ipynb");
	if (rc < 0)
		return nbrun__errno(j->ctx, nbrun__write_error(rc), -rc, "cannot write notebook.ipynb");
	return 0;
}

/* ---- the job ------------------------------------------------------------------ */

int nbrun__job_run(struct nbrun__job *j, json_t *nb, const char *notebook, size_t len)
{
	struct nbrun__sandbox_state st = { false, false, 0 };
	struct job_end e;
	char msg[600];
	bool got;
	int rc, slow_cell = -1;

	memset(&e, 0, sizeof(e));
	e.err_cell = -1;
	/* "skipped" holds as many entries as the run exports files. */
	j->result->max_skipped = job_max_files(j);
	if (!j->sb->conn)
		return nbrun__err(j->ctx, NBRUN_EINVAL, "the sandbox has no channel");
	job_progress(j, NBRUN_PHASE_UPLOAD);
	rc = job_put_inputs(j);
	if (rc == 0)
		rc = job_send_execute(j, notebook, len);
	if (rc == 0)
		rc = job_send_fetch(j);
	if (rc < 0)
		return rc;

	job_progress(j, NBRUN_PHASE_EXECUTE);
	e.start_us = job_wall_us();
	rc = job_follow(j, nb, &e);
	j->sb->ch.poke = NULL;
	if (rc < 0)
		return rc;
	snprintf(j->end_status, sizeof(j->end_status), "%s", e.done ? e.status : "");
	if (!e.done) {
		rc = j->sb->ops->state(j->sb, &st);
		if (rc < 0)
			return rc;
	}

	/* Whatever came back is kept: the cells that finished are in nb. */
	job_progress(j, NBRUN_PHASE_PARSE);
	got = e.done || e.bytes > 0;
	if (got) {
		int wrc;
		rc = nbrun__outputs_parse(j->ctx, j->result, nb, j->out_fd, &j->lim);
		if (rc == 0)
			rc = job_reply_errors(j, nb, &e);
		if (rc == 0)
			slow_cell = job_timed_out_cell(nb);
		if (rc < 0)
			nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(j->ctx));
		/* written after the parse: the markers are not cells of the run */
		wrc = job_papermill_metadata(j, nb, &e);
		/* a dead kernel or a lost sandbox ends papermill before any marker too */
		if (wrc == 0 && e.done && !strcmp(e.status, "error"))
			wrc = job_error_markers(j, nb);
		if (wrc == 0)
			wrc = job_write_notebook(j, nb);
		if (wrc < 0)
			nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(j->ctx));
	}
	/* Files after the notebook: the parser fills the document's other lists. */
	job_progress(j, NBRUN_PHASE_DOWNLOAD);
	rc = job_export_files(j, e.done && !e.violation);
	if (rc == NBRUN_ECANCELLED)
		return rc;
	if (rc < 0 && !nbrun_result_message(j->result))
		nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(j->ctx));

	/* What ended the run decides its status; outputs so far stay in the result. */
	if (e.timed_out) {
		snprintf(msg, sizeof(msg), "the run passed its %llu ms deadline and was killed%s",
			 (unsigned long long)j->opts->timeout_ms,
			 got ? "; outputs of the finished cells are kept" : "");
		nbrun__result_set_status(j->result, NBRUN_STATUS_TIMEOUT, msg);
	} else if (st.oom || e.oom_kills > 0) {
		nbrun__result_set_status(j->result, NBRUN_STATUS_OOM,
					 "the sandbox ran out of memory (raise --memory)");
	} else if (slow_cell >= 0) {
		snprintf(msg, sizeof(msg), "cell %d passed its cell timeout and was interrupted; %s", slow_cell,
			 job_stops_on_error(j) ? "the cells after it did not run" : "the other cells ran");
		nbrun__result_set_status(j->result, NBRUN_STATUS_TIMEOUT, msg);
	} else if (e.violation) {
		nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, e.message);
	} else if (!e.done || (strcmp(e.status, "ok") && strcmp(e.status, "error"))) {
		/* The kernel or the agent died: the cells that finished are kept. */
		char why[400];
		if (e.message[0])
			snprintf(why, sizeof(why), "%s", e.message);
		else if (!e.done && !st.running && (st.exit_code == 137 || st.exit_code == 143))
			/* SIGKILL or SIGTERM from outside: the engine stopping is the usual cause. */
			snprintf(why, sizeof(why), "the sandbox was stopped from outside (exit code %d): the "
				 "Docker engine stopped or restarted, or its container was killed", st.exit_code);
		else
			job_line(why, sizeof(why), j->sb->conn ? j->sb->conn->err_tail : "");
		snprintf(msg, sizeof(msg), "%s%s%s",
			 got ? "the run stopped early; outputs of the finished cells are kept"
			     : "no executed notebook came back",
			 why[0] ? ": " : "", why);
		nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, msg);
	}
	return 0;
}

void nbrun__job_release(struct nbrun__job *j)
{
	for (size_t i = 0; i < j->n_inputs; i++)
		free(j->inputs[i].name);
	free(j->inputs);
	j->inputs = NULL;
	j->n_inputs = 0;
}
