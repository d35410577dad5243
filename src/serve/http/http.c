/* SPDX-License-Identifier: MIT */
/* nbrun serve: libmicrohttpd glue: routing, bearer-token auth, bounded bodies, replies. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "mcp.h"
#include "mime.h"
#include "serve.h"

/* Failed authentications are counted per client address over this window. */
#define SERVE_AUTH_WINDOW_MS 60000
/* Client addresses tracked at once; beyond, the oldest window is forgotten. */
#define SERVE_AUTH_SLOTS 1024

/* Failures of one client address (IPv4, an IPv6 /64, or a unix-socket peer's uid). */
struct serve_auth_slot {
	unsigned char key[9]; /* family, then 4 or 8 address bytes */
	bool used;
	uint64_t start_ms;
	unsigned int fails;
};

struct serve_http {
	struct MHD_Daemon *daemon;
	struct serve *s;
	unsigned char token_hash[32];
	/* the tokens of tenants 1..n (tenant 0 is token_hash) */
	unsigned char (*tenant_hash)[32];
	size_t n_tenants;
	pthread_mutex_t auth_lock;
	struct serve_auth_slot *auth;
};

enum serve_route {
	ROUTE_NONE,
	ROUTE_HEALTH,
	ROUTE_METRICS,
	ROUTE_RUNS,          /* POST /v1/runs */
	ROUTE_RUN_RESULT,    /* GET /v1/runs/{id} */
	ROUTE_RUN_NOTEBOOK,  /* GET /v1/runs/{id}/notebook */
	ROUTE_RUN_IMAGE,     /* GET /v1/runs/{id}/images/{name} */
	ROUTE_RUN_FILE,      /* GET /v1/runs/{id}/files/{path} */
	ROUTE_MCP,           /* POST, DELETE /mcp (mcp-http.c) */
};

/* Per-request state, from the first call of the handler to the completion callback. */
struct serve_conn {
	struct buf body;
	bool too_large;
	bool mcp; /* a POST /mcp */
	bool sessions; /* a POST or PUT below /v1/sessions */
	int tenant;
	uint64_t discarded; /* bytes past the cap; a body that goes on and on gets the connection closed */
	uint64_t t0;
};

static int serve_hash(unsigned char out[32], const char *s, size_t n)
{
	unsigned int len = 0;

	return EVP_Digest(s, n, out, &len, EVP_sha256(), NULL) == 1 && len == 32 ? 0 : -1;
}

/*
 * The tenant whose token was sent (0 for the first token), or -1. Constant
 * time whatever the length of what was sent: SHA-256 digests are compared,
 * every one of them.
 */
static int serve_tenant(struct serve_http *h, struct MHD_Connection *c)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	unsigned char got[32];
	int tenant = -1;

	if (!v || strncasecmp(v, "Bearer ", 7))
		return -1;
	v += 7;
	while (*v == ' ')
		v++;
	if (serve_hash(got, v, strlen(v)) < 0)
		return -1;
	if (CRYPTO_memcmp(got, h->token_hash, sizeof(got)) == 0)
		tenant = 0;
	for (size_t i = 0; i < h->n_tenants; i++)
		if (CRYPTO_memcmp(got, h->tenant_hash[i], sizeof(got)) == 0)
			tenant = (int)i + 1;
	return tenant;
}

/*
 * Who may read a run (serve_request.owner): "" for the first token, else the
 * hex SHA-256 of the tenant's token.
 */
static void serve_owner_of(char out[65], struct serve_http *h, int tenant)
{
	serve_owner_hex(out, h->s, tenant);
}

/* The rate limiter's key of the peer: its IPv4 address, its IPv6 /64, or its uid on a unix socket. */
static void serve_peer_key(unsigned char key[9], struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	struct ucred cred;
	socklen_t len = sizeof(cred);

	memset(key, 0, 9);
	if ((!sa || sa->sa_family == AF_UNIX) && fi &&
	    getsockopt(fi->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
		/* One local user cannot lock another out of the socket. */
		key[0] = 1;
		memcpy(key + 1, &cred.uid, sizeof(cred.uid));
	} else if (sa && sa->sa_family == AF_INET) {
		key[0] = 4;
		memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a)) {
			key[0] = 4;
			memcpy(key + 1, a->s6_addr + 12, 4);
		} else {
			key[0] = 6;
			memcpy(key + 1, a->s6_addr, 8); /* one host often has a whole /64 */
		}
	}
}

/* The slot of key, made (oldest window forgotten) when make is set; auth_lock held. */
static struct serve_auth_slot *serve_auth_slot(struct serve_http *h, const unsigned char key[9],
					       uint64_t now, bool make)
{
	struct serve_auth_slot *free_slot = NULL, *oldest = NULL;

	for (size_t i = 0; i < SERVE_AUTH_SLOTS; i++) {
		struct serve_auth_slot *a = &h->auth[i];
		if (a->used && now - a->start_ms >= SERVE_AUTH_WINDOW_MS)
			a->used = false;
		if (a->used && !memcmp(a->key, key, sizeof(a->key)))
			return a;
		if (!a->used && !free_slot)
			free_slot = a;
		if (a->used && (!oldest || a->start_ms < oldest->start_ms))
			oldest = a;
	}
	if (!make)
		return NULL;
	if (!free_slot)
		free_slot = oldest;
	memcpy(free_slot->key, key, sizeof(free_slot->key));
	free_slot->used = true;
	free_slot->start_ms = now;
	free_slot->fails = 0;
	return free_slot;
}

/*
 * Seconds until the peer may try a token again (0: now). A peer that sent
 * auth_failures wrong or missing tokens within a minute is refused until
 * the minute is over, whatever it sends: it learns nothing more. Other
 * addresses are not affected.
 */
static unsigned int serve_auth_blocked(struct serve_http *h, struct MHD_Connection *c)
{
	unsigned char key[9];
	uint64_t now = clock_mono_ms();
	struct serve_auth_slot *a;
	unsigned int wait = 0;

	serve_peer_key(key, c);
	pthread_mutex_lock(&h->auth_lock);
	a = serve_auth_slot(h, key, now, false);
	if (a && a->fails >= h->s->auth_failures)
		wait = (unsigned int)((a->start_ms + SERVE_AUTH_WINDOW_MS - now + 999) / 1000);
	pthread_mutex_unlock(&h->auth_lock);
	return wait;
}

static void serve_auth_failed(struct serve_http *h, struct MHD_Connection *c)
{
	unsigned char key[9];
	struct serve_auth_slot *a;

	serve_peer_key(key, c);
	pthread_mutex_lock(&h->auth_lock);
	a = serve_auth_slot(h, key, clock_mono_ms(), true);
	a->fails++;
	pthread_mutex_unlock(&h->auth_lock);
}

static enum MHD_Result serve_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
					 const char *value)
{
	size_t *total = cls;

	(void)kind;
	*total += strlen(key) + (value ? strlen(value) : 0) + 4;
	return MHD_YES;
}

static void serve_access_log(struct MHD_Connection *c, const char *method, const char *url,
		      unsigned int status, const struct serve_conn *sc)
{
	char clean[201];
	size_t i;

	/* The url is decoded: a %0a in it must not start a forged log line. */
	for (i = 0; url[i] && i < sizeof(clean) - 1; i++)
		clean[i] = (unsigned char)url[i] < 0x20 || url[i] == 0x7f ? '?' : url[i];
	clean[i] = '\0';
	serve_info("nbrun: serve: %.16s %s %u %.3fs", method, clean, status,
		sc ? (double)(clock_mono_ms() - sc->t0) / 1000.0 : 0.0);
}

static enum MHD_Result serve_queue(struct MHD_Connection *c, unsigned int status,
				   struct MHD_Response *r, const char *type)
{
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	if (type)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	/* Nothing the sandbox made may run as a page of this origin. */
	MHD_add_response_header(r, "Content-Security-Policy", "sandbox; default-src 'none'");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result serve_send(struct MHD_Connection *c, struct serve_reply *reply,
				  const char *method, const char *url, const struct serve_conn *sc)
{
	struct MHD_Response *r;
	char *text = reply->body ? json_dumps(reply->body, JSON_COMPACT) : NULL;
	unsigned int status = serve_kind_status(reply->kind);
	char retry[16];

	json_decref(reply->body);
	reply->body = NULL;
	if (!text) {
		static const char oom[] = "{\"error\": \"out of memory\", \"kind\": \"internal\"}";
		status = 500;
		r = MHD_create_response_from_buffer(strlen(oom), (void *)oom, MHD_RESPMEM_PERSISTENT);
	} else {
		r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
		if (!r)
			free(text);
	}
	if (r && reply->retry_after) {
		snprintf(retry, sizeof(retry), "%u", reply->retry_after);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, retry);
	}
	if (r && status == 405)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW,
					!strcmp(url, "/v1/runs") ? "POST" : "GET, HEAD");
	if (r && status == 401)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	serve_access_log(c, method, url, status, sc);
	return serve_queue(c, status, r, "application/json");
}

static enum MHD_Result serve_send_error(struct MHD_Connection *c, enum serve_kind kind,
					const char *msg, const char *method, const char *url,
					const struct serve_conn *sc)
{
	struct serve_reply reply = SERVE_REPLY_INIT;

	serve_reply_error(&reply, kind, "%s", msg);
	return serve_send(c, &reply, method, url, sc);
}

/*
 * Split /v1/runs/{id}[/notebook | /images/NAME | /files/PATH]. The url is
 * already percent-decoded by libmicrohttpd; what it names is checked when
 * it is opened (serve_open_below).
 */
static bool serve_origin_allowed(const struct serve *s, struct MHD_Connection *c)
{
	const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	size_t n;

	if (!origin)
		return true;
	n = strlen(origin);
	while (n && origin[n - 1] == '/')
		n--;
	for (size_t i = 0; i < s->n_allow_origins; i++)
		if (strlen(s->allow_origins[i]) == n && !strncasecmp(s->allow_origins[i], origin, n))
			return true;
	return false;
}

static enum serve_route serve_route_of(const char *url, char *id, size_t idlen, const char **rest)
{
	const char *p;
	size_t n;

	*rest = NULL;
	if (!strcmp(url, "/v1/health"))
		return ROUTE_HEALTH;
	if (!strcmp(url, "/metrics"))
		return ROUTE_METRICS;
	if (!strcmp(url, "/v1/runs"))
		return ROUTE_RUNS;
	if (!strcmp(url, "/mcp"))
		return ROUTE_MCP;
	if (strncmp(url, "/v1/runs/", 9))
		return ROUTE_NONE;
	p = url + 9;
	n = strcspn(p, "/");
	if (n == 0 || n >= idlen)
		return ROUTE_NONE;
	memcpy(id, p, n);
	id[n] = '\0';
	p += n;
	if (!*p)
		return ROUTE_RUN_RESULT;
	if (!strcmp(p, "/notebook"))
		return ROUTE_RUN_NOTEBOOK;
	if (!strncmp(p, "/images/", 8) && p[8] && !strchr(p + 8, '/')) {
		*rest = p + 1; /* "images/NAME", as in the result */
		return ROUTE_RUN_IMAGE;
	}
	if (!strncmp(p, "/files/", 7) && p[7]) {
		*rest = p + 1;
		return ROUTE_RUN_FILE;
	}
	return ROUTE_NONE;
}

/* A stored output of a run, streamed from its file. */
static enum MHD_Result serve_send_file(struct serve_http *h, struct MHD_Connection *c,
				       const char *id, const char *owner, const char *rel,
				       enum serve_route route,
				       const char *method, const char *url,
				       const struct serve_conn *sc)
{
	struct MHD_Response *r;
	struct stat st;
	int run_fd = -1, fd = -1;
	const char *type;

	run_fd = serve_open_run(h->s, id, owner);
	if (run_fd < 0)
		goto missing;
	fd = serve_open_below(run_fd, rel);
	close(run_fd);
	if (fd < 0 || fstat(fd, &st) < 0)
		goto missing;
	r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	if (!r)
		goto missing;
	if (route == ROUTE_RUN_NOTEBOOK)
		type = "application/x-ipynb+json";
	else if (route == ROUTE_RUN_IMAGE)
		type = mime_of_name(rel);
	else
		type = "application/octet-stream";
	serve_access_log(c, method, url, 200, sc);
	return serve_queue(c, 200, r, type);
missing:
	if (fd >= 0)
		close(fd);
	return serve_send_error(c, SERVE_E_NOT_FOUND, "no such run or output", method, url, sc);
}

static enum MHD_Result serve_finish_post(struct serve_http *h, struct MHD_Connection *c,
					 struct serve_conn *sc, const char *method, const char *url)
{
	struct serve_reply reply = SERVE_REPLY_INIT;
	struct serve_request req;
	char tmp_root[4096];

	if (sc->too_large)
		return serve_send_error(c, SERVE_E_TOO_LARGE, "request body larger than 64 MiB", method,
					url, sc);
	snprintf(tmp_root, sizeof(tmp_root), "%s/tmp", h->s->state_dir);
	if (serve_request_parse(&req, &reply, h->s, sc->body.data ? sc->body.data : "", sc->body.len,
				tmp_root) == 0) {
		if (serve_request_key(&req, &reply, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key"),
				      sc->body.data ? sc->body.data : "", sc->body.len) < 0) {
			serve_request_free(&req);
			return serve_send(c, &reply, method, url, sc);
		}
		buf_free(&sc->body); /* the files are on disk now */
		serve_owner_of(req.owner, h, sc->tenant);
		req.refs = true;
		if (serve_wants_ndjson(c)) {
			unsigned int status = 500;
			struct MHD_Response *r = serve_stream_run(h->s, c, &req, &status);
			serve_access_log(c, method, url, status, sc);
			return serve_queue(c, status, r, NULL);
		}
		serve_run(&reply, h->s, &req);
		serve_request_free(&req);
	}
	return serve_send(c, &reply, method, url, sc);
}

/* A request whose body comes next: its state, counted as a post open until it is answered. */
/*
 * What the raw request target says before libmicrohttpd decodes it: a
 * %00 would cut the decoded path short (a/%00b naming a), and the query
 * string, which the decoded url leaves out, counts against the head's
 * limit. The URI log callback's answer is the request's first con_cls:
 * NULL for a good target, one of these markers for a bad one.
 */
static char serve_uri_nul, serve_uri_long;

static void *serve_uri_check(void *cls, const char *uri, struct MHD_Connection *c)
{
	(void)cls;
	(void)c;
	if (strlen(uri) > SERVE_HEADERS_MAX)
		return &serve_uri_long;
	for (const char *p = strchr(uri, '%'); p; p = strchr(p + 1, '%'))
		if (p[1] == '0' && p[2] == '0')
			return &serve_uri_nul;
	return NULL;
}

/* Content-Length given twice with different values (request smuggling's building block). */
struct serve_cl_count {
	const char *first;
	bool differ;
};

static enum MHD_Result serve_cl_each(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct serve_cl_count *n = cls;

	(void)kind;
	if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
		return MHD_YES;
	if (!n->first)
		n->first = value ? value : "";
	else if (strcmp(n->first, value ? value : ""))
		n->differ = true;
	return MHD_YES;
}

static enum MHD_Result serve_conn_begin(struct serve_http *h, void **con_cls, int tenant,
					size_t max, bool mcp, bool sessions)
{
	struct serve_conn *sc = calloc(1, sizeof(*sc));

	if (!sc)
		return MHD_NO;
	buf_init(&sc->body, max);
	sc->mcp = mcp;
	sc->sessions = sessions;
	sc->tenant = tenant;
	sc->t0 = clock_mono_ms();
	*con_cls = sc;
	pthread_mutex_lock(&h->s->lock);
	h->s->posts_open++;
	pthread_mutex_unlock(&h->s->lock);
	return MHD_YES;
}

static enum MHD_Result serve_handler(void *cls, struct MHD_Connection *c, const char *url,
				     const char *method, const char *version,
				     const char *upload_data, size_t *upload_data_size,
				     void **con_cls)
{
	struct serve_http *h = cls;
	struct serve_conn *sc = *con_cls;
	struct serve_reply reply = SERVE_REPLY_INIT;
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	enum serve_route route;
	const char *rest, *len;
	char id[80], owner[65];
	char *text;
	int tenant;

	if (*con_cls == &serve_uri_nul || *con_cls == &serve_uri_long) {
		bool nul = *con_cls == &serve_uri_nul;
		*con_cls = NULL;
		return serve_send_error(c, nul ? SERVE_E_REQUEST : SERVE_E_HEADERS_TOO_LARGE,
					nul ? "a %00 in the request target: no name holds a NUL byte"
					    : "request line and headers larger than 32 KiB",
					method, "-", NULL);
	}
	if (!sc) {
		struct serve_cl_count n = { NULL, false };
		MHD_get_connection_values(c, MHD_HEADER_KIND, serve_cl_each, &n);
		if (n.differ)
			return serve_send_error(c, SERVE_E_REQUEST, "two different Content-Length headers",
						method, url, NULL);
	}
	route = serve_route_of(url, id, sizeof(id), &rest);
	if (sc) {
		/* The body of POST /v1/runs, in pieces, then one last call. */
		if (*upload_data_size) {
			if (!sc->too_large && buf_append(&sc->body, upload_data, *upload_data_size) < 0) {
				sc->too_large = true;
				buf_free(&sc->body);
			}
			if (sc->too_large && (sc->discarded += *upload_data_size) > SERVE_BODY_MAX)
				return MHD_NO;
			*upload_data_size = 0;
			return MHD_YES;
		}
		if (sc->sessions) {
			unsigned int status = 500;
			struct MHD_Response *r;
			if (sc->too_large)
				return serve_send_error(c, SERVE_E_TOO_LARGE, "request body larger than 64 MiB",
							method, url, sc);
			r = serve_sessions_handle(h->s, c, sc->tenant, method, url,
						  sc->body.data ? sc->body.data : "", sc->body.len, &status);
			serve_access_log(c, method, url, status, sc);
			return serve_queue(c, status, r, NULL);
		}
		if (sc->mcp) {
			unsigned int status = 500;
			struct MHD_Response *r = mcp_http_post(h->s->mcp, c, sc->tenant,
							       sc->body.data ? sc->body.data : "",
							       sc->body.len, sc->too_large, &status);
			serve_access_log(c, method, url, status, sc);
			return serve_queue(c, status, r, NULL);
		}
		return serve_finish_post(h, c, sc, method, url);
	}
	{
		size_t hdr = strlen(url) + strlen(method) + 16;
		MHD_get_connection_values(c, MHD_HEADER_KIND, serve_header_size, &hdr);
		if (hdr > SERVE_HEADERS_MAX) {
			return serve_send_error(c, SERVE_E_HEADERS_TOO_LARGE,
						"request line and headers larger than 32 KiB", method, url,
						NULL);
		}
	}
	if (route == ROUTE_HEALTH) {
		if (!get)
			return serve_send_error(c, SERVE_E_METHOD, "use GET", method, url, NULL);
		serve_api_health(&reply, h->s);
		return serve_send(c, &reply, method, url, NULL);
	}
	/* A browser page of another origin must not drive /mcp with a token it
	 * got hold of (DNS rebinding): 403 unless the request names no Origin,
	 * or one --allow-origin lists. */
	if (route == ROUTE_MCP && !serve_origin_allowed(h->s, c))
		return serve_send_error(c, SERVE_E_ORIGIN,
					"this Origin may not use /mcp (nbrun serve --allow-origin ORIGIN allows one)",
					method, url, NULL);
	{
		unsigned int wait = serve_auth_blocked(h, c);
		if (wait) {
			serve_reply_error(&reply, SERVE_E_RATE_LIMITED,
					  "too many wrong or missing tokens from this address; try again in %u s",
					  wait);
			reply.retry_after = wait;
			return serve_send(c, &reply, method, url, NULL);
		}
	}
	tenant = serve_tenant(h, c);
	if (tenant < 0) {
		serve_auth_failed(h, c);
		return serve_send_error(c, SERVE_E_AUTH,
					"missing or wrong token (send 'Authorization: Bearer TOKEN')",
					method, url, NULL);
	}
	serve_owner_of(owner, h, tenant);
	if (serve_sessions_route(url)) {
		unsigned int status = 500;
		struct MHD_Response *r;
		if (serve_sessions_wants_body(method)) {
			len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
			if (len && strtoull(len, NULL, 10) > SERVE_BODY_MAX)
				return serve_send_error(c, SERVE_E_TOO_LARGE, "request body larger than 64 MiB",
							method, url, NULL);
			return serve_conn_begin(h, con_cls, tenant, SERVE_BODY_MAX, false, true);
		}
		r = serve_sessions_handle(h->s, c, tenant, method, url, NULL, 0, &status);
		serve_access_log(c, method, url, status, NULL);
		return serve_queue(c, status, r, NULL);
	}
	if (route == ROUTE_NONE || (route == ROUTE_MCP && !h->s->mcp))
		return serve_send_error(c, SERVE_E_NOT_FOUND, "no such endpoint", method, url, NULL);
	if (route == ROUTE_MCP && strcmp(method, "POST")) {
		unsigned int status = 500;
		struct MHD_Response *r = mcp_http_other(h->s->mcp, c, tenant, method, &status);
		serve_access_log(c, method, url, status, NULL);
		return serve_queue(c, status, r, NULL);
	}
	if (route == ROUTE_RUNS || route == ROUTE_MCP) {
		if (strcmp(method, "POST"))
			return serve_send_error(c, SERVE_E_METHOD, "use POST", method, url, NULL);
		len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (len && route == ROUTE_MCP && strtoull(len, NULL, 10) > MCP_MESSAGE_MAX) {
			unsigned int status = 500;
			struct MHD_Response *r = mcp_http_post(h->s->mcp, c, tenant, "", 0, true, &status);
			serve_access_log(c, method, url, status, NULL);
			return serve_queue(c, status, r, NULL);
		}
		if (len && strtoull(len, NULL, 10) > SERVE_BODY_MAX)
			return serve_send_error(c, SERVE_E_TOO_LARGE, "request body larger than 64 MiB",
						method, url, NULL);
		return serve_conn_begin(h, con_cls, tenant,
					route == ROUTE_MCP ? MCP_MESSAGE_MAX : SERVE_BODY_MAX,
					route == ROUTE_MCP, false);
	}
	if (!get)
		return serve_send_error(c, SERVE_E_METHOD, "use GET", method, url, NULL);
	switch (route) {
	case ROUTE_METRICS:
		text = serve_api_metrics(h->s);
		serve_access_log(c, method, url, text ? 200 : 500, NULL);
		return serve_queue(c, 200,
				   text ? MHD_create_response_from_buffer(strlen(text), text,
									  MHD_RESPMEM_MUST_FREE)
					: NULL,
				   "text/plain; version=0.0.4");
	case ROUTE_RUN_RESULT:
		serve_api_get_result(&reply, h->s, id, owner);
		return serve_send(c, &reply, method, url, NULL);
	case ROUTE_RUN_NOTEBOOK:
		return serve_send_file(h, c, id, owner, "notebook.ipynb", route, method, url, NULL);
	default:
		return serve_send_file(h, c, id, owner, rest, route, method, url, NULL);
	}
}

static void serve_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			    enum MHD_RequestTerminationCode toe)
{
	struct serve_http *h = cls;
	struct serve_conn *sc = *con_cls;

	if (!sc || *con_cls == &serve_uri_nul || *con_cls == &serve_uri_long) {
		*con_cls = NULL;
		return;
	}
	buf_free(&sc->body);
	free(sc);
	*con_cls = NULL;
	/* Sent (or given up): shutdown waits for this before closing connections. */
	pthread_mutex_lock(&h->s->lock);
	h->s->posts_open--;
	pthread_cond_broadcast(&h->s->idle);
	pthread_mutex_unlock(&h->s->lock);
}

struct serve_http *serve_http_start(struct serve *s, int listen_fd)
{
	struct serve_http *h = calloc(1, sizeof(*h));

	if (h)
		h->auth = calloc(SERVE_AUTH_SLOTS, sizeof(*h->auth));
	if (!h || !h->auth || serve_hash(h->token_hash, s->token, strlen(s->token)) < 0 ||
	    (s->n_tenant_tokens &&
	     !(h->tenant_hash = calloc(s->n_tenant_tokens, sizeof(*h->tenant_hash))))) {
		serve_err("out of memory");
		close(listen_fd);
		if (h)
			free(h->auth);
		free(h);
		return NULL;
	}
	pthread_mutex_init(&h->auth_lock, NULL);
	for (size_t i = 0; i < s->n_tenant_tokens; i++)
		if (serve_hash(h->tenant_hash[i], s->tenant_tokens[i], strlen(s->tenant_tokens[i])) == 0)
			h->n_tenants = i + 1;
	h->s = s;
	/*
	 * A thread per connection: a run blocks its handler for seconds, and
	 * the number of runs at once is capped separately (max_runs, 503).
	 */
	h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
				     MHD_USE_ITC | MHD_USE_ERROR_LOG,
				     0, NULL, NULL, serve_handler, h,
				     MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
				     MHD_OPTION_CONNECTION_LIMIT, s->max_conns,
				     MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->max_conns_per_ip,
				     MHD_OPTION_CONNECTION_TIMEOUT, s->conn_timeout_s,
				     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
				     MHD_OPTION_NOTIFY_COMPLETED, serve_completed, h,
				     MHD_OPTION_URI_LOG_CALLBACK, serve_uri_check, h,
				     MHD_OPTION_END);
	if (!h->daemon) {
		serve_err("cannot start the HTTP server (libmicrohttpd)");
		close(listen_fd);
		pthread_mutex_destroy(&h->auth_lock);
		free(h->auth);
		free(h->tenant_hash);
		free(h);
		return NULL;
	}
	return h;
}

void serve_http_quiesce(struct serve_http *h)
{
	MHD_socket fd = MHD_quiesce_daemon(h->daemon);

	if (fd != MHD_INVALID_SOCKET)
		close(fd);
}

void serve_http_stop(struct serve_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->daemon);
	pthread_mutex_destroy(&h->auth_lock);
	free(h->auth);
	free(h->tenant_hash);
	free(h);
}
