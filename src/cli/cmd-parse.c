/* SPDX-License-Identifier: MIT */
/* nbrun parse: an executed notebook in, a result out, no engine needed. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void parse_help(void)
{
	printf("Usage: nbrun parse [OPTIONS] NOTEBOOK.ipynb\n"
	       "\n"
	       "Read an executed notebook (nbformat 4) and print what its cells produced:\n"
	       "stdout, stderr, results, the first error with its traceback, and images,\n"
	       "which are decoded into the output directory. The notebook is untrusted\n"
	       "input: text is bounded and stripped of terminal escapes, images are\n"
	       "validated and capped.\n"
	       "\n"
	       "Options:\n"
	       "  -o, --out DIR             output directory for result.json and images/\n"
	       "                            (default ./nbrun-out/<notebook name without .ipynb>);\n"
	       "                            created when missing, images of the same names replaced\n"
	       "  --max-output BYTES        text kept per stream for a model, head and tail (default 20000)\n"
	       "  --max-image-bytes SIZE    decoded size of one image (default 50M)\n"
	       "  --max-notebook-bytes SIZE size of the notebook (default 256M)\n"
	       "  --json                    print the result document (schemas/result.schema.json)\n"
	       "  -h, --help                this text\n"
	       "\n"
	       "Exit codes: 0 no cell raised, 1 a cell raised, 2 usage,\n"
	       "5 unreadable, malformed or too large notebook, or local I/O failure.\n");
}

/* ./nbrun-out/<basename without .ipynb>; the name is the user's own argument. */
static int default_out_dir(char *dst, size_t dstsz, const char *notebook)
{
	const char *base = strrchr(notebook, '/');
	size_t len;
	int n;

	base = base ? base + 1 : notebook;
	len = strlen(base);
	if (len > 6 && !strcmp(base + len - 6, ".ipynb"))
		len -= 6;
	if (len == 0 || (len == 1 && base[0] == '.') || (len == 2 && !strncmp(base, "..", 2))) {
		base = "notebook";
		len = strlen(base);
	}
	n = snprintf(dst, dstsz, "nbrun-out/%.*s", (int)len, base);
	return n < 0 || (size_t)n >= dstsz ? -1 : 0;
}

int cmd_parse(int argc, char **argv)
{
	enum { OPT_MAX_OUTPUT = 256, OPT_MAX_IMAGE, OPT_MAX_NOTEBOOK, OPT_JSON };
	static const struct option longopts[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "max-output", required_argument, NULL, OPT_MAX_OUTPUT },
		{ "max-image-bytes", required_argument, NULL, OPT_MAX_IMAGE },
		{ "max-notebook-bytes", required_argument, NULL, OPT_MAX_NOTEBOOK },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct nbrun_parse_options opts = NBRUN_PARSE_OPTIONS_INIT;
	struct nbrun_result *res = NULL;
	struct nbrun_ctx *ctx = NULL;
	char out_dir[PATH_MAX];
	const char *out = NULL;
	bool json = false;
	uint64_t v;
	int c, rc, ret = CLI_EXIT_FAILED;

	optind = 1;
	opterr = 0; /* one diagnostic, in house format, below */
	opterr = 0; /* messages in nbrun's own format below */
	while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (!*optarg)
				return cli_usage_error("parse", "--out: empty directory name");
			out = optarg;
			break;
		case OPT_MAX_OUTPUT:
			/* Beyond SIZE_MAX/2 the head+tail split makes no sense; keep it sane. */
			if (units_parse_size(&v, optarg) < 0 || v > (1ULL << 30))
				return cli_usage_error("parse", "--max-output: '%s' is not a size between 1 and 1G",
						       optarg);
			opts.limits.max_output = (size_t)v;
			break;
		case OPT_MAX_IMAGE:
			if (units_parse_size(&v, optarg) < 0)
				return cli_usage_error("parse", "--max-image-bytes: '%s' is not a positive size",
						       optarg);
			opts.limits.max_image_bytes = v;
			break;
		case OPT_MAX_NOTEBOOK:
			if (units_parse_size(&v, optarg) < 0)
				return cli_usage_error("parse", "--max-notebook-bytes: '%s' is not a positive size",
						       optarg);
			opts.limits.max_notebook_bytes = v;
			break;
		case OPT_JSON:
			json = true;
			break;
		case 'h':
			parse_help();
			return CLI_EXIT_OK;
		case ':':
			return cli_usage_error("parse", "option '%s' needs an argument", argv[optind - 1]);
		default:
			if (optopt)
				return cli_usage_error("parse", "unknown option '-%c'", optopt);
			return cli_usage_error("parse", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return cli_usage_error("parse", "no notebook given");
	if (argc - optind > 1)
		return cli_usage_error("parse", "one notebook at a time ('%s' is extra)", argv[optind + 1]);
	if (!out) {
		if (default_out_dir(out_dir, sizeof(out_dir), argv[optind]) < 0)
			return cli_usage_error("parse", "notebook name too long for the default --out");
		out = out_dir;
	}
	opts.out_dir = out;

	if (nbrun_ctx_new(&ctx) < 0) {
		cli_error("out of memory");
		goto out;
	}
	rc = nbrun_parse_file(&res, ctx, argv[optind], &opts);
	ret = cli_report(rc, ctx, res, json);
out:
	nbrun_result_free(res);
	nbrun_ctx_free(ctx);
	return ret;
}
