/* SPDX-License-Identifier: MIT */
/* nbrun: command table and dispatch. */
#include <stdarg.h>
#include <stdio.h>
#include <getopt.h>
#include <string.h>

#include "cli.h"

static const struct cli_cmd commands[] = {
	{ "run", cmd_run, "Run Python code in a fresh locked-down container" },
	{ "parse", cmd_parse, "Read an executed notebook into a result (no engine needed)" },
	{ "batch", cmd_batch, "Run many notebooks in parallel, with parameters, and report" },
	{ "serve", cmd_serve, "Answer an HTTP API that runs code, with bearer-token auth" },
	{ "session", cmd_session, "A prompt over a sandbox whose kernel keeps its state" },
	{ "mcp", cmd_mcp, "Serve the Model Context Protocol on stdio (tools for LLM agents)" },
	{ "gc", cmd_gc, "Remove containers and volumes left by killed runs" },
};

static void usage(FILE *fp)
{
	size_t i;

	fprintf(fp, "Usage: nbrun COMMAND [OPTIONS]\n\n"
		    "Run untrusted Python in a Jupyter sandbox and collect text, results,\n"
		    "errors, images and files.\n\nCommands:\n");
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(fp, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(fp, "\nOptions:\n"
		    "  -h, --help     this text; 'nbrun COMMAND --help' for a command\n"
		    "  -V, --version  print the version\n\n"
		    "Exit codes:\n"
		    "  0  ran, and no cell raised\n"
		    "  1  a cell raised an exception\n"
		    "  2  usage error; nothing was started\n"
		    "  3  timeout or out of memory\n"
		    "  4  engine or image problem (the message says how to fix it)\n"
		    "  5  any other failure\n"
		    "130  interrupted (SIGINT); containers removed\n");
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2)
		return cli_usage_error(NULL, "no command given");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return CLI_EXIT_OK;
	}
	if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
		printf("nbrun %s\n", nbrun_version());
		return CLI_EXIT_OK;
	}
	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
}
