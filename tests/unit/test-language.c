/* SPDX-License-Identifier: MIT */
/* The language table: names, extensions, cell markers, kernelspecs, parameters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit-main.h"

#include "nbrun-private.h"

static void names_and_aliases(void **state)
{
	assert_string_equal(nbrun_language_name("R"), "r");
	assert_string_equal(nbrun_language_name("js"), "javascript");
	assert_string_equal(nbrun_language_name("TS"), "typescript");
	assert_string_equal(nbrun_language_name("sh"), "bash");
	assert_string_equal(nbrun_language_name("python3"), "python");
	assert_null(nbrun_language_name("cobol"));
	assert_null(nbrun_language_name(""));
	assert_string_equal(nbrun_language_names(), "python, r, javascript, typescript, bash");
}

static void extensions(void **state)
{
	assert_string_equal(nbrun_language_for_path("a/b.py"), "python");
	assert_string_equal(nbrun_language_for_path("x.R"), "r");
	assert_string_equal(nbrun_language_for_path("x.r"), "r");
	assert_string_equal(nbrun_language_for_path("x.js"), "javascript");
	assert_string_equal(nbrun_language_for_path("x.ts"), "typescript");
	assert_string_equal(nbrun_language_for_path("x.sh"), "bash");
	assert_null(nbrun_language_for_path("x.ipynb"));
	assert_null(nbrun_language_for_path("x.d/noext"));
	assert_null(nbrun_language_for_path("-"));
}

static void kernels(void **state)
{
	assert_string_equal(nbrun__language_for_kernel("ir", NULL)->name, "r");
	assert_string_equal(nbrun__language_for_kernel("jslab", NULL)->name, "javascript");
	assert_string_equal(nbrun__language_for_kernel("tslab", NULL)->name, "typescript");
	assert_string_equal(nbrun__language_for_kernel("conda-env-x-py", "python")->name, "python");
	assert_string_equal(nbrun__language_for_kernel("javascript", "javascript")->name, "javascript");
	assert_null(nbrun__language_for_kernel("julia-1.9", "julia"));
}

static void js_markers(void **state)
{
	struct nbrun_ctx ctx = { "" };
	json_t *nb = NULL, *cells, *ks;

	assert_int_equal(nbrun__notebook_from_code_lang(&nb, &ctx,
							"const a = 1;\n// %%\nconsole.log(a)\n"
							"// %% [markdown]\n// # Title\n// %%\n# %%\n",
							nbrun__language_find("js")),
			 0);
	cells = json_object_get(nb, "cells");
	assert_int_equal(json_array_size(cells), 4);
	assert_string_equal(json_string_value(json_object_get(json_array_get(cells, 1), "source")),
			    "console.log(a)");
	assert_string_equal(json_string_value(json_object_get(json_array_get(cells, 2), "cell_type")),
			    "markdown");
	assert_string_equal(json_string_value(json_object_get(json_array_get(cells, 2), "source")),
			    "# Title");
	/* "# %%" is not a JavaScript marker */
	assert_string_equal(json_string_value(json_object_get(json_array_get(cells, 3), "source")),
			    "# %%");
	ks = json_object_get(json_object_get(nb, "metadata"), "kernelspec");
	assert_string_equal(json_string_value(json_object_get(ks, "name")), "jslab");
	json_decref(nb);
}

/* The injected cell's source for a notebook of kernel `kernel`. */
static char *inject(const char *kernel, const char *params, int *rc)
{
	struct nbrun_ctx ctx = { "" };
	char nb[512], *out = NULL, *src = NULL;
	json_t *doc;

	snprintf(nb, sizeof(nb),
		 "{\"nbformat\": 4, \"nbformat_minor\": 5, \"metadata\": {\"kernelspec\": "
		 "{\"name\": \"%s\", \"display_name\": \"x\"}}, \"cells\": []}",
		 kernel);
	*rc = nbrun_notebook_inject_params(&out, NULL, &ctx, nb, strlen(nb), params);
	if (*rc < 0)
		return NULL;
	doc = json_loads(out, 0, NULL);
	src = strdup(json_string_value(
		json_object_get(json_array_get(json_object_get(doc, "cells"), 0), "source")));
	json_decref(doc);
	free(out);
	return src;
}

static void params_r(void **state)
{
	int rc;
	char *src = inject("ir",
			   "{\"n\": 21, \"x\": 1.5, \"s\": \"a\\\"b\\\\c\\n\", \"t\": true, \"z\": null,"
			   " \"l\": [1, \"two\"], \"d\": {\"k\": false}, \"_u\": 3}",
			   &rc);

	assert_int_equal(rc, 0);
	assert_string_equal(src, "# Parameters\nn = 21\nx = 1.5\ns = \"a\\\"b\\\\c\\n\"\nt = TRUE\n"
				 "z = NULL\nl = list(1, \"two\")\nd = list(\"k\" = FALSE)\nu = 3\n");
	free(src);
	assert_null(inject("ir", "{\"if\": 1}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
	assert_null(inject("ir", "{\"s\": \"nul\\u0000\"}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
}

static void params_js(void **state)
{
	int rc;
	char *src = inject("tslab", "{\"n\": 21, \"s\": \"it's\", \"o\": {\"a\": [1, null, true]}}", &rc);

	assert_int_equal(rc, 0);
	assert_string_equal(src, "// Parameters\nconst n = 21;\nconst s = \"it's\";\n"
				 "const o = {\"a\":[1,null,true]};\n");
	free(src);
	assert_null(inject("jslab", "{\"class\": 1}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
	/* U+2028 and U+2029 end a TypeScript string literal: written escaped, in values and keys */
	src = inject("tslab", "{\"s\": \"a\\u2028b\\u2029c\", \"o\": {\"k\\u2028\": 1}}", &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(src, "// Parameters\nconst s = \"a\\u2028b\\u2029c\";\n"
				 "const o = {\"k\\u2028\":1};\n");
	free(src);
}

/* What JSON numbers cannot hold: inf, -inf and nan as the language names
 * them; an integer beyond 64 bits, or beyond 2^53, when a double holds it
 * exactly; any other integer refused, not rounded in R or JavaScript. */
static void params_numbers(void **state)
{
	int rc;
	char *src;

	src = inject("ir", "{\"a\": Infinity, \"b\": -Infinity, \"c\": NaN, \"d\": 18446744073709551616,"
			   " \"e\": [1, NaN], \"f\": 9007199254740992, \"g\": -4611686018427387904}", &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(src, "# Parameters\na = Inf\nb = -Inf\nc = NaN\nd = 18446744073709551616\n"
				 "e = list(1, NaN)\nf = 9007199254740992\ng = -4611686018427387904\n");
	free(src);
	src = inject("jslab", "{\"a\": Infinity, \"o\": {\"x\": [NaN, -Infinity, 2.5]},"
			      " \"d\": -18446744073709551616}", &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(src, "// Parameters\nconst a = Infinity;\nconst o = {\"x\":[NaN,-Infinity,2.5]};\n"
				 "const d = -18446744073709551616;\n");
	free(src);
	src = inject("bash", "{\"a\": -Infinity, \"n\": 123456789012345678901234567890, \"l\": [NaN]}", &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(src, "# Parameters\na=-inf\nn=123456789012345678901234567890\nl=(nan)\n");
	free(src);
	/* no double is 10^20 + 1 nor 2^53 + 1: refused, where papermill's R
	 * translator writes the digits and R reads another number */
	assert_null(inject("ir", "{\"n\": 100000000000000000001}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
	assert_null(inject("ir", "{\"n\": 9007199254740993}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
	assert_null(inject("tslab", "{\"l\": [1, 123456789012345678901234567890]}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
	/* Python keeps every integer exactly */
	src = inject("python3", "{\"n\": 9007199254740993}", &rc);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(src, "n = 9007199254740993\n"));
	free(src);
}

static void params_bash(void **state)
{
	int rc;
	char *src = inject("bash", "{\"n\": 2, \"s\": \"it's $HOME\", \"a\": [\"x y\", 3], \"m\": {\"k\": \"v\"}}",
			   &rc);

	assert_int_equal(rc, 0);
	assert_string_equal(src, "# Parameters\nn=2\ns='it'\\''s $HOME'\na=('x y' 3)\n"
				 "declare -A m=(['k']='v')\n");
	free(src);
	assert_null(inject("bash", "{\"a\": [[1]]}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
}

static void params_python_unchanged(void **state)
{
	int rc;
	char *src = inject("python3", "{\"n\": 1, \"t\": true}", &rc);

	assert_int_equal(rc, 0);
	assert_string_equal(src, "# Parameters\nn = 1\nt = True\n");
	free(src);
}

static void unknown_kernel_refused(void **state)
{
	int rc;

	assert_null(inject("julia-1.9", "{}", &rc));
	assert_int_equal(rc, NBRUN_EINVAL);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_and_aliases),
		cmocka_unit_test(extensions),
		cmocka_unit_test(kernels),
		cmocka_unit_test(js_markers),
		cmocka_unit_test(params_r),
		cmocka_unit_test(params_js),
		cmocka_unit_test(params_numbers),
		cmocka_unit_test(params_bash),
		cmocka_unit_test(params_python_unchanged),
		cmocka_unit_test(unknown_kernel_refused),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
