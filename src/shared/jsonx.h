/* SPDX-License-Identifier: MIT */
/*
 * JSON values jansson cannot hold: integers of any size and the non-finite
 * floats Python's json module reads and writes (Infinity, -Infinity, NaN).
 * Parameters carry them (papermill's "-p x 123456789012345678901234567890"
 * and "-p x inf"), and they must reach the kernel exactly.
 *
 * In a jansson tree such a value is a string whose first byte is 0xFF:
 * never valid UTF-8, so no parsed or validated string can look like one,
 * and jansson's own dumper refuses it instead of writing it as text.
 */
#ifndef NBRUN_JSONX_H
#define NBRUN_JSONX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

enum jsonx_kind {
	JSONX_PLAIN = 0,  /* an ordinary jansson value */
	JSONX_BIGINT,     /* an integer outside json_int_t */
	JSONX_NONFINITE,  /* inf, -inf or nan */
};

/*
 * An integer given as decimal digits with an optional '-' (no leading zeros
 * but for "0"): a json integer when it fits, else a big-integer marker.
 * NULL when out of memory or when text is not such a number.
 */
json_t *jsonx_integer_text(const char *text, size_t len);
/* A non-finite double as its marker ("inf", "-inf", "nan"). */
json_t *jsonx_nonfinite(double d);
/* Which kind v is; *text (may be NULL) gets the digits or "inf"/"-inf"/"nan". */
enum jsonx_kind jsonx_kind_of(const json_t *v, const char **text);

/*
 * Parse JSON text (RFC 8259, plus Infinity, -Infinity and NaN as Python
 * writes them): big integers and non-finite floats become markers, and a
 * number too large for a double (1e400) becomes inf, as in Python. Keys
 * must be unique; depth at most 64. NULL with a one-line reason in err.
 */
json_t *jsonx_loadb(const char *text, size_t len, char *err, size_t errlen);

/* Compact JSON text of v, markers written as their digits or as Infinity,
 * -Infinity, NaN. NULL when out of memory or on a value it cannot write. */
char *jsonx_dumps(const json_t *v);

/*
 * How a language writes a list and a mapping: "[" ", " "]", "{" ": " "}"
 * for Python; "list(" ", " ")", "list(" " = " ")" for R.
 */
struct jsonx_syntax {
	const char *list_open, *list_close, *map_open, *map_close, *sep, *kv;
};
typedef int (*jsonx_writer)(struct buf *b, const json_t *v, int depth);
/*
 * An array or object v in that syntax: each item, and each key as a JSON
 * string, written by write at depth + 1. 0, a negative errno (-EINVAL for
 * a key that is not UTF-8), or 1 when v is neither (nothing written).
 */
int jsonx_write_container(struct buf *b, const json_t *v, int depth, const struct jsonx_syntax *syn,
			  jsonx_writer write);

/* A deep copy of v where every marker is the string of its text ("inf",
 * the digits), for documents that must be strict JSON. NULL when out of memory. */
json_t *jsonx_plain(const json_t *v);

/* The shortest decimal text that reads back as d (finite d), e.g. "0.1". */
void jsonx_double_text(char out[40], double d);

/*
 * doc as indented JSON ending in a newline, written atomically to name
 * below dirfd (mode 0644; temp file and rename): 0 or -errno.
 */
int jsonx_write_file(int dirfd, const char *name, const json_t *doc);

#endif
