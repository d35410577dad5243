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

#include "nbrun-private.h"

/* True when the labels say the run is over: its nbrun process is gone, or it is old enough. */
static bool gc_is_orphan(json_t *labels, long older_than_s)
{
	const char *pid = json_string_value(json_object_get(labels, "nbrun.pid"));
	const char *host = json_string_value(json_object_get(labels, "nbrun.host"));
	const char *created = json_string_value(json_object_get(labels, "nbrun.created"));
	char me[256] = "";

	if (older_than_s >= 0 && created && time(NULL) - atoll(created) >= older_than_s)
		return true;
	gethostname(me, sizeof(me) - 1);
	if (!pid || !host || strcmp(host, me))
		return false;
	return kill((pid_t)atol(pid), 0) < 0 && errno == ESRCH;
}

static int gc_pass(struct nbrun__docker *d, struct nbrun_ctx *ctx, long older_than_s)
{
	json_t *list = NULL, *item;
	size_t i;
	int status, removed = 0;
	char path[256];

	status = nbrun__docker_json(d, "GET",
				    "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22nbrun.run%22%5D%7D",
				    NULL, &list, 10000);
	if (status < 0)
		return status;
	json_array_foreach(list, i, item) {
		const char *id = json_string_value(json_object_get(item, "Id"));
		if (!id || strlen(id) > 128 || !gc_is_orphan(json_object_get(item, "Labels"), older_than_s))
			continue;
		snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", id);
		if (nbrun__docker_json(d, "DELETE", path, NULL, NULL, 20000) < 300)
			removed++;
	}
	json_decref(list);
	list = NULL;
	status = nbrun__docker_json(d, "GET",
				    "/volumes?filters=%7B%22label%22%3A%5B%22nbrun.run%22%5D%7D",
				    NULL, &list, 10000);
	if (status < 0)
		return status;
	json_array_foreach(json_object_get(list, "Volumes"), i, item) {
		const char *name = json_string_value(json_object_get(item, "Name"));
		if (!name || strlen(name) > 128 || !gc_is_orphan(json_object_get(item, "Labels"), older_than_s))
			continue;
		snprintf(path, sizeof(path), "/volumes/%s?force=1", name);
		if (nbrun__docker_json(d, "DELETE", path, NULL, NULL, 20000) < 300)
			removed++;
	}
	json_decref(list);
	return removed;
}

int nbrun__gc_orphans(struct nbrun__docker *d, struct nbrun_ctx *ctx)
{
	return gc_pass(d, ctx, -1);
}

int nbrun__gc(struct nbrun__docker *d, struct nbrun_ctx *ctx, long older_than_s)
{
	return gc_pass(d, ctx, older_than_s);
}

NBRUN_EXPORT int nbrun_gc(unsigned int *removed, struct nbrun_ctx *ctx, unsigned int older_than_s)
{
	struct nbrun__docker *d = NULL;
	int rc;

	if (removed)
		*removed = 0;
	rc = nbrun__docker_new(&d, ctx);
	if (rc < 0)
		return rc;
	rc = nbrun__gc(d, ctx, older_than_s ? (long)older_than_s : -1);
	nbrun__docker_free(d);
	if (rc < 0)
		return rc;
	if (removed)
		*removed = (unsigned int)rc;
	return 0;
}
