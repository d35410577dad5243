/* SPDX-License-Identifier: MIT */
/*
 * Code to notebook: "# %%" lines (the percent format editors use) split the
 * code into cells, so that an error in one cell keeps the outputs of the
 * cells before it. "# %% [markdown]" starts a markdown cell.
 */
#include <stdio.h>
#include <string.h>

#include "nbrun-private.h"

static bool nb_is_marker(const char *line, size_t len, bool *markdown)
{
	const char *p = line, *end = line + len;

	if (len < 4 || strncmp(line, "# %%", 4))
		return false;
	p += 4;
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

/* Markdown cells in percent format are written as comments: drop the "# ". */
static json_t *nb_markdown_cell(size_t index, const char *src, size_t len)
{
	struct buf b = BUF_INIT(len + 1);
	const char *p = src, *end = src + len;
	json_t *cell;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p + 1) : (size_t)(end - p);
		if (n >= 2 && p[0] == '#' && p[1] == ' ')
			buf_append(&b, p + 2, n - 2);
		else if (n >= 1 && p[0] == '#')
			buf_append(&b, p + 1, n - 1);
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
	json_t *nb, *cells;
	const char *p = code, *start = code;
	bool markdown = false, seen_marker = false;
	size_t index = 0;

	*out = NULL;
	nb = json_pack("{s:i, s:i, s:{s:{s:s, s:s, s:s}, s:{s:s}}, s:[]}", "nbformat", 4,
		       "nbformat_minor", 5, "metadata", "kernelspec", "name", "python3",
		       "display_name", "Python 3", "language", "python", "language_info", "name",
		       "python", "cells");
	if (!nb)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	cells = json_object_get(nb, "cells");
	for (;;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		bool next_md = false;
		bool marker = nb_is_marker(p, len, &next_md);

		if (marker || !nl) {
			const char *stop = marker ? p : p + len;
			size_t n = (size_t)(stop - start);
			/* Text before the first marker is a cell only when it has code. */
			bool blank = strspn(start, " \t\r\n") >= n;
			if (seen_marker || !blank) {
				json_t *cell = markdown ? nb_markdown_cell(index, start, n)
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
