/* SPDX-License-Identifier: MIT */
/*
 * nbrun batch --html: an executed notebook rendered as HTML by nbconvert,
 * in a sandbox of its own like every run (nothing of the notebook is
 * rendered on the host), then written behind a Content-Security-Policy.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch.h"
#include "fdio.h"

#define RENDER_HTML_MAX (64u << 20)
#define RENDER_TIMEOUT_MS 180000

/*
 * In the sandbox: nbconvert's HTML exporter (its lab template), with the
 * sanitizer nbconvert ships run over every cell first: HTML and Markdown
 * outputs pass through bleach (tags outside the list below are escaped, on*
 * attributes and script dropped), JavaScript, widget and SVG outputs are
 * removed. The tags kept are those of text, tables and pandas' frames.
 */
static const char render_code[] =
	"import nbformat\n"
	"from bleach import ALLOWED_TAGS\n"
	"from nbconvert import HTMLExporter\n"
	"from nbconvert.preprocessors.sanitize import SanitizeHTML\n"
	"\n"
	"tags = sorted(set(ALLOWED_TAGS) | {\n"
	"    'p', 'div', 'span', 'br', 'hr', 'pre', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6',\n"
	"    'table', 'thead', 'tbody', 'tfoot', 'tr', 'th', 'td', 'caption', 'colgroup', 'col',\n"
	"    'sub', 'sup', 'del', 'ins', 's', 'u', 'small', 'dl', 'dt', 'dd', 'kbd', 'samp',\n"
	"    'var', 'mark', 'details', 'summary', 'figure', 'figcaption', 'img'})\n"
	"attributes = {'*': ['class', 'title', 'align'], 'a': ['href', 'title'],\n"
	"              'img': ['src', 'alt', 'width', 'height'], 'td': ['colspan', 'rowspan'],\n"
	"              'th': ['colspan', 'rowspan'], 'ol': ['start']}\n"
	"nb = nbformat.read('/mnt/data/notebook.ipynb', as_version=4)\n"
	"exporter = HTMLExporter()\n"
	"exporter.register_preprocessor(SanitizeHTML(tags=tags, attributes=attributes), enabled=True)\n"
	"html, _ = exporter.from_notebook_node(nb)\n"
	"with open('/mnt/data/notebook.html', 'w', encoding='utf-8') as f:\n"
	"    f.write(html)\n";

/*
 * Written before the page, so that the policy is the first thing of the
 * document's head whatever the page holds: the parser puts the meta
 * element in the head it opens, and the page's own <html> and <head> then
 * add nothing. No script runs, nothing is fetched but inline styles and
 * data: images and fonts, no form is sent, no <base> moves the links.
 */
static const char page_prefix[] =
	"<!DOCTYPE html>\n"
	"<meta charset=\"utf-8\">\n"
	"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
	"style-src 'unsafe-inline'; img-src data:; font-src data:; base-uri 'none'; form-action 'none'\">\n"
	"<meta name=\"referrer\" content=\"no-referrer\">\n";

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

static int read_page(const char *scratch, char **out, size_t *len, char *err, size_t errlen)
{
	char path[4096];
	int rc;

	snprintf(path, sizeof(path), "%s/files/notebook.html", scratch);
	rc = fd_read_file(AT_FDCWD, path, FD_READ_REGULAR | FD_READ_NOFOLLOW, RENDER_HTML_MAX, out, len);
	if (rc < 0)
		snprintf(err, errlen, "the rendered page: %s",
			 rc == -ENOENT ? "the renderer wrote none" : rc == -EFBIG ? "over 64 MiB" : strerror(-rc));
	return rc < 0 ? -1 : 0;
}

int batch_render_html(const char *dir, const struct nbrun_run_options *base, char *err, size_t errlen)
{
	struct nbrun_run_options opts = NBRUN_RUN_OPTIONS_INIT;
	struct nbrun_ctx *ctx = NULL;
	struct nbrun_result *res = NULL;
	struct fd_atomic a = { .fd = -1 };
	char scratch[4096], input[4096], out_name[4096];
	const char *files[1] = { input };
	char *page = NULL;
	size_t len = 0;
	int rc = -1;

	if (snprintf(input, sizeof(input), "%s/notebook.ipynb", dir) >= (int)sizeof(input) ||
	    snprintf(scratch, sizeof(scratch), "%s/.render-XXXXXX", dir) >= (int)sizeof(scratch) ||
	    snprintf(out_name, sizeof(out_name), "%s/notebook.html", dir) >= (int)sizeof(out_name)) {
		snprintf(err, errlen, "the path is too long");
		return -1;
	}
	if (access(input, R_OK) < 0) {
		snprintf(err, errlen, "no executed notebook to render");
		return -1;
	}
	if (!mkdtemp(scratch)) {
		snprintf(err, errlen, "cannot make a directory in %s: %s", dir, strerror(errno));
		return -1;
	}
	/* The batch's image, runtime and limits; its own timeout, no network, no environment. */
	opts.image = base->image;
	opts.runtime = base->runtime;
	opts.memory_bytes = base->memory_bytes;
	opts.nano_cpus = base->nano_cpus;
	opts.pids = base->pids;
	opts.disk_bytes = base->disk_bytes;
	opts.timeout_ms = base->timeout_ms > RENDER_TIMEOUT_MS ? base->timeout_ms : RENDER_TIMEOUT_MS;
	opts.cancel = base->cancel;
	opts.files = files;
	opts.file_count = 1;
	opts.max_file_bytes = RENDER_HTML_MAX;
	opts.out_dir = scratch;
	opts.language = "python";
	if (nbrun_ctx_new(&ctx) < 0) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (nbrun_run_code(&res, ctx, render_code, &opts) < 0) {
		snprintf(err, errlen, "%s", nbrun_ctx_errmsg(ctx));
		goto out;
	}
	if (nbrun_result_status(res) != NBRUN_STATUS_OK) {
		const char *name = NULL, *value = NULL;
		if (nbrun_result_error(res, &name, &value, NULL))
			snprintf(err, errlen, "nbconvert: %s: %.*s", name ? name : "", (int)strcspn(value ? value : "", "\n"),
				 value ? value : "");
		else
			snprintf(err, errlen, "%s: %s", nbrun_status_name(nbrun_result_status(res)),
				 nbrun_result_message(res) ?: "");
		goto out;
	}
	if (read_page(scratch, &page, &len, err, errlen) < 0)
		goto out;
	rc = fd_atomic_open(&a, AT_FDCWD, out_name, 0644);
	if (rc >= 0)
		rc = fd_write_all(a.fd, page_prefix, sizeof(page_prefix) - 1);
	if (rc >= 0)
		rc = fd_write_all(a.fd, page, len);
	if (rc >= 0)
		rc = fd_atomic_commit(&a);
	else
		fd_atomic_abort(&a);
	if (rc < 0) {
		snprintf(err, errlen, "cannot write %s: %s", out_name, strerror(-rc));
		rc = -1;
		goto out;
	}
	rc = 0;
out:
	nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(page);
	nbrun_result_free(res);
	nbrun_ctx_free(ctx);
	return rc;
}
