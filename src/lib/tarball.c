/* SPDX-License-Identifier: MIT */
/*
 * Tar archives with libarchive: the upload (notebook and input files, built
 * in memory and owned by the sandbox user) and the walk over a downloaded
 * archive, whose entries are untrusted and handed to a sink that decides.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbrun-private.h"

struct nbrun__tar {
	struct archive *a;
	struct buf out;
	unsigned int uid, gid;
	bool failed;
	/* Files added from the host, hashed while they are read. */
	struct nbrun__export_input *files;
	size_t n_files;
};

static la_ssize_t tar_write_cb(struct archive *a, void *p, const void *data, size_t n)
{
	struct nbrun__tar *t = p;

	if (buf_append(&t->out, data, n) < 0) {
		archive_set_error(a, E2BIG, "upload larger than its cap");
		t->failed = true;
		return -1;
	}
	return (la_ssize_t)n;
}

int nbrun__tar_new(struct nbrun__tar **out, unsigned int uid, unsigned int gid, size_t max_bytes)
{
	struct nbrun__tar *t;

	*out = NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NBRUN_ENOMEM;
	buf_init(&t->out, max_bytes);
	t->uid = uid;
	t->gid = gid;
	t->a = archive_write_new();
	if (!t->a || archive_write_set_format_pax_restricted(t->a) != ARCHIVE_OK ||
	    archive_write_set_options(t->a, "hdrcharset=BINARY") != ARCHIVE_OK || /* UTF-8 names in the C locale */
	    archive_write_set_bytes_in_last_block(t->a, 1) != ARCHIVE_OK ||
	    archive_write_open(t->a, t, NULL, tar_write_cb, NULL) != ARCHIVE_OK) {
		nbrun__tar_free(t);
		return NBRUN_ENOMEM;
	}
	*out = t;
	return 0;
}

void nbrun__tar_free(struct nbrun__tar *t)
{
	if (!t)
		return;
	if (t->a)
		archive_write_free(t->a);
	buf_free(&t->out);
	for (size_t i = 0; i < t->n_files; i++)
		free(t->files[i].name);
	free(t->files);
	free(t);
}

static struct archive_entry *tar_entry(struct nbrun__tar *t, const char *name, mode_t type,
				       mode_t perm, int64_t size)
{
	struct archive_entry *e = archive_entry_new();

	if (!e)
		return NULL;
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_size(e, size);
	archive_entry_set_uid(e, t->uid);
	archive_entry_set_gid(e, t->gid);
	archive_entry_set_mtime(e, time(NULL), 0);
	return e;
}

int nbrun__tar_add_data(struct nbrun__tar *t, const char *name, const void *data, size_t len)
{
	struct archive_entry *e = tar_entry(t, name, AE_IFREG, 0644, (int64_t)len);
	int rc = NBRUN_EIO;

	if (!e)
		return NBRUN_ENOMEM;
	if (archive_write_header(t->a, e) == ARCHIVE_OK &&
	    (len == 0 || archive_write_data(t->a, data, len) == (la_ssize_t)len))
		rc = 0;
	archive_entry_free(e);
	return rc;
}

static int tar_add_dir(struct nbrun__tar *t, const char *name)
{
	struct archive_entry *e = tar_entry(t, name, AE_IFDIR, 0755, 0);
	int rc;

	if (!e)
		return NBRUN_ENOMEM;
	rc = archive_write_header(t->a, e) == ARCHIVE_OK ? 0 : NBRUN_EIO;
	archive_entry_free(e);
	return rc;
}

static int tar_add_file(struct nbrun_ctx *ctx, struct nbrun__tar *t, int fd, const char *host_path,
			const char *name, const struct stat *st)
{
	struct archive_entry *e = tar_entry(t, name, AE_IFREG, st->st_mode & 0755, st->st_size);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	struct nbrun__export_input *grown;
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	char chunk[65536];
	int64_t left = st->st_size;
	int rc = 0;

	if (!e || !md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		goto out;
	}
	if (archive_write_header(t->a, e) != ARCHIVE_OK)
		goto fail;
	while (left > 0) {
		ssize_t n = read(fd, chunk, left < (int64_t)sizeof(chunk) ? (size_t)left : sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = nbrun__errno(ctx, NBRUN_EIO, n < 0 ? errno : EIO, "cannot read %s", host_path);
			goto out;
		}
		if (archive_write_data(t->a, chunk, (size_t)n) != n)
			goto fail;
		EVP_DigestUpdate(md, chunk, (size_t)n);
		left -= n;
	}
	/* Remembered so that an input the code left untouched is not exported back. */
	grown = realloc(t->files, (t->n_files + 1) * sizeof(*grown));
	if (!grown || !(grown[t->n_files].name = strdup(name))) {
		if (grown)
			t->files = grown;
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		goto out;
	}
	t->files = grown;
	grown[t->n_files].sha256[0] = '\0';
	if (EVP_DigestFinal_ex(md, digest, &dlen) == 1)
		for (unsigned int i = 0; i < dlen; i++)
			snprintf(grown[t->n_files].sha256 + 2 * i, 3, "%02x", digest[i]);
	t->n_files++;
	goto out;
fail:
	rc = t->failed ? nbrun__err(ctx, NBRUN_EINVAL, "input files are larger than the sandbox disk (%s)",
				    host_path)
		       : nbrun__err(ctx, NBRUN_EIO, "cannot archive %s: %s", host_path,
				    archive_error_string(t->a));
out:
	EVP_MD_CTX_free(md);
	archive_entry_free(e);
	return rc;
}

static int tar_add_tree(struct nbrun_ctx *ctx, struct nbrun__tar *t, const char *host_path,
			const char *name, int depth)
{
	struct stat st;
	int fd, rc = 0;
	DIR *dir = NULL;
	struct dirent *de;

	if (depth > NBRUN_MAX_PATH_DEPTH)
		return nbrun__err(ctx, NBRUN_EINVAL, "%s: directory tree too deep", host_path);
	/* A FIFO must not block. A symlink the user named is followed; one inside
	 * a directory is not: a directory from elsewhere (an unpacked download)
	 * must not carry host files such as ~/.ssh into the sandbox. */
	fd = open(host_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (depth ? O_NOFOLLOW : 0));
	if (fd < 0 && depth && errno == ELOOP)
		return nbrun__err(ctx, NBRUN_EINVAL,
				  "input %s is a symbolic link inside a directory, which nbrun does not "
				  "follow (give its target with -f)",
				  host_path);
	if (fd < 0)
		return nbrun__errno(ctx, errno == ENOENT ? NBRUN_ENOTFOUND : NBRUN_EIO, errno,
				    "cannot open input %s", host_path);
	if (fstat(fd, &st) < 0) {
		rc = nbrun__errno(ctx, NBRUN_EIO, errno, "cannot stat %s", host_path);
		goto out;
	}
	if (S_ISREG(st.st_mode)) {
		rc = tar_add_file(ctx, t, fd, host_path, name, &st);
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		rc = nbrun__err(ctx, NBRUN_EINVAL, "input %s is not a regular file or directory",
				host_path);
		goto out;
	}
	rc = tar_add_dir(t, name);
	if (rc < 0)
		goto out;
	dir = fdopendir(fd);
	if (!dir) {
		rc = nbrun__errno(ctx, NBRUN_EIO, errno, "cannot read directory %s", host_path);
		goto out;
	}
	fd = -1;
	while ((de = readdir(dir))) {
		char *child_host = NULL, *child_name = NULL;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (asprintf(&child_host, "%s/%s", host_path, de->d_name) < 0 ||
		    asprintf(&child_name, "%s/%s", name, de->d_name) < 0) {
			free(child_host);
			rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
			goto out;
		}
		rc = tar_add_tree(ctx, t, child_host, child_name, depth + 1);
		free(child_host);
		free(child_name);
		if (rc < 0)
			goto out;
	}
out:
	if (dir)
		closedir(dir);
	if (fd >= 0)
		close(fd);
	return rc;
}

int nbrun__tar_add_path(struct nbrun_ctx *ctx, struct nbrun__tar *t, const char *host_path,
			const char *name)
{
	return tar_add_tree(ctx, t, host_path, name, 0);
}

void nbrun__tar_take_files(struct nbrun__tar *t, struct nbrun__export_input **files, size_t *n)
{
	*files = t->files;
	*n = t->n_files;
	t->files = NULL;
	t->n_files = 0;
}

int nbrun__tar_finish(struct nbrun__tar *t, const void **data, size_t *len)
{
	if (archive_write_close(t->a) != ARCHIVE_OK)
		return t->failed ? NBRUN_EINVAL : NBRUN_EIO;
	*data = t->out.data;
	*len = t->out.len;
	return 0;
}

/* ---- read side ------------------------------------------------------------ */

int nbrun__tar_extract(struct nbrun_ctx *ctx, int fd, const struct nbrun__tar_sink *sink)
{
	struct archive *a = archive_read_new();
	struct archive_entry *ae;
	size_t count = 0;
	int rc = 0, r;
	char chunk[65536];

	if (!a)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	/* Only plain tar: the engine sends nothing else, and no decompressor is exposed. */
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
		rc = nbrun__err(ctx, NBRUN_EPARSE, "archive from the container is unreadable: %s",
				archive_error_string(a));
		goto out;
	}
	while ((r = archive_read_next_header(a, &ae)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		struct nbrun__tar_entry e;
		uint64_t written = 0;
		bool complete = true;
		int out_fd;

		if (sink->max_entries && count++ >= sink->max_entries) {
			rc = 1;
			goto out;
		}
		e.path = archive_entry_pathname(ae);
		if (!e.path)
			e.path = "";
		e.type = (int)archive_entry_filetype(ae);
		e.size = archive_entry_size(ae);
		e.hardlink = archive_entry_hardlink(ae) != NULL;
		e.link = e.hardlink ? archive_entry_hardlink(ae) : archive_entry_symlink(ae);
		e.write_errno = 0;
		out_fd = sink->entry(&e, sink->payload);
		if (out_fd < -1) {
			rc = out_fd;
			goto out;
		}
		if (out_fd < 0)
			continue;
		for (;;) {
			la_ssize_t n = archive_read_data(a, chunk, sizeof(chunk));
			if (n == 0)
				break;
			if (n < 0) {
				complete = false;
				break;
			}
			if (written + (uint64_t)n > sink->max_entry_bytes) {
				complete = false;
				break;
			}
			r = fd_write_all(out_fd, chunk, (size_t)n);
			if (r < 0) {
				e.write_errno = -r;
				complete = false;
				break;
			}
			written += (uint64_t)n;
		}
		sink->done(&e, out_fd, written, complete, sink->payload);
	}
	if (r != ARCHIVE_EOF)
		rc = nbrun__err(ctx, NBRUN_EPARSE, "archive from the container is malformed: %s",
				archive_error_string(a));
out:
	archive_read_free(a);
	return rc;
}
