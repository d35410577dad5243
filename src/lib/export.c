/* SPDX-License-Identifier: MIT */
/*
 * Safe writes under the output directory. Every path comes from untrusted
 * input (tar entries, notebook metadata), so it is validated first and then
 * walked one component at a time with openat(O_NOFOLLOW): nothing is ever
 * created outside the directory, and no symlink is followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <archive_entry.h>

#include "nbrun-private.h"
#include "wire.h"
#include "text.h"

const char *nbrun__path_reject_reason(const char *path)
{
	size_t len = strlen(path), depth = 0;
	const char *p = path;

	if (len == 0)
		return "empty name";
	if (len > NBRUN_MAX_PATH_BYTES)
		return "path too long";
	if (path[0] == '/')
		return "absolute path";
	if (!text_utf8_valid(path, len))
		return "name is not valid UTF-8";
	while (*p) {
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if (n == 0 || (n == 1 && p[0] == '.')) {
			/* tolerate "a//b" and "./a": harmless, skip */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			return "'..' in path";
		} else {
			if (n > NBRUN_MAX_NAME_BYTES)
				return "name too long";
			/* C0, DEL and C1: a terminal acts on every one of them (wire.h's rule) */
			if (wire_name_controls(p, n))
				return "control character in name";
			if (++depth > NBRUN_MAX_PATH_DEPTH)
				return "too deep";
		}
		if (!end)
			break;
		p = end + 1;
	}
	return depth ? NULL : "empty name";
}

/* Open the directory component name below dirfd, creating it when missing. */
static int export_step(int dirfd, const char *name, bool create)
{
	int fd;

	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 || errno != ENOENT || !create)
		return fd >= 0 ? fd : -errno;
	if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

/*
 * Walk path below dirfd. Returns an fd of the parent directory of the last
 * component and points *last at that component (within copy).
 */
static int export_walk(int dirfd, char *copy, char **last, bool mkdir_all)
{
	int cur = dup(dirfd);
	char *p = copy, *slash;

	if (cur < 0)
		return -errno;
	for (;;) {
		while (*p == '/')
			p++;
		slash = strchr(p, '/');
		if (!slash || (slash[1] == '\0' && !mkdir_all))
			break;
		*slash = '\0';
		if (*p && strcmp(p, ".")) {
			int next = export_step(cur, p, true);
			close(cur);
			if (next < 0)
				return next;
			cur = next;
		}
		p = slash + 1;
		if (!*p)
			break;
	}
	if (slash && slash[1] == '\0')
		*slash = '\0';
	*last = p;
	return cur;
}

int nbrun__export_open(int dirfd, const char *path, mode_t mode)
{
	char copy[NBRUN_MAX_PATH_BYTES + 1];
	char *last;
	int parent, fd;

	if (nbrun__path_reject_reason(path))
		return -EINVAL;
	memcpy(copy, path, strlen(path) + 1);
	parent = export_walk(dirfd, copy, &last, false);
	if (parent < 0)
		return parent;
	if (!*last || !strcmp(last, ".")) {
		close(parent);
		return -EISDIR;
	}
	fd = openat(parent, last, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0755);
	if (fd < 0)
		fd = -errno;
	close(parent);
	return fd;
}

int nbrun__export_mkdirs(int dirfd, const char *path)
{
	char copy[NBRUN_MAX_PATH_BYTES + 1];
	char *last;
	int parent, fd;

	if (nbrun__path_reject_reason(path))
		return -EINVAL;
	memcpy(copy, path, strlen(path) + 1);
	parent = export_walk(dirfd, copy, &last, false);
	if (parent < 0)
		return parent;
	if (!*last || !strcmp(last, "."))
		return parent;
	fd = export_step(parent, last, true);
	close(parent);
	return fd;
}

/* ---- files from /mnt/data ------------------------------------------------------ */

int nbrun__sha256_fd(int fd, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE], chunk[65536];
	unsigned int mdlen = 0;
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	off_t off = 0;
	ssize_t n;
	int rc = -EIO;

	if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1)
		goto out;
	while ((n = pread(fd, chunk, sizeof(chunk), off)) > 0) {
		EVP_DigestUpdate(c, chunk, (size_t)n);
		off += n;
	}
	if (n < 0 || EVP_DigestFinal_ex(c, md, &mdlen) != 1)
		goto out;
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	rc = 0;
out:
	EVP_MD_CTX_free(c);
	return rc;
}

static const char *export_strip_top(const char *path)
{
	/* GET archive of /mnt/data names entries "data/..." */
	const char *slash = strchr(path, '/');
	return !slash ? "" : slash == path ? path : slash + 1; /* "/abs" stays absolute: rejected */
}

static bool export_is_untouched_input(const struct nbrun__files_export *r, const char *rel, int fd)
{
	char hex[65];

	for (size_t i = 0; i < r->n_inputs; i++) {
		if (strcmp(r->inputs[i].name, rel))
			continue;
		return r->inputs[i].sha256[0] && nbrun__sha256_fd(fd, hex) == 0 &&
		       !strcmp(hex, r->inputs[i].sha256);
	}
	return false;
}

/* The host's disk (or quota) is full: said as what it is, not as a cap. */
static bool export_disk_full(int err)
{
	return err == ENOSPC || err == EDQUOT;
}

static int export_file_entry(const struct nbrun__tar_entry *e, void *p)
{
	struct nbrun__files_export *r = p;
	const char *rel = export_strip_top(e->path);
	const char *why;
	char *dest = NULL;
	int fd;

	if (!*rel || !strcmp(rel, "/"))
		return -1; /* the top directory itself */
	why = nbrun__path_reject_reason(rel);
	if (!why && e->hardlink)
		why = "hard link";
	if (!why && e->type == AE_IFLNK)
		why = "symbolic link";
	if (!why && e->type != AE_IFREG && e->type != AE_IFDIR)
		why = "not a regular file or directory";
	if (why) {
		nbrun__result_skip(r->result, rel, why);
		return -1;
	}
	if (e->type == AE_IFDIR)
		return -1; /* directories come into being with the files in them */
	if (r->count >= r->max_files ||
	    r->bytes + (uint64_t)(e->size > 0 ? e->size : 0) >
		    r->max_bytes) {
		nbrun__result_skip(r->result, rel, "over the export cap");
		r->cut = true;
		return -1;
	}
	/* Entries are validated as paths below files/, so open below it too:
	 * the prefix must not count against the depth and length caps. */
	if (r->files_fd < 0) {
		r->files_fd = nbrun__export_mkdirs(r->out_fd, "files");
		if (r->files_fd < 0 && export_disk_full(-r->files_fd)) {
			r->files_fd = -1;
			nbrun__result_skip(r->result, rel, "host disk full");
			r->cut = true;
			return -1;
		}
		if (r->files_fd < 0)
			return -2;
	}
	if (asprintf(&dest, "files/%s", rel) < 0)
		return -2;
	fd = nbrun__export_open(r->files_fd, rel, 0644);
	if (fd < 0) {
		nbrun__result_skip(r->result, rel, fd == -EEXIST ? "duplicate entry"
						   : export_disk_full(-fd) ? "host disk full"
									  : "cannot be written");
		r->cut |= export_disk_full(-fd);
		free(dest);
		return -1;
	}
	free(r->entry_rel);
	r->entry_rel = dest;
	r->count++;
	return fd;
}

static void export_file_done(const struct nbrun__tar_entry *e, int fd, uint64_t written, bool complete,
		      void *p)
{
	struct nbrun__files_export *r = p;
	const char *rel = export_strip_top(e->path);
	char hex[65];
	json_t *f;

	if (!complete) {
		unlinkat(r->out_fd, r->entry_rel, 0);
		nbrun__result_skip(r->result, rel, export_disk_full(e->write_errno)
							   ? "host disk full"
							   : "over the export cap or unreadable");
		r->cut = true;
	} else if (export_is_untouched_input(r, rel, fd)) {
		unlinkat(r->out_fd, r->entry_rel, 0);
	} else {
		nbrun__sha256_fd(fd, hex);
		r->bytes += written;
		f = json_pack("{s:s, s:I, s:s}", "path", r->entry_rel, "bytes", (json_int_t)written,
			      "sha256", hex);
		if (f)
			json_array_append_new(json_object_get(r->result->doc, "files"), f);
	}
	close(fd);
}

int nbrun__export_files(struct nbrun_ctx *ctx, struct nbrun__files_export *x, int tar_fd,
			bool stream_cut)
{
	struct nbrun__tar_sink sink = { export_file_entry, export_file_done, x, x->max_bytes,
					/* directories and skipped entries count too */
					x->max_files * 4 + 64 };
	int rc;

	x->files_fd = -1;
	rc = nbrun__tar_extract(ctx, tar_fd, &sink);
	if (rc == 1 || stream_cut) {
		nbrun__result_skip(x->result, "/mnt/data", "more entries than the export cap");
		x->cut = true;
		rc = 0;
	}
	if (rc < 0) {
		/* A broken archive keeps what was exported before the break. */
		if (!x->partial)
			nbrun__result_skip(x->result, "/mnt/data", nbrun_ctx_errmsg(ctx));
		x->cut = true;
		rc = 0;
	}
	if (x->cut)
		nbrun__result_flag_truncated(x->result);
	free(x->entry_rel);
	x->entry_rel = NULL;
	if (x->files_fd >= 0)
		close(x->files_fd);
	x->files_fd = -1;
	return rc;
}
