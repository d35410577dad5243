/* SPDX-License-Identifier: MIT */
/*
 * Allow-list rules of the network (--allow-net, "allow_net"): what one
 * says, whether one lies within another (a server's ceiling), and the
 * policy lines the egress proxy reads (environments/egress).
 *   example.org        that name
 *   *.example.org      the names below example.org (not example.org)
 *   203.0.113.5        that address, asked for as such
 *   [2001:db8::1]      an IPv6 address
 * each with ":PORT" for one port, else 80 and 443.
 */
#ifndef NBRUN_NETRULE_H
#define NBRUN_NETRULE_H

#include <stdbool.h>
#include <stddef.h>

#define NETRULE_HOST_MAX 253
/* The most rules a run or a server takes. */
#define NETRULE_MAX 256

struct netrule {
	char host[NETRULE_HOST_MAX + 1]; /* lowercase, no final dot; an address in its canonical form */
	bool wildcard;                   /* "*.host": the names below host */
	bool address;                    /* host is an IPv4 or IPv6 address */
	unsigned int port;               /* 0: 80 and 443 */
};

/* Parse spec into r: 0, or -1 with a one-line reason in why. */
int netrule_parse(struct netrule *r, const char *spec, char *why, size_t len);
/* True when every name and port r allows, one of the n rules of ceiling allows. */
bool netrule_within(const struct netrule *r, const struct netrule *ceiling, size_t n);
/* r as a rule again (the canonical form), into buf. */
const char *netrule_format(const struct netrule *r, char *buf, size_t len);
/* The proxy's policy lines ("PATTERN PORT\n" for each port) of n rules; malloc'd or NULL. */
char *netrule_policy(const struct netrule *rules, size_t n);

#endif
