/* SPDX-License-Identifier: MIT */
/* Helpers shared by the fuzz targets: a scratch output directory and result checks. */
#ifndef NBRUN_FUZZ_UTIL_H
#define NBRUN_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "nbrun-private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Limits small enough that caps are reached by small inputs. */
void fuzz_limits(struct nbrun__limits *lim);
/* dirfd of a private scratch directory, created on first use and removed at exit. */
int fuzz_outdir(void);
/*
 * Check what a parse promised (bounded text, caps, images on disk as
 * listed, nothing else in the directory), abort() when broken, then empty
 * the directory for the next input.
 */
void fuzz_check_and_clean(const struct nbrun_result *r, const struct nbrun__limits *lim, int dirfd);

#endif
