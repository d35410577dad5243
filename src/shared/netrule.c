/* SPDX-License-Identifier: MIT */
/* Allow-list rules of the network (netrule.h). */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "netrule.h"

static int fail(char *why, size_t len, const char *spec, const char *what)
{
	snprintf(why, len, "'%.80s' is not a host to allow: %s", spec, what);
	return -1;
}

/* A DNS name: labels of [a-z0-9-] (and '_'), 1 to 63 long, not starting or ending with '-'. */
static bool name_ok(const char *h)
{
	size_t label = 0;
	bool letters = false;

	if (!*h || strlen(h) > NETRULE_HOST_MAX)
		return false;
	for (const char *p = h;; p++) {
		if (*p == '.' || !*p) {
			if (label == 0 || label > 63 || p[-1] == '-')
				return false;
			if (!*p)
				break;
			label = 0;
			continue;
		}
		if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_'))
			return false;
		if (label == 0 && *p == '-')
			return false;
		letters |= isalpha((unsigned char)*p) != 0;
		label++;
	}
	/* All digits and dots would be an address in a form inet_pton refuses (010.1, 1.2.3). */
	return letters;
}

int netrule_parse(struct netrule *r, const char *spec, char *why, size_t len)
{
	char host[NETRULE_HOST_MAX + 3];
	const char *p = spec, *colon;
	size_t n;

	memset(r, 0, sizeof(*r));
	if (!spec || !*spec)
		return fail(why, len, "", "empty");
	if (p[0] == '[') {
		const char *end = strchr(p, ']');
		if (!end || (size_t)(end - p - 1) >= sizeof(host))
			return fail(why, len, spec, "an IPv6 address is [ADDRESS] or [ADDRESS]:PORT");
		n = (size_t)(end - p - 1);
		memcpy(host, p + 1, n);
		host[n] = '\0';
		colon = end[1] == ':' ? end + 1 : NULL;
		if (end[1] && !colon)
			return fail(why, len, spec, "after ']' comes ':PORT' or nothing");
	} else {
		colon = strrchr(p, ':');
		if (colon && strchr(p, ':') != colon)
			return fail(why, len, spec, "write an IPv6 address in brackets: [ADDRESS]");
		n = colon ? (size_t)(colon - p) : strlen(p);
		if (n >= sizeof(host))
			return fail(why, len, spec, "the name is too long");
		memcpy(host, p, n);
		host[n] = '\0';
	}
	if (colon) {
		char *end;
		unsigned long port = strtoul(colon + 1, &end, 10);
		if (!isdigit((unsigned char)colon[1]) || *end || port < 1 || port > 65535)
			return fail(why, len, spec, "the port must be 1 to 65535");
		r->port = (unsigned int)port;
	}
	for (char *q = host; *q; q++)
		*q = (char)tolower((unsigned char)*q);
	n = strlen(host);
	if (n && host[n - 1] == '.')
		host[--n] = '\0';
	{
		unsigned char a[16];
		if (inet_pton(AF_INET, host, a) == 1) {
			r->address = true;
			inet_ntop(AF_INET, a, r->host, sizeof(r->host));
			return 0;
		}
		if (inet_pton(AF_INET6, host, a) == 1) {
			r->address = true;
			inet_ntop(AF_INET6, a, r->host, sizeof(r->host));
			return 0;
		}
		if (spec[0] == '[')
			return fail(why, len, spec, "not an IPv6 address");
	}
	if (!strncmp(host, "*.", 2)) {
		r->wildcard = true;
		memmove(host, host + 2, strlen(host + 2) + 1);
		if (!strchr(host, '.'))
			return fail(why, len, spec, "a wildcard takes a domain of two labels or more (*.example.org)");
	}
	if (strchr(host, '*'))
		return fail(why, len, spec, "'*' only as the first label (*.example.org)");
	if (!name_ok(host))
		return fail(why, len, spec, "want a DNS name, *.NAME or an address");
	memcpy(r->host, host, strlen(host) + 1); /* name_ok: at most NETRULE_HOST_MAX */
	return 0;
}

static bool port_within(unsigned int port, unsigned int ceiling)
{
	if (ceiling == 0)
		return port == 0 || port == 80 || port == 443;
	return port == ceiling;
}

/* True when name (a plain name) is below domain. */
static bool below(const char *name, const char *domain)
{
	size_t n = strlen(name), d = strlen(domain);

	return n > d + 1 && name[n - d - 1] == '.' && !strcmp(name + n - d, domain);
}

static bool host_within(const struct netrule *r, const struct netrule *c)
{
	if (c->address || r->address)
		return c->address && r->address && !strcmp(r->host, c->host);
	if (!c->wildcard)
		return !r->wildcard && !strcmp(r->host, c->host);
	/* *.c covers a name below c, and a wildcard at or below c */
	return below(r->host, c->host) || (r->wildcard && !strcmp(r->host, c->host));
}

bool netrule_within(const struct netrule *r, const struct netrule *ceiling, size_t n)
{
	/* A rule with both default ports needs them both covered, perhaps by two rules. */
	unsigned int ports[2] = { r->port, 0 };
	size_t want = 1;

	if (r->port == 0) {
		ports[0] = 80;
		ports[1] = 443;
		want = 2;
	}
	for (size_t k = 0; k < want; k++) {
		bool ok = false;
		for (size_t i = 0; i < n && !ok; i++)
			ok = host_within(r, &ceiling[i]) && port_within(ports[k], ceiling[i].port);
		if (!ok)
			return false;
	}
	return true;
}

const char *netrule_format(const struct netrule *r, char *buf, size_t len)
{
	bool v6 = r->address && strchr(r->host, ':');
	char port[16] = "";

	if (r->port)
		snprintf(port, sizeof(port), ":%u", r->port);
	snprintf(buf, len, "%s%s%s%s%s", r->wildcard ? "*." : "", v6 ? "[" : "", r->host, v6 ? "]" : "",
		 port);
	return buf;
}

char *netrule_policy(const struct netrule *rules, size_t n)
{
	struct buf b = BUF_INIT(1 << 20);

	for (size_t i = 0; i < n; i++) {
		const struct netrule *r = &rules[i];
		const char *star = r->wildcard ? "*." : "";
		if (r->port)
			buf_printf(&b, "%s%s %u\n", star, r->host, r->port);
		else
			buf_printf(&b, "%s%s 80\n%s%s 443\n", star, r->host, star, r->host);
	}
	if (!b.data)
		return strdup("");
	return buf_steal(&b);
}
