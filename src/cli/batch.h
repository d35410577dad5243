/* SPDX-License-Identifier: MIT */
/* What nbrun batch's parts share: notebook names, manifests, the HTML report, rendering. */
#ifndef NBRUN_CLI_BATCH_H
#define NBRUN_CLI_BATCH_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "nbrun.h"

/* Where earlier attempts of a notebook go, below the batch's directory:
 * attempts/<name>/<attempt>/. */
#define BATCH_ATTEMPTS_DIR "attempts"

/* ---- names (manifest.c) ------------------------------------------------------ */

/*
 * Why name cannot be the directory of a notebook in a batch's directory, or
 * NULL when it can: one path component of at most 200 bytes of UTF-8,
 * without control characters, not "." or "..", not starting with "report."
 * (the batch's own files) and not BATCH_ATTEMPTS_DIR.
 */
const char *batch_name_problem(const char *name);
/* Whether name is one the batch keeps for its own files (a notebook's name then gets a suffix). */
bool batch_name_reserved(const char *name);

/* ---- manifests (manifest.c) ---------------------------------------------------- */

enum manifest_format { MANIFEST_JSONL, MANIFEST_CSV };

struct manifest_row {
	unsigned long line; /* of the row's first byte, from 1 */
	char *notebook;     /* as the row gives it, joined to the manifest's directory when relative */
	json_t *params;     /* an object (maybe empty) */
	char *output;       /* the name of its directory, or NULL */
};

struct manifest {
	struct manifest_row *rows;
	size_t n;
};

/*
 * The format of a manifest from its name (.csv, .jsonl, .ndjson) or else
 * from its first byte that is not white space ('{': JSON Lines).
 */
enum manifest_format manifest_format_of(const char *path, const char *text, size_t len);

/*
 * Rows of a manifest:
 *  - JSON Lines: one object per line, {"notebook": PATH, "parameters":
 *    {...}, "output": NAME}; parameters keep their JSON types (integers of
 *    any size, Infinity and NaN too); blank lines are skipped.
 *  - CSV (RFC 4180): a header naming the columns, "notebook" and optionally
 *    "output", every other column a parameter; values typed as papermill's
 *    -p types them; an empty unquoted cell leaves the parameter out, a
 *    quoted "" is the empty string.
 * Parameter names must be Python identifiers, values UTF-8, an output a
 * name batch_name_problem() accepts, given to one row only. base_dir
 * (NULL: none) is joined to relative notebook paths. 0, or -1 with
 * "NAME:LINE: reason" in err (one line; text from the file made printable).
 */
int manifest_parse(struct manifest *m, const char *text, size_t len, enum manifest_format fmt,
		   const char *name, const char *base_dir, size_t max_rows, char *err, size_t errlen);
void manifest_free(struct manifest *m);

/* ---- the HTML report (batch-html.c) ------------------------------------------- */

/*
 * DIR/report.html from report (report.json's document), written atomically:
 * one page without script, its text escaped, its links relative and
 * percent-encoded, a Content-Security-Policy that lets it load nothing but
 * its own directory's images and rendered notebooks (in sandboxed frames).
 * 0 or -errno.
 */
int batch_html_write(const json_t *report, const char *dir);

/*
 * The line of the cell where the error was raised, from the last cell frame
 * of an IPython traceback ("Cell In[3], line 7": *exec_count 3, return 7),
 * or 0 when it names none.
 */
long batch_error_line(const char *traceback, long *exec_count);

/* ---- rendering (batch-render.c) ------------------------------------------------- */

/*
 * DIR/notebook.html from DIR/notebook.ipynb, rendered by nbconvert's HTML
 * exporter in a sandbox of its own (a run of the image with base's image,
 * runtime and limits, no network), its HTML outputs and Markdown passed
 * through nbconvert's sanitizer, and the page written behind a
 * Content-Security-Policy that forbids every script. 0, or -1 with a
 * one-line reason in err.
 */
int batch_render_html(const char *dir, const struct nbrun_run_options *base, char *err, size_t errlen);

#endif
