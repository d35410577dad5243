/* SPDX-License-Identifier: MIT */
/*
 * The wire vocabulary of nbrun serve, shared by the server and the clients
 * that talk to it (run/batch/session --server): the syntax of ids and names,
 * limits both sides hold, base64 as JSON carries it, and where a server keeps
 * its state (and so its token).
 */
#ifndef NBRUN_WIRE_H
#define NBRUN_WIRE_H

#include <stdbool.h>
#include <stddef.h>

/* A bearer token, at most this many bytes. */
#define WIRE_TOKEN_MAX 1024
#define WIRE_DEFAULT_PORT 8411
/* Idempotency-Key of POST /v1/runs: 1 to this many of [A-Za-z0-9._:/-]. */
#define WIRE_IDEM_KEY_MAX 128
/* A node name: 1 to 63 of A-Z a-z 0-9 . _ - (a session id is NODE~ID). */
#define WIRE_NODE_MAX 63

/* A run id: 1 to 64 lowercase hex digits. */
bool wire_run_id_valid(const char *id);
/* A session id as a server hands them out: NODE~HEX. */
bool wire_session_id_valid(const char *id);
/* A node name of len bytes (see WIRE_NODE_MAX). */
bool wire_node_valid(const char *name, size_t len);
/*
 * The one naming rule for a path component, wherever a name comes from (an
 * upload, an export, a server's reply): not empty, ".", "..", no '/' or
 * '\\', UTF-8, no C0, DEL or C1 control (a terminal acts on each),
 * at most 255 bytes.
 */
bool wire_name_safe(const char *name, size_t len);
/* True when p (n bytes) holds a C0, DEL or C1 control character. */
bool wire_name_controls(const char *p, size_t n);
/* n (at most 64) random bytes as 2n lowercase hex digits and a NUL in out:
 * a fresh id or token. 0, or -errno. */
int wire_random_hex(char *out, size_t n);
/* Percent-encode a relative path for a URL (keeps '/'). malloc'd or NULL. */
char *wire_url_path(const char *path);
/* Base64 without line breaks (libb64 wraps lines). malloc'd or NULL. */
char *wire_base64(const unsigned char *p, size_t n);
/* Standard alphabet, padded, nothing else (libb64 would skip what it does not know). */
bool wire_base64_valid(const char *s, size_t len);
/*
 * The bytes of len characters of base64 (what is not of its alphabet is
 * skipped: check with wire_base64_valid() first where that matters), with a
 * NUL after them that *n does not count. malloc'd; NULL when out of memory
 * or len is over INT_MAX (libb64 counts in int).
 */
char *wire_base64_decode(const char *s, size_t len, size_t *n);
/* $NBRUN_STATE_DIR, /var/lib/nbrun as root, else $XDG_STATE_HOME/nbrun or
 * ~/.local/state/nbrun. malloc'd, NULL when none can be named. */
char *wire_default_state_dir(void);

#endif
