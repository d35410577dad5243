/* SPDX-License-Identifier: MIT */
/*
 * NDJSON streams of runs and executions: the work runs in a thread of its own
 * and writes one JSON line per event into a pipe that the connection's thread
 * sends on; when the client goes away, the work is aborted (a run cancelled,
 * a session's cell interrupted).
 */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"

#include "http-private.h"

/*
 * A stream holds back its next bytes while more than this waits unsent in
 * the client's socket: libmicrohttpd, stuck on a socket that never drains,
 * would wait for ever (its timeout does not cover that), and a run would
 * go on behind it.
 */
#define STREAM_UNSENT_MAX (256 * 1024)

/* One line into the pipe; a reader that went away is not an error of the run. */
static void stream_line(struct serve_stream *st, const char *json, size_t len)
{
	if (st->wfd < 0)
		return;
	if (fd_write_all(st->wfd, json, len) < 0 || fd_write_all(st->wfd, "\n", 1) < 0) {
		close(st->wfd);
		st->wfd = -1;
	}
}

void stream_event(const char *json, size_t len, void *payload)
{
	stream_line(payload, json, len);
}

void stream_last(struct serve_stream *st, json_t *doc)
{
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;

	if (text)
		stream_line(st, text, strlen(text));
	else
		stream_line(st, "{\"error\": \"out of memory\", \"kind\": \"internal\"}", 46);
	free(text);
	json_decref(doc);
}

static void *stream_main(void *arg)
{
	struct serve_stream *st = arg;

	st->work(st);
	st->finished = 1;
	if (st->wfd >= 0) {
		close(st->wfd);
		st->wfd = -1;
	}
	return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct serve_stream *st = cls;

	(void)pos;
	for (;;) {
		struct pollfd p[2] = { { st->rfd, POLLIN, 0 }, { st->client_fd, POLLRDHUP, 0 } };
		int n, unsent = 0;
		ssize_t got;

		if (*st->s->stopping)
			st->cancel = 1;
		/* A client that reads nothing for the connection timeout is given up. */
		if (st->client_fd >= 0 && ioctl(st->client_fd, SIOCOUTQ, &unsent) == 0 &&
		    unsent > STREAM_UNSENT_MAX) {
			uint64_t now = clock_mono_ms();
			if (!st->stalled_ms)
				st->stalled_ms = now;
			else if (now - st->stalled_ms >= (uint64_t)st->s->conn_timeout_s * 1000)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			n = poll(p + 1, 1, 200);
			if (n > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
				return MHD_CONTENT_READER_END_WITH_ERROR;
			continue;
		}
		st->stalled_ms = 0;
		n = poll(p, st->client_fd >= 0 ? 2 : 1, 500);
		if (n < 0 && errno != EINTR)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (n > 0 && st->client_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return MHD_CONTENT_READER_END_WITH_ERROR; /* the client went away */
		if (n <= 0 || !(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		got = read(st->rfd, buf, max);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		return got == 0 ? MHD_CONTENT_READER_END_OF_STREAM : got;
	}
}

static void stream_free(void *cls)
{
	struct serve_stream *st = cls;

	if (!st->finished && st->abort)
		st->abort(st);
	close(st->rfd);
	if (st->have_thread)
		pthread_join(st->th, NULL);
	if (st->wfd >= 0)
		close(st->wfd);
	if (st->release)
		st->release(st);
	free(st);
}

struct MHD_Response *stream_start(struct serve_stream *st, struct MHD_Connection *c,
					 unsigned int *status)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct MHD_Response *r;
	int p[2];

	st->client_fd = ci ? ci->connect_fd : -1;
	st->rfd = st->wfd = -1;
	if (pipe2(p, O_CLOEXEC) < 0) {
		if (st->release)
			st->release(st);
		free(st);
		return serve_error_response(status, SERVE_E_INTERNAL, "cannot make a pipe: %s", strerror(errno));
	}
	st->rfd = p[0];
	st->wfd = p[1];
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, st, stream_free);
	if (!r) {
		close(p[0]);
		close(p[1]);
		if (st->release)
			st->release(st);
		free(st);
		return NULL;
	}
	if (pthread_create(&st->th, NULL, stream_main, st) == 0) {
		st->have_thread = true;
	} else {
		stream_last(st, json_pack("{s:s, s:s}", "error", "cannot start the run's thread", "kind",
					  "internal"));
		close(st->wfd);
		st->wfd = -1;
		st->finished = 1;
	}
	/*
	 * The connection timeout is for idle clients; a stream is quiet while a
	 * sandbox starts or a cell computes, and the server, not the client, is
	 * the one silent then. Its connection lives as long as its work may: a
	 * client that stops reading is dropped once that is over.
	 */
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
				  (unsigned int)(2 * (st->s->opts.timeout_ms / 1000) + 120));
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
	*status = 200;
	return r;
}

bool serve_wants_ndjson(struct MHD_Connection *c)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);

	return a && strstr(a, "application/x-ndjson");
}

static void stream_run_work(struct serve_stream *st)
{
	struct serve_reply reply = SERVE_REPLY_INIT;

	st->req.cancel = &st->cancel;
	st->req.on_event = stream_event;
	st->req.event_payload = st;
	serve_run(&reply, st->s, &st->req);
	stream_last(st, reply.body);
}

static void stream_run_abort(struct serve_stream *st)
{
	st->cancel = 1;
}

static void stream_run_release(struct serve_stream *st)
{
	serve_request_free(&st->req);
}

struct MHD_Response *serve_stream_run(struct serve *s, struct MHD_Connection *c,
				      struct serve_request *req, unsigned int *status)
{
	struct serve_stream *st = calloc(1, sizeof(*st));

	if (!st) {
		serve_request_free(req);
		return serve_error_response(status, SERVE_E_INTERNAL, "out of memory");
	}
	st->s = s;
	st->req = *req;
	memset(req, 0, sizeof(*req));
	st->work = stream_run_work;
	st->abort = stream_run_abort;
	st->release = stream_run_release;
	return stream_start(st, c, status);
}
