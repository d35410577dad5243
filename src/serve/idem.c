/* SPDX-License-Identifier: MIT */
/* Idempotency-Keys of POST /v1/runs: a retried request with the key of a run
 * that executes waits for it, and one of a kept run gets that run. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "clock.h"
#include "serve.h"

/*
 * What a run's Idempotency-Key (with the tenant that sent it) is remembered
 * as. A key is RUNNING while its first request executes; DONE once that run
 * is kept, for as long as the run's directory is (retention, --keep). A run
 * that made no result, or ended "failed" (the sandbox or engine, not the
 * code), leaves no key: a retry runs it again, since nothing completed.
 */
enum serve_idem_state { SERVE_IDEM_FREE = 0, SERVE_IDEM_RUNNING, SERVE_IDEM_DONE };

struct serve_idem {
	enum serve_idem_state state;
	unsigned char key[32];  /* SHA-256 of owner, '\n', the key */
	unsigned char body[32]; /* SHA-256 of the request's body */
	uint64_t seq;           /* the oldest (smallest) is forgotten first */
	uint64_t deadline_ms;   /* RUNNING: when waiters give up (monotonic) */
	char run_id[65];        /* DONE */
};

static bool serve_idem_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
}

int serve_request_key(struct serve_request *req, struct serve_reply *err, const char *key,
		      const char *body, size_t len)
{
	unsigned int dlen = 0;
	size_t n;

	req->idem_key[0] = '\0';
	if (!key)
		return 0;
	n = strlen(key);
	for (size_t i = 0; i < n && n <= WIRE_IDEM_KEY_MAX; i++)
		if (!serve_idem_char((unsigned char)key[i]))
			n = 0;
	if (n == 0 || n > WIRE_IDEM_KEY_MAX) {
		serve_reply_error(err, SERVE_E_REQUEST,
				  "Idempotency-Key: want 1 to %d characters of A-Z a-z 0-9 . _ : / -",
				  WIRE_IDEM_KEY_MAX);
		return -1;
	}
	if (EVP_Digest(body, len, req->idem_body, &dlen, EVP_sha256(), NULL) != 1 || dlen != 32) {
		serve_reply_error(err, SERVE_E_INTERNAL, "cannot digest the request");
		return -1;
	}
	memcpy(req->idem_key, key, n + 1);
	return 0;
}

void serve_idem_free(struct serve *s)
{
	free(s->idem);
	s->idem = NULL;
	s->n_idem = 0;
	s->idem_alloc = 0;
}

/* The key's digest: the same key from another tenant is another key. */
static int serve_idem_digest(unsigned char out[32], const struct serve_request *req)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned int len = 0;
	int ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
		 EVP_DigestUpdate(md, req->owner, strlen(req->owner)) == 1 &&
		 EVP_DigestUpdate(md, "\n", 1) == 1 &&
		 EVP_DigestUpdate(md, req->idem_key, strlen(req->idem_key)) == 1 &&
		 EVP_DigestFinal_ex(md, out, &len) == 1 && len == 32;

	EVP_MD_CTX_free(md);
	return ok ? 0 : -1;
}

/* The slot of key, or -1. Under s->lock. */
static ssize_t serve_idem_find(const struct serve *s, const unsigned char key[32])
{
	for (size_t i = 0; i < s->n_idem; i++)
		if (s->idem[i].state != SERVE_IDEM_FREE && !memcmp(s->idem[i].key, key, 32))
			return (ssize_t)i;
	return -1;
}

/*
 * A slot for a new key: a free one, a new one while fewer than
 * SERVE_IDEM_MAX, else the oldest finished key's. -1 when none. Under s->lock.
 */
static ssize_t serve_idem_slot(struct serve *s)
{
	ssize_t oldest = -1;

	for (size_t i = 0; i < s->n_idem; i++) {
		if (s->idem[i].state == SERVE_IDEM_FREE)
			return (ssize_t)i;
		if (s->idem[i].state == SERVE_IDEM_DONE &&
		    (oldest < 0 || s->idem[i].seq < s->idem[oldest].seq))
			oldest = (ssize_t)i;
	}
	if (s->n_idem < SERVE_IDEM_MAX) {
		if (s->n_idem == s->idem_alloc) {
			size_t alloc = s->idem_alloc ? 2 * s->idem_alloc : 64;
			struct serve_idem *p;

			if (alloc > SERVE_IDEM_MAX)
				alloc = SERVE_IDEM_MAX;
			p = realloc(s->idem, alloc * sizeof(*p));
			if (!p)
				return oldest;
			s->idem = p;
			s->idem_alloc = alloc;
		}
		memset(&s->idem[s->n_idem], 0, sizeof(*s->idem));
		return (ssize_t)s->n_idem++;
	}
	return oldest;
}

/* Wait up to a second for a keyed run to end. Under s->lock. */
static void serve_idem_wait(struct serve *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1;
	pthread_cond_timedwait(&s->idle, &s->lock, &ts);
}

/*
 * Before a keyed request runs: its key is new (CLAIMED, *slot is the key's,
 * RUNNING), or reply is filled (ANSWERED): the result of the run the key
 * started, once that run ends; 422 for the key with another body; 409 when
 * the run goes on past its deadline; 503 when the server stops.
 */
enum serve_idem_claim serve_idem_claim(ssize_t *slot, struct serve_reply *reply,
					      struct serve *s, const struct serve_request *req)
{
	uint64_t timeout = req->timeout_ms ? req->timeout_ms : s->opts.timeout_ms;
	unsigned char key[32];
	char run_id[65];
	ssize_t i;

	if (serve_idem_digest(key, req) < 0) {
		serve_reply_error(reply, SERVE_E_INTERNAL, "cannot digest the Idempotency-Key");
		return SERVE_IDEM_ANSWERED;
	}
	pthread_mutex_lock(&s->lock);
	for (;;) {
		json_t *doc;

		i = serve_idem_find(s, key);
		if (i < 0)
			break;
		if (memcmp(s->idem[i].body, req->idem_body, 32)) {
			serve_reply_error(reply, SERVE_E_KEY_REUSED,
					  "Idempotency-Key %s was sent before with another request",
					  req->idem_key);
			goto answered;
		}
		if (s->idem[i].state == SERVE_IDEM_RUNNING) {
			if (*s->stopping || (req->cancel && *req->cancel)) {
				serve_reply_error(reply, SERVE_E_STOPPING, "the server is shutting down");
				goto answered;
			}
			if (clock_mono_ms() >= s->idem[i].deadline_ms) {
				serve_reply_error(reply, SERVE_E_CONFLICT,
						  "the run of Idempotency-Key %s is still executing",
						  req->idem_key);
				reply->retry_after = 5;
				goto answered;
			}
			serve_idem_wait(s);
			continue;
		}
		memcpy(run_id, s->idem[i].run_id, sizeof(run_id));
		pthread_mutex_unlock(&s->lock);
		doc = serve_load_result(s, run_id, req->owner, true);
		if (doc) {
			reply->kind = SERVE_OK;
			reply->body = doc;
			return SERVE_IDEM_ANSWERED;
		}
		/* Its run is no longer kept: neither is the key. */
		pthread_mutex_lock(&s->lock);
		i = serve_idem_find(s, key);
		if (i >= 0 && s->idem[i].state == SERVE_IDEM_DONE && !strcmp(s->idem[i].run_id, run_id))
			s->idem[i].state = SERVE_IDEM_FREE;
	}
	i = serve_idem_slot(s);
	if (i < 0) {
		serve_reply_error(reply, SERVE_E_BUSY, "%d Idempotency-Keys are in use", SERVE_IDEM_MAX);
		reply->retry_after = 5;
		goto answered;
	}
	s->idem[i].state = SERVE_IDEM_RUNNING;
	memcpy(s->idem[i].key, key, 32);
	memcpy(s->idem[i].body, req->idem_body, 32);
	s->idem[i].seq = ++s->idem_seq;
	s->idem[i].deadline_ms = clock_mono_ms() + timeout + SERVE_IDEM_GRACE_MS;
	s->idem[i].run_id[0] = '\0';
	pthread_mutex_unlock(&s->lock);
	*slot = i;
	return SERVE_IDEM_CLAIMED;
answered:
	pthread_mutex_unlock(&s->lock);
	return SERVE_IDEM_ANSWERED;
}

/* The keyed run of slot ended: kept as run_id, or NULL: nothing to answer a retry with. */
void serve_idem_settle(struct serve *s, ssize_t slot, const char *run_id)
{
	pthread_mutex_lock(&s->lock);
	if (run_id) {
		snprintf(s->idem[slot].run_id, sizeof(s->idem[slot].run_id), "%s", run_id);
		s->idem[slot].state = SERVE_IDEM_DONE;
	} else {
		s->idem[slot].state = SERVE_IDEM_FREE;
	}
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->lock);
}
