/* SPDX-License-Identifier: MIT */
/* Sandboxes: what every backend shares (identity, binding, release). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbrun-private.h"
#include "text.h"
#include "wire.h"

int nbrun__random_id(struct nbrun_ctx *ctx, char out[16])
{
	int rc = wire_random_hex(out, 6);

	return rc < 0 ? nbrun__errno(ctx, NBRUN_EIO, -rc, "cannot get random bytes") : 0;
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
	sb->ch.ctx = ctx;
	sb->ch.cancel = cancel;
}

int nbrun__sandbox_wait_ready(struct nbrun__sandbox *sb, uint64_t deadline_ms)
{
	while (!sb->ready) {
		json_t *msg = NULL;
		const char *type;
		int rc = nbrun__chan_recv(&sb->ch, &msg, deadline_ms);

		if (rc == 2)
			return nbrun__err(sb->ctx, NBRUN_EENGINE, "the sandbox's kernel did not start in time");
		if (rc == 0)
			return nbrun__err(sb->ctx, NBRUN_EENGINE, "the sandbox ended before its kernel started: %.200s",
					  sb->conn->err_tail);
		if (rc < 0)
			return rc;
		rc = 0;
		type = json_string_value(json_object_get(msg, "type"));
		if (!strcmp(type, "hello") &&
		    json_integer_value(json_object_get(msg, "protocol")) != NBRUN__CHAN_PROTOCOL)
			rc = nbrun__err(sb->ctx, NBRUN_ENOIMAGE,
					"the image speaks sandbox protocol %" JSON_INTEGER_FORMAT
					", this nbrun %d: use an image of the same release (scripts/setup)",
					json_integer_value(json_object_get(msg, "protocol")),
					NBRUN__CHAN_PROTOCOL);
		else if (!strcmp(type, "error"))
			rc = nbrun__err(sb->ctx, NBRUN_EENGINE, "the sandbox failed to start: %.200s",
					json_string_value(json_object_get(msg, "message")) ?: "");
		sb->ready = !strcmp(type, "ready");
		if (rc == 0)
			rc = nbrun__chan_recv_blob(&sb->ch, NULL, -1, NBRUN__CHAN_MAX_JSON, deadline_ms);
		json_decref(msg);
		if (rc < 0)
			return rc;
	}
	return 0;
}

bool nbrun__sandbox_idle(struct nbrun__sandbox *sb)
{
	struct pollfd p = { sb->conn ? sb->conn->fd : -1, POLLIN, 0 };

	if (!sb->conn || sb->ch.broken)
		return false;
	if (sb->ch.rlen > sb->ch.roff || sb->conn->pending(sb->conn))
		return false;
	return poll(&p, 1, 0) == 0;
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

int nbrun__sandbox_check_kernel(struct nbrun__sandbox *sb, const char *kernel)
{
	char *list = NULL;
	int rc;

	if (!strcmp(kernel, "python3"))
		return 0;
	rc = sb->ops->image_kernels(sb, &list);
	if (rc == 0 && !text_has_word(list, kernel))
		rc = nbrun__err(sb->ctx, NBRUN_EINVAL,
				"image %s has no %s kernel (its kernels: %.200s); languages nbrun runs: %s",
				sb->image, kernel, list, nbrun__language_names());
	free(list);
	return rc;
}
