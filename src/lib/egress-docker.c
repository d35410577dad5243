/* SPDX-License-Identifier: MIT */
/*
 * The way out of a sandbox given an allow-list, on the Docker engine
 * (docs/network.md): one shared egress proxy (squid, the image
 * nbrun-egress, on a network of its own) and, per sandbox, a relay
 * container on that network and a small volume both mount, holding the
 * relay's unix socket (and the CA bundle the run gives). The sandbox keeps
 * NetworkMode none. The proxy knows a sandbox by its relay's address:
 * nbrun writes that address's policy into the proxy before the sandbox
 * starts, and empties it when the sandbox goes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "egress.h"
#include "nbrun-private.h"
#include "text.h"

#define EGRESS_LOGS_MAX (4u << 20)
/* How long the relay has to write its last lines after SIGUSR1. */
#define EGRESS_DUMP_WAIT_MS 100
/* Connections the report lists; the rest are counted. */
#define EGRESS_REPORT_MAX 200
#define EGRESS_TIMEOUT_MS 60000L

static int egress_status(struct nbrun_ctx *ctx, int status, const char *what)
{
	char engine[sizeof(ctx->errmsg)];

	if (status < 0)
		return status;
	if (status >= 400) {
		snprintf(engine, sizeof(engine), "%s", nbrun_ctx_errmsg(ctx));
		return nbrun__err(ctx, NBRUN_EENGINE, "egress: %s: %s", what, engine);
	}
	return 0;
}

/* The egress image: nbrun-egress:<version>, else :latest. */
static int egress_image(struct nbrun__docker *d, struct nbrun_ctx *ctx, char *out, size_t len)
{
	static const char *const tags[] = { NBRUN_VERSION, "latest" };
	char path[256];

	for (size_t i = 0; i < 2; i++) {
		int status;
		snprintf(out, len, "%s:%s", NBRUN_EGRESS_IMAGE, tags[i]);
		snprintf(path, sizeof(path), "/images/%s/json", out);
		status = nbrun__docker_json(d, "GET", path, NULL, NULL, 0);
		if (status < 0)
			return status;
		if (status == 200)
			return 0;
		if (status != 404)
			return egress_status(ctx, status, "cannot inspect its image");
	}
	return nbrun__err(ctx, NBRUN_ENOIMAGE,
			  "image %s:%s is not on the engine: build it with scripts/setup (hosts to allow need it)",
			  NBRUN_EGRESS_IMAGE, NBRUN_VERSION);
}

/*
 * The engine's networks of that name. Its CheckDuplicate is no lock: two
 * nbrun processes making the network at once can make two, and the name
 * is then ambiguous to every later request. The one made first is kept,
 * the others removed (nobody uses them: they were made a moment ago).
 */
static int egress_network_dedupe(struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	json_t *list = NULL, *n, *keep = NULL;
	size_t i;
	int status = nbrun__docker_json(d, "GET",
					"/networks?filters=%7B%22name%22%3A%5B%22" NBRUN_EGRESS_NETWORK "%22%5D%7D",
					NULL, &list, EGRESS_TIMEOUT_MS);

	if (status != 200 || !json_is_array(list)) {
		json_decref(list);
		return egress_status(ctx, status < 0 ? status : 500, "cannot list its networks");
	}
	json_array_foreach(list, i, n) {
		const char *name = json_string_value(json_object_get(n, "Name"));
		const char *created = json_string_value(json_object_get(n, "Created"));
		if (!name || strcmp(name, NBRUN_EGRESS_NETWORK) || !created)
			continue;
		if (!keep || strcmp(created, json_string_value(json_object_get(keep, "Created"))) < 0)
			keep = n;
	}
	json_array_foreach(list, i, n) {
		const char *id = json_string_value(json_object_get(n, "Id"));
		char path[160];
		if (n == keep || !id || strcmp(json_string_value(json_object_get(n, "Name")) ?: "",
					       NBRUN_EGRESS_NETWORK) ||
		    strspn(id, "0123456789abcdef") != strlen(id) || strlen(id) > 64)
			continue;
		snprintf(path, sizeof(path), "/networks/%s", id);
		nbrun__docker_json(d, "DELETE", path, NULL, NULL, EGRESS_TIMEOUT_MS);
	}
	json_decref(list);
	return 0;
}

static int egress_network(struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	json_t *body;
	int status = nbrun__docker_json(d, "GET", "/networks/" NBRUN_EGRESS_NETWORK, NULL, NULL, 0);

	if (status < 0)
		return status;
	if (status == 200)
		return 0;
	if (status != 404)
		/* ambiguous (400 or 409, by engine version): two were made at once */
		return egress_network_dedupe(d, ctx);
	body = json_pack("{s:s, s:s, s:b, s:{s:s}}", "Name", NBRUN_EGRESS_NETWORK, "Driver", "bridge",
			 "CheckDuplicate", 1, "Labels", NBRUN_EGRESS_LABEL, "network");
	if (!body)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	status = nbrun__docker_json(d, "POST", "/networks/create", body, NULL, 0);
	json_decref(body);
	/* 409: another nbrun made it meanwhile. */
	if (status != 409 && (status < 0 || status >= 400))
		return egress_status(ctx, status, "cannot create its network");
	return egress_network_dedupe(d, ctx);
}

/* The proxy's state: 1 running (of image), 0 absent, 2 there but not running or another image. */
static int egress_proxy_state(struct nbrun__docker *d, const char *image)
{
	json_t *j = NULL;
	int status = nbrun__docker_json(d, "GET", "/containers/" NBRUN_EGRESS_PROXY "/json", NULL, &j, 0);
	int state;

	if (status < 0)
		return status;
	if (status == 404) {
		json_decref(j);
		return 0;
	}
	state = json_is_true(json_object_get(json_object_get(j, "State"), "Running")) &&
			!strcmp(json_string_value(json_object_get(json_object_get(j, "Config"), "Image")) ?: "",
				image)
		? 1
		: 2;
	json_decref(j);
	return status == 200 ? state : 2;
}

/* The threads of one process (a batch, a server) make the network and proxy one at a time. */
static pthread_mutex_t egress_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * The shared proxy running, of image, on its network (which the caller
 * made): made when missing, made anew when dead or of another version.
 * Under egress_lock. 0 or an error.
 */
static int egress_proxy_ensure(struct nbrun__docker *d, struct nbrun_ctx *ctx, const char *image)
{
	json_t *body;
	int rc, state;

	for (int attempt = 0; attempt < 3; attempt++) {
		state = egress_proxy_state(d, image);
		if (state < 0)
			return state;
		if (state == 1)
			return 0;
		if (state == 2) {
			/* Dead, stopped or of another version: made anew. */
			nbrun__docker_json(d, "DELETE", "/containers/" NBRUN_EGRESS_PROXY "?force=1", NULL,
					   NULL, EGRESS_TIMEOUT_MS);
		}
		/* squid starts as root and keeps uid proxy; it needs nothing else. */
		body = json_pack("{s:s, s:{s:s}, s:{s:s, s:[s], s:[s,s], s:[s], s:I, s:I, s:{s:s}}}",
				 "Image", image, "Labels", NBRUN_EGRESS_LABEL, "proxy", "HostConfig",
				 "NetworkMode", NBRUN_EGRESS_NETWORK, "CapDrop", "ALL", "CapAdd", "SETUID",
				 "SETGID", "SecurityOpt", "no-new-privileges", "Memory",
				 (json_int_t)(256 << 20), "PidsLimit", (json_int_t)256, "RestartPolicy",
				 "Name", "unless-stopped");
		if (!body)
			return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		rc = nbrun__docker_json(d, "POST", "/containers/create?name=" NBRUN_EGRESS_PROXY, body, NULL,
					EGRESS_TIMEOUT_MS);
		json_decref(body);
		if (rc == 409)
			continue; /* another nbrun is making it: look again */
		rc = egress_status(ctx, rc, "cannot create the proxy");
		if (rc == 0)
			rc = egress_status(ctx,
					   nbrun__docker_json(d, "POST", "/containers/" NBRUN_EGRESS_PROXY "/start",
							      NULL, NULL, EGRESS_TIMEOUT_MS),
					   "cannot start the proxy");
		if (rc < 0)
			return rc;
	}
	state = egress_proxy_state(d, image);
	if (state == 1)
		return 0;
	return state < 0 ? state : nbrun__err(ctx, NBRUN_EENGINE, "egress: the proxy does not stay up");
}

/* The relay's address on the egress network, into e->addr. */
static int egress_relay_addr(struct nbrun__egress *e, struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	char path[128];
	json_t *j = NULL;
	const char *ip;
	int status;

	snprintf(path, sizeof(path), "/containers/%s/json", e->relay);
	status = nbrun__docker_json(d, "GET", path, NULL, &j, 0);
	ip = json_string_value(json_object_get(
		json_object_get(json_object_get(json_object_get(j, "NetworkSettings"), "Networks"),
				NBRUN_EGRESS_NETWORK),
		"IPAddress"));
	if (status == 200 && ip && *ip && strlen(ip) < sizeof(e->addr) &&
	    strspn(ip, "0123456789abcdef.:") == strlen(ip)) {
		snprintf(e->addr, sizeof(e->addr), "%s", ip);
		json_decref(j);
		return 0;
	}
	json_decref(j);
	return status < 0 ? status
			  : nbrun__err(ctx, NBRUN_EENGINE, "egress: the relay has no address on %s",
				       NBRUN_EGRESS_NETWORK);
}

/* One file into a container (an uncompressed tar with it alone). */
static int egress_put(struct nbrun__docker *d, struct nbrun_ctx *ctx, const char *container,
		      const char *dir, const char *name, const char *data, size_t len)
{
	struct nbrun__tar *t = NULL;
	struct buf reply = BUF_INIT(64 * 1024);
	const void *tar;
	size_t tar_len;
	char path[256];
	int rc, status;

	rc = nbrun__tar_new(&t, 0, 0, len + (64u << 10));
	if (rc == 0)
		rc = nbrun__tar_add_data(t, name, data, len);
	if (rc == 0)
		rc = nbrun__tar_finish(t, &tar, &tar_len);
	if (rc < 0) {
		nbrun__tar_free(t);
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	}
	snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", container, dir);
	status = nbrun__docker_request(d, "PUT", path, "application/x-tar", tar, tar_len, &reply,
				       EGRESS_TIMEOUT_MS);
	nbrun__tar_free(t);
	buf_free(&reply);
	return egress_status(ctx, status, "cannot write a file into a container of its own");
}

/* The file name of the relay's policy: its address, ':' as '_'. */
static void egress_policy_name(const struct nbrun__egress *e, char *out, size_t len)
{
	snprintf(out, len, "%s", e->addr);
	for (char *p = out; *p; p++)
		if (*p == ':')
			*p = '_';
}

int nbrun__egress_setup(struct nbrun__egress *e, struct nbrun__docker *d, struct nbrun_ctx *ctx,
			const char *id, json_t *labels, const struct nbrun__sandbox_spec *spec)
{
	char image[128], cap[32], path[160], name[64];
	json_t *body;
	int rc, status;

	memset(e, 0, sizeof(*e));
	snprintf(e->relay, sizeof(e->relay), "nbrun-%s-egress", id);
	snprintf(e->volume, sizeof(e->volume), "nbrun-%s-egress", id);
	/* The relay first, the proxy after: nbrun__egress_release() removes no
	 * proxy while a relay exists, so another nbrun releasing it now cannot
	 * take it away from this sandbox. */
	rc = egress_image(d, ctx, image, sizeof(image));
	if (rc == 0) {
		pthread_mutex_lock(&egress_lock);
		rc = egress_network(d, ctx);
		pthread_mutex_unlock(&egress_lock);
	}
	if (rc < 0)
		goto out;
	/* The volume both mount: the relay's socket, the CA bundle. */
	json_object_set_new(labels, NBRUN_EGRESS_LABEL, json_string("relay"));
	body = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:O}", "Name", e->volume, "Driver", "local",
			 "DriverOpts", "type", "tmpfs", "device", "tmpfs", "o", "size=8m,mode=0755",
			 "Labels", labels);
	e->have_volume = true;
	status = body ? nbrun__docker_json(d, "POST", "/volumes/create", body, NULL, EGRESS_TIMEOUT_MS)
		      : NBRUN_ENOMEM;
	json_decref(body);
	if (status >= 400 || status < 0)
		e->have_volume = false;
	rc = status == NBRUN_ENOMEM ? nbrun__err(ctx, NBRUN_ENOMEM, "out of memory")
				    : egress_status(ctx, status, "cannot create the relay's volume");
	if (rc < 0)
		goto out;
	snprintf(cap, sizeof(cap), "%llu", (unsigned long long)spec->net_bytes);
	body = json_pack("{s:s, s:[s,s,s,s], s:s, s:O, s:{s:s, s:[s], s:[s], s:b, s:I, s:I,"
			 " s:[{s:s, s:s, s:s}], s:{s:s, s:{s:s}}}}",
			 "Image", image, "Cmd", "/usr/local/bin/nbrun-egress-relay",
			 NBRUN_EGRESS_SOCKET_DIR "/proxy.sock", NBRUN_EGRESS_PROXY ":3128", cap, "User",
			 "0:0", "Labels", labels, "HostConfig", "NetworkMode", NBRUN_EGRESS_NETWORK,
			 "CapDrop", "ALL", "SecurityOpt", "no-new-privileges", "ReadonlyRootfs", 1,
			 "Memory", (json_int_t)(64 << 20), "PidsLimit", (json_int_t)32, "Mounts", "Type",
			 "volume", "Source", e->volume, "Target", NBRUN_EGRESS_SOCKET_DIR, "LogConfig",
			 "Type", "json-file", "Config", "max-size", "8m");
	if (!body) {
		rc = nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
		goto out;
	}
	snprintf(path, sizeof(path), "/containers/create?name=%s", e->relay);
	e->have_relay = true;
	status = nbrun__docker_json(d, "POST", path, body, NULL, EGRESS_TIMEOUT_MS);
	json_decref(body);
	if (status >= 400 || status < 0)
		e->have_relay = false;
	rc = egress_status(ctx, status, "cannot create the relay");
	if (rc == 0) {
		snprintf(path, sizeof(path), "/containers/%s/start", e->relay);
		rc = egress_status(ctx, nbrun__docker_json(d, "POST", path, NULL, NULL, EGRESS_TIMEOUT_MS),
				   "cannot start the relay");
	}
	if (rc == 0) {
		pthread_mutex_lock(&egress_lock);
		rc = egress_proxy_ensure(d, ctx, image);
		pthread_mutex_unlock(&egress_lock);
	}
	/* The CA bundle, once the volume's tmpfs is mounted (before, it would be hidden under it). */
	if (rc == 0 && spec->ca_certs)
		rc = egress_put(d, ctx, e->relay, NBRUN_EGRESS_SOCKET_DIR, "ca.pem", spec->ca_certs,
				spec->ca_certs_len);
	if (rc == 0)
		rc = egress_relay_addr(e, d, ctx);
	if (rc == 0) {
		egress_policy_name(e, name, sizeof(name));
		e->have_policy = true;
		rc = egress_put(d, ctx, NBRUN_EGRESS_PROXY, NBRUN_EGRESS_POLICY_DIR, name,
				spec->egress_policy, strlen(spec->egress_policy));
	}
out:
	json_object_del(labels, NBRUN_EGRESS_LABEL);
	return rc;
}

/* One logged connection as the report has it, or NULL when the line is not one. */
static json_t *egress_entry(json_t *line)
{
	const char *host = json_string_value(json_object_get(line, "host"));
	json_t *port = json_object_get(line, "port");
	json_int_t sent = json_integer_value(json_object_get(line, "sent"));
	json_int_t received = json_integer_value(json_object_get(line, "received"));
	json_int_t status = json_integer_value(json_object_get(line, "status"));
	bool denied = json_is_true(json_object_get(line, "denied"));
	const char *error;
	char *clean;
	json_t *e;

	if (!json_is_object(line) || !json_object_get(line, "sent"))
		return NULL;
	clean = host ? text_utf8_sanitize(host, strlen(host) > 253 ? 253 : strlen(host), NULL) : NULL;
	error = json_string_value(json_object_get(line, "error"));
	if (error && (strlen(error) > 64 || strspn(error, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789") != strlen(error)))
		error = "?";
	/* Allowed: the proxy let it through (an answer of the host's own, or its error reaching it). */
	e = json_pack("{s:s?, s:o, s:b, s:s?, s:I, s:I, s:I, s:b, s:b}", "host", clean, "port",
		      json_is_integer(port) && json_integer_value(port) > 0 &&
				      json_integer_value(port) < 65536
			      ? json_integer(json_integer_value(port))
			      : json_null(),
		      "allowed", !denied && status > 0, "error", error, "status", status, "sent",
		      sent < 0 ? 0 : sent, "received", received < 0 ? 0 : received, "cut",
		      json_is_true(json_object_get(line, "cut")), "open",
		      json_is_true(json_object_get(line, "open")));
	free(clean);
	return e;
}

/* One connection into the report's lists and sums (entry taken over). */
static void egress_count(json_t *entry, json_t *requests, json_t *denied, json_int_t *sent,
			 json_int_t *received, json_int_t *unreachable, json_int_t *more)
{
	const char *error = json_string_value(json_object_get(entry, "error")) ?: "";

	*sent += json_integer_value(json_object_get(entry, "sent"));
	*received += json_integer_value(json_object_get(entry, "received"));
	if (!strcmp(error, "PROXY_UNREACHABLE")) {
		(*unreachable)++;
	} else if (!strcmp(error, "ERR_ACCESS_DENIED") && json_is_string(json_object_get(entry, "host")) &&
		   json_array_size(denied) < 100) {
		/* Refused by the policy, not merely failed. */
		bool seen = false;
		size_t i;
		json_t *h;
		json_array_foreach(denied, i, h)
			seen |= json_equal(h, json_object_get(entry, "host"));
		if (!seen)
			json_array_append(denied, json_object_get(entry, "host"));
	}
	if (json_array_size(requests) < EGRESS_REPORT_MAX) {
		json_array_append_new(requests, entry);
	} else {
		json_decref(entry);
		(*more)++;
	}
}

json_t *nbrun__egress_report(struct nbrun__egress *e, struct nbrun__docker *d, uint64_t cap)
{
	struct buf raw = BUF_INIT(EGRESS_LOGS_MAX), text = BUF_INIT(EGRESS_LOGS_MAX);
	json_t *requests = json_array(), *denied = json_array(), *open = json_array(), *dump = json_array();
	json_int_t sent = 0, received = 0, more = 0, unreachable = 0;
	bool capped = false;
	char path[160];
	struct timespec ts = { 0, EGRESS_DUMP_WAIT_MS * 1000000L };
	int status;

	if (e->have_relay) {
		/* The relay writes what is still open, then {"end": true}. */
		snprintf(path, sizeof(path), "/containers/%s/kill?signal=USR1", e->relay);
		nbrun__docker_json(d, "POST", path, NULL, NULL, EGRESS_TIMEOUT_MS);
		nanosleep(&ts, NULL);
		snprintf(path, sizeof(path), "/containers/%s/logs?stdout=1&stderr=0", e->relay);
		status = nbrun__docker_request(d, "GET", path, NULL, NULL, 0, &raw, EGRESS_TIMEOUT_MS);
		if (status == 200)
			nbrun__docker_stdout(&text, &raw);
	}
	/* Each report's SIGUSR1 (a session's every execute) adds the connections
	 * open then, and {"end": true}: only the last such dump counts, with
	 * every connection that closed. */
	for (size_t off = 0; text.data && off < text.len;) {
		char *nl = memchr(text.data + off, '\n', text.len - off);
		size_t len = nl ? (size_t)(nl - (text.data + off)) : text.len - off;
		json_t *line = json_loadb(text.data + off, len, 0, NULL), *entry;

		off += len + 1;
		if (json_is_integer(json_object_get(line, "cap")))
			capped = true;
		if (json_is_true(json_object_get(line, "end"))) {
			/* a dump complete: it replaces the one before */
			json_decref(open);
			open = dump;
			dump = json_array();
		}
		entry = egress_entry(line);
		json_decref(line);
		if (!entry)
			continue;
		if (json_is_true(json_object_get(entry, "open"))) {
			json_array_append_new(dump, entry);
			continue;
		}
		egress_count(entry, requests, denied, &sent, &received, &unreachable, &more);
	}
	{
		size_t i;
		json_t *entry;
		json_array_foreach(open, i, entry)
			egress_count(json_incref(entry), requests, denied, &sent, &received, &unreachable, &more);
	}
	json_decref(open);
	json_decref(dump);
	buf_free(&raw);
	buf_free(&text);
	if (!requests || !denied) {
		json_decref(requests);
		json_decref(denied);
		return NULL;
	}
	return json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:b}", "requests", requests, "denied",
			 denied, "proxy_unreachable", unreachable, "requests_not_listed", more, "bytes_sent", sent,
			 "bytes_received", received, "bytes_cap", (json_int_t)cap, "capped", capped);
}

void nbrun__egress_teardown(struct nbrun__egress *e, struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	char path[160], name[64];

	if (e->have_policy && e->addr[0]) {
		/* An empty policy: the address allows nothing, whoever gets it next. */
		egress_policy_name(e, name, sizeof(name));
		egress_put(d, ctx, NBRUN_EGRESS_PROXY, NBRUN_EGRESS_POLICY_DIR, name, "", 0);
	}
	e->have_policy = false;
	if (e->have_relay) {
		snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", e->relay);
		nbrun__docker_json(d, "DELETE", path, NULL, NULL, EGRESS_TIMEOUT_MS);
		e->have_relay = false;
	}
	if (e->have_volume) {
		snprintf(path, sizeof(path), "/volumes/%s?force=1", e->volume);
		nbrun__docker_json(d, "DELETE", path, NULL, NULL, EGRESS_TIMEOUT_MS);
		e->have_volume = false;
	}
}

int nbrun__egress_release(struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	json_t *list = NULL;
	int status;

	/* A relay still there: some sandbox (of any nbrun on this engine) needs the proxy. */
	status = nbrun__docker_json(d, "GET",
				    "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22" NBRUN_EGRESS_LABEL
				    "%3Drelay%22%5D%7D",
				    NULL, &list, EGRESS_TIMEOUT_MS);
	if (status != 200 || !json_is_array(list)) {
		json_decref(list);
		return egress_status(ctx, status < 0 ? status : 500, "cannot list the relays");
	}
	if (json_array_size(list)) {
		json_decref(list);
		return 0;
	}
	json_decref(list);
	status = nbrun__docker_json(d, "DELETE", "/containers/" NBRUN_EGRESS_PROXY "?force=1&v=1", NULL,
				    NULL, EGRESS_TIMEOUT_MS);
	if (status >= 400 && status != 404)
		return egress_status(ctx, status, "cannot remove the proxy");
	/* In use by something else of nbrun's (a proxy another nbrun just made): left. */
	nbrun__docker_json(d, "DELETE", "/networks/" NBRUN_EGRESS_NETWORK, NULL, NULL, EGRESS_TIMEOUT_MS);
	return status < 0 ? status : 0;
}
