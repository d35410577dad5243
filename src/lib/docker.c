/* SPDX-License-Identifier: MIT */
/*
 * Docker Engine API client over libcurl: unix socket by default, DOCKER_HOST
 * (unix://, tcp://, TLS with DOCKER_TLS_VERIFY/DOCKER_CERT_PATH) when set.
 * Replies are untrusted: bodies are capped and only parsed as JSON.
 */
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach-private.h"
#include "nbrun-private.h"

/* The API we are written against; older engines are refused below. */
#define DOCKER_API_MAX "1.41"
#define DOCKER_API_MIN_MINOR 30
#define DOCKER_REPLY_MAX (4u << 20)
#define DOCKER_DEFAULT_TIMEOUT_MS 30000L

struct nbrun__docker {
	struct nbrun_ctx *ctx;
	CURL *curl;
	char *host;        /* DOCKER_HOST as given, for messages */
	char *base_url;    /* "http://localhost" for unix sockets */
	char *socket_path; /* NULL for tcp */
	char *cert_dir;    /* TLS material, when verifying */
	bool tls;
	char api[16];
	char errbuf[CURL_ERROR_SIZE];
	const volatile sig_atomic_t *cancel;
};

static pthread_once_t docker_once = PTHREAD_ONCE_INIT;
static void docker_global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- connection ---------------------------------------------------------- */

static int docker_parse_host(struct nbrun__docker *d)
{
	const char *h = getenv("DOCKER_HOST");
	const char *verify = getenv("DOCKER_TLS_VERIFY");
	const char *certs = getenv("DOCKER_CERT_PATH");

	if (!h || !*h)
		h = "unix:///var/run/docker.sock";
	d->host = strdup(h);
	if (!d->host)
		return NBRUN_ENOMEM;
	if (!strncmp(h, "unix://", 7)) {
		d->socket_path = strdup(h + 7);
		d->base_url = strdup("http://localhost");
	} else if (!strncmp(h, "tcp://", 6)) {
		d->tls = verify && *verify && strcmp(verify, "0");
		if (asprintf(&d->base_url, "%s://%s", d->tls ? "https" : "http", h + 6) < 0)
			d->base_url = NULL;
		if (d->tls) {
			const char *home = getenv("HOME");
			if (certs && *certs)
				d->cert_dir = strdup(certs);
			else if (asprintf(&d->cert_dir, "%s/.docker", home ? home : "") < 0)
				d->cert_dir = NULL;
			if (!d->cert_dir)
				return NBRUN_ENOMEM;
		}
	} else {
		return nbrun__err(d->ctx, NBRUN_EENGINE,
				  "DOCKER_HOST=%s is not supported: use unix:// or tcp://", h);
	}
	if (!d->base_url || (!strncmp(h, "unix://", 7) && !d->socket_path))
		return NBRUN_ENOMEM;
	return 0;
}

static int docker_check_socket(struct nbrun__docker *d)
{
	struct stat st;

	if (!d->socket_path)
		return 0;
	if (stat(d->socket_path, &st) < 0) {
		if (errno == ENOENT)
			return nbrun__err(d->ctx, NBRUN_EENGINE,
					  "the Docker engine is not running (no socket at %s): start it with scripts/setup or 'dockerd &'",
					  d->socket_path);
		return nbrun__errno(d->ctx, NBRUN_EENGINE, errno,
				    "cannot use the engine socket %s (point DOCKER_HOST at the engine, e.g. unix:///var/run/docker.sock)",
				    d->socket_path);
	}
	if (!S_ISSOCK(st.st_mode))
		return nbrun__err(d->ctx, NBRUN_EENGINE,
				  "%s is not a socket: point DOCKER_HOST at the engine's socket (unix:///var/run/docker.sock) or start it with scripts/setup",
				  d->socket_path);
	if (access(d->socket_path, R_OK | W_OK) < 0)
		return nbrun__err(d->ctx, NBRUN_EENGINE,
				  "permission denied on %s: run as root or join the docker group",
				  d->socket_path);
	return 0;
}

static int docker_progress(void *p, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
	struct nbrun__docker *d = p;

	return d->cancel && *d->cancel ? 1 : 0;
}

struct docker_hdr {
	char api[16];
};

static size_t docker_header_cb(char *data, size_t size, size_t n, void *p)
{
	struct docker_hdr *h = p;
	size_t len = size * n;
	static const char key[] = "api-version:";

	if (len > sizeof(key) && !strncasecmp(data, key, sizeof(key) - 1)) {
		const char *v = data + sizeof(key) - 1;
		size_t i = 0;
		while (v < data + len && *v == ' ')
			v++;
		while (v < data + len && i + 1 < sizeof(h->api) &&
		       ((*v >= '0' && *v <= '9') || *v == '.'))
			h->api[i++] = *v++;
		h->api[i] = '\0';
	}
	return len;
}

/* Compare "1.41"-style versions by minor number (major is 1 everywhere). */
static int docker_minor(const char *v)
{
	const char *dot = strchr(v, '.');
	return (!strncmp(v, "1.", 2) && dot) ? atoi(dot + 1) : -1;
}

/* What every request shares: set once on the reused handle. */
static void docker_setup_handle(struct nbrun__docker *d)
{
	CURL *c = d->curl;

	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, d->errbuf);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, docker_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, d);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	if (d->socket_path)
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, d->socket_path);
	if (d->tls) {
		char p[4096];
		snprintf(p, sizeof(p), "%s/ca.pem", d->cert_dir);
		curl_easy_setopt(c, CURLOPT_CAINFO, p);
		snprintf(p, sizeof(p), "%s/cert.pem", d->cert_dir);
		curl_easy_setopt(c, CURLOPT_SSLCERT, p);
		snprintf(p, sizeof(p), "%s/key.pem", d->cert_dir);
		curl_easy_setopt(c, CURLOPT_SSLKEY, p);
	}
}

static int docker_negotiate(struct nbrun__docker *d)
{
	struct docker_hdr hdr = { "" };
	struct buf reply = BUF_INIT(4096);
	int status, minor;

	curl_easy_setopt(d->curl, CURLOPT_HEADERFUNCTION, docker_header_cb);
	curl_easy_setopt(d->curl, CURLOPT_HEADERDATA, &hdr);
	d->api[0] = '\0';
	status = nbrun__docker_request(d, "GET", "/_ping", NULL, NULL, 0, &reply, 5000);
	curl_easy_setopt(d->curl, CURLOPT_HEADERFUNCTION, NULL);
	curl_easy_setopt(d->curl, CURLOPT_HEADERDATA, NULL);
	buf_free(&reply);
	if (status < 0)
		return status;
	if (status != 200)
		return nbrun__err(d->ctx, NBRUN_EENGINE, "the Docker engine at %s answered /_ping with HTTP %d",
				  d->host, status);
	if (!hdr.api[0]) {
		json_t *v = NULL;
		status = nbrun__docker_json(d, "GET", "/version", NULL, &v, 5000);
		if (status == 200)
			snprintf(hdr.api, sizeof(hdr.api), "%s",
				 json_string_value(json_object_get(v, "ApiVersion")) ?: "");
		json_decref(v);
	}
	minor = docker_minor(hdr.api);
	if (minor < 0)
		snprintf(d->api, sizeof(d->api), "%s", DOCKER_API_MAX);
	else if (minor < DOCKER_API_MIN_MINOR)
		return nbrun__err(d->ctx, NBRUN_EENGINE,
				  "the Docker engine speaks API %s; nbrun needs 1.%d or newer", hdr.api,
				  DOCKER_API_MIN_MINOR);
	else if (minor > docker_minor(DOCKER_API_MAX))
		snprintf(d->api, sizeof(d->api), "%s", DOCKER_API_MAX);
	else
		snprintf(d->api, sizeof(d->api), "%s", hdr.api);
	return 0;
}

int nbrun__docker_new(struct nbrun__docker **out, struct nbrun_ctx *ctx)
{
	struct nbrun__docker *d;
	int rc;

	*out = NULL;
	pthread_once(&docker_once, docker_global_init);
	d = calloc(1, sizeof(*d));
	if (!d)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	d->ctx = ctx;
	rc = docker_parse_host(d);
	if (rc < 0)
		goto fail;
	rc = docker_check_socket(d);
	if (rc < 0)
		goto fail;
	d->curl = curl_easy_init();
	if (!d->curl) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "cannot initialise libcurl");
		goto fail;
	}
	docker_setup_handle(d);
	rc = docker_negotiate(d);
	if (rc < 0)
		goto fail;
	*out = d;
	return 0;
fail:
	nbrun__docker_free(d);
	return rc;
}

void nbrun__docker_free(struct nbrun__docker *d)
{
	if (!d)
		return;
	if (d->curl)
		curl_easy_cleanup(d->curl);
	free(d->host);
	free(d->base_url);
	free(d->socket_path);
	free(d->cert_dir);
	free(d);
}

void nbrun__docker_set_cancel(struct nbrun__docker *d, const volatile sig_atomic_t *cancel)
{
	d->cancel = cancel;
}

void nbrun__docker_set_ctx(struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	d->ctx = ctx;
}

const char *nbrun__docker_api_version(const struct nbrun__docker *d)
{
	return d->api;
}

/* ---- requests ------------------------------------------------------------ */

static size_t docker_body_cb(char *data, size_t size, size_t n, void *p)
{
	struct buf *b = p;
	size_t len = size * n;

	/* Replies we read are small by nature: one past its cap stops the transfer
	 * (CURLE_WRITE_ERROR) rather than arriving cut and misread. */
	if (buf_append(b, data, len) < 0)
		return 0;
	return len;
}

struct docker_sink {
	CURL *curl;
	int fd;
	uint64_t written;
	uint64_t max;
	bool cut;
	int err;
};

static size_t docker_fd_cb(char *data, size_t size, size_t n, void *p)
{
	struct docker_sink *s = p;
	size_t len = size * n;
	long status = 0;
	int rc;

	/* An error reply's body is a message, not the archive: never spool it. */
	curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200)
		return len;
	if (s->written + len > s->max) {
		s->cut = true;
		return 0;
	}
	rc = fd_write_all(s->fd, data, len);
	if (rc < 0) {
		s->err = -rc;
		return 0;
	}
	s->written += len;
	return len;
}

/* What changes per request: URL (versioned but for /_ping), method, timeout, headers. */
static void docker_setup(struct nbrun__docker *d, const char *method, const char *path,
			 long timeout_ms, struct curl_slist **hdrs, const char *content_type)
{
	char url[2048];
	CURL *c = d->curl;

	if (path[0] == '/' && strncmp(path, "/_ping", 6) && d->api[0])
		snprintf(url, sizeof(url), "%s/v%s%s", d->base_url, d->api, path);
	else
		snprintf(url, sizeof(url), "%s%s", d->base_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : DOCKER_DEFAULT_TIMEOUT_MS);
	/* HTTPGET resets a body left from an earlier POST/PUT on this handle. */
	curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	*hdrs = curl_slist_append(NULL, "Expect:");
	if (content_type) {
		char h[128];
		snprintf(h, sizeof(h), "Content-Type: %s", content_type);
		*hdrs = curl_slist_append(*hdrs, h);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
	d->errbuf[0] = '\0';
}

static int docker_perform(struct nbrun__docker *d, const char *method, const char *path)
{
	CURLcode cc = curl_easy_perform(d->curl);
	long status = 0;

	if (cc == CURLE_OK) {
		curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &status);
		return (int)status;
	}
	if (cc == CURLE_ABORTED_BY_CALLBACK)
		return nbrun__err(d->ctx, NBRUN_ECANCELLED, "interrupted");
	if (cc == CURLE_WRITE_ERROR)
		return nbrun__err(d->ctx, NBRUN_EENGINE, "the Docker engine's reply to %s %s is too large",
				  method, path);
	if (cc == CURLE_OPERATION_TIMEDOUT)
		return nbrun__err(d->ctx, NBRUN_EENGINE,
				  "the Docker engine at %s did not answer %s %s in time (%s): check that it is healthy or restart it (scripts/setup)",
				  d->host, method, path, d->errbuf[0] ? d->errbuf : curl_easy_strerror(cc));
	return nbrun__err(d->ctx, NBRUN_EENGINE,
			  "cannot reach the Docker engine at %s (%s): start it with scripts/setup or 'dockerd &'",
			  d->host, d->errbuf[0] ? d->errbuf : curl_easy_strerror(cc));
}

int nbrun__docker_request(struct nbrun__docker *d, const char *method, const char *path,
			  const char *content_type, const void *body, size_t body_len,
			  struct buf *reply, long timeout_ms)
{
	struct curl_slist *hdrs = NULL;
	int status;

	docker_setup(d, method, path, timeout_ms, &hdrs, content_type);
	curl_easy_setopt(d->curl, CURLOPT_WRITEFUNCTION, docker_body_cb);
	curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, reply);
	if (body || !strcmp(method, "POST") || !strcmp(method, "PUT")) {
		curl_easy_setopt(d->curl, CURLOPT_POSTFIELDS, body ? body : "");
		curl_easy_setopt(d->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
		curl_easy_setopt(d->curl, CURLOPT_CUSTOMREQUEST, method);
	}
	status = docker_perform(d, method, path);
	curl_easy_setopt(d->curl, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	return status;
}

/* Turn an engine error reply into the context message. */
static void docker_reply_message(struct nbrun__docker *d, int status, const char *method,
				 const char *path, const struct buf *reply)
{
	json_t *j = reply->len ? json_loadb(reply->data, reply->len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(j, "message"));

	nbrun__err(d->ctx, NBRUN_EENGINE, "Docker engine: %s %s: HTTP %d%s%.300s", method, path,
		   status, msg ? ": " : "", msg ? msg : "");
	json_decref(j);
}

int nbrun__docker_json(struct nbrun__docker *d, const char *method, const char *path,
		       const json_t *body, json_t **reply_json, long timeout_ms)
{
	struct buf reply = BUF_INIT(DOCKER_REPLY_MAX);
	char *text = NULL;
	int status;

	if (reply_json)
		*reply_json = NULL;
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text)
			return nbrun__err(d->ctx, NBRUN_ENOMEM, "out of memory");
	}
	status = nbrun__docker_request(d, method, path, body ? "application/json" : NULL, text,
				       text ? strlen(text) : 0, &reply, timeout_ms);
	free(text);
	if (status < 0)
		goto out;
	if (status >= 400)
		docker_reply_message(d, status, method, path, &reply);
	else if (reply_json && reply.len)
		*reply_json = json_loadb(reply.data, reply.len, 0, NULL);
out:
	buf_free(&reply);
	return status;
}

int nbrun__docker_download(struct nbrun__docker *d, const char *path, int fd, uint64_t max_bytes,
			   long timeout_ms)
{
	struct curl_slist *hdrs = NULL;
	struct docker_sink sink = { d->curl, fd, 0, max_bytes, false, 0 };
	int status;

	docker_setup(d, "GET", path, timeout_ms, &hdrs, NULL);
	curl_easy_setopt(d->curl, CURLOPT_WRITEFUNCTION, docker_fd_cb);
	curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, &sink);
	status = docker_perform(d, "GET", path);
	curl_easy_setopt(d->curl, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	if (sink.cut)
		return 1;
	if (sink.err)
		return nbrun__errno(d->ctx, NBRUN_EIO, sink.err, "cannot spool %s", path);
	if (status < 0)
		return status;
	if (status == 404)
		return nbrun__err(d->ctx, NBRUN_ENOTFOUND, "not found in the container: %s", path);
	if (status != 200)
		return nbrun__err(d->ctx, NBRUN_EENGINE, "Docker engine: GET %s: HTTP %d", path, status);
	return 0;
}

/* ---- attach: the container's stdin and stdout as one connection ------------- */

/*
 * POST /containers/{id}/attach answers "101 UPGRADED" and the connection then
 * carries the container's stdin one way and its stdout and stderr the other,
 * in the multiplexed framing of the logs (no TTY). curl's CONNECT_ONLY gives
 * the raw connection on any DOCKER_HOST (unix, tcp, TLS); the HTTP exchange
 * is written by hand, and the frames are taken apart here, so that the
 * caller sees a plain byte stream of the container's stdout.
 */
struct docker_conn {
	struct nbrun__conn conn;
	CURL *curl;
	struct nbrun__demux dm;
};

static ssize_t docker_conn_send(struct nbrun__conn *c, const void *buf, size_t len)
{
	struct docker_conn *dc = (struct docker_conn *)c;
	size_t sent = 0;
	CURLcode cc = curl_easy_send(dc->curl, buf, len, &sent);

	if (cc == CURLE_AGAIN)
		return -EAGAIN;
	if (cc != CURLE_OK)
		return -EPIPE;
	return (ssize_t)sent;
}

/* The raw attach stream from the socket: the count, 0 at its end, -EAGAIN, -EIO. */
static ssize_t docker_conn_fill(struct nbrun__demux *dm, void *buf, size_t len)
{
	struct docker_conn *dc = (struct docker_conn *)(void *)((char *)dm - offsetof(struct docker_conn, dm));
	size_t n = 0;
	CURLcode cc = curl_easy_recv(dc->curl, buf, len, &n);

	if (cc == CURLE_AGAIN)
		return -EAGAIN;
	if (cc != CURLE_OK)
		return -EIO;
	return (ssize_t)n;
}

/* Raw bytes buffered: 1, 0 at the end of the stream, -EAGAIN, < 0. */
static int demux_fill(struct nbrun__demux *dm)
{
	ssize_t n;

	if (dm->raw_off < dm->raw_len)
		return 1;
	if (dm->eof)
		return 0;
	dm->raw_off = dm->raw_len = 0;
	n = dm->fill(dm, dm->raw, sizeof(dm->raw));
	if (n < 0)
		return (int)n;
	if (n == 0) {
		dm->eof = true;
		return 0;
	}
	dm->raw_len = (size_t)n > sizeof(dm->raw) ? sizeof(dm->raw) : (size_t)n;
	return 1;
}

/* Keep the last bytes of the container's stderr (diagnostics, never parsed). */
static void docker_conn_tail(struct nbrun__conn *c, const unsigned char *p, size_t n)
{
	size_t cap = sizeof(c->err_tail) - 1;

	if (n >= cap) {
		memcpy(c->err_tail, p + n - cap, cap);
		c->err_len = cap;
	} else {
		if (c->err_len + n > cap) {
			size_t drop = c->err_len + n - cap;
			memmove(c->err_tail, c->err_tail + drop, c->err_len - drop);
			c->err_len -= drop;
		}
		memcpy(c->err_tail + c->err_len, p, n);
		c->err_len += n;
	}
	c->err_tail[c->err_len] = '\0';
}

ssize_t nbrun__demux_recv(struct nbrun__demux *dm, struct nbrun__conn *c, void *buf, size_t len)
{
	size_t out = 0;

	while (out < len) {
		int rc = demux_fill(dm);
		size_t avail, n;

		if (rc <= 0) {
			if (out)
				break;
			return rc;
		}
		avail = dm->raw_len - dm->raw_off;
		if (dm->frame_left == 0) {
			n = 8 - dm->hdr_len < avail ? 8 - dm->hdr_len : avail;
			memcpy(dm->hdr + dm->hdr_len, dm->raw + dm->raw_off, n);
			dm->hdr_len += n;
			dm->raw_off += n;
			if (dm->hdr_len < 8)
				continue;
			dm->hdr_len = 0;
			if (dm->hdr[0] > 2 || dm->hdr[1] || dm->hdr[2] || dm->hdr[3])
				return -EPROTO;
			dm->frame_stream = dm->hdr[0];
			dm->frame_left = ((size_t)dm->hdr[4] << 24) | ((size_t)dm->hdr[5] << 16) |
					 ((size_t)dm->hdr[6] << 8) | dm->hdr[7];
			continue;
		}
		n = dm->frame_left < avail ? dm->frame_left : avail;
		if (dm->frame_stream == 1) {
			if (n > len - out)
				n = len - out;
			memcpy((char *)buf + out, dm->raw + dm->raw_off, n);
			out += n;
		} else {
			docker_conn_tail(c, dm->raw + dm->raw_off, n);
		}
		dm->raw_off += n;
		dm->frame_left -= n;
	}
	return out ? (ssize_t)out : -EAGAIN;
}

static ssize_t docker_conn_recv(struct nbrun__conn *c, void *buf, size_t len)
{
	return nbrun__demux_recv(&((struct docker_conn *)c)->dm, c, buf, len);
}

static bool docker_conn_pending(struct nbrun__conn *c)
{
	struct docker_conn *dc = (struct docker_conn *)c;

	return dc->dm.raw_off < dc->dm.raw_len;
}

static void docker_conn_close(struct nbrun__conn *c)
{
	struct docker_conn *dc = (struct docker_conn *)c;

	if (!dc)
		return;
	if (dc->curl)
		curl_easy_cleanup(dc->curl);
	free(dc);
}

/* Send all of s, polling for room until the deadline. */
static int docker_conn_write_all(struct docker_conn *dc, const char *s, size_t len, long timeout_ms)
{
	while (len) {
		ssize_t n = docker_conn_send(&dc->conn, s, len);
		if (n == -EAGAIN) {
			struct pollfd p = { dc->conn.fd, POLLOUT, 0 };
			if (poll(&p, 1, (int)timeout_ms) <= 0)
				return -ETIMEDOUT;
			continue;
		}
		if (n < 0)
			return (int)n;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

int nbrun__docker_attach(struct nbrun__docker *d, const char *container, struct nbrun__conn **out)
{
	struct docker_conn *dc;
	char req[512];
	curl_socket_t sock = CURL_SOCKET_BAD;
	CURLcode cc;
	char *end;
	int rc, status = 0;

	*out = NULL;
	dc = calloc(1, sizeof(*dc));
	if (!dc)
		return nbrun__err(d->ctx, NBRUN_ENOMEM, "out of memory");
	dc->conn.send = docker_conn_send;
	dc->conn.recv = docker_conn_recv;
	dc->conn.pending = docker_conn_pending;
	dc->conn.close = docker_conn_close;
	dc->conn.fd = -1;
	dc->dm.fill = docker_conn_fill;
	dc->curl = curl_easy_duphandle(d->curl);
	if (!dc->curl) {
		rc = nbrun__err(d->ctx, NBRUN_ENOMEM, "out of memory");
		goto fail;
	}
	curl_easy_setopt(dc->curl, CURLOPT_URL, d->base_url);
	curl_easy_setopt(dc->curl, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(dc->curl, CURLOPT_TIMEOUT_MS, 0L);
	curl_easy_setopt(dc->curl, CURLOPT_NOPROGRESS, 1L);
	curl_easy_setopt(dc->curl, CURLOPT_ERRORBUFFER, NULL);
	cc = curl_easy_perform(dc->curl);
	if (cc == CURLE_OK)
		cc = curl_easy_getinfo(dc->curl, CURLINFO_ACTIVESOCKET, &sock);
	if (cc != CURLE_OK || sock == CURL_SOCKET_BAD) {
		rc = nbrun__err(d->ctx, NBRUN_EENGINE, "cannot connect to the Docker engine at %s: %s",
				d->host, curl_easy_strerror(cc));
		goto fail;
	}
	dc->conn.fd = (int)sock;
	snprintf(req, sizeof(req),
		 "POST /v%s/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
		 "Host: docker\r\nContent-Length: 0\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
		 d->api, container);
	rc = docker_conn_write_all(dc, req, strlen(req), 10000);
	if (rc < 0) {
		rc = nbrun__errno(d->ctx, NBRUN_EENGINE, -rc, "cannot attach to the container");
		goto fail;
	}
	/* The reply head; bytes after it are already the stream. */
	for (;;) {
		size_t n = 0;
		struct pollfd p = { dc->conn.fd, POLLIN, 0 };

		cc = curl_easy_recv(dc->curl, dc->dm.raw + dc->dm.raw_len, sizeof(dc->dm.raw) - 1 - dc->dm.raw_len, &n);
		if (cc == CURLE_AGAIN) {
			if (poll(&p, 1, 10000) <= 0) {
				rc = nbrun__err(d->ctx, NBRUN_EENGINE, "the engine did not answer the attach in time");
				goto fail;
			}
			continue;
		}
		if (cc != CURLE_OK || n == 0) {
			rc = nbrun__err(d->ctx, NBRUN_EENGINE, "the engine closed the attach connection");
			goto fail;
		}
		dc->dm.raw_len += n;
		dc->dm.raw[dc->dm.raw_len] = '\0';
		end = strstr((char *)dc->dm.raw, "\r\n\r\n");
		if (end)
			break;
		if (dc->dm.raw_len >= sizeof(dc->dm.raw) - 1) {
			rc = nbrun__err(d->ctx, NBRUN_EENGINE, "the engine's attach reply is malformed");
			goto fail;
		}
	}
	if (sscanf((char *)dc->dm.raw, "HTTP/1.%*d %d", &status) != 1 || (status != 101 && status != 200)) {
		char *eol = strstr((char *)dc->dm.raw, "\r\n");
		rc = nbrun__err(d->ctx, status == 404 ? NBRUN_ENOTFOUND : NBRUN_EENGINE,
				"cannot attach to the container: %.*s",
				(int)(eol ? eol - (char *)dc->dm.raw : 0) > 120 ? 120 : (int)(eol ? eol - (char *)dc->dm.raw : 0),
				(char *)dc->dm.raw);
		goto fail;
	}
	dc->dm.raw_off = (size_t)(end + 4 - (char *)dc->dm.raw);
	*out = &dc->conn;
	return 0;
fail:
	docker_conn_close(&dc->conn);
	return rc;
}

void nbrun__docker_stdout(struct buf *out, const struct buf *raw)
{
	size_t off = 0;

	while (raw->data && off + 8 <= raw->len) {
		const unsigned char *h = (const unsigned char *)raw->data + off;
		size_t len = (size_t)h[4] << 24 | (size_t)h[5] << 16 | (size_t)h[6] << 8 | h[7];

		off += 8;
		if (len > raw->len - off)
			len = raw->len - off;
		if (h[0] == 1)
			buf_append(out, raw->data + off, len);
		off += len;
	}
}
