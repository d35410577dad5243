/* SPDX-License-Identifier: MIT */
/*
 * Run options: their checks and their translation into a sandbox spec. They
 * serve the one-shot run, the pool and sessions alike, so they live apart
 * from any of them.
 */
#include <string.h>

#include "nbrun-private.h"
#include "text.h"


#define RUN_IMAGE_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@-"

const char *nbrun__run_runtime(const struct nbrun_run_options *o)
{
	return o->version >= 6 ? o->runtime : NULL;
}

void nbrun__run_sandbox_spec(struct nbrun__sandbox_spec *s, const struct nbrun_run_options *o)
{
	*s = (struct nbrun__sandbox_spec){
		.image = o->image,
		.memory_bytes = o->memory_bytes,
		.nano_cpus = o->nano_cpus,
		.pids = o->pids,
		.disk_bytes = o->disk_bytes,
		.network = !strcmp(o->network, "none") ? false : true,
		.env = o->env,
		.env_count = o->env_count,
		.runtime = nbrun__run_runtime(o),
	};
}

/* ---- options ---------------------------------------------------------------- */

/* The name an input gets below /mnt/data: its last component. */
static size_t run_input_name(const char *path, const char **name)
{
	size_t len = strlen(path);
	const char *b;

	while (len > 1 && path[len - 1] == '/')
		len--;
	b = memrchr(path, '/', len);
	*name = b && len > 1 ? b + 1 : path;
	return len - (size_t)(*name - path);
}

int nbrun__run_check_options(struct nbrun_ctx *ctx, const struct nbrun_run_options *o)
{
	/* Version 1 lacks the pool, which run_pool() reads only from version 2. */
	if (!o || o->version < 1 || o->version > NBRUN_RUN_OPTIONS_VERSION)
		return nbrun__err(ctx, NBRUN_EINVAL, "run options missing or of another version");
	if (o->version >= 4 && o->language && !nbrun__language_find(o->language))
		return nbrun__err(ctx, NBRUN_EINVAL, "unknown language '%.64s'; languages: %s",
				  o->language, nbrun__language_names());
	if (o->timeout_ms == 0 || o->timeout_ms > 24ULL * 3600 * 1000)
		return nbrun__err(ctx, NBRUN_EINVAL, "timeout must be between 1 ms and 24 h");
	if (o->cell_timeout_ms > o->timeout_ms)
		return nbrun__err(ctx, NBRUN_EINVAL, "cell timeout cannot exceed the timeout");
	if (o->memory_bytes < (64ULL << 20))
		return nbrun__err(ctx, NBRUN_EINVAL, "memory must be at least 64 MiB");
	if (o->nano_cpus == 0 || o->nano_cpus > 1024ULL * 1000000000ULL)
		return nbrun__err(ctx, NBRUN_EINVAL, "cpus must be positive");
	if (o->pids <= 0)
		return nbrun__err(ctx, NBRUN_EINVAL, "pids must be positive");
	if (o->disk_bytes < (1ULL << 20))
		return nbrun__err(ctx, NBRUN_EINVAL, "disk must be at least 1 MiB");
	if (!o->network || (strcmp(o->network, "none") && strcmp(o->network, "bridge")))
		return nbrun__err(ctx, NBRUN_EINVAL, "network must be 'none' or 'bridge'");
	/* Checked here too, not only when the image is looked up: a usage error
	 * must start nothing (no output directory, no engine request). */
	if (o->image && (!*o->image || strlen(o->image) > 255 ||
			 strspn(o->image, RUN_IMAGE_CHARS) != strlen(o->image)))
		return nbrun__err(ctx, NBRUN_EINVAL, "'%s' is not an image name", o->image);
	if (nbrun__run_runtime(o)) {
		const char *rt = nbrun__run_runtime(o);
		if (!*rt || strlen(rt) > 64 ||
		    strspn(rt, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
			    strlen(rt))
			return nbrun__err(ctx, NBRUN_EINVAL, "'%.64s' is not a runtime name", rt);
		/* scripts/setup registers gVisor with its network off: a bridge
		 * asked for would silently be none. */
		if (!strcmp(rt, "runsc") && strcmp(o->network, "none"))
			return nbrun__err(ctx, NBRUN_EINVAL, "runtime runsc runs with network none only");
	}
	/* Two inputs with one name: the second would replace the first. */
	for (size_t i = 0; i < o->file_count; i++)
		for (size_t k = 0; k < i; k++) {
			const char *a, *b;
			size_t na = run_input_name(o->files[i], &a), nb = run_input_name(o->files[k], &b);
			if (na == nb && !memcmp(a, b, na))
				return nbrun__err(ctx, NBRUN_EINVAL,
						  "inputs %s and %s would both be /mnt/data/%.*s",
						  o->files[k], o->files[i], (int)na, a);
		}
	for (size_t i = 0; i < o->env_count; i++) {
		const char *eq = o->env[i] ? strchr(o->env[i], '=') : NULL;
		if (!eq || eq == o->env[i])
			return nbrun__err(ctx, NBRUN_EINVAL, "environment entry '%s' is not KEY=VALUE",
					  o->env[i] ? o->env[i] : "");
		for (const char *p = o->env[i]; p < eq; p++)
			if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			      (p > o->env[i] && *p >= '0' && *p <= '9')))
				return nbrun__err(ctx, NBRUN_EINVAL, "environment name in '%s' is not valid",
						  o->env[i]);
		/* The engine takes JSON strings: a value that is not UTF-8 would be dropped. */
		if (!text_utf8_valid(eq + 1, strlen(eq + 1)))
			return nbrun__err(ctx, NBRUN_EINVAL, "environment value of '%.*s' is not UTF-8",
					  (int)(eq - o->env[i]), o->env[i]);
	}
	return 0;
}
