/* SPDX-License-Identifier: MIT */
/*
 * Code to notebook: "# %%" lines (the percent format editors use) split the
 * code into cells, so that an error in one cell keeps the outputs of the
 * cells before it. "# %% [markdown]" starts a markdown cell.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "nbrun-private.h"
#include "text.h"

static bool nb_is_marker(const char *line, size_t len, const char *marker, bool *markdown)
{
	const char *p = line, *end = line + len;
	size_t mlen = strlen(marker);

	if (len < mlen || strncmp(line, marker, mlen))
		return false;
	p += mlen;
	/* "# %%%" and the like are not markers. */
	if (p < end && *p != ' ' && *p != '\t' && *p != '\r')
		return false;
	*markdown = memmem(p, (size_t)(end - p), "[markdown]", 10) != NULL ||
		    memmem(p, (size_t)(end - p), "[md]", 4) != NULL;
	return true;
}

static json_t *nb_cell(size_t index, const char *src, size_t len, bool markdown)
{
	char id[32];
	json_t *cell;

	while (len && (src[len - 1] == '\n' || src[len - 1] == '\r'))
		len--;
	snprintf(id, sizeof(id), "nbrun-cell-%zu", index);
	if (markdown)
		return json_pack("{s:s, s:s, s:{}, s:s%}", "cell_type", "markdown", "id", id,
				 "metadata", "source", src, len);
	cell = json_pack("{s:s, s:s, s:{}, s:n, s:[], s:s%}", "cell_type", "code", "id", id,
			 "metadata", "execution_count", "outputs", "source", src, len);
	return cell;
}

/* Markdown cells in percent format are written as comments: drop the "# "
 * (the "// " in JavaScript and TypeScript). */
static json_t *nb_markdown_cell(size_t index, const char *src, size_t len, const char *comment)
{
	struct buf b = BUF_INIT(len + 1);
	const char *p = src, *end = src + len;
	json_t *cell;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p + 1) : (size_t)(end - p);
		size_t c = strlen(comment);
		if (n >= c + 1 && !strncmp(p, comment, c) && p[c] == ' ')
			buf_append(&b, p + c + 1, n - c - 1);
		else if (n >= c && !strncmp(p, comment, c))
			buf_append(&b, p + c, n - c);
		else
			buf_append(&b, p, n);
		p += n;
	}
	cell = nb_cell(index, b.data ? b.data : "", b.len, true);
	buf_free(&b);
	return cell;
}

int nbrun__notebook_from_code(json_t **out, struct nbrun_ctx *ctx, const char *code)
{
	return nbrun__notebook_from_code_lang(out, ctx, code, nbrun__language_default());
}

int nbrun__notebook_from_code_lang(json_t **out, struct nbrun_ctx *ctx, const char *code,
				   const struct nbrun__language *lang)
{
	json_t *nb, *cells;
	const char *p = code, *start = code;
	bool markdown = false, seen_marker = false;
	size_t index = 0;

	*out = NULL;
	if (!text_utf8_valid(code, strlen(code)))
		return nbrun__err(ctx, NBRUN_EINVAL, "the code is not valid UTF-8");
	nb = json_pack("{s:i, s:i, s:{s:{s:s, s:s, s:s}, s:{s:s}}, s:[]}", "nbformat", 4,
		       "nbformat_minor", 5, "metadata", "kernelspec", "name", lang->kernel,
		       "display_name", lang->display_name, "language", lang->kernel_language,
		       "language_info", "name", lang->kernel_language, "cells");
	if (!nb)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	cells = json_object_get(nb, "cells");
	for (;;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		bool next_md = false;
		bool marker = nb_is_marker(p, len, lang->marker, &next_md);

		if (marker || !nl) {
			const char *stop = marker ? p : p + len;
			size_t n = (size_t)(stop - start);
			/* Text before the first marker is a cell only when it has code. */
			bool blank = strspn(start, " \t\r\n") >= n;
			if (seen_marker || !blank) {
				json_t *cell = markdown ? nb_markdown_cell(index, start, n, lang->comment)
							: nb_cell(index, start, n, false);
				if (!cell || json_array_append_new(cells, cell) < 0) {
					json_decref(nb);
					return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
				}
				index++;
			}
			if (marker) {
				seen_marker = true;
				markdown = next_md;
				start = nl ? nl + 1 : p + len;
			}
		}
		if (!nl)
			break;
		p = nl + 1;
	}
	/* A marker on the last line must not leave an empty cell behind
	 * ("x\n# %%" and "x\n# %%\n" are the same notebook). */
	while (json_array_size(cells) > 1) {
		const char *last = json_string_value(
			json_object_get(json_array_get(cells, json_array_size(cells) - 1), "source"));
		if (!last || strspn(last, " \t\r\n") != strlen(last))
			break;
		json_array_remove(cells, json_array_size(cells) - 1);
	}
	if (json_array_size(cells) == 0) {
		json_t *cell = nb_cell(0, "", 0, false);
		if (!cell || json_array_append_new(cells, cell) < 0) {
			json_decref(nb);
			return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		}
	}
	*out = nb;
	return 0;
}

/* ---- parameters (papermill style) ------------------------------------------ */

static bool nb_is_identifier(const char *s)
{
	static const char *const keywords[] = {
		"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
		"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
		"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
		"return", "try", "while", "with", "yield",
	};
	if (!*s || (*s >= '0' && *s <= '9') || strlen(s) > 200)
		return false;
	for (const char *p = s; *p; p++)
		if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9')))
			return false;
	for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		if (!strcmp(s, keywords[i]))
			return false;
	return true;
}

/* A JSON value as a Python literal. */
static int nb_py_literal(struct buf *b, const json_t *v, int depth)
{
	static const struct jsonx_syntax py_syntax = { "[", "]", "{", "}", ", ", ": " };
	const char *key;
	int rc = 0;

	if (depth > 32)
		return -EINVAL;
	/* What JSON numbers cannot hold reaches the kernel exactly. */
	switch (jsonx_kind_of(v, &key)) {
	case JSONX_BIGINT: return buf_puts(b, key);
	case JSONX_NONFINITE: return buf_printf(b, "float('%s')", key);
	case JSONX_PLAIN: break;
	}
	switch (json_typeof(v)) {
	case JSON_NULL: return buf_puts(b, "None");
	case JSON_TRUE: return buf_puts(b, "True");
	case JSON_FALSE: return buf_puts(b, "False");
	case JSON_INTEGER: return buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	case JSON_REAL: {
		double d = json_real_value(v);
		char tmp[64];
		jsonx_double_text(tmp, d);
		/* Keep it a float in Python: "1" would be an int. */
		if (!strpbrk(tmp, ".eEn"))
			strcat(tmp, ".0");
		return buf_puts(b, tmp);
	}
	case JSON_STRING: {
		/* A JSON string literal is a valid Python one when '/' is not escaped
		 * and non-ASCII stays UTF-8 (no surrogate-pair escapes). */
		json_t *copy = json_stringn(json_string_value(v), json_string_length(v));
		char *text = copy ? json_dumps(copy, JSON_ENCODE_ANY) : NULL;
		rc = text ? buf_puts(b, text) : -ENOMEM;
		free(text);
		json_decref(copy);
		return rc;
	}
	case JSON_ARRAY:
	case JSON_OBJECT:
		return jsonx_write_container(b, v, depth, &py_syntax, nb_py_literal);
	}
	return -EINVAL;
}

/* A cell id as nbformat makes them (8 hex digits), used by no cell of nb. */
int nbrun__notebook_new_id(const json_t *nb, struct nbrun_ctx *ctx, char id[16])
{
	const json_t *cells = json_object_get(nb, "cells"), *cell;
	size_t i;
	int rc;

	for (int tries = 0; tries < 100; tries++) {
		rc = nbrun__random_id(ctx, id);
		if (rc < 0)
			return rc;
		id[8] = '\0';
		json_array_foreach(cells, i, cell)
			if (!strcmp(json_string_value(json_object_get(cell, "id")) ?: "", id))
				break;
		if (i == json_array_size(cells))
			return 0;
	}
	return nbrun__err(ctx, NBRUN_EGENERIC, "cannot find a free cell id");
}

int nbrun__notebook_upgrade(json_t *nb, struct nbrun_ctx *ctx)
{
	json_t *cells = json_object_get(nb, "cells"), *cell;
	char id[16];
	size_t i;
	int rc;

	if (json_integer_value(json_object_get(nb, "nbformat")) != 4 ||
	    json_integer_value(json_object_get(nb, "nbformat_minor")) >= 5)
		return 0;
	json_array_foreach(cells, i, cell) {
		if (!json_is_object(cell) || json_is_string(json_object_get(cell, "id")))
			continue;
		rc = nbrun__notebook_new_id(nb, ctx, id);
		if (rc < 0)
			return rc;
		if (json_object_set_new(cell, "id", json_string(id)) < 0)
			return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	}
	json_object_set_new(nb, "nbformat_minor", json_integer(5));
	return 0;
}

static bool nb_has_tag(const json_t *cell, const char *tag)
{
	const json_t *t;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(cell, "metadata"), "tags"), i, t)
		if (json_is_string(t) && !strcmp(json_string_value(t), tag))
			return true;
	return false;
}

NBRUN_EXPORT int nbrun_notebook_inject_params(char **out, size_t *out_len, struct nbrun_ctx *ctx,
					      const char *notebook, size_t len,
					      const char *params)
{
	struct buf src = BUF_INIT(16u << 20);
	const struct nbrun__language *lang;
	json_t *nb = NULL, *p = NULL, *cells, *cell, *v;
	char jerr[160], id[16];
	json_t *meta, *pm;
	bool replace;
	const char *name;
	size_t i, at = 0;
	char *text = NULL;
	int rc;

	*out = NULL;
	if (out_len)
		*out_len = 0;
	rc = nbrun__notebook_loadb(&nb, ctx, notebook, len, NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES);
	if (rc < 0)
		return rc;
	params = params ? params : "{}";
	p = jsonx_loadb(params, strlen(params), jerr, sizeof(jerr));
	if (!json_is_object(p)) {
		rc = nbrun__err(ctx, NBRUN_EPARSE, "parameters are not a JSON object%s%s",
				p ? "" : ": ", p ? "" : jerr);
		goto out;
	}
	rc = nbrun__language_of_notebook(&lang, ctx, nb);
	if (rc < 0)
		goto out;
	if (lang->assign) {
		rc = nbrun__language_params(&src, ctx, lang, p);
		if (rc < 0)
			goto out;
		goto cell;
	}
	rc = buf_puts(&src, "# Parameters\n");
	json_object_foreach(p, name, v) {
		if (!nb_is_identifier(name)) {
			rc = nbrun__err(ctx, NBRUN_EINVAL, "parameter name '%s' is not a Python identifier",
					name);
			goto out;
		}
		if (rc == 0)
			rc = buf_printf(&src, "%s = ", name);
		if (rc == 0)
			rc = nb_py_literal(&src, v, 0);
		if (rc == 0)
			rc = buf_puts(&src, "\n");
	}
	if (rc < 0) {
		rc = nbrun__err(ctx, rc == -ENOMEM ? NBRUN_ENOMEM : NBRUN_EINVAL,
				"parameters cannot be written as Python");
		goto out;
	}
cell:
	cells = json_object_get(nb, "cells");
	if (!json_is_array(cells)) {
		rc = nbrun__err(ctx, NBRUN_EPARSE, "notebook has no cell list");
		goto out;
	}
	/* As papermill's parameterize_notebook: the notebook is upgraded to
	 * nbformat 4.5, and the first cell tagged injected-parameters (an
	 * earlier injection) is replaced where it is; else the new cell goes
	 * after the first cell tagged parameters, else first. It gets a fresh
	 * id: a cell of the notebook keeps its own, whatever it is. */
	rc = nbrun__notebook_upgrade(nb, ctx);
	if (rc < 0)
		goto out;
	json_array_foreach(cells, i, cell)
		if (nb_has_tag(cell, "injected-parameters"))
			break;
	replace = i < json_array_size(cells);
	if (replace) {
		at = i;
	} else {
		json_array_foreach(cells, i, cell)
			if (nb_has_tag(cell, "parameters")) {
				at = i + 1;
				break;
			}
	}
	rc = nbrun__notebook_new_id(nb, ctx, id);
	if (rc < 0)
		goto out;
	/* metadata.papermill.parameters, as papermill records them (strict JSON:
	 * big integers and infinities as their text) */
	meta = json_object_get(nb, "metadata");
	pm = json_is_object(meta) ? json_object_get(meta, "papermill") : NULL;
	if (json_is_object(meta) && !json_is_object(pm)) {
		pm = json_object();
		json_object_set_new(meta, "papermill", pm);
	}
	if (json_is_object(pm))
		json_object_set_new(pm, "parameters", jsonx_plain(p));
	cell = json_pack("{s:s, s:s, s:{s:[s]}, s:n, s:[], s:s}", "cell_type", "code", "id", id,
			 "metadata", "tags", "injected-parameters", "execution_count", "outputs",
			 "source", src.data);
	if (!cell || (replace ? json_array_set_new(cells, at, cell) : json_array_insert_new(cells, at, cell)) < 0) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		goto out;
	}
	text = json_dumps(nb, JSON_INDENT(1));
	if (!text) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		goto out;
	}
	if (out_len)
		*out_len = strlen(text);
	*out = text;
	rc = 0;
out:
	buf_free(&src);
	json_decref(nb);
	json_decref(p);
	return rc;
}
