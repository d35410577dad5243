/* SPDX-License-Identifier: MIT */
/* Paths the user gave. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "path.h"

int path_mkdir_p(const char *path, mode_t mode)
{
	char *copy;
	int rc = 0;

	if (!path || !*path)
		return -EINVAL;
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	for (char *p = copy + 1; *p && rc == 0; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(copy, mode) < 0 && errno != EEXIST)
			rc = -errno;
		*p = '/';
	}
	if (rc == 0 && mkdir(copy, mode) < 0 && errno != EEXIST)
		rc = -errno;
	free(copy);
	return rc;
}
