/* SPDX-License-Identifier: MIT */
/* STUB: replaced by the notebook reader. */
#include "nbrun-private.h"

int nbrun__notebook_load(json_t **out, struct nbrun_ctx *ctx, int dirfd, const char *name,
			 uint64_t max_bytes)
{
	json_error_t err;
	*out = json_load_file(name, 0, &err);
	return *out ? 0 : nbrun__err(ctx, NBRUN_EPARSE, "%s", err.text);
}

int nbrun__notebook_loadb(json_t **out, struct nbrun_ctx *ctx, const char *data, size_t len,
			  uint64_t max_bytes)
{
	json_error_t err;
	*out = json_loadb(data, len, 0, &err);
	return *out ? 0 : nbrun__err(ctx, NBRUN_EPARSE, "%s", err.text);
}

NBRUN_EXPORT int nbrun_parse_file(struct nbrun_result **out, struct nbrun_ctx *ctx,
				  const char *path, const struct nbrun_parse_options *opts)
{
	*out = NULL;
	return nbrun__err(ctx, NBRUN_EGENERIC, "not implemented");
}
