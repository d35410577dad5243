/* SPDX-License-Identifier: MIT */
/*
 * The languages nbrun runs, in one table: for each its kernel in the
 * runtime image, the file extensions that name it, how "%%" cell markers and
 * comments look in its source, and how a parameter is written for batch
 * (papermill's translators are the reference: same literals, same lines).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jsonx.h"
#include "nbrun-private.h"
#include "text.h"

/* ---- names ------------------------------------------------------------------ */

static bool lang_in(const char *s, const char *const *words)
{
	for (; *words; words++)
		if (!strcmp(s, *words))
			return true;
	return false;
}

static bool lang_name_chars(const char *s, const char *first, const char *rest)
{
	if (!*s || strlen(s) > 200 || !strchr(first, *s))
		return false;
	for (s++; *s; s++)
		if (!strchr(rest, *s))
			return false;
	return true;
}

#define LETTERS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define DIGITS "0123456789"

static const char *py_name(const char *s)
{
	static const char *const keywords[] = {
		"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
		"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
		"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
		"return", "try", "while", "with", "yield", NULL,
	};
	return lang_name_chars(s, LETTERS "_", LETTERS DIGITS "_") && !lang_in(s, keywords) ? s : NULL;
}

/* papermill drops leading underscores, which R names cannot have. */
static const char *r_name(const char *s)
{
	static const char *const reserved[] = {
		"if", "else", "repeat", "while", "function", "for", "in", "next", "break", "TRUE",
		"FALSE", "NULL", "Inf", "NaN", "NA", "NA_integer_", "NA_real_", "NA_character_",
		"NA_complex_", NULL,
	};
	while (*s == '_')
		s++;
	if (!lang_name_chars(s, LETTERS ".", LETTERS DIGITS "._") || lang_in(s, reserved))
		return NULL;
	if (s[0] == '.' && s[1] >= '0' && s[1] <= '9')
		return NULL;
	return s;
}

static const char *js_name(const char *s)
{
	static const char *const reserved[] = {
		"await", "break", "case", "catch", "class", "const", "continue", "debugger",
		"default", "delete", "do", "else", "enum", "export", "extends", "false", "finally",
		"for", "function", "if", "implements", "import", "in", "instanceof", "interface",
		"let", "new", "null", "package", "private", "protected", "public", "return",
		"static", "super", "switch", "this", "throw", "true", "try", "typeof", "var",
		"void", "while", "with", "yield", NULL,
	};
	return lang_name_chars(s, LETTERS "_$", LETTERS DIGITS "_$") && !lang_in(s, reserved) ? s
											      : NULL;
}

static const char *sh_name(const char *s)
{
	return lang_name_chars(s, LETTERS "_", LETTERS DIGITS "_") ? s : NULL;
}

/* ---- literals ---------------------------------------------------------------- */

static int lang_real(struct buf *b, double d)
{
	char tmp[64];

	snprintf(tmp, sizeof(tmp), "%.17g", d);
	/* Stays a float in Python ("1" would be an int); harmless elsewhere. */
	if (!strpbrk(tmp, ".eEn"))
		strcat(tmp, ".0");
	return buf_puts(b, tmp);
}

/*
 * Integers in R and JavaScript are doubles (R's literals beyond 2^31 are
 * numeric): an integer is written as its digits when a double holds it
 * exactly (every integer up to 2^53, 2^64, 10^22 ...); any other is refused
 * (-ERANGE) rather than rounded in the kernel, where papermill's R
 * translator writes the digits and R reads a different number.
 */
static int lang_exact_int(struct buf *b, const char *text)
{
	char back[400];
	double d;

	d = strtod(text, NULL);
	if (!isfinite(d))
		return -ERANGE;
	snprintf(back, sizeof(back), "%.0f", d);
	return strcmp(back, text) ? -ERANGE : buf_puts(b, text);
}

/*
 * A number JSON cannot hold (an integer beyond 64 bits, or inf, -inf, nan:
 * jsonx markers) as the language writes it: R's Inf, -Inf and NaN,
 * JavaScript's Infinity, -Infinity and NaN; an integer as lang_exact_int.
 * 1: v is no such number.
 */
static int lang_marker(struct buf *b, const json_t *v, const char *inf, const char *nan)
{
	const char *text;

	switch (jsonx_kind_of(v, &text)) {
	case JSONX_BIGINT:
		return lang_exact_int(b, text);
	case JSONX_NONFINITE:
		if (!strcmp(text, "nan"))
			return buf_puts(b, nan);
		return buf_printf(b, "%s%s", text[0] == '-' ? "-" : "", inf);
	case JSONX_PLAIN:
		break;
	}
	return 1;
}

static int lang_integer(struct buf *b, json_int_t i)
{
	char text[32];

	snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, i);
	return lang_exact_int(b, text);
}

/* An R string: "..." with backslash escapes; R strings cannot hold NUL. */
static int r_string(struct buf *b, const char *s, size_t len)
{
	int rc = buf_puts(b, "\"");

	for (size_t i = 0; rc == 0 && i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case 0: return -EINVAL;
		case '"': rc = buf_puts(b, "\\\""); break;
		case '\\': rc = buf_puts(b, "\\\\"); break;
		case '\n': rc = buf_puts(b, "\\n"); break;
		case '\r': rc = buf_puts(b, "\\r"); break;
		case '\t': rc = buf_puts(b, "\\t"); break;
		default:
			rc = c < 0x20 || c == 0x7f ? buf_printf(b, "\\x%02x", c) : buf_append(b, s + i, 1);
		}
	}
	return rc ? rc : buf_puts(b, "\"");
}

/* R (papermill's RTranslator): NULL, TRUE/FALSE, list() for arrays and
 * objects; Inf, -Inf and NaN, which papermill writes as Python's inf and nan
 * (names R does not know). */
static int r_literal(struct buf *b, const json_t *v, int depth)
{
	static const struct jsonx_syntax r_syntax = { "list(", ")", "list(", ")", ", ", " = " };
	int rc;

	if (depth > 32)
		return -EINVAL;
	rc = lang_marker(b, v, "Inf", "NaN");
	if (rc <= 0)
		return rc;
	rc = 0;
	switch (json_typeof(v)) {
	case JSON_NULL: return buf_puts(b, "NULL");
	case JSON_TRUE: return buf_puts(b, "TRUE");
	case JSON_FALSE: return buf_puts(b, "FALSE");
	case JSON_INTEGER: return lang_integer(b, json_integer_value(v));
	case JSON_REAL: return lang_real(b, json_real_value(v));
	case JSON_STRING: return r_string(b, json_string_value(v), json_string_length(v));
	case JSON_ARRAY:
	case JSON_OBJECT:
		return jsonx_write_container(b, v, depth, &r_syntax, r_literal);
	}
	return -EINVAL;
}

/* JavaScript and TypeScript: the JSON text of a string, true, false or null
 * is the literal ("/" escaped as "\\/" is still the same string); arrays and
 * objects as JSON; Infinity, -Infinity and NaN. */
static int js_literal(struct buf *b, const json_t *v, int depth)
{
	static const struct jsonx_syntax js_syntax = { "[", "]", "{", "}", ",", ":" };
	char *text;
	int rc;

	if (depth > 32)
		return -EINVAL;
	rc = lang_marker(b, v, "Infinity", "NaN");
	if (rc <= 0)
		return rc;
	rc = 0;
	switch (json_typeof(v)) {
	case JSON_REAL: return lang_real(b, json_real_value(v));
	case JSON_INTEGER: return lang_integer(b, json_integer_value(v));
	case JSON_ARRAY:
	case JSON_OBJECT:
		return jsonx_write_container(b, v, depth, &js_syntax, js_literal);
	default:
		break;
	}
	text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	if (!text)
		return -ENOMEM;
	/* JSON keeps U+2028 and U+2029 raw; a JavaScript before ES2019 and
	 * TypeScript's scanner end a string literal at them (line terminators
	 * of their grammar): written escaped. */
	for (const char *p = text; rc == 0 && *p; p++) {
		if ((unsigned char)p[0] == 0xe2 && (unsigned char)p[1] == 0x80 &&
		    ((unsigned char)p[2] == 0xa8 || (unsigned char)p[2] == 0xa9)) {
			rc = buf_puts(b, (unsigned char)p[2] == 0xa8 ? "\\u2028" : "\\u2029");
			p += 2;
		} else {
			rc = buf_append(b, p, 1);
		}
	}
	free(text);
	return rc;
}

/* A bash word: single-quoted ('\'' for a quote); no NUL in a shell word. */
static int sh_word(struct buf *b, const json_t *v)
{
	const char *s;
	size_t len;
	int rc;

	/* bash has words only: a big integer's digits, inf, -inf, nan as
	 * Python's str() writes them (as any float is written) */
	if (jsonx_kind_of(v, &s) != JSONX_PLAIN)
		return buf_puts(b, s);
	switch (json_typeof(v)) {
	case JSON_NULL: return buf_puts(b, "''");
	case JSON_TRUE: return buf_puts(b, "true");
	case JSON_FALSE: return buf_puts(b, "false");
	case JSON_INTEGER: return buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	case JSON_REAL: return lang_real(b, json_real_value(v));
	case JSON_STRING:
		s = json_string_value(v);
		len = json_string_length(v);
		if (memchr(s, 0, len))
			return -EINVAL;
		rc = buf_puts(b, "'");
		for (size_t i = 0; rc == 0 && i < len; i++)
			rc = s[i] == '\'' ? buf_puts(b, "'\\''") : buf_append(b, s + i, 1);
		return rc ? rc : buf_puts(b, "'");
	default:
		return -EINVAL;
	}
}

/* ---- assignments ------------------------------------------------------------- */

static int r_assign(struct buf *b, const char *name, const json_t *v)
{
	int rc = buf_printf(b, "%s = ", name);
	if (rc == 0)
		rc = r_literal(b, v, 0);
	return rc ? rc : buf_puts(b, "\n");
}

static int js_assign(struct buf *b, const char *name, const json_t *v)
{
	int rc = buf_printf(b, "const %s = ", name);
	if (rc == 0)
		rc = js_literal(b, v, 0);
	return rc ? rc : buf_puts(b, ";\n");
}

/* Scalars as NAME=WORD, an array as NAME=(WORD...), an object as an
 * associative array; nothing nested (bash has no such values). */
static int sh_assign(struct buf *b, const char *name, const json_t *v)
{
	const char *key;
	json_t *item;
	size_t i;
	int rc;

	if (json_is_array(v)) {
		rc = buf_printf(b, "%s=(", name);
		json_array_foreach(v, i, item) {
			if (rc == 0 && i)
				rc = buf_puts(b, " ");
			if (rc == 0)
				rc = sh_word(b, item);
		}
		return rc ? rc : buf_puts(b, ")\n");
	}
	if (json_is_object(v)) {
		rc = buf_printf(b, "declare -A %s=(", name);
		i = 0;
		json_object_foreach((json_t *)v, key, item) {
			json_t *k = json_string(key);
			if (rc == 0 && i++)
				rc = buf_puts(b, " ");
			if (rc == 0)
				rc = buf_puts(b, "[");
			if (rc == 0)
				rc = k ? sh_word(b, k) : -ENOMEM;
			json_decref(k);
			if (rc == 0)
				rc = buf_puts(b, "]=");
			if (rc == 0)
				rc = sh_word(b, item);
		}
		return rc ? rc : buf_puts(b, ")\n");
	}
	rc = buf_printf(b, "%s=", name);
	if (rc == 0)
		rc = sh_word(b, v);
	return rc ? rc : buf_puts(b, "\n");
}

/* ---- the table ----------------------------------------------------------------- */

static const struct nbrun__language languages[] = {
	{
		.name = "python", .aliases = { "py", "python3", "ipython" },
		.kernel = "python3", .display_name = "Python 3", .kernel_language = "python",
		.extensions = { ".py" }, .comment = "#", .marker = "# %%",
		/* notebook.c writes Python literals */
		.param_name = py_name, .assign = NULL,
	},
	{
		.name = "r", .aliases = { "ir" },
		.kernel = "ir", .display_name = "R", .kernel_language = "R",
		.extensions = { ".R", ".r" }, .comment = "#", .marker = "# %%",
		.param_name = r_name, .assign = r_assign,
	},
	{
		.name = "javascript", .aliases = { "js", "node", "jslab" },
		.kernel = "jslab", .display_name = "JavaScript", .kernel_language = "javascript",
		.extensions = { ".js", ".mjs" }, .comment = "//", .marker = "// %%",
		.param_name = js_name, .assign = js_assign,
	},
	{
		.name = "typescript", .aliases = { "ts", "tslab" },
		.kernel = "tslab", .display_name = "TypeScript", .kernel_language = "typescript",
		.extensions = { ".ts" }, .comment = "//", .marker = "// %%",
		.param_name = js_name, .assign = js_assign,
	},
	{
		.name = "bash", .aliases = { "sh", "shell" },
		.kernel = "bash", .display_name = "Bash", .kernel_language = "bash",
		.extensions = { ".sh", ".bash" }, .comment = "#", .marker = "# %%",
		.param_name = sh_name, .assign = sh_assign,
	},
};
#define N_LANGUAGES (sizeof(languages) / sizeof(languages[0]))

const struct nbrun__language *nbrun__language_default(void)
{
	return &languages[0];
}

const struct nbrun__language *nbrun__language_at(size_t i)
{
	return i < N_LANGUAGES ? &languages[i] : NULL;
}

const struct nbrun__language *nbrun__language_find(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < N_LANGUAGES; i++) {
		if (!strcasecmp(name, languages[i].name))
			return &languages[i];
		for (size_t k = 0; k < NBRUN__LANGUAGE_MAX_ALIASES && languages[i].aliases[k]; k++)
			if (!strcasecmp(name, languages[i].aliases[k]))
				return &languages[i];
	}
	return NULL;
}

const struct nbrun__language *nbrun__language_for_kernel(const char *kernel, const char *language)
{
	for (size_t i = 0; kernel && i < N_LANGUAGES; i++)
		if (!strcmp(kernel, languages[i].kernel))
			return &languages[i];
	/* Another kernel of a known language (ijavascript's "javascript", a
	 * conda environment's "conda-env-x-py") runs on this image's kernel. */
	return language ? nbrun__language_find(language) : NULL;
}

const char *nbrun__language_names(void)
{
	return "python, r, javascript, typescript, bash";
}

int nbrun__language_of_notebook(const struct nbrun__language **out, struct nbrun_ctx *ctx,
				const json_t *nb)
{
	const json_t *meta = json_object_get(nb, "metadata");
	const json_t *ks = json_object_get(meta, "kernelspec");
	const char *kernel = json_string_value(json_object_get(ks, "name"));
	const char *language = json_string_value(json_object_get(ks, "language"));

	if (!language)
		language = json_string_value(
			json_object_get(json_object_get(meta, "language_info"), "name"));
	*out = NULL;
	if (!kernel && !language) {
		*out = nbrun__language_default();
		return 0;
	}
	*out = nbrun__language_for_kernel(kernel, language);
	if (!*out)
		return nbrun__err(ctx, NBRUN_EINVAL,
				  "the notebook's kernel '%.64s'%s%.64s%s is not one nbrun runs; languages: %s",
				  kernel ? kernel : "", language ? " (" : "", language ? language : "",
				  language ? ")" : "", nbrun__language_names());
	return 0;
}

int nbrun__language_set_kernelspec(json_t *nb, const struct nbrun__language *lang)
{
	json_t *meta = json_object_get(nb, "metadata");
	json_t *ks, *info;

	if (!json_is_object(meta)) {
		meta = json_object();
		if (!meta || json_object_set_new(nb, "metadata", meta) < 0)
			return -ENOMEM;
	}
	ks = json_pack("{s:s, s:s, s:s}", "name", lang->kernel, "display_name", lang->display_name,
		       "language", lang->kernel_language);
	if (!ks || json_object_set_new(meta, "kernelspec", ks) < 0)
		return -ENOMEM;
	info = json_object_get(meta, "language_info");
	if (!json_is_object(info) ||
	    nbrun__language_for_kernel(NULL, json_string_value(json_object_get(info, "name"))) != lang) {
		info = json_pack("{s:s}", "name", lang->kernel_language);
		if (!info || json_object_set_new(meta, "language_info", info) < 0)
			return -ENOMEM;
	}
	return 0;
}

int nbrun__language_params(struct buf *out, struct nbrun_ctx *ctx,
			   const struct nbrun__language *lang, const json_t *params)
{
	const char *name;
	json_t *v;
	int rc;

	rc = buf_printf(out, "%s Parameters\n", lang->comment);
	json_object_foreach((json_t *)params, name, v) {
		const char *written = lang->param_name(name);
		if (!written)
			return nbrun__err(ctx, NBRUN_EINVAL, "parameter name '%.200s' is not a %s name",
					  name, lang->display_name);
		if (rc == 0)
			rc = lang->assign ? lang->assign(out, written, v) : -EINVAL;
		if (rc == -ERANGE)
			return nbrun__err(ctx, NBRUN_EINVAL,
					  "parameter '%.200s' is an integer %s cannot hold exactly "
					  "(its numbers are doubles)", name, lang->display_name);
		if (rc < 0)
			return nbrun__err(ctx, rc == -ENOMEM ? NBRUN_ENOMEM : NBRUN_EINVAL,
					  "parameter '%.200s' cannot be written as %s", name,
					  lang->display_name);
	}
	return rc < 0 ? nbrun__err(ctx, NBRUN_ENOMEM, "out of memory") : 0;
}

/* ---- public --------------------------------------------------------------------- */

NBRUN_EXPORT const char *nbrun_language_for_path(const char *path)
{
	const char *dot = path ? strrchr(path, '.') : NULL;

	if (!dot || strchr(dot, '/'))
		return NULL;
	for (size_t i = 0; i < N_LANGUAGES; i++)
		for (size_t k = 0; k < NBRUN__LANGUAGE_MAX_EXTENSIONS && languages[i].extensions[k]; k++)
			if (!strcmp(dot, languages[i].extensions[k]))
				return languages[i].name;
	return NULL;
}

NBRUN_EXPORT const char *nbrun_language_name(const char *name)
{
	const struct nbrun__language *l = nbrun__language_find(name);
	return l ? l->name : NULL;
}

NBRUN_EXPORT const char *nbrun_language_names(void)
{
	return nbrun__language_names();
}
