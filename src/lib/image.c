/* SPDX-License-Identifier: MIT */
/* What an image offers: the languages whose kernels it has, asked through the
 * sandbox backend. */
#include <stdlib.h>

#include "buf.h"
#include "nbrun-private.h"
#include "text.h"

NBRUN_EXPORT int nbrun_image_languages(char **out, struct nbrun_ctx *ctx, const char *image)
{
	struct nbrun__sandbox *sb = NULL;
	const struct nbrun__language *l;
	struct buf b = BUF_INIT(256);
	char *kernels = NULL;
	int rc;

	*out = NULL;
	rc = nbrun__sandbox_new(&sb, ctx, NBRUN__SANDBOX_DEFAULT, NULL);
	if (rc == 0)
		rc = sb->ops->resolve_image(sb, image);
	if (rc == 0)
		rc = sb->ops->image_kernels(sb, &kernels);
	nbrun__sandbox_free(sb);
	if (rc < 0)
		return rc;
	/* In the table's order; Python always (an image without the label has it only). */
	for (size_t i = 0; (l = nbrun__language_at(i)) && rc == 0; i++) {
		if (i == 0 || text_has_word(kernels, l->kernel))
			rc = buf_printf(&b, "%s%s", b.len ? " " : "", l->name);
	}
	free(kernels);
	if (rc < 0 || !(*out = buf_steal(&b))) {
		buf_free(&b);
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	}
	return 0;
}
