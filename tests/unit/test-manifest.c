/* SPDX-License-Identifier: MIT */
/*
 * nbrun batch --manifest: JSON Lines and CSV rows, the -p typing of CSV
 * values, and a one-line error naming the line of each bad row.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit-main.h"

#include "batch.h"
#include "jsonx.h"

static int parse(struct manifest *m, const char *text, enum manifest_format fmt, char *err, size_t errlen)
{
	return manifest_parse(m, text, strlen(text), fmt, "m", "dir", 1000, err, errlen);
}

static void params_equal(const json_t *params, const char *want)
{
	char *got = jsonx_dumps(params);

	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void jsonl_rows(void **state)
{
	struct manifest m;
	char err[300] = "";
	int rc = parse(&m,
		       "\xef\xbb\xbf{\"notebook\": \"a.ipynb\", \"parameters\": {\"n\": 123456789012345678901234567890, \"x\": NaN}}\n"
		       "\n   \r\n"
		       "{\"notebook\": \"/abs/b.ipynb\", \"output\": \"b-run\", \"parameters\": {\"s\": \"t\", \"l\": [1, {\"k\": null}]}}\r\n"
		       "{\"notebook\": \"c.ipynb\", \"parameters\": null, \"output\": null}",
		       MANIFEST_JSONL, err, sizeof(err));

	assert_int_equal(rc, 0);
	assert_int_equal(m.n, 3);
	assert_string_equal(m.rows[0].notebook, "dir/a.ipynb");
	assert_int_equal(m.rows[0].line, 1);
	params_equal(m.rows[0].params, "{\"n\":123456789012345678901234567890,\"x\":NaN}");
	assert_null(m.rows[0].output);
	assert_string_equal(m.rows[1].notebook, "/abs/b.ipynb");
	assert_int_equal(m.rows[1].line, 4);
	assert_string_equal(m.rows[1].output, "b-run");
	params_equal(m.rows[1].params, "{\"s\":\"t\",\"l\":[1,{\"k\":null}]}");
	assert_int_equal(m.rows[2].line, 5);
	params_equal(m.rows[2].params, "{}");
	manifest_free(&m);
}

static void csv_rows(void **state)
{
	struct manifest m;
	char err[300] = "";
	int rc = parse(&m,
		       "notebook,n,label,output,flag\r\n"
		       "a.ipynb,21,hello world,,True\r\n"
		       "\r\n"
		       "\"b,1.ipynb\",inf,\"two\nlines\",b1,\n"
		       "a.ipynb,0x1f,\"\", a2 ,None\n"
		       "c.ipynb,,,,\n",
		       MANIFEST_CSV, err, sizeof(err));

	if (rc)
		fail_msg("%s", err);
	assert_int_equal(m.n, 4);
	assert_string_equal(m.rows[0].notebook, "dir/a.ipynb");
	params_equal(m.rows[0].params, "{\"n\":21,\"label\":\"hello world\",\"flag\":true}");
	assert_null(m.rows[0].output);
	assert_int_equal(m.rows[1].line, 4);
	assert_string_equal(m.rows[1].notebook, "dir/b,1.ipynb");
	params_equal(m.rows[1].params, "{\"n\":Infinity,\"label\":\"two\\nlines\"}");
	assert_string_equal(m.rows[1].output, "b1");
	/* -p typing: 0x1f stays text; a quoted "" is the empty string; spaces are kept */
	assert_int_equal(m.rows[2].line, 6);
	params_equal(m.rows[2].params, "{\"n\":\"0x1f\",\"label\":\"\",\"flag\":null}");
	assert_string_equal(m.rows[2].output, " a2 ");
	assert_int_equal(m.rows[3].line, 7);
	params_equal(m.rows[3].params, "{}");
	manifest_free(&m);
}

struct bad {
	enum manifest_format fmt;
	const char *text;
	const char *err; /* what the message starts with */
};

static const struct bad bads[] = {
	{ MANIFEST_JSONL, "{\"notebook\": \"a\"}\n[1]\n", "m:2: want an object" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\"}\n\n{\"notebook\": \"a\",}\n", "m:3: not JSON" },
	{ MANIFEST_JSONL, "{\"notebook\": 1}", "m:1: \"notebook\" must be a string" },
	{ MANIFEST_JSONL, "{\"notebook\": \"\"}", "m:1: the notebook is empty" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"params\": {}}", "m:1: unknown key 'params'" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"parameters\": [1]}", "m:1: \"parameters\" must be an object" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"parameters\": {\"a b\": 1}}", "m:1: parameter name 'a b'" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"parameters\": {\"class\": 1}}", "m:1: parameter name 'class'" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"output\": \"../../etc\"}", "m:1: output '../../etc' cannot name" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"output\": \"..\"}", "m:1: output '..' cannot name" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"output\": \"report.json\"}", "m:1: output 'report.json' cannot" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"output\": \"attempts\"}", "m:1: output 'attempts' cannot" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"output\": \"a\\u001b[2J\"}", "m:1: output 'a?[2J' cannot" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"output\": 7}", "m:1: \"output\" must be a string" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"output\": \"x\"}\n{\"notebook\": \"b\", \"output\": \"x\"}",
	  "m:2: output 'x' is the output of line 1 too" },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\\u0000b\"}", "m:1: " },
	{ MANIFEST_JSONL, "{\"notebook\": \"a\", \"notebook\": \"b\"}", "m:1: not JSON" },
	{ MANIFEST_JSONL, "\n\n", "m: no rows" },
	{ MANIFEST_CSV, "", "m:1: no header" },
	{ MANIFEST_CSV, "notebook\n", "m: no rows" },
	{ MANIFEST_CSV, "notebook,a b\na,1\n", "m:1: column 'a b'" },
	{ MANIFEST_CSV, "notebook,x\n", "m: no rows" },
	{ MANIFEST_CSV, "notebook,,x\n", "m:1: column 2 of the header has no name" },
	{ MANIFEST_CSV, "notebook,x,x\n", "m:1: column 'x' twice" },
	{ MANIFEST_CSV, "x\n1\n", "m:1: the header has no column 'notebook'" },
	{ MANIFEST_CSV, "notebook,x\na,1\nb\n", "m:3: 1 fields, the header has 2" },
	{ MANIFEST_CSV, "notebook,x\na,1\nb,\"2\nc,3\n", "m:3: not CSV: a quoted field is not closed" },
	{ MANIFEST_CSV, "notebook,x\na,1\nb,2\"x\n", "m:3: not CSV" },
	{ MANIFEST_CSV, "notebook,x\na,\xff\n", "m:2: column 'x': the value '?' is not UTF-8" },
	{ MANIFEST_CSV, "notebook,output\na,x/y\n", "m:2: output 'x/y' cannot name a directory" },
	{ MANIFEST_CSV, "notebook,output\n,x\n", "m:2: the notebook is empty" },
	{ MANIFEST_CSV, "notebook,output\n\"a\nb\nc\",x\nd,x\n", "m:5: output 'x' is the output of line 2 too" },
};

static void bad_rows(void **state)
{
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		struct manifest m;
		char err[300] = "";
		size_t len = strlen(bads[i].text);

		/* the NUL case: a JSON escape, so that strlen() still sees all of it */
		if (manifest_parse(&m, bads[i].text, len, bads[i].fmt, "m", NULL, 1000, err, sizeof(err)) == 0) {
			manifest_free(&m);
			fail_msg("case %zu parsed: %s", i, bads[i].text);
		}
		if (strncmp(err, bads[i].err, strlen(bads[i].err)) || strchr(err, '\n'))
			fail_msg("case %zu: got '%s', want '%s...'", i, err, bads[i].err);
		assert_null(m.rows);
	}
}

static void row_cap(void **state)
{
	struct manifest m;
	char err[300] = "";
	const char *text = "{\"notebook\": \"a\"}\n{\"notebook\": \"b\"}\n{\"notebook\": \"c\"}\n";

	assert_int_equal(manifest_parse(&m, text, strlen(text), MANIFEST_JSONL, "m", NULL, 2, err, sizeof(err)), -1);
	assert_string_equal(err, "m:3: more than 2 rows");
}

static void formats(void **state)
{
	assert_int_equal(manifest_format_of("x.csv", "{", 1), MANIFEST_CSV);
	assert_int_equal(manifest_format_of("x.JSONL", "n", 1), MANIFEST_JSONL);
	assert_int_equal(manifest_format_of("x.ndjson", "", 0), MANIFEST_JSONL);
	assert_int_equal(manifest_format_of("x", "\xef\xbb\xbf \n{", 6), MANIFEST_JSONL);
	assert_int_equal(manifest_format_of("x.txt", "notebook,a", 10), MANIFEST_CSV);
}

static void names(void **state)
{
	assert_null(batch_name_problem("a b"));
	assert_null(batch_name_problem(".hidden"));
	assert_null(batch_name_problem("répertoire"));
	assert_null(batch_name_problem("reports"));
	assert_non_null(batch_name_problem(""));
	assert_non_null(batch_name_problem("."));
	assert_non_null(batch_name_problem(".."));
	assert_non_null(batch_name_problem("a/b"));
	assert_non_null(batch_name_problem("report.html"));
	assert_non_null(batch_name_problem("attempts"));
	assert_non_null(batch_name_problem("a\tb"));
	assert_non_null(batch_name_problem("\xff"));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(jsonl_rows),
		cmocka_unit_test(csv_rows),
		cmocka_unit_test(bad_rows),
		cmocka_unit_test(row_cap),
		cmocka_unit_test(formats),
		cmocka_unit_test(names),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
