/* SPDX-License-Identifier: MIT */
/* Value parsing (src/shared/units.c, src/cli/options.c), exit-code mapping, and the
 * library's options initialisers and version checks (src/lib/options.c). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "cli.h"

/* main.c (not linked: it has main()) defines this; record the message instead. */
static char usage_msg[512];
static int usage_calls;

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(usage_msg, sizeof(usage_msg), fmt, ap);
	va_end(ap);
	usage_calls++;
	return CLI_EXIT_USAGE;
}

#define SENTINEL 0xdeadbeefULL

static void size_ok(const char *s, uint64_t want)
{
	uint64_t v = SENTINEL;

	if (units_parse_size(&v, s) != 0)
		fail_msg("units_parse_size(\"%s\") was rejected", s);
	if (v != want)
		fail_msg("units_parse_size(\"%s\") = %llu, want %llu", s, (unsigned long long)v,
			 (unsigned long long)want);
}

static void size_bad(const char *s)
{
	uint64_t v = SENTINEL;

	if (units_parse_size(&v, s) >= 0)
		fail_msg("units_parse_size(\"%s\") was accepted (%llu)", s, (unsigned long long)v);
	assert_true(v == SENTINEL); /* untouched on error */
}

static void dur_ok(const char *s, uint64_t want_ms)
{
	uint64_t v = SENTINEL;

	if (units_parse_duration(&v, s) != 0)
		fail_msg("units_parse_duration(\"%s\") was rejected", s);
	if (v != want_ms)
		fail_msg("units_parse_duration(\"%s\") = %llu ms, want %llu", s, (unsigned long long)v,
			 (unsigned long long)want_ms);
}

static void dur_bad(const char *s)
{
	uint64_t v = SENTINEL;

	if (units_parse_duration(&v, s) >= 0)
		fail_msg("units_parse_duration(\"%s\") was accepted (%llu)", s, (unsigned long long)v);
}

static void sizes(void **state)
{
	size_ok("512M", 512ULL << 20);
	size_ok("512m", 512ULL << 20);
	size_ok("512MiB", 512ULL << 20);
	size_ok("1G", 1ULL << 30);
	size_ok("1gb", 1ULL << 30);
	size_ok("1.5GiB", 3ULL << 29);
	size_ok("1024", 1024);
	size_ok("1024b", 1024);
	size_ok("64k", 64ULL << 10);
	size_ok("2T", 2ULL << 40);
}

static void sizes_rejected(void **state)
{
	size_bad("0");
	size_bad("0M");
	size_bad("0.1"); /* less than one byte */
	size_bad("-1");
	size_bad("-1G");
	size_bad("+1G");
	size_bad("5XB");
	size_bad("5 M");
	size_bad("5M ");
	size_bad("");
	size_bad(" 1");
	size_bad("\t1");
	size_bad("1e400");
	size_bad("nan");
	size_bad("NaN");
	size_bad("inf");
	size_bad("infinity");
	size_bad("M");
	size_bad("1e30"); /* finite but far past any sane size */
	size_bad("99999T");
	size_bad(NULL);
}

static void durations(void **state)
{
	dur_ok("60", 60000);
	dur_ok("60s", 60000);
	dur_ok("500ms", 500);
	dur_ok("2m", 120000);
	dur_ok("2min", 120000);
	dur_ok("1h", 3600000);
	dur_ok("1.5h", 5400000);
	dur_ok("0.5", 500);
}

static void durations_rejected(void **state)
{
	dur_bad("0");
	dur_bad("0s");
	dur_bad("-5s");
	dur_bad("-5");
	dur_bad("0.5ms"); /* under a millisecond */
	dur_bad("5d");
	dur_bad("5 s");
	dur_bad("");
	dur_bad(" 5");
	dur_bad("nan");
	dur_bad("1e400");
	dur_bad("100000h"); /* more than a week */
}

static void cpus(void **state)
{
	uint64_t v = SENTINEL;

	assert_int_equal(units_parse_cpus(&v, "1"), 0);
	assert_true(v == 1000000000ULL);
	assert_int_equal(units_parse_cpus(&v, "0.5"), 0);
	assert_true(v == 500000000ULL);
	assert_int_equal(units_parse_cpus(&v, "2.25"), 0);
	assert_true(v == 2250000000ULL);
	v = SENTINEL;
	assert_true(units_parse_cpus(&v, "0") < 0);
	assert_true(units_parse_cpus(&v, "-1") < 0);
	assert_true(units_parse_cpus(&v, "1e-10") < 0);
	assert_true(units_parse_cpus(&v, "1x") < 0);
	assert_true(units_parse_cpus(&v, "nan") < 0);
	assert_true(units_parse_cpus(&v, "") < 0);
	assert_true(units_parse_cpus(&v, "100000") < 0);
	assert_true(v == SENTINEL);
}

static void counts(void **state)
{
	int64_t v = -7;

	assert_int_equal(units_parse_count(&v, "256"), 0);
	assert_int_equal(v, 256);
	assert_int_equal(units_parse_count(&v, "1"), 0);
	assert_int_equal(v, 1);
	v = -7;
	assert_true(units_parse_count(&v, "0") < 0);
	assert_true(units_parse_count(&v, "1.5") < 0);
	assert_true(units_parse_count(&v, "1.0") < 0);
	assert_true(units_parse_count(&v, "-3") < 0);
	assert_true(units_parse_count(&v, "3k") < 0);
	assert_true(units_parse_count(&v, "") < 0);
	assert_true(units_parse_count(&v, " 3") < 0);
	assert_true(units_parse_count(&v, "99999999999") < 0);
	assert_int_equal(v, -7);
}

static void exit_for_status(void **state)
{
	assert_int_equal(cli_exit_for_status(NBRUN_STATUS_OK), 0);
	assert_int_equal(cli_exit_for_status(NBRUN_STATUS_OK), CLI_EXIT_OK);
	assert_int_equal(cli_exit_for_status(NBRUN_STATUS_ERROR), 1);
	assert_int_equal(cli_exit_for_status(NBRUN_STATUS_TIMEOUT), 3);
	assert_int_equal(cli_exit_for_status(NBRUN_STATUS_OOM), 3);
	assert_int_equal(cli_exit_for_status(NBRUN_STATUS_FAILED), 5);
	assert_int_equal(cli_exit_for_status((enum nbrun_status)42), CLI_EXIT_FAILED);
}

static void exit_for_error(void **state)
{
	assert_int_equal(cli_exit_for_error(NBRUN_EINVAL), 2);
	assert_int_equal(cli_exit_for_error(NBRUN_EENGINE), 4);
	assert_int_equal(cli_exit_for_error(NBRUN_ENOIMAGE), 4);
	assert_int_equal(cli_exit_for_error(NBRUN_ECANCELLED), 130);
	assert_int_equal(cli_exit_for_error(NBRUN_ENOMEM), 5);
	assert_int_equal(cli_exit_for_error(NBRUN_EIO), 5);
	assert_int_equal(cli_exit_for_error(NBRUN_EPARSE), 5);
	assert_int_equal(cli_exit_for_error(NBRUN_ENOTFOUND), 5);
	assert_int_equal(cli_exit_for_error(NBRUN_EGENERIC), 5);
	assert_int_equal(cli_exit_for_error(-1000), 5);
	/* An error code must never map to success. */
	for (int e = -20; e < 0; e++)
		assert_int_not_equal(cli_exit_for_error(e), 0);
}

static void run_options(void **state)
{
	struct cli_run_args a;
	struct nbrun_run_options init = NBRUN_RUN_OPTIONS_INIT;

	assert_int_equal(cli_run_args_init(&a, 8), 0);
	assert_true(a.opts.timeout_ms == init.timeout_ms);
	assert_true(a.opts.memory_bytes == init.memory_bytes);
	usage_calls = 0;
	assert_int_equal(cli_run_option(&a, CLI_OPT_TIMEOUT, "2m", "run"), 0);
	assert_true(a.opts.timeout_ms == 120000);
	assert_int_equal(cli_run_option(&a, CLI_OPT_CELL_TIMEOUT, "30s", "run"), 0);
	assert_true(a.opts.cell_timeout_ms == 30000);
	assert_int_equal(cli_run_option(&a, CLI_OPT_MEMORY, "2G", "run"), 0);
	assert_true(a.opts.memory_bytes == 2ULL << 30);
	assert_int_equal(cli_run_option(&a, CLI_OPT_DISK, "100M", "run"), 0);
	assert_true(a.opts.disk_bytes == 100ULL << 20);
	assert_int_equal(cli_run_option(&a, CLI_OPT_CPUS, "0.5", "run"), 0);
	assert_true(a.opts.nano_cpus == 500000000ULL);
	assert_int_equal(cli_run_option(&a, CLI_OPT_PIDS, "64", "run"), 0);
	assert_int_equal(a.opts.pids, 64);
	assert_int_equal(cli_run_option(&a, CLI_OPT_NETWORK, "bridge", "run"), 0);
	assert_string_equal(a.opts.network, "bridge");
	assert_int_equal(cli_run_option(&a, CLI_OPT_MAX_OUTPUT, "1k", "run"), 0);
	assert_int_equal(a.opts.limits.max_output, 1024);
	assert_int_equal(cli_run_option(&a, 'f', "data.csv", "run"), 0);
	assert_int_equal(cli_run_option(&a, 'e', "A=1", "run"), 0);
	assert_int_equal(cli_run_option(&a, 'e', "B=", "run"), 0);
	assert_int_equal(usage_calls, 0);
	/* not one of ours */
	assert_int_equal(cli_run_option(&a, 'z', "x", "run"), 1);

	/* bad values: usage error, option left as it was */
	assert_int_equal(cli_run_option(&a, CLI_OPT_TIMEOUT, "0", "run"), CLI_EXIT_USAGE);
	assert_true(a.opts.timeout_ms == 120000);
	assert_non_null(strstr(usage_msg, "--timeout"));
	assert_int_equal(cli_run_option(&a, CLI_OPT_MEMORY, "lots", "run"), CLI_EXIT_USAGE);
	assert_true(a.opts.memory_bytes == 2ULL << 30);
	assert_int_equal(cli_run_option(&a, CLI_OPT_PIDS, "1.5", "run"), CLI_EXIT_USAGE);
	assert_int_equal(cli_run_option(&a, CLI_OPT_NETWORK, "host", "run"), CLI_EXIT_USAGE);
	assert_string_equal(a.opts.network, "bridge");
	assert_int_equal(cli_run_option(&a, 'e', "NOEQUALS", "run"), CLI_EXIT_USAGE);
	assert_int_equal(cli_run_option(&a, 'e', "=v", "run"), CLI_EXIT_USAGE);
	assert_int_equal(usage_calls, 6);

	assert_int_equal(cli_run_args_finish(&a, "run"), 0);
	assert_int_equal(a.opts.file_count, 1);
	assert_string_equal(a.opts.files[0], "data.csv");
	assert_int_equal(a.opts.env_count, 2);
	assert_string_equal(a.opts.env[0], "A=1");
	assert_string_equal(a.opts.env[1], "B=");
	cli_run_args_free(&a);
}

static void run_options_cross_checks(void **state)
{
	struct cli_run_args a;

	assert_int_equal(cli_run_args_init(&a, 2), 0);
	assert_int_equal(cli_run_option(&a, CLI_OPT_TIMEOUT, "10s", "run"), 0);
	assert_int_equal(cli_run_option(&a, CLI_OPT_CELL_TIMEOUT, "20s", "run"), 0);
	assert_int_equal(cli_run_args_finish(&a, "run"), CLI_EXIT_USAGE);
	cli_run_args_free(&a);

	assert_int_equal(cli_run_args_init(&a, 2), 0);
	assert_int_equal(cli_run_option(&a, CLI_OPT_MEMORY, "10M", "run"), 0);
	assert_int_equal(cli_run_args_finish(&a, "run"), CLI_EXIT_USAGE);
	cli_run_args_free(&a);

	assert_int_equal(cli_run_args_init(&a, 2), 0);
	assert_int_equal(cli_run_option(&a, CLI_OPT_DISK, "1k", "run"), 0);
	assert_int_equal(cli_run_args_finish(&a, "run"), CLI_EXIT_USAGE);
	cli_run_args_free(&a);

	/* the defaults pass */
	assert_int_equal(cli_run_args_init(&a, 0), 0);
	assert_int_equal(cli_run_args_finish(&a, "run"), 0);
	assert_int_equal(a.opts.file_count, 0);
	cli_run_args_free(&a);
}

/* Code with a NUL byte is refused whole, never run up to it. */
static void source_nul(void **state)
{
	static const char code[] = "print('a')\0print('b')\n";

	(void)state;
	assert_int_equal(cli_check_source("print(1)\n", 9, "n.py", "run"), 0);
	assert_int_equal(cli_check_source("", 0, "n.py", "run"), 0);
	assert_int_equal(cli_check_source(code, sizeof(code) - 1, "n.py", "run"), CLI_EXIT_USAGE);
	assert_int_equal(cli_check_source("a\nb\n\0", 5, "-", "run"), CLI_EXIT_USAGE);
}

/* Inputs are regular files, opened without blocking on a FIFO that has no writer. */
static void open_input(void **state)
{
	char dir[] = "/tmp/nbrun-input-XXXXXX", path[64];
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(10); /* a blocking open would hang here */
	assert_int_equal(cli_open_input(path, "run"), -1);
	alarm(0);
	unlink(path);
	assert_int_equal(cli_open_input(dir, "batch"), -1);
	assert_int_equal(cli_open_input("/dev/zero", "batch"), -1);
	assert_int_equal(cli_open_input("/nonexistent/x.ipynb", "batch"), -1);
	snprintf(path, sizeof(path), "%s/nb.ipynb", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	fd = cli_open_input(path, "batch");
	assert_true(fd >= 0);
	assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	close(fd);
	unlink(path);
	rmdir(dir);
}

/* Two -f inputs with one base name: a usage error, not a silent replacement. */
static void inputs_same_name(void **state)
{
	struct cli_run_args a;

	(void)state;
	assert_int_equal(cli_run_args_init(&a, 4), 0);
	assert_int_equal(cli_run_option(&a, 'f', "a/data.csv", "run"), 0);
	assert_int_equal(cli_run_option(&a, 'f', "b/data.csv", "run"), 0);
	assert_int_equal(cli_run_args_finish(&a, "run"), CLI_EXIT_USAGE);
	cli_run_args_free(&a);

	assert_int_equal(cli_run_args_init(&a, 4), 0);
	assert_int_equal(cli_run_option(&a, 'f', "dir/", "run"), 0);
	assert_int_equal(cli_run_option(&a, 'f', "/elsewhere/dir", "run"), 0);
	assert_int_equal(cli_run_args_finish(&a, "run"), CLI_EXIT_USAGE);
	cli_run_args_free(&a);

	assert_int_equal(cli_run_args_init(&a, 4), 0);
	assert_int_equal(cli_run_option(&a, 'f', "a/data.csv", "run"), 0);
	assert_int_equal(cli_run_option(&a, 'f', "a/data.csv.bak", "run"), 0);
	assert_int_equal(cli_run_option(&a, 'f', "data", "run"), 0);
	assert_int_equal(cli_run_args_finish(&a, "run"), 0);
	cli_run_args_free(&a);
}

/* ---- the library's options initialisers (src/lib/options.c) -------------------- */

/* What options hold before an initialiser runs: nothing a default is. */
#define GARBAGE 0xa5
/* A field of got as the macro's want has it. */
#define SAME(field) assert_memory_equal(&got.field, &want.field, sizeof(got.field))
/* got filled by init, for version v, over garbage. */
#define INIT_GOT(init, v)                                                                          \
	do {                                                                                       \
		memset(&got, GARBAGE, sizeof(got));                                                \
		assert_int_equal(init(&got, v), 0);                                                \
		assert_int_equal(got.version, v);                                                  \
	} while (0)

/* Bytes from off to the end of the struct still as the initialiser found them. */
static void untouched_from(const void *opts, size_t off, size_t size)
{
	const unsigned char *p = opts;

	for (size_t i = off; i < size; i++)
		if (p[i] != GARBAGE)
			fail_msg("byte %zu of %zu was written", i, size);
}

static void run_options_init(void **state)
{
	const struct nbrun_run_options want = NBRUN_RUN_OPTIONS_INIT;
	struct nbrun_run_options got;

	INIT_GOT(nbrun_run_options_init, NBRUN_RUN_OPTIONS_VERSION);
	SAME(image), SAME(timeout_ms), SAME(cell_timeout_ms), SAME(memory_bytes);
	SAME(nano_cpus), SAME(pids), SAME(disk_bytes), SAME(env), SAME(env_count), SAME(files);
	SAME(file_count), SAME(out_dir), SAME(limits), SAME(max_file_bytes), SAME(max_files);
	SAME(progress), SAME(payload), SAME(cancel), SAME(pool), SAME(on_event), SAME(event_payload);
	SAME(language), SAME(allow_errors), SAME(runtime);
	assert_string_equal(got.network, want.network);
	/* the defaults nbrun.h documents, so that the macro cannot drift either */
	assert_true(want.timeout_ms == 60000 && want.memory_bytes == 1ULL << 30 &&
		    want.nano_cpus == 1000000000ULL && want.pids == 256 &&
		    want.disk_bytes == 512ULL << 20 && !strcmp(want.network, "none"));

	/* a program built against version 4 allocated no allow_errors, no runtime */
	INIT_GOT(nbrun_run_options_init, 4);
	SAME(timeout_ms), SAME(pool), SAME(language);
	untouched_from(&got, offsetof(struct nbrun_run_options, allow_errors), sizeof(got));
	INIT_GOT(nbrun_run_options_init, 1);
	SAME(pids), SAME(cancel);
	untouched_from(&got, offsetof(struct nbrun_run_options, pool), sizeof(got));
}

static void pool_exec_parse_options_init(void **state)
{
	{
		const struct nbrun_pool_options want = NBRUN_POOL_OPTIONS_INIT;
		struct nbrun_pool_options got;

		INIT_GOT(nbrun_pool_options_init, NBRUN_POOL_OPTIONS_VERSION);
		SAME(size), SAME(run), SAME(languages), SAME(language_count);
		assert_string_equal(got.preload, "numpy,pandas,matplotlib.pyplot");
		assert_int_equal(want.size, 2);
		INIT_GOT(nbrun_pool_options_init, 1);
		SAME(size), SAME(run);
		untouched_from(&got, offsetof(struct nbrun_pool_options, languages), sizeof(got));
	}
	{
		const struct nbrun_exec_options want = NBRUN_EXEC_OPTIONS_INIT;
		struct nbrun_exec_options got;

		INIT_GOT(nbrun_exec_options_init, NBRUN_EXEC_OPTIONS_VERSION);
		SAME(timeout_ms), SAME(out_dir), SAME(limits), SAME(max_file_bytes);
		SAME(max_files), SAME(on_event), SAME(event_payload);
		assert_true(want.timeout_ms == 60000);
	}
	{
		const struct nbrun_parse_options want = NBRUN_PARSE_OPTIONS_INIT;
		struct nbrun_parse_options got;

		INIT_GOT(nbrun_parse_options_init, NBRUN_PARSE_OPTIONS_VERSION);
		SAME(out_dir), SAME(limits);
	}
}

/* An unknown version, or no struct, is NBRUN_EINVAL, and the struct is left as it was. */
#define INIT_REFUSED(init, type, known)                                                           \
	do {                                                                                      \
		type o_;                                                                          \
		memset(&o_, GARBAGE, sizeof(o_));                                                 \
		assert_int_equal(init(&o_, 0), NBRUN_EINVAL);                                     \
		assert_int_equal(init(&o_, (known) + 1), NBRUN_EINVAL);                           \
		untouched_from(&o_, 0, sizeof(o_));                                               \
		assert_int_equal(init(NULL, known), NBRUN_EINVAL);                                \
	} while (0)

static void options_init_unknown_version(void **state)
{
	INIT_REFUSED(nbrun_run_options_init, struct nbrun_run_options, NBRUN_RUN_OPTIONS_VERSION);
	INIT_REFUSED(nbrun_pool_options_init, struct nbrun_pool_options, NBRUN_POOL_OPTIONS_VERSION);
	INIT_REFUSED(nbrun_exec_options_init, struct nbrun_exec_options, NBRUN_EXEC_OPTIONS_VERSION);
	INIT_REFUSED(nbrun_parse_options_init, struct nbrun_parse_options, NBRUN_PARSE_OPTIONS_VERSION);
}

static void says(const struct nbrun_ctx *ctx, const char *fmt, ...)
{
	char want[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	if (!strstr(nbrun_ctx_errmsg(ctx), want))
		fail_msg("message: '%s' (wanted: '%s')", nbrun_ctx_errmsg(ctx), want);
}

/*
 * Options of an unknown version are refused before anything is read or
 * started: no engine is asked (there is none here), no file is read.
 */
static void options_unknown_version_refused(void **state)
{
	static const char nb[] = "{\"nbformat\": 4, \"nbformat_minor\": 5, \"metadata\": {}, \"cells\": []}";
	struct nbrun_run_options ro = NBRUN_RUN_OPTIONS_INIT;
	struct nbrun_pool_options po = NBRUN_POOL_OPTIONS_INIT;
	struct nbrun_parse_options pa = NBRUN_PARSE_OPTIONS_INIT;
	struct nbrun_result *r = (void *)0x1;
	struct nbrun_session *s = (void *)0x1;
	struct nbrun_pool *p = (void *)0x1;
	struct nbrun_ctx *ctx;

	assert_int_equal(nbrun_ctx_new(&ctx), 0);
	ro.version = NBRUN_RUN_OPTIONS_VERSION + 1;
	assert_int_equal(nbrun_run_code(&r, ctx, "1", &ro), NBRUN_EINVAL);
	assert_null(r);
	says(ctx, "run options of another version (%d): this library knows 1 to %d",
	     NBRUN_RUN_OPTIONS_VERSION + 1, NBRUN_RUN_OPTIONS_VERSION);
	assert_int_equal(nbrun_run_notebook(&r, ctx, nb, sizeof(nb) - 1, &ro), NBRUN_EINVAL);
	says(ctx, "run options of another version");
	assert_int_equal(nbrun_session_open(&s, ctx, &ro), NBRUN_EINVAL);
	assert_null(s);
	says(ctx, "run options of another version");
	ro.version = 0;
	assert_int_equal(nbrun_run_code(&r, ctx, "1", &ro), NBRUN_EINVAL);
	says(ctx, "run options of another version (0)");
	assert_int_equal(nbrun_run_code(&r, ctx, "1", NULL), NBRUN_EINVAL);
	says(ctx, "run options missing");

	po.version = NBRUN_POOL_OPTIONS_VERSION + 1;
	assert_int_equal(nbrun_pool_new(&p, ctx, &po), NBRUN_EINVAL);
	assert_null(p);
	says(ctx, "pool options of another version (%d)", NBRUN_POOL_OPTIONS_VERSION + 1);
	po.version = NBRUN_POOL_OPTIONS_VERSION;
	po.run = &ro; /* checked as a run's */
	assert_int_equal(nbrun_pool_new(&p, ctx, &po), NBRUN_EINVAL);
	says(ctx, "run options of another version");

	pa.version = NBRUN_PARSE_OPTIONS_VERSION + 1;
	assert_int_equal(nbrun_parse_file(&r, ctx, "/nonexistent.ipynb", &pa), NBRUN_EINVAL);
	says(ctx, "parse options of another version (%d): this library knows version 1",
	     NBRUN_PARSE_OPTIONS_VERSION + 1);
	nbrun_ctx_free(ctx);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sizes),
		cmocka_unit_test(sizes_rejected),
		cmocka_unit_test(durations),
		cmocka_unit_test(durations_rejected),
		cmocka_unit_test(cpus),
		cmocka_unit_test(counts),
		cmocka_unit_test(exit_for_status),
		cmocka_unit_test(exit_for_error),
		cmocka_unit_test(run_options),
		cmocka_unit_test(run_options_cross_checks),
		cmocka_unit_test(source_nul),
		cmocka_unit_test(open_input),
		cmocka_unit_test(inputs_same_name),
		cmocka_unit_test(run_options_init),
		cmocka_unit_test(pool_exec_parse_options_init),
		cmocka_unit_test(options_init_unknown_version),
		cmocka_unit_test(options_unknown_version_refused),
	};
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
