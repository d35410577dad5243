/* SPDX-License-Identifier: MIT */
/* Sizes, durations and counts as people write them: 0, or -1 when s is not one. */
#ifndef NBRUN_UNITS_H
#define NBRUN_UNITS_H

#include <stdint.h>

/* "512M", "1G", "1024" (bytes), "1.5GiB". Must be > 0. */
int units_parse_size(uint64_t *out, const char *s);
/* "60", "60s", "500ms", "2m", "1.5h". Must be > 0. Result in ms, at most a week. */
int units_parse_duration(uint64_t *out, const char *s);
/* Positive number, possibly fractional ("1.5"), in units of 1e-9. */
int units_parse_cpus(uint64_t *out, const char *s);
/* A whole positive number, at most 4194304. */
int units_parse_count(int64_t *out, const char *s);

#endif
