/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the HTTP API of nbrun serve (src/serve/http/, mcp/mcp-http.c),
 * request by request through the real handler: the server answers on a
 * unix socket of its scratch state directory, in this process, and each
 * request of the input is sent on its own connection. Nothing reaches an
 * engine (fuzz-serve.h): runs and sessions fail as with dockerd down,
 * after their bodies are parsed and validated; GET /v1/runs/ID reads the
 * fixture run.
 *
 * The input is up to FUZZ_MAX_REQUESTS requests separated by "\n\x1e\n".
 * A request is one flags byte, the path up to the first '\n' (bytes that
 * cannot be in a request line are percent-encoded, so the handler sees any
 * byte after decoding), then the body:
 *   bits 0-2  method: GET POST PUT DELETE HEAD OPTIONS PATCH POST
 *   bits 3-4  Authorization: the token, a tenant's token, a wrong token, none
 *   bit 5     Accept: application/x-ndjson (a streamed run or execute)
 *   bit 6     MCP headers: Accept for both answers, MCP-Protocol-Version and
 *             the Mcp-Session-Id the last initialize answered
 *   bit 7     the body sent in chunked transfer encoding
 *
 * Every request must be answered (no hang), with a well-formed response:
 * a JSON body parses (an error has "error"), every NDJSON line and SSE
 * event is JSON, and nothing but the health check answers 2xx without a
 * valid token.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "buf.h"
#include "fuzz-serve.h"
#include "fuzz-util.h"

#define FUZZ_MAX_REQUESTS 8
#define FUZZ_ANSWER_MS 60000
#define FUZZ_TENANT_TOKEN "fuzz-tenant-token-fedcba9876543210"

static struct sockaddr_un fuzz_addr;
static struct serve_http *fuzz_http;
static char fuzz_mcp_sid[256];

static void fuzz_http_exit(void)
{
	serve_http_stop(fuzz_http);
	unlink(fuzz_addr.sun_path);
}

static int fuzz_http_start(struct serve *s)
{
	int fd;

	if (fuzz_http)
		return 0;
	signal(SIGPIPE, SIG_IGN);
	/* The server's: serve_free() frees it. */
	s->tenant_tokens = calloc(1, sizeof(*s->tenant_tokens));
	if (!s->tenant_tokens || !(s->tenant_tokens[0] = strdup(FUZZ_TENANT_TOKEN)))
		return -1;
	s->n_tenant_tokens = 1;
	fuzz_addr.sun_family = AF_UNIX;
	if ((size_t)snprintf(fuzz_addr.sun_path, sizeof(fuzz_addr.sun_path), "%s/http.sock",
			     s->state_dir) >= sizeof(fuzz_addr.sun_path))
		return -1;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&fuzz_addr, sizeof(fuzz_addr)) < 0 ||
	    listen(fd, 64) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	fuzz_http = serve_http_start(s, fd);
	if (!fuzz_http)
		return -1;
	atexit(fuzz_http_exit);
	return 0;
}

/* Send the whole request while reading the answer, until the server closes. */
static void fuzz_exchange(struct buf *resp, const struct buf *req)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	size_t sent = 0;
	char chunk[65536];

	fuzz_check(fd >= 0, "a socket");
	fuzz_check(connect(fd, (struct sockaddr *)&fuzz_addr, sizeof(fuzz_addr)) == 0 ||
		   errno == EINPROGRESS || errno == EAGAIN, "the server accepts connections");
	for (;;) {
		struct pollfd p = { fd, POLLIN | (sent < req->len ? POLLOUT : 0), 0 };
		int n = poll(&p, 1, FUZZ_ANSWER_MS);
		ssize_t k;

		fuzz_check(n != 0, "an answer within a minute (no hang)");
		if (n < 0) {
			fuzz_check(errno == EINTR, "poll");
			continue;
		}
		if ((p.revents & POLLOUT) && sent < req->len) {
			k = send(fd, req->data + sent, req->len - sent, MSG_NOSIGNAL);
			if (k > 0)
				sent += (size_t)k;
			else if (k < 0 && errno != EAGAIN && errno != EINTR)
				sent = req->len; /* the server stopped reading: its answer follows */
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			k = recv(fd, chunk, sizeof(chunk), 0);
			if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
				break;
			if (k > 0)
				fuzz_check(buf_append(resp, chunk, (size_t)k) == 0, "an answer within its cap");
		}
	}
	close(fd);
}

static const char *fuzz_header(const char *head, const char *name, char *val, size_t vlen)
{
	size_t n = strlen(name);

	for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
		if (!strncasecmp(p + 2, name, n) && p[2 + n] == ':') {
			const char *v = p + 3 + n;
			size_t l;
			while (*v == ' ')
				v++;
			l = strcspn(v, "\r\n");
			if (l >= vlen)
				l = vlen - 1;
			memcpy(val, v, l);
			val[l] = '\0';
			return val;
		}
	}
	return NULL;
}

/* Undo chunked transfer encoding in place; false when malformed. */
static bool fuzz_unchunk(char *body, size_t *len)
{
	size_t in = 0, out = 0;

	for (;;) {
		char *end;
		unsigned long n;
		char *crlf = memmem(body + in, *len - in, "\r\n", 2);
		if (!crlf)
			return false;
		n = strtoul(body + in, &end, 16);
		if (end == body + in || n > *len - (size_t)(crlf + 2 - body))
			return false;
		in = (size_t)(crlf + 2 - body);
		if (n == 0)
			break;
		memmove(body + out, body + in, n);
		out += n;
		in += n;
		if (*len - in < 2 || memcmp(body + in, "\r\n", 2))
			return false;
		in += 2;
	}
	*len = out;
	body[out] = '\0';
	return true;
}

static void fuzz_check_lines(const char *body, size_t len, const char *prefix, const char *what)
{
	size_t plen = strlen(prefix);

	for (const char *p = body, *end = body + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n && (!plen || (n >= plen && !memcmp(p, prefix, plen)))) {
			json_t *j = json_loadb(p + plen, n - plen, 0, NULL);
			fuzz_check(json_is_object(j), what);
			json_decref(j);
		}
		p += n + 1;
	}
}

static void fuzz_check_answer(struct buf *resp, bool authorized, bool head)
{
	char *hend, val[256];
	char *body;
	size_t blen;
	unsigned int status = 0;
	json_t *doc;

	fuzz_check(resp->len > 12 && !strncmp(resp->data, "HTTP/1.", 7), "a status line");
	status = (unsigned int)strtoul(resp->data + 9, NULL, 10);
	fuzz_check(status >= 100 && status < 600, "a status code");
	hend = strstr(resp->data, "\r\n\r\n");
	fuzz_check(hend != NULL, "headers end");
	hend[2] = '\0';
	body = hend + 4;
	blen = resp->len - (size_t)(body - resp->data);
	if (fuzz_header(resp->data, "Mcp-Session-Id", val, sizeof(val)))
		snprintf(fuzz_mcp_sid, sizeof(fuzz_mcp_sid), "%s", val);
	if (head)
		return;
	if (fuzz_header(resp->data, "Transfer-Encoding", val, sizeof(val)) &&
	    !strcasecmp(val, "chunked"))
		fuzz_check(fuzz_unchunk(body, &blen), "well-formed chunks");
	if (!fuzz_header(resp->data, "Content-Type", val, sizeof(val)))
		val[0] = '\0';
	if (!strcmp(val, "application/json")) {
		doc = json_loadb(body, blen, 0, NULL);
		fuzz_check(json_is_object(doc) || json_is_array(doc), "a JSON answer parses");
		fuzz_check(status < 400 || json_object_get(doc, "error"), "an error says so");
		if (!authorized && status < 300)
			fuzz_check(json_is_string(json_object_get(doc, "version")) &&
				   json_object_get(doc, "pool"), "only the health check answers without a token");
		json_decref(doc);
	} else {
		fuzz_check(authorized || status >= 300, "only the health check answers without a token");
		if (!strcmp(val, "application/x-ndjson"))
			fuzz_check_lines(body, blen, "", "an NDJSON line is a JSON object");
		else if (!strcmp(val, "text/event-stream"))
			fuzz_check_lines(body, blen, "data: ", "an SSE event is a JSON object");
	}
}

static void fuzz_request(const uint8_t *p, size_t n)
{
	static const char *const methods[] = { "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS",
					       "PATCH", "POST" };
	static const char *const auth[] = { "Authorization: Bearer fuzz-token-0123456789abcdef\r\n",
					    "Authorization: Bearer " FUZZ_TENANT_TOKEN "\r\n",
					    "Authorization: Bearer fuzz-token-0123456789abcdeF\r\n", "" };
	struct buf req = BUF_INIT(1u << 24), resp = BUF_INIT(1u << 26);
	const uint8_t *nl, *body;
	size_t blen;
	uint8_t flags;
	int rc = 0;

	if (n < 1)
		return;
	flags = p[0];
	p++;
	n--;
	nl = memchr(p, '\n', n);
	body = nl ? nl + 1 : p + n;
	blen = nl ? n - (size_t)(body - p) : 0;
	rc |= buf_printf(&req, "%s ", methods[flags & 7]);
	if (!nl || nl == p || p[0] != '/')
		rc |= buf_append(&req, "/", 1);
	for (const uint8_t *q = p; q < (nl ? nl : p + n); q++) {
		if (*q > 0x20 && *q < 0x7f)
			rc |= buf_append(&req, q, 1);
		else
			rc |= buf_printf(&req, "%%%02X", *q);
	}
	rc |= buf_printf(&req, " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s",
			 auth[(flags >> 3) & 3]);
	if (flags & 32)
		rc |= buf_printf(&req, "Accept: application/x-ndjson\r\n");
	if (flags & 64) {
		rc |= buf_printf(&req, "Accept: application/json, text/event-stream\r\n"
				 "MCP-Protocol-Version: 2025-06-18\r\n");
		if (fuzz_mcp_sid[0])
			rc |= buf_printf(&req, "Mcp-Session-Id: %s\r\n", fuzz_mcp_sid);
	}
	if (flags & 128) {
		rc |= buf_printf(&req, "Transfer-Encoding: chunked\r\n\r\n");
		/* Uneven chunks, so the handler gets the body in pieces. */
		for (size_t off = 0, k = 1; off < blen; off += k, k = k * 3 + 1) {
			if (k > blen - off)
				k = blen - off;
			rc |= buf_printf(&req, "%zx\r\n", k);
			rc |= buf_append(&req, body + off, k);
			rc |= buf_append(&req, "\r\n", 2);
		}
		rc |= buf_printf(&req, "0\r\n\r\n");
	} else {
		rc |= buf_printf(&req, "Content-Length: %zu\r\n\r\n", blen);
		rc |= buf_append(&req, body, blen);
	}
	fuzz_check(rc == 0, "the request fits its buffer");
	fuzz_exchange(&resp, &req);
	fuzz_check(buf_append(&resp, "", 1) == 0, "room for a NUL");
	resp.len--;
	fuzz_check_answer(&resp, ((flags >> 3) & 3) < 2, (flags & 7) == 4);
	buf_free(&req);
	buf_free(&resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct serve *s = fuzz_serve();
	const uint8_t *p = data, *end = data + size;

	if (!s || fuzz_http_start(s) < 0) {
		fprintf(stderr, "fuzz-http: cannot start the server\n");
		abort();
	}
	fuzz_mcp_sid[0] = '\0';
	for (int i = 0; i < FUZZ_MAX_REQUESTS && p < end; i++) {
		const uint8_t *sep = memmem(p, (size_t)(end - p), "\n\x1e\n", 3);
		const uint8_t *stop = sep ? sep : end;
		fuzz_request(p, (size_t)(stop - p));
		p = sep ? sep + 3 : end;
	}
	fuzz_serve_clean(s);
	return 0;
}
