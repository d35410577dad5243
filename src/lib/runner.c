/* SPDX-License-Identifier: MIT */
/*
 * One execution end to end: notebook in, hardened container, upload, run
 * with a wall-clock deadline, download, parse, export, and removal of the
 * container and its volumes whatever happened.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "nbrun-private.h"
#include "path.h"
#include "text.h"

#define RUN_UID 1000
#define RUN_GID 1000
#define RUN_TMPFS_SIZE "256m"
/* Time nbconvert needs around the cells: kernel start, reading, writing. */
#define RUN_MARGIN_MS 4000
#define RUN_CLEANUP_TIMEOUT_MS 20000L
#define RUN_IMAGE_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@-"

struct run {
	struct nbrun_ctx *ctx;
	const struct nbrun_run_options *opts;
	struct nbrun__limits lim;
	struct nbrun__docker *docker;
	struct nbrun_result *result;
	char id[16];
	char container[64];     /* name, set once created */
	char vol_app[64];
	char vol_data[64];
	bool have_container, have_vol_app, have_vol_data;
	char *image;
	char *out_dir;          /* absolute */
	int out_fd;
	uint64_t t0_ms;
	uint64_t deadline_ms;   /* monotonic, ms */
	struct nbrun__export_input *inputs;
	size_t n_inputs;
};

static void run_progress(struct run *r, enum nbrun_phase phase)
{
	if (r->opts->progress)
		r->opts->progress(phase, r->opts->payload);
}

static bool run_cancelled(const struct run *r)
{
	return r->opts->cancel && *r->opts->cancel;
}

/* ---- options ---------------------------------------------------------------- */

static int run_check_options(struct nbrun_ctx *ctx, const struct nbrun_run_options *o)
{
	if (!o || o->version != NBRUN_RUN_OPTIONS_VERSION)
		return nbrun__err(ctx, NBRUN_EINVAL, "run options missing or of another version");
	if (o->timeout_ms == 0 || o->timeout_ms > 24ULL * 3600 * 1000)
		return nbrun__err(ctx, NBRUN_EINVAL, "timeout must be between 1 ms and 24 h");
	if (o->cell_timeout_ms > o->timeout_ms)
		return nbrun__err(ctx, NBRUN_EINVAL, "cell timeout cannot exceed the timeout");
	if (o->memory_bytes < (64ULL << 20))
		return nbrun__err(ctx, NBRUN_EINVAL, "memory must be at least 64 MiB");
	if (o->nano_cpus == 0 || o->nano_cpus > 1024ULL * 1000000000ULL)
		return nbrun__err(ctx, NBRUN_EINVAL, "cpus must be positive");
	if (o->pids <= 0)
		return nbrun__err(ctx, NBRUN_EINVAL, "pids must be positive");
	if (o->disk_bytes < (1ULL << 20))
		return nbrun__err(ctx, NBRUN_EINVAL, "disk must be at least 1 MiB");
	if (!o->network || (strcmp(o->network, "none") && strcmp(o->network, "bridge")))
		return nbrun__err(ctx, NBRUN_EINVAL, "network must be 'none' or 'bridge'");
	/* Checked here too, not only when the image is looked up: a usage error
	 * must start nothing (no output directory, no engine request). */
	if (o->image && (!*o->image || strlen(o->image) > 255 ||
			 strspn(o->image, RUN_IMAGE_CHARS) != strlen(o->image)))
		return nbrun__err(ctx, NBRUN_EINVAL, "'%s' is not an image name", o->image);
	for (size_t i = 0; i < o->env_count; i++) {
		const char *eq = o->env[i] ? strchr(o->env[i], '=') : NULL;
		if (!eq || eq == o->env[i])
			return nbrun__err(ctx, NBRUN_EINVAL, "environment entry '%s' is not KEY=VALUE",
					  o->env[i] ? o->env[i] : "");
		for (const char *p = o->env[i]; p < eq; p++)
			if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			      (p > o->env[i] && *p >= '0' && *p <= '9')))
				return nbrun__err(ctx, NBRUN_EINVAL, "environment name in '%s' is not valid",
						  o->env[i]);
	}
	return 0;
}

static int run_make_id(struct run *r)
{
	unsigned char raw[6];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return nbrun__errno(r->ctx, NBRUN_EIO, errno, "cannot get random bytes");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(r->id + 2 * i, 3, "%02x", raw[i]);
	snprintf(r->vol_app, sizeof(r->vol_app), "nbrun-%s-app", r->id);
	snprintf(r->vol_data, sizeof(r->vol_data), "nbrun-%s-data", r->id);
	return 0;
}

/* mkdir -p, then require an empty directory: a run never mixes with old files. */
static int run_open_out_dir(struct run *r)
{
	char *dir = NULL;
	char cwd[PATH_MAX];
	int fd = -1, rc = 0;
	DIR *d;

	if (r->opts->out_dir) {
		if (r->opts->out_dir[0] == '/')
			dir = strdup(r->opts->out_dir);
		else if (getcwd(cwd, sizeof(cwd)))
			rc = asprintf(&dir, "%s/%s", cwd, r->opts->out_dir) < 0 ? -1 : 0;
	} else if (getcwd(cwd, sizeof(cwd))) {
		rc = asprintf(&dir, "%s/nbrun-out/%s", cwd, r->id) < 0 ? -1 : 0;
	}
	if (!dir || rc < 0)
		return nbrun__err(r->ctx, NBRUN_ENOMEM, "cannot make the output directory name");
	rc = path_mkdir_p(dir, 0755);
	if (rc < 0) {
		rc = nbrun__errno(r->ctx, NBRUN_EIO, -rc, "cannot create %s", dir);
		goto out;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = nbrun__errno(r->ctx, NBRUN_EIO, errno, "cannot open %s", dir);
		goto out;
	}
	d = fdopendir(dup(fd));
	if (d) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
				rc = nbrun__err(r->ctx, NBRUN_EINVAL,
						"output directory %s is not empty", dir);
				break;
			}
		closedir(d);
	}
	if (rc < 0)
		goto out;
	r->out_dir = dir;
	r->out_fd = fd;
	dir = NULL;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

/* ---- engine objects ------------------------------------------------------------ */

static int run_engine_status(struct run *r, int status, const char *what)
{
	if (status < 0)
		return status;
	if (status >= 400)
		return nbrun__err(r->ctx, NBRUN_EENGINE, "%s: %s", what, nbrun_ctx_errmsg(r->ctx));
	return 0;
}

static int run_pick_image(struct run *r)
{
	char path[512];
	const char *want = r->opts->image;
	int status;

	if (want) {
		r->image = strdup(want); /* its name was checked with the other options */
	} else if (asprintf(&r->image, "%s:%s", NBRUN_DEFAULT_IMAGE, NBRUN_VERSION) < 0) {
		r->image = NULL;
	}
	if (!r->image)
		return nbrun__err(r->ctx, NBRUN_ENOMEM, "out of memory");
	for (int attempt = 0; attempt < 2; attempt++) {
		snprintf(path, sizeof(path), "/images/%s/json", r->image);
		status = nbrun__docker_json(r->docker, "GET", path, NULL, NULL, 0);
		if (status < 0)
			return status;
		if (status == 200)
			return 0;
		if (status != 404)
			return run_engine_status(r, status, "cannot inspect the image");
		if (want || attempt)
			break;
		free(r->image);
		if (asprintf(&r->image, "%s:latest", NBRUN_DEFAULT_IMAGE) < 0) {
			r->image = NULL;
			return nbrun__err(r->ctx, NBRUN_ENOMEM, "out of memory");
		}
	}
	return nbrun__err(r->ctx, NBRUN_ENOIMAGE,
			  "image %s is not on the engine: build it with scripts/setup", r->image);
}

static json_t *run_labels(const struct run *r)
{
	char pid[32], created[32], host[256] = "";

	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	snprintf(created, sizeof(created), "%lld", (long long)time(NULL));
	gethostname(host, sizeof(host) - 1);
	return json_pack("{s:s, s:s, s:s, s:s}", NBRUN_LABEL, r->id, "nbrun.pid", pid, "nbrun.host",
			 host, "nbrun.created", created);
}

static int run_create_volume(struct run *r, const char *name, uint64_t bytes, bool *have)
{
	char opt[128];
	json_t *body;
	int status;

	/* tmpfs volumes: bounded, in memory, gone with the volume; and unlike a
	 * plain Tmpfs mount the archive API sees them. */
	snprintf(opt, sizeof(opt), "size=%llu,uid=%d,gid=%d,mode=0755", (unsigned long long)bytes,
		 RUN_UID, RUN_GID);
	body = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:o}", "Name", name, "Driver", "local",
			 "DriverOpts", "type", "tmpfs", "device", "tmpfs", "o", opt, "Labels",
			 run_labels(r));
	if (!body)
		return nbrun__err(r->ctx, NBRUN_ENOMEM, "out of memory");
	status = nbrun__docker_json(r->docker, "POST", "/volumes/create", body, NULL, 0);
	json_decref(body);
	if (status >= 200 && status < 300)
		*have = true;
	return run_engine_status(r, status, "cannot create a volume");
}

/*
 * The seccomp profile: everything a Python data stack needs is allowed, and
 * what a sandbox has no business doing is refused with EPERM, ptrace and
 * cross-process memory access included (the engine's default profile allows
 * ptrace between the container's own processes). Namespace creation is
 * refused in unshare, setns and clone; clone3 answers ENOSYS so that libc
 * falls back to clone, where the flags can be inspected. mknod stays: without
 * CAP_MKNOD it makes only FIFOs, which export skips.
 */
static char *run_seccomp_option(void)
{
	static const char *const denied[] = {
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
		"mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
		"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
		"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
		"init_module", "finit_module", "delete_module", "create_module", "kexec_load",
		"kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
		"name_to_handle_at", "open_by_handle_at", "lookup_dcookie", "settimeofday",
		"clock_settime", "clock_adjtime", "adjtimex", "stime", "iopl", "ioperm", "uselib",
		"sysfs", "_sysctl", "ustat", "nfsservctl", "vm86", "vm86old", "personality",
		"syslog", "vhangup", "get_kernel_syms", "query_module",
	};
	/* CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET */
	static const json_int_t ns_flags[] = { 0x00020000, 0x02000000, 0x04000000, 0x08000000,
					       0x10000000, 0x20000000, 0x40000000 };
	json_t *names = json_array(), *rules, *profile;
	char *text, *opt = NULL;

	for (size_t i = 0; names && i < sizeof(denied) / sizeof(denied[0]); i++)
		json_array_append_new(names, json_string(denied[i]));
	rules = json_pack("[{s:o, s:s, s:i}, {s:[s], s:s, s:i}]", "names", names, "action",
			  "SCMP_ACT_ERRNO", "errnoRet", 1, "names", "clone3", "action",
			  "SCMP_ACT_ERRNO", "errnoRet", 38);
	for (size_t i = 0; rules && i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++)
		json_array_append_new(rules, json_pack("{s:[s], s:s, s:i, s:[{s:i, s:I, s:I, s:s}]}",
						       "names", "clone", "action", "SCMP_ACT_ERRNO",
						       "errnoRet", 1, "args", "index", 0, "value",
						       ns_flags[i], "valueTwo", ns_flags[i], "op",
						       "SCMP_CMP_MASKED_EQ"));
	profile = rules ? json_pack("{s:s, s:o}", "defaultAction", "SCMP_ACT_ALLOW", "syscalls", rules)
			: NULL;
	text = profile ? json_dumps(profile, JSON_COMPACT) : NULL;
	if (text && asprintf(&opt, "seccomp=%s", text) < 0)
		opt = NULL;
	free(text);
	json_decref(profile);
	return opt;
}

static json_t *run_container_spec(struct run *r)
{
	const struct nbrun_run_options *o = r->opts;
	uint64_t cell_ms = o->cell_timeout_ms;
	bool isolated = !strcmp(o->network, "none");
	char cell_s[32];
	char *seccomp = run_seccomp_option();
	json_t *env, *spec;

	if (!seccomp)
		return NULL;

	if (!cell_ms)
		cell_ms = o->timeout_ms > 2 * RUN_MARGIN_MS ? o->timeout_ms - RUN_MARGIN_MS
							    : o->timeout_ms / 2;
	snprintf(cell_s, sizeof(cell_s), "%llu",
		 (unsigned long long)(cell_ms < 1000 ? 1 : cell_ms / 1000));
	env = json_array();
	for (size_t i = 0; env && i < o->env_count; i++)
		json_array_append_new(env, json_string(o->env[i]));
	spec = json_pack(
		"{s:s, s:[s,s], s:o, s:s, s:s, s:o, s:b, s:b, s:b, s:b,"
		" s:{s:s, s:[s], s:[s,s], s:I, s:I, s:I, s:I, s:b, s:b, s:{s:s},"
		"    s:{s:s, s:{s:s, s:s}}, s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}], s:b,"
		"    s:[{s:s, s:I, s:I}], s:s}}",
		"Image", r->image, "Cmd", "/opt/nbrun/nbrun-exec", cell_s, "Env", env, "User",
		"1000:1000", "WorkingDir", "/mnt/data", "Labels", run_labels(r), "NetworkDisabled",
		isolated, "AttachStdin", 0, "OpenStdin", 0, "Tty", 0, "HostConfig", "NetworkMode",
		isolated ? "none" : "bridge", "CapDrop", "ALL", "SecurityOpt", "no-new-privileges", seccomp,
		"PidsLimit", (json_int_t)o->pids, "Memory", (json_int_t)o->memory_bytes, "MemorySwap",
		(json_int_t)o->memory_bytes, "NanoCpus", (json_int_t)o->nano_cpus, "Init", 1,
		"ReadonlyRootfs", 1, "Tmpfs", "/tmp", "rw,nosuid,nodev,size=" RUN_TMPFS_SIZE ",mode=1777",
		"LogConfig", "Type", "json-file", "Config", "max-size", "1m", "max-file", "1", "Mounts",
		"Type", "volume", "Source", r->vol_app, "Target", "/app", "Type", "volume", "Source",
		r->vol_data, "Target", "/mnt/data", "AutoRemove", 0, "Ulimits", "Name", "nofile",
		"Soft", (json_int_t)4096, "Hard", (json_int_t)4096, "IpcMode", "private");
	free(seccomp);
	return spec;
}

static int run_create_container(struct run *r)
{
	char path[128];
	json_t *spec = run_container_spec(r);
	int status;

	if (!spec)
		return nbrun__err(r->ctx, NBRUN_ENOMEM, "out of memory");
	snprintf(path, sizeof(path), "/containers/create?name=nbrun-%s", r->id);
	status = nbrun__docker_json(r->docker, "POST", path, spec, NULL, 0);
	json_decref(spec);
	if (status >= 200 && status < 300) {
		snprintf(r->container, sizeof(r->container), "nbrun-%s", r->id);
		r->have_container = true;
	}
	return run_engine_status(r, status, "cannot create the container");
}

static int run_put_archive(struct run *r, struct nbrun__tar *t, const char *dest)
{
	const void *data;
	size_t len;
	char path[256];
	struct buf reply = BUF_INIT(64 * 1024);
	int rc, status;

	rc = nbrun__tar_finish(t, &data, &len);
	if (rc == NBRUN_EINVAL)
		return nbrun__err(r->ctx, rc, "input files are larger than the sandbox disk");
	if (rc < 0)
		return nbrun__err(r->ctx, rc, "cannot build the upload archive");
	snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", r->container, dest);
	status = nbrun__docker_request(r->docker, "PUT", path, "application/x-tar", data, len, &reply,
				       120000);
	if (status >= 400) {
		json_t *j = json_loadb(reply.data ? reply.data : "", reply.len, 0, NULL);
		nbrun__err(r->ctx, NBRUN_EENGINE, "upload to %s failed: HTTP %d: %.200s", dest, status,
			   json_string_value(json_object_get(j, "message")) ?: "");
		json_decref(j);
		status = NBRUN_EENGINE;
	}
	buf_free(&reply);
	return status < 0 ? status : 0;
}

static const char *run_base_name(const char *path)
{
	size_t len = strlen(path);
	const char *b;

	while (len > 1 && path[len - 1] == '/')
		len--;
	b = memrchr(path, '/', len);
	return b ? b + 1 : path;
}

/*
 * The volumes are tmpfs: they hold files only while the container runs, so
 * uploads happen after start. Input files go first; the notebook and the
 * .ready marker that releases nbrun-exec go last, in one archive.
 */
static int run_upload(struct run *r, const char *notebook, size_t len)
{
	struct nbrun__tar *t = NULL;
	int rc = 0;

	if (r->opts->file_count) {
		rc = nbrun__tar_new(&t, RUN_UID, RUN_GID, (size_t)r->opts->disk_bytes + (1u << 20));
		if (rc < 0)
			return nbrun__err(r->ctx, rc, "out of memory");
		for (size_t i = 0; i < r->opts->file_count && rc == 0; i++) {
			const char *name = run_base_name(r->opts->files[i]);
			char clean[NBRUN_MAX_NAME_BYTES + 1];
			snprintf(clean, sizeof(clean), "%.*s", (int)strcspn(name, "/"), name);
			rc = nbrun__tar_add_path(r->ctx, t, r->opts->files[i], clean);
		}
		nbrun__tar_take_files(t, &r->inputs, &r->n_inputs);
		if (rc == 0)
			rc = run_put_archive(r, t, "/mnt/data");
		nbrun__tar_free(t);
		t = NULL;
		if (rc < 0)
			return rc;
	}
	rc = nbrun__tar_new(&t, RUN_UID, RUN_GID, len + 8192);
	if (rc < 0)
		return nbrun__err(r->ctx, rc, "out of memory");
	rc = nbrun__tar_add_data(t, "notebook.ipynb", notebook, len);
	if (rc == 0)
		rc = nbrun__tar_add_data(t, ".ready", "", 0);
	if (rc == 0)
		rc = run_put_archive(r, t, "/app");
	nbrun__tar_free(t);
	return rc;
}

/* ---- execution ---------------------------------------------------------------- */

/* Cells nbrun-exec marked as interrupted at their cell timeout. */
static int run_timed_out_cell(const json_t *nb)
{
	const json_t *cell;
	size_t i;

	json_array_foreach(json_object_get(nb, "cells"), i, cell) {
		const json_t *m = json_object_get(json_object_get(cell, "metadata"), "nbrun");
		if (json_is_true(json_object_get(m, "timed_out")))
			return (int)i;
	}
	return -1;
}

struct run_state {
	bool oom;
	int exit_code;
	bool running;
};

static int run_inspect(struct run *r, struct run_state *st)
{
	char path[128];
	json_t *j = NULL, *state;
	int status;

	snprintf(path, sizeof(path), "/containers/%s/json", r->container);
	status = nbrun__docker_json(r->docker, "GET", path, NULL, &j, 0);
	if (status != 200) {
		json_decref(j);
		return run_engine_status(r, status < 0 ? status : 500, "cannot inspect the container");
	}
	state = json_object_get(j, "State");
	st->oom = json_is_true(json_object_get(state, "OOMKilled"));
	st->exit_code = (int)json_integer_value(json_object_get(state, "ExitCode"));
	st->running = json_is_true(json_object_get(state, "Running"));
	json_decref(j);
	return 0;
}

/*
 * Wait for nbrun-exec's "NBRUN-DONE <exit code> <oom kills>" line. Returns 0
 * when done or the container stopped, 1 when the deadline passed.
 *
 * The engine's log stream is not reliable: when the json-file log rotates
 * (max-size 1m, and the code can write to it at will) a follower may miss
 * lines or see its stream end while the container runs on. So the log is
 * followed in short slices, each one reading the current file again, and a
 * stream that ends only counts when the container has really stopped.
 */
#define RUN_WAIT_SLICE_MS 2000L
static int run_wait(struct run *r, int *code, bool *oom)
{
	struct run_state st;
	char rest[64];
	int rc, kills = 0;

	*code = -1;
	for (;;) {
		uint64_t now = clock_mono_ms();
		long left = r->deadline_ms > now ? (long)(r->deadline_ms - now) : 0;

		if (left <= 0)
			return 1;
		rc = nbrun__docker_wait_marker(r->docker, r->container, "NBRUN-DONE ", rest, sizeof(rest),
					       left < RUN_WAIT_SLICE_MS ? left : RUN_WAIT_SLICE_MS);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			if (sscanf(rest, "%d %d", code, &kills) >= 1)
				*oom = kills > 0;
			return 0;
		}
		if (rc == 0) {
			/* The stream ended: done when the container stopped. */
			rc = run_inspect(r, &st);
			if (rc < 0)
				return rc;
			if (!st.running)
				return 0;
			/* Cut by a log rotation: pause a little, then follow again. */
			nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
		}
		if (r->opts->cancel && *r->opts->cancel)
			return nbrun__err(r->ctx, NBRUN_ECANCELLED, "interrupted");
	}
}

/* The last line nbconvert printed, for a run that produced no notebook. */
static void run_last_log_line(struct run *r, char *out, size_t outlen)
{
	char path[160];
	struct buf raw = BUF_INIT(64 * 1024), text = BUF_INIT(64 * 1024);
	size_t off = 0;
	char *line, *end;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/containers/%s/logs?stdout=0&stderr=1&tail=20", r->container);
	if (nbrun__docker_request(r->docker, "GET", path, NULL, NULL, 0, &raw, 10000) != 200)
		goto out;
	/* Multiplexed frames: 8-byte header (stream, 0, 0, 0, big-endian length). */
	while (raw.data && off + 8 <= raw.len) {
		const unsigned char *h = (const unsigned char *)raw.data + off;
		size_t n = ((size_t)h[4] << 24) | ((size_t)h[5] << 16) | ((size_t)h[6] << 8) | h[7];
		if (n > raw.len - off - 8)
			n = raw.len - off - 8;
		buf_append(&text, raw.data + off + 8, n);
		off += 8 + n;
	}
	if (!text.data)
		goto out;
	end = text.data + text.len;
	while (end > text.data && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
		*--end = '\0';
	line = memrchr(text.data, '\n', (size_t)(end - text.data));
	line = line ? line + 1 : text.data;
	/* The code in the sandbox can write this line (pid 1's stderr is open to
	 * it): keep it one printable line of valid UTF-8, or drop it. */
	for (char *c = line; c < end; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = ' ';
		else if ((unsigned char)c[0] == 0xc2 && c + 1 < end && (unsigned char)c[1] >= 0x80 &&
			 (unsigned char)c[1] <= 0x9f)
			c[0] = c[1] = ' ';
	if (!text_utf8_valid(line, (size_t)(end - line)))
		goto out;
	snprintf(out, outlen, "%s", line);
	/* A cut line may end inside a UTF-8 sequence: drop its bytes (at most 3). */
	for (size_t n = strlen(out); n > 0 && !text_utf8_valid(out, n); n--)
		out[n - 1] = '\0';
out:
	buf_free(&raw);
	buf_free(&text);
}

/* ---- download and export ------------------------------------------------------ */

static int run_spool(struct run *r, const char *src, uint64_t max, int *out_fd, bool *cut)
{
	char path[256];
	int fd, rc;

	*out_fd = -1;
	*cut = false;
	/* The archive is spooled unnamed next to the output: bounded memory. */
	fd = openat(r->out_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		char tmpl[PATH_MAX];
		snprintf(tmpl, sizeof(tmpl), "%s/.spool-XXXXXX", r->out_dir);
		fd = mkostemp(tmpl, O_CLOEXEC);
		if (fd >= 0)
			unlink(tmpl);
	}
	if (fd < 0)
		return nbrun__errno(r->ctx, NBRUN_EIO, errno, "cannot make a spool file");
	snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", r->container, src);
	rc = nbrun__docker_download(r->docker, path, fd, max, 120000);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	*cut = rc == 1;
	lseek(fd, 0, SEEK_SET);
	*out_fd = fd;
	return 0;
}

/* The executed notebook: a tar with one regular file, written as notebook.ipynb. */
struct nb_sink {
	struct run *r;
	int fd;
	bool got, complete;
};

static int nb_entry(const struct nbrun__tar_entry *e, void *p)
{
	struct nb_sink *s = p;

	if (s->got || e->type != AE_IFREG || e->hardlink)
		return -1;
	s->fd = nbrun__export_open(s->r->out_fd, "notebook.ipynb", 0644);
	return s->fd >= 0 ? s->fd : -2;
}

static void nb_done(const struct nbrun__tar_entry *e, int fd, uint64_t written, bool complete,
		    void *p)
{
	struct nb_sink *s = p;

	s->got = true;
	s->complete = complete;
	close(fd);
	s->fd = -1;
}

static int run_fetch_notebook(struct run *r, const char *src, bool *got)
{
	struct nb_sink s = { r, -1, false, false };
	struct nbrun__tar_sink sink = { nb_entry, nb_done, &s, r->lim.max_notebook_bytes, 4 };
	bool cut;
	int fd, rc;

	*got = false;
	rc = run_spool(r, src, r->lim.max_notebook_bytes + (1u << 20), &fd, &cut);
	if (rc == NBRUN_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	rc = nbrun__tar_extract(r->ctx, fd, &sink);
	close(fd);
	if (cut || (s.got && !s.complete)) {
		unlinkat(r->out_fd, "notebook.ipynb", 0);
		return nbrun__err(r->ctx, NBRUN_EPARSE, "the executed notebook is larger than %llu bytes",
				  (unsigned long long)r->lim.max_notebook_bytes);
	}
	if (rc < 0)
		return rc;
	*got = s.got;
	return 0;
}

static int run_export_files(struct run *r)
{
	struct nbrun__files_export x = {
		.result = r->result,
		.out_fd = r->out_fd,
		.inputs = r->inputs,
		.n_inputs = r->n_inputs,
		.max_bytes = r->opts->max_file_bytes ? r->opts->max_file_bytes : NBRUN_DEFAULT_MAX_FILE_BYTES,
		.max_files = r->opts->max_files ? r->opts->max_files : NBRUN_DEFAULT_MAX_FILES,
	};
	bool cut;
	int fd, rc;

	/* The archive stream is bounded too: the data plus room for tar headers. */
	rc = run_spool(r, "/mnt/data", x.max_bytes + (uint64_t)(x.max_files * 4 + 64) * 1536 + (1u << 20),
		       &fd, &cut);
	if (rc < 0)
		return rc;
	rc = nbrun__export_files(r->ctx, &x, fd, cut);
	close(fd);
	return rc;
}

/* ---- cleanup ----------------------------------------------------------------- */

static void run_cleanup(struct run *r)
{
	char path[160];

	if (!r->docker)
		return;
	/* Cleanup runs even after a cancel: lift the flag for these requests. */
	nbrun__docker_set_cancel(r->docker, NULL);
	run_progress(r, NBRUN_PHASE_CLEANUP);
	if (r->have_container) {
		snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", r->container);
		nbrun__docker_json(r->docker, "DELETE", path, NULL, NULL, RUN_CLEANUP_TIMEOUT_MS);
	}
	if (r->have_vol_app) {
		snprintf(path, sizeof(path), "/volumes/%s?force=1", r->vol_app);
		nbrun__docker_json(r->docker, "DELETE", path, NULL, NULL, RUN_CLEANUP_TIMEOUT_MS);
	}
	if (r->have_vol_data) {
		snprintf(path, sizeof(path), "/volumes/%s?force=1", r->vol_data);
		nbrun__docker_json(r->docker, "DELETE", path, NULL, NULL, RUN_CLEANUP_TIMEOUT_MS);
	}
}

/* ---- the run ------------------------------------------------------------------ */

static void run_finish_result(struct run *r)
{
	char *nb_path = NULL;
	json_t *doc = r->result->doc;
	struct stat st;

	json_object_set_new(doc, "duration_ms", json_integer((json_int_t)(clock_mono_ms() - r->t0_ms)));
	json_object_set_new(doc, "out_dir", json_string(r->out_dir));
	if (fstatat(r->out_fd, "notebook.ipynb", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    asprintf(&nb_path, "%s/notebook.ipynb", r->out_dir) >= 0) {
		json_object_set_new(doc, "notebook", json_string(nb_path));
		free(nb_path);
	}
}

static int run_execute(struct run *r, const char *notebook, size_t len)
{
	struct run_state st = { false, 0, false };
	char msg[512], logline[300];
	json_t *nb = NULL;
	bool timed_out = false, got = false;
	int rc, exec_code = -1, slow_cell = -1;
	bool oom_kills = false, partial = false;

	run_progress(r, NBRUN_PHASE_CONNECT);
	rc = nbrun__docker_new(&r->docker, r->ctx);
	if (rc < 0)
		return rc;
	nbrun__docker_set_cancel(r->docker, r->opts->cancel);
	nbrun__gc_orphans(r->docker, r->ctx);
	rc = run_pick_image(r);
	if (rc < 0)
		return rc;

	run_progress(r, NBRUN_PHASE_CREATE);
	rc = run_create_volume(r, r->vol_app, r->lim.max_notebook_bytes * 2 + (16u << 20),
			       &r->have_vol_app);
	if (rc == 0)
		rc = run_create_volume(r, r->vol_data, r->opts->disk_bytes, &r->have_vol_data);
	if (rc == 0)
		rc = run_create_container(r);
	if (rc < 0)
		return rc;

	{
		char path[128];
		int status;
		snprintf(path, sizeof(path), "/containers/%s/start", r->container);
		status = nbrun__docker_json(r->docker, "POST", path, NULL, NULL, 0);
		rc = run_engine_status(r, status, "cannot start the container");
		if (rc < 0)
			return rc;
	}
	run_progress(r, NBRUN_PHASE_UPLOAD);
	rc = run_upload(r, notebook, len);
	if (rc < 0)
		return rc;

	run_progress(r, NBRUN_PHASE_EXECUTE);
	rc = run_wait(r, &exec_code, &oom_kills);
	if (rc < 0)
		return rc;
	timed_out = rc == 1;
	rc = run_inspect(r, &st);
	if (rc < 0)
		return rc;

	run_progress(r, NBRUN_PHASE_DOWNLOAD);
	rc = run_fetch_notebook(r, "/app/executed.ipynb", &got);
	if (rc == 0 && !got) {
		/* nbconvert writes executed.ipynb last: without it the run did not
		 * finish, whatever the done line said (the code can forge it). */
		partial = true;
		rc = run_fetch_notebook(r, "/app/partial.ipynb", &got);
	}
	if (rc == NBRUN_ECANCELLED)
		return rc;
	if (rc < 0) {
		nbrun__result_set_status(r->result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(r->ctx));
		got = false;
	}
	run_progress(r, NBRUN_PHASE_PARSE);
	if (got) {
		rc = nbrun__notebook_load(&nb, r->ctx, r->out_fd, "notebook.ipynb",
					  r->lim.max_notebook_bytes);
		if (rc == 0)
			rc = nbrun__outputs_parse(r->ctx, r->result, nb, r->out_fd, &r->lim);
		if (rc == 0)
			slow_cell = run_timed_out_cell(nb);
		json_decref(nb);
		if (rc < 0)
			nbrun__result_set_status(r->result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(r->ctx));
	}
	/* Files after the notebook: the parser fills the document's other lists. */
	run_progress(r, NBRUN_PHASE_DOWNLOAD);
	rc = run_export_files(r);
	if (rc == NBRUN_ECANCELLED)
		return rc;

	/* What ended the run decides its status; outputs so far stay in the result. */
	if (timed_out) {
		snprintf(msg, sizeof(msg), "the run passed its %llu ms deadline and was killed%s",
			 (unsigned long long)r->opts->timeout_ms,
			 got ? "; outputs of the finished cells are kept" : "");
		nbrun__result_set_status(r->result, NBRUN_STATUS_TIMEOUT, msg);
	} else if (st.oom || oom_kills) {
		nbrun__result_set_status(r->result, NBRUN_STATUS_OOM,
					 "the sandbox ran out of memory (raise --memory)");
	} else if (slow_cell >= 0) {
		snprintf(msg, sizeof(msg), "cell %d passed its cell timeout and was interrupted; the other cells ran",
			 slow_cell);
		nbrun__result_set_status(r->result, NBRUN_STATUS_TIMEOUT, msg);
	} else if (exec_code != 0 || partial) {
		/* nbconvert stopped early (a dead kernel, say): the partial notebook has the cells that finished. */
		run_last_log_line(r, logline, sizeof(logline));
		snprintf(msg, sizeof(msg), "%s (exit code %d)%s%s",
			 got ? "the run stopped early; outputs of the finished cells are kept"
			     : "no executed notebook came back",
			 exec_code >= 0 ? exec_code : st.exit_code, logline[0] ? ": " : "", logline);
		if (!nbrun_result_message(r->result))
			nbrun__result_set_status(r->result, NBRUN_STATUS_FAILED, msg);
	} else if (!got && !nbrun_result_message(r->result)) {
		nbrun__result_set_status(r->result, NBRUN_STATUS_FAILED, "no executed notebook came back");
	}
	return 0;
}

/*
 * nbconvert refuses a kernelspec without name or display_name (older Jupyter
 * wrote such notebooks). The sandbox has one kernel, python3: complete it.
 */
static void run_fix_kernelspec(json_t *nb)
{
	json_t *meta = json_object_get(nb, "metadata");
	json_t *ks = json_object_get(meta, "kernelspec");

	if (!json_is_object(ks))
		return;
	if (!json_is_string(json_object_get(ks, "name")))
		json_object_set_new(ks, "name", json_string("python3"));
	if (!json_is_string(json_object_get(ks, "display_name")))
		json_object_set_new(ks, "display_name", json_string("Python 3"));
}

static int run_notebook_json(struct nbrun_result **out, struct nbrun_ctx *ctx, json_t *nb,
			     const struct nbrun_run_options *opts)
{
	struct run r;
	char *text = NULL;
	int rc;

	*out = NULL;
	memset(&r, 0, sizeof(r));
	r.ctx = ctx;
	r.opts = opts;
	r.out_fd = -1;
	r.t0_ms = clock_mono_ms();
	rc = run_check_options(ctx, opts);
	if (rc < 0)
		return rc;
	nbrun__limits_resolve(&r.lim, &opts->limits);
	r.deadline_ms = clock_mono_ms() + opts->timeout_ms;
	for (size_t i = 0; i < opts->file_count; i++)
		if (access(opts->files[i], R_OK) < 0)
			return nbrun__errno(ctx, errno == ENOENT ? NBRUN_ENOTFOUND : NBRUN_EIO, errno,
					    "input %s", opts->files[i]);
	rc = run_make_id(&r);
	if (rc < 0)
		return rc;
	run_fix_kernelspec(nb);
	text = json_dumps(nb, JSON_INDENT(1));
	if (!text)
		return nbrun__err(ctx, NBRUN_ENOMEM, "out of memory");
	if (strlen(text) > r.lim.max_notebook_bytes) {
		rc = nbrun__err(ctx, NBRUN_EINVAL, "the notebook is larger than %llu bytes",
				(unsigned long long)r.lim.max_notebook_bytes);
		goto out;
	}
	rc = run_open_out_dir(&r);
	if (rc < 0)
		goto out;
	rc = nbrun__result_new(&r.result, r.id);
	if (rc < 0)
		goto out;

	rc = run_execute(&r, text, strlen(text));
	if (rc == 0 && run_cancelled(&r))
		rc = nbrun__err(ctx, NBRUN_ECANCELLED, "interrupted");
	run_cleanup(&r);
	if (rc < 0)
		goto out;
	run_finish_result(&r);
	rc = nbrun__result_write(ctx, r.result, r.out_fd);
	if (rc < 0)
		goto out;
	*out = r.result;
	r.result = NULL;
out:
	if (rc < 0 && r.out_fd >= 0 && r.result) {
		/* Leave a record of what happened next to whatever came back. */
		nbrun__result_set_status(r.result, NBRUN_STATUS_FAILED, nbrun_ctx_errmsg(ctx));
		run_finish_result(&r);
		nbrun__result_write(NULL, r.result, r.out_fd);
	}
	nbrun__docker_free(r.docker);
	nbrun_result_free(r.result);
	for (size_t i = 0; i < r.n_inputs; i++)
		free(r.inputs[i].name);
	free(r.inputs);
	free(r.image);
	free(r.out_dir);
	if (r.out_fd >= 0)
		close(r.out_fd);
	free(text);
	return rc;
}

NBRUN_EXPORT int nbrun_run_code(struct nbrun_result **out, struct nbrun_ctx *ctx, const char *code,
				const struct nbrun_run_options *opts)
{
	json_t *nb = NULL;
	int rc;

	*out = NULL;
	if (!code)
		return nbrun__err(ctx, NBRUN_EINVAL, "no code given");
	rc = nbrun__notebook_from_code(&nb, ctx, code);
	if (rc < 0)
		return rc;
	rc = run_notebook_json(out, ctx, nb, opts);
	json_decref(nb);
	return rc;
}

NBRUN_EXPORT int nbrun_run_notebook(struct nbrun_result **out, struct nbrun_ctx *ctx,
				    const char *notebook, size_t len,
				    const struct nbrun_run_options *opts)
{
	json_t *nb = NULL;
	int rc;

	*out = NULL;
	rc = nbrun__notebook_loadb(&nb, ctx, notebook, len, NBRUN_DEFAULT_MAX_NOTEBOOK_BYTES);
	if (rc < 0)
		return rc;
	rc = run_notebook_json(out, ctx, nb, opts);
	json_decref(nb);
	return rc;
}
