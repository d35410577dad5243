/* SPDX-License-Identifier: MIT */
/*
 * The result document's builders (result.c) and the atomic file writer
 * under result.json (src/shared/fdio.c): the skipped list follows the run's
 * max_files, every failure is an NBRUN_E* code (failures provoked by a
 * jansson allocator that fails the Nth allocation), and a write that fails
 * half-way leaves the old file whole and no temporary file behind (the
 * failure provoked with RLIMIT_FSIZE, which needs no privilege).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "fdio.h"
#include "jsonx.h"
#include "nbrun-private.h"

/* ---- a jansson allocator that fails the Nth allocation -------------------------- */

static long alloc_left = -1; /* allocations still allowed; -1: no limit */

static void *failing_malloc(size_t n)
{
	if (alloc_left == 0)
		return NULL;
	if (alloc_left > 0)
		alloc_left--;
	return malloc(n);
}

static void fail_after(long n)
{
	alloc_left = n;
	json_set_alloc_funcs(failing_malloc, free);
}

static void alloc_normal(void)
{
	alloc_left = -1;
	json_set_alloc_funcs(malloc, free);
}

static struct nbrun_result *result_ok(void)
{
	struct nbrun_result *r = NULL;

	assert_int_equal(nbrun__result_new(&r, "run1"), 0);
	assert_non_null(r);
	return r;
}

static json_t *skipped(const struct nbrun_result *r)
{
	return json_object_get(r->doc, "skipped");
}

static void skip_n(struct nbrun_result *r, size_t n)
{
	char path[32];

	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "files/f%zu", i);
		assert_int_equal(nbrun__result_skip(r, path, "over the export cap"), 0);
	}
}

/* ---- the skipped list ------------------------------------------------------------ */

/* By default the list keeps NBRUN_DEFAULT_MAX_FILES entries and one that counts the rest. */
static void skip_cap_default(void **state)
{
	struct nbrun_result *r = result_ok();
	json_t *last;

	skip_n(r, NBRUN_DEFAULT_MAX_FILES + 7);
	assert_int_equal(json_array_size(skipped(r)), NBRUN_DEFAULT_MAX_FILES + 1);
	last = json_array_get(skipped(r), NBRUN_DEFAULT_MAX_FILES);
	assert_string_equal(json_string_value(json_object_get(last, "path")), "...");
	assert_int_equal(json_integer_value(json_object_get(last, "count")), 7);
	nbrun_result_free(r);
}

/* A run that exports more files than the default lists every one it skipped. */
static void skip_cap_follows_larger_max_files(void **state)
{
	struct nbrun_result *r = result_ok();
	size_t n = NBRUN_DEFAULT_MAX_FILES * 2 + 5;

	r->max_skipped = n + 10;
	skip_n(r, n);
	assert_int_equal(json_array_size(skipped(r)), n);
	assert_string_equal(json_string_value(json_object_get(json_array_get(skipped(r), n - 1), "path")),
			    "files/f2004");
	assert_null(json_object_get(json_array_get(skipped(r), n - 1), "count"));
	nbrun_result_free(r);
}

/* And one that exports fewer keeps the list that short. */
static void skip_cap_follows_smaller_max_files(void **state)
{
	struct nbrun_result *r = result_ok();
	json_t *last;

	r->max_skipped = 3;
	skip_n(r, 10);
	assert_int_equal(json_array_size(skipped(r)), 4);
	last = json_array_get(skipped(r), 3);
	assert_string_equal(json_string_value(json_object_get(last, "path")), "...");
	assert_int_equal(json_integer_value(json_object_get(last, "count")), 7);
	nbrun_result_free(r);
}

/* An entry with its own count (outputs over their cap) just before the cap is not the summary. */
static void skip_cap_counts_in_summary_only(void **state)
{
	struct nbrun_result *r = result_ok();
	json_t *arr;

	r->max_skipped = 2;
	skip_n(r, 1);
	assert_int_equal(nbrun__result_skip(r, "outputs", "more than 5 outputs"), 0);
	arr = skipped(r);
	json_object_set_new(json_array_get(arr, 1), "count", json_integer(40));
	skip_n(r, 2);
	assert_int_equal(json_array_size(arr), 3);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(arr, 1), "count")), 40);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(arr, 2), "count")), 2);
	nbrun_result_free(r);
}

/* A container's path that is not UTF-8 is named so; a reason that is not is the caller's mistake. */
static void skip_bad_utf8(void **state)
{
	struct nbrun_result *r = result_ok();

	assert_int_equal(nbrun__result_skip(r, "files/\xff\xfe", "symlink"), 0);
	assert_string_equal(json_string_value(json_object_get(json_array_get(skipped(r), 0), "path")),
			    "(name not valid UTF-8)");
	assert_int_equal(nbrun__result_skip(r, "files/a", "bad \xc3"), NBRUN_EINVAL);
	assert_int_equal(json_array_size(skipped(r)), 1);
	json_object_set_new(r->doc, "skipped", json_null());
	assert_int_equal(nbrun__result_skip(r, "files/a", "symlink"), NBRUN_EINVAL);
	nbrun_result_free(r);
}

/* ---- every failure is an NBRUN_E* code -------------------------------------------- */

/* Fail each allocation in turn: the call returns 0 or NBRUN_ENOMEM, never jansson's -1. */
static void skip_out_of_memory(void **state)
{
	for (size_t fill = 0; fill < 3; fill++) {
		bool succeeded = false;

		/* fill 0: below the cap; 1: the summary entry is made (jansson's
		 * array of 8 must grow for it); 2: its count goes up */
		for (long n = 0; n < 200 && !succeeded; n++) {
			struct nbrun_result *r = result_ok();
			int rc;

			r->max_skipped = 8;
			skip_n(r, fill == 0 ? 0 : fill + 7);
			fail_after(n);
			rc = nbrun__result_skip(r, "files/x", "over the export cap");
			alloc_normal();
			if (rc != 0 && rc != NBRUN_ENOMEM)
				fail_msg("fill %zu, allocation %ld failed: %d", fill, n, rc);
			succeeded = rc == 0;
			nbrun_result_free(r);
		}
		assert_true(succeeded);
	}
}

static void new_out_of_memory(void **state)
{
	bool succeeded = false;

	for (long n = 0; n < 500 && !succeeded; n++) {
		struct nbrun_result *r = (void *)0x1;
		int rc;

		fail_after(n);
		rc = nbrun__result_new(&r, "run1");
		alloc_normal();
		if (rc != 0 && rc != NBRUN_ENOMEM)
			fail_msg("allocation %ld failed: %d", n, rc);
		assert_true(rc == 0 ? r != NULL : r == NULL);
		succeeded = rc == 0;
		nbrun_result_free(r);
	}
	assert_true(succeeded);
}

/* ---- atomic writes ------------------------------------------------------------------ */

struct dir {
	char path[64];
	int fd;
};

static void dir_make(struct dir *d)
{
	snprintf(d->path, sizeof(d->path), "/tmp/nbrun-test-result-XXXXXX");
	assert_non_null(mkdtemp(d->path));
	d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(d->fd >= 0);
}

static void dir_remove(struct dir *d)
{
	DIR *dd = opendir(d->path);
	struct dirent *de;

	while (dd && (de = readdir(dd)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(d->fd, de->d_name, 0);
	if (dd)
		closedir(dd);
	close(d->fd);
	rmdir(d->path);
}

/* The names in the directory, sorted, joined by spaces. */
static void dir_list(const struct dir *d, char *out, size_t len)
{
	struct dirent **names = NULL;
	int n = scandir(d->path, &names, NULL, alphasort);

	assert_true(n >= 0);
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, ".."))
			snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? " " : "",
				 names[i]->d_name);
		free(names[i]);
	}
	free(names);
}

static void file_text(const struct dir *d, const char *name, char *out, size_t len)
{
	int fd = openat(d->fd, name, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, out, len - 1);
	assert_true(n >= 0);
	out[n] = '\0';
	close(fd);
}

/* Writes beyond this many bytes fail with EFBIG (SIGXFSZ ignored). */
static void limit_file_size(rlim_t bytes, struct rlimit *old)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_FSIZE, old), 0);
	rl = *old;
	rl.rlim_cur = bytes;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

static void atomic_replaces(void **state)
{
	struct dir d;
	char names[256], text[64];

	dir_make(&d);
	assert_int_equal(fd_write_file_atomic(d.fd, "doc.json", "old\n", 4, 0644), 0);
	assert_int_equal(fd_write_file_atomic(d.fd, "doc.json", "new\n", 4, 0644), 0);
	file_text(&d, "doc.json", text, sizeof(text));
	assert_string_equal(text, "new\n");
	dir_list(&d, names, sizeof(names));
	assert_string_equal(names, "doc.json");
	/* a stale temporary file of a crashed writer is no obstacle, and goes */
	assert_int_equal(symlinkat("/etc/passwd", d.fd, "doc.json.tmp"), 0);
	assert_int_equal(fd_write_file_atomic(d.fd, "doc.json", "newer\n", 6, 0644), 0);
	file_text(&d, "doc.json", text, sizeof(text));
	assert_string_equal(text, "newer\n");
	dir_list(&d, names, sizeof(names));
	assert_string_equal(names, "doc.json");
	dir_remove(&d);
}

/* The shared JSON writer: indented, a final newline, nothing left beside it. */
static void json_file_written_whole(void **state)
{
	struct dir d;
	char names[256], text[64];
	json_t *doc = json_pack("{s:i}", "a", 1);

	dir_make(&d);
	assert_int_equal(jsonx_write_file(d.fd, "result.json", doc), 0);
	file_text(&d, "result.json", text, sizeof(text));
	assert_string_equal(text, "{\n  \"a\": 1\n}\n");
	dir_list(&d, names, sizeof(names));
	assert_string_equal(names, "result.json");
	json_decref(doc);
	dir_remove(&d);
}

/* fd_read_all: the whole file, NUL-terminated; -EFBIG past its cap; empty is "". */
static void read_all_caps(void **state)
{
	struct dir d;
	char *out = NULL;
	size_t len = 99;
	int fd;

	dir_make(&d);
	assert_int_equal(fd_write_file_atomic(d.fd, "f", "hello", 5, 0644), 0);
	assert_int_equal(fd_write_file_atomic(d.fd, "empty", "", 0, 0644), 0);
	fd = openat(d.fd, "f", O_RDONLY);
	assert_int_equal(fd_read_all(fd, 5, &out, &len), 0);
	assert_int_equal(len, 5);
	assert_string_equal(out, "hello");
	free(out);
	close(fd);
	fd = openat(d.fd, "f", O_RDONLY);
	assert_int_equal(fd_read_all(fd, 4, &out, &len), -EFBIG);
	assert_null(out);
	close(fd);
	fd = openat(d.fd, "empty", O_RDONLY);
	assert_int_equal(fd_read_all(fd, 4, &out, &len), 0);
	assert_int_equal(len, 0);
	assert_string_equal(out, "");
	free(out);
	close(fd);
	assert_int_equal(fd_read_all(-1, 4, &out, &len), -EBADF);
	dir_remove(&d);
}

/* A write that fails half-way leaves the old file whole and no temporary file. */
static void atomic_failed_write_keeps_old(void **state)
{
	struct dir d;
	struct rlimit old;
	char big[8192], names[256], text[64];
	int rc;

	dir_make(&d);
	memset(big, 'x', sizeof(big));
	assert_int_equal(fd_write_file_atomic(d.fd, "doc.json", "old\n", 4, 0644), 0);
	limit_file_size(4096, &old);
	rc = fd_write_file_atomic(d.fd, "doc.json", big, sizeof(big), 0644);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	assert_int_equal(rc, -EFBIG);
	file_text(&d, "doc.json", text, sizeof(text));
	assert_string_equal(text, "old\n");
	dir_list(&d, names, sizeof(names));
	assert_string_equal(names, "doc.json");
	/* the streaming form: abort removes the temporary file too */
	{
		struct fd_atomic a;
		assert_true(fd_atomic_open(&a, d.fd, "doc.json", 0644) >= 0);
		assert_int_equal(fd_write_all(a.fd, "half", 4), 0);
		fd_atomic_abort(&a);
	}
	file_text(&d, "doc.json", text, sizeof(text));
	assert_string_equal(text, "old\n");
	dir_list(&d, names, sizeof(names));
	assert_string_equal(names, "doc.json");
	dir_remove(&d);
}

/* result.json the same way, with the library's code and message. */
static void result_write_failure(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun_result *r = result_ok();
	struct dir d;
	struct rlimit old;
	char names[256], text[4096];
	json_t *doc;
	int rc;

	dir_make(&d);
	assert_int_equal(nbrun__result_write(&ctx, r, d.fd), 0);
	file_text(&d, "result.json", text, sizeof(text));
	doc = json_loads(text, 0, NULL);
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "run_id")), "run1");
	json_decref(doc);
	/* a bigger document that no longer fits */
	json_object_set_new(r->doc, "stdout", json_string("more output than the limit allows ........"));
	limit_file_size(strlen(text) + 8, &old);
	rc = nbrun__result_write(&ctx, r, d.fd);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	assert_int_equal(rc, NBRUN_EIO);
	if (!strstr(ctx.errmsg, "cannot write result.json: File too large"))
		fail_msg("message: %s", ctx.errmsg);
	file_text(&d, "result.json", text, sizeof(text));
	doc = json_loads(text, 0, NULL);
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "stdout")), "");
	json_decref(doc);
	dir_list(&d, names, sizeof(names));
	assert_string_equal(names, "result.json");
	assert_int_equal(nbrun__write_error(ENOSPC), NBRUN_ENOSPC);
	assert_int_equal(nbrun__write_error(-EDQUOT), NBRUN_ENOSPC);
	assert_int_equal(nbrun__write_error(EFBIG), NBRUN_EIO);
	dir_remove(&d);
	nbrun_result_free(r);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(skip_cap_default),
		cmocka_unit_test(skip_cap_follows_larger_max_files),
		cmocka_unit_test(skip_cap_follows_smaller_max_files),
		cmocka_unit_test(skip_cap_counts_in_summary_only),
		cmocka_unit_test(skip_bad_utf8),
		cmocka_unit_test(skip_out_of_memory),
		cmocka_unit_test(new_out_of_memory),
		cmocka_unit_test(atomic_replaces),
		cmocka_unit_test(json_file_written_whole),
		cmocka_unit_test(read_all_caps),
		cmocka_unit_test(atomic_failed_write_keeps_old),
		cmocka_unit_test(result_write_failure),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
