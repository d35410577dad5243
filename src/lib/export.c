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
#include <unistd.h>

#include "nbrun-private.h"
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
			for (size_t i = 0; i < n; i++)
				if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
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
	fd = openat(parent, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0755);
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

int nbrun__write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
