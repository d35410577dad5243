/* SPDX-License-Identifier: MIT */
/* The server state the HTTP and MCP fuzz targets share: nbrun serve's, without an engine. */
#ifndef NBRUN_FUZZ_SERVE_H
#define NBRUN_FUZZ_SERVE_H

#include "serve.h"

/* The run kept in the state directory from the start, for GET /v1/runs/ID and resources/read. */
#define FUZZ_FIXTURE_RUN "00c0ffee"

/*
 * The server state, made on first use: the run defaults and limits of
 * nbrun serve, a scratch state directory (removed at exit) holding the
 * fixture run, sessions, and DOCKER_HOST pointed at a socket that does not
 * exist, so that whatever needs the engine fails as it does when dockerd
 * is down and no input ever reaches the machine's engine. NULL: the setup
 * failed (message printed).
 */
struct serve *fuzz_serve(void);
/* Remove what the last input left: runs other than the fixture, uploads, session directories. */
void fuzz_serve_clean(struct serve *s);
/* abort() with a message when ok is false. */
void fuzz_check(int ok, const char *what);

#endif
