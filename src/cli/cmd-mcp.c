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
#include "path.h"
#include "serve.h"

/* Requests served at once off the reader (tools/call, resources/read); more wait in line. */
#define MCP_STDIO_WORKERS 16
/* How long the end of input waits for cancelled calls to clean up. */
#define MCP_STDIO_STOP_WAIT_MS 20000

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
	       "Run limits of every call (a call may lower the timeout, not raise it):\n"
	       "%s"
	       "\n"
	       "Limits: a message above %u MiB is refused (-32600); images inlined up to %u MiB\n"
	       "each and %u MiB in all, files embedded up to %u KiB each and %u MiB in all, the\n"
	       "rest as resource links served by resources/read (up to %u MiB).\n",
	       cli_run_options_help, MCP_MESSAGE_MAX >> 20, MCP_IMAGE_ONE >> 20, MCP_IMAGE_ALL >> 20,
	       MCP_EMBED_ONE >> 10, MCP_EMBED_ALL >> 20, MCP_RESOURCE_MAX >> 20);
}

struct mcp_stdio {
	struct mcp_server *m;
	struct mcp_session *sess;
	pthread_mutex_t out_lock; /* one message a line, never interleaved */
	pthread_mutex_t lock;
	pthread_cond_t idle;
	unsigned int workers;
};

struct mcp_worker {
	struct mcp_stdio *io;
	json_t *msg;
};

static void mcp_stdio_write(struct mcp_stdio *io, const char *text)
{
	size_t len = strlen(text), off = 0;

	pthread_mutex_lock(&io->out_lock);
	while (off <= len) {
		/* The message, then its newline, in as few writes as the pipe takes. */
		const char *p = off < len ? text + off : "\n";
		size_t n = off < len ? len - off : 1;
		ssize_t w = write(STDOUT_FILENO, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* the client is gone: the end of input follows */
		off += (size_t)w;
	}
	pthread_mutex_unlock(&io->out_lock);
}

static void mcp_stdio_notify(const char *json, void *payload)
{
	mcp_stdio_write(payload, json);
}

static void mcp_stdio_answer(struct mcp_stdio *io, json_t *msg)
{
	char *out = NULL;

	mcp_handle_json(&out, io->m, io->sess, msg, mcp_stdio_notify, io);
	if (out)
		mcp_stdio_write(io, out);
	free(out);
}

static void *mcp_worker_main(void *p)
{
	struct mcp_worker *w = p;
	struct mcp_stdio *io = w->io;

	mcp_stdio_answer(io, w->msg);
	json_decref(w->msg);
	free(w);
	pthread_mutex_lock(&io->lock);
	io->workers--;
	pthread_cond_broadcast(&io->idle);
	pthread_mutex_unlock(&io->lock);
	return NULL;
}

/* Run a slow request on a thread of its own, so cancellations and pings are read meanwhile. */
static int mcp_stdio_spawn(struct mcp_stdio *io, json_t *msg)
{
	struct mcp_worker *w = malloc(sizeof(*w));
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int rc;

	if (!w)
		return -1;
	w->io = io;
	w->msg = json_incref(msg);
	pthread_mutex_lock(&io->lock);
	while (io->workers >= MCP_STDIO_WORKERS)
		pthread_cond_wait(&io->idle, &io->lock);
	io->workers++;
	pthread_mutex_unlock(&io->lock);
	/* Signals go to the reader, which stops on them. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, mcp_worker_main, w);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		pthread_mutex_lock(&io->lock);
		io->workers--;
		pthread_mutex_unlock(&io->lock);
		json_decref(w->msg);
		free(w);
		return -1;
	}
	return 0;
}

static void mcp_stdio_line(struct mcp_stdio *io, char *line, size_t len)
{
	json_error_t jerr;
	json_t *msg;
	char why[256], *out;

	while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (!len)
		return;
	msg = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
	if (!msg) {
		snprintf(why, sizeof(why), "parse error: %s (column %d)", jerr.text, jerr.column);
		out = mcp_error_text(MCP_PARSE_ERROR, why);
		if (out)
			mcp_stdio_write(io, out);
		free(out);
		return;
	}
	if (!mcp_is_slow(msg) || mcp_stdio_spawn(io, msg) < 0)
		mcp_stdio_answer(io, msg);
	json_decref(msg);
}

/* Read messages until the end of input or a signal. */
static void mcp_stdio_loop(struct mcp_stdio *io)
{
	struct buf line = BUF_INIT(MCP_MESSAGE_MAX);
	char chunk[65536], why[128], *out;
	bool dropping = false;
	ssize_t n;

	while (!mcp_stopping) {
		n = read(STDIN_FILENO, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (char *p = chunk, *end = chunk + n; p < end;) {
			char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t k = (size_t)((nl ? nl : end) - p);

			if (!dropping && buf_append(&line, p, k) < 0) {
				dropping = true; /* over the cap: skip to the end of the line */
				buf_free(&line);
				buf_init(&line, MCP_MESSAGE_MAX);
			}
			p += k;
			if (!nl)
				break;
			p++;
			if (dropping) {
				snprintf(why, sizeof(why), "message larger than %u MiB", MCP_MESSAGE_MAX >> 20);
				out = mcp_error_text(MCP_INVALID_REQUEST, why);
				if (out)
					mcp_stdio_write(io, out);
				free(out);
				dropping = false;
			} else if (line.len) {
				mcp_stdio_line(io, line.data, line.len);
			}
			buf_reset(&line);
		}
	}
	if (!mcp_stopping && !dropping && line.len)
		mcp_stdio_line(io, line.data, line.len); /* a last message without its newline */
	buf_free(&line);
}

/* ---- state ------------------------------------------------------------------------------- */

static int mcp_open_state(struct serve *s, const char *dir, bool *temp)
{
	const char *tmpdir = getenv("TMPDIR");
	char *tmp = NULL;
	int rc = -1;

	*temp = !dir;
	if (!dir) {
		if (asprintf(&s->state_dir, "%s/nbrun-mcp-XXXXXX", tmpdir && *tmpdir == '/' ? tmpdir : "/tmp") < 0 ||
		    !mkdtemp(s->state_dir)) {
			cli_error("cannot make a temporary directory: %s", strerror(errno));
			*temp = false;
			goto out;
		}
	} else if (!(s->state_dir = realpath(dir, NULL)) && (path_mkdir_p(dir, 0700) < 0 ||
							     !(s->state_dir = realpath(dir, NULL)))) {
		cli_error("cannot use the state directory %s: %s", dir, strerror(errno));
		goto out;
	}
	if (asprintf(&s->runs_dir, "%s/runs", s->state_dir) < 0 ||
	    asprintf(&tmp, "%s/tmp", s->state_dir) < 0) {
		s->runs_dir = tmp = NULL;
		cli_error("out of memory");
		goto out;
	}
	if (path_mkdir_p(s->runs_dir, 0700) < 0 || path_mkdir_p(tmp, 0700) < 0 ||
	    (s->runs_fd = open(s->runs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		cli_error("cannot make %s: %s", s->runs_dir, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(tmp);
	return rc;
}

static void mcp_remove_state(struct serve *s)
{
	char *slash = s->state_dir ? strrchr(s->state_dir, '/') : NULL;
	int fd;

	if (!slash)
		return;
	*slash = '\0';
	fd = open(*s->state_dir ? s->state_dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		serve_rm_tree(fd, slash + 1);
		close(fd);
	}
	*slash = '/';
}

static void mcp_start_pool(struct serve *s, const struct serve_pool_args *pa)
{
	struct nbrun_pool_options po = NBRUN_POOL_OPTIONS_INIT;
	struct nbrun_run_options ro = s->opts;
	struct nbrun_ctx *ctx = NULL;

	if (nbrun_ctx_new(&ctx) < 0)
		return;
	ro.env = NULL;
	ro.env_count = 0;
	serve_pool_options(&po, pa, &ro);
	/* Without a pool every call starts cold, and says why it cannot when the engine is down. */
	if (nbrun_pool_new(&s->pool, ctx, &po) < 0)
		fprintf(stderr, "nbrun: mcp: no warm pool (%s); calls start their own sandbox\n",
			nbrun_ctx_errmsg(ctx));
	nbrun_ctx_free(ctx);
}

static void mcp_wait_idle(struct mcp_stdio *io, uint64_t ms)
{
	uint64_t until = clock_mono_ms() + ms;

	pthread_mutex_lock(&io->lock);
	while (io->workers && clock_mono_ms() < until) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&io->idle, &io->lock, &ts);
	}
	pthread_mutex_unlock(&io->lock);
}

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
	struct mcp_stdio io;
	struct cli_run_args args;
	struct serve s;
	struct serve_pool_args pool_args;
	struct sigaction sa;
	const char *state_dir = NULL, *print_tools = NULL;
	sigset_t sigs, old;
	bool temp = false;
	int64_t n;
	int c, rc, ret = CLI_EXIT_USAGE;

	memset(&s, 0, sizeof(s));
	memset(&io, 0, sizeof(io));
	s.runs_fd = -1;
	s.stopping = &mcp_stopping;
	s.max_runs = 4;
	serve_pool_args_init(&pool_args, 1);
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.idle, NULL);
	pthread_mutex_init(&io.lock, NULL);
	pthread_mutex_init(&io.out_lock, NULL);
	pthread_cond_init(&io.idle, NULL);
	if (cli_run_args_init(&args, argc) < 0) {
		cli_error("out of memory");
		ret = CLI_EXIT_FAILED;
		goto out;
	}
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
			s.max_runs = (unsigned int)n;
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
	s.opts = args.opts;
	s.opts.files = NULL;
	s.opts.file_count = 0;
	ret = CLI_EXIT_FAILED;
	if (print_tools) {
		ret = mcp_print_tools(&s, print_tools);
		goto out;
	}
	if (mcp_open_state(&s, state_dir, &temp) < 0 || serve_languages_init(&s, "mcp") < 0)
		goto out;
	if (serve_pool_check(&pool_args, &s, "mcp") < 0) {
		ret = CLI_EXIT_USAGE;
		goto out;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = mcp_on_signal; /* no SA_RESTART: the read of stdin returns */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	/* The pool's threads leave the signals to this one. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, &old);
	if (s.pool_size)
		mcp_start_pool(&s, &pool_args);
	io.m = mcp_server_new(&s);
	io.sess = io.m ? mcp_session_new(io.m) : NULL;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!io.sess) {
		cli_error("out of memory");
		goto out;
	}
	fprintf(stderr, "nbrun: mcp: serving on stdio; runs in %s; pool of %u warm sandboxes; "
		"languages: %s\n", s.runs_dir, s.pool ? s.pool_size : 0, s.languages);
	mcp_stdio_loop(&io);
	/* The client is gone or we were told to stop: running calls are cancelled. */
	mcp_stopping = 1;
	mcp_server_cancel_all(io.m);
	mcp_wait_idle(&io, MCP_STDIO_STOP_WAIT_MS);
	if (io.workers) {
		cli_error("%u calls did not stop within %d s; exiting without them (nbrun gc removes "
			  "what they leave)", io.workers, MCP_STDIO_STOP_WAIT_MS / 1000);
		fflush(stderr);
		_exit(CLI_EXIT_FAILED);
	}
	ret = CLI_EXIT_OK;
out:
	if (io.sess)
		mcp_session_unref(io.m, io.sess);
	mcp_server_free(io.m);
	nbrun_pool_free(s.pool);
	if (s.runs_fd >= 0)
		close(s.runs_fd);
	if (temp)
		mcp_remove_state(&s);
	free(s.state_dir);
	free(s.runs_dir);
	free(s.languages);
	cli_run_args_free(&args);
	pthread_mutex_destroy(&s.lock);
	pthread_cond_destroy(&s.idle);
	pthread_mutex_destroy(&io.lock);
	pthread_mutex_destroy(&io.out_lock);
	pthread_cond_destroy(&io.idle);
	return ret;
}
