/* SPDX-License-Identifier: MIT */
/*
 * A result document as MCP content: a summary for the model, image blocks,
 * embedded files or resource links, and the document as structuredContent.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "mcp-call.h"
#include "mime.h"
#include "text.h"

/* Bounds of the text summary a model reads (the structured result has the rest). */
#define SUMMARY_STDOUT 8000

#define SUMMARY_STDERR 2000

#define SUMMARY_VALUE 2000

#define SUMMARY_VALUES 5

#define SUMMARY_TRACEBACK 6000

#define SUMMARY_LISTED 50

#define SUMMARY_MAX (64u << 10)

/* Chart and table descriptions: lines, text of a label, axes or series named, columns named. */
#define SUMMARY_DESCS 10

#define SUMMARY_DESC_TEXT 80

#define SUMMARY_DESC_ITEMS 4

#define SUMMARY_DESC_COLUMNS 20

/*
 * Wrong arguments: since 2025-11-25 a tool execution error the model can
 * read and correct (SEP-1303); before, -32602.
 */
json_t *mcp_tool_arg_error(struct mcp_call_ctx *cc, int *code, char *msg, size_t msglen,
			      const char *text)
{
	if (mcp_version_since(cc->version, "2025-11-25"))
		return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
				 "isError", 1);
	*code = MCP_INVALID_PARAMS;
	snprintf(msg, msglen, "%s", text);
	return NULL;
}

static bool mime_textual(const char *mime)
{
	return !strncmp(mime, "text/", 5) || !strcmp(mime, "application/json") ||
	       !strcmp(mime, "application/xml") || !strcmp(mime, "image/svg+xml") ||
	       !strcmp(mime, "application/x-ipynb+json");
}

static char *resource_uri(const char *run_id, const char *rel)
{
	char *enc = wire_url_path(rel), *uri = NULL;

	if (enc && asprintf(&uri, "nbrun://runs/%s/%s", run_id, enc) < 0)
		uri = NULL;
	free(enc);
	return uri;
}

/* {uri, mimeType, text|blob}: text when the type is textual and the bytes are UTF-8. */
json_t *mcp_resource_contents(const char *uri, const char *mime, const char *data, size_t len)
{
	char *b64;
	json_t *r;

	if (mime_textual(mime) && text_utf8_valid(data, len) && !memchr(data, '\0', len))
		return json_pack("{s:s, s:s, s:s%}", "uri", uri, "mimeType", mime, "text", data, len);
	b64 = wire_base64((const unsigned char *)data, len);
	if (!b64)
		return NULL;
	r = json_pack("{s:s, s:s, s:s}", "uri", uri, "mimeType", mime, "blob", b64);
	free(b64);
	return r;
}

/* A file or a non-raster image: embedded when small, else a link for resources/read. */
void mcp_add_resource(json_t *content, const struct mcp_call_ctx *cc, int run_fd,
			 const char *run_id, const char *rel, const char *name, const char *mime,
			 json_int_t bytes, struct mcp_budget *b)
{
	char *uri = resource_uri(run_id, rel), *data = NULL, *note = NULL;
	size_t len = 0;

	if (!uri)
		return;
	if (bytes >= 0 && (uint64_t)bytes <= MCP_EMBED_ONE && (size_t)bytes <= b->embed &&
	    (data = serve_read_below(run_fd, rel, MCP_EMBED_ONE, &len))) {
		json_t *r = mcp_resource_contents(uri, mime, data, len);
		if (r) {
			json_array_append_new(content, json_pack("{s:s, s:o}", "type", "resource",
								  "resource", r));
			b->embed -= len;
			goto out;
		}
	}
	if (mcp_version_since(cc->version, "2025-06-18")) {
		json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:s, s:I}", "type",
							  "resource_link", "uri", uri, "name", name,
							  "mimeType", mime, "size", bytes));
	} else if (asprintf(&note, "%s (%lld bytes) is too large to embed: resources/read %s",
			    name, (long long)bytes, uri) >= 0) {
		json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", note));
	}
out:
	free(note);
	free(data);
	free(uri);
}

static void add_image(json_t *content, const struct mcp_call_ctx *cc, int run_fd,
		      const char *run_id, json_t *img, struct mcp_budget *b)
{
	const char *path = json_string_value(json_object_get(img, "path"));
	const char *mime = json_string_value(json_object_get(img, "mime"));
	json_int_t bytes = json_integer_value(json_object_get(img, "bytes"));
	char *data = NULL, *b64 = NULL;
	size_t len = 0;

	if (!path || !mime)
		return;
	/* Raster images are image blocks; SVG and PDF go as resources. */
	if (strcmp(mime, "image/png") && strcmp(mime, "image/jpeg") && strcmp(mime, "image/gif")) {
		mcp_add_resource(content, cc, run_fd, run_id, path, path, mime, bytes, b);
		return;
	}
	if (bytes >= 0 && (uint64_t)bytes <= MCP_IMAGE_ONE && (size_t)bytes <= b->images &&
	    (data = serve_read_below(run_fd, path, MCP_IMAGE_ONE, &len)) &&
	    (b64 = wire_base64((const unsigned char *)data, len))) {
		json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "image", "data",
							  b64, "mimeType", mime));
		b->images -= len;
	} else {
		mcp_add_resource(content, cc, run_fd, run_id, path, path, mime, bytes, b);
	}
	free(b64);
	free(data);
}

static void summary_add(struct buf *b, const char *label, const char *s, size_t max)
{
	size_t n = 0;
	bool cut = false;
	char *t;

	if (!s || !*s)
		return;
	t = text_truncate(s, strlen(s), max, &n, &cut);
	if (!t)
		return;
	buf_printf(b, "%s%s", b->len ? "\n" : "", label);
	buf_append(b, t, n);
	if (n && t[n - 1] != '\n')
		buf_puts(b, "\n");
	free(t);
}

/*
 * Text from a chart or table description (made in the sandbox): at most max
 * bytes, on one line (controls become spaces), cut on a UTF-8 boundary.
 */
static void summary_text(struct buf *b, const json_t *v, size_t max)
{
	const char *s = json_string_value(v);
	size_t n;

	if (!s)
		return;
	n = strnlen(s, max + 1);
	if (n > max) {
		n = max;
		while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		buf_append(b, (unsigned char)c < 0x20 || c == 0x7f ? " " : &c, 1);
	}
	if (n < strlen(s))
		buf_puts(b, "...");
}

/* "line 'Title' x='t', y='v', 2 series (a, b)" for one axes of a chart description. */
static void summary_axes(struct buf *b, const json_t *ax)
{
	const json_t *series = json_object_get(ax, "series"), *s;
	json_int_t n = json_integer_value(json_object_get(ax, "n_series"));
	size_t i, named = 0;

	summary_text(b, json_object_get(ax, "kind"), 16);
	if (json_string_length(json_object_get(ax, "title"))) {
		buf_puts(b, " '");
		summary_text(b, json_object_get(ax, "title"), SUMMARY_DESC_TEXT);
		buf_puts(b, "'");
	}
	if (json_is_string(json_object_get(ax, "x_label"))) {
		buf_puts(b, " x='");
		summary_text(b, json_object_get(ax, "x_label"), SUMMARY_DESC_TEXT);
		buf_puts(b, "',");
	}
	if (json_is_string(json_object_get(ax, "y_label"))) {
		buf_puts(b, " y='");
		summary_text(b, json_object_get(ax, "y_label"), SUMMARY_DESC_TEXT);
		buf_puts(b, "',");
	}
	if (n < (json_int_t)json_array_size(series))
		n = (json_int_t)json_array_size(series);
	buf_printf(b, " %lld series", (long long)n);
	json_array_foreach(series, i, s) {
		if (!json_is_string(json_object_get(s, "label")) || named == SUMMARY_DESC_ITEMS)
			continue;
		buf_puts(b, named++ ? ", " : " (");
		summary_text(b, json_object_get(s, "label"), SUMMARY_DESC_TEXT);
	}
	if (named)
		buf_puts(b, ")");
}

static void summary_chart(struct buf *b, const json_t *c, json_int_t cell)
{
	const json_t *axes = json_object_get(c, "axes"), *ax;
	size_t i;

	buf_printf(b, "chart (cell %lld): ", (long long)cell);
	if (json_array_size(axes) == 1) {
		summary_axes(b, json_array_get(axes, 0));
	} else {
		summary_text(b, json_object_get(c, "kind"), 16);
		if (json_is_string(json_object_get(c, "title"))) {
			buf_puts(b, " '");
			summary_text(b, json_object_get(c, "title"), SUMMARY_DESC_TEXT);
			buf_puts(b, "'");
		}
		buf_printf(b, ", %zu axes", json_array_size(axes));
		json_array_foreach(axes, i, ax) {
			if (i == SUMMARY_DESC_ITEMS) {
				buf_puts(b, "; ...");
				break;
			}
			buf_puts(b, i ? "; " : ": ");
			summary_axes(b, ax);
		}
	}
	buf_puts(b, json_is_true(json_object_get(c, "truncated")) ? ", points sampled\n" : "\n");
}

/* "table (cell 2): 100×3, columns a, b, c" */
static void summary_table(struct buf *b, const json_t *t, json_int_t cell)
{
	const json_t *shape = json_object_get(t, "shape"), *col;
	size_t i;

	buf_printf(b, "table (cell %lld): %lld×%lld, columns ", (long long)cell,
		   (long long)json_integer_value(json_array_get(shape, 0)),
		   (long long)json_integer_value(json_array_get(shape, 1)));
	json_array_foreach(json_object_get(t, "columns"), i, col) {
		if (i == SUMMARY_DESC_COLUMNS) {
			buf_puts(b, ", ...");
			break;
		}
		if (i)
			buf_puts(b, ", ");
		summary_text(b, col, SUMMARY_DESC_TEXT);
	}
	buf_puts(b, "\n");
}

/*
 * One line per chart and table description among the outputs (the runtime's
 * application/vnd.nbrun.chart+json and table+json), so that a model without
 * eyes knows what a figure shows; a description kept only as text (larger
 * than --max-output) is not read. A figure shown twice in a cell (as the
 * value and by the inline backend) is listed once.
 */
static void summary_descriptions(struct buf *b, const json_t *doc)
{
	const json_t *o, *prev = NULL;
	size_t i, listed = 0, more = 0;
	json_int_t prev_cell = -1;

	json_array_foreach(json_object_get(doc, "outputs"), i, o) {
		const json_t *data = json_object_get(o, "data");
		const json_t *chart = json_object_get(data, "application/vnd.nbrun.chart+json");
		const json_t *table = json_object_get(data, "application/vnd.nbrun.table+json");
		const json_t *d = json_is_object(chart) ? chart : json_is_object(table) ? table : NULL;
		json_int_t cell = json_integer_value(json_object_get(o, "cell"));

		if (!d || (prev && cell == prev_cell && json_equal(d, prev)))
			continue;
		prev = d;
		prev_cell = cell;
		if (listed == SUMMARY_DESCS) {
			more++;
			continue;
		}
		if (!listed++ && b->len)
			buf_puts(b, "\n");
		if (d == chart)
			summary_chart(b, chart, cell);
		else
			summary_table(b, table, cell);
	}
	if (more)
		buf_printf(b, "... and %zu more charts and tables\n", more);
}

/* The concise text a model reads first: stdout, values, the error, what came back. */
static char *summary_of(const json_t *doc)
{
	struct buf b = BUF_INIT(SUMMARY_MAX);
	const char *status = json_string_value(json_object_get(doc, "status"));
	json_t *e, *err = json_object_get(doc, "error");
	size_t i, n;

	summary_add(&b, "stdout:\n", json_string_value(json_object_get(doc, "stdout")), SUMMARY_STDOUT);
	summary_add(&b, "stderr:\n", json_string_value(json_object_get(doc, "stderr")), SUMMARY_STDERR);
	n = json_array_size(json_object_get(doc, "results"));
	json_array_foreach(json_object_get(doc, "results"), i, e)
		if (i + SUMMARY_VALUES >= n)
			summary_add(&b, "result:\n", json_string_value(json_object_get(e, "text")),
				    SUMMARY_VALUE);
	summary_descriptions(&b, doc);
	if (json_is_object(err)) {
		buf_printf(&b, "%serror: %s: %s\n", b.len ? "\n" : "",
			   json_string_value(json_object_get(err, "name")) ?: "",
			   json_string_value(json_object_get(err, "value")) ?: "");
		summary_add(&b, "traceback:\n", json_string_value(json_object_get(err, "traceback")),
			    SUMMARY_TRACEBACK);
	}
	if (status && strcmp(status, "ok") && strcmp(status, "error"))
		buf_printf(&b, "%srun ended: %s: %s\n", b.len ? "\n" : "", status,
			   json_string_value(json_object_get(doc, "message")) ?: "");
	n = json_array_size(json_object_get(doc, "images"));
	if (n)
		buf_printf(&b, "%simages: %zu (in the content that follows)\n", b.len ? "\n" : "", n);
	n = json_array_size(json_object_get(doc, "files"));
	if (n)
		buf_printf(&b, "%sfiles written under /mnt/data:\n", b.len ? "\n" : "");
	json_array_foreach(json_object_get(doc, "files"), i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		if (i == SUMMARY_LISTED) {
			buf_printf(&b, "  ... and %zu more\n", n - i);
			break;
		}
		buf_printf(&b, "  /mnt/data/%s (%lld bytes)\n", p && !strncmp(p, "files/", 6) ? p + 6 : "?",
			   (long long)json_integer_value(json_object_get(e, "bytes")));
	}
	json_array_foreach(json_object_get(doc, "skipped"), i, e) {
		if (i == 10)
			break;
		buf_printf(&b, "not exported: %.200s (%.200s)\n",
			   json_string_value(json_object_get(e, "path")) ?: "?",
			   json_string_value(json_object_get(e, "reason")) ?: "?");
	}
	if (!b.len)
		buf_puts(&b, "(the code ran and printed nothing)\n");
	return buf_steal(&b);
}

json_t *mcp_result_of(const struct mcp_call_ctx *cc, json_t *doc, const char *dir_id)
{
	struct mcp_budget b = { MCP_IMAGE_ALL, MCP_EMBED_ALL };
	const char *run_id = dir_id ? dir_id : json_string_value(json_object_get(doc, "run_id"));
	const char *status = json_string_value(json_object_get(doc, "status"));
	json_t *content = json_array(), *e, *out = NULL;
	char *summary = summary_of(doc);
	int run_fd = -1;
	size_t i;

	if (!content || !summary || !run_id || !wire_run_id_valid(run_id))
		goto out;
	json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", summary));
	run_fd = openat(cc->s->runs_fd, run_id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run_fd >= 0) {
		json_array_foreach(json_object_get(doc, "images"), i, e)
			add_image(content, cc, run_fd, run_id, e, &b);
		json_array_foreach(json_object_get(doc, "files"), i, e) {
			const char *p = json_string_value(json_object_get(e, "path"));
			if (p && !strncmp(p, "files/", 6))
				mcp_add_resource(content, cc, run_fd, run_id, p, p + 6, mime_of_name(p),
					     json_integer_value(json_object_get(e, "bytes")), &b);
		}
	}
	out = json_pack("{s:O, s:b}", "content", content, "isError", !status || strcmp(status, "ok"));
	if (out && mcp_version_since(cc->version, "2025-06-18"))
		json_object_set(out, "structuredContent", doc);
out:
	if (run_fd >= 0)
		close(run_fd);
	json_decref(content);
	free(summary);
	return out;
}
