/* SPDX-License-Identifier: MIT */
/* Sandboxes: what every backend shares (identity, binding, release). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "nbrun-private.h"

int nbrun__random_id(struct nbrun_ctx *ctx, char out[16])
{
	unsigned char raw[6];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return nbrun__errno(ctx, NBRUN_EIO, errno, "cannot get random bytes");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

int nbrun__sandbox_new(struct nbrun__sandbox **out, struct nbrun_ctx *ctx,
		       const struct nbrun__sandbox_ops *ops, const char *id)
{
	struct nbrun__sandbox *sb;
	int rc;

	*out = NULL;
	if (!ops || ops->version != NBRUN__SANDBOX_OPS_VERSION)
		return nbrun__err(ctx, NBRUN_EINVAL, "sandbox backend missing or of another version");
	if (id && strlen(id) >= sizeof(sb->id))
		return nbrun__err(ctx, NBRUN_EINVAL, "sandbox id too long");
	sb = calloc(1, sizeof(*sb));
	if (!sb)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	sb->ops = ops;
	sb->ctx = ctx;
	if (id)
		snprintf(sb->id, sizeof(sb->id), "%s", id);
	rc = id ? 0 : nbrun__random_id(ctx, sb->id);
	if (rc == 0)
		rc = ops->open(sb);
	if (rc < 0) {
		nbrun__sandbox_free(sb);
		return rc;
	}
	*out = sb;
	return 0;
}

void nbrun__sandbox_bind(struct nbrun__sandbox *sb, struct nbrun_ctx *ctx,
			 const volatile sig_atomic_t *cancel)
{
	sb->ctx = ctx;
	sb->cancel = cancel;
}

void nbrun__sandbox_free(struct nbrun__sandbox *sb)
{
	if (!sb)
		return;
	if (sb->backend) {
		sb->ops->destroy(sb);
		sb->ops->free(sb);
	}
	free(sb->image);
	free(sb);
}
