/* SPDX-License-Identifier: MIT */
/*
 * The run store: the state directory, one directory per kept run (its
 * result.json, images, files and .owner), the janitor that keeps it within
 * its limits, and the safe ways of reading below it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "clock.h"
#include "buf.h"
#include "fdio.h"
#include "path.h"
#include "serve.h"

int serve_rm_tree(int parent, const char *name)
{
	struct stat st;
	struct dirent *de;
	DIR *d;
	int fd, rc = 0;

	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(parent, name, 0) < 0 ? -errno : 0;
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    serve_rm_tree(dirfd(d), de->d_name) < 0)
			rc = -EIO;
	closedir(d);
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

struct serve_kept {
	char name[80];
	time_t mtime;
};

static int serve_kept_newest_first(const void *a, const void *b)
{
	const struct serve_kept *x = a, *y = b;
	return x->mtime < y->mtime ? 1 : x->mtime > y->mtime ? -1 : strcmp(x->name, y->name);
}

/*
 * Remove finished runs older than the retention, then the oldest beyond
 * --keep. With startup set, also what a killed server left: pending run
 * directories and uploaded files.
 */
void serve_janitor(struct serve *s, bool startup)
{
	struct serve_kept *kept = NULL;
	size_t n = 0, alloc = 0;
	time_t now = time(NULL);
	struct dirent *de;
	struct stat st;
	DIR *d;
	int fd = dup(s->runs_fd);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		if (startup && !strncmp(de->d_name, ".run-", 5)) {
			serve_rm_tree(s->runs_fd, de->d_name);
			continue;
		}
		if (!wire_run_id_valid(de->d_name) || strlen(de->d_name) >= sizeof(kept->name) ||
		    fstatat(s->runs_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if ((uint64_t)(now - st.st_mtime) * 1000 > s->retention_ms) {
			serve_rm_tree(s->runs_fd, de->d_name);
			continue;
		}
		if (n == alloc) {
			struct serve_kept *k = realloc(kept, (alloc ? alloc * 2 : 64) * sizeof(*k));
			if (!k)
				break;
			kept = k;
			alloc = alloc ? alloc * 2 : 64;
		}
		memcpy(kept[n].name, de->d_name, strlen(de->d_name) + 1); /* checked above */
		kept[n++].mtime = st.st_mtime;
	}
	closedir(d);
	if (n > s->keep_runs) {
		qsort(kept, n, sizeof(*kept), serve_kept_newest_first);
		for (size_t i = s->keep_runs; i < n; i++)
			serve_rm_tree(s->runs_fd, kept[i].name);
	}
	free(kept);
}

int serve_open_state(struct serve *s, const char *dir)
{
	char cwd[4096], *tmp = NULL;
	int fd, rc = -1;

	if (dir[0] == '/')
		s->state_dir = strdup(dir);
	else if (getcwd(cwd, sizeof(cwd)) && asprintf(&s->state_dir, "%s/%s", cwd, dir) < 0)
		s->state_dir = NULL;
	if (!s->state_dir || asprintf(&s->runs_dir, "%s/runs", s->state_dir) < 0 ||
	    asprintf(&tmp, "%s/tmp", s->state_dir) < 0) {
		s->runs_dir = NULL;
		tmp = NULL;
		serve_err("out of memory");
		goto out;
	}
	if (path_mkdir_p(s->runs_dir, 0700) < 0 || path_mkdir_p(tmp, 0700) < 0) {
		serve_err("cannot create the state directory %s: %s", s->state_dir, strerror(errno));
		goto out;
	}
	s->runs_fd = open(s->runs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fd = open(s->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->runs_fd < 0 || fd < 0) {
		serve_err("cannot open the state directory %s: %s", s->state_dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		goto out;
	}
	/* Uploaded files of requests a killed server never finished. */
	serve_rm_tree(fd, "tmp");
	mkdirat(fd, "tmp", 0700);
	close(fd);
	rc = 0;
out:
	free(tmp);
	return rc;
}

int serve_open_below(int dirfd, const char *rel)
{
	const char *p = rel, *slash;
	int fd = dup(dirfd), next;
	struct stat st;
	char name[256];

	if (fd < 0)
		return -errno;
	for (;;) {
		size_t n;
		bool last;

		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		last = !slash;
		if (!wire_name_safe(p, n)) {
			close(fd);
			return -EINVAL;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		next = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY));
		close(fd);
		if (next < 0)
			return -errno;
		fd = next;
		if (last)
			break;
		p = slash + 1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

/* The bytes of a regular file below dirfd, at most max. NULL when missing or larger. */
char *serve_read_below(int dirfd, const char *rel, size_t max, size_t *len)
{
	int fd = serve_open_below(dirfd, rel);
	char *out = NULL;

	if (fd < 0)
		return NULL;
	if (fd_read_all(fd, max, &out, len) < 0)
		out = NULL;
	close(fd);
	return out;
}

/*
 * Add url (always) and content_base64 (when inline is set and the bytes fit
 * the caps) to each image and file entry.
 */
void serve_add_refs(json_t *doc, const char *prefix, int run_fd, bool inline_data)
{
	static const char *const lists[] = { "images", "files" };
	size_t budget = SERVE_INLINE_ALL;

	for (size_t l = 0; l < 2; l++) {
		json_t *e;
		size_t i;

		json_array_foreach(json_object_get(doc, lists[l]), i, e) {
			const char *path = json_string_value(json_object_get(e, "path"));
			json_int_t bytes = json_integer_value(json_object_get(e, "bytes"));
			char *enc, *url = NULL;

			if (!path)
				continue;
			/* path is "images/NAME" or "files/PATH": the url mirrors it. */
			enc = wire_url_path(path);
			if (enc && asprintf(&url, "%s/%s", prefix, enc) >= 0)
				json_object_set_new(e, "url", json_string(url));
			free(enc);
			free(url);
			if (inline_data && bytes >= 0 && (uint64_t)bytes <= SERVE_INLINE_ONE &&
			    (size_t)bytes <= budget) {
				size_t len = 0;
				char *data = serve_read_below(run_fd, path, SERVE_INLINE_ONE, &len);
				char *b64 = data && len == (size_t)bytes ? wire_base64((const unsigned char *)data, len) : NULL;
				if (b64) {
					json_object_set_new(e, "content_base64", json_string(b64));
					budget -= len;
				}
				free(b64);
				free(data);
			}
		}
	}
}

/* The urls of a kept run's outputs: /v1/runs/{id}/... */
void serve_add_run_refs(json_t *doc, const char *run_id, int run_fd, bool inline_data)
{
	char prefix[128];

	snprintf(prefix, sizeof(prefix), "/v1/runs/%s", run_id);
	serve_add_refs(doc, prefix, run_fd, inline_data);
}

/*
 * A run of another token than the first is marked with the sender's digest
 * in .owner (no GET route reaches a name outside files/ and images/);
 * the first token's runs, and the MCP tools', have none.
 */
int serve_write_owner(int run_fd, const char *owner)
{
	int fd;
	ssize_t w;

	if (!*owner)
		return 0;
	fd = openat(run_fd, ".owner", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	w = write(fd, owner, strlen(owner));
	if (close(fd) < 0 || w != (ssize_t)strlen(owner))
		return -1;
	return 0;
}

void serve_owner_hex(char out[65], const struct serve *s, int tenant)
{
	unsigned char d[32];
	unsigned int len = 0;
	const char *t;

	out[0] = '\0';
	if (tenant <= 0 || (size_t)tenant > s->n_tenant_tokens)
		return;
	t = s->tenant_tokens[tenant - 1];
	if (EVP_Digest(t, strlen(t), d, &len, EVP_sha256(), NULL) != 1 || len != 32)
		return;
	for (size_t i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int serve_open_run(struct serve *s, const char *id, const char *owner)
{
	char got[65] = "", want[65];
	int run_fd, fd;
	ssize_t n = 0;

	if (!wire_run_id_valid(id))
		return -1;
	run_fd = openat(s->runs_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run_fd < 0)
		return -1;
	fd = openat(run_fd, ".owner", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, got, sizeof(got) - 1);
		close(fd);
		got[n > 0 ? n : 0] = '\0';
	} else if (errno != ENOENT) {
		close(run_fd);
		return -1;
	}
	/* Both padded to 64 bytes and compared whole, in constant time. */
	memset(want, 0, sizeof(want));
	snprintf(want, sizeof(want), "%s", owner);
	if (fd < 0 ? *owner != '\0' : (n != 64 || CRYPTO_memcmp(got, want, 64) != 0)) {
		close(run_fd);
		return -1;
	}
	return run_fd;
}

/*
 * The kept run's result document for owner, with urls (and, with
 * inline_data, the small outputs' bytes), or NULL when it is gone.
 */
json_t *serve_load_result(struct serve *s, const char *run_id, const char *owner,
				 bool inline_data)
{
	int run_fd = serve_open_run(s, run_id, owner), fd = -1;
	json_t *doc = NULL;

	if (run_fd < 0)
		return NULL;
	fd = serve_open_below(run_fd, "result.json");
	if (fd >= 0)
		doc = json_loadfd(fd, 0, NULL);
	if (json_is_object(doc)) {
		serve_add_run_refs(doc, run_id, run_fd, inline_data);
	} else {
		json_decref(doc);
		doc = NULL;
	}
	if (fd >= 0)
		close(fd);
	close(run_fd);
	return doc;
}
