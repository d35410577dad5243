/* SPDX-License-Identifier: MIT */
/* What the HTTP door's files share: JSON replies and NDJSON streams. */
#ifndef NBRUN_SERVE_HTTP_PRIVATE_H
#define NBRUN_SERVE_HTTP_PRIVATE_H

#include <signal.h>

#include <jansson.h>

#include "sessions.h"

struct MHD_Connection;
struct MHD_Response;

/* reply.c */
/* A JSON reply with code (body taken over; NULL: 500); its status in *status. */
struct MHD_Response *sess_json(unsigned int *status, unsigned int code, json_t *body);
/* A core call's reply (its body taken over); its HTTP status in *status. */
struct MHD_Response *serve_reply_response(unsigned int *status, struct serve_reply *reply);
/* The reply for the library's error rc with its message msg (errors.c's map). */
struct MHD_Response *sess_lib_error(unsigned int *status, int rc, const char *msg);

/* stream.c */
struct serve_stream {
	struct serve *s;
	int rfd, wfd;
	int client_fd;
	pthread_t th;
	bool have_thread;
	volatile sig_atomic_t cancel;    /* a run's cancel flag */
	volatile sig_atomic_t finished;  /* the work is over (its last line follows) */
	uint64_t stalled_ms;             /* since when the client has read nothing; 0: it reads */
	void (*work)(struct serve_stream *st);
	void (*abort)(struct serve_stream *st);
	void (*release)(struct serve_stream *st);
	/* what the work needs */
	struct serve_request req;
	struct serve_session *ss;
	char *code;
	uint64_t timeout_ms;
	bool unclaimed;   /* the session's claim given back by the work */
};

/* nbrun_event_cb of a stream: each event one line (payload: the stream). */
void stream_event(const char *json, size_t len, void *payload);
/* The last line of a stream: the document (taken over; NULL: an internal error). */
void stream_last(struct serve_stream *st, json_t *doc);
/* Start st's work in a thread and answer with the stream (st taken over). */
struct MHD_Response *stream_start(struct serve_stream *st, struct MHD_Connection *c,
				  unsigned int *status);

#endif
