/* SPDX-License-Identifier: MIT */
/*
 * Parameters by papermill's rules: the -p typing (what Python's int() and
 * float() read), values JSON numbers cannot hold (jsonx), and their
 * injection as Python. The expected values were taken from CPython 3.11
 * (the image's Python) running papermill's _resolve_type.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit-main.h"

#include "jsonx.h"
#include "nbrun-private.h"
#include "params.h"

/* ---- -p typing -------------------------------------------------------------------- */

struct typing {
	const char *in;
	const char *kind; /* true false null int bigint float inf str */
	const char *want; /* the integer's digits, the float's text, "inf"/"-inf"/"nan" */
};

static const struct typing typings[] = {
	{ "inf", "inf", "inf" },
	{ "-inf", "inf", "-inf" },
	{ "+inf", "inf", "inf" },
	{ "Infinity", "inf", "inf" },
	{ "INFINITY", "inf", "inf" },
	{ "-Infinity", "inf", "-inf" },
	{ "nan", "inf", "nan" },
	{ "NaN", "inf", "nan" },
	{ "-nan", "inf", "nan" },
	{ "infinity ", "inf", "inf" },
	{ " nan", "inf", "nan" },
	{ "1e400", "inf", "inf" },
	{ "-1e400", "inf", "-inf" },
	{ "0x1f", "str", NULL },
	{ "123456789012345678901234567890", "bigint", "123456789012345678901234567890" },
	{ "-123456789012345678901234567890", "bigint", "-123456789012345678901234567890" },
	{ "9223372036854775807", "int", "9223372036854775807" },
	{ "9223372036854775808", "bigint", "9223372036854775808" },
	{ "-9223372036854775808", "int", "-9223372036854775808" },
	{ "-9223372036854775809", "bigint", "-9223372036854775809" },
	{ "9007199254740993", "int", "9007199254740993" },
	{ "true", "str", NULL },
	{ "false", "str", NULL },
	{ "none", "str", NULL },
	{ "True", "true", NULL },
	{ "False", "false", NULL },
	{ "None", "null", NULL },
	{ " None", "str", NULL },
	{ " 12 ", "int", "12" },
	{ "1_000", "int", "1000" },
	{ "1__000", "str", NULL },
	{ "_1", "str", NULL },
	{ "1_", "str", NULL },
	{ "007", "int", "7" },
	{ "-0", "int", "0" },
	{ "+5", "int", "5" },
	{ "1.5", "float", "1.5" },
	{ "1e5", "float", "100000" },
	{ "1E-3", "float", "0.001" },
	{ ".5", "float", "0.5" },
	{ "5.", "float", "5" },
	{ ".", "str", NULL },
	{ "1e", "str", NULL },
	{ "1_0.5", "float", "10.5" },
	{ "1._5", "str", NULL },
	{ "1e1_0", "float", "1e10" },
	{ "1_e5", "str", NULL },
	{ " 1.5\n", "float", "1.5" },
	{ "1e-400", "float", "0" },
	{ "-0.0", "float", "-0" },
	{ "0.1", "float", "0.1" },
	{ "1.0e+5", "float", "100000" },
	{ "\xd9\xa1\xd9\xa2", "int", "12" },                  /* Arabic-Indic 12 */
	{ "\xef\xbc\x91\xef\xbc\x92", "int", "12" },          /* fullwidth 12 */
	{ "\xd9\xa3.\xd9\xa5", "float", "3.5" },
	{ "\xd9\xa1" "e" "\xd9\xa2", "float", "100" },
	{ "\xc2\xa0" "12" "\xe3\x80\x80", "int", "12" },      /* no-break and ideographic spaces */
	{ "\xe2\x80\x87" "7", "int", "7" },                   /* figure space */
	{ "\x1c" "12", "str", NULL },                         /* not whitespace to int() */
	{ "12\x7f", "str", NULL },
	{ "", "str", NULL },
	{ "   ", "str", NULL },
	{ "hello world", "str", NULL },
	{ "3.14abc", "str", NULL },
	{ "1,000", "str", NULL },
	{ "in f", "str", NULL },
	{ "0e0", "float", "0" },
};

static void check_typing(const struct typing *t)
{
	json_t *v = params_resolve_type(t->in);
	const char *text = NULL;
	enum jsonx_kind k = jsonx_kind_of(v, &text);

	if (!v)
		fail_msg("'%s': no value", t->in);
	if (!strcmp(t->kind, "true") || !strcmp(t->kind, "false") || !strcmp(t->kind, "null")) {
		if (!(json_is_true(v) && !strcmp(t->kind, "true")) &&
		    !(json_is_false(v) && !strcmp(t->kind, "false")) &&
		    !(json_is_null(v) && !strcmp(t->kind, "null")))
			fail_msg("'%s': not %s", t->in, t->kind);
	} else if (!strcmp(t->kind, "int")) {
		if (!json_is_integer(v) || json_integer_value(v) != strtoll(t->want, NULL, 10))
			fail_msg("'%s': not the integer %s", t->in, t->want);
	} else if (!strcmp(t->kind, "bigint")) {
		if (k != JSONX_BIGINT || strcmp(text, t->want))
			fail_msg("'%s': not the big integer %s", t->in, t->want);
	} else if (!strcmp(t->kind, "float")) {
		double want = strtod(t->want, NULL);
		if (!json_is_real(v) || json_real_value(v) != want ||
		    signbit(json_real_value(v)) != signbit(want))
			fail_msg("'%s': not the float %s", t->in, t->want);
	} else if (!strcmp(t->kind, "inf")) {
		if (k != JSONX_NONFINITE || strcmp(text, t->want))
			fail_msg("'%s': not %s", t->in, t->want);
	} else {
		if (k != JSONX_PLAIN || !json_is_string(v) || strcmp(json_string_value(v), t->in))
			fail_msg("'%s': not kept as the string", t->in);
	}
	json_decref(v);
}

static void typing_as_papermill(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(typings) / sizeof(typings[0]); i++)
		check_typing(&typings[i]);
}

/* int() refuses more than 4300 digits (leading zeros count): then float() reads it. */
static void typing_int_digit_limit(void **state)
{
	char *s = malloc(5001);
	json_t *v;
	const char *text;

	(void)state;
	memset(s, '1', 4300);
	s[4300] = '\0';
	v = params_resolve_type(s);
	assert_int_equal(jsonx_kind_of(v, &text), JSONX_BIGINT);
	assert_string_equal(text, s);
	json_decref(v);
	strcpy(s + 4300, "1");
	v = params_resolve_type(s);
	assert_int_equal(jsonx_kind_of(v, &text), JSONX_NONFINITE);
	assert_string_equal(text, "inf");
	json_decref(v);
	memset(s, '0', 5000);
	s[5000] = '\0';
	v = params_resolve_type(s);
	assert_true(json_is_real(v));
	assert_true(json_real_value(v) == 0.0);
	json_decref(v);
	free(s);
}

/* A value that is not UTF-8 cannot be represented: no value (a usage error). */
static void typing_not_utf8(void **state)
{
	(void)state;
	assert_null(params_resolve_type("caf\xe9"));
}

static void names(void **state)
{
	(void)state;
	assert_true(params_name_ok("x"));
	assert_true(params_name_ok("_private2"));
	assert_false(params_name_ok("2x"));
	assert_false(params_name_ok("class"));
	assert_false(params_name_ok("a-b"));
	assert_false(params_name_ok(""));
}

/* papermill merges -y, then -p, then -r, whatever the order given. */
static void layers_in_papermill_order(void **state)
{
	struct params p;
	json_t *all;

	(void)state;
	assert_int_equal(params_init(&p), 0);
	json_object_set_new(p.raw, "a", json_string("raw"));
	json_object_set_new(p.typed, "a", json_integer(1));
	json_object_set_new(p.typed, "b", json_integer(2));
	json_object_set_new(p.yaml, "a", json_string("yaml"));
	json_object_set_new(p.yaml, "b", json_string("yaml"));
	json_object_set_new(p.yaml, "c", json_string("yaml"));
	all = params_final(&p);
	assert_string_equal(json_string_value(json_object_get(all, "a")), "raw");
	assert_int_equal(json_integer_value(json_object_get(all, "b")), 2);
	assert_string_equal(json_string_value(json_object_get(all, "c")), "yaml");
	json_decref(all);
	params_free(&p);
}

/* ---- jsonx ------------------------------------------------------------------------ */

static void jsonx_round_trip(void **state)
{
	static const char in[] = "{\"big\": 123456789012345678901234567890, \"neg\": -99999999999999999999,"
				 " \"inf\": Infinity, \"ninf\": -Infinity, \"nan\": NaN, \"huge\": 1e400,"
				 " \"i\": -0, \"f\": 0.1, \"s\": \"\\u00e9\\ud83d\\ude00\", \"l\": [1, [true, null]]}";
	char err[160];
	json_t *v = jsonx_loadb(in, strlen(in), err, sizeof(err)), *plain;
	const char *text;
	char *out;

	(void)state;
	if (!v)
		fail_msg("%s", err);
	assert_int_equal(jsonx_kind_of(json_object_get(v, "big"), &text), JSONX_BIGINT);
	assert_string_equal(text, "123456789012345678901234567890");
	assert_int_equal(jsonx_kind_of(json_object_get(v, "huge"), &text), JSONX_NONFINITE);
	assert_string_equal(text, "inf");
	assert_int_equal(json_integer_value(json_object_get(v, "i")), 0);
	assert_string_equal(json_string_value(json_object_get(v, "s")), "\xc3\xa9\xf0\x9f\x98\x80");
	/* jansson refuses to write a marker rather than write it as a string */
	assert_null(json_dumps(v, JSON_COMPACT));
	out = jsonx_dumps(v);
	assert_string_equal(out, "{\"big\":123456789012345678901234567890,\"neg\":-99999999999999999999,"
				 "\"inf\":Infinity,\"ninf\":-Infinity,\"nan\":NaN,\"huge\":Infinity,\"i\":0,"
				 "\"f\":0.1,\"s\":\"\xc3\xa9\xf0\x9f\x98\x80\",\"l\":[1,[true,null]]}");
	free(out);
	plain = jsonx_plain(v);
	out = json_dumps(plain, JSON_COMPACT);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"big\":\"123456789012345678901234567890\""));
	assert_non_null(strstr(out, "\"ninf\":\"-inf\""));
	free(out);
	json_decref(plain);
	json_decref(v);
}

static void jsonx_refuses(void **state)
{
	static const char *const bad[] = {
		"{\"a\": 1, \"a\": 2}", "[1,]", "{\"a\" 1}", "\"\\ud800\"", "\"caf\xe9\"", "01", "1.",
		"-", "[1] x", "\"a\x01\"", "infinity", "{\"a\\u0000\": 1}", "",
	};
	char err[160];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *v = jsonx_loadb(bad[i], strlen(bad[i]), err, sizeof(err));
		if (v)
			fail_msg("'%s' was accepted", bad[i]);
		assert_true(err[0] != '\0');
	}
}

/* A string starting with the marker byte is refused, as a value or a key,
 * never taken for a big integer written raw. */
static void jsonx_marker_byte_refused(void **state)
{
	static const char *const bad[] = { "\"\xff" "123\"", "[\"\xff" "123\"]", "{\"\xff" "1\": 1}" };
	char err[160];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *v = jsonx_loadb(bad[i], strlen(bad[i]), err, sizeof(err));
		if (v)
			fail_msg("'%s' was accepted", bad[i]);
		if (!strstr(err, "not valid UTF-8"))
			fail_msg("'%s': %s", bad[i], err);
	}
}

static int write_json(struct buf *b, const json_t *v, int depth)
{
	char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	int rc = t ? buf_puts(b, t) : -ENOMEM;

	(void)depth;
	free(t);
	return rc;
}

/* A key that is not UTF-8 (set past jansson's check) is a bad value, not out of memory. */
static void jsonx_key_not_utf8(void **state)
{
	static const struct jsonx_syntax syn = { "[", "]", "{", "}", ",", ":" };
	struct buf b = BUF_INIT(4096);
	json_t *o = json_object();

	(void)state;
	assert_non_null(o);
	assert_int_equal(json_object_set_new_nocheck(o, "caf\xe9", json_integer(1)), 0);
	assert_int_equal(jsonx_write_container(&b, o, 0, &syn, write_json), -EINVAL);
	assert_null(jsonx_dumps(o));
	buf_free(&b);
	json_decref(o);
}

static void jsonx_depth_capped(void **state)
{
	char deep[300];
	char err[160];

	(void)state;
	memset(deep, '[', 200);
	deep[200] = '\0';
	assert_null(jsonx_loadb(deep, 200, err, sizeof(err)));
	assert_non_null(strstr(err, "nested"));
}

/* ---- injection -------------------------------------------------------------------- */

static const char NB[] =
	"{\"nbformat\":4,\"nbformat_minor\":5,\"metadata\":{\"kernelspec\":{\"name\":\"python3\","
	"\"display_name\":\"Python 3\",\"language\":\"python\"}},\"cells\":["
	"{\"cell_type\":\"code\",\"id\":\"p\",\"metadata\":{\"tags\":[\"parameters\"]},"
	"\"execution_count\":null,\"outputs\":[],\"source\":\"x = 0\"}]}";

static char *injected_source(const char *params)
{
	struct nbrun_ctx ctx = { "" };
	char *out = NULL, *src;
	json_t *nb;

	if (nbrun_notebook_inject_params(&out, NULL, &ctx, NB, strlen(NB), params) < 0)
		fail_msg("inject: %s", ctx.errmsg);
	nb = json_loads(out, 0, NULL);
	assert_non_null(nb);
	src = strdup(json_string_value(json_object_get(json_array_get(json_object_get(nb, "cells"), 1),
						       "source")));
	json_decref(nb);
	free(out);
	return src;
}

/* Values JSON numbers cannot hold reach the kernel exactly. */
static void inject_exact_values(void **state)
{
	char *src;

	(void)state;
	src = injected_source("{\"big\": 123456789012345678901234567890, \"inf\": Infinity,"
			      " \"ninf\": -Infinity, \"nan\": NaN, \"f\": 0.1, \"one\": 1.0,"
			      " \"l\": [-99999999999999999999, NaN]}");
	assert_string_equal(src, "# Parameters\n"
				 "big = 123456789012345678901234567890\n"
				 "inf = float('inf')\n"
				 "ninf = float('-inf')\n"
				 "nan = float('nan')\n"
				 "f = 0.1\n"
				 "one = 1.0\n"
				 "l = [-99999999999999999999, float('nan')]\n");
	free(src);
}

/* An earlier injected cell is replaced where it is (papermill), and the new
 * cell has a fresh id: a cell of the notebook keeps its own. */
static void inject_in_place(void **state)
{
	static const char nb[] =
		"{\"nbformat\":4,\"nbformat_minor\":4,\"metadata\":{\"kernelspec\":{\"name\":\"python3\","
		"\"display_name\":\"Python 3\",\"language\":\"python\"}},\"cells\":["
		"{\"cell_type\":\"code\",\"metadata\":{\"tags\":[\"parameters\"]},\"execution_count\":null,"
		"\"outputs\":[],\"source\":\"x = 0\"},"
		"{\"cell_type\":\"markdown\",\"metadata\":{},\"source\":\"text\"},"
		"{\"cell_type\":\"code\",\"metadata\":{\"tags\":[\"injected-parameters\"]},\"execution_count\":1,"
		"\"outputs\":[],\"source\":\"x = 1\"},"
		"{\"cell_type\":\"code\",\"metadata\":{},\"execution_count\":null,\"outputs\":[],\"source\":\"print(x)\"}]}";
	static const char nb45[] =
		"{\"nbformat\":4,\"nbformat_minor\":5,\"metadata\":{},\"cells\":["
		"{\"cell_type\":\"code\",\"id\":\"injected-parameters\",\"metadata\":{},\"execution_count\":null,"
		"\"outputs\":[],\"source\":\"print(x)\"}]}";
	struct nbrun_ctx ctx = { "" };
	char *out = NULL;
	json_t *v, *cells;
	const char *id;

	(void)state;
	assert_int_equal(nbrun_notebook_inject_params(&out, NULL, &ctx, nb, strlen(nb), "{\"x\": 2}"), 0);
	v = json_loads(out, 0, NULL);
	free(out);
	cells = json_object_get(v, "cells");
	assert_int_equal(json_array_size(cells), 4);
	assert_int_equal(json_integer_value(json_object_get(v, "nbformat_minor")), 5);
	assert_string_equal(json_string_value(json_object_get(json_array_get(cells, 2), "source")),
			    "# Parameters\nx = 2\n");
	for (size_t i = 0; i < 4; i++) {
		id = json_string_value(json_object_get(json_array_get(cells, i), "id"));
		assert_non_null(id);
		assert_int_equal(strlen(id), 8);
		for (size_t k = 0; k < i; k++)
			assert_string_not_equal(id, json_string_value(json_object_get(json_array_get(cells, k), "id")));
	}
	json_decref(v);

	assert_int_equal(nbrun_notebook_inject_params(&out, NULL, &ctx, nb45, strlen(nb45), "{\"x\": 2}"), 0);
	v = json_loads(out, 0, NULL);
	free(out);
	cells = json_object_get(v, "cells");
	assert_int_equal(json_array_size(cells), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(cells, 1), "id")), "injected-parameters");
	assert_string_not_equal(json_string_value(json_object_get(json_array_get(cells, 0), "id")),
				"injected-parameters");
	json_decref(v);
}

/* papermill records the parameters in metadata.papermill.parameters (strict JSON here). */
static void inject_records_parameters(void **state)
{
	static const char params[] = "{\"big\": 123456789012345678901234567890, \"inf\": Infinity, \"s\": \"t\", \"n\": 2}";
	struct nbrun_ctx ctx = { "" };
	char *out = NULL;
	json_t *nb, *pm;

	(void)state;
	assert_int_equal(nbrun_notebook_inject_params(&out, NULL, &ctx, NB, strlen(NB), params), 0);
	nb = json_loads(out, 0, NULL);
	free(out);
	pm = json_object_get(json_object_get(json_object_get(nb, "metadata"), "papermill"), "parameters");
	assert_true(json_is_object(pm));
	assert_string_equal(json_string_value(json_object_get(pm, "big")), "123456789012345678901234567890");
	assert_string_equal(json_string_value(json_object_get(pm, "inf")), "inf");
	assert_string_equal(json_string_value(json_object_get(pm, "s")), "t");
	assert_int_equal(json_integer_value(json_object_get(pm, "n")), 2);
	json_decref(nb);
}

/* -y and -b: YAML as PyYAML's SafeLoader (no timestamps) reads it; the
 * expected values were taken from PyYAML 6. */
static const struct typing yaml_cases[] = {
	{ "yes", "true", NULL }, { "No", "false", NULL }, { "on", "true", NULL }, { "OFF", "false", NULL },
	{ "true", "true", NULL }, { "y", "str", "y" }, { "n", "str", "n" }, { "~", "null", NULL },
	{ "null", "null", NULL }, { "Null", "null", NULL }, { "", "null", NULL },
	{ "0b101", "int", "5" }, { "0o17", "str", "0o17" }, { "017", "int", "15" }, { "0x1F", "int", "31" },
	{ "0x_1f", "int", "31" }, { "1_000", "int", "1000" }, { "+12", "int", "12" }, { "-0", "int", "0" },
	{ "012345678901234567890123456789", "str", "012345678901234567890123456789" },
	{ "0x123456789abcdef0123456789", "bigint", "90144042682896311822508713865" },
	{ "123456789012345678901234567890", "bigint", "123456789012345678901234567890" },
	{ "190:20:30", "int", "685230" }, { "1e5", "str", "1e5" }, { "1.0e5", "str", "1.0e5" },
	{ "1.0e+5", "float", "100000" }, { ".5", "float", "0.5" }, { "1.", "float", "1" },
	{ ".inf", "inf", "inf" }, { "-.Inf", "inf", "-inf" }, { ".NaN", "inf", "nan" }, { "+.inf", "inf", "inf" },
	{ "1:30.5", "float", "90.5" }, { "2001-12-14", "str", "2001-12-14" }, { "0.1", "float", "0.1" },
	{ "1__0", "int", "10" }, { "'quoted 1'", "str", "quoted 1" }, { "\"2\"", "str", "2" },
	{ "!!str 12", "str", "12" }, { "!!int '7'", "int", "7" }, { "!!float 3", "float", "3" },
	{ "08", "str", "08" }, { "0_7", "int", "7" }, { "-0b11", "int", "-3" }, { ".", "str", "." },
	{ "1_2.3_4", "float", "12.34" },
};

static void yaml_as_pyyaml(void **state)
{
	char err[200], doc[200];

	(void)state;
	for (size_t i = 0; i < sizeof(yaml_cases) / sizeof(yaml_cases[0]); i++) {
		const struct typing *t = &yaml_cases[i];
		json_t *m, *v;
		const char *text = NULL;
		enum jsonx_kind k;

		snprintf(doc, sizeof(doc), "k: %s\n", t->in);
		m = params_yaml_load(doc, strlen(doc), err, sizeof(err));
		if (!m)
			fail_msg("'%s': %s", t->in, err);
		v = json_object_get(m, "k");
		k = jsonx_kind_of(v, &text);
		if (!strcmp(t->kind, "str")) {
			if (!json_is_string(v) || k != JSONX_PLAIN || strcmp(json_string_value(v), t->want))
				fail_msg("'%s': not the string %s", t->in, t->want);
		} else {
			/* the same checks as -p typing, on the value made */
			if (!strcmp(t->kind, "true") ? !json_is_true(v) : !strcmp(t->kind, "false") ? !json_is_false(v)
			    : !strcmp(t->kind, "null") ? !json_is_null(v)
			    : !strcmp(t->kind, "int") ? !json_is_integer(v) || json_integer_value(v) != strtoll(t->want, NULL, 10)
			    : !strcmp(t->kind, "bigint") ? k != JSONX_BIGINT || strcmp(text, t->want)
			    : !strcmp(t->kind, "float") ? !json_is_real(v) || json_real_value(v) != strtod(t->want, NULL)
			    : k != JSONX_NONFINITE || strcmp(text, t->want))
				fail_msg("'%s': not %s %s", t->in, t->kind, t->want ? t->want : "");
		}
		json_decref(m);
	}
}

static void yaml_documents(void **state)
{
	static const char *const bad[] = {
		"", "- 1\n- 2\n", "just text", "a: 1\n---\nb: 2\n", "a: !!python/object:os.system x\n",
		"a: [1, 2\n", "a: *nothing\n", "a: !!int abc\n", "a: \"\\x00\"\n",
		/* a billion laughs */
		"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
		"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
		"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
		"g: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
	};
	static const char good[] = "# comment\nname: &n report\nalpha: 0.5\nitems: [1, two, {3: yes}]\n"
				   "again: *n\nnested:\n  big: 0x123456789abcdef0123456789\n  when: 2001-12-14\n";
	static const char json[] = "{\"x\": [1, 2.5, \"s\"], \"y\": null, \"z\": true}";
	char err[200], *out;
	json_t *m;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m = params_yaml_load(bad[i], strlen(bad[i]), err, sizeof(err));
		if (m)
			fail_msg("'%s' was accepted", bad[i]);
		assert_true(err[0] != '\0');
	}
	m = params_yaml_load(good, strlen(good), err, sizeof(err));
	if (!m)
		fail_msg("%s", err);
	out = jsonx_dumps(m);
	assert_string_equal(out, "{\"name\":\"report\",\"alpha\":0.5,\"items\":[1,\"two\",{\"3\":true}],"
				 "\"again\":\"report\",\"nested\":{\"big\":90144042682896311822508713865,"
				 "\"when\":\"2001-12-14\"}}");
	free(out);
	json_decref(m);
	/* JSON is YAML */
	m = params_yaml_load(json, strlen(json), err, sizeof(err));
	if (!m)
		fail_msg("%s", err);
	out = jsonx_dumps(m);
	assert_string_equal(out, "{\"x\":[1,2.5,\"s\"],\"y\":null,\"z\":true}");
	free(out);
	json_decref(m);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(typing_as_papermill),
		cmocka_unit_test(typing_int_digit_limit),
		cmocka_unit_test(typing_not_utf8),
		cmocka_unit_test(names),
		cmocka_unit_test(layers_in_papermill_order),
		cmocka_unit_test(jsonx_round_trip),
		cmocka_unit_test(jsonx_refuses),
		cmocka_unit_test(jsonx_marker_byte_refused),
		cmocka_unit_test(jsonx_key_not_utf8),
		cmocka_unit_test(jsonx_depth_capped),
		cmocka_unit_test(inject_exact_values),
		cmocka_unit_test(inject_in_place),
		cmocka_unit_test(inject_records_parameters),
		cmocka_unit_test(yaml_as_pyyaml),
		cmocka_unit_test(yaml_documents),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
