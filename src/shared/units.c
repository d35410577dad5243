/* SPDX-License-Identifier: MIT */
/* Sizes, durations and counts as people write them ("512M", "60s", "1.5"): the
 * command line and the HTTP API read them the same way. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "units.h"

/* A positive finite number followed by a suffix from the table; value * multiplier. */
struct unit {
	const char *suffix;
	double mult;
};

static int parse_with_units(uint64_t *out, const char *s, const struct unit *units, double max)
{
	char *end;
	double v;

	if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v <= 0)
		return -1;
	for (; units->suffix; units++) {
		if (strcasecmp(end, units->suffix))
			continue;
		v *= units->mult;
		if (v < 1 || v > max)
			return -1;
		*out = (uint64_t)v;
		return 0;
	}
	return -1;
}

int units_parse_size(uint64_t *out, const char *s)
{
	static const struct unit units[] = {
		{ "", 1 }, { "b", 1 },
		{ "k", 1024.0 }, { "kb", 1024.0 }, { "kib", 1024.0 },
		{ "m", 1048576.0 }, { "mb", 1048576.0 }, { "mib", 1048576.0 },
		{ "g", 1073741824.0 }, { "gb", 1073741824.0 }, { "gib", 1073741824.0 },
		{ "t", 1099511627776.0 }, { "tb", 1099511627776.0 }, { "tib", 1099511627776.0 },
		{ NULL, 0 },
	};
	return parse_with_units(out, s, units, 9.0e15);
}

int units_parse_duration(uint64_t *out, const char *s)
{
	static const struct unit units[] = {
		{ "", 1000 }, { "s", 1000 }, { "ms", 1 }, { "m", 60000 }, { "min", 60000 },
		{ "h", 3600000 }, { NULL, 0 },
	};
	return parse_with_units(out, s, units, 7.0 * 24 * 3600 * 1000);
}

int units_parse_cpus(uint64_t *out, const char *s)
{
	static const struct unit units[] = { { "", 1e9 }, { NULL, 0 } };
	return parse_with_units(out, s, units, 1024e9);
}

int units_parse_count(int64_t *out, const char *s)
{
	static const struct unit units[] = { { "", 1 }, { NULL, 0 } };
	uint64_t v;

	if (strchr(s, '.') || parse_with_units(&v, s, units, 4194304.0) < 0)
		return -1;
	*out = (int64_t)v;
	return 0;
}
