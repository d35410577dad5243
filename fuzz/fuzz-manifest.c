/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: nbrun batch --manifest. The first byte picks the format
 * (bit 0: CSV or JSON Lines) and whether a directory is joined to relative
 * notebook paths (bit 1); the rest is the manifest. A parse gives rows whose
 * names stay in the batch's directory and whose parameters are
 * identifiers, or one line naming a line; anything else aborts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "fuzz-util.h"
#include "params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct manifest m;
	char err[300] = "";
	enum manifest_format fmt;

	if (!size)
		return 0;
	fmt = data[0] & 1 ? MANIFEST_CSV : MANIFEST_JSONL;
	if (manifest_parse(&m, (const char *)data + 1, size - 1, fmt, "m", data[0] & 2 ? "dir" : NULL, 50, err,
			   sizeof(err)) < 0) {
		if (strncmp(err, "m:", 2) || strchr(err, '\n') || m.rows || m.n)
			abort();
		return 0;
	}
	if (!m.n || m.n > 50)
		abort();
	for (size_t i = 0; i < m.n; i++) {
		const struct manifest_row *r = &m.rows[i];
		const char *key;
		json_t *v;

		if (!r->notebook || !*r->notebook || !json_is_object(r->params) || !r->line)
			abort();
		if (r->output && batch_name_problem(r->output))
			abort();
		for (size_t k = 0; r->output && k < i; k++)
			if (m.rows[k].output && !strcmp(m.rows[k].output, r->output))
				abort();
		json_object_foreach(r->params, key, v)
			if (!params_name_ok(key) || !v)
				abort();
	}
	manifest_free(&m);
	return 0;
}
