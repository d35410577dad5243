/* SPDX-License-Identifier: MIT */
/* Interfaces between libnbrun's modules; nothing here is exported. */
#ifndef NBRUN_PRIVATE_H
#define NBRUN_PRIVATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "nbrun.h"
#include "buf.h"
#include "fdio.h"

#define NBRUN_DEFAULT_MAX_OUTPUT 20000
#define NBRUN_DEFAULT_MAX_OUTPUTS 1000
#define NBRUN_DEFAULT_MAX_IMAGES 100
#define NBRUN_DEFAULT_MAX_IMAGE_BYTES (50ULL << 20)
#define NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES (256ULL << 20)
#define NBRUN_DEFAULT_MAX_FILE_BYTES (256ULL << 20)
#define NBRUN_DEFAULT_MAX_FILES 1000
#define NBRUN_DEFAULT_NET_BYTES (256ULL << 20)
/* The most bytes of a --ca-certs file. */
#define NBRUN_CA_CERTS_MAX (4u << 20)
/* Tar entries from the container: path depth and name length caps. */
#define NBRUN_MAX_PATH_DEPTH 32
#define NBRUN_MAX_NAME_BYTES 255
#define NBRUN_MAX_PATH_BYTES 1024

#define NBRUN_LABEL "nbrun.run"

/* ---- ctx.c --------------------------------------------------------------- */

struct nbrun_ctx {
	char errmsg[512];
};

/* Set the context's one-line message (newlines folded) and return code. */
int nbrun__err(struct nbrun_ctx *ctx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like nbrun__err, appending ": strerror(errnum)". */
int nbrun__errno(struct nbrun_ctx *ctx, int code, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The code of a failed local write: NBRUN_ENOSPC for a full disk or quota, else NBRUN_EIO. */
int nbrun__write_error(int errnum);

/* ---- result.c ------------------------------------------------------------ */

/*
 * The result is its JSON document (schemas/result.schema.json); accessors
 * read from it. Builders below keep the document's shape in one place.
 */
struct nbrun_result {
	json_t *doc;
	/* entries "skipped" lists before one summary entry counts the rest
	 * (0: NBRUN_DEFAULT_MAX_FILES); a run sets its max_files */
	size_t max_skipped;
};

int nbrun__result_new(struct nbrun_result **out, const char *run_id);
/* Record the machine nbrun ran on ("node": this host's name, gethostname();
 * in a Swarm service the node's, see deploy/swarm/stack.yml). */
void nbrun__result_set_node(struct nbrun_result *r);
void nbrun__result_set_status(struct nbrun_result *r, enum nbrun_status st, const char *message);
/* Record something that was not exported or was cut: {"path","reason"}
 * (a path that is not UTF-8 is named so). 0, NBRUN_ENOMEM, or NBRUN_EINVAL
 * when reason is not UTF-8 or the document has no "skipped" list. */
int nbrun__result_skip(struct nbrun_result *r, const char *path, const char *reason);
/* Set truncated:true. */
void nbrun__result_flag_truncated(struct nbrun_result *r);
/* Write result.json into dirfd (0644, replacing it atomically). 0,
 * NBRUN_ENOMEM, NBRUN_ENOSPC (disk or quota full), NBRUN_EIO. */
int nbrun__result_write(struct nbrun_ctx *ctx, const struct nbrun_result *r, int dirfd);

/* ---- outputs.c: executed notebook -> result -------------------------------- */

struct nbrun__limits {
	size_t max_output;
	size_t max_outputs;
	size_t max_images;
	uint64_t max_image_bytes;
	uint64_t max_notebook_bytes;
};
void nbrun__limits_resolve(struct nbrun__limits *out, const struct nbrun_parse_limits *in);

/*
 * Load and validate a notebook file (size cap, JSON, nbformat 4.x).
 * dirfd/name: file relative to a directory (AT_FDCWD for a path).
 */
int nbrun__notebook_load(json_t **out, struct nbrun_ctx *ctx, int dirfd, const char *name,
			 uint64_t max_bytes);
/* Same for a notebook already in memory. */
int nbrun__notebook_loadb(json_t **out, struct nbrun_ctx *ctx, const char *data, size_t len,
			  uint64_t max_bytes);

/*
 * A piece of a notebook sent separately (an executed cell): any JSON, with
 * its values added to *values, which must stay under the cap a whole
 * notebook has.
 */
int nbrun__notebook_piece_loadb(json_t **out, struct nbrun_ctx *ctx, const char *data, size_t len,
				uint64_t *values);
/* The same read from the start of fd (a spooled piece), at most max_bytes. */
int nbrun__notebook_piece_loadfd(json_t **out, struct nbrun_ctx *ctx, int fd, uint64_t max_bytes,
				 uint64_t *values);

/*
 * Fill r from an executed notebook: status ok/error, stdout, stderr,
 * outputs, results, error, images (decoded into out_dirfd/images/ when
 * out_dirfd >= 0), truncated, skipped.
 */
int nbrun__outputs_parse(struct nbrun_ctx *ctx, struct nbrun_result *r, const json_t *nb,
			 int out_dirfd, const struct nbrun__limits *lim);

/* An error that is a clean exit (SystemExit with no code or 0): papermill
 * counts it as success; execution still ends there. */
bool nbrun__is_clean_exit(const char *ename, const char *evalue);

/* ---- notebook.c: code -> notebook ------------------------------------------ */

/* A fresh cell id as nbformat makes them (8 hex digits), unused in nb. */
int nbrun__notebook_new_id(const json_t *nb, struct nbrun_ctx *ctx, char id[16]);
/* nbformat 4.x before 4.5 to 4.5, as nbformat.v4.upgrade: every cell gets an id. */
int nbrun__notebook_upgrade(json_t *nb, struct nbrun_ctx *ctx);

/* Split code on "# %%" lines into nbformat 4.5 code cells. */
int nbrun__notebook_from_code(json_t **out, struct nbrun_ctx *ctx, const char *code);
/* The same in a language: its "%%" marker and comments, its kernelspec. */
struct nbrun__language;
int nbrun__notebook_from_code_lang(json_t **out, struct nbrun_ctx *ctx, const char *code,
				   const struct nbrun__language *lang);

/* ---- language.c: the languages nbrun runs ------------------------------------ */

#define NBRUN__LANGUAGE_MAX_ALIASES 3
#define NBRUN__LANGUAGE_MAX_EXTENSIONS 2
struct nbrun__language {
	const char *name;              /* "python", "r", "javascript", "typescript", "bash" */
	const char *aliases[NBRUN__LANGUAGE_MAX_ALIASES];
	const char *kernel;            /* its kernelspec in the runtime image */
	const char *display_name;      /* the kernelspec's display_name */
	const char *kernel_language;   /* the kernelspec's language */
	const char *extensions[NBRUN__LANGUAGE_MAX_EXTENSIONS];
	const char *comment;           /* "#" or "//" */
	const char *marker;            /* "# %%" or "// %%": starts a cell */
	/* The name a parameter gets in the language (NULL: it cannot be one). */
	const char *(*param_name)(const char *name);
	/* One "name = literal" line of a parameters cell; 0, -EINVAL, -ENOMEM.
	 * NULL for Python: notebook.c writes its literals. */
	int (*assign)(struct buf *b, const char *name, const json_t *value);
};

/* Python, the language of code and notebooks that name none. */
const struct nbrun__language *nbrun__language_default(void);
/* By name or alias, any case ("R", "js", "ts", "sh"); NULL when unknown. */
const struct nbrun__language *nbrun__language_find(const char *name);
/* By kernelspec name, else by the kernelspec's language; NULL when neither is known. */
const struct nbrun__language *nbrun__language_for_kernel(const char *kernel, const char *language);
/* "python, r, javascript, typescript, bash" */
const char *nbrun__language_names(void);
/* The i-th language of the table, in its order; NULL past the end. */
const struct nbrun__language *nbrun__language_at(size_t i);
/* The language a notebook's kernelspec (or language_info) names; Python
 * when it names none; NBRUN_EINVAL (with the languages in the message) when
 * it names another. */
int nbrun__language_of_notebook(const struct nbrun__language **out, struct nbrun_ctx *ctx,
				const json_t *nb);
/* Make the notebook's kernelspec (and language_info when it names another
 * language) the language's: the image's kernel runs it. 0 or -ENOMEM. */
int nbrun__language_set_kernelspec(json_t *nb, const struct nbrun__language *lang);
/* Append a parameters cell's source ("<comment> Parameters" and one line per
 * entry of the JSON object params) in a language other than Python. */
int nbrun__language_params(struct buf *out, struct nbrun_ctx *ctx,
			   const struct nbrun__language *lang, const json_t *params);

/* ---- export.c: safe writes under the output directory ---------------------- */

/*
 * Validate a relative path from untrusted input: no "..", no absolute path,
 * no empty or control-character components, depth and length capped.
 * Returns NULL when fine, else a short reason.
 */
const char *nbrun__path_reject_reason(const char *path);
/*
 * Open (creating parents as real directories, never following symlinks)
 * path below dirfd for writing; O_EXCL so nothing existing is replaced.
 * Returns an fd or -errno.
 */
int nbrun__export_open(int dirfd, const char *path, mode_t mode);
/* Open or create directory path below dirfd (no symlinks). fd or -errno. */
int nbrun__export_mkdirs(int dirfd, const char *path);

/* Export the files of a /mnt/data archive to out_fd/files/: only regular
 * files below the top directory, safe names, within the caps; everything else
 * is listed in the result's "skipped". Untouched inputs are not exported. */
struct nbrun__export_input {
	char *name;      /* path below /mnt/data */
	char sha256[65]; /* "" when unknown */
};
struct nbrun__files_export {
	struct nbrun_result *result;
	int out_fd;
	const struct nbrun__export_input *inputs;
	size_t n_inputs;
	uint64_t max_bytes;
	size_t max_files;
	bool partial;    /* the host cut the archive (its disk filled): an end missing is no fault */
	/* state */
	uint64_t bytes;
	size_t count;
	bool cut;
	char *entry_rel;
	int files_fd;
};
int nbrun__export_files(struct nbrun_ctx *ctx, struct nbrun__files_export *x, int tar_fd,
			bool stream_cut);
/* Hex SHA-256 of the whole file (read with pread from offset 0). 0 or -EIO. */
int nbrun__sha256_fd(int fd, char hex[65]);

/* ---- tarball.c ------------------------------------------------------------- */

struct nbrun__tar;
/* An uncompressed tar built in memory; entries owned by uid/gid. */
int nbrun__tar_new(struct nbrun__tar **out, unsigned int uid, unsigned int gid, size_t max_bytes);
void nbrun__tar_free(struct nbrun__tar *t);
int nbrun__tar_add_data(struct nbrun__tar *t, const char *name, const void *data, size_t len);
/* Add a host file or directory tree (regular files and directories only). */
int nbrun__tar_add_path(struct nbrun_ctx *ctx, struct nbrun__tar *t, const char *host_path,
			const char *name);
int nbrun__tar_finish(struct nbrun__tar *t, const void **data, size_t *len);
/* Hand over the host files added so far, with their SHA-256 (free each name and the array). */
void nbrun__tar_take_files(struct nbrun__tar *t, struct nbrun__export_input **files, size_t *n);

/* Read side: a downloaded archive, entries handed to a sink. */
struct nbrun__tar_entry {
	const char *path;    /* as stored in the archive */
	int type;            /* AE_IFREG, AE_IFDIR, AE_IFLNK, ... */
	int64_t size;
	bool hardlink;
	const char *link;    /* symlink or hardlink target, else NULL */
	int write_errno;     /* in done(): why writing the data failed (ENOSPC...), else 0 */
};
struct nbrun__tar_sink {
	/* Per entry: return an fd (>= 0) to receive its data, -1 to skip it, < -1 to stop. */
	int (*entry)(const struct nbrun__tar_entry *e, void *payload);
	/* After data went to the fd entry() returned; complete=false when cut at a cap or failed. */
	void (*done)(const struct nbrun__tar_entry *e, int fd, uint64_t written, bool complete,
		     void *payload);
	void *payload;
	uint64_t max_entry_bytes; /* data beyond this is not written (complete=false) */
	size_t max_entries;       /* entries beyond this stop the walk (returns 1) */
};
/* Walk an uncompressed tar read from fd. 0 done, 1 stopped at max_entries, <0 error. */
int nbrun__tar_extract(struct nbrun_ctx *ctx, int fd, const struct nbrun__tar_sink *sink);

/* ---- docker.c: Docker Engine API over libcurl ------------------------------ */

struct nbrun__docker;
struct nbrun__conn;
int nbrun__docker_new(struct nbrun__docker **out, struct nbrun_ctx *ctx);
void nbrun__docker_free(struct nbrun__docker *d);
/* Abort a blocking call (wait, download) when *cancel becomes non-zero. */
void nbrun__docker_set_cancel(struct nbrun__docker *d, const volatile sig_atomic_t *cancel);
/* Messages go to ctx from now on (a handle used by another thread). */
void nbrun__docker_set_ctx(struct nbrun__docker *d, struct nbrun_ctx *ctx);

/*
 * One request. body may be NULL. The reply body is kept in reply (capped at
 * its max); timeout_ms 0 means the default (30 s). Returns the HTTP status
 * (>= 100) or a negative NBRUN_E code with the context message set.
 */
int nbrun__docker_request(struct nbrun__docker *d, const char *method, const char *path,
			  const char *content_type, const void *body, size_t body_len,
			  struct buf *reply, long timeout_ms);
/* Same with a JSON body and JSON reply (*reply_json may be NULL on empty body). */
int nbrun__docker_json(struct nbrun__docker *d, const char *method, const char *path,
		       const json_t *body, json_t **reply_json, long timeout_ms);
/* The standard output in raw, a stream of the engine's 8-byte-header frames
 * (logs, exec, attach without a TTY), appended to out as far as it holds. */
void nbrun__docker_stdout(struct buf *out, const struct buf *raw);
/* GET path (an archive) into fd, at most max_bytes. 0 or <0. */
int nbrun__docker_download(struct nbrun__docker *d, const char *path, int fd, uint64_t max_bytes,
			   long timeout_ms);
/*
 * Attach to a container's stdin, stdout and stderr (before it starts, so
 * nothing is missed): a hijacked connection handed over as a stream of its
 * stdout; its stderr is kept in err_tail. Close with conn->close().
 */
int nbrun__docker_attach(struct nbrun__docker *d, const char *container, struct nbrun__conn **out);
/* Negotiated API version, e.g. "1.41". */
const char *nbrun__docker_api_version(const struct nbrun__docker *d);

/* ---- channel.c: the live channel to the sandbox's agent ------------------- */

/*
 * A byte stream to the agent: its stdin one way, its stdout the other
 * (environments/jupyter/PROTOCOL.md). Non-blocking; poll fd, but call recv
 * first while pending() says bytes are buffered.
 */
struct nbrun__conn {
	/* Up to len bytes: the count, -EAGAIN, or < 0 on a broken connection. */
	ssize_t (*send)(struct nbrun__conn *c, const void *buf, size_t len);
	/* Up to len bytes of the agent's stdout: the count, 0 at its end, -EAGAIN, < 0. */
	ssize_t (*recv)(struct nbrun__conn *c, void *buf, size_t len);
	bool (*pending)(struct nbrun__conn *c);
	void (*close)(struct nbrun__conn *c);
	int fd;
	/* The last bytes of the agent's stderr, NUL-terminated (diagnostics only). */
	char err_tail[4096];
	size_t err_len;
};

#define NBRUN__CHAN_PROTOCOL 1
#define NBRUN__CHAN_MAX_JSON (1u << 20)
#define NBRUN__CHAN_MAX_CHUNK (1u << 20)

struct nbrun__chan {
	struct nbrun__conn *conn;
	struct nbrun_ctx *ctx;
	const volatile sig_atomic_t *cancel;
	unsigned char rbuf[65536];
	size_t rlen, roff;
	int64_t blob_left;   /* -1: no blob pending; else bytes of it still to read */
	bool blob_end;       /* the E frame of the pending blob is still to come */
	bool broken;         /* a violation or a dead connection: nothing more to read */
	int spool_errno;     /* why writing a blob to its fd failed (ENOSPC...), else 0 */
	/* When raised, a receive waiting between two messages returns 3 (the
	 * caller has something to send first, e.g. an interrupt). */
	const volatile sig_atomic_t *poke;
	bool at_boundary;
};

void nbrun__chan_init(struct nbrun__chan *ch, struct nbrun__conn *conn, struct nbrun_ctx *ctx,
		      const volatile sig_atomic_t *cancel);
/*
 * Send a message (a JSON object with a string "type") and, when blob is not
 * NULL, blob_len bytes of data after it ("blob" is set to blob_len).
 * deadline_ms: monotonic; 0 none. 0, or < 0 (timeout, broken, cancel).
 */
int nbrun__chan_send(struct nbrun__chan *ch, json_t *msg, const void *blob, size_t blob_len,
		     uint64_t deadline_ms);
/*
 * The next message. 1 with *out (its "blob", if any, must be read next with
 * nbrun__chan_recv_blob), 0 at the end of the stream, 2 when the deadline
 * passed, 3 when ch->poke was raised while no message had begun to arrive;
 * NBRUN_EPARSE on a protocol violation ("sandbox protocol violation:
 * ..." on the context), other < 0 on a broken connection or cancel.
 */
int nbrun__chan_recv(struct nbrun__chan *ch, json_t **out, uint64_t deadline_ms);
/*
 * The data of the message just received, into buf (when not NULL) or fd
 * (when >= 0) or nowhere. More than cap bytes is a violation. 0, 2 deadline,
 * < 0 as nbrun__chan_recv (end of stream inside a blob is a violation).
 */
int nbrun__chan_recv_blob(struct nbrun__chan *ch, struct buf *buf, int fd, uint64_t cap,
			  uint64_t deadline_ms);

/* Encode a frame header. */
void nbrun__chan_header(unsigned char h[8], char kind, uint32_t len);

/* ---- sandbox.c: a started, hardened container behind a backend ------------ */

/*
 * A sandbox outlives one job: it is created and started (perhaps long before
 * a job needs it), serves a job, and is destroyed. What it may do (no
 * capabilities, seccomp, read-only root, no network...) is the backend's
 * fixed policy; the spec only sizes it. Backends sit behind a versioned table
 * of functions (the manner of libgit2's odb_backend), so that another engine
 * or runtime plugs in without touching the job.
 */
struct nbrun__sandbox;

struct nbrun__sandbox_spec {
	const char *image;        /* NULL: jupyter-runtime:<version>, else :latest */
	uint64_t memory_bytes;    /* swap equal */
	uint64_t nano_cpus;
	int64_t pids;
	uint64_t disk_bytes;      /* /mnt/data */
	bool network;             /* bridge instead of none */
	const char *const *env;   /* "KEY=VALUE" */
	size_t env_count;
	const char *preload;      /* modules the kernel imports before it is ready, or NULL */
	const char *kernel;       /* the kernelspec the agent starts (NULL: python3) */
	const char *runtime;      /* the engine's OCI runtime (NULL: its default); checked once started */
	/* An allow-list (run options version 7): the egress proxy's policy
	 * lines (netrule_policy()), or NULL for none; the bytes cap; the CA
	 * bundle's bytes (NULL: the image's). */
	const char *egress_policy;
	uint64_t net_bytes;
	const char *ca_certs;
	size_t ca_certs_len;
};

struct nbrun__sandbox_state {
	bool running;
	bool oom;      /* the engine saw the OOM killer end the container */
	int exit_code;
};

#define NBRUN__SANDBOX_OPS_VERSION 4
struct nbrun__sandbox_ops {
	unsigned int version;
	const char *name;
	/* Reach the engine; set up sb->backend. */
	int (*open)(struct nbrun__sandbox *sb);
	/* Remove what killed runs left behind (cheap; errors ignored). */
	void (*gc)(struct nbrun__sandbox *sb);
	/* Check that the image is on the engine (want NULL: the default, else
	 * :latest) and set sb->image. */
	int (*resolve_image)(struct nbrun__sandbox *sb, const char *want);
	/* Version 2: check that the engine has the runtime; NBRUN_EINVAL naming
	 * the runtimes it has when not. */
	int (*check_runtime)(struct nbrun__sandbox *sb, const char *runtime);
	/* Version 3: the kernels of the resolved image (sb->image), as a
	 * space-separated malloc'd list ("python3" for an image that names none). */
	int (*image_kernels)(struct nbrun__sandbox *sb, char **out);
	/* Resolve the image (sb->image) and create the sandbox, not started. */
	int (*create)(struct nbrun__sandbox *sb, const struct nbrun__sandbox_spec *spec);
	/* Start it with its channel attached (sb->conn); with a runtime, check
	 * that the started sandbox really runs under it (NBRUN_EENGINE if not). */
	int (*start)(struct nbrun__sandbox *sb);
	/* Unpack an uncompressed tar at dest. */
	int (*put_archive)(struct nbrun__sandbox *sb, const char *dest, const void *tar, size_t len);
	/* src as an uncompressed tar into fd, at most max bytes (*cut when more);
	 * NBRUN_ENOTFOUND when src does not exist. */
	int (*get_archive)(struct nbrun__sandbox *sb, const char *src, int fd, uint64_t max,
			   bool *cut);
	int (*state)(struct nbrun__sandbox *sb, struct nbrun__sandbox_state *out);
	/* Version 4: what the sandbox's connections through the egress proxy
	 * did so far, as the result's "network" (NULL: it has no allow-list). */
	json_t *(*net_report)(struct nbrun__sandbox *sb);
	/* Close the channel, remove the sandbox and everything it holds;
	 * idempotent, never cancelled, errors ignored. */
	void (*destroy)(struct nbrun__sandbox *sb);
	void (*free)(struct nbrun__sandbox *sb);
};

struct nbrun__sandbox {
	const struct nbrun__sandbox_ops *ops;
	struct nbrun_ctx *ctx;     /* the thread using it now */
	const volatile sig_atomic_t *cancel;
	char id[16];               /* random hex: names and the nbrun.run label */
	char *image;               /* resolved by create */
	struct nbrun__conn *conn;  /* the agent's stream, once started */
	struct nbrun__chan ch;     /* messages over conn */
	bool ready;                /* the agent said ready (kernel up, preload done) */
	void *backend;
};

extern const struct nbrun__sandbox_ops nbrun__sandbox_docker;
/* The backend every run, pool and session uses: chosen here, named nowhere else. */
#define NBRUN__SANDBOX_DEFAULT (&nbrun__sandbox_docker)
/* 0 when the resolved image (sb->image) has the kernel; NBRUN_EINVAL naming
 * its kernels and the languages nbrun runs when not. python3 always. */
int nbrun__sandbox_check_kernel(struct nbrun__sandbox *sb, const char *kernel);

/* 12 random hex digits (and a NUL). */
int nbrun__random_id(struct nbrun_ctx *ctx, char out[16]);
/* A new sandbox (reaching the engine, not created yet) on the given backend,
 * named by id (at most 15 characters), or by a fresh random id when NULL. */
int nbrun__sandbox_new(struct nbrun__sandbox **out, struct nbrun_ctx *ctx,
		       const struct nbrun__sandbox_ops *ops, const char *id);
/* Hand the sandbox to another thread's context and cancel flag. */
void nbrun__sandbox_bind(struct nbrun__sandbox *sb, struct nbrun_ctx *ctx,
			 const volatile sig_atomic_t *cancel);
/* Destroy (when created) and release; NULL is fine. */
void nbrun__sandbox_free(struct nbrun__sandbox *sb);
/*
 * Wait until the agent says ready (kernel up, preload done), checking its
 * protocol version on the way. 0, or < 0 with the context's message.
 */
int nbrun__sandbox_wait_ready(struct nbrun__sandbox *sb, uint64_t deadline_ms);
/* True while a started sandbox's agent has said nothing unasked (alive and idle). */
bool nbrun__sandbox_idle(struct nbrun__sandbox *sb);

/* ---- job.c: one notebook executed in a started sandbox --------------------- */

struct nbrun__job {
	struct nbrun_ctx *ctx;
	struct nbrun__sandbox *sb;
	const struct nbrun_run_options *opts;
	struct nbrun__limits lim;
	struct nbrun_result *result;
	int out_fd;              /* the output directory */
	const char *out_dir;     /* its absolute name */
	uint64_t deadline_ms;    /* monotonic */
	/* a session's execution (all zero for a run) */
	bool session;            /* mark /mnt/data, fetch only what changed, stop at an error */
	unsigned int count_from; /* execution counts go on from here */
	const char *exec_id;     /* the execute's id (NULL: "run") */
	nbrun_event_cb on_event; /* live events (also a run's, from its options) */
	void *event_payload;
	/* raised by another thread: interrupt the execution (cleared when sent) */
	volatile sig_atomic_t *interrupt;
	/* filled by the job */
	char end_status[16];     /* done.status ("" when no done came) */
	struct nbrun__export_input *inputs;
	size_t n_inputs;
};

/*
 * Send the inputs and the notebook (nb, and the same as text) over the
 * sandbox's channel, follow the execution until the deadline, take the
 * executed cells into nb, fetch /mnt/data, parse and export everything into
 * the output directory, and set the result's status. 0 when the result
 * says what happened; < 0 when the job could not be done (engine, cancel).
 */
int nbrun__job_run(struct nbrun__job *job, json_t *nb, const char *notebook, size_t len);
/*
 * The run's input files (o->files) as one finished archive for /mnt/data,
 * each under its base name: *out to nbrun__tar_free() after sending data;
 * the inputs' names and digests go to *inputs (the caller frees them).
 */
int nbrun__inputs_tar(struct nbrun__tar **out, struct nbrun_ctx *ctx,
		      const struct nbrun_run_options *o, const void **data, size_t *len,
		      struct nbrun__export_input **inputs, size_t *n_inputs);
/* Release what the job filled (not the result, sandbox or directory). */
void nbrun__job_release(struct nbrun__job *job);

/* ---- pool.c / runner.c -------------------------------------------------------- */

/* A ready sandbox of lang's kernel bound to ctx when the run fits the pool,
 * the pool keeps that language and one is ready, else NULL. */
struct nbrun__sandbox *nbrun__pool_lease(struct nbrun_pool *p, struct nbrun_ctx *ctx,
					 const struct nbrun_run_options *o,
					 const struct nbrun__language *lang);
/* Hand a used sandbox (or a cold one of a pool run) to the pool's reaper;
 * leased: the language it was leased for by nbrun__pool_lease(), NULL when
 * it was not (sb may be NULL: a lease whose run failed before it could be
 * handed back). */
void nbrun__pool_discard(struct nbrun_pool *p, struct nbrun__sandbox *sb,
			 const struct nbrun__language *leased);
/* mkdir -p want (NULL: ./nbrun-out/<id>), then require it empty; its absolute name and an fd.
 * The directory is claimed (NBRUN__OUT_CLAIM, created with O_EXCL) so that
 * of two runs given the same directory exactly one gets it, the other
 * NBRUN_EINVAL; nbrun__out_dir_release() ends the claim. */
int nbrun__out_dir_open(struct nbrun_ctx *ctx, const char *want, const char *id, char **dir, int *fd);
#define NBRUN__OUT_CLAIM ".nbrun-claim"
void nbrun__out_dir_release(int fd);
/* The sandbox a run's options ask for (image, limits, network, env; no preload). */
void nbrun__run_sandbox_spec(struct nbrun__sandbox_spec *s, const struct nbrun_run_options *o);
/* The runtime the options ask for (version 6), or NULL: the engine's default. */
const char *nbrun__run_runtime(const struct nbrun_run_options *o);
/* The allow-list of o (version 7): its count, 0 for none (*rules NULL). */
size_t nbrun__run_allow_net(const struct nbrun_run_options *o, const char *const **rules);
/*
 * The allow-list parts of s from o: the policy lines and the CA bundle,
 * malloc'd into *policy and *ca (the caller frees them once the sandbox is
 * created); nothing when o has no allow-list. 0, or NBRUN_EINVAL /
 * NBRUN_ENOMEM (a CA file that cannot be read).
 */
int nbrun__run_egress_spec(struct nbrun_ctx *ctx, struct nbrun__sandbox_spec *s,
			   const struct nbrun_run_options *o, char **policy, char **ca);
/* The checks nbrun_run_code() makes of its options (a usage error starts nothing). */
int nbrun__run_check_options(struct nbrun_ctx *ctx, const struct nbrun_run_options *o);
/* 0, or NBRUN_EINVAL said on ctx: "what" options missing (version NULL: no
 * struct) or of a version other than 1 to known. */
int nbrun__options_version(struct nbrun_ctx *ctx, const char *what, const unsigned int *version,
			   unsigned int known);

/* ---- gc.c ----------------------------------------------------------------- */

/* This process's pid namespace ("pid:[N]"; "" when unknown): labelled on
 * every sandbox, so that gc judges a pid only in the namespace it names. */
void nbrun__pidns(char *buf, size_t size);

struct nbrun__gc_counts {
	unsigned int removed;
	unsigned int failed;   /* refused by the engine, or no answer */
};

/*
 * Remove containers and volumes of runs whose nbrun process on this host is
 * gone (killed with SIGKILL, say). Cheap: one listing each. When
 * older_than_s >= 0, also everything labelled and at least that old.
 * 0, or a negative code when a listing failed; nbrun__gc() also returns
 * NBRUN_EENGINE (the counts filled, the last failure in the message) when
 * any removal failed. Objects already gone count as neither. A listing may
 * take a minute in nbrun__gc(), 10 s in nbrun__gc_orphans() (before every
 * cold run and session).
 */
int nbrun__gc_orphans(struct nbrun__docker *d, struct nbrun_ctx *ctx);
int nbrun__gc(struct nbrun__docker *d, struct nbrun_ctx *ctx, long older_than_s,
	      struct nbrun__gc_counts *out);

#endif /* NBRUN_PRIVATE_H */
