/* SPDX-License-Identifier: MIT */
/*
 * The Docker client against a canned HTTP server on a unix socket: the error
 * paths a real daemon cannot be made to show (old API, no version header,
 * error bodies with control characters, huge replies, a server that never
 * answers, streams that end early, cancel).
 *
 * The server is a thread that accepts one connection at a time and answers
 * from a script chosen by the test. Every wait in it is bounded by poll()
 * timeouts, and every test arms alarm() so that a hang kills the test
 * instead of the suite.
 *
 * The Docker sandbox backend is tested against the same server: a few
 * per-request answers (rules) script the engine, and the recorded request
 * bodies show the container spec it was sent.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "nbrun-private.h"

enum mode {
	MODE_JSON,        /* status + body */
	MODE_HANG,        /* accept, read the request, never answer */
	MODE_BIG,         /* 200 with a body over the 4 MiB reply cap */
	MODE_ATTACH_SPLIT,  /* 101, then a hello frame split across writes and engine frames */
	MODE_ATTACH_END,    /* 101, then half a channel frame, then the stream ends */
	MODE_ATTACH_HANG,   /* 101, then nothing */
	MODE_ATTACH_BADMUX, /* 101, then an engine frame of stream 7 */
	MODE_DOWNLOAD,    /* 200 with body_len bytes */
};

/* Answer requests whose "METHOD path" contains req (and whose body contains
 * body_has, when set) with status and reply, whatever the mode; status 0:
 * close the connection without an answer. */
struct rule {
	const char *req;
	const char *body_has;
	int status;
	const char *reply;
};

#define MAX_ASKED 32
#define MAX_RULES 8
#define BODY_MAX (1u << 20) /* request bodies recorded up to this size */

struct srv {
	char dir[128];
	char sock[192];
	int lfd;
	int stop[2];
	pthread_t th;
	bool running;
	/* script */
	const char *ping_api; /* Api-Version header on /_ping; NULL: none */
	int ping_status;
	const char *version_api; /* ApiVersion in GET /version */
	enum mode mode;
	int status;
	const char *body;
	size_t body_len;
	struct rule rules[MAX_RULES];
	int n_rules;
	/* what was asked */
	pthread_mutex_t mu;
	char paths[MAX_ASKED][600];
	char *bodies[MAX_ASKED]; /* NUL-terminated; NULL when none or over BODY_MAX */
	int n;
};

static struct srv S;

/* ---- server ----------------------------------------------------------------- */

static bool wait_readable(int fd, int stopfd, int ms)
{
	struct pollfd p[2] = { { fd, POLLIN, 0 }, { stopfd, POLLIN, 0 } };

	if (poll(p, 2, ms) <= 0)
		return false;
	return !(p[1].revents & POLLIN) && (p[0].revents & (POLLIN | POLLHUP | POLLERR));
}

static bool send_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static bool send_str(int fd, const char *s)
{
	return send_all(fd, s, strlen(s));
}

static void respond(int fd, int status, const char *extra, const char *body, size_t len)
{
	char h[512];

	snprintf(h, sizeof(h),
		 "HTTP/1.1 %d Canned\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		 "Connection: close\r\nServer: canned\r\n%s\r\n",
		 status, len, extra ? extra : "");
	if (send_str(fd, h) && len)
		send_all(fd, body, len);
}

/* A multiplexed-stream frame header: stream, 0, 0, 0, big-endian size. */
static void frame_header(unsigned char h[8], int stream, size_t len)
{
	h[0] = (unsigned char)stream;
	h[1] = h[2] = h[3] = 0;
	h[4] = (unsigned char)(len >> 24);
	h[5] = (unsigned char)(len >> 16);
	h[6] = (unsigned char)(len >> 8);
	h[7] = (unsigned char)len;
}


static void pause_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Hold the connection until the client goes away or the test ends. */
static void hang(int fd)
{
	char buf[256];

	for (int i = 0; i < 200; i++) {
		if (!wait_readable(fd, S.stop[0], 100)) {
			struct pollfd p = { S.stop[0], POLLIN, 0 };
			if (poll(&p, 1, 0) > 0)
				return;
			continue;
		}
		if (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0)
			return;
	}
}

static const char ATTACH_HDR[] = "HTTP/1.1 101 UPGRADED\r\n"
				 "Content-Type: application/vnd.docker.raw-stream\r\n"
				 "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";

/* One engine frame (stdout 1, stderr 2) holding data, written raw (no chunks). */
static bool send_mux(int fd, int stream, const void *data, size_t len)
{
	unsigned char h[8];

	frame_header(h, stream, len);
	return send_all(fd, h, 8) && send_all(fd, data, len);
}

/* A channel frame (PROTOCOL.md) into buf; returns its length. */
static size_t chan_frame(unsigned char *buf, char kind, const char *payload)
{
	size_t len = strlen(payload);

	nbrun__chan_header(buf, kind, (uint32_t)len);
	memcpy(buf + 8, payload, len);
	return len + 8;
}

static void serve_attach(int fd)
{
	unsigned char f[256], h[8];
	size_t n;

	if (!send_str(fd, ATTACH_HDR))
		return;
	switch (S.mode) {
	case MODE_ATTACH_SPLIT:
		send_mux(fd, 2, "agent: starting\n", 16);
		pause_ms(20);
		n = chan_frame(f, 'J', "{\"type\":\"hello\",\"protocol\":1}");
		/* An engine frame whose header comes in two writes, and whose
		 * payload (the channel frame) in two more, split in its header. */
		frame_header(h, 1, n);
		send_all(fd, h, 3);
		pause_ms(30);
		send_all(fd, h + 3, 5);
		send_all(fd, f, 5);
		pause_ms(30);
		send_all(fd, f + 5, n - 5);
		send_mux(fd, 2, "agent: kernel up\n", 17);
		hang(fd);
		break;
	case MODE_ATTACH_END:
		n = chan_frame(f, 'J', "{\"type\":\"hello\",\"protocol\":1}");
		send_mux(fd, 1, f, n - 4);
		pause_ms(20);
		break;
	case MODE_ATTACH_BADMUX:
		frame_header(h, 7, 4);
		send_all(fd, h, 8);
		send_all(fd, "NB\x01J", 4);
		hang(fd);
		break;
	default: /* MODE_ATTACH_HANG */
		hang(fd);
		break;
	}
}

static void serve_one(int fd)
{
	char req[8192] = "", method[16] = "", path[512] = "", line[600];
	size_t len = 0;
	char *end = NULL, *cl, *data = NULL;
	long body = 0, want = 0;
	size_t have, dlen = 0;
	const struct rule *rule = NULL;

	while (len < sizeof(req) - 1 && !(end = strstr(req, "\r\n\r\n"))) {
		ssize_t n;
		if (!wait_readable(fd, S.stop[0], 5000))
			return;
		n = recv(fd, req + len, sizeof(req) - 1 - len, 0);
		if (n <= 0)
			return;
		len += (size_t)n;
		req[len] = '\0';
	}
	if (!end || sscanf(req, "%15s %511s", method, path) != 2)
		return;
	cl = strcasestr(req, "\r\nContent-Length:");
	if (cl)
		want = strtol(cl + 17, NULL, 10);
	have = len - (size_t)(end + 4 - req);
	body = want - (long)have;
	if (want > 0 && (unsigned long)want <= BODY_MAX && (data = malloc((size_t)want + 1))) {
		dlen = have < (size_t)want ? have : (size_t)want;
		memcpy(data, end + 4, dlen);
	}
	while (body > 0) {
		char tmp[4096];
		ssize_t n;
		if (!wait_readable(fd, S.stop[0], 5000) || (n = recv(fd, tmp, sizeof(tmp), 0)) <= 0) {
			free(data);
			return;
		}
		if (data) {
			size_t k = (size_t)n < (size_t)want - dlen ? (size_t)n : (size_t)want - dlen;
			memcpy(data + dlen, tmp, k);
			dlen += k;
		}
		body -= n;
	}
	if (data)
		data[dlen] = '\0';
	snprintf(line, sizeof(line), "%s %s", method, path);
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.n_rules && !rule; i++) {
		if (strstr(line, S.rules[i].req) &&
		    (!S.rules[i].body_has || (data && strstr(data, S.rules[i].body_has))))
			rule = &S.rules[i];
	}
	if (S.n < MAX_ASKED) {
		S.bodies[S.n] = data;
		data = NULL;
		snprintf(S.paths[S.n++], sizeof(S.paths[0]), "%s", line);
	}
	pthread_mutex_unlock(&S.mu);
	free(data);

	if (!strcmp(path, "/_ping")) {
		char hdr[64] = "";
		if (S.ping_api)
			snprintf(hdr, sizeof(hdr), "Api-Version: %s\r\n", S.ping_api);
		respond(fd, S.ping_status, hdr, "OK", 2);
		return;
	}
	/* Like the engine's router: /version or /v<digits.dots>/... */
	if (strcmp(path, "/version") &&
	    !(path[0] == '/' && path[1] == 'v' && strchr("0123456789", path[2]) && path[2] &&
	      strspn(path + 2, "0123456789.") > 0 && path[2 + strspn(path + 2, "0123456789.")] == '/')) {
		static const char nf[] = "{\"message\":\"page not found\"}";
		respond(fd, 404, NULL, nf, sizeof(nf) - 1);
		return;
	}
	if (strstr(path, "/version") && !strstr(path, "/containers/")) {
		char b[128];
		int n = snprintf(b, sizeof(b), "{\"Version\":\"20.10.0\",\"ApiVersion\":\"%s\"}",
				 S.version_api ? S.version_api : "1.41");
		respond(fd, 200, NULL, b, (size_t)n);
		return;
	}
	if (rule) {
		if (rule->status)
			respond(fd, rule->status, NULL, rule->reply, strlen(rule->reply));
		return;
	}
	switch (S.mode) {
	case MODE_JSON:
		respond(fd, S.status, NULL, S.body, S.body_len);
		break;
	case MODE_HANG:
		hang(fd);
		break;
	case MODE_BIG: {
		size_t total = 5u << 20, sent = 0;
		static char block[65536];
		char h[256];
		memset(block, 'x', sizeof(block));
		snprintf(h, sizeof(h),
			 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n{\"Id\":\"",
			 total);
		if (!send_str(fd, h))
			break;
		sent = 7;
		while (sent + sizeof(block) < total - 2) {
			if (!send_all(fd, block, sizeof(block)))
				return;
			sent += sizeof(block);
		}
		memset(block, 'y', total - 2 - sent);
		if (send_all(fd, block, total - 2 - sent))
			send_str(fd, "\"}");
		break;
	}
	case MODE_DOWNLOAD: {
		char *b = malloc(S.body_len);
		if (!b)
			break;
		memset(b, 'd', S.body_len);
		respond(fd, S.status, NULL, b, S.body_len);
		free(b);
		break;
	}
	default:
		serve_attach(fd);
		break;
	}
}

static void *srv_main(void *arg)
{
	for (;;) {
		struct pollfd p[2] = { { S.lfd, POLLIN, 0 }, { S.stop[0], POLLIN, 0 } };
		int fd;

		if (poll(p, 2, 20000) <= 0 || (p[1].revents & POLLIN))
			break;
		fd = accept4(S.lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve_one(fd);
		shutdown(fd, SHUT_WR);
		close(fd);
	}
	return NULL;
}

static void make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");

	/* sun_path is short: keep the directory name small */
	if (!base || !*base || strlen(base) > 60)
		base = "/tmp";
	snprintf(S.dir, sizeof(S.dir), "%s/nbd-XXXXXX", base);
	assert_non_null(mkdtemp(S.dir));
	snprintf(S.sock, sizeof(S.sock), "%s/docker.sock", S.dir);
}

static void set_host(const char *path)
{
	char *h = NULL;

	assert_true(asprintf(&h, "unix://%s", path) > 0);
	assert_int_equal(setenv("DOCKER_HOST", h, 1), 0);
	free(h);
}

static int setup(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	alarm(30);
	memset(&S, 0, sizeof(S));
	S.lfd = -1;
	S.stop[0] = S.stop[1] = -1;
	S.ping_api = "1.41";
	S.ping_status = 200;
	S.mode = MODE_JSON;
	S.status = 200;
	S.body = "{}";
	S.body_len = 2;
	pthread_mutex_init(&S.mu, NULL);
	make_tmpdir();
	assert_true(strlen(S.sock) < sizeof(sa.sun_path));
	strcpy(sa.sun_path, S.sock);
	S.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(S.lfd >= 0);
	assert_int_equal(bind(S.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(S.lfd, 8), 0);
	assert_int_equal(pipe2(S.stop, O_CLOEXEC), 0);
	set_host(S.sock);
	unsetenv("DOCKER_TLS_VERIFY");
	*state = &S;
	return 0;
}

static void srv_start(void)
{
	assert_int_equal(pthread_create(&S.th, NULL, srv_main, NULL), 0);
	S.running = true;
}

static int teardown(void **state)
{
	if (S.running) {
		ssize_t w = write(S.stop[1], "x", 1);
		(void)w;
		pthread_join(S.th, NULL);
	}
	if (S.lfd >= 0)
		close(S.lfd);
	if (S.stop[0] >= 0)
		close(S.stop[0]);
	if (S.stop[1] >= 0)
		close(S.stop[1]);
	/* whatever a failed case left (downloads, plain files), then the dir */
	{
		DIR *dir = opendir(S.dir);
		struct dirent *de;
		while (dir && (de = readdir(dir)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				unlinkat(dirfd(dir), de->d_name, 0);
		if (dir)
			closedir(dir);
	}
	rmdir(S.dir);
	for (int i = 0; i < S.n; i++)
		free(S.bodies[i]);
	pthread_mutex_destroy(&S.mu);
	alarm(0);
	return 0;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static bool no_control_chars(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

static const char *asked(int i)
{
	static char copy[600];

	pthread_mutex_lock(&S.mu);
	snprintf(copy, sizeof(copy), "%s", i < S.n ? S.paths[i] : "");
	pthread_mutex_unlock(&S.mu);
	return copy;
}

/* Connect with the default script (API 1.41). */
static struct nbrun__docker *connect_ok(struct nbrun_ctx *ctx)
{
	struct nbrun__docker *d = NULL;
	int rc;

	srv_start();
	rc = nbrun__docker_new(&d, ctx);
	if (rc != 0)
		fail_msg("nbrun__docker_new: %d %s", rc, ctx->errmsg);
	assert_non_null(d);
	return d;
}

/* ---- negotiation ----------------------------------------------------------------- */

static void api_too_old(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = (void *)0x1;

	S.ping_api = "1.24";
	srv_start();
	assert_int_equal(nbrun__docker_new(&d, &ctx), NBRUN_EENGINE);
	assert_null(d);
	assert_non_null(strstr(ctx.errmsg, "needs 1.30"));
	assert_non_null(strstr(ctx.errmsg, "1.24"));
}

static void api_newer_is_capped(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d;

	S.ping_api = "1.45";
	d = connect_ok(&ctx);
	assert_string_equal(nbrun__docker_api_version(d), "1.41");
	/* and requests are made against it */
	assert_int_equal(nbrun__docker_json(d, "GET", "/containers/json", NULL, NULL, 5000), 200);
	assert_string_equal(asked(1), "GET /v1.41/containers/json");
	nbrun__docker_free(d);
}

static void api_in_range_is_kept(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d;

	S.ping_api = "1.35";
	d = connect_ok(&ctx);
	assert_string_equal(nbrun__docker_api_version(d), "1.35");
	assert_int_equal(nbrun__docker_json(d, "GET", "/info", NULL, NULL, 5000), 200);
	assert_string_equal(asked(1), "GET /v1.35/info");
	nbrun__docker_free(d);
}

static void api_from_version_endpoint(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d;

	S.ping_api = NULL;
	S.version_api = "1.38";
	d = connect_ok(&ctx);
	assert_string_equal(asked(0), "GET /_ping");
	/* The fallback must ask a path the engine serves: /version (unversioned). */
	assert_string_equal(asked(1), "GET /version");
	assert_string_equal(nbrun__docker_api_version(d), "1.38");
	nbrun__docker_free(d);
}

static void api_from_version_endpoint_too_old(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = NULL;

	S.ping_api = NULL;
	S.version_api = "1.12";
	srv_start();
	assert_int_equal(nbrun__docker_new(&d, &ctx), NBRUN_EENGINE);
	assert_non_null(strstr(ctx.errmsg, "needs 1.30"));
}

static void ping_fails(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = NULL;

	S.ping_status = 503;
	srv_start();
	assert_int_equal(nbrun__docker_new(&d, &ctx), NBRUN_EENGINE);
	assert_null(d);
	assert_non_null(strstr(ctx.errmsg, "503"));
}

/* ---- the socket itself ------------------------------------------------------------- */

static void socket_missing(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = (void *)0x1;
	char p[256];

	snprintf(p, sizeof(p), "%s/nope.sock", S.dir);
	set_host(p);
	assert_int_equal(nbrun__docker_new(&d, &ctx), NBRUN_EENGINE);
	assert_null(d);
	assert_non_null(strstr(ctx.errmsg, "not running"));
	assert_non_null(strstr(ctx.errmsg, p));
}

static void socket_is_a_file(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = (void *)0x1;
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s/plain", S.dir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	set_host(p);
	assert_int_equal(nbrun__docker_new(&d, &ctx), NBRUN_EENGINE);
	assert_null(d);
	assert_non_null(strstr(ctx.errmsg, "not a socket"));
	unlink(p);
}

/* A stale socket: the file is there, nobody listens. */
static void socket_nobody_listening(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = (void *)0x1;
	long t0 = now_ms();

	close(S.lfd);
	S.lfd = -1;
	assert_int_equal(nbrun__docker_new(&d, &ctx), NBRUN_EENGINE);
	assert_null(d);
	assert_non_null(strstr(ctx.errmsg, "cannot reach"));
	assert_true(now_ms() - t0 < 6000);
}

static void host_unsupported(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = (void *)0x1;

	assert_int_equal(setenv("DOCKER_HOST", "ssh://user@host", 1), 0);
	assert_int_equal(nbrun__docker_new(&d, &ctx), NBRUN_EENGINE);
	assert_null(d);
	assert_non_null(strstr(ctx.errmsg, "not supported"));
}

/* ---- replies ------------------------------------------------------------------------ */

static void error_message_from_body(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	json_t *j = (json_t *)0x1;
	static const char body[] = "{\"message\":\"boom\"}";

	S.status = 500;
	S.body = body;
	S.body_len = sizeof(body) - 1;
	assert_int_equal(nbrun__docker_json(d, "POST", "/containers/create", NULL, &j, 5000), 500);
	assert_null(j);
	assert_non_null(strstr(ctx.errmsg, "boom"));
	assert_non_null(strstr(ctx.errmsg, "500"));
	assert_null(strchr(ctx.errmsg, '\n'));
	assert_true(no_control_chars(ctx.errmsg));
	nbrun__docker_free(d);
}

static void error_message_control_chars(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	static const char body[] =
		"{\"message\":\"line one\\nline two\\r\\u001b[31mred\\u0007\\u007f\\ttab\"}";

	S.status = 409;
	S.body = body;
	S.body_len = sizeof(body) - 1;
	assert_int_equal(nbrun__docker_json(d, "DELETE", "/containers/x", NULL, NULL, 5000), 409);
	assert_non_null(strstr(ctx.errmsg, "line one"));
	assert_non_null(strstr(ctx.errmsg, "line two"));
	assert_true(no_control_chars(ctx.errmsg));
	nbrun__docker_free(d);
}

static void error_message_not_json(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	static const char body[] = "<html>\n\x01\x02 bad gateway</html>";

	S.status = 502;
	S.body = body;
	S.body_len = sizeof(body) - 1;
	assert_int_equal(nbrun__docker_json(d, "GET", "/info", NULL, NULL, 5000), 502);
	assert_non_null(strstr(ctx.errmsg, "502"));
	assert_true(no_control_chars(ctx.errmsg));
	nbrun__docker_free(d);
}

static void error_message_huge(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	/* Static: the server thread may still be sending it when the client,
	 * having read what it keeps, has returned (a freed buffer was read then). */
	static char body[100000];

	memcpy(body, "{\"message\":\"", 12);
	memset(body + 12, 'm', 100000 - 14);
	memcpy(body + 100000 - 2, "\"}", 2);
	S.status = 500;
	S.body = body;
	S.body_len = 100000;
	assert_int_equal(nbrun__docker_json(d, "GET", "/info", NULL, NULL, 5000), 500);
	assert_true(strlen(ctx.errmsg) < sizeof(ctx.errmsg));
	assert_true(no_control_chars(ctx.errmsg));
	nbrun__docker_free(d);
}

static void reply_json_parsed(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	json_t *j = NULL;
	static const char body[] = "{\"Id\":\"abc123\",\"Warnings\":[]}";

	S.status = 201;
	S.body = body;
	S.body_len = sizeof(body) - 1;
	assert_int_equal(nbrun__docker_json(d, "POST", "/containers/create", NULL, &j, 5000), 201);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "Id")), "abc123");
	json_decref(j);
	nbrun__docker_free(d);
}

/*
 * A reply over the 4 MiB cap must never be spliced and parsed as a (wrong)
 * document, e.g. {"Id":"xx..."} with a shortened Id: the transfer stops.
 */
static void reply_body_over_cap(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	json_t *j = (json_t *)0x1;
	int rc;

	S.mode = MODE_BIG;
	rc = nbrun__docker_json(d, "GET", "/containers/json", NULL, &j, 20000);
	/* Either refused or parsed as absent: never a (partial) document. */
	assert_true(rc == 200 || rc < 0);
	if (j) {
		size_t idlen = json_string_length(json_object_get(j, "Id"));
		json_decref(j);
		fail_msg("a reply over the cap was parsed as a document (\"Id\" of %zu bytes, %u sent)",
			 idlen, (5u << 20) - 9);
	}
	nbrun__docker_free(d);
}

static void reply_buf_respects_its_cap(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct buf reply = BUF_INIT(1000);
	int rc;

	S.mode = MODE_BIG;
	rc = nbrun__docker_request(d, "GET", "/containers/json", NULL, NULL, 0, &reply, 20000);
	assert_true(rc == 200 || rc < 0);
	assert_true(reply.len <= 1000);
	buf_free(&reply);
	nbrun__docker_free(d);
}

static void server_never_answers(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct buf reply = BUF_INIT(4096);
	long t0;
	int rc;

	S.mode = MODE_HANG;
	t0 = now_ms();
	rc = nbrun__docker_request(d, "GET", "/info", NULL, NULL, 0, &reply, 700);
	assert_int_equal(rc, NBRUN_EENGINE);
	assert_true(now_ms() - t0 < 4000);
	assert_non_null(strstr(ctx.errmsg, "in time"));
	buf_free(&reply);
	/* The handle is still usable afterwards. */
	S.mode = MODE_JSON;
	assert_int_equal(nbrun__docker_json(d, "GET", "/info", NULL, NULL, 5000), 200);
	nbrun__docker_free(d);
}

static volatile sig_atomic_t cancel_flag;

static void *raise_cancel(void *arg)
{
	pause_ms(300);
	cancel_flag = 1;
	return NULL;
}

static void cancel_during_request(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct buf reply = BUF_INIT(4096);
	pthread_t th;
	long t0, took;
	int rc;

	S.mode = MODE_HANG;
	cancel_flag = 0;
	nbrun__docker_set_cancel(d, &cancel_flag);
	t0 = now_ms();
	assert_int_equal(pthread_create(&th, NULL, raise_cancel, NULL), 0);
	rc = nbrun__docker_request(d, "GET", "/info", NULL, NULL, 0, &reply, 20000);
	took = now_ms() - t0;
	pthread_join(th, NULL);
	assert_int_equal(rc, NBRUN_ECANCELLED);
	assert_true(took < 3000);
	buf_free(&reply);
	nbrun__docker_free(d);
}

/* ---- attach: the live channel's transport ------------------------------------------------ */

static struct nbrun__conn *attach_ok(struct nbrun_ctx *ctx, struct nbrun__docker *d)
{
	struct nbrun__conn *c = NULL;

	assert_int_equal(nbrun__docker_attach(d, "abc", &c), 0);
	assert_non_null(c);
	return c;
}

/* Engine frames and channel frames split anywhere: the channel sees one hello; stderr is kept apart. */
static void attach_split_frames(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct nbrun__conn *c;
	struct nbrun__chan ch;
	json_t *msg = NULL;
	long t0 = now_ms();

	S.mode = MODE_ATTACH_SPLIT;
	c = attach_ok(&ctx, d);
	nbrun__chan_init(&ch, c, &ctx, NULL);
	assert_int_equal(nbrun__chan_recv(&ch, &msg, (uint64_t)now_ms() + 10000), 1);
	assert_string_equal(json_string_value(json_object_get(msg, "type")), "hello");
	assert_true(json_integer_value(json_object_get(msg, "protocol")) == 1);
	json_decref(msg);
	assert_int_equal(nbrun__chan_recv_blob(&ch, NULL, -1, 0, (uint64_t)now_ms() + 1000), 0);
	/* Nothing more comes: the deadline, not a hang. */
	assert_int_equal(nbrun__chan_recv(&ch, &msg, (uint64_t)now_ms() + 300), 2);
	assert_non_null(strstr(c->err_tail, "agent: starting"));
	assert_non_null(strstr(c->err_tail, "agent: kernel up"));
	assert_true(now_ms() - t0 < 5000);
	assert_string_equal(asked(1), "POST /v1.41/containers/abc/attach?stream=1&stdin=1&stdout=1&stderr=1");
	c->close(c);
	nbrun__docker_free(d);
}

/* The stream ends inside a channel frame: a violation, not a message. */
static void attach_stream_ends_in_frame(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct nbrun__conn *c;
	struct nbrun__chan ch;
	json_t *msg = NULL;

	S.mode = MODE_ATTACH_END;
	c = attach_ok(&ctx, d);
	nbrun__chan_init(&ch, c, &ctx, NULL);
	assert_int_equal(nbrun__chan_recv(&ch, &msg, (uint64_t)now_ms() + 10000), NBRUN_EPARSE);
	assert_null(msg);
	assert_non_null(strstr(ctx.errmsg, "sandbox protocol violation"));
	/* Broken for good. */
	assert_true(nbrun__chan_recv(&ch, &msg, (uint64_t)now_ms() + 1000) < 0);
	c->close(c);
	nbrun__docker_free(d);
}

/* An engine frame of a stream that does not exist breaks the channel. */
static void attach_bad_engine_framing(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct nbrun__conn *c;
	struct nbrun__chan ch;
	json_t *msg = NULL;

	S.mode = MODE_ATTACH_BADMUX;
	c = attach_ok(&ctx, d);
	nbrun__chan_init(&ch, c, &ctx, NULL);
	assert_int_equal(nbrun__chan_recv(&ch, &msg, (uint64_t)now_ms() + 5000), NBRUN_EPARSE);
	assert_non_null(strstr(ctx.errmsg, "framing"));
	c->close(c);
	nbrun__docker_free(d);
}

static void attach_cancelled(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct nbrun__conn *c;
	struct nbrun__chan ch;
	json_t *msg = NULL;
	pthread_t th;
	long t0;

	S.mode = MODE_ATTACH_HANG;
	c = attach_ok(&ctx, d);
	cancel_flag = 0;
	nbrun__chan_init(&ch, c, &ctx, &cancel_flag);
	t0 = now_ms();
	assert_int_equal(pthread_create(&th, NULL, raise_cancel, NULL), 0);
	assert_int_equal(nbrun__chan_recv(&ch, &msg, (uint64_t)now_ms() + 20000), NBRUN_ECANCELLED);
	pthread_join(th, NULL);
	assert_true(now_ms() - t0 < 3000);
	c->close(c);
	nbrun__docker_free(d);
}

/* An engine that refuses the attach: a clear error, no connection. */
static void attach_refused(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	struct nbrun__conn *c = (void *)0x1;
	static const char body[] = "{\"message\":\"No such container: abc\"}";

	S.mode = MODE_JSON;
	S.status = 404;
	S.body = body;
	S.body_len = sizeof(body) - 1;
	assert_int_equal(nbrun__docker_attach(d, "abc", &c), NBRUN_ENOTFOUND);
	assert_null(c);
	assert_non_null(strstr(ctx.errmsg, "cannot attach"));
	assert_non_null(strstr(ctx.errmsg, "404"));
	nbrun__docker_free(d);
}

/* ---- downloads ------------------------------------------------------------------------ */

static char *tmpfile_in_dir(int *fd)
{
	char *p = NULL;

	assert_true(asprintf(&p, "%s/dl-XXXXXX", S.dir) > 0);
	*fd = mkostemp(p, O_CLOEXEC);
	assert_true(*fd >= 0);
	return p;
}

static void download_ok(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	int fd;
	char *p = tmpfile_in_dir(&fd);
	struct stat st;

	S.mode = MODE_DOWNLOAD;
	S.status = 200;
	S.body_len = 300000;
	assert_int_equal(nbrun__docker_download(d, "/containers/abc/archive?path=/mnt/data", fd, 1 << 20, 5000), 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 300000);
	close(fd);
	unlink(p);
	free(p);
	nbrun__docker_free(d);
}

static void download_cut(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	int fd;
	char *p = tmpfile_in_dir(&fd);
	struct stat st;

	S.mode = MODE_DOWNLOAD;
	S.status = 200;
	S.body_len = 300000;
	assert_int_equal(nbrun__docker_download(d, "/containers/abc/archive?path=/mnt/data", fd, 100000, 5000), 1);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_size <= 100000);
	close(fd);
	unlink(p);
	free(p);
	nbrun__docker_free(d);
}

static void download_not_found(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	int fd;
	char *p = tmpfile_in_dir(&fd);
	static const char body[] = "{\"message\":\"Could not find the file /mnt/data in container abc\"}";

	S.mode = MODE_JSON;
	S.status = 404;
	S.body = body;
	S.body_len = sizeof(body) - 1;
	assert_int_equal(nbrun__docker_download(d, "/containers/abc/archive?path=/mnt/data", fd, 1 << 20, 5000),
			 NBRUN_ENOTFOUND);
	assert_true(no_control_chars(ctx.errmsg));
	close(fd);
	unlink(p);
	free(p);
	nbrun__docker_free(d);
}

static void download_server_error(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	int fd;
	char *p = tmpfile_in_dir(&fd);
	static const char body[] = "{\"message\":\"oops\"}";

	S.mode = MODE_JSON;
	S.status = 500;
	S.body = body;
	S.body_len = sizeof(body) - 1;
	assert_int_equal(nbrun__docker_download(d, "/containers/abc/archive?path=/mnt/data", fd, 1 << 20, 5000),
			 NBRUN_EENGINE);
	assert_non_null(strstr(ctx.errmsg, "500"));
	close(fd);
	unlink(p);
	free(p);
	nbrun__docker_free(d);
}

static void download_hangs(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d = connect_ok(&ctx);
	int fd;
	char *p = tmpfile_in_dir(&fd);
	long t0 = now_ms();

	S.mode = MODE_HANG;
	assert_int_equal(nbrun__docker_download(d, "/containers/abc/archive?path=/mnt/data", fd, 1 << 20, 600),
			 NBRUN_EENGINE);
	assert_true(now_ms() - t0 < 4000);
	close(fd);
	unlink(p);
	free(p);
	nbrun__docker_free(d);
}

/* ---- the Docker sandbox backend ------------------------------------------------------- */

static void answer(const char *req, const char *body_has, int status, const char *reply)
{
	assert_true(S.n_rules < MAX_RULES);
	pthread_mutex_lock(&S.mu);
	S.rules[S.n_rules++] = (struct rule){ req, body_has, status, reply };
	pthread_mutex_unlock(&S.mu);
}

static int n_asked(void)
{
	int n;

	pthread_mutex_lock(&S.mu);
	n = S.n;
	pthread_mutex_unlock(&S.mu);
	return n;
}

/* The first request from index from on whose "METHOD path" starts with what, or -1. */
static int find_asked(const char *what, int from)
{
	for (int i = from; i < n_asked(); i++)
		if (!strncmp(asked(i), what, strlen(what)))
			return i;
	return -1;
}

static int count_asked_from(const char *what, int from)
{
	int n = 0;

	for (int i = find_asked(what, from); i >= 0; i = find_asked(what, i + 1))
		n++;
	return n;
}

static int count_asked(const char *what)
{
	return count_asked_from(what, 0);
}

/* The body of request i, parsed; the server thread is done with it. */
static json_t *asked_json(int i)
{
	json_t *j;
	json_error_t e;

	assert_true(i >= 0 && i < n_asked());
	if (!S.bodies[i])
		fail_msg("request %d (%s) has no recorded body", i, asked(i));
	j = json_loads(S.bodies[i], 0, &e);
	if (!j)
		fail_msg("request %d body is not JSON: %s", i, e.text);
	return j;
}

static const char *const test_env_entries[] = { "LANG=C.UTF-8", "EMPTY=", "X=a=b c" };

/* Sizes over 2^31 so that a narrowing on the way shows. */
static struct nbrun__sandbox_spec test_spec(bool network)
{
	return (struct nbrun__sandbox_spec){
		.memory_bytes = (3ULL << 30) + 4096,
		.nano_cpus = 2500000000ULL,
		.pids = 321,
		.disk_bytes = 100ULL << 20,
		.network = network,
		.env = test_env_entries,
		.env_count = sizeof(test_env_entries) / sizeof(test_env_entries[0]),
		.preload = "numpy,pandas",
	};
}

/* Start the server and open a sandbox named id on it. */
static struct nbrun__sandbox *sandbox_ok(struct nbrun_ctx *ctx, const char *id)
{
	struct nbrun__sandbox *sb = NULL;
	int rc;

	srv_start();
	rc = nbrun__sandbox_new(&sb, ctx, &nbrun__sandbox_docker, id);
	if (rc != 0)
		fail_msg("nbrun__sandbox_new: %d %s", rc, ctx->errmsg);
	assert_non_null(sb);
	assert_string_equal(sb->id, id);
	return sb;
}

static void sandbox_created(struct nbrun_ctx *ctx, struct nbrun__sandbox *sb,
			    const struct nbrun__sandbox_spec *spec)
{
	int rc = sb->ops->create(sb, spec);

	if (rc != 0)
		fail_msg("create: %d %s", rc, ctx->errmsg);
}

static void sandbox_no_image(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "noimg");
	struct nbrun__sandbox_spec spec = test_spec(false);
	static const char nf[] = "{\"message\":\"No such image\"}";

	answer("GET /v1.41/images/", NULL, 404, nf);
	assert_int_equal(sb->ops->create(sb, &spec), NBRUN_ENOIMAGE);
	assert_non_null(strstr(ctx.errmsg, "scripts/setup"));
	assert_non_null(strstr(ctx.errmsg, NBRUN_DEFAULT_IMAGE ":latest"));
	nbrun__sandbox_free(sb);
	/* The versioned tag, then :latest; nothing created, so nothing removed. */
	assert_string_equal(asked(0), "GET /_ping");
	assert_string_equal(asked(1), "GET /v1.41/images/" NBRUN_DEFAULT_IMAGE ":" NBRUN_VERSION "/json");
	assert_string_equal(asked(2), "GET /v1.41/images/" NBRUN_DEFAULT_IMAGE ":latest/json");
	assert_int_equal(n_asked(), 3);
}

/* An image the caller named is not swapped for :latest. */
static void sandbox_named_image_missing(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "noimg2");
	struct nbrun__sandbox_spec spec = test_spec(false);
	static const char nf[] = "{\"message\":\"No such image\"}";

	spec.image = "mine:1";
	answer("GET /v1.41/images/", NULL, 404, nf);
	assert_int_equal(sb->ops->create(sb, &spec), NBRUN_ENOIMAGE);
	assert_non_null(strstr(ctx.errmsg, "mine:1"));
	nbrun__sandbox_free(sb);
	assert_string_equal(asked(1), "GET /v1.41/images/mine:1/json");
	assert_int_equal(n_asked(), 2);
}

/* The volume fails: no container is made and nothing is left to remove. */
static void sandbox_data_volume_fails(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "volfail");
	struct nbrun__sandbox_spec spec = test_spec(false);
	static const char err[] = "{\"message\":\"volume driver said no (canned)\"}";

	answer("POST /v1.41/volumes/create", "\"nbrun-volfail-data\"", 500, err);
	assert_int_equal(sb->ops->create(sb, &spec), NBRUN_EENGINE);
	assert_non_null(strstr(ctx.errmsg, "volume driver said no (canned)"));
	/* The engine's words are kept whole, and said once. */
	assert_non_null(strstr(ctx.errmsg, "Docker engine: POST /volumes/create: HTTP 500"));
	assert_ptr_equal(strstr(ctx.errmsg, "cannot create a volume"), ctx.errmsg);
	assert_null(strstr(ctx.errmsg + 1, "cannot create a volume"));
	assert_int_equal(count_asked("POST /v1.41/volumes/create"), 1);
	assert_int_equal(find_asked("POST /v1.41/containers/create", 0), -1);
	nbrun__sandbox_free(sb);
	assert_int_equal(count_asked("DELETE "), 0);
}

/* The container is refused: both volumes go, the container never existed. */
static void sandbox_container_refused(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "ctrfail");
	struct nbrun__sandbox_spec spec = test_spec(false);
	static const char err[] = "{\"message\":\"Conflict. The container name is in use (canned)\"}";

	answer("POST /v1.41/containers/create", NULL, 409, err);
	assert_int_equal(sb->ops->create(sb, &spec), NBRUN_EENGINE);
	assert_non_null(strstr(ctx.errmsg, "The container name is in use (canned)"));
	nbrun__sandbox_free(sb);
	assert_int_equal(count_asked("DELETE "), 1);
	assert_int_equal(count_asked("DELETE /v1.41/containers/"), 0);
	assert_int_not_equal(find_asked("DELETE /v1.41/volumes/nbrun-ctrfail-data?force=1", 0), -1);
}

/* A runtime the engine lacks: refused at create, and the message names the runtimes it has. */
static void sandbox_runtime_unknown(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "rtbad");
	struct nbrun__sandbox_spec spec = test_spec(false);
	json_t *c;

	spec.runtime = "nosuch";
	answer("POST /v1.41/containers/create", NULL, 400,
	       "{\"message\":\"Unknown runtime specified nosuch\"}");
	answer("GET /v1.41/info", NULL, 200,
	       "{\"Runtimes\":{\"runc\":{\"path\":\"runc\"},\"runsc\":{\"path\":\"/usr/bin/runsc\"}}}");
	assert_int_equal(sb->ops->create(sb, &spec), NBRUN_EINVAL);
	assert_non_null(strstr(ctx.errmsg, "runtime 'nosuch' is not registered with the Docker engine"));
	assert_non_null(strstr(ctx.errmsg, "(its runtimes: runc, runsc)"));
	c = asked_json(find_asked("POST /v1.41/containers/create", 0));
	assert_string_equal(json_string_value(json_object_get(json_object_get(c, "HostConfig"), "Runtime")),
			    "nosuch");
	json_decref(c);
	nbrun__sandbox_free(sb);
	assert_int_not_equal(find_asked("DELETE /v1.41/volumes/nbrun-rtbad-data?force=1", 0), -1);
}

/* The engine ran the started sandbox under another runtime: start fails before any code. */
static void sandbox_runtime_not_used(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "rtswap");
	struct nbrun__sandbox_spec spec = test_spec(false);

	spec.runtime = "runsc";
	answer("POST /v1.41/containers/create", NULL, 201, "{\"Id\":\"c0ffee\",\"Warnings\":[]}");
	answer("POST /v1.41/containers/nbrun-rtswap/start", NULL, 204, "");
	answer("GET /v1.41/containers/nbrun-rtswap/json", NULL, 200,
	       "{\"HostConfig\":{\"Runtime\":\"runc\"},\"State\":{\"Running\":true}}");
	sandbox_created(&ctx, sb, &spec);
	S.mode = MODE_ATTACH_END; /* the server serves one connection at a time: no hang */
	assert_int_equal(sb->ops->start(sb), NBRUN_EENGINE);
	assert_non_null(strstr(ctx.errmsg, "runtime runsc was asked for but the engine runs the sandbox under 'runc'"));
	assert_int_equal(find_asked("POST /v1.41/containers/nbrun-rtswap/exec", 0), -1);
	nbrun__sandbox_free(sb);
	assert_int_not_equal(find_asked("DELETE /v1.41/containers/nbrun-rtswap?force=1&v=1", 0), -1);
}

static bool json_array_has_string(const json_t *a, const char *s)
{
	size_t i;
	json_t *v;

	json_array_foreach(a, i, v)
		if (json_is_string(v) && !strcmp(json_string_value(v), s))
			return true;
	return false;
}

/* The profile of a "seccomp=<json>" security option; the test fails when it is not JSON. */
static json_t *seccomp_profile(const char *opt)
{
	json_t *p = json_loads(opt + strlen("seccomp="), 0, NULL);

	if (!p)
		fail_msg("the seccomp profile is not JSON");
	return p;
}

/* The profile in "seccomp=<json>" refuses ptrace outright (no argument filter). */
static bool seccomp_denies(const char *opt, const char *syscall)
{
	json_t *p = seccomp_profile(opt), *rule;
	bool denied = false;
	size_t i;

	assert_string_equal(json_string_value(json_object_get(p, "defaultAction")), "SCMP_ACT_ALLOW");
	json_array_foreach(json_object_get(p, "syscalls"), i, rule) {
		const char *action = json_string_value(json_object_get(rule, "action"));
		if (json_array_has_string(json_object_get(rule, "names"), syscall) && action &&
		    (!strcmp(action, "SCMP_ACT_ERRNO") || !strcmp(action, "SCMP_ACT_KILL")) &&
		    json_array_size(json_object_get(rule, "args")) == 0)
			denied = true;
	}
	json_decref(p);
	return denied;
}

static void check_volume_request(int i, const char *name, uint64_t bytes)
{
	json_t *v = asked_json(i);
	char size[64];

	assert_string_equal(json_string_value(json_object_get(v, "Name")), name);
	snprintf(size, sizeof(size), "size=%llu,", (unsigned long long)bytes);
	assert_non_null(strstr(json_string_value(json_object_get(json_object_get(v, "DriverOpts"), "o")) ?: "",
			       size));
	json_decref(v);
}

/* Create one sandbox, check what the engine was asked to make, free it. */
static void check_created_spec(const char *id, bool network)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb;
	struct nbrun__sandbox_spec spec = test_spec(network);
	char want[256], data[64];
	json_t *c, *hc, *v;
	const char *seccomp = NULL;
	size_t i;
	int at, from = n_asked();

	if (!S.running)
		srv_start();
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, &nbrun__sandbox_docker, id), 0);
	sandbox_created(&ctx, sb, &spec);
	assert_string_equal(sb->image, NBRUN_DEFAULT_IMAGE ":" NBRUN_VERSION);
	snprintf(data, sizeof(data), "nbrun-%s-data", id);

	/* the volumes, each with its own size */
	at = find_asked("POST /v1.41/volumes/create", from);
	assert_true(at >= 0);
	check_volume_request(at, data, spec.disk_bytes);
	assert_int_equal(count_asked_from("POST /v1.41/volumes/create", from), 1);

	snprintf(want, sizeof(want), "POST /v1.41/containers/create?name=nbrun-%s", id);
	at = find_asked(want, from);
	assert_true(at >= 0);
	assert_string_equal(asked(at), want);
	c = asked_json(at);
	hc = json_object_get(c, "HostConfig");
	assert_non_null(hc);

	assert_string_equal(json_string_value(json_object_get(c, "Image")), sb->image);
	/* The agent and init run as uid 0 with three capabilities, only to start
	 * the kernel as uid 1000 (PROTOCOL.md); a channel on stdin, no log. */
	assert_string_equal(json_string_value(json_object_get(c, "User")), "0:0");
	assert_string_equal(json_string_value(json_array_get(json_object_get(c, "Cmd"), 0)),
			    "/opt/nbrun/nbrun-agent");
	assert_true(json_is_true(json_object_get(c, "OpenStdin")));
	assert_true(json_is_true(json_object_get(c, "StdinOnce")));
	assert_false(json_is_true(json_object_get(c, "Tty")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(hc, "LogConfig"), "Type")),
			    "none");
	assert_string_equal(json_string_value(json_object_get(json_object_get(c, "Labels"), NBRUN_LABEL)),
			    sb->id);
	v = json_object_get(c, "Env");
	assert_int_equal(json_array_size(v), spec.env_count + 1);
	for (i = 0; i < spec.env_count; i++)
		assert_string_equal(json_string_value(json_array_get(v, i)), spec.env[i]);
	assert_string_equal(json_string_value(json_array_get(v, i)), "NBRUN_PRELOAD=numpy,pandas");

	v = json_object_get(hc, "CapDrop");
	assert_int_equal(json_array_size(v), 1);
	assert_string_equal(json_string_value(json_array_get(v, 0)), "ALL");
	v = json_object_get(hc, "CapAdd");
	assert_int_equal(json_array_size(v), 3);
	assert_true(json_array_has_string(v, "SETUID") && json_array_has_string(v, "SETGID") &&
		    json_array_has_string(v, "SETPCAP"));
	v = json_object_get(hc, "SecurityOpt");
	assert_true(json_array_has_string(v, "no-new-privileges") ||
		    json_array_has_string(v, "no-new-privileges:true"));
	for (i = 0; i < json_array_size(v); i++)
		if (!strncmp(json_string_value(json_array_get(v, i)) ?: "", "seccomp=", 8))
			seccomp = json_string_value(json_array_get(v, i));
	assert_non_null(seccomp);
	assert_true(seccomp_denies(seccomp, "ptrace"));
	assert_true(json_is_true(json_object_get(hc, "ReadonlyRootfs")));
	assert_false(json_is_true(json_object_get(hc, "Privileged")));
	if (network) {
		assert_string_equal(json_string_value(json_object_get(hc, "NetworkMode")), "bridge");
		assert_false(json_is_true(json_object_get(c, "NetworkDisabled")));
	} else {
		assert_string_equal(json_string_value(json_object_get(hc, "NetworkMode")), "none");
		assert_true(json_is_true(json_object_get(c, "NetworkDisabled")));
	}
	assert_true(json_is_integer(json_object_get(hc, "Memory")));
	assert_true(json_integer_value(json_object_get(hc, "Memory")) == (json_int_t)spec.memory_bytes);
	assert_true(json_integer_value(json_object_get(hc, "MemorySwap")) == (json_int_t)spec.memory_bytes);
	assert_true(json_integer_value(json_object_get(hc, "PidsLimit")) == spec.pids);
	assert_true(json_integer_value(json_object_get(hc, "NanoCpus")) == (json_int_t)spec.nano_cpus);
	/* the volumes are what the container mounts */
	v = json_object_get(hc, "Mounts");
	assert_int_equal(json_array_size(v), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(v, 0), "Target")), "/mnt/data");
	assert_string_equal(json_string_value(json_object_get(json_array_get(v, 0), "Source")), data);
	json_decref(c);

	nbrun__sandbox_free(sb);
	assert_int_equal(count_asked_from("DELETE ", from), 2);
	snprintf(want, sizeof(want), "DELETE /v1.41/containers/nbrun-%s?force=1&v=1", id);
	assert_int_not_equal(find_asked(want, from), -1);
	snprintf(want, sizeof(want), "DELETE /v1.41/volumes/%s?force=1", data);
	assert_int_not_equal(find_asked(want, from), -1);
	/* the container goes before the volumes it holds */
	snprintf(want, sizeof(want), "DELETE /v1.41/containers/nbrun-%s", id);
	assert_true(find_asked(want, from) < find_asked("DELETE /v1.41/volumes/", from));
}

static void sandbox_container_spec(void **state)
{
	answer("POST /v1.41/containers/create", NULL, 201, "{\"Id\":\"c0ffee\",\"Warnings\":[]}");
	answer("DELETE /v1.41/volumes/", NULL, 204, "");
	check_created_spec("spec0", false);
	check_created_spec("spec1", true);
}

/* The "seccomp=" option among HostConfig.SecurityOpt, or NULL. */
static const char *seccomp_option(const json_t *hc)
{
	const json_t *v = json_object_get(hc, "SecurityOpt");

	for (size_t i = 0; i < json_array_size(v); i++)
		if (!strncmp(json_string_value(json_array_get(v, i)) ?: "", "seccomp=", 8))
			return json_string_value(json_array_get(v, i));
	return NULL;
}

/* The profile refuses name (EPERM) when argument index, masked with S_IFMT, is type. */
static bool seccomp_denies_node(const char *opt, const char *name, int index, json_int_t type)
{
	json_t *p = seccomp_profile(opt), *rule, *arg;
	bool denied = false;
	size_t i;

	json_array_foreach(json_object_get(p, "syscalls"), i, rule) {
		const char *action = json_string_value(json_object_get(rule, "action"));
		const char *op;

		arg = json_array_get(json_object_get(rule, "args"), 0);
		op = json_string_value(json_object_get(arg, "op"));
		if (json_array_size(json_object_get(rule, "names")) == 1 &&
		    json_array_has_string(json_object_get(rule, "names"), name) && action &&
		    !strcmp(action, "SCMP_ACT_ERRNO") &&
		    json_integer_value(json_object_get(rule, "errnoRet")) == 1 &&
		    json_array_size(json_object_get(rule, "args")) == 1 &&
		    json_integer_value(json_object_get(arg, "index")) == index &&
		    json_integer_value(json_object_get(arg, "value")) == 0170000 &&
		    json_integer_value(json_object_get(arg, "valueTwo")) == type && op &&
		    !strcmp(op, "SCMP_CMP_MASKED_EQ"))
			denied = true;
	}
	json_decref(p);
	return denied;
}

/* Whether the profile has a rule naming syscall at all. */
static bool seccomp_names(const char *opt, const char *syscall)
{
	json_t *p = seccomp_profile(opt), *rule;
	bool named = false;
	size_t i;

	json_array_foreach(json_object_get(p, "syscalls"), i, rule)
		if (json_array_has_string(json_object_get(rule, "names"), syscall))
			named = true;
	json_decref(p);
	return named;
}

/* The Ulimits entry called name: its soft and hard limits; false when there is none. */
static bool ulimit_of(const json_t *hc, const char *name, json_int_t *soft, json_int_t *hard)
{
	size_t i, n = 0;
	json_t *u;

	json_array_foreach(json_object_get(hc, "Ulimits"), i, u) {
		const char *un = json_string_value(json_object_get(u, "Name"));
		if (un && !strcmp(un, name)) {
			*soft = json_integer_value(json_object_get(u, "Soft"));
			*hard = json_integer_value(json_object_get(u, "Hard"));
			n++;
		}
	}
	if (n > 1)
		fail_msg("%zu Ulimits entries for %s", n, name);
	return n == 1;
}

/* Create a sandbox of runtime (NULL: the engine's default) and return its container request. */
static json_t *created_spec_of(const char *id, const char *runtime)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb;
	struct nbrun__sandbox_spec spec = test_spec(false);
	char want[256];
	json_t *c;
	int from = n_asked();

	if (!S.running)
		srv_start();
	spec.runtime = runtime;
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, &nbrun__sandbox_docker, id), 0);
	sandbox_created(&ctx, sb, &spec);
	snprintf(want, sizeof(want), "POST /v1.41/containers/create?name=nbrun-%s", id);
	c = asked_json(find_asked(want, from));
	assert_non_null(c);
	nbrun__sandbox_free(sb);
	return c;
}

/*
 * Under runsc the engine's pids limit is a backstop for gVisor's host threads
 * ((pids + 64) * 8), --pids is RLIMIT_NPROC inside, the mknod rules stay and
 * the clone3 rule goes; under runc none of that.
 */
static void sandbox_runsc_spec(void **state)
{
	const struct nbrun__sandbox_spec spec = test_spec(false);
	json_t *c, *hc;
	json_int_t soft = 0, hard = 0;
	const char *seccomp;

	answer("POST /v1.41/containers/create", NULL, 201, "{\"Id\":\"c0ffee\",\"Warnings\":[]}");
	answer("DELETE /v1.41/volumes/", NULL, 204, "");

	c = created_spec_of("gv", "runsc");
	hc = json_object_get(c, "HostConfig");
	assert_string_equal(json_string_value(json_object_get(hc, "Runtime")), "runsc");
	assert_true(json_integer_value(json_object_get(hc, "PidsLimit")) == (json_int_t)(spec.pids + 64) * 8);
	assert_true(ulimit_of(hc, "nproc", &soft, &hard));
	assert_true(soft == (json_int_t)spec.pids && hard == (json_int_t)spec.pids);
	assert_true(ulimit_of(hc, "nofile", &soft, &hard));
	assert_true(soft == 4096 && hard == 4096);
	seccomp = seccomp_option(hc);
	assert_non_null(seccomp);
	/* S_IFCHR and S_IFBLK: mknod's mode is argument 1, mknodat's 2 */
	assert_true(seccomp_denies_node(seccomp, "mknod", 1, 0020000));
	assert_true(seccomp_denies_node(seccomp, "mknod", 1, 0060000));
	assert_true(seccomp_denies_node(seccomp, "mknodat", 2, 0020000));
	assert_true(seccomp_denies_node(seccomp, "mknodat", 2, 0060000));
	assert_false(seccomp_denies_node(seccomp, "mknod", 1, 0010000)); /* a FIFO may be made */
	assert_false(seccomp_names(seccomp, "clone3"));
	assert_true(seccomp_denies(seccomp, "ptrace"));
	json_decref(c);

	c = created_spec_of("rc", NULL);
	hc = json_object_get(c, "HostConfig");
	assert_true(json_integer_value(json_object_get(hc, "PidsLimit")) == (json_int_t)spec.pids);
	assert_false(ulimit_of(hc, "nproc", &soft, &hard));
	seccomp = seccomp_option(hc);
	assert_non_null(seccomp);
	assert_true(seccomp_denies_node(seccomp, "mknodat", 2, 0060000));
	assert_true(seccomp_names(seccomp, "clone3"));
	json_decref(c);
}

/* Removal happens once, however often it is asked for. */
static void sandbox_destroy_idempotent(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "idem");
	struct nbrun__sandbox_spec spec = test_spec(false);

	sandbox_created(&ctx, sb, &spec);
	sb->ops->destroy(sb);
	assert_int_equal(count_asked("DELETE "), 2);
	sb->ops->destroy(sb);
	nbrun__sandbox_free(sb);
	assert_int_equal(count_asked("DELETE "), 2);
}

/* A raised cancel flag stops the sandbox's requests, but not its removal. */
static void sandbox_destroy_despite_cancel(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "cancelled");
	struct nbrun__sandbox_spec spec = test_spec(false);
	static volatile sig_atomic_t raised = 1;
	struct nbrun__sandbox_state st;
	long t0;

	sandbox_created(&ctx, sb, &spec);
	nbrun__sandbox_bind(sb, &ctx, &raised);
	/* The flag is live: a request that would hang is given up. */
	S.mode = MODE_HANG;
	answer("DELETE ", NULL, 204, "");
	t0 = now_ms();
	assert_int_equal(sb->ops->state(sb, &st), NBRUN_ECANCELLED);
	assert_true(now_ms() - t0 < 5000);
	nbrun__sandbox_free(sb);
	assert_int_equal(count_asked("DELETE "), 2);
	assert_int_not_equal(find_asked("DELETE /v1.41/containers/nbrun-cancelled?force=1&v=1", 0), -1);
	assert_int_not_equal(find_asked("DELETE /v1.41/volumes/nbrun-cancelled-data?force=1", 0), -1);
}

static void sandbox_new_invalid(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = (void *)0x1;
	struct nbrun__sandbox_ops other = nbrun__sandbox_docker;

	srv_start();
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, &nbrun__sandbox_docker, "0123456789abcdef"),
			 NBRUN_EINVAL);
	assert_null(sb);
	assert_non_null(strstr(ctx.errmsg, "id"));
	sb = (void *)0x1;
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, &nbrun__sandbox_docker,
					    "0123456789abcdef0123456789abcdef"),
			 NBRUN_EINVAL);
	assert_null(sb);
	other.version = NBRUN__SANDBOX_OPS_VERSION + 1;
	sb = (void *)0x1;
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, &other, "ok"), NBRUN_EINVAL);
	assert_null(sb);
	assert_non_null(strstr(ctx.errmsg, "version"));
	sb = (void *)0x1;
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, NULL, "ok"), NBRUN_EINVAL);
	assert_null(sb);
	/* refused before the engine is reached */
	assert_int_equal(n_asked(), 0);
	/* 15 characters is the longest id */
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, &nbrun__sandbox_docker, "0123456789abcde"), 0);
	assert_string_equal(sb->id, "0123456789abcde");
	nbrun__sandbox_free(sb);
	/* no id: a fresh random one, 12 hex digits */
	assert_int_equal(nbrun__sandbox_new(&sb, &ctx, &nbrun__sandbox_docker, NULL), 0);
	assert_int_equal(strlen(sb->id), 12);
	assert_int_equal(strspn(sb->id, "0123456789abcdef"), 12);
	nbrun__sandbox_free(sb);
	nbrun__sandbox_free(NULL);
}

static void sandbox_put_archive_refused(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "put");
	struct nbrun__sandbox_spec spec = test_spec(false);
	static const char nf[] = "{\"message\": \"Could not find the file /app\"}";
	static const char tar[] = "not really a tar";
	int at;

	sandbox_created(&ctx, sb, &spec);
	answer("PUT ", NULL, 404, nf);
	assert_int_equal(sb->ops->put_archive(sb, "/app", tar, sizeof(tar) - 1), NBRUN_EENGINE);
	assert_non_null(strstr(ctx.errmsg, "Could not find the file /app"));
	assert_non_null(strstr(ctx.errmsg, "404"));
	at = find_asked("PUT ", 0);
	assert_true(at >= 0);
	assert_string_equal(asked(at), "PUT /v1.41/containers/nbrun-put/archive?path=/app");
	assert_non_null(S.bodies[at]);
	assert_string_equal(S.bodies[at], tar);
	nbrun__sandbox_free(sb);
}

static void sandbox_get_archive_missing(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__sandbox *sb = sandbox_ok(&ctx, "get");
	struct nbrun__sandbox_spec spec = test_spec(false);
	static const char nf[] = "{\"message\":\"Could not find the file /mnt/data/out\"}";
	bool cut = true;
	struct stat st;
	int fd;
	char *p;

	sandbox_created(&ctx, sb, &spec);
	p = tmpfile_in_dir(&fd);
	answer("GET /v1.41/containers/nbrun-get/archive?path=/mnt/data/out", NULL, 404, nf);
	assert_int_equal(sb->ops->get_archive(sb, "/mnt/data/out", fd, 1 << 20, &cut), NBRUN_ENOTFOUND);
	assert_false(cut);
	/* the error body is not taken for the archive */
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_not_equal(find_asked("GET /v1.41/containers/nbrun-get/archive?path=/mnt/data/out", 0), -1);
	/* any other refusal is the engine's */
	answer("GET /v1.41/containers/nbrun-get/archive?path=/mnt/data/err", NULL, 500, "{\"message\":\"x\"}");
	assert_int_equal(sb->ops->get_archive(sb, "/mnt/data/err", fd, 1 << 20, &cut), NBRUN_EENGINE);
	close(fd);
	unlink(p);
	free(p);
	nbrun__sandbox_free(sb);
}

/* ---- gc ------------------------------------------------------------------------- */

/* Labelled long ago (older than any --older-than), or in the far future (never old enough). */
#define GC_OLD "{\"nbrun.run\":\"x\",\"nbrun.created\":\"1\"}"
#define GC_YOUNG "{\"nbrun.run\":\"x\",\"nbrun.created\":\"99999999999\"}"

static void gc_answers(void)
{
	static const char containers[] =
		"[{\"Id\":\"c1ok\",\"Labels\":" GC_OLD "},"
		"{\"Id\":\"c2refused\",\"Labels\":" GC_OLD "},"
		"{\"Id\":\"c3dropped\",\"Labels\":" GC_OLD "},"
		"{\"Id\":\"c4gone\",\"Labels\":" GC_OLD "},"
		"{\"Id\":\"c5young\",\"Labels\":" GC_YOUNG "}]";
	static const char volumes[] =
		"{\"Volumes\":[{\"Name\":\"v1ok\",\"Labels\":" GC_OLD "},"
		"{\"Name\":\"v2refused\",\"Labels\":" GC_OLD "}]}";

	answer("GET /v1.41/containers/json", NULL, 200, containers);
	answer("GET /v1.41/volumes?", NULL, 200, volumes);
	answer("DELETE /v1.41/containers/c2refused", NULL, 500,
	       "{\"message\":\"removal refused (canned)\"}");
	answer("DELETE /v1.41/containers/c3dropped", NULL, 0, "");
	answer("DELETE /v1.41/containers/c4gone", NULL, 404, "{\"message\":\"No such container\"}");
	answer("DELETE /v1.41/volumes/v2refused", NULL, 409, "{\"message\":\"volume is in use (canned)\"}");
	/* every other DELETE: the default answer, 204 */
	S.status = 204;
	S.body = "";
	S.body_len = 0;
}

/* A removal refused (HTTP 500, 409) or never answered (a negative status) is
 * a failure, not a removal; one already gone (404) is neither. */
static void gc_counts_failures(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d;
	struct nbrun__gc_counts c = { 99, 99 };

	gc_answers();
	d = connect_ok(&ctx);
	assert_int_equal(nbrun__gc(d, &ctx, 3600, &c), NBRUN_EENGINE);
	assert_int_equal(c.removed, 2);
	assert_int_equal(c.failed, 3);
	if (!strstr(ctx.errmsg, "3 of 5 containers and volumes could not be removed") ||
	    !strstr(ctx.errmsg, "volume is in use (canned)"))
		fail_msg("message: %s", ctx.errmsg);
	/* the young one was left alone; the others were each asked once */
	assert_int_equal(count_asked("DELETE "), 6);
	assert_int_equal(count_asked("DELETE /v1.41/containers/c5young"), 0);
	assert_int_equal(count_asked("DELETE /v1.41/containers/c3dropped"), 1);
	nbrun__docker_free(d);
}

/* The public call fills both counts and says what failed. */
static void gc_public_counts(void **state)
{
	struct nbrun_ctx ctx = { "" };
	unsigned int removed = 99, failed = 99;

	gc_answers();
	srv_start();
	assert_int_equal(nbrun_gc(&removed, &failed, &ctx, 3600), NBRUN_EENGINE);
	assert_int_equal(removed, 2);
	assert_int_equal(failed, 3);
	assert_non_null(strstr(ctx.errmsg, "could not be removed"));
}

/* Nothing failed: 0, every orphan counted once, no message. */
static void gc_all_removed(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d;
	struct nbrun__gc_counts c = { 99, 99 };
	static const char containers[] = "[{\"Id\":\"c1ok\",\"Labels\":" GC_OLD "}]";

	answer("GET /v1.41/containers/json", NULL, 200, containers);
	answer("GET /v1.41/volumes?", NULL, 200,
	       "{\"Volumes\":[{\"Name\":\"v1ok\",\"Labels\":" GC_OLD "}]}");
	S.status = 204;
	S.body = "";
	S.body_len = 0;
	d = connect_ok(&ctx);
	assert_int_equal(nbrun__gc(d, &ctx, 3600, &c), 0);
	assert_int_equal(c.removed, 2);
	assert_int_equal(c.failed, 0);
	assert_string_equal(ctx.errmsg, "");
	nbrun__docker_free(d);
}

/*
 * A dead pid of this host is an orphan only in the pid namespace that made
 * it: a server in a container (a Swarm task has its node's host name) must
 * not remove what processes of the host or of another container made.
 */
static void gc_pid_namespace(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__docker *d;
	struct nbrun__gc_counts c = { 99, 99 };
	char host[256] = "", ns[64], containers[2048], volumes[1024];
	pid_t dead;
	int st;

	/* a pid that was used and is gone now */
	dead = fork();
	assert_true(dead >= 0);
	if (dead == 0)
		_exit(0);
	assert_int_equal(waitpid(dead, &st, 0), dead);
	gethostname(host, sizeof(host) - 1);
	nbrun__pidns(ns, sizeof(ns));
	assert_non_null(strstr(ns, "pid:["));
#define GC_LABELS(ns_) "{\"nbrun.run\":\"x\",\"nbrun.created\":\"99999999999\",\"nbrun.host\":\"%s\"," \
		       "\"nbrun.pid\":\"%ld\"" ns_ "}"
	snprintf(containers, sizeof(containers),
		 "[{\"Id\":\"c1mine\",\"Labels\":" GC_LABELS(",\"nbrun.pidns\":\"%s\"") "},"
		 "{\"Id\":\"c2other\",\"Labels\":" GC_LABELS(",\"nbrun.pidns\":\"pid:[1]\"") "},"
		 "{\"Id\":\"c3unlabelled\",\"Labels\":" GC_LABELS("") "}]",
		 host, (long)dead, ns, host, (long)dead, host, (long)dead);
	snprintf(volumes, sizeof(volumes),
		 "{\"Volumes\":[{\"Name\":\"v1other\",\"Labels\":" GC_LABELS(",\"nbrun.pidns\":\"pid:[1]\"") "}]}",
		 host, (long)dead);
#undef GC_LABELS
	answer("GET /v1.41/containers/json", NULL, 200, containers);
	answer("GET /v1.41/volumes?", NULL, 200, volumes);
	S.status = 204;
	S.body = "";
	S.body_len = 0;
	d = connect_ok(&ctx);
	assert_int_equal(nbrun__gc(d, &ctx, -1, &c), 0);
	/* its own namespace's and an older nbrun's (no namespace label) go */
	assert_int_equal(c.removed, 2);
	assert_int_equal(count_asked("DELETE /v1.41/containers/c1mine"), 1);
	assert_int_equal(count_asked("DELETE /v1.41/containers/c3unlabelled"), 1);
	assert_int_equal(count_asked("DELETE /v1.41/containers/c2other"), 0);
	assert_int_equal(count_asked("DELETE /v1.41/volumes/v1other"), 0);
	nbrun__docker_free(d);
}

/* nbrun gc against the same engine: both counts printed, the failure said, exit 4. */
static void gc_cli(void **state)
{
	const char *nbrun = getenv("NBRUN");
	char cmd[1024], out[256] = "", err[1024] = "";
	FILE *f;
	int st;

	if (!nbrun || strchr(nbrun, '\''))
		fail_msg("NBRUN names no nbrun binary (meson test sets it)");
	gc_answers();
	srv_start();
	snprintf(cmd, sizeof(cmd), "'%s' gc --older-than 1h >'%s/out' 2>'%s/err'", nbrun, S.dir, S.dir);
	st = system(cmd);
	assert_true(WIFEXITED(st));
	snprintf(cmd, sizeof(cmd), "%s/out", S.dir);
	f = fopen(cmd, "r");
	assert_non_null(f);
	out[fread(out, 1, sizeof(out) - 1, f)] = '\0';
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s/err", S.dir);
	f = fopen(cmd, "r");
	assert_non_null(f);
	err[fread(err, 1, sizeof(err) - 1, f)] = '\0';
	fclose(f);
	if (WEXITSTATUS(st) != 4 || strcmp(out, "removed 2\ncould not remove 3\n") ||
	    strncmp(err, "nbrun: error: 3 of 5 containers and volumes could not be removed", 64) ||
	    strchr(err, '\n') != err + strlen(err) - 1)
		fail_msg("exit %d, stdout %s, stderr %s", WEXITSTATUS(st), out, err);
}

/* ---- pool options ------------------------------------------------------------ */

/* Options the pool refuses before it asks the engine anything. */
static void pool_refused(const struct nbrun_pool_options *o, const char *says)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun_pool *p = (void *)0x1;

	assert_int_equal(nbrun_pool_new(&p, &ctx, o), NBRUN_EINVAL);
	assert_null(p);
	if (!strstr(ctx.errmsg, says))
		fail_msg("message: %s (wanted: %s)", ctx.errmsg, says);
	assert_int_equal(n_asked(), 0);
}

/* A list of languages with none in it is a mistake, not Python's default. */
static void pool_languages_empty(void **state)
{
	static const struct nbrun_pool_language langs[] = { { "python", 1 } };
	struct nbrun_pool_options o = NBRUN_POOL_OPTIONS_INIT;

	o.languages = langs;
	o.language_count = 0;
	pool_refused(&o, "none is named");
}

/* Options that pass the checks: the pool then asks the engine, here absent. */
static void pool_accepted(const struct nbrun_pool_options *o)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun_pool *p = (void *)0x1;
	char nope[256];

	snprintf(nope, sizeof(nope), "%s/nope.sock", S.dir);
	set_host(nope);
	assert_int_equal(nbrun_pool_new(&p, &ctx, o), NBRUN_EENGINE);
	assert_null(p);
	set_host(S.sock);
}

static void pool_options_v2(void **state)
{
	static const struct nbrun_pool_language unknown[] = { { "python", 1 }, { "cobol", 1 } };
	static const struct nbrun_pool_language twice[] = { { "r", 1 }, { "python", 2 }, { "IR", 1 } };
	static const struct nbrun_pool_language zero[] = { { "python", 1 }, { "bash", 0 } };
	static const struct nbrun_pool_language big[] = { { "js", 65 } };
	static const struct nbrun_pool_language over[] = { { "python", 40 }, { "r", 20 }, { "bash", 5 } };
	static const struct nbrun_pool_language fits[] = { { "python", 40 }, { "r", 20 }, { "bash", 4 } };
	struct nbrun_pool_options o = NBRUN_POOL_OPTIONS_INIT;

	o.languages = unknown;
	o.language_count = 2;
	pool_refused(&o, "unknown language 'cobol' for the pool");
	o.languages = twice;
	o.language_count = 3;
	pool_refused(&o, "the pool names r twice");
	o.languages = zero;
	o.language_count = 2;
	pool_refused(&o, "the pool's bash size must be between 1 and 64");
	o.languages = big;
	o.language_count = 1;
	pool_refused(&o, "the pool's javascript size must be between 1 and 64");
	o.languages = over;
	o.language_count = 3;
	pool_refused(&o, "pool size must be between 1 and 64 over all languages");
	/* the sizes of the list count, not size */
	o.languages = fits;
	o.size = 0;
	pool_accepted(&o);
	o.version = NBRUN_POOL_OPTIONS_VERSION + 1;
	pool_refused(&o, "of another version");
}

/* Version 1 options know no languages: those fields are not read, size is. */
static void pool_options_v1(void **state)
{
	static const struct nbrun_pool_language unknown[] = { { "cobol", 1 } };
	struct nbrun_pool_options o = NBRUN_POOL_OPTIONS_INIT;

	o.version = 1;
	o.languages = unknown;
	o.language_count = 0; /* an empty list too: only version 2 reads it */
	pool_accepted(&o);
	o.language_count = 1;
	pool_accepted(&o);
	o.size = 65;
	pool_refused(&o, "pool size must be between 1 and 64");
	o.size = 0;
	pool_refused(&o, "pool size must be between 1 and 64");
}

int main(int argc, char **argv)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(api_too_old),
		T(api_newer_is_capped),
		T(api_in_range_is_kept),
		T(api_from_version_endpoint),
		T(api_from_version_endpoint_too_old),
		T(ping_fails),
		T(socket_missing),
		T(socket_is_a_file),
		T(socket_nobody_listening),
		T(host_unsupported),
		T(error_message_from_body),
		T(error_message_control_chars),
		T(error_message_not_json),
		T(error_message_huge),
		T(reply_json_parsed),
		T(reply_body_over_cap),
		T(reply_buf_respects_its_cap),
		T(server_never_answers),
		T(cancel_during_request),
		T(attach_split_frames),
		T(attach_stream_ends_in_frame),
		T(attach_bad_engine_framing),
		T(attach_cancelled),
		T(attach_refused),
		T(download_ok),
		T(download_cut),
		T(download_not_found),
		T(download_server_error),
		T(download_hangs),
		T(sandbox_no_image),
		T(sandbox_named_image_missing),
		T(sandbox_data_volume_fails),
		T(sandbox_container_refused),
		T(sandbox_container_spec),
		T(sandbox_runsc_spec),
		T(sandbox_runtime_unknown),
		T(sandbox_runtime_not_used),
		T(sandbox_destroy_idempotent),
		T(sandbox_destroy_despite_cancel),
		T(sandbox_new_invalid),
		T(sandbox_put_archive_refused),
		T(sandbox_get_archive_missing),
		T(gc_counts_failures),
		T(gc_public_counts),
		T(gc_all_removed),
		T(gc_pid_namespace),
		T(gc_cli),
		T(pool_languages_empty),
		T(pool_options_v2),
		T(pool_options_v1),
	};
	signal(SIGPIPE, SIG_IGN);
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
