/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the reader of the live channel (src/lib/channel.c), which
 * takes untrusted frames from the sandbox's agent. The input is what the
 * agent writes, served by a connection in memory; messages and their data
 * are read until the stream ends or the channel refuses it. The first byte
 * picks the size of each read (so frames split anywhere), the cap on data,
 * whether data is kept (in a buffer, or spooled to a file) or skipped, and
 * whether the input is the agent's stdout itself or the engine's attach
 * stream carrying it (Docker's multiplexed framing, taken apart by
 * nbrun__demux_recv as for a real sandbox: stdout frames, stderr frames
 * kept as the diagnostic tail).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach-private.h"
#include "fuzz-util.h"

struct mem_conn {
	struct nbrun__conn c;
	const uint8_t *data;
	size_t len, off, slice;
	struct nbrun__demux *dm; /* the input is an attach stream */
};

static ssize_t mem_send(struct nbrun__conn *c, const void *buf, size_t len)
{
	(void)c;
	(void)buf;
	return (ssize_t)len;
}

static ssize_t mem_read(struct mem_conn *m, void *buf, size_t len)
{
	size_t n = m->len - m->off;

	if (n > len)
		n = len;
	if (m->slice && n > m->slice)
		n = m->slice;
	memcpy(buf, m->data + m->off, n);
	m->off += n;
	return (ssize_t)n;
}

static struct mem_conn *mem_of_demux;

static ssize_t mem_fill(struct nbrun__demux *dm, void *buf, size_t len)
{
	(void)dm;
	return mem_read(mem_of_demux, buf, len);
}

static ssize_t mem_recv(struct nbrun__conn *c, void *buf, size_t len)
{
	struct mem_conn *m = (struct mem_conn *)c;

	if (m->dm)
		return nbrun__demux_recv(m->dm, c, buf, len);
	return mem_read(m, buf, len);
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
	static struct nbrun__demux dm;
	struct mem_conn m = { .c = { mem_send, mem_recv, mem_pending, mem_close, -1, "", 0 } };
	struct nbrun_ctx ctx = { { 0 } };
	struct nbrun__chan ch;
	struct buf b;
	uint64_t cap;
	bool keep;
	int rc, spool = -1;

	if (size < 1)
		return 0;
	m.slice = slices[data[0] & 7];
	cap = caps[(data[0] >> 3) & 3];
	keep = !(data[0] & 32);
	m.data = data + 1;
	m.len = size - 1;
	if (keep && (data[0] & 64)) {
		spool = memfd_create("nbrun-fuzz-spool", MFD_CLOEXEC);
		check(spool >= 0, "a spool file");
	}
	if (data[0] & 128) {
		memset(&dm, 0, sizeof(dm));
		dm.fill = mem_fill;
		m.dm = &dm;
		mem_of_demux = &m;
	}
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
		if (spool >= 0)
			check(ftruncate(spool, 0) == 0 && lseek(spool, 0, SEEK_SET) == 0, "the spool emptied");
		rc = nbrun__chan_recv_blob(&ch, keep && spool < 0 ? &b : NULL, spool, cap, 0);
		if (rc == 0 && count && keep && spool < 0)
			check((json_int_t)b.len == json_integer_value(count), "data adds up to its count");
		check(b.len <= cap, "data within its cap");
		if (spool >= 0) {
			struct stat st;
			check(fstat(spool, &st) == 0 && (uint64_t)st.st_size <= cap, "spooled data within its cap");
			if (rc == 0 && count)
				check(st.st_size == json_integer_value(count), "spooled data adds up to its count");
		}
		/* Echo it: the writer splits data into frames the reader takes back. */
		if (rc == 0)
			nbrun__chan_send(&ch, msg, keep && count ? (b.data ? b.data : "") : NULL, b.len, 0);
		json_decref(msg);
		if (rc != 0)
			break;
	}
	check(rc == 0 || rc == NBRUN_EPARSE, "only end of stream or a violation");
	check(m.c.err_len < sizeof(m.c.err_tail) && m.c.err_tail[m.c.err_len] == '\0' &&
	      (m.dm || m.c.err_len == 0), "the stderr tail bounded and terminated");
	if (rc == NBRUN_EPARSE) {
		check(!strncmp(nbrun_ctx_errmsg(&ctx), "sandbox protocol violation: ", 28),
		      "a violation says so");
		check(ch.broken, "a violation breaks the channel");
		check(nbrun__chan_recv(&ch, &(json_t *){ NULL }, 0) < 0, "nothing after a violation");
	} else {
		check(m.off == m.len, "the end of stream is the end of the input");
	}
	if (spool >= 0)
		close(spool);
	buf_free(&b);
	return 0;
}
