/* SPDX-License-Identifier: MIT */
/* Fuzz target: a whole notebook file through the loader and the output parser. */
#include <stdlib.h>

#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nbrun__limits lim;
	struct nbrun_result *r = NULL;
	struct nbrun_ctx ctx = { { 0 } };
	json_t *nb = NULL;
	int dirfd = fuzz_outdir();

	fuzz_limits(&lim);
	if (nbrun__notebook_loadb(&nb, &ctx, (const char *)data, size, lim.max_notebook_bytes) < 0)
		goto out;
	if (nbrun__result_new(&r, "fuzz") < 0)
		goto out;
	/* Half the inputs go without a directory: the no-export path must hold too. */
	if (nbrun__outputs_parse(&ctx, r, nb, size % 2 ? -1 : dirfd, &lim) == 0)
		fuzz_check_and_clean(r, &lim, dirfd);
out:
	nbrun_result_free(r);
	json_decref(nb);
	return 0;
}
