/* SPDX-License-Identifier: MIT */
/*
 * report.html from a report whose names, parameters and errors are hostile:
 * every text escaped, links only relative, percent-encoded and to files of
 * the batch, no script, the policy in its head.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "batch.h"
#include "fdio.h"

/* a file's name may hold anything but '/' */
#define HOSTILE_NAME "x\"><img src=y onerror=alert(1)>"

static void touch(const char *dir, const char *rel)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	assert_int_equal(fd_write_file_atomic(AT_FDCWD, path, "x", 1, 0644), 0);
}

static char *page_of(const char *dir)
{
	char path[4096], *text = NULL;
	size_t len = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/report.html", dir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fd_read_all(fd, 1 << 20, &text, &len), 0);
	close(fd);
	return text;
}

static void hostile_report(void **state)
{
	char dir[] = "/tmp/nbrun-html-XXXXXX", sub[4096];
	json_t *report;
	char *page;

	assert_non_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/" HOSTILE_NAME, dir);
	assert_int_equal(mkdir(sub, 0755), 0);
	snprintf(sub, sizeof(sub), "%s/" HOSTILE_NAME "/images", dir);
	assert_int_equal(mkdir(sub, 0755), 0);
	touch(dir, HOSTILE_NAME "/notebook.html");
	touch(dir, HOSTILE_NAME "/result.json");
	touch(dir, HOSTILE_NAME "/images/cell1-1.png");
	report = json_pack(
		"{s:s, s:s, s:i, s:I, s:b, s:{s:I, s:I, s:I}, s:[{s:s, s:s, s:s, s:I, s:{s:s}, s:{s:{s:i, s:s, s:s, s:s}, s:[{s:s, s:s}, {s:s, s:s}]}},"
		" {s:s, s:s, s:s, s:I, s:{s:s, s:[{s:s, s:s}]}}]}",
		"nbrun", "0.1.0", "out_dir", "<b>dir</b>", "jobs", 1, "duration_ms", (json_int_t)61000, "interrupted", 0,
		"summary", "total", (json_int_t)2, "error", (json_int_t)1, "timeout", (json_int_t)1, "notebooks",
		"name", HOSTILE_NAME, "notebook", "<i>nb</i>.ipynb", "status", "error", "duration_ms", (json_int_t)1500,
		"params", "p", "</code><script>alert(2)</script>", "result", "error", "cell", 3, "name",
		"Value<Error>", "value", "<img src=x onerror=alert(3)>\nsecond line", "traceback",
		"----\nCell In[4], line 9\n----> 9 raise", "images", "path", "../../../etc/passwd", "mime", "image/png",
		"path", "images/cell1-1.png", "mime", "image/png",
		/* edited into the report: a name that leaves the directory gets no link */
		"name", "../evil", "notebook", "e.ipynb", "status", "timeout", "duration_ms", (json_int_t)2, "result",
		"message", "javascript:alert(4)", "images", "path", "images/cell1-1.png", "mime", "image/png");
	assert_non_null(report);
	assert_int_equal(batch_html_write(report, dir), 0);
	page = page_of(dir);
	assert_null(strstr(page, "<script"));
	assert_null(strstr(page, "<img src=x"));
	assert_null(strstr(page, "<img src=y"));
	assert_null(strstr(page, "<i>"));
	assert_null(strstr(page, "<b>dir"));
	assert_null(strstr(page, "evil/"));
	assert_null(strstr(page, "etc/passwd"));
	assert_null(strstr(page, "href=\"javascript"));
	assert_non_null(strstr(page, "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"));
	assert_non_null(strstr(page, "&lt;/code&gt;&lt;script&gt;alert(2)&lt;/script&gt;"));
	assert_non_null(strstr(page, "<b>Value&lt;Error&gt;</b>: &lt;img src=x onerror=alert(3)&gt;<div"));
	assert_null(strstr(page, "second line"));
	assert_non_null(strstr(page, "In [4], line 9"));
	assert_non_null(strstr(page, "javascript:alert(4)")); /* the timeout's message, as text */
	assert_non_null(strstr(page, "href=\"./x%22%3E%3Cimg%20src%3Dy%20onerror%3Dalert%281%29%3E/notebook.html\""));
	assert_non_null(strstr(page, "<img src=\"./x%22%3E%3Cimg%20src%3Dy%20onerror%3Dalert%281%29%3E/images/cell1-1.png\""));
	assert_non_null(strstr(page, "<iframe sandbox=\"\""));
	assert_non_null(strstr(page, "1 min 01 s"));
	free(page);
	json_decref(report);
	/* the directory is left in /tmp on failure, to look at */
	snprintf(sub, sizeof(sub), "rm -rf '%s'", dir);
	assert_int_equal(system(sub), 0);
}

static void error_lines(void **state)
{
	long count = -1;

	assert_int_equal(batch_error_line("Cell In[12], line 7\n", &count), 7);
	assert_int_equal(count, 12);
	assert_int_equal(batch_error_line("Cell In [2], line 1\n----> 1 x\nCell In [3], line 40\n", &count), 40);
	assert_int_equal(count, 3);
	assert_int_equal(batch_error_line("File /usr/lib/x.py:4, in f()\n", &count), 0);
	assert_int_equal(count, 0);
	assert_int_equal(batch_error_line("Cell In[x], line 7", &count), 0);
	assert_int_equal(batch_error_line("Cell In[1], line -3", &count), 0);
	assert_int_equal(batch_error_line("Cell In", &count), 0);
	assert_int_equal(batch_error_line("", &count), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hostile_report),
		cmocka_unit_test(error_lines),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
