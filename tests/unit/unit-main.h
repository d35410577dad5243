/* SPDX-License-Identifier: MIT */
/* Shared by the unit test programs: run one case with --only NAME (a glob). */
#ifndef NBRUN_UNIT_MAIN_H
#define NBRUN_UNIT_MAIN_H

#include <string.h>

static inline void unit_filter_args(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--only"))
			cmocka_set_test_filter(argv[i + 1]);
		else if (!strcmp(argv[i], "--skip"))
			cmocka_set_skip_filter(argv[i + 1]);
	}
}

#endif
