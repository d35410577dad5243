/* SPDX-License-Identifier: MIT */
/*
 * What nbrun prints: a result for a person or as JSON, live events, and
 * its own messages (errors and usage errors, control characters shown
 * as '?').
 */
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define BOLD(color) ((color) ? "\033[1m" : "")
#define RESET(color) ((color) ? "\033[0m" : "")

/* Unicode format characters (Cf: bidi embeddings, overrides and isolates,
 * zero-width marks) and the line and paragraph separators, Unicode 14. */
static const struct { uint32_t lo, hi; } format_chars[] = {
	{ 0xad, 0xad }, { 0x600, 0x605 }, { 0x61c, 0x61c }, { 0x6dd, 0x6dd }, { 0x70f, 0x70f },
	{ 0x890, 0x891 }, { 0x8e2, 0x8e2 }, { 0x180e, 0x180e }, { 0x200b, 0x200f },
	{ 0x2028, 0x202e }, { 0x2060, 0x2064 }, { 0x2066, 0x206f }, { 0xfeff, 0xfeff },
	{ 0xfff9, 0xfffb }, { 0x110bd, 0x110bd }, { 0x110cd, 0x110cd }, { 0x13430, 0x13438 },
	{ 0x1bca0, 0x1bca3 }, { 0x1d173, 0x1d17a }, { 0xe0001, 0xe0001 }, { 0xe0020, 0xe007f },
};

/* A format character's UTF-8 sequence at p: its length, 0 when p is something else. */
static size_t format_char_at(const unsigned char *p, uint32_t *cp)
{
	size_t n;
	uint32_t c;

	if (p[0] >= 0xc2 && p[0] < 0xe0)
		n = 2, c = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] < 0xf0)
		n = 3, c = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] < 0xf5)
		n = 4, c = p[0] & 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	for (size_t i = 0; i < sizeof(format_chars) / sizeof(format_chars[0]); i++)
		if (c >= format_chars[i].lo && c <= format_chars[i].hi) {
			*cp = c;
			return n;
		}
	return 0;
}

/*
 * Everything printed may come from the sandbox (text, file names), so no
 * byte that a terminal would act on gets through: C0 controls other than
 * newline and tab, DEL and the C1 range (U+0080..U+009F) become '?', and a
 * format character (U+202E RIGHT-TO-LEFT OVERRIDE and the like) is shown
 * as its \uXXXX escape. The JSON document keeps the true text.
 */
static void put_safe(FILE *fp, const char *s, bool newlines)
{
	const unsigned char *p = (const unsigned char *)s;
	uint32_t cp;
	size_t n;

	for (; *p; p++) {
		if (*p == '\n' || *p == '\t') {
			fputc(newlines ? *p : ' ', fp);
		} else if (*p == '\r' && newlines) {
			/* a lone CR would overwrite a line on a terminal: print it as a line break */
			if (p[1] != '\n')
				fputc('\n', fp);
		} else if (*p < 0x20 || *p == 0x7f) {
			fputc('?', fp);
		} else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			fputc('?', fp);
			p++;
		} else if ((n = format_char_at(p, &cp)) > 0) {
			fprintf(fp, cp > 0xffff ? "\\U%08x" : "\\u%04x", (unsigned int)cp);
			p += n - 1;
		} else {
			fputc(*p, fp);
		}
	}
}

void cli_put_safe(FILE *fp, const char *s, bool newlines)
{
	put_safe(fp, s ? s : "", newlines);
}

/* Text block that ends with a newline whatever it held. */
static void put_block(FILE *fp, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!n)
		return;
	put_safe(fp, s, true);
	if (s[n - 1] != '\n')
		fputc('\n', fp);
}

static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

static void print_error(FILE *fp, const json_t *err, bool color)
{
	const char *name = str(err, "name"), *value = str(err, "value"), *tb = str(err, "traceback");
	size_t nlen = strlen(name), vlen = strlen(value), tlen = strlen(tb);
	const char *last;

	put_block(fp, tb);
	/* IPython's traceback already ends with "Name: value"; do not say it twice. */
	while (tlen && tb[tlen - 1] == '\n')
		tlen--;
	last = tb + tlen;
	while (last > tb && last[-1] != '\n')
		last--;
	if ((size_t)(tb + tlen - last) == nlen + 2 + vlen && !strncmp(last, name, nlen) &&
	    !strncmp(last + nlen, ": ", 2) && !strncmp(last + nlen + 2, value, vlen))
		return;
	fputs(BOLD(color), fp);
	put_safe(fp, name, false);
	if (vlen) {
		fputs(": ", fp);
		put_safe(fp, value, false);
	}
	fprintf(fp, "%s\n", RESET(color));
}

static void print_paths(FILE *fp, const json_t *list, const char *title, const char *out_dir,
			bool color)
{
	size_t i;
	json_t *e;

	if (!json_array_size(list))
		return;
	fprintf(fp, "%s%s:%s\n", BOLD(color), title, RESET(color));
	json_array_foreach(list, i, e) {
		fputs("  ", fp);
		if (out_dir) {
			put_safe(fp, out_dir, false);
			fputc('/', fp);
		}
		put_safe(fp, str(e, "path"), false);
		if (json_is_string(json_object_get(e, "mime")))
			fprintf(fp, " (%s, %" JSON_INTEGER_FORMAT " bytes)", str(e, "mime"),
				json_integer_value(json_object_get(e, "bytes")));
		else
			fprintf(fp, " (%" JSON_INTEGER_FORMAT " bytes)",
				json_integer_value(json_object_get(e, "bytes")));
		fputc('\n', fp);
	}
}

void cli_print_result(FILE *fp, const struct nbrun_result *r, bool color)
{
	char *text = NULL;
	json_t *doc = NULL;

	/* The public API hands out the document; reading it back keeps one source of truth. */
	if (nbrun_result_to_json(&text, r, 0) < 0 || !(doc = json_loads(text, JSON_ALLOW_NUL, NULL)))
		cli_error("out of memory printing the result");
	else
		cli_print_doc(fp, doc, color);
	json_decref(doc);
	free(text);
}

/* A run with hosts to allow: its connections in a line, the hosts refused, the cap. */
static void print_network(FILE *fp, const json_t *net, bool color)
{
	const json_t *denied = json_object_get(net, "denied"), *e;
	size_t i, n = json_array_size(json_object_get(net, "requests")) +
		      (size_t)json_integer_value(json_object_get(net, "requests_not_listed"));

	if (!json_is_object(net))
		return;
	fprintf(fp, "%snetwork:%s %zu connection%s, %" JSON_INTEGER_FORMAT " bytes out, %" JSON_INTEGER_FORMAT
		" in\n", BOLD(color), RESET(color), n, n == 1 ? "" : "s",
		json_integer_value(json_object_get(net, "bytes_sent")),
		json_integer_value(json_object_get(net, "bytes_received")));
	if (json_array_size(denied)) {
		fputs("  refused (not on --allow-net, or a private address):", fp);
		json_array_foreach(denied, i, e) {
			fputc(' ', fp);
			put_safe(fp, json_string_value(e) ?: "?", false);
		}
		fputc('\n', fp);
	}
	if (json_integer_value(json_object_get(net, "proxy_unreachable")) > 0)
		fprintf(fp, "  the egress proxy was down: %" JSON_INTEGER_FORMAT
			" connection(s) failed (the next run starts it anew)\n",
			json_integer_value(json_object_get(net, "proxy_unreachable")));
	if (json_is_true(json_object_get(net, "capped")))
		fprintf(fp, "  cut at the byte cap (--net-bytes %" JSON_INTEGER_FORMAT ")\n",
			json_integer_value(json_object_get(net, "bytes_cap")));
}

void cli_print_doc(FILE *fp, const json_t *doc, bool color)
{
	const char *status, *out_dir;
	json_t *e;
	size_t i;

	out_dir = json_string_value(json_object_get(doc, "out_dir"));
	put_block(fp, str(doc, "stdout"));
	put_block(fp, str(doc, "stderr"));
	json_array_foreach(json_object_get(doc, "results"), i, e) {
		/* A table or other multi-line value starts on its own line, aligned. */
		fprintf(fp, "%sOut[%" JSON_INTEGER_FORMAT "]:%s%c", BOLD(color),
			json_integer_value(json_object_get(e, "cell")), RESET(color),
			strchr(str(e, "text"), '\n') ? '\n' : ' ');
		put_block(fp, str(e, "text"));
		if (!*str(e, "text"))
			fputc('\n', fp);
	}
	if (json_is_object(json_object_get(doc, "error")))
		print_error(fp, json_object_get(doc, "error"), color);
	print_paths(fp, json_object_get(doc, "images"), "images", out_dir, color);
	print_paths(fp, json_object_get(doc, "files"), "files", out_dir, color);
	if (json_array_size(json_object_get(doc, "skipped"))) {
		fprintf(fp, "%sskipped:%s\n", BOLD(color), RESET(color));
		json_array_foreach(json_object_get(doc, "skipped"), i, e) {
			fputs("  ", fp);
			put_safe(fp, str(e, "path"), false);
			fputs(": ", fp);
			put_safe(fp, str(e, "reason"), false);
			if (json_is_integer(json_object_get(e, "count")))
				fprintf(fp, " (%" JSON_INTEGER_FORMAT " entries)",
					json_integer_value(json_object_get(e, "count")));
			fputc('\n', fp);
		}
	}
	print_network(fp, json_object_get(doc, "network"), color);
	if (json_is_true(json_object_get(doc, "truncated")))
		fputs("note: some output was cut to the limits; result.json has the details\n", fp);
	status = str(doc, "status");
	if (!strcmp(status, "timeout") || !strcmp(status, "oom") || !strcmp(status, "failed")) {
		fprintf(fp, "%sstatus: %s%s", BOLD(color), status, RESET(color));
		if (*str(doc, "message")) {
			fputs(": ", fp);
			put_safe(fp, str(doc, "message"), false);
		}
		fputc('\n', fp);
	}
	fflush(fp);
}

int cli_print_json(const struct nbrun_result *r)
{
	char *s = NULL;
	int rc = 0;

	if (nbrun_result_to_json(&s, r, 1) < 0) {
		cli_error("out of memory printing the result");
		return -1;
	}
	fputs(s, stdout);
	fputc('\n', stdout);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_error("cannot write the result to stdout");
		rc = -1;
	}
	free(s);
	return rc;
}

/* Entries of the document's skipped list with this reason. */
static size_t skipped_for(const json_t *doc, const char *reason)
{
	const json_t *e;
	size_t i, n = 0;

	json_array_foreach(json_object_get(doc, "skipped"), i, e)
		n += !strcmp(str(e, "reason"), reason);
	return n;
}

void cli_warn_disk_full(const json_t *doc, const char *where)
{
	size_t n = skipped_for(doc, "host disk full");

	if (n)
		fprintf(stderr, "nbrun: warning: the host disk is full: %zu entr%s of /mnt/data not exported to %s\n",
			n, n == 1 ? "y" : "ies", where);
}

int cli_report(int rc, const struct nbrun_ctx *ctx, const struct nbrun_result *res, bool json)
{
	char *text = NULL;
	json_t *doc;

	if (rc < 0) {
		cli_error("%s", nbrun_ctx_errmsg(ctx));
		return cli_exit_for_error(rc);
	}
	/* Not exported for want of disk space on the host: said on stderr too. */
	if (nbrun_result_skipped_count(res) && nbrun_result_to_json(&text, res, 0) == 0 &&
	    (doc = json_loads(text, JSON_ALLOW_NUL, NULL))) {
		cli_warn_disk_full(doc, nbrun_result_out_dir(res) ? nbrun_result_out_dir(res) : "the output");
		json_decref(doc);
	}
	free(text);
	if (json) {
		if (cli_print_json(res) < 0)
			return CLI_EXIT_FAILED;
	} else {
		cli_print_result(stdout, res, isatty(STDOUT_FILENO));
	}
	return cli_exit_for_status(nbrun_result_status(res));
}

/* ---- live events, printed ----------------------------------------------------------- */

/* The text of a stream output, as it comes. */
void cli_stream_event(const char *json, size_t len, void *payload)
{
	json_t *ev = json_loadb(json, len, 0, NULL), *out = json_object_get(ev, "output");
	const char *type = json_string_value(json_object_get(out, "output_type"));
	const char *text;

	(void)payload;
	if (!type)
		goto out;
	if (!strcmp(type, "stream")) {
		FILE *fp = !strcmp(json_string_value(json_object_get(out, "name")) ?: "", "stderr") ? stderr : stdout;
		text = json_string_value(json_object_get(out, "text"));
		/* As it comes, but never a control sequence for the terminal: the
		 * code's output may set the title, the clipboard (OSC 52), clear... */
		if (text)
			put_safe(fp, text, true);
		fflush(fp);
	}
	/* Values, images and errors are printed from the result once the cell ends. */
	/* An error is printed with its traceback once the execution ends. */
out:
	json_decref(ev);
}

/* ---- messages ---------------------------------------------------------------------- */

/*
 * One line on stderr, whatever the message holds: what a server, a
 * sandbox or a file said may be in it, and a control sequence must not
 * reach the terminal (cli_put_safe()).
 */
static void cli_vmessage(const char *fmt, va_list ap)
{
	char *text = NULL;

	if (vasprintf(&text, fmt, ap) < 0)
		text = NULL;
	cli_put_safe(stderr, text ? text : "(out of memory)", false);
	free(text);
}

void cli_error(const char *fmt, ...)
{
	va_list ap;

	fputs("nbrun: error: ", stderr);
	va_start(ap, fmt);
	cli_vmessage(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("nbrun: error: ", stderr);
	va_start(ap, fmt);
	cli_vmessage(fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'nbrun %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
	return CLI_EXIT_USAGE;
}

int cli_bad_option(const char *cmd, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";

	if (optopt && strchr(arg, optopt) && arg[0] == '-' && arg[1] != '-')
		return cli_usage_error(cmd, "option '-%c' is unknown or needs a value", optopt);
	return cli_usage_error(cmd, "option '%s' is unknown or needs a value", arg);
}
