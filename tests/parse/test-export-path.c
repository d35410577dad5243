/* SPDX-License-Identifier: MIT */
/* Unit tests for path validation and confined file creation (src/lib/export.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nbrun-private.h"

static void reject(const char *path, const char *want)
{
	const char *why = nbrun__path_reject_reason(path);

	if (!why || strcmp(why, want))
		fail_msg("'%.60s': expected \"%s\", got \"%s\"", path, want, why ? why : "(accepted)");
}

static void test_accepts_plain_paths(void **state)
{
	assert_null(nbrun__path_reject_reason("images/cell1-1.png"));
	assert_null(nbrun__path_reject_reason("a/b/c.txt"));
	assert_null(nbrun__path_reject_reason("./a"));
	assert_null(nbrun__path_reject_reason("a//b"));
	assert_null(nbrun__path_reject_reason("dir/"));
	assert_null(nbrun__path_reject_reason("\xe2\x98\x83.txt"));
	assert_null(nbrun__path_reject_reason("..."));
	assert_null(nbrun__path_reject_reason("a..b"));
}

static void test_rejects_dotdot_and_absolute(void **state)
{
	reject("..", "'..' in path");
	reject("../x", "'..' in path");
	reject("a/../../b", "'..' in path");
	reject("a/..", "'..' in path");
	reject("/etc/passwd", "absolute path");
	reject("/", "absolute path");
	reject("", "empty name");
	reject(".", "empty name");
	reject("./", "empty name");
}

static void test_rejects_control_characters(void **state)
{
	reject("a\nb", "control character in name");
	reject("x/\x1b[31mred", "control character in name");
	reject("tab\there", "control character in name");
	reject("del\x7f", "control character in name");
	reject("\x01", "control character in name");
	/* C1 like C0: U+009B is a CSI to many terminals */
	reject("\xc2\x9b" "31mX", "control character in name");
	reject("dir/a\xc2\x80", "control character in name");
	reject("\xc2\x9f", "control character in name");
}

static void test_rejects_long_and_deep(void **state)
{
	char *p = malloc(4001);
	char name[300];

	assert_non_null(p);
	memset(p, 'a', 4000);
	p[4000] = '\0';
	reject(p, "path too long");
	/* 200 components of one letter: 399 bytes, but too deep */
	for (int i = 0; i < 200; i++) {
		p[2 * i] = 'a';
		p[2 * i + 1] = '/';
	}
	p[399] = '\0';
	reject(p, "too deep");
	memset(name, 'n', 256);
	name[256] = '\0';
	reject(name, "name too long");
	name[255] = '\0';
	assert_null(nbrun__path_reject_reason(name));
	free(p);
}

static void test_rejects_bad_utf8(void **state)
{
	reject("caf\xe9.txt", "name is not valid UTF-8");
	reject("\xc0\xaf", "name is not valid UTF-8");
	reject("x/\xed\xa0\x80", "name is not valid UTF-8");
}

static void test_export_open_confined(void **state)
{
	char dir[] = "/tmp/nbrun-test-export-XXXXXX", outside[] = "/tmp/nbrun-test-outside-XXXXXX";
	char path[256];
	struct stat st;
	int dirfd, fd;

	assert_non_null(mkdtemp(dir));
	assert_non_null(mkdtemp(outside));
	dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_true(dirfd >= 0);

	fd = nbrun__export_open(dirfd, "images/cell1-1.png", 0644);
	assert_true(fd >= 0);
	assert_int_equal(fd_write_all(fd, "abc", 3), 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/images/cell1-1.png", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 3);
	/* never replaces what exists */
	assert_int_equal(nbrun__export_open(dirfd, "images/cell1-1.png", 0644), -EEXIST);
	/* rejected paths never reach the file system */
	assert_int_equal(nbrun__export_open(dirfd, "../escape", 0644), -EINVAL);
	assert_int_equal(nbrun__export_open(dirfd, "/tmp/escape", 0644), -EINVAL);
	/* a symlink inside the directory is not followed out of it */
	assert_int_equal(symlinkat(outside, dirfd, "link"), 0);
	fd = nbrun__export_open(dirfd, "link/x.png", 0644);
	assert_true(fd < 0);
	fd = nbrun__export_open(dirfd, "link", 0644);
	assert_true(fd < 0);
	snprintf(path, sizeof(path), "%s/x.png", outside);
	assert_int_equal(stat(path, &st), -1);
	/* mkdirs makes real directories, refusing the symlink too */
	fd = nbrun__export_mkdirs(dirfd, "images");
	assert_true(fd >= 0);
	close(fd);
	assert_true(nbrun__export_mkdirs(dirfd, "link/sub") < 0);
	snprintf(path, sizeof(path), "%s/sub", outside);
	assert_int_equal(stat(path, &st), -1);

	unlinkat(dirfd, "link", 0);
	unlinkat(dirfd, "images/cell1-1.png", 0);
	unlinkat(dirfd, "images", AT_REMOVEDIR);
	close(dirfd);
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(rmdir(outside), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepts_plain_paths),
		cmocka_unit_test(test_rejects_dotdot_and_absolute),
		cmocka_unit_test(test_rejects_control_characters),
		cmocka_unit_test(test_rejects_long_and_deep),
		cmocka_unit_test(test_rejects_bad_utf8),
		cmocka_unit_test(test_export_open_confined),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
