/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the reader of the live channel (src/lib/channel.c), which
 * takes untrusted frames from the sandbox's agent. The input is what the
 * agent writes, served by a connection in memory; messages and their data
 * are read until the stream ends or the channel refuses it. The first byte
 * picks the size of each read (so frames split anywhere), the cap on data
 * and whether data is kept in a buffer or skipped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-util.h"

struct mem_conn {
	struct nbrun__conn c;
	const uint8_t *data;
	size_t len, off, slice;
};

static ssize_t mem_send(struct nbrun__conn *c, const void *buf, size_t len)
{
	(void)c;
	(void)buf;
	return (ssize_t)len;
}

static ssize_t mem_recv(struct nbrun__conn *c, void *buf, size_t len)
{
	struct mem_conn *m = (struct mem_conn *)c;
	size_t n = m->len - m->off;

	if (n > len)
		n = len;
	if (m->slice && n > m->slice)
		n = m->slice;
	memcpy(buf, m->data + m->off, n);
	m->off += n;
	return (ssize_t)n;
}

static bool mem_pending(struct nbrun__conn *c)
{
	(void)c;
	return false;
}

static void mem_close(struct nbrun__conn *c)
{
	(void)c;
}

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz invariant broken: %s\n", what);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t slices[] = { 0, 1, 3, 8, 13, 512, 4096, 70000 };
	static const uint64_t caps[] = { 0, 16, 4096, 1u << 20 };
	struct mem_conn m = { .c = { mem_send, mem_recv, mem_pending, mem_close, -1, "", 0 } };
	struct nbrun_ctx ctx = { { 0 } };
	struct nbrun__chan ch;
	struct buf b;
	uint64_t cap;
	bool keep;
	int rc;

	if (size < 1)
		return 0;
	m.slice = slices[data[0] & 7];
	cap = caps[(data[0] >> 3) & 3];
	keep = !(data[0] & 32);
	m.data = data + 1;
	m.len = size - 1;
	buf_init(&b, (size_t)cap + 1);
	nbrun__chan_init(&ch, &m.c, &ctx, NULL);
	for (;;) {
		json_t *msg = NULL, *count;

		rc = nbrun__chan_recv(&ch, &msg, 0);
		if (rc != 1) {
			check(msg == NULL, "no message without 1");
			break;
		}
		check(json_is_object(msg) && json_is_string(json_object_get(msg, "type")),
		      "a message is an object with a type");
		count = json_object_get(msg, "blob");
		check(!count || (json_is_integer(count) && json_integer_value(count) >= 0),
		      "a blob is a count");
		/* The caller must read the data first: asking for a message is refused. */
		if (count) {
			json_t *again = NULL;
			check(nbrun__chan_recv(&ch, &again, 0) == NBRUN_EINVAL && !again,
			      "recv with data pending is refused");
		}
		buf_reset(&b);
		rc = nbrun__chan_recv_blob(&ch, keep ? &b : NULL, -1, cap, 0);
		if (rc == 0 && count && keep)
			check((json_int_t)b.len == json_integer_value(count), "data adds up to its count");
		check(b.len <= cap, "data within its cap");
		/* Echo it: the writer splits data into frames the reader takes back. */
		if (rc == 0)
			nbrun__chan_send(&ch, msg, keep && count ? (b.data ? b.data : "") : NULL, b.len, 0);
		json_decref(msg);
		if (rc != 0)
			break;
	}
	check(rc == 0 || rc == NBRUN_EPARSE, "only end of stream or a violation");
	if (rc == NBRUN_EPARSE) {
		check(!strncmp(nbrun_ctx_errmsg(&ctx), "sandbox protocol violation: ", 28),
		      "a violation says so");
		check(ch.broken, "a violation breaks the channel");
		check(nbrun__chan_recv(&ch, &(json_t *){ NULL }, 0) < 0, "nothing after a violation");
	} else {
		check(m.off == m.len, "the end of stream is the end of the input");
	}
	buf_free(&b);
	return 0;
}
