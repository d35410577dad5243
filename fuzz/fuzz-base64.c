/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the image extraction path (base64 validation, streaming
 * decode, magic check, caps). The first byte picks the MIME type, whether
 * the rest is raw bytes to encode here (so that valid images with and
 * without the right magic are reached) or base64 text as it is, and how the
 * value is split into a list of lines.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdio.h"
#include "fuzz-util.h"
#include "text.h"

static const char *const mimes[] = { "image/png", "image/jpeg", "image/gif", "application/pdf",
				     "image/svg+xml", "image/png", "image/jpeg", "text/plain" };

static char *b64_encode(const uint8_t *p, size_t n, size_t *outlen)
{
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;

	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
			     (i + 2 < n ? p[i + 2] : 0);
		*q++ = al[v >> 18 & 63];
		*q++ = al[v >> 12 & 63];
		*q++ = i + 1 < n ? al[v >> 6 & 63] : '=';
		*q++ = i + 2 < n ? al[v & 63] : '=';
	}
	*q = '\0';
	*outlen = (size_t)(q - o);
	return o;
}

/* The value: one string, or lines of `width` characters as nbformat writers do. */
static json_t *value_of(const char *s, size_t len, unsigned width)
{
	json_t *arr;

	if (!width)
		return json_stringn(s, len);
	arr = json_array();
	for (size_t i = 0; arr && i < len; i += width) {
		size_t n = len - i < width ? len - i : width;
		json_array_append_new(arr, json_stringn(s + i, n));
	}
	return arr;
}

/* Bytes encoded here and then written as an image must come back exactly. */
static void check_roundtrip(const struct nbrun_result *r, int dirfd, const uint8_t *data, size_t size)
{
	const char *path = json_string_value(
		json_object_get(json_array_get(json_object_get(r->doc, "images"), 0), "path"));
	char *buf = NULL;
	size_t n = 0;

	if (!path)
		return;
	if (fd_read_file(dirfd, path, 0, size, &buf, &n) < 0 || n != size || memcmp(buf, data, size)) {
		fprintf(stderr, "decoded image differs from what was encoded\n");
		abort();
	}
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned widths[] = { 0, 76, 1, 3 };
	struct nbrun__limits lim;
	struct nbrun_result *r = NULL;
	struct nbrun_ctx ctx = { { 0 } };
	json_t *nb = NULL, *value = NULL;
	char *text = NULL;
	size_t len = 0;
	uint8_t mode;
	int dirfd = fuzz_outdir();

	if (size < 1)
		return 0;
	mode = data[0];
	data++;
	size--;
	fuzz_limits(&lim);
	if (mode & 8)
		text = b64_encode(data, size, &len);
	else
		text = text_utf8_sanitize((const char *)data, size, &len); /* JSON strings are UTF-8 */
	if (!text)
		goto out;
	value = value_of(text, len, widths[(mode >> 4) & 3]);
	nb = json_pack("{s:i, s:[{s:s, s:[{s:s, s:{s:o, s:s}, s:{s:s}}]}]}", "nbformat", 4, "cells",
		       "cell_type", "code", "outputs", "output_type", "display_data", "data",
		       mimes[mode & 7], value, "text/plain", "<Figure>", "metadata", "filename",
		       "../../escape.png");
	value = NULL;
	if (!nb || nbrun__result_new(&r, "fuzz") < 0)
		goto out;
	if (nbrun__outputs_parse(&ctx, r, nb, mode & 64 ? -1 : dirfd, &lim) == 0) {
		if ((mode & 8) && (mode & 7) != 4)
			check_roundtrip(r, dirfd, data, size);
		fuzz_check_and_clean(r, &lim, dirfd);
	}
out:
	nbrun_result_free(r);
	json_decref(nb);
	json_decref(value);
	free(text);
	return 0;
}
