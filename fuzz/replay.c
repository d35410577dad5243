/* SPDX-License-Identifier: MIT */
/*
 * Plain driver for the fuzz targets: replays every file of the corpus
 * directories (or files) given as arguments through LLVMFuzzerTestOneInput,
 * so that `meson test` keeps the corpus and the crash reproducers passing
 * without clang or libFuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz-util.h"

/* Inputs larger than this are not corpus material. */
#define REPLAY_MAX (64u << 20)

static int replay_file(const char *path, size_t *count)
{
	struct stat st;
	uint8_t *data;
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > REPLAY_MAX) {
		rc = 0;
		goto out;
	}
	data = malloc((size_t)st.st_size + 1);
	if (!data)
		goto out;
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, data + len, (size_t)st.st_size - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	LLVMFuzzerTestOneInput(data, len);
	free(data);
	(*count)++;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	size_t count = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (S_ISDIR(st.st_mode)) {
			struct dirent **names;
			int n = scandir(argv[i], &names, NULL, alphasort);
			if (n < 0) {
				fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
				return 1;
			}
			int failed = 0;
			for (int k = 0; k < n; k++) {
				char path[4096];
				if (!failed && names[k]->d_name[0] != '.') {
					snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
					failed = replay_file(path, &count) < 0;
				}
				free(names[k]);
			}
			free(names);
			if (failed)
				return 1;
		} else if (replay_file(argv[i], &count) < 0) {
			return 1;
		}
	}
	if (count == 0) {
		fprintf(stderr, "replay: no input found\n");
		return 1;
	}
	printf("replayed %zu inputs, no crash\n", count);
	return 0;
}
