/* SPDX-License-Identifier: MIT */
/* The session table, shared by the HTTP and MCP doors (sessions.c). */
#ifndef NBRUN_SERVE_SESSIONS_H
#define NBRUN_SERVE_SESSIONS_H

#include "serve.h"

#define SESSION_REAP_MS 1000

struct serve_session {
	struct serve_session *next;
	char id[WIRE_NODE_MAX + 1 + 16]; /* NODE~<the library's id> */
	char dir_name[16];                /* the library's id: its directory */
	int tenant;
	char owner[SERVE_OWNER_MAX + 1]; /* the MCP session that opened it ("": the HTTP API's) */
	struct nbrun_session *ns;
	int dir_fd;                 /* STATE/sessions/<id>: one directory per execution */
	char *dir;
	unsigned int execs;
	uint64_t created_ms, last_ms, idle_ms;
	const char *language;       /* canonical, static */
	unsigned int refs;          /* requests holding it */
	bool busy;                  /* an operation other than interrupt is under way */
	bool closing;               /* out of the table: closed when the last ref goes */
};

struct serve_sessions {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct serve_session *list;
	unsigned int count;
	bool stop;
	pthread_t reaper;
	bool have_reaper;
	char *dir;
	int dir_fd;
};

/* Remove a session no request holds any more: its kernel, directory and memory. */
void sess_destroy(struct serve *s, struct serve_session *ss);
/*
 * The session id of tenant, held (refs + 1); NULL when there is none
 * (another tenant's too). With owner, only a session that owner opened.
 */
struct serve_session *sess_get(struct serve *s, const char *id, int tenant, const char *owner);
/* Let go of a held session (the last holder of a closed one removes it). */
void sess_put(struct serve *s, struct serve_session *ss);
/* Take the session for one operation; false when another one runs. */
bool sess_claim(struct serve *s, struct serve_session *ss);
void sess_unclaim(struct serve *s, struct serve_session *ss);
/* Take the session out of the table (why: for the log); removed once no one holds it. */
void sess_close(struct serve *s, struct serve_session *ss, const char *why);

#endif
