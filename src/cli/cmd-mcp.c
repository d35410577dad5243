/* SPDX-License-Identifier: MIT */
/* nbrun mcp: the MCP server over stdio (one JSON-RPC message a line), with a local warm pool. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "cli.h"
#include "mcp.h"
#include "mcp-tools.h"
#include "path.h"
#include "serve.h"

static volatile sig_atomic_t mcp_stopping;

static void mcp_on_signal(int sig)
{
	mcp_stopping = 1;
}

static void mcp_help(void)
{
	printf("Usage: nbrun mcp [OPTIONS]\n"
	       "\n"
	       "Serve the Model Context Protocol on stdin/stdout (one JSON-RPC message a line;\n"
	       "logs on stderr) for an MCP client that starts it: tools run_python, run_code\n"
	       "(the image's other languages) and run_notebook (each call in a fresh locked-down\n"
	       "sandbox, from the warm pool when it keeps the call's language) and\n"
	       "session_open/execute/upload/download/close (a sandbox kept across calls).\n"
	       "The same server answers at /mcp on 'nbrun serve' (Streamable HTTP).\n"
	       "It stops at the end of its input, SIGTERM or SIGINT, cancelling running calls\n"
	       "and removing their containers.\n"
	       "\n"
	       "  --print-tools=FORMAT  print the tools and exit, as tools/list gives them with\n"
	       "                        these options and the standard image (every language): mcp,\n"
	       "                        openai or anthropic tool definitions, or arguments (the\n"
	       "                        JSON Schema of each tool's arguments); schemas/ has them\n"
	       "  --pool N              warm Python sandboxes kept ready (0 to 64, default 1)\n"
	       "  --pool LANG=N         also N of another language (repeatable; 64 in all)\n"
	       "  --max-runs N          calls executing at once (default 4)\n"
	       "  --state-dir DIR       keep runs (their images and files) under DIR/runs (nothing\n"
	       "                        removes them); without it a private temporary directory,\n"
	       "                        removed on exit\n"
	       "  -h, --help            this text\n"
	       "Run limits of every call (a call may lower the timeout, not raise it;\n"
	       "--allow-net is the ceiling of a tool's allow_net argument, offered only then,\n"
	       "and a call without it has no network):\n"
	       "%s"
	       "\n"
	       "Limits: a message above %u MiB is refused (-32600); images inlined up to %u MiB\n"
	       "each and %u MiB in all, files embedded up to %u KiB each and %u MiB in all, the\n"
	       "rest as resource links served by resources/read (up to %u MiB).\n",
	       cli_run_options_help, MCP_MESSAGE_MAX >> 20, MCP_IMAGE_ONE >> 20, MCP_IMAGE_ALL >> 20,
	       MCP_EMBED_ONE >> 10, MCP_EMBED_ALL >> 20, MCP_RESOURCE_MAX >> 20);
}

/* ---- state ------------------------------------------------------------------------------- */

/*
 * The tools as a server with these options and the standard image (every
 * language nbrun runs) lists them; no engine is asked, so the output is the
 * same on any machine (schemas/ holds it).
 */
static int mcp_print_tools(struct serve *s, const char *format)
{
	const char *names = nbrun_language_names();
	char *text = NULL, *w;
	json_t *doc;

	s->languages = strdup(names);
	if (!s->languages) {
		cli_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	/* "python, r, ..." -> "python r ..." */
	for (w = s->languages; *names; names++)
		if (*names != ',')
			*w++ = *names;
	*w = '\0';
	doc = mcp_tools_export(s, format);
	text = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
	json_decref(doc);
	if (!text) {
		cli_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	printf("%s\n", text);
	free(text);
	return fflush(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILED;
}

int cmd_mcp(int argc, char **argv)
{
	enum { OPT_POOL = CLI_OPT_FIRST_LOCAL, OPT_STATE_DIR, OPT_MAX_RUNS, OPT_PRINT_TOOLS };
	static const struct option longopts[] = {
		{ "pool", required_argument, NULL, OPT_POOL },
		{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
		{ "max-runs", required_argument, NULL, OPT_MAX_RUNS },
		{ "print-tools", required_argument, NULL, OPT_PRINT_TOOLS },
		{ "help", no_argument, NULL, 'h' },
		CLI_RUN_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_run_args args;
	struct serve *s;
	struct serve_pool_args pool_args;
	struct sigaction sa;
	const char *state_dir = NULL, *print_tools = NULL;
	int64_t n;
	int c, rc, ret = CLI_EXIT_USAGE;

	serve_pool_args_init(&pool_args, 1);
	if (cli_run_args_init(&args, argc) < 0) {
		cli_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	if (!(s = serve_new(&mcp_stopping))) {
		cli_error("out of memory");
		cli_run_args_free(&args);
		return CLI_EXIT_FAILED;
	}
	s->max_runs = 4;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "f:e:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_STATE_DIR: state_dir = optarg; break;
		case OPT_PRINT_TOOLS:
			if (strcmp(optarg, "mcp") && strcmp(optarg, "openai") &&
			    strcmp(optarg, "anthropic") && strcmp(optarg, "arguments")) {
				cli_usage_error("mcp", "--print-tools: '%s' is not mcp, openai, anthropic or arguments",
						optarg);
				goto out;
			}
			print_tools = optarg;
			break;
		case OPT_POOL:
			if (serve_pool_arg(&pool_args, optarg, "mcp") < 0)
				goto out;
			break;
		case OPT_MAX_RUNS:
			if (units_parse_count(&n, optarg) < 0 || n > 256) {
				cli_usage_error("mcp", "--max-runs: '%s' is not a whole number from 1 to 256", optarg);
				goto out;
			}
			s->max_runs = (unsigned int)n;
			break;
		case 'h':
			mcp_help();
			ret = CLI_EXIT_OK;
			goto out;
		case 'f':
			cli_usage_error("mcp", "-f makes no sense for mcp: each call sends its own files");
			goto out;
		default:
			rc = c == '?' ? 1 : cli_run_option(&args, c, optarg, "mcp");
			if (rc == 1)
				cli_bad_option("mcp", argv);
			if (rc)
				goto out;
		}
	}
	if (optind < argc) {
		cli_usage_error("mcp", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (cli_run_args_finish(&args, "mcp"))
		goto out;
	/* --allow-net is the ceiling of what requests may allow, not a run's own. */
	if (serve_run_options(s, &args.opts, "mcp") < 0)
		goto out;
	ret = CLI_EXIT_FAILED;
	if (print_tools) {
		ret = mcp_print_tools(s, print_tools);
		goto out;
	}
	if (mcp_open_state(s, state_dir) < 0 || serve_languages_init(s, "mcp") < 0)
		goto out;
	if (serve_pool_check(&pool_args, s, "mcp") < 0) {
		ret = CLI_EXIT_USAGE;
		goto out;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = mcp_on_signal; /* no SA_RESTART: the read of stdin returns */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	rc = mcp_stdio_main(s, &pool_args);
	if (rc == SERVE_STUCK) {
		fflush(stderr);
		_exit(CLI_EXIT_FAILED);
	}
	ret = rc < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
out:
	serve_free(s);
	cli_run_args_free(&args);
	return ret;
}
