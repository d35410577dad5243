/* SPDX-License-Identifier: MIT */
/* The engine's attach stream: Docker's multiplexed framing around the agent's stdout and stderr. */
#ifndef NBRUN_ATTACH_PRIVATE_H
#define NBRUN_ATTACH_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "nbrun-private.h"

/*
 * The attach stream's multiplexed framing taken apart (docker.c): 8-byte
 * headers (stream 0, 1 or 2, three zero bytes, a big-endian length), the
 * payload of stdout frames delivered, stderr's kept in the connection's
 * err_tail. fill puts up to len raw bytes in buf: the count, 0 at the end
 * of the stream, -EAGAIN, or < 0. Zeroed, with fill set, to start.
 */
struct nbrun__demux {
	ssize_t (*fill)(struct nbrun__demux *dm, void *buf, size_t len);
	unsigned char raw[65536];
	size_t raw_len, raw_off;   /* undelivered raw bytes */
	unsigned char hdr[8];
	size_t hdr_len;            /* bytes of the current frame header seen */
	size_t frame_left;         /* payload bytes of the current frame to come */
	int frame_stream;
	bool eof;
};
/*
 * Up to len bytes of stdout into buf, as nbrun__conn.recv (stderr goes to
 * c->err_tail): the count, 0 at the end, -EAGAIN, -EPROTO for a broken
 * frame header, or what fill returned.
 */
ssize_t nbrun__demux_recv(struct nbrun__demux *dm, struct nbrun__conn *c, void *buf, size_t len);

#endif
