/* SPDX-License-Identifier: MIT */
/*
 * The client side of nbrun serve: one connection (libcurl, over TCP or a
 * unix socket, with the bearer token) and what `run --server` and
 * `session --server` share. remote.c.
 */
#ifndef NBRUN_CLI_REMOTE_H
#define NBRUN_CLI_REMOTE_H

#include <signal.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "buf.h"
#include "cli.h"

struct remote;

/* Where a reply goes: memory (mem, max bytes) or a file (fd). */
struct remote_sink {
	struct buf *mem;
	int fd;
	uint64_t written, max;
	/* With mem: each complete line of an NDJSON reply as it comes (Accept: application/x-ndjson). */
	void (*on_line)(const char *line, size_t len, void *payload);
	void *payload;
};

/* server: http://HOST:PORT[/prefix] or unix:/path; 0 or a CLI exit code (message printed). */
int remote_open(struct remote **r, const char *server, const char *token_file,
		const volatile sig_atomic_t *cancel);
void remote_close(struct remote *r);

/* One request (method GET, POST, PUT, DELETE); *status is 0 when no HTTP reply came. */
CURLcode remote_call(struct remote *r, const char *method, const char *path, const char *body,
		     size_t body_len, struct remote_sink *sink, long timeout_ms, long *status);
/*
 * With --timeout: a run's or an execute's request to r (a call whose
 * timeout_ms is 0) is given up that long plus REMOTE_RUN_MARGIN_MS after it
 * was sent, whatever the server does meanwhile (silence, a trickle, events
 * without end). 0: no deadline (the server's own timeout is not known here).
 */
#define REMOTE_RUN_MARGIN_MS 30000
void remote_set_run_timeout(struct remote *r, uint64_t timeout_ms);
/* What the last failed request met. */
const char *remote_errmsg(const struct remote *r);

/* The exit code for an error reply {"error", "kind"}, its message printed. */
int remote_exit_for_reply(long status, const json_t *err);

/* A run's POST body (code or notebook, files, env, timeout; neither code nor
 * notebook: a session's); NULL with the exit code in *ret. */
char *remote_body(const struct cli_remote *a, int *ret);

/* -o DIR (or ./nbrun-out/<run_id>) made absolute in *abs, created, required empty: its fd. */
int remote_open_out(char **abs, const char *dir, const char *run_id);

/* One image or file of a reply into out_fd, from content_base64 or its url; then
 * only the schema's fields stay in e. */
int remote_save(struct remote *r, int out_fd, json_t *e);


/*
 * POST /v1/runs as an NDJSON stream, whose client going away cancels the run
 * on the server: a retry never leaves a first attempt running on. *doc: the
 * result document, or the error reply, or NULL; the CURLcode returned.
 * key (NULL: none) goes as the Idempotency-Key header.
 */
CURLcode remote_post_run_streamed(struct remote *r, const char *body, const char *key, json_t **doc,
				  long *status);

/* A run's images, files and executed notebook saved below out_fd (out_dir its
 * path), doc made a local run's document and written as result.json: 0 or -1
 * (message printed). */
int remote_keep_outputs(struct remote *r, json_t *doc, int out_fd, const char *out_dir);

#endif
