/* SPDX-License-Identifier: MIT */
/*
 * The live channel: frames and messages between nbrun and the agent in the
 * sandbox (environments/jupyter/PROTOCOL.md). Everything that arrives is
 * untrusted: sizes are checked before anything is allocated, and the first
 * violation breaks the channel for good.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "nbrun-private.h"

#define CHAN_KIND_JSON 'J'
#define CHAN_KIND_DATA 'D'
#define CHAN_KIND_END 'E'

void nbrun__chan_init(struct nbrun__chan *ch, struct nbrun__conn *conn, struct nbrun_ctx *ctx,
		      const volatile sig_atomic_t *cancel)
{
	ch->conn = conn;
	ch->ctx = ctx;
	ch->cancel = cancel;
	ch->rlen = ch->roff = 0;
	ch->blob_left = -1;
	ch->blob_end = false;
	ch->broken = false;
	ch->spool_errno = 0;
	ch->poke = NULL;
	ch->at_boundary = false;
}

void nbrun__chan_header(unsigned char h[8], char kind, uint32_t len)
{
	h[0] = 'N';
	h[1] = 'B';
	h[2] = NBRUN__CHAN_PROTOCOL;
	h[3] = (unsigned char)kind;
	h[4] = (unsigned char)(len >> 24);
	h[5] = (unsigned char)(len >> 16);
	h[6] = (unsigned char)(len >> 8);
	h[7] = (unsigned char)len;
}

static int chan_violation(struct nbrun__chan *ch, const char *what)
{
	ch->broken = true;
	return nbrun__err(ch->ctx, NBRUN_EPARSE, "sandbox protocol violation: %s", what);
}

static int chan_broken(struct nbrun__chan *ch, int err)
{
	ch->broken = true;
	return nbrun__errno(ch->ctx, NBRUN_EENGINE, err, "the channel to the sandbox broke");
}

/* Wait for the connection: 0 ready, 2 deadline, 3 poked (between messages only), < 0 cancel. */
static int chan_wait(struct nbrun__chan *ch, short events, uint64_t deadline_ms)
{
	for (;;) {
		uint64_t now = clock_mono_ms();
		int slice = ch->poke ? 50 : 200, n;
		struct pollfd p = { ch->conn->fd, events, 0 };

		if (ch->cancel && *ch->cancel)
			return nbrun__err(ch->ctx, NBRUN_ECANCELLED, "interrupted");
		if (deadline_ms && now >= deadline_ms)
			return 2;
		if (ch->at_boundary && ch->poke && *ch->poke)
			return 3;
		if (deadline_ms && deadline_ms - now < (uint64_t)slice)
			slice = (int)(deadline_ms - now);
		n = poll(&p, 1, slice);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return chan_broken(ch, errno);
	}
}

static int chan_write_all(struct nbrun__chan *ch, const void *data, size_t len, uint64_t deadline_ms)
{
	const char *p = data;

	while (len) {
		ssize_t n = ch->conn->send(ch->conn, p, len);
		if (n == -EAGAIN) {
			int rc = chan_wait(ch, POLLOUT, deadline_ms);
			if (rc)
				return rc == 2 ? nbrun__err(ch->ctx, NBRUN_EENGINE,
							    "the sandbox did not take its input in time")
					       : rc;
			continue;
		}
		if (n < 0)
			return chan_broken(ch, (int)-n);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int chan_frame(struct nbrun__chan *ch, char kind, const void *data, size_t len,
		      uint64_t deadline_ms)
{
	unsigned char h[8];
	int rc;

	nbrun__chan_header(h, kind, (uint32_t)len);
	rc = chan_write_all(ch, h, sizeof(h), deadline_ms);
	if (rc == 0 && len)
		rc = chan_write_all(ch, data, len, deadline_ms);
	return rc;
}

int nbrun__chan_send(struct nbrun__chan *ch, json_t *msg, const void *blob, size_t blob_len,
		     uint64_t deadline_ms)
{
	char *text;
	int rc;

	if (ch->broken)
		return nbrun__err(ch->ctx, NBRUN_EENGINE, "the channel to the sandbox is closed");
	if (blob && json_object_set_new(msg, "blob", json_integer((json_int_t)blob_len)) < 0)
		return nbrun__err(ch->ctx, NBRUN_ENOMEM, "out of memory");
	text = json_dumps(msg, JSON_COMPACT);
	if (!text)
		return nbrun__err(ch->ctx, NBRUN_ENOMEM, "out of memory");
	if (strlen(text) > NBRUN__CHAN_MAX_JSON) {
		free(text);
		return nbrun__err(ch->ctx, NBRUN_EINVAL, "a message to the sandbox is too large");
	}
	rc = chan_frame(ch, CHAN_KIND_JSON, text, strlen(text), deadline_ms);
	free(text);
	for (size_t off = 0; rc == 0 && blob && off < blob_len; off += NBRUN__CHAN_MAX_CHUNK) {
		size_t n = blob_len - off < NBRUN__CHAN_MAX_CHUNK ? blob_len - off : NBRUN__CHAN_MAX_CHUNK;
		rc = chan_frame(ch, CHAN_KIND_DATA, (const char *)blob + off, n, deadline_ms);
	}
	if (rc == 0 && blob)
		rc = chan_frame(ch, CHAN_KIND_END, NULL, 0, deadline_ms);
	return rc;
}

/* At least want (<= sizeof rbuf) bytes buffered: 1, 0 at the end of the stream, 2, < 0. */
static int chan_fill(struct nbrun__chan *ch, size_t want, uint64_t deadline_ms)
{
	while (ch->rlen - ch->roff < want) {
		ssize_t n;

		if (ch->roff) {
			memmove(ch->rbuf, ch->rbuf + ch->roff, ch->rlen - ch->roff);
			ch->rlen -= ch->roff;
			ch->roff = 0;
		}
		n = ch->conn->recv(ch->conn, ch->rbuf + ch->rlen, sizeof(ch->rbuf) - ch->rlen);
		if (n == -EAGAIN) {
			int rc = chan_wait(ch, POLLIN, deadline_ms);
			if (rc)
				return rc;
			continue;
		}
		if (n == -EPROTO)
			return chan_violation(ch, "the engine's stream framing is broken");
		if (n < 0)
			return chan_broken(ch, (int)-n);
		if (n == 0)
			return 0;
		ch->rlen += (size_t)n;
	}
	return 1;
}

/* The next frame header: 1 and kind/len, 0 end of stream, 2, < 0. */
static int chan_header(struct nbrun__chan *ch, char *kind, uint32_t *len, uint64_t deadline_ms)
{
	const unsigned char *h;
	int rc = chan_fill(ch, 8, deadline_ms);

	if (rc != 1)
		return rc;
	h = ch->rbuf + ch->roff;
	if (h[0] != 'N' || h[1] != 'B')
		return chan_violation(ch, "a frame without the NB magic");
	if (h[2] != NBRUN__CHAN_PROTOCOL)
		return chan_violation(ch, "a frame of another protocol version");
	*kind = (char)h[3];
	*len = ((uint32_t)h[4] << 24) | ((uint32_t)h[5] << 16) | ((uint32_t)h[6] << 8) | h[7];
	if (*kind != CHAN_KIND_JSON && *kind != CHAN_KIND_DATA && *kind != CHAN_KIND_END)
		return chan_violation(ch, "a frame of an unknown kind");
	if ((*kind == CHAN_KIND_JSON && *len > NBRUN__CHAN_MAX_JSON) ||
	    (*kind == CHAN_KIND_DATA && *len > NBRUN__CHAN_MAX_CHUNK) ||
	    (*kind == CHAN_KIND_END && *len != 0))
		return chan_violation(ch, "a frame over its size cap");
	ch->roff += 8;
	return 1;
}

int nbrun__chan_recv(struct nbrun__chan *ch, json_t **out, uint64_t deadline_ms)
{
	struct buf text = BUF_INIT(NBRUN__CHAN_MAX_JSON);
	json_t *msg = NULL, *blob;
	uint32_t len;
	char kind;
	int rc;

	*out = NULL;
	if (ch->broken)
		return nbrun__err(ch->ctx, NBRUN_EENGINE, "the channel to the sandbox is closed");
	if (ch->blob_left >= 0 || ch->blob_end)
		return nbrun__err(ch->ctx, NBRUN_EINVAL, "the data of the last message was not read");
	/* A header not yet whole stays buffered, so a poke may stop the wait here. */
	ch->at_boundary = true;
	rc = chan_header(ch, &kind, &len, deadline_ms);
	ch->at_boundary = false;
	if (rc != 1)
		return rc;
	if (kind != CHAN_KIND_JSON)
		return chan_violation(ch, "data outside a message");
	/* The payload, through the buffer in slices (it may be larger). */
	while (text.len < len) {
		size_t want = len - text.len < sizeof(ch->rbuf) ? len - text.len : sizeof(ch->rbuf);
		rc = chan_fill(ch, want, deadline_ms);
		if (rc != 1) {
			buf_free(&text);
			/* A deadline inside a frame leaves the stream unusable. */
			if (rc == 2 || rc == 0)
				ch->broken = true;
			return rc == 0 ? chan_violation(ch, "the stream ended inside a frame") : rc;
		}
		if (buf_append(&text, ch->rbuf + ch->roff, want) < 0) {
			buf_free(&text);
			return nbrun__err(ch->ctx, NBRUN_ENOMEM, "out of memory");
		}
		ch->roff += want;
	}
	msg = json_loadb(text.data ? text.data : "", text.len, JSON_REJECT_DUPLICATES, NULL);
	buf_free(&text);
	if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "type"))) {
		json_decref(msg);
		return chan_violation(ch, "a message that is not a JSON object with a type");
	}
	blob = json_object_get(msg, "blob");
	if (blob) {
		if (!json_is_integer(blob) || json_integer_value(blob) < 0) {
			json_decref(msg);
			return chan_violation(ch, "a blob size that is not a count");
		}
		ch->blob_left = json_integer_value(blob);
		ch->blob_end = true;
	}
	*out = msg;
	return 1;
}

int nbrun__chan_recv_blob(struct nbrun__chan *ch, struct buf *buf, int fd, uint64_t cap,
			  uint64_t deadline_ms)
{
	uint64_t got = 0;
	uint32_t len;
	char kind;
	int rc;

	if (ch->broken)
		return nbrun__err(ch->ctx, NBRUN_EENGINE, "the channel to the sandbox is closed");
	if (!ch->blob_end)
		return 0;
	if ((uint64_t)ch->blob_left > cap)
		return chan_violation(ch, "data over its size cap");
	for (;;) {
		rc = chan_header(ch, &kind, &len, deadline_ms);
		if (rc == 0)
			return chan_violation(ch, "the stream ended inside data");
		if (rc == 2)
			ch->broken = true;
		if (rc != 1)
			return rc;
		if (kind == CHAN_KIND_END)
			break;
		if (kind != CHAN_KIND_DATA)
			return chan_violation(ch, "a message inside data");
		if ((int64_t)len > ch->blob_left)
			return chan_violation(ch, "more data than announced");
		while (len) {
			size_t want = len < sizeof(ch->rbuf) ? len : sizeof(ch->rbuf);
			rc = chan_fill(ch, want, deadline_ms);
			if (rc != 1) {
				ch->broken = true;
				return rc == 0 ? chan_violation(ch, "the stream ended inside a frame") : rc;
			}
			if (buf && buf_append(buf, ch->rbuf + ch->roff, want) < 0) {
				ch->broken = true;
				return nbrun__err(ch->ctx, NBRUN_ENOMEM, "out of memory");
			}
			if (fd >= 0 && (rc = fd_write_all(fd, ch->rbuf + ch->roff, want)) < 0) {
				ch->broken = true;
				ch->spool_errno = -rc;
				return nbrun__errno(ch->ctx, NBRUN_EIO, -rc, "cannot spool the sandbox's data");
			}
			ch->roff += want;
			ch->blob_left -= (int64_t)want;
			got += want;
			len -= (uint32_t)want;
		}
	}
	if (ch->blob_left != 0)
		return chan_violation(ch, "less data than announced");
	ch->blob_left = -1;
	ch->blob_end = false;
	return 0;
}
