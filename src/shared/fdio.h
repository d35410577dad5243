/* SPDX-License-Identifier: MIT */
/* Reading and writing file descriptors whole, through EINTR and short counts. */
#ifndef NBRUN_FDIO_H
#define NBRUN_FDIO_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Read fd to its end into *out (malloc'd, NUL-terminated; *len bytes without
 * the NUL), at most max bytes. 0 or -errno: -EFBIG when there is more.
 */
int fd_read_all(int fd, size_t max, char **out, size_t *len);

/* How fd_read_file() opens. */
#define FD_READ_REGULAR 0x1  /* anything but a regular file is -EINVAL (and opening it never blocks) */
#define FD_READ_NOFOLLOW 0x2 /* a symbolic link as the last component is -ELOOP */

/*
 * The file at path (relative to dirfd; AT_FDCWD for the working directory)
 * read whole as fd_read_all() does: at most max bytes into *out (malloc'd,
 * NUL-terminated; *len bytes without the NUL). 0 or -errno: -EFBIG when
 * there is more.
 */
int fd_read_file(int dirfd, const char *path, unsigned int flags, size_t max, char **out, size_t *len);

/* Write all of buf to fd. 0 or -errno. */
int fd_write_all(int fd, const void *buf, size_t len);

/*
 * A file replaced atomically: written to NAME.tmp in the same directory,
 * closed, then renamed over NAME, so that a crash of the writer or a full
 * disk leaves the old file or the new one, never part of one (not flushed
 * to disk: a power cut may lose the newest). name is relative
 * to dirfd (AT_FDCWD for the working directory) and may hold slashes; the
 * temporary file is never a symlink followed, and NAME itself, when a
 * symlink, is replaced, not followed.
 */
struct fd_atomic {
	int dirfd;
	int fd;                 /* write the content here */
	char name[4096];
	char tmp[4096 + 8];
};

/* Open NAME.tmp (a stale one is replaced). The fd, or -errno. */
int fd_atomic_open(struct fd_atomic *a, int dirfd, const char *name, mode_t mode);
/* Close and rename over NAME (no fsync). 0 or -errno; on failure the temporary
 * file is removed and NAME is untouched. */
int fd_atomic_commit(struct fd_atomic *a);
/* Give up: close and remove the temporary file (a no-op after commit). */
void fd_atomic_abort(struct fd_atomic *a);

/* The three above for len bytes of data. 0 or -errno (ENOSPC, EDQUOT, ...). */
int fd_write_file_atomic(int dirfd, const char *name, const void *data, size_t len, mode_t mode);

#endif
