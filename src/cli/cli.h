/* SPDX-License-Identifier: MIT */
/* Shared pieces of the nbrun command line. */
#ifndef NBRUN_CLI_H
#define NBRUN_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#include <jansson.h>

#include "nbrun.h"
#include "units.h"

/*
 * Exit codes, the one place they are defined (nbrun --help prints them):
 *   0  ran, and no cell raised
 *   1  a cell raised an exception
 *   2  usage error (bad option or argument); nothing was started
 *   3  timeout or out of memory
 *   4  engine or image problem (the message says how to fix it)
 *   5  any other failure (unreadable notebook, local I/O, a run that broke)
 * 130  interrupted (SIGINT): containers removed, a batch's report still written
 */
enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_RAISED = 1,
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_LIMIT = 3,
	CLI_EXIT_ENGINE = 4,
	CLI_EXIT_FAILED = 5,
	CLI_EXIT_INTERRUPTED = 130,
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

/* The usage error for getopt's '?' (unknown option, missing value). */
int cli_bad_option(const char *cmd, char **argv);

/*
 * Options shared by run and batch: limits, image, network, files, env.
 * CLI_RUN_LONGOPTS goes into a struct option table; cli_run_option()
 * handles one of them. Returns 0 when handled, 1 when opt is not one of
 * them, CLI_EXIT_USAGE (message printed) when its argument is bad.
 */
enum {
	CLI_OPT_TIMEOUT = 256, CLI_OPT_CELL_TIMEOUT, CLI_OPT_MEMORY, CLI_OPT_CPUS, CLI_OPT_PIDS,
	CLI_OPT_DISK, CLI_OPT_NETWORK, CLI_OPT_IMAGE, CLI_OPT_MAX_OUTPUT, CLI_OPT_JSON,
	CLI_OPT_ALLOW_ERRORS, CLI_OPT_RUNTIME, CLI_OPT_ALLOW_NET, CLI_OPT_NET_BYTES, CLI_OPT_CA_CERTS,
	CLI_OPT_FIRST_LOCAL = 300,
};
#define CLI_RUN_LONGOPTS                                                      \
	{ "file", required_argument, NULL, 'f' },                             \
	{ "env", required_argument, NULL, 'e' },                              \
	{ "timeout", required_argument, NULL, CLI_OPT_TIMEOUT },              \
	{ "cell-timeout", required_argument, NULL, CLI_OPT_CELL_TIMEOUT },    \
	{ "memory", required_argument, NULL, CLI_OPT_MEMORY },                \
	{ "cpus", required_argument, NULL, CLI_OPT_CPUS },                    \
	{ "pids", required_argument, NULL, CLI_OPT_PIDS },                    \
	{ "disk", required_argument, NULL, CLI_OPT_DISK },                    \
	{ "network", required_argument, NULL, CLI_OPT_NETWORK },              \
	{ "image", required_argument, NULL, CLI_OPT_IMAGE },                  \
	{ "runtime", required_argument, NULL, CLI_OPT_RUNTIME },              \
	{ "max-output", required_argument, NULL, CLI_OPT_MAX_OUTPUT },        \
	{ "allow-errors", no_argument, NULL, CLI_OPT_ALLOW_ERRORS },          \
	{ "allow-net", required_argument, NULL, CLI_OPT_ALLOW_NET },          \
	{ "net-bytes", required_argument, NULL, CLI_OPT_NET_BYTES },          \
	{ "ca-certs", required_argument, NULL, CLI_OPT_CA_CERTS }
/* What run and batch share besides the run options: -o, --json, -q, -h. */
#define CLI_OUTPUT_LONGOPTS                                                   \
	{ "out", required_argument, NULL, 'o' },                              \
	{ "json", no_argument, NULL, CLI_OPT_JSON },                          \
	{ "quiet", no_argument, NULL, 'q' },                                  \
	{ "help", no_argument, NULL, 'h' }
/* Help text for CLI_RUN_LONGOPTS. */
extern const char cli_run_options_help[];

struct cli_run_args {
	struct nbrun_run_options opts;
	const char **files; /* sized for argc */
	size_t nfiles;
	const char **env;
	size_t nenv;
	const char **allow_net; /* --allow-net, in the order given */
	size_t nallow_net;
};
int cli_run_args_init(struct cli_run_args *a, int argc);
void cli_run_args_free(struct cli_run_args *a);
int cli_run_option(struct cli_run_args *a, int opt, const char *arg, const char *cmd);
/* The option (a CLI_OPT_*) when it is a limit the server sets: refused with --server. */
const char *cli_server_sets(int opt);
/* After parsing: cross-checks; wires files/env into opts. 0 or CLI_EXIT_USAGE. */
int cli_run_args_finish(struct cli_run_args *a, const char *cmd);

/*
 * Open an input file without blocking: only a regular file is read (a FIFO
 * without a writer would hang, a device or a directory is no notebook). The
 * fd, or -1 after a usage error saying what path is.
 */
int cli_open_input(const char *path, const char *cmd);

/*
 * Code read from a file or standard input (name): 0, or a usage error
 * naming the line and byte of its first NUL byte (CLI_EXIT_USAGE).
 */
int cli_check_source(const char *text, size_t len, const char *name, const char *cmd);

/* Exit code for a finished result / a library error. */
int cli_exit_for_status(enum nbrun_status st);
int cli_exit_for_error(int err);

/*
 * Untrusted text for a person: C0 (but newline and tab when newlines), DEL
 * and C1 controls as '?', bidi overrides and other format characters as
 * \uXXXX, so that a name cannot rewrite or reorder what a terminal shows.
 */
void cli_put_safe(FILE *fp, const char *s, bool newlines);

/* "nbrun: warning: the host disk is full..." when a result document (NULL
 * is fine) skipped entries for want of disk space on the host. */
void cli_warn_disk_full(const json_t *doc, const char *where);

/* Human output of a result (stdout/stderr of the code, value, error, images, files). */
void cli_print_result(FILE *fp, const struct nbrun_result *r, bool color);
/* The same from a result document (a server's reply). */
void cli_print_doc(FILE *fp, const json_t *doc, bool color);
/*
 * The end of run and parse: rc < 0 prints the context's message; else the
 * result, human or --json. Returns the exit code.
 */
int cli_report(int rc, const struct nbrun_ctx *ctx, const struct nbrun_result *res, bool json);
/* The --json document on stdout. */
int cli_print_json(const struct nbrun_result *r);
/* Print a live event (nbrun_event_cb) as a terminal shows output: stream text as it comes. */
void cli_stream_event(const char *json, size_t len, void *payload);

int cmd_run(int argc, char **argv);
int cmd_parse(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_mcp(int argc, char **argv);
int cmd_session(int argc, char **argv);

/*
 * nbrun run --server: send one run to an nbrun serve and handle its reply
 * as a local run would (print, write -o DIR, exit code). remote.c.
 */
struct cli_remote {
	const char *server;     /* http://HOST:PORT[/prefix] or unix:/path/to/sock */
	const char *token_file; /* NULL: NBRUN_TOKEN, NBRUN_TOKEN_FILE, then the default state dir's */
	const char *code;       /* or */
	const char *notebook;   /* .ipynb text */
	size_t notebook_len;
	const char *const *files;
	size_t file_count;
	const char *const *env;
	size_t env_count;
	uint64_t timeout_ms;    /* 0: the server's */
	const char *language;   /* canonical; NULL: the server's default (Python, or the notebook's) */
	const char *const *allow_net; /* --allow-net: within the server's own list, or refused */
	size_t allow_net_count;
	const char *out_dir;    /* NULL: ./nbrun-out/<run-id> */
	bool json;
	const volatile sig_atomic_t *cancel;
};
int cli_remote_run(const struct cli_remote *r);

/*
 * What nbrun session does to its session: a local one (cmd-session.c) or
 * one kept by an nbrun serve (remote-session.c). Each returns -1 or NULL on
 * failure, with the message from errmsg().
 */
struct cli_session_ops {
	const char *(*id)(void *s);
	/* The result document; the execution's outputs and result.json written below dir. */
	json_t *(*execute)(void *s, const char *code, const char *dir);
	/* From another thread, while execute runs: false when nothing was interrupted. */
	bool (*interrupt)(void *s);
	int (*restart)(void *s);
	json_t *(*files)(void *s, int *truncated);
	/* fd is open for reading and writing, empty. */
	int (*get)(void *s, const char *name, int fd);
	int (*put)(void *s, const char *name, const char *data, size_t len);
	char *(*notebook)(void *s);
	const char *(*errmsg)(void *s);
	bool (*kernel_dead)(void *s);
	void (*close)(void *s);
};
extern const struct cli_session_ops cli_remote_session_ops;
extern const struct cli_session_ops cli_local_session_ops;
/* A session on a->server opened with a's files and env: 0 or an exit code (message printed). */
int cli_remote_session_open(void **s, const struct cli_remote *a);

#endif
