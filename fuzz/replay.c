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

#include "fdio.h"
#include "fuzz-util.h"

/* Inputs larger than this are not corpus material. */
#define REPLAY_MAX (64u << 20)

static int replay_file(const char *path, size_t *count)
{
	char *data;
	size_t len;
	int rc = fd_read_file(AT_FDCWD, path, FD_READ_REGULAR, REPLAY_MAX, &data, &len);

	if (rc == -EINVAL || rc == -EFBIG)
		return 0; /* not a regular file, or too large: no corpus material */
	if (rc < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(-rc));
		return -1;
	}
	LLVMFuzzerTestOneInput((const uint8_t *)data, len);
	free(data);
	(*count)++;
	return 0;
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
