/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the MCP JSON-RPC dispatcher (src/serve/mcp/mcp.c and the tools of
 * mcp-tools.c and mcp-session-tools.c) as `nbrun mcp` and POST /mcp drive it.
 * The input is what a client sends on stdio: one message a line (a
 * request, a notification, a response or a batch). The first byte picks
 * the protocol revision the client negotiates first (or none: the
 * messages come before initialize). Tools that need the engine find none
 * (fuzz-serve.h) and must fail with a clean answer; resources/read reads
 * the fixture run.
 *
 * Every reply must be one JSON-RPC response or a batch of them, answering
 * a request of the input, and every progress notification a JSON-RPC
 * notification. FUZZ_VERBOSE=1 prints each message and its reply.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-serve.h"
#include "fuzz-util.h"
#include "mcp.h"

static void fuzz_notify(const char *json, void *payload)
{
	json_t *n = json_loads(json, 0, NULL);

	(void)payload;
	fuzz_check(json_is_object(n) && json_is_string(json_object_get(n, "method")) &&
		   !json_object_get(n, "id"), "a notification is a JSON-RPC notification");
	json_decref(n);
}

/* One response object: jsonrpc 2.0, an id, exactly one of result and error. */
static void fuzz_check_response(const json_t *r)
{
	const json_t *e = json_object_get(r, "error");
	const json_t *id = json_object_get(r, "id");

	fuzz_check(json_is_object(r), "a response is an object");
	fuzz_check(json_is_string(json_object_get(r, "jsonrpc")) &&
		   !strcmp(json_string_value(json_object_get(r, "jsonrpc")), "2.0"), "jsonrpc 2.0");
	fuzz_check(json_is_string(id) || json_is_integer(id) || json_is_null(id), "an id");
	fuzz_check(!e != !json_object_get(r, "result"), "either result or error");
	if (e) {
		fuzz_check(json_is_integer(json_object_get(e, "code")) &&
			   json_is_string(json_object_get(e, "message")), "an error has a code and a message");
		fuzz_check(!strpbrk(json_string_value(json_object_get(e, "message")), "\r\n"),
			   "an error message is one line");
	} else {
		fuzz_check(json_is_object(json_object_get(r, "result")), "a result is an object");
		fuzz_check(!json_is_null(id), "a result answers a request");
	}
}

static void fuzz_check_reply(const char *out)
{
	json_error_t jerr;
	json_t *r = json_loads(out, 0, &jerr), *e;
	size_t i;

	fuzz_check(r != NULL, "a reply is JSON");
	if (json_is_array(r)) {
		fuzz_check(json_array_size(r) > 0, "no empty batch reply");
		json_array_foreach(r, i, e)
			fuzz_check_response(e);
	} else {
		fuzz_check_response(r);
	}
	json_decref(r);
}

static void fuzz_send(struct mcp_server *m, struct mcp_session *sess, const char *text, size_t len)
{
	char *out = NULL;

	mcp_handle_text(&out, m, sess, text, len, fuzz_notify, NULL);
	if (getenv("FUZZ_VERBOSE"))
		fprintf(stderr, "-> %.*s\n<- %.600s\n", (int)(len > 600 ? 600 : len), text,
			out ? out : "(nothing)");
	if (out)
		fuzz_check_reply(out);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const versions[] = { NULL, "2025-11-25", "2025-06-18", "2025-03-26",
						"2024-11-05", "2024-10-07", "1999-01-01", NULL };
	struct serve *s = fuzz_serve();
	struct mcp_server *m;
	struct mcp_session *sess;
	const char *v, *p, *end, *nl;
	char init[256];

	if (!s)
		abort();
	if (size < 1)
		return 0;
	m = mcp_server_new(s);
	sess = m ? mcp_session_new(m) : NULL;
	fuzz_check(sess != NULL, "a server and a session");
	v = versions[data[0] & 7];
	if (v) {
		snprintf(init, sizeof(init),
			 "{\"jsonrpc\": \"2.0\", \"id\": 0, \"method\": \"initialize\", \"params\": "
			 "{\"protocolVersion\": \"%s\", \"capabilities\": {}, \"clientInfo\": "
			 "{\"name\": \"fuzz\", \"version\": \"1\"}}}", v);
		fuzz_send(m, sess, init, strlen(init));
		fuzz_check(mcp_session_version(m, sess) != NULL, "initialize negotiates a version");
		if (data[0] & 8) {
			static const char done[] =
				"{\"jsonrpc\": \"2.0\", \"method\": \"notifications/initialized\"}";
			fuzz_send(m, sess, done, sizeof(done) - 1);
		}
	}
	/* A message a line, as nbrun mcp reads stdin. */
	p = (const char *)data + 1;
	end = (const char *)data + size;
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		if (nl > p)
			fuzz_send(m, sess, p, (size_t)(nl - p));
		p = nl + 1;
	}
	if (data[0] & 16)
		mcp_session_close(m, sess);
	mcp_session_unref(m, sess);
	mcp_server_free(m);
	fuzz_serve_clean(s);
	return 0;
}
