/* SPDX-License-Identifier: MIT */
/*
 * nbrun batch --manifest: rows of (notebook, parameters, output name) from
 * JSON Lines (jansson, through jsonx) or CSV (libcsv), and the rules for the
 * names of a batch's directories. The file is the user's, but a row is
 * checked as the command line is: a bad one is a one-line error naming its
 * line, never a crash and never a name that leaves the batch's directory.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <csv.h>

#include "batch.h"
#include "jsonx.h"
#include "params.h"
#include "text.h"

#define NAME_MAX_BYTES 200

/* ---- names -------------------------------------------------------------------- */

bool batch_name_reserved(const char *name)
{
	return !strncmp(name, "report.", 7) || !strcmp(name, BATCH_ATTEMPTS_DIR);
}

const char *batch_name_problem(const char *name)
{
	size_t len = strlen(name);

	if (!len)
		return "it is empty";
	if (len > NAME_MAX_BYTES)
		return "it is longer than 200 bytes";
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return "it is . or ..";
	if (strchr(name, '/'))
		return "it holds a /: it must be one directory's name";
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return "it holds a control character";
	if (!text_utf8_valid(name, len))
		return "it is not UTF-8";
	if (batch_name_reserved(name))
		return "the batch keeps it for its own files (report.*, " BATCH_ATTEMPTS_DIR ")";
	return NULL;
}

/* ---- rows ----------------------------------------------------------------------- */

struct parse {
	struct manifest *m;
	const char *name, *base_dir;
	size_t max_rows;
	char *err;
	size_t errlen;
	bool failed;
};

/* At most 60 bytes of text from the file, printable ASCII only. */
static const char *shown(const char *s, size_t len, char out[64])
{
	size_t n = len < 60 ? len : 60, k = 0;

	for (size_t i = 0; i < n; i++)
		out[k++] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
	if (len > n) {
		out[k - 3] = out[k - 2] = out[k - 1] = '.';
	}
	out[k] = '\0';
	return out;
}

static int fail(struct parse *p, unsigned long line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct parse *p, unsigned long line, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (p->failed)
		return -1;
	p->failed = true;
	n = snprintf(p->err, p->errlen, "%s:%lu: ", p->name, line);
	if (n >= 0 && (size_t)n < p->errlen) {
		va_start(ap, fmt);
		vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* A new row at line, its notebook joined to the manifest's directory. */
static struct manifest_row *row_add(struct parse *p, unsigned long line, const char *notebook, size_t len)
{
	struct manifest *m = p->m;
	struct manifest_row *r, *grown;
	char s[64];

	if (m->n >= p->max_rows) {
		fail(p, line, "more than %zu rows", p->max_rows);
		return NULL;
	}
	if (!len) {
		fail(p, line, "the notebook is empty");
		return NULL;
	}
	if (memchr(notebook, '\0', len) || !text_utf8_valid(notebook, len)) {
		fail(p, line, "the notebook '%s' is not a path (a NUL byte, or not UTF-8)", shown(notebook, len, s));
		return NULL;
	}
	grown = realloc(m->rows, (m->n + 1) * sizeof(*grown));
	if (!grown) {
		fail(p, line, "out of memory");
		return NULL;
	}
	m->rows = grown;
	r = &m->rows[m->n];
	memset(r, 0, sizeof(*r));
	r->line = line;
	r->params = json_object();
	if (notebook[0] != '/' && p->base_dir && strcmp(p->base_dir, ".")) {
		if (asprintf(&r->notebook, "%s/%.*s", p->base_dir, (int)len, notebook) < 0)
			r->notebook = NULL;
	} else {
		r->notebook = strndup(notebook, len);
	}
	m->n++;
	if (!r->params || !r->notebook) {
		fail(p, line, "out of memory");
		return NULL;
	}
	return r;
}

static int row_output(struct parse *p, struct manifest_row *r, const char *out, size_t len)
{
	const char *why;
	char s[64];

	r->output = strndup(out, len);
	if (!r->output)
		return fail(p, r->line, "out of memory");
	why = memchr(out, '\0', len) ? "it holds a NUL byte" : batch_name_problem(r->output);
	if (why)
		return fail(p, r->line, "output '%s' cannot name a directory: %s", shown(out, len, s), why);
	return 0;
}

/* ---- JSON Lines --------------------------------------------------------------------- */

static int jsonl_row(struct parse *p, unsigned long line, const char *text, size_t len)
{
	char jerr[160], s[64];
	json_t *doc = jsonx_loadb(text, len, jerr, sizeof(jerr)), *v, *nb, *params, *out;
	struct manifest_row *r;
	const char *key;
	int rc = -1;

	if (!doc)
		return fail(p, line, "not JSON: %s", jerr);
	if (!json_is_object(doc)) {
		fail(p, line, "want an object {\"notebook\": ..., \"parameters\": {...}, \"output\": ...}");
		goto out;
	}
	json_object_foreach(doc, key, v)
		if (strcmp(key, "notebook") && strcmp(key, "parameters") && strcmp(key, "output")) {
			fail(p, line, "unknown key '%s' (want notebook, parameters, output)", shown(key, strlen(key), s));
			goto out;
		}
	nb = json_object_get(doc, "notebook");
	params = json_object_get(doc, "parameters");
	out = json_object_get(doc, "output");
	if (!json_is_string(nb) || jsonx_kind_of(nb, NULL) != JSONX_PLAIN) {
		fail(p, line, "\"notebook\" must be a string");
		goto out;
	}
	if (params && !json_is_null(params) && !json_is_object(params)) {
		fail(p, line, "\"parameters\" must be an object");
		goto out;
	}
	if (out && !json_is_null(out) && (!json_is_string(out) || jsonx_kind_of(out, NULL) != JSONX_PLAIN)) {
		fail(p, line, "\"output\" must be a string");
		goto out;
	}
	r = row_add(p, line, json_string_value(nb), json_string_length(nb));
	if (!r)
		goto out;
	json_object_foreach(params, key, v)
		if (!params_name_ok(key)) {
			fail(p, line, "parameter name '%s' is not a Python identifier", shown(key, strlen(key), s));
			goto out;
		}
	if (json_is_object(params) && json_object_update(r->params, params) < 0) {
		fail(p, line, "out of memory");
		goto out;
	}
	if (json_is_string(out) && row_output(p, r, json_string_value(out), json_string_length(out)) < 0)
		goto out;
	rc = 0;
out:
	json_decref(doc);
	return rc;
}

static int parse_jsonl(struct parse *p, const char *text, size_t len)
{
	unsigned long line = 1;

	for (size_t i = 0; i < len && !p->failed; line++) {
		const char *eol = memchr(text + i, '\n', len - i);
		size_t n = eol ? (size_t)(eol - (text + i)) : len - i, k;

		for (k = 0; k < n && strchr(" \t\r", text[i + k]); k++)
			;
		if (k < n)
			jsonl_row(p, line, text + i, n);
		i += n + 1;
	}
	return p->failed ? -1 : 0;
}

/* ---- CSV ------------------------------------------------------------------------------ */

struct field {
	char *s; /* NULL: empty and unquoted */
	size_t len;
};

struct csv_state {
	struct parse *p;
	unsigned long line, start;   /* the line being fed; where the record began */
	struct field *fields;
	size_t n, alloc;
	struct field *header;        /* the first record */
	size_t ncols;
	long col_notebook, col_output;
};

static void csv_field(void *s, size_t len, void *data)
{
	struct csv_state *c = data;

	if (c->p->failed)
		return;
	if (!c->n) {
		c->start = c->line;
		for (size_t i = 0; s && i < len; i++)
			c->start -= ((char *)s)[i] == '\n' && c->start > 1;
	}
	if (c->n == c->alloc) {
		size_t want = c->alloc ? c->alloc * 2 : 16;
		struct field *grown = want > 100000 ? NULL : realloc(c->fields, want * sizeof(*grown));
		if (!grown) {
			fail(c->p, c->start, want > 100000 ? "more than 100000 fields" : "out of memory");
			return;
		}
		c->fields = grown;
		c->alloc = want;
	}
	c->fields[c->n].len = len;
	c->fields[c->n].s = s ? malloc(len + 1) : NULL;
	if (s && !c->fields[c->n].s) {
		fail(c->p, c->start, "out of memory");
		return;
	}
	if (s) {
		memcpy(c->fields[c->n].s, s, len);
		c->fields[c->n].s[len] = '\0';
	}
	c->n++;
}

static void fields_free(struct field *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(f[i].s);
}

static void csv_header(struct csv_state *c)
{
	char s[64];

	c->col_notebook = c->col_output = -1;
	for (size_t i = 0; i < c->n; i++) {
		const struct field *f = &c->fields[i];
		const char *name = f->s ? f->s : "";

		if (!f->s || !f->len) {
			fail(c->p, c->start, "column %zu of the header has no name", i + 1);
			return;
		}
		for (size_t k = 0; k < i; k++)
			if (c->fields[k].s && !strcmp(c->fields[k].s, name)) {
				fail(c->p, c->start, "column '%s' twice in the header", shown(name, f->len, s));
				return;
			}
		if (!strcmp(name, "notebook"))
			c->col_notebook = (long)i;
		else if (!strcmp(name, "output"))
			c->col_output = (long)i;
		else if (strlen(name) != f->len || !params_name_ok(name)) {
			fail(c->p, c->start, "column '%s': a parameter's name must be a Python identifier "
			     "(the header names notebook, output and parameters)", shown(name, f->len, s));
			return;
		}
	}
	if (c->col_notebook < 0) {
		fail(c->p, c->start, "the header has no column 'notebook'");
		return;
	}
	c->header = c->fields;
	c->ncols = c->n;
	c->fields = NULL;
	c->n = c->alloc = 0;
}

static void csv_row(struct csv_state *c)
{
	const struct field *nb = &c->fields[c->col_notebook];
	struct manifest_row *r;
	char s[64];

	if (c->n != c->ncols) {
		fail(c->p, c->start, "%zu fields, the header has %zu", c->n, c->ncols);
		return;
	}
	r = row_add(c->p, c->start, nb->s ? nb->s : "", nb->s ? nb->len : 0);
	if (!r)
		return;
	for (size_t i = 0; i < c->n; i++) {
		const struct field *f = &c->fields[i];
		json_t *v;

		if ((long)i == c->col_notebook || !f->s)
			continue;
		if (memchr(f->s, '\0', f->len)) {
			fail(c->p, c->start, "column '%s': a NUL byte", c->header[i].s);
			return;
		}
		if ((long)i == c->col_output) {
			if (row_output(c->p, r, f->s, f->len) < 0)
				return;
			continue;
		}
		v = params_resolve_type(f->s);
		if (!v) {
			fail(c->p, c->start, "column '%s': the value '%s' is not UTF-8 text, which a notebook cannot hold",
			     c->header[i].s, shown(f->s, f->len, s));
			return;
		}
		if (json_object_set_new(r->params, c->header[i].s, v) < 0) {
			fail(c->p, c->start, "out of memory");
			return;
		}
	}
}

static void csv_record(int term, void *data)
{
	struct csv_state *c = data;

	if (!c->p->failed) {
		if (!c->header)
			csv_header(c);
		else
			csv_row(c);
	}
	fields_free(c->fields, c->n);
	c->n = 0;
}

static int csv_no_space(unsigned char ch)
{
	return 0;
}

static int parse_csv(struct parse *p, const char *text, size_t len)
{
	struct csv_parser cp;
	struct csv_state c = { .p = p, .line = 1, .start = 1 };
	size_t i = 0;

	if (csv_init(&cp, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL | CSV_EMPTY_IS_NULL) != 0)
		return fail(p, 1, "out of memory");
	/* RFC 4180: spaces are part of a field. Fed a line at a time, so that an error knows its line. */
	csv_set_space_func(&cp, csv_no_space);
	while (i < len && !p->failed) {
		const char *eol = memchr(text + i, '\n', len - i);
		size_t n = eol ? (size_t)(eol - (text + i)) + 1 : len - i;

		if (csv_parse(&cp, text + i, n, csv_field, csv_record, &c) != n && !p->failed)
			fail(p, c.line, "not CSV: %s", csv_strerror(csv_error(&cp)));
		i += n;
		if (eol && i < len)
			c.line++;
	}
	if (!p->failed && csv_fini(&cp, csv_field, csv_record, &c) != 0)
		fail(p, c.n ? c.start : c.line, "not CSV: %s", csv_error(&cp) == CSV_EPARSE ? "a quoted field is not closed"
									     : csv_strerror(csv_error(&cp)));
	if (!p->failed && !c.header)
		fail(p, 1, "no header (a CSV manifest names its columns on its first line)");
	csv_free(&cp);
	fields_free(c.fields, c.n);
	free(c.fields);
	fields_free(c.header, c.ncols);
	free(c.header);
	return p->failed ? -1 : 0;
}

/* ---- the file ------------------------------------------------------------------------------- */

enum manifest_format manifest_format_of(const char *path, const char *text, size_t len)
{
	size_t n = strlen(path), i = 0;

	if (n >= 4 && !strcasecmp(path + n - 4, ".csv"))
		return MANIFEST_CSV;
	if ((n >= 6 && !strcasecmp(path + n - 6, ".jsonl")) || (n >= 7 && !strcasecmp(path + n - 7, ".ndjson")))
		return MANIFEST_JSONL;
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
		i = 3;
	while (i < len && strchr(" \t\r\n", text[i]))
		i++;
	return i < len && text[i] == '{' ? MANIFEST_JSONL : MANIFEST_CSV;
}

static int row_cmp(const void *a, const void *b)
{
	const struct manifest_row *x = *(struct manifest_row *const *)a, *y = *(struct manifest_row *const *)b;
	int c = strcmp(x->output, y->output);

	return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* No output name on two rows: sorted, so that a long manifest is not quadratic. */
static int check_outputs(struct parse *p)
{
	struct manifest *m = p->m;
	struct manifest_row **named = calloc(m->n + 1, sizeof(*named));
	size_t k = 0;
	char s[64];

	if (!named)
		return fail(p, 1, "out of memory");
	for (size_t i = 0; i < m->n; i++)
		if (m->rows[i].output)
			named[k++] = &m->rows[i];
	qsort(named, k, sizeof(*named), row_cmp);
	for (size_t i = 1; i < k; i++)
		if (!strcmp(named[i - 1]->output, named[i]->output)) {
			fail(p, named[i]->line, "output '%s' is the output of line %lu too",
			     shown(named[i]->output, strlen(named[i]->output), s), named[i - 1]->line);
			break;
		}
	free(named);
	return p->failed ? -1 : 0;
}

int manifest_parse(struct manifest *m, const char *text, size_t len, enum manifest_format fmt,
		   const char *name, const char *base_dir, size_t max_rows, char *err, size_t errlen)
{
	struct parse p = { m, name, base_dir, max_rows, err, errlen, false };

	memset(m, 0, sizeof(*m));
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) { /* a spreadsheet's byte order mark */
		text += 3;
		len -= 3;
	}
	if ((fmt == MANIFEST_CSV ? parse_csv(&p, text, len) : parse_jsonl(&p, text, len)) < 0 ||
	    check_outputs(&p) < 0) {
		manifest_free(m);
		return -1;
	}
	if (!m->n) {
		snprintf(err, errlen, "%s: no rows", name);
		return -1;
	}
	return 0;
}

void manifest_free(struct manifest *m)
{
	for (size_t i = 0; m && i < m->n; i++) {
		free(m->rows[i].notebook);
		free(m->rows[i].output);
		json_decref(m->rows[i].params);
	}
	if (m) {
		free(m->rows);
		m->rows = NULL;
		m->n = 0;
	}
}
