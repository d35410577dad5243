/* SPDX-License-Identifier: MIT */
/* nbrun run: code in, results out, through a locked-down container. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "cli.h"
#include "fdio.h"

#define CODE_MAX (64u << 20)

static volatile sig_atomic_t run_interrupted;

static void run_on_signal(int sig)
{
	run_interrupted = 1;
}

static void run_help(void)
{
	printf("Usage: nbrun run [OPTIONS] (-c CODE | FILE | FILE.ipynb | -)\n"
	       "\n"
	       "Run code in a fresh, locked-down jupyter-runtime container and print what it\n"
	       "produced: stdout, stderr, results, errors with tracebacks, images and files.\n"
	       "'# %%%%' lines ('// %%%%' in JavaScript and TypeScript) split code into cells;\n"
	       "an error in one cell keeps the outputs of the cells before it. A .ipynb is run\n"
	       "as it is, in the language of its kernelspec.\n"
	       "\n"
	       "  -c, --code CODE       the code to run\n"
	       "  --stream              print stdout and stderr as the code writes them (then\n"
	       "                        the rest of the result: values, error, images, files)\n"
	       "  -l, --language LANG   %s (default: from the\n"
	       "                        file's extension, .py .R .js .ts .sh; else python)\n"
	       "Remote (an 'nbrun serve' runs it; same output, files and exit codes):\n"
	       "  --server URL          http://HOST:PORT or unix:/path/to/socket (or NBRUN_SERVER);\n"
	       "                        -f (files only), -e and --timeout are sent, the other\n"
	       "                        limits are the server's\n"
	       "  --token-file FILE     bearer token (else NBRUN_TOKEN, NBRUN_TOKEN_FILE, then\n"
	       "                        the token file of a server on this machine)\n"
	       "%s"
	       "Output:\n"
	       "  -o, --out DIR         output directory (default ./nbrun-out/<run-id>); it receives\n"
	       "                        notebook.ipynb, result.json, images/ and files/\n"
	       "  --json                print the result document (schemas/result.schema.json)\n"
	       "  -q, --quiet           no progress on a terminal\n"
	       "  -h, --help            this text\n"
	       "\n"
	       "Exit codes: 0 ok, 1 a cell raised, 2 usage, 3 timeout or out of memory,\n"
	       "4 engine or image problem, 5 other failure, 130 interrupted.\n",
	       nbrun_language_names(), cli_run_options_help);
}

static const char *phase_name(enum nbrun_phase p)
{
	static const char *const names[] = { "connecting", "creating sandbox", "uploading",
					      "executing", "downloading", "parsing", "cleaning up" };
	return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "";
}

static void run_progress(enum nbrun_phase phase, void *payload)
{
	fprintf(stderr, "\r\033[Knbrun: %s...", phase_name(phase));
	if (phase == NBRUN_PHASE_CLEANUP)
		fputs("\r\033[K", stderr);
}

static int read_all(char **out, size_t *len, const char *path)
{
	int fd = strcmp(path, "-") ? cli_open_input(path, "run") : 0, rc;

	*out = NULL;
	if (fd < 0)
		return -2; /* a usage error, said */
	rc = fd_read_all(fd, CODE_MAX, out, len);
	if (fd > 0)
		close(fd);
	if (rc < 0)
		cli_error("cannot read %s: %s", path, rc == -EFBIG ? "larger than 64 MiB" : strerror(-rc));
	return rc < 0 ? -1 : 0;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}

static int run_remote(struct cli_run_args *args, const char *server, const char *token_file,
		      const char *code, const char *input, const char *text, size_t text_len,
		      bool json, bool timeout_set)
{
	struct cli_remote r;
	struct stat st;

	for (size_t i = 0; i < args->nfiles; i++)
		if (stat(args->files[i], &st) < 0 || !S_ISREG(st.st_mode))
			return cli_usage_error("run", "-f %s: with --server only regular files can be sent",
					       args->files[i]);
	memset(&r, 0, sizeof(r));
	r.server = server;
	r.token_file = token_file;
	if (input && ends_with(input, ".ipynb")) {
		r.notebook = text;
		r.notebook_len = text_len;
	} else {
		r.code = code ? code : text;
	}
	r.files = args->files;
	r.file_count = args->nfiles;
	r.env = args->env;
	r.env_count = args->nenv;
	r.allow_net = args->allow_net;
	r.allow_net_count = args->nallow_net;
	r.timeout_ms = timeout_set ? args->opts.timeout_ms : 0;
	r.language = args->opts.language ? nbrun_language_name(args->opts.language) : NULL;
	r.out_dir = args->opts.out_dir;
	r.json = json;
	r.cancel = &run_interrupted;
	return cli_remote_run(&r);
}

/* After --stream: the result less what was already printed as it came. */
static int run_report_streamed(const struct nbrun_result *res)
{
	char *text = NULL;
	json_t *doc = NULL;

	if (nbrun_result_to_json(&text, res, 0) == 0)
		doc = json_loads(text, JSON_ALLOW_NUL, NULL);
	free(text);
	if (doc) {
		json_object_set_new(doc, "stdout", json_string(""));
		json_object_set_new(doc, "stderr", json_string(""));
		cli_print_doc(stdout, doc, isatty(STDOUT_FILENO));
		json_decref(doc);
	}
	return cli_exit_for_status(nbrun_result_status(res));
}

int cmd_run(int argc, char **argv)
{
	enum { OPT_SERVER = CLI_OPT_FIRST_LOCAL, OPT_TOKEN_FILE, OPT_LANGUAGE, OPT_STREAM };
	static const struct option longopts[] = {
		{ "code", required_argument, NULL, 'c' },
		{ "server", required_argument, NULL, OPT_SERVER },
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		{ "language", required_argument, NULL, 'l' },
		{ "stream", no_argument, NULL, OPT_STREAM },
		CLI_OUTPUT_LONGOPTS,
		CLI_RUN_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_run_args args;
	const char *code = NULL, *input = NULL, *server = getenv("NBRUN_SERVER"), *token_file = NULL;
	const char *local_only = NULL, *language = NULL;
	bool timeout_set = false;
	char *text = NULL;
	size_t text_len = 0;
	bool json = false, quiet = false, stream = false;
	struct nbrun_ctx *ctx = NULL;
	struct nbrun_result *res = NULL;
	struct sigaction sa;
	int c, rc, ret = CLI_EXIT_FAILED;

	if (cli_run_args_init(&args, argc) < 0) {
		cli_error("out of memory");
		goto out;
	}
	optind = 1;
	opterr = 0; /* one diagnostic, in house format, below */
	while ((c = getopt_long(argc, argv, "c:l:f:e:o:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': code = optarg; break;
		case 'l': language = optarg; break;
		case OPT_SERVER: server = optarg; break;
		case OPT_TOKEN_FILE: token_file = optarg; break;
		case 'o': args.opts.out_dir = optarg; break;
		case 'q': quiet = true; break;
		case OPT_STREAM: stream = true; break;
		case CLI_OPT_JSON: json = true; break;
		case 'h':
			run_help();
			ret = CLI_EXIT_OK;
			goto out;
		default:
			rc = c == '?' ? 1 : cli_run_option(&args, c, optarg, "run");
			if (rc == 1)
				rc = cli_bad_option("run", argv);
			if (rc) {
				ret = CLI_EXIT_USAGE;
				goto out;
			}
			if (cli_server_sets(c))
				local_only = cli_server_sets(c);
			timeout_set |= c == CLI_OPT_TIMEOUT;
		}
	}
	if (optind < argc)
		input = argv[optind++];
	if (optind < argc) {
		ret = cli_usage_error("run", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (!!code + !!input != 1) {
		ret = cli_usage_error("run", code ? "give either -c or a file, not both"
						  : "no code: give -c CODE, a FILE.py, a FILE.ipynb or - for stdin");
		goto out;
	}
	if (language && !nbrun_language_name(language)) {
		ret = cli_usage_error("run", "unknown language '%s'; languages: %s", language,
				      nbrun_language_names());
		goto out;
	}
	/* A notebook names its own language; a file's extension names one. */
	if (!language && input && !ends_with(input, ".ipynb"))
		language = nbrun_language_for_path(input);
	args.opts.language = language;
	if (server && !*server)
		server = NULL;
	if (server && local_only) {
		ret = cli_usage_error("run", "%s is the server's to set; it cannot be used with --server",
				      local_only);
		goto out;
	}
	if (token_file && !server) {
		ret = cli_usage_error("run", "--token-file goes with --server");
		goto out;
	}
	if (cli_run_args_finish(&args, "run")) {
		ret = CLI_EXIT_USAGE;
		goto out;
	}
	if (input && (rc = read_all(&text, &text_len, input)) < 0) {
		ret = rc == -2 ? CLI_EXIT_USAGE : CLI_EXIT_FAILED;
		goto out;
	}
	/* Python source holds no NUL byte, and a C string would end there: run
	 * all of it or none, never the part before it. */
	if (input && !ends_with(input, ".ipynb") && cli_check_source(text, text_len, input, "run")) {
		ret = CLI_EXIT_USAGE;
		goto out;
	}
	args.opts.cancel = &run_interrupted;
	if (server) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = run_on_signal;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		ret = run_remote(&args, server, token_file, code, input, text, text_len, json, timeout_set);
		goto out;
	}
	if (!quiet && isatty(STDERR_FILENO) && !stream)
		args.opts.progress = run_progress;
	if (stream && !json)
		args.opts.on_event = cli_stream_event;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = run_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	if (nbrun_ctx_new(&ctx) < 0) {
		cli_error("out of memory");
		goto out;
	}
	if (input && ends_with(input, ".ipynb"))
		rc = nbrun_run_notebook(&res, ctx, text, text_len, &args.opts);
	else
		rc = nbrun_run_code(&res, ctx, code ? code : text, &args.opts);
	if (stream && !json && rc == 0)
		ret = run_report_streamed(res);
	else
		ret = cli_report(rc, ctx, res, json);
	/* The egress proxy, when this run needed it and no other run does now. */
	if (args.nallow_net)
		nbrun_egress_release(ctx);
out:
	nbrun_result_free(res);
	nbrun_ctx_free(ctx);
	free(text);
	cli_run_args_free(&args);
	return ret;
}
