/* SPDX-License-Identifier: MIT */
/* MCP over stdio: one JSON-RPC message a line on stdin and stdout; each
 * request in a worker thread of its own, so that a cancellation or a ping is
 * read while a tool runs. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "clock.h"
#include "mcp.h"

/* How long the end of input waits for cancelled calls to clean up. */
#define MCP_STDIO_STOP_WAIT_MS 20000

/* Requests served at once off the reader (tools/call, resources/read); more wait in line. */
#define MCP_STDIO_WORKERS 16

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
void mcp_stdio_loop(struct mcp_stdio *io)
{
	struct buf line = BUF_INIT(MCP_MESSAGE_MAX);
	char chunk[65536], why[128], *out;
	bool dropping = false;
	ssize_t n;

	while (!*io->stopping) {
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
	if (!*io->stopping && !dropping && line.len)
		mcp_stdio_line(io, line.data, line.len); /* a last message without its newline */
	buf_free(&line);
}

void mcp_wait_idle(struct mcp_stdio *io, uint64_t ms)
{
	uint64_t until = clock_mono_ms() + ms;

	pthread_mutex_lock(&io->lock);
	while (io->workers && clock_mono_ms() < until) {
		clock_cond_wait_ms(&io->idle, &io->lock, 200);
	}
	pthread_mutex_unlock(&io->lock);
}

int mcp_stdio_main(struct serve *s, const struct serve_pool_args *pa)
{
	struct mcp_stdio io;
	sigset_t sigs, old;
	int ret = -1;

	memset(&io, 0, sizeof(io));
	io.stopping = s->stopping;
	pthread_mutex_init(&io.lock, NULL);
	pthread_mutex_init(&io.out_lock, NULL);
	pthread_cond_init(&io.idle, NULL);
	/* The pool's and the table's threads leave the signals to this one. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, &old);
	if (s->pool_size)
		mcp_start_pool(s, pa);
	io.m = serve_sessions_start(s) == 0 ? mcp_server_new(s) : NULL;
	io.sess = io.m ? mcp_session_new(io.m) : NULL;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!io.sess) {
		serve_err("out of memory");
		goto out;
	}
	serve_info("nbrun: mcp: serving on stdio; runs in %s; pool of %u warm sandboxes; "
		   "languages: %s", s->runs_dir, s->pool ? s->pool_size : 0, s->languages);
	mcp_stdio_loop(&io);
	/* The client is gone or we were told to stop: running calls are cancelled. */
	*s->stopping = 1;
	mcp_server_cancel_all(io.m);
	mcp_wait_idle(&io, MCP_STDIO_STOP_WAIT_MS);
	if (io.workers) {
		serve_err("%u calls did not stop within %d s; exiting without them (nbrun gc removes "
			  "what they leave)", io.workers, MCP_STDIO_STOP_WAIT_MS / 1000);
		return SERVE_STUCK;
	}
	ret = 0;
out:
	if (io.sess)
		mcp_session_unref(io.m, io.sess);
	mcp_server_free(io.m);
	pthread_mutex_destroy(&io.lock);
	pthread_mutex_destroy(&io.out_lock);
	pthread_cond_destroy(&io.idle);
	return ret;
}
