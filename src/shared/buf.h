/* SPDX-License-Identifier: MIT */
/* A growable byte buffer with a hard cap given at init (cf. curl's dynbuf). */
#ifndef NBRUN_BUF_H
#define NBRUN_BUF_H

#include <stddef.h>

struct buf {
	char *data;  /* always NUL-terminated when non-NULL */
	size_t len;
	size_t alloc;
	size_t max;  /* len never exceeds this */
};

#define BUF_INIT(max_) { NULL, 0, 0, (max_) }

void buf_init(struct buf *b, size_t max);
/* 0, -ENOMEM, or -E2BIG when len would pass max (nothing is appended then). */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the bytes over (never NULL on success: "" for an empty buffer); the buffer is reset. */
char *buf_steal(struct buf *b);
void buf_reset(struct buf *b);
void buf_free(struct buf *b);

#endif
