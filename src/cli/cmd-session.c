/* SPDX-License-Identifier: MIT */
/*
 * nbrun session: a prompt for a person at a terminal, over a fresh session
 * (one sandbox and its kernel kept until the prompt ends), local or kept by
 * an nbrun serve (--server). Outputs print as they stream; Ctrl-C interrupts
 * the running cell, Ctrl-D ends. The sessions behind it: session-local.c and
 * remote-session.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "cli.h"
#include "fdio.h"

/* ---- the prompt ----------------------------------------------------------------------- */

static const struct cli_session_ops *ops = &cli_local_session_ops;
static void *volatile session_now;
static int session_sigpipe[2] = { -1, -1 };

static void session_on_sigint(int sig)
{
	int saved = errno;
	char c = 1;

	(void)sig;
	if (write(session_sigpipe[1], &c, 1) < 0) {
		/* nothing to do in a signal handler */
	}
	errno = saved;
}

/* Ctrl-C becomes an interrupt of the running cell, sent from this thread. */
static void *session_sigthread(void *arg)
{
	char c;

	(void)arg;
	while (read(session_sigpipe[0], &c, 1) == 1) {
		if (c == 0)
			break;
		if (session_now && ops->interrupt(session_now))
			fprintf(stderr, "\n[interrupting]\n");
	}
	return NULL;
}

static void session_help(void)
{
	printf("Usage: nbrun session [OPTIONS]\n"
	       "\n"
	       "A prompt over a fresh session: one sandbox whose kernel keeps its state\n"
	       "(variables, imports, files in /mnt/data) until the prompt ends, here or\n"
	       "on an nbrun serve (--server).\n"
	       "A line runs when entered; a line ending in ':' or '\\' goes on until an empty\n"
	       "line; '# %%%%' starts a block that runs at the next '# %%%%' line. Commands:\n"
	       "  :files            what /mnt/data holds (size, sha256)\n"
	       "  :get NAME [DEST]  copy /mnt/data/NAME to DEST (default ./NAME's base name)\n"
	       "  :put FILE [NAME]  copy a local file into /mnt/data\n"
	       "  :save FILE        the session's history as an executed notebook\n"
	       "  :restart          a fresh kernel (files stay)\n"
	       "  :interrupt, Ctrl-C  interrupt the running cell (state kept)\n"
	       "  :quit, Ctrl-D     close the session (its sandbox is removed)\n"
	       "Each execution's outputs (images, files, result.json) go to\n"
	       "OUT/<session>-<n> (OUT: -o DIR, default ./nbrun-out).\n"
	       "\n"
	       "Options:\n"
	       "  -o, --out DIR         where the executions' outputs go\n"
	       "  --server URL          a session on an nbrun serve: http://HOST:PORT or\n"
	       "                        unix:/path/to/socket (or NBRUN_SERVER); -f and -e go\n"
	       "                        with it, the limits are the server's\n"
	       "  --token-file FILE     bearer token (else NBRUN_TOKEN, NBRUN_TOKEN_FILE, then\n"
	       "                        the token file of a server on this machine)\n"
	       "%s",
	       cli_run_options_help);
}

static int session_cmd_files(void *s)
{
	json_t *list, *e;
	int truncated = 0;
	size_t i;

	list = ops->files(s, &truncated);
	if (!list) {
		cli_error("%s", ops->errmsg(s));
		return -1;
	}
	json_array_foreach(list, i, e) {
		printf("%10lld  %-9s  %.12s  ", (long long)json_integer_value(json_object_get(e, "size")),
		       json_string_value(json_object_get(e, "type")) ?: "?",
		       json_string_value(json_object_get(e, "sha256")) ?: "");
		cli_put_safe(stdout, json_string_value(json_object_get(e, "path")) ?: "", false);
		putchar('\n');
	}
	if (truncated)
		printf("(listing stopped at 10000 entries)\n");
	json_decref(list);
	return 0;
}

static int session_cmd_get(void *s, const char *name, const char *dest)
{
	const char *base = strrchr(name, '/');
	int fd, rc;

	if (!dest)
		dest = base ? base + 1 : name;
	fd = open(dest, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		cli_error("cannot create %s: %s", dest, strerror(errno));
		return -1;
	}
	rc = ops->get(s, name, fd);
	close(fd);
	if (rc < 0) {
		unlink(dest);
		cli_error("cannot get %s: %s", name, ops->errmsg(s));
		return -1;
	}
	printf("saved %s\n", dest);
	return 0;
}

static int session_cmd_put(void *s, const char *file, const char *name)
{
	const char *base = strrchr(file, '/');
	char *data = NULL;
	size_t len = 0;
	int rc = fd_read_file(AT_FDCWD, file, 0, 512u << 20, &data, &len);

	if (rc < 0) {
		cli_error("cannot read %s: %s", file, rc == -EFBIG ? "larger than 512 MiB" : strerror(-rc));
		return -1;
	}
	if (!name)
		name = base ? base + 1 : file;
	if (ops->put(s, name, data, len) < 0) {
		cli_error("%s", ops->errmsg(s));
		rc = -1;
	} else {
		printf("put /mnt/data/%s (%zu bytes)\n", name, len);
	}
	free(data);
	return rc;
}

static int session_cmd_save(void *s, const char *path)
{
	char *text = ops->notebook(s);
	FILE *f;

	if (!text) {
		cli_error("%s", ops->errmsg(s));
		return -1;
	}
	f = fopen(path, "wxe");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		cli_error("cannot write %s: %s", path, strerror(errno));
		free(text);
		return -1;
	}
	free(text);
	printf("saved %s\n", path);
	return 0;
}

/* What an execution gave, less the stream text already printed as it came. */
static void session_report(const json_t *doc, const char *dir)
{
	const json_t *err = json_object_get(doc, "error"), *e;
	const char *status = json_string_value(json_object_get(doc, "status")) ?: "failed";
	const char *tb = json_string_value(json_object_get(err, "traceback"));
	size_t i;

	json_array_foreach(json_object_get(doc, "results"), i, e) {
		cli_put_safe(stdout, json_string_value(json_object_get(e, "text")) ?: "", true);
		putchar('\n');
	}
	if (tb && *tb) {
		cli_put_safe(stderr, tb, true);
		fputc('\n', stderr);
	}
	json_array_foreach(json_object_get(doc, "images"), i, e) {
		printf("[image] %s/", dir);
		cli_put_safe(stdout, json_string_value(json_object_get(e, "path")) ?: "", false);
		putchar('\n');
	}
	json_array_foreach(json_object_get(doc, "files"), i, e) {
		printf("[file] %s/", dir);
		cli_put_safe(stdout, json_string_value(json_object_get(e, "path")) ?: "", false);
		putchar('\n');
	}
	if (strcmp(status, "ok") && strcmp(status, "error")) {
		fprintf(stderr, "[%s] ", status);
		cli_put_safe(stderr, json_string_value(json_object_get(doc, "message")) ?: "", false);
		fputc('\n', stderr);
	}
}

static void session_execute(void *s, const char *code, const char *out_root)
{
	json_t *doc;
	char *dir = NULL;
	static unsigned int n;

	if (asprintf(&dir, "%s/%s-%u", out_root, ops->id(s), ++n) < 0)
		return;
	session_now = s;
	doc = ops->execute(s, code, dir);
	if (!doc)
		cli_error("%s", ops->errmsg(s));
	else
		session_report(doc, dir);
	if (ops->kernel_dead(s))
		fprintf(stderr, "[the kernel died: :restart for a fresh one]\n");
	fflush(stdout);
	session_now = NULL;
	json_decref(doc);
	free(dir);
}

/* One command or block of code; false at the end. */
static bool session_read(struct buf *code, bool tty)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	bool block = false, more = false;

	code->len = 0;
	for (;;) {
		if (tty) {
			fputs(block || more ? "... " : ">>> ", stdout);
			fflush(stdout);
		}
		n = getline(&line, &cap, stdin);
		if (n < 0) {
			free(line);
			return code->len > 0;
		}
		if (!strncmp(line, "# %%", 4)) {
			if (block) {
				free(line);
				return true;
			}
			block = true;
			continue;
		}
		if (!block && !more && n == 1 && line[0] == '\n')
			continue; /* an empty line alone runs nothing */
		if (!block && !more && line[0] == ':') {
			buf_append(code, line, (size_t)n);
			free(line);
			return true;
		}
		if (more && (n == 1 && line[0] == '\n')) {
			free(line);
			return true;
		}
		buf_append(code, line, (size_t)n);
		if (!block) {
			size_t l = (size_t)n;
			while (l && (line[l - 1] == '\n' || line[l - 1] == ' '))
				l--;
			/* once continued, the block goes on until an empty line */
			more = more || (l && (line[l - 1] == ':' || line[l - 1] == '\\'));
			if (!more) {
				free(line);
				return true;
			}
		}
	}
}

int cmd_session(int argc, char **argv)
{
	enum { OPT_SERVER = CLI_OPT_FIRST_LOCAL, OPT_TOKEN_FILE };
	static const struct option longopts[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "server", required_argument, NULL, OPT_SERVER },
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		CLI_RUN_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_run_args args;
	struct nbrun_ctx *ctx = NULL;
	void *s = NULL;
	struct buf code = BUF_INIT(64u << 20);
	const char *out_root = "nbrun-out", *server = getenv("NBRUN_SERVER"), *token_file = NULL;
	const char *local_only = NULL;
	struct sigaction sa;
	pthread_t th;
	bool tty = isatty(0);
	int c, rc, li = -1, ret = CLI_EXIT_USAGE;

	if (cli_run_args_init(&args, argc) < 0) {
		cli_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "o:f:e:h", longopts, &li)) != -1) {
		switch (c) {
		case 'o': out_root = optarg; break;
		case OPT_SERVER: server = optarg; break;
		case OPT_TOKEN_FILE: token_file = optarg; break;
		case 'h':
			session_help();
			ret = CLI_EXIT_OK;
			goto out;
		default:
			if (c != '?' && c != 'f' && c != 'e' && !local_only && li >= 0)
				local_only = longopts[li].name;
			rc = c == '?' ? 1 : cli_run_option(&args, c, optarg, "session");
			if (rc == 1)
				cli_bad_option("session", argv);
			if (rc)
				goto out;
		}
	}
	if (optind < argc) {
		cli_usage_error("session", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (cli_run_args_finish(&args, "session"))
		goto out;
	if (server && !*server)
		server = NULL;
	if (server && local_only) {
		ret = cli_usage_error("session", "--%s is the server's to set; it cannot be used with --server",
				      local_only);
		goto out;
	}
	if (token_file && !server) {
		ret = cli_usage_error("session", "--token-file goes with --server");
		goto out;
	}
	if (nbrun_ctx_new(&ctx) < 0 || pipe2(session_sigpipe, O_CLOEXEC) < 0) {
		cli_error("out of memory");
		ret = CLI_EXIT_FAILED;
		goto out;
	}
	if (tty)
		fprintf(stderr, "nbrun: session: starting a sandbox...\n");
	if (server) {
		struct cli_remote r;

		memset(&r, 0, sizeof(r));
		r.server = server;
		r.token_file = token_file;
		r.files = args.files;
		r.file_count = args.nfiles;
		r.env = args.env;
		r.env_count = args.nenv;
		r.allow_net = args.allow_net;
		r.allow_net_count = args.nallow_net;
		ops = &cli_remote_session_ops;
		ret = cli_remote_session_open(&s, &r);
		if (ret)
			goto out;
	} else {
		struct nbrun_session *ns = NULL;

		rc = nbrun_session_open(&ns, ctx, &args.opts);
		if (rc < 0) {
			cli_error("%s", nbrun_ctx_errmsg(ctx));
			ret = cli_exit_for_error(rc);
			goto out;
		}
		s = ns;
	}
	ret = CLI_EXIT_USAGE;
	if (tty)
		fprintf(stderr, "nbrun: session %s ready (:help for commands, Ctrl-D to end)\n", ops->id(s));
	pthread_create(&th, NULL, session_sigthread, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = session_on_sigint;
	sigaction(SIGINT, &sa, NULL);
	while (session_read(&code, tty)) {
		char *cmd, *a1, *a2, *save = NULL;

		if (buf_append(&code, "", 1) < 0)
			break;
		if (code.data[0] != ':') {
			session_execute(s, code.data, out_root);
			continue;
		}
		cmd = strtok_r(code.data, " \t\n", &save);
		a1 = strtok_r(NULL, " \t\n", &save);
		a2 = strtok_r(NULL, " \t\n", &save);
		if (!strcmp(cmd, ":quit") || !strcmp(cmd, ":q"))
			break;
		else if (!strcmp(cmd, ":files"))
			session_cmd_files(s);
		else if (!strcmp(cmd, ":get") && a1)
			session_cmd_get(s, a1, a2);
		else if (!strcmp(cmd, ":put") && a1)
			session_cmd_put(s, a1, a2);
		else if (!strcmp(cmd, ":save") && a1)
			session_cmd_save(s, a1);
		else if (!strcmp(cmd, ":restart") && ops->restart(s) == 0)
			printf("restarted\n");
		else if (!strcmp(cmd, ":restart"))
			cli_error("restart failed: %s", ops->errmsg(s));
		else if (!strcmp(cmd, ":interrupt"))
			printf("nothing is running\n");
		else
			session_help();
	}
	ret = CLI_EXIT_OK;
	sa.sa_handler = SIG_DFL;
	sigaction(SIGINT, &sa, NULL);
	{
		char z = 0;
		if (write(session_sigpipe[1], &z, 1) == 1)
			pthread_join(th, NULL);
	}
out:
	if (s)
		ops->close(s);
	nbrun_ctx_free(ctx);
	cli_run_args_free(&args);
	buf_free(&code);
	return ret;
}
