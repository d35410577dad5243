/* SPDX-License-Identifier: MIT */
/* Text helpers for untrusted strings: UTF-8, ANSI escapes, bounded head+tail text. */
#ifndef NBRUN_TEXT_H
#define NBRUN_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
bool text_utf8_valid(const char *s, size_t len);

/* True when word (not empty) is one of the space-separated words of list
 * (NULL: none); "py" is not in "python3 r". */
bool text_has_word(const char *list, const char *word);

/*
 * Copy s[0..len) replacing every byte that is not part of well-formed UTF-8
 * with U+FFFD. Returns a NUL-terminated malloc'd string (length in *outlen
 * when not NULL), or NULL when out of memory.
 */
char *text_utf8_sanitize(const char *s, size_t len, size_t *outlen);

/*
 * Head+tail accumulator: keeps the first and last bytes of a text of any
 * length in memory bounded by max, and counts what fell in between.
 */
struct text_acc {
	char *head;
	size_t head_len, head_alloc, head_cap;
	char *tail;          /* ring of tail_cap bytes, allocated once head is full */
	size_t tail_cap, tail_pos;
	uint64_t total;      /* bytes fed so far */
	int err;             /* sticky -ENOMEM */
};

void text_acc_init(struct text_acc *a, size_t max);
void text_acc_add(struct text_acc *a, const char *s, size_t n);
/*
 * Produce head + "\n[... N bytes cut ...]\n" + tail (the note only when
 * something was cut), cut on UTF-8 boundaries and sanitised. *cut tells
 * whether anything was dropped. Returns a malloc'd NUL-terminated string
 * (length in *outlen when not NULL) or NULL when out of memory. The
 * accumulator is released either way.
 */
char *text_acc_finish(struct text_acc *a, size_t *outlen, bool *cut);
void text_acc_free(struct text_acc *a);

/*
 * ANSI escape stripper, fed in pieces (a sequence may straddle pieces). It
 * removes CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC strings (ended by BEL or
 * ESC \), two-byte and other ESC sequences, and C0 controls other than
 * tab, newline and carriage return. An unterminated string sequence stops
 * swallowing text after a few KiB so that a stray ESC ] cannot hide the rest
 * of an output.
 */
struct text_ansi {
	int state;
	size_t seqlen;
};

void text_ansi_init(struct text_ansi *st);
void text_ansi_feed(struct text_ansi *st, const char *s, size_t n, struct text_acc *out);

/* Strip ANSI escapes in place; s has room for len + 1 bytes and is NUL-terminated at the new length returned. */
size_t text_strip_ansi(char *s, size_t len);

/*
 * Bound s[0..len) to max bytes of head+tail (see text_acc_finish). Returns a
 * malloc'd NUL-terminated string or NULL when out of memory.
 */
char *text_truncate(const char *s, size_t len, size_t max, size_t *outlen, bool *cut);

#endif
