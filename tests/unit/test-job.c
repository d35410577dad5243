/* SPDX-License-Identifier: MIT */
/*
 * The job (nbrun__job_run) and the live channel (nbrun__chan_*) against a
 * scripted fake agent, without an engine (environments/jupyter/PROTOCOL.md).
 *
 * The sandbox is built by hand on a test backend whose channel is one end of
 * a socketpair; a thread plays the agent on the other end. It checks what
 * the host sends (put, execute, fetch and their data) and answers from a
 * script: valid frames, broken frames, silence, or a closed stream. cmocka's
 * assertions are not for other threads, so the agent writes the first thing
 * the host did wrong into agent.fail and the test checks it after the join.
 * Every wait in the agent is bounded by poll() timeouts, and every test arms
 * alarm() so that a hang kills the test instead of the suite.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "clock.h"
#include "nbrun-private.h"

/* How long the agent waits for the host before it gives up on the script. */
#define AGENT_WAIT_MS 10000
#define MAX_SEEN 32

/* ---- the notebook --------------------------------------------------------------- */

/* Two code cells around a markdown cell: the agent sends cells 0 and 2. */
static const char NOTEBOOK[] =
	"{\"nbformat\":4,\"nbformat_minor\":5,\"metadata\":{\"kernelspec\":{\"name\":\"python3\"}},"
	"\"cells\":["
	"{\"cell_type\":\"code\",\"id\":\"c0\",\"source\":\"print('hello'); 42\",\"metadata\":{},"
	"\"execution_count\":null,\"outputs\":[]},"
	"{\"cell_type\":\"markdown\",\"id\":\"m1\",\"source\":\"# Title\",\"metadata\":{}},"
	"{\"cell_type\":\"code\",\"id\":\"c2\",\"source\":\"print('world')\",\"metadata\":{},"
	"\"execution_count\":null,\"outputs\":[]}]}";

static const char CELL0[] =
	"{\"cell_type\":\"code\",\"id\":\"c0\",\"source\":\"print('hello'); 42\",\"metadata\":{},"
	"\"execution_count\":1,\"outputs\":["
	"{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"hello\\n\"},"
	"{\"output_type\":\"execute_result\",\"execution_count\":1,\"metadata\":{},"
	"\"data\":{\"text/plain\":\"42\"}}]}";

static const char CELL2[] =
	"{\"cell_type\":\"code\",\"id\":\"c2\",\"source\":\"print('world')\",\"metadata\":{},"
	"\"execution_count\":2,\"outputs\":["
	"{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"world\\n\"}]}";

static const char CELL2_ERROR[] =
	"{\"cell_type\":\"code\",\"id\":\"c2\",\"source\":\"raise ValueError('bad')\",\"metadata\":{},"
	"\"execution_count\":2,\"outputs\":["
	"{\"output_type\":\"error\",\"ename\":\"ValueError\",\"evalue\":\"bad\","
	"\"traceback\":[\"Traceback\",\"ValueError: bad\"]}]}";

static const char CELL2_TIMEOUT[] =
	"{\"cell_type\":\"code\",\"id\":\"c2\",\"source\":\"import time; time.sleep(99)\","
	"\"metadata\":{\"nbrun\":{\"timed_out\":true}},\"execution_count\":2,\"outputs\":["
	"{\"output_type\":\"error\",\"ename\":\"CellTimeoutError\",\"evalue\":\"cell timed out\","
	"\"traceback\":[]}]}";

static const char CELL0_FORGED[] =
	"{\"cell_type\":\"code\",\"id\":\"c0\",\"source\":\"print('hello'); 42\",\"metadata\":{},"
	"\"execution_count\":7,\"outputs\":["
	"{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"forged\\n\"}]}";

static const char META[] = "{\"kernelspec\":{\"name\":\"python3\"},"
			   "\"language_info\":{\"name\":\"python\",\"version\":\"3.12.0\"}}";

static const char OUT_CSV[] = "x,y\n1,2\n";
static const char OUT_CSV_SHA[] = "81bf9fa83c6f7f151bd491a98cd7d933de3965289e3ebd77c6c425f7eaa16392";
static const char DEEP[] = "deep\n";
static const char DEEP_SHA[] = "64896f89fd11190013b70103e603a1c5826e56b7fb7d2197ab279b0690043599";
static const char INPUT[] = "input bytes\n";

/* ---- the fake agent ---------------------------------------------------------------- */

struct agent;
typedef void (*agent_script)(struct agent *a);

struct agent {
	int fd;
	pthread_t th;
	bool running;
	agent_script script;
	int arg;            /* which variant of the script */
	size_t chunk;       /* D frame size the agent sends (any split is valid) */
	char fail[512];     /* the first thing the host did wrong; "" when nothing */
	/* what the host sent */
	char seen[MAX_SEEN][16];
	int n_seen;
	size_t chunks[16];  /* D frame sizes of the last blob received */
	int n_chunks;
	uint64_t last_blob; /* bytes of the last blob received */
	bool blob_ok;       /* the last blob matched the expected pattern (split test) */
	int stop_on_error;  /* the execute's stop_on_error: 1 true, 0 false or absent */
	/* to answer */
	const void *archive;
	size_t archive_len;
};

/* ---- the test backend ------------------------------------------------------------ */

struct fake {
	struct nbrun__sandbox_state st;
	int state_rc;
	const void *tar;   /* what get_archive writes; NULL: NBRUN_ENOTFOUND */
	size_t tar_len;
	int get_archive_calls;
};

/* The socketpair end the host holds. */
struct test_conn {
	struct nbrun__conn c;
};

struct fixture {
	struct nbrun_ctx *ctx;
	struct fake fake;
	struct nbrun__sandbox *sb;
	struct agent agent;
	volatile sig_atomic_t cancel;
	char dir[128];      /* the output directory */
	char in_dir[128];   /* where the input file lives */
	char in_path[200];  /* an input file, in.txt */
	int out_fd;
	struct nbrun_run_options opts;
	struct nbrun_result *result;
	struct nbrun__job job;
	json_t *nb;
	char *nb_text;
	struct nbrun__tar *tar;      /* the channel's archive */
	struct nbrun__tar *fb_tar;   /* the engine's archive (fallback) */
};

static struct fixture F;

static void agent_failf(struct agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void agent_failf(struct agent *a, const char *fmt, ...)
{
	va_list ap;

	if (a->fail[0])
		return;
	va_start(ap, fmt);
	vsnprintf(a->fail, sizeof(a->fail), fmt, ap);
	va_end(ap);
}

static void pause_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Exactly len bytes from the host: true, or false at its end or after AGENT_WAIT_MS. */
static bool agent_read(struct agent *a, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		struct pollfd pfd = { a->fd, POLLIN, 0 };
		ssize_t n;

		if (poll(&pfd, 1, AGENT_WAIT_MS) <= 0)
			return false;
		n = recv(a->fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static bool agent_write(struct agent *a, const void *data, size_t len)
{
	const char *p = data;

	while (len) {
		struct pollfd pfd = { a->fd, POLLOUT, 0 };
		ssize_t n;

		if (poll(&pfd, 1, AGENT_WAIT_MS) <= 0)
			return false;
		n = send(a->fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* A header with any magic, version and kind (broken frames included). */
static bool agent_header(struct agent *a, const char *magic, unsigned char version, char kind,
			 uint32_t len)
{
	unsigned char h[8];

	nbrun__chan_header(h, kind, len);
	h[0] = (unsigned char)magic[0];
	h[1] = (unsigned char)magic[1];
	h[2] = version;
	return agent_write(a, h, sizeof(h));
}

static bool agent_frame(struct agent *a, char kind, const void *data, size_t len)
{
	return agent_header(a, "NB", 1, kind, (uint32_t)len) && (!len || agent_write(a, data, len));
}

/* Data frames of a->chunk bytes, then E. */
static bool agent_blob(struct agent *a, const void *blob, size_t len)
{
	for (size_t off = 0; off < len; off += a->chunk) {
		size_t n = len - off < a->chunk ? len - off : a->chunk;
		if (!agent_frame(a, 'D', (const char *)blob + off, n))
			return false;
	}
	return agent_frame(a, 'E', NULL, 0);
}

/* A message (JSON text); with blob, its "blob" is set and the data follows. */
static bool agent_send(struct agent *a, const char *json, const void *blob, size_t len)
{
	json_t *msg = json_loads(json, 0, NULL);
	char *text;
	bool ok;

	if (!msg) {
		agent_failf(a, "script bug: bad JSON %s", json);
		return false;
	}
	if (blob)
		json_object_set_new(msg, "blob", json_integer((json_int_t)len));
	text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	ok = text && agent_frame(a, 'J', text, strlen(text)) && (!blob || agent_blob(a, blob, len));
	free(text);
	return ok;
}

/* A J frame of exactly this text (valid or not). */
static bool agent_json(struct agent *a, const char *text)
{
	return agent_frame(a, 'J', text, strlen(text));
}

static bool agent_send_str(struct agent *a, const char *json, const char *blob)
{
	return agent_send(a, json, blob, blob ? strlen(blob) : 0);
}

/*
 * The host's next message, checked as the protocol says, with its data in
 * blob (when not NULL). 1, 0 at the host's end, -1 when the host broke the
 * protocol (a->fail says how).
 */
static int agent_recv(struct agent *a, json_t **out, struct buf *blob)
{
	unsigned char h[8];
	uint32_t len;
	char *text;
	json_t *msg, *jb;
	uint64_t got = 0;

	*out = NULL;
	if (!agent_read(a, h, sizeof(h)))
		return 0;
	len = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
	if (h[0] != 'N' || h[1] != 'B' || h[2] != 1 || h[3] != 'J' || len > NBRUN__CHAN_MAX_JSON) {
		agent_failf(a, "host frame header %02x %02x %02x %02x len %u where a message belongs",
			    h[0], h[1], h[2], h[3], len);
		return -1;
	}
	text = malloc(len + 1);
	if (!text || !agent_read(a, text, len)) {
		free(text);
		agent_failf(a, "host message cut");
		return -1;
	}
	msg = json_loadb(text, len, 0, NULL);
	free(text);
	if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "type"))) {
		json_decref(msg);
		agent_failf(a, "host message without a type");
		return -1;
	}
	if (a->n_seen < MAX_SEEN)
		snprintf(a->seen[a->n_seen++], sizeof(a->seen[0]), "%s",
			 json_string_value(json_object_get(msg, "type")));
	jb = json_object_get(msg, "blob");
	a->n_chunks = 0;
	a->last_blob = 0;
	a->blob_ok = true;
	if (jb) {
		if (!json_is_integer(jb) || json_integer_value(jb) < 0) {
			agent_failf(a, "host blob size is not a count");
			json_decref(msg);
			return -1;
		}
		for (;;) {
			static unsigned char data[1 << 16];
			if (!agent_read(a, h, sizeof(h))) {
				agent_failf(a, "host data cut");
				json_decref(msg);
				return -1;
			}
			len = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
			if (h[0] != 'N' || h[1] != 'B' || h[2] != 1 || (h[3] != 'D' && h[3] != 'E') ||
			    len > NBRUN__CHAN_MAX_CHUNK || (h[3] == 'E' && len)) {
				agent_failf(a, "host data frame %c len %u", h[3], len);
				json_decref(msg);
				return -1;
			}
			if (h[3] == 'E')
				break;
			if (a->n_chunks < 16)
				a->chunks[a->n_chunks++] = len;
			while (len) {
				uint32_t n = len < sizeof(data) ? len : sizeof(data);
				if (!agent_read(a, data, n)) {
					agent_failf(a, "host data cut");
					json_decref(msg);
					return -1;
				}
				for (uint32_t k = 0; k < n; k++)
					if (data[k] != (unsigned char)((got + k) * 7 % 251))
						a->blob_ok = false;
				if (blob)
					buf_append(blob, data, n);
				got += n;
				len -= n;
			}
		}
		if (got != (uint64_t)json_integer_value(jb)) {
			agent_failf(a, "host blob of %llu bytes announced as %lld", (unsigned long long)got,
				    (long long)json_integer_value(jb));
			json_decref(msg);
			return -1;
		}
	}
	a->last_blob = got;
	*out = msg;
	return 1;
}

/* The next message must be of this type; its data in blob. */
static json_t *agent_expect(struct agent *a, const char *type, struct buf *blob)
{
	json_t *msg = NULL;
	int rc = agent_recv(a, &msg, blob);

	if (rc != 1) {
		if (rc == 0)
			agent_failf(a, "host ended before sending %s", type);
		return NULL;
	}
	if (strcmp(json_string_value(json_object_get(msg, "type")), type)) {
		agent_failf(a, "host sent %s where %s was expected",
			    json_string_value(json_object_get(msg, "type")), type);
		json_decref(msg);
		return NULL;
	}
	return msg;
}

/* A regular entry name with this content in an uncompressed ustar/pax archive. */
static bool tar_has(const char *tar, size_t len, const char *name, const char *content)
{
	for (size_t off = 0; tar && off + 512 <= len;) {
		const char *h = tar + off;
		char sizebuf[13];
		size_t size;

		if (!h[0])
			return false; /* the end blocks */
		memcpy(sizebuf, h + 124, 12);
		sizebuf[12] = '\0';
		size = (size_t)strtoull(sizebuf, NULL, 8);
		if ((h[156] == '0' || h[156] == '\0') && !strncmp(h, name, 100) && off + 512 + size <= len)
			return size == strlen(content) && !memcmp(h + 512, content, size);
		off += 512 + (size + 511) / 512 * 512;
	}
	return false;
}

/* The put of the input file (when the test gave one), then the execute of the notebook. */
static bool agent_take_run(struct agent *a)
{
	struct buf blob = BUF_INIT(64u << 20);
	json_t *msg;
	bool ok = true;

	if (F.opts.file_count) {
		msg = agent_expect(a, "put", &blob);
		if (!msg)
			ok = false;
		else if (strcmp(json_string_value(json_object_get(msg, "path")) ?: "", "/mnt/data") ||
			 !json_is_string(json_object_get(msg, "id")))
			agent_failf(a, "put without its path or id");
		else if (!tar_has(blob.data, blob.len, "in.txt", INPUT))
			agent_failf(a, "put archive without in.txt");
		else
			ok = agent_send_str(a, "{\"type\":\"stored\",\"id\":\"inputs\",\"path\":\"/mnt/data\",\"files\":1}", NULL);
		json_decref(msg);
		buf_reset(&blob);
	}
	if (ok) {
		msg = agent_expect(a, "execute", &blob);
		if (!msg)
			ok = false;
		else if (!json_is_string(json_object_get(msg, "id")) ||
			 !json_is_integer(json_object_get(msg, "cell_timeout")) ||
			 json_integer_value(json_object_get(msg, "cell_timeout")) < 1 ||
			 !json_is_false(json_object_get(msg, "stream")))
			agent_failf(a, "execute without id, cell_timeout or stream:false");
		else if (blob.len != strlen(F.nb_text) || memcmp(blob.data, F.nb_text, blob.len))
			agent_failf(a, "execute blob is not the notebook (%zu bytes)", blob.len);
		if (msg)
			a->stop_on_error = json_is_true(json_object_get(msg, "stop_on_error"));
		json_decref(msg);
	}
	buf_free(&blob);
	return ok && !a->fail[0];
}

static bool agent_hello(struct agent *a)
{
	return agent_send_str(a, "{\"type\":\"hello\",\"protocol\":1,\"agent\":\"test\",\"kernel\":\"python3\",\"pid\":7}",
			      NULL);
}

static bool agent_cell(struct agent *a, int index, const char *cell)
{
	char m[160];

	snprintf(m, sizeof(m), "{\"type\":\"cell\",\"id\":\"run\",\"cell\":%d,\"status\":\"ok\",\"duration_ms\":3}",
		 index);
	return agent_send_str(a, m, cell);
}

static bool agent_done(struct agent *a, const char *status, const char *message)
{
	char m[400];

	snprintf(m, sizeof(m), "{\"type\":\"done\",\"id\":\"run\",\"status\":\"%s\",\"oom_kills\":0,\"message\":\"%s\"}",
		 status, message);
	return agent_send_str(a, m, META);
}

/* The fetch after done, answered with a->archive (an empty tar when none). */
static bool agent_serve_fetch(struct agent *a)
{
	static const char empty[1024];
	json_t *msg = agent_expect(a, "fetch", NULL);
	char reply[200];
	bool ok;

	if (!msg)
		return false;
	if (strcmp(json_string_value(json_object_get(msg, "path")) ?: "", "/mnt/data") ||
	    !json_is_integer(json_object_get(msg, "max_bytes")) ||
	    json_integer_value(json_object_get(msg, "max_bytes")) <= 0) {
		agent_failf(a, "fetch without path or max_bytes");
		json_decref(msg);
		return false;
	}
	snprintf(reply, sizeof(reply), "{\"type\":\"archive\",\"id\":\"%.64s\",\"path\":\"/mnt/data\",\"truncated\":false}",
		 json_string_value(json_object_get(msg, "id")) ?: "");
	json_decref(msg);
	ok = a->archive ? agent_send(a, reply, a->archive, a->archive_len)
			: agent_send(a, reply, empty, sizeof(empty));
	return ok;
}

/* What the host sends until it closes its end (or AGENT_WAIT_MS of silence). */
static void agent_drain(struct agent *a)
{
	json_t *msg = NULL;

	while (a->fd >= 0 && agent_recv(a, &msg, NULL) == 1) {
		json_decref(msg);
		msg = NULL;
	}
}

/*
 * The agent's end goes away as a dead container's does: nbrun sees the
 * stream end. What nbrun sent that was not read yet (the fetch that follows
 * the notebook) is read first: closing a unix socket with unread data would
 * reset the connection instead, which the engine's attach never does.
 */
static void agent_gone(struct agent *a)
{
	char junk[4096];

	shutdown(a->fd, SHUT_WR);
	for (int i = 0; i < 100; i++) {
		struct pollfd p = { a->fd, POLLIN, 0 };
		if (poll(&p, 1, 100) > 0 && recv(a->fd, junk, sizeof(junk), 0) <= 0)
			break;
	}
	close(a->fd);
	a->fd = -1;
}

static void *agent_main(void *p)
{
	struct agent *a = p;

	a->script(a);
	agent_drain(a);
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	return NULL;
}

static bool agent_saw(const struct agent *a, const char *type)
{
	for (int i = 0; i < a->n_seen; i++)
		if (!strcmp(a->seen[i], type))
			return true;
	return false;
}

/* ---- the test backend and conn ---------------------------------------------------- */

static ssize_t conn_send(struct nbrun__conn *c, const void *buf, size_t len)
{
	ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
	return n;
}

static ssize_t conn_recv(struct nbrun__conn *c, void *buf, size_t len)
{
	ssize_t n = recv(c->fd, buf, len, MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
	return n;
}

static bool conn_pending(struct nbrun__conn *c)
{
	(void)c;
	return false;
}

static void conn_close(struct nbrun__conn *c)
{
	close(c->fd);
	free(c);
}

static struct fake *fake_of(struct nbrun__sandbox *sb)
{
	return sb->backend;
}

static int fake_open(struct nbrun__sandbox *sb)
{
	(void)sb;
	return 0;
}

static void fake_gc(struct nbrun__sandbox *sb)
{
	(void)sb;
}

static int fake_resolve_image(struct nbrun__sandbox *sb, const char *want)
{
	(void)sb;
	(void)want;
	return 0;
}

static int fake_create(struct nbrun__sandbox *sb, const struct nbrun__sandbox_spec *spec)
{
	(void)sb;
	(void)spec;
	return 0;
}

static int fake_start(struct nbrun__sandbox *sb)
{
	(void)sb;
	return 0;
}

static int fake_put_archive(struct nbrun__sandbox *sb, const char *dest, const void *tar, size_t len)
{
	(void)dest;
	(void)tar;
	(void)len;
	/* Inputs go over the channel now. */
	return nbrun__err(sb->ctx, NBRUN_EINVAL, "put_archive must not be used");
}

static int fake_get_archive(struct nbrun__sandbox *sb, const char *src, int fd, uint64_t max, bool *cut)
{
	struct fake *f = fake_of(sb);

	f->get_archive_calls++;
	*cut = false;
	if (strcmp(src, "/mnt/data"))
		return nbrun__err(sb->ctx, NBRUN_EINVAL, "unexpected source %s", src);
	if (!f->tar)
		return nbrun__err(sb->ctx, NBRUN_ENOTFOUND, "no such path in the sandbox: %s", src);
	if (f->tar_len > max)
		return nbrun__err(sb->ctx, NBRUN_EINVAL, "archive over max");
	return fd_write_all(fd, f->tar, f->tar_len) < 0 ? NBRUN_EIO : 0;
}

static int fake_state(struct nbrun__sandbox *sb, struct nbrun__sandbox_state *out)
{
	struct fake *f = fake_of(sb);

	*out = f->st;
	return f->state_rc;
}

static void fake_destroy(struct nbrun__sandbox *sb)
{
	if (sb->conn) {
		sb->conn->close(sb->conn);
		sb->conn = NULL;
	}
}

static void fake_free(struct nbrun__sandbox *sb)
{
	sb->backend = NULL; /* the fixture owns it */
}

static const struct nbrun__sandbox_ops fake_ops = {
	.version = NBRUN__SANDBOX_OPS_VERSION,
	.name = "test",
	.open = fake_open,
	.gc = fake_gc,
	.resolve_image = fake_resolve_image,
	.create = fake_create,
	.start = fake_start,
	.put_archive = fake_put_archive,
	.get_archive = fake_get_archive,
	.state = fake_state,
	.destroy = fake_destroy,
	.free = fake_free,
};

/* ---- fixture ---------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static int setup(void **state)
{
	const char *base = getenv("TMPDIR");
	struct test_conn *tc;
	struct nbrun_run_options init = NBRUN_RUN_OPTIONS_INIT;
	int sv[2], fd;

	alarm(30);
	memset(&F, 0, sizeof(F));
	F.out_fd = -1;
	F.agent.fd = -1;
	F.agent.chunk = NBRUN__CHAN_MAX_CHUNK;
	assert_int_equal(nbrun_ctx_new(&F.ctx), 0);

	/* the sandbox, by hand, its channel one end of a socketpair */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	tc = calloc(1, sizeof(*tc));
	assert_non_null(tc);
	tc->c.send = conn_send;
	tc->c.recv = conn_recv;
	tc->c.pending = conn_pending;
	tc->c.close = conn_close;
	tc->c.fd = sv[0];
	F.agent.fd = sv[1];
	F.sb = calloc(1, sizeof(*F.sb));
	assert_non_null(F.sb);
	F.sb->ops = &fake_ops;
	F.sb->ctx = F.ctx;
	F.sb->cancel = &F.cancel;
	snprintf(F.sb->id, sizeof(F.sb->id), "testjob");
	F.sb->conn = &tc->c;
	F.sb->backend = &F.fake;
	nbrun__chan_init(&F.sb->ch, F.sb->conn, F.ctx, &F.cancel);
	F.fake.st.running = false;
	F.fake.st.exit_code = 0;

	/* the job */
	if (!base || !*base || strlen(base) > 60)
		base = "/tmp";
	snprintf(F.dir, sizeof(F.dir), "%s/nbjob-XXXXXX", base);
	assert_non_null(mkdtemp(F.dir));
	F.out_fd = open(F.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(F.out_fd >= 0);
	/* an input file, elsewhere */
	snprintf(F.in_dir, sizeof(F.in_dir), "%s/nbjobin-XXXXXX", base);
	assert_non_null(mkdtemp(F.in_dir));
	snprintf(F.in_path, sizeof(F.in_path), "%s/in.txt", F.in_dir);
	fd = open(F.in_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(fd_write_all(fd, INPUT, strlen(INPUT)), 0);
	close(fd);
	F.opts = init;
	F.opts.timeout_ms = 10000;
	assert_int_equal(nbrun__result_new(&F.result, "testjob"), 0);
	F.job.ctx = F.ctx;
	F.job.sb = F.sb;
	F.job.opts = &F.opts;
	nbrun__limits_resolve(&F.job.lim, &F.opts.limits);
	F.job.result = F.result;
	F.job.out_fd = F.out_fd;
	F.job.out_dir = F.dir;
	F.job.deadline_ms = clock_mono_ms() + F.opts.timeout_ms;
	F.nb = json_loads(NOTEBOOK, 0, NULL);
	assert_non_null(F.nb);
	F.nb_text = strdup(NOTEBOOK);
	assert_non_null(F.nb_text);
	*state = &F;
	return 0;
}

static void agent_start(agent_script script, int arg)
{
	F.agent.script = script;
	F.agent.arg = arg;
	assert_int_equal(pthread_create(&F.agent.th, NULL, agent_main, &F.agent), 0);
	F.agent.running = true;
}

/* Close the host's end (as destroy does) and wait for the agent. */
static void agent_join(void)
{
	if (F.sb && F.sb->conn)
		F.sb->ops->destroy(F.sb);
	if (F.agent.running) {
		pthread_join(F.agent.th, NULL);
		F.agent.running = false;
	}
}

static int teardown(void **state)
{
	(void)state;
	agent_join();
	if (F.agent.fd >= 0)
		close(F.agent.fd);
	nbrun__job_release(&F.job);
	nbrun__sandbox_free(F.sb);
	nbrun_result_free(F.result);
	nbrun__tar_free(F.tar);
	nbrun__tar_free(F.fb_tar);
	json_decref(F.nb);
	free(F.nb_text);
	if (F.out_fd >= 0)
		close(F.out_fd);
	nftw(F.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	unlink(F.in_path);
	rmdir(F.in_dir);
	nbrun_ctx_free(F.ctx);
	alarm(0);
	return 0;
}

/* An archive of (name, content) pairs; NULL-terminated. */
static struct nbrun__tar *make_tar(const void **data, size_t *len, ...)
{
	struct nbrun__tar *t = NULL;
	const char *name;
	va_list ap;

	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 1 << 20), 0);
	va_start(ap, len);
	while ((name = va_arg(ap, const char *))) {
		const char *content = va_arg(ap, const char *);
		assert_int_equal(nbrun__tar_add_data(t, name, content, strlen(content)), 0);
	}
	va_end(ap);
	assert_int_equal(nbrun__tar_finish(t, data, len), 0);
	return t;
}

static int run_job(void)
{
	return nbrun__job_run(&F.job, F.nb, F.nb_text, strlen(F.nb_text));
}

static void assert_agent_happy(void)
{
	agent_join();
	if (F.agent.fail[0])
		fail_msg("agent: %s (the job's message: %s)", F.agent.fail,
			 F.result && nbrun_result_message(F.result) ? nbrun_result_message(F.result) : "none");
}

static void assert_message_has(const char *needle)
{
	const char *m = nbrun_result_message(F.result);

	if (!m || !strstr(m, needle))
		fail_msg("message \"%s\" lacks \"%s\"", m ? m : "(null)", needle);
}

static void assert_status(enum nbrun_status want)
{
	if (nbrun_result_status(F.result) != want)
		fail_msg("status %s, not %s; message: %s", nbrun_status_name(nbrun_result_status(F.result)),
			 nbrun_status_name(want), nbrun_result_message(F.result) ?: "(null)");
}

static void assert_violation(void)
{
	const char *m = nbrun_result_message(F.result);

	assert_status(NBRUN_STATUS_FAILED);
	if (!m || strncmp(m, "sandbox protocol violation", 26))
		fail_msg("message \"%s\" is not a protocol violation", m ? m : "(null)");
}

static json_t *load_written_notebook(void)
{
	char path[300];
	json_t *nb;

	snprintf(path, sizeof(path), "%s/notebook.ipynb", F.dir);
	nb = json_load_file(path, 0, NULL);
	assert_non_null(nb);
	return nb;
}

static const json_t *written_cell(const json_t *nb, size_t i)
{
	return json_array_get(json_object_get(nb, "cells"), i);
}

/* The files list entry for path, or NULL. */
static const json_t *result_file(const char *path)
{
	const json_t *f;
	size_t i;

	json_array_foreach(json_object_get(F.result->doc, "files"), i, f)
		if (!strcmp(json_string_value(json_object_get(f, "path")) ?: "", path))
			return f;
	return NULL;
}

static void assert_file(const char *path, const char *content, const char *sha)
{
	const json_t *f = result_file(path);
	char full[400], got[256];
	ssize_t n;
	int fd;

	if (!f) {
		char *doc = json_dumps(F.result->doc, JSON_COMPACT);
		print_error("result: %s\n", doc ? doc : "?");
		free(doc);
		fail_msg("%s not in the result's files", path);
	}
	assert_string_equal(json_string_value(json_object_get(f, "sha256")), sha);
	assert_int_equal(json_integer_value(json_object_get(f, "bytes")), strlen(content));
	snprintf(full, sizeof(full), "%s/%s", F.dir, path);
	fd = open(full, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, got, sizeof(got) - 1);
	close(fd);
	assert_true(n >= 0);
	got[n] = '\0';
	assert_string_equal(got, content);
}

/* ---- job: how runs end ----------------------------------------------------------- */

static void script_ok(struct agent *a)
{
	a->chunk = 7; /* any split of the data is valid */
	if (agent_hello(a) && agent_take_run(a) &&
	    agent_send_str(a, "{\"type\":\"ready\",\"kernel_ms\":5,\"preloaded\":[]}", NULL) &&
	    agent_cell(a, 0, CELL0) && agent_cell(a, 2, CELL2) && agent_done(a, "ok", ""))
		agent_serve_fetch(a);
}

/*
 * The whole path: put, execute, cells 0 and 2, done with the kernel's
 * metadata, fetch of /mnt/data named as the agent names it (relative to
 * /mnt/data, PROTOCOL.md "The fetch archive"), an untouched input that is
 * not exported again.
 */
static void job_ok(void **state)
{
	const json_t *c;
	json_t *nb, *orig_md;
	const char *files[1] = { F.in_path };
	const void *tar;
	size_t tar_len;

	(void)state;
	F.opts.files = files;
	F.opts.file_count = 1;
	F.tar = make_tar(&tar, &tar_len, "data/in.txt", INPUT, "data/out.csv", OUT_CSV,
			 "data/sub/deep.csv", DEEP, (const char *)NULL);
	F.agent.archive = tar;
	F.agent.archive_len = tar_len;
	orig_md = json_deep_copy(written_cell(F.nb, 1));
	agent_start(script_ok, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_true(agent_saw(&F.agent, "put"));
	assert_true(agent_saw(&F.agent, "fetch"));
	assert_int_equal(F.fake.get_archive_calls, 0);

	assert_status(NBRUN_STATUS_OK);
	assert_null(nbrun_result_message(F.result));
	assert_string_equal(nbrun_result_stdout(F.result), "hello\nworld\n");
	assert_int_equal(nbrun_result_value_count(F.result), 1);
	assert_string_equal(nbrun_result_value(F.result, 0), "42");

	/* the executed notebook: cells as the agent sent them, markdown untouched */
	nb = load_written_notebook();
	assert_int_equal(json_array_size(json_object_get(nb, "cells")), 3);
	c = written_cell(nb, 0);
	assert_int_equal(json_integer_value(json_object_get(c, "execution_count")), 1);
	assert_int_equal(json_array_size(json_object_get(c, "outputs")), 2);
	/* the markdown cell as it was, but for the host's papermill record */
	assert_true(json_is_object(json_object_get(json_object_get(written_cell(nb, 1), "metadata"), "papermill")));
	json_object_del(json_object_get(written_cell(nb, 1), "metadata"), "papermill");
	assert_true(json_equal((json_t *)written_cell(nb, 1), orig_md));
	c = written_cell(nb, 2);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(c, "outputs"), 0), "text")),
			    "world\n");
	assert_string_equal(json_string_value(json_object_get(
				    json_object_get(json_object_get(nb, "metadata"), "language_info"), "name")),
			    "python");
	json_decref(nb);
	json_decref(orig_md);

	/* /mnt/data: the new files with their hashes, not the untouched input */
	assert_file("files/out.csv", OUT_CSV, OUT_CSV_SHA);
	assert_file("files/sub/deep.csv", DEEP, DEEP_SHA);
	assert_null(result_file("files/in.txt"));
	assert_int_equal(nbrun_result_file_count(F.result), 2);
}

/* The skipped list is as long as the run's max_files, not the default: past it one entry counts the rest. */
static void job_skipped_follows_max_files(void **state)
{
	const void *tar;
	size_t tar_len;
	const json_t *sk;

	(void)state;
	F.opts.max_files = 2;
	F.tar = make_tar(&tar, &tar_len, "data/a", "1", "data/b", "2", "data/c", "3", "data/d", "4",
			 "data/e", "5", (const char *)NULL);
	F.agent.archive = tar;
	F.agent.archive_len = tar_len;
	agent_start(script_ok, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_OK);
	assert_int_equal(nbrun_result_file_count(F.result), 2);
	sk = json_object_get(F.result->doc, "skipped");
	assert_int_equal(json_array_size(sk), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(sk, 0), "path")), "c");
	assert_string_equal(json_string_value(json_object_get(json_array_get(sk, 0), "reason")),
			    "over the export cap");
	assert_string_equal(json_string_value(json_object_get(json_array_get(sk, 2), "path")), "...");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(sk, 2), "count")), 1);
}

/* Names outside the top directory (PROTOCOL.md: everything below data/) are not exported. */
static void job_fetch_outside_top(void **state)
{
	const void *tar;
	size_t tar_len;

	(void)state;
	F.tar = make_tar(&tar, &tar_len, "out.csv", OUT_CSV, "data/sub/deep.csv", DEEP,
			 (const char *)NULL);
	F.agent.archive = tar;
	F.agent.archive_len = tar_len;
	agent_start(script_ok, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_OK);
	assert_null(result_file("files/out.csv"));
	assert_file("files/sub/deep.csv", DEEP, DEEP_SHA);
	assert_int_equal(nbrun_result_file_count(F.result), 1);
}

static void script_error(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0) &&
	    agent_send_str(a, "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"status\":\"error\",\"duration_ms\":1}",
			   CELL2_ERROR) &&
	    agent_done(a, "error", ""))
		agent_serve_fetch(a);
}

static void job_cell_error(void **state)
{
	const char *name = NULL, *value = NULL;

	(void)state;
	agent_start(script_error, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_ERROR);
	assert_int_equal(nbrun_result_error(F.result, &name, &value, NULL), 1);
	assert_string_equal(name, "ValueError");
	assert_string_equal(value, "bad");
	assert_string_equal(nbrun_result_stdout(F.result), "hello\n");
}

/* IPython answers a line magic it does not know with an execute_reply of
 * status error and no error output (only a line on stderr). */
static const char CELL2_MAGIC[] =
	"{\"cell_type\":\"code\",\"id\":\"c2\",\"source\":\"%undefined_magic_xyz\",\"metadata\":{},"
	"\"execution_count\":2,\"outputs\":["
	"{\"output_type\":\"stream\",\"name\":\"stderr\",\"text\":\"UsageError: Line magic function "
	"`%undefined_magic_xyz` not found.\\n\"}]}";

static void script_reply_error(struct agent *a)
{
	/* arg 1: an older agent, whose cell message names no error */
	const char *with = "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"status\":\"error\",\"duration_ms\":1,"
			   "\"ename\":\"UsageError\",\"evalue\":\"Line magic function `%undefined_magic_xyz` not found.\"}";
	const char *without = "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"status\":\"error\",\"duration_ms\":1}";

	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0) &&
	    agent_send_str(a, a->arg ? without : with, CELL2_MAGIC) &&
	    agent_done(a, "error", "cell 2 raised UsageError"))
		agent_serve_fetch(a);
}

/* A cell whose execute_reply said error is an error, whatever its outputs. */
static void job_reply_error_without_output(void **state)
{
	const char *name = NULL, *value = NULL, *tb = NULL;
	const json_t *e;

	(void)state;
	agent_start(script_reply_error, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_ERROR);
	assert_int_equal(nbrun_result_error(F.result, &name, &value, &tb), 1);
	assert_string_equal(name, "UsageError");
	assert_string_equal(value, "Line magic function `%undefined_magic_xyz` not found.");
	e = json_object_get(F.result->doc, "error");
	assert_int_equal(json_integer_value(json_object_get(e, "cell")), 2);
	assert_string_equal(nbrun_result_stderr(F.result),
			    "UsageError: Line magic function `%undefined_magic_xyz` not found.\n");
}

static void job_reply_error_older_agent(void **state)
{
	const char *name = NULL;

	(void)state;
	agent_start(script_reply_error, 1);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_ERROR);
	assert_int_equal(nbrun_result_error(F.result, &name, NULL, NULL), 1);
	assert_string_equal(name, "UsageError");
}

/* done says error although no cell message did: still an error. */
static void script_done_error_only(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0) &&
	    agent_cell(a, 2, CELL2) && agent_done(a, "error", "cell 2 raised SystemError"))
		agent_serve_fetch(a);
}

static void job_done_error_only(void **state)
{
	(void)state;
	agent_start(script_done_error_only, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_ERROR);
	assert_int_equal(nbrun_result_error(F.result, NULL, NULL, NULL), 1);
}

/*
 * By default a run stops at the first cell that raises (papermill): the
 * execute asks for it, and the written notebook gets papermill's two
 * error-marker cells; with allow_errors neither.
 */
static void check_stop_on_error(int allow)
{
	const json_t *c;
	json_t *nb;

	F.opts.allow_errors = allow;
	agent_start(script_error, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_int_equal(F.agent.stop_on_error, !F.opts.allow_errors);
	assert_status(NBRUN_STATUS_ERROR);
	/* the result counts the cells of the notebook run */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(F.result->doc, "error"), "cell")), 2);
	nb = load_written_notebook();
	if (F.opts.allow_errors) {
		assert_int_equal(json_array_size(json_object_get(nb, "cells")), 3);
	} else {
		assert_int_equal(json_array_size(json_object_get(nb, "cells")), 5);
		c = written_cell(nb, 0);
		assert_string_equal(json_string_value(json_object_get(c, "cell_type")), "markdown");
		assert_string_equal(json_string_value(json_array_get(json_object_get(json_object_get(c, "metadata"), "tags"), 0)),
				    "papermill-error-cell-tag");
		assert_non_null(strstr(json_string_value(json_object_get(c, "source")), "In [2]</a>"));
		c = written_cell(nb, 3);
		assert_non_null(strstr(json_string_value(json_object_get(c, "source")), "id=\"papermill-error-cell\""));
		assert_string_equal(json_string_value(json_object_get(written_cell(nb, 4), "id")), "c2");
	}
	json_decref(nb);
}

/* metadata.papermill as papermill writes it: the notebook's times and
 * exception flag, each cell's times and status. */
static void job_papermill_metadata(void **state)
{
	const json_t *pm, *c;
	json_t *nb;

	(void)state;
	agent_start(script_error, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	nb = load_written_notebook();
	pm = json_object_get(json_object_get(nb, "metadata"), "papermill");
	assert_true(json_is_object(pm));
	assert_true(json_is_string(json_object_get(pm, "start_time")));
	assert_true(json_is_string(json_object_get(pm, "end_time")));
	assert_true(json_is_real(json_object_get(pm, "duration")));
	assert_true(json_is_true(json_object_get(pm, "exception")));
	assert_true(json_is_object(json_object_get(pm, "parameters")));
	assert_non_null(strstr(json_string_value(json_object_get(pm, "output_path")), "/notebook.ipynb"));
	/* cells: 0 top marker, 1 code ok, 2 markdown, 3 anchor marker, 4 the cell that raised */
	c = json_object_get(json_object_get(written_cell(nb, 1), "metadata"), "papermill");
	assert_string_equal(json_string_value(json_object_get(c, "status")), "completed");
	assert_true(json_is_false(json_object_get(c, "exception")));
	assert_true(json_real_value(json_object_get(c, "duration")) > 0.0029 &&
		    json_real_value(json_object_get(c, "duration")) < 0.0031);
	c = json_object_get(json_object_get(written_cell(nb, 2), "metadata"), "papermill");
	assert_string_equal(json_string_value(json_object_get(c, "status")), "completed");
	c = json_object_get(json_object_get(written_cell(nb, 4), "metadata"), "papermill");
	assert_string_equal(json_string_value(json_object_get(c, "status")), "failed");
	assert_true(json_is_true(json_object_get(c, "exception")));
	json_decref(nb);
}

static void job_stop_on_error(void **state)
{
	(void)state;
	check_stop_on_error(0);
}

static void job_allow_errors(void **state)
{
	(void)state;
	check_stop_on_error(1);
}

static const char CELL2_EXIT[] =
	"{\"cell_type\":\"code\",\"id\":\"c2\",\"source\":\"import sys; sys.exit()\",\"metadata\":{},"
	"\"execution_count\":2,\"outputs\":["
	"{\"output_type\":\"error\",\"ename\":\"SystemExit\",\"evalue\":\"\","
	"\"traceback\":[\"An exception has occurred, use %tb to see the full traceback.\",\"SystemExit\"]}]}";

static void script_clean_exit(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0) &&
	    agent_send_str(a, "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"status\":\"error\",\"duration_ms\":1,"
			      "\"ename\":\"SystemExit\",\"evalue\":\"\"}", CELL2_EXIT) &&
	    agent_done(a, "error", "cell 2 raised SystemExit"))
		agent_serve_fetch(a);
}

/* sys.exit() ends the notebook as a success (papermill): no error, no markers. */
static void job_clean_exit(void **state)
{
	json_t *nb;

	(void)state;
	agent_start(script_clean_exit, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_OK);
	assert_int_equal(nbrun_result_error(F.result, NULL, NULL, NULL), 0);
	nb = load_written_notebook();
	assert_int_equal(json_array_size(json_object_get(nb, "cells")), 3);
	json_decref(nb);
}

static void script_cell_timeout(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0) &&
	    agent_send_str(a, "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"status\":\"timeout\",\"duration_ms\":1000}",
			   CELL2_TIMEOUT) &&
	    agent_done(a, "timeout", ""))
		agent_serve_fetch(a);
}

static void job_cell_timeout(void **state)
{
	(void)state;
	agent_start(script_cell_timeout, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_TIMEOUT);
	assert_message_has("cell 2");
	assert_message_has("cell timeout");
	assert_string_equal(nbrun_result_stdout(F.result), "hello\n");
}

static void script_dead(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0) &&
	    agent_done(a, "dead", "Kernel died: Segmentation fault"))
		agent_serve_fetch(a);
}

static void job_kernel_dead(void **state)
{
	json_t *nb;

	(void)state;
	agent_start(script_dead, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_FAILED);
	assert_message_has("stopped early");
	assert_message_has("Kernel died: Segmentation fault");
	assert_string_equal(nbrun_result_stdout(F.result), "hello\n");
	nb = load_written_notebook();
	assert_int_equal(json_array_size(json_object_get(written_cell(nb, 0), "outputs")), 2);
	assert_int_equal(json_array_size(json_object_get(written_cell(nb, 2), "outputs")), 0);
	json_decref(nb);
}

static void script_gone(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0))
		agent_gone(a);
}

/* The agent dies after cell 0: outputs kept, /mnt/data through the engine. */
static void job_agent_gone(void **state)
{
	const void *tar;
	size_t tar_len;

	(void)state;
	F.fb_tar = make_tar(&tar, &tar_len, "data/out.csv", OUT_CSV, (const char *)NULL);
	F.fake.tar = tar;
	F.fake.tar_len = tar_len;
	snprintf(F.sb->conn->err_tail, sizeof(F.sb->conn->err_tail), "agent: killed by signal 9");
	agent_start(script_gone, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	/* the fetch went out with the notebook; the files came through the engine */
	assert_int_equal(F.fake.get_archive_calls, 1);
	assert_status(NBRUN_STATUS_FAILED);
	assert_message_has("stopped early");
	assert_message_has("agent: killed by signal 9");
	assert_string_equal(nbrun_result_stdout(F.result), "hello\n");
	assert_file("files/out.csv", OUT_CSV, OUT_CSV_SHA);
}

/* The same, and the engine says the OOM killer ended the container. */
static void job_agent_gone_oom(void **state)
{
	(void)state;
	F.fake.st.oom = true;
	F.fake.st.exit_code = 137;
	agent_start(script_gone, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_OOM);
	assert_string_equal(nbrun_result_stdout(F.result), "hello\n");
}

static void script_hello_then_silence(struct agent *a)
{
	if (agent_hello(a))
		agent_take_run(a);
}

static void job_deadline(void **state)
{
	uint64_t t0;

	(void)state;
	F.opts.timeout_ms = 300;
	F.job.deadline_ms = clock_mono_ms() + 300;
	agent_start(script_hello_then_silence, 0);
	t0 = clock_mono_ms();
	assert_int_equal(run_job(), 0);
	assert_true(clock_mono_ms() - t0 < 3000);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_TIMEOUT);
	assert_message_has("deadline");
	/* the fetch went out with the notebook; the files came through the engine */
	assert_int_equal(F.fake.get_archive_calls, 1); /* NBRUN_ENOTFOUND: no files, no crash */
	assert_int_equal(nbrun_result_file_count(F.result), 0);
}

static void script_cancel(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a)) {
		pause_ms(150);
		F.cancel = 1;
	}
}

static void job_cancel(void **state)
{
	uint64_t t0;

	(void)state;
	agent_start(script_cancel, 0);
	t0 = clock_mono_ms();
	assert_int_equal(run_job(), NBRUN_ECANCELLED);
	assert_true(clock_mono_ms() - t0 < 3000);
	assert_agent_happy();
}

static void script_protocol(struct agent *a)
{
	if (agent_send_str(a, "{\"type\":\"hello\",\"protocol\":2,\"agent\":\"next\",\"kernel\":\"python3\",\"pid\":7}",
			   NULL))
		agent_take_run(a);
}

static void job_hello_wrong_protocol(void **state)
{
	(void)state;
	agent_start(script_protocol, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_FAILED);
	assert_message_has("protocol 2");
	assert_message_has("nbrun 1");
}

static void script_fatal_error(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a))
		agent_send_str(a, "{\"type\":\"error\",\"id\":\"run\",\"message\":\"not a notebook\",\"fatal\":false}",
			       NULL);
}

/* The agent refuses the execute: failed with its reason. */
static void job_agent_refuses(void **state)
{
	(void)state;
	agent_start(script_fatal_error, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_FAILED);
	assert_message_has("not a notebook");
}

/* ---- job: what the agent may not do ------------------------------------------------ */

enum violation {
	V_MAGIC,
	V_VERSION,
	V_KIND,
	V_JSON_OVER_CAP,
	V_DATA_OUTSIDE,
	V_END_OUTSIDE,
	V_SHORT_BLOB_THEN_JSON,
	V_SHORT_BLOB_THEN_END,
	V_MORE_DATA,
	V_CHUNK_OVER_CAP,
	V_CELL_MARKDOWN,
	V_CELL_OUT_OF_RANGE,
	V_CELL_NEGATIVE,
	V_CELL_INDEX_NOT_INT,
	V_CELL_NOT_CODE,
	V_CELL_NOT_OBJECT,
	V_CELL_NOT_JSON,
	V_CELL_OVER_CAP,
	V_NOT_OBJECT,
	V_NO_TYPE,
	V_TYPE_NOT_STRING,
	V_NOT_JSON,
	V_BLOB_NEGATIVE,
	V_CUT_FRAME,
	V_DONE_META_NOT_JSON,
	V_DONE_DATA_CUT,
};

/* Hello, execute taken, cell 0, then the broken thing. */
static void script_violation(struct agent *a)
{
	char m[200];

	if (!agent_hello(a) || !agent_take_run(a) || !agent_cell(a, 0, CELL0))
		return;
	switch ((enum violation)a->arg) {
	case V_MAGIC:
		(void)(agent_header(a, "XB", 1, 'J', 2) && agent_write(a, "{}", 2));
		break;
	case V_VERSION:
		(void)(agent_header(a, "NB", 2, 'J', 2) && agent_write(a, "{}", 2));
		break;
	case V_KIND:
		agent_header(a, "NB", 1, 'Q', 0);
		break;
	case V_JSON_OVER_CAP:
		/* the header is enough: the host must refuse before reading */
		agent_header(a, "NB", 1, 'J', NBRUN__CHAN_MAX_JSON + 1);
		break;
	case V_DATA_OUTSIDE:
		agent_frame(a, 'D', "abc", 3);
		break;
	case V_END_OUTSIDE:
		agent_frame(a, 'E', NULL, 0);
		break;
	case V_SHORT_BLOB_THEN_JSON:
		(void)(agent_json(a, "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"blob\":100}") &&
		       agent_frame(a, 'D', CELL2, 10) && agent_json(a, "{\"type\":\"pong\"}"));
		break;
	case V_SHORT_BLOB_THEN_END:
		(void)(agent_json(a, "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"blob\":100}") &&
		       agent_frame(a, 'D', CELL2, 10) && agent_frame(a, 'E', NULL, 0));
		break;
	case V_MORE_DATA:
		(void)(agent_json(a, "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"blob\":5}") &&
		       agent_frame(a, 'D', CELL2, 10) && agent_frame(a, 'E', NULL, 0));
		break;
	case V_CHUNK_OVER_CAP:
		(void)(agent_send_str(a, "{\"type\":\"future\",\"blob\":2000000}", NULL) &&
			agent_header(a, "NB", 1, 'D', NBRUN__CHAN_MAX_CHUNK + 1));
		break;
	case V_CELL_MARKDOWN:
		agent_cell(a, 1, CELL2);
		break;
	case V_CELL_OUT_OF_RANGE:
		agent_cell(a, 3, CELL2);
		break;
	case V_CELL_NEGATIVE:
		agent_cell(a, -1, CELL2);
		break;
	case V_CELL_INDEX_NOT_INT:
		agent_send_str(a, "{\"type\":\"cell\",\"id\":\"run\",\"cell\":\"2\",\"status\":\"ok\"}", CELL2);
		break;
	case V_CELL_NOT_CODE:
		agent_cell(a, 2, "{\"cell_type\":\"markdown\",\"source\":\"<script>\",\"metadata\":{}}");
		break;
	case V_CELL_NOT_OBJECT:
		agent_cell(a, 2, "[1,2,3]");
		break;
	case V_CELL_NOT_JSON:
		agent_cell(a, 2, "{\"cell_type\":\"code\",");
		break;
	case V_CELL_OVER_CAP:
		/* the announced size alone is over the notebook cap (4 KiB here) */
		snprintf(m, sizeof(m), "{\"type\":\"cell\",\"id\":\"run\",\"cell\":2,\"blob\":%u}", 1u << 30);
		agent_json(a, m);
		break;
	case V_NOT_OBJECT:
		agent_json(a, "[\"done\"]");
		break;
	case V_NO_TYPE:
		agent_json(a, "{\"status\":\"ok\"}");
		break;
	case V_TYPE_NOT_STRING:
		agent_json(a, "{\"type\":3}");
		break;
	case V_NOT_JSON:
		agent_json(a, "{\"type\":");
		break;
	case V_BLOB_NEGATIVE:
		agent_json(a, "{\"type\":\"cell\",\"cell\":2,\"blob\":-1}");
		break;
	case V_CUT_FRAME:
		/* a frame announced longer than what comes before the end */
		(void)(agent_header(a, "NB", 1, 'J', 50) && agent_write(a, "{\"type\":\"done\"", 14));
		agent_gone(a);
		break;
	case V_DONE_META_NOT_JSON:
		/* a done whose data is broken: the execution did not end well */
		agent_send_str(a, "{\"type\":\"done\",\"id\":\"run\",\"status\":\"ok\",\"oom_kills\":0}", "{\"lang");
		break;
	case V_DONE_DATA_CUT:
		(void)(agent_json(a, "{\"type\":\"done\",\"id\":\"run\",\"status\":\"ok\",\"blob\":100}") &&
		       agent_frame(a, 'D', META, 10) && agent_json(a, "{\"type\":\"pong\"}"));
		break;
	}
}

static void check_violation(enum violation v)
{
	if (v == V_CELL_OVER_CAP)
		F.job.lim.max_notebook_bytes = 4096;
	agent_start(script_violation, (int)v);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_violation();
	/* what came before is kept; the channel is not trusted for /mnt/data */
	assert_string_equal(nbrun_result_stdout(F.result), "hello\n");
	/* the fetch went out with the notebook; the files came through the engine */
	assert_int_equal(F.fake.get_archive_calls, 1);
}

#define VIOLATION(fn, v)                 \
	static void fn(void **state)     \
	{                                \
		(void)state;             \
		check_violation(v);      \
	}
VIOLATION(violation_bad_magic, V_MAGIC)
VIOLATION(violation_wrong_version, V_VERSION)
VIOLATION(violation_unknown_kind, V_KIND)
VIOLATION(violation_json_over_cap, V_JSON_OVER_CAP)
VIOLATION(violation_data_outside_message, V_DATA_OUTSIDE)
VIOLATION(violation_end_outside_message, V_END_OUTSIDE)
VIOLATION(violation_short_blob_then_json, V_SHORT_BLOB_THEN_JSON)
VIOLATION(violation_short_blob_then_end, V_SHORT_BLOB_THEN_END)
VIOLATION(violation_more_data_than_announced, V_MORE_DATA)
VIOLATION(violation_chunk_over_cap, V_CHUNK_OVER_CAP)
VIOLATION(violation_cell_markdown, V_CELL_MARKDOWN)
VIOLATION(violation_cell_out_of_range, V_CELL_OUT_OF_RANGE)
VIOLATION(violation_cell_negative, V_CELL_NEGATIVE)
VIOLATION(violation_cell_index_not_integer, V_CELL_INDEX_NOT_INT)
VIOLATION(violation_cell_not_code, V_CELL_NOT_CODE)
VIOLATION(violation_cell_not_object, V_CELL_NOT_OBJECT)
VIOLATION(violation_cell_not_json, V_CELL_NOT_JSON)
VIOLATION(violation_cell_over_cap, V_CELL_OVER_CAP)
VIOLATION(violation_not_object, V_NOT_OBJECT)
VIOLATION(violation_no_type, V_NO_TYPE)
VIOLATION(violation_type_not_string, V_TYPE_NOT_STRING)
VIOLATION(violation_not_json, V_NOT_JSON)
VIOLATION(violation_blob_negative, V_BLOB_NEGATIVE)
VIOLATION(violation_cut_frame, V_CUT_FRAME)
VIOLATION(violation_done_meta_not_json, V_DONE_META_NOT_JSON)
VIOLATION(violation_done_data_cut, V_DONE_DATA_CUT)

/* The markdown cell of a violation is left as it was in the written notebook. */
static void violation_markdown_untouched(void **state)
{
	json_t *nb, *orig_md = json_deep_copy(written_cell(F.nb, 1));

	(void)state;
	agent_start(script_violation, V_CELL_MARKDOWN);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_violation();
	nb = load_written_notebook();
	json_object_del(json_object_get(written_cell(nb, 1), "metadata"), "papermill");
	assert_true(json_equal((json_t *)written_cell(nb, 1), orig_md));
	json_decref(nb);
	json_decref(orig_md);
}

static void script_unknown(struct agent *a)
{
	static const char output[] =
		"{\"type\":\"output\",\"id\":\"run\",\"cell\":0,\"output\":"
		"{\"output_type\":\"stream\",\"name\":\"stdout\",\"text\":\"streamed\\n\"}}";

	if (agent_hello(a) && agent_take_run(a) &&
	    agent_send_str(a, "{\"type\":\"future\",\"x\":[1,2]}", NULL) &&
	    agent_send_str(a, "{\"type\":\"future-with-data\"}", "opaque bytes the host skips") &&
	    agent_send_str(a, output, NULL) &&
	    agent_send_str(a, "{\"type\":\"output\",\"id\":\"run\",\"cell\":0}", "{\"output_type\":\"stream\"}") &&
	    agent_send_str(a, "{\"type\":\"pong\",\"id\":\"p\"}", NULL) &&
	    agent_send_str(a, "{\"type\":\"error\",\"id\":\"other\",\"message\":\"unknown type x\",\"fatal\":false}",
			   NULL) &&
	    agent_cell(a, 0, CELL0) &&
	    agent_send_str(a, "{\"type\":\"future\",\"blob_like\":\"no\"}", "") && /* an empty blob */
	    agent_cell(a, 2, CELL2) && agent_done(a, "ok", "")) {
		/* during the fetch too */
		json_t *msg = agent_expect(a, "fetch", NULL);
		json_decref(msg);
		if (msg && agent_send_str(a, "{\"type\":\"future\"}", "more opaque bytes")) {
			static const char empty[1024];
			agent_send(a, "{\"type\":\"archive\",\"id\":\"data\",\"path\":\"/mnt/data\",\"truncated\":false}",
				   empty, sizeof(empty));
		}
	}
}

static void job_unknown_types_skipped(void **state)
{
	(void)state;
	agent_start(script_unknown, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_OK);
	assert_null(nbrun_result_message(F.result));
	/* the streamed output is not an output of the result: the cell message is */
	assert_string_equal(nbrun_result_stdout(F.result), "hello\nworld\n");
}

static void script_forged(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_done(a, "ok", "") &&
	    agent_cell(a, 0, CELL0_FORGED))
		agent_serve_fetch(a);
}

/* A done before any cell ends the execution; a cell after it is not taken. */
static void job_cell_after_done_ignored(void **state)
{
	json_t *nb;

	(void)state;
	agent_start(script_forged, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_OK);
	assert_string_equal(nbrun_result_stdout(F.result), "");
	nb = load_written_notebook();
	assert_int_equal(json_array_size(json_object_get(written_cell(nb, 0), "outputs")), 0);
	assert_true(json_is_null(json_object_get(written_cell(nb, 0), "execution_count")));
	json_decref(nb);
}

static void script_same_cell_twice(struct agent *a)
{
	if (agent_hello(a) && agent_take_run(a) && agent_cell(a, 0, CELL0) &&
	    agent_cell(a, 0, CELL0_FORGED) && agent_done(a, "ok", ""))
		agent_serve_fetch(a);
}

/* A cell sent twice replaces itself; the other cells stay as they were. */
static void job_cell_sent_twice(void **state)
{
	json_t *nb;

	(void)state;
	agent_start(script_same_cell_twice, 0);
	assert_int_equal(run_job(), 0);
	assert_agent_happy();
	assert_status(NBRUN_STATUS_OK);
	assert_string_equal(nbrun_result_stdout(F.result), "forged\n");
	nb = load_written_notebook();
	assert_int_equal(json_array_size(json_object_get(nb, "cells")), 3);
	assert_int_equal(json_array_size(json_object_get(written_cell(nb, 2), "outputs")), 0);
	json_decref(nb);
}

/* ---- the sandbox waiting for its agent ----------------------------------------- */

static void script_ready(struct agent *a)
{
	(void)(agent_hello(a) &&
	       (a->arg != 1 || agent_send_str(a, "{\"type\":\"future\",\"x\":1}", NULL)) &&
	       (a->arg != 2 || agent_send_str(a, "{\"type\":\"future\"}", "opaque")) &&
	       agent_send_str(a, "{\"type\":\"ready\",\"kernel_ms\":5,\"preloaded\":[\"numpy\"]}", NULL));
}

static void ready_check(int variant)
{
	agent_start(script_ready, variant);
	assert_int_equal(nbrun__sandbox_wait_ready(F.sb, clock_mono_ms() + 10000), 0);
	assert_true(F.sb->ready);
	/* nothing is left unread: the sandbox is idle */
	pause_ms(50);
	assert_true(nbrun__sandbox_idle(F.sb));
	assert_agent_happy();
}

static void sandbox_ready(void **state)
{
	(void)state;
	ready_check(0);
}

static void sandbox_ready_skips_unknown(void **state)
{
	(void)state;
	ready_check(1);
}

/* PROTOCOL.md: the host ignores types it does not know, data included. */
static void sandbox_ready_skips_unknown_with_data(void **state)
{
	(void)state;
	ready_check(2);
}

static void sandbox_ready_wrong_protocol(void **state)
{
	(void)state;
	agent_start(script_protocol, 0);
	assert_int_equal(nbrun__sandbox_wait_ready(F.sb, clock_mono_ms() + 10000), NBRUN_ENOIMAGE);
	assert_non_null(strstr(nbrun_ctx_errmsg(F.ctx), "protocol 2"));
	assert_false(F.sb->ready);
}

static void sandbox_ready_agent_gone(void **state)
{
	(void)state;
	snprintf(F.sb->conn->err_tail, sizeof(F.sb->conn->err_tail), "python3: not found");
	agent_start(agent_gone, 0);
	assert_int_equal(nbrun__sandbox_wait_ready(F.sb, clock_mono_ms() + 10000), NBRUN_EENGINE);
	assert_non_null(strstr(nbrun_ctx_errmsg(F.ctx), "python3: not found"));
}

/* ---- the channel alone ------------------------------------------------------------- */

#define SPLIT_BYTES (5u << 19) /* 2.5 MiB */

static void script_take_split(struct agent *a)
{
	json_t *msg = agent_expect(a, "put", NULL);

	if (msg && json_integer_value(json_object_get(msg, "blob")) != SPLIT_BYTES)
		agent_failf(a, "blob count %lld", (long long)json_integer_value(json_object_get(msg, "blob")));
	json_decref(msg);
}

static void chan_send_splits_blob(void **state)
{
	unsigned char *blob = malloc(SPLIT_BYTES);
	json_t *msg;

	(void)state;
	assert_non_null(blob);
	for (size_t i = 0; i < SPLIT_BYTES; i++)
		blob[i] = (unsigned char)(i * 7 % 251);
	agent_start(script_take_split, 0);
	msg = json_pack("{s:s}", "type", "put");
	assert_int_equal(nbrun__chan_send(&F.sb->ch, msg, blob, SPLIT_BYTES, clock_mono_ms() + 10000), 0);
	json_decref(msg);
	free(blob);
	assert_agent_happy();
	assert_int_equal(F.agent.n_chunks, 3);
	assert_int_equal(F.agent.chunks[0], NBRUN__CHAN_MAX_CHUNK);
	assert_int_equal(F.agent.chunks[1], NBRUN__CHAN_MAX_CHUNK);
	assert_int_equal(F.agent.chunks[2], SPLIT_BYTES - 2 * NBRUN__CHAN_MAX_CHUNK);
	assert_int_equal(F.agent.last_blob, SPLIT_BYTES);
	assert_true(F.agent.blob_ok);
}

static void script_empty_blob(struct agent *a)
{
	json_t *msg = agent_expect(a, "put", NULL);

	if (msg && (json_integer_value(json_object_get(msg, "blob")) != 0 || a->n_chunks != 0))
		agent_failf(a, "an empty blob is announced 0 and sent as E alone");
	json_decref(msg);
}

static void chan_send_empty_blob(void **state)
{
	json_t *msg = json_pack("{s:s}", "type", "put");

	(void)state;
	agent_start(script_empty_blob, 0);
	assert_int_equal(nbrun__chan_send(&F.sb->ch, msg, "", 0, clock_mono_ms() + 10000), 0);
	json_decref(msg);
	assert_agent_happy();
}

static void script_blob_100(struct agent *a)
{
	static char data[100];

	memset(data, 'z', sizeof(data));
	(void)(agent_send(a, "{\"type\":\"archive\",\"id\":\"x\"}", data, sizeof(data)) &&
		agent_send_str(a, "{\"type\":\"pong\",\"id\":\"y\"}", NULL));
}

static void chan_recv_blob_over_cap(void **state)
{
	struct buf b = BUF_INIT(1 << 20);
	json_t *msg = NULL;
	uint64_t dl = clock_mono_ms() + 10000;

	(void)state;
	agent_start(script_blob_100, 0);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, dl), 1);
	assert_string_equal(json_string_value(json_object_get(msg, "type")), "archive");
	json_decref(msg);
	assert_int_equal(nbrun__chan_recv_blob(&F.sb->ch, &b, -1, 99, dl), NBRUN_EPARSE);
	assert_int_equal(strncmp(nbrun_ctx_errmsg(F.ctx), "sandbox protocol violation", 26), 0);
	assert_int_equal(b.len, 0); /* refused before anything was read */
	/* broken for good */
	assert_true(nbrun__chan_recv(&F.sb->ch, &msg, dl) < 0);
	assert_null(msg);
	buf_free(&b);
	assert_agent_happy();
}

static void chan_recv_with_blob_pending(void **state)
{
	struct buf b = BUF_INIT(1 << 20);
	json_t *msg = NULL;
	uint64_t dl = clock_mono_ms() + 10000;

	(void)state;
	agent_start(script_blob_100, 0);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, dl), 1);
	json_decref(msg);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, dl), NBRUN_EINVAL);
	assert_null(msg);
	/* the caller's mistake does not break the channel */
	assert_int_equal(nbrun__chan_recv_blob(&F.sb->ch, &b, -1, 100, dl), 0);
	assert_int_equal(b.len, 100);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, dl), 1);
	assert_string_equal(json_string_value(json_object_get(msg, "type")), "pong");
	assert_int_equal(nbrun__chan_recv_blob(&F.sb->ch, &b, -1, 100, dl), 0); /* no blob: nothing */
	json_decref(msg);
	buf_free(&b);
	assert_agent_happy();
}

static void script_byte_by_byte(struct agent *a)
{
	unsigned char frames[512];
	size_t n = 0;
	static const char j1[] = "{\"type\":\"archive\",\"id\":\"x\",\"blob\":5}";
	static const char j2[] = "{\"type\":\"pong\"}";

	nbrun__chan_header(frames + n, 'J', sizeof(j1) - 1);
	memcpy(frames + n + 8, j1, sizeof(j1) - 1);
	n += 8 + sizeof(j1) - 1;
	nbrun__chan_header(frames + n, 'D', 2);
	memcpy(frames + n + 8, "ab", 2);
	n += 10;
	nbrun__chan_header(frames + n, 'D', 3);
	memcpy(frames + n + 8, "cde", 3);
	n += 11;
	nbrun__chan_header(frames + n, 'E', 0);
	n += 8;
	nbrun__chan_header(frames + n, 'J', sizeof(j2) - 1);
	memcpy(frames + n + 8, j2, sizeof(j2) - 1);
	n += 8 + sizeof(j2) - 1;
	for (size_t i = 0; i < n; i++) {
		if (!agent_write(a, frames + i, 1))
			return;
		if (i % 9 == 0)
			pause_ms(1);
	}
	agent_gone(a);
}

/* Frames split anywhere by the stream, then its end: 0, not a violation. */
static void chan_recv_fragmented(void **state)
{
	struct buf b = BUF_INIT(64);
	json_t *msg = NULL;
	uint64_t dl = clock_mono_ms() + 10000;

	(void)state;
	agent_start(script_byte_by_byte, 0);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, dl), 1);
	json_decref(msg);
	assert_int_equal(nbrun__chan_recv_blob(&F.sb->ch, &b, -1, 5, dl), 0);
	assert_string_equal(b.data, "abcde");
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, dl), 1);
	assert_string_equal(json_string_value(json_object_get(msg, "type")), "pong");
	json_decref(msg);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, dl), 0);
	assert_null(msg);
	buf_free(&b);
	assert_agent_happy();
}

static void script_big_json(struct agent *a)
{
	/* a message larger than the host's 64 KiB read buffer, under the 1 MiB cap */
	static const char head[] = "{\"type\":\"future\",\"pad\":\"";
	size_t pad = 300000, n = strlen(head);
	char *m = malloc(n + pad + 3);

	if (!m)
		return;
	memcpy(m, head, n);
	memset(m + n, 'p', pad);
	memcpy(m + n + pad, "\"}", 3);
	agent_frame(a, 'J', m, strlen(m));
	free(m);
}

static void chan_recv_large_json(void **state)
{
	json_t *msg = NULL;

	(void)state;
	agent_start(script_big_json, 0);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, clock_mono_ms() + 10000), 1);
	assert_int_equal(json_string_length(json_object_get(msg, "pad")), 300000);
	json_decref(msg);
	assert_agent_happy();
}

static void script_silence(struct agent *a)
{
	(void)a;
}

static void chan_recv_deadline(void **state)
{
	json_t *msg = NULL;
	uint64_t t0 = clock_mono_ms();

	(void)state;
	agent_start(script_silence, 0);
	assert_int_equal(nbrun__chan_recv(&F.sb->ch, &msg, t0 + 100), 2);
	assert_true(clock_mono_ms() - t0 >= 100);
	assert_true(clock_mono_ms() - t0 < 2000);
	assert_null(msg);
	assert_agent_happy();
}

int main(int argc, char **argv)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(job_ok),
		T(job_fetch_outside_top),
		T(job_cell_error),
		T(job_reply_error_without_output),
		T(job_reply_error_older_agent),
		T(job_done_error_only),
		T(job_stop_on_error),
		T(job_allow_errors),
		T(job_clean_exit),
		T(job_papermill_metadata),
		T(job_cell_timeout),
		T(job_kernel_dead),
		T(job_agent_gone),
		T(job_agent_gone_oom),
		T(job_deadline),
		T(job_cancel),
		T(job_hello_wrong_protocol),
		T(job_agent_refuses),
		T(violation_bad_magic),
		T(violation_wrong_version),
		T(violation_unknown_kind),
		T(violation_json_over_cap),
		T(violation_data_outside_message),
		T(violation_end_outside_message),
		T(violation_short_blob_then_json),
		T(violation_short_blob_then_end),
		T(violation_more_data_than_announced),
		T(violation_chunk_over_cap),
		T(violation_cell_markdown),
		T(violation_cell_out_of_range),
		T(violation_cell_negative),
		T(violation_cell_index_not_integer),
		T(violation_cell_not_code),
		T(violation_cell_not_object),
		T(violation_cell_not_json),
		T(violation_cell_over_cap),
		T(violation_not_object),
		T(violation_no_type),
		T(violation_type_not_string),
		T(violation_not_json),
		T(violation_blob_negative),
		T(violation_cut_frame),
		T(violation_done_meta_not_json),
		T(violation_done_data_cut),
		T(violation_markdown_untouched),
		T(job_unknown_types_skipped),
		T(job_skipped_follows_max_files),
		T(job_cell_after_done_ignored),
		T(job_cell_sent_twice),
		T(sandbox_ready),
		T(sandbox_ready_skips_unknown),
		T(sandbox_ready_skips_unknown_with_data),
		T(sandbox_ready_wrong_protocol),
		T(sandbox_ready_agent_gone),
		T(chan_send_splits_blob),
		T(chan_send_empty_blob),
		T(chan_recv_blob_over_cap),
		T(chan_recv_with_blob_pending),
		T(chan_recv_fragmented),
		T(chan_recv_large_json),
		T(chan_recv_deadline),
	};
	signal(SIGPIPE, SIG_IGN);
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
