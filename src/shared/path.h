/* SPDX-License-Identifier: MIT */
/* Paths the user gave (trusted: symlinks in them are the user's choice). */
#ifndef NBRUN_PATH_H
#define NBRUN_PATH_H

#include <sys/types.h>

/* mkdir -p: create path and its missing parents. 0 or -errno. */
int path_mkdir_p(const char *path, mode_t mode);

#endif
