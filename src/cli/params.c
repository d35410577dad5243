/* SPDX-License-Identifier: MIT */
/*
 * Notebook parameters by papermill's rules (papermill/cli.py): "-p NAME
 * VALUE" is typed by trying Python's int() then float() on VALUE, "-r" keeps
 * the text, and the layers merge -y, -p, -r in that order. int() and float()
 * are reproduced here as CPython 3.11 reads a str: Unicode decimal digits
 * count as digits, Unicode whitespace may surround the number, single
 * underscores may separate digits, and int() refuses more than 4300 digits.
 */
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "buf.h"
#include "jsonx.h"
#include "params.h"
#include "text.h"

/* int()'s limit on the digits of a decimal text (sys.int_info.default_max_str_digits). */
#define PY_INT_MAX_STR_DIGITS 4300

/* The code points of digit zero of every run of Unicode decimal digits
 * (Unicode 14.0, the image's Python): each run holds 0 to 9 in order. */
static const uint32_t py_decimal_zeros[] = {
	0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6,
	0xd66, 0xde6, 0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0,
	0x1a80, 0x1a90, 0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0,
	0xaa50, 0xabf0, 0xff10, 0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0,
	0x11450, 0x114d0, 0x11650, 0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50,
	0x11da0, 0x16a60, 0x16ac0, 0x16b50, 0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6,
	0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
};

/* Non-ASCII code points str.isspace() accepts. */
static bool py_unicode_space(uint32_t c)
{
	return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
	       c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int py_decimal(uint32_t c)
{
	for (size_t i = 0; i < sizeof(py_decimal_zeros) / sizeof(py_decimal_zeros[0]); i++)
		if (c >= py_decimal_zeros[i] && c <= py_decimal_zeros[i] + 9)
			return (int)(c - py_decimal_zeros[i]);
	return -1;
}

/* The next code point of valid UTF-8 at *p. */
static uint32_t utf8_next(const unsigned char **p)
{
	const unsigned char *s = *p;
	uint32_t c;

	if (s[0] < 0x80) {
		*p += 1;
		return s[0];
	}
	if (s[0] < 0xe0) {
		c = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
		*p += 2;
	} else if (s[0] < 0xf0) {
		c = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
		*p += 3;
	} else {
		c = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
		    (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
		*p += 4;
	}
	return c;
}

/*
 * What int() and float() parse (CPython's
 * _PyUnicode_TransformDecimalAndSpaceToASCII): ASCII as it is, a non-ASCII
 * space as ' ', a decimal digit as its ASCII digit; false for any other
 * character (then the text is neither a number). Outer ASCII whitespace
 * removed.
 */
static bool py_number_text(const char *v, struct buf *out)
{
	const unsigned char *p = (const unsigned char *)v;
	size_t a, z;

	while (*p) {
		uint32_t c = utf8_next(&p);
		char ch;
		int d;

		if (c < 0x7f)
			ch = (char)c;
		else if (py_unicode_space(c))
			ch = ' ';
		else if ((d = py_decimal(c)) >= 0)
			ch = (char)('0' + d);
		else
			return false;
		if (buf_append(out, &ch, 1) < 0)
			return false;
	}
	if (!out->data)
		return false;
	for (a = 0; a < out->len && strchr(" \t\n\v\f\r", out->data[a]) && out->data[a]; a++)
		;
	for (z = out->len; z > a && strchr(" \t\n\v\f\r", out->data[z - 1]) && out->data[z - 1]; z--)
		;
	memmove(out->data, out->data + a, z - a);
	out->len = z - a;
	out->data[out->len] = '\0';
	return true;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/*
 * digitpart ::= digit (["_"] digit)*  at s[*i]: the digits (no '_') appended
 * to out; false when there is none or an underscore is misplaced.
 */
static bool py_digitpart(const char *s, size_t n, size_t *i, struct buf *out, size_t *count)
{
	if (*i >= n || !is_digit(s[*i]))
		return false;
	while (*i < n) {
		if (is_digit(s[*i])) {
			buf_append(out, &s[*i], 1);
			(*count)++;
			(*i)++;
		} else if (s[*i] == '_' && *i + 1 < n && is_digit(s[*i + 1])) {
			(*i)++;
		} else {
			break;
		}
	}
	return true;
}

/* int(s): the normalised digits ("-" and no leading zeros) into out. */
static bool py_int(const char *s, size_t n, struct buf *out)
{
	struct buf d = BUF_INIT(n + 1);
	size_t i = 0, count = 0, lead = 0;
	bool neg = false, ok;

	if (i < n && (s[i] == '+' || s[i] == '-'))
		neg = s[i++] == '-';
	ok = py_digitpart(s, n, &i, &d, &count) && i == n && count <= PY_INT_MAX_STR_DIGITS && d.data;
	if (ok) {
		while (lead + 1 < d.len && d.data[lead] == '0')
			lead++;
		if (neg && strcmp(d.data + lead, "0"))
			buf_append(out, "-", 1);
		buf_append(out, d.data + lead, d.len - lead);
		ok = out->data != NULL;
	}
	buf_free(&d);
	return ok;
}

/* float(s): the text strtod reads the same (underscores gone) into out. */
static bool py_float(const char *s, size_t n, struct buf *out)
{
	size_t i = 0, count = 0;
	bool ok = true;

	if (i < n && (s[i] == '+' || s[i] == '-'))
		buf_append(out, &s[i++], 1);
	if ((n - i == 3 && (!strncasecmp(s + i, "inf", 3) || !strncasecmp(s + i, "nan", 3))) ||
	    (n - i == 8 && !strncasecmp(s + i, "infinity", 8)))
		return buf_append(out, s + i, n - i) == 0;
	/* number ::= [digitpart] "." digitpart | digitpart ["."] */
	if (i < n && is_digit(s[i]))
		py_digitpart(s, n, &i, out, &count);
	if (i < n && s[i] == '.') {
		buf_append(out, ".", 1);
		i++;
		if (i < n && is_digit(s[i]))
			py_digitpart(s, n, &i, out, &count);
	}
	if (!count)
		return false;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		size_t expcount = 0;
		buf_append(out, "e", 1);
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			buf_append(out, &s[i++], 1);
		ok = py_digitpart(s, n, &i, out, &expcount);
	}
	return ok && i == n && out->data;
}

json_t *params_resolve_type(const char *v)
{
	struct buf t = BUF_INIT(strlen(v) + 1), num = BUF_INIT(strlen(v) + 8);
	json_t *r = NULL;

	if (!text_utf8_valid(v, strlen(v)))
		return NULL;
	if (!strcmp(v, "True"))
		return json_true();
	if (!strcmp(v, "False"))
		return json_false();
	if (!strcmp(v, "None"))
		return json_null();
	if (py_number_text(v, &t)) {
		if (py_int(t.data, t.len, &num)) {
			r = jsonx_integer_text(num.data, num.len);
		} else {
			buf_reset(&num);
			if (py_float(t.data, t.len, &num)) {
				double d = strtod(num.data, NULL);
				r = jsonx_nonfinite(d);
				if (!r)
					r = json_real(d);
			}
		}
	}
	buf_free(&t);
	buf_free(&num);
	return r ? r : json_string(v);
}

/* ---- YAML, as papermill's -y and -b read it --------------------------------------- */

#define YAML_MAX_WEIGHT 1000000  /* values, aliases expanded: no billion laughs */
#define YAML_MAX_DEPTH 64
#define YAML_MAX_ANCHORS 4096

/* PyYAML's implicit resolvers (resolver.py), without timestamps. */
static const char YAML_BOOL[] = "^(yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$";
static const char YAML_INT[] = "^([-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|"
			       "[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+)$";
static const char YAML_FLOAT[] = "^([-+]?([0-9][0-9_]*)\\.[0-9_]*([eE][-+][0-9]+)?|\\.[0-9][0-9_]*([eE][-+][0-9]+)?|"
				 "[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN))$";

struct yl {
	yaml_parser_t parser;
	regex_t re_bool, re_int, re_float;
	struct { char *name; json_t *v; size_t weight; } anchors[YAML_MAX_ANCHORS];
	size_t n_anchors, weight;
	char *err;
	size_t errlen;
};

static bool yl_match(const regex_t *re, const char *s)
{
	return regexec(re, s, 0, NULL, 0) == 0;
}

/* digits (no '_') in base 2, 8, 10 or 16 as decimal text, any size: out gets them. */
static bool yl_to_decimal(const char *d, int base, struct buf *out)
{
	uint32_t limb[512]; /* base 1e9, little end first: 4608 decimal digits */
	size_t n = 1;

	limb[0] = 0;
	for (; *d; d++) {
		int v = *d >= '0' && *d <= '9' ? *d - '0' : (*d | 0x20) - 'a' + 10;
		uint64_t carry = (uint64_t)v;
		if (v < 0 || v >= base)
			return false;
		for (size_t i = 0; i < n; i++) {
			uint64_t x = (uint64_t)limb[i] * (uint64_t)base + carry;
			limb[i] = (uint32_t)(x % 1000000000u);
			carry = x / 1000000000u;
		}
		if (carry) {
			if (n == sizeof(limb) / sizeof(limb[0]))
				return false;
			limb[n++] = (uint32_t)carry;
		}
	}
	buf_printf(out, "%u", limb[n - 1]);
	for (size_t i = n - 1; i-- > 0;)
		buf_printf(out, "%09u", limb[i]);
	return out->data != NULL;
}

/* PyYAML's construct_yaml_int (underscores gone, sign, 0b, 0x, 0 octal, base 60). */
static json_t *yl_int(const char *text)
{
	struct buf clean = BUF_INIT(strlen(text) + 1), dec = BUF_INIT(8192);
	const char *v;
	bool neg = false, ok = true;
	json_t *r = NULL;

	for (const char *p = text; *p; p++)
		if (*p != '_')
			buf_append(&clean, p, 1);
	v = clean.data ? clean.data : "";
	if (*v == '-' || *v == '+')
		neg = *v++ == '-';
	if (!*v) {
		ok = false;
	} else if (!strcmp(v, "0")) {
		buf_puts(&dec, "0");
	} else if (!strncmp(v, "0b", 2)) {
		ok = yl_to_decimal(v + 2, 2, &dec) && v[2];
	} else if (!strncmp(v, "0x", 2)) {
		ok = yl_to_decimal(v + 2, 16, &dec) && v[2];
	} else if (v[0] == '0') {
		ok = yl_to_decimal(v, 8, &dec);
	} else if (strchr(v, ':')) {
		/* base 60: each part at most two digits but the first */
		long long acc = 0;
		for (const char *p = v; ok && *p;) {
			char *end;
			long long part = strtoll(p, &end, 10);
			ok = end > p && acc <= (LLONG_MAX - part) / 60;
			acc = acc * 60 + part;
			p = *end == ':' ? end + 1 : end;
		}
		buf_printf(&dec, "%lld", acc);
	} else {
		/* int(): at most 4300 digits */
		ok = strlen(v) <= 4300 && yl_to_decimal(v, 10, &dec);
	}
	if (ok && dec.data) {
		struct buf s = BUF_INIT(dec.len + 2);
		if (neg && strcmp(dec.data, "0"))
			buf_puts(&s, "-");
		buf_puts(&s, dec.data);
		r = s.data ? jsonx_integer_text(s.data, s.len) : NULL;
		buf_free(&s);
	}
	buf_free(&clean);
	buf_free(&dec);
	return r;
}

/* PyYAML's construct_yaml_float. */
static json_t *yl_float(const char *text)
{
	struct buf clean = BUF_INIT(strlen(text) + 1);
	const char *v;
	double sign = 1.0, d = 0.0;
	json_t *r = NULL;

	for (const char *p = text; *p; p++)
		if (*p != '_') {
			char c = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
			buf_append(&clean, &c, 1);
		}
	v = clean.data ? clean.data : "";
	if (*v == '-' || *v == '+')
		sign = *v++ == '-' ? -1.0 : 1.0;
	if (!strcmp(v, ".inf")) {
		d = sign * INFINITY;
	} else if (!strcmp(v, ".nan")) {
		d = NAN;
	} else if (strchr(v, ':')) {
		const char *p = v;
		while (*p) {
			char *end;
			d = d * 60 + strtod(p, &end);
			p = *end == ':' ? end + 1 : end;
			if (end == p && *p)
				break;
		}
		d *= sign;
	} else if (*v) {
		char *end;
		d = sign * strtod(v, &end);
		if (*end)
			v = "";
	}
	if (*v)
		r = isfinite(d) ? json_real(d) : jsonx_nonfinite(d);
	buf_free(&clean);
	return r;
}

/* A scalar as PyYAML's SafeLoader makes it: quoted or !!str stays text. */
static json_t *yl_scalar(struct yl *y, const yaml_event_t *ev)
{
	const char *s = (const char *)ev->data.scalar.value, *tag = (const char *)ev->data.scalar.tag;
	bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;

	if (strlen(s) != ev->data.scalar.length || !text_utf8_valid(s, ev->data.scalar.length))
		return NULL;
	if (tag && !strcmp(tag, YAML_STR_TAG))
		return json_string(s);
	if (tag && !strcmp(tag, YAML_INT_TAG))
		return yl_int(s);
	if (tag && !strcmp(tag, YAML_FLOAT_TAG))
		return yl_float(s);
	if (tag && !strcmp(tag, YAML_NULL_TAG))
		return json_null();
	if (tag && !strcmp(tag, YAML_BOOL_TAG)) {
		if (!strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcasecmp(s, "on"))
			return json_true();
		if (!strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcasecmp(s, "off"))
			return json_false();
		return NULL;
	}
	if (tag && strcmp(tag, "!"))
		return NULL; /* another tag: not what a safe loader builds */
	if (!plain || (tag && !strcmp(tag, "!")))
		return json_string(s);
	if (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"))
		return json_null();
	if (yl_match(&y->re_bool, s))
		return strchr("yYtToO", s[0]) && strcasecmp(s, "off") ? json_true() : json_false();
	if (yl_match(&y->re_float, s))
		return yl_float(s);
	if (yl_match(&y->re_int, s))
		return yl_int(s);
	return json_string(s);
}

static void yl_fail(struct yl *y, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void yl_fail(struct yl *y, const char *fmt, ...)
{
	va_list ap;

	if (y->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(y->err, y->errlen, fmt, ap);
	va_end(ap);
}

/* A mapping key as Python's str() of the key PyYAML made (papermill writes str keys). */
static char *yl_key(json_t *k)
{
	const char *text;
	char t[48];

	if (jsonx_kind_of(k, &text) == JSONX_BIGINT)
		return strdup(text);
	if (jsonx_kind_of(k, &text) == JSONX_NONFINITE)
		return strdup(text);
	if (json_is_string(k))
		return strndup(json_string_value(k), json_string_length(k));
	if (json_is_integer(k)) {
		snprintf(t, sizeof(t), "%" JSON_INTEGER_FORMAT, json_integer_value(k));
		return strdup(t);
	}
	if (json_is_real(k)) {
		jsonx_double_text(t, json_real_value(k));
		if (!strpbrk(t, ".e"))
			strcat(t, ".0");
		return strdup(t);
	}
	if (json_is_boolean(k))
		return strdup(json_is_true(k) ? "True" : "False");
	if (json_is_null(k))
		return strdup("None");
	return NULL;
}

static json_t *yl_node(struct yl *y, yaml_event_t *ev, int depth);

static bool yl_next(struct yl *y, yaml_event_t *ev)
{
	if (!yaml_parser_parse(&y->parser, ev)) {
		yl_fail(y, "%s (line %zu)", y->parser.problem ? y->parser.problem : "not YAML",
			y->parser.problem_mark.line + 1);
		return false;
	}
	return true;
}

static void yl_anchor(struct yl *y, const yaml_char_t *anchor, json_t *v, size_t weight)
{
	if (!anchor || !v)
		return;
	if (y->n_anchors == YAML_MAX_ANCHORS) {
		yl_fail(y, "more than %d anchors", YAML_MAX_ANCHORS);
		return;
	}
	y->anchors[y->n_anchors].name = strdup((const char *)anchor);
	y->anchors[y->n_anchors].v = json_incref(v);
	y->anchors[y->n_anchors].weight = weight;
	y->n_anchors++;
}

static json_t *yl_collection(struct yl *y, yaml_event_t *start, int depth)
{
	bool map = start->type == YAML_MAPPING_START_EVENT;
	const char *tag = (const char *)(map ? start->data.mapping_start.tag : start->data.sequence_start.tag);
	yaml_char_t *anchor = map ? start->data.mapping_start.anchor : start->data.sequence_start.anchor;
	json_t *c = map ? json_object() : json_array();
	size_t w0 = y->weight;

	if (tag && strcmp(tag, map ? YAML_MAP_TAG : YAML_SEQ_TAG)) {
		yl_fail(y, "tag %.60s is not one a safe loader builds", tag);
		json_decref(c);
		return NULL;
	}
	if (depth > YAML_MAX_DEPTH) {
		yl_fail(y, "nested deeper than %d levels", YAML_MAX_DEPTH);
		json_decref(c);
		return NULL;
	}
	for (;;) {
		yaml_event_t ev;
		json_t *k = NULL, *v;
		char *key = NULL;

		if (!yl_next(y, &ev))
			goto fail;
		if (ev.type == (map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT)) {
			yaml_event_delete(&ev);
			break;
		}
		if (map) {
			k = yl_node(y, &ev, depth + 1);
			yaml_event_delete(&ev);
			if (!k)
				goto fail;
			key = yl_key(k);
			json_decref(k);
			if (!key) {
				yl_fail(y, "a mapping key that is not a scalar");
				goto fail;
			}
			if (!yl_next(y, &ev)) {
				free(key);
				goto fail;
			}
		}
		v = yl_node(y, &ev, depth + 1);
		yaml_event_delete(&ev);
		if (!v || (map ? json_object_set_new(c, key, v) : json_array_append_new(c, v)) < 0) {
			free(key);
			goto fail;
		}
		free(key);
	}
	yl_anchor(y, anchor, c, y->weight - w0);
	return c;
fail:
	json_decref(c);
	return NULL;
}

static json_t *yl_node(struct yl *y, yaml_event_t *ev, int depth)
{
	json_t *v = NULL;

	if (++y->weight > YAML_MAX_WEIGHT) {
		yl_fail(y, "more than %d values (aliases expanded)", YAML_MAX_WEIGHT);
		return NULL;
	}
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		v = yl_scalar(y, ev);
		if (!v)
			yl_fail(y, "the value '%.60s' cannot be read as its tag or type says",
				(const char *)ev->data.scalar.value);
		yl_anchor(y, ev->data.scalar.anchor, v, 1);
		return v;
	case YAML_ALIAS_EVENT:
		for (size_t i = y->n_anchors; i-- > 0;)
			if (!strcmp(y->anchors[i].name, (const char *)ev->data.alias.anchor)) {
				y->weight += y->anchors[i].weight;
				if (y->weight > YAML_MAX_WEIGHT) {
					yl_fail(y, "more than %d values (aliases expanded)", YAML_MAX_WEIGHT);
					return NULL;
				}
				return json_incref(y->anchors[i].v);
			}
		yl_fail(y, "unknown alias *%.60s", (const char *)ev->data.alias.anchor);
		return NULL;
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT:
		return yl_collection(y, ev, depth);
	default:
		yl_fail(y, "unexpected YAML event");
		return NULL;
	}
}

json_t *params_yaml_load(const char *text, size_t len, char *err, size_t errlen)
{
	struct yl *y = calloc(1, sizeof(*y));
	yaml_event_t ev;
	json_t *doc = NULL;
	bool started = false;

	err[0] = '\0';
	if (!y) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	y->err = err;
	y->errlen = errlen;
	if (!text_utf8_valid(text, len)) {
		snprintf(err, errlen, "not UTF-8 text");
		free(y);
		return NULL;
	}
	regcomp(&y->re_bool, YAML_BOOL, REG_EXTENDED | REG_NOSUB);
	regcomp(&y->re_int, YAML_INT, REG_EXTENDED | REG_NOSUB);
	regcomp(&y->re_float, YAML_FLOAT, REG_EXTENDED | REG_NOSUB);
	yaml_parser_initialize(&y->parser);
	yaml_parser_set_input_string(&y->parser, (const unsigned char *)text, len);
	/* stream start, document start, the node, document end, stream end */
	while (!err[0] && yl_next(y, &ev)) {
		yaml_event_type_t t = ev.type;
		if (t == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		if (t == YAML_DOCUMENT_START_EVENT && started)
			yl_fail(y, "more than one YAML document");
		started |= t == YAML_DOCUMENT_START_EVENT;
		if (t == YAML_SCALAR_EVENT || t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT ||
		    t == YAML_ALIAS_EVENT) {
			json_decref(doc);
			doc = yl_node(y, &ev, 0);
		}
		yaml_event_delete(&ev);
	}
	if (!err[0] && !json_is_object(doc))
		yl_fail(y, "the document is not a mapping of parameter names to values");
	if (err[0]) {
		json_decref(doc);
		doc = NULL;
	}
	yaml_parser_delete(&y->parser);
	regfree(&y->re_bool);
	regfree(&y->re_int);
	regfree(&y->re_float);
	for (size_t i = 0; i < y->n_anchors; i++) {
		free(y->anchors[i].name);
		json_decref(y->anchors[i].v);
	}
	free(y);
	return doc;
}

bool params_name_ok(const char *s)
{
	static const char *const keywords[] = {
		"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
		"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
		"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
		"return", "try", "while", "with", "yield",
	};

	if (!*s || is_digit(*s) || strlen(s) > 200)
		return false;
	for (const char *p = s; *p; p++)
		if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || is_digit(*p)))
			return false;
	for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		if (!strcmp(s, keywords[i]))
			return false;
	return true;
}

int params_init(struct params *p)
{
	p->base64 = json_object();
	p->yaml = json_object();
	p->typed = json_object();
	p->raw = json_object();
	return p->base64 && p->yaml && p->typed && p->raw ? 0 : -1;
}

void params_free(struct params *p)
{
	json_decref(p->base64);
	json_decref(p->yaml);
	json_decref(p->typed);
	json_decref(p->raw);
	p->base64 = p->yaml = p->typed = p->raw = NULL;
}

json_t *params_final(const struct params *p)
{
	json_t *all = json_object();

	if (!all || json_object_update(all, p->base64) < 0 || json_object_update(all, p->yaml) < 0 ||
	    json_object_update(all, p->typed) < 0 ||
	    json_object_update(all, p->raw) < 0) {
		json_decref(all);
		return NULL;
	}
	return all;
}
