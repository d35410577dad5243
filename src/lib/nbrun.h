/* SPDX-License-Identifier: MIT */
/*
 * libnbrun: run Python code in a locked-down Jupyter container and collect
 * everything it produced (text, results, errors, images, files).
 *
 * Conventions
 *  - Functions return 0 on success or a negative NBRUN_E* code. The one-line
 *    human message for the last failure is on the context:
 *    nbrun_ctx_errmsg().
 *  - Output parameters come first and are named out; on failure *out is left
 *    NULL. Objects returned through out belong to the caller and are released
 *    with the matching _free(), which accepts NULL.
 *  - Option structs carry a version first and are initialised with their
 *    _OPTIONS_INIT macro, or their _options_init() function (from C++
 *    before C++20, which lacks designated initialisers), so that new fields
 *    get safe defaults. A function given options of a version it does not
 *    know refuses them with NBRUN_EINVAL.
 *  - Everything the container sends back is untrusted: it is bounded and
 *    validated before use, and bad input yields an error, never a crash.
 */
#ifndef NBRUN_H
#define NBRUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NBRUN_EXPORT __attribute__((visibility("default")))

/** Error codes. Only the failures a caller branches on get their own code. */
enum nbrun_error {
	NBRUN_OK = 0,
	NBRUN_EGENERIC = -1,   /**< anything else; see nbrun_ctx_errmsg() */
	NBRUN_ENOMEM = -2,     /**< out of memory on the host */
	NBRUN_EINVAL = -3,     /**< an argument or option makes no sense */
	NBRUN_ENOTFOUND = -4,  /**< a named file does not exist */
	NBRUN_EENGINE = -5,    /**< the Docker engine is unreachable or refused */
	NBRUN_ENOIMAGE = -6,   /**< the runtime image is not on the engine */
	NBRUN_EPARSE = -7,     /**< a notebook or reply is malformed or too large */
	NBRUN_EIO = -8,        /**< reading or writing a local file failed */
	NBRUN_ECANCELLED = -9, /**< the caller's cancel flag was raised */
	NBRUN_ENOSPC = -10,    /**< a result could not be written: the disk (or quota) is full */
};

/** How a run ended. */
enum nbrun_status {
	NBRUN_STATUS_OK = 0,  /**< every cell ran and none raised */
	NBRUN_STATUS_ERROR,   /**< a cell raised (execution stopped there, unless errors were allowed) */
	NBRUN_STATUS_TIMEOUT, /**< the wall-clock deadline killed the run */
	NBRUN_STATUS_OOM,     /**< the sandbox ran out of memory */
	NBRUN_STATUS_FAILED,  /**< the run could not complete (engine, kernel death, bad notebook) */
};

/**
 * The library's version.
 * @return a static string, e.g. "0.1.0"
 */
NBRUN_EXPORT const char *nbrun_version(void);

/**
 * Name of a status as used in result documents.
 * @param status  a status
 * @return a static string: "ok", "error", "timeout", "oom" or "failed" (also for a value outside the enum)
 */
NBRUN_EXPORT const char *nbrun_status_name(enum nbrun_status status);

/* ---- context ----------------------------------------------------------- */

/** Library context: holds the last error message. Not shared across threads. */
struct nbrun_ctx;

/**
 * Create a context.
 * @param out  receives the new context; release with nbrun_ctx_free()
 * @return 0 or NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_ctx_new(struct nbrun_ctx **out);

/**
 * Release a context.
 * @param ctx  the context (NULL is fine); its message goes with it
 */
NBRUN_EXPORT void nbrun_ctx_free(struct nbrun_ctx *ctx);

/**
 * The message of the last failure on a context.
 * @param ctx  a context
 * @return one line owned by ctx ("" when none), valid until the next call on ctx
 */
NBRUN_EXPORT const char *nbrun_ctx_errmsg(const struct nbrun_ctx *ctx);

/* ---- results ------------------------------------------------------------- */

/**
 * The result of a run or a parse: the document described by
 * schemas/result.schema.json plus accessors for the common fields.
 * Strings returned by accessors are owned by the result.
 */
struct nbrun_result;

/**
 * Release a result and every string its accessors returned.
 * @param result  the result (NULL is fine)
 */
NBRUN_EXPORT void nbrun_result_free(struct nbrun_result *result);
/**
 * How the run ended.
 * @param result  a result
 * @return its status
 */
NBRUN_EXPORT enum nbrun_status nbrun_result_status(const struct nbrun_result *result);
/**
 * The run id (also the suffix of the default output directory).
 * @param result  a result
 * @return a string owned by result ("parse-..." for a parse)
 */
NBRUN_EXPORT const char *nbrun_result_run_id(const struct nbrun_result *result);
/**
 * The one-line explanation of a timeout, oom or failed status.
 * @param result  a result
 * @return a string owned by result, or NULL when there is none
 */
NBRUN_EXPORT const char *nbrun_result_message(const struct nbrun_result *result);
/**
 * The stdout of all cells, bounded (head and tail), ANSI escapes removed.
 * @param result  a result
 * @return a string owned by result, never NULL
 */
NBRUN_EXPORT const char *nbrun_result_stdout(const struct nbrun_result *result);
/**
 * The stderr of all cells, as nbrun_result_stdout().
 * @param result  a result
 * @return a string owned by result, never NULL
 */
NBRUN_EXPORT const char *nbrun_result_stderr(const struct nbrun_result *result);
/**
 * The number of last-expression values.
 * @param result  a result
 * @return the count; nbrun_result_value() gets each
 */
NBRUN_EXPORT size_t nbrun_result_value_count(const struct nbrun_result *result);
/**
 * A last-expression value as text/plain.
 * @param result  a result
 * @param i       0 to nbrun_result_value_count() - 1
 * @return a string owned by result, or NULL when i is out of range
 */
NBRUN_EXPORT const char *nbrun_result_value(const struct nbrun_result *result, size_t i);
/**
 * The first error a cell raised.
 * @param result     a result
 * @param name       receives the exception's name, owned by result (may be NULL)
 * @param value      receives its message, owned by result (may be NULL)
 * @param traceback  receives its traceback, owned by result (may be NULL)
 * @return 1 and fills name/value/traceback when there is one (a string the
 *         document lacks is NULL), 0 otherwise (nothing filled)
 */
NBRUN_EXPORT int nbrun_result_error(const struct nbrun_result *result, const char **name,
				    const char **value, const char **traceback);
/**
 * The number of files exported from /mnt/data.
 * @param result  a result
 * @return the count; nbrun_result_file_path() gets each
 */
NBRUN_EXPORT size_t nbrun_result_file_count(const struct nbrun_result *result);
/**
 * A file exported from /mnt/data, as a path relative to the output directory.
 * @param result  a result
 * @param i       0 to nbrun_result_file_count() - 1
 * @return a string owned by result, or NULL when i is out of range
 */
NBRUN_EXPORT const char *nbrun_result_file_path(const struct nbrun_result *result, size_t i);
/**
 * The number of entries not exported (unsafe or over a cap); the result
 * document's "skipped" list has each with its reason.
 * @param result  a result
 * @return the count
 */
NBRUN_EXPORT size_t nbrun_result_skipped_count(const struct nbrun_result *result);
/**
 * The output directory of the run.
 * @param result  a result
 * @return an absolute path owned by result, or NULL (a parse without one)
 */
NBRUN_EXPORT const char *nbrun_result_out_dir(const struct nbrun_result *result);

/**
 * Serialise the result document.
 * @param out     receives a NUL-terminated JSON text; free() it
 * @param result  a result
 * @param pretty  non-zero for indented output
 * @return 0 or NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_result_to_json(char **out, const struct nbrun_result *result, int pretty);

/* ---- limits shared by run and parse ------------------------------------ */

/** Bounds on what is taken from an executed notebook. 0 means the default. */
struct nbrun_parse_limits {
	size_t max_output;           /**< bytes of text per stream for a model (20000) */
	size_t max_outputs;          /**< output entries listed in the result (1000) */
	size_t max_images;           /**< images written (100) */
	uint64_t max_image_bytes;    /**< decoded bytes of one image (50 MiB) */
	uint64_t max_notebook_bytes; /**< size of the executed notebook (256 MiB) */
};

/* ---- parse --------------------------------------------------------------- */

struct nbrun_parse_options {
	unsigned int version;
	/** Directory for result.json and images/ (created). NULL: only the result. */
	const char *out_dir;
	struct nbrun_parse_limits limits;
};
#define NBRUN_PARSE_OPTIONS_VERSION 1
#define NBRUN_PARSE_OPTIONS_INIT { .version = NBRUN_PARSE_OPTIONS_VERSION }

/**
 * Fill parse options with the defaults of NBRUN_PARSE_OPTIONS_INIT.
 * @param opts     the options to fill (the caller's)
 * @param version  NBRUN_PARSE_OPTIONS_VERSION
 * @return 0; NBRUN_EINVAL when opts is NULL or the version is one this
 *         library does not know (opts is then left as it was)
 */
NBRUN_EXPORT int nbrun_parse_options_init(struct nbrun_parse_options *opts, unsigned int version);

/**
 * Read an executed notebook (no engine needed) and build its result:
 * outputs, text, errors and images (written under out_dir/images/).
 * @param out   receives the result; nbrun_result_free()
 * @param ctx   the context (the message of a failure)
 * @param path  the .ipynb to read
 * @param opts  output directory and limits (NBRUN_PARSE_OPTIONS_INIT), or
 *              NULL for no directory and the default limits
 * @return 0; NBRUN_EINVAL (no path, or options of another version),
 *         NBRUN_ENOTFOUND, NBRUN_EPARSE (malformed, unsupported nbformat,
 *         too large), NBRUN_EIO, NBRUN_ENOSPC (result.json did not fit),
 *         NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_parse_file(struct nbrun_result **out, struct nbrun_ctx *ctx,
				  const char *path, const struct nbrun_parse_options *opts);

/* ---- run ----------------------------------------------------------------- */

struct nbrun_pool;

/** Progress events, for a caller that shows what is going on. */
enum nbrun_phase {
	NBRUN_PHASE_CONNECT,
	NBRUN_PHASE_CREATE,
	NBRUN_PHASE_UPLOAD,
	NBRUN_PHASE_EXECUTE,
	NBRUN_PHASE_DOWNLOAD,
	NBRUN_PHASE_PARSE,
	NBRUN_PHASE_CLEANUP,
};
typedef void (*nbrun_progress_cb)(enum nbrun_phase phase, void *payload);

/**
 * Live events of an execution, as it happens: one JSON object per call
 * (json is len bytes, NUL-terminated, valid only during the call), in the
 * order the kernel produced them:
 *  - {"event": "output", "cell": N, "output": {an nbformat output}}: a
 *    stream chunk, a display, a result or an error (an output over 1 MiB
 *    comes as {"output_type": ..., "omitted": BYTES}; the result has it);
 *  - {"event": "cell", "cell": N, "status": "ok"|"error"|"timeout",
 *    "duration_ms": MS, "execution_count": C}: a code cell finished.
 * The callback runs in the thread executing; it must not call back into
 * the library on the same run or session.
 */
typedef void (*nbrun_event_cb)(const char *json, size_t len, void *payload);

struct nbrun_run_options {
	unsigned int version;
	const char *image;          /**< runtime image ("jupyter-runtime:<version>", falling back to ":latest") */
	uint64_t timeout_ms;        /**< wall clock for the whole run (60 s) */
	uint64_t cell_timeout_ms;   /**< one cell (0: the wall clock less a margin) */
	uint64_t memory_bytes;      /**< memory, swap equal (1 GiB) */
	uint64_t nano_cpus;         /**< CPU share in 1e-9 CPUs (1 CPU) */
	int64_t pids;               /**< process limit (256) */
	uint64_t disk_bytes;        /**< size of /mnt/data (512 MiB) */
	const char *network;        /**< "none" (default) or "bridge" */
	const char *const *env;     /**< "KEY=VALUE" strings; nothing else leaks in */
	size_t env_count;
	const char *const *files;   /**< host files or directories uploaded to /mnt/data/<name>;
	                                 a symlink inside a directory is an error (NBRUN_EINVAL) */
	size_t file_count;
	/** Output directory (created; must not exist or be empty). NULL: ./nbrun-out/<run-id>. */
	const char *out_dir;
	struct nbrun_parse_limits limits;
	/** Limits on what is exported from /mnt/data. 0 means the default. */
	uint64_t max_file_bytes;    /**< total bytes exported (256 MiB) */
	size_t max_files;           /**< entries exported (1000) */
	nbrun_progress_cb progress;
	void *payload;
	/** When non-NULL and raised (non-zero), the run stops, cleans up and returns NBRUN_ECANCELLED. */
	const volatile sig_atomic_t *cancel;
	/**
	 * A warm pool (nbrun_pool_new()) to lease a started sandbox from, or
	 * NULL. A run whose image, limits and network are the pool's, that
	 * sets no environment and whose language the pool keeps takes a warm
	 * sandbox of that language when one is ready (a hit);
	 * otherwise it starts a cold one (a miss), never failing for that.
	 * Either way the sandbox serves this run only and is destroyed after
	 * it (in the background).
	 */
	struct nbrun_pool *pool;
	/** Version 3: live events (outputs as they come, cells as they end), or NULL. */
	nbrun_event_cb on_event;
	void *event_payload;
	/**
	 * Version 4: the language ("python", "r", "javascript", "typescript",
	 * "bash" or an alias: nbrun_language_name()), or NULL: Python for code,
	 * the kernelspec's for a notebook. Code is split on its "# %%" (or
	 * "// %%") lines and runs in that language's kernel; an unknown
	 * language, or one whose kernel the image lacks, is NBRUN_EINVAL.
	 */
	const char *language;
	/**
	 * Version 5: non-zero to go on executing after a cell raises (as
	 * nbconvert --allow-errors). By default execution stops at the first
	 * cell that raises, as papermill and Jupyter's "Run All" do: the cells
	 * after it are kept unexecuted, and the executed notebook gets
	 * papermill's two error-marker cells. Callers of versions 1 to 4 keep
	 * going after errors, as those versions did.
	 */
	int allow_errors;
	/**
	 * Version 6: the OCI runtime the engine runs the sandbox with
	 * (HostConfig.Runtime), e.g. "runsc" for gVisor, or NULL for the
	 * engine's default. A name the engine does not list is NBRUN_EINVAL
	 * (the message names the runtimes it has). The run then checks that
	 * the runtime is really in use: the engine must report it for the
	 * started container, and under "runsc" the sandbox's kernel must be
	 * gVisor's (/proc/version), else the run is NBRUN_EENGINE and no code
	 * runs. "runsc" takes network "none" only. The result records it as
	 * "runtime". A pool's sandboxes run under its run options' runtime.
	 */
	const char *runtime;
	/**
	 * Version 7: the hosts the code may reach (docs/network.md), each
	 * "example.org", "*.example.org" (the names below it), an address
	 * ("203.0.113.5", "[2001:db8::1]"), with ":PORT" for one port, else 80
	 * and 443. The sandbox still has no network of its own: its kernel's
	 * HTTP_PROXY and HTTPS_PROXY lead to nbrun's egress proxy (the image
	 * nbrun-egress, started on first use and shared), which resolves the
	 * names and refuses every other name and port, and any loopback,
	 * private, link-local or metadata address a name resolves to (an
	 * address listed as such is let through). Needs network "none". The
	 * result's "network" lists the policy and every connection.
	 */
	const char *const *allow_net;
	size_t allow_net_count;
	/** Version 7: bytes the run's connections may carry in all, both ways (0: 256 MiB); then they are cut. */
	uint64_t net_bytes;
	/**
	 * Version 7: a PEM file of the certificate authorities the sandbox's
	 * clients trust instead of the image's (a TLS-inspecting proxy's
	 * included), with allow_net; or NULL.
	 */
	const char *ca_certs;
};
#define NBRUN_RUN_OPTIONS_VERSION 7
/* The fields it does not name default to 0 or NULL. */
#define NBRUN_RUN_OPTIONS_INIT                                                                  \
	{                                                                                       \
		.version = NBRUN_RUN_OPTIONS_VERSION, .timeout_ms = 60000,                      \
		.memory_bytes = 1ULL << 30, .nano_cpus = 1000000000ULL, .pids = 256,            \
		.disk_bytes = 512ULL << 20, .network = "none",                                  \
	}

/**
 * Fill run options with the defaults of NBRUN_RUN_OPTIONS_INIT.
 * @param opts     the options to fill (the caller's)
 * @param version  NBRUN_RUN_OPTIONS_VERSION; an older version (1 to 5) fills
 *                 only the fields it has, as a program built against an
 *                 older nbrun.h allocated them
 * @return 0; NBRUN_EINVAL when opts is NULL or the version is one this
 *         library does not know (opts is then left as it was)
 */
NBRUN_EXPORT int nbrun_run_options_init(struct nbrun_run_options *opts, unsigned int version);

/**
 * The language a source file is in, from its extension (.py, .R or .r,
 * .js, .ts, .sh).
 * @param path  a file name
 * @return the language's name (static), or NULL when the extension names
 *         none (a notebook's kernelspec names its own)
 */
NBRUN_EXPORT const char *nbrun_language_for_path(const char *path);

/**
 * The canonical name of a language given by name or alias, any case
 * ("R" -> "r", "js" -> "javascript", "ts", "sh", "py").
 * @param name  a name or alias
 * @return a static string, or NULL when nbrun runs no such language
 */
NBRUN_EXPORT const char *nbrun_language_name(const char *name);

/**
 * The languages nbrun runs, for a message.
 * @return a static string: "python, r, javascript, typescript, bash"
 */
NBRUN_EXPORT const char *nbrun_language_names(void);

/**
 * The languages an image runs: those of nbrun_language_names() whose kernel
 * the image lists in its nbrun.kernels label (python always), for a server
 * that advertises only what it can run.
 * @param out    receives the names, space-separated in the order above
 *               ("python r javascript typescript bash"); free()
 * @param ctx    the context (the message of a failure)
 * @param image  the image (NULL: the default, as a run resolves it)
 * @return 0; NBRUN_EENGINE, NBRUN_ENOIMAGE, NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_image_languages(char **out, struct nbrun_ctx *ctx, const char *image);

/**
 * Run Python code in a fresh container and collect its results.
 * "# %%" lines split the code into cells, so an error in one cell keeps the
 * outputs of the cells before it.
 *
 * A run that started always yields a result (status ok, error, timeout, oom
 * or failed), and the container and its volumes are removed whatever
 * happened.
 * @param out   receives the result; nbrun_result_free()
 * @param ctx   the context (the message of a failure); a result's own
 *              explanation is nbrun_result_message()
 * @param code  NUL-terminated Python source
 * @param opts  image, limits, inputs, output directory, callbacks
 *              (NBRUN_RUN_OPTIONS_INIT or nbrun_run_options_init())
 * @return 0 when a result was produced (check its status);
 *         NBRUN_EINVAL (bad options), NBRUN_ENOTFOUND (input file),
 *         NBRUN_EENGINE, NBRUN_ENOIMAGE, NBRUN_ECANCELLED, NBRUN_EIO,
 *         NBRUN_ENOMEM when no run could be made; NBRUN_ENOSPC when the
 *         output directory's disk filled (result.json is then absent or
 *         whole, never cut).
 */
NBRUN_EXPORT int nbrun_run_code(struct nbrun_result **out, struct nbrun_ctx *ctx, const char *code,
				const struct nbrun_run_options *opts);

/**
 * Run an existing notebook (nbformat 4 JSON) like nbrun_run_code().
 * @param out       receives the result; nbrun_result_free()
 * @param ctx       the context, as for nbrun_run_code()
 * @param notebook  the notebook text
 * @param len       its length in bytes
 * @param opts      as for nbrun_run_code()
 * @return as nbrun_run_code(); NBRUN_EPARSE when the notebook is malformed
 */
NBRUN_EXPORT int nbrun_run_notebook(struct nbrun_result **out, struct nbrun_ctx *ctx,
				    const char *notebook, size_t len,
				    const struct nbrun_run_options *opts);

/**
 * Inject parameters into a notebook the way papermill does: a new code cell
 * tagged "injected-parameters" (with a fresh id) in place of the first cell
 * so tagged, else right after the first cell tagged "parameters", else
 * first, assigning each parameter as a Python literal; the notebook is
 * upgraded to nbformat 4.5.
 * @param out       receives the new notebook text (NUL-terminated); free()
 * @param out_len   receives its length (may be NULL)
 * @param ctx       the context (the message of a failure)
 * @param notebook  nbformat 4 JSON text
 * @param len       its length
 * @param params    a JSON object text: {"name": value, ...}; values may be
 *                  numbers, booleans, null, strings, arrays and objects;
 *                  integers of any size are kept exact, and Infinity,
 *                  -Infinity and NaN (as Python's json writes them) are
 *                  accepted, so that the kernel gets exactly the value
 * @return 0; NBRUN_EPARSE (notebook or params malformed), NBRUN_EINVAL (a
 *         name that is not a Python identifier), NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_notebook_inject_params(char **out, size_t *out_len, struct nbrun_ctx *ctx,
					      const char *notebook, size_t len,
					      const char *params);

/* ---- warm pool ------------------------------------------------------------- */

/** One language's share of a pool (version 2 of its options). */
struct nbrun_pool_language {
	const char *language; /**< a name or alias (nbrun_language_name()) */
	unsigned int size;    /**< its sandboxes kept ready (1 to 64) */
};

/**
 * A pool of sandboxes created, started and with their kernel booted (and
 * the data stack imported) before any run needs them. A run leases one
 * through nbrun_run_options.pool; each sandbox serves exactly one run and
 * is destroyed afterwards, never reused, so no run sees another's
 * container. Background threads refill the pool and remove used
 * sandboxes. Pool containers carry the nbrun labels, so nbrun_gc() (and
 * the next pool or run of this host) removes what a killed process left.
 * The pool's functions may be called from any thread.
 */
struct nbrun_pool_options {
	unsigned int version;
	unsigned int size;    /**< Python sandboxes kept ready (1 to 64; default 2) */
	/** Image, limits and network of every sandbox (NULL: the run defaults). */
	const struct nbrun_run_options *run;
	/** Modules imported in each Python kernel before it counts as ready; NULL or "" none. */
	const char *preload;
	/**
	 * Version 2: the languages kept warm and how many of each
	 * (language_count of them, at least one: languages with a
	 * language_count of 0 is NBRUN_EINVAL), or NULL: Python only, size of
	 * them (size is ignored otherwise). Each language at most once, its
	 * kernel in the image; the sizes add up to at most 64. Only Python's
	 * sandboxes import the preload; the others have their kernel up and
	 * nothing more. A run or session leases a sandbox of its own language
	 * only.
	 */
	const struct nbrun_pool_language *languages;
	size_t language_count;
};
#define NBRUN_POOL_OPTIONS_VERSION 2
#define NBRUN_POOL_OPTIONS_INIT                                                    \
	{                                                                          \
		.version = NBRUN_POOL_OPTIONS_VERSION, .size = 2,                  \
		.preload = "numpy,pandas,matplotlib.pyplot",                       \
	}

/**
 * Fill pool options with the defaults of NBRUN_POOL_OPTIONS_INIT.
 * @param opts     the options to fill (the caller's)
 * @param version  NBRUN_POOL_OPTIONS_VERSION; version 1 fills only the
 *                 fields it has
 * @return 0; NBRUN_EINVAL when opts is NULL or the version is one this
 *         library does not know (opts is then left as it was)
 */
NBRUN_EXPORT int nbrun_pool_options_init(struct nbrun_pool_options *opts, unsigned int version);

/**
 * Create a pool and start filling it in the background: one thread makes
 * the sandboxes of every language in turn, another removes used ones.
 * @param out   receives the pool; nbrun_pool_free()
 * @param ctx   the context (the message of a failure); the pool keeps none
 *              (nbrun_pool_last_error())
 * @param opts  sizes, languages, sandbox limits, preload (copied)
 * @return 0; NBRUN_EINVAL (bad options, an unknown language, or one
 *         whose kernel the image lacks: the message names the image's),
 *         NBRUN_EENGINE (no engine), NBRUN_ENOIMAGE (the image is
 *         missing), NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_pool_new(struct nbrun_pool **out, struct nbrun_ctx *ctx,
				const struct nbrun_pool_options *opts);

/**
 * Stop refilling, destroy every sandbox of the pool (ready or being made)
 * and wait for the removals.
 * @param pool  the pool (NULL is fine); runs still holding a lease from it
 *              must have returned first
 */
NBRUN_EXPORT void nbrun_pool_free(struct nbrun_pool *pool);

/** Counters of a pool (all its languages together), for health and metrics. */
struct nbrun_pool_stats {
	unsigned int size;     /**< the target */
	unsigned int ready;    /**< sandboxes waiting for a run */
	unsigned int starting; /**< sandboxes being made */
	uint64_t hits;         /**< runs that took a ready sandbox */
	uint64_t misses;       /**< runs that started a cold one (none ready, or other limits) */
	uint64_t failures;     /**< sandboxes that failed to start */
};

/**
 * Read the pool's counters.
 * @param out   filled with a consistent snapshot
 * @param pool  the pool
 * @return 0, or NBRUN_EINVAL when out or pool is NULL
 */
NBRUN_EXPORT int nbrun_pool_stats(struct nbrun_pool_stats *out, struct nbrun_pool *pool);

/**
 * Read the counters of one language's sandboxes in the pool.
 * @param out       filled with a consistent snapshot
 * @param pool      the pool
 * @param language  a name or alias (nbrun_language_name())
 * @return 0; NBRUN_ENOTFOUND when the pool keeps none of that language,
 *         NBRUN_EINVAL when out or pool is NULL or the language unknown
 */
NBRUN_EXPORT int nbrun_pool_language_stats(struct nbrun_pool_stats *out, struct nbrun_pool *pool,
					   const char *language);

/**
 * The last reason a sandbox of the pool failed to start ("" when none), for
 * a health report.
 * @param buf   receives the text, NUL-terminated (cut to fit)
 * @param len   the size of buf
 * @param pool  the pool
 * @return 0, or NBRUN_EINVAL when buf or pool is NULL or len is 0
 */
NBRUN_EXPORT int nbrun_pool_last_error(char *buf, size_t len, struct nbrun_pool *pool);

/* ---- sessions -------------------------------------------------------------- */

/**
 * A session: one sandbox and its kernel kept across many executions, so
 * that variables, imports and the files in /mnt/data stay between calls.
 * The sandbox serves this session only and is destroyed when it closes.
 * One call at a time per session, from any thread, except
 * nbrun_session_interrupt(), which may come from another thread while an
 * execution runs.
 */
struct nbrun_session;

/**
 * Open a session: a ready sandbox from opts->pool when its limits fit (it
 * leaves the pool at once), else a new one; opts->files are uploaded to
 * /mnt/data. Of the run options, the image, limits, network, env, files,
 * pool, cancel and language (version 4; NULL: Python) apply; timeout_ms
 * bounds the opening. The sandbox runs the session's language's kernel,
 * which every execution of the session then uses: from the pool when it
 * keeps that language, else a new one.
 * @param out  receives the session; nbrun_session_close()
 * @param ctx  the context for this call's message; the session keeps its own
 * @param opts  the run options (above)
 * @return 0; NBRUN_EINVAL, NBRUN_ENOTFOUND (an input file), NBRUN_EENGINE,
 *         NBRUN_ENOIMAGE, NBRUN_ECANCELLED, NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_session_open(struct nbrun_session **out, struct nbrun_ctx *ctx,
				    const struct nbrun_run_options *opts);

/** Options of one execution in a session. */
struct nbrun_exec_options {
	unsigned int version;
	uint64_t timeout_ms;       /**< the execution (60 s): its cell is interrupted then, the kernel kept */
	/** Output directory (created; must not exist or be empty). NULL: ./nbrun-out/<session>-<n>. */
	const char *out_dir;
	struct nbrun_parse_limits limits;
	uint64_t max_file_bytes;   /**< bytes exported from /mnt/data (256 MiB) */
	size_t max_files;          /**< entries exported (1000) */
	nbrun_event_cb on_event;   /**< live events, or NULL */
	void *event_payload;
};
#define NBRUN_EXEC_OPTIONS_VERSION 1
#define NBRUN_EXEC_OPTIONS_INIT { .version = NBRUN_EXEC_OPTIONS_VERSION, .timeout_ms = 60000 }

/**
 * Fill execute options with the defaults of NBRUN_EXEC_OPTIONS_INIT.
 * @param opts     the options to fill (the caller's)
 * @param version  NBRUN_EXEC_OPTIONS_VERSION
 * @return 0; NBRUN_EINVAL when opts is NULL or the version is one this
 *         library does not know (opts is then left as it was)
 */
NBRUN_EXPORT int nbrun_exec_options_init(struct nbrun_exec_options *opts, unsigned int version);

/**
 * Execute code in the session's kernel ("# %%" lines split it into cells;
 * execution stops at the first cell that raises). The result is a run's
 * document for this execution only: its outputs, and in "files" what it
 * created or changed in /mnt/data.
 * @param out   receives the result; nbrun_result_free()
 * @param s     the session
 * @param code  NUL-terminated source
 * @param opts  timeout, output directory, limits, events (NBRUN_EXEC_OPTIONS_INIT)
 * @return 0 when a result was made (a dead kernel gives status failed and
 *         nbrun_session_kernel_dead() true); NBRUN_EINVAL, NBRUN_EENGINE
 *         (the sandbox is gone: close the session), NBRUN_EIO, NBRUN_ENOSPC
 *         (the output directory's disk is full), NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_session_execute(struct nbrun_result **out, struct nbrun_session *s,
				       const char *code, const struct nbrun_exec_options *opts);

/**
 * Interrupt the running execution (its cell gets KeyboardInterrupt; the
 * kernel and its state stay). Thread-safe.
 * @param s  the session
 * @return 1 when an execution was running, 0 when none was
 */
NBRUN_EXPORT int nbrun_session_interrupt(struct nbrun_session *s);

/**
 * Restart the kernel: its state is gone, the files in /mnt/data stay; a
 * dead kernel comes back.
 * @param s  the session
 * @return 0, NBRUN_EENGINE (the kernel did not start; message on the session)
 */
NBRUN_EXPORT int nbrun_session_restart(struct nbrun_session *s);

/**
 * Write a file into /mnt/data.
 * @param s     the session
 * @param data  its bytes, len of them
 * @param len   their count
 * @param path  relative to /mnt/data: no "..", not absolute, no control characters
 * @return 0, NBRUN_EINVAL (bad path, or a link or file in its way), NBRUN_EENGINE
 */
NBRUN_EXPORT int nbrun_session_put_file(struct nbrun_session *s, const char *path,
					const void *data, size_t len);

/**
 * Copy a regular file of /mnt/data into fd. No symbolic link is followed.
 * @param s    the session
 * @param path relative to /mnt/data, checked as for nbrun_session_put_file()
 * @param fd   receives the bytes
 * @param max  the most bytes taken
 * @return 0, NBRUN_ENOTFOUND (no such regular file, or a link on the way),
 *         NBRUN_EINVAL (bad path, or larger than max), NBRUN_EENGINE, NBRUN_EIO
 */
NBRUN_EXPORT int nbrun_session_get_file(struct nbrun_session *s, const char *path, int fd,
					uint64_t max);

/**
 * What /mnt/data holds: a JSON array text of {"path", "type" ("file",
 * "directory", "symlink", "other"), "size", "mtime", "sha256" (files)}.
 * @param out        receives the text; free()
 * @param truncated  set when the listing stopped at 10,000 entries (may be NULL)
 * @param s          the session
 * @return 0, NBRUN_EIO (the sandbox could not list), NBRUN_EENGINE, NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_session_list_files(char **out, int *truncated, struct nbrun_session *s);

/**
 * The session's history as one executed notebook (nbformat 4 JSON): every
 * cell of every execution, in order, with its outputs (read back from each
 * execution's notebook.ipynb; one whose directory is gone is left out).
 * @param out  receives the text; free()
 * @param s    the session
 * @return 0, NBRUN_EINVAL (s is NULL), NBRUN_ENOMEM
 */
NBRUN_EXPORT int nbrun_session_notebook(char **out, struct nbrun_session *s);

/**
 * The session's id.
 * @param s  the session
 * @return 12 hex digits (also its sandbox's name), owned by s; "" for NULL
 */
NBRUN_EXPORT const char *nbrun_session_id(const struct nbrun_session *s);
/**
 * Whether the kernel died (its executions fail until nbrun_session_restart()).
 * @param s  the session
 * @return non-zero when it died, 0 otherwise (and for NULL)
 */
NBRUN_EXPORT int nbrun_session_kernel_dead(const struct nbrun_session *s);
/**
 * The message of the session's last failure.
 * @param s  the session
 * @return one line owned by s ("" when none), valid until the next call on s
 */
NBRUN_EXPORT const char *nbrun_session_errmsg(const struct nbrun_session *s);

/**
 * Destroy the session's sandbox (its kernel, its /mnt/data) and release the
 * session; the executions' output directories stay.
 * @param s  the session (NULL is fine)
 * @return nothing: closing cannot fail; a sandbox the engine could not
 *         remove then is removed by its labels later (nbrun gc, the next
 *         run or server on the host)
 */
NBRUN_EXPORT void nbrun_session_close(struct nbrun_session *s);

/**
 * Remove containers and volumes left by earlier runs (for example after
 * nbrun was killed with SIGKILL). Only objects labelled nbrun.run are
 * touched.
 * @param removed      receives the number of containers and volumes removed (may be NULL)
 * @param failed       receives the number whose removal the engine refused or
 *                     never answered (may be NULL); objects already gone count
 *                     as neither
 * @param ctx          the context (messages)
 * @param older_than_s only objects created at least this many seconds ago
 * @return 0 when every removal succeeded; NBRUN_EENGINE when the engine is
 *         unreachable, or when any removal failed (*removed and *failed are
 *         filled, the message names the last failure)
 */
NBRUN_EXPORT int nbrun_gc(unsigned int *removed, unsigned int *failed, struct nbrun_ctx *ctx,
			  unsigned int older_than_s);

/**
 * Remove the egress proxy of runs given hosts to allow (and its network)
 * when no sandbox on the engine uses it any more. Runs start it when they
 * need it; a program that ran such runs calls this before it exits, and
 * nbrun_gc() does too.
 * @param ctx  the context (messages)
 * @return 0 (also when the proxy is in use, or was never there);
 *         NBRUN_EENGINE when the engine is unreachable or refused
 */
NBRUN_EXPORT int nbrun_egress_release(struct nbrun_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* NBRUN_H */
