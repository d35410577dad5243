/* SPDX-License-Identifier: MIT */
/* Reading and writing file descriptors whole. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "fdio.h"

int fd_write_all(int fd, const void *buf, size_t len)
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

int fd_atomic_open(struct fd_atomic *a, int dirfd, const char *name, mode_t mode)
{
	a->dirfd = dirfd;
	a->fd = -1;
	a->tmp[0] = '\0';
	if ((size_t)snprintf(a->name, sizeof(a->name), "%s", name) >= sizeof(a->name))
		return -ENAMETOOLONG;
	snprintf(a->tmp, sizeof(a->tmp), "%s.tmp", name);
	/* O_EXCL: a symlink planted at the temporary name is not followed. A
	 * leftover of a crashed writer is removed first. */
	unlinkat(dirfd, a->tmp, 0);
	a->fd = openat(dirfd, a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (a->fd < 0) {
		a->tmp[0] = '\0';
		return -errno;
	}
	return a->fd;
}

int fd_atomic_commit(struct fd_atomic *a)
{
	int rc = 0;

	if (a->fd < 0)
		return -EBADF;
	/*
	 * No fsync: the rename is what makes the file whole or absent after a
	 * crash of this process, and a result is made again by running again.
	 * An fsync costs 10 ms and more per file here, more than a warm run.
	 * A full disk shows at write() (ext4 reserves delayed blocks there,
	 * tmpfs allocates), or at close on a network file system.
	 */
	if (close(a->fd) < 0 && errno != EINTR)
		rc = -errno;
	a->fd = -1;
	if (rc == 0 && renameat(a->dirfd, a->tmp, a->dirfd, a->name) < 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(a->dirfd, a->tmp, 0);
	a->tmp[0] = '\0';
	return rc;
}

void fd_atomic_abort(struct fd_atomic *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	if (a->tmp[0])
		unlinkat(a->dirfd, a->tmp, 0);
	a->tmp[0] = '\0';
}

int fd_write_file_atomic(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
	struct fd_atomic a;
	int rc = fd_atomic_open(&a, dirfd, name, mode);

	if (rc < 0)
		return rc;
	rc = fd_write_all(a.fd, data, len);
	if (rc < 0) {
		fd_atomic_abort(&a);
		return rc;
	}
	return fd_atomic_commit(&a);
}

int fd_read_all(int fd, size_t max, char **out, size_t *len)
{
	struct buf b = BUF_INIT(max);
	char chunk[65536];
	ssize_t n;
	int rc = 0;

	*out = NULL;
	*len = 0;
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		rc = n < 0 ? -errno : buf_append(&b, chunk, (size_t)n);
		if (rc < 0) {
			buf_free(&b);
			return rc == -E2BIG ? -EFBIG : rc;
		}
	}
	*len = b.len;
	*out = buf_steal(&b);
	buf_free(&b);
	return *out ? 0 : -ENOMEM;
}

int fd_read_file(int dirfd, const char *path, unsigned int flags, size_t max, char **out, size_t *len)
{
	int oflags = O_RDONLY | O_CLOEXEC, fd, rc = 0;
	struct stat st;

	*out = NULL;
	*len = 0;
	/* O_NONBLOCK: opening a FIFO waits for no writer; a regular file reads as usual. */
	if (flags & FD_READ_REGULAR)
		oflags |= O_NONBLOCK;
	if (flags & FD_READ_NOFOLLOW)
		oflags |= O_NOFOLLOW;
	fd = openat(dirfd, path, oflags);
	if (fd < 0)
		return -errno;
	if (flags & FD_READ_REGULAR) {
		if (fstat(fd, &st) < 0)
			rc = -errno;
		else if (!S_ISREG(st.st_mode))
			rc = -EINVAL;
	}
	if (rc == 0)
		rc = fd_read_all(fd, max, out, len);
	close(fd);
	return rc;
}
