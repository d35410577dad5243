/* SPDX-License-Identifier: MIT */
/*
 * Options: every options struct's initialiser and version check; the run
 * options' checks and their translation into a sandbox spec. Run options
 * serve the one-shot run, the pool and sessions alike, so they live apart
 * from any of them.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fdio.h"
#include "nbrun-private.h"
#include "netrule.h"
#include "text.h"

/* ---- versions ---------------------------------------------------------------- */

int nbrun__options_version(struct nbrun_ctx *ctx, const char *what, const unsigned int *version,
			   unsigned int known)
{
	if (!version)
		return nbrun__err(ctx, NBRUN_EINVAL, "%s options missing", what);
	if (*version < 1 || *version > known)
		return known == 1 ? nbrun__err(ctx, NBRUN_EINVAL,
					       "%s options of another version (%u): this library knows version 1",
					       what, *version)
				  : nbrun__err(ctx, NBRUN_EINVAL,
					       "%s options of another version (%u): this library knows 1 to %u",
					       what, *version, known);
	return 0;
}

/* Every options struct's defaults, as its macro has them. */
static const struct nbrun_run_options run_defaults = NBRUN_RUN_OPTIONS_INIT;
static const struct nbrun_pool_options pool_defaults = NBRUN_POOL_OPTIONS_INIT;
static const struct nbrun_exec_options exec_defaults = NBRUN_EXEC_OPTIONS_INIT;
static const struct nbrun_parse_options parse_defaults = NBRUN_PARSE_OPTIONS_INIT;

/*
 * How much of each options struct each of its versions has: fields are only
 * ever added at the end, and a program built against an older nbrun.h
 * allocated no more than its version's share.
 */
static const size_t run_sizes[] = {
	offsetof(struct nbrun_run_options, pool),
	offsetof(struct nbrun_run_options, on_event),
	offsetof(struct nbrun_run_options, language),
	offsetof(struct nbrun_run_options, allow_errors),
	offsetof(struct nbrun_run_options, runtime),
	offsetof(struct nbrun_run_options, allow_net),
	sizeof(struct nbrun_run_options),
};
static const size_t pool_sizes[] = {
	offsetof(struct nbrun_pool_options, languages),
	sizeof(struct nbrun_pool_options),
};
static const size_t exec_sizes[] = { sizeof(struct nbrun_exec_options) };
static const size_t parse_sizes[] = { sizeof(struct nbrun_parse_options) };

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(COUNT(run_sizes) == NBRUN_RUN_OPTIONS_VERSION, "a size for each run options version");
_Static_assert(COUNT(pool_sizes) == NBRUN_POOL_OPTIONS_VERSION, "a size for each pool options version");
_Static_assert(COUNT(exec_sizes) == NBRUN_EXEC_OPTIONS_VERSION, "a size for each exec options version");
_Static_assert(COUNT(parse_sizes) == NBRUN_PARSE_OPTIONS_VERSION, "a size for each parse options version");
/* options_init() writes the version where every options struct has it. */
_Static_assert(offsetof(struct nbrun_run_options, version) == 0 &&
		       offsetof(struct nbrun_pool_options, version) == 0 &&
		       offsetof(struct nbrun_exec_options, version) == 0 &&
		       offsetof(struct nbrun_parse_options, version) == 0,
	       "the version first");

/* The defaults of tpl into the caller's share of opts, then the caller's version. */
static int options_init(void *opts, unsigned int version, const void *tpl, const size_t *sizes,
			size_t known)
{
	if (!opts || version < 1 || version > known)
		return NBRUN_EINVAL;
	memcpy(opts, tpl, sizes[version - 1]);
	memcpy(opts, &version, sizeof(version));
	return 0;
}

NBRUN_EXPORT int nbrun_run_options_init(struct nbrun_run_options *opts, unsigned int version)
{
	return options_init(opts, version, &run_defaults, run_sizes, COUNT(run_sizes));
}

NBRUN_EXPORT int nbrun_pool_options_init(struct nbrun_pool_options *opts, unsigned int version)
{
	return options_init(opts, version, &pool_defaults, pool_sizes, COUNT(pool_sizes));
}

NBRUN_EXPORT int nbrun_exec_options_init(struct nbrun_exec_options *opts, unsigned int version)
{
	return options_init(opts, version, &exec_defaults, exec_sizes, COUNT(exec_sizes));
}

NBRUN_EXPORT int nbrun_parse_options_init(struct nbrun_parse_options *opts, unsigned int version)
{
	return options_init(opts, version, &parse_defaults, parse_sizes, COUNT(parse_sizes));
}

/* ---- run options -------------------------------------------------------------- */

#define RUN_IMAGE_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@-"

const char *nbrun__run_runtime(const struct nbrun_run_options *o)
{
	return o->version >= 6 ? o->runtime : NULL;
}

size_t nbrun__run_allow_net(const struct nbrun_run_options *o, const char *const **rules)
{
	*rules = o->version >= 7 && o->allow_net_count ? o->allow_net : NULL;
	return *rules ? o->allow_net_count : 0;
}

int nbrun__run_egress_spec(struct nbrun_ctx *ctx, struct nbrun__sandbox_spec *s,
			   const struct nbrun_run_options *o, char **policy, char **ca)
{
	const char *const *specs;
	size_t n = nbrun__run_allow_net(o, &specs);
	struct netrule *rules;
	char why[256];

	*policy = *ca = NULL;
	if (!n)
		return 0;
	rules = calloc(n, sizeof(*rules));
	if (!rules)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (netrule_parse(&rules[i], specs[i], why, sizeof(why)) < 0) {
			free(rules);
			return nbrun__err(ctx, NBRUN_EINVAL, "%s", why);
		}
	*policy = netrule_policy(rules, n);
	free(rules);
	if (!*policy)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	s->egress_policy = *policy;
	s->net_bytes = o->net_bytes ? o->net_bytes : NBRUN_DEFAULT_NET_BYTES;
	if (o->ca_certs) {
		size_t len = 0;
		int rc = fd_read_file(AT_FDCWD, o->ca_certs, FD_READ_REGULAR, NBRUN_CA_CERTS_MAX, ca, &len);

		if (rc < 0 || !strstr(*ca, "-----BEGIN CERTIFICATE-----")) {
			free(*ca);
			*ca = NULL;
			free(*policy);
			*policy = NULL;
			s->egress_policy = NULL;
			return nbrun__err(ctx, NBRUN_EINVAL, "--ca-certs %s: %s", o->ca_certs,
					  rc < 0 ? strerror(-rc) : "no PEM certificate in it");
		}
		s->ca_certs = *ca;
		s->ca_certs_len = len;
	}
	return 0;
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
	int rc = nbrun__options_version(ctx, "run", o ? &o->version : NULL, NBRUN_RUN_OPTIONS_VERSION);

	if (rc < 0)
		return rc;
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
	{
		const char *const *rules;
		size_t n = nbrun__run_allow_net(o, &rules);
		struct netrule r;
		char why[256];

		if (n > NETRULE_MAX)
			return nbrun__err(ctx, NBRUN_EINVAL, "at most %d hosts to allow", NETRULE_MAX);
		for (size_t i = 0; i < n; i++)
			if (!rules[i] || netrule_parse(&r, rules[i], why, sizeof(why)) < 0)
				return nbrun__err(ctx, NBRUN_EINVAL, "%s", rules[i] ? why : "a host to allow is NULL");
		if (n && strcmp(o->network, "none"))
			return nbrun__err(ctx, NBRUN_EINVAL,
					  "hosts to allow take network none (the default): bridge is everything already");
		if (n && nbrun__run_runtime(o) && !strcmp(nbrun__run_runtime(o), "runsc"))
			return nbrun__err(ctx, NBRUN_EINVAL, "hosts to allow do not work under runtime runsc yet");
		if (!n && o->version >= 7 && o->ca_certs)
			return nbrun__err(ctx, NBRUN_EINVAL, "CA certificates are for hosts to allow: give those too");
		if (n && o->ca_certs) {
			char *pem = NULL;
			size_t len = 0;
			int frc = fd_read_file(AT_FDCWD, o->ca_certs, FD_READ_REGULAR, NBRUN_CA_CERTS_MAX, &pem, &len);
			bool ok = frc == 0 && strstr(pem, "-----BEGIN CERTIFICATE-----");

			free(pem);
			if (!ok)
				return nbrun__err(ctx, NBRUN_EINVAL, "--ca-certs %s: %s", o->ca_certs,
						  frc < 0 ? strerror(-frc) : "no PEM certificate in it");
		}
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
