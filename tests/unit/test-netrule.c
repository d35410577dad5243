/* SPDX-License-Identifier: MIT */
/* Allow-list rules (src/shared/netrule.c): parsing, the ceiling, the policy lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit-main.h"

#include "netrule.h"

static void parses(void **state)
{
	static const struct {
		const char *spec, *canonical;
		bool wildcard, address;
		unsigned int port;
	} ok[] = {
		{ "example.org", "example.org", false, false, 0 },
		{ "Deb.Debian.ORG.", "deb.debian.org", false, false, 0 },
		{ "*.example.org", "*.example.org", true, false, 0 },
		{ "example.org:8080", "example.org:8080", false, false, 8080 },
		{ "*.pypi.org:443", "*.pypi.org:443", true, false, 443 },
		{ "203.0.113.5", "203.0.113.5", false, true, 0 },
		{ "203.0.113.5:8443", "203.0.113.5:8443", false, true, 8443 },
		{ "[2001:DB8:0::1]", "[2001:db8::1]", false, true, 0 },
		{ "[::1]:80", "[::1]:80", false, true, 80 },
		{ "_dmarc.example.org", "_dmarc.example.org", false, false, 0 },
		{ "localhost", "localhost", false, false, 0 },
	};
	static const char *const bad[] = {
		"", "*", "*.org", "exa*mple.org", "a.*.org", "example.org:0", "example.org:65536",
		"example.org:80x", "example.org:", "-bad.org", "bad-.org", "a..b", ".org", "2001:db8::1",
		"[2001:db8::1", "[example.org]", "[::1]x", "ex ample.org", "ex/ample.org", "10.1",
		"http://example.org", "a@example.org",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.org",
	};
	struct netrule r;
	char why[200], buf[300];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		if (netrule_parse(&r, ok[i].spec, why, sizeof(why)) < 0)
			fail_msg("%s: %s", ok[i].spec, why);
		assert_string_equal(netrule_format(&r, buf, sizeof(buf)), ok[i].canonical);
		assert_int_equal(r.wildcard, ok[i].wildcard);
		assert_int_equal(r.address, ok[i].address);
		assert_int_equal(r.port, ok[i].port);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		if (netrule_parse(&r, bad[i], why, sizeof(why)) == 0)
			fail_msg("'%s' parsed", bad[i]);
		assert_non_null(strstr(why, "is not a host to allow"));
	}
}

static void ceilings(void **state)
{
	static const char *const ceiling_specs[] = { "*.debian.org", "registry.npmjs.org:443",
						     "example.org", "10.0.0.5:8080" };
	static const struct {
		const char *rule;
		bool within;
	} cases[] = {
		{ "deb.debian.org", true },
		{ "a.b.debian.org:443", true },
		{ "*.security.debian.org", true },
		{ "*.debian.org", true },
		{ "debian.org", false },            /* *. is below the name only */
		{ "deb.debian.org:8080", false },   /* another port */
		{ "registry.npmjs.org:443", true },
		{ "registry.npmjs.org", false },    /* 80 and 443, and 80 is not allowed */
		{ "registry.npmjs.org:80", false },
		{ "example.org", true },
		{ "example.org:443", true },
		{ "www.example.org", false },
		{ "*.example.org", false },
		{ "10.0.0.5:8080", true },
		{ "10.0.0.5", false },
		{ "10.0.0.6:8080", false },
		{ "evil-debian.org", false },
	};
	struct netrule c[4], r;
	char why[200];

	(void)state;
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(netrule_parse(&c[i], ceiling_specs[i], why, sizeof(why)), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(netrule_parse(&r, cases[i].rule, why, sizeof(why)), 0);
		if (netrule_within(&r, c, 4) != cases[i].within)
			fail_msg("%s within the ceiling: want %d", cases[i].rule, cases[i].within);
	}
	/* nothing is within an empty ceiling */
	assert_false(netrule_within(&r, c, 0));
	/* the two default ports may come from two rules */
	{
		struct netrule two[2];
		assert_int_equal(netrule_parse(&two[0], "x.example:80", why, sizeof(why)), 0);
		assert_int_equal(netrule_parse(&two[1], "x.example:443", why, sizeof(why)), 0);
		assert_int_equal(netrule_parse(&r, "x.example", why, sizeof(why)), 0);
		assert_true(netrule_within(&r, two, 2));
		assert_false(netrule_within(&r, two, 1));
	}
}

static void policy_lines(void **state)
{
	struct netrule r[3];
	char why[200], *text;

	(void)state;
	assert_int_equal(netrule_parse(&r[0], "*.Debian.org", why, sizeof(why)), 0);
	assert_int_equal(netrule_parse(&r[1], "[2001:db8::1]:8443", why, sizeof(why)), 0);
	assert_int_equal(netrule_parse(&r[2], "registry.npmjs.org", why, sizeof(why)), 0);
	text = netrule_policy(r, 3);
	assert_non_null(text);
	assert_string_equal(text, "*.debian.org 80\n*.debian.org 443\n2001:db8::1 8443\n"
				  "registry.npmjs.org 80\nregistry.npmjs.org 443\n");
	free(text);
	text = netrule_policy(r, 0);
	assert_string_equal(text, "");
	free(text);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses),
		cmocka_unit_test(ceilings),
		cmocka_unit_test(policy_lines),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
