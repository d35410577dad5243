/* SPDX-License-Identifier: MIT */
/* Text helpers for untrusted strings. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

/* Length of the well-formed UTF-8 sequence at s[i], or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t len, size_t i)
{
	unsigned char c = s[i];
	size_t n;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 1;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 2;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 3;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (len - i <= n)
		return 0;
	for (size_t k = 1; k <= n; k++) {
		if ((s[i + k] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i + k] & 0x3f);
	}
	if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n + 1;
}

bool text_utf8_valid(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < len) {
		size_t n = utf8_seq(s, len, i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

bool text_has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	if (!list || !n)
		return false;
	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return true;
	return false;
}

char *text_utf8_sanitize(const char *str, size_t len, size_t *outlen)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, o = 0, bad = 0;
	char *out;

	for (i = 0; i < len;) {
		size_t n = utf8_seq(s, len, i);
		if (!n) {
			bad++;
			n = 1;
		}
		i += n;
	}
	/* Each bad byte grows by two (one byte becomes three); check before allocating. */
	if (bad > (SIZE_MAX - len - 1) / 2)
		return NULL;
	out = malloc(len + 2 * bad + 1);
	if (!out)
		return NULL;
	for (i = 0; i < len;) {
		size_t n = utf8_seq(s, len, i);
		if (!n) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(out + o, s + i, n);
		o += n;
		i += n;
	}
	out[o] = '\0';
	if (outlen)
		*outlen = o;
	return out;
}

/* ---- head+tail accumulator ------------------------------------------------ */

void text_acc_init(struct text_acc *a, size_t max)
{
	memset(a, 0, sizeof(*a));
	a->head_cap = max - max / 2;
	a->tail_cap = max / 2;
}

void text_acc_free(struct text_acc *a)
{
	free(a->head);
	free(a->tail);
	a->head = a->tail = NULL;
	a->head_len = a->head_alloc = a->tail_pos = 0;
}

static int acc_head_append(struct text_acc *a, const char *s, size_t n)
{
	/* The head grows with what is fed, never beyond head_cap. */
	size_t want = a->head_len + n, alloc;
	char *p;

	if (want > a->head_cap)
		return -E2BIG;
	if (want > a->head_alloc) {
		alloc = a->head_alloc ? a->head_alloc : 256;
		while (alloc < want && alloc <= a->head_cap / 2)
			alloc *= 2;
		if (alloc < want || alloc > a->head_cap)
			alloc = a->head_cap;
		p = realloc(a->head, alloc);
		if (!p)
			return -ENOMEM;
		a->head = p;
		a->head_alloc = alloc;
	}
	memcpy(a->head + a->head_len, s, n);
	a->head_len += n;
	return 0;
}

void text_acc_add(struct text_acc *a, const char *s, size_t n)
{
	size_t room, take;

	a->total += n;
	if (a->err || n == 0)
		return;
	room = a->head_cap - a->head_len;
	take = n < room ? n : room;
	if (take) {
		if (acc_head_append(a, s, take) < 0) {
			a->err = -ENOMEM;
			return;
		}
		s += take;
		n -= take;
	}
	if (n == 0 || a->tail_cap == 0)
		return;
	if (!a->tail) {
		a->tail = malloc(a->tail_cap);
		if (!a->tail) {
			a->err = -ENOMEM;
			return;
		}
		a->tail_pos = 0;
	}
	if (n >= a->tail_cap) {
		memcpy(a->tail, s + n - a->tail_cap, a->tail_cap);
		a->tail_pos = 0;
		return;
	}
	while (n) {
		size_t chunk = a->tail_cap - a->tail_pos;
		if (chunk > n)
			chunk = n;
		memcpy(a->tail + a->tail_pos, s, chunk);
		a->tail_pos = (a->tail_pos + chunk) % a->tail_cap;
		s += chunk;
		n -= chunk;
	}
}

/* Largest h <= len such that s[0..h) does not end inside a multi-byte sequence. */
static size_t utf8_head_boundary(const unsigned char *s, size_t len)
{
	size_t i = len, back = 0;

	while (i > 0 && back < 4 && (s[i - 1] & 0xc0) == 0x80) {
		i--;
		back++;
	}
	if (i == 0)
		return len;
	i--; /* s[i] is a lead or ASCII byte */
	if (s[i] >= 0xc0) {
		size_t need = s[i] >= 0xf0 ? 4 : s[i] >= 0xe0 ? 3 : 2;
		if (i + need > len)
			return i;
	}
	return len;
}

char *text_acc_finish(struct text_acc *a, size_t *outlen, bool *cut)
{
	uint64_t stored;
	size_t tail_len, h, t0 = 0, len = 0;
	char *lin = NULL, *res = NULL;
	char note[64];
	int nl = 0;

	*cut = false;
	if (a->err)
		goto out;
	stored = a->total - a->head_len;
	tail_len = stored < a->tail_cap ? (size_t)stored : a->tail_cap;
	lin = malloc(a->head_len + tail_len + sizeof(note) + 1);
	if (!lin)
		goto out;
	h = a->head_len;
	if (a->total > (uint64_t)a->head_len + tail_len) {
		uint64_t dropped;
		/* Ring is full here: oldest byte at tail_pos. */
		char *t = lin + a->head_len + sizeof(note);
		if (tail_len) {
			memcpy(t, a->tail + a->tail_pos, a->tail_cap - a->tail_pos);
			memcpy(t + a->tail_cap - a->tail_pos, a->tail, a->tail_pos);
		}
		h = utf8_head_boundary((const unsigned char *)a->head, a->head_len);
		while (t0 < tail_len && t0 < 3 && ((unsigned char)t[t0] & 0xc0) == 0x80)
			t0++;
		dropped = a->total - h - (tail_len - t0);
		nl = snprintf(note, sizeof(note), "\n[... %" PRIu64 " bytes cut ...]\n", dropped);
		if (h)
			memcpy(lin, a->head, h);
		memcpy(lin + h, note, (size_t)nl);
		memmove(lin + h + (size_t)nl, t + t0, tail_len - t0);
		len = h + (size_t)nl + tail_len - t0;
		*cut = true;
	} else {
		if (h)
			memcpy(lin, a->head, h);
		if (tail_len)
			memcpy(lin + h, a->tail, tail_len);
		len = h + tail_len;
	}
	res = text_utf8_sanitize(lin, len, outlen);
out:
	free(lin);
	text_acc_free(a);
	return res;
}

/* ---- ANSI escapes ---------------------------------------------------------- */

enum {
	ANSI_TEXT = 0,
	ANSI_ESC,    /* after ESC */
	ANSI_CSI,    /* after ESC [ */
	ANSI_INTER,  /* after ESC and intermediate bytes */
	ANSI_STR,    /* OSC, DCS, SOS, PM, APC body */
	ANSI_STR_ESC, /* ESC inside a string: maybe ST */
	ANSI_C2      /* after 0xC2, the lead byte of U+0080..U+00FF: maybe a C1 control */
};

/* Longest sequences honoured before giving up and treating the rest as text. */
#define ANSI_MAX_CSI 256
#define ANSI_MAX_STR 4096

void text_ansi_init(struct text_ansi *st)
{
	st->state = ANSI_TEXT;
	st->seqlen = 0;
}

static bool ansi_plain(unsigned char c)
{
	return c >= 0x20 ? c != 0x7f : (c == '\t' || c == '\n' || c == '\r');
}

void text_ansi_feed(struct text_ansi *st, const char *str, size_t n, struct text_acc *out)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];

		switch (st->state) {
		case ANSI_TEXT: {
			size_t j = i;
			while (j < n && ansi_plain(s[j]) && s[j] != 0xc2)
				j++;
			if (j > i)
				text_acc_add(out, str + i, j - i);
			if (j < n) {
				if (s[j] == 0x1b) {
					st->state = ANSI_ESC;
					st->seqlen = 0;
				} else if (s[j] == 0xc2) {
					st->state = ANSI_C2; /* decided by the next byte, in this piece or the next */
				}
				/* other controls are dropped */
				j++;
			}
			i = j;
			continue;
		}
		case ANSI_C2:
			/* The C1 controls in UTF-8 (0xC2 0x80..0x9F) act as their 7-bit
			 * ESC forms do: CSI, OSC, DCS, SOS, PM and APC begin sequences
			 * that go with them; the others are dropped. */
			st->seqlen = 0;
			if (c == 0x9b) {
				st->state = ANSI_CSI;
			} else if (c == 0x9d || c == 0x90 || c == 0x98 || c == 0x9e || c == 0x9f) {
				st->state = ANSI_STR;
			} else if (c >= 0x80 && c <= 0x9f) {
				st->state = ANSI_TEXT;
			} else {
				/* a character of U+00A0..U+00FF (or not UTF-8): the 0xC2 was text */
				text_acc_add(out, "\xc2", 1);
				st->state = ANSI_TEXT;
				continue;
			}
			i++;
			continue;
		case ANSI_ESC:
			if (c == '[') {
				st->state = ANSI_CSI;
			} else if (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') {
				st->state = ANSI_STR;
			} else if (c >= 0x20 && c <= 0x2f) {
				st->state = ANSI_INTER;
			} else if (c >= 0x30 && c <= 0x7e) {
				st->state = ANSI_TEXT;
			} else if (c == 0x1b) {
				/* ESC ESC: start over */
			} else {
				st->state = ANSI_TEXT;
				continue; /* not part of a sequence: reprocess as text */
			}
			i++;
			continue;
		case ANSI_CSI:
			/* parameters 0x30-0x3f, intermediates 0x20-0x2f, final 0x40-0x7e */
			if (c >= 0x40 && c <= 0x7e) {
				st->state = ANSI_TEXT;
				i++;
			} else if (c >= 0x20 && c <= 0x3f && ++st->seqlen <= ANSI_MAX_CSI) {
				i++;
			} else {
				st->state = ANSI_TEXT; /* malformed: the byte is text again */
			}
			continue;
		case ANSI_INTER:
			/* intermediates 0x20-0x2f, final 0x30-0x7e */
			if (c >= 0x30 && c <= 0x7e) {
				st->state = ANSI_TEXT;
				i++;
			} else if (c >= 0x20 && c <= 0x2f && ++st->seqlen <= ANSI_MAX_CSI) {
				i++;
			} else {
				st->state = ANSI_TEXT;
			}
			continue;
		case ANSI_STR:
			if (c == 0x07) {
				st->state = ANSI_TEXT;
			} else if (c == 0x1b) {
				st->state = ANSI_STR_ESC;
			} else if (++st->seqlen > ANSI_MAX_STR) {
				st->state = ANSI_TEXT;
				continue;
			}
			i++;
			continue;
		case ANSI_STR_ESC:
			if (c == '\\') {
				st->state = ANSI_TEXT;
				i++;
			} else {
				/* ESC ends the string and starts a new sequence */
				st->state = ANSI_ESC;
				st->seqlen = 0;
			}
			continue;
		default:
			st->state = ANSI_TEXT;
			continue;
		}
	}
}

size_t text_strip_ansi(char *s, size_t len)
{
	struct text_ansi st;
	struct text_acc acc;
	size_t o;

	/* An accumulator larger than the input never cuts, so everything lands in its head. */
	text_acc_init(&acc, len * 2 + 2);
	text_ansi_init(&st);
	text_ansi_feed(&st, s, len, &acc);
	if (acc.err) {
		text_acc_free(&acc);
		return len;
	}
	/* Stripping removes only whole ASCII sequences: the bytes left are copied back as they are. */
	o = acc.head_len;
	if (o)
		memcpy(s, acc.head, o);
	s[o] = '\0';
	text_acc_free(&acc);
	return o;
}

char *text_truncate(const char *s, size_t len, size_t max, size_t *outlen, bool *cut)
{
	struct text_acc acc;

	text_acc_init(&acc, max);
	text_acc_add(&acc, s, len);
	return text_acc_finish(&acc, outlen, cut);
}
