/* SPDX-License-Identifier: MIT */
/* STUB: human and JSON output of a result. */
#include <stdlib.h>

#include "cli.h"

void cli_print_result(FILE *fp, const struct nbrun_result *r, bool color)
{
	fputs(nbrun_result_stdout(r), fp);
}

int cli_print_json(const struct nbrun_result *r)
{
	char *s;
	if (nbrun_result_to_json(&s, r, 1) < 0)
		return -1;
	puts(s);
	free(s);
	return 0;
}
