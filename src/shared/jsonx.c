/* SPDX-License-Identifier: MIT */
/* JSON with integers of any size and non-finite floats kept exactly (jsonx.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fdio.h"
#include "jsonx.h"
#include "text.h"

#define JSONX_MARK '\xff'
#define JSONX_MAX_DEPTH 64
/* A parameter document is small: nothing legitimate comes near this. */
#define JSONX_MAX_DUMP (256u << 20)

/* ---- markers ------------------------------------------------------------------ */

static json_t *jsonx_marker(char kind, const char *text, size_t len)
{
	char *s = malloc(len + 2);
	json_t *v;

	if (!s)
		return NULL;
	s[0] = JSONX_MARK;
	s[1] = kind;
	memcpy(s + 2, text, len);
	v = json_stringn_nocheck(s, len + 2);
	free(s);
	return v;
}

json_t *jsonx_integer_text(const char *text, size_t len)
{
	const char *d = text;
	size_t n = len;
	long long v;
	char *end, tmp[32];

	if (n && *d == '-') {
		d++;
		n--;
	}
	if (!n || (n > 1 && d[0] == '0'))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (d[i] < '0' || d[i] > '9')
			return NULL;
	if (len < sizeof(tmp)) {
		memcpy(tmp, text, len);
		tmp[len] = '\0';
		errno = 0;
		v = strtoll(tmp, &end, 10);
		if (!errno && !*end)
			return json_integer((json_int_t)v);
	}
	return jsonx_marker('i', text, len);
}

json_t *jsonx_nonfinite(double d)
{
	const char *t = isnan(d) ? "nan" : d > 0 ? "inf" : "-inf";

	return isfinite(d) ? NULL : jsonx_marker('f', t, strlen(t));
}

enum jsonx_kind jsonx_kind_of(const json_t *v, const char **text)
{
	const char *s = json_string_value(v);

	if (!s || json_string_length(v) < 2 || s[0] != JSONX_MARK)
		return JSONX_PLAIN;
	if (text)
		*text = s + 2;
	return s[1] == 'i' ? JSONX_BIGINT : JSONX_NONFINITE;
}

void jsonx_double_text(char out[40], double d)
{
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(out, 40, "%.*g", prec, d);
		if (strtod(out, NULL) == d)
			return;
	}
}

/* ---- parser -------------------------------------------------------------------- */

struct jp {
	const char *p, *end;
	char *err;
	size_t errlen;
	bool failed;
};

static void jp_fail(struct jp *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jp_fail(struct jp *j, const char *fmt, ...)
{
	va_list ap;

	if (j->failed)
		return;
	j->failed = true;
	va_start(ap, fmt);
	vsnprintf(j->err, j->errlen, fmt, ap);
	va_end(ap);
}

static void jp_space(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static bool jp_word(struct jp *j, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n))
		return false;
	j->p += n;
	return true;
}

static int jp_hex4(struct jp *j)
{
	int v = 0;

	if (j->end - j->p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		char c = *j->p++;
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

static int jp_put_utf8(struct buf *b, unsigned long cp)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	return buf_append(b, u, n);
}

/* A string token (j->p at its opening quote) into b. */
static bool jp_string(struct jp *j, struct buf *b)
{
	const char *run;

	j->p++;
	for (;;) {
		run = j->p;
		while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20)
			j->p++;
		if (buf_append(b, run, (size_t)(j->p - run)) < 0) {
			jp_fail(j, "out of memory");
			return false;
		}
		if (j->p >= j->end) {
			jp_fail(j, "unterminated string");
			return false;
		}
		if (*j->p == '"') {
			j->p++;
			break;
		}
		if (*j->p != '\\') {
			jp_fail(j, "control character in a string");
			return false;
		}
		j->p++;
		if (j->p >= j->end) {
			jp_fail(j, "unterminated string");
			return false;
		}
		char c = *j->p++;
		const char *simple = strchr("\"\\/bfnrt", c);
		if (simple && c) {
			static const char to[] = "\"\\/\b\f\n\r\t";
			if (buf_append(b, &to[simple - "\"\\/bfnrt"], 1) < 0) {
				jp_fail(j, "out of memory");
				return false;
			}
			continue;
		}
		if (c != 'u') {
			jp_fail(j, "bad escape in a string");
			return false;
		}
		int hi = jp_hex4(j);
		unsigned long cp = (unsigned long)hi;
		if (hi < 0) {
			jp_fail(j, "bad \\u escape");
			return false;
		}
		if (hi >= 0xd800 && hi <= 0xdbff) {
			int lo;
			if (!jp_word(j, "\\u") || (lo = jp_hex4(j)) < 0xdc00 || lo > 0xdfff) {
				jp_fail(j, "lone surrogate in a string");
				return false;
			}
			cp = 0x10000 + (((unsigned long)hi - 0xd800) << 10) + ((unsigned long)lo - 0xdc00);
		} else if (hi >= 0xdc00 && hi <= 0xdfff) {
			jp_fail(j, "lone surrogate in a string");
			return false;
		}
		if (jp_put_utf8(b, cp) < 0) {
			jp_fail(j, "out of memory");
			return false;
		}
	}
	if (!text_utf8_valid(b->data ? b->data : "", b->len)) {
		jp_fail(j, "a string is not valid UTF-8");
		return false;
	}
	return true;
}

static json_t *jp_number(struct jp *j)
{
	const char *s = j->p;
	bool is_int = true;
	char *tmp, *end;
	json_t *v;
	double d;

	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
		jp_fail(j, "bad number");
		return NULL;
	}
	if (*j->p == '0')
		j->p++;
	else
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	if (j->p < j->end && *j->p == '.') {
		is_int = false;
		j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
			jp_fail(j, "bad number");
			return NULL;
		}
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		is_int = false;
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
			jp_fail(j, "bad number");
			return NULL;
		}
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (is_int) {
		/* "-0" is 0; jsonx_integer_text wants no leading zeros otherwise */
		if ((size_t)(j->p - s) == 2 && s[0] == '-' && s[1] == '0')
			return json_integer(0);
		v = jsonx_integer_text(s, (size_t)(j->p - s));
		if (!v)
			jp_fail(j, "out of memory");
		return v;
	}
	tmp = strndup(s, (size_t)(j->p - s));
	if (!tmp) {
		jp_fail(j, "out of memory");
		return NULL;
	}
	d = strtod(tmp, &end);
	free(tmp);
	v = isfinite(d) ? json_real(d) : jsonx_nonfinite(d);
	if (!v)
		jp_fail(j, "out of memory");
	return v;
}

static json_t *jp_value(struct jp *j, int depth);

static json_t *jp_container(struct jp *j, int depth, bool object)
{
	json_t *c = object ? json_object() : json_array();
	struct buf key = BUF_INIT(64u << 20);

	if (!c) {
		jp_fail(j, "out of memory");
		return NULL;
	}
	if (depth > JSONX_MAX_DEPTH) {
		jp_fail(j, "nested deeper than %d levels", JSONX_MAX_DEPTH);
		goto fail;
	}
	j->p++;
	jp_space(j);
	if (j->p < j->end && *j->p == (object ? '}' : ']')) {
		j->p++;
		return c;
	}
	for (;;) {
		json_t *v;

		jp_space(j);
		if (object) {
			if (j->p >= j->end || *j->p != '"') {
				jp_fail(j, "expected a string key");
				goto fail;
			}
			buf_reset(&key);
			if (!jp_string(j, &key))
				goto fail;
			if (memchr(key.data ? key.data : "", '\0', key.len)) {
				jp_fail(j, "a key holds a NUL character");
				goto fail;
			}
			if (json_object_get(c, key.data ? key.data : "")) {
				jp_fail(j, "duplicate key \"%.60s\"", key.data ? key.data : "");
				goto fail;
			}
			jp_space(j);
			if (j->p >= j->end || *j->p != ':') {
				jp_fail(j, "expected ':'");
				goto fail;
			}
			j->p++;
		}
		v = jp_value(j, depth + 1);
		if (!v)
			goto fail;
		if ((object ? json_object_set_new_nocheck(c, key.data ? key.data : "", v)
			    : json_array_append_new(c, v)) < 0) {
			jp_fail(j, "out of memory");
			goto fail;
		}
		jp_space(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == (object ? '}' : ']')) {
			j->p++;
			break;
		}
		jp_fail(j, "expected ',' or '%c'", object ? '}' : ']');
		goto fail;
	}
	buf_free(&key);
	return c;
fail:
	buf_free(&key);
	json_decref(c);
	return NULL;
}

static json_t *jp_value(struct jp *j, int depth)
{
	struct buf s = BUF_INIT(256u << 20);
	json_t *v;

	jp_space(j);
	if (j->p >= j->end) {
		jp_fail(j, "unexpected end of text");
		return NULL;
	}
	switch (*j->p) {
	case '{': return jp_container(j, depth, true);
	case '[': return jp_container(j, depth, false);
	case '"':
		if (!jp_string(j, &s)) {
			buf_free(&s);
			return NULL;
		}
		v = json_stringn_nocheck(s.data ? s.data : "", s.len);
		buf_free(&s);
		if (!v)
			jp_fail(j, "out of memory");
		return v;
	}
	if (jp_word(j, "true"))
		return json_true();
	if (jp_word(j, "false"))
		return json_false();
	if (jp_word(j, "null"))
		return json_null();
	if (jp_word(j, "NaN"))
		return jsonx_nonfinite(NAN);
	if (jp_word(j, "Infinity"))
		return jsonx_nonfinite(INFINITY);
	if (jp_word(j, "-Infinity"))
		return jsonx_nonfinite(-INFINITY);
	return jp_number(j);
}

json_t *jsonx_loadb(const char *text, size_t len, char *err, size_t errlen)
{
	struct jp j = { text, text + len, err, errlen, false };
	json_t *v;

	if (errlen)
		err[0] = '\0';
	v = jp_value(&j, 0);
	if (v) {
		jp_space(&j);
		if (j.p != j.end) {
			jp_fail(&j, "text after the JSON value");
			json_decref(v);
			v = NULL;
		}
	}
	if (!v && !j.failed)
		jp_fail(&j, "out of memory");
	if (!v && errlen && j.p <= j.end) {
		size_t at = (size_t)(j.p - text), n = strlen(err);
		snprintf(err + n, errlen - n, " (at byte %zu)", at);
	}
	return v;
}

/* ---- writers ------------------------------------------------------------------- */

int jsonx_write_container(struct buf *b, const json_t *v, int depth, const struct jsonx_syntax *syn,
			  jsonx_writer write)
{
	const char *key;
	json_t *item;
	size_t i;
	int rc;

	if (json_is_array(v)) {
		rc = buf_puts(b, syn->list_open);
		json_array_foreach(v, i, item) {
			if (rc == 0 && i)
				rc = buf_puts(b, syn->sep);
			if (rc == 0)
				rc = write(b, item, depth + 1);
		}
		return rc ? rc : buf_puts(b, syn->list_close);
	}
	if (!json_is_object(v))
		return 1;
	rc = buf_puts(b, syn->map_open);
	i = 0;
	json_object_foreach((json_t *)v, key, item) {
		/* A key that is not UTF-8 cannot be written (jansson refuses it). */
		bool utf8 = text_utf8_valid(key, strlen(key));
		json_t *k = utf8 ? json_string(key) : NULL;
		if (rc == 0 && i++)
			rc = buf_puts(b, syn->sep);
		if (rc == 0)
			rc = !utf8 ? -EINVAL : k ? write(b, k, depth + 1) : -ENOMEM;
		json_decref(k);
		if (rc == 0)
			rc = buf_puts(b, syn->kv);
		if (rc == 0)
			rc = write(b, item, depth + 1);
	}
	return rc ? rc : buf_puts(b, syn->map_close);
}

static int jsonx_dump_scalar(struct buf *b, const json_t *v)
{
	char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	int rc = t ? buf_puts(b, t) : -ENOMEM;

	free(t);
	return rc;
}

static int jsonx_dump(struct buf *b, const json_t *v, int depth)
{
	static const struct jsonx_syntax json_syntax = { "[", "]", "{", "}", ",", ":" };
	const char *text;
	int rc;

	if (depth > JSONX_MAX_DEPTH)
		return -EINVAL;
	switch (jsonx_kind_of(v, &text)) {
	case JSONX_BIGINT: return buf_puts(b, text);
	case JSONX_NONFINITE:
		return buf_puts(b, !strcmp(text, "nan") ? "NaN" : !strcmp(text, "inf") ? "Infinity"
										       : "-Infinity");
	case JSONX_PLAIN: break;
	}
	rc = jsonx_write_container(b, v, depth, &json_syntax, jsonx_dump);
	if (rc <= 0)
		return rc;
	if (json_is_real(v)) {
		char t[48];
		jsonx_double_text(t, json_real_value(v));
		if (!strpbrk(t, ".e"))
			strcat(t, ".0");
		return buf_puts(b, t);
	}
	return jsonx_dump_scalar(b, v);
}

char *jsonx_dumps(const json_t *v)
{
	struct buf b = BUF_INIT(JSONX_MAX_DUMP);

	if (jsonx_dump(&b, v, 0) < 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

json_t *jsonx_plain(const json_t *v)
{
	const char *text, *key;
	json_t *item, *copy;
	size_t i;

	if (jsonx_kind_of(v, &text) != JSONX_PLAIN)
		return json_string(text);
	if (json_is_array(v)) {
		copy = json_array();
		json_array_foreach(v, i, item)
			if (!copy || json_array_append_new(copy, jsonx_plain(item)) < 0) {
				json_decref(copy);
				return NULL;
			}
		return copy;
	}
	if (json_is_object(v)) {
		copy = json_object();
		json_object_foreach((json_t *)v, key, item)
			if (!copy || json_object_set_new(copy, key, jsonx_plain(item)) < 0) {
				json_decref(copy);
				return NULL;
			}
		return copy;
	}
	return json_deep_copy(v);
}

int jsonx_write_file(int dirfd, const char *name, const json_t *doc)
{
	char *text = json_dumps(doc, JSON_INDENT(2));
	size_t len;
	int rc;

	if (!text)
		return -ENOMEM;
	len = strlen(text);
	text[len] = '\n'; /* in place of the NUL: the file ends with a newline */
	rc = fd_write_file_atomic(dirfd, name, text, len + 1, 0644);
	free(text);
	return rc;
}
