/* SPDX-License-Identifier: MIT */
/*
 * The service's core without an engine: requests checked, admission,
 * idempotency keys, tenants of kept runs, the session table and the one
 * map of errors, against a canned backend (struct serve_backend) that makes
 * results the way the library does, with no sandbox. Every wait is bounded:
 * alarm() turns a hang into a failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "unit-main.h"

#include "clock.h"
#include "nbrun-private.h"
#include "serve.h"
#include "sessions.h"

/* ---- the canned backend ------------------------------------------------------------ */

static struct canned {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	unsigned int calls;    /* runs that reached the backend */
	unsigned int inside;   /* runs in it now */
	bool hold;             /* runs wait in it until released */
	int fail;              /* returned instead of a result (0: a result) */
	char last_code[256];
	char last_language[32];
	char last_env[256];    /* the env entries, joined by ';' */
	size_t last_files;
} C = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false, 0, "", "", "", 0 };

static unsigned int id_seq;

static int canned_result(struct nbrun_result **out, const char *stdout_text,
			 const struct nbrun_run_options *opts)
{
	char id[16];
	int rc;

	pthread_mutex_lock(&C.mu);
	C.calls++;
	C.inside++;
	snprintf(C.last_language, sizeof(C.last_language), "%s",
		 opts->language ? opts->language : "");
	C.last_env[0] = '\0';
	for (size_t i = 0; i < opts->env_count; i++) {
		strncat(C.last_env, opts->env[i], sizeof(C.last_env) - strlen(C.last_env) - 1);
		strncat(C.last_env, ";", sizeof(C.last_env) - strlen(C.last_env) - 1);
	}
	C.last_files = opts->file_count;
	pthread_cond_broadcast(&C.cond);
	while (C.hold)
		pthread_cond_wait(&C.cond, &C.mu);
	C.inside--;
	rc = C.fail;
	pthread_mutex_unlock(&C.mu);
	if (rc < 0)
		return rc;
	/* A run id as the library makes them: 12 hex digits. */
	snprintf(id, sizeof(id), "%06x%06x", (unsigned int)getpid() & 0xffffff,
		 __atomic_add_fetch(&id_seq, 1, __ATOMIC_SEQ_CST));
	rc = nbrun__result_new(out, id);
	if (rc < 0)
		return rc;
	json_object_set_new((*out)->doc, "stdout", json_string(stdout_text));
	return 0;
}

static int canned_code(struct nbrun_result **out, struct nbrun_ctx *ctx, const char *code,
		       const struct nbrun_run_options *opts)
{
	(void)ctx;
	pthread_mutex_lock(&C.mu);
	snprintf(C.last_code, sizeof(C.last_code), "%s", code);
	pthread_mutex_unlock(&C.mu);
	return canned_result(out, code, opts);
}

static int canned_notebook(struct nbrun_result **out, struct nbrun_ctx *ctx, const char *json,
			   size_t len, const struct nbrun_run_options *opts)
{
	(void)ctx;
	(void)len;
	return canned_result(out, json, opts);
}

static const struct serve_backend canned = { canned_code, canned_notebook };

/* ---- a server ----------------------------------------------------------------------- */

static volatile sig_atomic_t stopping;

static int setup(void **state)
{
	struct serve *s;

	stopping = 0;
	pthread_mutex_lock(&C.mu);
	C.calls = C.inside = 0;
	C.hold = false;
	C.fail = 0;
	pthread_mutex_unlock(&C.mu);
	s = serve_new(&stopping);
	assert_non_null(s);
	s->backend = &canned;
	s->max_runs = 2;
	s->languages = strdup("python r");
	assert_non_null(s->languages);
	assert_int_equal(mcp_open_state(s, NULL), 0);
	assert_int_equal(serve_sessions_start(s), 0);
	alarm(60);
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct serve *s = *state;
	char *dir = strdup(s->state_dir);
	struct stat st;

	serve_free(s); /* its temporary state directory with it */
	assert_int_equal(stat(dir, &st), -1);
	free(dir);
	alarm(0);
	return 0;
}

static const char *error_of(const struct serve_reply *r)
{
	return json_string_value(json_object_get(r->body, "error"));
}

/* POST /v1/runs as the HTTP door gives it to the core; the reply's kind. */
static enum serve_kind post(struct serve *s, struct serve_reply *reply, const char *body,
			    const char *key, const char *owner)
{
	struct serve_request req;
	char tmp_root[4096];

	memset(reply, 0, sizeof(*reply));
	snprintf(tmp_root, sizeof(tmp_root), "%s/tmp", s->state_dir);
	if (serve_request_parse(&req, reply, s, body, strlen(body), tmp_root) < 0)
		return reply->kind;
	if (serve_request_key(&req, reply, key, body, strlen(body)) < 0) {
		serve_request_free(&req);
		return reply->kind;
	}
	snprintf(req.owner, sizeof(req.owner), "%s", owner ? owner : "");
	req.refs = true;
	serve_run(reply, s, &req);
	serve_request_free(&req);
	return reply->kind;
}

/* ---- the error map ------------------------------------------------------------------ */

static void kinds_map_once(void **state)
{
	static const struct {
		enum serve_kind kind;
		unsigned int status;
		const char *name;
		int jsonrpc;
	} want[] = {
		{ SERVE_E_REQUEST, 400, "request", MCP_INVALID_PARAMS },
		{ SERVE_E_LANGUAGE, 400, "language", MCP_INVALID_PARAMS },
		{ SERVE_E_AUTH, 401, "auth", MCP_INVALID_REQUEST },
		{ SERVE_E_NOT_FOUND, 404, "not_found", MCP_RESOURCE_NOT_FOUND },
		{ SERVE_E_CONFLICT, 409, "busy", MCP_INTERNAL_ERROR },
		{ SERVE_E_KEY_REUSED, 422, "request", MCP_INVALID_PARAMS },
		{ SERVE_E_INTERNAL, 500, "internal", MCP_INTERNAL_ERROR },
		{ SERVE_E_ENGINE, 502, "engine", MCP_INTERNAL_ERROR },
		{ SERVE_E_BUSY, 503, "busy", MCP_INTERNAL_ERROR },
		{ SERVE_E_STOPPING, 503, "stopping", MCP_INTERNAL_ERROR },
		{ SERVE_E_STORAGE, 507, "storage", MCP_INTERNAL_ERROR },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(serve_kind_status(want[i].kind), want[i].status);
		assert_string_equal(serve_kind_name(want[i].kind), want[i].name);
		assert_int_equal(serve_kind_jsonrpc(want[i].kind), want[i].jsonrpc);
	}
	/* every kind has a status and a name; a kind out of range is internal */
	for (int k = SERVE_E_REQUEST; k < SERVE_KIND_COUNT; k++) {
		assert_true(serve_kind_status(k) >= 400 && serve_kind_status(k) < 600);
		assert_true(*serve_kind_name(k));
	}
	assert_int_equal(serve_kind_status((enum serve_kind)1000), 500);
	assert_int_equal(serve_kind_status(SERVE_OK), 200);
}

static void lib_errors_one_map(void **state)
{
	struct serve_reply r = SERVE_REPLY_INIT;

	(void)state;
	/* A missing file is 404 whichever door asks (it was 400 for runs, 404 for sessions). */
	assert_int_equal(serve_lib_kind(NBRUN_ENOTFOUND), SERVE_E_NOT_FOUND);
	assert_int_equal(serve_lib_kind(NBRUN_EINVAL), SERVE_E_REQUEST);
	assert_int_equal(serve_lib_kind(NBRUN_EPARSE), SERVE_E_REQUEST);
	assert_int_equal(serve_lib_kind(NBRUN_EENGINE), SERVE_E_ENGINE);
	assert_int_equal(serve_lib_kind(NBRUN_ENOIMAGE), SERVE_E_ENGINE);
	assert_int_equal(serve_lib_kind(NBRUN_ECANCELLED), SERVE_E_STOPPING);
	assert_int_equal(serve_lib_kind(NBRUN_ENOSPC), SERVE_E_STORAGE);
	assert_int_equal(serve_lib_kind(NBRUN_ENOMEM), SERVE_E_INTERNAL);
	serve_reply_lib_error(&r, NBRUN_ECANCELLED, "", "the run");
	assert_int_equal(r.kind, SERVE_E_STOPPING);
	assert_string_equal(error_of(&r), "the run was cancelled: the server is shutting down");
	serve_reply_lib_error(&r, NBRUN_EIO, "", "the session call");
	assert_string_equal(error_of(&r), "the session call failed");
	assert_string_equal(json_string_value(json_object_get(r.body, "kind")), "internal");
	/* one line, and valid UTF-8 whatever the message held */
	serve_reply_error(&r, SERVE_E_REQUEST, "bad \xff id\nsecond line");
	assert_string_equal(error_of(&r), "bad \xef\xbf\xbd id");
	json_decref(r.body);
}

/* ---- requests ----------------------------------------------------------------------- */

static void requests_checked(void **state)
{
	static const struct {
		const char *body;
		enum serve_kind kind;
		const char *says;
	} bad[] = {
		{ "{", SERVE_E_REQUEST, "bad JSON" },
		{ "[]", SERVE_E_REQUEST, "must be a JSON object" },
		{ "{\"code\": \"1\", \"x\": 1}", SERVE_E_REQUEST, "unknown key 'x'" },
		{ "{}", SERVE_E_REQUEST, "either" },
		{ "{\"code\": \"1\", \"notebook\": {}}", SERVE_E_REQUEST, "either" },
		{ "{\"code\": 1}", SERVE_E_REQUEST, "code: want a string" },
		{ "{\"code\": \"1\", \"parameters\": {}}", SERVE_E_REQUEST, "with \"notebook\"" },
		{ "{\"code\": \"1\", \"timeout\": \"soon\"}", SERVE_E_REQUEST, "positive duration" },
		{ "{\"code\": \"1\", \"timeout\": \"100h\"}", SERVE_E_REQUEST, "above this server's limit" },
		{ "{\"code\": \"1\", \"language\": \"cobol\"}", SERVE_E_LANGUAGE, "cobol" },
		{ "{\"code\": \"1\", \"env\": {\"1X\": \"v\"}}", SERVE_E_REQUEST, "env:" },
		{ "{\"code\": \"1\", \"files\": [{\"path\": \"../x\", \"content_base64\": \"\"}]}",
		  SERVE_E_REQUEST, "one plain name" },
		{ "{\"code\": \"1\", \"files\": [{\"path\": \"x\", \"content_base64\": \"@@\"}]}",
		  SERVE_E_REQUEST, "not valid base64" },
	};
	struct serve *s = *state;
	struct serve_reply r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(post(s, &r, bad[i].body, NULL, NULL), bad[i].kind);
		if (!strstr(error_of(&r), bad[i].says))
			fail_msg("%s: %s", bad[i].body, error_of(&r));
		json_decref(r.body);
	}
	/* none of them reached the backend or left a file */
	assert_int_equal(C.calls, 0);
}

static void request_reaches_backend(void **state)
{
	struct serve *s = *state;
	struct serve_reply r;
	const char *id;
	char path[4200];
	struct stat st;

	s->opts.env = (const char *const[]){ "FROM_SERVER=1", "BOTH=server" };
	s->opts.env_count = 2;
	assert_int_equal(post(s, &r, "{\"code\": \"print(1)\", \"language\": \"R\", "
				"\"env\": {\"BOTH\": \"request\"}, \"files\": [{\"path\": \"in.csv\", "
				"\"content_base64\": \"YSxiCg==\"}]}", NULL, NULL),
			 SERVE_OK);
	s->opts.env = NULL;
	s->opts.env_count = 0;
	assert_string_equal(C.last_code, "print(1)");
	assert_string_equal(C.last_language, "r"); /* canonical */
	/* the request's variable wins over the server's of the same name */
	assert_string_equal(C.last_env, "BOTH=request;FROM_SERVER=1;");
	assert_int_equal(C.last_files, 1);
	id = json_string_value(json_object_get(r.body, "run_id"));
	assert_non_null(id);
	assert_true(wire_run_id_valid(id));
	assert_string_equal(json_string_value(json_object_get(r.body, "stdout")), "print(1)");
	/* kept: result.json below runs/ID */
	snprintf(path, sizeof(path), "%s/%s/result.json", s->runs_dir, id);
	assert_int_equal(stat(path, &st), 0);
	json_decref(r.body);
}

static void notebook_with_parameters(void **state)
{
	struct serve *s = *state;
	struct serve_reply r;
	const char *out;

	assert_int_equal(post(s, &r, "{\"notebook\": {\"nbformat\": 4, \"nbformat_minor\": 5, "
				"\"metadata\": {}, \"cells\": [{\"cell_type\": \"code\", \"id\": \"p\", "
				"\"metadata\": {\"tags\": [\"parameters\"]}, \"source\": \"n = 1\", "
				"\"outputs\": [], \"execution_count\": null}]}, "
				"\"parameters\": {\"n\": 42}}", NULL, NULL),
			 SERVE_OK);
	/* the backend got the notebook with the injected cell */
	out = json_string_value(json_object_get(r.body, "stdout"));
	assert_non_null(out);
	assert_non_null(strstr(out, "n = 42"));
	json_decref(r.body);
}

/* ---- admission ----------------------------------------------------------------------- */

struct poster {
	struct serve *s;
	const char *body, *key;
	struct serve_reply r;
	enum serve_kind kind;
	pthread_t th;
};

static void *post_thread(void *arg)
{
	struct poster *p = arg;

	p->kind = post(p->s, &p->r, p->body, p->key, NULL);
	return NULL;
}

static void wait_inside(unsigned int n)
{
	pthread_mutex_lock(&C.mu);
	while (C.inside < n)
		pthread_cond_wait(&C.cond, &C.mu);
	pthread_mutex_unlock(&C.mu);
}

static void release(void)
{
	pthread_mutex_lock(&C.mu);
	C.hold = false;
	pthread_cond_broadcast(&C.cond);
	pthread_mutex_unlock(&C.mu);
}

static void admission_busy_then_free(void **state)
{
	struct serve *s = *state;
	struct poster a = { .s = s, .body = "{\"code\": \"a\"}" };
	struct poster b = { .s = s, .body = "{\"code\": \"b\"}" };
	struct serve_reply r;

	C.hold = true;
	pthread_create(&a.th, NULL, post_thread, &a);
	pthread_create(&b.th, NULL, post_thread, &b);
	wait_inside(2);
	/* two executing, the most this server runs: the third is told to come back */
	assert_int_equal(post(s, &r, "{\"code\": \"c\"}", NULL, NULL), SERVE_E_BUSY);
	assert_int_equal(r.retry_after, 5);
	assert_non_null(strstr(error_of(&r), "2 runs are executing"));
	json_decref(r.body);
	release();
	pthread_join(a.th, NULL);
	pthread_join(b.th, NULL);
	assert_int_equal(a.kind, SERVE_OK);
	assert_int_equal(b.kind, SERVE_OK);
	json_decref(a.r.body);
	json_decref(b.r.body);
	assert_int_equal(s->runs_active, 0);
	assert_int_equal(post(s, &r, "{\"code\": \"c\"}", NULL, NULL), SERVE_OK);
	json_decref(r.body);
	/* the metrics counted three runs, all ok */
	assert_int_equal(s->m.runs[SERVE_OUT_OK], 3);
	assert_int_equal(s->m.duration_count, 3);
}

static void stopping_refuses(void **state)
{
	struct serve *s = *state;
	struct serve_reply r;

	stopping = 1;
	assert_int_equal(post(s, &r, "{\"code\": \"1\"}", NULL, NULL), SERVE_E_STOPPING);
	json_decref(r.body);
	assert_int_equal(C.calls, 0);
}

static void backend_errors_mapped(void **state)
{
	struct serve *s = *state;
	struct serve_reply r;
	int fd;

	C.fail = NBRUN_EENGINE;
	assert_int_equal(post(s, &r, "{\"code\": \"1\"}", NULL, NULL), SERVE_E_ENGINE);
	json_decref(r.body);
	C.fail = NBRUN_ENOTFOUND;
	assert_int_equal(post(s, &r, "{\"code\": \"1\"}", NULL, NULL), SERVE_E_NOT_FOUND);
	json_decref(r.body);
	/* no run directory is left by a run that made no result */
	fd = open(s->runs_dir, O_RDONLY | O_DIRECTORY);
	assert_true(fd >= 0);
	{
		DIR *d = fdopendir(fd);
		struct dirent *e;
		unsigned int n = 0;
		while ((e = readdir(d)))
			n += e->d_name[0] != '.';
		closedir(d);
		assert_int_equal(n, 0);
	}
	assert_int_equal(s->m.runs[SERVE_OUT_ABORTED], 2);
}

/* ---- idempotency keys ---------------------------------------------------------------- */

static void idempotency_key_runs_once(void **state)
{
	struct serve *s = *state;
	struct serve_reply r1, r2, r3;
	struct poster p = { .s = s, .body = "{\"code\": \"k\"}", .key = "key-2" };
	struct poster q = { .s = s, .body = "{\"code\": \"k\"}", .key = "key-2" };

	assert_int_equal(post(s, &r1, "{\"code\": \"k\"}", "key-1", NULL), SERVE_OK);
	assert_int_equal(post(s, &r2, "{\"code\": \"k\"}", "key-1", NULL), SERVE_OK);
	assert_int_equal(C.calls, 1);
	assert_string_equal(json_string_value(json_object_get(r1.body, "run_id")),
			    json_string_value(json_object_get(r2.body, "run_id")));
	/* the same key with another body */
	assert_int_equal(post(s, &r3, "{\"code\": \"other\"}", "key-1", NULL), SERVE_E_KEY_REUSED);
	assert_int_equal(serve_kind_status(r3.kind), 422);
	json_decref(r1.body);
	json_decref(r2.body);
	json_decref(r3.body);
	/* a bad key never reaches the backend */
	assert_int_equal(post(s, &r3, "{\"code\": \"k\"}", "bad key!", NULL), SERVE_E_REQUEST);
	json_decref(r3.body);
	/* a retry while the first still runs waits for it, and answers its run */
	C.hold = true;
	pthread_create(&p.th, NULL, post_thread, &p);
	wait_inside(1);
	pthread_create(&q.th, NULL, post_thread, &q);
	usleep(100 * 1000);
	release();
	pthread_join(p.th, NULL);
	pthread_join(q.th, NULL);
	assert_int_equal(p.kind, SERVE_OK);
	assert_int_equal(q.kind, SERVE_OK);
	assert_string_equal(json_string_value(json_object_get(p.r.body, "run_id")),
			    json_string_value(json_object_get(q.r.body, "run_id")));
	json_decref(p.r.body);
	json_decref(q.r.body);
	assert_int_equal(C.calls, 2);
}

/* ---- tenants ------------------------------------------------------------------------- */

static void tenants_see_their_own_runs(void **state)
{
	struct serve *s = *state;
	struct serve_reply r;
	char owner_a[65], owner_b[65];
	char *tokens[] = { strdup("token-of-tenant-b") };
	char id[32];
	json_t *doc;

	s->tenant_tokens = malloc(sizeof(char *));
	s->tenant_tokens[0] = tokens[0];
	s->n_tenant_tokens = 1;
	serve_owner_hex(owner_a, s, 0);
	serve_owner_hex(owner_b, s, 1);
	assert_string_equal(owner_a, "");
	assert_int_equal(strlen(owner_b), 64);
	assert_int_equal(post(s, &r, "{\"code\": \"mine\"}", NULL, owner_b), SERVE_OK);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(r.body, "run_id")));
	json_decref(r.body);
	doc = serve_load_result(s, id, owner_b, false);
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "stdout")), "mine");
	json_decref(doc);
	/* the first token's owner sees nothing of it, as if it never was */
	assert_null(serve_load_result(s, id, owner_a, false));
	memset(&r, 0, sizeof(r));
	serve_api_get_result(&r, s, id, owner_a);
	assert_int_equal(r.kind, SERVE_E_NOT_FOUND);
	json_decref(r.body);
	assert_true(serve_open_run(s, "../../etc", owner_b) < 0);
}

/* ---- the session table ----------------------------------------------------------------- */

/* A session in the table as serve_session_open() leaves it, with no sandbox. */
static struct serve_session *fake_session(struct serve *s, const char *id, int tenant,
					  const char *owner)
{
	struct serve_session *ss = calloc(1, sizeof(*ss));

	assert_non_null(ss);
	snprintf(ss->id, sizeof(ss->id), "%s", id);
	snprintf(ss->dir_name, sizeof(ss->dir_name), "%s", id);
	snprintf(ss->owner, sizeof(ss->owner), "%s", owner);
	ss->tenant = tenant;
	ss->dir_fd = -1;
	ss->idle_ms = 3600 * 1000;
	ss->created_ms = ss->last_ms = clock_mono_ms(); /* else the reaper takes it at once */
	ss->language = "python";
	pthread_mutex_lock(&s->sessions->mu);
	ss->next = s->sessions->list;
	s->sessions->list = ss;
	s->sessions->count++;
	pthread_mutex_unlock(&s->sessions->mu);
	return ss;
}

static void session_table_one_limit(void **state)
{
	struct serve *s = *state;
	struct serve_reply r = SERVE_REPLY_INIT;
	struct serve_request req;
	struct serve_session *got;

	memset(&req, 0, sizeof(req));
	s->max_sessions = 2;
	fake_session(s, "aaaa", 0, "");          /* the HTTP API's */
	fake_session(s, "bbbb", 0, "mcp-1");     /* an MCP session's */
	{
		char *text = serve_api_metrics(s);
		assert_non_null(strstr(text, "\nnbrun_sessions_open 2\n"));
		free(text);
	}
	/* the limit counts both: the third is refused before any sandbox is made */
	assert_null(serve_session_open(s, &r, 0, "mcp-2", &req, 1000, NULL));
	assert_int_equal(r.kind, SERVE_E_BUSY);
	assert_int_equal(r.retry_after, 30);
	assert_non_null(strstr(error_of(&r), "2 sessions are open"));
	json_decref(r.body);
	/* the HTTP door sees the tenant's sessions; an MCP session its own only */
	got = sess_get(s, "bbbb", 0, NULL);
	assert_non_null(got);
	sess_put(s, got);
	assert_null(sess_get(s, "aaaa", 0, "mcp-1"));
	assert_null(sess_get(s, "bbbb", 0, "mcp-2"));
	assert_null(sess_get(s, "aaaa", 1, NULL)); /* another tenant's */
	got = sess_get(s, "bbbb", 0, "mcp-1");
	assert_non_null(got);
	/* one operation at a time */
	assert_true(sess_claim(s, got));
	assert_false(sess_claim(s, got));
	sess_unclaim(s, got);
	sess_put(s, got);
	/* the end of an MCP session closes its sessions and frees their place */
	serve_sessions_close_owner(s, "mcp-1");
	assert_null(sess_get(s, "bbbb", 0, NULL));
	assert_int_equal(s->sessions->count, 1);
	got = sess_get(s, "aaaa", 0, NULL);
	assert_non_null(got);
	sess_put(s, got);
}

int main(int argc, char **argv)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kinds_map_once),
		cmocka_unit_test(lib_errors_one_map),
		T(requests_checked),
		T(request_reaches_backend),
		T(notebook_with_parameters),
		T(admission_busy_then_free),
		T(stopping_refuses),
		T(backend_errors_mapped),
		T(idempotency_key_runs_once),
		T(tenants_see_their_own_runs),
		T(session_table_one_limit),
	};
	serve_set_log_fn(NULL, NULL);
	unit_filter_args(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
