/* SPDX-License-Identifier: MIT */
/* Reading and writing file descriptors whole, through EINTR and short counts. */
#ifndef NBRUN_FDIO_H
#define NBRUN_FDIO_H

#include <stddef.h>

/* Write all of buf to fd. 0 or -errno. */
int fd_write_all(int fd, const void *buf, size_t len);

#endif
