/* SPDX-License-Identifier: MIT */
/* Scratch directory and invariant checks for the fuzz targets. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz-util.h"

static char scratch[64];
static int scratch_fd = -1;

void fuzz_limits(struct nbrun__limits *lim)
{
	/* Images up to 1 MiB so that inputs span several 64 KiB decode chunks. */
	struct nbrun_parse_limits in = { 256, 16, 4, 1 << 20, 8 << 20 };

	nbrun__limits_resolve(lim, &in);
}

/* Remove every entry below dirfd (one level of subdirectories is all a parse creates). */
static void empty_dir(int dirfd, int depth)
{
	DIR *d;
	struct dirent *de;
	int fd = dup(dirfd);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd, de->d_name, 0) == 0)
			continue;
		if (depth < 2) {
			int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			if (sub >= 0) {
				empty_dir(sub, depth + 1);
				close(sub);
			}
		}
		unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

static void scratch_remove(void)
{
	if (scratch_fd >= 0) {
		empty_dir(scratch_fd, 0);
		close(scratch_fd);
		rmdir(scratch);
	}
}

int fuzz_outdir(void)
{
	if (scratch_fd >= 0)
		return scratch_fd;
	snprintf(scratch, sizeof(scratch), "/tmp/nbrun-fuzz-XXXXXX");
	if (!mkdtemp(scratch))
		abort();
	scratch_fd = open(scratch, O_RDONLY | O_DIRECTORY);
	if (scratch_fd < 0)
		abort();
	atexit(scratch_remove);
	return scratch_fd;
}

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz invariant broken: %s\n", what);
		abort();
	}
}

void fuzz_check_and_clean(const struct nbrun_result *r, const struct nbrun__limits *lim, int dirfd)
{
	const json_t *doc = r->doc, *e;
	/* head+tail plus the cut note, and U+FFFD may triple a byte at most */
	size_t max_text = 3 * (lim->max_output + 64);
	char *dump;
	size_t i, files = 0;
	int imgfd;

	dump = json_dumps(doc, JSON_COMPACT);
	check(dump != NULL, "result serialises");
	free(dump);
	check(json_string_length(json_object_get(doc, "stdout")) <= max_text, "stdout bounded");
	check(json_string_length(json_object_get(doc, "stderr")) <= max_text, "stderr bounded");
	check(json_array_size(json_object_get(doc, "outputs")) <= lim->max_outputs, "outputs capped");
	check(json_array_size(json_object_get(doc, "results")) <= lim->max_outputs, "results capped");
	check(json_array_size(json_object_get(doc, "images")) <= lim->max_images, "images capped");
	json_array_foreach(json_object_get(doc, "outputs"), i, e) {
		const char *type = json_string_value(json_object_get(e, "type"));
		check(type != NULL, "output has a type");
		check(json_is_integer(json_object_get(e, "cell")), "output has a cell");
		if (!strcmp(type, "stream"))
			check(json_string_length(json_object_get(e, "text")) <= max_text, "stream bounded");
	}
	json_array_foreach(json_object_get(doc, "images"), i, e) {
		const char *path = json_string_value(json_object_get(e, "path"));
		struct stat st;
		check(path && !strncmp(path, "images/cell", 11), "image path");
		check(!nbrun__path_reject_reason(path), "image path is safe");
		check(fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode),
		      "image file exists");
		check((json_int_t)st.st_size == json_integer_value(json_object_get(e, "bytes")),
		      "image size as listed");
		check((uint64_t)st.st_size <= lim->max_image_bytes, "image within the cap");
	}
	/* Nothing but images/ may appear, and in it only the listed files. */
	imgfd = openat(dirfd, "images", O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
	if (imgfd >= 0) {
		DIR *d = fdopendir(imgfd);
		struct dirent *de;
		check(d != NULL, "images/ readable");
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				files++;
		closedir(d);
		check(files == json_array_size(json_object_get(doc, "images")), "only listed images on disk");
	} else {
		check(json_array_size(json_object_get(doc, "images")) == 0, "images without images/");
	}
	{
		struct dirent *de;
		int fd = dup(dirfd);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		check(d != NULL, "scratch readable");
		rewinddir(d);
		while ((de = readdir(d)))
			check(!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
				      !strcmp(de->d_name, "images"),
			      "nothing else in the output directory");
		closedir(d);
	}
	empty_dir(dirfd, 0);
}
