/* SPDX-License-Identifier: MIT */
/* Unit tests for src/shared/text.c: ANSI stripping, UTF-8 sanitising, head+tail truncation, word lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "text.h"

/* Strip s through the streaming stripper fed in pieces of `step` bytes. */
static char *strip_pieces(const char *s, size_t step)
{
	struct text_ansi st;
	struct text_acc acc;
	size_t len = strlen(s);
	bool cut;
	char *r;

	text_acc_init(&acc, 1 << 20);
	text_ansi_init(&st);
	for (size_t i = 0; i < len; i += step)
		text_ansi_feed(&st, s + i, len - i < step ? len - i : step, &acc);
	r = text_acc_finish(&acc, NULL, &cut);
	assert_non_null(r);
	assert_false(cut);
	return r;
}

static void check_strip(const char *in, const char *want)
{
	char buf[1024];
	size_t n;

	/* In place, and streamed one byte at a time (sequences straddling pieces). */
	snprintf(buf, sizeof(buf), "%s", in);
	n = text_strip_ansi(buf, strlen(buf));
	assert_string_equal(buf, want);
	assert_int_equal(n, strlen(want));
	for (size_t step = 1; step <= 3; step++) {
		char *r = strip_pieces(in, step);
		assert_string_equal(r, want);
		free(r);
	}
}

static void test_strip_csi(void **state)
{
	check_strip("\x1b[0;31mred\x1b[0m plain", "red plain");
	check_strip("\x1b[38;5;196mX\x1b[K\x1b[2J\x1b[?25l", "X");
	check_strip("a\x1b[1;2;3;4;5;6;7;8;9;10mb", "ab");
	/* A CSI broken by a non-ASCII byte ends there; the byte stays. */
	check_strip("\x1b[31\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9");
}

static void test_strip_osc_and_others(void **state)
{
	check_strip("\x1b]0;window title\x07text", "text");
	check_strip("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link");
	check_strip("\x1bPdcs stuff\x1b\\after", "after");
	check_strip("\x1b" "7saved\x1b" "8", "saved");
	check_strip("\x1b(Bascii", "ascii");
	check_strip("\x1b=\x1b>keypad", "keypad");
	/* ESC inside an OSC that is not ST starts a new sequence. */
	check_strip("\x1b]0;t\x1b[1mbold", "bold");
}

static void test_strip_controls(void **state)
{
	check_strip("a\tb\nc\r\nd", "a\tb\nc\r\nd");
	check_strip("bell\x07 back\x08 nul-less\x01\x02\x7f end", "bell back nul-less end");
	check_strip("", "");
	check_strip("\x1b", "");
	check_strip("\x1b[", "");
	check_strip("\xe2\x98\x83 snowman", "\xe2\x98\x83 snowman");
	/* The C1 controls in UTF-8 act as their ESC forms: CSI, OSC (the
	 * title), the others dropped; U+00A0..U+00FF stay. */
	check_strip("a\xc2\x9b" "31mb", "ab");
	check_strip("x\xc2\x9d" "0;title\x07y", "xy");
	check_strip("n\xc2\x85l", "nl");
	check_strip("nb\xc2\xa0sp caf\xc3\xa9 \xc2\xb0" "C", "nb\xc2\xa0sp caf\xc3\xa9 \xc2\xb0" "C");
}

static void test_strip_unterminated_osc_is_bounded(void **state)
{
	/* A stray ESC ] must not swallow the rest of a long output. */
	size_t n = 20000;
	char *in = malloc(n + 3);
	char *out;

	assert_non_null(in);
	memcpy(in, "\x1b]", 2);
	memset(in + 2, 'x', n);
	in[n + 2] = '\0';
	out = strip_pieces(in, 1000);
	assert_true(strlen(out) > n - 5000);
	assert_true(strlen(out) < n);
	free(out);
	free(in);
}

static void test_sanitize(void **state)
{
	size_t n;
	char *s;

	s = text_utf8_sanitize("ok \xe2\x98\x83", 7, &n);
	assert_string_equal(s, "ok \xe2\x98\x83");
	assert_int_equal(n, 7);
	free(s);
	/* lone continuation, overlong, surrogate, truncated sequence, 0xff */
	s = text_utf8_sanitize("a\x80" "b\xc0\xaf" "c\xed\xa0\x80" "d\xe2\x98" "e\xff", 15, &n);
	assert_string_equal(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd"
			       "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
			       "d\xef\xbf\xbd\xef\xbf\xbd" "e\xef\xbf\xbd");
	assert_true(text_utf8_valid(s, n));
	free(s);
	/* above U+10FFFF */
	s = text_utf8_sanitize("\xf4\x90\x80\x80", 4, &n);
	assert_int_equal(n, 12);
	free(s);
	assert_false(text_utf8_valid("\xc3", 1));
	assert_true(text_utf8_valid("\xf0\x9f\x98\x80", 4));
}

static void test_truncate_short_untouched(void **state)
{
	bool cut = true;
	size_t n;
	char *s = text_truncate("hello", 5, 5, &n, &cut);

	assert_string_equal(s, "hello");
	assert_false(cut);
	free(s);
	s = text_truncate("", 0, 10, &n, &cut);
	assert_string_equal(s, "");
	assert_false(cut);
	free(s);
}

static void test_truncate_head_tail(void **state)
{
	char in[1000];
	bool cut = false;
	size_t n;
	char *s;

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (char)('a' + i % 26);
	s = text_truncate(in, sizeof(in), 100, &n, &cut);
	assert_true(cut);
	assert_memory_equal(s, in, 50);
	assert_memory_equal(s + n - 50, in + sizeof(in) - 50, 50);
	assert_non_null(strstr(s, "\n[... 900 bytes cut ...]\n"));
	assert_int_equal(n, 100 + strlen("\n[... 900 bytes cut ...]\n"));
	free(s);
}

static void test_truncate_utf8_boundaries(void **state)
{
	/* 300 snowmen (3 bytes each): no cut may split one. */
	char in[900];
	bool cut;
	size_t n;
	char *s;

	for (size_t i = 0; i < 300; i++)
		memcpy(in + 3 * i, "\xe2\x98\x83", 3);
	for (size_t max = 1; max < 40; max++) {
		s = text_truncate(in, sizeof(in), max, &n, &cut);
		assert_true(cut);
		assert_true(text_utf8_valid(s, n));
		assert_null(strstr(s, "\xef\xbf\xbd")); /* nothing needed replacing */
		/* kept bytes are whole characters, and kept + cut = all */
		{
			const char *note = strstr(s, "\n[... ");
			const char *tail;
			unsigned long dropped = 0;
			size_t head_len, tail_len;

			assert_non_null(note);
			assert_int_equal(sscanf(note, "\n[... %lu bytes cut", &dropped), 1);
			tail = strstr(note, "...]\n") + 5;
			head_len = (size_t)(note - s);
			tail_len = n - (size_t)(tail - s);
			assert_int_equal(head_len % 3, 0);
			assert_int_equal(tail_len % 3, 0);
			assert_int_equal(head_len + tail_len + dropped, sizeof(in));
			assert_true(head_len + tail_len <= max);
		}
		free(s);
	}
}

static void test_acc_many_pieces(void **state)
{
	struct text_acc acc;
	bool cut;
	size_t n;
	char *s;

	/* 100000 lines fed one by one: memory stays bounded, head and tail are right. */
	text_acc_init(&acc, 64);
	for (int i = 0; i < 100000; i++) {
		char line[32];
		int k = snprintf(line, sizeof(line), "line %d\n", i);
		text_acc_add(&acc, line, (size_t)k);
	}
	assert_true(acc.head_cap + acc.tail_cap == 64);
	s = text_acc_finish(&acc, &n, &cut);
	assert_true(cut);
	assert_true(!strncmp(s, "line 0\nline 1\nline 2\n", 21));
	assert_true(n > 32 && !strcmp(s + n - 11, "line 99999\n"));
	free(s);
}

static void test_acc_exact_fit(void **state)
{
	struct text_acc acc;
	bool cut = true;
	char *s;

	text_acc_init(&acc, 10);
	text_acc_add(&acc, "01234", 5);
	text_acc_add(&acc, "56789", 5);
	s = text_acc_finish(&acc, NULL, &cut);
	assert_string_equal(s, "0123456789");
	assert_false(cut);
	free(s);
	text_acc_init(&acc, 10);
	text_acc_add(&acc, "0123456789X", 11);
	s = text_acc_finish(&acc, NULL, &cut);
	assert_true(cut);
	assert_string_equal(s, "01234\n[... 1 bytes cut ...]\n6789X");
	free(s);
}

/* Whole words only: a prefix, suffix or middle of a word is not one. */
static void test_has_word(void **state)
{
	assert_true(text_has_word("python3 ir javascript", "python3"));
	assert_true(text_has_word("python3 ir javascript", "ir"));
	assert_true(text_has_word("python3 ir javascript", "javascript"));
	assert_true(text_has_word("r", "r"));
	assert_true(text_has_word("rust r", "r")); /* after a partial match */
	assert_false(text_has_word("python3 ir", "python"));
	assert_false(text_has_word("python3 ir", "i"));
	assert_false(text_has_word("python3 ir", "3 ir"));
	assert_false(text_has_word("python3 irkernel", "ir"));
	assert_false(text_has_word("", "r"));
	assert_false(text_has_word(NULL, "r"));
	assert_false(text_has_word("python3 ir", ""));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strip_csi),
		cmocka_unit_test(test_strip_osc_and_others),
		cmocka_unit_test(test_strip_controls),
		cmocka_unit_test(test_strip_unterminated_osc_is_bounded),
		cmocka_unit_test(test_sanitize),
		cmocka_unit_test(test_truncate_short_untouched),
		cmocka_unit_test(test_truncate_head_tail),
		cmocka_unit_test(test_truncate_utf8_boundaries),
		cmocka_unit_test(test_acc_many_pieces),
		cmocka_unit_test(test_acc_exact_fit),
		cmocka_unit_test(test_has_word),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
