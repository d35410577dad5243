/* SPDX-License-Identifier: MIT */
/* nbrun gc: remove what killed runs left behind. */
#include <getopt.h>
#include <string.h>

#include "cli.h"

int cmd_gc(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "older-than", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct nbrun_ctx *ctx = NULL;
	uint64_t age_ms = 0;
	unsigned int removed = 0, failed = 0;
	int c, rc;

	optind = 1;
	opterr = 0; /* one diagnostic, in house format, below */
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'a':
			if (units_parse_duration(&age_ms, optarg) < 0)
				return cli_usage_error("gc", "--older-than: '%s' is not a positive duration", optarg);
			break;
		case 'h':
			printf("Usage: nbrun gc [--older-than DURATION]\n\n"
			       "Remove containers and volumes labelled nbrun.run whose nbrun process on\n"
			       "this host is gone (e.g. killed with SIGKILL). With --older-than, also\n"
			       "every nbrun container and volume created at least that long ago.\n"
			       "Runs do the first part themselves, cheaply, before they start.\n\n"
			       "Prints how many were removed and, when the engine refused or did not\n"
			       "answer some removals, how many could not be removed.\n\n"
			       "Exit codes: 0 done, 2 usage, 4 engine problem or a removal failed.\n");
			return CLI_EXIT_OK;
		default:
			return cli_bad_option("gc", argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("gc", "unexpected argument '%s'", argv[optind]);
	if (nbrun_ctx_new(&ctx) < 0)
		return CLI_EXIT_FAILED;
	rc = nbrun_gc(&removed, &failed, ctx, (unsigned int)((age_ms + 999) / 1000));
	if (rc < 0 && !failed) {
		cli_error("%s", nbrun_ctx_errmsg(ctx));
		nbrun_ctx_free(ctx);
		return cli_exit_for_error(rc);
	}
	printf("removed %u\n", removed);
	if (failed) {
		printf("could not remove %u\n", failed);
		cli_error("%s", nbrun_ctx_errmsg(ctx));
	}
	nbrun_ctx_free(ctx);
	return rc < 0 ? cli_exit_for_error(rc) : CLI_EXIT_OK;
}
