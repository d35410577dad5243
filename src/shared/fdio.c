/* SPDX-License-Identifier: MIT */
/* Reading and writing file descriptors whole. */
#include <errno.h>
#include <unistd.h>

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
