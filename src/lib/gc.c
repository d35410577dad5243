/* SPDX-License-Identifier: MIT */
/*
 * Garbage collection of runs that did not clean up after themselves: every
 * container and volume carries nbrun.run, nbrun.pid and nbrun.host labels,
 * so an orphan is one whose process on this host no longer exists.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "egress.h"
#include "nbrun-private.h"

void nbrun__pidns(char *buf, size_t size)
{
	ssize_t n = readlink("/proc/self/ns/pid", buf, size - 1);

	buf[n > 0 ? n : 0] = '\0';
}

/*
 * True when the labels say the run is over: it is old enough, or its nbrun
 * process is gone. A process is judged only from the host and the pid
 * namespace that made it: a server in a container (a Swarm task has its
 * node's host name) sees neither the host's processes nor another
 * container's, and must not take their sandboxes for orphans.
 */
static bool gc_is_orphan(json_t *labels, long older_than_s)
{
	const char *pid = json_string_value(json_object_get(labels, "nbrun.pid"));
	const char *host = json_string_value(json_object_get(labels, "nbrun.host"));
	const char *pidns = json_string_value(json_object_get(labels, "nbrun.pidns"));
	const char *created = json_string_value(json_object_get(labels, "nbrun.created"));
	char me[256] = "", my_ns[64];

	if (older_than_s >= 0 && created && time(NULL) - atoll(created) >= older_than_s)
		return true;
	gethostname(me, sizeof(me) - 1);
	if (!pid || !host || strcmp(host, me))
		return false;
	nbrun__pidns(my_ns, sizeof(my_ns));
	if (pidns && strcmp(pidns, my_ns))
		return false;
	return kill((pid_t)atol(pid), 0) < 0 && errno == ESRCH;
}

/*
 * Remove one listed object. A removal the engine refused or that never got an
 * answer is a failure, not a removal; one already gone (404: another gc or
 * its own run got there first) is neither.
 */
static void gc_remove(struct nbrun__docker *d, const char *path, struct nbrun__gc_counts *c)
{
	int status = nbrun__docker_json(d, "DELETE", path, NULL, NULL, 20000);

	if (status >= 200 && status < 300)
		c->removed++;
	else if (status != 404)
		c->failed++;
}

/* A minute for a listing asked for (nbrun gc): an engine in Swarm mode
 * lists cluster volumes too and took over 10 s under load. The sweep before
 * each cold run and session waits less: it is on their path, and what it
 * misses the next one removes. An engine that is down fails at connect. */
#define GC_LIST_TIMEOUT_MS 60000
#define GC_ORPHANS_LIST_TIMEOUT_MS 10000

static int gc_pass(struct nbrun__docker *d, long older_than_s, int list_timeout_ms,
		   struct nbrun__gc_counts *c)
{
	json_t *list = NULL, *item;
	size_t i;
	int status;
	char path[256];

	c->removed = c->failed = 0;
	status = nbrun__docker_json(d, "GET",
				    "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22nbrun.run%22%5D%7D",
				    NULL, &list, list_timeout_ms);
	if (status < 0)
		return status;
	json_array_foreach(list, i, item) {
		const char *id = json_string_value(json_object_get(item, "Id"));
		if (!id || strlen(id) > 128 || !gc_is_orphan(json_object_get(item, "Labels"), older_than_s))
			continue;
		snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", id);
		gc_remove(d, path, c);
	}
	json_decref(list);
	list = NULL;
	status = nbrun__docker_json(d, "GET",
				    "/volumes?filters=%7B%22label%22%3A%5B%22nbrun.run%22%5D%7D",
				    NULL, &list, list_timeout_ms);
	if (status < 0)
		return status;
	json_array_foreach(json_object_get(list, "Volumes"), i, item) {
		const char *name = json_string_value(json_object_get(item, "Name"));
		if (!name || strlen(name) > 128 || !gc_is_orphan(json_object_get(item, "Labels"), older_than_s))
			continue;
		snprintf(path, sizeof(path), "/volumes/%s?force=1", name);
		gc_remove(d, path, c);
	}
	json_decref(list);
	return 0;
}

int nbrun__gc_orphans(struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	struct nbrun__gc_counts c;

	(void)ctx;
	return gc_pass(d, -1, GC_ORPHANS_LIST_TIMEOUT_MS, &c);
}

int nbrun__gc(struct nbrun__docker *d, struct nbrun_ctx *ctx, long older_than_s,
	      struct nbrun__gc_counts *out)
{
	char last[sizeof(ctx->errmsg)] = "";
	int rc = gc_pass(d, older_than_s, GC_LIST_TIMEOUT_MS, out);

	if (rc < 0 || !out->failed)
		return rc;
	/* The context holds the engine's words about the last failure. */
	if (ctx)
		snprintf(last, sizeof(last), "%s", ctx->errmsg);
	return nbrun__err(ctx, NBRUN_EENGINE, "%u of %u containers and volumes could not be removed%s%s",
			  out->failed, out->failed + out->removed, last[0] ? "; the last: " : "", last);
}

NBRUN_EXPORT int nbrun_egress_release(struct nbrun_ctx *ctx)
{
	struct nbrun__docker *d = NULL;
	int rc = nbrun__docker_new(&d, ctx);

	if (rc == 0)
		rc = nbrun__egress_release(d, ctx);
	nbrun__docker_free(d);
	return rc;
}

NBRUN_EXPORT int nbrun_gc(unsigned int *removed, unsigned int *failed, struct nbrun_ctx *ctx,
			  unsigned int older_than_s)
{
	struct nbrun__docker *d = NULL;
	struct nbrun__gc_counts c = { 0, 0 };
	int rc;

	if (removed)
		*removed = 0;
	if (failed)
		*failed = 0;
	rc = nbrun__docker_new(&d, ctx);
	if (rc < 0)
		return rc;
	rc = nbrun__gc(d, ctx, older_than_s ? (long)older_than_s : -1, &c);
	/* The egress proxy goes with the last relay (runs given hosts to allow). */
	if (rc == 0)
		rc = nbrun__egress_release(d, ctx);
	nbrun__docker_free(d);
	if (removed)
		*removed = c.removed;
	if (failed)
		*failed = c.failed;
	return rc;
}
