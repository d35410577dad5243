/* SPDX-License-Identifier: MIT */
/* nbrun__notebook_from_code: "# %%" splitting and the nbformat 4.5 shape. */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit-main.h"

#include "nbrun-private.h"

/* Build the notebook and check everything every notebook must have. */
static json_t *build(const char *code)
{
	struct nbrun_ctx ctx = { "" };
	json_t *nb = (json_t *)0x1, *cells, *cell, *ks;
	regex_t re;
	size_t i, j;

	assert_int_equal(nbrun__notebook_from_code(&nb, &ctx, code), 0);
	assert_non_null(nb);
	assert_int_equal(json_integer_value(json_object_get(nb, "nbformat")), 4);
	assert_int_equal(json_integer_value(json_object_get(nb, "nbformat_minor")), 5);
	ks = json_object_get(json_object_get(nb, "metadata"), "kernelspec");
	assert_true(json_is_object(ks));
	assert_string_equal(json_string_value(json_object_get(ks, "name")), "python3");
	assert_non_null(json_string_value(json_object_get(ks, "display_name")));
	cells = json_object_get(nb, "cells");
	assert_true(json_is_array(cells));
	assert_true(json_array_size(cells) >= 1);

	assert_int_equal(regcomp(&re, "^[a-zA-Z0-9_-]{1,64}$", REG_EXTENDED | REG_NOSUB), 0);
	json_array_foreach(cells, i, cell) {
		const char *type = json_string_value(json_object_get(cell, "cell_type"));
		const char *id = json_string_value(json_object_get(cell, "id"));

		assert_non_null(type);
		assert_non_null(id);
		assert_int_equal(regexec(&re, id, 0, NULL, 0), 0);
		for (j = 0; j < i; j++)
			assert_string_not_equal(
				id, json_string_value(json_object_get(json_array_get(cells, j), "id")));
		assert_true(json_is_object(json_object_get(cell, "metadata")));
		assert_true(json_is_string(json_object_get(cell, "source")));
		if (!strcmp(type, "code")) {
			json_t *outputs = json_object_get(cell, "outputs");
			assert_true(json_is_array(outputs));
			assert_int_equal(json_array_size(outputs), 0);
			assert_non_null(json_object_get(cell, "execution_count"));
			assert_true(json_is_null(json_object_get(cell, "execution_count")));
		} else {
			assert_string_equal(type, "markdown");
			/* nbformat forbids these on markdown cells. */
			assert_null(json_object_get(cell, "outputs"));
			assert_null(json_object_get(cell, "execution_count"));
		}
	}
	regfree(&re);
	/* The document must serialise (valid UTF-8, no NaN...). */
	{
		char *s = json_dumps(nb, JSON_COMPACT);
		assert_non_null(s);
		free(s);
	}
	return nb;
}

static size_t ncells(const json_t *nb)
{
	return json_array_size(json_object_get(nb, "cells"));
}

static const char *src(const json_t *nb, size_t i)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(nb, "cells"), i), "source"));
}

static const char *type(const json_t *nb, size_t i)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(nb, "cells"), i), "cell_type"));
}

static void no_marker_one_cell(void **state)
{
	json_t *nb = build("import os\nprint(os.getcwd())\n");

	assert_int_equal(ncells(nb), 1);
	assert_string_equal(type(nb, 0), "code");
	assert_string_equal(src(nb, 0), "import os\nprint(os.getcwd())");
	json_decref(nb);
}

static void leading_marker(void **state)
{
	json_t *nb = build("# %%\nprint(1)\n# %%\nprint(2)\n");

	assert_int_equal(ncells(nb), 2);
	assert_string_equal(src(nb, 0), "print(1)");
	assert_string_equal(src(nb, 1), "print(2)");
	assert_string_equal(type(nb, 0), "code");
	assert_string_equal(type(nb, 1), "code");
	json_decref(nb);
}

static void marker_with_title(void **state)
{
	json_t *nb = build("# %% load data\nx = 1\n# %%\tplot\ny = 2");

	assert_int_equal(ncells(nb), 2);
	assert_string_equal(src(nb, 0), "x = 1");
	assert_string_equal(src(nb, 1), "y = 2");
	json_decref(nb);
}

static void code_before_first_marker(void **state)
{
	json_t *nb = build("import math\n# %%\nprint(math.pi)\n");

	assert_int_equal(ncells(nb), 2);
	assert_string_equal(src(nb, 0), "import math");
	assert_string_equal(src(nb, 1), "print(math.pi)");
	json_decref(nb);
}

static void blank_before_first_marker_is_no_cell(void **state)
{
	json_t *nb = build("\n  \n\t\n# %%\nprint(1)\n");

	assert_int_equal(ncells(nb), 1);
	assert_string_equal(src(nb, 0), "print(1)");
	json_decref(nb);
}

static void markdown_cell(void **state)
{
	json_t *nb = build("# %% [markdown]\n# Title\n# some *text*\n#\n# %%\nx = 1\n");

	assert_int_equal(ncells(nb), 2);
	assert_string_equal(type(nb, 0), "markdown");
	assert_string_equal(src(nb, 0), "Title\nsome *text*");
	assert_string_equal(type(nb, 1), "code");
	assert_string_equal(src(nb, 1), "x = 1");
	json_decref(nb);
}

static void markdown_short_tag(void **state)
{
	json_t *nb = build("x = 1\n# %% [md]\n# Notes\n");

	assert_int_equal(ncells(nb), 2);
	assert_string_equal(type(nb, 0), "code");
	assert_string_equal(type(nb, 1), "markdown");
	assert_string_equal(src(nb, 1), "Notes");
	json_decref(nb);
}

static void triple_percent_is_not_a_marker(void **state)
{
	json_t *nb = build("a = 1\n# %%%\nb = 2\n# %%x\nc = 3\n");

	assert_int_equal(ncells(nb), 1);
	assert_string_equal(src(nb, 0), "a = 1\n# %%%\nb = 2\n# %%x\nc = 3");
	json_decref(nb);
}

static void marker_must_start_the_line(void **state)
{
	json_t *nb = build("s = '''\n  # %%\n'''\nx = '# %%'\n");

	assert_int_equal(ncells(nb), 1);
	json_decref(nb);
}

static void trailing_newlines_stripped(void **state)
{
	json_t *nb = build("x = 1\n\n\n");

	assert_int_equal(ncells(nb), 1);
	assert_string_equal(src(nb, 0), "x = 1");
	json_decref(nb);
}

static void empty_code_one_empty_cell(void **state)
{
	json_t *nb = build("");

	assert_int_equal(ncells(nb), 1);
	assert_string_equal(type(nb, 0), "code");
	assert_string_equal(src(nb, 0), "");
	json_decref(nb);
}

static void whitespace_only_one_empty_cell(void **state)
{
	json_t *nb = build("\n\n  \n");

	assert_int_equal(ncells(nb), 1);
	assert_string_equal(type(nb, 0), "code");
	json_decref(nb);
}

static void crlf(void **state)
{
	json_t *nb = build("# %%\r\nprint(1)\r\n# %% [markdown]\r\n# Head\r\n# %%\r\nprint(2)\r\n");

	assert_int_equal(ncells(nb), 3);
	assert_string_equal(type(nb, 0), "code");
	assert_string_equal(src(nb, 0), "print(1)");
	assert_string_equal(type(nb, 1), "markdown");
	assert_string_equal(src(nb, 1), "Head");
	assert_string_equal(type(nb, 2), "code");
	assert_string_equal(src(nb, 2), "print(2)");
	json_decref(nb);
}

static void no_final_newline(void **state)
{
	json_t *nb = build("# %%\na\n# %%\nb");

	assert_int_equal(ncells(nb), 2);
	assert_string_equal(src(nb, 1), "b");
	json_decref(nb);
}

static void many_cells_ids_unique(void **state)
{
	struct buf b = BUF_INIT(1 << 20);
	json_t *nb;

	for (int i = 0; i < 300; i++)
		assert_int_equal(buf_printf(&b, "# %%%%\nprint(%d)\n", i), 0);
	nb = build(b.data);
	assert_int_equal(ncells(nb), 300);
	assert_string_equal(src(nb, 299), "print(299)");
	json_decref(nb);
	buf_free(&b);
}

static void unicode_source_kept(void **state)
{
	json_t *nb = build("print('h\xc3\xa9llo \xe2\x9c\x93')\n");

	assert_string_equal(src(nb, 0), "print('h\xc3\xa9llo \xe2\x9c\x93')");
	json_decref(nb);
}

/*
 * Not UTF-8: jansson refuses the string, so no notebook can be built. It must
 * fail cleanly. (Today it fails with NBRUN_ENOMEM "out of memory", which is
 * the wrong code and message; see the report.)
 */
static void invalid_utf8_fails_cleanly(void **state)
{
	struct nbrun_ctx ctx = { "" };
	json_t *nb = (json_t *)0x1;
	int rc = nbrun__notebook_from_code(&nb, &ctx, "print('\xff\xfe')\n");

	assert_true(rc < 0);
	assert_null(nb);
	assert_true(ctx.errmsg[0] != '\0');
}

/* The right code for it is NBRUN_EINVAL (bad argument), not NBRUN_ENOMEM. */
static void invalid_utf8_is_einval(void **state)
{
	struct nbrun_ctx ctx = { "" };
	json_t *nb = NULL;

	assert_int_equal(nbrun__notebook_from_code(&nb, &ctx, "print('\xff')\n"), NBRUN_EINVAL);
	assert_null(strstr(ctx.errmsg, "out of memory"));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(no_marker_one_cell),
		cmocka_unit_test(leading_marker),
		cmocka_unit_test(marker_with_title),
		cmocka_unit_test(code_before_first_marker),
		cmocka_unit_test(blank_before_first_marker_is_no_cell),
		cmocka_unit_test(markdown_cell),
		cmocka_unit_test(markdown_short_tag),
		cmocka_unit_test(triple_percent_is_not_a_marker),
		cmocka_unit_test(marker_must_start_the_line),
		cmocka_unit_test(trailing_newlines_stripped),
		cmocka_unit_test(empty_code_one_empty_cell),
		cmocka_unit_test(whitespace_only_one_empty_cell),
		cmocka_unit_test(crlf),
		cmocka_unit_test(no_final_newline),
		cmocka_unit_test(many_cells_ids_unique),
		cmocka_unit_test(unicode_source_kept),
		cmocka_unit_test(invalid_utf8_fails_cleanly),
		cmocka_unit_test(invalid_utf8_is_einval),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
