/* SPDX-License-Identifier: MIT */
/*
 * Reading an executed notebook: bounded load (the size is checked before a
 * byte is parsed, and the read stops at the cap whatever fstat said), the
 * nbformat check, and nbrun_parse_file() which needs no engine.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "nbrun-private.h"
#include "path.h"

/* Bytes read from the file per read(); jansson then pulls from this buffer. */
#define LOAD_CHUNK (64 * 1024)
/*
 * JSON values a notebook may hold. A tree costs 40-80 bytes per value, so a
 * 24 MB file of "0,0,0,..." would cost a gigabyte: values are counted as
 * the bytes stream in, and parsing stops past this many. Images and text
 * are long strings and count once, but every line of a stream is a value
 * (nbformat stores text as a list of lines): 4M leaves room for a program
 * that printed millions of lines while keeping the tree near 300 MB.
 */
#define MAX_JSON_VALUES (4u << 20)

/* Counts value separators and containers outside strings, across chunks. */
struct value_count {
	uint64_t values;
	bool in_str, esc;
};

/* Returns false once the notebook holds more values than allowed. */
static bool count_values(struct value_count *c, const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char ch = buf[i];

		if (c->in_str) {
			if (c->esc)
				c->esc = false;
			else if (ch == '\\')
				c->esc = true;
			else if (ch == '"')
				c->in_str = false;
		} else if (ch == '"') {
			c->in_str = true;
		} else if (ch == ',' || ch == '[' || ch == '{') {
			c->values++;
		}
	}
	return c->values <= MAX_JSON_VALUES;
}

static int too_many_values(struct nbrun_ctx *ctx)
{
	return nbrun__err(ctx, NBRUN_EPARSE, "notebook holds more than %u JSON values; refusing it",
			  MAX_JSON_VALUES);
}

/* "12.3 MiB" for messages. */
static void fmt_size(char *dst, size_t dstsz, uint64_t n)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	size_t u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(dst, dstsz, "%" PRIu64 " bytes", n);
	else
		snprintf(dst, dstsz, "%.1f %s", v, units[u]);
}

static int too_big(struct nbrun_ctx *ctx, uint64_t size, uint64_t max, bool at_least)
{
	char a[32], b[32];

	fmt_size(a, sizeof(a), size);
	fmt_size(b, sizeof(b), max);
	return nbrun__err(ctx, NBRUN_EPARSE, "notebook is %s%s; the limit is %s",
			  at_least ? "more than " : "", a, b);
}

/* The notebook must be an object with nbformat 4; the minor version is not checked (4.x are compatible). */
static int nb_check(struct nbrun_ctx *ctx, const json_t *nb)
{
	const json_t *major = json_object_get(nb, "nbformat");
	const json_t *cells = json_object_get(nb, "cells");

	if (!json_is_object(nb))
		return nbrun__err(ctx, NBRUN_EPARSE, "not a notebook: the JSON is not an object");
	if (!major)
		return nbrun__err(ctx, NBRUN_EPARSE, "not a notebook: no \"nbformat\" field");
	if (!json_is_integer(major))
		return nbrun__err(ctx, NBRUN_EPARSE, "not a notebook: \"nbformat\" is not a number");
	if (json_integer_value(major) != 4)
		return nbrun__err(ctx, NBRUN_EPARSE,
				  "notebook is nbformat %" JSON_INTEGER_FORMAT "; only nbformat 4 is supported",
				  json_integer_value(major));
	if (cells && !json_is_array(cells))
		return nbrun__err(ctx, NBRUN_EPARSE, "notebook's \"cells\" is not a list");
	return 0;
}

static int json_fail(struct nbrun_ctx *ctx, const json_error_t *err)
{
	return nbrun__err(ctx, NBRUN_EPARSE, "notebook is not valid JSON: %s (line %d, column %d)",
			  err->text, err->line, err->column);
}

int nbrun__notebook_loadb(json_t **out, struct nbrun_ctx *ctx, const char *data, size_t len,
			  uint64_t max_bytes)
{
	struct value_count count = { 0, false, false };
	json_error_t err;
	json_t *nb = NULL;
	int rc;

	*out = NULL;
	if (max_bytes && len > max_bytes)
		return too_big(ctx, len, max_bytes, false);
	if (!count_values(&count, data, len))
		return too_many_values(ctx);
	/* Python's json writes "\u0000" for NUL characters a program printed: accept them. */
	nb = json_loadb(data, len, JSON_ALLOW_NUL, &err);
	if (!nb)
		return json_fail(ctx, &err);
	rc = nb_check(ctx, nb);
	if (rc < 0) {
		json_decref(nb);
		return rc;
	}
	*out = nb;
	return 0;
}

int nbrun__notebook_piece_loadb(json_t **out, struct nbrun_ctx *ctx, const char *data, size_t len,
				uint64_t *values)
{
	struct value_count count = { *values, false, false };
	json_error_t err;

	*out = NULL;
	if (!count_values(&count, data, len))
		return too_many_values(ctx);
	*values = count.values;
	*out = json_loadb(data, len, JSON_ALLOW_NUL, &err);
	if (!*out)
		return json_fail(ctx, &err);
	return 0;
}

struct load_src {
	int fd;
	uint64_t total, max;
	bool over, too_many;
	struct value_count count;
	int err;
	size_t pos, len;
	char buf[LOAD_CHUNK];
};

/* jansson asks for small pieces; serve them from a large buffer refilled with read(). */
static size_t load_cb(void *buffer, size_t buflen, void *data)
{
	struct load_src *src = data;
	size_t n;

	if (src->pos == src->len) {
		ssize_t got;
		do {
			got = read(src->fd, src->buf, sizeof(src->buf));
		} while (got < 0 && errno == EINTR);
		if (got < 0) {
			src->err = errno;
			return (size_t)-1;
		}
		if (got == 0)
			return 0;
		src->total += (uint64_t)got;
		/* The file may have grown since fstat, or not be what it claimed. */
		if (src->total > src->max) {
			src->over = true;
			return (size_t)-1;
		}
		/* Stop before jansson builds an oversized tree, not after. */
		if (!count_values(&src->count, src->buf, (size_t)got)) {
			src->too_many = true;
			return (size_t)-1;
		}
		src->pos = 0;
		src->len = (size_t)got;
	}
	n = src->len - src->pos;
	if (n > buflen)
		n = buflen;
	memcpy(buffer, src->buf + src->pos, n);
	src->pos += n;
	return n;
}

/*
 * Parse JSON read from fd, at most max_bytes, counting values from *values
 * (0 when NULL) and adding them there. The raw text and the tree are never
 * both in memory.
 */
static int load_fd(json_t **out, struct nbrun_ctx *ctx, int fd, const char *name,
		   uint64_t max_bytes, uint64_t *values)
{
	struct load_src *src = malloc(sizeof(*src));
	json_error_t err;
	json_t *j = NULL;
	int rc = 0;

	*out = NULL;
	if (!src)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory reading %s", name);
	memset(src, 0, offsetof(struct load_src, buf));
	src->fd = fd;
	src->max = max_bytes;
	src->count.values = values ? *values : 0;
	j = json_load_callback(load_cb, src, JSON_ALLOW_NUL, &err);
	if (src->over)
		rc = too_big(ctx, max_bytes, max_bytes, true);
	else if (src->too_many)
		rc = too_many_values(ctx);
	else if (src->err)
		rc = nbrun__errno(ctx, NBRUN_EIO, src->err, "cannot read %s", name);
	else if (!j)
		rc = json_fail(ctx, &err);
	if (rc == 0 && values)
		*values = src->count.values;
	if (rc == 0) {
		*out = j;
		j = NULL;
	}
	json_decref(j);
	free(src);
	return rc;
}

int nbrun__notebook_load(json_t **out, struct nbrun_ctx *ctx, int dirfd, const char *name,
			 uint64_t max_bytes)
{
	struct stat st;
	json_t *nb = NULL;
	int fd, rc;

	*out = NULL;
	if (!max_bytes)
		max_bytes = NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES;
	/* Names below a directory of ours (the run's) must not lead elsewhere through a symlink. */
	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
					 (dirfd == AT_FDCWD ? 0 : O_NOFOLLOW));
	if (fd < 0)
		return nbrun__errno(ctx, errno == ENOENT ? NBRUN_ENOTFOUND : NBRUN_EIO, errno,
				    "cannot open %s", name);
	if (fstat(fd, &st) < 0) {
		rc = nbrun__errno(ctx, NBRUN_EIO, errno, "cannot read %s", name);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = nbrun__err(ctx, NBRUN_EIO, "cannot read %s: not a regular file", name);
		goto out;
	}
	if ((uint64_t)st.st_size > max_bytes) {
		rc = too_big(ctx, (uint64_t)st.st_size, max_bytes, false);
		goto out;
	}
	rc = load_fd(&nb, ctx, fd, name, max_bytes, NULL);
	if (rc < 0)
		goto out;
	rc = nb_check(ctx, nb);
	if (rc < 0)
		goto out;
	*out = nb;
	nb = NULL;
out:
	json_decref(nb);
	close(fd);
	return rc;
}

int nbrun__notebook_piece_loadfd(json_t **out, struct nbrun_ctx *ctx, int fd, uint64_t max_bytes,
				 uint64_t *values)
{
	*out = NULL;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return nbrun__errno(ctx, NBRUN_EIO, errno, "cannot read a spooled cell");
	return load_fd(out, ctx, fd, "a cell", max_bytes, values);
}

NBRUN_EXPORT int nbrun_parse_file(struct nbrun_result **out, struct nbrun_ctx *ctx,
				  const char *path, const struct nbrun_parse_options *opts)
{
	struct nbrun_result *r = NULL;
	struct nbrun__limits lim;
	uint64_t start = clock_mono_ms();
	char run_id[64], *abs_out = NULL;
	json_t *nb = NULL;
	int dirfd = -1, rc;

	*out = NULL;
	if (!path) {
		rc = nbrun__err(ctx, NBRUN_EINVAL, "nbrun_parse_file: bad arguments");
		goto out;
	}
	/* No options: the defaults. */
	rc = opts ? nbrun__options_version(ctx, "parse", &opts->version, NBRUN_PARSE_OPTIONS_VERSION) : 0;
	if (rc < 0)
		goto out;
	nbrun__limits_resolve(&lim, opts ? &opts->limits : NULL);
	/* A bad notebook is reported before anything is created. */
	rc = nbrun__notebook_load(&nb, ctx, AT_FDCWD, path, lim.max_notebook_bytes);
	if (rc < 0)
		goto out;
	if (opts && opts->out_dir) {
		rc = path_mkdir_p(opts->out_dir, 0755);
		if (rc == 0) {
			dirfd = open(opts->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			rc = dirfd < 0 ? -errno : 0;
		}
		if (rc == 0) {
			abs_out = realpath(opts->out_dir, NULL);
			rc = abs_out ? 0 : -errno;
		}
		if (rc < 0) {
			rc = nbrun__errno(ctx, NBRUN_EIO, -rc, "cannot create output directory %s",
					  opts->out_dir);
			goto out;
		}
	}
	snprintf(run_id, sizeof(run_id), "parse-%" PRIx64 "-%ld", (uint64_t)time(NULL), (long)getpid());
	rc = nbrun__result_new(&r, run_id);
	if (rc < 0) {
		rc = nbrun__err(ctx, rc, "out of memory");
		goto out;
	}
	rc = nbrun__outputs_parse(ctx, r, nb, dirfd, &lim);
	if (rc < 0)
		goto out;
	/* The tree can be as large as the notebook: drop it before serialising the result. */
	json_decref(nb);
	nb = NULL;
	/* Paths that are not UTF-8 cannot be JSON strings: they stay null. */
	nb = json_string(path);
	json_object_set_new(r->doc, "notebook", nb ? nb : json_null());
	nb = abs_out ? json_string(abs_out) : NULL;
	json_object_set_new(r->doc, "out_dir", nb ? nb : json_null());
	nb = NULL;
	json_object_set_new(r->doc, "duration_ms", json_integer((json_int_t)(clock_mono_ms() - start)));
	if (dirfd >= 0) {
		rc = nbrun__result_write(ctx, r, dirfd);
		if (rc < 0)
			goto out;
	}
	*out = r;
	r = NULL;
	rc = 0;
out:
	nbrun_result_free(r);
	json_decref(nb);
	free(abs_out);
	if (dirfd >= 0)
		close(dirfd);
	return rc;
}
