/* SPDX-License-Identifier: MIT */
/* nbrun serve: shared state of the HTTP server, its API layer and its executor. */
#ifndef NBRUN_SERVE_H
#define NBRUN_SERVE_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "nbrun.h"
#include "netrule.h"
#include "wire.h"

/*
 * Limits of the HTTP API (documented in `nbrun serve --help` and docs/http-api.md).
 * A request body larger than SERVE_BODY_MAX is refused with 413; an image or
 * file is inlined as content_base64 in the POST reply when it is at most
 * SERVE_INLINE_ONE bytes and the inlined bytes stay within SERVE_INLINE_ALL.
 */
#define SERVE_BODY_MAX (64u << 20)
#define SERVE_INLINE_ONE (1u << 20)
#define SERVE_INLINE_ALL (8u << 20)
#define SERVE_MAX_FILES 1000
#define SERVE_MAX_ENV 256
#define SERVE_CONN_TIMEOUT_S 30
#define SERVE_CONN_LIMIT 256
#define SERVE_CONN_PER_IP 64
/* Request line and headers together: beyond, 431 with a JSON message. */
#define SERVE_HEADERS_MAX (32u << 10)
/* Wrong or missing tokens from one client address (an IPv6 /64) in a minute before 429. */
#define SERVE_AUTH_FAILURES 20
#define SERVE_DEFAULT_RETENTION_MS (3600u * 1000u)
#define SERVE_DEFAULT_KEEP 1000
/*
 * Idempotency-Key of POST /v1/runs: 1 to WIRE_IDEM_KEY_MAX characters of
 * [A-Za-z0-9._:/-]; at most SERVE_IDEM_MAX keys remembered (the oldest
 * finished one forgotten first). A waiter on a key whose run is executing
 * gives up SERVE_IDEM_GRACE_MS after that run's timeout (409).
 */
#define SERVE_IDEM_MAX 10000
#define SERVE_IDEM_GRACE_MS (120u * 1000u)
/* Duration histogram buckets in seconds (Prometheus "le"). */
#define SERVE_BUCKETS 12
/* The longest owner of a session (an MCP session id). */
#define SERVE_OWNER_MAX 64

/*
 * The service's messages (log.c): one line each, without a newline. INFO
 * lines carry their own "nbrun: serve: " prefix; an ERR or USAGE line is
 * the message alone, and cmd names the command a USAGE error points to.
 * With no function set, lines go to stderr as the command line prints them.
 */
enum serve_log_level { SERVE_LOG_INFO, SERVE_LOG_ERR, SERVE_LOG_USAGE };
typedef void serve_log_fn(enum serve_log_level level, const char *cmd, const char *line,
			  void *payload);
void serve_set_log_fn(serve_log_fn *fn, void *payload);
void serve_log(enum serve_log_level level, const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define serve_err(...) serve_log(SERVE_LOG_ERR, NULL, __VA_ARGS__)
#define serve_info(...) serve_log(SERVE_LOG_INFO, NULL, __VA_ARGS__)
#define serve_usage_err(cmd, ...) serve_log(SERVE_LOG_USAGE, cmd, __VA_ARGS__)

enum serve_outcome {
	SERVE_OUT_OK = 0,   /* the five run statuses, in enum nbrun_status order */
	SERVE_OUT_ERROR,
	SERVE_OUT_TIMEOUT,
	SERVE_OUT_OOM,
	SERVE_OUT_FAILED,
	SERVE_OUT_ABORTED,  /* the library made no result (engine down, cancelled, ...) */
	SERVE_OUT_COUNT,
};

struct serve_metrics {
	uint64_t runs[SERVE_OUT_COUNT];
	uint64_t buckets[SERVE_BUCKETS]; /* cumulative counts are made when printing */
	uint64_t duration_count;
	double duration_sum;
	uint64_t sessions_opened;  /* by either door */
	uint64_t session_execs;    /* executions in sessions, by either door */
};

/*
 * What executes a run for the core: the library (serve_library_backend, the
 * one a server has unless told otherwise), or a canned one in unit tests.
 */
struct serve_backend {
	int (*run_code)(struct nbrun_result **out, struct nbrun_ctx *ctx, const char *code,
			const struct nbrun_run_options *opts);
	int (*run_notebook)(struct nbrun_result **out, struct nbrun_ctx *ctx, const char *json,
			    size_t len, const struct nbrun_run_options *opts);
};
extern const struct serve_backend serve_library_backend;

struct serve {
	/* configuration, fixed once the server listens */
	const struct serve_backend *backend; /* serve_library_backend (serve_new) */
	struct nbrun_run_options opts; /* per-run defaults and limits; files/env/out_dir unset */
	char *state_dir;               /* absolute */
	char *runs_dir;                /* STATE/runs */
	int runs_fd;                   /* open on runs_dir */
	char token[WIRE_TOKEN_MAX + 1];
	unsigned int pool_size;        /* warm sandboxes kept ready, every language's; 0: every run cold */
	unsigned int max_runs;         /* runs executing at once; beyond: 503 */
	unsigned int keep_runs;        /* stored runs kept */
	uint64_t retention_ms;
	/* connections: idle timeout, at most at once, at most from one client address */
	unsigned int conn_timeout_s;
	unsigned int max_conns;
	unsigned int max_conns_per_ip;
	unsigned int auth_failures;    /* per client address and minute, then 429 */
	/* The languages the image runs, space-separated in the library's order
	 * ("python r javascript typescript bash"): what requests may ask for
	 * and what the MCP tools advertise. */
	char *languages;
	/* The warm pool (NULL: every run is cold); serve_execute() leases from it. */
	struct nbrun_pool *pool;
	/* The MCP server answering at /mcp (mcp.h); NULL: none. */
	struct mcp_server *mcp;
	/* Sessions (sessions.c); their limits. */
	struct serve_sessions *sessions;
	unsigned int max_sessions;
	uint64_t session_idle_ms;     /* default idle timeout of a session */
	uint64_t session_life_ms;     /* the most a session lives */
	/* Tokens after the first (one per line of --token-file): each is a
	 * tenant; a session is visible only to the tenant that opened it. */
	char **tenant_tokens;
	size_t n_tenant_tokens;
	/* This server's node (--node): the session ids it hands out name it. */
	char node[WIRE_NODE_MAX + 1];
	/* The hosts a request may allow (--allow-net of serve and mcp): the
	 * ceiling of every request's "allow_net"; none: no network for anyone. */
	struct netrule *net_ceiling;
	size_t n_net_ceiling;
	/* The Origins a browser page may call /mcp from (--allow-origin); a
	 * request with another Origin gets 403, one with none is served. */
	char **allow_origins;
	size_t n_allow_origins;
	/* The nodes it forwards other nodes' sessions to (http/forward.c); NULL: none. */
	struct serve_peers *peers;
	/* Raised by SIGTERM/SIGINT (or the end of an MCP client's input): the
	 * cancel flag of every run. */
	volatile sig_atomic_t *stopping;
	bool state_temp;               /* state_dir is this server's own: removed by serve_free() */

	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t idle;  /* signalled when runs_active drops, and when a keyed run ends */
	/* The Idempotency-Keys of runs (idem.c): n_idem slots, free ones reused. */
	struct serve_idem *idem;
	size_t n_idem, idem_alloc;
	uint64_t idem_seq;
	unsigned int runs_active;
	unsigned int posts_open; /* POST /v1/runs not yet answered in full */
	struct serve_metrics m;
};

/* One POST /v1/runs, validated. */
struct serve_request {
	char *code;          /* or */
	char *notebook;      /* nbformat JSON text */
	size_t notebook_len;
	char *params;        /* JSON object text, with notebook only */
	char **env;          /* "K=V", env_count entries */
	size_t env_count;
	char **files;        /* absolute paths in tmp_dir */
	size_t file_count;
	char *tmp_dir;       /* private directory holding the uploaded files */
	uint64_t timeout_ms; /* 0: the server's */
	const char *language; /* canonical (static), one of the server's; NULL: Python, or the notebook's */
	char **allow_net;     /* hosts to allow, within the server's ceiling */
	size_t allow_net_count;
	/* Set by the caller after parsing (NULL: the server's stop flag, no progress). */
	const volatile sig_atomic_t *cancel;
	nbrun_progress_cb progress;
	void *payload;
	nbrun_event_cb on_event; /* live events of the run (an NDJSON stream), or NULL */
	void *event_payload;
	/* Who may read the kept run: the hex SHA-256 of the sender's token ("" for
	 * runs of the first token), written to the run's .owner. */
	char owner[65];
	/* The Idempotency-Key header ("" when none) and the SHA-256 of the body it came with. */
	char idem_key[WIRE_IDEM_KEY_MAX + 1];
	unsigned char idem_body[32];
	/* The answer names each output's url and carries the small ones' bytes (the HTTP door). */
	bool refs;
};

/* What a door asks to run, before the core checks it (serve_request_init). */
struct serve_run_args {
	const char *code;     /* or */
	json_t *notebook;     /* an nbformat 4 object */
	json_t *parameters;   /* an object (name: JSON value), with notebook only; or NULL */
	json_t *files;        /* [{"path": NAME, "content_base64": DATA}], or NULL */
	json_t *env;          /* {"NAME": "value"}, or NULL */
	uint64_t timeout_ms;  /* 0: the server's */
	const char *language; /* a name or alias; NULL: Python, or the notebook's */
	json_t *allow_net;    /* ["host", ...] within the server's --allow-net, or NULL */
};

/*
 * What went wrong, as the core says it: a kind, never an HTTP status. The
 * one map from kinds to HTTP statuses, to the "kind" of a JSON error body
 * and to JSON-RPC error codes is in errors.c.
 */
enum serve_kind {
	SERVE_OK = 0,
	SERVE_E_REQUEST,          /* 400 request: the request makes no sense */
	SERVE_E_LANGUAGE,         /* 400 language: a language this server does not run */
	SERVE_E_POLICY,           /* 400 policy: hosts to allow beyond the server's --allow-net */
	SERVE_E_AUTH,             /* 401 auth: no token, or a wrong one */
	SERVE_E_NOT_FOUND,        /* 404 not_found: no such run, session, output or file */
	SERVE_E_ORIGIN,           /* 403 origin: an Origin not allowed on /mcp */
	SERVE_E_METHOD,           /* 405 method */
	SERVE_E_CONFLICT,         /* 409 busy: another request holds the session or key */
	SERVE_E_KERNEL_DEAD,      /* 409 kernel_dead: the session's kernel died */
	SERVE_E_TOO_LARGE,        /* 413 too_large: the body */
	SERVE_E_KEY_REUSED,       /* 422 request: an Idempotency-Key sent with another body */
	SERVE_E_RATE_LIMITED,     /* 429 auth: too many wrong tokens */
	SERVE_E_HEADERS_TOO_LARGE, /* 431 too_large */
	SERVE_E_INTERNAL,         /* 500 internal */
	SERVE_E_ENGINE,           /* 502 engine: the engine is down or refused */
	SERVE_E_FORWARD,          /* 502 forward: a peer did not answer */
	SERVE_E_NODE_GONE,        /* 502 node_gone: the session's node is not there */
	SERVE_E_BUSY,             /* 503 busy: at a limit; retry later */
	SERVE_E_STOPPING,         /* 503 stopping: the server is shutting down */
	SERVE_E_STORAGE,          /* 507 storage: the state directory is full */
	SERVE_KIND_COUNT,
};

/* JSON-RPC 2.0 error codes, and MCP's for a resource (the MCP door answers them). */
#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)
#define MCP_RESOURCE_NOT_FOUND (-32002)

/* What a core call answers: a kind (SERVE_OK: body is its answer) and a JSON body. */
struct serve_reply {
	enum serve_kind kind;
	json_t *body;
	unsigned int retry_after; /* seconds, for SERVE_E_BUSY; 0: no header */
};
#define SERVE_REPLY_INIT { SERVE_OK, NULL, 0 }

/* server.c */
/*
 * The run options of s from the command line's o: its limits and defaults,
 * with no files (each request sends its own); o's hosts to allow become
 * the ceiling of what requests may allow. 0, or -1 after a usage error of
 * prog.
 */
int serve_run_options(struct serve *s, const struct nbrun_run_options *o, const char *prog);
/*
 * --allow-origin: an Origin (scheme://host[:port], no path) a browser page
 * may call /mcp from. 0, or -1 after a usage error of prog.
 */
int serve_allow_origin(struct serve *s, const char *origin, const char *prog);
/*
 * A server with nbrun serve's defaults (the library's run options, twice as
 * many runs at once as there are cores, the default limits), stopping when
 * *stopping is raised. NULL when out of memory.
 */
struct serve *serve_new(volatile sig_atomic_t *stopping);
/*
 * Free s: every session's and every warm sandbox is removed first, and a
 * temporary state directory (mcp_open_state) with them. NULL is fine.
 */
void serve_free(struct serve *s);
/* serve_http_main() and mcp_stdio_main() when runs did not stop in time:
 * their threads still use s, so the caller exits without freeing it. */
#define SERVE_STUCK (-2)
/*
 * Find the server's languages (s->languages) from its image; when the
 * engine cannot say, Python only, with a warning naming who (prog) warns.
 * -1 when out of memory.
 */
int serve_languages_init(struct serve *s, const char *prog);
/*
 * The canonical name of language name (any case or alias) when this
 * server's image runs it; NULL with a one-line reason in why otherwise.
 */
const char *serve_language(const struct serve *s, const char *name, char *why, size_t len);
/* The server's languages joined by ", " (for a message), into buf. */
const char *serve_languages_list(const struct serve *s, char *buf, size_t len);
/*
 * --pool of serve and mcp: warm sandboxes per language ("N" is Python's,
 * "LANG=N" another's; the last given for a language wins), checked against
 * the image's languages once those are known.
 */
#define SERVE_POOL_LANGUAGES 8
struct serve_pool_args {
	struct nbrun_pool_language langs[SERVE_POOL_LANGUAGES]; /* [0]: Python */
	size_t n;
	const char *unknown; /* the first name that is no language */
};
/* Python's n (the default); 0. */
void serve_pool_args_init(struct serve_pool_args *a, unsigned int python);
/* One --pool argument; 0, or -1 after a usage error of prog. */
int serve_pool_arg(struct serve_pool_args *a, const char *arg, const char *prog);
/*
 * The languages of a against the server's (s->languages), the total within
 * 64; s->pool_size is then the total. 0, or -1 after a usage error of prog.
 */
int serve_pool_check(struct serve_pool_args *a, struct serve *s, const char *prog);
/* Point po at the languages of a (checked) and at the run limits ro. */
void serve_pool_options(struct nbrun_pool_options *po, const struct serve_pool_args *a,
			const struct nbrun_run_options *ro);
/* Wait at most ms for the runs and posts of s to end. */
void serve_wait_idle(struct serve *s, uint64_t ms);
/* Start the warm pool of s from pa (checked): 0, or -1 (message logged). */
int serve_start_pool(struct serve *s, const struct serve_pool_args *pa);
/*
 * The engine before anything is made: 0 when it answers; else -1 with one
 * line logged saying why (the caller exits 4, as a run would). What killed
 * runs and servers of this host left is removed here.
 */
int serve_check_engine(void);
/*
 * nbrun mcp's state: dir when given (kept), else a private temporary
 * directory (s->state_temp set; serve_free() removes it). 0 or -1 (logged).
 */
int mcp_open_state(struct serve *s, const char *dir);
/* nbrun mcp's warm pool; a failure is logged and the server goes on cold. */
void mcp_start_pool(struct serve *s, const struct serve_pool_args *pa);

/* store.c */
/*
 * Open the kept run id for the token whose owner digest is owner (see
 * serve_request.owner): its directory fd, or -1 when it does not exist or
 * is another token's (the caller answers the same 404 for both).
 */
int serve_open_run(struct serve *s, const char *id, const char *owner);
/* The owner digest of tenant (index of the token): "" for the first token. */
void serve_owner_hex(char out[65], const struct serve *s, int tenant);
/* Mark the run directory run_fd as owner's (nothing for ""). 0 or -1 (errno set). */
int serve_write_owner(int run_fd, const char *owner);
/*
 * Add "url" (prefix/PATH) to each image and file entry of a result
 * document, and "content_base64" when inline_data and the bytes fit the
 * caps; dir_fd is the directory the paths are relative to.
 */
void serve_add_refs(json_t *doc, const char *prefix, int dir_fd, bool inline_data);
/* The urls of a kept run's outputs (/v1/runs/{id}/...), see serve_add_refs. */
void serve_add_run_refs(json_t *doc, const char *run_id, int run_fd, bool inline_data);
/*
 * The kept run's result document for owner, with urls (and, with
 * inline_data, the small outputs' bytes), or NULL when it is gone.
 */
json_t *serve_load_result(struct serve *s, const char *run_id, const char *owner, bool inline_data);
/* Remove a directory tree below dirfd without following symlinks. 0 or -errno. */
int serve_rm_tree(int dirfd, const char *name);
/*
 * Make and open the state directory dir (its runs/ and tmp/) for s: 0, or -1
 * (message logged).
 */
int serve_open_state(struct serve *s, const char *dir);
/*
 * Remove finished runs older than the retention, then the oldest beyond
 * the number kept. With startup set, also what a killed server left:
 * pending run directories and uploaded files.
 */
void serve_janitor(struct serve *s, bool startup);
/*
 * Open a regular file at rel (a relative path of safe components: no "",
 * ".", "..", control characters) below dirfd, following no symlink.
 * Returns the fd or -errno (-EINVAL for a bad path).
 */
int serve_open_below(int dirfd, const char *rel);
/* The bytes of a regular file below dirfd (as serve_open_below), at most max;
 * NUL-terminated, malloc'd. NULL when missing, unreadable or larger. */
char *serve_read_below(int dirfd, const char *rel, size_t max, size_t *len);

/* auth.c */
/*
 * The tokens of s from the token file at path: the first line is the
 * token, each further line a tenant's. 0, or -1 (message logged).
 */
int serve_read_token(struct serve *s, const char *path);
/* A token made for s: 32 random bytes as hex, written 0600 to STATE/token. 0 or -1 (logged). */
int serve_make_token(struct serve *s);

/* runs.c */
/*
 * A run request from what a door asks: checked against the server's limits
 * and languages, the server's environment added, the files written to a new
 * directory below tmp_root. 0, or -1 with the error in err.
 */
int serve_request_init(struct serve_request *req, struct serve_reply *err, const struct serve *s,
		       const struct serve_run_args *a, const char *tmp_root);
/* Parse and check a POST /v1/runs body (serve_request_init). */
int serve_request_parse(struct serve_request *req, struct serve_reply *err, const struct serve *s,
			const char *body, size_t len, const char *tmp_root);
void serve_request_free(struct serve_request *req);
/*
 * Admit, execute and keep the run of req: the reply is its result document
 * (SERVE_OK) or an error. An Idempotency-Key on req answers its first run.
 */
void serve_run(struct serve_reply *reply, struct serve *s, struct serve_request *req);
/* GET /v1/runs/{id}: the stored result with urls, for the token whose owner digest is owner. */
void serve_api_get_result(struct serve_reply *reply, struct serve *s, const char *run_id,
			  const char *owner);

/* execute.c */
/*
 * The one place a run is executed: cold, or from the warm pool when
 * s->pool is set. Counts the run in the metrics. Returns what the library
 * returned; *out receives the result when 0.
 */
int serve_execute(struct nbrun_result **out, struct nbrun_ctx *ctx, struct serve *s,
		  const struct serve_request *req, const struct nbrun_run_options *opts);
/* The network options of a run or session of req (its hosts; the server's CA and cap only with them). */
void serve_request_net(struct nbrun_run_options *opts, const struct serve_request *req);
/* Upper bounds ("le") of the duration histogram's buckets, SERVE_BUCKETS of them. */
const double *serve_buckets(void);

/* idem.c */
/*
 * Keep a POST /v1/runs' Idempotency-Key header (key; NULL: none) on req,
 * with a digest of the body it came with. 0, or -1 with a 400 in err.
 */
int serve_request_key(struct serve_request *req, struct serve_reply *err, const char *key,
		      const char *body, size_t len);
/* Forget every Idempotency-Key (at exit). */
void serve_idem_free(struct serve *s);
/*
 * The key of req (which has one) for this run. CLAIMED: *slot is
 * the key's (RUNNING), to be settled; ANSWERED: reply is filled (the run
 * the key started, once it ends; 422 for another body; 409 past its
 * deadline; 503 when the server stops).
 */
enum serve_idem_claim { SERVE_IDEM_ANSWERED, SERVE_IDEM_CLAIMED };
enum serve_idem_claim serve_idem_claim(ssize_t *slot, struct serve_reply *reply, struct serve *s,
				       const struct serve_request *req);
/* The claimed key's run ended: kept as run_id (NULL: forgotten, a retry runs again). */
void serve_idem_settle(struct serve *s, ssize_t slot, const char *run_id);

/* errors.c */
/* The HTTP status of kind (200 for SERVE_OK). */
unsigned int serve_kind_status(enum serve_kind kind);
/* The "kind" of a JSON error body of kind ("" for SERVE_OK). */
const char *serve_kind_name(enum serve_kind kind);
/* The JSON-RPC error code of kind: MCP_INVALID_PARAMS when the request was
 * at fault, MCP_RESOURCE_NOT_FOUND, else MCP_INTERNAL_ERROR (0 for SERVE_OK). */
int serve_kind_jsonrpc(enum serve_kind kind);
/* The kind of the library's error rc. */
enum serve_kind serve_lib_kind(int rc);
/* {"error": one line, "kind": its name}; takes a printf format. */
void serve_reply_error(struct serve_reply *r, enum serve_kind kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The reply for the library's error rc with its message msg (what the call says when "" ). */
void serve_reply_lib_error(struct serve_reply *reply, int rc, const char *msg, const char *what);
/* Writing into the state directory failed with err (what: "write X"): storage when full, else internal. */
void serve_reply_write_error(struct serve_reply *reply, int err, const char *what);

/* metrics.c */
void serve_api_health(struct serve_reply *reply, struct serve *s);
/* Prometheus text; malloc'd. */
char *serve_api_metrics(struct serve *s);

/* sessions.c */
#define SERVE_DEFAULT_MAX_SESSIONS 16
#define SERVE_DEFAULT_SESSION_IDLE_MS (600u * 1000u)
#define SERVE_DEFAULT_SESSION_LIFE_MS (3600u * 1000u)
struct MHD_Connection;
struct MHD_Response;
/* The session table and its reaper (idle timeout, lifetime). 0 or -1 (message logged). */
int serve_sessions_start(struct serve *s);
/* Interrupt every running execution (shutdown). */
void serve_sessions_interrupt_all(struct serve *s);
/* Close every session and stop the reaper; NULL table is fine. */
void serve_sessions_stop(struct serve *s);
struct serve_session;
/*
 * Open a session of tenant from req (its files, env and language), idle
 * for at most idle_ms; owner: the MCP session that opens it (no one else
 * may use it), or NULL; cancel: what stops its start. The session, held
 * (sess_put() when done), or NULL with the error in err (busy at the
 * server's --max-sessions).
 */
struct serve_session *serve_session_open(struct serve *s, struct serve_reply *err, int tenant,
					 const char *owner, const struct serve_request *req,
					 uint64_t idle_ms, const volatile sig_atomic_t *cancel);
/*
 * Execute code in the claimed session ss, as nbrun_session_execute() does;
 * counted in the session and in the metrics. What the library returned.
 */
int serve_session_execute(struct nbrun_result **out, struct serve *s, struct serve_session *ss,
			  const char *code, const struct nbrun_exec_options *eo);
/* Close the sessions owner opened (its MCP session ended). */
void serve_sessions_close_owner(struct serve *s, const char *owner);

/* http/http.c */
struct serve_http;
/* Start answering on the listening socket fd (taken over). NULL on failure (message logged). */
struct serve_http *serve_http_start(struct serve *s, int listen_fd);
/* Stop accepting connections (the listening socket is closed). */
void serve_http_quiesce(struct serve_http *h);
/* Close every connection and stop. */
void serve_http_stop(struct serve_http *h);
/*
 * nbrun serve from here on: the session table, MCP at /mcp and HTTP on
 * listen_fd (taken over), the janitor every while, until *s->stopping; then
 * no new connections (sock_path, when not NULL, is unlinked), every run
 * cancelled and waited for. 0 when stopped in order; -1 when it could not
 * start (logged); SERVE_STUCK.
 */
int serve_http_main(struct serve *s, int listen_fd, const char *sock_path);

/* http/listen.c */
/*
 * A listening TCP socket on spec (HOST:PORT, [V6]:PORT or PORT); refused
 * on an address that is not loopback unless have_token. The fd, or -1
 * (message logged; the caller exits 2 or 5 as the message says).
 */
int serve_listen_tcp(const char *spec, bool have_token);
/* A listening unix socket at path (mode 0600). The fd, or -1 (logged). */
int serve_listen_unix(const char *path);

/* http/reply.c */
/* A JSON error {"error": one line, "kind": ...} of kind; its HTTP status in *status. */
struct MHD_Response *serve_error_response(unsigned int *status, enum serve_kind kind,
					  const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* http/stream.c */
/*
 * POST /v1/runs with Accept: application/x-ndjson: the run executes in a
 * thread of its own and its events stream out, one JSON object a line, the
 * result document (or an error) last. A client that goes away cancels it.
 */
struct MHD_Response *serve_stream_run(struct serve *s, struct MHD_Connection *c,
				      struct serve_request *req, unsigned int *status);
/* True when the request asks for an NDJSON stream. */
bool serve_wants_ndjson(struct MHD_Connection *c);

/* http/http-sessions.c */
/* True when url is under /v1/sessions. */
bool serve_sessions_route(const char *url);
/* True when the request to url has a body to collect first (POST, PUT). */
bool serve_sessions_wants_body(const char *method);
/*
 * Answer one request under /v1/sessions for tenant (the index of the
 * token): the response (content type set) and its status.
 */
struct MHD_Response *serve_sessions_handle(struct serve *s, struct MHD_Connection *c, int tenant,
					   const char *method, const char *url, const char *body,
					   size_t len, unsigned int *status);

/* http/forward.c */
struct serve_peers;
/* s->node from name, or this host's name when NULL. 0 or -1 (usage message logged). */
int serve_node_init(struct serve *s, const char *name);
/* --peer NAME=http://HOST:PORT. 0 or -1 (usage message logged). */
int serve_peer_add(struct serve *s, const char *spec);
/* --peers-dns HOST:PORT: every address of HOST is a peer, named by its /v1/health. */
int serve_peers_dns(struct serve *s, const char *hostport);
void serve_peers_free(struct serve *s);
/* True when the request came forwarded from another node. */
bool serve_forwarded(struct MHD_Connection *c);
/*
 * Forward a request for session id (NODE~...) to its node, a peer: 0 with
 * the relayed reply in *out (NULL: the client went away; close the
 * connection), or -ENOENT when id names no peer (no connection made; the
 * caller answers its 404).
 */
int serve_forward(struct MHD_Response **out, struct serve *s, struct MHD_Connection *c,
		  const char *id, const char *method, const char *url, const char *body, size_t len,
		  unsigned int *status);
/*
 * Add the sessions of every peer that the token of c sees to the array
 * sessions; the peers that did not answer, by name (a new array).
 */
json_t *serve_forward_list(struct serve *s, struct MHD_Connection *c, json_t *sessions);

#endif
