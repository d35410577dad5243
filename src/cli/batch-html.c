/* SPDX-License-Identifier: MIT */
/*
 * nbrun batch's report.html: one page to look a batch over. What in it came
 * from a notebook (names, parameters, errors) is untrusted: every text is
 * escaped, every link a percent-encoded relative path, the page has no
 * script of its own, and its Content-Security-Policy lets it load nothing
 * but images and frames from its own directory. A rendered notebook is
 * shown in a sandboxed frame only (no script, an opaque origin).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch.h"
#include "buf.h"
#include "fdio.h"

#define HTML_MAX (256u << 20)

static const char csp[] = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; "
			  "frame-src 'self'; base-uri 'none'; form-action 'none'";

static const char style[] =
	"body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em;color:#1d2228;background:#fff}"
	"h1{font-size:1.4em;margin:0 0 .3em}"
	".meta{color:#5b6470;margin:.2em 0 1em}"
	".counts span{margin-right:.6em}"
	"table{border-collapse:collapse;width:100%}"
	"th,td{border-bottom:1px solid #e3e6ea;padding:.45em .6em;text-align:left;vertical-align:top}"
	"th{background:#f5f6f8;font-weight:600;position:sticky;top:0}"
	"td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}"
	".name{font-weight:600;min-width:9em;overflow-wrap:anywhere}"
	".path{display:block;font-weight:400;color:#5b6470;font-size:.85em}"
	".st{display:inline-block;padding:.05em .55em;border-radius:1em;font-size:.85em;font-weight:600;color:#fff}"
	".st-ok{background:#1a7f37}.st-error{background:#cf222e}.st-timeout{background:#bc4c00}"
	".st-oom{background:#8250df}.st-failed{background:#6e7781}.st-not_run{background:#afb8c1}"
	".att{font-size:.8em;color:#5b6470;margin-top:.3em}"
	"code,pre{font:12px/1.35 ui-monospace,'DejaVu Sans Mono',monospace}"
	".params{min-width:10em}.params code{background:#f5f6f8;padding:0 .25em;border-radius:3px;overflow-wrap:anywhere}"
	".err{min-width:16em;max-width:32em;word-break:break-word}.err b{color:#cf222e}"
	".where{color:#5b6470;font-size:.85em}"
	".thumb img{max-width:160px;max-height:100px;border:1px solid #e3e6ea;background:#fff}"
	".links a{margin-right:.6em;white-space:nowrap}"
	"tr.preview td{padding:0 .6em .6em;border-bottom:1px solid #e3e6ea}"
	"tr.nb:has(+tr.preview) td{border-bottom:0}"
	"details summary{cursor:pointer;color:#0969da;font-size:.85em}"
	"iframe{width:100%;height:70vh;border:1px solid #e3e6ea;margin-top:.4em}"
	"footer{margin-top:1.5em;color:#5b6470;font-size:.85em}";

/* Text for an element or a quoted attribute. */
static void put_text(struct buf *b, const char *s, size_t max)
{
	size_t n = strlen(s), cut = n;

	if (n > max) /* whole characters only */
		for (cut = max; cut && ((unsigned char)s[cut] & 0xc0) == 0x80; cut--)
			;
	for (size_t i = 0; i < cut; i++) {
		switch (s[i]) {
		case '&': buf_puts(b, "&amp;"); break;
		case '<': buf_puts(b, "&lt;"); break;
		case '>': buf_puts(b, "&gt;"); break;
		case '"': buf_puts(b, "&quot;"); break;
		case '\'': buf_puts(b, "&#39;"); break;
		default: buf_append(b, s + i, 1);
		}
	}
	if (cut < n)
		buf_puts(b, "\xe2\x80\xa6");
}

/* A relative link: "./" and each byte but unreserved ones and '/' as %XX, so
 * that no name reads as a scheme, a query or an attribute's end. */
static void put_url(struct buf *b, const char *first, const char *rest)
{
	static const char hex[] = "0123456789ABCDEF";

	buf_puts(b, "./");
	for (const char *part = first; part; part = part == first ? rest : NULL) {
		if (part != first)
			buf_puts(b, "/");
		for (const unsigned char *p = (const unsigned char *)part; *p; p++) {
			if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			    strchr("-._~/", *p))
				buf_append(b, p, 1);
			else
				buf_printf(b, "%%%c%c", hex[*p >> 4], hex[*p & 15]);
		}
	}
}

/* A regular file (not a link) at rel below the batch's directory. */
static bool have(int dirfd, const char *dir, const char *rel)
{
	char path[4096];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s/%s", dir, rel) >= (int)sizeof(path))
		return false;
	return fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

static const char *str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

long batch_error_line(const char *tb, long *exec_count)
{
	const char *p = NULL, *q;
	long count, line;
	char *end;

	*exec_count = 0;
	/* the last frame in a cell: IPython 8 writes "Cell In [3]" (8.0 to 8.5) or "Cell In[3]" */
	for (q = tb; q && (q = strstr(q, "Cell In")); q++)
		p = q;
	if (!p)
		return 0;
	p += 7 + (p[7] == ' ');
	if (*p != '[' || !(p[1] >= '0' && p[1] <= '9'))
		return 0;
	count = strtol(p + 1, &end, 10);
	if (strncmp(end, "], line ", 8))
		return 0;
	line = strtol(end + 8, NULL, 10);
	if (line <= 0 || count < 0)
		return 0;
	*exec_count = count;
	return line;
}

static void put_duration(struct buf *b, json_int_t ms)
{
	if (ms < 60000)
		buf_printf(b, "%.1f s", (double)ms / 1000.0);
	else if (ms < 3600000)
		buf_printf(b, "%d min %02d s", (int)(ms / 60000), (int)(ms / 1000 % 60));
	else
		buf_printf(b, "%d h %02d min", (int)(ms / 3600000), (int)(ms / 60000 % 60));
}

static void put_params(struct buf *b, const json_t *params)
{
	const char *key;
	const json_t *v;

	json_object_foreach((json_t *)params, key, v) {
		char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

		buf_puts(b, "<div><code>");
		put_text(b, key, 200);
		buf_puts(b, "</code> = <code>");
		put_text(b, text ? text : "?", 200);
		buf_puts(b, "</code></div>");
		free(text);
	}
}

static void put_error(struct buf *b, const json_t *entry)
{
	const json_t *result = json_object_get(entry, "result"), *e = json_object_get(result, "error");
	const char *value = str(e, "value"), *tb = str(e, "traceback"), *status = str(entry, "status") ?: "";
	long count = 0, line;

	/* a timeout's or a failure's own message says more than the interrupt it raised */
	if (!json_is_object(e) || (strcmp(status, "error") && str(result, "message"))) {
		const char *msg = str(result, "message") ?: str(entry, "first_error");
		if (msg && strcmp(status, "ok"))
			put_text(b, msg, 300);
		return;
	}
	buf_puts(b, "<b>");
	put_text(b, str(e, "name") ?: "", 100);
	buf_puts(b, "</b>");
	if (value && *value) {
		char *first = strndup(value, strcspn(value, "\n"));
		buf_puts(b, ": ");
		put_text(b, first ? first : "", 300);
		free(first);
	}
	line = batch_error_line(tb ? tb : "", &count);
	buf_puts(b, "<div class=\"where\">");
	if (line)
		buf_printf(b, "In [%ld], line %ld", count, line);
	else if (json_is_integer(json_object_get(e, "cell")))
		buf_printf(b, "cell %lld", (long long)json_integer_value(json_object_get(e, "cell")));
	buf_puts(b, "</div>");
}

/* images/cellN-K.ext as the library names them: nothing else becomes a link. */
static bool image_path_ok(const char *p)
{
	if (!p || strncmp(p, "images/", 7) || strstr(p, "..") || strlen(p) > 100)
		return false;
	for (p += 7; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
			return false;
	return true;
}

static void put_thumb(struct buf *b, int dirfd, const char *dir, const char *name, const json_t *entry,
		      bool html)
{
	const json_t *images = json_object_get(json_object_get(entry, "result"), "images"), *img;
	char rel[512];
	size_t i;

	json_array_foreach(images, i, img) {
		const char *path = str(img, "path"), *mime = str(img, "mime") ?: "";

		/* an <img> never runs an SVG's script; a PDF it cannot show */
		if (!strcmp(mime, "application/pdf") || !image_path_ok(path))
			continue;
		snprintf(rel, sizeof(rel), "%s/%s", name, path);
		if (!have(dirfd, dir, rel))
			continue;
		if (html) {
			buf_puts(b, "<a href=\"");
			put_url(b, name, "notebook.html");
			buf_puts(b, "\">");
		}
		buf_puts(b, "<img src=\"");
		put_url(b, name, path);
		buf_puts(b, "\" alt=\"first image of ");
		put_text(b, name, 200);
		buf_puts(b, "\" loading=\"lazy\">");
		if (html)
			buf_puts(b, "</a>");
		return;
	}
}

static void put_attempts(struct buf *b, int dirfd, const char *dir, const char *name, const json_t *entry)
{
	const json_t *list = json_object_get(entry, "attempts"), *a;
	size_t i;

	if (!json_array_size(list))
		return;
	buf_printf(b, "<div class=\"att\">attempt %zu; before:", json_array_size(list) + 1);
	json_array_foreach(list, i, a) {
		json_int_t n = json_integer_value(json_object_get(a, "attempt"));
		const char *st = str(a, "status") ?: "failed";
		char num[32], rel[512];
		const char *target = NULL;

		snprintf(num, sizeof(num), "%lld", (long long)n);
		for (int k = 0; k < 2 && n > 0 && !target; k++) {
			snprintf(rel, sizeof(rel), "%s/%s/%s/%s", BATCH_ATTEMPTS_DIR, name, num,
				 k ? "result.json" : "notebook.html");
			if (have(dirfd, dir, rel))
				target = k ? "result.json" : "notebook.html";
		}
		buf_puts(b, i ? ", " : " ");
		if (target) {
			char sub[300];
			snprintf(sub, sizeof(sub), "%s/%s", name, num);
			buf_puts(b, "<a href=\"");
			put_url(b, BATCH_ATTEMPTS_DIR, sub);
			buf_puts(b, "/");
			buf_puts(b, target);
			buf_puts(b, "\">");
		}
		put_text(b, st, 20);
		if (target)
			buf_puts(b, "</a>");
	}
	buf_puts(b, "</div>");
}

static void put_row(struct buf *b, int dirfd, const char *dir, const json_t *entry, size_t idx)
{
	const char *name = str(entry, "name") ?: "", *status = str(entry, "status") ?: "failed";
	/* a name edited into report.json that could point elsewhere gets no links */
	bool safe = !batch_name_problem(name) && strlen(name) < 300;
	char rel[512];
	bool html = safe && (snprintf(rel, sizeof(rel), "%s/notebook.html", name), have(dirfd, dir, rel));
	static const char *const files[] = { "notebook.ipynb", "result.json" };
	static const char *const labels[] = { ".ipynb", "result.json" };

	buf_printf(b, "<tr class=\"nb\" id=\"nb-%zu\" data-status=\"", idx);
	put_text(b, status, 20);
	buf_puts(b, "\" data-name=\"");
	put_text(b, name, 300);
	buf_puts(b, "\">\n<td class=\"name\">");
	put_text(b, name, 300);
	buf_puts(b, "<span class=\"path\">");
	put_text(b, str(entry, "notebook") ?: "", 300);
	buf_puts(b, "</span></td>\n<td><span class=\"st st-");
	put_text(b, status, 20);
	buf_puts(b, "\">");
	put_text(b, status, 20);
	buf_puts(b, "</span>");
	if (safe)
		put_attempts(b, dirfd, dir, name, entry);
	buf_puts(b, "</td>\n<td class=\"num\">");
	put_duration(b, json_integer_value(json_object_get(entry, "duration_ms")));
	buf_puts(b, "</td>\n<td class=\"params\">");
	put_params(b, json_object_get(entry, "params"));
	buf_puts(b, "</td>\n<td class=\"err\">");
	put_error(b, entry);
	buf_puts(b, "</td>\n<td class=\"thumb\">");
	if (safe)
		put_thumb(b, dirfd, dir, name, entry, html);
	buf_puts(b, "</td>\n<td class=\"links\">");
	if (html) {
		buf_puts(b, "<a href=\"");
		put_url(b, name, "notebook.html");
		buf_puts(b, "\">notebook</a>");
	}
	for (size_t i = 0; safe && i < 2; i++) {
		snprintf(rel, sizeof(rel), "%s/%s", name, files[i]);
		if (!have(dirfd, dir, rel))
			continue;
		buf_puts(b, "<a href=\"");
		put_url(b, name, files[i]);
		buf_printf(b, "\">%s</a>", labels[i]);
	}
	if (!html && str(entry, "html_error")) {
		buf_puts(b, "<div class=\"where\">not rendered: ");
		put_text(b, str(entry, "html_error"), 200);
		buf_puts(b, "</div>");
	}
	buf_puts(b, "</td></tr>\n");
	if (html) {
		/* sandbox="": no script, no same origin, no forms, no popups, no top navigation */
		buf_puts(b, "<tr class=\"preview\"><td colspan=\"7\"><details><summary>preview</summary>"
			    "<iframe sandbox=\"\" loading=\"lazy\" referrerpolicy=\"no-referrer\" src=\"");
		put_url(b, name, "notebook.html");
		buf_puts(b, "\" title=\"");
		put_text(b, name, 300);
		buf_puts(b, ", rendered\"></iframe></details></td></tr>\n");
	}
}

static void put_page(struct buf *b, int dirfd, const char *dir, const json_t *report)
{
	const json_t *summary = json_object_get(report, "summary"), *list = json_object_get(report, "notebooks");
	static const char *const counts[] = { "ok", "error", "timeout", "oom", "failed", "not_run" };
	const json_t *entry;
	json_int_t reruns = json_integer_value(json_object_get(report, "reruns"));
	size_t i;

	buf_printf(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		      "<meta http-equiv=\"Content-Security-Policy\" content=\"%s\">\n"
		      "<meta name=\"referrer\" content=\"no-referrer\">\n"
		      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
		      "<title>nbrun batch: %lld notebooks</title>\n<style>%s</style>\n</head>\n<body>\n"
		      "<h1>nbrun batch</h1>\n<p class=\"counts\">",
		   csp, (long long)json_integer_value(json_object_get(summary, "total")), style);
	buf_printf(b, "<span>%lld notebooks:</span>", (long long)json_integer_value(json_object_get(summary, "total")));
	for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		json_int_t n = json_integer_value(json_object_get(summary, counts[i]));
		if (n || !i)
			buf_printf(b, "<span class=\"st st-%s\">%lld %s</span>", counts[i], (long long)n,
				   strcmp(counts[i], "not_run") ? counts[i] : "not run");
	}
	buf_puts(b, "</p>\n<p class=\"meta\">");
	put_text(b, str(report, "out_dir") ?: dir, 500);
	buf_puts(b, " &middot; ");
	put_duration(b, json_integer_value(json_object_get(report, "duration_ms")));
	buf_printf(b, " with %lld at once", (long long)json_integer_value(json_object_get(report, "jobs")));
	if (reruns)
		buf_printf(b, " &middot; reruns: %lld", (long long)reruns);
	if (json_is_true(json_object_get(report, "interrupted")))
		buf_puts(b, " &middot; <b>interrupted</b>");
	buf_puts(b, "</p>\n<table>\n<thead><tr><th>notebook</th><th>status</th><th>duration</th>"
		    "<th>parameters</th><th>error</th><th>first image</th><th>open</th></tr></thead>\n<tbody>\n");
	json_array_foreach(list, i, entry)
		put_row(b, dirfd, dir, entry, i);
	buf_puts(b, "</tbody>\n</table>\n<footer>Written by nbrun ");
	put_text(b, str(report, "nbrun") ?: "", 40);
	buf_puts(b, ". The notebooks' own HTML is shown only rendered without script and in sandboxed "
		    "frames; report.json holds every fact of this page.</footer>\n</body>\n</html>\n");
}

int batch_html_write(const json_t *report, const char *dir)
{
	struct buf b = BUF_INIT(HTML_MAX);
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	if (dirfd < 0)
		return -errno;
	/* Each append is a few KiB at most and checks the cap: one refused leaves
	 * the page within that of the cap, and the page is refused whole. */
	put_page(&b, dirfd, ".", report);
	if (!b.data || b.len > HTML_MAX - (64u << 10))
		rc = -E2BIG;
	else
		rc = fd_write_file_atomic(dirfd, "report.html", b.data, b.len, 0644);
	close(dirfd);
	buf_free(&b);
	return rc;
}
