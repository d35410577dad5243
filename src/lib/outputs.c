/* SPDX-License-Identifier: MIT */
/*
 * Executed notebook -> result document. The notebook came out of the
 * sandbox, so every field may be missing, of the wrong type or huge: types
 * are checked (a mismatch counts as absent), text is bounded head+tail and
 * stripped of terminal escapes, and base64 images are validated before a
 * single byte is decoded, then decoded in chunks straight into their file.
 */
#include <b64/cdecode.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mime.h"
#include "nbrun-private.h"
#include "text.h"

/* Base64 input handed to libb64 at a time, and room for what it decodes (plus its spill byte). */
#define B64_IN_CHUNK (64 * 1024)
#define B64_OUT_CAP (B64_IN_CHUNK / 4 * 3 + 64)
/* Anything beyond these in one output is not believable; it is skipped, not listed. */
#define MAX_MIME_KEYS 64
#define MAX_MIME_NAME 255
#define MAX_DISPLAY_ID 256
#define MAX_TYPE_IN_REASON 64

void nbrun__limits_resolve(struct nbrun__limits *out, const struct nbrun_parse_limits *in)
{
	out->max_output = in && in->max_output ? in->max_output : NBRUN_DEFAULT_MAX_OUTPUT;
	out->max_outputs = in && in->max_outputs ? in->max_outputs : NBRUN_DEFAULT_MAX_OUTPUTS;
	out->max_images = in && in->max_images ? in->max_images : NBRUN_DEFAULT_MAX_IMAGES;
	out->max_image_bytes = in && in->max_image_bytes ? in->max_image_bytes : NBRUN_DEFAULT_MAX_IMAGE_BYTES;
	out->max_notebook_bytes = in && in->max_notebook_bytes ? in->max_notebook_bytes : NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES;
}

/* State of one parse. */
struct op {
	struct nbrun_ctx *ctx;
	struct nbrun_result *r;
	const struct nbrun__limits *lim;
	int out_dirfd;
	int img_dirfd;         /* images/, opened on first use */
	json_t *outputs, *results, *images;
	struct text_acc out_acc, err_acc;
	struct text_ansi out_ansi, err_ansi;
	size_t dropped;        /* outputs beyond max_outputs */
	size_t dropped_results;
	bool have_error;
	char *dec;             /* base64 decode buffer, B64_OUT_CAP bytes */
	int err;               /* why a builder returned NULL, when not out of memory */
};

/* Image MIME types decoded from base64 and the magic their bytes must start with. */
static const struct img_type {
	const char *mime;
	const char *what;
	const char *magic;
	size_t magic_len;
} img_types[] = {
	{ "image/png", "PNG", "\x89PNG\r\n\x1a\n", 8 },
	{ "image/jpeg", "JPEG", "\xff\xd8\xff", 3 },
	{ "image/gif", "GIF", "GIF8", 4 },
	{ "application/pdf", "PDF", "%PDF", 4 },
};

static const struct img_type *img_type_of(const char *mime)
{
	for (size_t i = 0; i < sizeof(img_types) / sizeof(img_types[0]); i++)
		if (!strcmp(mime, img_types[i].mime))
			return &img_types[i];
	return NULL;
}

static const char *img_sniff(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < sizeof(img_types) / sizeof(img_types[0]); i++)
		if (n >= img_types[i].magic_len && !memcmp(p, img_types[i].magic, img_types[i].magic_len))
			return img_types[i].what;
	return "unknown data";
}

/* ---- text values ------------------------------------------------------------ */

/* A text value is a string or a list of strings; other element types count as absent. */
static bool is_text(const json_t *v)
{
	return json_is_string(v) || json_is_array(v);
}

static void text_feed_value(const json_t *v, const char *sep, struct text_ansi *st,
			    struct text_acc *acc, bool strip)
{
	size_t i;
	json_t *e;

	if (json_is_string(v)) {
		if (strip)
			text_ansi_feed(st, json_string_value(v), json_string_length(v), acc);
		else
			text_acc_add(acc, json_string_value(v), json_string_length(v));
		return;
	}
	if (!json_is_array(v))
		return;
	json_array_foreach(v, i, e) {
		if (!json_is_string(e))
			continue;
		if (i && sep)
			text_acc_add(acc, sep, strlen(sep));
		if (strip)
			text_ansi_feed(st, json_string_value(e), json_string_length(e), acc);
		else
			text_acc_add(acc, json_string_value(e), json_string_length(e));
	}
}

static json_t *acc_to_json(struct op *o, struct text_acc *acc)
{
	size_t len;
	bool cut;
	char *s = text_acc_finish(acc, &len, &cut);
	json_t *j;

	if (!s)
		return NULL;
	if (cut)
		nbrun__result_flag_truncated(o->r);
	j = json_stringn_nocheck(s, len);
	free(s);
	return j;
}

/* Bounded, escape-free text of v (lines joined with sep); NULL only when out of memory. */
static json_t *op_text(struct op *o, const json_t *v, const char *sep, size_t max)
{
	struct text_ansi st;
	struct text_acc acc;

	text_acc_init(&acc, max);
	text_ansi_init(&st);
	text_feed_value(v, sep, &st, &acc, true);
	return acc_to_json(o, &acc);
}

/* A short printable copy of an untrusted name for a reason string. */
static void short_name(char *dst, size_t dstsz, const json_t *v)
{
	const char *s = json_string_value(v);
	size_t n = 0, len = json_string_length(v);

	if (!s) {
		snprintf(dst, dstsz, "(none)");
		return;
	}
	for (size_t i = 0; i < len && n + 1 < dstsz && i < MAX_TYPE_IN_REASON; i++)
		dst[n++] = ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f) ? '?' : s[i];
	dst[n] = '\0';
}

static int op_skip(struct op *o, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int op_skip(struct op *o, const char *path, const char *fmt, ...)
{
	char reason[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	return nbrun__result_skip(o->r, path, reason);
}

/* ---- images ----------------------------------------------------------------- */

static bool b64_alpha(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '/';
}

static bool b64_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

struct b64_scan {
	uint64_t chars; /* alphabet characters */
	unsigned pad;
	const char *bad;
};

static void b64_scan_piece(struct b64_scan *sc, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;

	for (size_t i = 0; i < n && !sc->bad; i++) {
		if (b64_alpha(s[i])) {
			if (sc->pad)
				sc->bad = "base64 data after '=' padding";
			else
				sc->chars++;
		} else if (s[i] == '=') {
			if (++sc->pad > 2)
				sc->bad = "too much base64 '=' padding";
		} else if (!b64_space(s[i])) {
			sc->bad = "invalid base64 character";
		}
	}
}

/*
 * Validate the whole base64 value (libb64 silently skips garbage, so it must
 * not see any) and compute its decoded size without decoding.
 */
static const char *b64_check(const json_t *v, uint64_t *decoded)
{
	struct b64_scan sc = { 0, 0, NULL };
	size_t i;
	json_t *e;

	if (json_is_string(v)) {
		b64_scan_piece(&sc, json_string_value(v), json_string_length(v));
	} else {
		json_array_foreach(v, i, e)
			if (json_is_string(e))
				b64_scan_piece(&sc, json_string_value(e), json_string_length(e));
	}
	if (sc.bad)
		return sc.bad;
	if (sc.chars % 4 == 1 || (sc.pad && (sc.chars + sc.pad) % 4))
		return "base64 data has a wrong length";
	*decoded = sc.chars / 4 * 3 + (sc.chars % 4 ? sc.chars % 4 - 1 : 0);
	return *decoded ? NULL : "empty image";
}

struct img_write {
	struct op *o;
	const struct img_type *type;
	const char *name;     /* file name below images/ */
	int fd;               /* -1 until the magic was checked */
	bool write;           /* false: stop after the magic check */
	bool done;
	size_t dlen;          /* decoded bytes waiting in o->dec */
	uint64_t written;
	base64_decodestate st;
	const char *why;      /* reason for giving up */
	int err;              /* errno when writing failed */
};

/* Hand decoded bytes on: check the magic once, then write them. */
static void img_flush(struct img_write *w, bool last)
{
	struct op *o = w->o;
	int rc;

	if (w->done || w->dlen == 0)
		return;
	if (w->fd < 0) {
		if (w->dlen < w->type->magic_len && !last)
			return; /* wait for enough bytes to check */
		if (w->dlen < w->type->magic_len ||
		    memcmp(o->dec, w->type->magic, w->type->magic_len)) {
			w->why = "mismatch";
			w->done = true;
			return;
		}
		if (!w->write) {
			w->done = true;
			return;
		}
		/* A stale file of an earlier parse into the same directory is replaced. */
		unlinkat(o->img_dirfd, w->name, 0);
		w->fd = nbrun__export_open(o->img_dirfd, w->name, 0644);
		if (w->fd < 0) {
			w->err = -w->fd;
			w->fd = -1;
			w->why = "cannot create the file";
			w->done = true;
			return;
		}
	}
	rc = fd_write_all(w->fd, o->dec, w->dlen);
	if (rc < 0) {
		w->err = -rc;
		w->why = "cannot write the file";
		w->done = true;
		return;
	}
	w->written += w->dlen;
	w->dlen = 0;
}

static void img_decode_piece(struct img_write *w, const char *s, size_t n)
{
	while (n && !w->done) {
		size_t step = n < B64_IN_CHUNK ? n : B64_IN_CHUNK;
		int got;

		/*
		 * libb64 completes at most (6*step + 6 pending bits)/8 bytes and stores one
		 * more partial byte: below step/4*3 + 4. Keep a margin above that.
		 */
		if (w->dlen + step / 4 * 3 + 8 > B64_OUT_CAP) {
			img_flush(w, false);
			if (w->done)
				return;
		}
		got = base64_decode_block(s, (int)step, w->o->dec + w->dlen, &w->st);
		if (got > 0)
			w->dlen += (size_t)got;
		s += step;
		n -= step;
		/* Without writing, only the first bytes matter. */
		if (!w->write && w->dlen >= w->type->magic_len)
			img_flush(w, false);
	}
}

static void img_decode(struct img_write *w, const json_t *v)
{
	size_t i;
	json_t *e;

	base64_init_decodestate(&w->st);
	if (json_is_string(v)) {
		img_decode_piece(w, json_string_value(v), json_string_length(v));
	} else {
		json_array_foreach(v, i, e)
			if (json_is_string(e) && !w->done)
				img_decode_piece(w, json_string_value(e), json_string_length(e));
	}
	img_flush(w, true);
}

static int op_images_dir(struct op *o)
{
	if (o->img_dirfd >= 0)
		return 0;
	o->img_dirfd = nbrun__export_mkdirs(o->out_dirfd, "images");
	return o->img_dirfd >= 0 ? 0 : o->img_dirfd;
}

/* Record an image that was written (images list) and return its data entry. */
static json_t *op_image_written(struct op *o, const char *path, const char *mime, size_t cell,
				uint64_t bytes)
{
	json_t *img = json_pack("{s:s, s:s, s:I, s:I}", "path", path, "mime", mime, "cell",
				(json_int_t)cell, "bytes", (json_int_t)bytes);

	if (!img || json_array_append_new(o->images, img) < 0)
		return NULL;
	return json_pack("{s:s, s:I}", "path", path, "bytes", (json_int_t)bytes);
}

static json_t *op_image_skipped(struct op *o, const char *path, uint64_t bytes, const char *reason,
				bool flag)
{
	int rc = nbrun__result_skip(o->r, path, reason);

	if (rc < 0) {
		o->err = rc;
		return NULL;
	}
	if (flag)
		nbrun__result_flag_truncated(o->r);
	return json_pack("{s:I, s:s}", "bytes", (json_int_t)bytes, "skipped", reason);
}

/* A base64 image: validate, check caps, decode into images/<name>. Returns the data entry. */
static json_t *op_image_b64(struct op *o, const struct img_type *t, const json_t *v, size_t cell,
			    unsigned int k)
{
	char name[64], path[80], reason[192];
	struct img_write w;
	uint64_t size = 0;
	const char *bad;
	int rc;

	snprintf(name, sizeof(name), "cell%zu-%u.%s", cell, k, mime_extension(t->mime));
	snprintf(path, sizeof(path), "images/%s", name);
	if (!is_text(v))
		return op_image_skipped(o, path, 0, "image data is not a string", false);
	bad = b64_check(v, &size);
	if (bad)
		return op_image_skipped(o, path, 0, bad, false);
	if (size > o->lim->max_image_bytes) {
		snprintf(reason, sizeof(reason), "image is %" PRIu64 " bytes, over the limit of %" PRIu64,
			 size, o->lim->max_image_bytes);
		return op_image_skipped(o, path, size, reason, true);
	}
	if (o->out_dirfd >= 0 && json_array_size(o->images) >= o->lim->max_images) {
		snprintf(reason, sizeof(reason), "more than %zu images", o->lim->max_images);
		return op_image_skipped(o, path, size, reason, true);
	}
	if (o->out_dirfd >= 0) {
		rc = op_images_dir(o);
		if (rc < 0) {
			snprintf(reason, sizeof(reason), "cannot create images/: %s", strerror(-rc));
			return op_image_skipped(o, path, size, reason, false);
		}
	}
	memset(&w, 0, sizeof(w));
	w.o = o;
	w.type = t;
	w.name = name;
	w.fd = -1;
	w.write = o->out_dirfd >= 0;
	img_decode(&w, v);
	if (w.fd >= 0)
		close(w.fd);
	if (!w.why && w.write && w.written != size)
		w.why = "decoded size differs from the expected size";
	if (w.why) {
		if (w.fd >= 0)
			unlinkat(o->img_dirfd, name, 0);
		if (!strcmp(w.why, "mismatch"))
			snprintf(reason, sizeof(reason), "%s data is not %s (looks like %s)", t->mime,
				 t->what, img_sniff((const unsigned char *)o->dec, w.dlen));
		else if (w.err)
			snprintf(reason, sizeof(reason), "%s: %s", w.why, strerror(w.err));
		else
			snprintf(reason, sizeof(reason), "%s", w.why);
		return op_image_skipped(o, path, size, reason, false);
	}
	if (!w.write)
		return json_pack("{s:I}", "bytes", (json_int_t)size);
	return op_image_written(o, path, t->mime, cell, size);
}

/* ---- SVG: an XML document whose root element is svg ----------------------------- */

#define SVG_HEAD 65536
#define SVG_TAIL 4096

static bool svg_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool svg_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
	       c == ':' || c == '.' || c == '-' || (unsigned char)c >= 0x80;
}

/*
 * Why head..tail is not an SVG document, or NULL when it is one: after the
 * prolog (BOM, XML declaration, processing instructions, comments, a
 * DOCTYPE with its internal subset) the root element must be svg (with any
 * namespace prefix), and the text must end with that element's end (or the
 * root closes itself), comments and whitespace aside. root gets its name.
 */
static const char *svg_reject_reason(const char *s, size_t n, const char *tail, size_t tn,
				     bool whole, char root[64])
{
	const char *p = s, *end = s + n, *name, *q;
	size_t len;
	bool self_closed = false;

	root[0] = '\0';
	if (n >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
		p += 3;
	for (;;) {
		while (p < end && svg_space(*p))
			p++;
		if (end - p >= 2 && !memcmp(p, "<?", 2)) {
			q = memmem(p, (size_t)(end - p), "?>", 2);
			if (!q)
				return "not XML";
			p = q + 2;
		} else if (end - p >= 4 && !memcmp(p, "<!--", 4)) {
			q = memmem(p + 4, (size_t)(end - p - 4), "-->", 3);
			if (!q)
				return "not XML";
			p = q + 3;
		} else if (end - p >= 9 && !memcmp(p, "<!DOCTYPE", 9)) {
			const char *gt = memchr(p, '>', (size_t)(end - p));
			const char *br = memchr(p, '[', (size_t)(end - p));
			if (br && (!gt || br < gt)) {
				q = memmem(br, (size_t)(end - br), "]", 1);
				gt = q ? memchr(q, '>', (size_t)(end - q)) : NULL;
			}
			if (!gt)
				return "not XML";
			p = gt + 1;
		} else {
			break;
		}
	}
	if (p >= end || *p != '<')
		return "not XML";
	name = ++p;
	while (p < end && svg_name_char(*p))
		p++;
	len = (size_t)(p - name);
	snprintf(root, 64, "%.*s", (int)(len < 63 ? len : 63), name);
	if (!len || (p < end && !svg_space(*p) && *p != '>' && *p != '/'))
		return "not XML";
	q = memrchr(name, ':', len);
	q = q ? q + 1 : name;
	if ((size_t)(name + len - q) != 3 || memcmp(q, "svg", 3))
		return "root";
	/* a root that closes itself: "<svg ... />" */
	q = memchr(p, '>', (size_t)(end - p));
	self_closed = q && q > p && q[-1] == '/';
	if (!whole && self_closed)
		return NULL;
	/* the end: "</NAME>" last, comments and whitespace aside */
	while (tn && svg_space(tail[tn - 1]))
		tn--;
	while (tn >= 3 && !memcmp(tail + tn - 3, "-->", 3)) {
		const char *c = NULL;
		for (const char *x = tail; x + 4 <= tail + tn; x++)
			if (!memcmp(x, "<!--", 4))
				c = x;
		if (!c)
			break;
		tn = (size_t)(c - tail);
		while (tn && svg_space(tail[tn - 1]))
			tn--;
	}
	if (self_closed && whole && tn == (size_t)(q + 1 - tail) && tail == s)
		return NULL;
	if (!tn || tail[tn - 1] != '>')
		return "not XML";
	tn--;
	while (tn && svg_space(tail[tn - 1]))
		tn--;
	if (tn < len + 2 || memcmp(tail + tn - len, name, len) || memcmp(tail + tn - len - 2, "</", 2))
		return "not XML";
	return NULL;
}

/* The first SVG_HEAD and last SVG_TAIL bytes of a text value, for the check. */
static const char *svg_check(const json_t *v, char root[64])
{
	static __thread char head[SVG_HEAD], tail[SVG_TAIL];
	size_t hn = 0, tn = 0, i;
	bool whole = true;

	for (i = 0; json_is_string(v) ? i < 1 : i < json_array_size(v); i++) {
		const json_t *piece = json_is_string(v) ? v : json_array_get(v, i);
		const char *s = json_string_value(piece);
		size_t n = json_string_length(piece), take;

		if (!s)
			continue;
		take = n < SVG_HEAD - hn ? n : SVG_HEAD - hn;
		memcpy(head + hn, s, take);
		hn += take;
		if (take < n)
			whole = false;
		if (n >= SVG_TAIL) {
			memcpy(tail, s + n - SVG_TAIL, SVG_TAIL);
			tn = SVG_TAIL;
		} else {
			size_t keep = tn + n > SVG_TAIL ? SVG_TAIL - n : tn;
			memmove(tail, tail + tn - keep, keep);
			memcpy(tail + keep, s, n);
			tn = keep + n;
		}
	}
	if (whole)
		return svg_reject_reason(head, hn, head, hn, true, root);
	return svg_reject_reason(head, hn, tail, tn, false, root);
}

/* SVG is text: written as it is (no escapes to strip in a file), bounded by the image cap. */
static json_t *op_image_svg(struct op *o, const json_t *v, size_t cell, unsigned int k)
{
	char name[64], path[80], reason[192], root[64];
	uint64_t size = 0;
	const char *bad;
	size_t i;
	json_t *e;
	int fd, rc = 0;

	snprintf(name, sizeof(name), "cell%zu-%u.svg", cell, k);
	snprintf(path, sizeof(path), "images/%s", name);
	if (!is_text(v))
		return op_image_skipped(o, path, 0, "image data is not a string", false);
	if (json_is_string(v)) {
		size = json_string_length(v);
	} else {
		json_array_foreach(v, i, e)
			size += json_string_length(e);
	}
	if (size > o->lim->max_image_bytes) {
		snprintf(reason, sizeof(reason), "image is %" PRIu64 " bytes, over the limit of %" PRIu64,
			 size, o->lim->max_image_bytes);
		return op_image_skipped(o, path, size, reason, true);
	}
	/* Image bytes must match their type: a <script> alone is no SVG. */
	bad = svg_check(v, root);
	if (bad) {
		for (char *c = root; *c; c++)
			if ((unsigned char)*c >= 0x80)
				*c = '?';
		if (!strcmp(bad, "root"))
			snprintf(reason, sizeof(reason), "image/svg+xml data is not SVG (its root element is %.40s)",
				 root);
		else
			snprintf(reason, sizeof(reason), "image/svg+xml data is not SVG (%s)", bad);
		return op_image_skipped(o, path, size, reason, false);
	}
	if (o->out_dirfd < 0)
		return json_pack("{s:I}", "bytes", (json_int_t)size);
	if (json_array_size(o->images) >= o->lim->max_images) {
		snprintf(reason, sizeof(reason), "more than %zu images", o->lim->max_images);
		return op_image_skipped(o, path, size, reason, true);
	}
	rc = op_images_dir(o);
	if (rc < 0) {
		snprintf(reason, sizeof(reason), "cannot create images/: %s", strerror(-rc));
		return op_image_skipped(o, path, size, reason, false);
	}
	unlinkat(o->img_dirfd, name, 0);
	fd = nbrun__export_open(o->img_dirfd, name, 0644);
	if (fd < 0) {
		snprintf(reason, sizeof(reason), "cannot create the file: %s", strerror(-fd));
		return op_image_skipped(o, path, size, reason, false);
	}
	if (json_is_string(v)) {
		rc = fd_write_all(fd, json_string_value(v), json_string_length(v));
	} else {
		json_array_foreach(v, i, e)
			if (rc == 0 && json_is_string(e))
				rc = fd_write_all(fd, json_string_value(e), json_string_length(e));
	}
	close(fd);
	if (rc < 0) {
		unlinkat(o->img_dirfd, name, 0);
		snprintf(reason, sizeof(reason), "cannot write the file: %s", strerror(-rc));
		return op_image_skipped(o, path, size, reason, false);
	}
	return op_image_written(o, path, "image/svg+xml", cell, size);
}

/* ---- MIME bundles ------------------------------------------------------------- */

static bool mime_name_ok(const char *s, size_t len)
{
	const char *slash;

	if (len == 0 || len > MAX_MIME_NAME || strlen(s) != len)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("!#$&^_.+-/=;", c)))
			return false;
	}
	slash = strchr(s, '/');
	return slash && slash != s && slash[1] && !strchr(slash + 1, '/');
}

static bool mime_is_json(const char *mime)
{
	size_t n = strlen(mime);

	return !strcmp(mime, "application/json") || (n > 5 && !strcmp(mime + n - 5, "+json"));
}

/* Serialised size of v, stopping early past limit. */
struct dump_count {
	size_t n, limit;
};

static int dump_count_cb(const char *buf, size_t size, void *data)
{
	struct dump_count *c = data;

	(void)buf;
	c->n += size;
	return c->n > c->limit ? -1 : 0;
}

static int dump_acc_cb(const char *buf, size_t size, void *data)
{
	text_acc_add(data, buf, size);
	return 0;
}

/*
 * A JSON MIME value: kept as JSON when small, else bounded text of its
 * serialisation, streamed into the head+tail accumulator so that a huge
 * value is never serialised whole in memory.
 */
static json_t *op_json_value(struct op *o, const json_t *v)
{
	struct dump_count c = { 0, o->lim->max_output };
	struct text_acc acc;

	if (json_dump_callback(v, dump_count_cb, &c, JSON_COMPACT | JSON_ENCODE_ANY) == 0)
		return json_deep_copy(v);
	text_acc_init(&acc, o->lim->max_output);
	json_dump_callback(v, dump_acc_cb, &acc, JSON_COMPACT | JSON_ENCODE_ANY);
	return acc_to_json(o, &acc);
}

/*
 * The "data" of an execute_result / display_data: text bounded, images
 * exported, JSON kept. *k counts the images of the cell.
 */
static int op_bundle(struct op *o, json_t **out, const json_t *data, size_t cell, unsigned int *k)
{
	json_t *res = json_object(), *val;
	const char *mime;
	char where[96];
	size_t nkeys = 0, extra = 0, mime_len;
	json_t *v;
	int rc = NBRUN_ENOMEM;

	*out = NULL;
	if (!res)
		goto out;
	json_object_keylen_foreach((json_t *)data, mime, mime_len, v) {
		const struct img_type *t;

		if (++nkeys > MAX_MIME_KEYS) {
			extra++;
			continue;
		}
		if (!mime_name_ok(mime, mime_len)) {
			snprintf(where, sizeof(where), "cell%zu", cell);
			rc = nbrun__result_skip(o->r, where, "invalid MIME type name");
			if (rc < 0)
				goto out;
			continue;
		}
		t = img_type_of(mime);
		if (t) {
			val = op_image_b64(o, t, v, cell, ++*k);
		} else if (!strcmp(mime, "image/svg+xml")) {
			val = op_image_svg(o, v, cell, ++*k);
		} else if (mime_is_json(mime)) {
			val = op_json_value(o, v);
		} else if (is_text(v)) {
			val = op_text(o, v, NULL, o->lim->max_output);
		} else {
			snprintf(where, sizeof(where), "cell%zu:%s", cell, mime);
			rc = nbrun__result_skip(o->r, where, "MIME value is not text");
			if (rc < 0)
				goto out;
			continue;
		}
		rc = NBRUN_ENOMEM;
		if (!val && o->err < 0)
			rc = o->err;
		if (!val || json_object_set_new(res, mime, val) < 0)
			goto out;
	}
	if (extra) {
		snprintf(where, sizeof(where), "cell%zu:data", cell);
		rc = op_skip(o, where, "%zu more MIME types in one output", extra);
		if (rc < 0)
			goto out;
		nbrun__result_flag_truncated(o->r);
	}
	*out = res;
	res = NULL;
	rc = 0;
out:
	json_decref(res);
	return rc;
}

/* ---- outputs ------------------------------------------------------------------ */

static json_t *op_display_id(const json_t *output)
{
	const json_t *id = json_object_get(json_object_get(output, "transient"), "display_id");

	if (!json_is_string(id))
		id = json_object_get(json_object_get(output, "metadata"), "display_id");
	if (!json_is_string(id) || json_string_length(id) > MAX_DISPLAY_ID)
		return NULL;
	return json_deep_copy(id);
}

static int op_stream(struct op *o, json_t *entry, const json_t *output)
{
	const char *name = json_string_value(json_object_get(output, "name"));
	const json_t *text = json_object_get(output, "text");
	bool err = name && !strcmp(name, "stderr");

	json_object_set_new(entry, "name", json_string(err ? "stderr" : "stdout"));
	/* The run's stdout/stderr keep head and tail of everything the cells printed. */
	text_feed_value(text, NULL, err ? &o->err_ansi : &o->out_ansi, err ? &o->err_acc : &o->out_acc,
			true);
	if (json_object_set_new(entry, "text", op_text(o, text, NULL, o->lim->max_output)) < 0)
		return NBRUN_ENOMEM;
	return 0;
}

bool nbrun__is_clean_exit(const char *ename, const char *evalue)
{
	return ename && !strcmp(ename, "SystemExit") && (!evalue || !*evalue || !strcmp(evalue, "0"));
}

static int op_error(struct op *o, json_t *entry, const json_t *output, size_t cell)
{
	json_t *name = op_text(o, json_object_get(output, "ename"), NULL, o->lim->max_output);
	json_t *value = op_text(o, json_object_get(output, "evalue"), NULL, o->lim->max_output);
	json_t *tb = op_text(o, json_object_get(output, "traceback"), "\n", o->lim->max_output);
	int rc = NBRUN_ENOMEM;

	if (!name || !value || !tb)
		goto out;
	/* sys.exit(), sys.exit(0) and raise SystemExit end a notebook as a
	 * success (papermill): listed as an output, not the run's error */
	if (!o->have_error && !nbrun__is_clean_exit(json_string_value(name), json_string_value(value))) {
		json_t *e = json_pack("{s:I, s:O, s:O, s:O}", "cell", (json_int_t)cell, "name", name,
				      "value", value, "traceback", tb);
		if (!e)
			goto out;
		json_object_set_new(o->r->doc, "error", e);
		o->have_error = true;
	}
	if (json_object_set(entry, "name", name) < 0 || json_object_set(entry, "value", value) < 0 ||
	    json_object_set(entry, "traceback", tb) < 0)
		goto out;
	rc = 0;
out:
	json_decref(name);
	json_decref(value);
	json_decref(tb);
	return rc;
}

static int op_display(struct op *o, json_t *entry, const json_t *output, const char *type,
		      size_t cell, unsigned int *k)
{
	const json_t *data = json_object_get(output, "data");
	json_t *bundle = NULL, *id, *plain;
	int rc;

	if (!strcmp(type, "execute_result")) {
		const json_t *ec = json_object_get(output, "execution_count");
		rc = json_object_set_new(entry, "execution_count",
					 json_is_integer(ec) ? json_integer(json_integer_value(ec)) : json_null());
		if (rc < 0)
			return NBRUN_ENOMEM;
	}
	id = op_display_id(output);
	if (id && json_object_set_new(entry, "display_id", id) < 0)
		return NBRUN_ENOMEM;
	if (json_is_object(data)) {
		rc = op_bundle(o, &bundle, data, cell, k);
		if (rc < 0)
			return rc;
	} else {
		bundle = json_object();
	}
	if (!bundle || json_object_set_new(entry, "data", bundle) < 0)
		return NBRUN_ENOMEM;
	plain = json_object_get(bundle, "text/plain");
	if (!strcmp(type, "execute_result") && json_is_string(plain)) {
		if (json_array_size(o->results) >= o->lim->max_outputs) {
			o->dropped_results++;
			return 0;
		}
		json_t *res = json_pack("{s:I, s:O}", "cell", (json_int_t)cell, "text", plain);
		if (!res || json_array_append_new(o->results, res) < 0)
			return NBRUN_ENOMEM;
	}
	return 0;
}

static int op_output(struct op *o, const json_t *output, size_t cell, unsigned int *k)
{
	const json_t *jtype = json_object_get(output, "output_type");
	const char *type = json_string_value(jtype);
	char where[48], shown[MAX_TYPE_IN_REASON + 1];
	json_t *entry = NULL;
	int rc = NBRUN_ENOMEM;

	snprintf(where, sizeof(where), "cell%zu", cell);
	if (!json_is_object(output)) {
		rc = nbrun__result_skip(o->r, where, "output is not an object");
		goto out;
	}
	if (!type) {
		rc = nbrun__result_skip(o->r, where, "output without an output_type");
		goto out;
	}
	if (strcmp(type, "stream") && strcmp(type, "execute_result") && strcmp(type, "display_data") &&
	    strcmp(type, "update_display_data") && strcmp(type, "error")) {
		short_name(shown, sizeof(shown), jtype);
		rc = op_skip(o, where, "unknown output type '%s'", shown);
		goto out;
	}
	entry = json_pack("{s:I, s:s}", "cell", (json_int_t)cell, "type", type);
	if (!entry)
		goto out;
	if (!strcmp(type, "stream"))
		rc = op_stream(o, entry, output);
	else if (!strcmp(type, "error"))
		rc = op_error(o, entry, output, cell);
	else
		rc = op_display(o, entry, output, type, cell, k);
	if (rc < 0)
		goto out;
	/* Past the cap the output still counts for stdout, results, error and images. */
	if (json_array_size(o->outputs) >= o->lim->max_outputs) {
		o->dropped++;
		rc = 0;
		goto out;
	}
	rc = json_array_append(o->outputs, entry) < 0 ? NBRUN_ENOMEM : 0;
out:
	json_decref(entry);
	return rc;
}

static int op_cells(struct op *o, const json_t *cells)
{
	size_t i, j;
	json_t *cell, *output;
	int rc;

	json_array_foreach(cells, i, cell) {
		const json_t *outputs = json_object_get(cell, "outputs");
		unsigned int k = 0;

		const char *type = json_string_value(json_object_get(cell, "cell_type"));

		/* Markdown and raw cells only count; a cell without outputs has nothing to give. */
		if (!type || strcmp(type, "code") || !json_is_array(outputs))
			continue;
		json_array_foreach(outputs, j, output) {
			rc = op_output(o, output, i, &k);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* Add a summary entry to "skipped" that carries a count. */
static int op_skip_count(struct op *o, const char *path, size_t count, const char *what,
			 size_t cap)
{
	json_t *arr = json_object_get(o->r->doc, "skipped");
	size_t before = json_array_size(arr);
	char reason[128];
	int rc;

	snprintf(reason, sizeof(reason), "more than %zu %s; the rest are not listed", cap, what);
	rc = nbrun__result_skip(o->r, path, reason);
	if (rc < 0)
		return rc;
	if (json_array_size(arr) > before)
		json_object_set_new(json_array_get(arr, before), "count", json_integer((json_int_t)count));
	nbrun__result_flag_truncated(o->r);
	return 0;
}

int nbrun__outputs_parse(struct nbrun_ctx *ctx, struct nbrun_result *r, const json_t *nb,
			 int out_dirfd, const struct nbrun__limits *lim)
{
	const json_t *cells = json_object_get(nb, "cells");
	struct op o;
	json_t *s;
	int rc = NBRUN_ENOMEM;

	memset(&o, 0, sizeof(o));
	o.ctx = ctx;
	o.r = r;
	o.lim = lim;
	o.out_dirfd = out_dirfd;
	o.img_dirfd = -1;
	text_acc_init(&o.out_acc, lim->max_output);
	text_acc_init(&o.err_acc, lim->max_output);
	text_ansi_init(&o.out_ansi);
	text_ansi_init(&o.err_ansi);
	if (!json_is_object(nb)) {
		rc = nbrun__err(ctx, NBRUN_EPARSE, "notebook is not a JSON object");
		goto out;
	}
	if (cells && !json_is_array(cells)) {
		rc = nbrun__err(ctx, NBRUN_EPARSE, "notebook's \"cells\" is not a list");
		goto out;
	}
	o.outputs = json_array();
	o.results = json_array();
	o.images = json_array();
	o.dec = malloc(B64_OUT_CAP);
	if (!o.outputs || !o.results || !o.images || !o.dec)
		goto out;
	if (json_object_set(r->doc, "outputs", o.outputs) < 0 ||
	    json_object_set(r->doc, "results", o.results) < 0 ||
	    json_object_set(r->doc, "images", o.images) < 0)
		goto out;
	if (json_object_set_new(r->doc, "cells", json_integer((json_int_t)json_array_size(cells))) < 0)
		goto out;
	rc = op_cells(&o, cells);
	if (rc == 0 && o.dropped)
		rc = op_skip_count(&o, "outputs", o.dropped, "outputs", lim->max_outputs);
	if (rc == 0 && o.dropped_results)
		rc = op_skip_count(&o, "results", o.dropped_results, "results", lim->max_outputs);
	if (rc < 0)
		goto out;
	rc = NBRUN_ENOMEM;
	s = acc_to_json(&o, &o.out_acc);
	if (!s || json_object_set_new(r->doc, "stdout", s) < 0)
		goto out;
	s = acc_to_json(&o, &o.err_acc);
	if (!s || json_object_set_new(r->doc, "stderr", s) < 0)
		goto out;
	nbrun__result_set_status(r, o.have_error ? NBRUN_STATUS_ERROR : NBRUN_STATUS_OK, NULL);
	rc = 0;
out:
	/* Failures keep their code; jansson and the result's builders set no message. */
	if (rc == NBRUN_ENOMEM)
		nbrun__err(ctx, rc, "out of memory while reading the notebook's outputs");
	else if (rc == NBRUN_EINVAL)
		nbrun__err(ctx, rc, "cannot record a skipped output in the result");
	text_acc_free(&o.out_acc);
	text_acc_free(&o.err_acc);
	if (o.img_dirfd >= 0)
		close(o.img_dirfd);
	json_decref(o.outputs);
	json_decref(o.results);
	json_decref(o.images);
	free(o.dec);
	return rc;
}
