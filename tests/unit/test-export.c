/* SPDX-License-Identifier: MIT */
/*
 * The security boundary for files coming back from the container:
 * nbrun__export_files on hostile archives, plus the path helpers under it.
 *
 * Every case builds a tar (pax, top directory "data/" as the Docker archive
 * API sends /mnt/data) in its own temp dir, exports it into a fresh
 * <tmp>/out, and then checks the invariants that must hold whatever the
 * archive said: everything under out/ is a regular file or a directory (no
 * symlink, no device, no FIFO), lives under out/files/, is listed in the
 * result's "files" with the right bytes and sha256, and nothing appeared
 * next to out/ in the parent directory.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "nbrun-private.h"
#include "text.h"

/* ---- archive builder ------------------------------------------------------ */

struct tarw {
	char *path;
	struct archive *a;
};

static void tw_open(struct tarw *w, const char *dir)
{
	assert_true(asprintf(&w->path, "%s/in.tar", dir) > 0);
	w->a = archive_write_new();
	assert_non_null(w->a);
	assert_int_equal(archive_write_set_format_pax(w->a), ARCHIVE_OK);
	assert_int_equal(archive_write_set_bytes_in_last_block(w->a, 1), ARCHIVE_OK);
	assert_int_equal(archive_write_open_filename(w->a, w->path), ARCHIVE_OK);
}

static struct archive_entry *tw_entry(const char *name, mode_t type, mode_t perm, int64_t size)
{
	struct archive_entry *e = archive_entry_new();

	assert_non_null(e);
	archive_entry_copy_pathname(e, name);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_size(e, size);
	archive_entry_set_uid(e, 1000);
	archive_entry_set_gid(e, 100);
	archive_entry_set_mtime(e, 1700000000, 0);
	return e;
}

static void tw_put(struct tarw *w, struct archive_entry *e, const void *data, size_t len)
{
	int rc = archive_write_header(w->a, e);

	if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
		fail_msg("archive_write_header(%s): %s", archive_entry_pathname(e),
			 archive_error_string(w->a));
	if (len)
		assert_int_equal(archive_write_data(w->a, data, len), (la_ssize_t)len);
	archive_entry_free(e);
}

static void tw_file(struct tarw *w, const char *name, const void *data, size_t len, mode_t perm)
{
	tw_put(w, tw_entry(name, AE_IFREG, perm, (int64_t)len), data, len);
}

static void tw_str(struct tarw *w, const char *name, const char *s)
{
	tw_file(w, name, s, strlen(s), 0644);
}

static void tw_dir(struct tarw *w, const char *name)
{
	tw_put(w, tw_entry(name, AE_IFDIR, 0755, 0), NULL, 0);
}

static void tw_symlink(struct tarw *w, const char *name, const char *target)
{
	struct archive_entry *e = tw_entry(name, AE_IFLNK, 0777, 0);

	archive_entry_copy_symlink(e, target);
	tw_put(w, e, NULL, 0);
}

static void tw_hardlink(struct tarw *w, const char *name, const char *target)
{
	struct archive_entry *e = tw_entry(name, AE_IFREG, 0644, 0);

	archive_entry_copy_hardlink(e, target);
	tw_put(w, e, NULL, 0);
}

static void tw_special(struct tarw *w, const char *name, mode_t type)
{
	struct archive_entry *e = tw_entry(name, type, 0666, 0);

	if (type == AE_IFCHR || type == AE_IFBLK)
		archive_entry_set_rdev(e, makedev(1, 3));
	tw_put(w, e, NULL, 0);
}

static void tw_close(struct tarw *w)
{
	assert_int_equal(archive_write_close(w->a), ARCHIVE_OK);
	archive_write_free(w->a);
	w->a = NULL;
}

static off_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

/* ---- hand-made tar bytes: what Go's archive/tar (the engine) writes ---- */

static void raw_header(unsigned char h[512], const char *name, char type, uint64_t size)
{
	unsigned int sum = 0;

	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0001750", 8);
	memcpy(h + 116, "0001750", 8);
	if (size < 077777777777ULL) {
		snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
	} else { /* base-256, as GNU and Go write big sizes */
		h[124] = 0x80;
		for (int i = 0; i < 8; i++)
			h[135 - i] = (unsigned char)(size >> (8 * i));
	}
	memcpy(h + 136, "14531066400", 12);
	h[156] = (unsigned char)type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

static void raw_put(int fd, const void *data, size_t len)
{
	static const char zero[512];

	assert_int_equal(fd_write_all(fd, data, len), 0);
	if (len % 512)
		assert_int_equal(fd_write_all(fd, zero, 512 - len % 512), 0);
}

/* A pax 'x' header carrying path=..., then the file. */
static void raw_pax_file(int fd, const char *path, const char *data)
{
	unsigned char h[512];
	char rec[1200];
	size_t body = strlen(" path=\n") + strlen(path), n = body + 1;

	while ((size_t)snprintf(NULL, 0, "%zu", n) + body != n)
		n++;
	snprintf(rec, sizeof(rec), "%zu path=%s\n", n, path);
	assert_int_equal(strlen(rec), n);
	raw_header(h, "data/PaxHeaders/x", 'x', n);
	raw_put(fd, h, 512);
	raw_put(fd, rec, n);
	raw_header(h, "data/fallback-name", '0', strlen(data));
	raw_put(fd, h, 512);
	raw_put(fd, data, strlen(data));
}

/* ---- fixture ------------------------------------------------------------------ */

struct fx {
	char *tmp;    /* holds the archive */
	char *parent; /* holds only out/ */
	char *out;
	int out_fd;
	struct tarw w;
	struct nbrun_ctx ctx;
	struct nbrun_result *r;
	struct nbrun__files_export x;
	struct nbrun__export_input inputs[4];
	int rc;
};

static char *mkdtemp_in(const char *base, const char *name)
{
	char *p = NULL;

	assert_true(asprintf(&p, "%s/%s-XXXXXX", base, name) > 0);
	assert_non_null(mkdtemp(p));
	return p;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	const char *base = getenv("TMPDIR");

	assert_non_null(f);
	if (!base || !*base)
		base = "/tmp";
	f->tmp = mkdtemp_in(base, "nbrun-export-tar");
	f->parent = mkdtemp_in(base, "nbrun-export");
	assert_true(asprintf(&f->out, "%s/out", f->parent) > 0);
	assert_int_equal(mkdir(f->out, 0700), 0);
	f->out_fd = open(f->out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(f->out_fd >= 0);
	assert_int_equal(nbrun__result_new(&f->r, "test-run"), 0);
	f->x.result = f->r;
	f->x.out_fd = f->out_fd;
	f->x.max_bytes = NBRUN_DEFAULT_MAX_FILE_BYTES;
	f->x.max_files = NBRUN_DEFAULT_MAX_FILES;
	tw_open(&f->w, f->tmp);
	*state = f;
	return 0;
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP || flag == FTW_D)
		chmod(p, 0700);
	return remove(p);
}

static void rm_tree(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->w.a)
		archive_write_free(f->w.a);
	free(f->w.path);
	if (f->out_fd >= 0)
		close(f->out_fd);
	nbrun_result_free(f->r);
	for (size_t i = 0; i < 4; i++)
		free(f->inputs[i].name);
	rm_tree(f->tmp);
	rm_tree(f->parent);
	free(f->tmp);
	free(f->parent);
	free(f->out);
	free(f);
	return 0;
}

/* Export the archive as written so far (closing it first unless already done). */
static void run_export(struct fx *f, bool stream_cut)
{
	int fd;

	if (f->w.a)
		tw_close(&f->w);
	fd = open(f->w.path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	f->rc = nbrun__export_files(&f->ctx, &f->x, fd, stream_cut);
	close(fd);
	assert_null(f->x.entry_rel);
}

static int raw_open(struct fx *f)
{
	int fd;

	archive_write_free(f->w.a);
	f->w.a = NULL;
	fd = open(f->w.path, O_WRONLY | O_TRUNC | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	return fd;
}

static void raw_end(int fd)
{
	static const char zero[1024];

	assert_int_equal(fd_write_all(fd, zero, sizeof(zero)), 0);
	close(fd);
}

/* ---- invariants --------------------------------------------------------------- */

static void sha256_path(const char *path, char hex[65])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	unsigned char md[EVP_MAX_MD_SIZE], chunk[8192];
	unsigned int mdlen = 0;
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	ssize_t n;

	assert_true(fd >= 0);
	assert_non_null(c);
	assert_int_equal(EVP_DigestInit_ex(c, EVP_sha256(), NULL), 1);
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		EVP_DigestUpdate(c, chunk, (size_t)n);
	assert_int_equal(n, 0);
	assert_int_equal(EVP_DigestFinal_ex(c, md, &mdlen), 1);
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	EVP_MD_CTX_free(c);
	close(fd);
}

static struct {
	const char *out;
	size_t out_len;
	const json_t *files;
	size_t n_regular;
	size_t max_depth;
	const char *bad;
} walk;

static int walk_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	const char *rel;
	struct stat lst;
	size_t depth = 0;

	if (strncmp(p, walk.out, walk.out_len) || (p[walk.out_len] && p[walk.out_len] != '/')) {
		walk.bad = "path outside the output directory";
		return 1;
	}
	rel = p + walk.out_len;
	if (!*rel)
		return 0; /* out itself */
	rel++;
	if (lstat(p, &lst) < 0 || !(S_ISREG(lst.st_mode) || S_ISDIR(lst.st_mode))) {
		walk.bad = "not a regular file or directory";
		return 1;
	}
	if (strcmp(rel, "files") && strncmp(rel, "files/", 6)) {
		walk.bad = "created outside out/files";
		return 1;
	}
	for (const char *c = rel; *c; c++)
		depth += *c == '/';
	if (depth > walk.max_depth)
		walk.max_depth = depth;
	/* Modes: no setuid/setgid/sticky, nothing writable by group or others. */
	if (lst.st_mode & 07022) {
		walk.bad = "unsafe mode";
		return 1;
	}
	if (S_ISREG(lst.st_mode)) {
		size_t i;
		json_t *e;
		bool listed = false;

		walk.n_regular++;
		json_array_foreach(walk.files, i, e) {
			const char *fp = json_string_value(json_object_get(e, "path"));
			if (fp && !strcmp(fp, rel)) {
				char hex[65];
				listed = true;
				if (json_integer_value(json_object_get(e, "bytes")) != lst.st_size) {
					walk.bad = "size differs from the result";
					return 1;
				}
				sha256_path(p, hex);
				if (strcmp(hex, json_string_value(json_object_get(e, "sha256")) ?: "")) {
					walk.bad = "sha256 differs from the result";
					return 1;
				}
			}
		}
		if (!listed) {
			walk.bad = "file on disk not listed in the result";
			return 1;
		}
	}
	return 0;
}

/* What must hold after any export, hostile or not. */
static void check_invariants(struct fx *f)
{
	DIR *d;
	struct dirent *de;
	char *dump;
	json_t *files = json_object_get(f->r->doc, "files");
	size_t i;
	json_t *e;

	assert_int_equal(f->rc, 0);
	walk.out = f->out;
	walk.out_len = strlen(f->out);
	walk.files = files;
	walk.n_regular = 0;
	walk.max_depth = 0;
	walk.bad = NULL;
	assert_int_equal(nftw(f->out, walk_cb, 16, FTW_PHYS), 0);
	if (walk.bad)
		fail_msg("export invariant broken: %s", walk.bad);
	/* Every listed file exists (and was checked above). */
	assert_int_equal(walk.n_regular, json_array_size(files));
	json_array_foreach(files, i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		assert_non_null(p);
		assert_int_equal(strncmp(p, "files/", 6), 0);
		assert_null(nbrun__path_reject_reason(p + 6));
	}

	/* Nothing next to out/. */
	d = opendir(f->parent);
	assert_non_null(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "out"))
			continue;
		fail_msg("export created %s/%s outside the output directory", f->parent, de->d_name);
	}
	closedir(d);

	/* The result stays a valid document in valid UTF-8. */
	dump = json_dumps(f->r->doc, JSON_COMPACT);
	assert_non_null(dump);
	assert_true(text_utf8_valid(dump, strlen(dump)));
	free(dump);
}

/* ---- result helpers ------------------------------------------------------------ */

static const json_t *file_entry(struct fx *f, const char *path)
{
	json_t *files = json_object_get(f->r->doc, "files"), *e;
	size_t i;

	json_array_foreach(files, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "path")) ?: "", path))
			return e;
	return NULL;
}

static size_t n_files(struct fx *f)
{
	return json_array_size(json_object_get(f->r->doc, "files"));
}

/* The skip record for path, or NULL. */
static const char *skip_reason(struct fx *f, const char *path)
{
	json_t *sk = json_object_get(f->r->doc, "skipped"), *e;
	size_t i;

	json_array_foreach(sk, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "path")) ?: "", path))
			return json_string_value(json_object_get(e, "reason"));
	return NULL;
}

static size_t n_skipped(struct fx *f)
{
	return json_array_size(json_object_get(f->r->doc, "skipped"));
}

static bool truncated(struct fx *f)
{
	return json_is_true(json_object_get(f->r->doc, "truncated"));
}

static bool exists_under_out(struct fx *f, const char *rel)
{
	struct stat st;

	return fstatat(f->out_fd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void assert_file_content(struct fx *f, const char *rel, const void *data, size_t len)
{
	int fd = openat(f->out_fd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char *buf = malloc(len + 1);
	ssize_t n;

	if (fd < 0)
		fail_msg("%s was not exported", rel);
	assert_non_null(buf);
	n = read(fd, buf, len + 1);
	assert_int_equal(n, (ssize_t)len);
	assert_memory_equal(buf, data, len);
	free(buf);
	close(fd);
}

static void sha_of(const void *data, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	assert_int_equal(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL), 1);
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* ---- cases ------------------------------------------------------------------------ */

static void normal_files(void **state)
{
	struct fx *f = *state;
	static char big[200000];
	char hex[65];
	const json_t *e;

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 31 + (i >> 8));
	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/out.csv", "a,b\n1,2\n");
	tw_dir(&f->w, "data/plots/");
	tw_dir(&f->w, "data/plots/2024/");
	tw_file(&f->w, "data/plots/2024/big.bin", big, sizeof(big), 0644);
	tw_file(&f->w, "data/empty.txt", "", 0, 0644);
	tw_str(&f->w, "data/caf\xc3\xa9 \xe2\x9c\x93.txt", "unicode name");
	tw_str(&f->w, "data/emptydirs/only/deep.txt", "implicit parents");
	tw_dir(&f->w, "data/lonely/");
	run_export(f, false);
	check_invariants(f);

	assert_false(truncated(f));
	assert_int_equal(n_skipped(f), 0);
	assert_int_equal(n_files(f), 5);
	assert_file_content(f, "files/out.csv", "a,b\n1,2\n", 8);
	assert_file_content(f, "files/plots/2024/big.bin", big, sizeof(big));
	assert_file_content(f, "files/empty.txt", "", 0);
	assert_file_content(f, "files/caf\xc3\xa9 \xe2\x9c\x93.txt", "unicode name", 12);
	assert_file_content(f, "files/emptydirs/only/deep.txt", "implicit parents", 16);

	e = file_entry(f, "files/plots/2024/big.bin");
	assert_non_null(e);
	assert_int_equal(json_integer_value(json_object_get(e, "bytes")), sizeof(big));
	sha_of(big, sizeof(big), hex);
	assert_string_equal(json_string_value(json_object_get(e, "sha256")), hex);
	e = file_entry(f, "files/empty.txt");
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "sha256")),
			    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	/* The public accessors see the same list. */
	assert_int_equal(nbrun_result_file_count(f->r), 5);
	assert_non_null(nbrun_result_file_path(f->r, 0));
}

static void symlinks_skipped(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_symlink(&f->w, "data/passwd", "/etc/passwd");
	tw_symlink(&f->w, "data/up", "../../..");
	tw_symlink(&f->w, "data/dirlink", "/tmp");
	/* A file "through" the symlink must land in a real directory, if anywhere. */
	tw_str(&f->w, "data/dirlink/through.txt", "through");
	tw_str(&f->w, "data/up/escape.txt", "escape");
	tw_str(&f->w, "data/fine.txt", "fine");
	run_export(f, false);
	check_invariants(f);

	assert_false(exists_under_out(f, "files/passwd"));
	/* files/up may exist, but only as the real directory made for escape.txt */
	assert_file_content(f, "files/up/escape.txt", "escape", 6);
	assert_non_null(skip_reason(f, "passwd"));
	assert_string_equal(skip_reason(f, "passwd"), "symbolic link");
	assert_string_equal(skip_reason(f, "up"), "symbolic link");
	assert_string_equal(skip_reason(f, "dirlink"), "symbolic link");
	assert_file_content(f, "files/fine.txt", "fine", 4);
}

static void hardlinks_skipped(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/real.txt", "real");
	tw_hardlink(&f->w, "data/hard.txt", "data/real.txt");
	tw_hardlink(&f->w, "data/hard-passwd", "/etc/passwd");
	tw_hardlink(&f->w, "data/hard-up", "../../../etc/shadow");
	run_export(f, false);
	check_invariants(f);

	assert_file_content(f, "files/real.txt", "real", 4);
	assert_false(exists_under_out(f, "files/hard.txt"));
	assert_false(exists_under_out(f, "files/hard-passwd"));
	assert_false(exists_under_out(f, "files/hard-up"));
	assert_string_equal(skip_reason(f, "hard.txt"), "hard link");
	assert_string_equal(skip_reason(f, "hard-passwd"), "hard link");
	assert_string_equal(skip_reason(f, "hard-up"), "hard link");
	assert_int_equal(n_files(f), 1);
}

static void dotdot_skipped(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/../../escape", "escape");
	tw_str(&f->w, "data/a/../../x", "x");
	tw_str(&f->w, "data/a/b/../../../y", "y");
	tw_str(&f->w, "data/..", "dotdot");
	tw_str(&f->w, "data/ok.txt", "ok");
	run_export(f, false);
	check_invariants(f);

	assert_int_equal(n_files(f), 1);
	assert_false(exists_under_out(f, "x"));
	assert_false(exists_under_out(f, "files/x"));
	assert_false(exists_under_out(f, "y"));
	assert_false(exists_under_out(f, "escape"));
	assert_false(exists_under_out(f, "files/escape"));
	assert_string_equal(skip_reason(f, "../../escape"), "'..' in path");
	assert_string_equal(skip_reason(f, "a/../../x"), "'..' in path");
	assert_non_null(skip_reason(f, ".."));
	assert_file_content(f, "files/ok.txt", "ok", 2);
}

static void absolute_paths_skipped(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data//etc/cron.d/evil", "x");
	tw_str(&f->w, "/abs/path", "abs");
	tw_str(&f->w, "/etc/passwd", "root::0:0::/:/bin/sh\n");
	tw_str(&f->w, "data/ok.txt", "ok");
	run_export(f, false);
	check_invariants(f);

	assert_false(exists_under_out(f, "files/etc"));
	assert_non_null(skip_reason(f, "/etc/cron.d/evil"));
	/* Entries with an absolute name are not below the top directory: never exported. */
	if (exists_under_out(f, "files/abs") || exists_under_out(f, "files/path"))
		fail_msg("tar entry \"/abs/path\" was exported (as files/abs/path)");
	assert_false(exists_under_out(f, "files/passwd"));
	assert_int_equal(n_files(f), 1);
	assert_file_content(f, "files/ok.txt", "ok", 2);
}

static void specials_skipped(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_special(&f->w, "data/fifo", AE_IFIFO);
	tw_special(&f->w, "data/null", AE_IFCHR);
	tw_special(&f->w, "data/sda", AE_IFBLK);
	tw_str(&f->w, "data/ok.txt", "ok");
	run_export(f, false);
	check_invariants(f);

	assert_false(exists_under_out(f, "files/fifo"));
	assert_false(exists_under_out(f, "files/null"));
	assert_false(exists_under_out(f, "files/sda"));
	assert_string_equal(skip_reason(f, "fifo"), "not a regular file or directory");
	assert_string_equal(skip_reason(f, "null"), "not a regular file or directory");
	assert_string_equal(skip_reason(f, "sda"), "not a regular file or directory");
	assert_int_equal(n_files(f), 1);
}

static void modes_sanitized(void **state)
{
	struct fx *f = *state;
	struct stat st;

	tw_dir(&f->w, "data/");
	tw_put(&f->w, tw_entry("data/setuid", AE_IFREG, 04755, 2), "su", 2);
	tw_put(&f->w, tw_entry("data/setgid", AE_IFREG, 02755, 2), "sg", 2);
	tw_put(&f->w, tw_entry("data/world", AE_IFREG, 0777, 2), "ww", 2);
	tw_put(&f->w, tw_entry("data/sticky", AE_IFREG, 01777, 2), "st", 2);
	tw_put(&f->w, tw_entry("data/wdir/", AE_IFDIR, 07777, 0), NULL, 0);
	tw_put(&f->w, tw_entry("data/wdir/f", AE_IFREG, 0666, 1), "f", 1);
	run_export(f, false);
	/* check_invariants fails on any setuid/setgid/sticky or group/other write bit */
	check_invariants(f);
	assert_int_equal(n_files(f), 5);
	assert_int_equal(fstatat(f->out_fd, "files/setuid", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_int_equal(fstatat(f->out_fd, "files/wdir", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
}

/* nbrun__export_open itself masks modes: it must never create setuid or writable-by-others files. */
static void export_open_masks_mode(void **state)
{
	struct fx *f = *state;
	struct stat st;
	int fd;

	fd = nbrun__export_open(f->out_fd, "files/x", 07777);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	assert_int_equal(st.st_mode & 07022, 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	/* O_EXCL: nothing existing is replaced. */
	assert_int_equal(nbrun__export_open(f->out_fd, "files/x", 0644), -EEXIST);
	/* Rejected paths never touch the disk. */
	assert_int_equal(nbrun__export_open(f->out_fd, "../x", 0644), -EINVAL);
	assert_int_equal(nbrun__export_open(f->out_fd, "/tmp/x", 0644), -EINVAL);
	assert_int_equal(nbrun__export_open(f->out_fd, "", 0644), -EINVAL);
	if (f->w.a)
		tw_close(&f->w);
}

/* Symlinks already in the output directory are never followed. */
static void export_open_no_follow(void **state)
{
	struct fx *f = *state;
	char *target = NULL;
	int fd;

	assert_true(asprintf(&target, "%s/victim", f->tmp) > 0);
	assert_int_equal(mkdir(target, 0755), 0);
	assert_int_equal(symlinkat(target, f->out_fd, "files"), 0);
	fd = nbrun__export_open(f->out_fd, "files/x", 0644);
	assert_true(fd < 0);
	assert_true(fd == -ELOOP || fd == -ENOTDIR);
	fd = nbrun__export_mkdirs(f->out_fd, "files/sub");
	assert_true(fd < 0);
	assert_int_equal(unlinkat(f->out_fd, "files", 0), 0);

	/* Last component a dangling symlink: O_EXCL|O_NOFOLLOW refuses it. */
	assert_int_equal(mkdirat(f->out_fd, "files", 0755), 0);
	assert_int_equal(symlinkat("../../escaped", f->out_fd, "files/y"), 0);
	fd = nbrun__export_open(f->out_fd, "files/y", 0644);
	assert_int_equal(fd, -EEXIST);
	assert_int_equal(unlinkat(f->out_fd, "files/y", 0), 0);
	{
		DIR *d = opendir(target);
		struct dirent *de;
		assert_non_null(d);
		while ((de = readdir(d)))
			assert_true(!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."));
		closedir(d);
	}
	assert_int_equal(faccessat(AT_FDCWD, f->parent, F_OK, 0), 0);
	free(target);
	if (f->w.a)
		tw_close(&f->w);
}

static void deep_nesting_skipped(void **state)
{
	struct fx *f = *state;
	struct buf p = BUF_INIT(4096);
	char *name = NULL;

	assert_int_equal(buf_puts(&p, "data/"), 0);
	tw_dir(&f->w, p.data);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(buf_puts(&p, "d/"), 0);
		tw_dir(&f->w, p.data);
	}
	assert_true(asprintf(&name, "%sbottom.txt", p.data) > 0);
	tw_str(&f->w, name, "deep");
	/* Also one file just past the cap. */
	buf_reset(&p);
	assert_int_equal(buf_puts(&p, "data/"), 0);
	for (int i = 0; i < NBRUN_MAX_PATH_DEPTH; i++)
		assert_int_equal(buf_puts(&p, "e/"), 0);
	assert_int_equal(buf_puts(&p, "over.txt"), 0);
	tw_str(&f->w, p.data, "over");
	run_export(f, false);
	check_invariants(f);

	assert_int_equal(n_files(f), 0);
	assert_non_null(skip_reason(f, name + 5));
	assert_string_equal(skip_reason(f, name + 5), "too deep");
	assert_string_equal(skip_reason(f, p.data + 5), "too deep");
	/* files/ plus at most the cap of directories below it */
	assert_true(walk.max_depth <= NBRUN_MAX_PATH_DEPTH + 1);
	free(name);
	buf_free(&p);
}

static void long_names_skipped(void **state)
{
	struct fx *f = *state;
	char *n4000 = malloc(4000 + 6), *n300 = malloc(300 + 6);

	assert_non_null(n4000);
	assert_non_null(n300);
	memcpy(n4000, "data/", 5);
	memset(n4000 + 5, 'a', 4000);
	n4000[4005] = '\0';
	memcpy(n300, "data/", 5);
	memset(n300 + 5, 'b', 300);
	n300[305] = '\0';
	tw_dir(&f->w, "data/");
	tw_str(&f->w, n4000, "long");
	tw_str(&f->w, n300, "component");
	tw_str(&f->w, "data/ok.txt", "ok");
	run_export(f, false);
	check_invariants(f);

	assert_int_equal(n_files(f), 1);
	assert_string_equal(skip_reason(f, n4000 + 5), "path too long");
	assert_string_equal(skip_reason(f, n300 + 5), "name too long");
	free(n4000);
	free(n300);
}

static void non_utf8_name_skipped(void **state)
{
	struct fx *f = *state;
	char *s = NULL;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/\xff\xfe.txt", "bad name");
	tw_str(&f->w, "data/ok\xc0\xaf.txt", "overlong slash");
	tw_str(&f->w, "data/ok.txt", "ok");
	run_export(f, false);
	check_invariants(f); /* includes: the result JSON dumps and is valid UTF-8 */

	assert_int_equal(n_files(f), 1);
	assert_int_equal(n_skipped(f), 2);
	assert_int_equal(nbrun_result_to_json(&s, f->r, 1), 0);
	assert_true(text_utf8_valid(s, strlen(s)));
	free(s);
}

static void control_chars_skipped(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/new\nline.txt", "nl");
	tw_str(&f->w, "data/esc\x1b[31mred", "esc");
	tw_str(&f->w, "data/tab\tname", "tab");
	tw_str(&f->w, "data/del\x7f", "del");
	tw_str(&f->w, "data/sub\rdir/x", "cr");
	tw_str(&f->w, "data/ok.txt", "ok");
	run_export(f, false);
	check_invariants(f);

	assert_int_equal(n_files(f), 1);
	assert_string_equal(skip_reason(f, "new\nline.txt"), "control character in name");
	assert_string_equal(skip_reason(f, "esc\x1b[31mred"), "control character in name");
	assert_string_equal(skip_reason(f, "tab\tname"), "control character in name");
	assert_string_equal(skip_reason(f, "del\x7f"), "control character in name");
	assert_string_equal(skip_reason(f, "sub\rdir/x"), "control character in name");
}

static void over_max_bytes(void **state)
{
	struct fx *f = *state;
	static char blob[10000];

	memset(blob, 'B', sizeof(blob));
	f->x.max_bytes = 4096;
	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/small.txt", "small");
	tw_file(&f->w, "data/big.bin", blob, sizeof(blob), 0644);
	tw_str(&f->w, "data/after.txt", "after");
	run_export(f, false);
	check_invariants(f);

	assert_true(truncated(f));
	assert_false(exists_under_out(f, "files/big.bin"));
	assert_non_null(skip_reason(f, "big.bin"));
	assert_file_content(f, "files/small.txt", "small", 5);
	assert_file_content(f, "files/after.txt", "after", 5);
	assert_true(f->x.bytes <= f->x.max_bytes);
}

/* The byte cap is on the total, not per file. */
static void over_max_bytes_total(void **state)
{
	struct fx *f = *state;
	static char blob[3000];
	uint64_t total = 0;
	json_t *e;
	size_t i;

	memset(blob, 'T', sizeof(blob));
	f->x.max_bytes = 7000;
	tw_dir(&f->w, "data/");
	tw_file(&f->w, "data/1.bin", blob, sizeof(blob), 0644);
	tw_file(&f->w, "data/2.bin", blob, sizeof(blob), 0644);
	tw_file(&f->w, "data/3.bin", blob, sizeof(blob), 0644);
	run_export(f, false);
	check_invariants(f);

	assert_true(truncated(f));
	assert_int_equal(n_files(f), 2);
	json_array_foreach(json_object_get(f->r->doc, "files"), i, e)
		total += (uint64_t)json_integer_value(json_object_get(e, "bytes"));
	assert_true(total <= 7000);
}

static void over_max_files(void **state)
{
	struct fx *f = *state;
	char name[64];

	f->x.max_files = 3;
	tw_dir(&f->w, "data/");
	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "data/f%02d.txt", i);
		tw_str(&f->w, name, name);
	}
	run_export(f, false);
	check_invariants(f);

	assert_int_equal(n_files(f), 3);
	assert_true(truncated(f));
	assert_string_equal(skip_reason(f, "f09.txt"), "over the export cap");
}

/* Entries that are not files (directories, skipped junk) are capped too. */
static void over_max_entries(void **state)
{
	struct fx *f = *state;
	char name[64];

	f->x.max_files = 2;
	tw_dir(&f->w, "data/");
	for (int i = 0; i < 500; i++) {
		snprintf(name, sizeof(name), "data/d%03d/", i);
		tw_dir(&f->w, name);
	}
	tw_str(&f->w, "data/late.txt", "late");
	run_export(f, false);
	check_invariants(f);

	assert_true(truncated(f));
	assert_int_equal(n_files(f), 0);
	assert_non_null(skip_reason(f, "/mnt/data"));
}

/*
 * The skipped list itself is bounded: past 1000 entries one summary entry
 * counts the rest (a container can send 1001 symlinks in /mnt/data).
 */
static void skipped_list_bounded(void **state)
{
	struct fx *f = *state;
	char name[64];

	f->x.max_files = 5000;
	tw_dir(&f->w, "data/");
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "data/l%04d", i);
		tw_symlink(&f->w, name, "/etc/passwd");
	}
	run_export(f, false);
	check_invariants(f);
	assert_true(n_skipped(f) <= NBRUN_DEFAULT_MAX_FILES + 1);
}

static void truncated_archive(void **state)
{
	struct fx *f = *state;
	static char blob[100000];
	off_t before, after;

	memset(blob, 'C', sizeof(blob));
	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/first.txt", "first");
	tw_dir(&f->w, "data/sub/");
	tw_str(&f->w, "data/sub/second.txt", "second");
	tw_close(&f->w);
	before = file_size(f->w.path);
	/* Reopen to append a big file, then cut in the middle of its data. */
	{
		struct archive *a = archive_write_new();
		int fd = open(f->w.path, O_WRONLY | O_CLOEXEC);
		assert_non_null(a);
		assert_true(fd >= 0);
		assert_int_equal(archive_write_set_format_pax(a), ARCHIVE_OK);
		assert_int_equal(archive_write_set_bytes_in_last_block(a, 1), ARCHIVE_OK);
		/* overwrite the two end-of-archive blocks */
		assert_true(lseek(fd, before - 1024, SEEK_SET) >= 0);
		assert_int_equal(archive_write_open_fd(a, fd), ARCHIVE_OK);
		f->w.a = a;
		tw_file(&f->w, "data/third.bin", blob, sizeof(blob), 0644);
		tw_close(&f->w);
		close(fd);
	}
	after = file_size(f->w.path);
	assert_true(after > before + (off_t)sizeof(blob));
	assert_int_equal(truncate(f->w.path, before - 1024 + 512 * 3 + 40000), 0);
	run_export(f, false);
	check_invariants(f);

	assert_true(truncated(f));
	assert_file_content(f, "files/first.txt", "first", 5);
	assert_file_content(f, "files/sub/second.txt", "second", 6);
	assert_false(exists_under_out(f, "files/third.bin"));
	assert_int_equal(n_files(f), 2);
}

static void truncated_in_header(void **state)
{
	struct fx *f = *state;
	off_t size;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/first.txt", "first");
	tw_str(&f->w, "data/second.txt", "second");
	tw_close(&f->w);
	size = file_size(f->w.path);
	/* Remove the end-of-archive blocks and cut the last header in two. */
	assert_int_equal(truncate(f->w.path, size - 1024 - 512 - 300), 0);
	run_export(f, false);
	check_invariants(f);
	assert_true(truncated(f));
	assert_file_content(f, "files/first.txt", "first", 5);
}

static void garbage_archive(void **state)
{
	struct fx *f = *state;
	int fd;
	char junk[4096];

	tw_close(&f->w);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 131 + 7);
	fd = open(f->w.path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fd_write_all(fd, junk, sizeof(junk)), 0);
	close(fd);
	run_export(f, false);
	check_invariants(f);
	assert_true(truncated(f));
	assert_int_equal(n_files(f), 0);
}

static void empty_stream(void **state)
{
	struct fx *f = *state;
	int fd;

	tw_close(&f->w);
	fd = open(f->w.path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_true(fd >= 0);
	close(fd);
	run_export(f, false);
	check_invariants(f);
	assert_int_equal(n_files(f), 0);
}

static void stream_cut_flagged(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/ok.txt", "ok");
	run_export(f, true);
	check_invariants(f);
	assert_true(truncated(f));
	assert_int_equal(n_files(f), 1);
}

static void duplicate_entry(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/dup.txt", "first");
	tw_str(&f->w, "data/dup.txt", "second!");
	run_export(f, false);
	check_invariants(f);
	assert_int_equal(n_files(f), 1);
	assert_file_content(f, "files/dup.txt", "first", 5);
	assert_string_equal(skip_reason(f, "dup.txt"), "duplicate entry");
}

/* A file where a later entry wants a directory, and the other way round. */
static void file_dir_clash(void **state)
{
	struct fx *f = *state;

	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/a", "file a");
	tw_str(&f->w, "data/a/b", "under a file");
	tw_str(&f->w, "data/c/d", "d");
	tw_str(&f->w, "data/c", "file over dir");
	run_export(f, false);
	check_invariants(f);
	assert_file_content(f, "files/a", "file a", 6);
	assert_file_content(f, "files/c/d", "d", 1);
	assert_non_null(skip_reason(f, "a/b"));
	assert_non_null(skip_reason(f, "c"));
}

static void untouched_inputs(void **state)
{
	struct fx *f = *state;

	f->inputs[0].name = strdup("in.csv");
	sha_of("x,y\n1,2\n", 8, f->inputs[0].sha256);
	f->inputs[1].name = strdup("changed.csv");
	sha_of("old\n", 4, f->inputs[1].sha256);
	f->inputs[2].name = strdup("dir/nested.txt");
	sha_of("nested", 6, f->inputs[2].sha256);
	f->inputs[3].name = strdup("nosha.txt"); /* unknown hash: always exported */
	f->x.inputs = f->inputs;
	f->x.n_inputs = 4;
	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/in.csv", "x,y\n1,2\n");
	tw_str(&f->w, "data/changed.csv", "new\n");
	tw_dir(&f->w, "data/dir/");
	tw_str(&f->w, "data/dir/nested.txt", "nested");
	tw_str(&f->w, "data/nosha.txt", "?");
	tw_str(&f->w, "data/made.txt", "made");
	run_export(f, false);
	check_invariants(f);

	assert_false(exists_under_out(f, "files/in.csv"));
	assert_false(exists_under_out(f, "files/dir/nested.txt"));
	assert_file_content(f, "files/changed.csv", "new\n", 4);
	assert_file_content(f, "files/nosha.txt", "?", 1);
	assert_file_content(f, "files/made.txt", "made", 4);
	assert_int_equal(n_files(f), 3);
	assert_false(truncated(f));
	/* Untouched inputs are neither files nor skipped. */
	assert_null(skip_reason(f, "in.csv"));
}

/* Entries named like an input but at a different path are not untouched inputs. */
static void input_name_other_dir(void **state)
{
	struct fx *f = *state;

	f->inputs[0].name = strdup("in.csv");
	sha_of("same", 4, f->inputs[0].sha256);
	f->x.inputs = f->inputs;
	f->x.n_inputs = 1;
	tw_dir(&f->w, "data/");
	tw_str(&f->w, "data/copy/in.csv", "same");
	run_export(f, false);
	check_invariants(f);
	assert_file_content(f, "files/copy/in.csv", "same", 4);
}

/*
 * The engine's tar writer (Go) puts non-ASCII names in a pax "path" record in
 * UTF-8, without hdrcharset. nbrun runs in whatever locale it was started
 * in (the C locale for the CLI): the name must still come through.
 */
static void utf8_pax_name_from_engine(void **state)
{
	struct fx *f = *state;
	int fd = raw_open(f);
	unsigned char h[512];

	raw_header(h, "data/", '5', 0);
	raw_put(fd, h, 512);
	raw_pax_file(fd, "data/r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93.csv", "a,b\n");
	raw_pax_file(fd, "data/plain.txt", "plain");
	raw_end(fd);
	run_export(f, false);
	check_invariants(f);
	assert_file_content(f, "files/plain.txt", "plain", 5);
	assert_file_content(f, "files/r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93.csv", "a,b\n", 4);
	assert_int_equal(n_files(f), 2);
}

/* A pax path record that smuggles ".." or an absolute path past the ustar name. */
static void pax_path_overrides_are_checked(void **state)
{
	struct fx *f = *state;
	int fd = raw_open(f);

	raw_pax_file(fd, "data/../../pax-escape", "x");
	raw_pax_file(fd, "/etc/pax-abs", "x");
	raw_pax_file(fd, "data/ok.txt", "ok");
	raw_end(fd);
	run_export(f, false);
	check_invariants(f);
	assert_int_equal(n_files(f), 1);
	assert_false(exists_under_out(f, "files/etc"));
	assert_false(exists_under_out(f, "files/fallback-name"));
}

/* A header that claims an enormous size, with the data missing. */
static void huge_declared_size(void **state)
{
	struct fx *f = *state;
	int fd = raw_open(f);
	unsigned char h[512];

	raw_header(h, "data/ok.txt", '0', 2);
	raw_put(fd, h, 512);
	raw_put(fd, "ok", 2);
	raw_header(h, "data/huge.bin", '0', 1ULL << 60);
	raw_put(fd, h, 512);
	raw_put(fd, "tiny", 4);
	raw_end(fd);
	run_export(f, false);
	check_invariants(f);
	assert_true(truncated(f));
	assert_false(exists_under_out(f, "files/huge.bin"));
	assert_file_content(f, "files/ok.txt", "ok", 2);
}

/*
 * Depth exactly at the cap (and paths at the length cap) are exported: the
 * "files/" prefix does not count against the caps.
 */
static void file_at_depth_cap_exported(void **state)
{
	struct fx *f = *state;
	struct buf p = BUF_INIT(4096);

	assert_int_equal(buf_puts(&p, "data/"), 0);
	for (int i = 0; i < NBRUN_MAX_PATH_DEPTH - 1; i++)
		assert_int_equal(buf_puts(&p, "e/"), 0);
	assert_int_equal(buf_puts(&p, "at-cap.txt"), 0);
	assert_null(nbrun__path_reject_reason(p.data + 5));
	tw_str(&f->w, p.data, "at cap");
	run_export(f, false);
	check_invariants(f);
	assert_null(skip_reason(f, p.data + 5));
	assert_int_equal(n_files(f), 1);
	buf_free(&p);
}

/* ---- path validation -------------------------------------------------------------- */

static void path_reject_reason(void **state)
{
	char deep[512] = "", longc[300];

	assert_null(nbrun__path_reject_reason("a"));
	assert_null(nbrun__path_reject_reason("a/b/c.txt"));
	assert_null(nbrun__path_reject_reason("./a"));
	assert_null(nbrun__path_reject_reason("a//b"));
	assert_null(nbrun__path_reject_reason("caf\xc3\xa9"));
	assert_null(nbrun__path_reject_reason("..."));
	assert_null(nbrun__path_reject_reason("..a"));
	assert_non_null(nbrun__path_reject_reason(""));
	assert_non_null(nbrun__path_reject_reason("."));
	assert_non_null(nbrun__path_reject_reason("./"));
	assert_non_null(nbrun__path_reject_reason("/"));
	assert_non_null(nbrun__path_reject_reason(".."));
	assert_non_null(nbrun__path_reject_reason("a/.."));
	assert_non_null(nbrun__path_reject_reason("../a"));
	assert_non_null(nbrun__path_reject_reason("a/../b"));
	assert_non_null(nbrun__path_reject_reason("/etc/passwd"));
	assert_non_null(nbrun__path_reject_reason("a\nb"));
	assert_non_null(nbrun__path_reject_reason("a\x7f"));
	assert_non_null(nbrun__path_reject_reason("\xff"));
	assert_non_null(nbrun__path_reject_reason("\xed\xa0\x80")); /* surrogate */
	for (int i = 0; i < NBRUN_MAX_PATH_DEPTH; i++)
		strcat(deep, "d/");
	deep[strlen(deep) - 1] = '\0';
	assert_null(nbrun__path_reject_reason(deep));
	strcat(deep, "/x");
	assert_string_equal(nbrun__path_reject_reason(deep), "too deep");
	memset(longc, 'n', NBRUN_MAX_NAME_BYTES);
	longc[NBRUN_MAX_NAME_BYTES] = '\0';
	assert_null(nbrun__path_reject_reason(longc));
	longc[NBRUN_MAX_NAME_BYTES] = 'n';
	longc[NBRUN_MAX_NAME_BYTES + 1] = '\0';
	assert_string_equal(nbrun__path_reject_reason(longc), "name too long");
}

int main(int argc, char **argv)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(normal_files),
		T(symlinks_skipped),
		T(hardlinks_skipped),
		T(dotdot_skipped),
		T(absolute_paths_skipped),
		T(specials_skipped),
		T(modes_sanitized),
		T(export_open_masks_mode),
		T(export_open_no_follow),
		T(deep_nesting_skipped),
		T(long_names_skipped),
		T(non_utf8_name_skipped),
		T(control_chars_skipped),
		T(over_max_bytes),
		T(over_max_bytes_total),
		T(over_max_files),
		T(over_max_entries),
		T(skipped_list_bounded),
		T(utf8_pax_name_from_engine),
		T(pax_path_overrides_are_checked),
		T(huge_declared_size),
		T(file_at_depth_cap_exported),
		T(truncated_archive),
		T(truncated_in_header),
		T(garbage_archive),
		T(empty_stream),
		T(stream_cut_flagged),
		T(duplicate_entry),
		T(file_dir_clash),
		T(untouched_inputs),
		T(input_name_other_dir),
		cmocka_unit_test(path_reject_reason),
	};
	/* Modes must be safe because of the library, not because of the caller's umask. */
	umask(0);
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
