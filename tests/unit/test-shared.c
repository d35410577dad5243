/* SPDX-License-Identifier: MIT */
/*
 * What src/shared/ has once for everybody: base64 decoding and random hex
 * ids (wire.c), the MIME table (mime.c), files read whole (fdio.c).
 */
#include <errno.h>
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

#include "fdio.h"
#include "mime.h"
#include "wire.h"

/* Every length from 0 to 300, through wire_base64() and back. */
static void base64_round_trip(void **state)
{
	unsigned char bytes[300];
	char *b64, *back;
	size_t n;

	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 151 + 7);
	for (size_t len = 0; len <= sizeof(bytes); len++) {
		b64 = wire_base64(bytes, len);
		assert_non_null(b64);
		assert_true(wire_base64_valid(b64, strlen(b64)));
		back = wire_base64_decode(b64, strlen(b64), &n);
		assert_non_null(back);
		assert_int_equal(n, len);
		assert_memory_equal(back, bytes, len);
		assert_int_equal(back[n], '\0');
		free(back);
		free(b64);
	}
}

/* libb64 skips what is not of the alphabet: the callers check first where it matters. */
static void base64_decode_skips(void **state)
{
	size_t n = 99;
	char *s = wire_base64_decode("aGVs\nbG8=", 9, &n);

	assert_non_null(s);
	assert_int_equal(n, 5);
	assert_string_equal(s, "hello");
	free(s);
	s = wire_base64_decode("", 0, &n);
	assert_non_null(s);
	assert_int_equal(n, 0);
	assert_string_equal(s, "");
	free(s);
}

/* The one naming rule: uploads, exports and a server's replies alike. */
static void name_rule(void **state)
{
	static const char *const ok[] = { "data.csv", "r\xc3\xa9sum\xc3\xa9.txt", "a b", "...", ".hidden",
					   "\xe2\x80\xaetxt.exe" /* shown escaped, not refused */ };
	static const char *const bad[] = { "", ".", "..", "a/b", "a\\b", "a\nb", "a\x7f",
					   "\xc2\x85" /* U+0085 NEL */, "a\xc2\x9b" "31m" /* C1 CSI */,
					   "\xff\xfe" /* not UTF-8 */, "\xc2" /* cut short */ };
	char long_name[300];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!wire_name_safe(ok[i], strlen(ok[i])))
			fail_msg("refused: %s", ok[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (wire_name_safe(bad[i], strlen(bad[i])))
			fail_msg("accepted bad name %zu", i);
	memset(long_name, 'a', sizeof(long_name));
	assert_true(wire_name_safe(long_name, 255));
	assert_false(wire_name_safe(long_name, 256));
	assert_true(wire_name_controls("x\xc2\x80", 3));
	assert_false(wire_name_controls("x\xc3\x80", 3));
}

static void random_hex(void **state)
{
	char a[129], b[129];

	memset(a, 'x', sizeof(a));
	assert_int_equal(wire_random_hex(a, 8), 0);
	assert_int_equal(strlen(a), 16);
	assert_int_equal(strspn(a, "0123456789abcdef"), 16);
	assert_true(wire_run_id_valid(a));
	assert_int_equal(wire_random_hex(b, 8), 0);
	assert_string_not_equal(a, b);
	assert_int_equal(wire_random_hex(a, 64), 0);
	assert_int_equal(strlen(a), 128);
	assert_int_equal(wire_random_hex(a, 0), 0);
	assert_string_equal(a, "");
	assert_int_equal(wire_random_hex(a, 65), -EINVAL);
}

static void mime_by_name(void **state)
{
	static const char *const by_name[][2] = {
		{ "data.csv", "text/csv" },
		{ "images/cell1-1.png", "image/png" },
		{ "PHOTO.JPEG", "image/jpeg" },
		{ "a.tar.zip", "application/zip" },
		{ ".csv", "text/csv" },
		{ "README", "application/octet-stream" },
		{ "dir.d/README", "application/octet-stream" },
		{ "x.", "application/octet-stream" },
	};
	static const char *const types[] = { "text/csv", "text/plain", "image/png", "image/jpeg",
					     "image/gif", "image/svg+xml", "application/pdf",
					     "application/x-ipynb+json" };
	char name[32];

	for (size_t i = 0; i < sizeof(by_name) / sizeof(by_name[0]); i++)
		assert_string_equal(mime_of_name(by_name[i][0]), by_name[i][1]);
	/* a type's extension names a file of that type; a type with two has its usual one */
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		snprintf(name, sizeof(name), "f.%s", mime_extension(types[i]));
		assert_string_equal(mime_of_name(name), types[i]);
	}
	assert_string_equal(mime_extension("image/jpeg"), "jpg");
	assert_string_equal(mime_extension("text/plain"), "txt");
	assert_null(mime_extension("image/x-unknown"));
}

static char dir[4096];

static int dir_setup(void **state)
{
	const char *base = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/nbrun-shared-XXXXXX", base && *base ? base : "/tmp");
	return mkdtemp(dir) ? 0 : -1;
}

static int dir_teardown(void **state)
{
	static const char *const names[] = { "file", "fifo", "link", "sub" };
	char path[4200];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
		rmdir(path);
	}
	return rmdir(dir);
}

static void read_file(void **state)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char *out = (char *)0x1;
	size_t len = 99;

	assert_true(dfd >= 0);
	assert_int_equal(fd_write_file_atomic(dfd, "file", "0123456789", 10, 0644), 0);
	assert_int_equal(mkfifoat(dfd, "fifo", 0600), 0);
	assert_int_equal(symlinkat("file", dfd, "link"), 0);
	assert_int_equal(mkdirat(dfd, "sub", 0755), 0);

	assert_int_equal(fd_read_file(dfd, "file", FD_READ_REGULAR | FD_READ_NOFOLLOW, 10, &out, &len), 0);
	assert_int_equal(len, 10);
	assert_string_equal(out, "0123456789");
	free(out);
	/* one byte over the cap */
	assert_int_equal(fd_read_file(dfd, "file", 0, 9, &out, &len), -EFBIG);
	assert_null(out);
	assert_int_equal(len, 0);
	assert_int_equal(fd_read_file(dfd, "missing", 0, 10, &out, &len), -ENOENT);
	/* not waiting for a writer: refused at once */
	assert_int_equal(fd_read_file(dfd, "fifo", FD_READ_REGULAR, 10, &out, &len), -EINVAL);
	assert_int_equal(fd_read_file(dfd, "sub", FD_READ_REGULAR, 10, &out, &len), -EINVAL);
	assert_int_equal(fd_read_file(dfd, "link", FD_READ_NOFOLLOW, 10, &out, &len), -ELOOP);
	assert_int_equal(fd_read_file(dfd, "link", FD_READ_REGULAR, 10, &out, &len), 0);
	assert_string_equal(out, "0123456789");
	free(out);
	close(dfd);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(base64_round_trip),
		cmocka_unit_test(base64_decode_skips),
		cmocka_unit_test(name_rule),
		cmocka_unit_test(random_hex),
		cmocka_unit_test(mime_by_name),
		cmocka_unit_test_setup_teardown(read_file, dir_setup, dir_teardown),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
