/* SPDX-License-Identifier: MIT */
/* The upload archive: nbrun__tar_new/add_data/add_path/finish. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "nbrun-private.h"

/* One entry read back from an archive. */
struct rd_entry {
	char *path;
	mode_t type;
	mode_t perm;
	int64_t size;
	int64_t uid, gid;
	char *data;
	size_t len;
	char *symlink;
};

struct rd {
	struct rd_entry e[64];
	size_t n;
};

static void rd_free(struct rd *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->e[i].path);
		free(r->e[i].data);
		free(r->e[i].symlink);
	}
	r->n = 0;
}

/* Read the archive back with libarchive; every entry must parse. */
static void rd_load(struct rd *r, const void *data, size_t len)
{
	struct archive *a = archive_read_new();
	struct archive_entry *ae;
	int rc;

	memset(r, 0, sizeof(*r));
	assert_non_null(a);
	archive_read_support_format_tar(a);
	assert_int_equal(archive_read_open_memory(a, data, len), ARCHIVE_OK);
	while ((rc = archive_read_next_header(a, &ae)) == ARCHIVE_OK) {
		struct rd_entry *e = &r->e[r->n];
		char chunk[4096];
		la_ssize_t got;

		assert_true(r->n < 64);
		e->path = strdup(archive_entry_pathname(ae));
		e->type = archive_entry_filetype(ae);
		e->perm = archive_entry_perm(ae);
		e->size = archive_entry_size(ae);
		e->uid = archive_entry_uid(ae);
		e->gid = archive_entry_gid(ae);
		if (archive_entry_symlink(ae))
			e->symlink = strdup(archive_entry_symlink(ae));
		while ((got = archive_read_data(a, chunk, sizeof(chunk))) > 0) {
			e->data = realloc(e->data, e->len + (size_t)got + 1);
			assert_non_null(e->data);
			memcpy(e->data + e->len, chunk, (size_t)got);
			e->len += (size_t)got;
			e->data[e->len] = '\0';
		}
		assert_int_equal(got, 0);
		r->n++;
	}
	assert_int_equal(rc, ARCHIVE_EOF);
	archive_read_free(a);
}

static const struct rd_entry *rd_find(const struct rd *r, const char *path)
{
	for (size_t i = 0; i < r->n; i++)
		if (!strcmp(r->e[i].path, path))
			return &r->e[i];
	return NULL;
}

/* ---- temp dirs ------------------------------------------------------------ */

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static char *mktemp_dir(void)
{
	const char *base = getenv("TMPDIR");
	char *p = NULL;

	assert_true(asprintf(&p, "%s/nbrun-tar-XXXXXX", base && *base ? base : "/tmp") > 0);
	assert_non_null(mkdtemp(p));
	return p;
}

static void rm_dir(char *p)
{
	if (p)
		nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(p);
}

static void write_file(const char *dir, const char *name, const void *data, size_t len, mode_t mode)
{
	char *p = NULL;
	int fd;

	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(fd_write_all(fd, data, len), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
	free(p);
}

static void make_dir(const char *dir, const char *name)
{
	char *p = NULL;

	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	assert_int_equal(mkdir(p, 0755), 0);
	free(p);
}

static char *path_of(const char *dir, const char *name)
{
	char *p = NULL;

	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

/* ---- tests ------------------------------------------------------------------ */

static void round_trip_data(void **state)
{
	struct nbrun__tar *t = NULL;
	const void *data;
	size_t len;
	struct rd r;
	const struct rd_entry *e;
	char big[70000];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7 + 3);
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 16 << 20), 0);
	assert_non_null(t);
	assert_int_equal(nbrun__tar_add_data(t, "notebook.ipynb", "{\"cells\":[]}", 12), 0);
	assert_int_equal(nbrun__tar_add_data(t, "empty", "", 0), 0);
	assert_int_equal(nbrun__tar_add_data(t, "big.bin", big, sizeof(big)), 0);
	assert_int_equal(nbrun__tar_add_data(t, "caf\xc3\xa9.txt", "x", 1), 0);
	assert_int_equal(nbrun__tar_finish(t, &data, &len), 0);
	assert_non_null(data);
	assert_true(len > sizeof(big));

	rd_load(&r, data, len);
	assert_int_equal(r.n, 4);
	e = rd_find(&r, "notebook.ipynb");
	assert_non_null(e);
	assert_int_equal(e->type, AE_IFREG);
	assert_int_equal(e->size, 12);
	assert_int_equal(e->uid, 1000);
	assert_int_equal(e->gid, 1000);
	assert_int_equal(e->perm, 0644);
	assert_string_equal(e->data, "{\"cells\":[]}");
	e = rd_find(&r, "empty");
	assert_non_null(e);
	assert_int_equal(e->size, 0);
	assert_int_equal(e->len, 0);
	e = rd_find(&r, "big.bin");
	assert_non_null(e);
	assert_int_equal(e->size, sizeof(big));
	assert_int_equal(e->len, sizeof(big));
	assert_memory_equal(e->data, big, sizeof(big));
	assert_non_null(rd_find(&r, "caf\xc3\xa9.txt"));
	rd_free(&r);
	nbrun__tar_free(t);
}

static void other_owner(void **state)
{
	struct nbrun__tar *t = NULL;
	const void *data;
	size_t len;
	struct rd r;

	assert_int_equal(nbrun__tar_new(&t, 4242, 77, 1 << 20), 0);
	assert_int_equal(nbrun__tar_add_data(t, "a", "abc", 3), 0);
	assert_int_equal(nbrun__tar_finish(t, &data, &len), 0);
	rd_load(&r, data, len);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.e[0].uid, 4242);
	assert_int_equal(r.e[0].gid, 77);
	rd_free(&r);
	nbrun__tar_free(t);
}

static void add_path_tree(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__tar *t = NULL;
	char *dir = mktemp_dir(), *in = path_of(dir, "in"), *single;
	const void *data;
	size_t len;
	struct rd r;
	const struct rd_entry *e;

	make_dir(dir, "in");
	make_dir(dir, "in/sub");
	make_dir(dir, "in/sub/deeper");
	make_dir(dir, "in/emptydir");
	write_file(dir, "in/top.csv", "a,b\n1,2\n", 8, 0640);
	write_file(dir, "in/sub/x.txt", "hello", 5, 0644);
	write_file(dir, "in/sub/deeper/run.sh", "#!/bin/sh\n", 10, 04755); /* setuid dropped */
	write_file(dir, "single.txt", "one", 3, 0600);
	single = path_of(dir, "single.txt");

	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 16 << 20), 0);
	assert_int_equal(nbrun__tar_add_path(&ctx, t, in, "data"), 0);
	assert_int_equal(nbrun__tar_add_path(&ctx, t, single, "renamed.txt"), 0);
	assert_int_equal(nbrun__tar_finish(t, &data, &len), 0);
	rd_load(&r, data, len);
	assert_int_equal(r.n, 8);
	for (size_t i = 0; i < r.n; i++) {
		assert_int_equal(r.e[i].uid, 1000);
		assert_int_equal(r.e[i].gid, 1000);
		/* never setuid/setgid/sticky or writable by others in the sandbox */
		assert_int_equal(r.e[i].perm & 07022, 0);
	}
	e = rd_find(&r, "data");
	if (!e)
		e = rd_find(&r, "data/");
	assert_non_null(e);
	assert_int_equal(e->type, AE_IFDIR);
	e = rd_find(&r, "data/emptydir");
	if (!e)
		e = rd_find(&r, "data/emptydir/");
	assert_non_null(e);
	assert_int_equal(e->type, AE_IFDIR);
	e = rd_find(&r, "data/top.csv");
	assert_non_null(e);
	assert_int_equal(e->type, AE_IFREG);
	assert_string_equal(e->data, "a,b\n1,2\n");
	assert_int_equal(e->perm, 0640);
	e = rd_find(&r, "data/sub/x.txt");
	assert_non_null(e);
	assert_string_equal(e->data, "hello");
	e = rd_find(&r, "data/sub/deeper/run.sh");
	assert_non_null(e);
	assert_string_equal(e->data, "#!/bin/sh\n");
	assert_int_equal(e->perm, 0755);
	e = rd_find(&r, "renamed.txt");
	assert_non_null(e);
	assert_string_equal(e->data, "one");
	rd_free(&r);
	nbrun__tar_free(t);
	free(in);
	free(single);
	rm_dir(dir);
}

static void add_path_missing(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__tar *t = NULL;
	char *dir = mktemp_dir(), *p = path_of(dir, "nope");

	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 1 << 20), 0);
	assert_int_equal(nbrun__tar_add_path(&ctx, t, p, "nope"), NBRUN_ENOTFOUND);
	assert_non_null(strstr(ctx.errmsg, "nope"));
	nbrun__tar_free(t);
	free(p);
	rm_dir(dir);
}

/*
 * A FIFO in an input directory must give a clear error, not block: open()
 * without O_NONBLOCK on a FIFO waits for a writer forever. The check runs
 * in a child with an alarm so that a hang fails the test instead of the suite.
 */
static void fifo_in_input_dir(void **state)
{
	char *dir = mktemp_dir(), *in = path_of(dir, "in"), *fifo;
	pid_t pid;
	int st;

	make_dir(dir, "in");
	write_file(dir, "in/ok.txt", "x", 1, 0644);
	fifo = path_of(dir, "in/pipe");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct nbrun_ctx ctx = { "" };
		struct nbrun__tar *t = NULL;
		int rc;

		alarm(5);
		if (nbrun__tar_new(&t, 1000, 1000, 1 << 20) < 0)
			_exit(10);
		rc = nbrun__tar_add_path(&ctx, t, in, "data");
		nbrun__tar_free(t);
		if (rc != NBRUN_EINVAL)
			_exit(11);
		if (!strstr(ctx.errmsg, "pipe") || !strstr(ctx.errmsg, "not a regular file"))
			_exit(12);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("nbrun__tar_add_path blocked on a FIFO (killed by signal %d)", WTERMSIG(st));
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) != 0)
		fail_msg("FIFO in input dir: child failed with %d (10 new, 11 rc, 12 message)",
			 WEXITSTATUS(st));
	free(fifo);
	free(in);
	rm_dir(dir);
}

/* A FIFO given directly as the input path: same. */
static void fifo_as_input(void **state)
{
	char *dir = mktemp_dir(), *fifo = path_of(dir, "pipe");
	pid_t pid;
	int st;

	assert_int_equal(mkfifo(fifo, 0644), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct nbrun_ctx ctx = { "" };
		struct nbrun__tar *t = NULL;
		int rc;

		alarm(5);
		if (nbrun__tar_new(&t, 1000, 1000, 1 << 20) < 0)
			_exit(10);
		rc = nbrun__tar_add_path(&ctx, t, fifo, "pipe");
		nbrun__tar_free(t);
		_exit(rc == NBRUN_EINVAL ? 0 : 11);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("nbrun__tar_add_path blocked on a FIFO (killed by signal %d)", WTERMSIG(st));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	free(fifo);
	rm_dir(dir);
}

/*
 * A symlink inside an input directory is refused with a clear error, never
 * followed: its target (here a "secret" outside the directory) must not
 * reach the archive.
 */
static void symlink_in_input_dir_is_refused(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__tar *t = NULL;
	char *dir = mktemp_dir(), *in = path_of(dir, "in"), *target = path_of(dir, "outside.txt");
	char *link = path_of(dir, "in/link");

	make_dir(dir, "in");
	write_file(dir, "outside.txt", "secret", 6, 0644);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 1 << 20), 0);
	assert_int_equal(nbrun__tar_add_path(&ctx, t, in, "data"), NBRUN_EINVAL);
	assert_non_null(strstr(ctx.errmsg, "symbolic link"));
	assert_non_null(strstr(ctx.errmsg, link));
	assert_null(strchr(ctx.errmsg, '\n'));
	nbrun__tar_free(t);
	free(in);
	free(target);
	free(link);
	rm_dir(dir);
}

/* A symlink the user names itself is followed: its target is uploaded. */
static void symlink_given_is_followed(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__tar *t = NULL;
	char *dir = mktemp_dir(), *target = path_of(dir, "real.csv"), *link = path_of(dir, "link.csv");
	const void *data;
	size_t len;
	struct rd r;
	const struct rd_entry *e;

	write_file(dir, "real.csv", "a,b\n", 4, 0644);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 1 << 20), 0);
	assert_int_equal(nbrun__tar_add_path(&ctx, t, link, "data/link.csv"), 0);
	assert_int_equal(nbrun__tar_finish(t, &data, &len), 0);
	rd_load(&r, data, len);
	e = rd_find(&r, "data/link.csv");
	assert_non_null(e);
	assert_int_equal(e->type, AE_IFREG);
	assert_string_equal(e->data, "a,b\n");
	rd_free(&r);
	nbrun__tar_free(t);
	free(target);
	free(link);
	rm_dir(dir);
}

/* A symlink loop (dir/loop -> .) is refused at the link, before any depth cap. */
static void symlink_loop_in_input_dir(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__tar *t = NULL;
	char *dir = mktemp_dir(), *in = path_of(dir, "in"), *loop = path_of(dir, "in/loop");

	make_dir(dir, "in");
	assert_int_equal(symlink(".", loop), 0);
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 64 << 20), 0);
	assert_int_equal(nbrun__tar_add_path(&ctx, t, in, "data"), NBRUN_EINVAL);
	assert_non_null(strstr(ctx.errmsg, "symbolic link"));
	nbrun__tar_free(t);
	free(in);
	free(loop);
	rm_dir(dir);
}

/* Directories nested deeper than NBRUN_MAX_PATH_DEPTH end with NBRUN_EINVAL. */
static void input_dir_too_deep(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__tar *t = NULL;
	char *dir = mktemp_dir(), rel[4 * (NBRUN_MAX_PATH_DEPTH + 2) + 8] = "in";
	char *in = path_of(dir, "in");

	make_dir(dir, rel);
	for (int i = 0; i <= NBRUN_MAX_PATH_DEPTH; i++) {
		strcat(rel, "/d");
		make_dir(dir, rel);
	}
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 64 << 20), 0);
	assert_int_equal(nbrun__tar_add_path(&ctx, t, in, "data"), NBRUN_EINVAL);
	assert_non_null(strstr(ctx.errmsg, "too deep"));
	nbrun__tar_free(t);
	free(in);
	rm_dir(dir);
}

static void cap_exceeded_data(void **state)
{
	struct nbrun__tar *t = NULL;
	static char blob[256 * 1024];
	const void *data = NULL;
	size_t len = 0;
	int rc;

	memset(blob, 'z', sizeof(blob));
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 4096), 0);
	rc = nbrun__tar_add_data(t, "blob", blob, sizeof(blob));
	if (rc == 0)
		rc = nbrun__tar_finish(t, &data, &len);
	assert_true(rc < 0);
	assert_true(rc == NBRUN_EINVAL || rc == NBRUN_EIO);
	nbrun__tar_free(t);
}

/* Small enough to be buffered by libarchive: the cap must still hold at finish. */
static void cap_exceeded_at_finish(void **state)
{
	struct nbrun__tar *t = NULL;
	const void *data = NULL;
	size_t len = 0;

	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 600), 0);
	assert_int_equal(nbrun__tar_add_data(t, "a", "0123456789", 10), 0);
	assert_int_equal(nbrun__tar_finish(t, &data, &len), NBRUN_EINVAL);
	nbrun__tar_free(t);
}

static void cap_exceeded_path(void **state)
{
	struct nbrun_ctx ctx = { "" };
	struct nbrun__tar *t = NULL;
	char *dir = mktemp_dir(), *in = path_of(dir, "in");
	static char blob[300 * 1024];
	const void *data = NULL;
	size_t len = 0;
	int rc;

	memset(blob, 'q', sizeof(blob));
	make_dir(dir, "in");
	write_file(dir, "in/a.bin", blob, sizeof(blob), 0644);
	write_file(dir, "in/b.bin", blob, sizeof(blob), 0644);
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 100 * 1024), 0);
	rc = nbrun__tar_add_path(&ctx, t, in, "data");
	if (rc == 0)
		rc = nbrun__tar_finish(t, &data, &len);
	assert_int_equal(rc, NBRUN_EINVAL);
	nbrun__tar_free(t);
	free(in);
	rm_dir(dir);
}

static void exactly_at_cap_fits(void **state)
{
	struct nbrun__tar *t = NULL;
	const void *data = NULL;
	size_t len = 0, need;

	/* Measure, then rebuild with the cap set to exactly that size. */
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, 1 << 20), 0);
	assert_int_equal(nbrun__tar_add_data(t, "a", "hello", 5), 0);
	assert_int_equal(nbrun__tar_finish(t, &data, &len), 0);
	need = len;
	nbrun__tar_free(t);
	assert_int_equal(nbrun__tar_new(&t, 1000, 1000, need), 0);
	assert_int_equal(nbrun__tar_add_data(t, "a", "hello", 5), 0);
	assert_int_equal(nbrun__tar_finish(t, &data, &len), 0);
	assert_int_equal(len, need);
	nbrun__tar_free(t);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_data),
		cmocka_unit_test(other_owner),
		cmocka_unit_test(add_path_tree),
		cmocka_unit_test(add_path_missing),
		cmocka_unit_test(fifo_in_input_dir),
		cmocka_unit_test(fifo_as_input),
		cmocka_unit_test(symlink_in_input_dir_is_refused),
		cmocka_unit_test(symlink_given_is_followed),
		cmocka_unit_test(symlink_loop_in_input_dir),
		cmocka_unit_test(input_dir_too_deep),
		cmocka_unit_test(cap_exceeded_data),
		cmocka_unit_test(cap_exceeded_at_finish),
		cmocka_unit_test(cap_exceeded_path),
		cmocka_unit_test(exactly_at_cap_fits),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
