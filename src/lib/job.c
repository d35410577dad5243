/* SPDX-License-Identifier: MIT */
/*
 * One notebook executed in a started sandbox: upload, execute with the
 * deadline, fetch the executed notebook and /mnt/data, parse and export
 * them into the output directory, and decide the status.
 */
#include <archive_entry.h>
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

#define JOB_UID 1000
#define JOB_GID 1000

static void job_progress(struct nbrun__job *j, enum nbrun_phase phase)
{
	if (j->opts->progress)
		j->opts->progress(phase, j->opts->payload);
}

/* ---- upload ------------------------------------------------------------------ */

static int job_put_archive(struct nbrun__job *j, struct nbrun__tar *t, const char *dest)
{
	const void *data;
	size_t len;
	int rc;

	rc = nbrun__tar_finish(t, &data, &len);
	if (rc == NBRUN_EINVAL)
		return nbrun__err(j->ctx, rc, "input files are larger than the sandbox disk");
	if (rc < 0)
		return nbrun__err(j->ctx, rc, "cannot build the upload archive");
	return j->sb->ops->put_archive(j->sb, dest, data, len);
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

/*
 * The volumes are tmpfs: they hold files only while the container runs, so
 * uploads happen after start. Input files go first; the notebook and the
 * .ready marker that releases nbrun-exec go last, in one archive.
 */
static int job_upload(struct nbrun__job *j, const char *notebook, size_t len)
{
	const struct nbrun_run_options *o = j->opts;
	struct nbrun__tar *t = NULL;
	int rc = 0;

	if (o->file_count) {
		rc = nbrun__tar_new(&t, JOB_UID, JOB_GID, (size_t)o->disk_bytes + (1u << 20));
		if (rc < 0)
			return nbrun__err(j->ctx, rc, "out of memory");
		for (size_t i = 0; i < o->file_count && rc == 0; i++) {
			const char *name = job_base_name(o->files[i]);
			char clean[NBRUN_MAX_NAME_BYTES + 1];
			snprintf(clean, sizeof(clean), "%.*s", (int)strcspn(name, "/"), name);
			rc = nbrun__tar_add_path(j->ctx, t, o->files[i], clean);
		}
		nbrun__tar_take_files(t, &j->inputs, &j->n_inputs);
		if (rc == 0)
			rc = job_put_archive(j, t, "/mnt/data");
		nbrun__tar_free(t);
		t = NULL;
		if (rc < 0)
			return rc;
	}
	rc = nbrun__tar_new(&t, JOB_UID, JOB_GID, len + 8192);
	if (rc < 0)
		return nbrun__err(j->ctx, rc, "out of memory");
	rc = nbrun__tar_add_data(t, "notebook.ipynb", notebook, len);
	if (rc == 0)
		rc = nbrun__tar_add_data(t, ".ready", "", 0);
	if (rc == 0)
		rc = job_put_archive(j, t, "/app");
	nbrun__tar_free(t);
	return rc;
}

/* ---- execution ---------------------------------------------------------------- */

/* Cells nbrun-exec marked as interrupted at their cell timeout. */
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

/*
 * Wait for nbrun-exec's "NBRUN-DONE <exit code> <oom kills>" line. Returns 0
 * when done or the container stopped, 1 when the deadline passed.
 *
 * The engine's log stream is not reliable: when the json-file log rotates
 * (max-size 1m, and the code can write to it at will) a follower may miss
 * lines or see its stream end while the container runs on. So the log is
 * followed in short slices, each one reading the current file again, and a
 * stream that ends only counts when the container has really stopped.
 */
#define JOB_WAIT_SLICE_MS 2000L
static int job_wait(struct nbrun__job *j, int *code, bool *oom)
{
	struct nbrun__sandbox_state st;
	char rest[64];
	int rc, kills = 0;

	*code = -1;
	for (;;) {
		uint64_t now = clock_mono_ms();
		long left = j->deadline_ms > now ? (long)(j->deadline_ms - now) : 0;

		if (left <= 0)
			return 1;
		rc = j->sb->ops->wait_line(j->sb, "NBRUN-DONE ", rest, sizeof(rest),
					   left < JOB_WAIT_SLICE_MS ? left : JOB_WAIT_SLICE_MS);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			if (sscanf(rest, "%d %d", code, &kills) >= 1)
				*oom = kills > 0;
			return 0;
		}
		if (rc == 0) {
			/* The stream ended: done when the container stopped. */
			rc = j->sb->ops->state(j->sb, &st);
			if (rc < 0)
				return rc;
			if (!st.running)
				return 0;
			/* Cut by a log rotation: pause a little, then follow again. */
			nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
		}
		if (j->opts->cancel && *j->opts->cancel)
			return nbrun__err(j->ctx, NBRUN_ECANCELLED, "interrupted");
	}
}

/* ---- download and export ------------------------------------------------------ */

static int job_spool(struct nbrun__job *j, const char *src, uint64_t max, int *out_fd, bool *cut)
{
	int fd, rc;

	*out_fd = -1;
	*cut = false;
	/* The archive is spooled unnamed next to the output: bounded memory. */
	fd = openat(j->out_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		char tmpl[PATH_MAX];
		snprintf(tmpl, sizeof(tmpl), "%s/.spool-XXXXXX", j->out_dir);
		fd = mkostemp(tmpl, O_CLOEXEC);
		if (fd >= 0)
			unlink(tmpl);
	}
	if (fd < 0)
		return nbrun__errno(j->ctx, NBRUN_EIO, errno, "cannot make a spool file");
	rc = j->sb->ops->get_archive(j->sb, src, fd, max, cut);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	lseek(fd, 0, SEEK_SET);
	*out_fd = fd;
	return 0;
}

/* The executed notebook: a tar with one regular file, written as notebook.ipynb. */
struct nb_sink {
	struct nbrun__job *j;
	int fd;
	bool got, complete;
};

static int nb_entry(const struct nbrun__tar_entry *e, void *p)
{
	struct nb_sink *s = p;

	if (s->got || e->type != AE_IFREG || e->hardlink)
		return -1;
	s->fd = nbrun__export_open(s->j->out_fd, "notebook.ipynb", 0644);
	return s->fd >= 0 ? s->fd : -2;
}

static void nb_done(const struct nbrun__tar_entry *e, int fd, uint64_t written, bool complete,
		    void *p)
{
	struct nb_sink *s = p;

	s->got = true;
	s->complete = complete;
	close(fd);
	s->fd = -1;
}

static int job_fetch_notebook(struct nbrun__job *j, const char *src, bool *got)
{
	struct nb_sink s = { j, -1, false, false };
	struct nbrun__tar_sink sink = { nb_entry, nb_done, &s, j->lim.max_notebook_bytes, 4 };
	bool cut;
	int fd, rc;

	*got = false;
	rc = job_spool(j, src, j->lim.max_notebook_bytes + (1u << 20), &fd, &cut);
	if (rc == NBRUN_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	rc = nbrun__tar_extract(j->ctx, fd, &sink);
	close(fd);
	if (cut || (s.got && !s.complete)) {
		unlinkat(j->out_fd, "notebook.ipynb", 0);
		return nbrun__err(j->ctx, NBRUN_EPARSE, "the executed notebook is larger than %llu bytes",
				  (unsigned long long)j->lim.max_notebook_bytes);
	}
	if (rc < 0)
		return rc;
	*got = s.got;
	return 0;
}

static int job_export_files(struct nbrun__job *j)
{
	struct nbrun__files_export x = {
		.result = j->result,
		.out_fd = j->out_fd,
		.inputs = j->inputs,
		.n_inputs = j->n_inputs,
		.max_bytes = j->opts->max_file_bytes ? j->opts->max_file_bytes : NBRUN_DEFAULT_MAX_FILE_BYTES,
		.max_files = j->opts->max_files ? j->opts->max_files : NBRUN_DEFAULT_MAX_FILES,
	};
	bool cut;
	int fd, rc;

	/* The archive stream is bounded too: the data plus room for tar headers. */
	rc = job_spool(j, "/mnt/data", x.max_bytes + (uint64_t)(x.max_files * 4 + 64) * 1536 + (1u << 20),
		       &fd, &cut);
	if (rc < 0)
		return rc;
	rc = nbrun__export_files(j->ctx, &x, fd, cut);
	close(fd);
	return rc;
}

/* ---- the job ------------------------------------------------------------------ */

int nbrun__job_run(struct nbrun__job *j, const char *notebook, size_t len)
{
	struct nbrun__sandbox_state st = { false, false, 0 };
	char msg[512], logline[300];
	json_t *nb = NULL;
	bool timed_out = false, got = false;
	int rc, exec_code = -1, slow_cell = -1;
	bool oom_kills = false, partial = false;

	job_progress(j, NBRUN_PHASE_UPLOAD);
	rc = job_upload(j, notebook, len);
	if (rc < 0)
		return rc;

	job_progress(j, NBRUN_PHASE_EXECUTE);
	rc = job_wait(j, &exec_code, &oom_kills);
	if (rc < 0)
		return rc;
	timed_out = rc == 1;
	rc = j->sb->ops->state(j->sb, &st);
	if (rc < 0)
		return rc;

	job_progress(j, NBRUN_PHASE_DOWNLOAD);
	rc = job_fetch_notebook(j, "/app/executed.ipynb", &got);
	if (rc == 0 && !got) {
		/* nbconvert writes executed.ipynb last: without it the run did not
		 * finish, whatever the done line said (the code can forge it). */
		partial = true;
		rc = job_fetch_notebook(j, "/app/partial.ipynb", &got);
	}
	if (rc == NBRUN_ECANCELLED)
		return rc;
	if (rc < 0) {
		nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(j->ctx));
		got = false;
	}
	job_progress(j, NBRUN_PHASE_PARSE);
	if (got) {
		rc = nbrun__notebook_load(&nb, j->ctx, j->out_fd, "notebook.ipynb",
					  j->lim.max_notebook_bytes);
		if (rc == 0)
			rc = nbrun__outputs_parse(j->ctx, j->result, nb, j->out_fd, &j->lim);
		if (rc == 0)
			slow_cell = job_timed_out_cell(nb);
		json_decref(nb);
		if (rc < 0)
			nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(j->ctx));
	}
	/* Files after the notebook: the parser fills the document's other lists. */
	job_progress(j, NBRUN_PHASE_DOWNLOAD);
	rc = job_export_files(j);
	if (rc == NBRUN_ECANCELLED)
		return rc;

	/* What ended the run decides its status; outputs so far stay in the result. */
	if (timed_out) {
		snprintf(msg, sizeof(msg), "the run passed its %llu ms deadline and was killed%s",
			 (unsigned long long)j->opts->timeout_ms,
			 got ? "; outputs of the finished cells are kept" : "");
		nbrun__result_set_status(j->result, NBRUN_STATUS_TIMEOUT, msg);
	} else if (st.oom || oom_kills) {
		nbrun__result_set_status(j->result, NBRUN_STATUS_OOM,
					 "the sandbox ran out of memory (raise --memory)");
	} else if (slow_cell >= 0) {
		snprintf(msg, sizeof(msg), "cell %d passed its cell timeout and was interrupted; the other cells ran",
			 slow_cell);
		nbrun__result_set_status(j->result, NBRUN_STATUS_TIMEOUT, msg);
	} else if (exec_code != 0 || partial) {
		/* nbconvert stopped early (a dead kernel, say): the partial notebook has the cells that finished. */
		j->sb->ops->last_error_line(j->sb, logline, sizeof(logline));
		snprintf(msg, sizeof(msg), "%s (exit code %d)%s%s",
			 got ? "the run stopped early; outputs of the finished cells are kept"
			     : "no executed notebook came back",
			 exec_code >= 0 ? exec_code : st.exit_code, logline[0] ? ": " : "", logline);
		if (!nbrun_result_message(j->result))
			nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, msg);
	} else if (!got && !nbrun_result_message(j->result)) {
		nbrun__result_set_status(j->result, NBRUN_STATUS_FAILED, "no executed notebook came back");
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
