/* SPDX-License-Identifier: MIT */
/*
 * Notebook parameters by papermill's rules (papermill/cli.py): "-p NAME
 * VALUE" is typed by trying Python's int() then float() on VALUE, "-r" keeps
 * the text, and the layers merge -y, -p, -r in that order. int() and float()
 * are reproduced here as CPython 3.11 reads a str: Unicode decimal digits
 * count as digits, Unicode whitespace may surround the number, single
 * underscores may separate digits, and int() refuses more than 4300 digits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
	p->yaml = json_object();
	p->typed = json_object();
	p->raw = json_object();
	return p->yaml && p->typed && p->raw ? 0 : -1;
}

void params_free(struct params *p)
{
	json_decref(p->yaml);
	json_decref(p->typed);
	json_decref(p->raw);
	p->yaml = p->typed = p->raw = NULL;
}

json_t *params_final(const struct params *p)
{
	json_t *all = json_object();

	if (!all || json_object_update(all, p->yaml) < 0 || json_object_update(all, p->typed) < 0 ||
	    json_object_update(all, p->raw) < 0) {
		json_decref(all);
		return NULL;
	}
	return all;
}
