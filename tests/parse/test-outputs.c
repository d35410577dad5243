/* SPDX-License-Identifier: MIT */
/* Unit tests for the notebook loader and the output parser on small in-memory notebooks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nbrun-private.h"

/* A 1x1 PNG (68 bytes) and a JPEG header (16 bytes), base64. */
#define PNG_B64 "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgAAIAAAUAAXpeqz8AAAAASUVORK5CYII="
#define PNG_BYTES 68
#define JPEG_B64 "/9j/4AAAAAAAAAAAAAAAAA=="

struct fixture {
	char dir[64];
	int dirfd;
	struct nbrun_ctx ctx;
	struct nbrun__limits lim;
	struct nbrun_result *r;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/nbrun-test-outputs-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	f->dirfd = open(f->dir, O_RDONLY | O_DIRECTORY);
	nbrun__limits_resolve(&f->lim, NULL);
	*state = f;
	return f->dirfd >= 0 ? 0 : -1;
}

static void rm_rf(int dirfd)
{
	DIR *d;
	struct dirent *de;
	int fd = dup(dirfd);

	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd, de->d_name, 0) < 0) {
			int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			if (sub >= 0) {
				rm_rf(sub);
				close(sub);
			}
			unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
		}
	}
	closedir(d);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	nbrun_result_free(f->r);
	rm_rf(f->dirfd);
	close(f->dirfd);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Parse a notebook given as JSON text; returns the library's code. */
static int parse(struct fixture *f, const char *text, int dirfd)
{
	json_t *nb = NULL;
	int rc;

	nbrun_result_free(f->r);
	f->r = NULL;
	rc = nbrun__notebook_loadb(&nb, &f->ctx, text, strlen(text), f->lim.max_notebook_bytes);
	if (rc < 0)
		return rc;
	assert_int_equal(nbrun__result_new(&f->r, "test"), 0);
	rc = nbrun__outputs_parse(&f->ctx, f->r, nb, dirfd, &f->lim);
	json_decref(nb);
	return rc;
}

static json_t *get(struct fixture *f, const char *key)
{
	return json_object_get(f->r->doc, key);
}

static const char *getstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	assert_non_null(s);
	return s;
}

#define NB(cells) "{\"nbformat\": 4, \"nbformat_minor\": 5, \"metadata\": {}, \"cells\": [" cells "]}"
#define CODE(outputs) "{\"cell_type\": \"code\", \"source\": \"x\", \"metadata\": {}, \"outputs\": [" outputs "]}"
#define MD "{\"cell_type\": \"markdown\", \"source\": [\"# a\"], \"metadata\": {}}"

static void test_streams(void **state)
{
	struct fixture *f = *state;
	json_t *o;

	assert_int_equal(parse(f, NB(MD "," CODE(
		"{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": [\"a\\u001b[31mred\\u001b[0m\\n\", \"b\\n\"]},"
		"{\"output_type\": \"stream\", \"name\": \"stderr\", \"text\": \"oops\\n\"}") ","
		CODE("{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": \"c\\n\"}")), -1), 0);
	assert_string_equal(getstr(f->r->doc, "stdout"), "ared\nb\nc\n");
	assert_string_equal(getstr(f->r->doc, "stderr"), "oops\n");
	assert_string_equal(getstr(f->r->doc, "status"), "ok");
	assert_int_equal(json_integer_value(get(f, "cells")), 3);
	assert_int_equal(json_array_size(get(f, "outputs")), 3);
	o = json_array_get(get(f, "outputs"), 0);
	assert_int_equal(json_integer_value(json_object_get(o, "cell")), 1);
	assert_string_equal(getstr(o, "type"), "stream");
	assert_string_equal(getstr(o, "name"), "stdout");
	assert_string_equal(getstr(o, "text"), "ared\nb\n");
	o = json_array_get(get(f, "outputs"), 2);
	assert_int_equal(json_integer_value(json_object_get(o, "cell")), 2);
	assert_false(json_is_true(get(f, "truncated")));
}

static void test_error_first_wins(void **state)
{
	struct fixture *f = *state;
	json_t *e;

	assert_int_equal(parse(f, NB(CODE(
		"{\"output_type\": \"error\", \"ename\": \"ZeroDivisionError\", \"evalue\": \"division by zero\","
		" \"traceback\": [\"\\u001b[0;31mTraceback\\u001b[0m\", \"----> 1 0/0\"]}") ","
		CODE("{\"output_type\": \"error\", \"ename\": \"NameError\", \"evalue\": \"x\", \"traceback\": []}")), -1), 0);
	assert_string_equal(getstr(f->r->doc, "status"), "error");
	e = get(f, "error");
	assert_true(json_is_object(e));
	assert_int_equal(json_integer_value(json_object_get(e, "cell")), 0);
	assert_string_equal(getstr(e, "name"), "ZeroDivisionError");
	assert_string_equal(getstr(e, "value"), "division by zero");
	assert_string_equal(getstr(e, "traceback"), "Traceback\n----> 1 0/0");
	assert_int_equal(json_array_size(get(f, "outputs")), 2);
	assert_string_equal(getstr(json_array_get(get(f, "outputs"), 1), "name"), "NameError");
}

static void test_execute_result_and_display_id(void **state)
{
	struct fixture *f = *state;
	json_t *o, *data;

	assert_int_equal(parse(f, NB(CODE(
		"{\"output_type\": \"execute_result\", \"execution_count\": 7, \"metadata\": {},"
		" \"data\": {\"text/plain\": [\"4\", \"2\"], \"text/html\": \"<b>42</b>\","
		" \"application/json\": {\"a\": [1, null]}, \"application/vnd.x+json\": [1]}},"
		"{\"output_type\": \"display_data\", \"transient\": {\"display_id\": \"d1\"}, \"metadata\": {},"
		" \"data\": {\"text/plain\": \"shown\"}},"
		"{\"output_type\": \"update_display_data\", \"metadata\": {\"display_id\": \"d1\"},"
		" \"data\": {\"text/plain\": \"updated\"}},"
		"{\"output_type\": \"execute_result\", \"execution_count\": \"bad\", \"data\": {\"text/plain\": \"x\"}}")),
		-1), 0);
	o = json_array_get(get(f, "outputs"), 0);
	assert_string_equal(getstr(o, "type"), "execute_result");
	assert_int_equal(json_integer_value(json_object_get(o, "execution_count")), 7);
	data = json_object_get(o, "data");
	assert_string_equal(getstr(data, "text/plain"), "42");
	assert_string_equal(getstr(data, "text/html"), "<b>42</b>");
	assert_true(json_is_object(json_object_get(data, "application/json")));
	assert_true(json_is_array(json_object_get(data, "application/vnd.x+json")));
	assert_int_equal(json_array_size(get(f, "results")), 2);
	assert_string_equal(getstr(json_array_get(get(f, "results"), 0), "text"), "42");
	o = json_array_get(get(f, "outputs"), 1);
	assert_string_equal(getstr(o, "display_id"), "d1");
	o = json_array_get(get(f, "outputs"), 2);
	assert_string_equal(getstr(o, "type"), "update_display_data");
	assert_string_equal(getstr(o, "display_id"), "d1");
	o = json_array_get(get(f, "outputs"), 3);
	assert_true(json_is_null(json_object_get(o, "execution_count")));
}

static void read_file(int dirfd, const char *path, char *buf, size_t bufsz, ssize_t *len)
{
	int fd = openat(dirfd, path, O_RDONLY);

	assert_true(fd >= 0);
	*len = read(fd, buf, bufsz);
	close(fd);
}

static size_t count_dir(int dirfd, const char *path)
{
	int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	size_t n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void test_images_written(void **state)
{
	struct fixture *f = *state;
	char buf[256];
	ssize_t len;
	json_t *img, *data;

	assert_int_equal(parse(f, NB(MD "," CODE(
		"{\"output_type\": \"display_data\", \"metadata\": {\"filename\": \"../../evil.png\"},"
		" \"data\": {\"image/png\": \"" PNG_B64 "\\n\", \"text/plain\": \"<Figure>\","
		" \"image/svg+xml\": [\"<svg>\", \"</svg>\"]}},"
		"{\"output_type\": \"display_data\", \"metadata\": {},"
		" \"data\": {\"image/png\": [\"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nG\\n\","
		" \"NgAAIAAAUAAXpeqz8AAAAASUVORK5CYII=\\n\"]}}")), f->dirfd), 0);
	assert_int_equal(json_array_size(get(f, "images")), 3);
	img = json_array_get(get(f, "images"), 0);
	assert_string_equal(getstr(img, "path"), "images/cell1-1.png");
	assert_string_equal(getstr(img, "mime"), "image/png");
	assert_int_equal(json_integer_value(json_object_get(img, "cell")), 1);
	assert_int_equal(json_integer_value(json_object_get(img, "bytes")), PNG_BYTES);
	read_file(f->dirfd, "images/cell1-1.png", buf, sizeof(buf), &len);
	assert_int_equal(len, PNG_BYTES);
	assert_memory_equal(buf, "\x89PNG\r\n\x1a\n", 8);
	img = json_array_get(get(f, "images"), 1);
	assert_string_equal(getstr(img, "path"), "images/cell1-2.svg");
	read_file(f->dirfd, "images/cell1-2.svg", buf, sizeof(buf), &len);
	assert_int_equal(len, 11);
	assert_memory_equal(buf, "<svg></svg>", 11);
	/* the split list decodes to the same bytes, numbered on within the cell */
	img = json_array_get(get(f, "images"), 2);
	assert_string_equal(getstr(img, "path"), "images/cell1-3.png");
	read_file(f->dirfd, "images/cell1-3.png", buf, sizeof(buf), &len);
	assert_int_equal(len, PNG_BYTES);
	data = json_object_get(json_array_get(get(f, "outputs"), 0), "data");
	assert_string_equal(getstr(json_object_get(data, "image/png"), "path"), "images/cell1-1.png");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(data, "image/png"), "bytes")),
			 PNG_BYTES);
	/* metadata file names are ignored: only images/ with our three names */
	assert_int_equal(count_dir(f->dirfd, "."), 1);
	assert_int_equal(count_dir(f->dirfd, "images"), 3);
	assert_int_equal(json_array_size(get(f, "skipped")), 0);
}

static void test_images_rejected(void **state)
{
	struct fixture *f = *state;
	json_t *sk, *data;

	f->lim.max_image_bytes = 60;
	assert_int_equal(parse(f, NB(CODE(
		"{\"output_type\": \"display_data\", \"data\": {"
		" \"image/jpeg\": \"iVBORw0KGgo=\","       /* PNG signature claimed as JPEG */
		" \"image/png\": \"iVBOR!w0KGgo=\","      /* bad alphabet */
		" \"image/gif\": \"R0lG=ODlh\","          /* data after padding */
		" \"application/pdf\": \"JVBERi0tM\","    /* bad length */
		" \"image/svg+xml\": 5}},"                /* wrong type */
		"{\"output_type\": \"display_data\", \"data\": {\"image/png\": \"" PNG_B64 "\"}}")), f->dirfd), 0);
	assert_int_equal(json_array_size(get(f, "images")), 0);
	assert_int_equal(count_dir(f->dirfd, "images"), 0);
	sk = get(f, "skipped");
	assert_int_equal(json_array_size(sk), 6);
	assert_string_equal(getstr(json_array_get(sk, 0), "path"), "images/cell0-1.jpg");
	assert_string_equal(getstr(json_array_get(sk, 0), "reason"), "image/jpeg data is not JPEG (looks like PNG)");
	assert_string_equal(getstr(json_array_get(sk, 1), "reason"), "invalid base64 character");
	assert_string_equal(getstr(json_array_get(sk, 2), "reason"), "base64 data after '=' padding");
	assert_string_equal(getstr(json_array_get(sk, 3), "reason"), "base64 data has a wrong length");
	assert_string_equal(getstr(json_array_get(sk, 4), "reason"), "image data is not a string");
	assert_string_equal(getstr(json_array_get(sk, 5), "path"), "images/cell0-6.png");
	assert_string_equal(getstr(json_array_get(sk, 5), "reason"),
			    "image is 68 bytes, over the limit of 60");
	assert_true(json_is_true(get(f, "truncated")));
	data = json_object_get(json_array_get(get(f, "outputs"), 1), "data");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(data, "image/png"), "bytes")), 68);
	assert_null(json_object_get(json_object_get(data, "image/png"), "path"));
}

/* sys.exit(), sys.exit(0), raise SystemExit: a success, as papermill counts it. */
static void test_clean_exit(void **state)
{
	struct fixture *f = *state;
	static const char *const values[] = { "", "0", "1", "bye" };

	for (size_t i = 0; i < 4; i++) {
		char text[600];
		snprintf(text, sizeof(text), NB(CODE("{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": \"a\\n\"}") ","
						 CODE("{\"output_type\": \"error\", \"ename\": \"SystemExit\", \"evalue\": \"%s\","
						      " \"traceback\": [\"An exception has occurred\"]}")),
			 values[i]);
		assert_int_equal(parse(f, text, -1), 0);
		assert_int_equal(nbrun_result_status(f->r), i < 2 ? NBRUN_STATUS_OK : NBRUN_STATUS_ERROR);
		assert_int_equal(nbrun_result_error(f->r, NULL, NULL, NULL), i < 2 ? 0 : 1);
		/* the output is still listed */
		assert_int_equal(json_array_size(get(f, "outputs")), 2);
	}
}

/* image/svg+xml must be SVG: an XML document whose root element is svg. */
static void test_svg_checked(void **state)
{
	struct fixture *f = *state;
	json_t *sk;

	assert_int_equal(parse(f, NB(CODE(
		"{\"output_type\": \"display_data\", \"data\": {\"image/svg+xml\": \"<script>alert(1)</script>\"}},"
		"{\"output_type\": \"display_data\", \"data\": {\"image/svg+xml\": \"<svg><script>x</script>\"}},"
		"{\"output_type\": \"display_data\", \"data\": {\"image/svg+xml\": \"just text\"}},"
		"{\"output_type\": \"display_data\", \"data\": {\"image/svg+xml\": \"<svgx></svgx>\"}},"
		"{\"output_type\": \"display_data\", \"data\": {\"image/svg+xml\": [\"\\ufeff<?xml version=\\\"1.0\\\"?>\\n<!-- c -->\\n"
		"<!DOCTYPE svg PUBLIC \\\"-//W3C//DTD SVG 1.1//EN\\\" \\\"x.dtd\\\" [<!ENTITY a \\\"b\\\">]>\\n<svg xmlns=\\\"http://www.w3.org/2000/svg\\\">\", "
		"\"<rect/></svg>\\n<!-- end -->\\n\"]}},"
		"{\"output_type\": \"display_data\", \"data\": {\"image/svg+xml\": \"<s:svg xmlns:s=\\\"u\\\"/>\"}}")), f->dirfd), 0);
	sk = get(f, "skipped");
	assert_int_equal(json_array_size(sk), 4);
	assert_string_equal(getstr(json_array_get(sk, 0), "reason"),
			    "image/svg+xml data is not SVG (its root element is script)");
	assert_string_equal(getstr(json_array_get(sk, 1), "reason"), "image/svg+xml data is not SVG (not XML)");
	assert_string_equal(getstr(json_array_get(sk, 2), "reason"), "image/svg+xml data is not SVG (not XML)");
	assert_string_equal(getstr(json_array_get(sk, 3), "reason"),
			    "image/svg+xml data is not SVG (its root element is svgx)");
	assert_int_equal(json_array_size(get(f, "images")), 2);
	assert_string_equal(getstr(json_array_get(get(f, "images"), 0), "path"), "images/cell0-5.svg");
	assert_string_equal(getstr(json_array_get(get(f, "images"), 1), "path"), "images/cell0-6.svg");
	assert_int_equal(count_dir(f->dirfd, "images"), 2);
}

static void test_images_capped_and_not_written(void **state)
{
	struct fixture *f = *state;
	json_t *data;

	f->lim.max_images = 2;
	assert_int_equal(parse(f, NB(CODE(
		"{\"output_type\": \"display_data\", \"data\": {\"image/png\": \"" PNG_B64 "\"}},"
		"{\"output_type\": \"display_data\", \"data\": {\"image/png\": \"" PNG_B64 "\"}},"
		"{\"output_type\": \"display_data\", \"data\": {\"image/jpeg\": \"" JPEG_B64 "\"}}")), f->dirfd), 0);
	assert_int_equal(json_array_size(get(f, "images")), 2);
	assert_int_equal(count_dir(f->dirfd, "images"), 2);
	assert_string_equal(getstr(json_array_get(get(f, "skipped"), 0), "reason"), "more than 2 images");
	assert_true(json_is_true(get(f, "truncated")));

	/* Without a directory nothing is written, sizes are still given. */
	assert_int_equal(parse(f, NB(CODE(
		"{\"output_type\": \"display_data\", \"data\": {\"image/jpeg\": \"" JPEG_B64 "\"}}")), -1), 0);
	assert_int_equal(json_array_size(get(f, "images")), 0);
	data = json_object_get(json_array_get(get(f, "outputs"), 0), "data");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(data, "image/jpeg"), "bytes")), 16);
	assert_int_equal(json_object_size(json_object_get(data, "image/jpeg")), 1);
}

static char *b64_encode(const unsigned char *p, size_t n)
{
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;

	assert_non_null(o);
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
			     (i + 2 < n ? p[i + 2] : 0);
		*q++ = al[v >> 18 & 63];
		*q++ = al[v >> 12 & 63];
		*q++ = i + 1 < n ? al[v >> 6 & 63] : '=';
		*q++ = i + 2 < n ? al[v & 63] : '=';
	}
	*q = '\0';
	return o;
}

static void test_large_image_streamed(void **state)
{
	/*
	 * 400 KB decoded, given as pieces of awkward lengths (quartets and 64 KiB
	 * decode chunks split everywhere) with whitespace: the file must be exact.
	 */
	static const size_t cuts[] = { 1, 65537, 3, 85, 65536, 65535, 2, 70001, 5, 131071 };
	struct fixture *f = *state;
	size_t n = 400000, pos = 0, len, k = 0;
	unsigned char *raw = malloc(n), *back = malloc(n + 1);
	char *b64, *piece;
	json_t *nb, *pieces = json_array();
	ssize_t got;
	int fd;

	assert_non_null(raw);
	assert_non_null(back);
	memcpy(raw, "\x89PNG\r\n\x1a\n", 8);
	for (size_t i = 8; i < n; i++)
		raw[i] = (unsigned char)(i * 2654435761u >> 13);
	b64 = b64_encode(raw, n);
	len = strlen(b64);
	while (pos < len) {
		size_t c = cuts[k++ % (sizeof(cuts) / sizeof(cuts[0]))];
		if (c > len - pos)
			c = len - pos;
		piece = malloc(c + 2);
		assert_non_null(piece);
		memcpy(piece, b64 + pos, c);
		memcpy(piece + c, "\n", 2);
		json_array_append_new(pieces, json_string(piece));
		free(piece);
		pos += c;
	}
	nb = json_pack("{s:i, s:[{s:s, s:[{s:s, s:{s:o}}]}]}", "nbformat", 4, "cells", "cell_type",
		       "code", "outputs", "output_type", "display_data", "data", "image/png", pieces);
	assert_non_null(nb);
	assert_int_equal(nbrun__result_new(&f->r, "test"), 0);
	assert_int_equal(nbrun__outputs_parse(&f->ctx, f->r, nb, f->dirfd, &f->lim), 0);
	json_decref(nb);
	assert_int_equal(json_array_size(get(f, "images")), 1);
	fd = openat(f->dirfd, "images/cell0-1.png", O_RDONLY);
	assert_true(fd >= 0);
	got = read(fd, back, n + 1);
	close(fd);
	assert_int_equal(got, n);
	assert_memory_equal(back, raw, n);
	free(b64);
	free(raw);
	free(back);
}

static void test_limits_truncate(void **state)
{
	struct fixture *f = *state;
	char *nb = malloc(200000), *p;
	json_t *sk;

	assert_non_null(nb);
	f->lim.max_output = 100;
	f->lim.max_outputs = 3;
	p = nb + sprintf(nb, "{\"nbformat\": 4, \"cells\": [{\"cell_type\": \"code\", \"outputs\": [");
	for (int i = 0; i < 10; i++)
		p += sprintf(p, "%s{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": \"%0200d\\n\"}",
			     i ? "," : "", i);
	sprintf(p, "]}]}");
	assert_int_equal(parse(f, nb, -1), 0);
	assert_true(json_is_true(get(f, "truncated")));
	assert_int_equal(json_array_size(get(f, "outputs")), 3);
	assert_non_null(strstr(getstr(f->r->doc, "stdout"), "bytes cut ...]"));
	assert_true(strlen(getstr(f->r->doc, "stdout")) < 200);
	/* the tail of all stdout is the last output's tail */
	assert_non_null(strstr(getstr(f->r->doc, "stdout"), "0009\n"));
	assert_true(strlen(getstr(json_array_get(get(f, "outputs"), 0), "text")) < 200);
	sk = json_array_get(get(f, "skipped"), 0);
	assert_string_equal(getstr(sk, "path"), "outputs");
	assert_int_equal(json_integer_value(json_object_get(sk, "count")), 7);
	free(nb);
}

static void test_odd_shapes(void **state)
{
	struct fixture *f = *state;

	/* type mismatches count as absent; unknown outputs are skipped */
	assert_int_equal(parse(f, NB("5, null, \"x\", {\"cell_type\": \"code\", \"outputs\": 7},"
				     "{\"cell_type\": \"code\"},"
				     CODE("1, null, {}, {\"output_type\": 3}, {\"output_type\": \"weird\\u001b[31m\"},"
					  "{\"output_type\": \"stream\", \"text\": 5},"
					  "{\"output_type\": \"error\"},"
					  "{\"output_type\": \"display_data\", \"data\": {\"text/plain\": 5, \"bad mime\": \"x\"}}")),
			       -1), 0);
	assert_int_equal(json_integer_value(get(f, "cells")), 6);
	assert_string_equal(getstr(f->r->doc, "status"), "error");
	assert_string_equal(getstr(get(f, "error"), "name"), "");
	assert_int_equal(json_array_size(get(f, "outputs")), 3);
	assert_string_equal(getstr(json_array_get(get(f, "skipped"), 4), "reason"),
			    "unknown output type 'weird?[31m'");
	/* \u0000 from a program's output is accepted and dropped from text */
	assert_int_equal(parse(f, NB(CODE("{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": \"a\\u0000b\"}")), -1), 0);
	assert_string_equal(getstr(f->r->doc, "stdout"), "ab");
	/* no cells at all */
	assert_int_equal(parse(f, "{\"nbformat\": 4, \"nbformat_minor\": 0}", -1), 0);
	assert_int_equal(json_integer_value(get(f, "cells")), 0);
}

static void expect_error(struct fixture *f, const char *text, const char *msg)
{
	assert_int_equal(parse(f, text, -1), NBRUN_EPARSE);
	if (!strstr(f->ctx.errmsg, msg))
		fail_msg("message \"%s\" lacks \"%s\"", f->ctx.errmsg, msg);
	assert_null(strchr(f->ctx.errmsg, '\n'));
}

static void test_load_errors(void **state)
{
	struct fixture *f = *state;
	char *deep;

	expect_error(f, "{\"nbformat\": 3, \"worksheets\": []}",
		     "notebook is nbformat 3; only nbformat 4 is supported");
	expect_error(f, "[1, 2]", "not a notebook: the JSON is not an object");
	expect_error(f, "{\"cells\": []}", "no \"nbformat\" field");
	expect_error(f, "{\"nbformat\": \"4\"}", "\"nbformat\" is not a number");
	expect_error(f, "{\"nbformat\": 4, \"cells\": 5}", "\"cells\" is not a list");
	expect_error(f, "{\"nbformat\": 4, \"cells\": [", "notebook is not valid JSON");
	expect_error(f, "{\"nbformat\": 4, \"x\": \"\xff\"}", "notebook is not valid JSON");
	expect_error(f, "{\"nbformat\": 4, \"x\": \"\\ud800\"}", "notebook is not valid JSON");
	expect_error(f, "", "notebook is not valid JSON");
	deep = malloc(20001);
	assert_non_null(deep);
	memset(deep, '[', 10000);
	memset(deep + 10000, ']', 10000);
	deep[20000] = '\0';
	expect_error(f, deep, "notebook is not valid JSON");
	free(deep);
	/* a tree of tiny values is refused before it is built; commas in strings do not count */
	deep = malloc(2 * (4u << 20) + 100);
	assert_non_null(deep);
	strcpy(deep, "{\"nbformat\": 4, \"x\": [");
	for (size_t i = 0; i < (4u << 20); i++)
		memcpy(deep + strlen("{\"nbformat\": 4, \"x\": [") + 2 * i, "0,", 2);
	strcpy(deep + strlen("{\"nbformat\": 4, \"x\": [") + 2 * (4u << 20), "0]}");
	expect_error(f, deep, "notebook holds more than 4194304 JSON values");
	sprintf(deep, "{\"nbformat\": 4, \"x\": \"%s\\\",[{\"}", ",,,,[[[[{{{{");
	assert_int_equal(parse(f, deep, -1), 0);
	free(deep);
	f->lim.max_notebook_bytes = 10;
	expect_error(f, "{\"nbformat\": 4, \"cells\": []}", "the limit is 10 bytes");
}

static void test_load_file(void **state)
{
	struct fixture *f = *state;
	json_t *nb = NULL;
	int fd;

	assert_int_equal(nbrun__notebook_load(&nb, &f->ctx, f->dirfd, "missing.ipynb", 0), NBRUN_ENOTFOUND);
	/* a sparse 1 GiB file is refused from its size, before any read */
	fd = openat(f->dirfd, "big.ipynb", O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1LL << 30), 0);
	close(fd);
	assert_int_equal(nbrun__notebook_load(&nb, &f->ctx, f->dirfd, "big.ipynb", 256 << 20), NBRUN_EPARSE);
	assert_string_equal(f->ctx.errmsg, "notebook is 1.0 GiB; the limit is 256.0 MiB");
	assert_null(nb);
	fd = openat(f->dirfd, "ok.ipynb", O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fd_write_all(fd, "{\"nbformat\": 4, \"cells\": []}", 28), 0);
	close(fd);
	assert_int_equal(nbrun__notebook_load(&nb, &f->ctx, f->dirfd, "ok.ipynb", 0), 0);
	assert_non_null(nb);
	json_decref(nb);
	/* a directory is not a notebook */
	assert_int_equal(mkdirat(f->dirfd, "d.ipynb", 0700), 0);
	assert_int_equal(nbrun__notebook_load(&nb, &f->ctx, f->dirfd, "d.ipynb", 0), NBRUN_EIO);
}

/* Parse text into a result whose "skipped" list was taken away: recording a skip fails, and not for want of memory. */
static int parse_unrecordable(struct fixture *f, const char *text)
{
	json_t *nb = NULL;
	int rc;

	nbrun_result_free(f->r);
	f->r = NULL;
	f->ctx.errmsg[0] = '\0';
	assert_int_equal(nbrun__notebook_loadb(&nb, &f->ctx, text, strlen(text), f->lim.max_notebook_bytes), 0);
	assert_int_equal(nbrun__result_new(&f->r, "test"), 0);
	json_object_set_new(f->r->doc, "skipped", json_null());
	rc = nbrun__outputs_parse(&f->ctx, f->r, nb, -1, &f->lim);
	json_decref(nb);
	return rc;
}

/* Each failure keeps its own code: none is reported as out of memory unless it was. */
static void test_failure_codes(void **state)
{
	struct fixture *f = *state;
	static const char *const nbs[] = {
		/* an output of an unknown type */
		NB(CODE("{\"output_type\": \"weird\"}")),
		/* a MIME type name that is not one */
		NB(CODE("{\"output_type\": \"display_data\", \"data\": {\"bad mime\": \"x\"}}")),
		/* an image that is not base64 */
		NB(CODE("{\"output_type\": \"display_data\", \"data\": {\"image/png\": \"!!\"}}")),
		/* more outputs than the cap */
		NB(CODE("{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": \"a\"},"
			"{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": \"b\"}")),
	};

	f->lim.max_outputs = 1;
	for (size_t i = 0; i < sizeof(nbs) / sizeof(nbs[0]); i++) {
		int rc = parse_unrecordable(f, nbs[i]);
		if (rc != NBRUN_EINVAL || strstr(f->ctx.errmsg, "out of memory") ||
		    !strstr(f->ctx.errmsg, "cannot record a skipped output"))
			fail_msg("notebook %zu: %d %s", i, rc, f->ctx.errmsg);
	}
	/* the same notebooks with a result that can record them parse fine */
	for (size_t i = 0; i < sizeof(nbs) / sizeof(nbs[0]); i++)
		assert_int_equal(parse(f, nbs[i], -1), 0);
}

static long alloc_left = -1;

static void *failing_malloc(size_t n)
{
	if (alloc_left == 0)
		return NULL;
	if (alloc_left > 0)
		alloc_left--;
	return malloc(n);
}

/* Out of memory anywhere in jansson: NBRUN_ENOMEM and its message, never another code. */
static void test_out_of_memory(void **state)
{
	struct fixture *f = *state;
	static const char text[] = NB(CODE(
		"{\"output_type\": \"stream\", \"name\": \"stdout\", \"text\": \"a\\u001b[31mb\"},"
		"{\"output_type\": \"execute_result\", \"execution_count\": 1, \"data\": {\"text/plain\": \"1\","
		" \"application/json\": {\"a\": [1, 2]}, \"image/png\": \"" PNG_B64 "\", \"bad mime\": 1},"
		" \"metadata\": {}, \"transient\": {\"display_id\": \"d1\"}},"
		"{\"output_type\": \"weird\"},"
		"{\"output_type\": \"error\", \"ename\": \"E\", \"evalue\": \"v\", \"traceback\": [\"t\"]}"));
	bool succeeded = false;

	for (long n = 0; n < 2000 && !succeeded; n++) {
		json_t *nb = NULL;
		int rc;

		nbrun_result_free(f->r);
		f->r = NULL;
		f->ctx.errmsg[0] = '\0';
		assert_int_equal(nbrun__notebook_loadb(&nb, &f->ctx, text, strlen(text), f->lim.max_notebook_bytes), 0);
		assert_int_equal(nbrun__result_new(&f->r, "test"), 0);
		alloc_left = n;
		json_set_alloc_funcs(failing_malloc, free);
		rc = nbrun__outputs_parse(&f->ctx, f->r, nb, -1, &f->lim);
		json_set_alloc_funcs(malloc, free);
		alloc_left = -1;
		json_decref(nb);
		if (rc != 0 && (rc != NBRUN_ENOMEM || !strstr(f->ctx.errmsg, "out of memory")))
			fail_msg("allocation %ld failed: %d %s", n, rc, f->ctx.errmsg);
		succeeded = rc == 0;
	}
	assert_true(succeeded);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_streams, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_first_wins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_execute_result_and_display_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_images_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_images_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_images_capped_and_not_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_image_streamed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_limits_truncate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_odd_shapes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_svg_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clean_exit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failure_codes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_memory, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
