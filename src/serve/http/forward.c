/* SPDX-License-Identifier: MIT */
/*
 * nbrun serve: sessions on a cluster. A session lives on the node that
 * opened it and its id names that node ("NODE~ID"); a request for another
 * node's session is forwarded to that node over HTTP (libcurl) and its
 * reply relayed, streams line by line as they come.
 *
 * A node forwards only to the peers of its configuration (--peer, or the
 * addresses --peers-dns resolves, named by their own /v1/health): the
 * client names a node, never an address. A forwarded request carries
 * Nbrun-Forwarded and is never forwarded again.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <linux/sockios.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "serve.h"

#define FWD_HEADER "Nbrun-Forwarded"
/* A node that does not accept a connection within this is taken for gone. */
#define FWD_CONNECT_MS 3000
#define FWD_PEERS_MAX 256
/* Resolving --peers-dns again on an unknown node: at most this often. */
#define FWD_REFRESH_MS 5000
#define FWD_HEALTH_MS 3000
#define FWD_HEALTH_MAX (64u << 10)
/* GET /v1/sessions of every peer: each answers within this or is unreachable. */
#define FWD_LIST_MS 10000
#define FWD_LIST_MAX (4u << 20)
/* Bytes of a reply held while the client reads slowly; the transfer pauses beyond. */
#define FWD_HOLD_MAX (256u << 10)
#define FWD_URL_MAX 300

struct fwd_peer {
	char name[WIRE_NODE_MAX + 1];
	char url[FWD_URL_MAX]; /* http://HOST:PORT */
	bool learnt;           /* from --peers-dns */
	uint64_t seen_ms;
};

struct serve_peers {
	pthread_mutex_t mu;          /* guards v, n */
	struct fwd_peer v[FWD_PEERS_MAX];
	size_t n;
	char *dns_host;              /* NULL: no --peers-dns */
	char dns_port[8];
	pthread_mutex_t refresh_mu;  /* one resolution at a time */
	uint64_t refreshed_ms;
	uint64_t resolved_ms;        /* the last answer of the name's resolution */
};

/* ---- configuration ------------------------------------------------------------------- */

int serve_node_init(struct serve *s, const char *name)
{
	char host[256] = "";

	if (!name) {
		if (gethostname(host, sizeof(host) - 1) < 0)
			host[0] = '\0';
		/*
		 * Alone, any name will do: a long host name is cut to its first
		 * label, other characters become '-'. With peers it must be the
		 * host's own name, which the others are told.
		 */
		if (!wire_node_valid(host, strlen(host)) && !s->peers) {
			host[strcspn(host, ".")] = '\0';
			host[WIRE_NODE_MAX] = '\0';
			for (char *p = host; *p; p++)
				if (!wire_node_valid(p, 1))
					*p = '-';
			if (!host[0])
				snprintf(host, sizeof(host), "node");
		}
		if (!wire_node_valid(host, strlen(host))) {
			serve_usage_err("serve", "this host's name '%.64s' is no node name: give --node NAME",
					host);
			return -1;
		}
		name = host;
	} else if (!wire_node_valid(name, strlen(name))) {
		serve_usage_err("serve", "--node: '%.80s' is not 1 to 63 of A-Z a-z 0-9 . _ -", name);
		return -1;
	}
	snprintf(s->node, sizeof(s->node), "%.63s", name); /* checked: at most 63 */
	return 0;
}

static struct serve_peers *fwd_peers(struct serve *s)
{
	if (!s->peers) {
		/* Here, while the server has one thread: curl's setup is not thread-safe. */
		curl_global_init(CURL_GLOBAL_DEFAULT);
		s->peers = calloc(1, sizeof(*s->peers));
		if (!s->peers)
			return NULL;
		pthread_mutex_init(&s->peers->mu, NULL);
		pthread_mutex_init(&s->peers->refresh_mu, NULL);
	}
	return s->peers;
}

/* HOST:PORT with a host of letters, digits, '.', '-', or a bracketed IPv6 address. */
static bool fwd_hostport_valid(const char *hp)
{
	const char *colon = strrchr(hp, ':');
	char *end;
	unsigned long port;

	if (!colon || colon == hp || strlen(hp) >= FWD_URL_MAX - 16)
		return false;
	port = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || port == 0 || port > 65535)
		return false;
	for (const char *p = hp; p < colon; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-[]:", *p))
			return false;
	return true;
}

int serve_peer_add(struct serve *s, const char *spec)
{
	const char *eq = strchr(spec, '='), *hp;
	struct serve_peers *p;
	struct fwd_peer *e;
	size_t n;

	if (!eq || !wire_node_valid(spec, (size_t)(eq - spec)) || strncmp(eq + 1, "http://", 7)) {
		serve_usage_err("serve", "--peer: '%.200s' is not NAME=http://HOST:PORT", spec);
		return -1;
	}
	hp = eq + 8;
	n = strlen(hp);
	if (n && hp[n - 1] == '/')
		n--;
	{
		char tmp[FWD_URL_MAX];
		if (n >= sizeof(tmp)) {
			serve_usage_err("serve", "--peer: '%.200s' is not NAME=http://HOST:PORT", spec);
			return -1;
		}
		memcpy(tmp, hp, n);
		tmp[n] = '\0';
		if (!fwd_hostport_valid(tmp)) {
			serve_usage_err("serve", "--peer: '%.200s' is not NAME=http://HOST:PORT", spec);
			return -1;
		}
	}
	p = fwd_peers(s);
	if (!p) {
		serve_err("out of memory");
		return -1;
	}
	for (size_t i = 0; i < p->n; i++)
		if (strlen(p->v[i].name) == (size_t)(eq - spec) && !strncmp(p->v[i].name, spec, eq - spec)) {
			serve_usage_err("serve", "--peer: node '%.*s' given twice", (int)(eq - spec), spec);
			return -1;
		}
	if (p->n == FWD_PEERS_MAX) {
		serve_usage_err("serve", "--peer: at most %d peers", FWD_PEERS_MAX);
		return -1;
	}
	e = &p->v[p->n++];
	snprintf(e->name, sizeof(e->name), "%.*s", (int)(eq - spec), spec);
	snprintf(e->url, sizeof(e->url), "http://%.*s", (int)n, hp);
	return 0;
}

int serve_peers_dns(struct serve *s, const char *hostport)
{
	struct serve_peers *p;
	const char *colon = strrchr(hostport, ':');

	if (!fwd_hostport_valid(hostport) || strchr(hostport, '[')) {
		serve_usage_err("serve", "--peers-dns: '%.200s' is not HOST:PORT", hostport);
		return -1;
	}
	if (s->peers && s->peers->dns_host) {
		serve_usage_err("serve", "--peers-dns: given twice");
		return -1;
	}
	p = fwd_peers(s);
	if (!p || !(p->dns_host = strndup(hostport, (size_t)(colon - hostport)))) {
		serve_err("out of memory");
		return -1;
	}
	snprintf(p->dns_port, sizeof(p->dns_port), "%s", colon + 1);
	return 0;
}

void serve_peers_free(struct serve *s)
{
	if (!s->peers)
		return;
	pthread_mutex_destroy(&s->peers->mu);
	pthread_mutex_destroy(&s->peers->refresh_mu);
	free(s->peers->dns_host);
	free(s->peers);
	s->peers = NULL;
}

/* ---- plain GETs to several peers at once ------------------------------------------------ */

struct fwd_get {
	char url[FWD_URL_MAX + 32];
	struct buf body;
	long status;       /* 0: no reply */
	char err[CURL_ERROR_SIZE];
	CURL *e;
};

static size_t fwd_get_write(char *ptr, size_t size, size_t n, void *payload)
{
	struct fwd_get *g = payload;

	return buf_append(&g->body, ptr, size * n) < 0 ? 0 : size * n;
}

/* GET each g[i].url at once (auth: an Authorization value or NULL); at most timeout_ms in all. */
static void fwd_get_all(struct fwd_get *g, size_t n, struct curl_slist *hdrs, long timeout_ms)
{
	CURLM *m = curl_multi_init();
	int running = 0;

	for (size_t i = 0; i < n; i++) {
		g[i].status = 0;
		snprintf(g[i].err, sizeof(g[i].err), "no reply");
		g[i].e = m ? curl_easy_init() : NULL;
		if (!g[i].e)
			continue;
		curl_easy_setopt(g[i].e, CURLOPT_URL, g[i].url);
		curl_easy_setopt(g[i].e, CURLOPT_PROTOCOLS_STR, "http");
		curl_easy_setopt(g[i].e, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(g[i].e, CURLOPT_CONNECTTIMEOUT_MS, (long)FWD_CONNECT_MS);
		curl_easy_setopt(g[i].e, CURLOPT_TIMEOUT_MS, timeout_ms);
		curl_easy_setopt(g[i].e, CURLOPT_PROXY, "");
		curl_easy_setopt(g[i].e, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(g[i].e, CURLOPT_ERRORBUFFER, g[i].err);
		curl_easy_setopt(g[i].e, CURLOPT_WRITEFUNCTION, fwd_get_write);
		curl_easy_setopt(g[i].e, CURLOPT_WRITEDATA, &g[i]);
		curl_multi_add_handle(m, g[i].e);
	}
	if (m) {
		do {
			if (curl_multi_perform(m, &running) != CURLM_OK)
				break;
			if (running)
				curl_multi_poll(m, NULL, 0, 500, NULL);
		} while (running);
	}
	for (size_t i = 0; i < n; i++) {
		if (!g[i].e)
			continue;
		curl_easy_getinfo(g[i].e, CURLINFO_RESPONSE_CODE, &g[i].status);
		curl_multi_remove_handle(m, g[i].e);
		curl_easy_cleanup(g[i].e);
		g[i].e = NULL;
	}
	curl_multi_cleanup(m);
}

/* ---- finding a node ------------------------------------------------------------------- */

/* Learn name -> url (a node that moved keeps its name); the oldest learnt goes when full.
 * A learnt name that the url answered before (a node restarted under another name) is
 * dropped, so that no address is listed or asked twice. */
static void fwd_learn(struct serve_peers *p, const char *name, const char *url)
{
	struct fwd_peer *e = NULL;
	size_t i;

	pthread_mutex_lock(&p->mu);
	for (i = 0; i < p->n;) {
		if (p->v[i].learnt && strcmp(p->v[i].name, name) && !strcmp(p->v[i].url, url))
			memmove(&p->v[i], &p->v[i + 1], (--p->n - i) * sizeof(p->v[0]));
		else
			i++;
	}
	for (i = 0; i < p->n; i++)
		if (!strcmp(p->v[i].name, name))
			break;
	if (i < p->n && !p->v[i].learnt)
		goto out; /* a --peer is kept as given */
	if (i < p->n)
		e = &p->v[i];
	else if (p->n < FWD_PEERS_MAX)
		e = &p->v[p->n++];
	if (!e) /* full: the one learnt longest ago goes */
		for (i = 0; i < p->n; i++)
			if (p->v[i].learnt && (!e || p->v[i].seen_ms < e->seen_ms))
				e = &p->v[i];
	if (e) {
		snprintf(e->name, sizeof(e->name), "%s", name);
		snprintf(e->url, sizeof(e->url), "%s", url);
		e->learnt = true;
		e->seen_ms = clock_mono_ms();
	}
out:
	pthread_mutex_unlock(&p->mu);
}

/* Resolve --peers-dns and ask each address its node name (its /v1/health). */
static void fwd_refresh(struct serve *s)
{
	struct serve_peers *p = s->peers;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL, *ai;
	struct fwd_get *g;
	size_t n = 0;

	pthread_mutex_lock(&p->refresh_mu);
	if (p->refreshed_ms && clock_mono_ms() - p->refreshed_ms < FWD_REFRESH_MS)
		goto out;
	p->refreshed_ms = clock_mono_ms();
	if (getaddrinfo(p->dns_host, p->dns_port, &hints, &res) != 0)
		goto out;
	p->resolved_ms = clock_mono_ms();
	g = calloc(FWD_PEERS_MAX, sizeof(*g));
	for (ai = res; g && ai && n < FWD_PEERS_MAX; ai = ai->ai_next) {
		char ip[INET6_ADDRSTRLEN] = "";
		if (ai->ai_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof(ip));
		else if (ai->ai_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, ip, sizeof(ip));
		else
			continue;
		snprintf(g[n].url, sizeof(g[n].url), ai->ai_family == AF_INET6 ? "http://[%s]:%s" : "http://%s:%s",
			 ip, p->dns_port);
		buf_init(&g[n].body, FWD_HEALTH_MAX);
		n++;
	}
	/* The nodes learnt before whose address is still in the answer are current. */
	pthread_mutex_lock(&p->mu);
	for (size_t k = 0; k < p->n; k++)
		for (size_t i = 0; p->v[k].learnt && i < n; i++)
			if (!strcmp(p->v[k].url, g[i].url))
				p->v[k].seen_ms = clock_mono_ms();
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(g[i].url);
		snprintf(g[i].url + len, sizeof(g[i].url) - len, "/v1/health");
	}
	if (n)
		fwd_get_all(g, n, NULL, FWD_HEALTH_MS);
	for (size_t i = 0; i < n; i++) {
		json_t *doc = g[i].status == 200 ? json_loadb(g[i].body.data ? g[i].body.data : "",
							       g[i].body.len, 0, NULL) : NULL;
		const char *name = json_string_value(json_object_get(doc, "node"));
		if (name && wire_node_valid(name, strlen(name)) && strcmp(name, s->node)) {
			g[i].url[strlen(g[i].url) - strlen("/v1/health")] = '\0';
			fwd_learn(p, name, g[i].url);
		}
		json_decref(doc);
		buf_free(&g[i].body);
	}
	free(g);
	freeaddrinfo(res);
out:
	pthread_mutex_unlock(&p->refresh_mu);
}

/* The url of peer node into url; false when it is none of the configuration's. */
static bool fwd_lookup(struct serve *s, const char *node, char url[FWD_URL_MAX])
{
	struct serve_peers *p = s->peers;
	bool found = false;

	for (int pass = 0; pass < 2 && !found; pass++) {
		if (pass == 1) {
			if (!p->dns_host)
				break;
			fwd_refresh(s);
		}
		pthread_mutex_lock(&p->mu);
		for (size_t i = 0; i < p->n && !found; i++)
			if (!strcmp(p->v[i].name, node)) {
				memcpy(url, p->v[i].url, FWD_URL_MAX);
				found = true;
			}
		pthread_mutex_unlock(&p->mu);
	}
	return found;
}

bool serve_forwarded(struct MHD_Connection *c)
{
	return MHD_lookup_connection_value(c, MHD_HEADER_KIND, FWD_HEADER) != NULL;
}

/* ---- one forwarded request --------------------------------------------------------------- */

struct fwd {
	struct serve *s;
	CURLM *m;
	CURL *e;
	struct curl_slist *hdrs;
	int client_fd;
	char err[CURL_ERROR_SIZE];
	bool head_done, done;
	CURLcode rc;
	long status;
	/* the reply's headers that are relayed */
	char type[128], retry[16], allow[64];
	int64_t length; /* -1: unknown */
	/* reply bytes not yet handed to libmicrohttpd */
	char *hold;
	size_t len, off, cap;
	bool paused;
	uint64_t stalled_ms;
};

static void fwd_header_copy(char *dst, size_t n, const char *v, size_t vlen)
{
	while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
		vlen--;
	while (vlen && *v == ' ') {
		v++;
		vlen--;
	}
	if (vlen >= n) /* too long to be one we relay faithfully: dropped */
		vlen = 0;
	memcpy(dst, v, vlen);
	dst[vlen] = '\0';
	for (size_t i = 0; i < vlen; i++)
		if ((unsigned char)dst[i] < 0x20 || dst[i] == 0x7f)
			dst[i] = ' ';
}

static size_t fwd_on_header(char *ptr, size_t size, size_t n, void *payload)
{
	struct fwd *f = payload;
	size_t len = size * n;
	static const struct { const char *name; size_t off, max; } keep[] = {
		{ "content-type:", offsetof(struct fwd, type), sizeof(((struct fwd *)0)->type) },
		{ "retry-after:", offsetof(struct fwd, retry), sizeof(((struct fwd *)0)->retry) },
		{ "allow:", offsetof(struct fwd, allow), sizeof(((struct fwd *)0)->allow) },
	};

	if (len >= 5 && !strncmp(ptr, "HTTP/", 5)) {
		/* A new status line (after a 1xx): what came before is not this reply's. */
		f->type[0] = f->retry[0] = f->allow[0] = '\0';
		f->length = -1;
		return len;
	}
	if (len <= 2 && (ptr[0] == '\r' || ptr[0] == '\n')) {
		curl_easy_getinfo(f->e, CURLINFO_RESPONSE_CODE, &f->status);
		if (f->status >= 200)
			f->head_done = true;
		return len;
	}
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
		size_t k = strlen(keep[i].name);
		if (len > k && !strncasecmp(ptr, keep[i].name, k))
			fwd_header_copy((char *)f + keep[i].off, keep[i].max, ptr + k, len - k);
	}
	if (len > 15 && !strncasecmp(ptr, "content-length:", 15)) {
		char v[32], *end;
		long long x;
		fwd_header_copy(v, sizeof(v), ptr + 15, len - 15);
		x = strtoll(v, &end, 10);
		f->length = *v && !*end && x >= 0 ? x : -1;
	}
	return len;
}

static size_t fwd_on_body(char *ptr, size_t size, size_t n, void *payload)
{
	struct fwd *f = payload;
	size_t len = size * n;

	if (f->off == f->len)
		f->off = f->len = 0;
	if (f->len - f->off && f->len - f->off + len > FWD_HOLD_MAX) {
		f->paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	if (f->off && f->len + len > f->cap) {
		memmove(f->hold, f->hold + f->off, f->len - f->off);
		f->len -= f->off;
		f->off = 0;
	}
	if (f->len + len > f->cap) {
		size_t cap = f->len + len > FWD_HOLD_MAX ? f->len + len : FWD_HOLD_MAX;
		char *p = realloc(f->hold, cap);
		if (!p)
			return 0;
		f->hold = p;
		f->cap = cap;
	}
	memcpy(f->hold + f->len, ptr, len);
	f->len += len;
	return len;
}

static void fwd_free(struct fwd *f)
{
	if (!f)
		return;
	if (f->e) {
		/* Its connection closes: the owner interrupts a cell it streams. */
		curl_multi_remove_handle(f->m, f->e);
		curl_easy_cleanup(f->e);
	}
	curl_multi_cleanup(f->m);
	curl_slist_free_all(f->hdrs);
	free(f->hold);
	free(f);
}

/* Move the transfer on, waiting at most wait_ms for something to happen. */
static void fwd_pump(struct fwd *f, int wait_ms)
{
	int running = 0, left;
	CURLMsg *msg;

	if (curl_multi_perform(f->m, &running) != CURLM_OK) {
		f->done = true;
		f->rc = CURLE_FAILED_INIT;
		return;
	}
	while ((msg = curl_multi_info_read(f->m, &left)))
		if (msg->msg == CURLMSG_DONE) {
			f->done = true;
			f->rc = msg->data.result;
		}
	if (!f->done && running)
		curl_multi_poll(f->m, NULL, 0, wait_ms, NULL);
}

/* True when the client hung up. */
static bool fwd_client_gone(const struct fwd *f)
{
	struct pollfd p = { f->client_fd, POLLRDHUP, 0 };

	return f->client_fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* True when the transfer ended before a connection was made: nothing was sent. */
static bool fwd_not_connected(struct fwd *f)
{
	curl_off_t connect_us = 0;

	if (f->rc == CURLE_COULDNT_CONNECT || f->rc == CURLE_COULDNT_RESOLVE_HOST)
		return true;
	return f->rc == CURLE_OPERATION_TIMEDOUT &&
	       curl_easy_getinfo(f->e, CURLINFO_CONNECT_TIME_T, &connect_us) == CURLE_OK && connect_us == 0;
}

static ssize_t fwd_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct fwd *f = cls;
	int unsent = 0;

	(void)pos;
	for (;;) {
		if (f->len > f->off) {
			size_t n = f->len - f->off < max ? f->len - f->off : max;
			memcpy(out, f->hold + f->off, n);
			f->off += n;
			if (f->paused && f->len - f->off < FWD_HOLD_MAX / 2) {
				f->paused = false;
				curl_easy_pause(f->e, CURLPAUSE_CONT);
			}
			return (ssize_t)n;
		}
		if (f->done)
			return f->rc == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM
						 : MHD_CONTENT_READER_END_WITH_ERROR;
		if (*f->s->stopping || fwd_client_gone(f))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		/* A client that reads nothing for the connection timeout is given up, as a local stream's. */
		if (f->client_fd >= 0 && ioctl(f->client_fd, SIOCOUTQ, &unsent) == 0 &&
		    unsent > (int)FWD_HOLD_MAX) {
			uint64_t now = clock_mono_ms();
			if (!f->stalled_ms)
				f->stalled_ms = now;
			else if (now - f->stalled_ms >= (uint64_t)f->s->conn_timeout_s * 1000)
				return MHD_CONTENT_READER_END_WITH_ERROR;
		} else {
			f->stalled_ms = 0;
		}
		if (f->paused) {
			f->paused = false;
			curl_easy_pause(f->e, CURLPAUSE_CONT);
		}
		fwd_pump(f, 200);
	}
}

static void fwd_response_free(void *cls)
{
	fwd_free(cls);
}

/* "/v1/sessions/..." as received (decoded), percent-encoded again, with the query. */
struct fwd_url {
	struct buf b;
	bool first;
	bool failed;
};

static void fwd_url_encode(struct fwd_url *u, const char *s, const char *plain)
{
	char esc[4];

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (strchr(plain, *p)) {
			if (buf_append(&u->b, p, 1) < 0)
				u->failed = true;
			continue;
		}
		snprintf(esc, sizeof(esc), "%%%02X", *p);
		if (buf_append(&u->b, esc, 3) < 0)
			u->failed = true;
	}
}

#define FWD_PLAIN "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"

static enum MHD_Result fwd_url_arg(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	struct fwd_url *u = cls;

	(void)kind;
	if (buf_append(&u->b, u->first ? "?" : "&", 1) < 0)
		u->failed = true;
	u->first = false;
	fwd_url_encode(u, key, FWD_PLAIN);
	if (value) {
		if (buf_append(&u->b, "=", 1) < 0)
			u->failed = true;
		fwd_url_encode(u, value, FWD_PLAIN);
	}
	return MHD_YES;
}

static char *fwd_url(struct MHD_Connection *c, const char *base, const char *url)
{
	struct fwd_url u = { BUF_INIT(64u << 10), true, false };

	if (buf_puts(&u.b, base) < 0)
		u.failed = true;
	fwd_url_encode(&u, url, FWD_PLAIN "/");
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, fwd_url_arg, &u);
	if (u.failed || buf_append(&u.b, "", 1) < 0) {
		buf_free(&u.b);
		return NULL;
	}
	return buf_steal(&u.b);
}

static int fwd_add_header(struct fwd *f, const char *name, const char *value)
{
	char line[WIRE_TOKEN_MAX + 128];
	struct curl_slist *l;

	snprintf(line, sizeof(line), "%s: %s", name, value ? value : "");
	if (!value)
		line[strlen(name) + 1] = '\0'; /* "Name:" takes curl's own header away */
	l = curl_slist_append(f->hdrs, line);
	if (!l)
		return -1;
	f->hdrs = l;
	return 0;
}

/* Set up the transfer of one request to url. */
static struct fwd *fwd_new(struct serve *s, struct MHD_Connection *c, const char *url,
			   const char *method, const char *body, size_t len)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	static const char *const relay[] = { MHD_HTTP_HEADER_AUTHORIZATION, MHD_HTTP_HEADER_ACCEPT,
					     MHD_HTTP_HEADER_CONTENT_TYPE };
	struct fwd *f = calloc(1, sizeof(*f));
	long secs = (long)(2 * (s->opts.timeout_ms / 1000) + 300);

	if (!f)
		return NULL;
	f->s = s;
	f->length = -1;
	f->client_fd = ci ? ci->connect_fd : -1;
	f->m = curl_multi_init();
	f->e = curl_easy_init();
	if (!f->m || !f->e)
		goto fail;
	for (size_t i = 0; i < sizeof(relay) / sizeof(relay[0]); i++) {
		const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, relay[i]);
		if (v && fwd_add_header(f, relay[i], v) < 0)
			goto fail;
	}
	if (fwd_add_header(f, FWD_HEADER, s->node) < 0 || fwd_add_header(f, "Expect", NULL) < 0)
		goto fail;
	curl_easy_setopt(f->e, CURLOPT_URL, url);
	curl_easy_setopt(f->e, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(f->e, CURLOPT_PROXY, "");
	curl_easy_setopt(f->e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(f->e, CURLOPT_CONNECTTIMEOUT_MS, (long)FWD_CONNECT_MS);
	/* The owner bounds the work; this is for an owner that stops answering mid-way. */
	curl_easy_setopt(f->e, CURLOPT_TIMEOUT, secs);
	curl_easy_setopt(f->e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(f->e, CURLOPT_TCP_KEEPIDLE, 10L);
	curl_easy_setopt(f->e, CURLOPT_TCP_KEEPINTVL, 5L);
	curl_easy_setopt(f->e, CURLOPT_HTTPHEADER, f->hdrs);
	curl_easy_setopt(f->e, CURLOPT_ERRORBUFFER, f->err);
	curl_easy_setopt(f->e, CURLOPT_HEADERFUNCTION, fwd_on_header);
	curl_easy_setopt(f->e, CURLOPT_HEADERDATA, f);
	curl_easy_setopt(f->e, CURLOPT_WRITEFUNCTION, fwd_on_body);
	curl_easy_setopt(f->e, CURLOPT_WRITEDATA, f);
	/* Relayed as they come: the content is not decoded, nothing is compressed. */
	curl_easy_setopt(f->e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	if (!strcmp(method, "HEAD")) {
		curl_easy_setopt(f->e, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(method, "POST") || !strcmp(method, "PUT")) {
		curl_easy_setopt(f->e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		if (curl_easy_setopt(f->e, CURLOPT_COPYPOSTFIELDS, len ? body : "") != CURLE_OK)
			goto fail;
		if (strcmp(method, "POST"))
			curl_easy_setopt(f->e, CURLOPT_CUSTOMREQUEST, method);
	} else if (strcmp(method, "GET")) {
		curl_easy_setopt(f->e, CURLOPT_CUSTOMREQUEST, method);
	}
	if (curl_multi_add_handle(f->m, f->e) != CURLM_OK)
		goto fail;
	return f;
fail:
	curl_easy_cleanup(f->e); /* not added to the multi handle */
	f->e = NULL;
	fwd_free(f);
	return NULL;
}

int serve_forward(struct MHD_Response **out, struct serve *s, struct MHD_Connection *c,
		  const char *id, const char *method, const char *url, const char *body, size_t len,
		  unsigned int *status)
{
	const char *tilde = strchr(id, '~');
	char node[WIRE_NODE_MAX + 1], base[FWD_URL_MAX], *full;
	struct MHD_Response *r;
	struct fwd *f;
	size_t n = tilde ? (size_t)(tilde - id) : 0;

	*out = NULL;
	/* Only a configured peer, and never twice: anything else is no session. */
	if (!tilde || !s->peers || serve_forwarded(c) || !wire_node_valid(id, n))
		return -ENOENT;
	memcpy(node, id, n);
	node[n] = '\0';
	if (!strcmp(node, s->node) || !fwd_lookup(s, node, base))
		return -ENOENT;
	for (int attempt = 0;; attempt++) {
		char again[FWD_URL_MAX];

		full = fwd_url(c, base, url);
		f = full ? fwd_new(s, c, full, method, body, len) : NULL;
		free(full);
		if (!f) {
			*out = serve_error_response(status, SERVE_E_INTERNAL, "out of memory");
			return 0;
		}
		while (!f->head_done && !f->done) {
			if (*s->stopping) {
				fwd_free(f);
				*out = serve_error_response(status, SERVE_E_BUSY, "the server is stopping");
				return 0;
			}
			if (fwd_client_gone(f)) {
				fwd_free(f); /* the owner sees the forwarded connection close */
				return 0;    /* NULL: the connection is closed */
			}
			fwd_pump(f, 200);
		}
		if (f->head_done)
			break;
		/*
		 * A node of --peers-dns that came back has a new address: asked
		 * again once when nothing was sent (no connection was made).
		 */
		if (attempt == 0 && s->peers->dns_host && fwd_not_connected(f)) {
			fwd_refresh(s);
			if (fwd_lookup(s, node, again) && strcmp(again, base)) {
				memcpy(base, again, sizeof(base));
				fwd_free(f);
				continue;
			}
		}
		/*
		 * No connection: the node is gone. A connection that broke before
		 * the reply's head may have reached the owner, which may have done
		 * the work: not the same answer.
		 */
		if (fwd_not_connected(f))
			*out = serve_error_response(status, SERVE_E_NODE_GONE,
						    "session %.96s's node %s does not answer: %s", id, node,
						    f->err[0] ? f->err : curl_easy_strerror(f->rc));
		else
			*out = serve_error_response(status, SERVE_E_FORWARD,
						    "session %.96s's node %s took the request but its reply "
						    "broke off (the call may have run there): %s",
						    id, node, f->err[0] ? f->err : curl_easy_strerror(f->rc));
		fwd_free(f);
		return 0;
	}
	r = MHD_create_response_from_callback(f->length >= 0 ? (uint64_t)f->length : MHD_SIZE_UNKNOWN,
					      64 * 1024, fwd_read, f, fwd_response_free);
	if (!r) {
		fwd_free(f);
		return 0;
	}
	if (f->type[0])
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f->type);
	if (f->retry[0])
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, f->retry);
	if (f->allow[0])
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, f->allow);
	/* A streamed reply (no length) may be quiet while a cell runs: as a local stream. */
	if (f->length < 0)
		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
					  (unsigned int)(2 * (s->opts.timeout_ms / 1000) + 120));
	*status = (unsigned int)f->status;
	*out = r;
	return 0;
}

/* ---- GET /v1/sessions across the nodes ------------------------------------------------------ */

json_t *serve_forward_list(struct serve *s, struct MHD_Connection *c, json_t *sessions)
{
	struct serve_peers *p = s->peers;
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	char line[WIRE_TOKEN_MAX + 128], fwd_line[WIRE_NODE_MAX + 32];
	struct curl_slist *hdrs = NULL, *l;
	json_t *unreachable = json_array();
	struct fwd_get *g = NULL;
	char (*names)[WIRE_NODE_MAX + 1] = NULL;
	size_t n = 0;
	uint64_t resolved = 0;

	if (!p || !unreachable || serve_forwarded(c))
		return unreachable;
	if (p->dns_host) {
		fwd_refresh(s);
		pthread_mutex_lock(&p->refresh_mu);
		resolved = p->resolved_ms;
		pthread_mutex_unlock(&p->refresh_mu);
	}
	g = calloc(FWD_PEERS_MAX, sizeof(*g));
	names = calloc(FWD_PEERS_MAX, sizeof(*names));
	snprintf(line, sizeof(line), "Authorization: %s", auth ? auth : "");
	snprintf(fwd_line, sizeof(fwd_line), FWD_HEADER ": %s", s->node);
	if (!g || !names || !(l = curl_slist_append(NULL, line)) || !(hdrs = l) ||
	    !(l = curl_slist_append(hdrs, fwd_line))) {
		json_decref(unreachable); /* the caller answers 500 */
		unreachable = NULL;
		goto out;
	}
	hdrs = l;
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < p->n; i++) {
		/* A node that left the DNS answer is no longer asked (nor named). */
		if (!strcmp(p->v[i].name, s->node) || (p->v[i].learnt && p->v[i].seen_ms < resolved))
			continue;
		snprintf(g[n].url, sizeof(g[n].url), "%s/v1/sessions", p->v[i].url);
		memcpy(names[n], p->v[i].name, sizeof(names[n]));
		buf_init(&g[n].body, FWD_LIST_MAX);
		n++;
	}
	pthread_mutex_unlock(&p->mu);
	fwd_get_all(g, n, hdrs, FWD_LIST_MS);
	for (size_t i = 0; i < n; i++) {
		json_t *doc = g[i].status == 200 ? json_loadb(g[i].body.data ? g[i].body.data : "",
							       g[i].body.len, 0, NULL) : NULL;
		json_t *arr = json_object_get(doc, "sessions"), *v;
		size_t k;
		if (!json_is_array(arr))
			json_array_append_new(unreachable, json_string(names[i]));
		else
			json_array_foreach(arr, k, v)
				if (json_is_object(v))
					json_array_append(sessions, v);
		json_decref(doc);
		buf_free(&g[i].body);
	}
out:
	curl_slist_free_all(hdrs);
	free(g);
	free(names);
	return unreachable;
}
