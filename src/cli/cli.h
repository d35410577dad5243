/* SPDX-License-Identifier: MIT */
/* Shared pieces of the nbrun command line. */
#ifndef NBRUN_CLI_H
#define NBRUN_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "nbrun.h"

/*
 * Exit codes, the one place they are defined (nbrun --help prints them):
 *   0  ran, and no cell raised
 *   1  a cell raised an exception
 *   2  usage error (bad option or argument); nothing was started
 *   3  timeout or out of memory
 *   4  engine or image problem (the message says how to fix it)
 *   5  any other failure (unreadable notebook, local I/O, a run that broke)
 */
enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_RAISED = 1,
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_LIMIT = 3,
	CLI_EXIT_ENGINE = 4,
	CLI_EXIT_FAILED = 5,
};

struct cli_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

/* "nbrun: error: ..." on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Usage error: message, then "Try 'nbrun CMD --help'." Returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "512M", "1G", "1024" (bytes), "1.5GiB". Must be > 0. 0 or -1 on error. */
int cli_parse_size(uint64_t *out, const char *s);
/* "60", "60s", "500ms", "2m", "1.5h". Must be > 0. Result in ms. */
int cli_parse_duration(uint64_t *out, const char *s);
/* Positive number, possibly fractional ("1.5"), in units of 1e-9. */
int cli_parse_cpus(uint64_t *out, const char *s);
int cli_parse_count(int64_t *out, const char *s);

/* Exit code for a finished result / a library error. */
int cli_exit_for_status(enum nbrun_status st);
int cli_exit_for_error(int err);

/* Human output of a result (stdout/stderr of the code, value, error, images, files). */
void cli_print_result(FILE *fp, const struct nbrun_result *r, bool color);
/* The --json document on stdout. */
int cli_print_json(const struct nbrun_result *r);

int cmd_run(int argc, char **argv);
int cmd_parse(int argc, char **argv);
int cmd_gc(int argc, char **argv);

#endif
