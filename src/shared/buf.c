/* SPDX-License-Identifier: MIT */
/* Capped growable buffer. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->alloc = 0;
	b->max = max;
}

static int buf_grow(struct buf *b, size_t need)
{
	size_t want;
	char *p;

	if (need <= b->alloc)
		return 0;
	want = b->alloc ? b->alloc : 256;
	while (want < need) {
		if (want > SIZE_MAX / 2) {
			want = need;
			break;
		}
		want *= 2;
	}
	if (want > b->max + 1)
		want = b->max + 1;
	p = realloc(b->data, want);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->alloc = want;
	return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	int r;

	if (n > b->max || b->len > b->max - n)
		return -E2BIG;
	r = buf_grow(b, b->len + n + 1);
	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	int n, r;
	char *big;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n < sizeof(small))
		return buf_append(b, small, (size_t)n);
	big = malloc((size_t)n + 1);
	if (!big)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	r = buf_append(b, big, (size_t)n);
	free(big);
	return r;
}

char *buf_steal(struct buf *b)
{
	char *p;

	if (!b->data && buf_grow(b, 1) < 0)
		return NULL;
	b->data[b->len] = '\0';
	p = b->data;
	b->data = NULL;
	b->len = b->alloc = 0;
	return p;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->alloc = 0;
}
