/* SPDX-License-Identifier: MIT */
/*
 * A run's output directory: made, claimed atomically and required empty, so
 * that a run never mixes with old files or another run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbrun-private.h"
#include "path.h"


/* mkdir -p, then require an empty directory: a run never mixes with old files. */
int nbrun__out_dir_open(struct nbrun_ctx *ctx, const char *want, const char *id, char **out_dir,
			int *out_fd)
{
	char *dir = NULL;
	char cwd[PATH_MAX];
	int fd = -1, rc = 0, claim;
	DIR *d;

	if (want) {
		if (want[0] == '/')
			dir = strdup(want);
		else if (getcwd(cwd, sizeof(cwd)))
			rc = asprintf(&dir, "%s/%s", cwd, want) < 0 ? -1 : 0;
	} else if (getcwd(cwd, sizeof(cwd))) {
		rc = asprintf(&dir, "%s/nbrun-out/%s", cwd, id) < 0 ? -1 : 0;
	}
	if (!dir || rc < 0)
		return nbrun__err(ctx, NBRUN_ENOMEM, "cannot make the output directory name");
	rc = path_mkdir_p(dir, 0755);
	if (rc < 0) {
		rc = nbrun__errno(ctx, NBRUN_EIO, -rc, "cannot create %s", dir);
		goto out;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = nbrun__errno(ctx, NBRUN_EIO, errno, "cannot open %s", dir);
		goto out;
	}
	/* Checking that it is empty is not enough: two runs started together
	 * both see it empty. The claim is atomic; the run that made it checks. */
	claim = openat(fd, NBRUN__OUT_CLAIM, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (claim < 0) {
		rc = errno == EEXIST ? nbrun__err(ctx, NBRUN_EINVAL,
						  "output directory %s is in use by another run", dir)
				     : nbrun__errno(ctx, NBRUN_EIO, errno, "cannot claim %s", dir);
		goto out;
	}
	close(claim);
	d = fdopendir(dup(fd));
	if (d) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
			    strcmp(de->d_name, NBRUN__OUT_CLAIM)) {
				rc = nbrun__err(ctx, NBRUN_EINVAL,
						"output directory %s is not empty", dir);
				break;
			}
		closedir(d);
	}
	if (rc < 0) {
		nbrun__out_dir_release(fd);
		goto out;
	}
	*out_dir = dir;
	*out_fd = fd;
	dir = NULL;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

void nbrun__out_dir_release(int fd)
{
	if (fd >= 0)
		unlinkat(fd, NBRUN__OUT_CLAIM, 0);
}
