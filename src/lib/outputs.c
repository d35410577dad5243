/* SPDX-License-Identifier: MIT */
/* STUB: replaced by the output parser. */
#include "nbrun-private.h"

void nbrun__limits_resolve(struct nbrun__limits *out, const struct nbrun_parse_limits *in)
{
	out->max_output = in && in->max_output ? in->max_output : NBRUN_DEFAULT_MAX_OUTPUT;
	out->max_outputs = in && in->max_outputs ? in->max_outputs : NBRUN_DEFAULT_MAX_OUTPUTS;
	out->max_images = in && in->max_images ? in->max_images : NBRUN_DEFAULT_MAX_IMAGES;
	out->max_image_bytes = in && in->max_image_bytes ? in->max_image_bytes : NBRUN_DEFAULT_MAX_IMAGE_BYTES;
	out->max_notebook_bytes = in && in->max_notebook_bytes ? in->max_notebook_bytes : NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES;
}

int nbrun__outputs_parse(struct nbrun_ctx *ctx, struct nbrun_result *r, const json_t *nb,
			 int out_dirfd, const struct nbrun__limits *lim)
{
	return nbrun__err(ctx, NBRUN_EGENERIC, "output parsing not implemented");
}
